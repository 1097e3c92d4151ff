-- gp.exact with x {b, n, d} and y {b, n} (API.md "Gaussian processes" and
-- "Batches"): b independent GPs, against the same GPs made one at a time.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local bc = require "support.batch_conformance"

local close = bc.close

describe("batched gp.exact", function()
  local b, n = 3, 25
  local X, Y
  before_each(function()
    lt.manual_seed(5)
    X = lt.rand(b, n, 2) * 4
    -- member i: sin of a different frequency, plus noise
    local rows = {}
    for i = 1, b do
      rows[i] = {}
      for j = 1, n do
        rows[i][j] = math.sin(i * X[i][j][1]) + 0.5 * math.cos(X[i][j][2]) + 0.05 * math.sin(7 * j)
      end
    end
    Y = lt.tensor(rows)
  end)
  local function kernel() return gp.kernels.rbf{lengthscale = 1} end
  local function alone(i) return gp.exact{x = X[i], y = Y[i], kernel = kernel(), noise = 0.1} end

  it("has the members' marginal log-likelihoods, from one batched call", function()
    local model = gp.exact{x = X, y = Y, kernel = kernel(), noise = 0.1}
    local mll, info = model:mll()
    assert.same({b}, mll:shape())
    assert.is_true(info.converged)
    for i = 1, b do close(mll[i], (alone(i):mll()), 1e-9, "member " .. i) end
    local total, grad = model:mll_and_grad()
    local want, count = 0, 0
    for i = 1, b do
      local v, g = alone(i):mll_and_grad()
      want = want + v
      for k = 1, #g do close(grad[count + k], g[k], 1e-9, ("member %d, gradient %d"):format(i, k)) end
      count = count + #g
    end
    assert.equal(count, #grad)
    close(total, want, 1e-9, "sum")
  end)

  it("fits every member's own hyperparameters at once", function()
    local model = gp.exact{x = X, y = Y, kernel = kernel(), noise = 0.1}
    local before = model:mll()
    local result = model:fit{max_iter = 60}
    assert.same({b}, result.mll:shape())
    for i = 1, b do
      local single = alone(i)
      single:fit{max_iter = 60}
      local fitted = model:member(i)
      assert.is_true(result.mll[i] > before[i], "member " .. i .. " improved")
      -- the same optimum as the member fitted alone
      close(result.mll[i], (single:mll()), 1e-4, "fitted mll, member " .. i)
      close(fitted.noise, single.noise, 1e-2, "noise, member " .. i)
    end
    -- hyperparameters are per member: the members' kernels are their own
    assert.are_not.equal(model:member(1).kernel, model:member(2).kernel)
    local v = model:get_vector()
    assert.is_true(v[1] ~= v[#v / b + 1], "members 1 and 2 share a lengthscale")
  end)

  it("predicts per member, at per-member or shared test points", function()
    local model = gp.exact{x = X, y = Y, kernel = kernel(), noise = 0.1}
    local Xs = lt.rand(b, 7, 2) * 4
    local mean, var = model:predict(Xs)
    assert.same({b, 7}, mean:shape())
    assert.same({b, 7}, var:shape())
    for i = 1, b do
      local mi, vi = alone(i):predict(Xs[i])
      close(mean[i], mi, 1e-10, "mean " .. i)
      close(var[i], vi, 1e-10, "variance " .. i)
    end
    local shared = lt.rand(5, 2) * 4
    local ms = model:predict(shared, {variance = false})
    close(ms[2], alone(2):predict(shared, {variance = false}), 1e-10, "shared points")
    local post = model:posterior(Xs)
    local lp = post:log_prob(mean)
    assert.same({b}, lp:shape())
    for i = 1, b do close(lp[i], alone(i):posterior(Xs[i]):log_prob(mean[i]), 1e-8, "posterior " .. i) end
  end)

  it("takes one noise per member, and refuses targets of the wrong shape", function()
    local model = gp.exact{x = X, y = Y, kernel = kernel(), noise = {0.1, 0.2, 0.3}}
    assert.equal(0.3, model:member(3).noise)
    local ok, err = pcall(gp.exact, {x = X, y = lt.randn(b, n + 1), kernel = kernel()})
    assert.is_false(ok)
    assert.matches("lazytensor: gp: exact: x is 3x25x2, so y must be 3x25", err, 1, true)
    ok, err = pcall(gp.exact, {x = X, y = Y, kernel = kernel(), noise = {0.1, 0.2}})
    assert.is_false(ok)
    assert.matches("noise: 2 values for 3 members", err, 1, true)
  end)
end)
