--- Multitask GP regression: the intrinsic coregionalisation model (ICM).
--
--   local model = gp.multitask{x = x, y = Y, kernel = k, rank = 1}  -- Y n×t
--   model:fit{max_iter = 50}
--   local mean, var = model:predict(xstar)                          -- n*×t each
--   local B = model:task_covariance()                               -- t×t
--
-- The t outputs at the n inputs are jointly normal with covariance B ⊗ K:
-- K the kernel matrix over the inputs, B = W·Wᵀ + diag(v) (W t×r, v > 0) the
-- tasks' covariance, plus σ²I. Observations are ordered task by task (the
-- columns of Y stacked), as lt.kron(B, K) orders its entries.
--
-- All tasks observed at all inputs: Ky = B ⊗ K + σ²I is the Kronecker +
-- σ²I eigen rule (kron_plus_identity): with B = QB·ΛB·QBᵀ and
-- K = QK·ΛK·QKᵀ, Ky = (QB ⊗ QK)(ΛB ⊗ ΛK + σ²)(QB ⊗ QK)ᵀ, so with
-- R̃ = QKᵀ·R·QB (R the n×t residuals) and D_ia = μ_i·λ_a + σ²,
--   yᵀKy⁻¹y = Σ R̃²/D,  log det Ky = Σ log D,
-- at the cost of the two eigendecompositions (O(n³ + t³), never (nt)³). The
-- gradient comes from the same factors: with A = Ky⁻¹r as an n×t matrix,
-- ∂MLL/∂Ky = ½(vec A·vec Aᵀ − Ky⁻¹) gives the cotangents
--   B: ½(Aᵀ·K·A − QB·diag(Σ_i μ_i/D_ia)·QBᵀ),
--   K: ½(A·B·Aᵀ − QK·diag(Σ_a λ_a/D_ia)·QKᵀ) (handed to K's bilinear_derivative
--      as [A·B/2 | −QK·diag(z)/2]·[A | QK]ᵀ), and ∂/∂σ² = ½(Σ A² − Σ 1/D).
--
-- Missing values (NaN in Y): Ky = (B ⊗ K)[obs, obs] + σ²I, a lazy submatrix
-- of the lazy Kronecker product; inv_quad_logdet{grad = true} on it gives
-- the value and the gradients keyed by W's low-rank leaf, v's diagonal,
-- K's leaves and σ²'s identity (exact below max_cholesky_size, the
-- stochastic estimate above).
--
-- task_noise = true (GPyTorch's MultitaskGaussianLikelihood by default):
-- each task a has a noise variance τ_a of its own added to the shared σ²,
-- Ky = B ⊗ K + diag(σ² + τ_a) ⊗ I, both fitted above the floor 1e-4 (the
-- data fix only their sums). With every value observed the eigen rule
-- still holds after whitening by d = σ² + τ: with S = diag(d)^½,
-- Ky = (S ⊗ I)(B̃ ⊗ K + I)(S ⊗ I), B̃ = S⁻¹·B·S⁻¹, so B̃'s eigenpairs take
-- B's place (complete_mll); with missing values, the general path above.
local lt = require "lazytensor"
local structure = require "lazytensor.gp.structure"
local hyper = require "lazytensor.gp.hyper"
local ltkernel = require "lazytensor.gp.ltkernel"
local custom = require "lazytensor.gp.custom"

local multitask = {}

local log, exp, pi, sqrt = math.log, math.exp, math.pi, math.sqrt

local MT = {}
MT.__index = MT

local KEYS = {"x", "y", "kernel", "rank", "noise", "task_noise", "mean", "fixed", "bounds",
              "priors"}

-- Y as a Lua array of n rows of t numbers (NaN: missing), from a tensor or table.
local function target_rows(h, y, n)
  if lt.is_tensor(y) then
    if y:dim() ~= 2 then h.fail("multitask: y must be an n×t matrix (one column per task)") end
    y = y:totable()
  end
  if type(y) ~= "table" or #y ~= n then
    h.fail("multitask: y must be an n×t matrix with n = %d rows (one per input)", n)
  end
  local t = type(y[1]) == "table" and #y[1] or 0
  if t < 1 then h.fail("multitask: y must be an n×t matrix with t ≥ 1 columns") end
  for i, row in ipairs(y) do
    if type(row) ~= "table" or #row ~= t then
      h.fail("multitask: y[%d] must have %d values (one per task)", i, t)
    end
    for a, v in ipairs(row) do
      if type(v) ~= "number" or v == math.huge or v == -math.huge then
        h.fail("multitask: y[%d][%d] must be a finite number (NaN marks a missing value)", i, a)
      end
    end
  end
  return y, t
end

-- Column means and covariance of Y over the observed entries.
local function task_moments(rows, t)
  local mean, count = {}, {}
  for a = 1, t do mean[a], count[a] = 0, 0 end
  for _, row in ipairs(rows) do
    for a, v in ipairs(row) do
      if v == v then
        mean[a], count[a] = mean[a] + v, count[a] + 1
      end
    end
  end
  for a = 1, t do mean[a] = count[a] > 0 and mean[a] / count[a] or 0 end
  local C = {}
  for a = 1, t do
    C[a] = {}
    for b = 1, t do
      local s, c = 0, 0
      for _, row in ipairs(rows) do
        if row[a] == row[a] and row[b] == row[b] then
          s, c = s + (row[a] - mean[a]) * (row[b] - mean[b]), c + 1
        end
      end
      C[a][b] = c > 1 and s / (c - 1) or (a == b and 1 or 0)
    end
  end
  return mean, C, count
end

-- W (t×r) and v from the tasks' sample covariance C: its leading r
-- eigenvectors scaled by √(λ/2), v = half of C's diagonal (so B starts
-- near C); W = 0 would be a saddle point of the likelihood.
local function initial_B(C, t, r)
  local w, Q = lt.psd(lt.tensor(C)):eigh() -- ascending
  local W = lt.zeros(t, r)
  for j = 1, r do
    local k = t - j + 1
    local scale = sqrt(math.max(w[k], 1e-6) / 2)
    for a = 1, t do W:set(a, j, Q:get(a, k) * scale) end
  end
  local v = {}
  for a = 1, t do v[a] = math.max(C[a][a] / 2, 1e-6) end
  return W, v
