--- Exact-GP classification (and Poisson regression) by Laplace's method
-- (Rasmussen & Williams 2006, §3.4, Algorithms 3.1 and 3.2, §5.5.1).
--
--   local model = gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{},
--                            likelihood = gp.likelihoods.bernoulli{}}
--   model:fit()                          -- L-BFGS on the approximate log marginal likelihood
--   local p = model:predict_y(xstar)     -- P(y = 1)
--
-- The posterior p(f | y) ∝ N(f; 0, K)·Π p(y_i | f_i) is replaced by a
-- Gaussian at its mode f̂, found by Newton's method (Algorithm 3.1, with W
-- = −∇∇ log p(y | f̂), B = I + W^½·K·W^½ = L·Lᵀ). The approximate log
-- marginal likelihood is
--   log q(y | θ) = −½ âᵀf̂ + Σ log p(y_i | f̂_i) − Σ log L_ii,  f̂ = K·â.
--
-- Its gradient comes from lt.grad, in two parts (R&W eq. 5.23–5.24):
-- - explicit (f̂ held fixed): the gradient of ½ âᵀK(θ)â − ½ log|I + W^½K(θ)W^½|
--   with â and W constants (d/dθ of −½ f̂ᵀK⁻¹f̂ at fixed f̂ is +½ âᵀK'â: no K⁻¹);
-- - implicit: the mode moves with θ, ∂f̂/∂θ = (I + KW)⁻¹·K'·∇log p(f̂), and
--   log q depends on f̂ through −½ log|B| only (Ψ is stationary at the mode,
--   its W is not): with g = ∂(−½ log|B|)/∂f̂ — lt.grad through W(f), which
--   carries the likelihood's third derivative — and b = (I + WK)⁻¹g, the
--   implicit part is the gradient of bᵀK(θ)â (b, â constants).
-- One lt.grad of ½ âᵀKâ − ½ log|B| + bᵀKâ gives both. The specs check the
-- sum against central differences of log q, the mode found again at each
-- point (without the implicit part some components are wrong by 70% there).
--
-- With gp.likelihoods.softmax{classes = C}: C latent GPs sharing the kernel
-- (R&W §3.5, Algorithms 3.3 and 3.4), the latents n×C matrices; the mode,
-- log q, the same two-part gradient and the predictions are in
-- gp/laplace_softmax.lua.
local lt = require "lazytensor"
local likelihoods = require "lazytensor.gp.likelihoods"
local optim = require "lazytensor.optim"
local variational = require "lazytensor.gp.variational"
local hyper = require "lazytensor.gp.hyper"
local ltkernel = require "lazytensor.gp.ltkernel"
local multiclass = require "lazytensor.gp.laplace_softmax"

local laplace = {}

local Laplace = {}
Laplace.__index = Laplace

local KEYS = {"x", "y", "kernel", "likelihood", "jitter", "max_newton", "tol", "bounds", "priors"}

local h

local function fail(fmt, ...) h.fail("laplace: " .. fmt, ...) end

-- Labels 1..C as a constant n×C one-hot matrix.
local function one_hot(y, C)
  local rows = {}
  for i, v in ipairs(y:totable()) do
    rows[i] = {}
    for c = 1, C do rows[i][c] = c == v and 1 or 0 end
  end
  return lt.tensor(rows)
end

--- The model's constructor, given init.lua's helpers.
function laplace.constructor(helpers)
  h = helpers
  return function(spec)
    if type(spec) ~= "table" then h.fail("laplace expects a table") end
    h.options("laplace", spec, KEYS)
    variational.check_kernel(spec.kernel, helpers)
    local lik = spec.likelihood
    local softmax = getmetatable(lik) == likelihoods.Likelihood and lik.kind == "softmax"
    if getmetatable(lik) ~= likelihoods.Likelihood or not (lik.newton or softmax) then
      fail("likelihood must be gp.likelihoods.bernoulli{...}, poisson{} or softmax{classes = C}")
    end
    local X = lt.tensor(h.to_points(spec.x, "x"))
    ltkernel.check_inputs(X, fail, "x")
    spec.kernel:check_inputs(X:size(2)) -- ARD lengthscales: one per column read
    local top = spec.kernel:max_dim()
    if top and top > X:size(2) then
      fail("the kernel reads input dimension %d but x has %d", top, X:size(2))
    end
    local y = lik:check_labels(spec.y, "laplace y")
    if y:size(1) ~= X:size(1) then
      fail("y has %d values for %d rows of x", y:size(1), X:size(1))
    end
    local jitter = spec.jitter or 1e-8 * ltkernel.evaluator(spec.kernel):diag_value(spec.kernel)
    if type(jitter) ~= "number" or not (jitter >= 0) then -- luacheck: ignore 581 (NaN)
      fail("jitter must be a non-negative number")
    end
    local max_newton, tol = spec.max_newton or 100, spec.tol or 1e-10
    if type(max_newton) ~= "number" or max_newton < 1 or max_newton % 1 ~= 0 then
      fail("max_newton must be a positive whole number, got %s", tostring(max_newton))
    end
    if type(tol) ~= "number" or not (tol > 0) then -- luacheck: ignore 581 (NaN)
      fail("tol must be a positive number, got %s", tostring(tol))
    end
    local bounds, prior_set = variational.parse_hyper(spec, spec.kernel, nil)
    return setmetatable({X = X, y = y, n = X:size(1), d = X:size(2), kernel = spec.kernel,
                         bounds = bounds, priors = prior_set,
                         likelihood = lik, jitter = jitter, max_newton = max_newton,
                         tol = tol, classes = softmax and lik.classes or nil,
                         Y = softmax and one_hot(y, lik.classes) or nil}, Laplace)
  end
end

------------------------------------------------------------ parameters --

--- The free kernel hyperparameters, unconstrained: {log_<name> = number
-- or 1-d tensor}, or raw_<name> for a bounded one (gp/hyper.lua).
function Laplace:parameters()
  local p = {}
  for _, hp in ipairs(ltkernel.hypers(self.kernel)) do
    if hp.free then
      local r = hyper.to_raw(self.bounds, hp.name, hp.value)
      p[hyper.key(self.bounds, hp.name)] = type(r) == "table" and lt.tensor(r) or r
    end
  end
  return p
end

-- The parameters as a flat array (names sorted; ARD entries in order).
local function names_of(p)
  local names = {}
  for name in pairs(p) do names[#names + 1] = name end
  table.sort(names)
  return names
end

function Laplace:get_vector()
  local p, v = self:parameters(), {}
  for _, name in ipairs(names_of(p)) do
    if lt.is_tensor(p[name]) then
      for _, x in ipairs(p[name]:totable()) do v[#v + 1] = x end
    else
      v[#v + 1] = p[name]
    end
  end
  return v
end

function Laplace:set_vector(v)
  local p, off = self:parameters(), 0
  for _, name in ipairs(names_of(p)) do
    local key = name:sub(5)
    if lt.is_tensor(p[name]) then
      local l = {}
      for i = 1, p[name]:size(1) do l[i] = hyper.from_raw(self.bounds, key, v[off + i]) end
      off = off + #l
      ltkernel.set(self.kernel, key, l)
    else
      off = off + 1
      ltkernel.set(self.kernel, key, hyper.from_raw(self.bounds, key, v[off]))
    end
  end
  self.mode = nil -- the cached f̂ stays as the next Newton start (self.start)
end

local function grad_vector(p, g)
  local out = {}
  for _, name in ipairs(names_of(p)) do
    if lt.is_tensor(g[name]) and g[name]:dim() > 0 then
      for _, x in ipairs(g[name]:totable()) do out[#out + 1] = x end
    else
      out[#out + 1] = type(g[name]) == "number" and g[name] or g[name]:item()
    end
  end
  return out
end

------------------------------------------------------------ the mode --

-- K(A, B) (dense), or K(X, X) + jitter·I when A is nil; logs: followed
-- log hyperparameters (nil: the kernel's values).
local function K_of(self, logs, A, B)
  local kern = ltkernel.evaluator(self.kernel, logs, self.bounds)
  if B then return kern:matrix(A, B) end
  return kern:matrix(A or self.X):add_diag(self.jitter)
end

-- W^½, B = I + W^½·K·W^½'s Cholesky factor L.
local function factor_B(K, W)
  local sW = W:sqrt()
  local B = lt.diag(sW) * K * lt.diag(sW)
  B = (B + B:t()) * 0.5
  return sW, lt.psd(B:dense():add_diag(1)):cholesky():dense()
end

local function lower_solve(L, b) return lt.triangular(L, "lower"):solve(b) end
local function upper_solve(L, b) return lt.triangular(L:t():contiguous(), "upper"):solve(b) end

-- Ψ(f) = −½ aᵀf + Σ log p(y | f) for f = K·a.
local function psi(self, a, f)
  return -0.5 * a:dot(f) + self.likelihood:log_prob(self.y, f):sum()
end

--- Finds the mode f̂ (Algorithm 3.1, Newton's method with step halving on
-- Ψ), warm-started from the last one. Returns a table {f, a, W, sW, L, K,
-- d1, psi, iterations, converged}, kept until the hyperparameters change.
function Laplace:find_mode()
  local fp = self.kernel:fingerprint()
  if self.mode and self.mode_fp == fp then return self.mode end
  local K = K_of(self)
  if self.classes then
    local md = multiclass.find_mode(K, self.Y, self.start, self.max_newton, self.tol)
    md.K = K
    self.mode, self.mode_fp, self.start = md, fp, md.A
    return md
  end
  local n = self.n
  -- a warm start: the previous â (f = K·a keeps Ψ's bookkeeping consistent)
  local a = self.start or lt.zeros(n)
  local f = K * a
  local value = psi(self, a, f)
  local converged, it = false, 0
  local d1, d2, sW, L
  while it < self.max_newton do
    it = it + 1
    d1, d2 = self.likelihood:derivatives(self.y, f)
    local W = -d2
    sW, L = factor_B(K, W)
    local b = W:cmul(f) + d1
    local c = sW:cmul(upper_solve(L, lower_solve(L, sW:cmul(K * b))))
    local a_new = b - c
    local f_new = K * a_new
    local v_new = psi(self, a_new, f_new)
    local halvings = 0
    -- (written with not so that NaN counts as a decrease)
    local floor = value - 1e-12 * math.abs(value)
    while not (v_new >= floor) and halvings < 30 do -- luacheck: ignore 581
      -- a Newton step past the mode: halve it (in a, so that f = K·a stays)
      a_new = (a + a_new) * 0.5
      f_new = K * a_new
      v_new = psi(self, a_new, f_new)
      halvings = halvings + 1
    end
    local change = math.abs(v_new - value)
    a, f, value = a_new, f_new, v_new
    if change <= self.tol * (1 + math.abs(value)) then
      converged = true
      break
    end
  end
  d1, d2 = self.likelihood:derivatives(self.y, f)
  local W = -d2
  sW, L = factor_B(K, W)
  -- at the mode â = ∇log p(f̂); keep Newton's own a for f = K·a
  self.mode = {f = f, a = a, d1 = d1, W = W, sW = sW, L = L, K = K, psi = value,
               iterations = it, converged = converged}
  self.mode_fp = fp
  self.start = a
  return self.mode
end

------------------------------------------------------------ the MLL --

--- The approximate log marginal likelihood log q(y | θ) and the mode's info
-- ({iterations, converged}).
function Laplace:mll()
  local md = self:find_mode()
  local half_logdet = self.classes and md.fac.half_logdet or md.L:diagonal():log():sum()
  return md.psi - half_logdet, {iterations = md.iterations, converged = md.converged}
end

-- g = ∂(−½ log|B(f)|)/∂f at fixed θ, by lt.grad through W(f).
local function logdet_sensitivity(self, md)
  local K = md.K
  return (lt.grad(function(f)
    local _, d2 = self.likelihood:derivatives(self.y, f)
    local sW = (-d2):sqrt()
    local B = lt.diag(sW) * K * lt.diag(sW)
    return lt.psd(B:dense():add_diag(1)):cholesky():dense():diagonal():log():sum() * -1
  end)(md.f))
end

-- Σ log prior at the (followed) parameters logs.
local function log_prior(self, logs)
  if next(self.priors) == nil then return 0 end
  local kern = ltkernel.evaluator(self.kernel, logs, self.bounds)
  return hyper.log_prior(self.priors, function(name) return kern:get(name) end)
end

--- log q(y | θ) plus the priors' log densities.
function Laplace:log_posterior()
  return self:mll() + log_prior(self, nil)
end

--- The surrogate whose lt.grad is log q's total gradient (see the header):
-- a function of the log hyperparameters, and its constants. opts.implicit
-- = false leaves the implicit term out (for the specs' comparison);
-- opts.posterior = true adds the priors' log densities.
function Laplace:gradient_objective(opts)
  local md = self:find_mode()
  if self.classes then return self:multiclass_objective(md, opts) end
  local a, sW = md.d1, md.sW
  local b
  if not opts or opts.implicit ~= false then
    local g = logdet_sensitivity(self, md)
    -- b = (I + W·K)⁻¹g = g − W^½·B⁻¹·W^½·K·g
    b = g - sW:cmul(upper_solve(md.L, lower_solve(md.L, sW:cmul(md.K * g))))
  end
  local function f(logs)
    local K = K_of(self, logs)
    local B = lt.diag(sW) * K * lt.diag(sW)
    local logdet = lt.psd(B:dense():add_diag(1)):cholesky():dense():diagonal():log():sum()
    local Ka = K * a
    local value = a:dot(Ka) * 0.5 - logdet
    if b then value = value + b:dot(Ka) end
    if opts and opts.posterior then value = value + log_prior(self, logs) end
    return value
  end
  return f, self:parameters()
end

-- gradient_objective's multiclass surrogate (gp/laplace_softmax.lua).
function Laplace:multiclass_objective(md, opts)
  local b
  if not opts or opts.implicit ~= false then b = multiclass.implicit_b(md, md.K) end
  local function f(logs)
    local value = multiclass.surrogate(K_of(self, logs), md, self.Y, b)
    if opts and opts.posterior then value = value + log_prior(self, logs) end
    return value
  end
  return f, self:parameters()
end

--- log q(y | θ) and its gradient with respect to get_vector() (the log
-- kernel hyperparameters), by lt.grad (see the header); with opts.posterior
-- = true, of the log posterior (priors added).
function Laplace:mll_and_grad(opts)
  local value, info = self:mll()
  local posterior = opts and opts.posterior
  local f, p = self:gradient_objective{posterior = posterior}
  local g = lt.grad(f)(p)
  if posterior then value = value + log_prior(self, nil) end
  return value, grad_vector(p, g), info
end

--- Maximises log q(y | θ) over the log kernel hyperparameters.
-- opts: max_iter (50), method ("lbfgs" | "adam"), lr, callback(iter, mll, model).
function Laplace:fit(opts)
  opts = h.options("laplace fit", opts, {"max_iter", "method", "lr", "callback"})
  local method = opts.method or "lbfgs"
  if method ~= "lbfgs" and method ~= "adam" then fail("unknown fit method '%s'", method) end
  local saved_mode, saved_fp, saved_start = self.mode, self.mode_fp, self.start
  local x0 = self:get_vector()
  local saved = {}
  for name, v in pairs(ltkernel.values(self.kernel)) do
    if type(v) == "table" then
      local c = {}
      for i, x in ipairs(v) do c[i] = x end
      v = c
    end
    saved[name] = v
  end
  local function objective(v)
    self:set_vector(v)
    local ok, value, grad = pcall(self.mll_and_grad, self, {posterior = true})
    if not ok then
      if type(value) == "string" and value:find("lazytensor:", 1, true) then
        local g = {}
        for i = 1, #v do g[i] = 0 end
        return -math.huge, g
      end
      error(value, 0)
    end
    return value, grad
  end
  local ok, best, _, info = pcall(optim[method], objective, x0, {
    maximize = true, max_iter = opts.max_iter or 50, lr = opts.lr,
    callback = opts.callback and function(it, v) return opts.callback(it, v, self) end,
  })
  if not ok then
    -- the values as they were, exactly (e^{log θ} need not be θ)
    for name, v in pairs(saved) do ltkernel.set(self.kernel, name, v) end
    self.mode, self.mode_fp, self.start = saved_mode, saved_fp, saved_start
    error(best, 0)
  end
  self:set_vector(best)
  local mll, mode = self:mll()
  -- converged: L-BFGS met its test and the final mode is a mode (Newton
  -- converged there), without which log q and its gradient are not right
  return {mll = mll, log_posterior = self:log_posterior(), iterations = info.iterations,
          converged = info.converged and mode.converged, mode_converged = mode.converged,
          reason = info.reason}
end

------------------------------------------------------------ prediction --

--- Latent mean and variance at xstar (Algorithm 3.2): k*ᵀ∇log p(f̂) and
-- k** − ‖L⁻¹(W^½·k*)‖². With softmax (Algorithm 3.4): n*×C means and
-- variances, then per test point the C×C covariance of the classes'
-- latents (a Lua array of C×C tables).
function Laplace:predict(xstar)
  local star = h.test_points_tensor(xstar, self.d)
  local md = self:find_mode()
  local Kxs = K_of(self, nil, self.X, star) -- n×n*
  if self.classes then
    local kss = ltkernel.evaluator(self.kernel):diag(star):totable()
    return multiclass.predict(md, self.Y, Kxs, kss)
  end
  local mean = Kxs:t() * md.d1
  local V = lower_solve(md.L, lt.diag(md.sW) * Kxs)
  local prior = ltkernel.evaluator(self.kernel):diag(star)
  return mean, prior - V:cmul(V):sum(1)
end

--- The predictive distribution of y: for bernoulli P(y = 1) = E Φ(f)
-- (probit, exactly Φ(m/√(1 + v))) or E σ(f) (logit, by quadrature), and
-- its variance. With softmax: the n*×C class probabilities E softmax(f*)
-- by Monte Carlo under N(μ*, Σ*) (the C×C covariance kept) over the
-- likelihood's fixed base samples (softmax{samples, seed}), and p(1 − p).
function Laplace:predict_y(xstar)
  local mean, var, covs = self:predict(xstar)
  if self.classes then return multiclass.predict_y(mean, covs, self.likelihood.base_samples()) end
  return self.likelihood:predict_y(mean, var)
end

--- q(f(xstar)) as an lt.mvn (covariance K** − Vᵀ·V, V = L⁻¹W^½K(x, x*)).
-- With softmax: one lt.mvn of the n*·C latents stacked class by class
-- (f^1(x*), …, f^C(x*)), the classes correlated.
function Laplace:posterior(xstar)
  local star = h.test_points_tensor(xstar, self.d)
  local md = self:find_mode()
  local Kxs = K_of(self, nil, self.X, star)
  if self.classes then
    return multiclass.posterior(md, self.Y, Kxs, ltkernel.evaluator(self.kernel):matrix(star))
  end
  local V = lower_solve(md.L, lt.diag(md.sW) * Kxs)
  local Kss = ltkernel.evaluator(self.kernel):operator(star)
  return lt.mvn(Kxs:t() * md.d1, lt.psd(Kss - lt.lowrank(V:t():contiguous())))
end

return laplace
