-- The iterative preconditioner on structured sums (issue 25): SKI's lazy
-- W·K_grid·Wᵀ + σ²I gets one (rows from the interpolation weights and K_grid's
-- rows), a sum that cannot be factored says why in info.no_preconditioner,
-- the control variate of a stochastic gradient keeps the adaptive rank's cap
-- and is used only where the factor holds K (info.control_variate_rank, or
-- info.no_control_variate saying why not), and SKI's product takes the
-- control variate's diagonal cotangent through the grid's lags.
local lt = require "lazytensor"

local function iterative(settings, fn)
  local s = {max_cholesky_size = 0}
  for k, v in pairs(settings) do s[k] = v end
  return lt.with_settings(s, fn)
end

local function exact(fn)
  return lt.with_settings({max_cholesky_size = 1e9}, fn)
end

-- A symmetric Toeplitz column of the RBF kernel at lags 0, h, 2h, ...
local function rbf_column(m, h, ell)
  local c = {}
  for j = 1, m do c[j] = math.exp(-0.5 * ((j - 1) * h / ell) ^ 2) end
  return lt.tensor(c)
end

-- SKI's covariance of n points in [0, 1]^d from an m-point grid per axis,
-- with the grid's factors (Toeplitz, or dense copies of them when dense).
local function ski(n, d, m, ells, dense)
  lt.manual_seed(11)
  local X = lt.rand({n, d}) * 0.9 + 0.05
  local h = 1.2 / (m - 1)
  local grids, factors = {}, {}
  for k = 1, d do
    grids[k] = {-0.1, 1.1, m}
    factors[k] = lt.psd(lt.toeplitz(rbf_column(m, h, ells[k])))
    if dense and dense[k] then factors[k] = factors[k]:dense() end
  end
  local W = lt.interp(X, grids)
  local Kg = d == 1 and factors[1] or lt.kron(factors[1], factors[2])
  return lt.psd(W * Kg * W:t()), factors
end

describe("the preconditioner of structured sums", function()
  it("is built for SKI's W·K_grid·Wᵀ + σ²I and cuts CG's iterations", function()
    for _, d in ipairs({1, 2}) do
      local K = ski(600, d, d == 1 and 80 or 20, {0.3, 0.4})
      local A = K + lt.identity(600, 1e-2)
      lt.manual_seed(2)
      local b = lt.randn(600)
      local x, info = iterative({}, function() return A:solve(b) end)
      local x0, info0 = iterative({preconditioner_size = 0}, function() return A:solve(b) end)
      local xe = exact(function() return A:dense():solve(b) end)
      assert.is_true(info.converged and info0.converged)
      assert.is_true(info.preconditioner_rank > 0)
      assert.is_nil(info.no_preconditioner)
      assert.is_true(2 * info.iterations < info0.iterations,
                     info.iterations .. " iterations against " .. info0.iterations)
      assert.is_true((x - xe):norm() / xe:norm() < 1e-4)
      assert.is_true((x0 - xe):norm() / xe:norm() < 1e-4)
    end
  end)

  it("takes SKI's diagonal from K_grid's lags, as its dense form has it", function()
    for _, case in ipairs({{1, 50}, {2, 12}}) do
      local d, m = case[1], case[2]
      local K = ski(300, d, m, {0.3, 0.4})
      local Kd = ski(300, d, m, {0.3, 0.4}, {true, true}) -- dense factors: entry by entry
      local want = K:dense():diagonal()
      assert.is_true((K:diagonal() - want):abs():max() <= 1e-12 * want:abs():max())
      assert.is_true((Kd:diagonal() - want):abs():max() <= 1e-12 * want:abs():max())
      assert.is_true(want:min() > 0)
    end
  end)

  it("that cannot be built says why in info, and the solve is still right", function()
    local n = 300
    local K = ski(n, 1, 40, {0.3})
    local dK = K:dense()
    local op = lt.operator{shape = {n, n}, psd = true, name = "K",
                           matmul = function(X) return dK * X end}
    local A = op + lt.identity(n, 1e-2)
    lt.manual_seed(2)
    local b = lt.randn(n)
    local x, info = iterative({}, function() return A:solve(b) end)
    assert.is_nil(info.preconditioner_rank)
    assert.is_string(info.no_preconditioner)
    assert.truthy(info.no_preconditioner:find("neither entries nor rows", 1, true))
    local xe = exact(function() return (dK + lt.identity(n, 1e-2)):solve(b) end)
    assert.is_true((x - xe):norm() / xe:norm() < 1e-4)
    -- asked for none: nothing to explain
    local _, none = iterative({preconditioner_size = 0}, function() return A:solve(b) end)
    assert.is_nil(none.no_preconditioner)
  end)
end)

