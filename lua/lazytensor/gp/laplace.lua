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
-- With gp.likelihoods.softmax{classes = C}: C latent GPs (R&W §3.5,
-- Algorithms 3.3 and 3.4), the latents n×C matrices, sharing the kernel or
-- with kernels = {k_1, ..., k_C} one each (hyperparameters "c<c>_<name>");
-- the mode, log q, the same two-part gradient and the predictions are in
-- gp/laplace_softmax.lua. With softmax{classes = C, features = F} (mixing
-- weights W, learnt with the kernels: "mixing_weights" in parameters,
-- bounds and priors) F latent GPs and logits W·g: gp/laplace_mixing.lua.
local lt = require "lazytensor"
local likelihoods = require "lazytensor.gp.likelihoods"
local optim = require "lazytensor.optim"
local variational = require "lazytensor.gp.variational"
local hyper = require "lazytensor.gp.hyper"
local ltkernel = require "lazytensor.gp.ltkernel"
local multiclass = require "lazytensor.gp.laplace_softmax"
local mixed = require "lazytensor.gp.laplace_mixing"
local mixing = require "lazytensor.gp.mixing"
local kernels = require "lazytensor.gp.kernels"

local laplace = {}

local Laplace = {}
Laplace.__index = Laplace

local KEYS = {"x", "y", "kernel", "kernels", "likelihood", "jitter", "max_newton", "tol", "bounds",
              "priors"}

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

------------------------------------------------------------ kernels --
-- self.kernels: one entry {kernel, prefix = "", jitter} for the kernel
-- (binary models; multiclass ones sharing it), or one a class with prefix
-- "c<c>_" (kernels = {...}): the model's hyperparameter names are the
-- prefix and the kernel's own name (gp/ltkernel.lua's).

