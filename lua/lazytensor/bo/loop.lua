--- The Bayesian-optimisation loop: bo.minimize(f, bounds, opts) → best x,
-- best y, history (doc/bo.md).
--
--   local bo = require "lazytensor.bo"
--   local x, y, history = bo.minimize(function(x) return (x[1] - 0.3)^2 end,
--                                     {{0}, {1}}, {budget = 20, seed = 1})
--
-- Each run: an initial design (scrambled Sobol or a Latin hypercube, init =
-- 2·d + 1 points), a gp.exact model (Matérn-5/2 ARD) fitted to it, then each
-- step acquires q points (bo.optimize of the acquisition, or bo.thompson),
-- evaluates f there and adds them to the model — by model:condition (the
-- factor extended, O(n²) a point, hyperparameters kept) or, every
-- refit_every steps, by a new model whose hyperparameters are refitted
-- starting from the current ones. The model works on inputs mapped to the
-- unit cube by the bounds and on values standardised (mean 0, variance 1)
-- as BoTorch's Normalize and Standardize do; it is built with BoTorch's
-- (0.11) Gamma priors and the noise floor 1e-4 (standardised) as gp.exact's
-- priors and bounds, and its hyperparameters are gp.exact's fit: maximum a
-- posteriori.
--
-- The failure rule: an evaluation of f that raises an error, or returns
-- something other than a finite number, is recorded in the history as
-- failed (with its message) and the loop goes on; the model takes the point
-- with the worst value seen so far, so that the acquisition steers away
-- from it. If every point of the initial design fails there is nothing to
-- model: minimize raises "lazytensor: bo: minimize: all N initial points
-- failed ...", and the history so far is in opts.history when the caller
-- gave a table there (minimize fills it as it goes, whatever stops it).
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ltkernel = require "lazytensor.gp.ltkernel"
local design = require "lazytensor.bo.design"

local loop = {}

local unpack = table.unpack or unpack -- luacheck: ignore 143

local function fail(fmt, ...)
  error("lazytensor: bo: minimize: " .. string.format(fmt, ...), 0)
end

local function finite(v)
  return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge
end

local function is_integer(v)
  return type(v) == "number" and v == math.floor(v) and finite(v)
end

-- The acquisitions by name; "analytic" ones score one point at a time (q
-- points are chosen greedily, each next one after conditioning the model on
-- the mean at the previous: the kriging believer), "batch" ones score q
-- points jointly.
local ACQUISITIONS = {
  logei = "analytic", ei = "analytic", pi = "analytic", ucb = "analytic",
  qei = "batch", qnei = "batch", thompson = "thompson",
}

local OPTIONS = {
  budget = true, init = true, design = true, acquisition = true, q = true, seed = true,
  refit_every = true, beta = true, callback = true, noise = true, kernel = true,
  maximize = true, history = true, restarts = true, raw_samples = true, samples = true,
  fit_iter = true, independent = true,
}

-- BoTorch 0.11's SingleTaskGP priors (get_matern_kernel_with_gamma_prior,
-- get_gaussian_likelihood_with_gamma_prior) and its noise floor
-- (MIN_INFERRED_NOISE_LEVEL = 1e-4, gp.exact's default floor), given to
-- gp.exact as its priors and bounds.
local NOISE_FLOOR = require("lazytensor.gp.hyper").NOISE_FLOOR
local function default_priors()
  return {lengthscale = gp.priors.gamma(3, 6), variance = gp.priors.gamma(2, 0.15),
          noise = gp.priors.gamma(1.1, 0.05)}
end

-- The priors and bounds of the model over kernel: the default priors on the
-- hyperparameters of that name the kernel has (a single kernel's
-- "lengthscale" and "variance"; a tree's are named k<i>_<name> and get
-- none), the noise prior and floor when the noise is learnt.
local function hyper_spec(kernel, known_noise)
  local names = ltkernel.log_space(kernel)
  local priors, bounds = {}, {}
  for name, p in pairs(default_priors()) do
    if name == "noise" then
      if not known_noise then priors.noise = p end
    elseif names[name] ~= nil then
      priors[name] = p
    end
  end
  if not known_noise then bounds.noise = {NOISE_FLOOR, math.huge} end
  return priors, bounds
end
-- Starting values: the priors' modes (lengthscale 1/3; the outputscale's
-- mode 6.7 is far above a standardised variance, so 1), noise 1e-2.
local START = {lengthscale = 1 / 3, variance = 1, noise = 1e-2}

