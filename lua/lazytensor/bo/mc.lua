--- Monte-Carlo batch acquisitions of lazytensor.bo (BoTorch's qEI, qNEI,
-- qUCB), from reparameterised posterior samples with fixed base samples.
--
-- For q candidates X the joint posterior of f(X) is N(μ, C); with L a
-- Cholesky factor of C (lt's, which adds jitter when C is singular to
-- rounding — two candidates on one point) and base samples Z ({S, q}
-- standard normals, drawn once per acquisition and batch size q from its
-- seed), the samples are F = 1·μᵀ + Z·Lᵀ: a differentiable function of X,
-- so lt.grad gives the acquisition's gradient and the function is
-- deterministic in X. Each returns a one-element tensor (the mean over
-- the S samples), to maximise:
--   qEI   mean_s max(0, best − min_i F_si)        (maximize: max_i F_si − best)
--   qNEI  as qEI with best replaced, sample by sample, by the best of the
--         joint samples at the observed points (min_j F_sj over x_observed)
--   qUCB  mean_s max_i (−μ_i + √(βπ/2)·|F_si − μ_i|)  (maximize: μ_i + ...)
-- The max (min) over the batch is taken through a constant one-hot mask of
-- each sample's arg max: its gradient is the arg max's, as torch's max.
local lt = require "lazytensor"
local acquisition = require "lazytensor.bo.acquisition"

local mc = {}

local h = acquisition.helpers
local fail = h.fail

-- The default number of base samples (BoTorch's).
local SAMPLES = 512

local function relu(v) return (v + v:abs()) * 0.5 end

-- max (or min, with lowest) over the columns of F ({S, k}) for each row: a
-- {S} tensor, through a constant one-hot mask of the arg max.
local function row_extreme(F, lowest)
  local m = {}
  for i, row in ipairs(F:totable()) do
    local best = 1
    for j = 2, #row do
      if (lowest and row[j] < row[best]) or (not lowest and row[j] > row[best]) then best = j end
    end
    local r = {}
    for j = 1, #row do r[j] = (j == best) and 1 or 0 end
    m[i] = r
  end
  return F:cmul(lt.tensor(m)):sum(2)
end

-- The mean of a {S} tensor as a one-element tensor.
local function mean_of(v)
  local total = v:sum() -- a number, or inside lt.grad a 0-d tensor
  if type(total) == "number" then return lt.tensor{total / v:size(1)} end
  return (total / v:size(1)):reshape(1)
end

-- Joint posterior samples at X ({k, d}) from base samples Z ({S, k}), and
-- the posterior mean (1-d, k).
local function joint_samples(model, X, Z)
  local post = model:posterior(X)
  local C = post:covariance():dense()
  local L = C:cholesky():dense()
  local mu = post:mean()
  return Z * L:t() + mu, mu, L
end

local function sample_options(what, opts, extra)
  local known = {"samples", "seed", "maximize"}
  for _, k in ipairs(extra or {}) do known[#known + 1] = k end
  opts = h.check_options(what, opts, known)
  local samples = opts.samples or SAMPLES
  if type(samples) ~= "number" or samples ~= math.floor(samples) or samples < 1 then
    fail("%s: opts.samples must be a positive integer, got %s", what, h.show(samples))
  end
  return opts, samples, h.seed(what, opts.seed)
end

-- An acquisition object: the checks, base samples per batch size, and
-- value(X, Z) → the {1} value.
local function batch_acquisition(model, what, samples, seed, value)
  local d = h.input_dim(model)
  local base = {}
  return function(X)
    X = h.candidates(what, X, d)
    local k = value.width and value.width(X) or X:size(1)
    -- one stream per batch size: the same X always meets the same Z
    base[k] = base[k] or h.stream(seed, k):normals(samples, k)
    return value.eval(X, base[k])
  end
end

--- qEI: the expected improvement of the best of q candidates over best.
function mc.q_expected_improvement(model, best, opts)
  local what = "q_expected_improvement"
  h.check_model(model, what)
  h.check_number(what, "best", best)
  local samples, seed
  opts, samples, seed = sample_options(what, opts)
  return batch_acquisition(model, what, samples, seed, {eval = function(X, Z)
    local F = joint_samples(model, X, Z)
    if opts.maximize then return mean_of(relu(row_extreme(F) - best)) end
    return mean_of(relu(row_extreme(F, true) * -1 + best))
  end})
end

-- X ({q, d}) stacked over the observed points O ({n, d}) by constant
-- selections, so that a followed X stays followed: {q + n, d}.
local function stacked(X, O)
  local q, n = X:size(1), O:size(1)
  local top, bottom = lt.zeros(q + n, q), lt.zeros(q + n, n)
  for i = 1, q do top:set(i, i, 1) end
  for j = 1, n do bottom:set(q + j, j, 1) end
  return top * X + bottom * O
end

--- qNEI: the expected improvement of the best of q candidates over the
-- best of the (noisy) observations at x_observed, jointly sampled.
function mc.q_noisy_expected_improvement(model, x_observed, opts)
  local what = "q_noisy_expected_improvement"
  h.check_model(model, what)
  local d = h.input_dim(model)
  if x_observed == nil then
    fail("%s: x_observed (the observed inputs, {n, d}) is missing", what)
  end
  local O = h.candidates(what .. ": x_observed", x_observed, d):clone()
  local samples, seed
  opts, samples, seed = sample_options(what, opts)
  local n = O:size(1)
  return batch_acquisition(model, what, samples, seed, {
    width = function(X) return X:size(1) + n end,
    eval = function(X, Z)
      local q = X:size(1)
      local F = joint_samples(model, stacked(X, O), Z)
      local new, seen = F:narrow(2, 1, q), F:narrow(2, q + 1, n)
      if opts.maximize then return mean_of(relu(row_extreme(new) - row_extreme(seen))) end
      return mean_of(relu(row_extreme(seen, true) - row_extreme(new, true)))
    end,
  })
end

--- qUCB: BoTorch's batch upper confidence bound.
function mc.q_upper_confidence_bound(model, beta, opts)
  local what = "q_upper_confidence_bound"
  h.check_model(model, what)
  h.check_number(what, "beta", beta)
  if beta < 0 then fail("%s: beta must be >= 0, got %s", what, h.show(beta)) end
  local samples, seed
  opts, samples, seed = sample_options(what, opts)
  local c = math.sqrt(beta * math.pi / 2)
  return batch_acquisition(model, what, samples, seed, {eval = function(X, Z)
    local F, mu = joint_samples(model, X, Z)
    local spread = (F - mu):abs() * c
    if opts.maximize then return mean_of(row_extreme(spread + mu)) end
    return mean_of(row_extreme(spread - mu))
  end})
end

return mc
