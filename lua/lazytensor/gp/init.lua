--- Exact Gaussian-process regression on lazytensor operators.
--
--   local gp = require "lazytensor.gp"
--   local k = gp.kernels.rbf{lengthscale = 1} + gp.kernels.periodic{period = 1}
--   local model = gp.exact{x = x, y = y, kernel = k, noise = 0.1}
--   model:fit{max_iter = 50, callback = function(it, mll) print(it, mll) end}
--   local mean, var = model:predict(xstar)
--   local post = model:posterior(xstar)  -- an lt.mvn over f(xstar)
--   local lo, hi = post:confidence_region()
--
-- noise is a number (σ², learnt unless fixed = {noise = true}) or a 1-d
-- tensor of n per-point variances (heteroscedastic, fixed); the model adds
-- it to K's diagonal, K:add_diag(noise), whatever K's structure.
--
-- The model chooses the covariance's structure itself (gp/structure.lua;
-- model:explain() says which and why): Toeplitz for regularly spaced 1-d
-- inputs, Kronecker for grids with a separable kernel, "kernel" — lazy C
-- lt.kernel operators — for other inputs when the kernel is a sum of
-- rbf/matern/periodic/rq/cosine/spectral_mixture kernels (ARD too), and dense n×n matrices
-- otherwise (products of kernels). It then only uses the function API. The marginal
-- log-likelihood and its gradient come from one call,
--   Ky:inv_quad_logdet(y − m, {grad = true}),
-- on whatever Ky the structure built: exact (one Cholesky factor) below
-- lt.settings.max_cholesky_size, GPyTorch's stochastic estimate from one
-- block CG run over [y − m | probes] above it, with the pivoted-Cholesky
-- control variate of rank trace_rank. Its gradients, keyed by Ky's leaves,
-- are chained to the hyperparameters through the structure's links.
local lt = require "lazytensor"
local kernels = require "lazytensor.gp.kernels"
local structure = require "lazytensor.gp.structure"
local optim = require "lazytensor.optim"
local batch = require "lazytensor.gp.batch"
local condition = require "lazytensor.gp.condition"
local hyper = require "lazytensor.gp.hyper"
local ltkernel = require "lazytensor.gp.ltkernel"

local gp = {kernels = kernels, structure = structure}

local log, exp, pi = math.log, math.exp, math.pi
local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

local Model = {}
Model.__index = Model

local function fail(fmt, ...)
  error("lazytensor: gp: " .. string.format(fmt, ...), 0)
end

--- Points as an array of coordinate arrays, from a tensor (n or n×d) or a
-- Lua array of numbers or of arrays.
local function to_points(x, what)
  if lt.is_tensor(x) then x = x:totable() end
  if type(x) ~= "table" or #x == 0 then fail("%s must be a non-empty tensor or table", what) end
  local points = {}
  for i, v in ipairs(x) do
    if type(v) == "number" then
      points[i] = {v}
    elseif type(v) == "table" then
      points[i] = v
    else
      fail("%s[%d] is a %s, expected a number or an array", what, i, type(v))
    end
  end
  local d = #points[1]
  for i, p in ipairs(points) do
    if #p ~= d then fail("%s[%d] has %d coordinates, expected %d", what, i, #p, d) end
    -- a NaN coordinate would give a kernel of NaN entries that some
    -- structures (Toeplitz, grids) never look at: refuse it here
    for j = 1, d do
      local c = p[j]
      if type(c) ~= "number" or c ~= c or c == math.huge or c == -math.huge then
        fail("%s[%d][%d] must be a finite number, got %s", what, i, j, tostring(c))
      end
    end
  end
  return points
end

