-- lt.kernel's inner-product kinds, linear v·(xᵀy + c) and polynomial
-- v·(xᵀy + c)^p: conformance (every operation and bilinear_derivative)
-- against plain-Lua loops over the formulas, hand-checked entries, the
-- linear kind's low-rank product, the stored matrix, batches, the
-- matrix-free path, gradients at offset 0, bad input.
local lt = require "lazytensor"
local conformance = require "support.conformance"

-- The formula, written out independently of the C code.
local function k(s, x, y)
  local dot = s.offset or (s.kind == "polynomial" and 1 or 0)
  for q = 1, #x do dot = dot + x[q] * y[q] end
  local p = s.kind == "polynomial" and (s.degree or 2) or 1
  return (s.variance or 1) * dot ^ p
end

local function points_of(x)
  local P = {}
  for i, p in ipairs(x) do P[i] = type(p) == "table" and p or {p} end
  return P
end

local function reference(x1, x2, s)
  local A, B = points_of(x1), points_of(x2 or x1)
  local R = {}
  for i = 1, #A do
    R[i] = {}
    for j = 1, #B do R[i][j] = k(s, A[i], B[j]) end
  end
  return R
end

local function case(x1, x2, s, opts)
  local function make()
    if x2 then return lt.kernel(lt.tensor(x1), lt.tensor(x2), s) end
    return lt.kernel(lt.tensor(x1), s)
  end
  return make, function() return reference(x1, x2, s) end, opts
end

-- K(x, x) has rank ≤ d + 1 (linear) or the number of monomials of degree
-- ≤ p in d variables (polynomial): the square cases keep below those.
local X1 = {{0.3, -0.2}, {1.1, 0.3}, {-0.4, 1.2}, {0.9, -1.0}, {0.7, 0.8}, {-1.2, -0.6}}
local X2 = {{0.2, -0.1}, {1.3, 0.8}, {-1.0, 0.4}, {0.5, 1.5}}
local X3 = {{0.3, -0.2}, {1.1, 0.3}, {-0.4, 1.2}}
local T1, T2 = {0.1, 0.9, 1.7, 2.3, 3.1}, {-0.4, 0.6, 1.2}
local function random_points(n, d, seed, scale)
  local x = {}
  for i = 1, n do
    x[i] = {}
    for q = 1, d do
      seed = (seed * 1103515245 + 12345) % 2147483648
      x[i][q] = (seed / 2147483648 - 0.5) * (scale or 2)
    end
  end
  return x
end
-- 12 features: inner products through dgemm
local W1, W2 = random_points(6, 12, 7, 1), random_points(4, 12, 17, 1)

local linear = {kind = "linear", variance = 1.3, offset = 0.4}
for _, s in ipairs{linear} do
  local name = "kernel linear"
  conformance.check(name .. " K(x, x) 3x3, d = 2", case(X3, nil, s, {psd = true}))
  conformance.check(name .. " K(x1, x2) 6x4, d = 2", case(X1, X2, s))
  conformance.check(name .. " K(x2, x1) 4x6, d = 2", case(X2, X1, s))
  conformance.check(name .. " K(w1, w2) 6x4, d = 12", case(W1, W2, s))
  conformance.check(name .. " K(w1, w1) 6x6, d = 12", case(W1, nil, s, {psd = true}))
end
local polynomials = {
  {kind = "polynomial", degree = 2, variance = 0.7, offset = 1.2},
  {kind = "polynomial", degree = 3, variance = 1.1, offset = 0.5},
  {kind = "polynomial", degree = 1, variance = 2, offset = 0.3}, -- the linear kernel by tiles
}
for _, s in ipairs(polynomials) do
  local name = "kernel polynomial p = " .. s.degree
  if s.degree > 1 then
    conformance.check(name .. " K(x1, x1) 6x6, d = 2", case(X1, nil, s, {psd = true}))
    conformance.check(name .. " K(t1, t2) 5x3, 1-d", case(T1, T2, s))
  else
    conformance.check(name .. " K(x, x) 3x3, d = 2", case(X3, nil, s, {psd = true}))
  end
  conformance.check(name .. " K(x1, x2) 6x4, d = 2", case(X1, X2, s))
  conformance.check(name .. " K(x2, x1) 4x6, d = 2", case(X2, X1, s))
  conformance.check(name .. " K(w1, w1) 6x6, d = 12", case(W1, nil, s, {psd = true}))
  conformance.check(name .. " K(w1, w2) 6x4, d = 12", case(W1, W2, s))
