--- Custom kernels: gp.kernels.custom{params = {...}, k = function(x1, x2, p) ... end}.
--
-- A kernel written in Lua from lazytensor operations: k(x1, x2, p) gets the
-- n×d and m×d point tensors and p, its hyperparameters (0-d tensors, or
-- 1-d tensors for lists), and returns the n×m covariance (a dense tensor
-- or any operator). It is a kernel like the others (+, *, gp.kernels.scale,
-- positive hyperparameters learnt in log space, fixed = {...}), and a model
-- whose kernel holds one is differentiated by lt.grad: the covariance of
-- the whole tree is rebuilt from tensor hyperparameters (the built-in
-- kinds as lt.kernel with tensor specs, sums as +, products as lt.mul,
-- scales as products by a number), and the marginal likelihood's gradient
-- comes from lt.grad of lt.mvn's log_prob — no derivative written by hand,
-- here or in k.
--
-- This file gives the kernel (custom.new), its covariance for gp.exact
-- (custom.build: the cov interface of gp/structure.lua, with its own
-- mll_and_grad), and custom.contains (does a tree hold one?).

local lt = require "lazytensor"

local custom = {}

local function fail(fmt, ...) error("lazytensor: gp: " .. string.format(fmt, ...), 0) end

local log = math.log

--- The kernel object (its metatable is gp.kernels' Kernel).
function custom.new(Kernel, spec)
  if type(spec) ~= "table" then fail("custom expects a table {params, k}, got %s", type(spec)) end
  for key in pairs(spec) do
    if key ~= "params" and key ~= "k" and key ~= "fixed" and key ~= "name" then
      fail("custom: unknown key '%s' (expected params, k, fixed, name)", tostring(key))
    end
  end
  if type(spec.k) ~= "function" then
    fail("custom: k must be a function(x1, x2, p), got %s", type(spec.k))
  end
  local params = spec.params or {}
  if type(params) ~= "table" then fail("custom: params must be a table, got %s", type(params)) end
  local names, values = {}, {}
  for name, v in pairs(params) do
    if type(name) ~= "string" then fail("custom: parameter names must be strings") end
    names[#names + 1] = name
    if lt.is_tensor(v) then v = v:totable() end
    if type(v) == "table" then
      local list = {}
      for i, x in ipairs(v) do
        if type(x) ~= "number" or not (x > 0) or x == math.huge then -- luacheck: ignore 581
          fail("custom: parameter %s[%d] must be a positive number, got %s", name, i,
               tostring(x))
        end
        list[i] = x
      end
      if #list == 0 then fail("custom: parameter %s is an empty list", name) end
      values[name] = list
    elseif type(v) ~= "number" or not (v > 0) or v == math.huge then -- luacheck: ignore 581
      fail("custom: parameter %s must be a positive number (or a list of them), got %s", name,
           tostring(v))
    else
      values[name] = v
    end
  end
  table.sort(names) -- a fixed order for the log-parameter vector
  local fixed = {}
  for name, on in pairs(spec.fixed or {}) do
    if values[name] == nil then
      fail("custom has no hyperparameter '%s' (fixed)", tostring(name))
    end
    if on then fixed[name] = true end
  end
  local def = {custom = true, stationary = false, value = function(self, x, y, grad)
    if grad then
      fail("custom: a custom kernel is differentiated by lt.grad, in gp.exact; this model "
           .. "computes its kernel's derivatives itself and takes the built-in kinds only")
    end
    return custom.value(self, x, y)
  end}
  return setmetatable({kind = "custom", names = names, values = values, fixed = fixed,
                       k = spec.k, label = spec.name or "custom", def = def}, Kernel)
end

--- True when the kernel tree holds a custom kernel.
function custom.contains(kernel)
  if kernel.kind == "custom" then return true end
  for _, c in ipairs(kernel.children or {}) do
    if custom.contains(c) then return true end
  end
  return false
end

-- ------------------------------------------------ the tree from tensors

-- The columns dims of an n×d tensor of points (all when dims is nil) as
-- X·E, E a constant 0/1 selection: inside lt.grad followed points stay
-- followed (a copy into a view would be refused).
local function columns_of(X, dims)
  if not dims then return X end
  local E = lt.zeros(X:size(2), #dims)
  for q, d in ipairs(dims) do E:set(d, q, 1) end
  return X * E
end

-- The points of the active dimensions as a tensor (all when dims is nil);
-- a tensor of points is kept (followed inside lt.grad).
local function points_tensor(points, dims)
  if lt.is_tensor(points) then return columns_of(points, dims) end
  if not dims then return lt.tensor(points) end
  local rows = {}
  for i, p in ipairs(points) do
    local row = {}
    for q, d in ipairs(dims) do row[q] = p[d] end
    rows[i] = row
  end
  return lt.tensor(rows)
end

-- A kernel's hyperparameters as tensors: the free ones from theta (log
-- values, in Kernel:parameters() order, one tensor per name: 0-d, or 1-d
-- for a list), the fixed ones as their values.
local function tensor_values(kernel, theta)
  local out = {}
  for _, name in ipairs(kernel.names) do
    local th = theta[kernel] and theta[kernel][name]
    if th ~= nil then
      out[name] = th:exp()
    else
      local v = kernel.values[name]
      out[name] = type(v) == "table" and lt.tensor(v) or v
    end
  end
  return out
end

-- lt.kernel's spec keys for a built-in kind's hyperparameters.
local SPEC_NAMES = {"lengthscale", "variance", "period", "alpha", "offset", "weights", "means",
                    "scales"}

-- The covariance of kernel between the point lists P1 and P2 (P2 nil: P1
-- with itself), from tensor hyperparameters (theta: see tensor_values).
local function tree_operator(kernel, P1, P2, theta, cache)
  local function points(P, dims)
    local key = (P == P1 and "1:" or "2:") .. (dims and table.concat(dims, ",") or "all")
    if not cache[key] then
      if lt.is_tensor(P) then -- a tensor (followed, e.g. sgpr's inducing points): P·E
        if dims then
          local E = lt.zeros(P:size(2), #dims)
          for q, d in ipairs(dims) do E:set(d, q, 1) end
          cache[key] = P * E
        else
          cache[key] = P
        end
      else
        cache[key] = points_tensor(P, dims)
      end
    end
    return cache[key]
  end
  local function build(k)
    if k.kind == "sum" or k.kind == "product" then
      local K, s = nil, nil
      for _, c in ipairs(k.children) do
        if k.kind == "product" and c.kind == "scale" then
          local v = tensor_values(c, theta).variance
          s = s and s * v or v
        else
          local op = build(c)
          K = not K and op or k.kind == "sum" and K + op or lt.mul(K, op)
        end
      end
      if K == nil then fail("custom: a constant kernel (scale factors alone)") end
      return s and K * s or K
    end
    if k.kind == "scale" then fail("custom: a constant kernel (a scale factor alone)") end
    local values = tensor_values(k, theta)
    local X1 = points(P1, k.dims)
    local X2 = P2 and points(P2, k.dims) or X1
    if k.kind == "custom" then
      local K = k.k(X1, X2, values)
      if not lt.is_tensor(K) then
        fail("custom: k must return a tensor or an operator, got %s", type(K))
      end
      local want = {X1:size(1), X2:size(1)}
      local shape = K:shape()
      if #shape ~= 2 or shape[1] ~= want[1] or shape[2] ~= want[2] then
        fail("custom: k returned a %s of shape %s for %dx%d points", lt.type(K),
             table.concat(shape, "x"), want[1], want[2])
      end
      return K
    end
    local spec = {kind = k.kind, degree = k.degree}
    for _, name in ipairs(SPEC_NAMES) do spec[name] = values[name] end
    if spec.weights then spec.num_mixtures = lt.is_tensor(spec.weights) and
      spec.weights:numel() or #spec.weights end
    if P2 then return lt.kernel(X1, X2, spec) end
    return lt.kernel(X1, spec)
  end
  return build(kernel)
end

-- Every free hyperparameter of the tree as a tensor of log values:
-- {[kernel] = {name = tensor}} (0-d, or 1-d / 2-d for lists and matrices).
local function log_theta(kernel)
  local theta = {}
  local function walk(k)
    if k.children then
      for _, c in ipairs(k.children) do walk(c) end
      return
    end
    for _, name in ipairs(k.names) do
      if not k.fixed[name] then
        local v = k.values[name]
        local t
        if type(v) == "table" and type(v[1]) == "table" then
          local rows = {}
          for i, row in ipairs(v) do
            rows[i] = {}
            for j, x in ipairs(row) do rows[i][j] = log(x) end
          end
          t = lt.tensor(rows)
        elseif type(v) == "table" then
          local list = {}
          for i, x in ipairs(v) do list[i] = log(x) end
          t = lt.tensor(list)
        else
          t = log(v)
        end
        theta[k] = theta[k] or {}
        theta[k][name] = t
      end
    end
  end
  walk(kernel)
  return theta
end

-- The gradient table's entries in Kernel:parameters() order (its vector).
local function flatten_grad(kernel, grads, out)
  for _, par in ipairs(kernel:parameters()) do
    local g = grads[par.kernel][par.name]
    if type(g) == "number" then out[#out + 1] = g
    elseif par.col then out[#out + 1] = g:get(par.index, par.col)
    elseif par.index then out[#out + 1] = g[par.index]
    else out[#out + 1] = g:sum() end
  end
  return out
end

-- lt.grad's params: the kernel tree's log hyperparameters (keys are the
-- kernel objects: grads come back keyed the same way), log σ², the mean.
local function model_params(model)
  local p = {kernel = {}, index = {}}
  local theta = log_theta(model.kernel)
  local i = 0
  for k, names in pairs(theta) do
    i = i + 1
    p.kernel[i] = names
    p.index[i] = k
  end
  local params = {kernel = p.kernel}
  if not model.fixed.noise then params.log_noise = log(model.noise) end
  if model.mean_kind == "constant" and not model.fixed.mean then params.mean = model.mean_value end
  return params, p.index
end

--- The covariance of a tree with custom kernels over points, for gp.exact
-- (gp/structure.lua's interface): K at the current hyperparameters, the
-- cross- and test covariances, and mll_and_grad by lt.grad.
-- opts.structure = "ski" (opts.grid): K ≈ W·k(G, G)·Wᵀ, interpolated from
-- the grid points G (gp/ski.lua's custom_grid), test points inside the
-- grid interpolated the same way.
function custom.build(kernel, points, opts)
  opts = opts or {}
  local cache = {}
  local theta = {} -- the current values: no free parameter replaced
  local grid = opts.structure == "ski" and require("lazytensor.gp.ski").custom_grid(points, opts)
  -- K at the hyperparameters th (followed inside lt.grad)
  local function covariance(th)
    if grid then
      local Kgrid = lt.psd(tree_operator(kernel, grid.G, nil, th, cache))
      return lt.psd(grid.W * Kgrid * grid.W:t()), Kgrid
    end
    return lt.psd(tree_operator(kernel, points, nil, th, cache))
  end
  local K, Kgrid = covariance(theta)
  local cov = {
    kind = "custom",
    explain = grid and grid.explain .. ", its gradients by lt.grad" or
              string.format("custom: %d inputs, a kernel written in Lua (gp.kernels.custom): K "
                            .. "is what its k returns (%s), its gradients by lt.grad", #points,
                            lt.type(K)),
    K = K,
  }
  function cov.noisy(noise) return K:add_diag(noise), {} end
  function cov.cross(star)
    local Ws = grid and grid.interp(star)
    if Ws then return Ws * Kgrid * grid.W:t() end
    return tree_operator(kernel, star, points, theta, {})
  end
  function cov.test_covariance(star)
    local Ws = grid and grid.interp(star)
    if Ws then return lt.psd(Ws * Kgrid * Ws:t()) end
    return lt.psd(tree_operator(kernel, star, nil, theta, {}))
  end
  function cov.noise_explain(per_point)
    return per_point and "per-point noise: Ky = K + diag(σ²ᵢ)" or "noise σ²: Ky = K + σ²I"
  end
  -- The marginal likelihood and its gradient with respect to the model's
  -- vector (kernel log-hyperparameters, log σ², the mean), by lt.grad.
  function cov.mll_and_grad(model)
    local params, index = model_params(model)
    local n = model.n
    local y = model.y
    local function log_likelihood(p)
      local th = {}
      for i, k in ipairs(index) do th[k] = p.kernel[i] end
      local Kp = covariance(th)
      local noise = p.log_noise and p.log_noise:exp() or model.noise
      local mean = p.mean or model.mean_value
      return lt.mvn(lt.zeros(n), Kp:add_diag(noise)):log_prob(y - mean)
    end
    local grads, value = lt.grad(log_likelihood)(params)
    local by_kernel = {}
    for i, k in ipairs(index) do by_kernel[k] = grads.kernel[i] end
    local g = flatten_grad(kernel, by_kernel, {})
    if params.log_noise then g[#g + 1] = grads.log_noise end
    if params.mean then g[#g + 1] = grads.mean end
    return value, g, {method = n <= lt.settings.max_cholesky_size and "cholesky" or "slq"}
  end
  return cov
end

-- ------------------------------------------- shared with the other models
-- (gp.sgpr, gp.multitask, structure = "ski"): each writes its objective
-- with lazytensor operations on the kernel's covariances and hands it to
-- lt.grad.

--- lt.grad's parameter list for the kernel tree: a list of {name = log
-- value} tables (one per kernel with free hyperparameters) and the list of
-- those kernels, in the same order.
function custom.kernel_params(kernel)
  local theta = log_theta(kernel)
  local list, index = {}, {}
  for k, names in pairs(theta) do
    list[#list + 1] = names
    index[#index + 1] = k
  end
  return list, index
end

--- The covariance of the tree between P1 and P2 (point arrays or n×d
-- tensors, followed ones included; P2 nil: P1 with itself) at the log
-- hyperparameters p_kernel (lt.grad's view of kernel_params' list; nil: the
-- current values). cache: a table shared by the calls on the same points.
function custom.operator(kernel, index, p_kernel, P1, P2, cache)
  local th = {}
  if p_kernel then
    for i, k in ipairs(index) do th[k] = p_kernel[i] end
  end
  return tree_operator(kernel, P1, P2, th, cache or {})
end

--- The kernel's part of a gradient vector (Kernel:parameters() order) from
-- lt.grad's gradients of kernel_params' list.
function custom.kernel_grad(kernel, index, grads_kernel)
  local by_kernel = {}
  for i, k in ipairs(index) do by_kernel[k] = grads_kernel[i] end
  return flatten_grad(kernel, by_kernel, {})
end

--- k(x, y) for two points (coordinate arrays): prior variances, dense use.
function custom.value(kernel, x, y)
  local K = kernel.k(lt.tensor{x}, lt.tensor{y}, tensor_values(kernel, {}))
  return K:get(1, 1)
end

return custom