-- Every hyperparameter: {name (prefixed), inner (the kernel's name), entry, value, free}.
local function hypers(self)
  local out = {}
  for _, e in ipairs(self.kernels) do
    for _, hp in ipairs(ltkernel.hypers(e.kernel)) do
      out[#out + 1] = {name = e.prefix .. hp.name, inner = hp.name, entry = e, value = hp.value,
                       free = hp.free}
    end
  end
  return out
end

-- Stores a value under its (prefixed) name.
local function set_hyper(self, name, value)
  for _, hp in ipairs(hypers(self)) do
    if hp.name == name then return ltkernel.set(hp.entry.kernel, hp.inner, value) end
  end
  error("lazytensor: laplace: no kernel hyperparameter " .. tostring(name), 0)
end

-- An entry's kernel at the raw parameters logs (keys by the prefixed names;
-- nil: the kernel's values), gp/ltkernel.lua's evaluator under its own names.
local function evaluator(self, e, logs)
  if e.prefix == "" then return ltkernel.evaluator(e.kernel, logs, self.bounds) end
  local raw, bounds = logs and {}, {}
  for _, hp in ipairs(ltkernel.hypers(e.kernel)) do
    local full = e.prefix .. hp.name
    bounds[hp.name] = self.bounds[full]
    if logs then raw[hyper.key(bounds, hp.name)] = logs[hyper.key(self.bounds, full)] end
  end
  return ltkernel.evaluator(e.kernel, raw, bounds)
end

-- The kernel objects of kernels = {...}: C gp kernels sharing no leaf
-- (each class's hyperparameters are its own), checked against x.
local function check_class_kernels(spec, C, X)
  local ks = spec.kernels
  if spec.kernel ~= nil then
    fail("give kernel (one, shared by the classes) or kernels (one per class), not both")
  end
  if C == nil then
    fail("kernels (one per class) needs likelihood = gp.likelihoods.softmax{classes = C}; "
         .. "a binary or count model has one latent function: give kernel")
  end
  local count = 0
  if type(ks) == "table" and getmetatable(ks) == nil then
    for _ in pairs(ks) do count = count + 1 end
  end
  if count ~= C or #ks ~= C then
    fail("kernels must be a list of %d gp kernels (one per %s), got %s", C,
         spec.likelihood.mixing and "latent function: features = F" or "class",
         type(ks) == "table" and getmetatable(ks) == nil and (count .. " entries") or type(ks))
  end
  local owner = {}
  for c, k in ipairs(ks) do
    if getmetatable(k) ~= kernels.Kernel then fail("kernels[%d] must be a gp kernel", c) end
    local ok, err = pcall(variational.check_kernel, k, h)
    if not ok then fail("kernels[%d]: %s", c, tostring(err):gsub("^lazytensor: %a+: ", "")) end
    k:check_inputs(X:size(2))
    local top = k:max_dim()
    if top and top > X:size(2) then
      fail("kernels[%d] reads input dimension %d but x has %d", c, top, X:size(2))
    end
    for _, hp in ipairs(ltkernel.hypers(k)) do
      local first = owner[hp.node]
      if first and first ~= c then
        fail("kernels[%d] and kernels[%d] share a %s kernel object: give each class its own "
             .. "(their hyperparameters are trained apart)", first, c, hp.node.kind)
      end
      owner[hp.node] = c
    end
  end
  local out = {}
  for c, k in ipairs(ks) do out[c] = {kernel = k, prefix = "c" .. c .. "_"} end
  return out
end

-- bounds and priors over the per-class names: a name without a class
-- prefix is pointed at the prefixed ones.
local function parse_class_hyper(spec, entries, reals)
  local names = {}
  for _, hp in ipairs(hypers{kernels = entries}) do names[hp.name] = hp.value end
  for _, key in ipairs{"bounds", "priors"} do
    if type(spec[key]) == "table" then
      for name in pairs(spec[key]) do
        if names[name] == nil and names["c1_" .. tostring(name)] ~= nil then
          fail("%s.%s: with kernels = {...} each class's hyperparameters are named "
               .. "c<class>_<name> (c1_%s, c2_%s, ...)", key, name, name, name)
        end
      end
    end
  end
  return hyper.parse(fail, names, spec.bounds, spec.priors, nil, reals)
end

--- The model's constructor, given init.lua's helpers.
function laplace.constructor(helpers)
  h = helpers
  return function(spec)
    if type(spec) ~= "table" then h.fail("laplace expects a table") end
    h.options("laplace", spec, KEYS)
    local lik = spec.likelihood
    if spec.kernels == nil then variational.check_kernel(spec.kernel, helpers) end
    local softmax = getmetatable(lik) == likelihoods.Likelihood and lik.kind == "softmax"
    if getmetatable(lik) ~= likelihoods.Likelihood or not (lik.newton or softmax) then
      fail("likelihood must be gp.likelihoods.bernoulli{...}, poisson{} or softmax{classes = C}")
    end
    local X = lt.tensor(h.to_points(spec.x, "x"))
    ltkernel.check_inputs(X, fail, "x")
    local entries
    if spec.kernels ~= nil then
      entries = check_class_kernels(spec, softmax and lik.latents or nil, X)
    else
      spec.kernel:check_inputs(X:size(2)) -- ARD lengthscales: one per column read
      local top = spec.kernel:max_dim()
      if top and top > X:size(2) then
        fail("the kernel reads input dimension %d but x has %d", top, X:size(2))
      end
      entries = {{kernel = spec.kernel, prefix = ""}}
    end
    local y = lik:check_labels(spec.y, "laplace y")
    if y:size(1) ~= X:size(1) then
      fail("y has %d values for %d rows of x", y:size(1), X:size(1))
    end
    for _, e in ipairs(entries) do -- by default 10⁻⁸ times each kernel's variance
      e.jitter = spec.jitter or 1e-8 * ltkernel.evaluator(e.kernel):diag_value(e.kernel)
      if type(e.jitter) ~= "number" or not (e.jitter >= 0) then -- luacheck: ignore 581 (NaN)
        fail("jitter must be a non-negative number")
      end
    end
    local jitter = entries[1].jitter
    local max_newton, tol = spec.max_newton or 100, spec.tol or 1e-10
    if type(max_newton) ~= "number" or max_newton < 1 or max_newton % 1 ~= 0 then
      fail("max_newton must be a positive whole number, got %s", tostring(max_newton))
    end
    if type(tol) ~= "number" or not (tol > 0) then -- luacheck: ignore 581 (NaN)
      fail("tol must be a positive number, got %s", tostring(tol))
    end
    local bounds, prior_set
    local reals = softmax and mixing.reals(lik, {}) or nil -- W, with mixing weights
    if spec.kernels ~= nil then
      bounds, prior_set = parse_class_hyper(spec, entries, reals)
    else
      bounds, prior_set = variational.parse_hyper(spec, spec.kernel, nil, reals, fail)
    end
    return setmetatable({X = X, y = y, n = X:size(1), d = X:size(2), kernel = spec.kernel,
                         kernels = entries, per_class = spec.kernels ~= nil,
                         bounds = bounds, priors = prior_set,
                         likelihood = lik, jitter = jitter, max_newton = max_newton,
                         tol = tol, classes = softmax and lik.classes or nil,
                         latents = softmax and lik.latents or nil,
                         mixed = softmax and lik.mixing and
                                 mixed.constants(X:size(1), lik.classes, lik.latents) or nil,
                         Y = softmax and one_hot(y, lik.classes) or nil}, Laplace)
  end
end

------------------------------------------------------------ parameters --

--- The free kernel hyperparameters, unconstrained: {log_<name> = number
-- or 1-d tensor}, or raw_<name> for a bounded one (gp/hyper.lua).
function Laplace:parameters()
  local p = {}
  for _, hp in ipairs(hypers(self)) do
    if hp.free then
      local r = hyper.to_raw(self.bounds, hp.name, hp.value)
      p[hyper.key(self.bounds, hp.name)] = type(r) == "table" and lt.tensor(r) or r
    end
  end
  return mixing.add_parameters(self, p) -- softmax's W (mixing_weights), when learnt
end

-- The parameters as a flat array (names sorted; ARD entries in order).
local function names_of(p)
  local names = {}
  for name in pairs(p) do names[#names + 1] = name end
  table.sort(names)
  return names
end

-- A tensor's entries as a flat list (row by row).
local function flat(t)
  return t:contiguous():reshape(t:numel()):totable()
end

local function is_mixing_key(name)
  return name == mixing.KEYS[1] or name == mixing.KEYS[2]
end

function Laplace:get_vector()
  local p, v = self:parameters(), {}
  for _, name in ipairs(names_of(p)) do
    if lt.is_tensor(p[name]) then
      for _, x in ipairs(flat(p[name])) do v[#v + 1] = x end
    else
      v[#v + 1] = p[name]
    end
  end
  return v
end

function Laplace:set_vector(v)
  local p, off = self:parameters(), 0
  local count = #self:get_vector()
  if type(v) ~= "table" or #v ~= count then
    fail("set_vector needs a list of %d numbers (get_vector()'s layout), got %s", count,
         type(v) == "table" and #v .. " entries" or type(v))
  end
  for i = 1, count do
    if type(v[i]) ~= "number" then fail("set_vector: entry %d is not a number", i) end
  end
  -- W first, checked before anything changes
  local new_weights, at = nil, 0
  for _, name in ipairs(names_of(p)) do
    local size = lt.is_tensor(p[name]) and p[name]:numel() or 1
    if is_mixing_key(name) then -- W (C×F), row by row
      local C, F = p[name]:size(1), p[name]:size(2)
      local rows = {}
      for c = 1, C do
        rows[c] = {}
        for j = 1, F do rows[c][j] = v[at + (c - 1) * F + j] end
      end
      new_weights = mixing.from_parameters(self, {[name] = lt.tensor(rows)}, fail)
    end
    at = at + size
  end
  for _, name in ipairs(names_of(p)) do
    local key = name:sub(5)
    if is_mixing_key(name) then
      off = off + p[name]:numel()
    elseif lt.is_tensor(p[name]) then
      local l = {}
      for i = 1, p[name]:size(1) do l[i] = hyper.from_raw(self.bounds, key, v[off + i]) end
      off = off + #l
      set_hyper(self, key, l)
    else
      off = off + 1
      set_hyper(self, key, hyper.from_raw(self.bounds, key, v[off]))
    end
  end
  if new_weights then self.likelihood.weights = new_weights end
  self.mode = nil -- the cached f̂ stays as the next Newton start (self.start)
end

local function grad_vector(p, g)
  local out = {}
  for _, name in ipairs(names_of(p)) do
    if lt.is_tensor(g[name]) and g[name]:dim() > 0 then
      for _, x in ipairs(g[name]:contiguous():reshape(g[name]:numel()):totable()) do
        out[#out + 1] = x
      end
    else
      out[#out + 1] = type(g[name]) == "number" and g[name] or g[name]:item()
    end
  end
  return out
end

------------------------------------------------------------ the mode --

-- An entry's K(A, B) (dense), or K(X, X) + jitter·I when A is nil; logs:
-- followed raw hyperparameters (nil: the kernel's values).
local function entry_K(self, e, logs, A, B)
  local kern = evaluator(self, e, logs)
  if B then return kern:matrix(A, B) end
  return kern:matrix(A or self.X):add_diag(e.jitter)
end

-- The binary model's K (its one kernel), as entry_K.
local function K_of(self, logs, A, B)
  return entry_K(self, self.kernels[1], logs, A, B)
end

-- The multiclass blocks K_1..K_C (as entry_K): the shared kernel's one
-- matrix C times, or each class's own.
local function Ks_of(self, logs, A, B)
  local out = {}
  for c = 1, self.latents do
    local e = self.kernels[c]
    out[c] = e and entry_K(self, e, logs, A, B) or out[1]
  end
  return out
end

-- Per class (as Ks_of) the value fn(evaluator) at the kernel's values.
local function per_class(self, fn)
  local out = {}
  for c = 1, self.latents do
    local e = self.kernels[c]
    out[c] = e and fn(evaluator(self, e, nil)) or out[1]
  end
  return out
end

-- The kernels' values as one string (the mode's cache key).
local function fingerprint(self)
  local parts = {}
  for i, e in ipairs(self.kernels) do parts[i] = e.kernel:fingerprint() end
  if self.mixed then -- the mode moves with W too
    local w = {}
    for i, x in ipairs(flat(self.likelihood.weights)) do w[i] = string.format("%.17g", x) end
    parts[#parts + 1] = table.concat(w, ",")
  end
  return table.concat(parts, "|")
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
  local fp = fingerprint(self)
  if self.mode and self.mode_fp == fp then return self.mode end
  if self.mixed then
    local Ks = Ks_of(self)
    local md = mixed.find_mode(self.mixed, Ks, self.likelihood.weights, self.Y, self.start,
                               self.max_newton, self.tol)
    md.Ks = Ks
    self.mode, self.mode_fp, self.start = md, fp, md.A
    return md
  end
  if self.classes then
    local Ks = Ks_of(self)
    local md = multiclass.find_mode(Ks, self.Y, self.start, self.max_newton, self.tol)
    md.Ks, md.K = Ks, not self.per_class and Ks[1] or nil
    self.mode, self.mode_fp, self.start = md, fp, md.A
    return md
  end
  local K = K_of(self)
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
  local values = {}
  for _, e in ipairs(self.kernels) do
    local kern = evaluator(self, e, logs)
    for _, hp in ipairs(ltkernel.hypers(e.kernel)) do
      values[e.prefix .. hp.name] = kern:get(hp.name)
    end
  end
  if self.mixed then values.mixing_weights = mixing.weights_of(self, logs) end
  return hyper.log_prior(self.priors, function(name) return values[name] end)
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
  if self.mixed then return self:mixed_objective(md, opts) end
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
  if not opts or opts.implicit ~= false then b = multiclass.implicit_b(md, md.Ks) end
  local function f(logs)
    local value = multiclass.surrogate(Ks_of(self, logs), md, self.Y, b)
    if opts and opts.posterior then value = value + log_prior(self, logs) end
    return value
  end
  return f, self:parameters()
end

-- gradient_objective's surrogate with mixing weights (gp/laplace_mixing.lua),
-- a function of the kernels' hyperparameters and W.
function Laplace:mixed_objective(md, opts)
  local implicit
  if not opts or opts.implicit ~= false then
    local b, c = mixed.implicit(self.mixed, md, md.Ks, self.likelihood.weights)
    implicit = {b = b, c = c}
  end
  local function f(logs)
    local value = mixed.surrogate(self.mixed, Ks_of(self, logs), mixing.weights_of(self, logs),
                                  md, self.Y, implicit)
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
  local saved_weights = self.likelihood.weights
  local x0 = self:get_vector()
  local saved = {}
  for _, hp in ipairs(hypers(self)) do
    local name, v = hp.name, hp.value
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
    for name, v in pairs(saved) do set_hyper(self, name, v) end
    self.likelihood.weights = saved_weights
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
  if self.mixed then
    local kss = per_class(self, function(kern) return kern:diag(star):totable() end)
    return mixed.predict(self.mixed, md, Ks_of(self, nil, self.X, star), kss)
  end
  if self.classes then
    local kss = per_class(self, function(kern) return kern:diag(star):totable() end)
    return multiclass.predict(md, self.Y, Ks_of(self, nil, self.X, star), kss)
  end
  local Kxs = K_of(self, nil, self.X, star) -- n×n*
  local mean = Kxs:t() * md.d1
  local V = lower_solve(md.L, lt.diag(md.sW) * Kxs)
  local prior = evaluator(self, self.kernels[1]):diag(star)
  return mean, prior - V:cmul(V):sum(1)
end

--- The predictive distribution of y: for bernoulli P(y = 1) = E Φ(f)
-- (probit, exactly Φ(m/√(1 + v))) or E σ(f) (logit, by quadrature), and
-- its variance. With softmax: the n*×C class probabilities E softmax(f*)
-- under N(μ*, Σ*) (the C×C covariance kept), p(1 − p), and per point an
-- error estimate: by the quadrature of gp/softmax_integral.lua (opts: tol,
-- default 10⁻⁸, max_nodes, default 2·10⁵), or with opts.samples = S by
-- Monte Carlo over S fixed antithetic base samples (opts.seed, default 1;
-- the softmax likelihood's generator), the error its standard error.
function Laplace:predict_y(xstar, opts)
  if opts ~= nil and not self.classes then
    fail("predict_y's options (tol, max_nodes, samples, seed) are for softmax models")
  end
  opts = h.options("laplace predict_y", opts, {"tol", "max_nodes", "samples", "seed"})
  local mc = opts.samples ~= nil or opts.seed ~= nil
  if mc and (opts.tol ~= nil or opts.max_nodes ~= nil) then
    fail("predict_y: give samples (Monte Carlo) or tol / max_nodes (quadrature), not both")
  end
  local tol = opts.tol
  if tol ~= nil and (type(tol) ~= "number" or not (tol > 0)) then -- luacheck: ignore 581 (NaN)
    fail("predict_y: tol must be a positive number, got %s", tostring(opts.tol))
  end
  if opts.max_nodes ~= nil and (type(opts.max_nodes) ~= "number" or opts.max_nodes < 1) then
    fail("predict_y: max_nodes must be a number ≥ 1, got %s", tostring(opts.max_nodes))
  end
  local base
  if mc then -- the softmax likelihood's generator and checks
    base = likelihoods.softmax{classes = self.classes, samples = opts.samples or 64,
                               seed = opts.seed}.base_samples()
  end
  local mean, var, covs = self:predict(xstar)
  if self.mixed then mean, covs = mixed.logits(mean, covs, self.likelihood.weights) end
  if self.classes then
    return multiclass.predict_y(mean, covs, {base = base, tol = opts.tol,
                                             max_nodes = opts.max_nodes})
  end
  return self.likelihood:predict_y(mean, var)
end

--- q(f(xstar)) as an lt.mvn (covariance K** − Vᵀ·V, V = L⁻¹W^½K(x, x*)).
-- With softmax: one lt.mvn of the n*·C latents stacked class by class
-- (f^1(x*), …, f^C(x*)), the classes correlated.
function Laplace:posterior(xstar)
  local star = h.test_points_tensor(xstar, self.d)
  local md = self:find_mode()
  if self.mixed then
    local Kss = per_class(self, function(kern) return kern:matrix(star) end)
    return mixed.posterior(self.mixed, md, Ks_of(self, nil, self.X, star), Kss)
  end
  if self.classes then
    local Kss = per_class(self, function(kern) return kern:matrix(star) end)
    return multiclass.posterior(md, self.Y, Ks_of(self, nil, self.X, star), Kss)
  end
  local Kxs = K_of(self, nil, self.X, star)
  local V = lower_solve(md.L, lt.diag(md.sW) * Kxs)
  local Kss = evaluator(self, self.kernels[1]):operator(star)
  return lt.mvn(Kxs:t() * md.d1, lt.psd(Kss - lt.lowrank(V:t():contiguous())))
end

return laplace
