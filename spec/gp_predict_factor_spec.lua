-- gp.exact's prediction on the exact path factors Ky once (issue 25): the
-- mean's α and the variances share one Cholesky factor, kept while the
-- hyperparameters and noise stay; checked against plain-Lua Gaussian
-- elimination (support/ref.lua) on the same kernel matrices.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ref = require "support.ref"

-- k(x, x') of an RBF kernel (variance 1), the reference's own.
local function rbf(a, b, ell)
  local s = 0
  for k = 1, #a do s = s + (a[k] - b[k]) ^ 2 end
  return math.exp(-0.5 * s / (ell * ell))
end

describe("gp.exact prediction (exact path)", function()
  it("shares one Cholesky factor between the mean and the variances", function()
    local P = ref.scattered(60, 2, 3, 4)
    local y = ref.sine_targets(P)
    local S = ref.scattered(7, 2, 9, 4)
    local ell, noise = 0.8, 0.05
    local m = gp.exact{x = lt.tensor(P), y = lt.tensor(y), noise = noise, mean = "zero",
                       kernel = gp.kernels.rbf{lengthscale = ell}, structure = "kernel"}
    local mean, var = m:predict(lt.tensor(S))
    -- the factor is kept, and a second prediction uses the same one
    local L = m.chol
    assert.truthy(lt.is_tensor(L))
    m:predict(lt.tensor(S))
    assert.is_true(rawequal(L, m.chol))
    -- the reference: Ky and the cross-covariance in plain Lua
    local Ky, Ks = {}, {}
    for i = 1, #P do
      Ky[i] = {}
      for j = 1, #P do Ky[i][j] = rbf(P[i], P[j], ell) + (i == j and noise or 0) end
    end
    for s = 1, #S do
      Ks[s] = {}
      for i = 1, #P do Ks[s][i] = rbf(S[s], P[i], ell) end
    end
    local alpha = ref.solve(Ky, y)
    for s = 1, #S do
      local kv = ref.solve(Ky, Ks[s])
      local mu, explained = 0, 0
      for i = 1, #P do
        mu = mu + Ks[s][i] * alpha[i]
        explained = explained + Ks[s][i] * kv[i]
      end
      ref.close(mean[s], mu, 1e-9, "mean", 1e-12)
      ref.close(var[s], 1 - explained, 1e-7, "variance", 1e-12)
    end
    -- new hyperparameters: a new factor, and the predictions follow
    m.noise = 0.5
    local _, var2 = m:predict(lt.tensor(S))
    assert.is_false(rawequal(L, m.chol))
    assert.is_true(var2[1] > var[1])
  end)

  it("keeps no factor for structures with their own solves, or above max_cholesky_size", function()
    local P = ref.scattered(40, 2, 5, 4)
    local y = ref.sine_targets(P)
    local m = gp.exact{x = lt.tensor(P), y = lt.tensor(y), noise = 0.05,
                       kernel = gp.kernels.rbf{lengthscale = 0.8}, structure = "kernel"}
    local exact_mean, exact_var = m:predict(lt.tensor(P))
    local m2 = gp.exact{x = lt.tensor(P), y = lt.tensor(y), noise = 0.05,
                        kernel = gp.kernels.rbf{lengthscale = 0.8}, structure = "kernel"}
    local it_mean, it_var = lt.with_settings({max_cholesky_size = 10}, function()
      return m2:predict(lt.tensor(P))
    end)
    assert.is_nil(m2.chol)
    assert.is_true((it_mean - exact_mean):norm() < 1e-4 * exact_mean:norm())
    assert.is_true((it_var - exact_var):abs():max() < 1e-4)
  end)
end)

describe("gp.exact prediction on the iterative path", function()
  it("gives SKI's variances from block solves over the test points, in its structure", function()
    local P = ref.scattered(300, 1, 21, 10)
    local y = ref.sine_targets(P)
    local S = ref.scattered(23, 1, 5, 9, 0.5)
    local m = gp.exact{x = lt.tensor(P), y = lt.tensor(y), noise = 0.05, mean = "zero",
                       kernel = gp.kernels.rbf{lengthscale = 1.3}, structure = "ski", grid = 60}
    local cov = m:covariance()
    -- the plain-Lua reference on SKI's own matrices (dense forms)
    local K = cov.K:dense():totable()
    local Ks = cov.cross(S):dense():totable()
    -- the cross-covariance's dense form (W*·K_grid·Wᵀ from its smaller side)
    -- against its products with the unit vectors (Wᵀ·E, K_grid, W*)
    local E = lt.zeros(#P, #P)
    for i = 1, #P do E:set(i, i, 1) end
    local Kp = (cov.cross(S) * E):totable()
    for s = 1, #S do
      for i = 1, #P do ref.close(Ks[s][i], Kp[s][i], 1e-12, "cross", 1e-14) end
    end
    for i = 1, #P do K[i][i] = K[i][i] + 0.05 end
    local V = ref.solve(K, ref.transpose(Ks)) -- n × n*: one elimination
    local explained = {}
    for s = 1, #S do
      explained[s] = 0
      for i = 1, #P do explained[s] = explained[s] + Ks[s][i] * V[i][s] end
    end
    local prior = gp.structure.prior_variance(m.kernel, S)
    m.solve_block_doubles = 5 * #P -- blocks of 5 test points: 5 solves
    local _, var, _ = lt.with_settings({max_cholesky_size = 100}, function()
      return m:predict(lt.tensor(S))
    end)
    for s = 1, #S do
      ref.close(var[s], prior[s] - explained[s], 1e-5, "variance " .. s, 1e-9)
    end
    -- the exact path (SKI has no shared factor: its dense form's own solve)
    local _, evar = m:predict(lt.tensor(S))
    assert.is_nil(m.chol)
    for s = 1, #S do ref.close(evar[s], prior[s] - explained[s], 1e-8, "exact " .. s, 1e-12) end
  end)
end)
