--- bo.optimize: maximise an acquisition over a box, as BoTorch's
-- optimize_acqf does: evaluate it at raw_samples random candidates inside
-- the bounds, start bounded L-BFGS (lazytensor.optim_bounded) from
-- `restarts` of them (the best and others drawn with Boltzmann weights, as
-- BoTorch's initialize_q_batch) with the gradient lt.grad gives with
-- respect to the candidates, and return the best point found.
--
-- bo.optimize(acq, bounds [, opts]) → x ({q, d} tensor), value (a number)
--   acq: a function of a {q, d} tensor of candidates returning its value
--   to maximise (one-element), or one of bo's analytic acquisitions (one
--   value per candidate, so q must be 1: their raw samples are evaluated
--   in one call).
--   bounds: a {2, d} tensor or {{lo...}, {hi...}}, lo < hi.
--   opts: q (1), restarts (10), raw_samples (512), seed (drawn from lt's
--   generator when absent), max_iter (2000), ftol (2.2e-9), pgtol (1e-5),
--   independent (false: the starts of an analytic acquisition as one
--   L-BFGS on the sum of their values, as BoTorch; true: as independent
--   runs evaluated together, below).
--   The L-BFGS stops as BoTorch's does (gen_candidates_scipy: SciPy's
--   L-BFGS-B with its default tolerances, maxiter 2000): when an iteration
--   lowers the value by at most ftol relative to it, or the projected
--   gradient's largest entry is at most pgtol.
local lt = require "lazytensor"
local acquisition = require "lazytensor.bo.acquisition"
local optim_bounded = require "lazytensor.optim_bounded"
local optim_bounded_batch = require "lazytensor.optim_bounded_batch"

local optimize = {}

local h = acquisition.helpers
local fail, is_finite, show = h.fail, h.is_finite, h.show

