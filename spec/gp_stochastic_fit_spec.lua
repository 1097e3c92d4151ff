-- Fitting a stochastic MLL (issue 25): during a fit the probe vectors are
-- fixed (one seed drawn before it), so the objective is a deterministic
-- function of the hyperparameters; L-BFGS then searches by backtracking on
-- the value; the fit's result says so. On the exact path nothing changes.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ref = require "support.ref"

local function model(n)
  local P = ref.scattered(n, 2, 17, 4)
  return gp.exact{x = lt.tensor(P), y = lt.tensor(ref.sine_targets(P)), noise = 0.1,
                  kernel = gp.kernels.rbf{lengthscale = 0.5}, structure = "kernel"}
end

local function stochastic(fn)
  return lt.with_settings({max_cholesky_size = 50}, fn)
end

describe("gp fit on a stochastic MLL", function()
  it("fixes the probes, says so, and improves the exact MLL", function()
    local m = model(300)
    local before = m:mll()
    lt.manual_seed(4)
    local res = stochastic(function() return m:fit{max_iter = 8} end)
    assert.is_true(res.stochastic)
    assert.equal("fixed", res.probes)
    assert.equal("backtracking", res.line_search)
    assert.is_number(res.probe_seed)
    -- the reported MLL is the fixed-probe objective at the result
    local again = stochastic(function()
      lt.manual_seed(res.probe_seed)
      return (m:mll_and_grad())
    end)
    assert.equal(res.mll, again)
    -- and the exact MLL (one Cholesky) went up
    assert.is_true(m:mll() > before + 1, m:mll() .. " vs " .. before)
  end)

  it("is deterministic given the generator's state, and leaves it independent of the fit", function()
    local function run(iters)
      local m = model(200)
      lt.manual_seed(9)
      local res = stochastic(function() return m:fit{max_iter = iters} end)
      return m:get_vector(), res, lt.rand({1})[1]
    end
    local v1, r1, after1 = run(4)
    local v2, r2, after2 = run(4)
    for i = 1, #v1 do assert.equal(v1[i], v2[i]) end
    assert.equal(r1.mll, r2.mll)
    -- fewer iterations (fewer evaluations): the same stream afterwards
    local _, r3, after3 = run(1)
    assert.is_true(r3.evaluations < r1.evaluations)
    assert.equal(after1, after2)
    assert.equal(after1, after3)
  end)

  it("draws fresh probes with fixed_probes = false, and rejects a non-boolean", function()
    local m = model(200)
    lt.manual_seed(2)
    local res = stochastic(function() return m:fit{max_iter = 2, fixed_probes = false} end)
    assert.equal("fresh", res.probes)
    assert.is_nil(res.probe_seed)
    assert.is_nil(res.line_search)
    local ok, err = pcall(function() return m:fit{fixed_probes = 1} end)
    assert.is_false(ok)
    assert.truthy(err:find("lazytensor: gp: fit: fixed_probes must be a boolean", 1, true))
  end)

  it("leaves the exact path's fit as it was", function()
    local m = model(60)
    local res = m:fit{max_iter = 20}
    assert.is_false(res.stochastic)
    assert.is_nil(res.probes)
    assert.is_nil(res.line_search)
    assert.is_true(res.converged, tostring(res.reason))
  end)
end)
