-- The pivoted-Cholesky preconditioner's rank above max_cholesky_size:
-- adapted to the kernel's spectrum by default (preconditioner_size = -1),
-- exactly the user's when set; reported as info.preconditioner_rank
-- (doc/iterative.md, "The preconditioner's rank").
local lt = require "lazytensor"

-- n points uniform in [0, side]^d (seeded).
local function points(n, d, side, seed)
  lt.manual_seed(seed)
  return lt.rand({n, d}) * side
end

local function noisy_kernel(X, kind, lengthscale, noise)
  return lt.kernel(X, {kind = kind, lengthscale = lengthscale}):add_diag(noise)
end

local function iterative(settings, fn)
  local s = {max_cholesky_size = 0}
  for k, v in pairs(settings) do s[k] = v end
  return lt.with_settings(s, fn)
end

local function exact(fn)
  return lt.with_settings({max_cholesky_size = 1e9}, fn)
end

local n = 1000

describe("the adaptive preconditioner rank", function()
  -- fast decay: 1-d RBF; slow: Matérn-5/2 in 2-d; flat: RBF in 5-d with a
  -- lengthscale far below the points' spacing (K near I); 5-d RBF with a
  -- long lengthscale: slow, but falling
  local fast, slow, flat, rbf5
  setup(function()
    fast = noisy_kernel(points(n, 1, 1, 1), "rbf", 0.3, 1e-2)
    slow = noisy_kernel(points(n, 2, 5, 2), "matern52", 1, 1e-2)
    flat = noisy_kernel(points(n, 5, 5, 3), "rbf", 0.25, 1e-2)
    rbf5 = noisy_kernel(points(n, 5, 5, 4), "rbf", 2, 1e-2)
  end)
  teardown(function()
    fast, slow, flat, rbf5 = nil, nil, nil, nil
    collectgarbage()
  end)

  local function solve_info(A, rank)
    lt.manual_seed(9)
    local b = lt.randn(n)
    return iterative({preconditioner_size = rank}, function()
      local x, info = A:solve(b)
      return info, x, b
    end)
  end

  it("is the default, reads back as -1, and nothing below -1 is accepted", function()
    assert.equal(-1, lt.settings.preconditioner_size)
    lt.with_settings({preconditioner_size = 20}, function()
      assert.equal(20, lt.settings.preconditioner_size)
      lt.settings.preconditioner_size = -1
      assert.equal(-1, lt.settings.preconditioner_size)
    end)
    assert.has_error(function() lt.settings.preconditioner_size = -2 end)
    assert.equal(-1, lt.settings.preconditioner_size)
  end)

  it("is large for a slowly decaying spectrum and small for a fast or flat one", function()
    local f, s, l = solve_info(fast, -1), solve_info(slow, -1), solve_info(flat, -1)
    -- the fast one: the trace rule ends it early, with M⁻¹A ≈ I
    assert.is_true(f.preconditioner_rank < 30, "fast: " .. f.preconditioner_rank)
    assert.is_true(f.iterations <= 3, "fast: " .. f.iterations .. " CG steps")
    -- the slow one: well above GPyTorch's 15, up to the cap 6·√n = 190
    assert.is_true(s.preconditioner_rank >= 100, "slow: " .. s.preconditioner_rank)
    assert.is_true(s.preconditioner_rank <= 190, "slow: " .. s.preconditioner_rank)
    -- the flat one: the pivots separate nothing, the minimum
    assert.equal(15, l.preconditioner_rank)
    for _, info in ipairs({f, s, l}) do assert.is_true(info.converged) end
  end)

  it("takes CG to the tolerance in fewer steps on a 5-d RBF problem", function()
    local fixed, adaptive = solve_info(rbf5, 15), solve_info(rbf5, -1)
    assert.equal(15, fixed.preconditioner_rank)
    assert.is_true(adaptive.preconditioner_rank > 15)
    assert.is_true(fixed.converged and adaptive.converged)
    assert.is_true(2 * adaptive.iterations < fixed.iterations,
                   adaptive.iterations .. " against " .. fixed.iterations .. " with rank 15")
  end)

  it("is exactly the user's preconditioner_size when one is set", function()
    for _, r in ipairs({1, 7, 37, 150}) do
      assert.equal(r, solve_info(slow, r).preconditioner_rank)
      local _, info = iterative({preconditioner_size = r}, function() return slow:logdet() end)
      assert.equal(r, info.preconditioner_rank)
    end
    -- 0: no preconditioner, and info has no rank to report
    local none = solve_info(slow, 0)
    assert.is_nil(none.preconditioner_rank)
    assert.is_true(none.converged)
    -- a gradient's control variate raises a smaller fixed rank to its own,
    -- and is the least an adaptive one takes (flat: the minimum otherwise)
    local y = lt.randn(n)
    for _, case in ipairs({{slow, 37, 10, 37}, {slow, 37, 50, 50}, {flat, -1, 50, 50}}) do
      local A, r, cv, want = case[1], case[2], case[3], case[4]
      local _, _, _, info = iterative({preconditioner_size = r}, function()
        return A:inv_quad_logdet(y, {grad = true, control_variate = cv})
      end)
      assert.equal(want, info.preconditioner_rank)
    end
  end)

  it("agrees with the exact (Cholesky) path within the stated tolerances", function()
    local info, x, b = solve_info(rbf5, -1)
    local xe = exact(function() return rbf5:solve(b) end)
    assert.is_true(info.converged)
    -- converged means the true residual is met
    local r = (rbf5 * x - b):norm() / b:norm()
    assert.is_true(r <= 10 * lt.settings.cg_tolerance, "residual " .. r)
    assert.is_true(math.abs(r - info.residual) <= 1e-3 * r + 1e-15)
    assert.is_true((x - xe):norm() / xe:norm() < 1e-4)
    -- SLQ's log det within 1 % (doc/iterative.md), and within its stderr
    local lde = exact(function() return rbf5:logdet() end)
    lt.manual_seed(3)
    local ld, linfo = iterative({}, function() return rbf5:logdet() end)
    assert.is_true(linfo.preconditioner_rank > 15)
    assert.is_true(math.abs(ld - lde) <= 0.01 * math.abs(lde), ld .. " vs " .. lde)
    assert.is_true(math.abs(ld - lde) <= 5 * linfo.stderr + 1e-9 * math.abs(lde))
    -- the stochastic gradient with its control variate against the exact one
    local K = lt.kernel(points(n, 5, 5, 4), {kind = "rbf", lengthscale = 2})
    local N = lt.identity(n, 1e-2)
    local A = K + N
    local y = lt.randn(n)
    local _, _, ge = exact(function() return A:inv_quad_logdet(y, {grad = true}) end)
    lt.manual_seed(5)
    local _, _, g, ginfo = iterative({}, function()
      return A:inv_quad_logdet(y, {grad = true, control_variate = 64})
    end)
    assert.is_true(ginfo.preconditioner_rank >= 64)
    local num, den = 0, 0
    for _, pair in ipairs({{K, "lengthscale"}, {K, "variance"}, {N, "scale"}}) do
      local got, want = g[pair[1]][pair[2]], ge[pair[1]][pair[2]]
      num, den = num + (got - want) ^ 2, den + want ^ 2
    end
    assert.is_true(math.sqrt(num / den) < 0.05, "gradient error " .. math.sqrt(num / den))
  end)
end)

describe("a dense K + σ²I above max_cholesky_size", function()
  -- The noise estimate from the pivots' block (its smallest eigenvalue):
  -- before it, the smallest residual off the pivots overestimated σ² and
  -- CG took 9 steps here against the kernel form's 3.
  it("gets the kernel form's rank and about its CG steps", function()
    local m = 600
    lt.manual_seed(4)
    local x = lt.rand(m):reshape(m, 1)
    local spec = {kind = "rbf", lengthscale = 0.1}
    local D = lt.kernel(x, spec):dense():add_diag(0.01)
    local Kf = lt.kernel(x, spec):add_diag(0.01)
    local b = lt.randn(m)
    for _, rank in ipairs({-1, 30}) do
      iterative({preconditioner_size = rank}, function()
        local _, ki = Kf:solve(b)
        local xd, di = D:solve(b)
        assert.is_true(di.converged)
        assert.is_true(di.iterations <= ki.iterations + 1,
                       di.iterations .. " dense against " .. ki.iterations)
        assert.is_true(math.abs(di.preconditioner_rank - ki.preconditioner_rank) <= 2)
        local xe = exact(function() return D:solve(b) end)
        assert.is_true((xd - xe):norm() / xe:norm() < 1e-5)
      end)
    end
  end)
end)