end

-- The multitask model's own hyperparameters for gp.parse_hyper: the
-- tasks' variances v, and the per-task noises (with the floor when fitted).
local function hyper_extra(self)
  local extra = {values = {task_variance = self.v}, free = {task_variance = true}, defaults = {}}
  if self.task_noise then
    extra.values.task_noise = self.task_noise
    if not self.fixed.task_noise then
      extra.free.task_noise = true
      extra.defaults.task_noise = {hyper.NOISE_FLOOR, math.huge}
    end
  end
  return extra
end

--- The model's constructor, given init.lua's shared helpers (h.fail,
-- h.to_points, h.options, h.check_noise, h.fit).
function multitask.constructor(h)
  MT.fit = h.fit
  return function(spec)
    if type(spec) ~= "table" then h.fail("multitask expects a table") end
    h.options("multitask", spec, KEYS)
    if getmetatable(spec.kernel) ~= require("lazytensor.gp.kernels").Kernel then
      h.fail("kernel must be a gp kernel")
    end
    local points = h.to_points(spec.x, "x")
    local n, d = #points, #points[1]
    local top = spec.kernel:max_dim()
    if top and top > d then h.fail("the kernel reads input dimension %d but x has %d", top, d) end
    local rows, t = target_rows(h, spec.y, n)
    local r = spec.rank or 1
    if type(r) ~= "number" or r ~= math.floor(r) or r < 1 or r > t then
      h.fail("multitask: rank = %s must be a whole number from 1 to t = %d", tostring(r), t)
    end
    local fixed = h.options("multitask fixed", spec.fixed, {"noise", "task_noise", "mean"})
    if spec.task_noise ~= nil and type(spec.task_noise) ~= "boolean" then
      h.fail("multitask: task_noise must be true or false, got %s", type(spec.task_noise))
    end
    if fixed.task_noise and not spec.task_noise then
      h.fail("multitask: fixed.task_noise needs task_noise = true")
    end
    local mean_kind = spec.mean or "constant"
    if mean_kind ~= "constant" and mean_kind ~= "zero" then
      h.fail("mean must be 'constant' or 'zero', got %s", tostring(mean_kind))
    end
    local means, C, count = task_moments(rows, t)
    local observed, total_var = {}, 0
    for a = 1, t do
      if count[a] == 0 then h.fail("multitask: task %d has no observed value", a) end
      total_var = total_var + C[a][a] / t
    end
    for a = 1, t do
      for i = 1, n do
        if rows[i][a] == rows[i][a] then observed[#observed + 1] = (a - 1) * n + i end
      end
    end
    local noise = h.check_noise(spec.noise or math.max(0.01 * total_var, 1e-6), n)
    if lt.is_tensor(noise) then h.fail("multitask: noise must be one variance σ² (a number)") end
    local W, v = initial_B(C, t, r)
    local self = setmetatable({
      points = points, X = lt.tensor(points), n = n, d = d, t = t, rank = r,
      rows = rows, observed = observed,
      -- the eigen rule needs one noise for all: per-task noise takes the
      -- general path (a lazy Kronecker + diagonal) even with every value observed
      complete = #observed == n * t,
      kernel = spec.kernel, W = W, v = v, noise = noise,
      mean_kind = mean_kind, means = {},
      fixed = {noise = fixed.noise or nil, task_noise = fixed.task_noise or nil,
               mean = fixed.mean or nil}, h = h,
    }, MT)
    for a = 1, t do self.means[a] = mean_kind == "zero" and 0 or means[a] end
    if spec.task_noise then
      -- each task's own noise starts at 1% of its variance, above the floor
      self.task_noise = {}
      for a = 1, t do self.task_noise[a] = math.max(0.01 * C[a][a], 2 * hyper.NOISE_FLOOR) end
    end
    h.parse_hyper(self, spec, spec.noise == nil and total_var, hyper_extra(self))
    return self
  end
end

------------------------------------------------------------ parameters --

--- The hyperparameters' names → values (gp/hyper.lua's log-space models):
-- the kernel's, task_variance (v, t values), noise (σ²) and task_noise.
function MT:hyper_values()
  local values = ltkernel.log_space(self.kernel)
  values.task_variance, values.noise, values.task_noise = self.v, self.noise, self.task_noise
  return values
