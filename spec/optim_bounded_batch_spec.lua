-- optim_bounded_batch.lbfgsb: several bounded L-BFGS runs evaluated
-- together. Each run must be exactly optim_bounded.lbfgsb's run from the
-- same start (the same points, values, iterations and stopping reason: the
-- runs share only the calls to f), f is called once a round for the runs
-- still going, and bad input is refused as lbfgsb refuses it.
local ob = require "lazytensor.optim_bounded"
local obb = require "lazytensor.optim_bounded_batch"

-- Hartmann-6 (minimum −3.32237 at an interior point of [0, 1]⁶) and its
-- gradient, written out here.
local A = {{10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14}, {3, 3.5, 1.7, 10, 17, 8},
           {17, 8, 0.05, 10, 0.1, 14}}
local P = {{1312, 1696, 5569, 124, 8283, 5886}, {2329, 4135, 8307, 3736, 1004, 9991},
           {2348, 1451, 3522, 2883, 3047, 6650}, {4047, 8828, 8732, 5743, 1091, 381}}
local ALPHA = {1.0, 1.2, 3.0, 3.2}

local function hartmann6(x)
  local f, g = 0, {0, 0, 0, 0, 0, 0}
  for i = 1, 4 do
    local s = 0
    for j = 1, 6 do
      local d = x[j] - P[i][j] * 1e-4
      s = s + A[i][j] * d * d
    end
    local e = ALPHA[i] * math.exp(-s)
    f = f - e
    for j = 1, 6 do g[j] = g[j] + 2 * e * A[i][j] * (x[j] - P[i][j] * 1e-4) end
  end
  return f, g
end

-- f of a list of points, counting the calls and the points asked for.
local function batch_of(fn)
  local log = {calls = 0, sizes = {}}
  local function f(points)
    log.calls = log.calls + 1
    log.sizes[#log.sizes + 1] = #points
    local values, grads = {}, {}
    for k, p in ipairs(points) do values[k], grads[k] = fn(p) end
    return values, grads
  end
  return f, log
end

local function starts(count, seed, lo, hi)
  local s = seed
  local out = {}
  for k = 1, count do
    local p = {}
    for j = 1, 6 do
      s = (s * 16807) % 2147483647
      p[j] = lo + (hi - lo) * s / 2147483647
    end
    out[k] = p
  end
  return out
end

local function fails(pattern, fn)
  local ok, err = pcall(fn)
  assert.is_false(ok)
  assert.is_truthy(tostring(err):find(pattern, 1, true), tostring(err))
end

describe("optim_bounded_batch.lbfgsb", function()
  local lo, hi = {0.3, 0.3, 0.3, 0.3, 0.3, 0.3}, {0.8, 0.8, 0.8, 0.8, 0.8, 0.8}
  local opts = {max_iter = 2000, ftol = 2.2e-9, pgtol = 1e-5}

  it("runs each start exactly as lbfgsb does, one call of f a round", function()
    local x0s = starts(12, 5, 0.2, 0.7) -- some outside the box: clipped, as lbfgsb clips
    local f, log = batch_of(hartmann6)
    local xs, values, infos = obb.lbfgsb(f, x0s, lo, hi, opts)
    local most, reasons = 0, {}
    for k, x0 in ipairs(x0s) do
      local x, v, info = ob.lbfgsb(hartmann6, x0, lo, hi, opts)
      assert.are.equal(v, values[k], "value of run " .. k)
      for i = 1, 6 do assert.are.equal(x[i], xs[k][i], "run " .. k) end
      assert.are.equal(info.iterations, infos[k].iterations, "run " .. k)
      assert.are.equal(info.evaluations, infos[k].evaluations, "run " .. k)
      assert.are.equal(info.reason, infos[k].reason, "run " .. k)
      assert.are.equal(info.converged, infos[k].converged, "run " .. k)
      most = math.max(most, info.evaluations)
      reasons[info.reason] = true
    end
    assert.is_true(reasons.pgtol and reasons.ftol) -- both stopping rules were met
    -- one call a round: as many as the longest run's evaluations, and the
    -- rounds ask only for the runs still going
    assert.are.equal(most, log.calls)
    assert.are.equal(12, log.sizes[1])
    assert.is_true(log.sizes[#log.sizes] < 12)
  end)

  it("maximises, and a start that already meets pgtol is not evaluated again", function()
    local function negated(x)
      local v, g = hartmann6(x)
      for i = 1, 6 do g[i] = -g[i] end
      return -v, g
    end
    local x0s = starts(3, 11, 0.3, 0.8)
    local xs, values = obb.lbfgsb((batch_of(negated)), x0s, lo, hi,
                                  {maximize = true, pgtol = 1e-5})
    for k, x0 in ipairs(x0s) do
      local x, v = ob.lbfgsb(negated, x0, lo, hi, {maximize = true, pgtol = 1e-5})
      assert.are.equal(v, values[k])
      assert.are.same(x, xs[k])
    end
    -- from the first run's end point, that run stops at once (pgtol)
    local again = {xs[1], x0s[2]}
    local f, log = batch_of(negated)
    local _, _, infos = obb.lbfgsb(f, again, lo, hi, {maximize = true, pgtol = 1e-5})
    assert.are.equal("pgtol", infos[1].reason)
    assert.are.equal(0, infos[1].iterations)
    assert.are.equal(1, infos[1].evaluations)
    for c = 2, log.calls do assert.are.equal(1, log.sizes[c]) end
  end)

  it("refuses bad input as lbfgsb does", function()
    local f = batch_of(hartmann6)
    fails("lazytensor: lbfgsb: x0s must be a list of one or more points",
          function() obb.lbfgsb(f, {}, lo, hi) end)
    fails("lazytensor: lbfgsb: x0s[2] must be an array of 6 numbers",
          function() obb.lbfgsb(f, {{0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, {0.5}}, lo, hi) end)
    fails("lazytensor: lbfgsb: lo[1] = 0.8 must be below hi[1] = 0.3",
          function() obb.lbfgsb(f, starts(1, 3, 0.3, 0.8), hi, lo) end)
    fails("lazytensor: lbfgsb: a batch of runs takes no callback",
          function() obb.lbfgsb(f, starts(1, 3, 0.3, 0.8), lo, hi, {callback = print}) end)
    fails("lazytensor: lbfgsb: unknown option 'tol'",
          function() obb.lbfgsb(f, starts(1, 3, 0.3, 0.8), lo, hi, {tol = 1}) end)
    fails("lazytensor: lbfgsb: f must return a list of 2 values and a list of 2 gradients",
          function() obb.lbfgsb(function() return {1}, {{}} end, starts(2, 3, 0.3, 0.8), lo, hi) end)
    fails("lazytensor: lbfgsb: f(x0s[1]) or its gradient is not finite", function()
      obb.lbfgsb(function(points)
        local v, g = {}, {}
        for k = 1, #points do v[k], g[k] = 0 / 0, {0, 0, 0, 0, 0, 0} end
        return v, g
      end, starts(1, 3, 0.3, 0.8), lo, hi)
    end)
  end)
end)
