--- Bounds and priors on the hyperparameters of every GP model: the
-- positive ones (lengthscale, variance, period, alpha, noise, scale, ...)
-- and the real-valued ones (the constant means "mean", gp.multitask's
-- "task_factor" W, the inducing points "inducing" of gp.sgpr and
-- gp.variational).
--
-- A positive hyperparameter θ is optimised through an unconstrained value r:
--   no bounds (lo = 0, hi = ∞):  θ = e^r        (r = log θ, key "log_<name>")
--   lo > 0, hi = ∞:              θ = lo + e^r   (key "raw_<name>")
--   hi < ∞:                      θ = lo + (hi − lo)·σ(r)
-- A real-valued one entry by entry, with −∞ ≤ lo < hi ≤ ∞ (per entry or
-- the same for all):
--   lo = −∞, hi = ∞:  θ = r      lo finite, hi = ∞:  θ = lo + e^r
--   lo = −∞, hi < ∞:  θ = hi − e^r      both finite:  θ = lo + (hi − lo)·σ(r)
-- written with tensor operations so that lt.grad follows the map with the
-- rest of the objective (as GPyTorch's GreaterThan / LessThan / Interval
-- constraints). A gaussian likelihood's noise has the bounds {1e-4, ∞}
-- unless given (the noise floor GPyTorch holds).
local lt = require "lazytensor"
local priors = require "lazytensor.gp.priors"

local hyper = {}

local log, exp = math.log, math.exp
local huge = math.huge
local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

--- The noise floor: the default lower bound of a gaussian likelihood's noise.
hyper.NOISE_FLOOR = 1e-4

local shape_text, same_shape = priors._shape_text, priors._same_shape

