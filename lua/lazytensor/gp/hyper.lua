--- Bounds and priors on the hyperparameters of gp.variational and
-- gp.laplace (positive hyperparameters: lengthscale, variance, period,
-- alpha, noise, scale).
--
-- A hyperparameter θ is optimised through an unconstrained value r:
--   no bounds (lo = 0, hi = ∞):  θ = e^r        (r = log θ, key "log_<name>")
--   lo > 0, hi = ∞:              θ = lo + e^r   (key "raw_<name>")
--   hi < ∞:                      θ = lo + (hi − lo)·σ(r)
-- written with tensor operations so that lt.grad follows the map with the
-- rest of the objective (as GPyTorch's GreaterThan / Interval constraints).
-- A gaussian likelihood's noise has the bounds {1e-4, ∞} unless given (the
-- noise floor GPyTorch holds).
local lt = require "lazytensor"
local priors = require "lazytensor.gp.priors"

local hyper = {}

local log, exp = math.log, math.exp
local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

--- The noise floor: the default lower bound of a gaussian likelihood's noise.
hyper.NOISE_FLOOR = 1e-4

-- Parses spec.bounds and spec.priors against the hyperparameters the model
-- has (names: a set name → current value, a number or a list); fail: the
-- model's error function. Returns bounds (name → {lo, hi}, only where not
-- {0, ∞}) and priors (name → prior).
function hyper.parse(fail, names, bounds, prior_spec, defaults)
  local out_bounds, out_priors = {}, {}
  if bounds ~= nil and type(bounds) ~= "table" then fail("bounds must be a table") end
  if prior_spec ~= nil and type(prior_spec) ~= "table" then fail("priors must be a table") end
  local merged = {}
  for name, b in pairs(defaults or {}) do
    if names[name] ~= nil then merged[name] = b end
  end
  for name, b in pairs(bounds or {}) do
    if names[name] == nil then fail("bounds on an unknown hyperparameter '%s'", tostring(name)) end
    merged[name] = b
  end
  for name, b in pairs(merged) do
    if type(b) ~= "table" or type(b[1]) ~= "number" or type(b[2]) ~= "number" then
      fail("bounds.%s must be {lo, hi} (two numbers)", name)
    end
    local lo, hi = b[1], b[2]
    if lo ~= lo or hi ~= hi or lo < 0 or lo == math.huge then
      fail("bounds.%s: lo must be a finite number ≥ 0 and hi a number, got {%s, %s}", name,
           tostring(lo), tostring(hi))
    end
    if lo >= hi then
      fail("bounds.%s: lo = %s must be below hi = %s", name, tostring(lo), tostring(hi))
    end
    local values = type(names[name]) == "table" and names[name] or {names[name]}
    for _, v in ipairs(values) do
      if not (v > lo and v < hi) then
        fail("%s = %.6g is outside its bounds (%.6g, %.6g): give another initial value or bounds",
             name, v, lo, hi)
      end
    end
    if lo > 0 or hi < math.huge then out_bounds[name] = {lo, hi} end
  end
  for name, p in pairs(prior_spec or {}) do
    if names[name] == nil then fail("a prior on an unknown hyperparameter '%s'", tostring(name)) end
    if getmetatable(p) ~= priors.Prior then
      fail("priors.%s must be a gp.priors density (normal, lognormal, gamma, ...)", name)
    end
    out_priors[name] = p
  end
  return out_bounds, out_priors
end

--- The parameter key of a hyperparameter: "log_<name>" or "raw_<name>".
function hyper.key(bounds, name)
  return (bounds[name] and "raw_" or "log_") .. name
end

--- r from θ (numbers; a list for ARD).
function hyper.to_raw(bounds, name, v)
  if type(v) == "table" then
    local out = {}
    for i, x in ipairs(v) do out[i] = hyper.to_raw(bounds, name, x) end
    return out
  end
  local b = bounds[name]
  if not b then return log(v) end
  if b[2] == math.huge then return log(v - b[1]) end
  local u = (v - b[1]) / (b[2] - b[1])
  return log(u / (1 - u))
end

--- θ from r: a number, or a 0-d / 1-d tensor (followed inside lt.grad).
function hyper.from_raw(bounds, name, r)
  local b = bounds[name]
  if type(r) == "number" then
    if not b then return exp(r) end
    if b[2] == math.huge then return b[1] + exp(r) end
    return b[1] + (b[2] - b[1]) / (1 + exp(-r))
  end
  if not b then return r:exp() end
  if b[2] == math.huge then return r:exp() + b[1] end
  return ((-r):exp() + 1):pow(-1) * (b[2] - b[1]) + b[1]
end

--- θ from r as Lua numbers (a list for a 1-d tensor), for storing.
function hyper.value_of(bounds, name, r)
  if lt.is_tensor(r) and r:dim() == 1 then
    local out = {}
    for i, x in ipairs(r:totable()) do out[i] = hyper.from_raw(bounds, name, x) end
    return out
  end
  if lt.is_tensor(r) then r = r:item() end
  return hyper.from_raw(bounds, name, r)
end

--- Σ log prior over the priors, with value(name) the hyperparameter's
-- value (followed or a constant).
function hyper.log_prior(prior_set, value)
  local total = 0
  for name, p in pairs(prior_set) do
    local v = value(name)
    if type(v) == "table" then v = lt.tensor(v) end
    total = total + p:log_density(v)
  end
  return total
end

