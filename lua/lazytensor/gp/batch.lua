--- Batches of independent exact GPs: `gp.exact{x = X, y = Y, kernel = k}`
-- with X `{b, n, d}` and Y `{b, n}` is b GPs, member i on X[i], Y[i], each
-- with hyperparameters of its own (starting from the kernel given; noise a
-- number, a table or 1-d tensor of b variances, or `{b, n}` per-point
-- variances), fitted at once: the objective is the sum of the members'
-- marginal log-likelihoods, whose gradient is the members' gradients side by
-- side.
--
--   local model = gp.exact{x = X, y = Y, kernel = gp.kernels.rbf{lengthscale = 1}}
--   model:fit{max_iter = 50}
--   model:mll()               -- a tensor of b log-likelihoods
--   local mean, var = model:predict(Xs)  -- Xs {b, m, d} or {m, d}: {b, m} each
--   model:member(i)           -- member i, an exact GP model of its own
--
-- The members' log-likelihoods are one batched inv_quad_logdet of their
-- covariances (lt.batch of the members' K + σ²I); the gradients, the fit's
-- steps and predictions are the members' own computations.
local lt = require "lazytensor"
local optim = require "lazytensor.optim"

local batch = {}

local log, pi = math.log, math.pi
local unpack = table.unpack or unpack -- luacheck: ignore 143

local BatchModel = {}
BatchModel.__index = BatchModel

local function fail(fmt, ...)
  error("lazytensor: gp: " .. string.format(fmt, ...), 0)
end

-- An independent copy of a kernel (its hyperparameters are its member's
-- own): tables copied deeply with their metatables, tensors cloned.
local function deep_copy(v, seen)
  if lt.is_tensor(v) then return v:clone() end
  if type(v) ~= "table" then return v end
  seen = seen or {}
  if seen[v] then return seen[v] end
  local copy = {}
  seen[v] = copy
  for k, x in pairs(v) do copy[deep_copy(k, seen)] = deep_copy(x, seen) end
  return setmetatable(copy, getmetatable(v))
end

-- Member i's noise from the batch's: a number for all; b numbers (a table
-- or 1-d tensor), one per member; a {b, n} tensor of per-point variances.
local function member_noise(noise, i, b)
  if noise == nil or type(noise) == "number" then return noise end
  if type(noise) == "table" and not lt.is_tensor(noise) then
    if #noise ~= b then fail("noise: %d values for %d members", #noise, b) end
    return noise[i]
  end
  if noise:dim() == 1 then
    if noise:size(1) ~= b then fail("noise: %d values for %d members", noise:size(1), b) end
    return noise[i]
  end
  if noise:dim() ~= 2 or noise:size(1) ~= b then
    fail("noise: expected a number, b values or a {b, n} tensor, got %s",
         table.concat(noise:shape(), "x"))
  end
  return noise[i]:clone()
end

--- The batched model (gp.exact calls this for a 3-d x).
function batch.exact(gp, spec)
  local X, Y = spec.x, lt.is_tensor(spec.y) and spec.y or lt.tensor(spec.y)
  if X:dim() ~= 3 then
    fail("exact: a batch's x is {b, n, d}, got %s", table.concat(X:shape(), "x"))
  end
  local b, n = X:size(1), X:size(2)
  if Y:dim() ~= 2 or Y:size(1) ~= b or Y:size(2) ~= n then
    fail("exact: x is %s, so y must be %dx%d, got %s", table.concat(X:shape(), "x"), b, n,
         table.concat(Y:shape(), "x"))
  end
  local members = {}
  for i = 1, b do
    local s = {}
    for k, v in pairs(spec) do s[k] = v end
    s.x, s.y = X[i], Y[i]
    s.kernel = deep_copy(spec.kernel)
    s.noise = member_noise(spec.noise, i, b)
    local ok, model = pcall(gp.exact, s)
    if not ok then
      error(tostring(model):gsub("^lazytensor: gp: ", "lazytensor: gp: member " .. i .. ": "), 0)
    end
    members[i] = model
  end
  return setmetatable({members = members, b = b, n = n}, BatchModel)
end

--- Member i: an exact GP model of its own (its hyperparameters are the
-- batch's; setting them changes the batch).
function BatchModel:member(i)
  local m = self.members[i]
  if m == nil then fail("member %s out of range (a batch of %d)", tostring(i), self.b) end
  return m
end

--- The members' log hyperparameters, one after another.
function BatchModel:get_vector()
  local v = {}
  for _, m in ipairs(self.members) do
    for _, x in ipairs(m:get_vector()) do v[#v + 1] = x end
  end
  return v
end

function BatchModel:set_vector(v)
  local off = 0
  for _, m in ipairs(self.members) do
    local count = #m:get_vector()
    m:set_vector({unpack(v, off + 1, off + count)})
    off = off + count
  end
end

--- The members' raw vectors (the fit's parameters through their bounds,
-- gp/hyper.lua), one after another.
function BatchModel:raw_vector()
  local v = {}
  for _, m in ipairs(self.members) do
    for _, x in ipairs(m:raw_vector()) do v[#v + 1] = x end
  end
  return v
end

function BatchModel:set_raw_vector(v)
  local off = 0
  for _, m in ipairs(self.members) do
    local count = #m:get_vector()
    m:set_raw_vector({unpack(v, off + 1, off + count)})
    off = off + count
  end
end

--- The sum of the members' log posteriors (log-likelihoods without
-- priors) and its gradient with respect to raw_vector's entries.
function BatchModel:log_posterior_and_grad()
  local total, grad = 0, {}
  for _, m in ipairs(self.members) do
    local value, g = m:log_posterior_and_grad()
    total = total + value
    for _, x in ipairs(g) do grad[#grad + 1] = x end
  end
  return total, grad
end

--- The members' log posteriors, a tensor of b.
function BatchModel:log_posterior()
  local out = {}
  for i, m in ipairs(self.members) do out[i] = m:log_posterior() end
  return lt.tensor(out)
end

-- A member's K + noise as its model builds it: the structure's noisy(noise)
-- where it has one (the noise's own links to the gradient), else K with the
-- noise on its diagonal.
local function noisy_covariance(m)
  local cov = m:covariance()
  if cov.noisy then return (cov.noisy(m.noise)) end
  return cov.K:add_diag(m.noise)
end

--- The members' marginal log-likelihoods, a tensor of b, from one batched
-- inv_quad_logdet of their covariances, and its info.
function BatchModel:mll()
  local Ky, R = {}, {}
  for i, m in ipairs(self.members) do
    Ky[i] = noisy_covariance(m)
    R[i] = m.y - m.mean_value
  end
  -- R {b, n}: beside the {b, n, n} batch, one right-hand side per member
  local q, ld, info = lt.batch(Ky):inv_quad_logdet(lt.batch(R))
  return (q + ld + self.n * log(2 * pi)) * -0.5, info
end

--- The sum of the members' log-likelihoods and its gradient (the members'
-- gradients side by side, as get_vector orders the parameters).
function BatchModel:mll_and_grad()
  local total, grad = 0, {}
  for _, m in ipairs(self.members) do
    local value, g = m:mll_and_grad()
    total = total + value
    for _, x in ipairs(g) do grad[#grad + 1] = x end
  end
  return total, grad
end

--- Maximises the sum of the members' log-likelihoods (log posteriors with
-- priors) over all their hyperparameters at once (each member's only move
-- its own), through the members' bounds (the same for all: gp.exact's
-- bounds and priors are given to each member). opts as a member's fit.
-- Returns {mll = a tensor of b, iterations, converged, reason, evaluations}.
function BatchModel:fit(opts)
  opts = opts or {}
  local method = opts.method or "lbfgs"
  if method ~= "lbfgs" and method ~= "adam" then
    fail("unknown fit method '%s'", tostring(method))
  end
  if opts.lr ~= nil and method ~= "adam" then -- as a member's fit: lbfgs has no step size
    fail("fit: lr is the step of method = 'adam' (on the log-hyperparameters); "
         .. "method = '%s' chooses its steps by line search and takes no lr", method)
  end
  local function objective(v)
    self:set_raw_vector(v)
    local ok, value, grad = pcall(self.log_posterior_and_grad, self)
    if not ok then
      -- a member's failed factorisation is a bad point: the optimiser steps back
      if type(value) == "string" and value:find("lazytensor:", 1, true) then
        local g = {}
        for i = 1, #v do g[i] = 0 end
        return -math.huge, g
      end
      error(value, 0)
    end
    return value, grad
  end
  local best, _, info = optim[method](objective, self:raw_vector(), {
    maximize = true, max_iter = opts.max_iter or 100, lr = opts.lr, gtol = opts.gtol,
    callback = opts.callback and function(iter, v, _, gnorm)
      return opts.callback(iter, v, self, gnorm)
    end,
  })
  self:set_raw_vector(best)
  return {mll = self:mll(), iterations = info.iterations, converged = info.converged,
          reason = info.reason, evaluations = info.evaluations}
end

-- Member i's test points: xstar {b, m, d} per member, or {m, d} (or a Lua
-- table) shared by all.
local function points_of(self, xstar, i)
  if lt.is_tensor(xstar) and xstar:dim() == 3 then
    if xstar:size(1) ~= self.b then
      fail("predict: test points for %d members, the batch has %d", xstar:size(1), self.b)
    end
    return xstar[i]
  end
  return xstar
end

local function stack(tensors) return lt.batch(tensors) end

--- Posterior means and variances of the members' f at xstar: {b, m} each.
function BatchModel:predict(xstar, opts)
  local means, vars = {}, {}
  for i, m in ipairs(self.members) do
    means[i], vars[i] = m:predict(points_of(self, xstar, i), opts)
  end
  if vars[1] == nil then return stack(means) end
  return stack(means), stack(vars)
end

--- The members' posteriors at xstar as one batched lt.mvn (mean {b, m},
-- covariance a batch of the members' posterior covariances).
function BatchModel:posterior(xstar, opts)
  local means, covs = {}, {}
  for i, m in ipairs(self.members) do
    local d = m:posterior(points_of(self, xstar, i), opts)
    means[i], covs[i] = d:mean(), d:covariance()
  end
  return lt.mvn(stack(means), lt.batch(covs))
end

function BatchModel:describe()
  local parts = {}
  for i, m in ipairs(self.members) do parts[i] = ("member %d:\n%s"):format(i, m:describe()) end
  return table.concat(parts, "\n")
end

batch.BatchModel = BatchModel
batch.deep_copy = deep_copy -- gp/condition.lua copies a model's kernel too
return batch
