--- Analytic acquisition functions of lazytensor.bo, and the helpers the
-- other bo files share (errors, model and candidate checks, a seeded
-- normal stream).
--
-- Every acquisition is a function acq(X) of candidates X (an lt tensor
-- {q, d}, or {d} for one point) returning an lt tensor of q values to
-- MAXIMISE, one per candidate. Improvement means a lower f (minimisation)
-- unless opts.maximize is true. EI, PI and LogEI use the latent posterior
-- (no observation noise): with μ, σ of f at a candidate and
--   u = (best − μ)/σ  (minimising)   or   u = (μ − best)/σ  (maximising),
--   EI = σ·h(u), h(u) = φ(u) + u·Φ(u);  LogEI = log σ + log h(u);
--   PI = Φ(u);  UCB = −(μ − √β·σ) (minimising), μ + √β·σ (maximising);
--   posterior mean: −μ (minimising), μ (maximising).
-- Everything is written with lazytensor operations on model:posterior(X),
-- so lt.grad differentiates an acquisition with respect to X (no
-- derivative is written by hand here).
local lt = require "lazytensor"

local acquisition = {}

local SQRT_HALF_PI = math.sqrt(math.pi / 2)
local INV_SQRT2 = 1 / math.sqrt(2)
-- σ² below this counts as this (BoTorch's clamp): a candidate on an
-- observed point of a noiseless model has σ = 0 up to rounding, and a
-- variance rounded below zero would make σ a NaN.
local MIN_VARIANCE = 1e-12

---------------------------------------------------------------- helpers --

local helpers = {}
acquisition.helpers = helpers

local function fail(fmt, ...) error("lazytensor: bo: " .. string.format(fmt, ...), 0) end
helpers.fail = fail

local function is_finite(v)
  return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge
end
helpers.is_finite = is_finite

--- A value for a message, the same on every Lua and platform ("nan", not
-- "-nan"; "2", not "2.0").
local function show(v)
  if type(v) ~= "number" then return tostring(v) end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" end
  if v == -math.huge then return "-inf" end
  return string.format("%.15g", v)
end
helpers.show = show

--- The number of input coordinates of a model (nil when it does not say).
function helpers.input_dim(model)
  if type(model.d) == "number" then return model.d end
  if type(model.points) == "table" and type(model.points[1]) == "table" then
    return #model.points[1]
  end
  return nil
end

--- Raises unless model has a posterior that follows the candidates.
function helpers.check_model(model, what)
  local mt = type(model) == "table" or type(model) == "userdata"
  if not mt or type(model.posterior) ~= "function" then
    fail("%s: the model must have a posterior(X) method (gp.exact, gp.sgpr, gp.variational), "
         .. "got %s", what, type(model))
  end
  -- gp.exact says whether its posterior follows X inside lt.grad: it does
  -- not on Toeplitz and SKI structures, where gradients would be zeros.
  if type(model.posterior_follows_inputs) == "function" then
    local ok, kind = model:posterior_follows_inputs()
    if not ok then
      fail("%s: the model's posterior (structure '%s') has no gradient with respect to the "
           .. "candidates; build the model with structure = 'kernel'", what, tostring(kind))
    end
  end
end

--- Raises unless opts is nil or a table whose keys are all in `known`.
function helpers.check_options(what, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail("%s: opts must be a table, got %s", what, type(opts)) end
  for key in pairs(opts) do
    local ok = false
    for _, k in ipairs(known) do ok = ok or k == key end
    if not ok then
      fail("%s: unknown option '%s' (expected one of %s)", what, tostring(key),
           table.concat(known, ", "))
    end
  end
  if opts.maximize ~= nil and type(opts.maximize) ~= "boolean" then
    fail("%s: opts.maximize must be a boolean, got %s", what, type(opts.maximize))
  end
  return opts
end

--- Raises unless v is a finite number.
function helpers.check_number(what, name, v)
  if not is_finite(v) then
    fail("%s: %s must be a finite number, got %s", what, name, show(v))
  end
end

--- Candidates as a {q, d} tensor (X itself, a {d} one reshaped, a Lua
-- array converted), checked: dense, finite, d coordinates. Reshaping keeps
-- a followed X followed inside lt.grad.
function helpers.candidates(what, X, d)
  if type(X) == "table" and not lt.is_tensor(X) then
    local ok, t = pcall(lt.tensor, X)
    if not ok then fail("%s: candidates must be a {q, d} tensor or array of arrays", what) end
    X = t
  end
  if not lt.is_tensor(X) or lt.is_lazy(X) then
    fail("%s: candidates must be a dense {q, d} or {d} tensor, got %s", what,
         lt.type(X) or type(X))
  end
  if X:dim() == 1 then X = X:reshape(1, X:size(1)) end
  if X:dim() ~= 2 or X:size(1) < 1 then
    fail("%s: candidates must be a {q, d} or {d} tensor, got shape {%s}", what,
         table.concat(X:shape(), ", "))
  end
  if d and X:size(2) ~= d then
    fail("%s: candidates have %d coordinates, the model's inputs %d", what, X:size(2), d)
  end
  local bad = lt._first_non_finite(X) -- one C pass (every L-BFGS evaluation comes here)
  if bad then
    local q = X:size(2)
    local i, j = math.floor((bad - 1) / q) + 1, (bad - 1) % q + 1
    fail("%s: candidate %d, coordinate %d is %s", what, i, j, show(X:get(i, j)))
  end
  return X
end

-- A uniform stream on (0, 1): Park and Miller's minimal standard generator
-- (x ← 48271·x mod 2³¹ − 1, exact in doubles on every Lua), so that a seed
-- gives the same numbers everywhere without touching lt's generator.
local MODULUS = 2147483647

local Stream = {}
Stream.__index = Stream

function Stream:uniform()
  self.x = math.fmod(48271 * self.x, MODULUS)
  return self.x / MODULUS
end

-- Box–Muller, both of a pair used.
function Stream:normal()
  if self.spare then
    local z = self.spare
    self.spare = nil
    return z
  end
  local r = math.sqrt(-2 * math.log(self:uniform()))
  local a = 2 * math.pi * self:uniform()
  self.spare = r * math.sin(a)
  return r * math.cos(a)
end

--- An {rows, cols} tensor of standard normals from the stream.
function Stream:normals(rows, cols)
  local t = {}
  for i = 1, rows do
    local row = {}
    for j = 1, cols do row[j] = self:normal() end
    t[i] = row
  end
  return lt.tensor(t)
end

--- A stream from an integer seed (any number; reduced into the generator's
-- range) and an optional integer salt (another stream of the same seed).
function helpers.stream(seed, salt)
  local x = math.fmod(math.abs(math.floor(seed)) + 7919 * (salt or 0), MODULUS - 1) + 1
  local s = setmetatable({x = x}, Stream)
  for _ = 1, 8 do s:uniform() end -- small seeds start with small numbers
  return s
end

--- opts.seed checked, or a seed drawn from lt's generator (lt.manual_seed
-- makes it reproducible).
function helpers.seed(what, seed)
  if seed == nil then return math.floor(lt.rand(1)[1] * (MODULUS - 2)) + 1 end
  if not is_finite(seed) or seed ~= math.floor(seed) then
    fail("%s: opts.seed must be an integer, got %s", what, show(seed))
  end
  return seed
end

-- Constant 0/1 masks of where the entries of a 1-d tensor u satisfy
-- test, as a tensor (inside lt.grad: constants, from u's values).
local function mask(u, test)
  local m = {}
  for i, v in ipairs(u:totable()) do m[i] = test(v) and 1 or 0 end
  return lt.tensor(m)
end
helpers.mask = mask

-- u where mask is 1, c elsewhere: the branch of a piecewise formula never
-- sees the other branch's inputs (whose values there could be NaN or
-- infinite and poison the gradient through 0·NaN).
local function masked(u, m, c)
  return u:cmul(m) + (1 - m) * c
end
helpers.masked = masked

--- max(v, lo) elementwise for a 1-d v: v itself where no entry is below lo
-- (the usual case: no operation for lt.grad to record), else v with a
-- constant mask, lo where below (derivative 0 there, as max's).
function helpers.clamp_min(v, lo)
  local below = false
  for _, x in ipairs(v:totable()) do
    if not (x >= lo) then below = true break end -- luacheck: ignore 581 (NaN: masked too)
  end
  if not below then return v end
  local m = mask(v, function(x) return x >= lo end)
  return masked(v, m, lo)
end

--- The latent posterior's mean and standard deviation at X ({q, d}):
-- from model:mean_and_variance where the model has it (gp.exact: the same
-- numbers without the lazy covariance, a third of the operations for
-- lt.grad to record and differentiate), else from model:posterior.
function helpers.mean_and_sigma(model, X)
  local mean, var
  if type(model.mean_and_variance) == "function" then
    mean, var = model:mean_and_variance(X)
  else
    local post = model:posterior(X)
    mean, var = post:mean(), post:variance()
  end
  return mean, helpers.clamp_min(var, MIN_VARIANCE):sqrt()
end

---------------------------------------------------------- log h(u) --

-- log h(u), h(u) = φ(u) + u·Φ(u), accurate for every u (Ament et al., 2023,
-- "Unexpected improvements to expected improvement"). With t = −u and
-- m(t) = Φ(−t)/φ(t) = √(π/2)·erfcx(t/√2) (Mills' ratio, finite where Φ
-- underflows), h(u) = φ(u)·(1 − t·m(t)):
--   u > −1:        log(φ(u) + u·Φ(u)) directly (no cancellation);
--   −20 ≤ u ≤ −1:  log φ(u) + log(1 − t·m(t)) (the difference loses
--                  about log10(t²) digits: 3 at t = 20);
--   u < −20:       log φ(u) + log(1/t² − 3/t⁴ + 15/t⁶ − ...), the
--                  asymptotic series of 1 − t·m(t), 10 terms (the first
--                  omitted is 21!!/t²² < 3e-18 of the sum at t = 20).
local LOWER, UPPER = -20, -1
local SERIES_TERMS = 10

local function log_h_direct(u)
  return (lt.normal_pdf(u) + u:cmul(lt.normal_cdf(u))):log()
end

local function log_h_mills(u)
  local t = -u
  local tm = t:cmul(lt.erfcx(t * INV_SQRT2)) * SQRT_HALF_PI
  return lt.normal_log_pdf(u) + (1 - tm):log()
end

local function log_h_series(u)
  local w = u:cmul(u):pow(-1) -- 1/t²
  -- 1 − 3w + 15w² − 105w³ + ...: coefficients (−1)^k (2k+1)!!
  local sum, term, coef = nil, nil, 1
  for k = 0, SERIES_TERMS - 1 do
    if k > 0 then coef = -coef * (2 * k + 1) end
    term = (k == 0) and (w * 0 + 1) or term:cmul(w)
    sum = (k == 0) and term or sum + term * coef
  end
  return lt.normal_log_pdf(u) + w:log() + sum:log()
end

-- The pieces of log h: the formula, the range test, a safe input inside
-- the range (what masked-out entries are evaluated at).
local PIECES = {
  {log_h_direct, function(v) return v > UPPER end, 0},
  {log_h_mills, function(v) return not (v > UPPER or v < LOWER) end, -2}, -- (NaN here)
  {log_h_series, function(v) return v < LOWER end, 2 * LOWER},
}

--- log h(u) of a 1-d tensor u (see above), piece by piece with constant
-- masks, each piece on inputs inside its own range. A piece no entry falls
-- in is skipped, and when every entry falls in one piece it takes u as it
-- is: the same values (the masks are 0 and 1), and inside lt.grad a third
-- of the recorded operations or fewer (bo.optimize's L-BFGS differentiates
-- this at every evaluation; the series alone is 30 operations).
function acquisition.log_h(u)
  local values, used = u:totable(), {}
  for k, piece in ipairs(PIECES) do
    for _, v in ipairs(values) do
      if piece[2](v) then
        used[#used + 1] = k
        break
      end
    end
  end
  if #used == 1 then return PIECES[used[1]][1](u) end
  local total
  for _, k in ipairs(used) do
    local piece = PIECES[k]
    local m = mask(u, piece[2])
    local part = piece[1](masked(u, m, piece[3])):cmul(m)
    total = total and total + part or part
  end
  return total
end

----------------------------------------------------------- acquisitions --

-- Acquisitions that give one value per candidate (a row of X on its own):
-- bo.optimize evaluates raw samples of them in one call. Weak keys.
acquisition.pointwise = setmetatable({}, {__mode = "k"})

-- An acquisition from value(mu, sigma) → q values, after the checks.
local function analytic(model, what, value)
  local d = helpers.input_dim(model)
  local function acq(X)
    X = helpers.candidates(what, X, d)
    local mu, sigma = helpers.mean_and_sigma(model, X)
    return value(mu, sigma)
  end
  acquisition.pointwise[acq] = true
  return acq
end

-- u = (best − μ)/σ (minimising) or (μ − best)/σ (maximising).
local function standardised(mu, sigma, best, maximize)
  local diff = maximize and (mu - best) or (mu * -1 + best)
  return diff:cdiv(sigma)
end

local function improvement_setup(what, model, best, opts)
  helpers.check_model(model, what)
  helpers.check_number(what, "best", best)
  return helpers.check_options(what, opts, {"maximize"})
end

--- Expected improvement over best: σ·(φ(u) + u·Φ(u)).
function acquisition.expected_improvement(model, best, opts)
  local what = "expected_improvement"
  opts = improvement_setup(what, model, best, opts)
  return analytic(model, what, function(mu, sigma)
    local u = standardised(mu, sigma, best, opts.maximize)
    return sigma:cmul(lt.normal_pdf(u) + u:cmul(lt.normal_cdf(u)))
  end)
end

--- log EI, accurate far below the mean (where EI itself underflows).
function acquisition.log_expected_improvement(model, best, opts)
  local what = "log_expected_improvement"
  opts = improvement_setup(what, model, best, opts)
  return analytic(model, what, function(mu, sigma)
    local u = standardised(mu, sigma, best, opts.maximize)
    return acquisition.log_h(u) + sigma:log()
  end)
end

--- Probability of improvement over best: Φ(u).
function acquisition.probability_of_improvement(model, best, opts)
  local what = "probability_of_improvement"
  opts = improvement_setup(what, model, best, opts)
  return analytic(model, what, function(mu, sigma)
    return lt.normal_cdf(standardised(mu, sigma, best, opts.maximize))
  end)
end

--- Upper confidence bound: −(μ − √β·σ) minimising, μ + √β·σ maximising.
function acquisition.upper_confidence_bound(model, beta, opts)
  local what = "upper_confidence_bound"
  helpers.check_model(model, what)
  helpers.check_number(what, "beta", beta)
  if beta < 0 then fail("%s: beta must be >= 0, got %s", what, show(beta)) end
  opts = helpers.check_options(what, opts, {"maximize"})
  local sb = math.sqrt(beta)
  return analytic(model, what, function(mu, sigma)
    if opts.maximize then return mu + sigma * sb end
    return sigma * sb - mu
  end)
end

--- The posterior mean as a value to maximise: −μ minimising, μ maximising.
function acquisition.posterior_mean(model, opts)
  local what = "posterior_mean"
  helpers.check_model(model, what)
  opts = helpers.check_options(what, opts, {"maximize"})
  return analytic(model, what, function(mu)
    if opts.maximize then return mu end
    return mu * -1
  end)
end

return acquisition
