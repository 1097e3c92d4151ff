-- lt.kernel: conformance for every kind, with and without x2, against
-- references computed by Lua loops over API.md's formulas; structure kept by
-- the rules; an n = 20000 product without materialising; bad input.
local lt = require "lazytensor"
local conformance = require "support.conformance"

-- API.md's formulas, written out independently of the C code.
local formulas = {
  rbf = function(r, s) return s.variance * math.exp(-r * r / (2 * s.lengthscale ^ 2)) end,
  matern12 = function(r, s) return s.variance * math.exp(-r / s.lengthscale) end,
  matern32 = function(r, s)
    local l = s.lengthscale
    return s.variance * (1 + math.sqrt(3) * r / l) * math.exp(-math.sqrt(3) * r / l)
  end,
  matern52 = function(r, s)
    local l = s.lengthscale
    return s.variance * (1 + math.sqrt(5) * r / l + 5 * r * r / (3 * l * l))
      * math.exp(-math.sqrt(5) * r / l)
  end,
  rq = function(r, s)
    return s.variance * (1 + r * r / (2 * s.alpha * s.lengthscale ^ 2)) ^ -s.alpha
  end,
}

local function points_of(x)
  local P = {}
  for i, p in ipairs(x) do P[i] = type(p) == "table" and p or {p} end
  return P
end

-- Spectral mixture (Wilson & Adams 2013): Σ_q w_q Π_d exp(−2π²τ_d²s_qd²)·
-- cos(2πτ_d μ_qd), τ = x − y.
local function spectral_mixture(s, x, y)
  local total = 0
  for q = 1, s.num_mixtures do
    local t = s.weights[q]
    for d = 1, #x do
      local tau = x[d] - y[d]
      t = t * math.exp(-2 * math.pi ^ 2 * tau ^ 2 * s.scales[q][d] ^ 2)
        * math.cos(2 * math.pi * tau * s.means[q][d])
    end
    total = total + t
  end
  return total
end

local function k(s, x, y)
  local variance = s.variance or 1
  local spec = {lengthscale = s.lengthscale, variance = variance}
  if s.kind == "periodic" then -- ARD: each dimension's term over its l²
    local acc = 0
    for d = 1, #x do
      local l = type(s.lengthscale) == "table" and s.lengthscale[d] or s.lengthscale
      acc = acc + math.sin(math.pi * math.abs(x[d] - y[d]) / s.period) ^ 2 / l ^ 2
    end
    return variance * math.exp(-2 * acc)
  end
  if s.kind == "cosine" then
    local r2 = 0
    for d = 1, #x do r2 = r2 + (x[d] - y[d]) ^ 2 end
    return variance * math.cos(math.pi * math.sqrt(r2) / s.period)
  end
  if s.kind == "spectral_mixture" then return spectral_mixture(s, x, y) end
  -- ARD (a list of lengthscales): distances scaled per dimension, l = 1
  local ard = type(s.lengthscale) == "table"
  local r2 = 0
  for d = 1, #x do r2 = r2 + ((x[d] - y[d]) / (ard and s.lengthscale[d] or 1)) ^ 2 end
  if ard then spec.lengthscale = 1 end
  spec.alpha = s.alpha
  return formulas[s.kind](math.sqrt(r2), spec)
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

-- (conformance.check must be called from the spec file's main chunk: it
-- finds busted's describe/it through its caller's _ENV.)
local function case(x1, x2, s, opts)
  local function make()
    if x2 then return lt.kernel(lt.tensor(x1), lt.tensor(x2), s) end
    return lt.kernel(lt.tensor(x1), s)
  end
  return make, function() return reference(x1, x2, s) end, opts
end