--- Bounds as lo, hi arrays of d numbers, checked.
function optimize.parse_bounds(what, bounds)
  if lt.is_tensor(bounds) then
    if lt.is_lazy(bounds) or bounds:dim() ~= 2 or bounds:size(1) ~= 2 then
      fail("%s: bounds must be a {2, d} tensor, got %s of shape {%s}", what, lt.type(bounds),
           table.concat(bounds:shape(), ", "))
    end
    bounds = bounds:totable()
  end
  if type(bounds) ~= "table" or #bounds ~= 2 or type(bounds[1]) ~= "table"
     or type(bounds[2]) ~= "table" then
    fail("%s: bounds must be a {2, d} tensor or {{lo...}, {hi...}}", what)
  end
  local lo, hi = bounds[1], bounds[2]
  if #lo == 0 or #lo ~= #hi then
    fail("%s: bounds' rows must have the same number (>= 1) of entries, got %d and %d", what,
         #lo, #hi)
  end
  local l, u = {}, {}
  for j = 1, #lo do
    if not is_finite(lo[j]) or not is_finite(hi[j]) then
      fail("%s: bounds of coordinate %d must be finite numbers, got %s and %s", what, j,
           show(lo[j]), show(hi[j]))
    end
    if lo[j] >= hi[j] then
      fail("%s: bounds of coordinate %d: lo = %s must be below hi = %s", what, j,
           show(lo[j]), show(hi[j]))
    end
    l[j], u[j] = lo[j], hi[j]
  end
  return l, u
end

--- count points drawn uniformly in the box from a stream: a Lua array of
-- coordinate arrays.
function optimize.uniform_points(stream, count, lo, hi)
  local pts = {}
  for i = 1, count do
    local p = {}
    for j = 1, #lo do
      p[j] = math.min(hi[j], lo[j] + stream:uniform() * (hi[j] - lo[j]))
    end
    pts[i] = p
  end
  return pts
end

local function count_option(what, opts, name, default)
  local v = opts[name]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= math.floor(v) or v < 1 then
    fail("%s: opts.%s must be a positive integer, got %s", what, name, show(v))
  end
  return v
end

-- The value of an acquisition's result: its one entry.
local function scalar(what, v)
  if type(v) == "number" then return v end
  if not lt.is_tensor(v) or v:numel() ~= 1 then
    fail("%s: the acquisition must return one value for a batch of candidates, got %s", what,
         lt.is_tensor(v) and ("a tensor of " .. v:numel() .. " values") or type(v))
  end
  return v:sum()
end

-- Flat array (q·d) ↔ {q, d} tensor.
local function to_tensor(flat, q, d)
  local rows = {}
  for i = 1, q do
    local r = {}
    for j = 1, d do r[j] = flat[(i - 1) * d + j] end
    rows[i] = r
  end
  return lt.tensor(rows)
end

local function flatten(rows)
  local flat = {}
  for _, r in ipairs(rows) do
    for _, v in ipairs(r) do flat[#flat + 1] = v end
  end
  return flat
end

-- Values at the raw candidates: a list {x = flat, value} per raw batch.
local function raw_values(what, acq, stream, o)
  local out = {}
  if acquisition.pointwise[acq] then
    local pts = optimize.uniform_points(stream, o.raw, o.lo, o.hi)
    local values = acq(lt.tensor(pts)):totable()
    for i, p in ipairs(pts) do out[i] = {x = p, value = values[i]} end
    return out
  end
  for i = 1, o.raw do
    local pts = optimize.uniform_points(stream, o.q, o.lo, o.hi)
    out[i] = {x = flatten(pts), value = scalar(what, acq(lt.tensor(pts)))}
  end
  return out
end

-- The index where the running sum of the weights passes u (the last
-- positive weight when rounding leaves u beyond their sum).
local function draw(weights, u)
  local last
  for k, w in ipairs(weights) do
    if w > 0 then
      if u <= w then return k end
      u, last = u - w, k
    end
  end
  return last
end

-- `count` starts among the raw candidates with finite values, as
-- BoTorch's initialize_q_batch chooses them: the best, then the others
-- drawn without replacement with weights exp(z), z the standardised value
-- — mostly good points, but spread over the modes rather than all around
-- the best one.
local function choose_starts(raw, count, stream)
  local finite, sum, sq = {}, 0, 0
  for _, r in ipairs(raw) do
    if is_finite(r.value) then
      finite[#finite + 1] = r
      sum, sq = sum + r.value, sq + r.value * r.value
    end
  end
  table.sort(finite, function(a, b) return a.value > b.value end)
  local m = #finite
  if m <= count then return finite end
  local mean = sum / m
  local sd = math.sqrt(math.max(sq / m - mean * mean, 0))
  local weights = {}
  for i, r in ipairs(finite) do
    weights[i] = sd > 0 and math.exp(math.min(50, (r.value - mean) / sd)) or 1
  end
  local starts, total = {finite[1]}, 0
  weights[1] = 0
  for i = 2, m do total = total + weights[i] end
  while #starts < count and total > 0 do
    local k = draw(weights, stream:uniform() * total)
    starts[#starts + 1] = finite[k]
    total = total - weights[k]
    weights[k] = 0
  end
  return starts
end

-- −acq and its gradient with respect to the flat candidates (lt.grad).
local function negated(what, acq, q, d)
  local df = lt.grad(function(X) return scalar(what, acq(X)) end)
  return function(flat)
    local g, v = df(to_tensor(flat, q, d))
    local gflat = flatten(g:totable())
    for i = 1, #gflat do gflat[i] = -gflat[i] end
    return -v, gflat
  end
end

-- SciPy's L-BFGS-B defaults (factr = 1e7 times the double epsilon, gtol)
-- and gen_candidates_scipy's maxiter: BoTorch's stopping rule.
local MAX_ITER, FTOL, PGTOL = 2000, 1e7 * 2.220446049250313e-16, 1e-5

local function tolerance_option(what, opts, name, default)
  local v = opts[name]
  if v == nil then return default end
  if not is_finite(v) or v < 0 then
    fail("%s: opts.%s must be a finite number >= 0, got %s", what, name, show(v))
  end
  return v
end

local function options(what, acq, bounds, opts)
  if type(acq) ~= "function" and not (getmetatable(acq) or {}).__call then
    fail("%s: acq must be a function of candidates, got %s", what, type(acq))
  end
  local lo, hi = optimize.parse_bounds(what, bounds)
  opts = h.check_options(what, opts, {"q", "restarts", "raw_samples", "seed", "max_iter",
                                      "ftol", "pgtol", "independent"})
  local o = {
    lo = lo, hi = hi, d = #lo,
    q = count_option(what, opts, "q", 1),
    restarts = count_option(what, opts, "restarts", 10),
    raw = count_option(what, opts, "raw_samples", 512),
    max_iter = count_option(what, opts, "max_iter", MAX_ITER),
    ftol = tolerance_option(what, opts, "ftol", FTOL),
    pgtol = tolerance_option(what, opts, "pgtol", PGTOL),
    seed = h.seed(what, opts.seed),
    independent = opts.independent,
  }
  if o.independent ~= nil and type(o.independent) ~= "boolean" then
    fail("%s: opts.independent must be true or false, got %s", what, show(o.independent))
  end
  if o.q > 1 and acquisition.pointwise[acq] then
    fail("%s: q = %d needs a batch acquisition (q_expected_improvement, ...): an analytic one "
         .. "values each candidate on its own", what, o.q)
  end
  return o
end

-- The box repeated for `copies` stacked points.
local function repeated_box(o, copies)
  local lo, hi = {}, {}
  for i = 1, copies do
    for j = 1, o.d do lo[(i - 1) * o.d + j], hi[(i - 1) * o.d + j] = o.lo[j], o.hi[j] end
  end
  return lo, hi
end

-- lbfgsb, or nil where f (or its gradient) is not finite at the start
-- (that start keeps its raw value); any other error is the acquisition's.
local function bounded_run(f, x0, lo, hi, o)
  local ok, x, v = pcall(optim_bounded.lbfgsb, f, x0, lo, hi,
                         {max_iter = o.max_iter, ftol = o.ftol, pgtol = o.pgtol})
  if ok then return x, v end
  if not tostring(x):find("gradient is not finite", 1, true) then error(x, 0) end
  return nil
end

-- Each start on its own: the best point found (or the best start).
local function separate_runs(what, acq, starts, o)
  local lo, hi = repeated_box(o, o.q)
  local f = negated(what, acq, o.q, o.d)
  local best = starts[1]
  for _, s in ipairs(starts) do
    local x, v = bounded_run(f, s.x, lo, hi, o)
    if x and -v > best.value then best = {x = x, value = -v} end
  end
  return best
end

-- An analytic acquisition values each row on its own, so all starts run as
-- one bounded L-BFGS on the sum of their values (BoTorch's batched
-- multi-start, the default): one posterior per evaluation instead of one
-- per start (8 times faster at d = 6, the same optima). nil when a start is
-- not finite (separate_runs then).
local function joint_run(acq, starts, o)
  local r, d = #starts, o.d
  -- the negated sum over the starts, from flat arrays (row-major r×d) to
  -- flat arrays: no Lua table a row (this runs at every evaluation)
  local df = lt.grad(function(X) return -acq(X):sum() end)
  local function f(flat)
    local g, v = df(lt.tensor(flat):reshape(r, d))
    return v, g:reshape(r * d):totable()
  end
  local x0 = {}
  for _, s in ipairs(starts) do
    for j = 1, d do x0[#x0 + 1] = s.x[j] end
  end
  local lo, hi = repeated_box(o, r)
  local x = bounded_run(f, x0, lo, hi, o)
  if not x then return nil end
  local rows = to_tensor(x, r, d):totable()
  local values = acq(lt.tensor(rows)):totable()
  local best = starts[1]
  for i, v in ipairs(values) do
    if is_finite(v) and v > best.value then best = {x = rows[i], value = v} end
  end
  return best
end

-- opts.independent: the starts as independent bounded L-BFGS runs
-- evaluated together (optim_bounded_batch): one posterior, one lt.grad, for
-- the trial points of the runs still going, each run with its own
-- curvature, search and stopping test. The sum's one L-BFGS shares one
-- curvature scaling among starts at different scales and goes on while the
-- slowest moves (Hartmann-6 in bo.minimize: 200–285 iterations a step);
-- independent runs stop each at its own optimum: about half the time a
-- step, but on a multimodal acquisition nearer optima (bench/RESULTS.md:
-- Levy-4's median regret 0.28 against 0.16 over 20 seeds). nil when a
-- start is not finite (separate_runs then).
local function independent_run(acq, starts, o)
  -- the gradient of the sum is each row's own gradient (a row's value
  -- depends on that row only); the values come back as f's second result
  local df = lt.grad(function(X)
    local values = acq(X)
    return -values:sum(), values
  end)
  local function f(points)
    local g, _, values = df(lt.tensor(points))
    local minus = values:totable()
    for k = 1, #minus do minus[k] = -minus[k] end
    return minus, g:totable()
  end
  local x0s = {}
  for k, s in ipairs(starts) do x0s[k] = s.x end
  local ok, xs = pcall(optim_bounded_batch.lbfgsb, f, x0s, o.lo, o.hi,
                       {max_iter = o.max_iter, ftol = o.ftol, pgtol = o.pgtol})
  if not ok then
    if not tostring(xs):find("gradient is not finite", 1, true) then error(xs, 0) end
    return nil
  end
  local values = acq(lt.tensor(xs)):totable()
  local best = starts[1]
  for i, v in ipairs(values) do
    if is_finite(v) and v > best.value then best = {x = xs[i], value = v} end
  end
  return best
end

--- Maximise acq inside bounds: see the header.
function optimize.optimize(acq, bounds, opts)
  local what = "optimize"
  local o = options(what, acq, bounds, opts)
  local stream = h.stream(o.seed)
  local starts = choose_starts(raw_values(what, acq, stream, o), o.restarts, stream)
  if #starts == 0 then fail("%s: the acquisition is not finite at any raw sample", what) end
  local batched = o.independent and independent_run or joint_run
  local best = acquisition.pointwise[acq] and batched(acq, starts, o)
               or separate_runs(what, acq, starts, o)
  return to_tensor(best.x, o.q, o.d), best.value
end

return optimize