-- The shape of a positive hyperparameter's value: {} or {#list}.
local function positive_shape(v)
  return type(v) == "table" and {#v} or {}
end

-- A prior's per-entry shape must be the hyperparameter's.
local function check_prior_shape(fail, name, p, shape)
  if p.shape and not same_shape(p.shape, shape) then
    fail("priors.%s: the prior's per-entry parameters are %s, %s is %s", name, p:shape_text(),
         name, shape_text(shape))
  end
end

-- One side of a real-valued parameter's bounds: a number (every entry) or
-- one per entry (a table or tensor of the parameter's shape); a flat list.
local function bound_side(fail, name, side, v, real)
  if type(v) == "number" then
    if v ~= v then fail("bounds.%s: %s is NaN", name, side) end
    local out = {}
    for k = 1, #real.value_list do out[k] = v end
    return out
  end
  if type(v) ~= "table" and not lt.is_tensor(v) then
    fail("bounds.%s must be {lo, hi}: lo and hi numbers (±math.huge allowed) or one per entry, "
         .. "got a %s %s", name, type(v), side)
  end
  local ok, t = pcall(function() return lt.is_tensor(v) and v or lt.tensor(v) end)
  if not ok or lt.is_lazy(t) then
    fail("bounds.%s: %s must be a number or a table / dense tensor of numbers", name, side)
  end
  if not same_shape(t:shape(), real.shape) then
    fail("bounds.%s: %s is %s per entry, %s is %s", name, side, shape_text(t:shape()), name,
         shape_text(real.shape))
  end
  local flat = t:contiguous():reshape(math.max(1, t:numel())):totable()
  for k, x in ipairs(flat) do
    if x ~= x then fail("bounds.%s: %s[%d] is NaN", name, side, k) end
  end
  return flat
end

-- Bounds {lo, hi} on a real-valued parameter (real: {value, shape, free}):
-- {real = true, lo = list, hi = list, shape}, or nil when every entry is
-- (−∞, ∞).
local function parse_real_bounds(fail, name, b, real)
  if type(b) ~= "table" or lt.is_tensor(b) or b[1] == nil or b[2] == nil or b[3] ~= nil then
    fail("bounds.%s must be {lo, hi}", name)
  end
  if not real.free then
    fail("bounds.%s: %s is fixed, so bounds on it would never act", name, name)
  end
  local lo = bound_side(fail, name, "lo", b[1], real)
  local hi = bound_side(fail, name, "hi", b[2], real)
  local many = #real.value_list > 1
  local any = false
  for k, v in ipairs(real.value_list) do
    local at = many and string.format("[%d]", k) or ""
    if lo[k] >= hi[k] or lo[k] == huge or hi[k] == -huge then
      fail("bounds.%s%s: lo = %.6g must be below hi = %.6g", name, at, lo[k], hi[k])
    end
    if not (v > lo[k] and v < hi[k]) then
      fail("%s%s = %.6g is outside its bounds (%.6g, %.6g): give another initial value or bounds",
           name, at, v, lo[k], hi[k])
    end
    any = any or lo[k] > -huge or hi[k] < huge
  end
  if not any then return nil end
  return {real = true, lo = lo, hi = hi, shape = real.shape}
end

-- Parses spec.bounds and spec.priors against the hyperparameters the model
-- has (names: a set name → current value, a number or a list, of the
-- positive ones; reals: name → {value = a number or a flat list, shape,
-- free} of the real-valued ones); fail: the model's error function.
-- Returns bounds (name → {lo, hi}, only where not {0, ∞}; for a real one
-- hyper.parse_real_bounds's table) and priors (name → prior).
function hyper.parse(fail, names, bounds, prior_spec, defaults, reals)
  reals = reals or {}
  local out_bounds, out_priors = {}, {}
  if bounds ~= nil and type(bounds) ~= "table" then fail("bounds must be a table") end
  if prior_spec ~= nil and type(prior_spec) ~= "table" then fail("priors must be a table") end
  for _, real in pairs(reals) do
    real.value_list = type(real.value) == "table" and real.value or {real.value}
  end
  local merged = {}
  for name, b in pairs(defaults or {}) do
    if names[name] ~= nil then merged[name] = b end
  end
  for name, b in pairs(bounds or {}) do
    if reals[name] then
      out_bounds[name] = parse_real_bounds(fail, name, b, reals[name])
    elseif names[name] == nil then
      fail("bounds on an unknown hyperparameter '%s'", tostring(name))
    else
      merged[name] = b
    end
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
    if names[name] == nil and reals[name] == nil then
      fail("a prior on an unknown hyperparameter '%s'", tostring(name))
    end
    if getmetatable(p) ~= priors.Prior then
      fail("priors.%s must be a gp.priors density (normal, lognormal, gamma, ...)", name)
    end
    if reals[name] then
      if p.support ~= "real" then
        fail("priors.%s: %s is a density on positive values and %s is real-valued: "
             .. "use normal, smoothed_box or uniform", name, p.kind, name)
      end
      check_prior_shape(fail, name, p, reals[name].shape)
    else
      check_prior_shape(fail, name, p, positive_shape(names[name]))
    end
    out_priors[name] = p
  end
  return out_bounds, out_priors
end

------------------------------------------------ real-valued parameters --

-- The map of one entry with bounds (lo, hi): "free", "above" (lo + e^r),
-- "below" (hi − e^r) or "box".
local function real_kind(lo, hi)
  if lo == -huge then return hi == huge and "free" or "below" end
  return hi == huge and "above" or "box"
end

--- r from θ for one entry of a real-valued parameter with bounds (lo, hi).
function hyper.real_to_raw(lo, hi, v)
  local kind = real_kind(lo, hi)
  if kind == "free" then return v end
  if kind == "above" then return log(v - lo) end
  if kind == "below" then return log(hi - v) end
  local u = (v - lo) / (hi - lo)
  return log(u / (1 - u))
end

--- θ from r (a number) for one entry.
function hyper.real_from_raw(lo, hi, r)
  local kind = real_kind(lo, hi)
  if kind == "free" then return r end
  if kind == "above" then return lo + exp(r) end
  if kind == "below" then return hi - exp(r) end
  return lo + (hi - lo) / (1 + exp(-r))
end

-- dθ/dr of one entry at r.
local function real_slope(lo, hi, r)
  local kind = real_kind(lo, hi)
  if kind == "free" then return 1 end
  if kind == "above" then return exp(r) end
  if kind == "below" then return -exp(r) end
  local s = 1 / (1 + exp(-r))
  return (hi - lo) * s * (1 - s)
end

-- r of θ held inside [lo, hi]: a value rounded onto a bound maps far out
-- (a box's lower edge to −700, not −745: the tensor sigmoid's e^{−r} would
-- overflow, and its derivative be NaN, below −709).
local function real_raw_inside(lo, hi, v)
  local kind = real_kind(lo, hi)
  if kind ~= "free" then
    if kind ~= "below" and v <= lo then return kind == "box" and -700 or -745 end
    if kind ~= "above" and v >= hi then return kind == "below" and -745 or 745 end
  end
  return hyper.real_to_raw(lo, hi, v)
end

-- The entries' masks and constants of a per-entry map (cached in b):
-- θ = r⊙F + e^{r⊙A}⊙A − e^{r⊙B}⊙B + σ(r⊙X)⊙(hi − lo)⊙X + c, with F, A, B,
-- X the 0/1 masks of the entries whose map is free, above, below, box.
local function real_masks(b)
  if b.masks then return b.masks end
  local masks, width, const = {free = {}, above = {}, below = {}, box = {}}, {}, {}
  local present = {}
  for k = 1, #b.lo do
    local lo, hi = b.lo[k], b.hi[k]
    local kind = real_kind(lo, hi)
    for name, list in pairs(masks) do list[k] = name == kind and 1 or 0 end
    present[kind] = true
    width[k] = kind == "box" and hi - lo or 0
    const[k] = (kind == "above" or kind == "box") and lo or (kind == "below" and hi or 0)
  end
  local out = {const = lt.tensor(const), width = lt.tensor(width)}
  for name, list in pairs(masks) do
    if present[name] then out[name] = lt.tensor(list) end
  end
  b.masks = out
  return out
end

local function sigmoid(r) return ((-r):exp() + 1):pow(-1) end

--- θ from r for a real-valued parameter with bounds b (nil: θ = r): r a
-- number (one entry) or a tensor of the parameter's shape, followed inside
-- lt.grad (the map written with tensor operations).
function hyper.real_map(b, r)
  if not b then return r end
  if type(r) == "number" then return hyper.real_from_raw(b.lo[1], b.hi[1], r) end
  local n = #b.lo
  if r:numel() ~= n then
    error(string.format("lazytensor: gp: a bounded parameter of %d entries got %d", n,
                        r:numel()), 0)
  end
  local M = real_masks(b)
  local flat = r:reshape(n)
  local theta = M.const
  if M.free then theta = theta + flat:cmul(M.free) end
  if M.above then theta = theta + flat:cmul(M.above):exp():cmul(M.above) end
  if M.below then theta = theta - flat:cmul(M.below):exp():cmul(M.below) end
  if M.box then theta = theta + sigmoid(flat:cmul(M.box)):cmul(M.width) end
  if r:dim() == 0 then return theta:sum() end
  return theta:reshape(unpack(r:shape()))
end

--- r from θ (a number or a tensor of the parameter's shape) for a
-- real-valued parameter with bounds b: a number or a new tensor.
function hyper.real_raw(b, theta)
  if lt.is_tensor(theta) and theta:dim() == 0 then theta = theta:item() end
  if type(theta) == "number" then return real_raw_inside(b.lo[1], b.hi[1], theta) end
  local flat = theta:contiguous():reshape(theta:numel()):totable()
  for k, v in ipairs(flat) do flat[k] = real_raw_inside(b.lo[k], b.hi[k], v) end
  return lt.tensor(flat):reshape(unpack(theta:shape()))
end

--- θ as a constant from r (a number or a tensor) with bounds b: a number
-- or a new tensor of r's shape.
function hyper.real_value(b, r)
  if lt.is_tensor(r) and r:dim() == 0 then r = r:item() end
  if type(r) == "number" then return hyper.real_from_raw(b.lo[1], b.hi[1], r) end
  local flat = r:contiguous():reshape(r:numel()):totable()
  for k, v in ipairs(flat) do flat[k] = hyper.real_from_raw(b.lo[k], b.hi[k], v) end
  return lt.tensor(flat):reshape(unpack(r:shape()))
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
-- chained ∂/∂r = ∂/∂log θ · (dθ/dr)/θ (a positive one) or ∂/∂θ · dθ/dr (a
-- real-valued one), the priors' ∂ log p/∂θ · dθ/dr added (by lt.grad of
-- their densities). The model holds self.bounds and self.priors
-- (hyper.parse's) and gives self:hyper_entries() (for each entry of
-- get_vector the name of its hyperparameter), self:hyper_values() (name →
-- value, a number or a flat list, of the positive ones, free and fixed:
-- the k-th entry of a name in get_vector is the k-th value of its list)
-- and self:hyper_reals() (name → {value, shape, free} of the real-valued
-- ones, the values in get_vector's order).

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

-- For each entry of get_vector: {name, k (the k-th value of the name),
-- real (a real-valued parameter)}.
local function layout(self, reals)
  reals = reals or self:hyper_reals()
  local seen, out = {}, {}
  for i, name in ipairs(self:hyper_entries()) do
    seen[name] = (seen[name] or 0) + 1
    out[i] = {name = name, k = seen[name], real = reals[name] ~= nil}
  end
  return out
end

local function value_list(v)
  return type(v) == "table" and v or {v}
end

-- Every hyperparameter's value (a number or a flat list), positive and real.
local function all_values(self, reals)
  local values = self:hyper_values()
  for name, r in pairs(reals or self:hyper_reals()) do values[name] = r.value end
  return values
end

--- Parses spec.bounds and spec.priors for a log-space model (fail: its
-- error function; names: hyper_values(); free: name → true for those in
-- get_vector; defaults: as hyper.parse's). A bound on a fixed
-- hyperparameter is an error (it would never act); a prior on one is a
-- constant of the log posterior.
function hyper.parse_model(fail, names, free, bounds, prior_spec, defaults, reals)
  if type(bounds) == "table" then
    for name in pairs(bounds) do
      if names[name] ~= nil and not free[name] then
        fail("bounds.%s: %s is fixed, so bounds on it would never act", name, name)
      end
    end
  end
  return hyper.parse(fail, names, bounds, prior_spec, defaults, reals)
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
      local b = self.bounds[e.name]
      if b and e.real then
        v[i] = real_raw_inside(b.lo[e.k], b.hi[e.k], v[i])
      elseif b then
        v[i] = raw_inside(b, e.name, exp(v[i]))
      end
    end
    return v
  end

  --- Sets the parameters from the raw vector r.
  function Class:set_raw_vector(r)
    local v = {}
    for i, e in ipairs(layout(self)) do
      local b = self.bounds[e.name]
      if b and e.real then
        v[i] = hyper.real_from_raw(b.lo[e.k], b.hi[e.k], r[i])
      else
        v[i] = b and log_inside(b, hyper.from_raw(self.bounds, e.name, r[i])) or r[i]
      end
    end
    self:set_vector(v)
    self.raw_cache = {v = self:get_vector(), r = {unpack(r)}}
  end

  --- Σ log p(θ) over the priors (0 without priors), and with want_grad
  -- its gradient ∂/∂θ for each entry of get_vector (a table index → value).
  function Class:log_prior(want_grad)
    local total, dtheta = 0, {}
    if next(self.priors) == nil then return total, dtheta end
    local reals = self:hyper_reals()
    local values = all_values(self, reals)
    local where = {}
    for i, e in ipairs(layout(self, reals)) do
      where[e.name] = where[e.name] or {}
      where[e.name][e.k] = i
    end
    local lists, names = {}, {}
    for name in pairs(self.priors) do
      names[#names + 1] = name
      lists[name] = lt.tensor(value_list(values[name]))
    end
    table.sort(names) -- one order of the sum, whatever pairs' order
    local function log_density(ts)
      local sum = 0
      for _, name in ipairs(names) do sum = sum + self.priors[name]:log_density(ts[name]) end
      return sum
    end
    if not want_grad then return log_density(lists), dtheta end
    -- every prior in one lt.grad call (a refit evaluates this at each step)
    local g, value = lt.grad(log_density)(lists)
    for _, name in ipairs(names) do
      for k, i in pairs(where[name] or {}) do dtheta[i] = (dtheta[i] or 0) + g[name][k] end
    end
    return value, dtheta
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
    local reals = self:hyper_reals()
    local r, values = self:raw_vector(), all_values(self, reals)
    local grad = {}
    for i, e in ipairs(layout(self, reals)) do
      local g = glog[i]
      local b = self.bounds[e.name]
      if e.real then
        -- get_vector holds θ itself: ∂/∂r = (∂/∂θ + ∂ log p/∂θ)·dθ/dr
        local dtheta_dr = b and real_slope(b.lo[e.k], b.hi[e.k], r[i]) or 1
        g = (g + (dtheta[i] or 0)) * dtheta_dr
      else
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
