-- lt.grad and lt.gradcheck: the API (params in, gradients out), folding
-- rules, leaves reached along several paths, writes, the stochastic
-- backward above max_cholesky_size, agreement with the tape-free forms, and
-- bad input.
local lt = require "lazytensor"
local vjp = require "lazytensor.autograd.vjp"

local function close(a, b, tol, what)
  local scale = math.max(1, math.abs(b))
  assert(math.abs(a - b) <= (tol or 1e-8) * scale,
    ("%s: got %.12g, want %.12g"):format(what or "value", a, b))
end

local function raises(pattern, f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error matching " .. pattern)
  assert(tostring(err):find(pattern, 1, true), "error was: " .. tostring(err))
  assert(tostring(err):find("^lazytensor:"), "error must start with lazytensor: " .. tostring(err))
end

local v0 = lt.tensor{1, -2, 0.5}

describe("lt.grad", function()
  it("returns gradients shaped as params: numbers, tensors, nested tables", function()
    local df = lt.grad(function(p) return (p.x * p.x):sum() + p.inner.w:dot(p.x) end)
    local g, value = df({x = lt.tensor{1, 2, 3}, inner = {w = lt.tensor{0.5, 0, -1}}})
    assert.are.same({2.5, 4, 5}, g.x:totable())
    assert.are.same({1, 2, 3}, g.inner.w:totable())
    close(value, 14 + 0.5 - 3)
    -- a number parameter gets a number; a constant result gives zeros
    local g2, v2 = lt.grad(function(p) return p end)(3)
    assert.are.equal(1, g2)
    assert.are.equal(3, v2)
    local g3 = lt.grad(function() return 5 end)({a = 3, b = lt.ones(2)})
    assert.are.equal(0, g3.a)
    assert.are.same({0, 0}, g3.b:totable())
  end)

  it("hands on f's other results and extra arguments", function()
    local df = lt.grad(function(p, k) return p:sum() * k, "extra", k end)
    local g, value, e, k = df(lt.tensor{1, 2}, 3)
    assert.are.same({3, 3}, g:totable())
    assert.are.equal(9, value)
    assert.are.equal("extra", e)
    assert.are.equal(3, k)
  end)

  it("gives a folded 2·K + K its whole gradient (the issue's example)", function()
    local x = lt.tensor{{0.1}, {0.5}, {0.9}}
    local function f(p)
      local K = lt.kernel(p.x, {kind = "rbf", lengthscale = 0.7})
      local S = 2 * K + K
      return lt.ones(3):dot(S * lt.ones(3))
    end
    local g = lt.grad(f)({x = x})
    -- 3·K: the gradient is three times that of K alone
    local g1 = lt.grad(function(p)
      local K = lt.kernel(p.x, {kind = "rbf", lengthscale = 0.7})
      return lt.ones(3):dot(K * lt.ones(3))
    end)({x = x})
    for i = 1, 3 do close(g.x:get(i, 1), 3 * g1.x:get(i, 1), 1e-12, "x" .. i) end
    assert(lt.gradcheck(f, {x = x}))
  end)

  it("follows transposes, negations and differences of structured operators", function()
    local U = lt.tensor{{1, 0.5}, {-0.3, 2}, {0.7, 0.1}}
    local c = lt.tensor{2, 0.5, 0.25}
    local W = lt.tensor{{0.3, -0.1, 0.7}, {0.2, 0.5, -0.4}, {1.1, 0.2, 0.3}}
    local function f(p)
      local LR = lt.lowrank(p.U)
      local T = lt.toeplitz(p.c)
      local S = (p.A - LR):t() - T + (-LR) + lt.kron(lt.eye(1), T):t()
      return lt.cmul(S:dense(), W):sum()
    end
    assert(lt.gradcheck(f, {U = U, c = c, A = W + lt.eye(3)}))
  end)

  it("checks against central differences through every rule, and fails on a wrong VJP", function()
    local function f(p) return (lt.diag(p.a) + lt.diag(p.b)):logdet() end
    local params = {a = lt.tensor{1, 2, 3}, b = lt.tensor{0.5, 0.5, 0.5}}
    local ok, err = lt.gradcheck(f, params)
    assert(ok, "gradcheck error " .. err)
    -- drop b's share of add: gradcheck must notice
    local add = vjp.add
    vjp.add = function(r, g) r:give(1, g[1]) end
    local ok2 = lt.gradcheck(f, params)
    vjp.add = add
    assert.is_false(ok2)
  end)

  it("follows lt.tensor{...} of followed numbers (vectors and matrices)", function()
    local x2 = lt.tensor{{0.1, 0.2}, {0.5, -0.3}, {0.9, 0.1}}
    assert(lt.gradcheck(function(p)
      local v = lt.tensor{p.a, p.b, 2}
      local M = lt.tensor{{p.a, 0}, {p.b, p.a}}
      return (v * v):sum() * p.a + (M * M):sum()
        + lt.kernel(x2, {kind = "rbf", lengthscale = lt.tensor{p.a, p.b}}):logdet()
    end, {a = 0.7, b = 1.3}))
  end)

  it("follows writes into a fresh tensor", function()
    local function f(p)
      local m = lt.zeros(3)
      m[1] = p.v[1]
      m[2] = p.v[3]:exp()
      local M = lt.zeros(2, 2)
      M:set(1, 2, p.v[2])
      M:set(2, 1, p.v[1])
      return m:dot(v0) + (M * M):sum()
    end
    assert(lt.gradcheck(f, {v = v0}))
  end)

  it("follows a write into a product's result (its backward reads the operands only)", function()
    local A = lt.tensor{{1, 2}, {0.5, -1}}
    local v = lt.tensor{0.3, -0.7, 1.1}
    local function f(p)
      local Y = lt.tensor{{p.v[1], p.v[2]}, {p.v[3], 1}} * A
      Y:set(1, 2, p.v[1] * 3)
      Y[2] = p.v:narrow(1, 1, 2)
      return (Y * Y):sum()
    end
    assert(lt.gradcheck(f, {v = v}))
    -- the same matrix built without writes: only Y's (1, 1) entry is left
    -- of the product
    local expect = lt.grad(function(p)
      local Y = lt.tensor{{p.v[1], p.v[2]}, {p.v[3], 1}} * A
      local W = lt.tensor{{Y:get(1, 1), p.v[1] * 3}, {p.v[1], p.v[2]}}
      return (W * W):sum()
    end)({v = v})
    assert.is_true((lt.grad(f)({v = v}).v - expect.v):abs():max() < 1e-12)
  end)

  it("refuses writes it could not follow", function()
    raises("used by an earlier followed call", lt.grad(function(p)
      local m = p.v:clone()
      local s = m:exp():sum()
      m[1] = 2
      return s
    end), {v = v0})
    raises("a write into a view", lt.grad(function(p)
      local m = lt.zeros(2, 2)
      local row = m[1]
      row[1] = p.v[1]
      return m:sum()
    end), {v = v0})
  end)

  it("refuses a write into an operand of a metamethod's record whose backward reads it", function()
    local A = lt.tensor{{1, 2}, {0.5, -1}}
    -- products (C-recorded metamethods) read their operands' values
    raises("used by an earlier followed call", lt.grad(function(p)
      local m = p.v:clone()
      local s = (2 * m):sum()
      m[1] = 2
      return s
    end), {v = v0})
    raises("used by an earlier followed call", lt.grad(function(p)
      local M = lt.tensor{{p.v[1], p.v[2]}, {p.v[3], 1}}
      local s = (M * A):sum()
      M:set(1, 1, 0)
      return s
    end), {v = v0})
    -- a number result (v · v) is a followed 0-d tensor, its operands read
    raises("used by an earlier followed call", lt.grad(function(p)
      local m = p.v:clone()
      local s = m * m
      m:fill(0)
      return s
    end), {v = v0})
    -- a sum's backward reads shapes only: its operand may be written after
    -- it (2 from m + m; 1 from m:sum(), whose entry 1 is then a constant)
    local g = lt.grad(function(p)
      local m = p.v:clone()
      local s = (m + m):sum()
      m[1] = 7
      return s + m:sum()
    end)({v = v0})
    assert.are.same({2, 3, 3}, g.v:totable())
  end)

  it("uses the stochastic estimator above max_cholesky_size", function()
    local n = 12
    local x = lt.linspace(0, 3, n):reshape(n, 1)
    local y = lt.linspace(-1, 1, n)
    local function f(p)
      local K = lt.kernel(p.x, {kind = "rbf", lengthscale = 0.9}):add_diag(0.3)
      local q, ld = K:inv_quad_logdet(y)
      return q + ld
    end
    local exact = lt.grad(f)({x = x})
    lt.manual_seed(11)
    local approx = lt.with_settings({max_cholesky_size = 4, num_trace_samples = 40000,
      cg_tolerance = 1e-10}, function() return lt.grad(f)({x = x}) end)
    local err, size = 0, 0
    for i = 1, n do
      err = err + (approx.x:get(i, 1) - exact.x:get(i, 1)) ^ 2
      size = size + exact.x:get(i, 1) ^ 2
    end
    -- Hutchinson's error with t probes is O(1/√t): about 0.05 here
    assert(math.sqrt(err / size) < 0.1, "relative error " .. math.sqrt(err / size))
  end)

  it("agrees with inv_quad_logdet{grad = true} and bilinear_derivative on a held leaf", function()
    local x = lt.tensor{{0.1}, {0.6}, {1.3}, {1.5}}
    local y = lt.tensor{0.5, -0.2, 0.3, 1}
    local K = lt.kernel(x, {kind = "matern32", lengthscale = 0.8})
    local Ky = K:add_diag(0.2)
    local _, _, old = Ky:inv_quad_logdet(y, {grad = true})
    local g = lt.grad(function(p)
      local q, ld = lt.kernel(p.x, {kind = "matern32", lengthscale = 0.8}):add_diag(0.2)
        :inv_quad_logdet(p.y)
      return q + ld
    end)({x = x, y = y})
    for i = 1, 4 do
      close(g.x:get(i, 1), old[K].x1:get(i, 1), 1e-9, "x" .. i)
      close(g.y[i], old[y].values[i], 1e-9, "y" .. i)
    end
    local L, R = lt.tensor{1, 2, 3, 4}, lt.tensor{0.5, -1, 0, 2}
    local bd = K:bilinear_derivative(L, R)
    local gb = lt.grad(function(p)
      return L:dot(lt.kernel(p.x, {kind = "matern32", lengthscale = 0.8}) * R)
    end)({x = x})
    for i = 1, 4 do close(gb.x:get(i, 1), bd[K].x1:get(i, 1), 1e-10, "bd x" .. i) end
  end)

  it("differentiates batched operators member by member", function()
    local V = lt.tensor{{1, 2, 3}, {4, 5, 6}}
    -- each member's logdet has gradient 1/v; a broadcast σ² sums over members
    local g = lt.grad(function(p) return lt.diag(p.V):add_diag(p.s):logdet():sum() end)(
      {V = V, s = 0.5})
    for i = 1, 2 do
      for j = 1, 3 do close(g.V:get(i, j), 1 / (V:get(i, j) + 0.5), 1e-12) end
    end
    local want = 0
    for i = 1, 2 do for j = 1, 3 do want = want + 1 / (V:get(i, j) + 0.5) end end
    close(g.s, want, 1e-12, "broadcast share")
  end)

  it("makes the tape-free forms refuse a partial key (the issue's example)", function()
    local K = lt.kernel(lt.tensor{{0.1}, {0.5}, {0.9}}, {kind = "rbf", lengthscale = 0.7})
    raises("bilinear_derivative: a structure rule folded a kernel operator", function()
      return (2 * K + K):bilinear_derivative(lt.ones(3), lt.ones(3))
    end)
    raises("inv_quad_logdet: a structure rule folded a kernel operator", function()
      return (2 * K + K:add_diag(0.5)):inv_quad_logdet(lt.tensor{1, 2, 3}, {grad = true})
    end)
    -- a fold whose operand is not also a key is whole under the new leaf
    local K2 = 2 * K
    local g = K2:bilinear_derivative(lt.ones(3), lt.ones(3))
    local want = lt.grad(function(p)
      return lt.ones(3):dot(lt.kernel(lt.tensor{{0.1}, {0.5}, {0.9}}, {kind = "rbf",
        lengthscale = 0.7, variance = p}) * lt.ones(3))
    end)(2.0)
    close(g[K2].variance, want, 1e-12, "2·K's variance")
    -- lt.grad gives the whole gradient where the tape-free form refuses
    local whole = lt.grad(function(p)
      local Kp = lt.kernel(lt.tensor{{0.1}, {0.5}, {0.9}}, {kind = "rbf", lengthscale = 0.7,
        variance = p})
      return lt.ones(3):dot((2 * Kp + Kp) * lt.ones(3))
    end)(1.0)
    close(whole, 22.315090524944, 1e-9, "(2K + K)'s variance gradient")
  end)

  it("differentiates lt.mvn: log_prob, entropy, kl, reparameterised rsample", function()
    local X = lt.tensor{{1, 0.2, 0.1}, {0.3, 1.2, -0.2}, {0.1, 0.4, 0.9}}
    local function cov(p) return p.X * p.X:t() + lt.eye(3) end
    assert(lt.gradcheck(function(p) return lt.mvn(p.m, cov(p)):log_prob(v0) end, {X = X, m = v0}))
    assert(lt.gradcheck(function(p) return lt.mvn(p.m, cov(p)):entropy() end, {X = X, m = v0}))
    assert(lt.gradcheck(function(p)
      return lt.kl(lt.mvn(p.m, cov(p)), lt.mvn(v0, lt.diag(p.m:exp())))
    end, {X = X, m = v0}))
    assert(lt.gradcheck(function(p)
      lt.manual_seed(5)
      return lt.mvn(p.m, cov(p)):rsample(4):sum()
    end, {X = X, m = v0}))
  end)

  it("differentiates the special functions, far into their tails", function()
    local x = lt.tensor{-30, -3, -0.5, 0.2, 1.5}
    for _, f in ipairs{"erf", "erfc", "normal_cdf", "normal_pdf", "normal_log_cdf",
      "normal_log_pdf"} do
      local ok, err = lt.gradcheck(function(p)
        return lt[f](p.x):dot(lt.tensor{1, 2, 3, 4, 5}) + p.s[f](p.s)
      end, {x = x, s = 0.3})
      assert(ok, f .. ": " .. err)
    end
    -- d/dx log Φ(x) at x = −30: φ/Φ ≈ −x (Mills' ratio), no cancellation
    local g = lt.grad(function(p) return lt.normal_log_cdf(p) end)(-30)
    close(g, 30.0333, 1e-5, "log Φ'(−30)")
  end)

  it("differentiates a 1-d tensor's reductions along its only dimension", function()
    local v = lt.tensor{1, 5, 3}
    for _, name in ipairs{"sum", "mean", "max", "min", "norm"} do
      local ok, err = lt.gradcheck(function(t) return t[name](t, 1) * 2 end, v)
      assert(ok, name .. ": " .. tostring(err))
    end
    local g = lt.grad(function(t) return t:max(1) end)(v)
    assert.same({0, 1, 0}, {g[1], g[2], g[3]})
  end)

  it("counts a NaN difference as a failure", function()
    local ok = lt.gradcheck(function(p) return (p - 1):log() end, 0.5)
    assert.is_false(ok)
  end)

  it("leaves the library as it was, also after an error in f", function()
    local add, mt_add = lt.add, lt._meta.__add
    raises("boom", lt.grad(function() error("lazytensor: boom", 0) end), {})
    assert.are.equal(add, lt.add)
    assert.are.equal(mt_add, lt._meta.__add)
    lt.grad(function(p) return p:sum() end)(lt.ones(2))
    assert.are.equal(add, lt.add)
  end)

  it("refuses bad input with clear errors", function()
    raises("one-element tensor first, got a dense of shape 3", lt.grad(function(p) return p.v end),
      {v = v0})
    raises("got nothing", lt.grad(function() end), {v = v0})
    raises("params.v is a string", lt.grad(function(p) return p.v end), {v = "x"})
    raises("params.v is a diag operator", lt.grad(function(p) return p.v end), {v = lt.diag{1}})
    raises("lt.grad inside lt.grad is not supported", lt.grad(function(p)
      return lt.grad(function(q) return q:sum() end)(p.v)
    end), {v = v0})
    raises("f yielded", lt.grad(function(p)
      coroutine.yield(1)
      return p.v:sum()
    end), {v = v0})
    raises("expected a function", lt.grad, 3)
    -- a constructor argument no gradient reaches is an error, not a silent zero
    raises("lt.interp: its result's derivative with respect to argument 1", lt.grad(function(p)
      return (lt.interp(p.x, {{0, 1, 9}}) * lt.linspace(0, 1, 9)):dot(lt.tensor{1, 2})
    end), {x = lt.tensor{{0.4}, {0.55}}})
    assert(lt.gradcheck(function(p) return (lt.constant(2, 2, p.s) * lt.ones(2)):sum() end,
      {s = 1.5}))
    raises("operators of more than one batch dimension are not followed", lt.grad(function(p)
      return lt.diag(lt.cmul(lt.ones(2, 2, 3), p.v)):logdet():sum()
    end), {v = v0})
  end)
end)