local X1 = {{0, 0}, {1.1, 0.3}, {-0.4, 1.2}, {2.0, -1.0}, {0.7, 2.1}, {-1.5, -0.6}}
local X2 = {{0.2, -0.1}, {1.9, 0.8}, {-1.0, 0.4}, {0.5, 1.5}}
local T1 = {0.1, 0.9, 1.7, 2.3, 3.1}
-- 12 features: distances (and the gradient pass's) through dgemm
local function wide(n, seed)
  local P = {}
  for i = 1, n do
    P[i] = {}
    for q = 1, 12 do P[i][q] = math.sin(seed * i + 0.37 * q * q) * 0.6 end
  end
  return P
end
local W1, W2 = wide(6, 1.3), wide(4, 2.9)
local specs = {
  {kind = "rbf", lengthscale = 0.8},
  {kind = "matern12", lengthscale = 1.3, variance = 2},
  {kind = "matern32", lengthscale = 0.9, variance = 0.5},
  {kind = "matern52", lengthscale = 1.1, variance = 1.5},
  {kind = "periodic", lengthscale = 0.9, variance = 1.2, period = 2.5},
  {kind = "rq", lengthscale = 0.9, variance = 1.4, alpha = 0.7},
  {kind = "cosine", variance = 1.3, period = 2.5},
}
for _, s in ipairs(specs) do
  local name = "kernel " .. s.kind
  -- cosine: not PSD in two or more dimensions (the symmetric checks
  -- only); on the line PSD of rank 2, so positive definite on 2 points
  local own = s.kind == "cosine" and {symmetric = true} or {psd = true}
  conformance.check(name .. " K(x1, x1) 6x6, d = 2", case(X1, nil, s, own))
  conformance.check(name .. " K(x1, x2) 6x4, d = 2", case(X1, X2, s))
  conformance.check(name .. " K(x2, x1) 4x6, d = 2", case(X2, X1, s))
  if s.kind == "cosine" then
    conformance.check(name .. " K(t, t) 2x2, 1-d", case({0.1, 0.9}, nil, s, {psd = true}))
    conformance.check(name .. " K(t1, t) 5x2, 1-d", case(T1, {0.1, 0.9}, s))
  else
    conformance.check(name .. " K(t, t) 5x5, 1-d", case(T1, nil, s, {psd = true}))
  end
  conformance.check(name .. " K(w1, w1) 6x6, d = 12", case(W1, nil, s, own))
  conformance.check(name .. " K(w1, w2) 6x4, d = 12", case(W1, W2, s))
end
-- Spectral mixtures of Q = 2 (d = 1, 2) and Q = 3 (d = 12) components.
local function mixture(d, Q)
  local m = {kind = "spectral_mixture", num_mixtures = Q, weights = {}, means = {}, scales = {}}
  for q = 1, Q do
    m.weights[q] = 0.4 + 0.5 * q
    m.means[q], m.scales[q] = {}, {}
    for c = 1, d do
      m.means[q][c] = 0.15 + 0.23 * q + 0.05 * c
      m.scales[q][c] = (d > 2 and 0.1 or 0.3) + 0.07 * q + 0.02 * c
    end
  end
  return m
end
local sm1, sm2, sm12 = mixture(1, 2), mixture(2, 2), mixture(12, 3)
conformance.check("kernel spectral_mixture K(x1, x1) 6x6, d = 2", case(X1, nil, sm2, {psd = true}))
conformance.check("kernel spectral_mixture K(x1, x2) 6x4, d = 2", case(X1, X2, sm2))
conformance.check("kernel spectral_mixture K(x2, x1) 4x6, d = 2", case(X2, X1, sm2))
conformance.check("kernel spectral_mixture K(t, t) 5x5, 1-d", case(T1, nil, sm1, {psd = true}))
conformance.check("kernel spectral_mixture K(w1, w1) 6x6, d = 12",
                  case(W1, nil, sm12, {psd = true}))
conformance.check("kernel spectral_mixture K(w1, w2) 6x4, d = 12", case(W1, W2, sm12))
-- ARD: one lengthscale per dimension (every kind but periodic)
local ard_specs = {
  {kind = "rbf", lengthscale = {0.6, 1.7}, variance = 1.3},
  {kind = "matern12", lengthscale = {1.4, 0.8}},
  {kind = "matern32", lengthscale = {0.7, 2.1}, variance = 0.6},
  {kind = "matern52", lengthscale = {1.2, 0.5}, variance = 1.5},
  {kind = "rq", lengthscale = {0.8, 1.9}, variance = 0.9, alpha = 2.3},
  {kind = "periodic", lengthscale = {0.7, 1.9}, variance = 1.2, period = 2.5},
}
local ard12 = {}
for q = 1, 12 do ard12[q] = 0.5 + 0.13 * q end
for _, s in ipairs(ard_specs) do
  local name = "kernel " .. s.kind .. " ARD"
  conformance.check(name .. " K(x1, x1) 6x6, d = 2", case(X1, nil, s, {psd = true}))
  conformance.check(name .. " K(x1, x2) 6x4, d = 2", case(X1, X2, s))
  local wide_spec = {kind = s.kind, lengthscale = ard12, variance = s.variance, alpha = s.alpha,
                     period = s.period}
  conformance.check(name .. " K(w1, w1) 6x6, d = 12", case(W1, nil, wide_spec, {psd = true}))
  conformance.check(name .. " K(w1, w2) 6x4, d = 12", case(W1, W2, wide_spec))
end

describe("kernel", function()
  local rbf = {kind = "rbf", lengthscale = 0.8}

  it("is PSD and symmetric without x2, unknown with it", function()
    local K = lt.kernel(lt.tensor(X1), rbf)
    assert.equal("kernel", lt.type(K))
    assert.is_true(K:is_psd())
    assert.is_true(K:is_symmetric())
    local K2 = lt.kernel(lt.tensor(X1), lt.tensor(X1), rbf)
    assert.is_nil(K2:is_psd())
    assert.is_false(lt.kernel(lt.tensor(X1), lt.tensor(X2), rbf):is_symmetric())
  end)

  it("takes Lua tables and 1-d tensors as points; variance defaults to 1", function()
    local K = lt.kernel({0, 1, 3}, {kind = "matern12", lengthscale = 2})
    assert.same({3, 3}, K:shape())
    assert.is_true(math.abs(K:get(1, 3) - math.exp(-1.5)) < 1e-15)
    assert.same({1, 1, 1}, K:diagonal():totable())
    assert.equal(3, K:trace())
  end)

  it("copies its points: later writes do not change it", function()
    local x = lt.tensor{0, 1}
    local K = lt.kernel(x, rbf)
    local before = K:get(1, 2)
    x[2] = 5
    assert.equal(before, K:get(1, 2))
  end)

  it("keeps the structure: transpose swaps x1 and x2, scaling scales the variance", function()
    local K = lt.kernel(lt.tensor(X1), lt.tensor(X2), rbf)
    local Kt = K:t()
    assert.equal("kernel", lt.type(Kt))
    assert.same({4, 6}, Kt:shape())
    local R = reference(X2, X1, rbf)
    local S = 3 * K
    assert.equal("kernel", lt.type(S))
    for i = 1, 4 do
      for j = 1, 6 do
        assert.is_true(math.abs(Kt:get(i, j) - R[i][j]) < 1e-15)
        assert.is_true(math.abs(S:get(j, i) - 3 * R[i][j]) < 1e-15)
      end
    end
    local P = lt.kernel(lt.tensor(X1), rbf)
    assert.equal(P, P:t())
    assert.is_true((2 * P):is_psd())
    assert.is_not.equal(true, (-2 * P):is_psd())
    assert.is_false((-2 * P):is_psd() == true)
    -- the diagonal of K(x1, x2) is k(x1_i, x2_i), not the variance
    local d = K:diagonal():totable()
    for i = 1, 4 do assert.is_true(math.abs(d[i] - R[i][i]) < 1e-15) end
  end)

  it("multiplies in several row blocks (symmetric and not), every kind", function()
    -- 300 points: blocks of 256 and 44 rows, so the symmetric path's transposed
    -- contributions to the rows below each block are exercised.
    local n, m = 300, 150
    local x, y, X = {}, {}, {}
    local seed = 5
    local function rnd()
      seed = (seed * 1103515245 + 12345) % 2147483648
      return seed / 2147483648
    end
    for i = 1, n do
      x[i] = {3 * rnd(), 3 * rnd()}
      X[i] = {rnd() - 0.5, rnd() - 0.5}
    end
    for j = 1, m do y[j] = {3 * rnd(), 3 * rnd()} end
    for _, s in ipairs(specs) do
      local got = (lt.kernel(lt.tensor(x), s) * lt.tensor(X)):totable()
      local got2 = (lt.kernel(lt.tensor(x), lt.tensor(y), s):t() * lt.tensor(X)):totable()
      for i = 1, n do
        local a, b = 0, 0
        for j = 1, n do
          local kij = k(s, x[i], x[j])
          a, b = a + kij * X[j][1], b + kij * X[j][2]
        end
        assert.is_true(math.abs(got[i][1] - a) <= 1e-12 * math.max(1, math.abs(a))
          and math.abs(got[i][2] - b) <= 1e-12 * math.max(1, math.abs(b)),
          string.format("%s: row %d: %g %g, want %g %g", s.kind, i, got[i][1], got[i][2], a, b))
      end
      for j = 1, m, 37 do
        local a = 0
        for i = 1, n do a = a + k(s, x[i], y[j]) * X[i][1] end
        assert.is_true(math.abs(got2[j][1] - a) <= 1e-12 * math.max(1, math.abs(a)),
          string.format("%s: K(x, y)ᵀ row %d: %g, want %g", s.kind, j, got2[j][1], a))
      end
    end
  end)

  it("multiplies n = 20000 points without forming the 20000x20000 matrix", function()
    local n = 20000
    local x, v = {}, {}
    local seed = 11
    for i = 1, n do
      seed = (seed * 1103515245 + 12345) % 2147483648
      x[i] = {seed / 2147483648 * 10, (i % 97) / 97}
      v[i] = (i % 7) - 3
    end
    local s = {kind = "matern32", lengthscale = 0.3, variance = 1.7}
    collectgarbage()
    local before = lt.memory()
    local K = lt.kernel(lt.tensor(x), s)
    local y = K * lt.tensor(v)
    -- The peak during the product is checked by tests/c/test_toeplitz_kernel.c
    -- (a counting allocator); here: what the library holds afterwards.
    local held = lt.memory() - before
    assert.is_true(held < 50 * 2 ^ 20, "lt.memory() grew by " .. held)
    assert.same({n}, y:shape())
    for _, i in ipairs{1, 2, 4321, n} do
      local want = 0
      for j = 1, n do want = want + k(s, x[i], x[j]) * v[j] end
      assert.is_true(math.abs(y[i] - want) <= 1e-10 * math.max(1, math.abs(want)),
        string.format("y[%d] = %.17g, direct sum %.17g", i, y[i], want))
    end
  end)

  -- An operator multiplied again and again keeps its entries (within
  -- lt.settings.kernel_cache_bytes, for all operators of the state) and
  -- multiplies from them: the same numbers as evaluating every time.
  describe("stored entries (kernel_cache_bytes)", function()
    local saved
    before_each(function() saved = lt.settings.kernel_cache_bytes end)
    after_each(function() lt.settings.kernel_cache_bytes = saved end)

    local function points(n, d, seed)
      local x = {}
      for i = 1, n do
        x[i] = {}
        for q = 1, d do
          seed = (seed * 1103515245 + 12345) % 2147483648
          x[i][q] = seed / 2147483648 * 3
        end
      end
      return x
    end

    local function max_rel(A, B)
      return ((A - B):abs():max()) / B:abs():max()
    end

    -- Y = K·X, Z = Xᵀ·K (the transposed product), a row and an entry, after
    -- `times` products of K (the first ones evaluate, the later ones read).
    local function use(K, X, times, L)
      local Y
      for _ = 1, times do Y = K * X end
      return Y, (L or X):t() * K, K[3], K:get(5, 2)
    end

    local x1, x2 = points(300, 2, 3), points(170, 2, 5)
    local P1, P2 = lt.tensor(x1), lt.tensor(x2)
    local B1, B2 = lt.randn(300, 3), lt.randn(170, 3)
    for _, s in ipairs(specs) do
      local d_kind = s.kind == "cosine" and "period" or s.kind ~= "rq" and "lengthscale" or nil
      for _, derivative in ipairs{false, d_kind} do
        local spec = {kind = s.kind, lengthscale = s.lengthscale, variance = s.variance,
                      period = s.period, alpha = s.alpha, derivative = derivative or nil}
        it(string.format("%s%s: the same products stored and evaluated (to 1e-14)", s.kind,
                         derivative and " ∂/∂log " .. derivative or ""), function()
          for _, cross in ipairs{false, true} do
            local function make() return cross and lt.kernel(P1, P2, spec) or lt.kernel(P1, spec) end
            local B = cross and B2 or B1
            lt.settings.kernel_cache_bytes = 0
            local m0 = lt.memory()
            local Y0, Z0, r0, e0 = use(make(), B, 12, B1)
            assert.is_true(lt.memory() - m0 < 300 * 300 * 8 / 4, "evaluating kept an n×n matrix")
            lt.settings.kernel_cache_bytes = 2 ^ 30
            collectgarbage()
            local m1 = lt.memory()
            local K = make()
            local Y1, Z1, r1, e1 = use(K, B, 12, B1)
            -- the stored matrix is the operator's memory (half of K(x, x))
            local stored = lt.memory() - m1
            local cols = cross and 170 or 150
            assert.is_true(stored >= 300 * cols * 8, "stored " .. stored .. " bytes")
            assert.is_true(max_rel(Y1, Y0) <= 1e-14, "K·X")
            assert.is_true(max_rel(Z1, Z0) <= 1e-14, "Xᵀ·K")
            assert.is_true(max_rel(r1, r0) <= 1e-14, "row")
            assert.is_true(math.abs(e1 - e0) <= 1e-14 * math.abs(e0), "entry")
            if not derivative then -- and both against the formulas
              local ref = reference(x1, cross and x2 or nil, spec)
              local y = Y1:totable()
              for _, i in ipairs{1, 77, 300} do
                local want = 0
                for j = 1, #ref[i] do want = want + ref[i][j] * B[j][1] end
                assert.is_true(math.abs(y[i][1] - want) <= 1e-12 * math.max(1, math.abs(want)))
              end
            end
            K = nil -- luacheck: ignore 311 (released: its matrix goes with it)
            collectgarbage()
            collectgarbage()
            assert.is_true(lt.memory() - m1 < 300 * cols * 8 / 4, "the matrix outlived its operator")
          end
        end)
      end
    end

    -- Runs fn with an empty store (matrices other specs' live operators
    -- keep would be evicted during fn and blur its memory counts) and the
    -- given budget, restoring the setting afterwards.
    local function with_budget(bytes, fn)
      lt.with_settings({kernel_cache_bytes = 0}, function()
        lt.settings.kernel_cache_bytes = bytes
        collectgarbage()
        collectgarbage()
        fn()
      end)
    end

    -- The library's memory once the garbage of the products is collected.
    local function held()
      collectgarbage()
      collectgarbage()
      return lt.memory()
    end

    it("keeps all stored matrices of the state within the budget, least recently used out", function()
      local one = 150 * 300 * 8 + 64 * 64 * 8 -- about half of a 300×300 K
      with_budget(math.floor(1.5 * one), function()
        local m0 = held()
        local Ka, Kb = lt.kernel(P1, specs[1]), lt.kernel(P1, specs[2])
        local ya = use(Ka, B1, 12)
        local held_a = held() - m0
        assert.is_true(held_a >= 0.9 * one, "first operator stored " .. held_a)
        local yb = use(Kb, B1, 12)
        assert.is_true(held() - m0 <= lt.settings.kernel_cache_bytes + 65536,
          "two stored matrices over the budget")
        -- Ka (evicted) still multiplies right
        assert.is_true(max_rel(Ka * B1, ya) <= 1e-14)
        assert.is_true(max_rel(Kb * B1, yb) <= 1e-14)
        -- a lowered budget frees what no longer fits; what is kept stays valid
        local before = held()
        lt.settings.kernel_cache_bytes = math.floor(0.5 * one)
        assert.is_true(before - held() >= 0.9 * one, "lowering the budget freed nothing")
        assert.is_true(max_rel(Kb * B1, yb) <= 1e-14)
        lt.settings.kernel_cache_bytes = 0 -- nothing new is kept
        assert.is_true(max_rel(Ka * B1, ya) <= 1e-14)
      end)
    end)

    it("evicts the least recently used of three stored matrices (the list of stored matrices stays whole)", function()
      -- Regression: a newly stored matrix was linked by a "touch" that first
      -- unlinked it, which emptied the list's head: older matrices were lost
      -- to eviction while still counted, so the wrong one was evicted and,
      -- once the head was lost again, later operators stored nothing.
      local one = 150 * 300 * 8 + 64 * 64 * 8
      with_budget(math.floor(2.5 * one), function()
        local Ks, ys = {}, {}
        for m = 1, 3 do Ks[m] = lt.kernel(P1, specs[m]) end
        local m0 = held()
        for m = 1, 3 do
          ys[m] = use(Ks[m], B1, 12)
          assert.is_true(held() - m0 <= 2.5 * one + 65536, "over the budget after operator " .. m)
        end
        assert.is_true(held() - m0 >= 1.8 * one, "two matrices should be stored")
        -- (the first operator is not multiplied again: it would store its matrix anew)
        for m = 2, 3 do assert.is_true(max_rel(Ks[m] * B1, ys[m]) <= 1e-14) end
        local function release(m)
          local before = held()
          Ks[m] = nil
          return before - held()
        end
        -- (what goes with it besides a matrix — points, rows — is well under one)
        assert.is_true(release(1) < 0.75 * one, "the first operator's matrix should have been evicted")
        assert.is_true(release(3) >= 0.9 * one, "the last operator's matrix should be kept")
        assert.is_true(release(2) >= 0.9 * one, "the second operator's matrix should be kept")
      end)
    end)

    it("keeps the properties when a sum with a kernel is made dense", function()
      local K = lt.kernel(P1, specs[1]) + lt.identity(300, 0.1)
      local D = K:dense()
      assert.is_true(D:is_psd())
      assert.is_true(max_rel(D * B1, K * B1) <= 1e-13)
    end)
  end)

  describe("bad input", function()
    local function fails(pattern, ...)
      local before = lt.memory()
      local ok, err = pcall(lt.kernel, ...)
      assert.is_false(ok)
      assert.matches("lazytensor: kernel: " .. pattern, tostring(err))
      collectgarbage()
      collectgarbage()
      assert.is_true(lt.memory() <= before,
        "memory after the error: " .. lt.memory() .. " > " .. before)
    end

    it("raises clear errors and leaves the state intact", function()
      local x = lt.tensor(X1)
      fails("unknown kind 'cosin'", x, {kind = "cosin", lengthscale = 1})
      fails("spec.lengthscale: a cosine kernel has a period and no lengthscale", x,
            {kind = "cosine", lengthscale = 1, period = 1})
      fails("spec.period is required", x, {kind = "cosine"})
      fails("derivative 'lengthscale' needs one lengthscale and a kind other than rq or cosine",
            x, {kind = "cosine", period = 1, derivative = "lengthscale"})
      fails("derivative 'period' needs a periodic or cosine kernel", x,
            {kind = "rbf", lengthscale = 1, derivative = "period"})
      fails("3 lengthscales for points of 2 dimensions", x,
            {kind = "periodic", lengthscale = {1, 2, 3}, period = 1})
      fails("lengthscale%[2%] must be a positive number", x,
            {kind = "periodic", lengthscale = {1, 0}, period = 1})
      local function sm(over)
        local m = {kind = "spectral_mixture", num_mixtures = 2, weights = {1, 2},
                   means = {{0.1, 0.2}, {0.3, 0.4}}, scales = {{1, 2}, {3, 4}}}
        for key, v in pairs(over) do m[key] = v end
        return m
      end
      fails("spec.num_mixtures must be a positive integer, got 1.5", x, sm{num_mixtures = 1.5})
      fails("spec.num_mixtures must be a positive integer, got 1e%+?30", x,
            sm{num_mixtures = 1e30})
      fails("spec.num_mixtures must be a positive integer, got boolean", x, sm{num_mixtures = false})
      fails("spec.weights must have 2 rows", x, sm{weights = {1, 2, 3}})
      fails("spec.weights must be a list of numbers, got string", x, sm{weights = "1"})
      fails("spec.means must have 2 rows", x, sm{means = {{0.1, 0.2}}})
      fails("spec.means has 2 columns but spec.scales has 1", x, sm{scales = {1, 2}})
      fails("spec.means and spec.scales have 1 columns for points of 2 dimensions", x,
            sm{means = {0.1, 0.2}, scales = {1, 2}})
      fails("spectral_mixture weights%[2%] must be a positive number, got %-2", x,
            sm{weights = {1, -2}})
      fails("spectral_mixture means%[2%]%[1%] must be a positive number, got 0", x,
            sm{means = {{0.1, 0.2}, {0, 0.4}}})
      fails("spectral_mixture scales%[1%]%[2%] must be a positive number, got %-?nan", x,
            sm{scales = {{1, 0 / 0}, {3, 4}}})
      fails("spec.variance: spectral_mixture takes num_mixtures, weights, means and scales", x,
            sm{variance = 2})
      fails("spec.lengthscale: spectral_mixture takes", x, sm{lengthscale = 2})
      fails("spectral_mixture has no derivative operators", x, sm{derivative = "variance"})
      fails("spec.means is for spectral_mixture kernels, got kind 'rbf'", x,
            {kind = "rbf", lengthscale = 1, means = {1}})
      fails("3 lengthscales for points of 2 dimensions", x, {kind = "rbf", lengthscale = {1, 2, 3}})
      fails("lengthscale%[2%] must be a positive number", lt.tensor{{0, 0}, {1, 1}},
            {kind = "rbf", lengthscale = {1, -2}})
      fails("alpha must be a positive number", x, {kind = "rq", lengthscale = 1, alpha = 0})
      fails("derivative 'lengthscale' needs one lengthscale", x,
            {kind = "rbf", lengthscale = {1}, derivative = "lengthscale"})
      fails("spec.kind must be a string", x, {lengthscale = 1})
      fails("spec.lengthscale is required", x, {kind = "rbf"})
      fails("spec.lengthscale must be a number or a list of numbers, got string", x, {kind = "rbf", lengthscale = "1"})
      fails("lengthscale must be a positive number, got 0", x, {kind = "rbf", lengthscale = 0})
      fails("lengthscale must be a positive number, got %-1", x,
        {kind = "matern12", lengthscale = -1})
      fails("variance must be a positive number, got %-2", x,
        {kind = "rbf", lengthscale = 1, variance = -2})
      fails("spec.period is required", x, {kind = "periodic", lengthscale = 1})
      fails("period must be a positive number, got 0", x,
        {kind = "periodic", lengthscale = 1, period = 0})
      fails("x1 has 2 features per point but x2 has 3", x, lt.zeros(2, 3), rbf)
      fails("x1 must be a 1%-d or 2%-d", lt.tensor(2), rbf) -- ({b, n, d}: a batch)
      fails("x2 must be a 1%-d or 2%-d", x, lt.diag{1, 2}, rbf)
      fails("expected a spec table", x, x)
      fails("x2 is a spec table", x, rbf, rbf)
      fails("expected %(x1 %[, x2%], spec%)", x)
      -- still usable
      local K = lt.kernel(x, rbf)
      local R = reference(X1, nil, rbf)
      assert.is_true(math.abs(K:get(2, 3) - R[2][3]) < 1e-15)
    end)
  end)
end)