describe("the stochastic gradient's control variate", function()
  local function points(n, d, side, seed)
    lt.manual_seed(seed)
    return lt.rand({n, d}) * side
  end

  it("leaves the adaptive rank's cap where it is", function()
    -- Matérn-5/2 in 2-d: its spectrum keeps the rank growing to the cap
    -- (6·√n = 190 at n = 1000), with or without a control variate
    local n = 1000
    local A = lt.kernel(points(n, 2, 5, 2), {kind = "matern52", lengthscale = 1}):add_diag(1e-2)
    local y = lt.randn(n)
    local _, plain = iterative({}, function() return A:logdet() end)
    local _, _, _, info = iterative({}, function()
      return A:inv_quad_logdet(y, {grad = true, control_variate = 64})
    end)
    assert.is_true(plain.preconditioner_rank > 100, "rank " .. plain.preconditioner_rank)
    assert.equal(plain.preconditioner_rank, info.preconditioner_rank)
  end)

  it("is used where the factor holds K, and reported as skipped where it does not", function()
    local n = 800
    -- a smooth 1-d kernel: the factor holds K to far below the noise
    local K = lt.kernel(points(n, 1, 5, 1), {kind = "rbf", lengthscale = 1})
    local N = lt.identity(n, 1e-2)
    local y = lt.randn(n)
    local _, _, ge = exact(function() return (K + N):inv_quad_logdet(y, {grad = true}) end)
    local function err(cv)
      local e = 0
      for seed = 1, 4 do
        lt.manual_seed(seed)
        local _, _, g, info = iterative({}, function()
          return (K + N):inv_quad_logdet(y, {grad = true, control_variate = cv})
        end)
        if cv > 0 then
          assert.is_true(info.control_variate_rank > 0)
          assert.is_nil(info.no_control_variate)
        else
          assert.is_nil(info.control_variate_rank)
        end
        e = e + (g[K].lengthscale - ge[K].lengthscale) ^ 2
      end
      return math.sqrt(e / 4)
    end
    local with, without = err(64), err(0)
    assert.is_true(10 * with < without, with .. " against " .. without)
    -- a 5-d RBF far shorter than the points' spacing: K is near a multiple
    -- of I, no low-rank factor holds it, and the control variate is skipped
    local F = lt.kernel(points(n, 5, 5, 3), {kind = "rbf", lengthscale = 0.25}):add_diag(1e-2)
    local _, _, _, info = iterative({}, function()
      return F:inv_quad_logdet(y, {grad = true, control_variate = 64})
    end)
    assert.is_nil(info.control_variate_rank)
    assert.truthy(info.no_control_variate:find("noise", 1, true))
  end)

  it("reaches SKI's grid factors through the lags as the dense cotangent does", function()
    -- the same 2-d SKI covariance twice: K_grid = T1 ⊗ T2 (the lag path)
    -- and T1 ⊗ dense(T2) (not lag-structured: the n×n dense path); the same
    -- probes give T1's column the same gradient
    local n = 400
    local Ka, fa = ski(n, 2, 12, {0.3, 0.4})
    local Kb, fb = ski(n, 2, 12, {0.3, 0.4}, {false, true})
    local y = lt.randn(n)
    local function grad(K)
      lt.manual_seed(7)
      local _, _, g, info = iterative({}, function()
        return (K + lt.identity(n, 1e-3)):inv_quad_logdet(y, {grad = true, control_variate = 16})
      end)
      assert.is_true(info.control_variate_rank > 0)
      return g
    end
    local ga, gb = grad(Ka), grad(Kb)
    local a, b = ga[fa[1]].column, gb[fb[1]].column
    assert.is_true((a - b):norm() <= 1e-8 * b:norm(), (a - b):norm() .. " vs " .. b:norm())
    assert.is_true(b:norm() > 0)
  end)
end)
