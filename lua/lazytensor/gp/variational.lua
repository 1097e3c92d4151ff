--- Sparse variational GPs (SVGP: Hensman et al. 2013, 2015; GPyTorch's
-- ApproximateGP with a VariationalStrategy and VariationalELBO).
--
--   local model = gp.variational{x = x, y = y, kernel = gp.kernels.rbf{},
--                                likelihood = gp.likelihoods.bernoulli{}, inducing = 50}
--   model:fit{lr = 0.05, epochs = 100, batch_size = 256}
--   local p = model:predict_y(xstar)     -- P(y = 1) for classification
--
-- m inducing points Z carry inducing values u = f(Z). With whiten = true
-- (the default) the variational distribution is over v = Lz⁻¹u (Kzz = Lz·Lzᵀ),
-- q(v) = N(μ, S), p(v) = N(0, I); otherwise over u itself, p(u) = N(0, Kzz).
-- S = L·Lᵀ with L lower triangular ("cholesky") or diagonal ("meanfield").
-- For rows x_i, A = Lz⁻¹·k(Z, x_i) gives q(f_i) = N(μ_i, σ_i²):
--   whitened:   μ_i = aᵢᵀμ,       σ_i² = k(x_i, x_i) − ‖aᵢ‖² + ‖Lᵀaᵢ‖²
--   unwhitened: bᵢ = Lz⁻ᵀaᵢ,      μ_i = bᵢᵀμ, σ_i² = k(x_i, x_i) − ‖aᵢ‖² + ‖Lᵀbᵢ‖²
-- and the evidence lower bound is
--   ELBO = num_data/|B| · Σ_{i ∈ B} E_{q(f_i)} log p(y_i | f_i) − KL(q ‖ p)
-- over a minibatch B of rows (all of them by default).
--
-- The whole bound is one Lua function of a parameter table written with
-- lazytensor operations — the kernel evaluated by lt.kernel with tensor
-- hyperparameters, Cholesky factors and triangular solves, the
-- likelihood's expected log-likelihood (gp/likelihoods.lua) — and every
-- gradient comes from lt.grad of it: the variational mean, L's lower
-- triangle (or diagonal), the inducing points (unless fixed), the kernel's
-- and the likelihood's hyperparameters (as logs, or through their bounds:
-- gp/hyper.lua) and a constant mean (the inducing points and the mean
-- through their bounds too when given).
local lt = require "lazytensor"
local autograd = require "lazytensor.autograd"
local kernels = require "lazytensor.gp.kernels"
local likelihoods = require "lazytensor.gp.likelihoods"
local hyper = require "lazytensor.gp.hyper"
local ltkernel = require "lazytensor.gp.ltkernel"
local mixing = require "lazytensor.gp.mixing"

local variational = {}

local sqrt = math.sqrt

local SVGP = {}
SVGP.__index = SVGP

-- model:elbo() over all rows evaluates k(Z, x) for block_entries / m rows at
-- a time (32 MB); a field so that the specs can check the sum over blocks.
variational.block_entries = 4194304

local KEYS = {"x", "y", "kernel", "likelihood", "inducing", "mean", "mean_value", "whiten",
              "distribution", "num_data", "fixed", "jitter", "data_jitter", "bounds", "priors"}

local h -- init.lua's helpers (fail, to_points, options, test_points_tensor)
local class_constants, start_classes, latent_classes -- below

local function fail(fmt, ...) h.fail("variational: " .. fmt, ...) end


------------------------------------------------------------ construction --

-- A gp kernel that gp/ltkernel.lua evaluates with followed hyperparameters.
local function check_kernel(kernel)
  if getmetatable(kernel) ~= kernels.Kernel then fail("kernel must be a gp kernel") end
  ltkernel.check(kernel, fail)
end

-- Evenly spread rows of X (m of them), as sgpr's initial inducing points.
local function spread_rows(X, m)
  local n = X:size(1)
  local Z = lt.zeros(m, X:size(2))
  for j = 1, m do Z[j] = X[math.floor((j - 0.5) * n / m) + 1] end
  return Z
end

local function inducing_points(spec, X)
  local n, d = X:size(1), X:size(2)
  local inducing = spec.inducing
  if inducing == nil then fail("needs inducing = m (a count) or inducing points") end
  if type(inducing) == "number" then
    if inducing ~= math.floor(inducing) or inducing < 1 or inducing > n then
      fail("inducing = %s must be a whole number from 1 to n = %d", tostring(inducing), n)
    end
    return spread_rows(X, inducing)
  end
  local Z = lt.tensor(h.to_points(inducing, "inducing"))
  if Z:size(2) ~= d then fail("inducing points have %d coordinates, x has %d", Z:size(2), d) end
  if Z:size(1) > n then fail("%d inducing points for n = %d rows (m > n)", Z:size(1), n) end
  return Z
end

-- Lower-triangular (with diagonal) 0/1 mask: L = raw ⊙ mask; with C > 1
-- classes, C of them side by side (m × Cm, as L is: see start_classes).
local function tril_mask(m, C)
  local M = lt.zeros(m, m * (C or 1))
  for c = 1, C or 1 do
    for i = 1, m do
      for j = 1, i do M:set(i, (c - 1) * m + j, 1) end
    end
  end
  return M
end

-- The constant mean: a number, or with C > 1 latent functions (softmax)
-- one constant per class (a Lua array of C numbers; a number given is
-- repeated), as GPyTorch's ConstantMean with batch_shape [C].
function class_constants(v, C)
  if C == 1 then
    if type(v) ~= "number" or v ~= v then fail("mean_value must be a number") end
    return v
  end
  if type(v) == "number" then v = lt.full({C}, v):totable() end
  if type(v) ~= "table" or #v ~= C then
    fail("mean_value must be a number or %d numbers (one per class)", C)
  end
  local out = {}
  for c = 1, C do
    if type(v[c]) ~= "number" or v[c] ~= v[c] then fail("mean_value[%d] must be a number", c) end
    out[c] = v[c]
  end
  return out
end

-- m×m blocks side by side: [B … B] (C of them).
local function side_by_side(B, C)
  local m = B:size(1)
  local out = lt.zeros(m, C * B:size(2))
  for c = 1, C do out:narrow(2, (c - 1) * B:size(2) + 1, B:size(2)):copy(B) end
  return out
