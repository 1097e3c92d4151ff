--- Covariance functions for lazytensor.gp, with analytic derivatives.
--
-- A kernel holds named positive hyperparameters, optimised in log space, and
-- evaluates k(x, y) together with ∂k/∂log θ for each free hyperparameter.
-- Base kernels: rbf, matern12, matern32, matern52, periodic, rq (rational
-- quadratic); combinators: sum (k1 + k2), product (k1 * k2), scale (s · k).
-- Inputs are arrays of coordinates; `dims` selects the active ones.
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

-- Squared distance and per-dimension absolute differences over the active dims.
local function differences(dims, x, y)
  local r2 = 0
  for _, d in ipairs(dims) do
    local t = x[d] - y[d]
    r2 = r2 + t * t
  end
  return r2
end

local function default_dims(spec)
  return spec.dims or {1}
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
    for _, d in ipairs(self.dims) do
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

-- Rational quadratic: v · (1 + r²/(2 α l²))^(−α).
base.rq = {
  names = {"lengthscale", "alpha", "variance"},
  stationary = true,
  value = function(self, x, y, grad, offset)
    local l, al, v = self.values.lengthscale, self.values.alpha, self.values.variance
    local r2 = differences(self.dims, x, y)
    local q = r2 / (2 * al * l * l)
    local k = v * (1 + q) ^ (-al)
    if grad then
      write_grads(self, grad, offset, {
        lengthscale = k * (r2 / (l * l)) / (1 + q),
        alpha = al * k * (-log(1 + q) + q / (1 + q)),
        variance = k,
      })
    end
    return k
  end,
}

local DEFAULTS = {lengthscale = 1, variance = 1, period = 1, alpha = 1}

local function make_base(kind, spec)
  spec = spec or {}
  local def = base[kind]
  local self = setmetatable({kind = kind, names = def.names, values = {}, fixed = {},
                             dims = default_dims(spec), def = def}, Kernel)
  for _, name in ipairs(def.names) do
    self.values[name] = check_positive(kind .. " " .. name, spec[name] or DEFAULTS[name])
  end
  for name in pairs(spec.fixed or {}) do
    if self.values[name] == nil then fail("%s has no hyperparameter '%s'", kind, name) end
    self.fixed[name] = true
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
  return prefix .. self.kind .. "(" .. table.concat(parts, ", ") .. ")"
end

kernels.Kernel = Kernel
return kernels
