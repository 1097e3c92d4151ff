--- Covariance functions for lazytensor.gp, with analytic derivatives.
--
-- A kernel holds named positive hyperparameters, optimised in log space, and
-- evaluates k(x, y) together with ∂k/∂log θ for each free hyperparameter.
-- Base kernels: rbf, matern12, matern32, matern52, periodic, rq (rational
-- quadratic), and the inner-product kinds linear v·(xᵀy + c) and
-- polynomial v·(xᵀy + c)^p (not stationary; offset c ≥ 0, fixed when 0:
-- log c has no value there; the degree p a setting, not a hyperparameter);
-- combinators: sum (k1 + k2), product (k1 * k2), scale (s · k).
-- Inputs are arrays of coordinates; `dims` (a list of 1-based dimensions)
-- selects the active ones and defaults to all of them, as in GPyTorch and
-- scikit-learn. ARD: `lengthscale` a list (or 1-d tensor) with one
-- lengthscale per active dimension (every kind but periodic), each its own
-- hyperparameter.
local lt = require "lazytensor"

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
      local v = self.values[name]
      if self.fixed[name] then -- luacheck: ignore 542 (nothing to add)
      elseif type(v) == "table" then -- ARD: one parameter per dimension
        for q = 1, #v do out[#out + 1] = {kernel = self, name = name, index = q} end
      else
        out[#out + 1] = {kernel = self, name = name}
      end
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
      local g = values[name]
      if type(g) == "table" then -- ARD
        for q = 1, #g do grad[i + q] = g[q] end
        i = i + #g
      else
        i = i + 1
        grad[i] = g
      end
    end
  end
  return i
end

-- q = Σ_d (x_d − y_d)²/l_d² over the active dims (one l, or ARD's list), and
-- with ARD the list of the terms (for the per-dimension derivatives).
local function scaled_sq(self, x, y)
  local l = self.values.lengthscale
  if type(l) == "number" then return differences(self.dims, x, y) / (l * l) end
  local terms, q = {}, 0
  for i = 1, #l do
    local d = self.dims and self.dims[i] or i
    local t = (x[d] - y[d]) / l[i]
    terms[i] = t * t
    q = q + terms[i]
  end
  return q, terms
end

-- ∂k/∂log l from dk/dq: −2q·dk/dq, or per dimension −2·t_d·dk/dq (ARD).
local function lengthscale_grad(dkdq, q, terms)
  if not terms then return -2 * q * dkdq end
  local g = {}
  for i, t in ipairs(terms) do g[i] = -2 * t * dkdq end
  return g
end

-- A radial kind from f(q, v) → k, dk/dq: value(self, x, y, grad, offset).
local function radial(f)
  return function(self, x, y, grad, offset)
    local q, terms = scaled_sq(self, x, y)
    local k, dkdq = f(q, self.values.variance)
    if grad then
      write_grads(self, grad, offset,
                  {lengthscale = lengthscale_grad(dkdq, q, terms), variance = k})
    end
    return k
  end
end

local base = {}

base.rbf = {
  names = {"lengthscale", "variance"},
  stationary = true,
  value = radial(function(q, v)
    local k = v * exp(-0.5 * q)
    return k, -0.5 * k
  end),
}

base.matern12 = {
  names = {"lengthscale", "variance"},
  stationary = true,
  value = radial(function(q, v)
    local a = sqrt(q)
    local k = v * exp(-a)
    return k, a > 0 and -k / (2 * a) or 0 -- the cusp at r = 0: the subgradient 0
  end),
}

base.matern32 = {
  names = {"lengthscale", "variance"},
  stationary = true,
  value = radial(function(q, v)
    local a = sqrt(3 * q)
    local e = exp(-a)
    return v * (1 + a) * e, -1.5 * v * e
  end),
}

base.matern52 = {
  names = {"lengthscale", "variance"},
  stationary = true,
  value = radial(function(q, v)
    local a = sqrt(5 * q)
    local e = exp(-a)
    return v * (1 + a + a * a / 3) * e, -5 * v * e * (1 + a) / 6
  end),
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
    local al, v = self.values.alpha, self.values.variance
    local s2, terms = scaled_sq(self, x, y) -- r²/l²
    local q = s2 / (2 * al)
    local k = v * exp(-al * log1p(q))
    if grad then
      write_grads(self, grad, offset, {
        lengthscale = lengthscale_grad(-k / (2 * (1 + q)), s2, terms),
        alpha = al * k * rq_alpha_term(q),
        variance = k,
      })
    end
    return k
  end,
}

-- xᵀy over the active dims (every coordinate when dims is nil).
local function inner(dims, x, y)
  local s = 0
  if dims then
    for _, d in ipairs(dims) do s = s + x[d] * y[d] end
  else
    for d = 1, #x do s = s + x[d] * y[d] end
  end
  return s
end

-- v·(xᵀy + c)^p (p = 1: linear): ∂/∂log v = k, ∂/∂log c = c·v·p·t^(p−1).
local function inner_product_value(self, x, y, grad, offset)
  local v, c, p = self.values.variance, self.values.offset, self.degree or 1
  local t = inner(self.dims, x, y) + c
  local tp = t ^ (p - 1)
  local k = v * tp * t
  if grad then write_grads(self, grad, offset, {variance = k, offset = c * v * p * tp}) end
  return k
end

base.linear = {
  names = {"variance", "offset"},
  defaults = {offset = 0},
  stationary = false,
  value = inner_product_value,
}

base.polynomial = {
  names = {"variance", "offset"},
  settings = {"degree"}, -- fixed, not hyperparameters
  defaults = {offset = 1, degree = 2},
  stationary = false,
  value = inner_product_value,
}

local DEFAULTS = {lengthscale = 1, variance = 1, period = 1, alpha = 1}

-- A non-negative number (the inner-product kinds' offset).
local function check_non_negative(name, v)
  if type(v) ~= "number" or not (v >= 0) or v == math.huge then -- luacheck: ignore 581 (NaN)
    fail("%s must be a non-negative number, got %s", name, tostring(v))
  end
  return v
end

-- polynomial's degree: an integer from 1 to 64 (lt.kernel's bound).
local function check_degree(kind, p)
  if type(p) ~= "number" or p % 1 ~= 0 or p < 1 or p > 64 then
    fail("%s degree must be an integer from 1 to 64, got %s", kind, tostring(p))
  end
  return math.tointeger and math.tointeger(p) or p
end

-- ARD lengthscales: a list or 1-d tensor of positive numbers, copied.
local function ard_lengthscales(kind, v)
  if kind == "periodic" then fail("periodic takes one lengthscale (ARD: the other kinds)") end
  if lt.is_tensor(v) then v = v:totable() end
  if #v == 0 then fail("%s lengthscale must be a number or a non-empty list", kind) end
  local out = {}
  for q, l in ipairs(v) do out[q] = check_positive(kind .. " lengthscale[" .. q .. "]", l) end
  return out
end

local function make_base(kind, spec)
  spec = spec or {}
  if type(spec) ~= "table" then fail("%s expects a table of options, got %s", kind, type(spec)) end
  local def = base[kind]
  if not def.keys then
    local extra = {"dims", "fixed"}
    for _, k in ipairs(def.settings or {}) do extra[#extra + 1] = k end
    def.keys, def.key_list = key_set(def.names, extra)
  end
  kernels.check_keys(kind, spec, def.keys, def.key_list)
  local self = setmetatable({kind = kind, names = def.names, values = {}, fixed = {},
                             dims = check_dims(kind, spec.dims), def = def}, Kernel)
  local defaults = def.defaults or {}
  for _, name in ipairs(def.names) do
    local v = spec[name] or defaults[name] or DEFAULTS[name]
    if name == "lengthscale" and (type(v) == "table" or lt.is_tensor(v)) then
      self.values[name] = ard_lengthscales(kind, v)
    elseif name == "offset" then
      self.values[name] = check_non_negative(kind .. " offset", v)
      if v == 0 then self.fixed.offset = true end -- no log-space value to move
    else
      self.values[name] = check_positive(kind .. " " .. name, v)
    end
  end
  if def.settings then self.degree = check_degree(kind, spec.degree or defaults.degree) end
  local ls = self.values.lengthscale
  if type(ls) == "table" and self.dims and #self.dims ~= #ls then
    fail("%s has %d lengthscales for %d dims (ARD: one per active dimension)", kind, #ls,
         #self.dims)
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

--- Raises an error when an ARD kernel's lengthscales do not match the
-- d input dimensions it reads (without dims: all of them).
function Kernel:check_inputs(d)
  if self.children then
    for _, c in ipairs(self.children) do c:check_inputs(d) end
    return
  end
  local ls = self.values and self.values.lengthscale
  if type(ls) == "table" and not self.dims and #ls ~= d then
    fail("%s has %d lengthscales but the inputs have %d dimension%s (ARD: one per active "
         .. "dimension)", self.kind, #ls, d, d == 1 and "" or "s")
  end
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

-- A number, or ARD's list as {a, b, ...}, formatted.
local function number_list(v, fmt)
  if type(v) ~= "table" then return string.format(fmt, v) end
  local parts = {}
  for i, x in ipairs(v) do parts[i] = string.format(fmt, x) end
  return "{" .. table.concat(parts, ", ") .. "}"
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
  for i, name in ipairs(self.names) do parts[i] = number_list(self.values[name], "%.17g") end
  if self.degree then parts[#parts + 1] = "degree=" .. self.degree end
  return self.kind .. "(" .. table.concat(parts, ",") .. ")"
end

--- Current log-hyperparameters as a Lua array.
function Kernel:get_log_params()
  local out = {}
  for i, p in ipairs(self:parameters()) do
    local v = p.kernel.values[p.name]
    out[i] = log(p.index and v[p.index] or v)
  end
  return out
end

--- Sets the log-hyperparameters from vec[offset + 1 ...]; returns the new offset.
function Kernel:set_log_params(vec, offset)
  offset = offset or 0
  for _, p in ipairs(self:parameters()) do
    offset = offset + 1
    if p.index then
      p.kernel.values[p.name][p.index] = exp(vec[offset])
    else
      p.kernel.values[p.name] = exp(vec[offset])
    end
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
    parts[#parts + 1] = string.format("%s = %s%s", name, number_list(self.values[name], "%.6g"),
                                      self.fixed[name] and " (fixed)" or "")
  end
  if self.degree then parts[#parts + 1] = "degree = " .. self.degree end
  if self.dims then parts[#parts + 1] = "dims = {" .. table.concat(self.dims, ", ") .. "}" end
  return prefix .. self.kind .. "(" .. table.concat(parts, ", ") .. ")"
end

kernels.Kernel = Kernel
return kernels