end

-- C > 1 latent functions f_1..f_C (softmax), independent a priori, with the
-- same kernel and inducing points and one q(u_c) each (GPyTorch's
-- IndependentMultitaskVariationalStrategy): μ is m×C (column c: μ_c); L is
-- m×Cm, [L_1 … L_C] ("cholesky") or m×C, the diagonals ("meanfield"). q
-- starts at the prior, as for one latent.
function start_classes(self)
  local C, m = self.latents, self.m
  self.q_mean = lt.zeros(m, C)
  local prior = (not self.whiten) and self:prior_factor() or lt.eye(m)
  if self.distribution == "meanfield" then
    self.q_chol = side_by_side(prior:diagonal():reshape(m, 1), C)
  else
    self.q_chol = side_by_side(prior, C)
  end
  -- sums each class's m columns of T ⊙ T (Cm × C), and marks L's diagonals
  self.class_sum = lt.zeros(m * C, C)
  self.diag_mask = lt.zeros(m, m * C)
  for c = 1, C do
    for i = 1, m do
      self.class_sum:set((c - 1) * m + i, c, 1)
      self.diag_mask:set(i, (c - 1) * m + i, 1)
    end
  end
  return self
end

--- The model's constructor, given init.lua's helpers.
function variational.constructor(helpers)
  h = helpers
  return function(spec)
    if type(spec) ~= "table" then h.fail("variational expects a table") end
    h.options("variational", spec, KEYS)
    check_kernel(spec.kernel)
    local lik = spec.likelihood
    if getmetatable(lik) ~= likelihoods.Likelihood then
      fail("likelihood must be one of gp.likelihoods (gaussian, bernoulli, poisson, student_t, "
           .. "softmax)")
    end
    local X = lt.tensor(h.to_points(spec.x, "x"))
    ltkernel.check_inputs(X, fail, "x")
    spec.kernel:check_inputs(X:size(2)) -- ARD lengthscales: one per column read
    local top = spec.kernel:max_dim()
    if top and top > X:size(2) then
      fail("the kernel reads input dimension %d but x has %d", top, X:size(2))
    end
    local n = X:size(1)
    local y = lik:check_labels(spec.y, "variational y")
    if y:size(1) ~= n then fail("y has %d values for %d rows of x", y:size(1), n) end
    local whiten = spec.whiten
    if whiten == nil then whiten = true end
    if type(whiten) ~= "boolean" then fail("whiten must be true or false") end
    local dist = spec.distribution or "cholesky"
    if dist ~= "cholesky" and dist ~= "meanfield" then
      fail("distribution must be 'cholesky' or 'meanfield', got %s", tostring(dist))
    end
    local mean = spec.mean or "constant"
    if mean ~= "constant" and mean ~= "zero" then
      fail("mean must be 'constant' or 'zero', got %s", tostring(mean))
    end
    local num_data = spec.num_data or n
    if type(num_data) ~= "number" or num_data < 1 or num_data % 1 ~= 0 then
      fail("num_data must be a positive whole number, got %s", tostring(num_data))
    end
    local fixed = h.options("variational fixed", spec.fixed, {"inducing", "mean"})
    local Z = inducing_points(spec, X)
    local m = Z:size(1)
    -- relative to the prior variance k(x, x)
    local kv = ltkernel.evaluator(spec.kernel):diag_value(spec.kernel)
    local jitter = spec.jitter or 1e-6 * kv
    if type(jitter) ~= "number" or not (jitter >= 0) then -- luacheck: ignore 581 (NaN)
      fail("jitter must be a non-negative number")
    end
    local data_jitter = spec.data_jitter or 0
    if type(data_jitter) ~= "number" or not (data_jitter >= 0) -- luacheck: ignore 581 (NaN)
       or data_jitter == math.huge then
      fail("data_jitter must be a non-negative number")
    end
    local C = lik.latents or 1
    local mean_value = class_constants(mean == "zero" and 0 or (spec.mean_value or 0), C)
    local bounds, prior_set = variational.parse_hyper(spec, spec.kernel, lik, mixing.reals(lik, {
      inducing = {value = Z:contiguous():reshape(Z:numel()):totable(), shape = Z:shape(),
                  free = not fixed.inducing},
      mean = mean == "constant" and {value = mean_value, shape = C > 1 and {C} or {},
                                     free = not fixed.mean} or nil,
    }))
    local self = setmetatable({
      X = X, y = y, n = n, d = X:size(2), m = m, kernel = spec.kernel, likelihood = lik,
      bounds = bounds, priors = prior_set,
      whiten = whiten, distribution = dist, mean_kind = mean, mean_value = mean_value,
      num_data = num_data, jitter = jitter, data_jitter = data_jitter,
      fixed = {inducing = fixed.inducing and true or nil, mean = fixed.mean and true or nil},
      Z = Z, mask = tril_mask(m, C), latents = C,
    }, SVGP)
    if C > 1 then return start_classes(self) end
    -- q starts at the prior: μ = 0, S = I (whitened) or Kzz (unwhitened).
    self.q_mean = lt.zeros(m)
    if dist == "meanfield" then
      self.q_chol = whiten and lt.full({m}, 1) or self:prior_factor():diagonal()
    else
      self.q_chol = whiten and lt.eye(m) or self:prior_factor()
    end
    return self
  end
end

------------------------------------------------------------ parameters --

