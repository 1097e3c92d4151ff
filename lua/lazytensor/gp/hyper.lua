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

return hyper
