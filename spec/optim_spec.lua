-- Specs for lazytensor.optim: known minimisers (Rosenbrock's all-ones point,
-- a quadratic whose minimiser is fixed first and its linear term derived from
-- it), the maximize flag, callbacks, and steps into non-finite regions.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
local optim = require "lazytensor.optim"

-- Chained Rosenbrock function in n dimensions and its gradient.
local function rosenbrock(x)
  local n, v, g = #x, 0, {}
  for i = 1, n do g[i] = 0 end
  for i = 1, n - 1 do
    local a, b = x[i + 1] - x[i] ^ 2, 1 - x[i]
    v = v + 100 * a * a + b * b
    g[i] = g[i] - 400 * x[i] * a - 2 * b
    g[i + 1] = g[i + 1] + 200 * a
  end
  return v, g
end

-- f(x) = 1/2 x'Ax - b'x with A SPD; b = A xstar so that xstar is the minimiser.
local A = {
  { 4, 1, 0, 0.5 },
  { 1, 3, 0.2, 0 },
  { 0, 0.2, 2, 0.3 },
  { 0.5, 0, 0.3, 10 },
}
local xstar = { 1.5, -2, 0.25, 3 }
local b = {}
for i = 1, 4 do
  b[i] = 0
  for j = 1, 4 do b[i] = b[i] + A[i][j] * xstar[j] end
end
local function quadratic(x)
  local v, g = 0, {}
  for i = 1, 4 do
    local ax = 0
    for j = 1, 4 do ax = ax + A[i][j] * x[j] end
    g[i] = ax - b[i]
    v = v + 0.5 * x[i] * ax - b[i] * x[i]
  end
  return v, g
end
-- The minimum value is -1/2 b'xstar.
local function quadratic_min()
  local s = 0
  for i = 1, 4 do s = s + b[i] * xstar[i] end
  return -0.5 * s
end