------------------------------------------------------------- arguments --

local function check_bounds(bounds)
  if lt.is_tensor(bounds) then
    if bounds:dim() ~= 2 or bounds:size(1) ~= 2 then
      fail("bounds must be a 2×d tensor or {{lo_1, ...}, {hi_1, ...}}, got a tensor of shape {%s}",
           table.concat(bounds:shape(), ", "))
    end
    bounds = bounds:totable()
  end
  if type(bounds) ~= "table" or #bounds ~= 2 or type(bounds[1]) ~= "table"
     or type(bounds[2]) ~= "table" then
    fail("bounds must be {{lo_1, ..., lo_d}, {hi_1, ..., hi_d}} or a 2×d tensor, got %s",
         type(bounds))
  end
  local lo, hi = bounds[1], bounds[2]
  if #lo == 0 or #lo ~= #hi then
    fail("bounds: lo has %d entries and hi %d; they need one per dimension (d ≥ 1)", #lo, #hi)
  end
  for j = 1, #lo do
    if not finite(lo[j]) or not finite(hi[j]) then
      fail("bounds: lo[%d] = %s and hi[%d] = %s must be finite numbers", j, tostring(lo[j]), j,
           tostring(hi[j]))
    end
    if lo[j] >= hi[j] then
      fail("bounds: lo[%d] = %.17g is not below hi[%d] = %.17g", j, lo[j], j, hi[j])
    end
  end
  return {unpack(lo)}, {unpack(hi)}
end

local function check_init_points(points, lo, hi)
  local d = #lo
  for i, p in ipairs(points) do
    if lt.is_tensor(p) then p = p:totable() end
    if type(p) ~= "table" or #p ~= d then
      fail("init[%d] must be a point of %d coordinates", i, d)
    end
    for j = 1, d do
      if not finite(p[j]) or p[j] < lo[j] or p[j] > hi[j] then
        fail("init[%d][%d] = %s is not inside the bounds [%.17g, %.17g]", i, j, tostring(p[j]),
             lo[j], hi[j])
      end
    end
    points[i] = p
  end
  return points
end

local function check_positive_integer(name, v, default)
  if v == nil then return default end
  if not is_integer(v) or v < 1 then
    fail("%s must be a positive integer, got %s", name, tostring(v))
  end
  return v
end

local function check_options(f, opts, lo, hi)
  if type(f) ~= "function" and not (getmetatable(f) or {}).__call then
    fail("f must be a function, got %s", type(f))
  end
  if type(opts) ~= "table" then fail("opts must be a table with budget, got %s", type(opts)) end
  for k in pairs(opts) do
    if not OPTIONS[k] then fail("unknown option '%s'", tostring(k)) end
  end
  local d = #lo
  local o = {d = d}
  if opts.init ~= nil and type(opts.init) == "table" then
    if #opts.init == 0 then
      fail("init must be a number of points or a non-empty list of points")
    end
    local copy = {}
    for i, p in ipairs(opts.init) do copy[i] = p end
    o.init_points = check_init_points(copy, lo, hi)
    o.init = #o.init_points
  else
    o.init = check_positive_integer("init", opts.init, 2 * d + 1)
  end
  if opts.budget == nil then fail("opts.budget (the number of evaluations of f) is required") end
  o.budget = check_positive_integer("budget", opts.budget)
  if o.budget < o.init then
    fail("budget = %d is below the initial design's %d points", o.budget, o.init)
  end
  o.q = check_positive_integer("q", opts.q, 1)
  o.acquisition = opts.acquisition or "logei"
  if not ACQUISITIONS[o.acquisition] then
    fail("unknown acquisition '%s' (logei, ei, pi, ucb, qei, qnei, thompson)",
         tostring(o.acquisition))
  end
  o.design = opts.design or "sobol"
  if o.design ~= "sobol" and o.design ~= "lhs" then
    fail("design must be 'sobol' or 'lhs', got %s", tostring(o.design))
  end
  if opts.seed ~= nil and (not is_integer(opts.seed) or opts.seed < 0) then
    fail("seed must be a non-negative integer, got %s", tostring(opts.seed))
  end
  o.seed = opts.seed
  o.refit_every = check_positive_integer("refit_every", opts.refit_every, 1)
  o.restarts = check_positive_integer("restarts", opts.restarts, 10)
  if opts.independent ~= nil and type(opts.independent) ~= "boolean" then
    fail("independent must be true or false, got %s", tostring(opts.independent))
  end
  o.independent = opts.independent
  o.raw_samples = check_positive_integer("raw_samples", opts.raw_samples, 512)
  o.samples = check_positive_integer("samples", opts.samples, nil)
  o.fit_iter = check_positive_integer("fit_iter", opts.fit_iter, 100)
  if opts.beta ~= nil and (not finite(opts.beta) or opts.beta < 0) then
    fail("beta must be a non-negative number, got %s", tostring(opts.beta))
  end
  o.beta = opts.beta or 2
  if opts.callback ~= nil and type(opts.callback) ~= "function" then
    fail("callback must be a function, got %s", type(opts.callback))
  end
  o.callback = opts.callback
  if opts.noise ~= nil and (not finite(opts.noise) or opts.noise <= 0) then
    fail("noise must be a positive number (the observations' variance), got %s",
         tostring(opts.noise))
  end
  o.noise = opts.noise
  if opts.kernel ~= nil and getmetatable(opts.kernel) ~= gp.kernels.Kernel then
    fail("kernel must be a gp.kernels kernel, got %s", type(opts.kernel))
  end
  o.kernel = opts.kernel
  o.maximize = opts.maximize and true or false
  if opts.history ~= nil and type(opts.history) ~= "table" then
    fail("history must be a table (filled with the evaluations as they come), got %s",
         type(opts.history))
  end
  o.history = opts.history or {}
  return o
end

------------------------------------------------------------ the state --
-- state: lo, hi, o (options), unit (points in the unit cube, all evaluated
-- points whether they failed or not), values (the objective in the model's
-- sign, minimised; nil where failed), history, model, transform {mean, std}.

local function to_unit(state, x)
  local u = {}
  for j = 1, #x do u[j] = (x[j] - state.lo[j]) / (state.hi[j] - state.lo[j]) end
  return u
end

local function from_unit(state, u)
  local x = {}
  for j = 1, #u do
    local v = math.min(math.max(u[j], 0), 1) -- the optimiser's last rounding
    x[j] = state.lo[j] + v * (state.hi[j] - state.lo[j])
  end
  return x
end

-- Mean and (unbiased, floored) standard deviation of the successful values.
local function standardisation(values)
  local s, n = 0, 0
  for _, v in pairs(values) do s, n = s + v, n + 1 end
  local mean = s / n
  local ss = 0
  for _, v in pairs(values) do ss = ss + (v - mean) ^ 2 end
  local std = n > 1 and math.sqrt(ss / (n - 1)) or 1
  if std < 1e-8 then std = 1 end
  return {mean = mean, std = std}
end

local function worst_value(values)
  local w = -math.huge
  for _, v in pairs(values) do w = math.max(w, v) end
  return w
end

-- The model's targets: standardised values, failed points at the worst one.
local function model_data(state, tr)
  local worst = worst_value(state.values)
  local X, y = {}, {}
  for i, u in ipairs(state.unit) do
    X[i] = u
    y[i] = ((state.values[i] or worst) - tr.mean) / tr.std
  end
  return X, y
end

------------------------------------------------------------ the model --

-- Layout of the default model's get_vector(): d log lengthscales, log
-- variance, then log σ² (unless the noise is known), then the mean.
local function layout(d, known_noise)
  local L = {d = d, variance = d + 1}
  if known_noise then
    L.mean, L.size = d + 2, d + 2
  else
    L.noise, L.mean, L.size = d + 2, d + 3, d + 3
  end
  return L
end

local function default_vector(L, mean)
  local v = {}
  for j = 1, L.d do v[j] = math.log(START.lengthscale) end
  v[L.variance] = math.log(START.variance)
  if L.noise then v[L.noise] = math.log(START.noise) end
  v[L.mean] = mean
  return v
end

-- The current hyperparameters carried from standardisation old to new: the
-- function in f's units is unchanged (variance and noise scale by
-- (old.std/new.std)², the constant mean moves).
local function carry_vector(L, v, old, new)
  local r = old.std / new.std
  local w = {unpack(v)}
  w[L.variance] = v[L.variance] + 2 * math.log(r)
  if L.noise then
    w[L.noise] = math.log(math.max(math.exp(v[L.noise]) * r * r, NOISE_FLOOR * 1.01))
  end
  w[L.mean] = (old.mean - new.mean + old.std * v[L.mean]) / new.std
  return w
