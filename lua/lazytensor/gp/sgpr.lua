--- Sparse GP regression (SGPR): Titsias' collapsed variational bound.
--
--   local model = gp.sgpr{x = x, y = y, kernel = k, inducing = 500}
--   model:fit{max_iter = 30}
--   local mean, var = model:predict(xstar)
--
-- With m inducing points Z (m ≪ n), the covariance Ky = K + σ²I of the
-- exact GP is replaced by Q + σ²I, Q = Kxz·Kzz⁻¹·Kzx (a rank-m matrix plus a
-- diagonal), and model:mll() is the evidence lower bound
--   F = log N(y | m, Q + σ²I) − tr(Kxx − Q) / (2σ²)
-- (Titsias 2009). Woodbury's identity and the determinant lemma reduce
-- everything to m×m matrices: with P = Kzx·Kxz, c = Kzx·(y − m),
-- Kzz = Lz·Lzᵀ, M = Lz⁻¹·P·Lz⁻ᵀ and B = I + M/σ² = LB·LBᵀ,
--   (y − m)ᵀ(Q + σ²I)⁻¹(y − m) = (‖y − m‖² − ‖LB⁻¹Lz⁻¹c‖²/σ²) / σ²,
--   log det(Q + σ²I) = 2 Σ log diag LB + n log σ²,  tr Q = tr M.
-- Kxz (n×m) is never held whole: it is made a block of rows at a time from
-- lt.kernel(X_block, Z) (one pass for P and c, one for the gradient), so
-- memory is O(m² + block·m) at any n.
--
-- Gradient: the bound depends on Q only through G = ∂F/∂Q =
-- ½(ααᵀ + σ⁻⁴·Kxz·Σ⁻¹·Kzx) (α = (Q + σ²I)⁻¹(y − m), Σ = Kzz + P/σ²; the
-- identity terms of −½(Q + σ²I)⁻¹ and of the trace term cancel), so the
-- cotangents of the two kernel operators are
--   Kxz: 2·G·Kxz·Kzz⁻¹ = [α | Kxz]·[Kzz⁻¹Kzx·α | σ⁻⁴Kzz⁻¹·P·Σ⁻¹]ᵀ (low rank, m + 1),
--   Kzz: −Kzz⁻¹·(Kzx·G·Kxz)·Kzz⁻¹ (m×m),
-- computed in whitened form (see mll_and_grad) and handed to their
-- bilinear_derivative; the inducing points' gradient is
-- Kxz's x2 gradient plus Kzz's x1 gradient, the kernel hyperparameters'
-- gradients add those of both operators and of the trace term's tr Kxx.
local lt = require "lazytensor"
local structure = require "lazytensor.gp.structure"
local hyper = require "lazytensor.gp.hyper"
local ltkernel = require "lazytensor.gp.ltkernel"
local custom = require "lazytensor.gp.custom"

local sgpr = {}

local log, exp, pi = math.log, math.exp, math.pi

-- Kxz is made sgpr.block_entries entries (32 MB) at a time (a field so
-- that the specs can check the sums over several blocks on small data).
sgpr.block_entries = 4194304

local SGPR = {}
SGPR.__index = SGPR

local KEYS = {"x", "y", "kernel", "inducing", "noise", "mean", "mean_value", "fixed", "jitter",
              "bounds", "priors"}