--- The parameter table the bound is a function of: mean (μ, m), chol (L's
-- m×m lower triangle, or its m-vector diagonal for "meanfield"), Z (unless
-- fixed; raw_Z, its r of gp/hyper.lua, with bounds.inducing), kernel =
-- {log_<name> = ...} and likelihood = {log_<name> = ...} for the free
-- hyperparameters (raw_<name> for bounded ones, gaussian noise by default:
-- gp/hyper.lua), constant (the mean, unless zero or fixed; raw_constant
-- with bounds.mean).
function SVGP:parameters()
  local p = {mean = self.q_mean:clone(), chol = self.q_chol:clone(), kernel = {}, likelihood = {}}
  if not self.fixed.inducing then
    if self.bounds.inducing then
      p.raw_Z = hyper.real_raw(self.bounds.inducing, self.Z)
    else
      p.Z = self.Z:clone()
    end
  end
  for _, hp in ipairs(ltkernel.hypers(self.kernel)) do
    if hp.free then
      local r = hyper.to_raw(self.bounds, hp.name, hp.value)
      p.kernel[hyper.key(self.bounds, hp.name)] = type(r) == "table" and lt.tensor(r) or r
    end
  end
  for _, name in ipairs(self.likelihood:free_names()) do
    p.likelihood[hyper.key(self.bounds, name)] =
      hyper.to_raw(self.bounds, name, self.likelihood.params[name])
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    local constant = self.latents > 1 and lt.tensor(self.mean_value) or self.mean_value
    if self.bounds.mean then
      p.raw_constant = hyper.real_raw(self.bounds.mean, constant)
    else
      p.constant = constant
    end
  end
  return mixing.add_parameters(self, p)
end

-- Z at p (followed inside lt.grad): p.Z, p.raw_Z through its bounds, or the model's.
local function inducing_of(self, p)
  if p.raw_Z ~= nil then return hyper.real_map(self.bounds.inducing, p.raw_Z) end
  return p.Z or self.Z
end

-- The constant mean at p: p.constant, p.raw_constant through its bounds,
-- or the model's (a number, or a Lua array of C with C > 1 latents).
local function constant_of(self, p)
  if p.raw_constant ~= nil then return hyper.real_map(self.bounds.mean, p.raw_constant) end
  return p.constant or self.mean_value
end

local function number_of(x)
  if type(x) == "number" then return x end
  return x:item()
end

-- The shapes of μ and L: {m} and {m, m} or {m}; {m, C} and {m, Cm} or {m, C}
-- with C > 1 latent functions.
local function q_shapes(self)
  local m, C = self.m, self.latents
  if C > 1 then
    return {m, C}, self.distribution == "meanfield" and {m, C} or {m, m * C}
  end
  return {m}, self.distribution == "meanfield" and {m} or {m, m}
end

local function same_shape(t, want)
  if t:dim() ~= #want then return false end
  for i, d in ipairs(want) do
    if t:size(i) ~= d then return false end
  end
  return true
end

--- Sets the model from a parameter table of parameters()'s form (numbers
-- or tensors), after checking it whole: a table that does not fit leaves
-- the model as it was.
function SVGP:set_parameters(p)
  if type(p) ~= "table" or not lt.is_tensor(p.mean) or not lt.is_tensor(p.chol) then
    fail("set_parameters expects a table of parameters() form")
  end
  local want_mean, want = q_shapes(self)
  if not same_shape(p.mean, want_mean) then
    fail("mean must be %s", table.concat(want_mean, "×"))
  end
  if not same_shape(p.chol, want) then fail("chol must be %s", table.concat(want, "×")) end
  for _, key in ipairs{"Z", "raw_Z"} do
    local Z = p[key]
    if Z ~= nil and (not lt.is_tensor(Z) or Z:dim() ~= 2 or Z:size(1) ~= self.m
                     or Z:size(2) ~= self.d) then
      fail("%s must be %d×%d", key, self.m, self.d)
    end
  end
  if p.raw_Z and not self.bounds.inducing then fail("raw_Z needs bounds.inducing (Z otherwise)") end
  if p.raw_constant ~= nil and not self.bounds.mean then
    fail("raw_constant needs bounds.mean (constant otherwise)")
  end
  local new_constant = p.constant
  if p.raw_constant ~= nil then
    new_constant = hyper.real_value(self.bounds.mean, p.raw_constant)
  end
  if new_constant ~= nil then
    if self.latents > 1 then
      local v = lt.is_tensor(new_constant) and new_constant:totable() or new_constant
      new_constant = class_constants(v, self.latents)
    else
      new_constant = number_of(new_constant)
    end
  end
  local new_weights = mixing.from_parameters(self, p, fail) -- softmax's W, checked
  self.q_mean = p.mean:clone():contiguous()
  self.q_chol = p.chol:clone():contiguous()
  if self.distribution == "cholesky" then self.q_chol = self.q_chol:cmul(self.mask) end
  if new_weights then self.likelihood.weights = new_weights end
  if p.Z then self.Z = p.Z:clone():contiguous() end
  if p.raw_Z then self.Z = hyper.real_value(self.bounds.inducing, p.raw_Z):contiguous() end
  -- keys "log_<name>" or "raw_<name>" (gp/hyper.lua)
  for key, v in pairs(p.kernel or {}) do
    ltkernel.set(self.kernel, key:sub(5), hyper.value_of(self.bounds, key:sub(5), v))
  end
  for key, v in pairs(p.likelihood or {}) do
    self.likelihood.params[key:sub(5)] = hyper.value_of(self.bounds, key:sub(5), v)
  end
  if new_constant ~= nil then self.mean_value = new_constant end
end

--- Sets q: mean μ (m values) and L (m×m lower triangular; m values of the
-- diagonal for "meanfield"), S = L·Lᵀ — in whitened coordinates when whiten.
function SVGP:set_variational(mean, chol)
  local p = self:parameters()
  p.mean, p.chol = lt.tensor(mean), lt.tensor(chol)
  self:set_parameters(p)
end

------------------------------------------------------------ the bound --

-- The kernel at p's hyperparameters (followed), or at its own values.
local function kernel_at(self, p)
  return ltkernel.evaluator(self.kernel, p and p.kernel, self.bounds)
end

local function likelihood_theta(self, p)
  local theta = self.likelihood:theta()
  for key, v in pairs(p and p.likelihood or {}) do
    theta[key:sub(5)] = hyper.from_raw(self.bounds, key:sub(5), v)
  end
  return mixing.theta(self, p, theta)
end

local function lower_solve(L, B) return lt.triangular(L, "lower"):solve(B) end
local function upper_solve(L, B) return lt.triangular(L:t():contiguous(), "upper"):solve(B) end

-- Lz with Kzz + jitter·I = Lz·Lzᵀ.
local function inducing_factor(self, Z, kern)
  local Kzz = kern:matrix(Z):add_diag(self.jitter)
  return lt.psd(Kzz):cholesky():dense()