end

local function new_model(state, tr)
  local o = state.o
  local X, y = model_data(state, tr)
  local kernel = o.kernel
  if state.model then kernel = state.model.kernel end
  if not kernel then
    local ls = {}
    for j = 1, o.d do ls[j] = START.lengthscale end
    kernel = gp.kernels.matern52{lengthscale = ls, variance = START.variance}
  end
  -- "kernel": the structure whose posterior lt.grad follows to the candidates
  -- (never Toeplitz, whatever the points' spacing)
  local priors, bounds = hyper_spec(kernel, o.noise ~= nil)
  local spec = {x = lt.tensor(X), y = lt.tensor(y), kernel = kernel, structure = "kernel",
                priors = priors, bounds = bounds}
  if o.noise then
    spec.noise, spec.fixed = o.noise / (tr.std * tr.std), {noise = true}
  else
    spec.noise = START.noise
  end
  return gp.exact(spec)
end

-- The fit: the model's own (gp.exact's fit maximises its log posterior,
-- MLL + Σ log prior, through its bounds by L-BFGS), from the hyperparameters
-- the model has. A fit that raises (a start whose factorisation fails)
-- leaves the start. fixed_probes = false: the model is exact (a Cholesky
-- factor) at a loop's sizes, so the fit draws nothing, and with it the fit
-- leaves lt's generator alone (fixed probes draw two seeds and reseed it),
-- so that a seeded run's stream is the design's and the acquisitions'.
local function fit(model, max_iter)
  local start = model:get_vector()
  local ok, r = pcall(model.fit, model, {max_iter = max_iter, fixed_probes = false})
  if not ok then
    model:set_vector(start)
    return {log_posterior = -math.huge, iterations = 0, reason = tostring(r)}
  end
  return {log_posterior = r.log_posterior or r.mll, mll = r.mll, iterations = r.iterations,
          reason = r.reason}
