--- Exact Gaussian-process regression on lazytensor operators.
--
--   local gp = require "lazytensor.gp"
--   local k = gp.kernels.rbf{lengthscale = 1} + gp.kernels.periodic{period = 1}
--   local model = gp.exact{x = x, y = y, kernel = k, noise = 0.1}
--   model:fit{max_iter = 50, callback = function(it, mll) print(it, mll) end}
--   local mean, var = model:predict(xstar)
--
-- The model chooses the covariance's structure itself (gp/structure.lua;
-- model:explain() says which and why): Toeplitz for regularly spaced 1-d
-- inputs, Kronecker for grids with a separable kernel, "kernel" — lazy C
-- lt.kernel operators for K and ∂K/∂log θ, O(n) memory — for other inputs
-- when the kernel is a sum of rbf/matern/periodic kernels over all input
-- dimensions, and dense n×n matrices otherwise (products of kernels, rq,
-- kernels over a subset of the dimensions). It then only uses the function
-- API: K:add_diag(σ²), inv_quad_logdet, solve. Exact linear algebra runs
-- below lt.settings.max_cholesky_size and iterative methods above it; the
-- marginal log-likelihood's gradient,
--   ∂MLL/∂θ = ½ tr((ααᵀ − K⁻¹) ∂K/∂θ),  α = K⁻¹(y − m),
-- is exact on the first path and uses Hutchinson trace estimates
-- (num_trace_samples Rademacher probes, solved together with y − m in one
-- block CG run) on the second.
local lt = require "lazytensor"
local kernels = require "lazytensor.gp.kernels"
local structure = require "lazytensor.gp.structure"
local optim = require "lazytensor.optim"

local gp = {kernels = kernels, structure = structure}

local log, exp, pi = math.log, math.exp, math.pi

local Model = {}
Model.__index = Model

local function fail(fmt, ...)
  error("lazytensor: gp: " .. string.format(fmt, ...), 0)
end

--- Points as an array of coordinate arrays, from a tensor (n or n×d) or a
-- Lua array of numbers or of arrays.
local function to_points(x, what)
  if lt.is_tensor(x) then x = x:totable() end
  if type(x) ~= "table" or #x == 0 then fail("%s must be a non-empty tensor or table", what) end
  local points = {}
  for i, v in ipairs(x) do
    if type(v) == "number" then
      points[i] = {v}
    elseif type(v) == "table" then
      points[i] = v
    else
      fail("%s[%d] is a %s, expected a number or an array", what, i, type(v))
    end
  end
  local d = #points[1]
  for i, p in ipairs(points) do
    if #p ~= d then fail("%s[%d] has %d coordinates, expected %d", what, i, #p, d) end
  end
  return points
end

local function to_vector(y, n, what)
  if not lt.is_tensor(y) then y = lt.tensor(y) end
  if y:dim() ~= 1 or y:size(1) ~= n then
    fail("%s must be a vector of %d values", what, n)
  end
  return y
end