end

local function rel(a, b) return math.abs(a - b) / math.max(1, math.abs(b)) end

describe("kernel linear and polynomial", function()
  it("give the hand-checked entries; offsets default to 0 (linear) and 1 (polynomial)", function()
    local x = lt.tensor{{1, 2}, {0.5, -1}}
    -- xᵀy = 1·0.5 + 2·(−1) = −1.5
    local L = lt.kernel(x, {kind = "linear", variance = 2, offset = 0.5})
    assert.equal(2 * (-1.5 + 0.5), L:get(1, 2)) -- −2
    assert.equal(2 * (5 + 0.5), L:get(1, 1)) -- 11
    assert.equal(-1.5, lt.kernel(x, {kind = "linear"}):get(1, 2))
    local P = lt.kernel(x, {kind = "polynomial", variance = 2, offset = 0.5, degree = 3})
    assert.equal(2 * (-1) ^ 3, P:get(1, 2)) -- −2
    assert.equal(2 * 5.5 ^ 3, P:get(1, 1)) -- 332.75
    -- ∂K/∂log v is K itself, PSD
    local Pv = lt.kernel(x, {kind = "polynomial", variance = 2, offset = 0.5, degree = 3,
                             derivative = "variance"})
    assert.same(P:dense():totable(), Pv:dense():totable())
    assert.is_true(Pv:is_psd())
    -- defaults: degree 2, offset 1: (−1.5 + 1)² = 0.25
    assert.equal(0.25, lt.kernel(x, {kind = "polynomial"}):get(1, 2))
    -- the diagonal depends on the points (not stationary): 1 + 5, 1 + 1.25
    local D = lt.kernel(x, {kind = "linear", offset = 1})
    assert.same({6, 2.25}, D:diagonal():totable())
    assert.equal(8.25, D:trace())
    assert.is_true(D:is_psd())
    local params = D:params()
    assert.same({"offset", "variance", "x1"},
                (function()
                  local names = {}
                  for name in pairs(params) do names[#names + 1] = name end
                  table.sort(names)
                  return names
                end)())
  end)

  it("multiply in several row blocks, symmetric and not, against plain-Lua sums", function()
    local n, m = 300, 150
    local x, y = random_points(n, 3, 5), random_points(m, 3, 9)
    local X = random_points(n, 2, 13)
    local specs = {linear, {kind = "linear", variance = 0.6}, polynomials[1], polynomials[2]}
    for _, s in ipairs(specs) do
      local got = (lt.kernel(lt.tensor(x), s) * lt.tensor(X)):totable()
      local got2 = (lt.kernel(lt.tensor(x), lt.tensor(y), s):t() * lt.tensor(X)):totable()
      for i = 1, n, 7 do
        local a, b = 0, 0
        for j = 1, n do
          local kij = k(s, x[i], x[j])
          a, b = a + kij * X[j][1], b + kij * X[j][2]
        end
        assert.is_true(rel(got[i][1], a) <= 1e-12 and rel(got[i][2], b) <= 1e-12,
          string.format("%s: row %d: %g %g, want %g %g", s.kind, i, got[i][1], got[i][2], a, b))
      end
      for j = 1, m, 37 do
        local a = 0
        for i = 1, n do a = a + k(s, x[i], y[j]) * X[i][1] end
        assert.is_true(rel(got2[j][1], a) <= 1e-12,
          string.format("%s: K(x, y)ᵀ row %d: %g, want %g", s.kind, j, got2[j][1], a))
      end
    end
  end)

  it("multiply a linear kernel of 10^6 points by its low rank (an n² product would take minutes)", function()
    local n = 1000000
    local x = lt.randn(n, 3)
    local v = lt.randn(n)
    local K = lt.kernel(x, {kind = "linear", variance = 0.5, offset = 2})
    local t0 = os.clock()
    local y = K * v
    local spent = os.clock() - t0
    -- 10^12 entries would take well over a minute; the low rank, milliseconds
    assert.is_true(spent < 5, "K·v took " .. spent .. " s of CPU")
    -- y = 0.5·X·(Xᵀv) + 0.5·2·Σv: Xᵀv and Σv by plain sums over the
    -- entries, then a few rows
    local s, sv = {0, 0, 0}, 0
    for j = 1, n do
      local vj = v:get(j)
      for q = 1, 3 do s[q] = s[q] + x:get(j, q) * vj end
      sv = sv + vj
    end
    for _, i in ipairs{1, 777, n} do
      local want = 0.5 * 2 * sv
      for q = 1, 3 do want = want + 0.5 * x:get(i, q) * s[q] end
      assert.is_true(rel(y[i], want) <= 1e-9, string.format("y[%d] = %.17g, want %.17g", i, y[i], want))
    end
  end)

  it("store a polynomial kernel's entries (kernel_cache_bytes) but never a linear one's", function()
    local saved = lt.settings.kernel_cache_bytes
    local x = lt.tensor(random_points(300, 2, 3))
    local B = lt.randn(300, 2)
    local function run(s, budget)
      lt.settings.kernel_cache_bytes = budget
      collectgarbage()
      collectgarbage()
      local m0 = lt.memory()
      local K = lt.kernel(x, s)
      local Y
      for _ = 1, 12 do Y = K * B end
      local held = lt.memory() - m0
      local row, t = K[3], B:t() * K
      return Y, row, t, held
    end
    local ok, err = pcall(function()
      for _, s in ipairs{polynomials[2], linear} do
        local Y0, r0, t0 = run(s, 0)
        local Y1, r1, t1, held = run(s, 2 ^ 30)
        if s.kind == "linear" then
          assert.is_true(held < 300 * 300 * 8 / 4, "a linear kernel stored " .. held .. " bytes")
        else
          assert.is_true(held >= 300 * 150 * 8, "stored only " .. held .. " bytes")
        end
        local scale = Y0:abs():max()
        assert.is_true((Y1 - Y0):abs():max() <= 1e-13 * scale, s.kind .. ": K·X")
        assert.is_true((r1 - r0):abs():max() <= 1e-13 * r0:abs():max(), s.kind .. ": row")
        assert.is_true((t1 - t0):abs():max() <= 1e-13 * t0:abs():max(), s.kind .. ": Bᵀ·K")
      end
    end)
    lt.settings.kernel_cache_bytes = saved
    assert(ok, err)
  end)

  it("work in batches: x of shape {b, n, d}", function()
    local xs = {random_points(7, 2, 21), random_points(7, 2, 22), random_points(7, 2, 23)}
    local s = polynomials[1]
    local K = lt.kernel(lt.tensor(xs), s)
    assert.same({3, 7, 7}, K:shape())
    local V = lt.randn(3, 7, 2)
    local KV = (K * V):totable()
    local Vt = V:totable()
    for b = 1, 3 do
      local R = reference(xs[b], nil, s)
      for i = 1, 7 do
        for c = 1, 2 do
          local want = 0
          for j = 1, 7 do want = want + R[i][j] * Vt[b][j][c] end
          assert.is_true(rel(KV[b][i][c], want) <= 1e-12)
        end
      end
    end
  end)

  it("solve and take log-determinants matrix-free above max_cholesky_size", function()
    local x = random_points(120, 3, 31)
    for _, s in ipairs{linear, polynomials[1]} do
      local A = lt.kernel(lt.tensor(x), s) + lt.identity(120, 0.5)
      local D = lt.tensor(reference(x, nil, s)) + lt.identity(120, 0.5):dense()
      local b = lt.randn(120)
      local want, want_ld = D:solve(b), D:logdet()
      lt.with_settings({max_cholesky_size = 10, cg_tolerance = 1e-10, max_cg_iterations = 500},
        function()
          local got = A:solve(b)
          assert.is_true((got - want):abs():max() <= 1e-6 * want:abs():max(), s.kind .. " solve")
          local _, ld = A:inv_quad_logdet(b)
          -- stochastic (SLQ) above max_cholesky_size: a few per cent
          assert.is_true(math.abs(ld - want_ld) <= 0.05 * math.abs(want_ld),
            string.format("%s logdet %g, want %g", s.kind, ld, want_ld))
        end)
    end
  end)

  it("give the gradient for offset at 0 too (one-sided: against a forward difference)", function()
    local x = lt.tensor(X1)
    for _, s in ipairs{{kind = "linear", variance = 1.3, offset = 0},
                       {kind = "polynomial", degree = 3, variance = 0.8, offset = 0}} do
      local W = lt.randn(6, 6)
      local K = lt.kernel(x, s)
      local g = K:bilinear_derivative(W)[K]
      local function objective(c)
        local R = reference(X1, nil, {kind = s.kind, degree = s.degree, variance = s.variance,
                                      offset = c})
        local Wt, sum = W:totable(), 0
        for i = 1, 6 do for j = 1, 6 do sum = sum + Wt[i][j] * R[i][j] end end
        return sum
      end
      local h = 1e-6
      local fd = (-3 * objective(0) + 4 * objective(h) - objective(2 * h)) / (2 * h)
      assert.is_true(math.abs(g.offset - fd) <= 1e-6 * math.max(1, math.abs(fd)),
        string.format("%s: offset gradient %.10g, forward difference %.10g", s.kind, g.offset, fd))
    end
  end)

  it("give the same gradient for low-rank and dense weights (linear: its low-rank pass)", function()
    local L, R = lt.randn(6, 2), lt.randn(4, 2)
    local K = lt.kernel(lt.tensor(X1), lt.tensor(X2), linear)
    local a = K:bilinear_derivative(L, R)[K]
    local b = K:bilinear_derivative(L * R:t())[K]
    assert.is_true(rel(a.variance, b.variance) <= 1e-12 and rel(a.offset, b.offset) <= 1e-12)
    assert.is_true((a.x1 - b.x1):abs():max() <= 1e-12 and (a.x2 - b.x2):abs():max() <= 1e-12)
  end)

  describe("bad input", function()
    local function fails(pattern, ...)
      local before = lt.memory()
      local ok, err = pcall(lt.kernel, ...)
      assert.is_false(ok)
      assert.matches("lazytensor: kernel: " .. pattern, tostring(err))
      collectgarbage()
      collectgarbage()
      assert.is_true(lt.memory() <= before)
    end

    it("raises clear errors and leaves the state intact", function()
      local x = lt.tensor(X1)
      fails("offset must be a non%-negative number, got %-1", x, {kind = "linear", offset = -1})
      fails("offset must be a non%-negative number", x, {kind = "polynomial", offset = -0.5})
      fails("offset must be a non%-negative number, got %-?nan", x, {kind = "linear", offset = 0 / 0})
      fails("spec.degree must be an integer from 1 to 64, got 0", x, {kind = "polynomial", degree = 0})
      fails("spec.degree must be an integer from 1 to 64, got 2.5", x,
            {kind = "polynomial", degree = 2.5})
      fails("spec.degree must be an integer from 1 to 64, got 65", x,
            {kind = "polynomial", degree = 65})
      fails("spec.degree must be a number", x, {kind = "polynomial", degree = "2"})
      fails("a linear kernel takes no spec.lengthscale %(it is not stationary", x,
            {kind = "linear", lengthscale = {1, 2}})
      fails("a polynomial kernel takes no spec.lengthscale", x, {kind = "polynomial", lengthscale = 1})
      fails("a linear kernel takes no spec.degree", x, {kind = "linear", degree = 2})
      fails("a rbf kernel takes no spec.offset", x, {kind = "rbf", lengthscale = 1, offset = 1})
      fails("variance must be a positive number, got 0", x, {kind = "linear", variance = 0})
      fails("a polynomial kernel has no derivative operator but 'variance'", x,
            {kind = "polynomial", derivative = "lengthscale"})
      fails("spec: unknown key 'degrees'", x, {kind = "polynomial", degrees = 2})
      -- with_params keeps the offset's bound
      local K = lt.kernel(x, linear)
      local ok, err = pcall(K.with_params, K, {[K] = {offset = -1}})
      assert.is_false(ok)
      assert.matches("lazytensor: .*offset must be a non%-negative number", tostring(err))
      assert.is_true(rel(K:get(2, 3), k(linear, X1[2], X1[3])) <= 1e-15)
    end)
  end)
end)