end

-- A new model over every point so far, standardised afresh, its
-- hyperparameters refitted from the current ones.
local function refit(state)
  local tr = standardisation(state.values)
  local model = new_model(state, tr)
  local L = state.L
  if state.model then
    if not state.o.kernel then model:set_vector(carry_vector(L, state.model:get_vector(),
                                                             state.transform, tr)) end
  elseif not state.o.kernel then
    local v = default_vector(L, 0)
    if L.noise then v[L.noise] = math.log(START.noise) end
    model:set_vector(v)
  end
  local info = fit(model, state.o.fit_iter)
  state.model, state.transform = model, tr
  return info
end

-- The model extended by the new points (indices) with its hyperparameters
-- and standardisation kept: model:condition, O(n²) a point.
local function condition(state, indices)
  local tr = state.transform
  local worst = worst_value(state.values)
  local X, y = {}, {}
  for k, i in ipairs(indices) do
    X[k] = state.unit[i]
    y[k] = ((state.values[i] or worst) - tr.mean) / tr.std
  end
  state.model = state.model:condition(X, y)
end

------------------------------------------------------- the acquisitions --

local function incumbent(state)
  local tr = state.transform
  if not state.o.noise then
    local best = math.huge
    for _, v in pairs(state.values) do best = math.min(best, v) end
    return (best - tr.mean) / tr.std
  end
  -- noisy observations: the best posterior mean at the points observed
  local X = {}
  for i in pairs(state.values) do X[#X + 1] = state.unit[i] end
  local mean = state.model:predict(lt.tensor(X))
  return mean:min()
end

local function unit_bounds(d)
  local lo, hi = {}, {}
  for j = 1, d do lo[j], hi[j] = 0, 1 end
  return {lo, hi}
end

local function observed_tensor(state)
  return lt.tensor(state.unit)
end

local function analytic(bo, name, model, state)
  if name == "logei" then return bo.log_expected_improvement(model, incumbent(state)) end
  if name == "ei" then return bo.expected_improvement(model, incumbent(state)) end
  if name == "pi" then return bo.probability_of_improvement(model, incumbent(state)) end
  return bo.upper_confidence_bound(model, state.o.beta)
end

local function optimize(bo, acq, state, q)
  local x, value = bo.optimize(acq, unit_bounds(state.o.d),
                               {q = q, restarts = state.o.restarts,
                                raw_samples = state.o.raw_samples,
                                independent = state.o.independent})
  return x:totable(), value
end

-- q points in the unit cube (Lua rows) and the acquisition's value.
local function acquire(state, q)
  local bo = require "lazytensor.bo"
  local o, kind = state.o, ACQUISITIONS[state.o.acquisition]
  if kind == "thompson" then
    local x = bo.thompson(state.model, unit_bounds(o.d), {samples = q})
    return x:totable(), nil
  end
  if kind == "batch" then
    local sopts = o.samples and {samples = o.samples} or nil
    local acq
    if o.acquisition == "qei" then
      acq = bo.q_expected_improvement(state.model, incumbent(state), sopts)
    else
      acq = bo.q_noisy_expected_improvement(state.model, observed_tensor(state), sopts)
    end
    return optimize(bo, acq, state, q)
  end
  -- analytic, q points greedily: the model conditioned on its own mean at
  -- each point chosen (the kriging believer), by the cheap update
  local rows, model, first_value = {}, state.model, nil
  for k = 1, q do
    local x, value = optimize(bo, analytic(bo, o.acquisition, model, state), state, 1)
    rows[k] = x[1]
    first_value = first_value or value
    if k < q then
      local mean = model:predict(lt.tensor({x[1]}))
      model = model:condition({x[1]}, {mean[1]})
    end
  end
  return rows, first_value
end

---------------------------------------------------------------- the loop --

local function value_of_result(ok, r)
  if not ok then return nil, tostring(r) end
  if type(r) ~= "number" then
    if lt.is_tensor(r) and r:numel() == 1 then r = r:item() else
      return nil, "f returned " .. type(r) .. ", not a number"
    end
  end
  if not finite(r) then return nil, "f returned a non-finite value " .. tostring(r) end
  return r
end

local function report(state, rec)
  local progress = lt.settings.progress
  if progress then
    progress{method = "bo.minimize", iteration = rec.evaluation,
             value = state.best_y or 0 / 0}
  end
  if state.o.callback and state.o.callback(rec, state.history) == true then
    state.stopped = true
  end
end

-- Evaluates f at the unit-cube point u: records it, updates the best.
local function evaluate(state, f, u, phase, step)
  local x = from_unit(state, u)
  local arg = {unpack(x)} -- f may write into its argument
  local y, err = value_of_result(pcall(f, arg))
  local i = #state.unit + 1
  state.unit[i] = to_unit(state, x)
  local rec = {x = x, y = y, evaluation = i, phase = phase, step = step}
  if y == nil then
    rec.failed, rec.error = true, err
    state.history.failed = (state.history.failed or 0) + 1
  else
    state.values[i] = state.o.maximize and -y or y
    if state.best_y == nil or (state.o.maximize and y > state.best_y)
       or (not state.o.maximize and y < state.best_y) then
      state.best_x, state.best_y, state.history.best_index = {unpack(x)}, y, i
    end
  end
  rec.best = state.best_y
  state.history[i] = rec
  return rec
end

local function initial_design(state)
  local o = state.o
  if o.init_points then
    local rows = {}
    for i, p in ipairs(o.init_points) do rows[i] = to_unit(state, p) end
    return rows
  end
  if o.design == "lhs" then return design.latin_hypercube_rows(o.init, o.d) end
  return design.sobol_rows(o.init, o.d)
end

-- Points to fall back on when an acquisition fails (a numerical failure in
-- the model or the optimiser): the next points of a Sobol sequence.
local function fallback_point(state)
  state.fallback = state.fallback or design.sobol_rows(state.o.budget, state.o.d)
  state.fallback_used = (state.fallback_used or 0) + 1
  return state.fallback[math.min(state.fallback_used, #state.fallback)]
end

local function run_init(state, f)
  for _, u in ipairs(initial_design(state)) do
    report(state, evaluate(state, f, u, "init"))
    if state.stopped then return end
  end
end

local function step(state, f, k)
  local o = state.o
  local q = math.min(o.q, o.budget - #state.unit)
  local t0 = os.clock()
  local ok, rows, value = pcall(acquire, state, q)
  local acq_error
  if not ok then
    acq_error = tostring(rows)
    rows = {}
    for j = 1, q do rows[j] = fallback_point(state) end
  end
  local acq_time = os.clock() - t0
  local first = #state.unit + 1
  local recs = {}
  for j = 1, q do
    local rec = evaluate(state, f, rows[j], "bo", k)
    rec.acquisition, rec.acquisition_value, rec.acquisition_error = o.acquisition, value, acq_error
    rec.acquisition_seconds = acq_time
    recs[j] = rec
  end
  local indices = {}
  for i = first, #state.unit do indices[#indices + 1] = i end
  t0 = os.clock()
  if k % o.refit_every == 0 then
    recs[#recs].fit = refit(state)
  else
    condition(state, indices)
  end
  local update_time = os.clock() - t0
  for _, rec in ipairs(recs) do
    rec.update_seconds = update_time
    report(state, rec)
    if state.stopped then return end
  end
end

local function any_success(state)
  return next(state.values) ~= nil
end

--- bo.minimize(f, bounds, opts) → best x (a Lua array, f's coordinates),
-- best y, history. See the module's comment and doc/bo.md.
-- opts: budget (evaluations of f, the initial design's included; required),
-- init (2·d + 1 points, or a list of points), design ("sobol" | "lhs"),
-- acquisition ("logei" | "ei" | "pi" | "ucb" | "qei" | "qnei" |
-- "thompson"), q (points per step, 1), seed, refit_every (1: refit every
-- step; k: every k-th step, the others by model:condition), beta (UCB's,
-- 2), callback(record, history) (returning true stops), noise (the
-- observations' known variance; default learnt), kernel (a gp.kernels
-- kernel instead of Matérn-5/2 ARD; the default priors on its hyperparameters
-- named lengthscale and variance, the noise's prior and floor), maximize (true:
-- maximise f), history (a table to fill as the loop goes), restarts,
-- raw_samples, independent, samples (bo.optimize's and the MC
-- acquisitions'), fit_iter.
function loop.minimize(f, bounds, opts)
  local lo, hi = check_bounds(bounds)
  local o = check_options(f, opts, lo, hi)
  local state = {lo = lo, hi = hi, o = o, unit = {}, values = {}, history = o.history,
                 L = layout(o.d, o.noise ~= nil)}
  for i = #state.history, 1, -1 do state.history[i] = nil end
  if o.seed then lt.manual_seed(o.seed) end
  run_init(state, f)
  if not any_success(state) and not state.stopped then
    state.history.reason = "all initial points failed"
    local first = state.history[1]
    fail("all %d initial points failed (the first: %s); the history is in opts.history",
         #state.history, first and first.error or "?")
  end
  if not state.stopped then
    state.history.initial_fit = refit(state)
    local k = 0
    while #state.unit < o.budget and not state.stopped do
      k = k + 1
      step(state, f, k)
    end
  end
  state.history.reason = state.stopped and "callback" or "budget"
  state.history.model, state.history.transform = state.model, state.transform
  return state.best_x, state.best_y, state.history
end

return loop
