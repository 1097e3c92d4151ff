--- Covariance functions for lazytensor.gp, with analytic derivatives.
--
-- A kernel holds named positive hyperparameters, optimised in log space, and
-- evaluates k(x, y) together with ∂k/∂log θ for each free hyperparameter.
-- Base kernels: rbf, matern12, matern32, matern52, periodic, rq (rational
-- quadratic), cosine, spectral_mixture, and the inner-product kinds linear
-- v·(xᵀy + c) and polynomial v·(xᵀy + c)^p (not stationary; offset c ≥ 0,
-- fixed when 0: log c has no value there; the degree p a setting, not a
-- hyperparameter); combinators: sum (k1 + k2), product (k1 * k2), scale
-- (s · k). Inputs are arrays of coordinates; `dims` (a list of 1-based
-- dimensions) selects the active ones and defaults to all of them, as in
-- GPyTorch and scikit-learn. ARD: `lengthscale` a list (or 1-d tensor) with
-- one lengthscale per active dimension, each its own hyperparameter. The
-- spectral mixture's means and scales are Q×d matrices (lists of Q rows):
-- each entry is a hyperparameter too.
local lt = require "lazytensor"

local kernels = {}

local exp, log, sqrt, sin, cos, pi = math.exp, math.log, math.sqrt, math.sin, math.cos, math.pi

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

