-- spec/mpi/gp_mpispec.lua — gp.exact{..., distributed = true} under mpirun:
-- the marginal log-likelihood and its gradient against the one-process
-- model (lt.kernel), and, through support.bits, the one-rank run's bits.
local support = require "mpi.support"
local lt = support.lt
local gp = require "lazytensor.gp"

-- n points in 2-d and targets from a smooth function plus noise
local function data(seed, n)
  local X = support.points(seed, n, 2)
  local y = (X:narrow(2, 1, 1) * 1.5):exp():reshape(n) * 0.1 + lt.randn(n) * 0.1
  return X, y
end

local function model(X, y, distributed)
  local k = gp.kernels.rbf{lengthscale = 0.9, variance = 1.2}
            + gp.kernels.matern52{lengthscale = 2, variance = 0.3}
  return gp.exact{x = X, y = y, kernel = k, noise = 0.05, distributed = distributed}
end

describe("gp.exact{distributed = true}", function()
  it("uses mpi.kernel operators for K", function()
    local X, y = data(11, 100)
    local m = model(X, y, true)
    assert.are.equal("kernel", m:covariance().kind)
    local K = m:covariance().K
    assert.are.equal("sum", lt.type(K))
    assert.is_truthy(m:explain():find("lt.kernel in C", 1, true))
  end)

  it("gives the exact (Cholesky) MLL and gradient of the one-process model", function()
    local X, y = data(12, 150)
    local v, g = model(X, y, true):mll_and_grad()
    local v0, g0 = model(X, y, false):mll_and_grad()
    assert.are.equal(v0, v)
    assert.are.equal(#g0, #g)
    for i = 1, #g0 do assert.is_true(math.abs(g[i] - g0[i]) <= 1e-10 * (1 + math.abs(g0[i]))) end
    support.bits("gp cholesky mll and grad", {v, lt.tensor(g)})
  end)

  it("gives the iterative MLL and gradient of the one-process model", function()
    lt.with_settings({max_cholesky_size = 100}, function()
      local X, y = data(13, 500)
      lt.manual_seed(99) -- the probes, alike on every rank and in both models
      local v, g = model(X, y, true):mll_and_grad()
      lt.manual_seed(99)
      local v0, g0 = model(X, y, false):mll_and_grad()
      -- the same probes and the same tolerances: the two differ by CG's
      -- rounding only
      assert.is_true(math.abs(v - v0) < 1e-6 * math.abs(v0))
      for i = 1, #g0 do
        assert.is_true(math.abs(g[i] - g0[i]) < 1e-5 * (1 + math.abs(g0[i])),
                       string.format("gradient %d: %.17g vs %.17g", i, g[i], g0[i]))
      end
      support.bits("gp iterative mll and grad", {v, lt.tensor(g)})
    end)
  end)

  it("fits like the one-process model", function()
    lt.with_settings({max_cholesky_size = 100}, function()
      local X, y = data(15, 300)
      lt.manual_seed(5)
      local m = model(X, y, true)
      m:fit{max_iter = 3}
      lt.manual_seed(5)
      local m0 = model(X, y, false)
      m0:fit{max_iter = 3}
      local v, v0 = m:get_vector(), m0:get_vector()
      for i = 1, #v0 do
        assert.is_true(math.abs(v[i] - v0[i]) < 1e-5 * (1 + math.abs(v0[i])),
                       string.format("parameter %d: %.17g vs %.17g", i, v[i], v0[i]))
      end
      support.bits("gp fit", v)
    end)
  end)

  it("refuses a structure other than kernel, and a product of kernels; takes a scale",
     function()
    local X, y = data(14, 50)
    local k = gp.kernels.rbf{lengthscale = 1}
    local m = gp.exact{x = X, y = y, kernel = k, distributed = true, structure = "dense"}
    assert.are.equal("lazytensor: gp: distributed = true needs the kernel structure, got "
                     .. "structure = 'dense'", support.error_of(m.mll, m))
    local prod = gp.exact{x = X, y = y, kernel = k * gp.kernels.matern12{lengthscale = 1},
                          distributed = true}
    -- a product would be a lazy Hadamard product over mpi.kernel leaves, whose
    -- rows every rank computes in full: refused rather than not distributed
    assert.is_truthy(support.error_of(prod.mll, prod):find(
      "distributed = true needs a sum of base kernels (scale allowed): a product of kernels",
      1, true))
    -- a scale is folded into the variance: the same model as one process's
    local scaled = gp.kernels.scale(gp.kernels.rbf{lengthscale = 1}, 2.5)
    local md = gp.exact{x = X, y = y, kernel = scaled, distributed = true}
    local m1 = gp.exact{x = X, y = y, kernel = scaled}
    assert.is_true(math.abs(md:mll() - m1:mll()) < 1e-9 * (1 + math.abs(m1:mll())))
  end)
end)
