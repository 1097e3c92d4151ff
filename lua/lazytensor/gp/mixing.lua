--- gp.variational's side of softmax's mixing weights (GPyTorch's
-- SoftmaxLikelihood(num_features = F, num_classes = C), its default):
-- F latent GPs g, one q(u_j) each (the model's C > 1 latents code, with
-- latents = F), and class logits f = W g with W (C×F) a real-valued
-- hyperparameter of the likelihood, "mixing_weights", learnt with the rest
-- by lt.grad and Adam unless the likelihood fixes it.
--
-- In the parameter table W is p.mixing_weights (C×F), or
-- p.raw_mixing_weights with bounds.mixing_weights (gp/hyper.lua's
-- per-entry maps, as raw_Z); priors.mixing_weights takes a real-valued
-- density (normal, smoothed_box, uniform). Inside the bound W reaches the
-- likelihood as theta.mixing_weights (followed).
local hyper = require "lazytensor.gp.hyper"
local likelihoods = require "lazytensor.gp.likelihoods"
local lt = require "lazytensor"

local mixing = {}

--- The parameter table's keys for W (top-level leaves, as Z and raw_Z).
mixing.KEYS = {"mixing_weights", "raw_mixing_weights"}

local function learnt(lik)
  return lik.mixing and not lik.fixed.mixing_weights
end

--- reals (parse_hyper's real-valued hyperparameters) with W added when the
-- likelihood has mixing weights.
function mixing.reals(lik, reals)
  if lik.mixing then
    local flat = {}
    for _, row in ipairs(lik.weights:totable()) do
      for _, w in ipairs(row) do flat[#flat + 1] = w end
    end
    reals.mixing_weights = {value = flat, shape = {lik.classes, lik.features},
                            free = learnt(lik) and true or false}
  end
  return reals
end

--- Adds W's leaf to the parameter table p (when learnt).
function mixing.add_parameters(self, p)
  local lik = self.likelihood
  if not learnt(lik) then return p end
  local b = self.bounds.mixing_weights
  if b then
    p.raw_mixing_weights = hyper.real_raw(b, lik.weights)
  else
    p.mixing_weights = lik.weights:clone()
  end
  return p
end

--- W at p (followed inside lt.grad): p.mixing_weights, p.raw_mixing_weights
-- through its bounds, or the likelihood's own.
function mixing.weights_of(self, p)
  if p and p.raw_mixing_weights ~= nil then
    return hyper.real_map(self.bounds.mixing_weights, p.raw_mixing_weights)
  end
  return p and p.mixing_weights or self.likelihood.weights
end

--- theta (the likelihood's hyperparameters at p) with W added.
function mixing.theta(self, p, theta)
  if self.likelihood.mixing then theta.mixing_weights = mixing.weights_of(self, p) end
  return theta
end

--- The new W a parameter table sets (a constant C×F tensor), or nil;
-- checked before the model changes (fail: the model's error function).
function mixing.from_parameters(self, p, fail)
  local lik = self.likelihood
  local given = p.mixing_weights ~= nil and "mixing_weights"
                or p.raw_mixing_weights ~= nil and "raw_mixing_weights" or nil
  if given == nil then return nil end
  if not lik.mixing then
    fail("%s: the likelihood has no mixing weights (softmax{classes, features})", given)
  end
  local v = p[given]
  if not lt.is_tensor(v) or v:dim() ~= 2 or v:size(1) ~= lik.classes
     or v:size(2) ~= lik.features then
    fail("%s must be a %d×%d tensor (classes × features)", given, lik.classes, lik.features)
  end
  if given == "raw_mixing_weights" then
    if not self.bounds.mixing_weights then
      fail("raw_mixing_weights needs bounds.mixing_weights (mixing_weights otherwise)")
    end
    v = hyper.real_value(self.bounds.mixing_weights, v)
  end
  return likelihoods._weights_tensor(v, lik.classes, lik.features, given)
end

--- A short description of the mixing ("" without it).
function mixing.describe(lik)
  if not lik.mixing then return "" end
  return string.format(", %d features mixed by W (%s)", lik.features,
                       lik.fixed.mixing_weights and "fixed" or "learnt")
end

return mixing
