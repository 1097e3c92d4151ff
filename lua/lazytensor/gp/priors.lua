--- Priors on GP hyperparameters (GPyTorch's): densities on the
-- hyperparameter's own value (not its log).
--
--   priors = {lengthscale = gp.priors.gamma(3, 6), noise = gp.priors.lognormal(-4, 1),
--             mean = gp.priors.normal(0, 1), inducing = gp.priors.normal(Z0, 0.1)}
--
-- prior:log_density(x) is Σ log p(x_i) over x's entries (a number, or a
-- tensor of any shape inside lt.grad — written with tensor operations so the
-- models' log posteriors are differentiated with the rest). prior.support
-- is "real" (normal, smoothed_box, uniform: any real value) or "positive"
-- (lognormal, gamma, half_cauchy: only for positive hyperparameters).
-- normal's and smoothed_box's parameters may be given per entry (a Lua
-- array, rows of them, or a tensor; numbers broadcast): prior.shape is
-- then their shape, which the hyperparameter's must equal, and x is read
-- entry by entry in row-major order.
local lt = require "lazytensor"
local likelihoods = require "lazytensor.gp.likelihoods"

local priors = {}

local log, pi = math.log, math.pi

local function fail(fmt, ...)
  error("lazytensor: gp.priors: " .. string.format(fmt, ...), 0)
end

local Prior = {}
Prior.__index = Prior
priors.Prior = Prior

local function finite(what, v)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
    fail("%s must be a finite number, got %s", what, tostring(v))
  end
  return v
end

local function positive(what, v)
  finite(what, v)
  if v <= 0 then fail("%s must be positive, got %s", what, tostring(v)) end
  return v
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local function shape_text(shape)
  return #shape == 0 and "a number" or table.concat(shape, "×")
end

-- shared with gp/hyper.lua's bounds (not part of the module's interface)
priors._same_shape, priors._shape_text = same_shape, shape_text

-- A parameter given as a number or per entry (a Lua array, nested rows or a
-- tensor): the number, or {flat = Lua array row-major, shape = dims}; each
-- entry checked by check(what, v).
local function param(what, v, check)
  if type(v) == "number" then return check(what, v) end
  if type(v) ~= "table" and not lt.is_tensor(v) then
    fail("%s must be a number or one per entry (a table or tensor), got %s", what, type(v))
  end
  local ok, t = pcall(function() return lt.is_tensor(v) and v or lt.tensor(v) end)
  if not ok or lt.is_lazy(t) or t:numel() == 0 then
    fail("%s: a table of numbers (a list, or rows of equal length) or a dense tensor, got %s",
         what, ok and "an empty or lazy value" or tostring(t))
  end
  local flat = t:contiguous():reshape(t:numel()):totable()
  for i, x in ipairs(flat) do check(string.format("%s[%d]", what, i), x) end
  return {flat = flat, shape = t:shape()}
end

-- The common per-entry shape of a prior's parameters (nil: all numbers),
-- and each of them as a number or a 1-d tensor of that many entries.
local function broadcast(kind, list)
  local shape
  for _, p in ipairs(list) do
    if type(p) == "table" then
      if shape and not same_shape(shape, p.shape) then
        fail("%s: the per-entry parameters have shapes %s and %s", kind, shape_text(shape),
             shape_text(p.shape))
      end
      shape = p.shape
    end
  end
  local out = {}
  for i, p in ipairs(list) do out[i] = type(p) == "table" and lt.tensor(p.flat) or p end
  return shape, out
end

-- Elementwise helpers on numbers and tensors.
local function lg(x) return type(x) == "number" and log(x) or x:log() end
local function total(x) return type(x) == "number" and x or x:sum() end
local function count(x) return type(x) == "number" and 1 or x:numel() end
local function sq(x) return type(x) == "number" and x * x or x:cmul(x) end

local function ab(x) return type(x) == "number" and math.abs(x) or x:abs() end
-- Elementwise a / b and log b with b a number or a 1-d tensor (a constant).
local function over(a, b) return type(b) == "number" and a * (1 / b) or a:cdiv(b) end
local function log_sum(b, n)
  if type(b) == "number" then return n * log(b) end
  return b:log():sum()
end

local function new(kind, args, density, support, shape)
  return setmetatable({kind = kind, args = args, density = density, support = support,
                       shape = shape}, Prior)
end

--- Σ log p(x_i). With per-entry parameters x must have prior.shape's
-- number of entries (read row-major).
function Prior:log_density(x)
  if self.shape then
    local n, want = count(x), 1
    for _, d in ipairs(self.shape) do want = want * d end
    if n ~= want then
      fail("%s: x has %d entr%s, the prior's per-entry parameters are %s", self.kind, n,
           n == 1 and "y" or "ies", shape_text(self.shape))
    end
    x = type(x) == "number" and lt.tensor{x} or x:reshape(n)
  end
  return self.density(x)