------------------------------------------- models in log space --
-- gp.exact, gp.sgpr and gp.multitask keep get_vector / set_vector /
-- mll_and_grad in log space (log θ for each positive hyperparameter; the
-- means, W and the inducing points as they are), as before bounds. Their
-- fit works on the raw vector: an entry of get_vector that is a bounded
-- hyperparameter is its r (above), the others stay, and the gradient is
-- chained ∂/∂r = ∂/∂log θ · (dθ/dr)/θ, the priors' ∂ log p/∂θ · dθ/dr
-- added. The model holds self.bounds and self.priors (hyper.parse's) and
-- gives self:hyper_entries() (for each entry of get_vector the name of its
-- hyperparameter, or false) and self:hyper_values() (name → value, a
-- number or a flat list, free and fixed: the k-th entry of a name in
-- get_vector is the k-th value of its list).

-- dθ/dr of a bounded hyperparameter at r.
local function slope(b, r)
  if b[2] == math.huge then return exp(r) end
  local s = 1 / (1 + exp(-r))
  return (b[2] - b[1]) * s * (1 - s)
end

-- r of θ, θ held inside (lo, hi): a value rounded onto a bound (e^-50 above
-- the floor is the floor in doubles) maps to far out, not to NaN.
local function raw_inside(b, name, v)
  if v <= b[1] then return -745 end
  if b[2] < math.huge and v >= b[2] then return 745 end
  return hyper.to_raw({[name] = b}, name, v)
end

-- log θ such that the model's exp(log θ) stays inside [lo, hi] (a value
-- at a bound would round past it).
local function log_inside(b, theta)
  local v = log(theta)
  local step = 2 ^ -52 * math.max(1, math.abs(v))
  if exp(v) > b[2] then v = v - step end
  if exp(v) < b[1] then v = v + step end
  return v
end

-- For each entry of get_vector: {name, k} (the k-th value of the name) or false.
local function layout(self)
  local seen, out = {}, {}
  for i, name in ipairs(self:hyper_entries()) do
    if name then
      seen[name] = (seen[name] or 0) + 1
      out[i] = {name = name, k = seen[name]}
    else
      out[i] = false
    end
  end
  return out
end

local function value_list(v)
  return type(v) == "table" and v or {v}
end

--- Parses spec.bounds and spec.priors for a log-space model (fail: its
-- error function; names: hyper_values(); free: name → true for those in
-- get_vector; defaults: as hyper.parse's). A bound on a fixed
-- hyperparameter is an error (it would never act); a prior on one is a
-- constant of the log posterior.
function hyper.parse_model(fail, names, free, bounds, prior_spec, defaults)
  if type(bounds) == "table" then
    for name in pairs(bounds) do
      if names[name] ~= nil and not free[name] then
        fail("bounds.%s: %s is fixed, so bounds on it would never act", name, name)
      end
    end
  end
  return hyper.parse(fail, names, bounds, prior_spec, defaults)
end

--- Installs raw_vector, set_raw_vector, log_prior, log_posterior and
-- log_posterior_and_grad on a log-space model's class.
function hyper.install(Class)
  --- The fit's unconstrained parameters: get_vector with each bounded
  -- hyperparameter's entry replaced by its r.
  function Class:raw_vector()
    local v = self:get_vector()
    local cache = self.raw_cache
    if cache and #cache.v == #v then
      local same = true
      for i = 1, #v do same = same and cache.v[i] == v[i] end
      if same then return {unpack(cache.r)} end -- what set_raw_vector was given
    end
    for i, e in ipairs(layout(self)) do
      local b = e and self.bounds[e.name]
      if b then v[i] = raw_inside(b, e.name, exp(v[i])) end
    end
    return v
  end

  --- Sets the parameters from the raw vector r.
  function Class:set_raw_vector(r)
    local v = {}
    for i, e in ipairs(layout(self)) do
      local b = e and self.bounds[e.name]
      v[i] = b and log_inside(b, hyper.from_raw(self.bounds, e.name, r[i])) or r[i]
    end
    self:set_vector(v)
    self.raw_cache = {v = self:get_vector(), r = {unpack(r)}}
  end

  --- Σ log p(θ) over the priors (0 without priors), and with want_grad
  -- its gradient ∂/∂θ for each entry of get_vector (a table index → value).
  function Class:log_prior(want_grad)
    local total, dtheta = 0, {}
    if next(self.priors) == nil then return total, dtheta end
    local values = self:hyper_values()
    local where = {}
    for i, e in ipairs(layout(self)) do
      if e then
        where[e.name] = where[e.name] or {}
        where[e.name][e.k] = i
      end
    end
    for name, p in pairs(self.priors) do
      local list = value_list(values[name])
      if want_grad and where[name] then
        local g, value = lt.grad(function(t) return p:log_density(t) end)(lt.tensor(list))
        total = total + value
        for k, i in pairs(where[name]) do dtheta[i] = (dtheta[i] or 0) + g[k] end
      else
        total = total + p:log_density(lt.tensor(list))
      end
    end
    return total, dtheta
  end

  --- log p(y | θ) (the model's mll) plus Σ log p(θ) over the priors.
  function Class:log_posterior()
    return (self:mll()) + (self:log_prior())
  end

  --- The log posterior (the MLL without priors) and its gradient with
  -- respect to raw_vector()'s entries; then the MLL's info.
  function Class:log_posterior_and_grad()
    local value, glog, info = self:mll_and_grad()
    local prior, dtheta = self:log_prior(true)
    local r, values = self:raw_vector(), self:hyper_values()
    local grad = {}
    for i, e in ipairs(layout(self)) do
      local g = glog[i]
      if e then
        local b = self.bounds[e.name]
        local theta = value_list(values[e.name])[e.k]
        local dtheta_dr = b and slope(b, r[i]) or theta
        g = g * dtheta_dr / theta + (dtheta[i] or 0) * dtheta_dr
      end
      grad[i] = g
    end
    return value + prior, grad, info
  end
end

return hyper