-- A dense tensor xstar as an n*×d tensor of its own (a 1-d one: n* points
-- of one coordinate), nil for a Lua array. Built from xstar by followed
-- operations (reshape, clone), so that inside lt.grad a followed xstar
-- stays followed through what is computed from it — lt.kernel follows its
-- points — and the posterior has a gradient with respect to the test
-- points (bo's acquisitions). A copy: a later write into the caller's
-- tensor does not change an operator built on it.
local function own_points_tensor(xstar)
  if not lt.is_tensor(xstar) or lt.is_lazy(xstar) then return nil end
  if xstar:dim() == 1 then return xstar:reshape(xstar:size(1), 1):clone() end
  return xstar:clone()
end

-- Test points xstar as an n*×d tensor, checked against the d coordinates
-- of the training inputs (gp.sgpr and gp.multitask).
local function test_points_tensor(xstar, d)
  local points = to_points(xstar, "xstar") -- checks shape and finiteness
  if #points[1] ~= d then
    fail("xstar has %d coordinates, the training inputs %d", #points[1], d)
  end
  return own_points_tensor(xstar) or lt.tensor(points)
end

-- finite: refuse NaN and ±inf entries too (targets; noise has its own
-- check, with its own message).
local function to_vector(y, n, what, finite)
  if not lt.is_tensor(y) then
    if type(y) ~= "table" then
      fail("%s must be a vector of %d values, got %s", what, n, type(y))
    end
    y = lt.tensor(y)
  end
  if y:dim() ~= 1 or y:size(1) ~= n then
    fail("%s must be a vector of %d values", what, n)
  end
  -- NaN or ±inf: the model's mll and gradients would be NaN (or the
  -- default noise, from var(y), would be)
  for i = 1, finite and n or 0 do
    local v = y:get(i)
    if v ~= v or v == math.huge or v == -math.huge then
      fail("%s[%d] must be a finite number, got %s", what, i, tostring(v))
    end
  end
  return y
end

-- A table of options: nil is {}, anything else but a table an error, and
-- every key must be one of `keys` (a list): a misspelt option is an error
-- naming it, never silently ignored.
local function options(what, opts, keys)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail("%s expects a table of options, got %s", what, type(opts)) end
  local set = {}
  for _, k in ipairs(keys) do set[k] = true end
  local sorted = {unpack(keys)}
  table.sort(sorted)
  kernels.check_keys(what, opts, set, table.concat(sorted, ", "))
  return opts
end

local EXACT_KEYS = {"x", "y", "kernel", "noise", "mean", "mean_value", "fixed", "structure",
                    "trace_rank", "grid", "distributed", "bounds", "priors"}

-- σ² a positive finite number, or n positive finite per-point variances.
local function check_noise(noise, n)
  if type(noise) == "number" then
    if not (noise > 0 and noise < math.huge) then -- luacheck: ignore 581 (NaN)
      fail("noise must be a positive number, got %s", tostring(noise))
    end
    return noise
  end
  noise = to_vector(noise, n, "noise (a number, or one variance per point)")
  local lo, hi = noise:min(), noise:max()
  if not (lo > 0 and hi < math.huge) then -- luacheck: ignore 581 (NaN)
    fail("per-point noise must be positive and finite, got values from %s to %s", tostring(lo),
         tostring(hi))
  end
  return noise:clone()
end

--- An exact GP regression model.
-- spec: x (inputs), y (targets), kernel, noise (a variance, learnt, default
-- 1% of var(y); or a 1-d tensor or Lua array of n per-point variances,
-- fixed), mean ("constant" (default) or "zero"), mean_value, structure
-- ("auto", "toeplitz", "kron", "kernel", "ski", "dense"; grid = SKI's points
-- per dimension), fixed = {noise = true,
-- mean = true}, trace_rank (rank of the pivoted-Cholesky control variate in
-- stochastic gradients, default 64, 0 for none; see inv_quad_logdet's
-- control_variate), distributed (true: K's components are mpi.kernel
-- operators whose products and gradients are spread over MPI ranks; needs
-- lazytensor.mpi and the "kernel" structure, doc/mpi.md), bounds and
-- priors (gp/hyper.lua: on the kernel's hyperparameters, the noise and the
-- constant mean "mean"; a fitted scalar noise has the floor {1e-4, ∞}
-- unless bounds.noise says otherwise). Any other key is an error.
function gp.exact(spec)
  if type(spec) ~= "table" then fail("exact expects a table") end
  options("exact", spec, EXACT_KEYS)
  -- x {b, n, d}: b independent GPs (gp/batch.lua)
  if lt.is_tensor(spec.x) and spec.x:dim() == 3 then return batch.exact(gp, spec) end
  if getmetatable(spec.kernel) ~= kernels.Kernel then fail("kernel must be a gp kernel") end
  local points = to_points(spec.x, "x")
  local d = #points[1]
  local top = spec.kernel:max_dim()
  if top and top > d then
    fail("the kernel reads input dimension %d but x has %d dimension%s", top, d,
         d == 1 and "" or "s")
  end
  local y = to_vector(spec.y, #points, "y", true)
  local fixed = options("exact fixed", spec.fixed, {"noise", "mean"})
  local self = setmetatable({
    points = points,
    y = y,
    n = #points,
    kernel = spec.kernel,
    mean_kind = spec.mean or "constant",
    structure_choice = spec.structure or "auto",
    grid = spec.grid, -- SKI's points per dimension (structure = "ski")
    fixed = {noise = fixed.noise and true or nil, mean = fixed.mean and true or nil},
    trace_rank = spec.trace_rank,
    -- distributed = true: K's components are mpi.kernel operators (doc/mpi.md)
    make_kernel = spec.distributed and require("lazytensor.mpi").kernel or nil,
  }, Model)
  if self.mean_kind ~= "constant" and self.mean_kind ~= "zero" then
    fail("mean must be 'constant' or 'zero', got %s", tostring(self.mean_kind))
  end
  local ymean = y:mean()
  self.mean_value = self.mean_kind == "zero" and 0 or (spec.mean_value or ymean)
  local mv = self.mean_value
  if type(mv) ~= "number" or mv ~= mv or mv == math.huge or mv == -math.huge then
    fail("mean_value must be a finite number, got %s", tostring(mv))
  end
  local yvar = ((y - ymean):pow(2)):mean()
  self.noise = check_noise(spec.noise or math.max(0.01 * yvar, 1e-6), self.n)
  if lt.is_tensor(self.noise) then
    if fixed.noise == false then fail("per-point noise is fixed; fixed.noise cannot be false") end
    self.fixed.noise = true
  end
  gp.parse_hyper(self, spec, spec.noise == nil and yvar)
  return self
end

-- Bounds and priors (gp/hyper.lua) of a log-space model: the kernel's
-- hyperparameters and the noise (a scalar σ²); the floor on a fitted
-- noise. yvar: the noise was not given but chosen as 1% of yvar (the
-- targets' variance), and a start at or below the floor moves to twice
-- the floor. Shared with gp.sgpr and gp.multitask (extra: their
-- own hyperparameters, {values = name → value, free = name → true for the
-- fitted ones, defaults = name → default bounds}); the real-valued ones
-- (the means, W, the inducing points) from self:hyper_reals().
function gp.parse_hyper(self, spec, yvar, extra)
  extra = extra or {}
  local values, free = ltkernel.log_space(self.kernel)
  local defaults = {}
  for name, v in pairs(extra.values or {}) do
    if values[name] ~= nil then fail("the kernel has a hyperparameter named '%s' too", name) end
    values[name], free[name] = v, extra.free[name]
    defaults[name] = extra.defaults and extra.defaults[name]
  end
  local reals = self:hyper_reals()
  for name in pairs(reals) do
    if values[name] ~= nil then fail("the kernel has a hyperparameter named '%s' too", name) end
  end
  if type(self.noise) == "number" then
    values.noise, free.noise = self.noise, not self.fixed.noise or nil
    if free.noise then
      defaults.noise = {hyper.NOISE_FLOOR, math.huge}
      local given = type(spec.bounds) == "table" and spec.bounds.noise
      if yvar and not given and self.noise <= hyper.NOISE_FLOOR then
        self.noise = math.max(0.01 * yvar, 2 * hyper.NOISE_FLOOR)
        values.noise = self.noise
      end
    end
  elseif type(spec.bounds) == "table" and spec.bounds.noise ~= nil then
    fail("bounds.noise: the noise is per point (fixed), so bounds on it would never act")
  end
  self.bounds, self.priors = hyper.parse_model(fail, values, free, spec.bounds, spec.priors,
                                               defaults, reals)
  -- as given, for model:condition's new model
  self.hyper_spec = {bounds = spec.bounds, priors = spec.priors}
end

--- True when the noise is one variance per point (fixed), false for σ².
function Model:per_point_noise()
  return lt.is_tensor(self.noise)
end

------------------------------------------------------------ parameters --

--- The hyperparameters' names → values (gp/hyper.lua's log-space models).
function Model:hyper_values()
  local values = ltkernel.log_space(self.kernel)
  if not self:per_point_noise() then values.noise = self.noise end
  return values
end

--- The real-valued hyperparameters (gp/hyper.lua): the constant mean
-- "mean" (none with mean = "zero").
function Model:hyper_reals()
  if self.mean_kind ~= "constant" then return {} end
  return {mean = {value = self.mean_value, shape = {}, free = not self.fixed.mean}}
end

--- For each entry of get_vector, its hyperparameter's name.
function Model:hyper_entries()
  local _, _, entries = ltkernel.log_space(self.kernel)
  if not self.fixed.noise then entries[#entries + 1] = "noise" end
  if self.mean_kind == "constant" and not self.fixed.mean then entries[#entries + 1] = "mean" end
  return entries
end

--- raw_vector, set_raw_vector, log_prior, log_posterior,
-- log_posterior_and_grad (gp/hyper.lua): the fit's parameters, through the
-- bounds, and the log posterior.
hyper.install(Model)

--- log hyperparameters: kernel's, then log noise, then the constant mean.
function Model:get_vector()
  local v = self.kernel:get_log_params()
  if not self.fixed.noise then v[#v + 1] = log(self.noise) end
  if self.mean_kind == "constant" and not self.fixed.mean then v[#v + 1] = self.mean_value end
  return v
end

function Model:set_vector(v)
  local off = self.kernel:set_log_params(v, 0)
  if not self.fixed.noise then
    off = off + 1
    self.noise = exp(v[off])
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    off = off + 1
    self.mean_value = v[off]
  end
end

-- Caches (the covariance, α = Ky⁻¹(y − m), the LOVE root) remember what they
-- were computed from, so that any change — set_vector, fit, or a kernel's
-- hyperparameters or model.noise set directly — makes them stale.
local function state(self, with_noise, extra)
  return {kernel = self.kernel:fingerprint(), structure = self.structure_choice,
          noise = with_noise and self.noise or nil, extra = extra}
end

local function fresh(entry, now)
  return entry ~= nil and entry.kernel == now.kernel and entry.structure == now.structure
         and rawequal(entry.noise, now.noise) and entry.extra == now.extra
end

-- The structure = "auto" resolves to (gp/structure.lua's kinds, as the
-- names build takes), kept for the same kernel object: the choice depends
-- on the points and the kernel's kinds, not on its hyperparameters, and
-- making it again at every change of them cost more than the MLL (issue 25's
-- BO loop: 2-d scattered points at n ≤ 50 pass the grid test, and each
-- rebuild computed a Kronecker candidate in Lua before rejecting it — 16 ms
-- against 0.17 ms for the MLL and gradient at n = 50).
local RESOLVED = {toeplitz = "toeplitz", kron = "kron", kron_masked = "kron", kernel = "kernel",
                  dense = "dense"}

function Model:covariance()
  local now = state(self, false)
  if not fresh(self.cov_state, now) then
    local opts = {structure = self.structure_choice, grid = self.grid,
                  make_kernel = self.make_kernel}
    local known = self.resolved_structure
    local cov
    if self.structure_choice == "auto" and known and rawequal(known.kernel, self.kernel) then
      opts.structure = known.kind
      local ok, built = pcall(structure.build, self.kernel, self.points, opts)
      if ok then
        cov = built
        cov.explain = known.explain -- auto's own words
      end
      opts.structure = "auto" -- the kind no longer fits (numerical tests): choose again
    end
    if cov == nil then
      cov = structure.build(self.kernel, self.points, opts)
      if self.structure_choice == "auto" and RESOLVED[cov.kind] then
        self.resolved_structure = {kernel = self.kernel, kind = RESOLVED[cov.kind],
                                   explain = cov.explain}
      end
    end
    self.cov = cov
    self.cov_state = now
  end
  return self.cov
end

--- Which structure the model uses, and why (including how the noise is added).
function Model:explain()
  local cov = self:covariance()
  return cov.explain .. "; " .. cov.noise_explain(self:per_point_noise())
end

------------------------------------------------------------ likelihood --

-- Ky, or the updated Cholesky factor model:condition left (gp/condition.lua)
-- while it is still Ky's: its solves are Ky's.
local function noisy(self, cov)
  return condition.factor(self) or (cov.noisy(self.noise))
end

local function residual(self)
  return self.y - self.mean_value
end

-- Structures whose solves below max_cholesky_size are a Cholesky factor of
-- Ky's dense form (the others have their own exact solves: Toeplitz,
-- Kronecker eigendecompositions).
local FACTORED = {kernel = true, dense = true}

-- Ky's lower Cholesky factor L (an operator), kept while the hyperparameters
-- and noise stay, when Ky's exact solves would factor it anyway: α and the
-- predictive variances then share one factorisation (issue 25: prediction
-- at n = 4000 factored Ky twice). nil on the iterative path and for the
-- structures with their own solves.
local function factor_of(self, Ky)
  if self.n > lt.settings.max_cholesky_size or not FACTORED[self:covariance().kind] then
    return nil
  end
  local now = state(self, true)
  if not fresh(self.chol_state, now) then
    self.chol = (Ky or noisy(self, self:covariance())):cholesky()
    self.chol_state = now
  end
  return self.chol
end

-- α = Ky⁻¹(y − m), kept while the hyperparameters, noise and mean stay.
local function alpha_of(self, Ky)
  local now = state(self, true, self.mean_value)
  if not fresh(self.alpha_state, now) then
    local L = factor_of(self, Ky)
    if L then -- two triangular solves (lt.chol(L) would copy the factor first)
      self.alpha = L:t():solve((L:solve(residual(self))))
    else
      self.alpha = (Ky or noisy(self, self:covariance())):solve(residual(self))
    end
    self.alpha_state = now
  end
  return self.alpha
end

--- The marginal log-likelihood log p(y | θ), and the solver's info.
-- The same computation as mll_and_grad's value, so that the two agree to
-- the last bit (a fit's reported MLL is model:mll() afterwards, even where
-- Ky is nearly singular and two factorisations would differ): the
-- gradient's share of the cost is the exact path's inverse, or one more
-- pass over the operator's entries on the iterative one.
function Model:mll()
  local value, _, info = self:mll_and_grad()
  return value, info
end

-- Rank of the pivoted-Cholesky control variate of the stochastic gradient
-- (see lt.inv_quad_logdet's control_variate).
local TRACE_RANK = 64

-- The noise as a vector of n variances.
local function noise_vector(self)
  if self:per_point_noise() then return self.noise end
  return lt.full({self.n}, self.noise)
end

-- <g, d> for a parameter's gradient g and a derivative d of the parameter:
-- numbers, tensors of the parameter's shape, or d a function of g.
local function contract(g, d)
  if type(d) == "function" then return d(g) end
  if type(d) == "number" then return type(g) == "number" and g * d or g:sum() * d end
  return g:cmul(d):sum()
end

--- MLL and its gradient with respect to get_vector()'s parameters: one
-- inv_quad_logdet{grad = true} on Ky, chained through the structure's links.
function Model:mll_and_grad()
  local cov = self:covariance()
  if cov.mll_and_grad then return cov.mll_and_grad(self) end -- custom kernels: lt.grad
  local Ky, links = cov.noisy(self.noise)
  local r = residual(self)
  local cv = self.trace_rank or TRACE_RANK
  local q, ld, grads, info = Ky:inv_quad_logdet(r, {grad = true, control_variate = cv})
  local value = -0.5 * (q + ld + self.n * log(2 * pi))
  local m = self.kernel:count()
  local grad = {}
  for p = 1, m do grad[p] = 0 end
  local noise_grad = 0
  for _, link in ipairs(links) do
    local g = grads[link.leaf] and grads[link.leaf][link.name]
    if g ~= nil then
      for p, d in pairs(link.d or {}) do grad[p] = grad[p] - 0.5 * contract(g, d) end
      if link.noise then noise_grad = noise_grad - 0.5 * contract(g, link.noise) end
    end
  end
  local off = m
  if not self.fixed.noise then
    off = off + 1
    grad[off] = noise_grad
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    off = off + 1
    -- ∂/∂m of −½ (y − m)ᵀ Ky⁻¹ (y − m) = Σ α, α = Ky⁻¹(y − m) = grads[r] / 2
    grad[off] = 0.5 * grads[r].values:sum()
  end
  return value, grad, info
end

-- A seed from the context's generator (lt.manual_seed's stream): 31 bits of
-- one uniform draw.
local function draw_seed()
  return math.floor(lt.rand({1})[1] * 2147483647)
end

-- lr is Adam's step on the log-hyperparameters; L-BFGS takes its steps
-- from a line search and has none: an lr given to it would be silently
-- ignored (a GPyTorch user's lr = 0.1 with the default method), so say so.
local function check_fit_lr(method, lr)
  if lr ~= nil and method ~= "adam" then
    fail("fit: lr is the step of method = 'adam' (on the log-hyperparameters); "
         .. "method = '%s' chooses its steps by line search and takes no lr", method)
  end
end

--- Maximises the MLL — with priors the log posterior, MLL + Σ log prior —
-- over the hyperparameters (L-BFGS by default), through their bounds: the
-- optimiser moves raw_vector()'s entries (log θ, or r of gp/hyper.lua for a
-- bounded one; the noise's floor makes its r log(σ² − 10⁻⁴)).
-- opts: max_iter, method ("lbfgs" | "adam"), lr (adam), gtol,
-- callback(iter, mll, model), fixed_probes (default true).
-- lt.settings.progress, when set, also hears of every iteration.
-- Above max_cholesky_size the MLL and its gradient are stochastic estimates
-- (probe vectors); L-BFGS's line search and curvature pairs assume one
-- objective, and fresh probes at every evaluation made it stall (issue 25:
-- KISS-GP at n = 100,000, 6 iterations in 119 evaluations). So the probes
-- are fixed during a fit: every evaluation reseeds the generator with one
-- seed drawn before the fit, making the estimate a deterministic function of
-- the hyperparameters (the sample-average approximation of the MLL), and
-- after the fit the generator is reseeded from a second draw, so that what
-- follows does not depend on how many evaluations the fit took; L-BFGS
-- then searches by backtracking on the value (see below). The result says
-- what was done: stochastic (whether any evaluation was an estimate),
-- probes ("fixed", with probe_seed, or "fresh" with fixed_probes = false),
-- line_search ("backtracking" when L-BFGS used it).
function Model:fit(opts)
  opts = options("fit", opts, {"max_iter", "method", "lr", "gtol", "callback", "fixed_probes"})
  local method = opts.method or "lbfgs"
  if method ~= "lbfgs" and method ~= "adam" then fail("unknown fit method '%s'", method) end
  check_fit_lr(method, opts.lr)
  if opts.fixed_probes ~= nil and type(opts.fixed_probes) ~= "boolean" then
    fail("fit: fixed_probes must be a boolean, got %s", type(opts.fixed_probes))
  end
  local fixed = opts.fixed_probes ~= false
  local probe_seed, after_seed
  if fixed then probe_seed, after_seed = draw_seed(), draw_seed() end
  local stochastic = false
  local function objective(v)
    self:set_raw_vector(v)
    if fixed then lt.manual_seed(probe_seed) end
    local ok, value, grad, info = pcall(self.log_posterior_and_grad, self)
    if not ok then
      -- A failed factorisation (too small a noise, say) is a bad point, not
      -- the end of the fit: report it as −∞ so the optimiser steps back.
      if type(value) == "string" and value:find("lazytensor:", 1, true) then
        local g = {}
        for i = 1, #v do g[i] = 0 end
        return -math.huge, g
      end
      error(value, 0)
    end
    if type(info) == "table" and info.method == "slq" then stochastic = true end
    return value, grad
  end
  local progress = lt.settings.progress
  local x0 = self:raw_vector()
  -- The start is evaluated here, to know whether the objective is a
  -- stochastic estimate; the optimiser's own first call gets that result.
  local first = {pcall(objective, x0)}
  local function start_then_objective(v)
    if first then
      local r = first
      first = nil
      if not r[1] then error(r[2], 0) end
      return r[2], r[3]
    end
    return objective(v)
  end
  -- L-BFGS on a stochastic estimate: its gradient is not the exact
  -- derivative of its value (a trace estimate against SLQ's log
  -- determinant), and the Wolfe line search stalled on it (bench/
  -- stochastic_fit.lua): backtracking on the value instead, which the fixed
  -- probes make sound (with fresh ones a decrease may be the probes' noise).
  local search = method == "lbfgs" and stochastic and fixed and "backtracking" or nil
  local run_ok, best, value, info = pcall(optim[method], start_then_objective, x0, {
    maximize = true,
    max_iter = opts.max_iter or 100,
    lr = opts.lr,
    gtol = opts.gtol,
    line_search = search,
    callback = function(iter, v, _, gnorm)
      if progress then
        progress{method = "gp." .. method, iteration = iter, value = v, gradnorm = gnorm}
      end
      if opts.callback then return opts.callback(iter, v, self, gnorm) end
    end,
  })
  if run_ok then self:set_raw_vector(best) end
  -- with priors the optimum's value is the log posterior; the MLL on the same probes
  local mll, log_posterior = value, nil
  if run_ok and next(self.priors) ~= nil then
    if fixed then lt.manual_seed(probe_seed) end
    mll, log_posterior = (self:mll()), value
  end
  if fixed then lt.manual_seed(after_seed) end
  if not run_ok then error(best, 0) end
  return {mll = mll, log_posterior = log_posterior, iterations = info.iterations,
          converged = info.converged, reason = info.reason, evaluations = info.evaluations,
          stochastic = stochastic,
          probes = stochastic and (fixed and "fixed" or "fresh") or nil,
          probe_seed = stochastic and fixed and probe_seed or nil, line_search = search}
end

------------------------------------------------------------ prediction --

-- Test inputs as points with the training inputs' number of coordinates.
local function test_points(self, xstar)
  local star = to_points(xstar, "xstar")
  if #star[1] ~= #self.points[1] then
    fail("xstar has %d coordinates, the training inputs %d", #star[1], #self.points[1])
  end
  return star
end

-- test_points' checks of a dense tensor xstar (the same errors), without
-- copying it into Lua arrays: true when xstar is a dense tensor (checked),
-- false otherwise (to_points then checks what it is). bo's acquisitions
-- pass their candidates here at every L-BFGS evaluation.
local function checked_test_tensor(self, xstar)
  if not lt.is_tensor(xstar) or lt.is_lazy(xstar) or xstar:dim() < 1 or xstar:dim() > 2
     or xstar:numel() == 0 then
    return false
  end
  local d = xstar:dim() == 2 and xstar:size(2) or 1
  local bad = lt._first_non_finite(xstar)
  if bad then
    local i, j = math.floor((bad - 1) / d) + 1, (bad - 1) % d + 1
    local v = xstar:dim() == 2 and xstar:get(i, j) or xstar:get(i)
    fail("xstar[%d][%d] must be a finite number, got %s", i, j, tostring(v))
  end
  if d ~= #self.points[1] then
    fail("xstar has %d coordinates, the training inputs %d", d, #self.points[1])
  end
  return true
end

-- Ky⁻¹ as an operator whose products solve: one Cholesky factor, two
-- triangular solves a product, where exact methods run; a lazy inverse (CG
-- a product) above max_cholesky_size.
local function noisy_inverse(self, Ky)
  if self.n <= lt.settings.max_cholesky_size then
    return lt.chol(factor_of(self, Ky) or Ky:cholesky()):inverse()
  end
  return Ky:inverse()
end

-- Ksx·R as a dense matrix. R is the dense n×k Galerkin root, or — when the
-- Krylov space closed early and root_inv completed it with Ky⁻¹ off the
-- space — a lazy n×n operator with cheap products: Ksx·R = (Rᵀ·Kxs)ᵀ.
local function times_love_root(Kst, R)
  if not lt.is_lazy(R) then return Kst * R end
  local KsT = (lt.is_lazy(Kst) and Kst:dense() or Kst):t():contiguous()
  return (R:t() * KsT):t()
end

-- LOVE's variances are checked once, where they are hardest, at LOVE_CHECKS
-- training inputs spread over the data, against the exact posterior
-- variance there; the check passes at a relative error of LOVE_TOLERANCE.
local LOVE_CHECKS, LOVE_TOLERANCE = 32, 1e-3

-- Ky⁻¹·E for LOVE's check: two triangular solves with the model's Cholesky
-- factor; on the iterative path, while α is stale, one block solve of
-- [y − m | E] gives α too (one preconditioner and one CG run instead of
-- two: issue 25, LOVE at n = 2000 built its rank-269 preconditioner twice).
local function solve_with_alpha(self, Ky, E)
  local L = factor_of(self, Ky)
  if L then return L:t():solve((L:solve(E))) end
  local now = state(self, true, self.mean_value)
  if fresh(self.alpha_state, now) then return Ky:solve(E) end
  local n, m = self.n, E:size(2)
  local X = Ky:solve(lt.cat({residual(self):reshape(n, 1), E}, 2))
  self.alpha = X:narrow(2, 1, 1):contiguous():reshape(n)
  self.alpha_state = now
  return X:narrow(2, 2, m)
end

-- K's columns at the training inputs rows (n × #rows): a plain kernel's
-- rows (entries evaluated, K symmetric), else K times unit vectors E.
local function kernel_columns(K, rows, E)
  if lt.type(K) ~= "kernel" then return K * E end
  local parts = {}
  for j, i in ipairs(rows) do parts[j] = K:row(i):reshape(1, K:size(2)) end
  return lt.cat(parts, 1):dense():t():contiguous()
end

-- The largest relative error of LOVE's posterior variance Kᵢᵢ − ‖Rᵀkᵢ‖² at
-- the checked training inputs i. The exact one comes without cancellation
-- from one block solve with unit vectors: kᵢ = Ky·eᵢ − σᵢ²eᵢ makes
-- kᵢᵀKy⁻¹kᵢ = Kᵢᵢ + σᵢ² − 2σᵢ² + σᵢ⁴[Ky⁻¹]ᵢᵢ, so var = σᵢ² − σᵢ⁴[Ky⁻¹]ᵢᵢ.
local function love_variance_error(self, K, Ky, R)
  local n = self.n
  local m = math.min(LOVE_CHECKS, n)
  local E, rows = lt.zeros(n, m), {}
  for j = 1, m do
    rows[j] = math.floor((j - 0.5) * n / m) + 1
    E:set(rows[j], j, 1)
  end
  local Kc = kernel_columns(K, rows, E) -- K's columns at the checked inputs
  local W = R:t() * Kc
  local love_explained = W:cmul(W):sum(1)
  local KyinvE = solve_with_alpha(self, Ky, E)
  local noise = noise_vector(self)
  local worst = 0
  for j, i in ipairs(rows) do
    local s2 = noise[i]
    local exact = math.max(s2 - s2 * s2 * KyinvE:get(i, j), 1e-300)
    local love = Kc:get(i, j) - love_explained[j]
    worst = math.max(worst, math.abs(love - exact) / exact)
  end
  return worst
end

--- LOVE (Pleiss et al. 2018): a Lanczos decomposition of Ky run once,
-- Ky⁻¹ ≈ R·Rᵀ with R n×k (k = lt.settings.max_root_decomposition_size), after
-- which k*(x)ᵀ Ky⁻¹ k*(x) ≈ ‖Rᵀ k*(x)‖² costs O(k·n) per test point instead
-- of a solve. Kept until the hyperparameters or the noise change. Returns R
-- and an info table: method "lanczos", rank k, Lanczos's own iterations and
-- residual, variance_error (the largest relative error of the posterior
-- variance at 8 training inputs, against one exact block solve) and
-- converged = variance_error ≤ tolerance (1e-3). root_inv's own residual
-- measures R·Rᵀ against Ky⁻¹ on random vectors, not at the kernel columns
-- the variances need (co2 at rank 400: residual 0.44, variances right to
-- 1e-7). A variance from the dense (Galerkin) R is too large, never too
-- small: Q·T⁻¹·Qᵀ approximates Ky⁻¹ from below; when Lanczos's space closes
-- early, R is completed with Ky⁻¹ off the space (a lazy n×n operator).
function Model:love_root()
  local k = lt.settings.max_root_decomposition_size
  local now = state(self, true, k)
  if not fresh(self.love_state, now) then
    local K = self:covariance().K
    local Ky = noisy(self, self:covariance())
    -- Lanczos on the noise-whitened D^-½·Ky·D^-½ = D^-½·K·D^-½ + I (D the
    -- noise variances): its small eigenvalues cluster at 1 as Ky's do at σ²
    -- for scalar noise, which per-point noise would otherwise spread out
    -- (and spoil Lanczos's convergence); then Ky⁻¹ = D^-½ (R̃R̃ᵀ) D^-½. The
    -- lt.operator hides Ky's structured exact rules (and the Cholesky below
    -- max_cholesky_size) so that root_inv runs Lanczos at every n.
    local w = lt.diag(noise_vector(self):pow(-0.5))
    local whitened = lt.operator{shape = {self.n, self.n}, psd = true, name = "Ky (LOVE)",
                                 matmul = function(X) return w * (Ky * (w * X)) end}
    local Rw, lanczos = whitened:root_inv{max_cholesky_size = 0, max_root_decomposition_size = k}
    local R = w * Rw
    local err = love_variance_error(self, K, Ky, R)
    self.love = {R = R, info = {method = "lanczos", rank = R:size(2),
                                iterations = lanczos and lanczos.iterations,
                                residual = lanczos and lanczos.residual, variance_error = err,
                                tolerance = LOVE_TOLERANCE, converged = err <= LOVE_TOLERANCE}}
    self.love_state = now
  end
  return self.love.R, self.love.info
end

-- Test points per block solve on the iterative path: a block of n × c
-- doubles within SOLVE_BLOCK_DOUBLES (16 MiB), so that CG's blocks stay
-- few and small (one solve with 500 columns at n = 20,000 spent 57 % of its
-- time in the kernel zeroing fresh pages for its 80 MB blocks).
local SOLVE_BLOCK_DOUBLES = 2 ^ 21

-- The explained variance k*ᵀ Ky⁻¹ k* of each test point (a 1-d tensor): from
-- the shared Cholesky factor L as ‖L⁻¹k*‖² (one triangular solve), by block
-- solves over the test points (the cross-covariance made dense a block of
-- rows at a time: SKI's W*·K_grid·Wᵀ never n × n* at once), or from the
-- LOVE root. (model.solve_block_doubles overrides the block's size.)
local function explained_variance(self, Ky, Kst, love, cov, star, star_tensor)
  if love then
    local W = times_love_root(Kst, self:love_root()) -- n* × k
    return W:cmul(W):sum(2):reshape(W:size(1))
  end
  local L = factor_of(self, Ky)
  if L then
    local KsT = (lt.is_lazy(Kst) and Kst:dense() or Kst):t():contiguous()
    local V = L:solve(KsT)
    return (V:cmul(V):sum(1))
  end
  local ns = Kst:size(1)
  local c = math.max(1, math.floor((self.solve_block_doubles or SOLVE_BLOCK_DOUBLES) / self.n))
  local out = {}
  for lo = 1, ns, c do
    local len = math.min(c, ns - lo + 1)
    local rows = Kst
    if len < ns then
      -- rows lo ... lo + len − 1 of Kst: a lazy one is made anew from
      -- those test points (in its own structure), a dense one narrowed
      if lt.is_lazy(Kst) and star == nil then -- the rows of the test points' tensor
        rows = cov.cross(star_tensor:narrow(1, lo, len))
      elseif lt.is_lazy(Kst) then
        local part = {}
        for j = 1, len do part[j] = star[lo + j - 1] end
        rows = cov.cross(part)
      else
        rows = Kst:narrow(1, lo, len)
      end
    end
    local KsT = (lt.is_lazy(rows) and rows:dense() or rows):t():contiguous()
    local V = Ky:solve(KsT)
    local e = KsT:cmul(V):sum(1)
    for j = 1, len do out[lo + j - 1] = e[j] end
  end
  return lt.tensor(out)
end

--- Posterior mean and (with opts.variance ~= false) variance of f at xstar
-- (the latent function: add the noise for a new observation's variance).
-- opts.love = true takes the variances from the cached LOVE root (see
-- love_root) and returns its Lanczos info as a third result.
function Model:predict(xstar, opts)
  opts = options("predict", opts, {"variance", "love"})
  local star = test_points(self, xstar)
  local cov = self:covariance()
  local Ky = noisy(self, cov)
  local Kst = cov.cross(star) -- n* × n
  -- LOVE's root first: its check's solve makes α too (solve_with_alpha)
  if opts.love and opts.variance ~= false then self:love_root() end
  local mean = Kst * alpha_of(self, Ky) + self.mean_value
  if opts.variance == false then return mean end
  local var = structure.prior_variance(self.kernel, star)
              - explained_variance(self, Ky, Kst, opts.love, cov, star)
  if opts.love then return mean, var, self.love.info end
  return mean, var
end

-- Ksx·Ky⁻¹·Kxs as an operator: a lazy product when the cross-covariance is
-- lazy; over a dense one (where the library would multiply out an n*×n*
-- matrix), an lt.operator whose product is Ksx·(Ky⁻¹·(Kxs·X)).
local function explained_covariance(Kst, Kinv)
  if lt.is_lazy(Kst) then return Kst * Kinv * Kst:t() end
  local KsT = Kst:t():contiguous()
  return lt.operator{shape = {Kst:size(1), Kst:size(1)}, psd = true, name = "Ksx·Ky⁻¹·Kxs",
                     matmul = function(X) return Kst * (Kinv * (KsT * X)) end}
end

-- Structures whose covariances at test points off their grid are the
-- kernel's plain entries: with a tensor xstar, the posterior takes them
-- from lt.kernel (structure.point_covariances) instead.
local PLAIN_OFF_GRID = {kron = true, kron_masked = true, dense = true}

-- Where the posterior's cross- and test covariances come from, and xstar's
-- own tensor when they take it (nil: the points). The kernel and custom
-- structures build them from the tensor itself; kron, kron_masked and dense
-- from lt.kernel when the kernel has a C plan. So inside lt.grad the
-- posterior follows a followed xstar (bo's acquisitions differentiate
-- with respect to the candidates). Toeplitz (grid positions) and SKI
-- (interpolation) take the points and do not follow it.
local function posterior_points(self, cov, xstar)
  local own = own_points_tensor(xstar)
  if not own then return cov, nil end
  if cov.kind == "kernel" or cov.kind == "custom" then return cov, own end
  if PLAIN_OFF_GRID[cov.kind] then
    local plain = structure.point_covariances(self.kernel, self.points)
    if plain then return plain, own end
  end
  return cov, nil
end

--- Whether model:posterior(xstar) of a tensor xstar follows it inside
-- lt.grad (a gradient with respect to the test points exists), and the
-- covariance's structure: true for the kernel and custom structures, and
-- for kron, kron_masked and dense when every part of the kernel has a C
-- operator; false for Toeplitz and SKI (build with structure = "kernel").
function Model:posterior_follows_inputs()
  local cov = self:covariance()
  local ok = cov.kind == "kernel" or cov.kind == "custom"
             or (PLAIN_OFF_GRID[cov.kind] and structure.c_plan(self.kernel) ~= nil) or false
  return ok, cov.kind
end

--- The posterior of f at xstar: an lt.mvn whose mean is the predictive mean
-- and whose covariance is the lazy operator Kss − Ksx·Ky⁻¹·Kxs (Kss the
-- prior covariance of the test points, in the training covariance's
-- structure where it carries over). Its products cost solves with Ky (from
-- one Cholesky factor below max_cholesky_size, CG above); with opts.love =
-- true the subtracted term is the low-rank (Ksx·R)(Ksx·R)ᵀ of the LOVE root
-- instead. d:variance(), d:stddev(), d:confidence_region(), d:rsample(n)
-- (from a root of the covariance: Cholesky, or Lanczos above
-- max_cholesky_size) work on it as on any lt.mvn.
function Model:posterior(xstar, opts)
  opts = options("posterior", opts, {"love"})
  local star = test_points(self, xstar)
  local cov = self:covariance()
  local at, star_tensor = posterior_points(self, cov, xstar)
  local Ky = noisy(self, cov)
  local Kst = at.cross(star_tensor or star)
  if opts.love then self:love_root() end -- before α: its check's solve makes α too
  local mean = Kst * alpha_of(self, Ky) + self.mean_value
  local explained
  if opts.love then
    explained = lt.lowrank(times_love_root(Kst, self:love_root()))
  else
    explained = explained_covariance(Kst, noisy_inverse(self, Ky))
  end
  return lt.mvn(mean, lt.psd(at.test_covariance(star_tensor or star) - explained))
end

-- k(x, x) of a stationary kernel (the same at every x; nil for the
-- others), kept while the kernel's values stay.
local function stationary_variance(self)
  if not self.kernel:is_stationary() then return nil end
  local now = self.kernel:fingerprint()
  if self.kxx_fingerprint ~= now then
    local p = self.points[1]
    self.kxx, self.kxx_fingerprint = self.kernel:value(p, p), now
  end
  return self.kxx
end

--- The posterior mean and variance of f at xstar (two 1-d tensors): the
-- mean and the diagonal of posterior(xstar)'s covariance, without building
-- the lazy n*×n* covariance — the variance as predict's, k(x, x) minus the
-- column norms ‖L⁻¹kₓ‖² (one triangular solve). Inside lt.grad a tensor
-- xstar is followed as posterior follows it (the same structures:
-- posterior_follows_inputs): bo's analytic acquisitions differentiate this
-- at every L-BFGS evaluation, and the diagonal of the lazy product
-- Ksx·Ky⁻¹·Kxs was the costliest part of that backward pass.
function Model:mean_and_variance(xstar)
  local checked = checked_test_tensor(self, xstar)
  local cov = self:covariance()
  local at, star_tensor = posterior_points(self, cov, xstar)
  -- the points as Lua arrays only where the structure takes them
  local star = not (checked and star_tensor) and test_points(self, xstar) or nil
  local Ky = noisy(self, cov)
  local Kst = at.cross(star_tensor or star)
  local mean = Kst * alpha_of(self, Ky) + self.mean_value
  local prior
  local kxx = star_tensor and stationary_variance(self)
  if kxx then -- k(x, x) the same at every x: no test covariance to build and follow
    prior = lt.full({Kst:size(1)}, kxx)
  else
    prior = at.test_covariance(star_tensor or star):diagonal()
  end
  return mean, prior - explained_variance(self, Ky, Kst, false, at, star, star_tensor)
end

--- A readable summary of the hyperparameters.
function Model:describe()
  local noise
  if self:per_point_noise() then
    noise = string.format("noise = per point (%d values from %.6g to %.6g, fixed)", self.n,
                          self.noise:min(), self.noise:max())
  else
    noise = string.format("noise = %.6g%s", self.noise, self.fixed.noise and " (fixed)" or "")
  end
  return string.format("%s\n%s\nmean = %.6g", self.kernel:describe(), noise, self.mean_value)
end

--- model:condition(x_new, y_new [, noise_new]) → a new model with the points
-- added and the hyperparameters kept, by appending rows to the Cholesky
-- factor: see gp/condition.lua.
-- @function Model:condition
condition.install(Model, batch.BatchModel, {
  gp = gp, state = state, fresh = fresh, fail = fail, to_points = to_points,
  to_vector = to_vector, check_noise = check_noise, copy = batch.deep_copy,
})

--- Sparse GP regression with inducing points (Titsias' bound): see gp/sgpr.lua.
-- spec: x, y, kernel (one lt.kernel computes, or a sum of them),
-- inducing (m, a count: evenly spread rows of x; or m×d points), noise (σ²),
-- mean ("constant" or "zero"), mean_value, fixed = {noise, mean, inducing},
-- jitter (added to Kzz's diagonal, default 1e-6·k(x, x)).
-- @function gp.sgpr
gp.sgpr = require("lazytensor.gp.sgpr").constructor{
  fail = fail, to_points = to_points, to_vector = to_vector, options = options,
  check_noise = check_noise, fit = Model.fit, test_points_tensor = test_points_tensor,
  parse_hyper = gp.parse_hyper,
}

--- Multitask GP regression (intrinsic coregionalisation, B ⊗ K): see
-- gp/multitask.lua. spec: x, y (n×t, NaN for a missing value), kernel,
-- rank (of W in B = W·Wᵀ + diag(v), default 1), noise (σ²), task_noise
-- (true: a noise variance of each task added to σ², as GPyTorch's
-- MultitaskGaussianLikelihood), mean ("constant": one per task, or
-- "zero"), fixed = {noise, task_noise, mean}, bounds, priors.
-- @function gp.multitask
gp.multitask = require("lazytensor.gp.multitask").constructor{
  fail = fail, to_points = to_points, options = options, check_noise = check_noise,
  fit = Model.fit, test_points_tensor = test_points_tensor, parse_hyper = gp.parse_hyper,
}

--- Likelihoods for the non-Gaussian models: see gp/likelihoods.lua.
gp.likelihoods = require "lazytensor.gp.likelihoods"

--- Priors on hyperparameters (every model): see gp/priors.lua.
gp.priors = require "lazytensor.gp.priors"

--- Sparse variational GPs (SVGP) with any likelihood: see gp/variational.lua.
-- @function gp.variational
gp.variational = require("lazytensor.gp.variational").constructor{
  fail = fail, to_points = to_points, options = options, test_points_tensor = test_points_tensor,
}

--- Exact-GP classification by Laplace's method: see gp/laplace.lua.
-- @function gp.laplace
gp.laplace = require("lazytensor.gp.laplace").constructor{
  fail = fail, to_points = to_points, options = options, test_points_tensor = test_points_tensor,
}

return gp