end

--- The shape of per-entry parameters as text ("a number" when none).
function Prior:shape_text()
  return self.shape and shape_text(self.shape) or "a number"
end

function Prior:describe()
  local parts = {}
  for i, v in ipairs(self.args) do
    parts[i] = type(v) == "number" and string.format("%.6g", v)
               or ("per-entry " .. shape_text(v.shape))
  end
  return self.kind .. "(" .. table.concat(parts, ", ") .. ")"
end

--- normal(mean, sd): each a number or one per entry.
function priors.normal(mean, sd)
  local m, s = param("normal mean", mean, finite), param("normal sd", sd, positive)
  local shape, b = broadcast("normal", {m, s})
  mean, sd = b[1], b[2]
  return new("normal", {m, s}, function(x)
    local z = over(x - mean, sd)
    return total(sq(z)) * -0.5 - log_sum(sd, count(x)) - count(x) * 0.5 * log(2 * pi)
  end, "real", shape)
end

--- smoothed_box(a, b, sigma = 0.01) (GPyTorch's SmoothedBoxPrior): flat on
-- [a, b], Gaussian tails of sd sigma outside, over all of ℝ:
-- log p(x) = −d(x)²/(2σ²) − log(b − a + √(2π)·σ), d the distance to [a, b].
-- a, b, sigma: numbers or one per entry.
function priors.smoothed_box(a, b, sigma)
  local pa, pb = param("smoothed_box a", a, finite), param("smoothed_box b", b, finite)
  local ps = param("smoothed_box sigma", sigma == nil and 0.01 or sigma, positive)
  local shape, v = broadcast("smoothed_box", {pa, pb, ps})
  local lo, hi, s = v[1], v[2], v[3]
  local function entry(p, i) return type(p) == "number" and p or p.flat[i] end
  local n = 1
  for _, d in ipairs(shape or {}) do n = n * d end
  for i = 1, n do
    if entry(pa, i) >= entry(pb, i) then
      fail("smoothed_box needs a < b, got %.6g, %.6g%s", entry(pa, i), entry(pb, i),
           shape and string.format(" (entry %d)", i) or "")
    end
  end
  local centre, half = (lo + hi) * 0.5, (hi - lo) * 0.5
  local norm = (hi - lo) + s * math.sqrt(2 * pi) -- b − a + √(2π)σ
  return new("smoothed_box", {pa, pb, ps}, function(x)
    local u = ab(x - centre) - half -- d(x) = max(u, 0)
    local d = (u + ab(u)) * 0.5
    return total(sq(over(d, s))) * -0.5 - log_sum(norm, count(x))
  end, "real", shape)
end

--- lognormal(mu, sigma): log x ~ N(mu, sigma²).
function priors.lognormal(mu, sigma)
  finite("lognormal mu", mu)
  positive("lognormal sigma", sigma)
  return new("lognormal", {mu, sigma}, function(x)
    local lx = lg(x)
    local z = (lx - mu) * (1 / sigma)
    return total(sq(z)) * -0.5 - total(lx) - count(x) * (log(sigma) + 0.5 * log(2 * pi))
  end, "positive")
end

--- gamma(concentration a, rate b): b^a x^{a−1} e^{−bx} / Γ(a).
function priors.gamma(a, b)
  positive("gamma concentration", a)
  positive("gamma rate", b)
  local const = a * log(b) - likelihoods.lgamma(a)
  return new("gamma", {a, b}, function(x)
    return total(lg(x)) * (a - 1) - total(x) * b + count(x) * const
  end, "positive")
end

--- half_cauchy(scale s): 2 / (π s (1 + (x/s)²)) on x ≥ 0.
function priors.half_cauchy(s)
  positive("half_cauchy scale", s)
  return new("half_cauchy", {s}, function(x)
    local z = x * (1 / s)
    return -total(lg(sq(z) + 1)) + count(x) * (log(2) - log(pi * s))
  end, "positive")
end

--- uniform(lo, hi): 1/(hi − lo) inside, 0 (log −∞) outside.
function priors.uniform(lo, hi)
  finite("uniform lo", lo)
  finite("uniform hi", hi)
  if lo >= hi then fail("uniform needs lo < hi, got %s, %s", tostring(lo), tostring(hi)) end
  return new("uniform", {lo, hi}, function(x)
    local values = type(x) == "number" and {x}
                   or (x:dim() == 0 and {x:item()} or x:contiguous():reshape(x:numel()):totable())
    for _, v in ipairs(values) do
      if v < lo or v > hi then return -math.huge end
    end
    -- a constant inside: x * 0 keeps the result a followed value
    return total(x) * 0 - count(x) * log(hi - lo)
  end, "real")
end

return priors