local function assert_all_near(expected, actual, tol)
  assert.equal(#expected, #actual)
  for i = 1, #expected do
    assert.near(expected[i], actual[i], tol, "coordinate " .. i)
  end
end

local function ones(n)
  local t = {}
  for i = 1, n do t[i] = 1 end
  return t
end

describe("optim.lbfgs", function()
  it("minimises 2-d Rosenbrock from (-1.2, 1) to (1, 1)", function()
    local x0 = { -1.2, 1 }
    local x, v, info = optim.lbfgs(rosenbrock, x0)
    assert_all_near({ 1, 1 }, x, 1e-5)
    assert.is_true(v < 1e-10)
    assert.is_true(info.converged)
    assert.is_true(info.iterations > 5 and info.iterations < 200)
    assert.is_true(info.evaluations >= info.iterations)
    assert.same({ -1.2, 1 }, x0) -- the start is not modified
  end)

  it("minimises 10-d Rosenbrock from the origin and from alternating (-1.2, 1)", function()
    local x = optim.lbfgs(rosenbrock, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 })
    assert_all_near(ones(10), x, 1e-4)
    local start = {}
    for i = 1, 10 do start[i] = (i % 2 == 1) and -1.2 or 1 end
    local x2, v2, info2 = optim.lbfgs(rosenbrock, start, { gtol = 1e-8 })
    assert_all_near(ones(10), x2, 1e-4)
    assert.is_true(v2 < 1e-8)
    assert.is_true(info2.converged)
  end)

  it("finds the known minimiser of a convex quadratic, even with history 1", function()
    for _, m in ipairs({ 1, 3, 10 }) do
      local x, v, info = optim.lbfgs(quadratic, { 0, 0, 0, 0 }, { history = m, ftol = 1e-15 })
      assert_all_near(xstar, x, 1e-6)
      assert.near(quadratic_min(), v, 1e-10)
      assert.is_true(info.gradnorm < 1e-5)
      -- Near the minimum f stops changing in floating point, so the run may
      -- also end because no step lowers f any further.
      assert.is_truthy(info.converged or info.reason == "line_search")
    end
  end)

  it("maximises when asked, returning the value in the caller's sign", function()
    local function neg_quadratic(x)
      local v, g = quadratic(x)
      for i = 1, #g do g[i] = -g[i] end
      return -v, g
    end
    local x, v, info = optim.lbfgs(neg_quadratic, { 5, 5, 5, 5 }, { maximize = true })
    assert_all_near(xstar, x, 1e-6)
    assert.near(-quadratic_min(), v, 1e-9)
    assert.is_true(info.converged)
  end)

  it("calls the callback with increasing iterations and decreasing values", function()
    local iters, values = {}, {}
    local _, v, info = optim.lbfgs(rosenbrock, { -1.2, 1 }, {
      callback = function(iter, value, x, gradnorm)
        assert.equal(2, #x)
        assert.is_number(gradnorm)
        iters[#iters + 1], values[#values + 1] = iter, value
      end,
    })
    assert.equal(info.iterations, #iters)
    for i = 1, #iters do assert.equal(i, iters[i]) end
    for i = 2, #values do assert.is_true(values[i] <= values[i - 1]) end
    assert.equal(v, values[#values])
  end)

  it("stops when the callback returns true", function()
    local _, _, info = optim.lbfgs(rosenbrock, { -1.2, 1 }, {
      callback = function(iter) return iter == 3 end,
    })
    assert.equal(3, info.iterations)
    assert.equal("callback", info.reason)
    assert.is_false(info.converged)
  end)

  it("reports max_iter when it runs out of iterations", function()
    local _, _, info = optim.lbfgs(rosenbrock, { -1.2, 1 }, { max_iter = 4 })
    assert.equal(4, info.iterations)
    assert.equal("max_iter", info.reason)
    assert.is_false(info.converged)
  end)

  it("reports max_eval when it runs out of evaluations (checked between iterations)", function()
    local _, _, info = optim.lbfgs(rosenbrock, { -1.2, 1 }, { max_eval = 10 })
    assert.equal("max_eval", info.reason)
    assert.is_true(info.evaluations >= 10 and info.evaluations <= 10 + 2 * 25)
  end)

  it("returns at once when x0 is already stationary", function()
    local x, _, info = optim.lbfgs(quadratic, xstar)
    assert.same(xstar, x)
    assert.equal(0, info.iterations)
    assert.equal("gtol", info.reason)
  end)

  it("steps back from points where f is NaN or infinite", function()
    -- f is (x - 1)^2 summed, but undefined (NaN) beyond 1.3 and infinite below
    -- -1: the first unit-length step from 0.4 lands at 1.4, in the NaN region.
    local bad = 0
    local function fenced(x)
      local v, g = 0, {}
      for i = 1, #x do
        if x[i] > 1.3 then bad = bad + 1 return 0 / 0, { 0 / 0, 0 / 0 } end
        if x[i] < -1 then bad = bad + 1 return math.huge, { 0, 0 } end
        v, g[i] = v + (x[i] - 1) ^ 2, 2 * (x[i] - 1)
      end
      return v, g
    end
    local x, v, info = optim.lbfgs(fenced, { 0.4, 0.4 })
    assert.is_true(bad >= 1)
    assert_all_near({ 1, 1 }, x, 1e-6)
    assert.is_true(v == v and v < 1e-10)
    assert.is_true(info.converged)
  end)

  it("reports a failed line search rather than accepting a non-finite point", function()
    -- Every point except x0 is NaN: no step can be taken.
    local function only_x0(x)
      if x[1] == 2 then return 4, { 4 } end
      return 0 / 0, { 0 / 0 }
    end
    local x, v, info = optim.lbfgs(only_x0, { 2 })
    assert.same({ 2 }, x)
    assert.equal(4, v)
    assert.equal("line_search", info.reason)
    assert.is_false(info.converged)
  end)

  it("calls a failed search converged (ftol) only when the step promised less than ftol", function()
    -- f = 1000 + 1e-16 (x - 5)^2 is 1000 in floating point everywhere near
    -- x0: no step lowers it, and the step promised a decrease of ~1e-29.
    local function flat(x)
      local d = x[1] - 5
      return 1e3 + 1e-16 * d * d, { 2e-16 * d }
    end
    local _, _, info = optim.lbfgs(flat, { 0 }, { gtol = 0, line_search = "backtracking" })
    assert.equal("ftol", info.reason)
    assert.is_true(info.converged)
    -- with ftol = 0 nothing is small enough: the search's failure is reported
    _, _, info = optim.lbfgs(flat, { 0 }, { gtol = 0, ftol = 0, line_search = "backtracking" })
    assert.equal("line_search", info.reason)
    assert.is_false(info.converged)
  end)

  it("searches by backtracking on the value when asked (line_search)", function()
    local values = {}
    local x, v, info = optim.lbfgs(rosenbrock, { -1.2, 1 }, {
      line_search = "backtracking", max_iter = 500,
      callback = function(_, fx) values[#values + 1] = fx end,
    })
    assert.is_true(info.converged, info.reason)
    assert_all_near({ 1, 1 }, x, 1e-4)
    assert.is_true(v < 1e-8)
    -- every accepted step lowers f
    for i = 2, #values do assert.is_true(values[i] < values[i - 1]) end
    local xq = optim.lbfgs(quadratic, { 0, 0, 0, 0 }, { line_search = "backtracking" })
    assert_all_near(xstar, xq, 1e-5)
  end)

  it("raises lazytensor errors on bad input", function()
    local function err_of(fn)
      local ok, e = pcall(fn)
      assert.is_false(ok)
      return e
    end
    assert.matches("^lazytensor: lbfgs: f%(x0%)",
      err_of(function() optim.lbfgs(function() return 0 / 0, { 0 } end, { 1 }) end))
    assert.matches("^lazytensor: lbfgs: f must return value, gradient",
      err_of(function() optim.lbfgs(function() return 1, { 0, 0 } end, { 1 }) end))
    assert.matches("^lazytensor: lbfgs: x0 must be",
      err_of(function() optim.lbfgs(rosenbrock, {}) end))
    assert.matches("^lazytensor: lbfgs: f must be a function",
      err_of(function() optim.lbfgs(42, { 1 }) end))
    assert.matches("^lazytensor: lbfgs: opts.history must be a positive integer, got 0",
      err_of(function() optim.lbfgs(rosenbrock, { 1, 1 }, { history = 0 }) end))
    assert.matches("^lazytensor: lbfgs: opts.c1 must be smaller than opts.c2",
      err_of(function() optim.lbfgs(rosenbrock, { 1, 1 }, { c1 = 0.5, c2 = 0.4 }) end))
    assert.matches("^lazytensor: lbfgs: opts.line_search must be 'strong_wolfe' or 'backtracking'",
      err_of(function() optim.lbfgs(rosenbrock, { 1, 1 }, { line_search = "wolfe" }) end))
    assert.matches("^lazytensor: adam: opts.lr must be a number > 0",
      err_of(function() optim.adam(rosenbrock, { 1, 1 }, { lr = -1 }) end))
    assert.matches("^lazytensor: adam: opts.callback must be a function",
      err_of(function() optim.adam(rosenbrock, { 1, 1 }, { callback = 3 }) end))
    assert.matches("^lazytensor: adam: x0%[2%] is not a finite number",
      err_of(function() optim.adam(rosenbrock, { 1, 0 / 0 }) end))
  end)
end)

describe("optim.adam", function()
  it("finds the known minimiser of a convex quadratic", function()
    local x, v, info = optim.adam(quadratic, { 0, 0, 0, 0 }, { lr = 0.05, max_iter = 5000 })
    assert_all_near(xstar, x, 1e-3)
    assert.near(quadratic_min(), v, 1e-5)
    -- Either the budget ran out or the gradient became exactly zero.
    assert.is_true(info.iterations <= 5000)
    assert.is_truthy(info.reason == "max_iter" or info.reason == "gtol")
  end)

  it("reaches (1, 1) on 2-d Rosenbrock", function()
    local x = optim.adam(rosenbrock, { -1.2, 1 }, { lr = 0.02, max_iter = 20000 })
    assert_all_near({ 1, 1 }, x, 1e-3)
  end)

  it("maximises when asked and stops on gtol", function()
    -- Concave: -(x-2)^2 - 3(y+1)^2 + 7, maximum 7 at (2, -1).
    local function concave(x)
      return -(x[1] - 2) ^ 2 - 3 * (x[2] + 1) ^ 2 + 7, { -2 * (x[1] - 2), -6 * (x[2] + 1) }
    end
    local x, v, info = optim.adam(concave, { 0, 0 },
      { maximize = true, lr = 0.05, max_iter = 20000, gtol = 1e-6 })
    assert_all_near({ 2, -1 }, x, 1e-5)
    assert.near(7, v, 1e-9)
    assert.equal("gtol", info.reason)
    assert.is_true(info.converged)
  end)

  it("calls the callback with increasing iterations", function()
    local last = 0
    optim.adam(quadratic, { 0, 0, 0, 0 }, {
      max_iter = 50,
      callback = function(iter, value, x)
        assert.equal(last + 1, iter)
        assert.is_number(value)
        assert.equal(4, #x)
        last = iter
      end,
    })
    assert.equal(50, last)
  end)

  it("steps back and halves the learning rate where f is NaN", function()
    -- log-barrier: x - log(x) has its minimum at 1 and is NaN for x < 0.
    local bad = 0
    local function barrier(x)
      if x[1] <= 0 then bad = bad + 1 return 0 / 0, { 0 / 0 } end
      return x[1] - math.log(x[1]), { 1 - 1 / x[1] }
    end
    local x, v, info = optim.adam(barrier, { 3 }, { lr = 5, max_iter = 3000 })
    assert.is_true(bad >= 1)
    assert.is_true(info.lr < 5)
    assert.near(1, x[1], 1e-3)
    assert.near(1, v, 1e-6)
  end)
end)