end

--- The real-valued hyperparameters (gp/hyper.lua): W as "task_factor"
-- (t×r, row by row) and the t constant means as "mean" (unless mean = "zero").
function MT:hyper_reals()
  local flat = {}
  for _, row in ipairs(self.W:totable()) do
    for _, w in ipairs(row) do flat[#flat + 1] = w end
  end
  local out = {task_factor = {value = flat, shape = {self.t, self.rank}, free = true}}
  if self.mean_kind == "constant" then
    local means = {}
    for a = 1, self.t do means[a] = self.means[a] end
    out.mean = {value = means, shape = {self.t}, free = not self.fixed.mean}
  end
  return out
end

--- For each entry of get_vector, its hyperparameter's name.
function MT:hyper_entries()
  local _, _, entries = ltkernel.log_space(self.kernel)
  local function add(name, count)
    for _ = 1, count do entries[#entries + 1] = name end
  end
  add("task_factor", self.t * self.rank)
  add("task_variance", self.t)
  if not self.fixed.noise then add("noise", 1) end
  if self.task_noise and not self.fixed.task_noise then add("task_noise", self.t) end
  if self.mean_kind == "constant" and not self.fixed.mean then add("mean", self.t) end
  return entries
end

-- raw_vector, set_raw_vector, log_prior, log_posterior, log_posterior_and_grad
hyper.install(MT)

--- The kernel's log-hyperparameters, W (t×r, row by row), log v (t), log σ²
-- (unless fixed), the t constant means (unless fixed or zero).
function MT:get_vector()
  local out = self.kernel:get_log_params()
  for _, row in ipairs(self.W:totable()) do
    for _, w in ipairs(row) do out[#out + 1] = w end
  end
  for a = 1, self.t do out[#out + 1] = log(self.v[a]) end
  if not self.fixed.noise then out[#out + 1] = log(self.noise) end
  if self.task_noise and not self.fixed.task_noise then
    for a = 1, self.t do out[#out + 1] = log(self.task_noise[a]) end
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    for a = 1, self.t do out[#out + 1] = self.means[a] end
  end
  return out
end

--- Sets what get_vector returns.
function MT:set_vector(vec)
  local off = self.kernel:set_log_params(vec, 0)
  local W = {}
  for a = 1, self.t do
    W[a] = {}
    for j = 1, self.rank do
      off = off + 1
      W[a][j] = vec[off]
    end
  end
  self.W = lt.tensor(W)
  for a = 1, self.t do
    off = off + 1
    self.v[a] = exp(vec[off])
  end
  if not self.fixed.noise then
    off = off + 1
    self.noise = exp(vec[off])
  end
  if self.task_noise and not self.fixed.task_noise then
    local tau = {}
    for a = 1, self.t do
      off = off + 1
      tau[a] = exp(vec[off])
    end
    self.task_noise = tau
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    for a = 1, self.t do
      off = off + 1
      self.means[a] = vec[off]
    end
  end
end

--- B = W·Wᵀ + diag(v), the t×t task covariance (a lazy low-rank + diagonal
-- operator).
function MT:task_covariance()
  return lt.lowrank(self.W) + lt.diag(lt.tensor(self.v))
end

------------------------------------------------------- kernel over x --

-- K between the point arrays P1 and P2 (P2 nil: P1 with itself, PSD), and
-- to_params(grads): the kernel's free parameters' gradients (∂/∂log θ) from
-- a gradient table keyed by K's leaves — lt.kernel operators when the
-- kernel is a tree lt.kernel computes (sums, products, scales of its
-- kinds: gp/structure.lua's plan), else the dense K itself, linked by its
-- derivative matrices.
local function kernel_matrix(self, P1, P2)
  if custom.contains(self.kernel) then -- gp.kernels.custom: differentiated by lt.grad (custom_mll)
    local K = custom.operator(self.kernel, nil, nil, P1, P2, {})
    if P2 == nil then K = lt.psd(K) end
    return K
  end
  local plan = structure.c_plan(self.kernel)
  local params = self.kernel:parameters()
  if plan then
    local K, parts = structure.plan_operator(plan, structure.plan_points(P1, plan),
                                             P2 and structure.plan_points(P2, plan))
    local links = structure.plan_links(self.kernel, plan, parts)
    return K, function(grads) return structure.link_grads(links, grads, #params) end
  end
  local K, dK = structure.kernel_dense(self.kernel, P1, P2 or P1, P2 == nil)
  if P2 == nil then K = lt.psd(K) end
  return K, function(grads)
    local g = {}
    for p = 1, #params do g[p] = grads[K] and grads[K].values:cmul(dK[p]):sum() or 0 end
    return g
  end
end

------------------------------------------------------------ likelihood --

-- The residuals as an n×t tensor (NaN where missing, unused then).
local function residuals(self)
  local R = {}
  for i, row in ipairs(self.rows) do
    R[i] = {}
    for a, y in ipairs(row) do R[i][a] = y - self.means[a] end
  end
  return lt.tensor(R)
end

-- Outer product of two 1-d tensors.
local function outer(u, w)
  return u:reshape(u:size(1), 1) * w:reshape(1, w:size(1))
end

-- The noise variances d_a = σ² + τ_a of the t tasks (τ = 0 without task_noise).
local function task_noises(self)
  local d = {}
  for a = 1, self.t do d[a] = self.noise + (self.task_noise and self.task_noise[a] or 0) end
  return d
end

-- The whitened eigen factors of the complete-data Ky = B ⊗ K + diag(d) ⊗ I =
-- (S ⊗ I)(B̃ ⊗ K + I)(S ⊗ I), S = diag(d)^½, B̃ = S⁻¹·B·S⁻¹: K = QK·diag(μ)·QKᵀ,
-- B̃ = QB·diag(λ)·QBᵀ, D_ia = μ_i·λ_a + 1, s = d^-½ (a 1-d tensor), and
-- A = Ky⁻¹r as an n×t matrix (= QK·(R̃/D)·QBᵀ·diag(s), R̃ = QKᵀ·R·diag(s)·QB).
local function whitened(self, Kd, B)
  local d = task_noises(self)
  local sd = {}
  for a = 1, self.t do sd[a] = 1 / sqrt(d[a]) end
  local s = lt.tensor(sd)
  local mu, QK = lt.psd(Kd):eigh()
  local Bw = B:cmul(outer(s, s))
  local lam, QB = lt.psd((Bw + Bw:t()) * 0.5):eigh()
  local Rt = QK:t() * residuals(self):cmul(s:reshape(1, self.t)) * QB
  local D = outer(mu, lam) + 1
  local At = Rt:cdiv(D)
  local A = (QK * At * QB:t()):cmul(s:reshape(1, self.t))
  return {d = d, s = s, mu = mu, QK = QK, lam = lam, QB = QB, Rt = Rt, D = D, At = At, A = A}
end

-- All tasks at all inputs: value and gradient from the eigendecompositions
-- (whitened by the tasks' noises, so per-task noise takes it too).
--   yᵀKy⁻¹y = Σ R̃²/D,  log det Ky = Σ log D + n·Σ_a log d_a;
-- with ∂MLL/∂Ky = ½(vec A·vec Aᵀ − Ky⁻¹) the cotangents are
--   B: ½(Aᵀ·K·A − S⁻¹·QB·diag(Σ_i μ_i/D_ia)·QBᵀ·S⁻¹),
--   K: ½(A·B·Aᵀ − QK·diag(z)·QKᵀ), z_i = Σ_a λ_a/D_ia,
--   d_a: ½(Σ_i A_ia² − s_a²·Σ_c QB_ac²·Σ_i 1/D_ic),
-- and σ² takes Σ_a of d's cotangent, τ_a its a-th entry.
local function complete_mll(self, want_grad)
  local n, t = self.n, self.t
  local K, to_params = kernel_matrix(self, self.points)
  local Kd = K:dense()
  local B = self:task_covariance():dense()
  local F = whitened(self, Kd, B)
  local mu, QK, lam, QB, D, A, s = F.mu, F.QK, F.lam, F.QB, F.D, F.A, F.s
  local logd = 0
  for a = 1, t do logd = logd + log(F.d[a]) end
  local value = -0.5 * (F.Rt:cmul(F.At):sum() + D:log():sum() + n * logd + n * t * log(2 * pi))
  if not want_grad then return value end
  local Dinv = D:pow(-1)
  -- B's cotangent GB and the chain rule through W·Wᵀ + diag(v).
  local wdiag = mu:reshape(1, n) * Dinv -- 1×t: Σ_i μ_i/D_ia
  local QBs = QB:cmul(s:reshape(t, 1))
  local GB = (A:t() * Kd * A - QBs:cmul(wdiag) * QBs:t()) * 0.5
  GB = (GB + GB:t()) * 0.5
  local gW = GB * self.W * 2
  local gv = GB:diagonal():cmul(lt.tensor(self.v))
  -- K's cotangent [A·B/2 | −QK·diag(z)/2]·[A | QK]ᵀ, z_i = Σ_a λ_a/D_ia.
  local z = Dinv * lam -- n
  local L = lt.zeros(n, t + n)
  local Rk = lt.zeros(n, t + n)
  L:narrow(2, 1, t):copy(A * B * 0.5)
  L:narrow(2, t + 1, n):copy(QK:cmul(z:reshape(1, n) * -0.5))
  Rk:narrow(2, 1, t):copy(A)
  Rk:narrow(2, t + 1, n):copy(QK)
  local grad = to_params(K:bilinear_derivative(L, Rk))
  for _, row in ipairs(gW:totable()) do
    for _, g in ipairs(row) do grad[#grad + 1] = g end
  end
  for a = 1, t do grad[#grad + 1] = gv[a] end
  -- d's cotangent gd (t values)
  local colD = Dinv:sum(1):reshape(t) -- Σ_i 1/D_ic
  local gd = (A:cmul(A):sum(1):reshape(t) - (QB:cmul(QB) * colD):cmul(s):cmul(s)) * 0.5
  if not self.fixed.noise then grad[#grad + 1] = self.noise * gd:sum() end
  if self.task_noise and not self.fixed.task_noise then
    for a = 1, t do grad[#grad + 1] = self.task_noise[a] * gd[a] end
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    local colsum = A:sum(1)
    for a = 1, t do grad[#grad + 1] = colsum[a] end
  end
  return value, grad
end

-- The task of the observation at idx (task by task, n per task).
local function task_of(self, idx)
  return math.floor((idx - 1) / self.n) + 1
end

-- The per-task noises of the observations (a 1-d tensor), or nil.
local function task_noise_vector(self)
  if not self.task_noise then return nil end
  local per = {}
  for j, idx in ipairs(self.observed) do per[j] = self.task_noise[task_of(self, idx)] end
  return lt.tensor(per)
end

-- Some values missing, or per-task noise: the lazy (B ⊗ K)[obs, obs] + σ²I
-- (+ diag(τ_task) with per-task noise) and inv_quad_logdet{grad = true} on it.
local function masked_mll(self, want_grad)
  local n, t = self.n, self.t
  local K, to_params = kernel_matrix(self, self.points)
  local Wleaf, vleaf = lt.lowrank(self.W), lt.diag(lt.tensor(self.v))
  local N = lt.identity(#self.observed, self.noise)
  -- A dense K enters through a lazy view (lt.kron would copy it): its
  -- gradient then comes keyed by K itself.
  local Kfactor = K
  if not lt.is_lazy(K) then
    local all = {}
    for i = 1, n do all[i] = i end
    Kfactor = lt.submatrix(K, all)
  end
  local Ky = lt.submatrix(lt.kron(Wleaf + vleaf, Kfactor), self.observed) + N
  local tau = task_noise_vector(self)
  local T = tau and lt.diag(tau)
  if T then Ky = Ky + T end
  local R = residuals(self)
  local r = {}
  for j, idx in ipairs(self.observed) do
    local a, i = math.floor((idx - 1) / n) + 1, (idx - 1) % n + 1
    r[j] = R:get(i, a)
  end
  r = lt.tensor(r)
  if not want_grad then
    local q, ld = Ky:inv_quad_logdet(r)
    return -0.5 * (q + ld + #self.observed * log(2 * pi))
  end
  local q, ld, grads = Ky:inv_quad_logdet(r, {grad = true})
  local value = -0.5 * (q + ld + #self.observed * log(2 * pi))
  local grad = to_params(grads)
  for p = 1, #grad do grad[p] = -0.5 * grad[p] end
  local gW = grads[Wleaf] and grads[Wleaf].U or lt.zeros(t, self.rank)
  for _, row in ipairs(gW:totable()) do
    for _, g in ipairs(row) do grad[#grad + 1] = -0.5 * g end
  end
  local gv = grads[vleaf] and grads[vleaf].diag or lt.zeros(t)
  for a = 1, t do grad[#grad + 1] = -0.5 * gv[a] * self.v[a] end
  if not self.fixed.noise then grad[#grad + 1] = -0.5 * grads[N].scale * self.noise end
  if T and not self.fixed.task_noise then
    local gT, sums = grads[T].diag, {}
    for a = 1, t do sums[a] = 0 end
    for j, idx in ipairs(self.observed) do
      local a = task_of(self, idx)
      sums[a] = sums[a] + gT[j]
    end
    for a = 1, t do grad[#grad + 1] = -0.5 * sums[a] * self.task_noise[a] end
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    local alpha = grads[r].values * 0.5
    local sums = {}
    for a = 1, t do sums[a] = 0 end
    for j, idx in ipairs(self.observed) do
      local a = math.floor((idx - 1) / n) + 1
      sums[a] = sums[a] + alpha[j]
    end
    for a = 1, t do grad[#grad + 1] = sums[a] end
  end
  return value, grad
end

-- With a custom kernel in the tree (gp.kernels.custom): the MLL from
-- lazytensor operations, Ky = (B ⊗ K)[obs, obs] + σ²I (+ diag(τ_task)), B =
-- lt.lowrank(W) + lt.diag(v), and lt.mvn's log_prob, at lt.grad's
-- parameters p (nil: the current values): p.kernel (custom.kernel_params'
-- list, index its kernels), p.W, p.log_v, p.log_noise, p.log_tau, p.means
-- when free. Exact (an (nt)³ Cholesky factor) up to max_cholesky_size, the
-- stochastic estimate above: the eigen rule of complete_mll is not used.
local function custom_mll(self, p, index)
  p = p or {}
  local n, t = self.n, self.t
  local nobs = #self.observed
  local K = lt.psd(custom.operator(self.kernel, index, p.kernel, self.points, nil, {}))
  local v = p.log_v and p.log_v:exp() or lt.tensor(self.v)
  local B = lt.lowrank(p.W or self.W) + lt.diag(v)
  local KB = lt.kron(B, K)
  if nobs < n * t then KB = lt.submatrix(KB, self.observed) end
  local noise = p.log_noise and p.log_noise:exp() or self.noise
  local Ky = KB + lt.identity(nobs, noise)
  -- S: the observations' tasks (nobs×t, one 1 a row)
  local S, yobs = lt.zeros(nobs, t), {}
  for j, idx in ipairs(self.observed) do
    local a = task_of(self, idx)
    S:set(j, a, 1)
    yobs[j] = self.rows[(idx - 1) % n + 1][a]
  end
  if self.task_noise then
    local tau = p.log_tau and p.log_tau:exp() or lt.tensor(self.task_noise)
    Ky = Ky + lt.diag(S * tau)
  end
  local r = lt.tensor(yobs) - S * (p.means or lt.tensor(self.means))
  return lt.mvn(lt.zeros(nobs), lt.psd(Ky)):log_prob(r)
end

-- The MLL and its gradient (get_vector's order) with a custom kernel: lt.grad of custom_mll.
local function custom_mll_and_grad(self)
  local list, index = custom.kernel_params(self.kernel)
  local params = {kernel = list, W = self.W, log_v = lt.tensor(self.v):log()}
  if not self.fixed.noise then params.log_noise = log(self.noise) end
  if self.task_noise and not self.fixed.task_noise then
    params.log_tau = lt.tensor(self.task_noise):log()
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    params.means = lt.tensor(self.means)
  end
  local grads, value = lt.grad(function(p) return custom_mll(self, p, index) end)(params)
  local g = custom.kernel_grad(self.kernel, index, grads.kernel)
  local function add(list_of)
    for _, x in ipairs(list_of) do g[#g + 1] = x end
  end
  for _, row in ipairs(grads.W:totable()) do add(row) end
  add(grads.log_v:totable())
  if params.log_noise then g[#g + 1] = grads.log_noise end
  if params.log_tau then add(grads.log_tau:totable()) end
  if params.means then add(grads.means:totable()) end
  return value, g
end

--- The marginal log-likelihood of the observed values.
function MT:mll()
  if custom.contains(self.kernel) then return custom_mll(self) end
  if self.complete then return (complete_mll(self, false)) end
  return (masked_mll(self, false))
end

--- The MLL and its gradient with respect to get_vector()'s parameters.
function MT:mll_and_grad()
  if custom.contains(self.kernel) then return custom_mll_and_grad(self) end
  if self.complete then return complete_mll(self, true) end
  return masked_mll(self, true)
end

------------------------------------------------------------ prediction --

local function test_tensor(self, xstar) return self.h.test_points_tensor(xstar, self.d) end

-- Row vector of the task means, broadcast over test points.
local function mean_row(self)
  return lt.tensor(self.means):reshape(1, self.t)
end

--- Posterior mean and variance of every task's latent function at xstar:
-- two n*×t tensors (column a: task a).
function MT:predict(xstar, opts)
  opts = self.h.options("predict", opts, {"variance"})
  local star = test_tensor(self, xstar)
  local n, t, ns = self.n, self.t, star:size(1)
  local star_points = self.h.to_points(xstar, "xstar")
  local Kd = kernel_matrix(self, self.points):dense()
  local Ks = kernel_matrix(self, star_points, self.points):dense() -- n*×n
  local B = self:task_covariance():dense()
  local prior = structure.prior_variance(self.kernel, self.h.to_points(xstar, "xstar"))
  local Bdiag = B:diagonal()
  if self.complete then
    local F = whitened(self, Kd, B)
    local mean = Ks * F.A * B + mean_row(self)
    if opts.variance == false then return mean end
    -- explained(s, a) = Σ_c (S·QB·ΛB)²_ac Σ_i (Ks·QK)²_si / D_ic (B·S⁻¹·QB = S·QB·ΛB)
    local Dinv = F.D:pow(-1)
    local KQ = Ks * F.QK
    local BQ = F.QB:cmul(F.lam:reshape(1, t)):cdiv(F.s:reshape(t, 1))
    local explained = KQ:cmul(KQ) * Dinv * BQ:cmul(BQ):t()
    return mean, outer(prior, Bdiag) - explained
  end
  -- Missing values: the cross-covariance (B ⊗ K*x)[:, obs] and solves with Ky.
  local tau = task_noise_vector(self)
  local Ky = lt.submatrix(lt.kron(lt.psd(B), lt.psd(Kd)), self.observed)
             :add_diag(tau and tau + self.noise or self.noise)
  local all = {}
  for i = 1, t * ns do all[i] = i end
  local cross = lt.submatrix(lt.kron(B, Ks), all, self.observed):dense() -- t·n* × obs
  local R = residuals(self)
  local r = {}
  for j, idx in ipairs(self.observed) do
    r[j] = R:get((idx - 1) % n + 1, math.floor((idx - 1) / n) + 1)
  end
  local alpha = Ky:solve(lt.tensor(r))
  local mean = (cross * alpha):reshape(t, ns):t() + mean_row(self)
  if opts.variance == false then return mean end
  local crossT = cross:t():contiguous()
  local explained = crossT:cmul(Ky:solve(crossT)):sum(1):reshape(t, ns):t()
  return mean, outer(prior, Bdiag) - explained
end

--- A readable summary.
function MT:describe()
  local B = self:task_covariance():dense():totable()
  local rows = {}
  for a, row in ipairs(B) do
    local cells = {}
    for b, v in ipairs(row) do cells[b] = string.format("%.4g", v) end
    rows[a] = "  " .. table.concat(cells, " ")
  end
  local tau = ""
  if self.task_noise then
    local cells = {}
    for a, v in ipairs(self.task_noise) do cells[a] = string.format("%.6g", v) end
    tau = string.format("\ntask noise = {%s}%s", table.concat(cells, ", "),
                        self.fixed.task_noise and " (fixed)" or "")
  end
  return string.format("%s\nnoise = %.6g%s%s\ntask covariance B (rank %d + diagonal):\n%s",
                       self.kernel:describe(), self.noise, self.fixed.noise and " (fixed)" or "",
                       tau, self.rank, table.concat(rows, "\n"))
end

return multitask