-- Evenly spread rows of x (in the data's order) as the initial inducing points.
local function spread_rows(X, m)
  local n, d = X:size(1), X:size(2)
  local Z = lt.zeros(m, d)
  for j = 1, m do
    local i = math.floor((j - 0.5) * n / m) + 1
    Z[j] = X[i]
  end
  return Z
end

-- The inducing points from spec.inducing: a number m, or points (tensor or
-- Lua array) with x's number of coordinates.
local function inducing_points(h, inducing, X)
  local n, d = X:size(1), X:size(2)
  if inducing == nil then h.fail("sgpr needs inducing = m (a count) or inducing points") end
  if type(inducing) == "number" then
    if inducing ~= math.floor(inducing) or inducing < 1 or inducing > n then
      h.fail("sgpr: inducing = %s must be a whole number from 1 to n = %d", tostring(inducing), n)
    end
    return spread_rows(X, inducing)
  end
  local Z = lt.tensor(h.to_points(inducing, "inducing"))
  if Z:size(2) ~= d then
    h.fail("sgpr: inducing points have %d coordinates, x has %d", Z:size(2), d)
  end
  return Z
end

-- tr Kxx = Σ_i k(x_i, x_i) and its ∂/∂log θ: n·k(x₁, x₁) for a stationary
-- kernel; point by point for the others (linear, polynomial).
local function trace_of_kernel(kernel, points)
  local n, g = #points, {}
  if kernel:is_stationary() then
    local v = kernel:value(points[1], points[1], g, 0)
    for p = 1, #g do g[p] = n * g[p] end
    return n * v, g
  end
  local total, gi = 0, {}
  for p = 1, kernel:count() do g[p] = 0 end
  for _, x in ipairs(points) do
    total = total + kernel:value(x, x, gi, 0)
    for p = 1, #g do g[p] = g[p] + gi[p] end
  end
  return total, g
end

-- Σ k(x_i, x_i) for a tree with a custom kernel (gp.kernels.custom): the
-- diagonals of k(X_b, X_b) over blocks of TRACE_BLOCK rows (n·TRACE_BLOCK
-- kernel entries, not n²), at the log hyperparameters p_kernel (nil: the
-- current values; see custom.operator).
local TRACE_BLOCK = 128
local function custom_trace(self, index, p_kernel)
  local total
  for first = 1, self.n, TRACE_BLOCK do
    local len = math.min(TRACE_BLOCK, self.n - first + 1)
    local K = custom.operator(self.kernel, index, p_kernel, self.X:narrow(1, first, len), nil, {})
    local s = K:dense():diagonal():sum()
    total = total and total + s or s
  end
  return total
end

--- The model's constructor, given init.lua's shared helpers (h.fail,
-- h.to_points, h.to_vector, h.options, h.check_noise, h.fit, h.parse_hyper).
-- bounds and priors as gp.exact's (the kernel's hyperparameters, the
-- noise, with its floor 1e-4 when fitted, and the mean), and on the
-- inducing points ("inducing").
function sgpr.constructor(h)
  SGPR.fit = h.fit
  return function(spec)
    if type(spec) ~= "table" then h.fail("sgpr expects a table") end
    h.options("sgpr", spec, KEYS)
    local kernel = spec.kernel
    if getmetatable(kernel) ~= require("lazytensor.gp.kernels").Kernel then
      h.fail("kernel must be a gp kernel")
    end
    local points = h.to_points(spec.x, "x")
    local X = lt.tensor(points)
    local n, d = X:size(1), X:size(2)
    kernel:check_inputs(d)
    local plan, why = structure.c_plan(kernel)
    local is_custom = custom.contains(kernel)
    if not plan and not is_custom then
      h.fail("sgpr needs a kernel lt.kernel computes (its kinds, and sums, products and scales "
             .. "of them, or gp.kernels.custom in them), got %s", why)
    end
    local y = h.to_vector(spec.y, n, "y", true)
    local fixed = h.options("sgpr fixed", spec.fixed, {"noise", "mean", "inducing"})
    if spec.mean ~= nil and spec.mean ~= "constant" and spec.mean ~= "zero" then
      h.fail("mean must be 'constant' or 'zero', got %s", tostring(spec.mean))
    end
    local ymean = y:mean()
    local yvar = ((y - ymean):pow(2)):mean()
    local noise = h.check_noise(spec.noise or math.max(0.01 * yvar, 1e-6), n)
    if lt.is_tensor(noise) then h.fail("sgpr: noise must be one variance σ² (a number)") end
    local self = setmetatable({
      X = X, y = y, n = n, d = d, kernel = kernel, points = points,
      Z = inducing_points(h, spec.inducing, X),
      noise = noise,
      mean_kind = spec.mean or "constant",
      fixed = {noise = fixed.noise or nil, mean = fixed.mean or nil,
               inducing = fixed.inducing or nil},
      h = h,
      -- a custom kernel in the tree: the bound from lazytensor operations,
      -- differentiated by lt.grad (custom_bound)
      custom = is_custom or nil,
    }, SGPR)
    self.m = self.Z:size(1)
    self.mean_value = self.mean_kind == "zero" and 0 or (spec.mean_value or ymean)
    if type(self.mean_value) ~= "number" then h.fail("mean_value must be a number") end
    -- A fixed jitter on Kzz's diagonal (part of the model: the bound and its
    -- gradient are those of Kzz + jitter·I), relative to the mean prior variance.
    self.jitter = spec.jitter or 1e-6 * (is_custom and custom_trace(self) or
                                         trace_of_kernel(kernel, points)) / #points
    if type(self.jitter) ~= "number" or not (self.jitter >= 0) then -- luacheck: ignore 581
      h.fail("sgpr: jitter must be a non-negative number")
    end
    h.parse_hyper(self, spec, spec.noise == nil and yvar)
    return self
  end
