--- Several bound-constrained L-BFGS runs advanced together, one evaluation
-- of all their trial points at a time.
--
-- Each run is optim_bounded.lbfgsb's (the same held coordinates, two-loop
-- direction, backtracking Armijo search along the projected path, steepest
-- descent when the quasi-Newton path fails, and the same stopping tests),
-- with a history of its own: the runs share only the calls to f. That is
-- what a multi-start of a pointwise function wants (bo.optimize: one
-- acquisition value per start). Summed into one L-BFGS over all the starts'
-- coordinates, the starts share one curvature scaling and one line search,
-- and the run goes on while the slowest start moves: on an LogEI of
-- Hartmann-6 data, ten starts took 40 iterations as one problem and at
-- most 18 each on their own.
--
-- optim_bounded_batch.lbfgsb(f, x0s, lo, hi [, opts]) → xs, values, infos
--   f(points) returns values, grads for a list of points (each an array of
--   #lo numbers): a list of numbers and a list of arrays, one each. Every
--   call holds the trial points of the runs still going, in run order.
--   x0s: a list of starting points (each clipped into the box); lo, hi as
--   lbfgsb's, shared by the runs.
--   opts: as lbfgsb's (maximize, history, max_iter, max_eval per run,
--   pgtol, ftol, c1, max_ls), without callback.
--   Returns per run (in x0s' order) the point, its value and an info table
--   as lbfgsb's (iterations, evaluations, converged, reason, pgnorm).
local optim_bounded = require "lazytensor.optim_bounded"

local optim_bounded_batch = {}

local P = optim_bounded.pieces

local function fail(fmt, ...) error("lazytensor: lbfgsb: " .. string.format(fmt, ...), 0) end

-- A run's next trial point on its current search path, or none: the
-- search's length halves until the projected path descends to first order.
-- Returns true with run.trial set, or false when the path gives none.
local function path_trial(run, lo, hi, o)
  while run.tries < o.max_ls do
    local xa = P.projected_step(run.x, run.alpha, run.d, lo, hi)
    local decrease = 0
    for i = 1, #xa do decrease = decrease + run.g[i] * (xa[i] - run.x[i]) end
    if decrease < 0 then
      run.trial, run.decrease = xa, decrease
      return true
    end
    if decrease == 0 and run.alpha < 1e-20 then return false end
    run.alpha = run.alpha * 0.5
    run.tries = run.tries + 1
  end
  return false
end

-- Starts a search along d from alpha.
local function start_search(run, d, alpha)
  run.d, run.alpha, run.tries = d, alpha, 0
end

-- After a failed quasi-Newton search, the projected steepest-descent path
-- (memory dropped); after a failed steepest search, the run stops: ftol at
-- the rounding floor, else line_search (lbfgsb's rule).
local function search_failed(run, lo, hi, o)
  if not run.steepest then
    run.steepest, run.hist = true, {}
    local d = P.steepest(run.g, run.fixed)
    start_search(run, d, math.min(1, 1 / math.max(P.inf_norm(d), 1e-300)))
    return
  end
  local promised = 0
  for i = 1, #run.x do
    promised = promised + run.g[i] * (run.x[i] - P.clip(run.x[i] - run.g[i], lo[i], hi[i]))
  end
  run.reason = promised <= o.ftol * math.max(1, math.abs(run.f)) and "ftol" or "line_search"
end

-- Begins an iteration from the run's current point.
local function begin_iteration(run, lo, hi, o)
  if run.iter >= o.max_iter then
    run.reason = "max_iter"
    return
  end
  run.fixed = P.held(run.x, run.g, lo, hi)
  run.steepest = false
  local d = P.direction(run.g, run.fixed, run.hist)
  local first = #run.hist == 0 and math.min(1, 1 / math.max(P.inf_norm(d), 1e-300)) or 1
  start_search(run, d, first)
  if P.dot(d, run.g) >= 0 then search_failed(run, lo, hi, o) end
end

-- Gives each running run a trial point (stopping the ones whose paths give
-- none); returns the runs to evaluate, in order.
local function trials(runs, lo, hi, o)
  local pending = {}
  for _, run in ipairs(runs) do
    while not run.reason and not run.trial do
      if run.evaluations >= o.max_eval then
        run.reason = "max_eval"
      elseif not run.d then
        begin_iteration(run, lo, hi, o)
      elseif not path_trial(run, lo, hi, o) then
        search_failed(run, lo, hi, o)
      end
    end
    if run.trial then pending[#pending + 1] = run end
  end
  return pending
end

-- Takes a run's accepted step and tests lbfgsb's stopping rules.
local function accept(run, v, ga, lo, hi, o)
  local xn = run.trial
  local s, y = {}, {}
  for i = 1, #xn do s[i], y[i] = xn[i] - run.x[i], ga[i] - run.g[i] end
  P.push_pair(run.hist, s, y, o.history)
  local f_old = run.f
  run.x, run.f, run.g, run.d = xn, v, ga, nil
  run.iter = run.iter + 1
  run.pg = P.projected_gradient_norm(run.x, run.g, lo, hi)
  if run.pg <= o.pgtol then
    run.reason = "pgtol"
  elseif math.abs(f_old - v) <= o.ftol * math.max(1, math.abs(f_old), math.abs(v)) then
    run.reason = "ftol"
  end
end

-- f at the points, in the minimising sign, checked: values, grads, oks.
local function evaluate(f, points, n, sign)
  local values, grads = f(points)
  if type(values) ~= "table" or type(grads) ~= "table" or #values ~= #points
     or #grads ~= #points then
    fail("f must return a list of %d values and a list of %d gradients", #points, #points)
  end
  local vs, gs, oks = {}, {}, {}
  for k = 1, #points do
    local v, g = values[k], grads[k]
    if type(v) ~= "number" or type(g) ~= "table" or #g ~= n then
      fail("f's result %d must be a number and an array of %d numbers", k, n)
    end
    local ok, gk = P.is_finite(v), {}
    for i = 1, n do
      if type(g[i]) ~= "number" then fail("gradient %d, entry %d is a %s", k, i, type(g[i])) end
      gk[i] = sign * g[i]
      ok = ok and P.is_finite(gk[i])
    end
    vs[k], gs[k], oks[k] = sign * v, gk, ok
  end
  return vs, gs, oks
end

local function check_start(x0s, lo, hi)
  if type(x0s) ~= "table" or #x0s == 0 then fail("x0s must be a list of one or more points") end
  P.check_array("lo", lo)
  P.check_array("hi", hi, #lo)
  for i = 1, #lo do
    if lo[i] >= hi[i] then fail("lo[%d] = %s must be below hi[%d] = %s", i, lo[i], i, hi[i]) end
  end
  for k, x0 in ipairs(x0s) do P.check_array("x0s[" .. k .. "]", x0, #lo) end
end

--- The runs from x0s: see the header.
function optim_bounded_batch.lbfgsb(f, x0s, lo, hi, opts)
  if type(f) ~= "function" and not (getmetatable(f) or {}).__call then
    fail("f must be a function, got %s", type(f))
  end
  if type(opts) == "table" and opts.callback ~= nil then
    fail("a batch of runs takes no callback")
  end
  check_start(x0s, lo, hi)
  local o = P.options(opts)
  local n = #lo
  local runs, points = {}, {}
  for k, x0 in ipairs(x0s) do
    local x = {}
    for i = 1, n do x[i] = P.clip(x0[i], lo[i], hi[i]) end
    runs[k], points[k] = {x = x, hist = {}, iter = 0, evaluations = 1}, x
  end
  local vs, gs, oks = evaluate(f, points, n, o.sign)
  for k, run in ipairs(runs) do
    if not oks[k] then fail("f(x0s[%d]) or its gradient is not finite", k) end
    run.f, run.g = vs[k], gs[k]
    run.pg = P.projected_gradient_norm(run.x, run.g, lo, hi)
    if run.pg <= o.pgtol then run.reason = "pgtol" end
  end
  while true do
    local pending = trials(runs, lo, hi, o)
    if #pending == 0 then break end
    points = {}
    for k, run in ipairs(pending) do points[k] = run.trial end
    vs, gs, oks = evaluate(f, points, n, o.sign)
    for k, run in ipairs(pending) do
      run.evaluations = run.evaluations + 1
      if oks[k] and vs[k] <= run.f + o.c1 * run.decrease then
        accept(run, vs[k], gs[k], lo, hi, o)
      else -- a shorter step on the same path next round
        run.alpha, run.tries = run.alpha * 0.5, run.tries + 1
      end
      run.trial = nil
    end
  end
  local xs, values, infos = {}, {}, {}
  for k, run in ipairs(runs) do
    xs[k], values[k] = P.copy(run.x), o.sign * run.f
    infos[k] = {iterations = run.iter, evaluations = run.evaluations, reason = run.reason,
                pgnorm = run.pg, converged = run.reason == "pgtol" or run.reason == "ftol"}
  end
  return xs, values, infos
end

return optim_bounded_batch
