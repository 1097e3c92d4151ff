--- model:condition(x_new, y_new [, noise_new]) for gp.exact: a new model
-- with the points added and the hyperparameters kept (GPyTorch's
-- get_fantasy_model), computed by appending rows to the Cholesky factor.
--
-- With Ky = L·Lᵀ over the n old points, the covariance over old and new is
--   [Ky   Kon]   [L   0] [Lᵀ  B]
--   [Knoᵀ Knn] = [Bᵀ  C]·[0   Cᵀ],  B = L⁻¹·Kon (n×k),  C·Cᵀ = Knn − Bᵀ·B,
-- (Knn with the new points' noise on its diagonal): one triangular solve
-- with k columns and a k×k Cholesky, O(n²·k), and no refactorisation. The
-- factor is kept in blocks — the first factor, shared with the model it
-- came from and never written, then one row panel [Bᵀ C] per condition
-- call — so that nothing n×n is copied or allocated either: a solve runs
-- down the panels (forward substitution) and back up (back substitution);
-- past MAX_PANELS panels they are joined into one factor (an O(n²) copy).
--
-- The new model is a gp.exact like any other (fit, mll, predict,
-- posterior, condition again); while its hyperparameters and noise are
-- those it was made with, its predictions solve with the updated factor
-- (gp/init.lua's noisy() asks factor() below); once they change (fit,
-- set_vector), the factor is stale and the model computes as a fresh one.
-- The model conditioned on keeps the factor of its own Ky it had to compute
-- for the first condition (O(n³) once), so several conditions on one model
-- (fantasies) or a chain of them (a Bayesian-optimisation loop) cost
-- O(n²·k) each.
--
-- Where the update does not apply, the new model is built plainly with the
-- points added and the hyperparameters kept, and its solves run afresh when
-- first needed (no warm start): above lt.settings.max_cholesky_size (the
-- iterative path, CG), for structure = "ski" (its covariance interpolates
-- on a grid that the new points may change), and for distributed models.
local lt = require "lazytensor"

local condition = {}

-- Set by condition.install: gp/init.lua's helpers.
local H

------------------------------------------------------- the blocked factor --

local Factor = {}

-- Ky as a library operator, L·Lᵀ over the whole factor (formed once from the
-- blocks): what answers the methods the blocks do not have themselves.
local function operator_of(F)
  if rawget(F, "op") == nil then rawset(F, "op", lt.chol(F:cholesky())) end
  return rawget(F, "op")
end

-- The predict path calls solve (and LOVE ·): the blocks answer those.
-- Any other method of a tensor (diagonal, logdet, add_diag, ...) is
-- answered by the operator L·Lᵀ, so that a caller expecting Ky gets Ky's
-- answer whatever it asks.
Factor.__index = function(_, key)
  local own = Factor[key]
  if own ~= nil then return own end
  if type(key) ~= "string" then return nil end
  return function(self, ...)
    local op = operator_of(self)
    return op[key](op, ...)
  end
end

-- A factor from a lower-triangular operator L0 (what Ky:cholesky() gives:
-- triangular, or kron of triangular factors for a Kronecker Ky) of size n0.
local function new_factor(L0, n0)
  return setmetatable({n = n0, n0 = n0, T0 = L0, T0t = L0:t(), panels = {}}, Factor)
end

-- Each panel costs a few small operations per solve: past this many, the
-- blocks are joined into one factor (an O(n²) copy every MAX_PANELS calls,
-- no factorisation), so that a long chain of conditions stays O(n²) a solve.
local MAX_PANELS = 32

-- The same factor with one more row panel: Bt (k×n dense) and C (k×k lower).
function Factor:append(Bt, C)
  local panels = {}
  for i, p in ipairs(self.panels) do panels[i] = p end
  local k = C:size(1)
  panels[#panels + 1] = {offset = self.n, k = k, Bt = Bt, B = Bt:t(), C = C, Ct = C:t()}
  local F = setmetatable({n = self.n + k, n0 = self.n0, T0 = self.T0, T0t = self.T0t,
                          panels = panels}, Factor)
  if #panels > MAX_PANELS then return new_factor(F:cholesky(), F.n) end
  return F
end

-- Z with rows first .. first + count - 1 replaced by value (same shape).
local function set_rows(Z, first, count, value)
  Z:narrow(1, first, count):copy(value)
end

-- L⁻¹·X for a dense n×m X: the first block, then each panel's rows from
-- what is solved above them.
function Factor:forward(X)
  local Z = X:clone()
  set_rows(Z, 1, self.n0, self.T0:solve(Z:narrow(1, 1, self.n0)))
  for _, p in ipairs(self.panels) do
    local r = Z:narrow(1, p.offset + 1, p.k) - p.Bt * Z:narrow(1, 1, p.offset)
    set_rows(Z, p.offset + 1, p.k, p.C:solve(r))
  end
  return Z
end

-- L⁻ᵀ·Z: the panels from the last, each taking its share out of the rows
-- above it, then the first block.
function Factor:backward(Zin)
  local Z = Zin:clone()
  for i = #self.panels, 1, -1 do
    local p = self.panels[i]
    local w = p.Ct:solve(Z:narrow(1, p.offset + 1, p.k))
    set_rows(Z, p.offset + 1, p.k, w)
    set_rows(Z, 1, p.offset, Z:narrow(1, 1, p.offset) - p.B * w)
  end
  set_rows(Z, 1, self.n0, self.T0t:solve(Z:narrow(1, 1, self.n0)))
  return Z
end

-- B as a dense n×m matrix (a vector becomes one column), and how to give
-- the result B's shape back.
local function as_matrix(B, n, what)
  if lt.is_lazy(B) then B = B:dense() end
  if B:dim() == 1 then
    if B:size(1) ~= n then H.fail("%s: %d values for a %d×%d covariance", what, B:size(1), n, n) end
    return B:reshape(n, 1), function(X) return X:reshape(n) end
  end
  if B:size(1) ~= n then H.fail("%s: %d rows for a %d×%d covariance", what, B:size(1), n, n) end
  return B, function(X) return X end
end

local EXACT_INFO = {method = "cholesky", iterations = 0, residual = 0, converged = true}

--- Ky⁻¹·B and an info table, as Ky:solve(B) gives them.
function Factor:solve(B)
  local M, shape_back = as_matrix(B, self.n, "solve")
  local info = {}
  for k, v in pairs(EXACT_INFO) do info[k] = v end
  info.updated = #self.panels -- row panels appended to the first factor
  return shape_back(self:backward(self:forward(M))), info
end

--- Ky·X = L·(Lᵀ·X) from the blocks (LOVE's Lanczos multiplies by Ky).
function Factor:matmul(X)
  local M, shape_back = as_matrix(X, self.n, "matmul")
  -- Y = Lᵀ·M: the first block's rows, plus each panel's Bᵀ-part above it
  local Y = M:clone()
  set_rows(Y, 1, self.n0, self.T0t * M:narrow(1, 1, self.n0))
  for _, p in ipairs(self.panels) do
    local Mp = M:narrow(1, p.offset + 1, p.k)
    set_rows(Y, 1, p.offset, Y:narrow(1, 1, p.offset) + p.B * Mp)
    set_rows(Y, p.offset + 1, p.k, p.Ct * Mp)
  end
  -- L·Y: each panel's rows Bt·Y(above) + C·Y(its own), then the first block
  local out = Y:clone()
  for _, p in ipairs(self.panels) do
    set_rows(out, p.offset + 1, p.k,
             p.Bt * Y:narrow(1, 1, p.offset) + p.C * Y:narrow(1, p.offset + 1, p.k))
  end
  set_rows(out, 1, self.n0, self.T0 * Y:narrow(1, 1, self.n0))
  return shape_back(out)
end

Factor.__mul = function(F, X)
  if getmetatable(F) ~= Factor then H.fail("condition: only Ky·X is defined for the factor") end
  return F:matmul(X)
end

function Factor:size(d)
  if d == 1 or d == 2 then return self.n end
  H.fail("condition: dimension %s out of range for a matrix", tostring(d))
end

function Factor:shape() return {self.n, self.n} end

--- The whole lower-triangular factor as a triangular operator (n×n, made
-- once, for the posterior's covariance operator).
function Factor:cholesky()
  if rawget(self, "full") == nil then
    local T0 = self.T0
    local L = lt.zeros(self.n, self.n)
    L:narrow(1, 1, self.n0):narrow(2, 1, self.n0):copy(lt.is_lazy(T0) and T0:dense() or T0)
    for _, p in ipairs(self.panels) do
      local rows = L:narrow(1, p.offset + 1, p.k)
      rows:narrow(2, 1, p.offset):copy(p.Bt)
      rows:narrow(2, p.offset + 1, p.k):copy(p.C:dense())
    end
    rawset(self, "full", lt.triangular(L, "lower"))
  end
  return rawget(self, "full")
end

--- Ky⁻¹ as an operator whose products solve with the factor.
function Factor:inverse()
  return lt.operator{shape = {self.n, self.n}, psd = true, symmetric = true,
                     name = "Ky⁻¹ (updated Cholesky factor)",
                     matmul = function(X) return (self:solve(X)) end}
end

function Factor:dense() return self:matmul(lt.eye(self.n)) end

------------------------------------------------------ the model's factor --

-- Whether the model's exact path may use a kept factor now.
local function exact_path(model)
  return model.n <= lt.settings.max_cholesky_size
end

--- The updated factor of model's Ky when it has one and it is still its
-- Ky's (same kernel hyperparameters, structure choice and noise), on the
-- exact path; else nil (gp/init.lua's noisy() then builds Ky as usual).
function condition.factor(model)
  local kept = model.chol_factor
  if kept == nil or not exact_path(model) then return nil end
  if not H.fresh(model.chol_factor_state, H.state(model, true)) then return nil end
  return kept
end

local function keep_factor(model, F)
  model.chol_factor = F
  model.chol_factor_state = H.state(model, true)
end

-- The model's factor: kept, or computed from its Ky once (and kept).
local function factor_of(model)
  local F = condition.factor(model)
  if F then return F end
  local cov = model:covariance()
  F = new_factor(cov.noisy(model.noise):cholesky(), model.n)
  keep_factor(model, F)
  return F
end

-- The covariance's entries between two sets of points as a dense matrix.
local function dense(A)
  if lt.is_lazy(A) then return A:dense() end
  return A
end

-- The factor over old and new points: B = L⁻¹·Kon, C = chol(Knn + N − BᵀB).
local function appended_factor(model, F, points, noise_new)
  local cov = model:covariance()
  local Kno = dense(cov.cross(points)) -- k×n
  local k = #points
  local B = F:forward(Kno:t():contiguous()) -- n×k
  local S = dense(cov.test_covariance(points)) - B:t() * B
  if type(noise_new) == "number" then
    S = S + lt.eye(k) * noise_new
  else
    S = S + lt.diag(noise_new):dense()
  end
  -- symmetrise away the rounding of Bᵀ·B before the k×k factorisation
  S = (S + S:t()) * 0.5
  local ok, C = pcall(function() return lt.psd(S):cholesky() end)
  if not ok then
    H.fail("condition: the covariance with the new points is not positive definite (%s)",
           tostring(C))
  end
  return F:append(B:t():contiguous(), C)
end

------------------------------------------------------------------ checks --

local function check_finite_points(points)
  for i, p in ipairs(points) do
    for j, v in ipairs(p) do
      if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
        H.fail("condition: x_new[%d][%d] is %s, expected a finite number", i, j, tostring(v))
      end
    end
  end
end

local function check_finite_vector(v, what)
  for i = 1, v:size(1) do
    local x = v[i]
    if x ~= x or x == math.huge or x == -math.huge then
      H.fail("condition: %s[%d] is %s, expected a finite number", what, i, tostring(x))
    end
  end
end

-- The new points (checked against the model's d), targets and noise.
local function new_data(model, x_new, y_new, noise_new)
  if x_new == nil then H.fail("condition: x_new is missing") end
  local points = H.to_points(x_new, "condition: x_new")
  local d = #model.points[1]
  if #points[1] ~= d then
    H.fail("condition: x_new has %d coordinate%s per point, the model's inputs %d", #points[1],
           #points[1] == 1 and "" or "s", d)
  end
  check_finite_points(points)
  local k = #points
  local y = H.to_vector(y_new, k, "condition: y_new (one target per new point)")
  check_finite_vector(y, "y_new")
  local noise
  if model:per_point_noise() then
    if noise_new == nil then
      H.fail("condition: the model has per-point noise, so the new points need theirs: "
             .. "condition(x_new, y_new, noise_new) with a variance or %d", k)
    end
    noise = H.check_noise(noise_new, k)
  elseif noise_new ~= nil then
    H.fail("condition: noise_new is for models with per-point noise; this model's noise "
           .. "variance %g applies to the new points", model.noise)
  else
    noise = model.noise
  end
  return points, y, noise
end

-- What gp.exact needs to rebuild the model over all points.
local function merged_spec(model, points, y, noise)
  local all = {}
  for i, p in ipairs(model.points) do all[i] = p end
  for _, p in ipairs(points) do all[#all + 1] = p end
  local ys = model.y:totable()
  for _, v in ipairs(y:totable()) do ys[#ys + 1] = v end
  local noise_all = model.noise
  if model:per_point_noise() then
    local values = model.noise:totable()
    local add = type(noise) == "number" and lt.full({#points}, noise) or noise
    for _, v in ipairs(add:totable()) do values[#values + 1] = v end
    noise_all = lt.tensor(values)
  end
  -- Toeplitz and Kronecker structure need regular inputs, which new points
  -- break: the new model chooses again
  local structure = model.structure_choice
  if structure == "toeplitz" or structure == "kron" then structure = "auto" end
  return {x = all, y = lt.tensor(ys), kernel = H.copy(model.kernel), noise = noise_all,
          mean = model.mean_kind, mean_value = model.mean_value,
          fixed = {noise = model.fixed.noise, mean = model.fixed.mean}, structure = structure,
          trace_rank = model.trace_rank, grid = model.grid,
          distributed = model.make_kernel ~= nil or nil,
          -- the hyperparameters are kept as they are (even set outside
          -- their bounds by hand): the model's bounds and priors are
          -- copied onto the new one (keep_hyper), not checked again
          bounds = type(noise_all) == "number" and not model.fixed.noise
                   and {noise = {0, math.huge}} or nil}
end

-- The model's bounds and priors, carried over to the new model.
local function keep_hyper(new, model)
  new.bounds, new.priors, new.hyper_spec = model.bounds, model.priors, model.hyper_spec
end

-- Whether the factor update applies (see the file's comment).
local function updatable(model, k)
  return model.n + k <= lt.settings.max_cholesky_size and model.structure_choice ~= "ski"
         and model.make_kernel == nil
end

--- model:condition(x_new, y_new [, noise_new]) → a new gp.exact model over
-- the model's points and x_new (k points, n×d like x: a tensor or Lua
-- array), with the hyperparameters kept. noise_new: only for per-point
-- noise, where it is required (a variance for all new points or k of
-- them). The model itself is left as it was (it keeps the factor of its
-- Ky, if it had to compute it, for the next call).
local function condition_model(model, x_new, y_new, noise_new)
  local points, y, noise = new_data(model, x_new, y_new, noise_new)
  local spec = merged_spec(model, points, y, noise)
  local F
  if updatable(model, #points) then F = appended_factor(model, factor_of(model), points, noise) end
  local new = H.gp.exact(spec)
  keep_hyper(new, model)
  if F then keep_factor(new, F) end
  return new
end

--- A batch's condition: x_new {b, k, d}, y_new {b, k}, noise_new as
-- gp.exact's per-member noise (b values or {b, k}); each member is
-- conditioned on its own points.
local function condition_batch(model, x_new, y_new, noise_new)
  local b = model.b
  if not (lt.is_tensor(x_new) and x_new:dim() == 3 and x_new:size(1) == b) then
    H.fail("condition: a batch of %d needs x_new {%d, k, d}", b, b)
  end
  local Y = lt.is_tensor(y_new) and y_new or (type(y_new) == "table" and lt.tensor(y_new))
  if not (Y and Y:dim() == 2 and Y:size(1) == b and Y:size(2) == x_new:size(2)) then
    H.fail("condition: a batch of %d with %d new points each needs y_new {%d, %d}", b,
           x_new:size(2), b, x_new:size(2))
  end
  local members = {}
  for i, m in ipairs(model.members) do
    local ni = noise_new
    if lt.is_tensor(noise_new) then ni = noise_new[i] end
    if type(noise_new) == "table" and not lt.is_tensor(noise_new) then ni = noise_new[i] end
    local ok, res = pcall(condition_model, m, x_new[i], Y[i], ni)
    if not ok then
      error(tostring(res):gsub("^lazytensor: gp: ", "lazytensor: gp: member " .. i .. ": "), 0)
    end
    members[i] = res
  end
  return setmetatable({members = members, b = b, n = model.n + x_new:size(2)},
                      getmetatable(model))
end

--- Installs Model:condition and BatchModel:condition. helpers: gp (for
-- gp.exact), state, fresh (the caches' fingerprints), fail, to_points,
-- to_vector, check_noise, copy (an independent copy of a kernel).
function condition.install(Model, BatchModel, helpers)
  H = helpers
  Model.condition = condition_model
  BatchModel.condition = condition_batch
end

return condition
