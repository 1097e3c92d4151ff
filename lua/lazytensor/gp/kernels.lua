--- Covariance functions for lazytensor.gp, with analytic derivatives.
--
-- A kernel holds named positive hyperparameters, optimised in log space, and
-- evaluates k(x, y) together with ∂k/∂log θ for each free hyperparameter.
-- Base kernels: rbf, matern12, matern32, matern52, periodic, rq (rational
-- quadratic); combinators: sum (k1 + k2), product (k1 * k2), scale (s · k).
-- Inputs are arrays of coordinates; `dims` (a list of 1-based dimensions)
-- selects the active ones and defaults to all of them, as in GPyTorch and
-- scikit-learn.
local kernels = {}

local exp, log, sqrt, sin, pi = math.exp, math.log, math.sqrt, math.sin, math.pi

local Kernel = {}
Kernel.__index = Kernel

local function fail(fmt, ...)
  error("lazytensor: gp: " .. string.format(fmt, ...), 0)
end

local function check_positive(name, v)
  if type(v) ~= "number" or not (v > 0) or v == math.huge then -- luacheck: ignore 581 (NaN)
    fail("%s must be a positive number, got %s", name, tostring(v))
  end
  return v
end

--- The free hyperparameters, flattened: a list of {kernel = k, name = n}.
function Kernel:parameters(out)
  out = out or {}
  if self.children then
    for _, c in ipairs(self.children) do c:parameters(out) end
  else
    for _, name in ipairs(self.names) do
      if not self.fixed[name] then out[#out + 1] = {kernel = self, name = name} end
    end
  end
  return out
end

--- Number of free hyperparameters.
function Kernel:count()
  return #self:parameters()
end

-- Squared distance over the active dims (every coordinate when dims is nil).
local function differences(dims, x, y)
  local r2 = 0
  if dims then
    for _, d in ipairs(dims) do
      local t = x[d] - y[d]
      r2 = r2 + t * t
    end
  else
    for d = 1, #x do
      local t = x[d] - y[d]
      r2 = r2 + t * t
    end
  end
  return r2
end

-- The keys a constructor's spec table may hold, as a set and as a sorted
-- list for messages.
local function key_set(names, extra)
  local set, list = {}, {}
  for _, group in ipairs{names, extra} do
    for _, k in ipairs(group) do
      set[k] = true
      list[#list + 1] = k
    end
  end
  table.sort(list)
  return set, table.concat(list, ", ")
end

--- Raises an error naming the first key of `spec` that `allowed` lacks
-- (what: the operation, for the message). Shared with gp/init.lua.
function kernels.check_keys(what, spec, allowed, listing)
  local bad = {}
  for k in pairs(spec) do
    if not allowed[k] then bad[#bad + 1] = tostring(k) end
  end
  if #bad > 0 then
    table.sort(bad)
    fail("%s: unknown key '%s' (expected one of %s)", what, bad[1], listing)
  end
end

-- nil (every dimension) or a list of distinct positive integers.
local function check_dims(kind, dims)
  if dims == nil then return nil end
  if type(dims) ~= "table" or #dims == 0 then
    fail("%s dims must be a non-empty list of dimensions, got %s", kind, tostring(dims))
  end
  local seen, copy = {}, {}
  for i, d in ipairs(dims) do
    if math.type and math.type(d) == "float" and d % 1 == 0 then d = math.tointeger(d) end
    if type(d) ~= "number" or d < 1 or d % 1 ~= 0 or d == math.huge then
      fail("%s dims[%d] must be a positive integer, got %s", kind, i, tostring(d))
    end
    if seen[d] then fail("%s dims repeats dimension %d", kind, d) end
    seen[d] = true
    copy[i] = d
  end
  return copy
end

-- Base kernels: value(self, x, y, grad, offset) returns k and writes
-- ∂k/∂log θ of the free parameters into grad[offset + 1 ...].

local function write_grads(self, grad, offset, values)
  local i = offset
  for _, name in ipairs(self.names) do
    if not self.fixed[name] then
      i = i + 1
      grad[i] = values[name]
    end
  end
  return i
end

local base = {}

base.rbf = {
  names = {"lengthscale", "variance"},
  stationary = true,
  value = function(self, x, y, grad, offset)
    local l, v = self.values.lengthscale, self.values.variance
    local q = differences(self.dims, x, y) / (l * l)
    local k = v * exp(-0.5 * q)
    if grad then write_grads(self, grad, offset, {lengthscale = k * q, variance = k}) end
    return k
  end,
}

base.matern12 = {
  names = {"lengthscale", "variance"},
  stationary = true,
  value = function(self, x, y, grad, offset)
    local l, v = self.values.lengthscale, self.values.variance
    local a = sqrt(differences(self.dims, x, y)) / l
    local k = v * exp(-a)
    if grad then write_grads(self, grad, offset, {lengthscale = k * a, variance = k}) end
    return k
  end,
}

base.matern32 = {
  names = {"lengthscale", "variance"},
  stationary = true,
  value = function(self, x, y, grad, offset)
    local l, v = self.values.lengthscale, self.values.variance
    local a = sqrt(3 * differences(self.dims, x, y)) / l
    local e = exp(-a)
    local k = v * (1 + a) * e
    if grad then write_grads(self, grad, offset, {lengthscale = v * a * a * e, variance = k}) end
    return k
  end,
}

base.matern52 = {
  names = {"lengthscale", "variance"},
  stationary = true,
  value = function(self, x, y, grad, offset)
    local l, v = self.values.lengthscale, self.values.variance
    local a = sqrt(5 * differences(self.dims, x, y)) / l
    local e = exp(-a)
    local k = v * (1 + a + a * a / 3) * e
    if grad then
      write_grads(self, grad, offset, {lengthscale = v * a * a * (1 + a) / 3 * e, variance = k})
    end
    return k
  end,
}

-- v · exp(−2 Σ_d sin²(π |x_d − y_d| / p) / l²), as API.md defines it.
base.periodic = {
  names = {"lengthscale", "period", "variance"},
  stationary = true,
  value = function(self, x, y, grad, offset)
    local l, p, v = self.values.lengthscale, self.values.period, self.values.variance
    local s, dp = 0, 0
    for q = 1, self.dims and #self.dims or #x do
      local d = self.dims and self.dims[q] or q
      local u = pi * math.abs(x[d] - y[d]) / p
      local su = sin(u)
      s = s + su * su
      dp = dp + sin(2 * u) * u
    end
    local k = v * exp(-2 * s / (l * l))
    if grad then
      write_grads(self, grad, offset,
                  {lengthscale = k * 4 * s / (l * l), period = k * 2 * dp / (l * l), variance = k})
    end
    return k
  end,
}

-- log(1 + q), accurate for small q too (Goldberg's trick: the rounding of
-- 1 + q cancels in the ratio).
local function log1p(q)
  local u = 1 + q
  if u == 1 then return q end
  return log(u) * q / (u - 1)
end

-- q/(1 + q) − log(1 + q) = −q²/2 + 2q³/3 − 3q⁴/4 + ..., by the series where
-- the two terms would cancel.
local function rq_alpha_term(q)
  if q < 1e-4 then return q * q * (-0.5 + q * (2 / 3 - 0.75 * q)) end
  return q / (1 + q) - log1p(q)
end

-- Rational quadratic: v · (1 + r²/(2 α l²))^(−α) = v · exp(−α · log1p(q)).
-- Written with log1p: as α grows (the RBF limit, where fits often drift)
-- (1 + q)^(−α) with q ~ 1/α rounds 1 + q to a few values and K stops being
-- positive definite (a fit on co2 went to α = 6e16 and an MLL of +899).
base.rq = {
  names = {"lengthscale", "alpha", "variance"},
  stationary = true,
  value = function(self, x, y, grad, offset)
    local l, al, v = self.values.lengthscale, self.values.alpha, self.values.variance
    local r2 = differences(self.dims, x, y)
    local q = r2 / (2 * al * l * l)
    local k = v * exp(-al * log1p(q))
    if grad then
      write_grads(self, grad, offset, {
        lengthscale = k * (r2 / (l * l)) / (1 + q),
        alpha = al * k * rq_alpha_term(q),
        variance = k,
      })
    end
    return k
  end,
}

local DEFAULTS = {lengthscale = 1, variance = 1, period = 1, alpha = 1}

local function make_base(kind, spec)
  spec = spec or {}
  if type(spec) ~= "table" then fail("%s expects a table of options, got %s", kind, type(spec)) end
  local def = base[kind]
  if not def.keys then def.keys, def.key_list = key_set(def.names, {"dims", "fixed"}) end
  kernels.check_keys(kind, spec, def.keys, def.key_list)
  local self = setmetatable({kind = kind, names = def.names, values = {}, fixed = {},
                             dims = check_dims(kind, spec.dims), def = def}, Kernel)
  for _, name in ipairs(def.names) do
    self.values[name] = check_positive(kind .. " " .. name, spec[name] or DEFAULTS[name])
  end
  local fixed = spec.fixed or {}
  if type(fixed) ~= "table" then fail("%s fixed must be a table, got %s", kind, type(fixed)) end
  for name, on in pairs(fixed) do
    if self.values[name] == nil then
      fail("%s has no hyperparameter '%s' (fixed)", kind, tostring(name))
    end
    if on then self.fixed[name] = true end
  end
  return self
end

for kind in pairs(base) do
  kernels[kind] = function(spec) return make_base(kind, spec) end
end

--- k1 + k2 + ...
function kernels.sum(...)
  local children = {...}
  if #children == 1 and getmetatable(children[1]) ~= Kernel then children = children[1] end
  return setmetatable({kind = "sum", children = children}, Kernel)
end

--- k1 · k2 · ...
function kernels.product(...)
  local children = {...}
  if #children == 1 and getmetatable(children[1]) ~= Kernel then children = children[1] end
  return setmetatable({kind = "product", children = children}, Kernel)
end

--- s · k, with s a hyperparameter of its own.
function kernels.scale(k, s)
  local sk = make_base("rbf", {}) -- reuse the base machinery for one parameter
  sk.kind, sk.names, sk.def = "scale", {"variance"}, nil
  sk.values = {variance = check_positive("scale", s or 1)}
  return kernels.product(sk, k)
end

Kernel.__add = function(a, b) return kernels.sum(a, b) end
Kernel.__mul = function(a, b) return kernels.product(a, b) end

--- k(x, y), and with grad given, ∂k/∂log θ written from grad[offset + 1].
-- Returns the value and the offset after this kernel's parameters.
function Kernel:value(x, y, grad, offset)
  offset = offset or 0
  if self.kind == "scale" then
    if grad and not self.fixed.variance then
      grad[offset + 1] = self.values.variance
      return self.values.variance, offset + 1
    end
    return self.values.variance, offset
  end
  if not self.children then
    local k = self.def.value(self, x, y, grad, offset)
    return k, offset + self:count()
  end
  if self.kind == "sum" then
    local total = 0
    for _, c in ipairs(self.children) do
      local k
      k, offset = c:value(x, y, grad, offset)
      total = total + k
    end
    return total, offset
  end
  -- product: ∂(Π k_i) = Σ_i ∂k_i · Π_{j≠i} k_j
  local values, ranges = {}, {}
  local total = 1
  for i, c in ipairs(self.children) do
    local start = offset
    values[i], offset = c:value(x, y, grad, offset)
    ranges[i] = {start, offset}
    total = total * values[i]
  end
  if grad then
    for i, r in ipairs(ranges) do
      local others = 1
      for j, v in ipairs(values) do
        if j ~= i then others = others * v end
      end
      for g = r[1] + 1, r[2] do grad[g] = grad[g] * others end
    end
  end
  return total, offset
end

--- True when every component depends on x − y only.
function Kernel:is_stationary()
  if self.kind == "scale" then return true end
  if self.children then
    for _, c in ipairs(self.children) do
      if not c:is_stationary() then return false end
    end
    return true
  end
  return self.def.stationary
end

--- The largest input dimension the kernel reads (nil when it reads all).
function Kernel:max_dim()
  local top
  if self.children then
    for _, c in ipairs(self.children) do
      local m = c:max_dim()
      if m then top = math.max(top or 0, m) end
    end
  elseif self.dims then
    top = 0
    for _, d in ipairs(self.dims) do top = math.max(top, d) end
  end
  return top
end

--- Every hyperparameter's current value (free and fixed), as one string:
-- two kernels with equal fingerprints compute the same function, so a
-- model can tell when what it has cached from them has gone stale.
function Kernel:fingerprint()
  if self.children then
    local parts = {}
    for i, c in ipairs(self.children) do parts[i] = c:fingerprint() end
    return self.kind .. "(" .. table.concat(parts, ",") .. ")"
  end
  local parts = {}
  for i, name in ipairs(self.names) do parts[i] = string.format("%.17g", self.values[name]) end
  return self.kind .. "(" .. table.concat(parts, ",") .. ")"
end

--- Current log-hyperparameters as a Lua array.
function Kernel:get_log_params()
  local out = {}
  for i, p in ipairs(self:parameters()) do out[i] = log(p.kernel.values[p.name]) end
  return out
end

--- Sets the log-hyperparameters from vec[offset + 1 ...]; returns the new offset.
function Kernel:set_log_params(vec, offset)
  offset = offset or 0
  for _, p in ipairs(self:parameters()) do
    offset = offset + 1
    p.kernel.values[p.name] = exp(vec[offset])
  end
  return offset
end

--- Readable "name = value" list of the hyperparameters.
function Kernel:describe(prefix)
  prefix = prefix or ""
  if self.children then
    local parts = {}
    for i, c in ipairs(self.children) do parts[i] = c:describe(prefix .. "  ") end
    return prefix .. self.kind .. ":\n" .. table.concat(parts, "\n")
  end
  local parts = {}
  for _, name in ipairs(self.names) do
    parts[#parts + 1] = string.format("%s = %.6g%s", name, self.values[name],
                                      self.fixed[name] and " (fixed)" or "")
  end
  if self.dims then parts[#parts + 1] = "dims = {" .. table.concat(self.dims, ", ") .. "}" end
  return prefix .. self.kind .. "(" .. table.concat(parts, ", ") .. ")"
end

kernels.Kernel = Kernel
return kernels