--- An exact GP regression model.
-- spec: x (inputs), y (targets), kernel, noise (variance, default 1% of
-- var(y)), mean ("constant" (default) or "zero"), mean_value, structure
-- ("auto", "toeplitz", "kron", "kernel", "dense"), fixed = {noise = true, mean = true},
-- trace_rank (rank of the pivoted-Cholesky control variate in stochastic
-- gradients, default 64, 0 for plain Hutchinson; see stochastic_gradient).
function gp.exact(spec)
  if type(spec) ~= "table" then fail("exact expects a table") end
  if getmetatable(spec.kernel) ~= kernels.Kernel then fail("kernel must be a gp kernel") end
  local points = to_points(spec.x, "x")
  local y = to_vector(spec.y, #points, "y")
  local self = setmetatable({
    points = points,
    y = y,
    n = #points,
    kernel = spec.kernel,
    mean_kind = spec.mean or "constant",
    structure_choice = spec.structure or "auto",
    fixed = spec.fixed or {},
    trace_rank = spec.trace_rank,
  }, Model)
  if self.mean_kind ~= "constant" and self.mean_kind ~= "zero" then
    fail("mean must be 'constant' or 'zero', got %s", tostring(self.mean_kind))
  end
  local ymean = y:mean()
  self.mean_value = self.mean_kind == "zero" and 0 or (spec.mean_value or ymean)
  local yvar = ((y - ymean):pow(2)):mean()
  self.noise = spec.noise or math.max(0.01 * yvar, 1e-6)
  if not (self.noise > 0) then fail("noise must be positive") end -- luacheck: ignore 581 (NaN)
  return self
end

------------------------------------------------------------ parameters --

--- log hyperparameters: kernel's, then log noise, then the constant mean.
function Model:get_vector()
  local v = self.kernel:get_log_params()
  if not self.fixed.noise then v[#v + 1] = log(self.noise) end
  if self.mean_kind == "constant" and not self.fixed.mean then v[#v + 1] = self.mean_value end
  return v
end

function Model:set_vector(v)
  local off = self.kernel:set_log_params(v, 0)
  if not self.fixed.noise then
    off = off + 1
    self.noise = exp(v[off])
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    off = off + 1
    self.mean_value = v[off]
  end
  self.cov = nil
end

function Model:covariance()
  if not self.cov then
    self.cov = structure.build(self.kernel, self.points, {structure = self.structure_choice})
  end
  return self.cov
end

--- Which structure the model uses, and why.
function Model:explain()
  return self:covariance().explain
end

------------------------------------------------------------ likelihood --

local function noisy(self, cov)
  return cov.K:add_diag(self.noise)
end

local function residual(self)
  return self.y - self.mean_value
end

--- The marginal log-likelihood log p(y | θ), and the solver's info.
function Model:mll()
  local cov = self:covariance()
  local Ky = noisy(self, cov)
  local q, ld, info = Ky:inv_quad_logdet(residual(self))
  return -0.5 * (q + ld + self.n * log(2 * pi)), info
end

-- Σ_ij A_ij B_ij for two n×n dense matrices.
local function frobenius(A, B)
  return A:cmul(B):sum()
end

-- Exact gradient: W = ααᵀ − K⁻¹, ∂/∂θ = ½ Σ W ∘ ∂K.
local function exact_gradient(self, cov, Ky, alpha, grad)
  local n = self.n
  local Kinv = Ky:solve(lt.eye(n))
  local a = alpha:reshape(n, 1)
  local W = a * a:t() - Kinv
  local m = self.kernel:count()
  for p = 1, m do grad[p] = 0.5 * frobenius(W, cov.derivative(p):dense()) end
  return W
end

-- Rank of the pivoted Cholesky used as a control variate in the trace
-- estimates (covariances that expose rows: the "kernel" structure).
local TRACE_RANK = 64

-- K ≈ L·Lᵀ by a pivoted Cholesky of rank ≤ k from K's rows (cov.row) and
-- diagonal: an n×r dense L, or nil when the covariance has no rows.
local function pivoted_cholesky(cov, n, k)
  if not cov.row then return nil end
  k = math.min(k, n)
  local d = cov.diagonal():totable()
  local total = 0
  for i = 1, n do total = total + d[i] end
  local cols = {} -- L's columns as 1-d tensors
  for j = 1, k do
    local piv, best = 1, -math.huge
    for i = 1, n do
      if d[i] > best then piv, best = i, d[i] end
    end
    if not (best > 1e-10 * total) then break end -- luacheck: ignore 581 (NaN)
    local col = cov.row(piv)
    for m = 1, j - 1 do col = col - cols[m] * cols[m][piv] end
    col = col / math.sqrt(best)
    cols[j] = col
    local c = col:totable()
    for i = 1, n do d[i] = d[i] - c[i] * c[i] end
  end
  if #cols == 0 then return nil end
  local L = lt.zeros(n, #cols)
  for j, c in ipairs(cols) do L:narrow(2, j, 1):copy(c:reshape(n, 1)) end
  local rest = 0
  for i = 1, n do rest = rest + math.max(d[i], 0) end
  return L, rest / n
end

-- Stochastic gradient: tr(K⁻¹ ∂K) ≈ mean over Rademacher probes z of
-- zᵀ K⁻¹ ∂K z. One block solve Ky⁻¹[r | Z] gives α and K⁻¹Z together, and
-- one product ∂K·[α | Z | L] per parameter gives αᵀ∂Kα, the probes' ∂K z and
-- the control variate's ∂K L: with lazy (lt.kernel) derivatives each product
-- is one pass over the kernel entries, so the columns share it.
--
-- Control variate (when the covariance exposes rows): P = L·Lᵀ + σ²I with L
-- a pivoted Cholesky of K approximates Ky, its inverse is cheap (Woodbury,
-- P⁻¹ = (I − L C⁻¹ Lᵀ)/σ², C = σ²I + LᵀL), and tr(P⁻¹∂K) is exact:
--   tr(Ky⁻¹∂K) = tr(P⁻¹∂K) + E[zᵀ(Ky⁻¹ − P⁻¹)∂K z],
-- so only the (small) difference is estimated by the probes.
local function stochastic_gradient(self, cov, Ky, r, grad)
  local n, s = self.n, lt.settings.num_trace_samples
  local B = lt.randn(n, s + 1)
  B = B:cdiv(B:abs()) -- ±1 (Rademacher: lower variance than Gaussian probes)
  B:narrow(2, 1, 1):copy(r:reshape(n, 1))
  local X = Ky:solve(B)
  local alpha = X:narrow(2, 1, 1):contiguous():reshape(n)
  local Z, KinvZ = B:narrow(2, 2, s), X:narrow(2, 2, s)
  local L, tail = pivoted_cholesky(cov, n, self.trace_rank or TRACE_RANK)
  local k = L and L:size(2) or 0
  local R = lt.zeros(n, 1 + s + k) -- [α | Z | L]
  R:narrow(2, 1, 1):copy(alpha:reshape(n, 1))
  R:narrow(2, 2, s):copy(Z)
  -- P = L·Lᵀ + τI, τ = σ² + the mean of K − L·Lᵀ's diagonal: the part of K
  -- that L leaves out, spread evenly (any τ > 0 leaves the estimate unbiased).
  local sigma2 = self.noise + (tail or 0)
  local resid, Cinv = KinvZ, nil
  local noise_tr -- tr(Ky⁻¹)
  if L then
    R:narrow(2, 2 + s, k):copy(L)
    Cinv = (L:t() * L + lt.eye(k) * sigma2):solve(lt.eye(k))
    local PinvZ = (Z - L * (Cinv * (L:t() * Z))) / sigma2
    resid = KinvZ - PinvZ
    -- tr(P⁻¹) = (n − tr(C⁻¹ LᵀL)) / σ²
    noise_tr = (n - frobenius(Cinv, L:t() * L)) / sigma2 + frobenius(resid, Z) / s
  else
    noise_tr = frobenius(KinvZ, Z) / s
  end
  local m = self.kernel:count()
  for p = 1, m do
    local dK = cov.derivative(p)
    local D = dK * R
    local quad = alpha:dot(D:narrow(2, 1, 1):contiguous():reshape(n))
    local tr = frobenius(resid, D:narrow(2, 2, s)) / s
    if L then
      -- tr(P⁻¹∂K) = (tr ∂K − tr(C⁻¹ Lᵀ∂K L)) / σ²
      local LtDL = L:t() * D:narrow(2, 2 + s, k)
      tr = tr + (dK:trace() - frobenius(Cinv, LtDL)) / sigma2
    end
    grad[p] = 0.5 * (quad - tr)
  end
  return alpha, noise_tr
end

--- MLL and its gradient with respect to get_vector()'s parameters.
function Model:mll_and_grad()
  local cov = self:covariance()
  local Ky = noisy(self, cov)
  local r = residual(self)
  local grad = {}
  local m = self.kernel:count()
  local noise_grad, alpha
  if self.n <= lt.settings.max_cholesky_size then
    alpha = Ky:solve(r)
    local W = exact_gradient(self, cov, Ky, alpha, grad)
    -- ∂Ky/∂log σ² = σ² I
    noise_grad = 0.5 * self.noise * W:diagonal():sum()
  else
    local trace_inv
    alpha, trace_inv = stochastic_gradient(self, cov, Ky, r, grad)
    noise_grad = 0.5 * self.noise * (alpha:dot(alpha) - trace_inv)
  end
  local q = r:dot(alpha)
  local ld = Ky:logdet()
  local value = -0.5 * (q + ld + self.n * log(2 * pi))
  local off = m
  if not self.fixed.noise then
    off = off + 1
    grad[off] = noise_grad
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    off = off + 1
    grad[off] = alpha:sum() -- ∂/∂m of −½ (y − m)ᵀ K⁻¹ (y − m)
  end
  return value, grad
end

--- Maximises the MLL over the hyperparameters (L-BFGS by default).
-- opts: max_iter, method ("lbfgs" | "adam"), lr (adam), callback(iter, mll, model).
-- lt.settings.progress, when set, also hears of every iteration.
function Model:fit(opts)
  opts = opts or {}
  local method = opts.method or "lbfgs"
  if method ~= "lbfgs" and method ~= "adam" then fail("unknown fit method '%s'", method) end
  local function objective(v)
    self:set_vector(v)
    local ok, value, grad = pcall(self.mll_and_grad, self)
    if not ok then
      -- A failed factorisation (too small a noise, say) is a bad point, not
      -- the end of the fit: report it as −∞ so the optimiser steps back.
      if type(value) == "string" and value:find("lazytensor:", 1, true) then
        local g = {}
        for i = 1, #v do g[i] = 0 end
        return -math.huge, g
      end
      error(value, 0)
    end
    return value, grad
  end
  local progress = lt.settings.progress
  local x0 = self:get_vector()
  local best, value, info = optim[method](objective, x0, {
    maximize = true,
    max_iter = opts.max_iter or 100,
    lr = opts.lr,
    gtol = opts.gtol,
    callback = function(iter, v, _, gnorm)
      if progress then
        progress{method = "gp." .. method, iteration = iter, value = v, gradnorm = gnorm}
      end
      if opts.callback then return opts.callback(iter, v, self, gnorm) end
    end,
  })
  self:set_vector(best)
  return {mll = value, iterations = info.iterations, converged = info.converged,
          reason = info.reason, evaluations = info.evaluations}
end

------------------------------------------------------------ prediction --

--- Posterior mean and (with opts.variance ~= false) variance of f at xstar.
function Model:predict(xstar, opts)
  opts = opts or {}
  local star = to_points(xstar, "xstar")
  if #star[1] ~= #self.points[1] then
    fail("xstar has %d coordinates, the training inputs %d", #star[1], #self.points[1])
  end
  local cov = self:covariance()
  local Ky = noisy(self, cov)
  local alpha = Ky:solve(residual(self))
  local Kst = cov.cross(star) -- n* × n
  local mean = Kst * alpha + self.mean_value
  if opts.variance == false then return mean end
  -- var = k(x*, x*) − diag(K*ᵀ Ky⁻¹ K*), one solve with all n* columns.
  local KsT = (lt.is_lazy(Kst) and Kst:dense() or Kst):t():contiguous()
  local V = Ky:solve(KsT)
  local explained = KsT:cmul(V):sum(1)
  local var = structure.prior_variance(self.kernel, star) - explained
  return mean, var
end

--- A readable summary of the hyperparameters.
function Model:describe()
  return string.format("%s\nnoise = %.6g\nmean = %.6g", self.kernel:describe(), self.noise,
                       self.mean_value)
end

return gp