end

--- The prior's factor Lz (m×m) at the current hyperparameters.
function SVGP:prior_factor()
  return inducing_factor(self, self.Z, kernel_at(self))
end

-- L (m×m lower triangular) from p.chol.
local function chol_of(self, chol)
  if self.distribution == "meanfield" then return lt.diag(chol):dense() end
  return chol:cmul(self.mask)
end

-- L with S = L·Lᵀ from a symmetric S (natural gradients parameterise q by S).
local function factor_S(S)
  return lt.psd((S + S:t()) * 0.5):cholesky():dense()
end

-- What q(f) at the rows Xr is made of (one latent function): the kernel
-- at p, Lz, A = Lz⁻¹·k(Z, Xr) (m×b), proj (A whitened, Kzz⁻¹·k(Z, Xr)
-- otherwise) and L.
local function projection(self, p, Xr)
  local kern = kernel_at(self, p)
  local Z = inducing_of(self, p)
  local Lz = inducing_factor(self, Z, kern)
  local A = lower_solve(Lz, kern:matrix(Z, Xr)) -- m×b
  local L = p.S and factor_S(p.S) or chol_of(self, p.chol)
  local proj = self.whiten and A or upper_solve(Lz, A) -- aᵢ or bᵢ = Kzz⁻¹k(Z, xᵢ)
  return {kern = kern, Lz = Lz, A = A, L = L, proj = proj}
end

