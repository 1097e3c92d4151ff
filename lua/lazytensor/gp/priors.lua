--- Priors on GP hyperparameters (GPyTorch's): densities on the
-- hyperparameter's own value (not its log).
--
--   priors = {lengthscale = gp.priors.gamma(3, 6), noise = gp.priors.lognormal(-4, 1)}
--
-- prior:log_density(x) is Σ log p(x_i) over x's entries (a number, or a
-- 0-d or 1-d tensor inside lt.grad — written with tensor operations so the
-- models' log posteriors are differentiated with the rest).
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

-- Elementwise helpers on numbers and tensors.
local function lg(x) return type(x) == "number" and log(x) or x:log() end
local function total(x) return type(x) == "number" and x or x:sum() end
local function count(x) return type(x) == "number" and 1 or x:numel() end
local function sq(x) return type(x) == "number" and x * x or x:cmul(x) end

local function new(kind, args, density)
  return setmetatable({kind = kind, args = args, density = density}, Prior)
end

--- Σ log p(x_i).
function Prior:log_density(x)
  return self.density(x)
end

function Prior:describe()
  local parts = {}
  for i, v in ipairs(self.args) do parts[i] = string.format("%.6g", v) end
  return self.kind .. "(" .. table.concat(parts, ", ") .. ")"
end

--- normal(mean, sd).
function priors.normal(mean, sd)
  finite("normal mean", mean)
  positive("normal sd", sd)
  return new("normal", {mean, sd}, function(x)
    local z = (x - mean) * (1 / sd)
    return total(sq(z)) * -0.5 - count(x) * (log(sd) + 0.5 * log(2 * pi))
  end)
end

--- lognormal(mu, sigma): log x ~ N(mu, sigma²).
function priors.lognormal(mu, sigma)
  finite("lognormal mu", mu)
  positive("lognormal sigma", sigma)
  return new("lognormal", {mu, sigma}, function(x)
    local lx = lg(x)
    local z = (lx - mu) * (1 / sigma)
    return total(sq(z)) * -0.5 - total(lx) - count(x) * (log(sigma) + 0.5 * log(2 * pi))
  end)
end

--- gamma(concentration a, rate b): b^a x^{a−1} e^{−bx} / Γ(a).
function priors.gamma(a, b)
  positive("gamma concentration", a)
  positive("gamma rate", b)
  local const = a * log(b) - likelihoods.lgamma(a)
  return new("gamma", {a, b}, function(x)
    return total(lg(x)) * (a - 1) - total(x) * b + count(x) * const
  end)
end

--- half_cauchy(scale s): 2 / (π s (1 + (x/s)²)) on x ≥ 0.
function priors.half_cauchy(s)
  positive("half_cauchy scale", s)
  return new("half_cauchy", {s}, function(x)
    local z = x * (1 / s)
    return -total(lg(sq(z) + 1)) + count(x) * (log(2) - log(pi * s))
  end)
end

--- uniform(lo, hi): 1/(hi − lo) inside, 0 (log −∞) outside.
function priors.uniform(lo, hi)
  finite("uniform lo", lo)
  finite("uniform hi", hi)
  if lo >= hi then fail("uniform needs lo < hi, got %s, %s", tostring(lo), tostring(hi)) end
  return new("uniform", {lo, hi}, function(x)
    local values = type(x) == "number" and {x} or (x:dim() == 0 and {x:item()} or x:totable())
    for _, v in ipairs(values) do
      if v < lo or v > hi then return -math.huge end
    end
    -- a constant inside: x * 0 keeps the result a followed value
    return total(x) * 0 - count(x) * log(hi - lo)
  end)
end

return priors
