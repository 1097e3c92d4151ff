--- A gp.kernels kernel evaluated with followed hyperparameters, for the
-- models differentiated by lt.grad (gp.variational, gp.laplace).
--
-- The kernel object gives the structure and the current values; inside an
-- objective each base kernel becomes lt.kernel(A, B, {kind = ..., lengthscale
-- = <tensor>, ...}) with hyperparameters from the parameter table, and the
-- tree's sums and products are elementwise sums and products of the dense
-- matrices (scale(k)'s factor multiplies). Base kinds: rbf, matern12,
-- matern32, matern52, rq, periodic, cosine, spectral_mixture (stationary:
-- k(x, x) is the variance, Σ weights for the mixture), linear and
-- polynomial (v·(xᵀx + c)^p: k(x, x) from each row's squared norm);
-- ARD lengthscales; `dims` (a leaf reads its columns of the inputs, as
-- A·E with E a constant 0/1 selection matrix, so followed inputs stay
-- followed).
--
-- Hyperparameter names: a single base kernel's own (lengthscale, variance,
-- ...); in a tree, "k<i>_<name>" with i the leaf's position in the tree
-- read left to right (scale(k)'s factor a leaf with a variance). The
-- spectral mixture's means and scales (Q×d matrices in the kernel) are flat
-- lists here, row by row, as the ARD lengthscales are lists: each entry a
-- hyperparameter, bounds and priors by the list's name.
local lt = require "lazytensor"
local hyper = require "lazytensor.gp.hyper"

local ltkernel = {}

local KINDS = {
  rbf = {"lengthscale", "variance"}, matern12 = {"lengthscale", "variance"},
  matern32 = {"lengthscale", "variance"}, matern52 = {"lengthscale", "variance"},
  rq = {"lengthscale", "alpha", "variance"}, periodic = {"lengthscale", "period", "variance"},
  cosine = {"period", "variance"}, spectral_mixture = {"weights", "means", "scales"},
  linear = {"variance", "offset"}, polynomial = {"variance", "offset"},
  scale = {"variance"},
}

-- Kinds whose k(x, x) depends on x.
local INNER_PRODUCT = {linear = true, polynomial = true}

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
    fail("the kernel's leaves must be of kind rbf, matern12, matern32, matern52, rq, periodic, "
         .. "cosine, spectral_mixture, linear, polynomial or custom (or scale factors), got %s",
         tostring(kernel.kind))
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

-- A matrix (a list of rows) as a flat list, row by row; other values as they are.
local function flat(v)
  if type(v) ~= "table" or type(v[1]) ~= "table" then return v end
  local out = {}
  for _, row in ipairs(v) do
    for _, x in ipairs(row) do out[#out + 1] = x end
  end
  return out
end

-- A flat list back into rows of `cols` entries.
local function rows_of(list, cols)
  local out = {}
  for i, x in ipairs(list) do
    local r = math.floor((i - 1) / cols) + 1
    out[r] = out[r] or {}
    out[r][#out[r] + 1] = x
  end
  return out
end

--- The hyperparameters: a list of {name, node, param, value, free} in a
-- fixed order (node: the kernel's leaf; value: its current value, a number
-- or a flat list — ARD's, the spectral mixture's matrices row by row).
function ltkernel.hypers(kernel)
  local list = leaves(kernel)
  local out = {}
  for i, leaf in ipairs(list) do
    local prefix = #list == 1 and not kernel.children and "" or ("k" .. i .. "_")
    -- a custom kernel's (gp.kernels.custom) are its own, by name
    for _, param in ipairs(KINDS[leaf.kind] or leaf.names) do
      out[#out + 1] = {name = prefix .. param, node = leaf, param = param,
                       value = flat(leaf.values[param]), free = not leaf.fixed[param]}
    end
  end
  return out
end

--- name → current value (a number, or a list: ARD's, the spectral
-- mixture's matrices flattened row by row).
function ltkernel.values(kernel)
  local out = {}
  for _, h in ipairs(ltkernel.hypers(kernel)) do out[h.name] = h.value end
  return out
end

--- For the log-space models (gp.exact, gp.sgpr, gp.multitask: every kind
-- of gp.kernels): name → value (a number, or a flat list: ARD's, the
-- spectral mixture's matrices row by row), the set of the free names, and
-- the names of kernel:parameters()'s entries, in its order.
function ltkernel.log_space(kernel)
  local values, free, name_of = {}, {}, {}
  for _, h in ipairs(ltkernel.hypers(kernel)) do
    values[h.name] = h.value
    if h.free then free[h.name] = true end
    name_of[h.node] = name_of[h.node] or {}
    name_of[h.node][h.param] = h.name
  end
  local entries = {}
  for i, p in ipairs(kernel:parameters()) do entries[i] = name_of[p.kernel][p.name] end
  return values, free, entries
end

--- Stores a value (a number or a list; a flat list for a matrix) under its name.
function ltkernel.set(kernel, name, value)
  for _, h in ipairs(ltkernel.hypers(kernel)) do
    if h.name == name then
      local old = h.node.values[h.param]
      if type(old) == "table" and type(old[1]) == "table" and type(value[1]) ~= "table" then
        value = rows_of(value, #old[1])
      end
      h.node.values[h.param] = value
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
      local cur = h.node.values[h.param]
      if type(cur) == "table" and type(cur[1]) == "table" then
        v = v:reshape(#cur, #cur[1]) -- the mixture's Q×d matrix, from its flat list
      end
    else
      v = h.node.values[h.param]
      if type(v) == "table" then v = lt.tensor(v) end
    end
    value[h.name] = v
    leaf_value[h.node] = leaf_value[h.node] or {}
    leaf_value[h.node][h.param] = v
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

-- A leaf's lt.kernel spec (with polynomial's degree, the mixture's Q).
function Evaluator:spec(leaf)
  local spec = {kind = leaf.kind}
  for param, v in pairs(self.leaf_value[leaf]) do spec[param] = v end
  if leaf.kind == "polynomial" then spec.degree = leaf.degree end
  if leaf.kind == "spectral_mixture" then spec.num_mixtures = #leaf.values.weights end
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

-- The sum of a mixture's weights (followed: a 1-d tensor; else a list).
local function total(w)
  if lt.is_tensor(w) then return w:sum() end
  local s = 0
  for _, x in ipairs(w) do s = s + x end
  return s
end

-- k(x, x) of a leaf with no dependence on x: a stationary leaf's variance
-- (Σ weights for the mixture); nil for the kinds whose k(x, x) varies.
function Evaluator:leaf_diag_value(k)
  if k.kind == "custom" or INNER_PRODUCT[k.kind] then return nil end
  if k.kind == "spectral_mixture" then return total(self.leaf_value[k].weights) end
  return self.leaf_value[k].variance
end

-- Combines a tree's children's values (sum or product); `mul` the product.
local function combine(kind, values, mul)
  local acc
  for _, v in ipairs(values) do
    if acc == nil then
      acc = v
    elseif kind == "sum" then
      acc = acc + v
    else
      acc = mul(acc, v)
    end
  end
  return acc
end

-- k(x, x) of a subtree as one number, a scale (the jitter's): each leaf's
-- value as leaf_diag_value's, an inner-product leaf's variance, a custom
-- leaf 1.
function Evaluator:diag_value(k)
  if not k.children then
    if k.kind == "custom" then return 1 end
    return self:leaf_diag_value(k) or self.leaf_value[k].variance
  end
  local values = {}
  for i, c in ipairs(k.children) do values[i] = self:diag_value(c) end
  return combine(k.kind, values, function(a, b) return a * b end)
end

-- k(x, x) at the rows of A of a subtree: a number (or a 0-d tensor) where
-- it does not depend on x, else an n-vector: v·(‖x‖² + c)^p of an
-- inner-product leaf, the diagonal of a custom leaf's matrix.
function Evaluator:diag_node(k, A)
  if not k.children then
    local c = self:leaf_diag_value(k)
    if c ~= nil then return c end
    if k.kind == "custom" then return self:node(k, A):diagonal() end
    local P, p = project(k, A), self.leaf_value[k]
    local t = P:cmul(P):sum(2) + p.offset
    if k.kind == "polynomial" then t = t:pow(k.degree) end
    return t * p.variance
  end
  local values = {}
  for i, c in ipairs(k.children) do values[i] = self:diag_node(c, A) end
  return combine(k.kind, values, function(a, b)
    if lt.is_tensor(a) and a:dim() == 1 and lt.is_tensor(b) and b:dim() == 1 then
      return a:cmul(b)
    end
    return a * b
  end)
end

--- k(x, x) at the points A (n×d): an n-vector.
function Evaluator:diag(A)
  local v = self:diag_node(self.kernel, A)
  if lt.is_tensor(v) and v:dim() == 1 then return v end
  return lt.full({A:size(1)}, 1) * v
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