--- The free hyperparameters, flattened: a list of {kernel = k, name = n},
-- with index = i for an entry of a list (ARD, weights) and index = i,
-- col = j for an entry of a matrix (the spectral mixture's means, scales),
-- row by row.
function Kernel:parameters(out)
  out = out or {}
  if self.children then
    for _, c in ipairs(self.children) do c:parameters(out) end
  else
    for _, name in ipairs(self.names) do
      local v = self.values[name]
      if self.fixed[name] then -- luacheck: ignore 542 (nothing to add)
      elseif type(v) == "table" and type(v[1]) == "table" then -- a matrix
        for i, row in ipairs(v) do
          for j = 1, #row do out[#out + 1] = {kernel = self, name = name, index = i, col = j} end
        end
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
      if type(g) == "table" and type(g[1]) == "table" then -- a matrix, row by row
        for _, row in ipairs(g) do
          for j = 1, #row do grad[i + j] = row[j] end
          i = i + #row
        end
      elseif type(g) == "table" then -- ARD
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

-- v · exp(−2 Σ_d sin²(π |x_d − y_d| / p) / l²), as API.md defines it; with
-- ARD each dimension's term over its own l_d².
base.periodic = {
  names = {"lengthscale", "period", "variance"},
  stationary = true,
  value = function(self, x, y, grad, offset)
    local l, p, v = self.values.lengthscale, self.values.period, self.values.variance
    local ard = type(l) == "table"
    local s, dp, terms = 0, 0, ard and {} or nil
    for q = 1, self.dims and #self.dims or #x do
      local d = self.dims and self.dims[q] or q
      local l2 = ard and l[q] * l[q] or l * l
      local u = pi * math.abs(x[d] - y[d]) / p
      local su = sin(u)
      s = s + su * su / l2
      dp = dp + sin(2 * u) * u / l2
      if ard then terms[q] = su * su / l2 end
    end
    local k = v * exp(-2 * s)
    if grad then
      local dl = k * 4 * s -- ∂k/∂log l_d = 4k sin²u_d / l_d² (ARD)
      if ard then
        dl = {}
        for q, t in ipairs(terms) do dl[q] = k * 4 * t end
      end
      write_grads(self, grad, offset, {lengthscale = dl, period = k * 2 * dp, variance = k})
    end
    return k
  end,
}

-- v · cos(π ‖x − y‖ / p) (GPyTorch's CosineKernel). PSD on the line only:
-- in two or more dimensions cos of the Euclidean distance is not positive
-- semi-definite, so a model on such inputs may meet an indefinite K.
base.cosine = {
  names = {"period", "variance"},
  stationary = true,
  value = function(self, x, y, grad, offset)
    local p, v = self.values.period, self.values.variance
    local a = pi * sqrt(differences(self.dims, x, y)) / p
    local k = v * cos(a)
    if grad then write_grads(self, grad, offset, {period = v * sin(a) * a, variance = k}) end
    return k
  end,
}

-- Spectral mixture (Wilson & Adams 2013; GPyTorch's SpectralMixtureKernel):
-- Σ_q w_q Π_d exp(−2π² τ_d² s_qd²) cos(2π τ_d μ_qd), τ = x − y over the
-- active dims. ∂/∂log μ_qd needs Π over the other dimensions' cosines:
-- prefix and suffix products, never a division by a cosine (it can be 0).
base.spectral_mixture = {
  names = {"weights", "means", "scales"},
  extra_keys = {"num_mixtures"},
  stationary = true,
  value = function(self, x, y, grad, offset)
    local w, mu, sc = self.values.weights, self.values.means, self.values.scales
    local D = #mu[1]
    local tau = {}
    for c = 1, D do
      local d = self.dims and self.dims[c] or c
      tau[c] = x[d] - y[d]
    end
    local total, gw, gm, gs = 0, {}, {}, {}
    for q = 1, #w do
      local ex, cs, ang, prefix = 0, {}, {}, {1}
      for c = 1, D do
        ex = ex + tau[c] * tau[c] * sc[q][c] * sc[q][c]
        ang[c] = 2 * pi * tau[c] * mu[q][c]
        cs[c] = cos(ang[c])
        prefix[c + 1] = prefix[c] * cs[c]
      end
      local e = exp(-2 * pi * pi * ex)
      local kq = w[q] * e * prefix[D + 1]
      total = total + kq
      if grad then
        gw[q], gm[q], gs[q] = kq, {}, {}
        local suffix = 1
        for c = D, 1, -1 do
          local others = prefix[c] * suffix
          suffix = suffix * cs[c]
          gs[q][c] = -4 * pi * pi * tau[c] * tau[c] * sc[q][c] * sc[q][c] * kq
          gm[q][c] = -w[q] * e * others * sin(ang[c]) * ang[c]
        end
      end
    end
    if grad then write_grads(self, grad, offset, {weights = gw, means = gm, scales = gs}) end
    return total
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
  if lt.is_tensor(v) then v = v:totable() end
  if #v == 0 then fail("%s lengthscale must be a number or a non-empty list", kind) end
  local out = {}
  for q, l in ipairs(v) do out[q] = check_positive(kind .. " lengthscale[" .. q .. "]", l) end
  return out
end

-- num_mixtures: a positive integer (NaN too is refused).
local function check_mixtures(what, Q)
  -- luacheck: ignore 581 (not (Q >= 1): NaN too)
  if type(Q) ~= "number" or not (Q >= 1) or Q % 1 ~= 0 or Q == math.huge then
    fail("%s num_mixtures must be a positive integer, got %s", what, tostring(Q))
  end
  return Q
end

-- The spectral mixture's matrix `name` (means, scales): Q rows of positive
-- numbers, all of one length (a list of Q numbers: rows of one), copied.
local function mixture_matrix(name, v, Q)
  if v == nil then
    fail("spectral_mixture needs %s (num_mixtures rows of one number per active dimension); "
         .. "kernels.spectral_mixture_from_data chooses them from the data", name)
  end
  if lt.is_tensor(v) then v = v:totable() end
  if type(v) ~= "table" or #v ~= Q then
    fail("spectral_mixture %s must be a list of %d rows (num_mixtures), got %s", name, Q,
         type(v) == "table" and #v .. " rows" or tostring(v))
  end
  local out, cols = {}, nil
  for i, row in ipairs(v) do
    if type(row) ~= "table" then row = {row} end
    cols = cols or #row
    if #row == 0 or #row ~= cols then
      fail("spectral_mixture %s rows must be non-empty and of one length", name)
    end
    out[i] = {}
    for j, x in ipairs(row) do
      out[i][j] = check_positive(string.format("spectral_mixture %s[%d][%d]", name, i, j), x)
    end
  end
  return out
end

-- weights (Q positive numbers; 1/Q each by default), means and scales.
local function mixture_values(self, spec)
  local Q = check_mixtures("spectral_mixture", spec.num_mixtures)
  local w = spec.weights
  if lt.is_tensor(w) then w = w:totable() end
  if w == nil then
    w = {}
    for q = 1, Q do w[q] = 1 / Q end
  elseif type(w) ~= "table" or #w ~= Q then
    fail("spectral_mixture weights must be a list of %d numbers (num_mixtures), got %s", Q,
         type(w) == "table" and #w .. " numbers" or tostring(w))
  end
  local weights = {}
  for q = 1, Q do weights[q] = check_positive("spectral_mixture weights[" .. q .. "]", w[q]) end
  local means = mixture_matrix("means", spec.means, Q)
  local scales = mixture_matrix("scales", spec.scales, Q)
  if #means[1] ~= #scales[1] then
    fail("spectral_mixture means have %d columns but scales have %d", #means[1], #scales[1])
  end
  if self.dims and #self.dims ~= #means[1] then
    fail("spectral_mixture has %d columns of means for %d dims", #means[1], #self.dims)
  end
  self.values.weights, self.values.means, self.values.scales = weights, means, scales
end

local function make_base(kind, spec)
  spec = spec or {}
  if type(spec) ~= "table" then fail("%s expects a table of options, got %s", kind, type(spec)) end
  local def = base[kind]
  if not def.keys then
    local extra = {"dims", "fixed"}
    for _, k in ipairs(def.settings or {}) do extra[#extra + 1] = k end
    for _, k in ipairs(def.extra_keys or {}) do extra[#extra + 1] = k end
    def.keys, def.key_list = key_set(def.names, extra)
  end
  kernels.check_keys(kind, spec, def.keys, def.key_list)
  local self = setmetatable({kind = kind, names = def.names, values = {}, fixed = {},
                             dims = check_dims(kind, spec.dims), def = def}, Kernel)
  if kind == "spectral_mixture" then mixture_values(self, spec) end
  local defaults = def.defaults or {}
  for _, name in ipairs(kind == "spectral_mixture" and {} or def.names) do
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

-- Lua arrays from a tensor or a table: points as coordinate arrays (a list
-- of numbers is 1-d points), targets as numbers.
local function as_points(x)
  if lt.is_tensor(x) then x = x:totable() end
  local P = {}
  for i, p in ipairs(x) do P[i] = type(p) == "table" and p or {p} end
  return P
end

--- A spectral mixture of num_mixtures components with hyperparameters
-- chosen from the data (GPyTorch's initialize_from_data, made
-- deterministic): per active dimension, scales 1/(range of the inputs) (an
-- envelope as wide as the data), means spread evenly over (0, ν) with
-- ν = (n − 1)/(2·range) the Nyquist frequency of the inputs' mean spacing
-- (GPyTorch's smallest gap gives absurd frequencies on scattered inputs,
-- where two points can nearly coincide), and weights var(y)/Q (so that
-- k(x, x) is the targets' variance). opts: dims, fixed.
function kernels.spectral_mixture_from_data(x, y, num_mixtures, opts)
  opts = opts or {}
  local P = as_points(x)
  local Y = lt.is_tensor(y) and y:totable() or y
  if #P < 2 or type(Y) ~= "table" or #Y ~= #P then
    fail("spectral_mixture_from_data needs at least 2 points and as many targets, got %d and %s",
         #P, type(Y) == "table" and #Y or tostring(Y))
  end
  local Q = check_mixtures("spectral_mixture_from_data", num_mixtures)
  local dims = opts.dims
  local D = dims and #dims or #P[1]
  local mean, var = 0, 0
  for _, v in ipairs(Y) do mean = mean + v / #Y end
  for _, v in ipairs(Y) do var = var + (v - mean) ^ 2 / #Y end
  local weights, means, scales = {}, {}, {}
  for q = 1, Q do
    weights[q] = var > 0 and var / Q or 1 / Q
    means[q], scales[q] = {}, {}
  end
  for c = 1, D do
    local d = dims and dims[c] or c
    local v = {}
    for i, p in ipairs(P) do v[i] = p[d] end
    table.sort(v)
    local range = v[#v] - v[1]
    if not (range > 0) then range = 1 end -- luacheck: ignore 581 (NaN)
    local gap = range / (#v - 1)
    for q = 1, Q do
      means[q][c] = q / (Q + 1) / (2 * gap)
      scales[q][c] = 1 / range
    end
  end
  return kernels.spectral_mixture{num_mixtures = Q, weights = weights, means = means,
                                  scales = scales, dims = dims, fixed = opts.fixed}
end

--- k1 + k2 + ...
function kernels.sum(...)
  local children = {...}
  if #children == 1 and getmetatable(children[1]) ~= Kernel then children = children[1] end
  return setmetatable({kind = "sum", children = children}, Kernel)
end

--- A kernel written in Lua from lazytensor operations, differentiated by
-- lt.grad (gp/custom.lua): custom{params = {name = value}, k = function(x1,
-- x2, p) return <n×m tensor or operator> end [, fixed = {name = true}]}.
function kernels.custom(spec) return require("lazytensor.gp.custom").new(Kernel, spec) end

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
  local mu = self.values and self.values.means
  if mu and not self.dims and #mu[1] ~= d then
    fail("spectral_mixture has %d columns of means and scales but the inputs have %d "
         .. "dimension%s (one per active dimension)", #mu[1], d, d == 1 and "" or "s")
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

-- A number, ARD's list as {a, b, ...}, or a matrix as {{a, b}, {c, d}},
-- formatted.
local function number_list(v, fmt)
  if type(v) ~= "table" then return string.format(fmt, v) end
  local parts = {}
  for i, x in ipairs(v) do parts[i] = number_list(x, fmt) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

-- A leaf's hyperparameter values (numbers, lists, matrices) read in order
-- into the flat array out (from out[1]); returns the count. Every value
-- is read, wherever it was written from.
local function flat_values(self, out)
  local k = 0
  for _, name in ipairs(self.names) do
    local v = self.values[name]
    if type(v) ~= "table" then
      k = k + 1
      out[k] = v
    else
      for _, x in ipairs(v) do
        if type(x) ~= "table" then
          k = k + 1
          out[k] = x
        else
          for _, y in ipairs(x) do
            k = k + 1
            out[k] = y
          end
        end
      end
    end
  end
  return k
end

-- Whether a leaf's values are still those of its snapshot (a NaN never is).
local function unchanged(self, snap)
  local now = self.fingerprint_scratch
  if flat_values(self, now) ~= snap.n then return false end
  for i = 1, snap.n do
    if now[i] ~= snap[i] then return false end
  end
  return self.degree == snap.degree
end

local function leaf_fingerprint(self)
  local parts = {}
  for i, name in ipairs(self.names) do parts[i] = number_list(self.values[name], "%.17g") end
  if self.degree then parts[#parts + 1] = "degree=" .. self.degree end
  return self.kind .. "(" .. table.concat(parts, ",") .. ")"
end

--- Every hyperparameter's current value (free and fixed), as one string:
-- two kernels with equal fingerprints compute the same function, so a
-- model can tell when what it has cached from them has gone stale. A
-- leaf keeps its last string with a copy of the values it came from and
-- formats again only when a value differs (a model asks for it several
-- times a prediction; formatting 17 digits was 7 % of an acquisition's
-- evaluation in bo).
function Kernel:fingerprint()
  if self.children then
    local parts = {}
    for i, c in ipairs(self.children) do parts[i] = c:fingerprint() end
    return self.kind .. "(" .. table.concat(parts, ",") .. ")"
  end
  local snap = self.fingerprint_snapshot
  if snap and unchanged(self, snap) then return snap.text end
  snap = {degree = self.degree, text = leaf_fingerprint(self)}
  snap.n = flat_values(self, snap)
  self.fingerprint_snapshot, self.fingerprint_scratch = snap, {}
  return snap.text
end

--- A parameter's current value (an entry of a list or matrix, or a number).
function kernels.parameter_value(p)
  local v = p.kernel.values[p.name]
  if p.col then return v[p.index][p.col] end
  return p.index and v[p.index] or v
end

--- Current log-hyperparameters as a Lua array.
function Kernel:get_log_params()
  local out = {}
  for i, p in ipairs(self:parameters()) do out[i] = log(kernels.parameter_value(p)) end
  return out
end

--- Sets the log-hyperparameters from vec[offset + 1 ...]; returns the new offset.
function Kernel:set_log_params(vec, offset)
  offset = offset or 0
  for _, p in ipairs(self:parameters()) do
    offset = offset + 1
    if p.col then
      p.kernel.values[p.name][p.index][p.col] = exp(vec[offset])
    elseif p.index then
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
