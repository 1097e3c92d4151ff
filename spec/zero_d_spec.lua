-- 0-d tensors behave as numbers: every arithmetic operation, comparison,
-- item(), elementwise method and number argument (constructors, kernel
-- specs) against the same computation with plain Lua numbers, and against
-- Lua arithmetic on the entries; what stays an error (a 0-d tensor where the
-- mathematics needs a matrix), and what must not change (`A * B` between
-- tensors of one or more dimensions is still the matrix product).
local lt = require "lazytensor"

-- Lua 5.2, 5.3 and 5.4 call __lt / __le for a number and a userdata; 5.1
-- and LuaJIT only when both sides are tensors (doc/API.md).
local mixed_order = not (type(jit) == "table" or _VERSION == "Lua 5.1")

-- The value of r, which must be a 0-d dense tensor.
local function scalar(r)
  assert.is_true(lt.is_tensor(r), "expected a 0-d tensor, got " .. type(r))
  assert.equal("dense", lt.type(r))
  assert.same({}, r:shape())
  return r:item()
end

-- |got - want| within rel (relative) of want, entry by entry.
local function near(want, got, rel)
  if type(want) == "table" then
    assert.equal(#want, #got)
    for i = 1, #want do near(want[i], got[i], rel) end
    return
  end
  local tol = rel * math.max(1, math.abs(want))
  assert.is_true(math.abs(want - got) <= tol,
                 ("want %.17g, got %.17g (tolerance %g)"):format(want, got, tol))
end

-- f(x) for every entry x of a nested table.
local function map(t, f)
  if type(t) ~= "table" then return f(t) end
  local out = {}
  for i, v in ipairs(t) do out[i] = map(v, f) end
  return out
end

-- The error of f(...), which must start with "lazytensor: <op>:" and hold
-- the plain text `text`.
local function fails(op, text, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  err = tostring(err)
  assert.truthy(err:find("^lazytensor: " .. op .. ": "), "not a lazytensor: " .. op .. " error: " .. err)
  assert.truthy(err:find(text, 1, true), ("expected %q in: %s"):format(text, err))
end

local A2 = {{2, -1, 0.5}, {1, 3, -4}}
local A1 = {1.5, -2, 0.25}
local A3 = {{{1, 2}, {3, 4}}, {{-1, 0.5}, {7, 9}}}

describe("0-d tensors", function()
  local a, b = 0.4, -1.7

  describe("with each other and with numbers", function()
    -- Each case: the Lua expression on numbers and the same expression
    -- whichever operands are 0-d tensors; rel 0 means bit for bit.
    local cases = {
      {"x + y", function(x, y) return x + y end, 0},
      {"x - y", function(x, y) return x - y end, 0},
      {"x * y", function(x, y) return x * y end, 0},
      {"x / y", function(x, y) return x / y end, 0},
      -- pow(x, 2) and x·x may differ in the last bit (5.4 squares)
      {"x ^ y", function(x, y) return x ^ y end, 4e-16},
      {"x ^ 2", function(x) return x ^ 2 end, 4e-16},
      {"2 ^ x", function(x) return 2 ^ x end, 4e-16},
      {"2 / x", function(x) return 2 / x end, 0},
      {"x / 2", function(x) return x / 2 end, 0},
      {"2 - x", function(x) return 2 - x end, 0},
      {"-x", function(x) return -x end, 0},
      {"3 * x * y - x / y", function(x, y) return 3 * x * y - x / y end, 0},
    }
    local functions = {
      {"lt.add", lt.add, function(x, y) return x + y end},
      {"lt.sub", lt.sub, function(x, y) return x - y end},
      {"lt.mul", lt.mul, function(x, y) return x * y end},
      {"lt.matmul", lt.matmul, function(x, y) return x * y end},
      {"lt.scale", lt.scale, function(x, y) return x * y end},
      {"lt.div", lt.div, function(x, y) return x / y end},
    }
    for _, c in ipairs(cases) do
      it(c[1] .. " is the number's value as a 0-d tensor", function()
        local want = c[2](a, b)
        local s, t = lt.tensor(a), lt.tensor(b)
        near(want, scalar(c[2](s, t)), c[3])
        near(want, scalar(c[2](s, b)), c[3])
        if c[1]:find("y") then near(want, scalar(c[2](a, t)), c[3]) end
        assert.equal(a, s:item()) -- operands unchanged
        assert.equal(b, t:item())
      end)
    end
    for _, f in ipairs(functions) do
      it(f[1] .. " with 0-d operands gives a 0-d tensor", function()
        local want = f[3](a, b)
        assert.equal(want, scalar(f[2](lt.tensor(a), lt.tensor(b))))
        assert.equal(want, scalar(f[2](lt.tensor(a), b)))
        assert.equal(want, scalar(f[2](a, lt.tensor(b))))
      end)
    end

    it("divides by zero as Lua does", function()
      assert.equal(1 / 0, scalar(lt.tensor(2) / 0))
      assert.equal(-1 / 0, scalar(-2 / lt.tensor(0)))
      local nan = scalar(lt.tensor(0) / lt.tensor(0))
      assert.is_true(nan ~= nan)
    end)

    it("are ordered by value", function()
      local s, t, u = lt.tensor(a), lt.tensor(b), lt.tensor(a)
      assert.is_true(t < s)
      assert.is_false(s < t)
      assert.is_false(s < u)
      assert.is_true(s <= u)
      assert.is_true(t <= s)
      assert.is_false(s <= t)
      assert.is_true(s > t)
      assert.is_true(s >= u)
      if mixed_order then
        assert.is_true(s < 1)
        assert.is_false(s < 0.4)
        assert.is_true(s <= 0.4)
        assert.is_true(-2 < t)
        assert.is_false(0.5 <= s)
        assert.is_true(s > -1)
        assert.is_true(s >= 0.4)
      else
        -- the documented limit: Lua itself refuses before any metamethod
        assert.is_false(pcall(function() return s < 1 end))
      end
    end)

    it("== compares two tensors' values; a number is never equal to a tensor", function()
      assert.is_true(lt.tensor(a) == lt.tensor(a))
      assert.is_false(lt.tensor(a) == lt.tensor(b))
      assert.is_false(lt.tensor(a) == a) -- Lua does not ask __eq: use item()
      assert.is_true(lt.tensor(a):item() == a)
    end)

    it("elementwise methods and reductions give the numbers' values", function()
      local s = lt.tensor(a)
      assert.equal(math.exp(a), scalar(s:exp()))
      assert.equal(math.log(a), scalar(s:log()))
      assert.equal(math.sqrt(a), scalar(s:sqrt()))
      assert.equal(a, scalar(lt.tensor(-a):abs()))
      near(a ^ 3, scalar(s:pow(3)), 4e-16)
      near(a ^ b, scalar(s:pow(lt.tensor(b))), 4e-16)
      assert.equal(a, s:sum())
      assert.equal(a, s:mean())
      assert.equal(a, s:max())
      assert.equal(a, s:min())
      assert.equal(a, s:norm())
      assert.equal(a * a, s:dot(s))
      assert.equal(-a, scalar(-s))
      assert.equal(-a, scalar(lt.neg(s)))
      assert.equal(a, s:totable())
    end)
  end)

  describe("item", function()
    it("is the number of a one-element tensor of any shape", function()
      assert.equal("number", type(lt.tensor(a):item()))
      assert.equal(a, lt.tensor(a):item())
      assert.equal(a, lt.item(lt.tensor(a)))
      assert.equal(3, lt.tensor{3}:item())
      assert.equal(-2, lt.tensor{{-2}}:item())
      assert.equal(5, lt.diag{5}:item()) -- a 1×1 operator
      assert.equal(7, lt.tensor{{1, 2}, {3, 7}}[2]:narrow(1, 2, 1):item()) -- a view
      assert.equal(a, lt.item(a)) -- a number is its own item
    end)

    it("refuses anything else", function()
      fails("item", "expected a tensor of one element, got a dense tensor of size 2x3 (6 elements)",
            function() return lt.tensor(A2):item() end)
      fails("item", "of one element", function() return lt.zeros(0):item() end)
      fails("item", "of one element", function() return lt.diag{1, 2}:item() end)
      fails("item", "expected a tensor", lt.item, "x")
    end)
  end)

  describe("with dense tensors", function()
    -- x stands for the scalar (a number or a 0-d tensor), A for the
    -- tensor; ref computes one entry a of A with Lua arithmetic.
    local cases = {
      {"x * A", function(x, A) return x * A end, function(v) return a * v end},
      {"A * x", function(x, A) return A * x end, function(v) return v * a end},
      {"A / x", function(x, A) return A / x end, function(v) return v / a end, 2.3e-16},
      {"x + A", function(x, A) return x + A end, function(v) return a + v end},
      {"A + x", function(x, A) return A + x end, function(v) return v + a end},
      {"A - x", function(x, A) return A - x end, function(v) return v - a end},
      {"x - A", function(x, A) return x - A end, function(v) return a - v end},
      {"A ^ x", function(x, A) return A ^ x end, function(v) return math.abs(v) ^ a end, 4e-16, true},
      {"x ^ A", function(x, A) return x ^ A end, function(v) return a ^ v end, 4e-16},
      {"lt.mul(x, A)", function(x, A) return lt.mul(x, A) end, function(v) return a * v end},
      {"lt.mul(A, x)", function(x, A) return lt.mul(A, x) end, function(v) return v * a end},
      {"lt.scale(A, x)", function(x, A) return lt.scale(A, x) end, function(v) return v * a end},
      {"lt.scale(x, A)", function(x, A) return lt.scale(x, A) end, function(v) return v * a end},
      {"lt.div(A, x)", function(x, A) return lt.div(A, x) end, function(v) return v / a end, 2.3e-16},
      {"lt.matmul(x, A)", function(x, A) return lt.matmul(x, A) end, function(v) return a * v end},
      {"lt.matmul(A, x)", function(x, A) return lt.matmul(A, x) end, function(v) return v * a end},
      {"lt.add(A, x)", function(x, A) return lt.add(A, x) end, function(v) return v + a end},
      {"lt.sub(x, A)", function(x, A) return lt.sub(x, A) end, function(v) return a - v end},
    }
    for _, c in ipairs(cases) do
      it(c[1] .. " as with the number, for 1-d, 2-d and 3-d A", function()
        for _, entries in ipairs{A1, A2, A3} do
          -- A ^ x: a fractional power of the absolute values (real results)
          local A = lt.tensor(c[5] and map(entries, math.abs) or entries)
          local with_tensor, with_number = c[2](lt.tensor(a), A), c[2](a, A)
          assert.equal("dense", lt.type(with_tensor))
          assert.same(A:shape(), with_tensor:shape())
          assert.same(with_number:totable(), with_tensor:totable())
          near(map(entries, c[3]), with_tensor:totable(), c[4] or 0)
        end
      end)
    end

    it("sizes, fills and writes take 0-d tensors as numbers", function()
      local s = lt.tensor(a)
      assert.same(lt.full({2, 3}, a):totable(), lt.full({2, 3}, s):totable())
      assert.same({{a, a}, {a, a}}, lt.full({2, 2}, s):totable())
      assert.same({a, a, a}, lt.zeros(3):fill(s):totable())
      assert.same({0, a}, lt.zeros(2):set(2, s):totable())
      local v = lt.zeros(2)
      v[1] = s
      assert.same({a, 0}, v:totable())
      local M = lt.tensor{{2, -1}, {1, 3}}
      assert.same({{2 + a, -1}, {1, 3 + a}}, M:add_diag(s):totable())
      assert.same(M:add_diag(a):totable(), M:add_diag(s):totable())
      assert.same(M:add_jitter(a):totable(), M:add_jitter(s):totable())
      assert.same(lt.call("scale", M, a):totable(), lt.call("scale", M, s):totable())
    end)
  end)

  describe("with lazy operators, as the number", function()
    local x = lt.tensor{{0.1, 0.2}, {0.5, 0.3}, {0.9, 1.0}}
    local ops = {
      diag = lt.diag{1, 2, 3},
      identity = lt.identity(3, 2),
      kernel = lt.kernel(x, {kind = "rbf", lengthscale = 0.7}),
      lowrank = lt.lowrank(lt.tensor{{1, 0}, {2, 1}, {0, 3}}),
      toeplitz = lt.toeplitz{3, 1, 0.5},
      sum = lt.kernel(x, {kind = "matern32", lengthscale = 0.5}) + lt.diag{1, 1, 1},
    }
    local cases = {
      {"x * A", function(s, A) return s * A end, function(v) return a * v end},
      {"A * x", function(s, A) return A * s end, function(v) return v * a end},
      {"A / x", function(s, A) return A / s end, function(v) return v / a end, 4.5e-16},
      {"x + A", function(s, A) return s + A end, function(v) return a + v end},
      {"A + x", function(s, A) return A + s end, function(v) return v + a end},
      {"A - x", function(s, A) return A - s end, function(v) return v - a end},
      {"x - A", function(s, A) return s - A end, function(v) return a - v end},
      {"lt.mul(x, A)", function(s, A) return lt.mul(s, A) end, function(v) return a * v end},
      {"lt.scale(A, x)", function(s, A) return lt.scale(A, s) end, function(v) return v * a end},
      {"lt.div(A, x)", function(s, A) return lt.div(A, s) end, function(v) return v / a end, 4.5e-16},
      {"lt.matmul(x, A)", function(s, A) return lt.matmul(s, A) end, function(v) return a * v end},
    }
    for _, c in ipairs(cases) do
      it(c[1] .. " keeps the number's type and values", function()
        for name, A in pairs(ops) do
          local with_tensor, with_number = c[2](lt.tensor(a), A), c[2](a, A)
          assert.is_true(lt.is_lazy(with_tensor), name)
          assert.equal(lt.type(with_number), lt.type(with_tensor), name)
          assert.same(with_number:dense():totable(), with_tensor:dense():totable())
          near(map(A:dense():totable(), c[3]), with_tensor:dense():totable(), c[4] or 1e-15)
        end
      end)
    end

    it("add_diag, add_jitter and scale of a kernel", function()
      local K, s = ops.kernel, lt.tensor(a)
      for _, pair in ipairs{{K:add_diag(s), K:add_diag(a)}, {K:add_jitter(s), K:add_jitter(a)},
                            {lt.scale(K, s), lt.scale(K, a)}} do
        assert.equal(lt.type(pair[2]), lt.type(pair[1]))
        assert.same(pair[2]:dense():totable(), pair[1]:dense():totable())
      end
    end)

    it("lt.identity(n, c) with a 0-d c is c·I, and its params hold the number", function()
      local I = lt.identity(3, lt.tensor(a))
      assert.equal("identity", lt.type(I))
      assert.same(lt.identity(3, a):dense():totable(), I:dense():totable())
      assert.equal("number", type(I:params().scale))
      assert.equal(a, I:params().scale)
      local g = I:bilinear_derivative(lt.ones(3), lt.ones(3))
      assert.equal("number", type(g[I].scale))
      assert.equal(3, g[I].scale)
    end)
  end)

  describe("in lt.kernel's spec", function()
    local x = lt.tensor{{0.1, 0.2}, {0.5, 0.3}, {0.9, 1.0}, {-0.4, 0.6}}
    local y = lt.tensor{{0.2, 0.1}, {1.1, -0.3}}
    local specs = {
      {kind = "rbf", lengthscale = 0.7, variance = 1.3},
      {kind = "matern12", lengthscale = 0.7, variance = 1.3},
      {kind = "matern32", lengthscale = 0.7, variance = 1.3},
      {kind = "matern52", lengthscale = 0.7, variance = 1.3},
      {kind = "periodic", lengthscale = 0.7, variance = 1.3, period = 1.5},
      {kind = "rq", lengthscale = 0.7, variance = 1.3, alpha = 2.5},
      {kind = "linear", variance = 1.3, offset = 0.5},
      {kind = "polynomial", variance = 1.3, offset = 0.5, degree = 3},
      {kind = "cosine", variance = 1.3, period = 1.5},
      {kind = "rbf", lengthscale = {0.7, 0.3}, variance = 1.3},
      {kind = "periodic", lengthscale = {0.7, 0.3}, period = 2},
      {kind = "rbf", lengthscale = 0.7, variance = 1.3, derivative = "lengthscale"},
      {kind = "spectral_mixture", num_mixtures = 2, weights = {0.5, 1.5},
       means = {{0.1, 0.2}, {0.3, 0.4}}, scales = {{1, 2}, {0.5, 0.25}}},
    }
    -- The spec with numbers as 0-d tensors and lists as tensors.
    local function as_tensors(spec)
      local out = {}
      for k, v in pairs(spec) do
        if type(v) == "number" and k ~= "num_mixtures" then out[k] = lt.tensor(v)
        elseif type(v) == "table" then out[k] = lt.tensor(v)
        else out[k] = v end
      end
      return out
    end
    local function same_params(want, got)
      for k, v in pairs(want) do
        if lt.is_tensor(v) then
          assert.is_true(lt.is_tensor(got[k]), k)
          assert.same(v:totable(), got[k]:totable())
        else
          assert.equal(type(v), type(got[k]), k)
          assert.equal(v, got[k], k)
        end
      end
      for k in pairs(got) do assert.is_not_nil(want[k], k) end
    end
    for _, spec in ipairs(specs) do
      local name = spec.kind .. (spec.derivative and " derivative" or "")
                   .. (type(spec.lengthscale) == "table" and " ARD" or "")
      it(name .. ": tensors give the numbers' operator and params", function()
        local Kn, Kt = lt.kernel(x, spec), lt.kernel(x, as_tensors(spec))
        assert.same(Kn:dense():totable(), Kt:dense():totable())
        same_params(Kn:params(), Kt:params())
        local Cn, Ct = lt.kernel(x, y, spec), lt.kernel(x, y, as_tensors(spec))
        assert.same(Cn:dense():totable(), Ct:dense():totable())
        if not spec.derivative then
          local gn = Kn:bilinear_derivative(lt.ones(4), lt.ones(4))[Kn]
          local gt = Kt:bilinear_derivative(lt.ones(4), lt.ones(4))[Kt]
          same_params(gn, gt) -- numbers for 0-d inputs, tensors for lists
        end
      end)
    end

    it("refuses tensors of the wrong shape", function()
      fails("kernel", "spec.variance must be a number, got a dense tensor of size 1",
            lt.kernel, x, {kind = "rbf", lengthscale = 1, variance = lt.tensor{1}})
      fails("kernel", "spec.period must be a number, got a diag operator of size 1x1",
            lt.kernel, x, {kind = "periodic", lengthscale = 1, period = lt.diag{1}})
      fails("kernel", "spec.lengthscale must be a number or a 1-d list, got 2 dimensions",
            lt.kernel, x, {kind = "rbf", lengthscale = lt.tensor{{1, 2}}})
      fails("kernel", "lengthscale must be a positive number", lt.kernel, x,
            {kind = "rbf", lengthscale = lt.tensor(-1)})
    end)
  end)

  it("a Lua rule may return a 0-d tensor where the operation returns a number", function()
    local active = true
    -- gated: rules stay registered in the state for later specs
    lt.implements("trace", "operator", function(A)
      if not active then return lt.NotImplemented end
      return A:diagonal():sum() * lt.tensor(2) -- a 0-d tensor
    end)
    local ok, err = pcall(function()
      local op = lt.operator{shape = {3, 3}, matmul = function(X) return X * 7 end}
      assert.equal(42, op:trace()) -- a number, as from any rule
      assert.equal("number", type(op:trace()))
    end)
    active = false
    assert(ok, err)
  end)

  describe("errors", function()
    local M = lt.tensor{{2, 1}, {1, 3}}
    local s = lt.tensor(a)
    it("a 0-d tensor where the operation needs a matrix", function()
      fails("solve", "right-hand side does not conform (2x2 and a scalar)", lt.solve, M, s)
      fails("solve", "expected a square matrix, got a scalar", lt.solve, s, M)
      fails("logdet", "expected a square matrix", lt.logdet, s)
      fails("cholesky", "expected a square matrix", lt.cholesky, s)
      fails("inv_quad", "does not conform", lt.inv_quad, M, s)
      fails("kron", "must be a matrix", lt.kron, s, M)
      fails("transpose", "expected a matrix, got 0-d", function() return s:t() end)
      fails("diag", "expected a 1-d dense tensor", lt.diag, s)
      fails("index", "cannot index a 0-d tensor", function() return s[1] end)
    end)

    it("a tensor where a number is needed", function()
      fails("div", "can only divide by a number or a 0-d tensor (use cdiv for element-wise), "
                   .. "got a dense tensor of size 2x2", function() return M / M end)
      fails("div", "got a dense tensor of size 2x2", function() return 2 / M end)
      fails("div", "got a diag operator of size 2x2", function() return M / lt.diag{1, 2} end)
      fails("scale", "the factor must be a number, got a dense tensor of size 2x2", lt.scale, M, M)
      fails("full", "the fill value must be a number, got a dense tensor of size 2", lt.full, {2},
            lt.tensor{1, 2})
      fails("identity", "the scale must be a number, got a dense tensor of size 1", lt.identity, 2,
            lt.tensor{1})
      fails("add_jitter", "the jitter must be a number, got a dense tensor of size 2x2",
            function() return M:add_jitter(M) end)
    end)

    it("powers and comparisons", function()
      fails("pow", "`^` takes a number or a 0-d tensor on one side (t:pow(u) is element-wise), "
                   .. "got a dense tensor of size 2x2 and a dense tensor of size 2x2",
            function() return M ^ M end)
      fails("pow", "element-wise powers need dense tensors, got a diag operator of size 2x2",
            function() return lt.diag{1, 2} ^ 2 end)
      fails("pow", "got a diag operator of size 2x2", function() return s ^ lt.diag{1, 2} end)
      fails("compare", "only numbers and 0-d tensors are ordered, got a 0-d dense tensor and a "
                       .. "dense tensor of size 2x2", function() return s < M end)
      fails("compare", "got a dense tensor of size 2x2 and a 0-d dense tensor",
            function() return M <= s end)
      if mixed_order then
        fails("compare", "got a dense tensor of size 2x2 and number", function() return M < 1 end)
      end
    end)

    it("a freed 0-d tensor", function()
      local t = lt.tensor(1)
      t:free()
      fails("matmul", "argument #1: the tensor was freed", function() return t * M end)
      fails("matmul", "argument #2: the tensor was freed", function() return M * t end)
      fails("div", "got a freed tensor", function() return M / t end)
      fails("identity", "the scale must be a number, got a freed tensor", lt.identity, 2, t)
    end)
  end)

  describe("leave tensors of one or more dimensions as they were", function()
    it("A * B is the matrix product, v * v the dot product", function()
      local M, N = lt.tensor{{1, 2}, {3, 4}}, lt.tensor{{0, 1}, {1, -1}}
      local v = lt.tensor{1, 2}
      assert.same({{2, -1}, {4, -1}}, (M * N):totable())
      assert.same({5, 11}, (M * v):totable())
      assert.equal(5, v * v) -- a number, as before
      assert.equal(5, lt.matmul(v, v))
      assert.same({{1, 2}, {6, 8}}, (lt.diag{1, 2} * M):dense():totable())
      assert.same({{2, 4}, {6, 8}}, (2 * M):totable())
      assert.same({{0.5, 1}, {1.5, 2}}, (M / 2):totable())
      assert.same({{1, 4}, {9, 16}}, (M ^ 2):totable())
      fails("matmul", "inner dimensions differ", function() return lt.tensor{1, 2, 3} * v end)
    end)
  end)
end)
