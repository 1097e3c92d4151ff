--- A gp.kernels kernel evaluated with followed hyperparameters, for the
-- models differentiated by lt.grad (gp.variational, gp.laplace).
--
-- The kernel object gives the structure and the current values; inside an
-- objective each base kernel becomes lt.kernel(A, B, {kind = ..., lengthscale
-- = <tensor>, ...}) with hyperparameters from the parameter table, and the
-- tree's sums and products are elementwise sums and products of the dense
-- matrices (scale(k)'s factor multiplies). Base kinds: rbf, matern12,
-- matern32, matern52, rq, periodic (stationary: k(x, x) is the variance);
-- ARD lengthscales; `dims` (a leaf reads its columns of the inputs, as
-- A·E with E a constant 0/1 selection matrix, so followed inputs stay
-- followed).
--
-- Hyperparameter names: a single base kernel's own (lengthscale, variance,
-- ...); in a tree, "k<i>_<name>" with i the leaf's position in the tree
-- read left to right (scale(k)'s factor a leaf with a variance).
local lt = require "lazytensor"
local hyper = require "lazytensor.gp.hyper"

local ltkernel = {}

local KINDS = {
  rbf = {"lengthscale", "variance"}, matern12 = {"lengthscale", "variance"},
  matern32 = {"lengthscale", "variance"}, matern52 = {"lengthscale", "variance"},
  rq = {"lengthscale", "alpha", "variance"}, periodic = {"lengthscale", "period", "variance"},
  scale = {"variance"},
}

--- Raises fail(...) unless every leaf is a supported base kernel or a
-- scale factor inside a product.
function ltkernel.check(kernel, fail, inside_product)
  if kernel.children then
    for _, c in ipairs(kernel.children) do ltkernel.check(c, fail, kernel.kind == "product") end
    return
  end
  if kernel.kind == "scale" and not inside_product then
    fail("a scale factor must multiply a kernel (gp.kernels.scale(k))")
  end
  if not KINDS[kernel.kind] and kernel.kind ~= "custom" then
    fail("the kernel's leaves must be of kind rbf, matern12, matern32, matern52, rq, periodic "
         .. "or custom (or scale factors), got %s", tostring(kernel.kind))
  end
end

-- The leaves, left to right.
local function leaves(kernel, out)
  out = out or {}
  if kernel.children then
    for _, c in ipairs(kernel.children) do leaves(c, out) end
  else
    out[#out + 1] = kernel
  end
  return out
end

--- The hyperparameters: a list of {name, leaf, param, free} in a fixed order.
function ltkernel.hypers(kernel)
  local list = leaves(kernel)
  local out = {}
  for i, leaf in ipairs(list) do
    local prefix = #list == 1 and not kernel.children and "" or ("k" .. i .. "_")
    -- a custom kernel's (gp.kernels.custom) are its own, by name
    for _, param in ipairs(KINDS[leaf.kind] or leaf.names) do
      out[#out + 1] = {name = prefix .. param, leaf = leaf, param = param,
                       free = not leaf.fixed[param]}
    end
  end
  return out
end

--- name → current value (a number, or a list for ARD).
function ltkernel.values(kernel)
  local out = {}
  for _, h in ipairs(ltkernel.hypers(kernel)) do out[h.name] = h.leaf.values[h.param] end
  return out
end

--- For the log-space models (gp.exact, gp.sgpr, gp.multitask: every kind
-- of gp.kernels): name → value (a number, or a flat list: ARD's, the
-- spectral mixture's matrices row by row), the set of the free names, and
-- the names of kernel:parameters()'s entries, in its order.
function ltkernel.log_space(kernel)
  local values, free, name_of = {}, {}, {}
  for _, h in ipairs(ltkernel.hypers(kernel)) do
    local v = h.leaf.values[h.param]
    if type(v) == "table" and type(v[1]) == "table" then
      local flat = {}
      for _, row in ipairs(v) do
        for _, x in ipairs(row) do flat[#flat + 1] = x end
      end
      v = flat
    end
    values[h.name] = v
    if h.free then free[h.name] = true end
    name_of[h.leaf] = name_of[h.leaf] or {}
    name_of[h.leaf][h.param] = h.name
  end
  local entries = {}
  for i, p in ipairs(kernel:parameters()) do entries[i] = name_of[p.kernel][p.name] end
  return values, free, entries
end

--- Stores a value (a number or a list) under its name.
function ltkernel.set(kernel, name, value)
  for _, h in ipairs(ltkernel.hypers(kernel)) do
    if h.name == name then
      h.leaf.values[h.param] = value
      return
    end
  end
  error("lazytensor: gp: no kernel hyperparameter " .. tostring(name), 0)
end

--- Raises fail(...) unless every entry of the inputs X (n×d) is finite.
function ltkernel.check_inputs(X, fail, what)
  for i, row in ipairs(X:totable()) do
    for j, v in ipairs(row) do
      if v ~= v or v == math.huge or v == -math.huge then
        fail("%s[%d][%d] is %s: inputs must be finite", what, i, j, tostring(v))
      end
    end
  end
end

local Evaluator = {}
Evaluator.__index = Evaluator

--- The kernel at the raw parameters raw (a table key → raw value, keys
-- "log_<name>" or "raw_<name>" as gp/hyper.lua's; nil or a missing key: the
-- kernel's own value, a constant).
function ltkernel.evaluator(kernel, raw, bounds)
  bounds = bounds or {}
  local value, leaf_value = {}, {}
  for _, h in ipairs(ltkernel.hypers(kernel)) do
    local r = raw and raw[hyper.key(bounds, h.name)]
    local v
    if r ~= nil and h.free then
      v = hyper.from_raw(bounds, h.name, r)
    else
      v = h.leaf.values[h.param]
      if type(v) == "table" then v = lt.tensor(v) end
    end
    value[h.name] = v
    leaf_value[h.leaf] = leaf_value[h.leaf] or {}
    leaf_value[h.leaf][h.param] = v
  end
  return setmetatable({kernel = kernel, value = value, leaf_value = leaf_value}, Evaluator)
end

--- A hyperparameter's value (followed where free).
function Evaluator:get(name)
  return self.value[name]
end

-- A·E: the leaf's active columns of the inputs A (n×d).
local function project(leaf, A)
  if not leaf.dims or A == nil then return A end
  local E = lt.zeros(A:size(2), #leaf.dims)
  for q, d in ipairs(leaf.dims) do E:set(d, q, 1) end
  return A * E
end

-- A leaf's lt.kernel spec.
function Evaluator:spec(leaf)
  local spec = {kind = leaf.kind}
  for param, v in pairs(self.leaf_value[leaf]) do spec[param] = v end
  return spec
end

-- The matrix of a subtree (dense), or {factor = s} for a scale leaf.
function Evaluator:node(k, A, B)
  if not k.children then
    if k.kind == "scale" then return {factor = self.leaf_value[k].variance} end
    if k.kind == "custom" then -- k(x1, x2, p), written with lazytensor operations
      local X1 = project(k, A)
      return k.k(X1, B and project(k, B) or X1, self.leaf_value[k]):dense()
    end
    if B then return lt.kernel(project(k, A), project(k, B), self:spec(k)):dense() end
    return lt.kernel(project(k, A), self:spec(k)):dense()
  end
  local acc, factor = nil, 1
  for _, c in ipairs(k.children) do
    local v = self:node(c, A, B)
    if type(v) == "table" and v.factor ~= nil then
      factor = factor * v.factor
    elseif acc == nil then
      acc = v
    elseif k.kind == "sum" then
      acc = acc + v
    else
      acc = acc:cmul(v)
    end
  end
  if factor ~= 1 then acc = acc * factor end
  return acc
end

--- k(A, B) (dense), k(A, A) when B is nil.
function Evaluator:matrix(A, B)
  return self:node(self.kernel, A, B)
end

-- Whether a custom kernel is in the tree (its k(x, x) depends on x).
local function has_custom(k)
  if k.kind == "custom" then return true end
  for _, c in ipairs(k.children or {}) do
    if has_custom(c) then return true end
  end
  return false
end

-- k(x, x) of a subtree: each stationary leaf's variance combined (a custom
-- leaf, whose k(x, x) depends on x, counts as 1: a scale for jitters).
function Evaluator:diag_value(k)
  if not k.children then
    if k.kind == "custom" then return 1 end
    return self.leaf_value[k].variance
  end
  local acc
  for _, c in ipairs(k.children) do
    local v = self:diag_value(c)
    if acc == nil then
      acc = v
    elseif k.kind == "sum" then
      acc = acc + v
    else
      acc = acc * v
    end
  end
  return acc
end

--- k(x, x) at the points A (n×d; a 1-d tensor of n): the variances of
-- stationary kinds, the diagonal of k(A, A) with a custom kernel.
function Evaluator:diag(A)
  if has_custom(self.kernel) then return self:matrix(A):diagonal() end
  return lt.full({A:size(1)}, 1) * self:diag_value(self.kernel)
end

--- k(A, A) as an operator: the lazy lt.kernel of a single base kernel,
-- the dense matrix of a tree.
function Evaluator:operator(A)
  if not self.kernel.children and self.kernel.kind ~= "custom" then
    return lt.kernel(project(self.kernel, A), self:spec(self.kernel))
  end
  return self:matrix(A)
end

return ltkernel