-- Lᵀ·proj, row i of its transpose Lᵀ·projᵢ: a triangular product for a
-- Cholesky L (half a dense product's work, both ways).
local function spread_of(self, q)
  return (self.distribution == "cholesky" and lt.triangular(q.L, "lower") or q.L):t() * q.proj
end

-- The latent means at the rows: projᵀ·μ (+ the constant mean).
local function latent_mean(self, p, q)
  local mean = q.proj:t() * p.mean
  if self.mean_kind == "constant" then mean = mean + constant_of(self, p) end
  return mean
end

-- k(x, x) at the rows (+ GPyTorch's jitter when asked).
local function prior_variance(self, q, Xr) return q.kern:diag(Xr) + self.data_jitter end

-- Everything q(f) at the rows Xr needs from p: the latent means and
-- variances (1-d tensors), and the pieces for the KL term.
local function latent(self, p, Xr)
  if self.latents > 1 then return latent_classes(self, p, Xr) end
  local q = projection(self, p, Xr)
  local T = spread_of(self, q)
  local A = q.A
  local var = prior_variance(self, q, Xr) - A:cmul(A):sum(1) + T:cmul(T):sum(1)
  return latent_mean(self, p, q), var, q
end

-- latent's variances summed over the rows, Σᵢ σᵢ² = Σᵢ k(xᵢ, xᵢ) − ‖A‖²_F +
-- ‖Lᵀ·proj‖²_F, from dot products: no m×b squares, no column sums, and a
-- backward pass of two scalings each (one latent function).
local function latent_total(self, p, Xr)
  local q = projection(self, p, Xr)
  local spread
  if self.distribution == "meanfield" and not p.S then -- L = diag(l): Σₖ lₖ²‖projₖ‖²
    spread = q.proj:cmul(q.proj):sum(2):dot(p.chol:cmul(p.chol))
  else
    local T = spread_of(self, q)
    spread = T:dot(T)
  end
  local total = prior_variance(self, q, Xr):sum() - q.A:dot(q.A) + spread
  return latent_mean(self, p, q), total, q
end

-- latent for C > 1 latent functions: means and variances as b×C matrices,
-- column c from q(u_c) = N(μ_c, L_c·L_cᵀ) with the shared A (one
-- factorisation of Kzz for every class): with T = projᵀ·[L_1 … L_C] (b×Cm),
-- var_c = k(x, x) − ‖aᵢ‖² + Σ over class c's columns of T ⊙ T.
function latent_classes(self, p, Xr)
  if p.S then fail("natural gradients are not supported with several latent functions") end
  local kern = kernel_at(self, p)
  local Z = inducing_of(self, p)
  local Lz = inducing_factor(self, Z, kern)
  local A = lower_solve(Lz, kern:matrix(Z, Xr)) -- m×b
  local proj = self.whiten and A or upper_solve(Lz, A)
  local b = Xr:size(1)
  local mean = proj:t() * p.mean -- b×C
  if self.mean_kind == "constant" then
    local constant = constant_of(self, p)
    if type(constant) == "table" then constant = lt.tensor(constant) end
    mean = mean + constant:reshape(1, self.latents)
  end
  local spread
  if self.distribution == "meanfield" then
    spread = proj:cmul(proj):t() * p.chol:cmul(p.chol)
  else
    local T = proj:t() * p.chol:cmul(self.mask)
    spread = T:cmul(T) * self.class_sum
  end
  local base = kern:diag(Xr) + self.data_jitter - A:cmul(A):sum(1)
  return mean, spread + base:reshape(b, 1), {Lz = Lz}
end

-- KL(q ‖ p) summed over C > 1 classes: whitened ½(Σ_c tr S_c + ‖μ‖²_F − Cm −
-- Σ_c log|S_c|); unwhitened ½(Σ_c ‖Lz⁻¹L_c‖² + ‖Lz⁻¹μ‖²_F − Cm + C·log|Kzz| −
-- Σ_c log|S_c|).
local function kl_classes(self, p, parts)
  local C, m = self.latents, self.m
  local meanfield = self.distribution == "meanfield"
  local L = meanfield and p.chol or p.chol:cmul(self.mask)
  local diagonals = meanfield and L or L:cmul(self.diag_mask) + (-self.diag_mask + 1)
  local logdet_S = diagonals:abs():log():sum() * 2
  if self.whiten then
    return (L:cmul(L):sum() + p.mean:cmul(p.mean):sum() - C * m - logdet_S) * 0.5
  end
  local Lz = parts.Lz
  local trace
  if meanfield then
    local inv = lower_solve(Lz, lt.eye(m))
    trace = inv:cmul(inv):sum(1):dot(L:cmul(L):sum(2))
  else
    local W = lower_solve(Lz, L)
    trace = W:cmul(W):sum()
  end
  local a = lower_solve(Lz, p.mean)
  local logdet_K = Lz:diagonal():log():sum() * 2
  return (trace + a:cmul(a):sum() - C * m + logdet_K * C - logdet_S) * 0.5
end

-- KL(q ‖ p): whitened ½(tr S + μᵀμ − m − log|S|); unwhitened, with
-- W = Lz⁻¹L and a = Lz⁻¹μ, ½(‖W‖² + ‖a‖² − m + log|Kzz| − log|S|).
local function kl(self, p, parts)
  if self.latents > 1 then return kl_classes(self, p, parts) end
  local L, m = parts.L, self.m
  local logdet_S = L:diagonal():abs():log():sum() * 2
  if self.whiten then
    return (L:dot(L) + p.mean:dot(p.mean) - m - logdet_S) * 0.5
  end
  local W = lower_solve(parts.Lz, L)
  local a = lower_solve(parts.Lz, p.mean)
  local logdet_K = parts.Lz:diagonal():log():sum() * 2
  return (W:cmul(W):sum() + a:dot(a) - m + logdet_K - logdet_S) * 0.5
end

-- Σ over the rows Xr of E_q log p(yᵢ | fᵢ) at p, and the parts kl needs.
-- A Gaussian likelihood's is linear in the variances, E log N(y | f, σ²) =
-- log N(y | μ, σ²) − σ_f²/(2σ²), so its sum needs only their total.
local function expected_sum(self, p, Xr, yr)
  local theta, lik = likelihood_theta(self, p), self.likelihood
  if self.latents == 1 and lik.kind == "gaussian" then
    local mean, total, parts = latent_total(self, p, Xr)
    return lik:log_prob(yr, mean, theta):sum() - total * (0.5 / theta.noise), parts
  end
  local mean, var, parts = latent(self, p, Xr)
  return lik:expected_log_prob(yr, mean, var, theta):sum(), parts
end

-- X and y as flat Lua arrays, made once (a minibatch is gathered from them
-- each step: cheaper than a tensor row at a time).
local function flat_data(self)
  if not self.flat_x then
    local flat, d = {}, self.d
    for i, row in ipairs(self.X:totable()) do
      for j = 1, d do flat[(i - 1) * d + j] = row[j] end
    end
    self.flat_x, self.flat_y = flat, self.y:totable()
  end
  return self.flat_x, self.flat_y
end

-- Rows idx (a Lua array of 1..n, checked) of X and y.
local function rows(self, idx)
  if idx == nil then return self.X, self.y, self.n end
  if lt.is_tensor(idx) then idx = idx:totable() end
  if type(idx) ~= "table" or #idx == 0 then fail("idx must be a non-empty list of rows") end
  local fx, fy = flat_data(self)
  local d, xs, ys = self.d, {}, {}
  for j, i in ipairs(idx) do
    if type(i) ~= "number" or i % 1 ~= 0 or i < 1 or i > self.n then
      fail("idx[%d] = %s is not a row from 1 to %d", j, tostring(i), self.n)
    end
    local at, to = (i - 1) * d, (j - 1) * d
    for k = 1, d do xs[to + k] = fx[at + k] end
    ys[j] = fy[i]
  end
  return lt.tensor(xs):reshape(#idx, d), lt.tensor(ys), #idx
end

-- Σ log prior of the hyperparameters at p (followed where free): the
-- kernel's, the likelihood's, "inducing" (Z) and "mean" (the constant).
local function log_prior(self, p)
  if next(self.priors) == nil then return 0 end
  local kern, theta = kernel_at(self, p), likelihood_theta(self, p)
  return hyper.log_prior(self.priors, function(name)
    if name == "inducing" then return inducing_of(self, p) end
    if name == "mean" then return constant_of(self, p) end
    local v = kern:get(name)
    if v ~= nil then return v end
    return theta[name]
  end)
end

-- objective's f alone (fit's steps need no copy of the parameters).
local function bound_function(self, idx, opts)
  local Xr, yr, b = rows(self, idx)
  local scale = self.num_data / b
  local with_prior = opts and opts.posterior
  local function f(p)
    local ell, parts = expected_sum(self, p, Xr, yr)
    local value = ell * scale - kl(self, p, parts)
    if with_prior then value = value + log_prior(self, p) end
    return value
  end
  return f
end

--- The bound as a function of a parameter table (parameters()'s form) and
-- the rows idx (nil: all of them): f, for lt.grad, lt.gradcheck or
-- autograd.evaluate, and the current parameters p0. opts.posterior = true
-- adds the priors' log densities (the log posterior's bound).
function SVGP:objective(idx, opts)
  return bound_function(self, idx, opts), self:parameters()
end

--- The ELBO plus the priors' log densities (from the rows idx when given).
function SVGP:log_posterior(idx)
  local p = self:parameters()
  return self:elbo(idx) + autograd.evaluate(function(q) return log_prior(self, q) end, p)
end

--- The evidence lower bound (a number), from the rows idx when given
-- (scaled by num_data/|idx|), from every row otherwise.
function SVGP:elbo(idx)
  if idx ~= nil or self.n * self.m <= variational.block_entries then
    local f, p = self:objective(idx)
    return autograd.evaluate(f, p)
  end
  -- All rows, a block at a time (k(Z, x) of every row at once would be m×n).
  local p = self:parameters()
  local rows_per = math.max(1, math.floor(variational.block_entries / self.m))
  local total = 0
  for first = 1, self.n, rows_per do
    local len = math.min(rows_per, self.n - first + 1)
    local Xr, yr = self.X:narrow(1, first, len), self.y:narrow(1, first, len)
    total = total + expected_sum(self, p, Xr, yr)
    -- the block's m×rows temporaries hold C memory Lua's collector does not
    -- count: at n = 10⁶, m = 500 they reached 24 GB before it ran
    collectgarbage()
  end
  local _, _, parts = latent(self, p, self.X:narrow(1, 1, 1))
  return total * (self.num_data / self.n) - kl(self, p, parts)
end

--- The bound and its gradient (a table of parameters()'s form), by lt.grad.
function SVGP:elbo_and_grad(idx)
  local f, p = self:objective(idx)
  local grads, value = lt.grad(f)(p)
  return value, grads
end

------------------------------------------------------------ fitting --

-- The leaves of a parameter table (parameters()'s form) in a fixed order:
-- {group, name} with group nil for the top-level entries (mean, chol, Z,
-- constant). Adam moves each leaf as it is, a number or a tensor: L's upper
-- triangle has a zero gradient (the bound reads L ⊙ mask), so it stays 0.
local function leaves(p)
  local out = {}
  for _, name in ipairs{"mean", "chol", "Z", "raw_Z", "constant", "raw_constant",
                        mixing.KEYS[1], mixing.KEYS[2]} do
    if p[name] ~= nil then out[#out + 1] = {nil, name} end
  end
  for _, group in ipairs{"kernel", "likelihood"} do
    local names = {}
    for name in pairs(p[group] or {}) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do out[#out + 1] = {group, name} end
  end
  return out
end

local function leaf_of(p, leaf)
  if leaf[1] then return p[leaf[1]] and p[leaf[1]][leaf[2]] end
  return p[leaf[2]]
end

-- A parameter table from leaf values (a list in leaves' order).
local function table_of(list, values)
  local p = {kernel = {}, likelihood = {}}
  for k, leaf in ipairs(list) do
    if leaf[1] then p[leaf[1]][leaf[2]] = values[k] else p[leaf[2]] = values[k] end
  end
  return p
end

-- A portable pseudo-random stream (the same on every Lua): an LCG mod 2³¹.
local function stream(seed)
  local s = seed % 2147483648
  return function()
    -- 1103515245 = 16838·2¹⁶ + 20077: every partial product stays below 2⁴⁸,
    -- exact in doubles (Lua 5.1, LuaJIT) as in 5.3's integers
    s = ((16838 * s) % 2147483648 * 65536 + 20077 * s + 12345) % 2147483648
    return s / 2147483648
  end
end

local function shuffled(n, rnd)
  local perm = {}
  for i = 1, n do perm[i] = i end
  for i = n, 2, -1 do
    local j = math.floor(rnd() * i) + 1
    perm[i], perm[j] = perm[j], perm[i]
  end
  return perm
end

local function finite(v) return v == v and v ~= math.huge and v ~= -math.huge end

-- Adam's elementwise arithmetic on a leaf, a number or a dense tensor.
local function zero_like(v) return type(v) == "number" and 0 or lt.full(v:shape(), 0) end
local function square(v) return type(v) == "number" and v * v or v:cmul(v) end
local function root(v) return type(v) == "number" and sqrt(v) or v:sqrt() end
local function ratio(a, b) return type(a) == "number" and a / b or a:cdiv(b) end
-- Σv is NaN or ∞ when an entry is
local function all_finite(v) return finite(type(v) == "number" and v or v:sum()) end

-- The model's state as it is (values, not raw parameters: restoring them
-- is exact, where e^{log θ} need not be θ).
local function copy_value(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for i, x in ipairs(v) do out[i] = x end
  return out
end

local function snapshot(self)
  local kernel = {}
  for name, v in pairs(ltkernel.values(self.kernel)) do kernel[name] = copy_value(v) end
  local lik = {}
  for name, v in pairs(self.likelihood.params) do lik[name] = v end
  return {q_mean = self.q_mean:clone(), q_chol = self.q_chol:clone(), Z = self.Z:clone(),
          mean_value = self.mean_value, kernel = kernel, likelihood = lik,
          weights = self.likelihood.weights}
end

local function restore(self, snap)
  self.q_mean, self.q_chol, self.Z = snap.q_mean, snap.q_chol, snap.Z
  self.mean_value = snap.mean_value
  for name, v in pairs(snap.kernel) do ltkernel.set(self.kernel, name, v) end
  for name, v in pairs(snap.likelihood) do self.likelihood.params[name] = v end
  self.likelihood.weights = snap.weights
end

-- One natural-gradient step on q (Hensman et al. 2013; Salimbeni et al.
-- 2018): with natural parameters θ₁ = S⁻¹μ, θ₂ = −½S⁻¹ and expectation
-- parameters η₁ = μ, η₂ = S + μμᵀ, the natural gradient is ∂F/∂η:
-- ∂F/∂η₁ = ∂F/∂μ − 2(∂F/∂S)μ, ∂F/∂η₂ = ∂F/∂S (∂F/∂μ and ∂F/∂S by lt.grad of
-- the bound with q given as (μ, S)), and θ ← θ + ρ·∂F/∂η. For a Gaussian
-- likelihood on all rows, ρ = 1 lands on the optimal q. A step whose new
-- precision is not positive definite is halved.
local function natural_step(self, f, rho)
  local m = self.m
  local mu = self.q_mean
  local L = chol_of(self, self.q_chol)
  local S = L * L:t()
  local base = self:parameters()
  local grads = lt.grad(function(q)
    base.mean, base.chol, base.S = q.mean, nil, q.S
    return f(base)
  end)({mean = mu, S = S})
  local Gm, GS = grads.mean, (grads.S + grads.S:t()) * 0.5
  local Linv = lower_solve(L, lt.eye(m))
  local Sinv = Linv:t() * Linv
  local theta1 = Sinv * mu + (Gm - GS * mu * 2) * rho
  for _ = 1, 30 do
    local precision = Sinv - GS * (2 * rho) -- −2θ₂
    local ok, Lp = pcall(function()
      return lt.psd((precision + precision:t()) * 0.5):cholesky():dense()
    end)
    if ok then
      local Lpinv = lower_solve(Lp, lt.eye(m))
      local Snew = Lpinv:t() * Lpinv
      self.q_mean = Snew * theta1
      self.q_chol = factor_S(Snew)
      return
    end
    rho = rho / 2
    theta1 = Sinv * mu + (Gm - GS * mu * 2) * rho
  end
  fail("fit: no natural-gradient step keeps S positive definite")
end

--- Maximises the ELBO by minibatch Adam (Kingma & Ba): each epoch visits
-- the rows in a fresh random order, batch_size rows a step, every gradient
-- from lt.grad. opts: method ("adam"), lr (0.01), epochs (100), batch_size
-- (n: full batch), seed (1), beta1, beta2, eps, callback(epoch, elbo
-- estimate (mean over the epoch's batches), model) — returning true stops.
-- Returns {elbo = the full-data ELBO at the end, epochs, steps}. The
-- iterate is the last one (the estimates of different batches are not
-- comparable). A step whose bound or gradient is not finite is not taken:
-- the learning rate halves and the batch is tried again.
function SVGP:fit(opts)
  opts = h.options("variational fit", opts,
                   {"method", "lr", "epochs", "batch_size", "seed", "beta1", "beta2", "eps",
                    "callback", "natural_gradient", "natural_lr"})
  if opts.method ~= nil and opts.method ~= "adam" then
    fail("fit: method must be 'adam', got %s", tostring(opts.method))
  end
  local natural = opts.natural_gradient and true or false
  if natural and self.latents > 1 then
    fail("fit: natural gradients are not supported with several latent functions (softmax)")
  end
  if natural and self.distribution ~= "cholesky" then
    fail("fit: natural gradients need distribution = 'cholesky'")
  end
  local rho = opts.natural_lr or 0.1
  if type(rho) ~= "number" or not (rho > 0 and rho <= 1) then -- luacheck: ignore 581
    fail("fit: natural_lr must be a number in (0, 1], got %s", tostring(rho))
  end
  local batch = opts.batch_size or self.n
  if type(batch) ~= "number" or batch % 1 ~= 0 or batch < 1 or batch > self.n then
    fail("fit: batch_size must be a whole number from 1 to n = %d, got %s", self.n, tostring(batch))
  end
  local epochs = opts.epochs or 100
  if type(epochs) ~= "number" or epochs % 1 ~= 0 or epochs < 0 then
    fail("fit: epochs must be a non-negative whole number, got %s", tostring(epochs))
  end
  local lr = opts.lr or 0.01
  if type(lr) ~= "number" or not (lr > 0) or lr == math.huge then -- luacheck: ignore 581
    fail("fit: lr must be a positive number, got %s", tostring(lr))
  end
  local b1, b2, eps = opts.beta1 or 0.9, opts.beta2 or 0.999, opts.eps or 1e-8
  local seed = opts.seed or 1
  if type(seed) ~= "number" or seed % 1 ~= 0 or seed < 0 then
    fail("fit: seed must be a non-negative whole number, got %s", tostring(seed))
  end
  local rnd = stream(seed)
  -- with natural gradients Adam moves the rest (hyperparameters, Z, mean)
  local function adam_parameters()
    local p = self:parameters()
    if natural then p.mean, p.chol = nil, nil end
    return p
  end
  local start_p = adam_parameters()
  local list = leaves(start_p)
  local x = {} -- the iterate: one number or tensor a leaf
  for k, leaf in ipairs(list) do x[k] = leaf_of(start_p, leaf) end
  local prev = nil -- x before the last step (to halve it)
  local mom, vel = {}, {}
  for k, v in ipairs(x) do mom[k], vel[k] = zero_like(v), zero_like(v) end
  local t, steps, stopped = 0, 0, false
  -- One Adam step (ascent) on x from lt.grad of f; returns the bound's value.
  -- A bound or gradient that is not finite halves the last step and the rate.
  local function adam_step(f)
    if #x == 0 then return autograd.evaluate(f, table_of(list, x)) end -- nothing to move
    local tries = 0
    while true do
      local grads, value = lt.grad(f)(table_of(list, x))
      local g = {}
      local good = finite(value)
      for k, leaf in ipairs(list) do
        g[k] = leaf_of(grads, leaf)
        if type(x[k]) == "number" then g[k] = number_of(g[k]) end
        good = good and all_finite(g[k])
      end
      if good then
        t = t + 1
        prev = x
        x = {}
        local c1, c2 = 1 - b1 ^ t, 1 - b2 ^ t
        for k = 1, #list do
          mom[k] = mom[k] * b1 + g[k] * (1 - b1)
          vel[k] = vel[k] * b2 + square(g[k]) * (1 - b2)
          x[k] = prev[k] + ratio(mom[k] * (lr / c1), root(vel[k] * (1 / c2)) + eps)
        end
        return value
      end
      tries = tries + 1
      if prev == nil or tries > 30 then
        fail("fit: the bound or its gradient is not finite at the current parameters")
      end
      for k = 1, #list do x[k] = prev[k] + (x[k] - prev[k]) * 0.5 end
      lr = lr / 2
    end
  end
  local start = snapshot(self)
  local ok, err = pcall(function()
    for epoch = 1, epochs do
      local perm, total, count = shuffled(self.n, rnd), 0, 0
      for first = 1, self.n, batch do
        local idx = {}
        for i = first, math.min(first + batch - 1, self.n) do idx[#idx + 1] = perm[i] end
        local f = bound_function(self, idx, {posterior = true})
        if natural then
          natural_step(self, f, rho)
          local full = f
          -- Adam's objective: q as it is now, a constant
          f = function(p)
            p.mean, p.chol = self.q_mean, self.q_chol
            return full(p)
          end
        end
        total, count = total + adam_step(f), count + 1
        steps = steps + 1
        -- a tensor's C memory is invisible to Lua's collector: without this
        -- the steps' tapes pile up, and fresh pages cost more than the step
        collectgarbage()
        local p = table_of(list, x)
        if natural then p.mean, p.chol = self.q_mean, self.q_chol end
        self:set_parameters(p)
      end
      if opts.callback and opts.callback(epoch, total / count, self) == true then
        stopped = true
        break
      end
    end
  end)
  if not ok then
    restore(self, start) -- a failed fit leaves the model as it was, bit for bit
    error(err, 0)
  end
  return {elbo = self:elbo(), log_posterior = self:log_posterior(), epochs = epochs,
          steps = steps, stopped = stopped, lr = lr}
end

------------------------------------------------------------ prediction --

--- Mean and variance of the latent f at xstar under q (1-d tensors; with
-- C > 1 latent functions, softmax, b×C matrices, column c for class c):
-- one O(m³) factorisation, then O(m²) a point (and class).
function SVGP:predict(xstar)
  local star = h.test_points_tensor(xstar, self.d)
  local mean, var = latent(self, self:parameters(), star)
  return mean, var
end

--- The predictive distribution of y at xstar: mean (for bernoulli, P(y = 1);
-- for softmax the b×C class probabilities) and variance, from the
-- likelihood's predict_y at q(f).
function SVGP:predict_y(xstar)
  local mean, var = self:predict(xstar)
  return self.likelihood:predict_y(mean, var)
end

-- K** plus data_jitter·I (when data_jitter > 0), lazy.
local function jittered(self, Kss)
  if self.data_jitter == 0 then return Kss end
  return Kss + lt.diag(lt.full({Kss:size(1)}, self.data_jitter))
end

--- q(f(xstar)) as an lt.mvn: covariance K** − AᵀA + TᵀT (A = Lz⁻¹Kz*,
-- T = Lᵀ·A whitened, Lᵀ·Kzz⁻¹Kz* otherwise), a lazy kernel minus and plus
-- rank-m terms.
function SVGP:posterior(xstar)
  local star = h.test_points_tensor(xstar, self.d)
  if self.latents > 1 then return self:class_posteriors(star) end
  local p = self:parameters()
  local mean = latent(self, p, star)
  local kern = kernel_at(self)
  local Lz = inducing_factor(self, self.Z, kern)
  local A = lower_solve(Lz, kern:matrix(self.Z, star))
  local proj = self.whiten and A or upper_solve(Lz, A)
  local T = chol_of(self, p.chol):t() * proj
  local Kss = jittered(self, kern:operator(star))
  return lt.mvn(mean, lt.psd(Kss - lt.lowrank(A:t():contiguous())
                             + lt.lowrank(T:t():contiguous())))
end

-- Class c's μ_c (m) and L_c (m×m) with C > 1 latent functions.
local function class_q(self, c)
  local m = self.m
  local mean = self.q_mean:narrow(2, c, 1):contiguous():reshape(m)
  if self.distribution == "meanfield" then
    return mean, lt.diag(self.q_chol:narrow(2, c, 1):contiguous():reshape(m)):dense()
  end
  return mean, self.q_chol:narrow(2, (c - 1) * m + 1, m):contiguous()
end

-- posterior with C > 1 latent functions: a Lua array of C lt.mvn, one per
-- class (the latents are independent under q).
function SVGP:class_posteriors(star)
  local mean = latent(self, self:parameters(), star)
  local kern = kernel_at(self)
  local Lz = inducing_factor(self, self.Z, kern)
  local A = lower_solve(Lz, kern:matrix(self.Z, star))
  local proj = self.whiten and A or upper_solve(Lz, A)
  local out = {}
  for c = 1, self.latents do
    local _, L = class_q(self, c)
    local T = L:t() * proj
    local Kss = jittered(self, kern:operator(star))
    out[c] = lt.mvn(mean:narrow(2, c, 1):contiguous():reshape(star:size(1)),
                    lt.psd(Kss - lt.lowrank(A:t():contiguous()) + lt.lowrank(T:t():contiguous())))
  end
  return out
end

--- q(u) over the inducing values u = f(Z) as an lt.mvn: N(μ, L·Lᵀ)
-- unwhitened; N(Lz·μ, Lz·L·Lᵀ·Lzᵀ) whitened (u = Lz·v). With C > 1 latent
-- functions (softmax): a Lua array of C of them, q(u_c) for class c.
function SVGP:variational_distribution()
  if self.latents > 1 then
    local out = {}
    local Lz = self.whiten and self:prior_factor()
    for c = 1, self.latents do
      local mean, L = class_q(self, c)
      if Lz then L, mean = Lz * L, Lz * mean end
      if self.mean_kind == "constant" then mean = mean + self.mean_value[c] end
      out[c] = lt.mvn(mean, lt.psd(L * L:t()))
    end
    return out
  end
  local L = chol_of(self, self.q_chol)
  local mean = self.q_mean
  if self.whiten then
    local Lz = self:prior_factor()
    L = Lz * L
    mean = Lz * mean
  end
  if self.mean_kind == "constant" then mean = mean + self.mean_value end
  return lt.mvn(mean, lt.psd(L * L:t()))
end

--- The inducing points (an m×d tensor).
function SVGP:inducing()
  return self.Z:clone()
end

--- A readable summary.
function SVGP:describe()
  local lik = {}
  for _, name in ipairs(self.likelihood.names) do
    lik[#lik + 1] = string.format("%s = %.6g", name, self.likelihood.params[name])
  end
  local means = self.mean_value
  if type(means) == "table" then
    local parts = {}
    for c, v in ipairs(means) do parts[c] = string.format("%.6g", v) end
    means = table.concat(parts, ", ")
  else
    means = string.format("%.6g", means)
  end
  if self.latents > 1 then
    lik[#lik + 1] = (self.likelihood.classes or self.latents) .. " classes"
                    .. mixing.describe(self.likelihood)
  end
  return string.format("%s\nlikelihood %s(%s)\nmean = %s\n%d inducing points%s, %s q%s",
                       self.kernel:describe(), self.likelihood.kind, table.concat(lik, ", "),
                       means, self.m, self.fixed.inducing and " (fixed)" or " (learnt)",
                       self.distribution, self.whiten and ", whitened" or "")
end

-- Shared with gp.laplace: the kernel check (with init.lua's helpers) and
-- the bounds and priors.
variational.check_kernel = function(kernel, helpers)
  h = h or helpers
  return check_kernel(kernel)
end

-- Bounds and priors of spec (gp/hyper.lua) over the kernel's hyperparameters
-- (gp/ltkernel.lua's names) and the likelihood's (lik may be nil); the
-- noise floor by default.
function variational.parse_hyper(spec, kernel, lik, reals, model_fail)
  local refuse = model_fail or fail -- gp.laplace's errors name gp.laplace
  local names = ltkernel.values(kernel)
  local defaults = {}
  if lik then
    for _, name in ipairs(lik.names) do names[name] = lik.params[name] end
    if lik.kind == "gaussian" then defaults.noise = {hyper.NOISE_FLOOR, math.huge} end
  end
  for name in pairs(reals or {}) do
    if names[name] ~= nil then refuse("the kernel has a hyperparameter named '%s' too", name) end
  end
  return hyper.parse(refuse, names, spec.bounds, spec.priors, defaults, reals)
end

return variational