end

------------------------------------------------------------ parameters --

--- The hyperparameters' names → values (gp/hyper.lua's log-space models).
function SGPR:hyper_values()
  local values = ltkernel.log_space(self.kernel)
  values.noise = self.noise
  return values
end

--- The real-valued hyperparameters (gp/hyper.lua): the constant mean
-- "mean" (unless mean = "zero") and the inducing points "inducing" (m×d,
-- row by row).
function SGPR:hyper_reals()
  local flat = {}
  for _, row in ipairs(self.Z:totable()) do
    for _, z in ipairs(row) do flat[#flat + 1] = z end
  end
  local out = {inducing = {value = flat, shape = {self.m, self.d}, free = not self.fixed.inducing}}
  if self.mean_kind == "constant" then
    out.mean = {value = self.mean_value, shape = {}, free = not self.fixed.mean}
  end
  return out
end

--- For each entry of get_vector, its hyperparameter's name.
function SGPR:hyper_entries()
  local _, _, entries = ltkernel.log_space(self.kernel)
  if not self.fixed.noise then entries[#entries + 1] = "noise" end
  if self.mean_kind == "constant" and not self.fixed.mean then entries[#entries + 1] = "mean" end
  for _ = 1, self.fixed.inducing and 0 or self.m * self.d do entries[#entries + 1] = "inducing" end
  return entries
end

-- raw_vector, set_raw_vector, log_prior, log_posterior, log_posterior_and_grad
hyper.install(SGPR)

--- log hyperparameters (kernel's, log σ², the constant mean), then the
-- inducing points' coordinates (row by row) unless fixed.inducing.
function SGPR:get_vector()
  local v = self.kernel:get_log_params()
  if not self.fixed.noise then v[#v + 1] = log(self.noise) end
  if self.mean_kind == "constant" and not self.fixed.mean then v[#v + 1] = self.mean_value end
  if not self.fixed.inducing then
    for _, row in ipairs(self.Z:totable()) do
      for _, z in ipairs(row) do v[#v + 1] = z end
    end
  end
  return v
end

--- Sets what get_vector returns.
function SGPR:set_vector(v)
  local off = self.kernel:set_log_params(v, 0)
  if not self.fixed.noise then
    off = off + 1
    self.noise = exp(v[off])
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    off = off + 1
    self.mean_value = v[off]
  end
  if not self.fixed.inducing then
    local rows = {}
    for i = 1, self.m do
      rows[i] = {}
      for k = 1, self.d do
        off = off + 1
        rows[i][k] = v[off]
      end
    end
    self.Z = lt.tensor(rows)
  end
end

--- The inducing points (an m×d tensor).
function SGPR:inducing()
  return self.Z
end

------------------------------------------------------------ the bound --

-- The kernel's tree of C operators (gp/structure.lua's plan; nil with a
-- custom kernel).
local function components(self)
  if self.custom then return nil end
  return (structure.c_plan(self.kernel))
end

-- Each leaf's view of the points A (n×d): A itself, or the columns of its
-- active dimensions (ARD's order).
local function project(plan, A)
  local out, by_dims = {}, {}
  for i, c in ipairs(plan.leaves) do
    if not c.dims then
      out[i] = A
    else
      local key = table.concat(c.dims, ",")
      if not by_dims[key] then
        -- A·E, E a constant 0/1 selection: followed test points stay
        -- followed inside lt.grad (a copy into a view would be refused)
        local E = lt.zeros(A:size(2), #c.dims)
        for q, d in ipairs(c.dims) do E:set(d, q, 1) end
        by_dims[key] = A * E
      end
      out[i] = by_dims[key]
    end
  end
  return out
end

-- The kernel's operator between A and B (n×d tensors; B nil: A with
-- itself), and the list of its lt.kernel leaves (none with a custom kernel:
-- custom.operator's tree at the current values).
local function kernel_op(self, plan, A, B)
  if self.custom then return custom.operator(self.kernel, nil, nil, A, B, {}) end
  return structure.plan_operator(plan, project(plan, A), B and project(plan, B))
end

-- Calls f(Xb, rb, first) for blocks of rows of X and of the residual r.
local function each_block(self, r, f)
  local rows = math.max(1, math.floor(sgpr.block_entries / self.m))
  for first = 1, self.n, rows do
    local len = math.min(rows, self.n - first + 1)
    f(self.X:narrow(1, first, len), r:narrow(1, first, len), first)
  end
end

local function lower_solve(L, B)
  return lt.triangular(L, "lower"):solve(B)
end

local function upper_solve(L, B) -- Lᵀ⁻¹·B for a lower L
  return lt.triangular(L:t():contiguous(), "upper"):solve(B)
end

local function symmetrize(A)
  return (A + A:t()) * 0.5
end

-- The lower Cholesky factor of a PSD matrix of the bound; a failure names
-- the matrix and the cure. B = I + Lz⁻¹·Kzx·Kxz·Lz⁻ᵀ/σ² is ≥ I exactly, so
-- it fails only when Kzz was numerically singular and its factor Lz is
-- wrong: the fault is then Kzz's, and the message says so.
local function bound_cholesky(self, A, which)
  local ok, L = pcall(function() return lt.psd(A):cholesky():dense() end)
  if ok then return L end
  local why = tostring(L):gsub("^lazytensor: ", "")
  if which == "Kzz" then
    self.h.fail("sgpr: Kzz + jitter·I (the inducing points' kernel matrix, jitter = %g) is not "
                .. "positive definite (%s); raise jitter or spread the inducing points",
                self.jitter, why)
  end
  self.h.fail("sgpr: Kzz + jitter·I (the inducing points' kernel matrix, jitter = %g) is "
              .. "numerically singular: the factor of I + Lz⁻¹·Kzx·Kxz·Lz⁻ᵀ/σ² built on it "
              .. "failed (%s); raise jitter or spread the inducing points", self.jitter, why)
end

-- Everything the bound, its gradient and predictions need, from one pass
-- over Kxz: P = Kzx·Kxz, c = Kzx·r, M = Lz⁻¹·P·Lz⁻ᵀ and the factors Lz, LB.
local function factor(self)
  local comps = components(self)
  local m = self.m
  local Kzz = kernel_op(self, comps, self.Z):dense():add_diag(self.jitter)
  local Lz = bound_cholesky(self, Kzz, "Kzz")
  local r = self.y - self.mean_value
  local P, c = lt.zeros(m, m), lt.zeros(m)
  each_block(self, r, function(Xb, rb)
    local Ub = kernel_op(self, comps, Xb, self.Z):dense()
    local UbT = Ub:t()
    P = P + UbT * Ub
    c = c + UbT * rb
    Ub:free() -- 32 MB: not left to the collector, which does not see its size
  end)
  P = symmetrize(P)
  local M = symmetrize(lower_solve(Lz, lower_solve(Lz, P):t()))
  local B = lt.eye(m) + M * (1 / self.noise)
  local LB = bound_cholesky(self, B, "B")
  return {comps = comps, Lz = Lz, c = c, M = M, LB = LB, r = r}
end

-- tr Kxx and ∂/∂log θ of it.
local function trace_Kxx(self)
  return trace_of_kernel(self.kernel, self.points)
end

-- The bound from the factors (and its parts, for the gradient).
local function bound(self, f)
  local s2, n = self.noise, self.n
  local w = lower_solve(f.LB, lower_solve(f.Lz, f.c))
  local rr = f.r:dot(f.r)
  local quad = (rr - w:dot(w) / s2) / s2
  local logdet = 2 * f.LB:diagonal():log():sum() + n * log(s2)
  local trK = trace_Kxx(self)
  local trM = f.M:diagonal():sum()
  return -0.5 * (quad + logdet + n * log(2 * pi)) - (trK - trM) / (2 * s2),
         {quad = quad, logdet = logdet, trK = trK, trM = trM, rr = rr}
end

-- The bound with a custom kernel in the tree, from lazytensor operations
-- (the same whitened form as factor and bound: Lz, V = Lz⁻¹Kzx, B = I +
-- V·Vᵀ/σ², tr Q = ‖V‖²), at lt.grad's parameters p (nil: the current
-- values): p.kernel (custom.kernel_params' list, index its kernels),
-- p.log_noise, p.mean, p.Z when free. Kxz is made whole (n×m), not by blocks.
local function custom_bound(self, p, index)
  p = p or {}
  local n, m = self.n, self.m
  local Z = p.Z or self.Z
  local log_s2 = p.log_noise or log(self.noise)
  local s2 = p.log_noise and p.log_noise:exp() or self.noise
  local r = self.y - (p.mean or self.mean_value)
  local Kzz = custom.operator(self.kernel, index, p.kernel, Z, nil, {}):dense()
  local Kxz = custom.operator(self.kernel, index, p.kernel, self.X, Z, {}):dense()
  local Lz = bound_cholesky(self, Kzz:add_diag(self.jitter), "Kzz")
  local V = lower_solve(Lz, Kxz:t()) -- m×n
  local LB = bound_cholesky(self, symmetrize(V * V:t()) * (1 / s2) + lt.eye(m), "B")
  local w = lower_solve(LB, V * r)
  local quad = (r:dot(r) - w:dot(w) / s2) / s2
  local logdet = 2 * LB:diagonal():log():sum() + n * log_s2
  local trK = custom_trace(self, index, p.kernel)
  local trM = V:cmul(V):sum()
  return -0.5 * (quad + logdet + n * log(2 * pi)) - (trK - trM) / (2 * s2)
end

-- The bound and its gradient (get_vector's order) with a custom kernel: lt.grad of custom_bound.
local function custom_mll_and_grad(self)
  local list, index = custom.kernel_params(self.kernel)
  local params = {kernel = list}
  if not self.fixed.noise then params.log_noise = log(self.noise) end
  if self.mean_kind == "constant" and not self.fixed.mean then params.mean = self.mean_value end
  if not self.fixed.inducing then params.Z = self.Z end
  local grads, value = lt.grad(function(p) return custom_bound(self, p, index) end)(params)
  local g = custom.kernel_grad(self.kernel, index, grads.kernel)
  if params.log_noise then g[#g + 1] = grads.log_noise end
  if params.mean then g[#g + 1] = grads.mean end
  if params.Z then
    for _, row in ipairs(grads.Z:totable()) do
      for _, z in ipairs(row) do g[#g + 1] = z end
    end
  end
  return value, g
end

--- The collapsed lower bound F ≤ log p(y) (a number).
function SGPR:mll()
  if self.custom then return custom_bound(self) end
  return (bound(self, factor(self)))
end

-- Adds the kernel parameters' gradients of one bilinear_derivative result
-- (keyed by the lt.kernel leaves `parts` of one operator of the plan) into
-- grad, as ∂/∂log θ; the points' gradient `zname` (in each leaf's
-- dimensions) into the m×d zgrad[1].
local function add_kernel_grads(self, plan, grads, parts, grad, zname, zgrad)
  local links = structure.plan_links(self.kernel, plan, parts)
  for p, g in ipairs(structure.link_grads(links, grads, #grad)) do grad[p] = grad[p] + g end
  for i, c in ipairs(plan.leaves) do
    local g = grads[parts[i]] and grads[parts[i]][zname]
    if g and not c.dims then
      zgrad[1] = zgrad[1] + g
    elseif g then
      for q, d in ipairs(c.dims) do
        local col = zgrad[1]:narrow(2, d, 1)
        col:copy(col + g:narrow(2, q, 1))
      end
    end
  end
end

--- The bound and its gradient with respect to get_vector()'s parameters.
function SGPR:mll_and_grad()
  if self.custom then return custom_mll_and_grad(self) end
  local f = factor(self)
  local value, parts = bound(self, f)
  local s2, m = self.noise, self.m
  local s4 = s2 * s2
  -- Everything in whitened form (V = Lz⁻¹Kzx, M = V·Vᵀ, B = I + M/σ²), with
  -- Lz's solves instead of Kzz⁻¹ or Σ⁻¹ and never P itself: Kzz is often
  -- ill-conditioned, and its inverse multiplied into P loses the inducing
  -- points' gradients entirely. B ≥ I is well conditioned, and
  -- M·B⁻¹ = σ²(I − B⁻¹), σ⁻⁴·M·B⁻¹·M = M/σ² − (I − B⁻¹).
  local LBinv = lower_solve(f.LB, lt.eye(m))
  local Binv = symmetrize(LBinv:t() * LBinv)
  local IminusBinv = lt.eye(m) - Binv
  local vt = Binv * lower_solve(f.Lz, f.c) * (1 / s2) -- V·α
  local a = upper_solve(f.Lz, vt) -- Kzz⁻¹·Kzx·α: α = (r − Kxz·a)/σ²
  -- Kzz's cotangent −Kzz⁻¹·(Kzx·G·Kxz)·Kzz⁻¹ = −½ Lz⁻ᵀ·(ṽṽᵀ + M/σ² − (I − B⁻¹))·Lz⁻¹
  local inner = vt:reshape(m, 1) * vt:reshape(1, m) + f.M * (1 / s2) - IminusBinv
  local Wzz = symmetrize(upper_solve(f.Lz, upper_solve(f.Lz, inner):t()) * -0.5)
  -- Kxz's cotangent [Kxz | α]·[Kzz⁻¹·Kzx·Σ⁻¹·Kzx·Kxz/σ⁴ | a]ᵀ, the first
  -- block Lz⁻ᵀ·(I − B⁻¹)·Lz⁻¹/σ².
  local R = lt.zeros(m, m + 1)
  R:narrow(2, 1, m):copy(symmetrize(upper_solve(f.Lz, upper_solve(f.Lz, IminusBinv):t()))
                         * (1 / s2))
  R:narrow(2, m + 1, 1):copy(a:reshape(m, 1))

  local kcount = self.kernel:count()
  local grad = {}
  for p = 1, kcount do grad[p] = 0 end
  local zgrad = {lt.zeros(m, self.d)}
  local alpha_sq, alpha_sum = 0, 0
  -- Kxz, a block of rows at a time: cotangent [Kxz_b | α_b]·Rᵀ.
  each_block(self, f.r, function(Xb, rb)
    local K, kparts = kernel_op(self, f.comps, Xb, self.Z)
    local len = Xb:size(1)
    local L = lt.zeros(len, m + 1)
    local Kb = K:dense()
    L:narrow(2, 1, m):copy(Kb)
    Kb:free()
    local alpha_b = (rb - L:narrow(2, 1, m) * a) * (1 / s2)
    alpha_sq, alpha_sum = alpha_sq + alpha_b:dot(alpha_b), alpha_sum + alpha_b:sum()
    L:narrow(2, m + 1, 1):copy(alpha_b:reshape(len, 1))
    add_kernel_grads(self, f.comps, K:bilinear_derivative(L, R), kparts, grad, "x2", zgrad)
    L:free()
  end)
  -- Kzz (jitter is a constant): <Wzz, ∂Kzz>.
  local Kz, zparts = kernel_op(self, f.comps, self.Z)
  add_kernel_grads(self, f.comps, Kz:bilinear_derivative(Wzz, lt.eye(m)), zparts, grad, "x1",
                   zgrad)
  -- The trace term's −tr Kxx / (2σ²).
  local _, dtrK = trace_Kxx(self)
  for p = 1, kcount do grad[p] = grad[p] - dtrK[p] / (2 * s2) end

  local off = kcount
  if not self.fixed.noise then
    off = off + 1
    -- tr (Q + σ²I)⁻¹ = n/σ² − tr(Σ⁻¹P)/σ⁴ = (n − tr(I − B⁻¹))/σ²
    local trKyinv = (self.n - IminusBinv:diagonal():sum()) / s2
    local dF = 0.5 * (alpha_sq - trKyinv) + (parts.trK - parts.trM) / (2 * s4)
    grad[off] = dF * s2 -- ∂/∂log σ²
  end
  if self.mean_kind == "constant" and not self.fixed.mean then
    off = off + 1
    grad[off] = alpha_sum
  end
  if not self.fixed.inducing then
    for _, row in ipairs(zgrad[1]:totable()) do
      for _, g in ipairs(row) do
        off = off + 1
        grad[off] = g
      end
    end
  end
  return value, grad
end

------------------------------------------------------------ prediction --

local function test_tensor(self, xstar) return self.h.test_points_tensor(xstar, self.d) end

-- V1 = Lz⁻¹Kz*, V2 = LB⁻¹V1 (m×n*), and the mean at the test points:
-- K*z·Σ⁻¹·c/σ² + m = V2ᵀ·LB⁻¹·Lz⁻¹·c/σ² + m.
local function predictive_parts(self, star)
  local f = factor(self)
  local Kzs = kernel_op(self, f.comps, self.Z, star):dense()
  local V1 = lower_solve(f.Lz, Kzs)
  local V2 = lower_solve(f.LB, V1)
  local w = lower_solve(f.LB, lower_solve(f.Lz, f.c))
  local mean = V2:t() * w * (1 / self.noise) + self.mean_value
  return f, V1, V2, mean
end

--- Predictive mean and variance of f at xstar under the bound's optimal
-- q(u): mean K*z·Σ⁻¹·Kzx·(y − m)/σ² + m, variance k** − K*z·Kzz⁻¹·Kz* +
-- K*z·Σ⁻¹·Kz* (add σ² for a new observation).
function SGPR:predict(xstar, opts)
  opts = self.h.options("predict", opts, {"variance"})
  local star = test_tensor(self, xstar)
  local _, V1, V2, mean = predictive_parts(self, star)
  if opts.variance == false then return mean end
  local prior = structure.prior_variance(self.kernel, self.h.to_points(xstar, "xstar"))
  return mean, prior - V1:cmul(V1):sum(1) + V2:cmul(V2):sum(1)
end

--- The posterior at xstar as an lt.mvn: covariance K** − V1ᵀV1 + V2ᵀV2,
-- K** the lazy lt.kernel of the test points and the two low-rank terms of
-- rank m (see predict).
function SGPR:posterior(xstar)
  local star = test_tensor(self, xstar)
  local f, V1, V2, mean = predictive_parts(self, star)
  local Kss = kernel_op(self, f.comps, star)
  return lt.mvn(mean, lt.psd(Kss - lt.lowrank(V1:t():contiguous())
                             + lt.lowrank(V2:t():contiguous())))
end

--- A readable summary of the hyperparameters.
function SGPR:describe()
  return string.format("%s\nnoise = %.6g%s\nmean = %.6g\n%d inducing points%s",
                       self.kernel:describe(), self.noise,
                       self.fixed.noise and " (fixed)" or "", self.mean_value, self.m,
                       self.fixed.inducing and " (fixed)" or " (learnt)")
end

return sgpr
