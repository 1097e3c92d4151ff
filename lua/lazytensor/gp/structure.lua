--- How lazytensor.gp turns a kernel and its inputs into an operator.
--
-- The GP code never names a structure when it computes: it asks a
-- "covariance" built here for its operator K, for Ky = K + noise with the
-- links from Ky's parameters to the hyperparameters, cross-covariances and
-- prior variances, and then only calls the function API (inv_quad_logdet
-- with gradients, solve, matmul). The choice:
--   * regularly spaced 1-d inputs, stationary kernel  → Toeplitz (O(n) memory);
--   * inputs forming a full grid (in Kronecker order), separable kernel
--                                                       → Kronecker product;
--   * inputs on a subset of such a grid (or permuted)   → Kronecker product
--                                    seen through a row selection (an operator);
--   * otherwise (scattered inputs, or a grid with a non-separable kernel):
--       - "kernel": when every base kernel in the tree is of a kind
--         lt.kernel computes in C (rbf, matern12/32/52, periodic, rq,
--         linear, polynomial, cosine, spectral_mixture; ARD lengthscales
--         too; each over its active dimensions), K is the
--         tree as C operators: lt.kernel for a base kernel, lt.add for a
--         sum, lt.mul (the lazy Hadamard product) for a product, and
--         kernels.scale's factor folded into the base kernels' variances
--         (see "kernel (C, lazy)" below). Entries on demand, products a row
--         block (a Hadamard product: a tile) at a time, O(n) memory beyond
--         the n×d inputs, so the iterative path scales to n in the tens of
--         thousands;
--       - "dense": anything else (a scale factor on its own: a constant
--         kernel) builds the n×n kernel matrix and its derivatives by Lua
--         loops (n² memory).
-- opts.structure = "dense" forces the dense matrices, "kernel" insists on
-- the C operators (an error when the kernel has none).
--
-- Gradients: cov.noisy(noise) returns Ky and its links, a list of
--   {leaf = an operator under Ky, name = one of its parameters,
--    d = {[p] = ∂value/∂log θ_p}, noise = ∂value/∂log σ²}
-- (each derivative a number, a tensor of the parameter's shape, or a
-- function of the parameter's gradient giving the product). The model takes
-- Ky's gradients from inv_quad_logdet{grad = true} and chains them through
-- the links: lt.kernel's own hyperparameters, the Toeplitz column from the
-- kernel at the lags, the Kronecker factors along the axes, the dense
-- matrix — whatever Ky is made of.
local lt = require "lazytensor"

local structure = {}

local abs, max = math.abs, math.max
local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

-- Relative tolerance for "regularly spaced" and for separability checks:
-- data files round their inputs (co2's months to 4 decimals).
local SPACING_TOL = 1e-3
local SEPARABLE_TOL = 1e-9

---------------------------------------------------------------- helpers --

-- How a lazy Ky is solved (the same for several structures), with K's
-- products named.
local function lazy_sum_paths(products)
  return "Cholesky of its dense form up to max_cholesky_size, CG with " .. products .. " above"
end

local function grads_buffer(m)
  local g = {}
  for i = 1, m do g[i] = 0 end
  return g
end

--- Dense K (n1×n2) and, if wanted, the m derivative matrices, by loops.
local function kernel_dense(kernel, P1, P2, want_grads)
  local m = kernel:count()
  local K, dK = {}, {}
  if want_grads then
    for p = 1, m do dK[p] = {} end
  end
  local g = want_grads and grads_buffer(m) or nil
  for i = 1, #P1 do
    local row = {}
    local drows = {}
    if want_grads then
      for p = 1, m do drows[p] = {} end
    end
    for j = 1, #P2 do
      row[j] = kernel:value(P1[i], P2[j], g, 0)
      if want_grads then
        for p = 1, m do drows[p][j] = g[p] end
      end
    end
    K[i] = row
    if want_grads then
      for p = 1, m do dK[p][i] = drows[p] end
    end
  end
  local dKt
  if want_grads then
    dKt = {}
    for p = 1, m do dKt[p] = lt.tensor(dK[p]) end
  end
  return lt.tensor(K), dKt
end

--- The prior covariance of test points, as an n*×n* matrix (PSD).
local function dense_test_covariance(kernel, star)
  return lt.psd((kernel_dense(kernel, star, star, false)))
end

-- K + diag(σ²ᵢ) for fixed per-point variances: a lazy sum (PSD).
local function K_plus_diag(K, noise)
  return K:add_diag(noise)
end

-- K + σ²I with σ² a leaf of its own (an identity operator), unless a
-- structure rule folds it in (Toeplitz, Kronecker): Ky, and the identity
-- when it is still there.
local function noisy_sum(K, noise)
  local N = lt.identity(K:size(1), noise)
  local Ky = K + N
  if lt.type(Ky) ~= "sum" then return Ky, nil end
  return Ky, N
end

--- The stationary kernel at lags 0, h, 2h, ... (and its derivatives).
local function lag_columns(kernel, x0, h, n, want_grads)
  local m = kernel:count()
  local c, dc = {}, {}
  for p = 1, m do dc[p] = {} end
  local g = want_grads and grads_buffer(m) or nil
  local origin = {x0}
  for j = 1, n do
    c[j] = kernel:value(origin, {x0 + (j - 1) * h}, g, 0)
    if want_grads then
      for p = 1, m do dc[p][j] = g[p] end
    end
  end
  return c, dc
end

--- x0, h when the 1-d points are regularly spaced in increasing order.
local function regular_spacing(points)
  local n = #points
  if n < 3 or #points[1] ~= 1 then return nil end
  local x0 = points[1][1]
  local h = (points[n][1] - x0) / (n - 1)
  if not (h > 0) then return nil end -- luacheck: ignore 581 (NaN)
  for i = 2, n do
    if abs(points[i][1] - (x0 + (i - 1) * h)) > SPACING_TOL * h then return nil end
  end
  return x0, h
end

--- Sorted distinct values per dimension, and each point's position on that
-- grid (1-based, first dimension slowest, as lt.kron orders entries).
local function grid_of(points)
  local d = #points[1]
  if d < 2 then return nil end
  local axes, lookup = {}, {}
  for k = 1, d do
    local seen, vals = {}, {}
    for i = 1, #points do
      local v = points[i][k]
      if not seen[v] then
        seen[v] = true
        vals[#vals + 1] = v
      end
    end
    table.sort(vals)
    axes[k] = vals
    lookup[k] = {}
    for i, v in ipairs(vals) do lookup[k][v] = i end
  end
  -- Too sparse to be a grid worth using past 50 cells a point. The test is
  -- made after each factor, so size stays below 50·n² and never wraps
  -- (Lua 5.3+ integers do: 30 points in 13-d have 30^13 cells).
  local size, limit = 1, 50 * #points
  for k = 1, d do
    size = size * #axes[k]
    if size > limit then return nil end
  end
  local index = {}
  for i = 1, #points do
    local lin = 0
    for k = 1, d do lin = lin * #axes[k] + (lookup[k][points[i][k]] - 1) end
    index[i] = lin + 1
  end
  return axes, index, size
end

-- A point on the grid's reference line: the first grid point with dim k set to v.
local function axis_point(axes, k, v)
  local p = {}
  for j = 1, #axes do p[j] = axes[j][1] end
  p[k] = v
  return p
end

--- Kernel factors along each axis: F_k(i, j) = k(ref with x_k = a_i, ref with
-- x_k = a_j), and c = k(ref, ref); K = (⊗ F_k) / c^(d-1) when separable.
local function axis_factors(kernel, axes, want_grads)
  local factors, dfactors = {}, {}
  for k = 1, #axes do
    local P = {}
    for i, v in ipairs(axes[k]) do P[i] = axis_point(axes, k, v) end
    factors[k], dfactors[k] = kernel_dense(kernel, P, P, want_grads)
    factors[k] = lt.psd(factors[k]) -- a kernel's Gram matrix: PSD by construction
  end
  local ref = axis_point(axes, 1, axes[1][1])
  local g = want_grads and grads_buffer(kernel:count()) or nil
  local c = kernel:value(ref, ref, g, 0)
  return factors, dfactors, c, g
end

--- Checks k(x, y) = Π_k F_k(x_k, y_k) / c^(d-1) on a spread of point pairs.
local function is_separable(kernel, axes, c)
  if not (c > 0) then return false end -- luacheck: ignore 581 (NaN)
  local d = #axes
  local function point(t)
    local p = {}
    for k = 1, d do
      local a = axes[k]
      -- varies on every axis whatever its length (2k+1 alone can be a
      -- multiple of #a and pin an axis, hiding non-separable kernels)
      p[k] = a[1 + (t * 7919 + t * t * 31 + k * 104729) % #a]
    end
    return p
  end
  for t = 1, 12 do
    local x, y = point(t), point(3 * t + 5)
    local prod = 1
    for k = 1, d do
      prod = prod * kernel:value(axis_point(axes, k, x[k]), axis_point(axes, k, y[k]))
    end
    prod = prod / c ^ (d - 1)
    local direct = kernel:value(x, y)
    if abs(direct - prod) > SEPARABLE_TOL * max(abs(direct), c) then return false end
  end
  return true
end

-------------------------------------------------------------- Toeplitz --

local function build_toeplitz(kernel, points, x0, h, want_grads)
  local n = #points
  local c, dc = lag_columns(kernel, x0, h, n, want_grads)
  local cov = {
    kind = "toeplitz",
    explain = string.format("toeplitz: %d regularly spaced 1-d inputs (step %.6g), "
                            .. "stationary kernel", n, h),
    K = lt.psd(lt.toeplitz(lt.tensor(c))), -- a stationary kernel's Gram matrix
  }
  local dcol = {}
  for p = 1, #dc do dcol[p] = lt.tensor(dc[p]) end
  -- K + σ²I is Toeplitz (σ² added to the column's first entry); K + diag is a sum.
  function cov.noisy(noise)
    if lt.is_tensor(noise) then
      return K_plus_diag(cov.K, noise), {{leaf = cov.K, name = "column", d = dcol}}
    end
    local Ky = cov.K:add_diag(noise)
    local e1 = lt.zeros(n)
    e1[1] = noise
    return Ky, {{leaf = Ky, name = "column", d = dcol, noise = e1}}
  end
  -- K treats the inputs as the grid x0 + (i − 1)·h (they are within
  -- SPACING_TOL·h of it), and cross-covariances must use the same positions:
  -- a posterior variance is the small remainder k** − k*ᵀKy⁻¹k*, and co2's
  -- months, rounded to 4 decimals in the CSV, put it 15% off otherwise.
  local grid = {}
  for j = 1, n do grid[j] = {x0 + (j - 1) * h} end
  local function at_lag(steps) return kernel:value({x0}, {x0 + abs(steps) * h}) end
  -- m when the test points continue the grid (star_i = x0 + (m + i − 1)·h),
  -- nil otherwise.
  local function grid_offset(star)
    local s0, sh = regular_spacing(star)
    if not s0 or abs(sh - h) > SPACING_TOL * h then return nil end
    local shift = (s0 - x0) / h
    local m = math.floor(shift + 0.5)
    if abs(shift - m) > SPACING_TOL then return nil end
    return m
  end
  function cov.cross(star)
    local m = grid_offset(star)
    if not m then return (kernel_dense(kernel, star, grid, false)) end
    -- rectangular Toeplitz: entry (i, j) at lag (m + i − j)·h
    local col, row = {}, {}
    for i = 1, #star do col[i] = at_lag(m + i - 1) end
    for j = 1, n do row[j] = at_lag(m - j + 1) end
    return lt.toeplitz(lt.tensor(col), lt.tensor(row))
  end
  function cov.test_covariance(star)
    if not grid_offset(star) then return dense_test_covariance(kernel, star) end
    local col = {}
    for i = 1, #star do col[i] = at_lag(i - 1) end
    return lt.psd(lt.toeplitz(lt.tensor(col)))
  end
  function cov.noise_explain(per_point)
    if per_point then
      return "per-point noise: Ky = K + diag(σ²ᵢ) is not Toeplitz (K + σ²I would be), so Ky is "
             .. "a lazy sum: " .. lazy_sum_paths("K's FFT products")
    end
    return "noise σ²: Ky = K + σ²I is Toeplitz too (σ² added to the first column)"
  end
  return cov
end

------------------------------------------------------------- Kronecker --

local function build_kron(kernel, points, axes, index, ngrid, want_grads)
  local factors, dfactors, c, dcg = axis_factors(kernel, axes, want_grads)
  if not is_separable(kernel, axes, c) then return nil end
  local d = #axes
  -- K = (⊗ F_k) / c^(d-1), the normalisation in the first factor. Each
  -- factor enters as a lazy view of the dense matrix the model made (lt.kron
  -- would copy a dense factor): its gradient then comes keyed by that matrix.
  local own, jac = {}, {}
  for k = 1, d do
    own[k] = k == 1 and d > 1 and lt.psd(factors[1] / c ^ (d - 1)) or factors[k]
    jac[k] = {}
    for p = 1, dcg and #dcg or 0 do
      if k == 1 and d > 1 then -- ∂(F₁/c^(d-1)) = ∂F₁/c^(d-1) − (d−1)·F₁·∂c/c^d
        jac[k][p] = dfactors[1][p] / c ^ (d - 1) - factors[1] * ((d - 1) * dcg[p] / c ^ d)
      else
        jac[k][p] = dfactors[k][p]
      end
    end
  end
  local views = {}
  for k = 1, d do
    local all = {}
    for i = 1, own[k]:size(1) do all[i] = i end
    views[k] = lt.submatrix(own[k], all)
  end
  local G = lt.kron(unpack(views))
  local in_order = #points == ngrid
  for i = 1, #points do
    if index[i] ~= i then in_order = false end
  end
  local sizes = {}
  for k = 1, d do sizes[k] = #axes[k] end
  local cov = {}
  if in_order then
    cov.kind = "kron"
    cov.explain = string.format("kron: inputs form a full %s grid, separable kernel",
                                table.concat(sizes, "x"))
    cov.K = G
  else
    cov.kind = "kron_masked"
    cov.explain = string.format("kron_masked: %d inputs on a %s grid (%d cells), separable kernel;"
                                .. " K = (⊗ K_d)[obs, obs], a lazy submatrix", #points,
                                table.concat(sizes, "x"), ngrid)
    cov.K = lt.submatrix(G, index)
  end
  local links = {}
  for k = 1, d do links[k] = {leaf = own[k], name = "values", d = jac[k]} end
  -- In order, K + σ²I is kron_plus_identity (σ² its scale); masked, a sum.
  function cov.noisy(noise)
    if lt.is_tensor(noise) then return K_plus_diag(cov.K, noise), links end
    local Ky, N = noisy_sum(cov.K, noise)
    local all = {unpack(links)}
    all[#all + 1] = {leaf = N or Ky, name = "scale", noise = noise}
    return Ky, all
  end
  -- The test points' places on the grid, or nil when one is off it.
  local function grid_index(star)
    local sidx = {}
    for i, pt in ipairs(star) do
      local lin = 0
      for k = 1, d do
        local pos
        for a, v in ipairs(axes[k]) do
          if v == pt[k] then pos = a end
        end
        if not pos then return nil end
        lin = lin * #axes[k] + (pos - 1)
      end
      sidx[i] = lin + 1
    end
    return sidx
  end
  function cov.cross(star)
    local sidx = grid_index(star)
    if not sidx then return (kernel_dense(kernel, star, points, false)) end
    return lt.submatrix(G, sidx, index)
  end
  function cov.test_covariance(star)
    local sidx = grid_index(star)
    if not sidx then return dense_test_covariance(kernel, star) end
    return lt.submatrix(G, sidx) -- principal: PSD as G is
  end
  function cov.noise_explain(per_point)
    if per_point then
      return "per-point noise: Ky = K + diag(σ²ᵢ) has no Kronecker eigendecomposition "
             .. "(K + σ²I has), so Ky is a lazy sum: "
             .. lazy_sum_paths(in_order and "K's Kronecker products"
                               or "the masked Kronecker products")
    end
    if in_order then
      return "noise σ²: Ky = K + σ²I, solved and log-determined exactly at any n from the "
             .. "factors' eigendecompositions"
    end
    return "noise σ²: Ky = K[obs, obs] + σ²I, a lazy sum: "
           .. lazy_sum_paths("the masked Kronecker products")
  end
  return cov
end

----------------------------------------------------------------- dense --

local function build_dense(kernel, points, want_grads)
  local K, dK = kernel_dense(kernel, points, points, want_grads)
  local cov = {
    kind = "dense",
    explain = string.format("dense: %d inputs without exploitable structure", #points),
    K = lt.psd(K),
  }
  -- K + noise is dense again: its gradient is Ky's own (n×n), chained
  -- through the derivative matrices (∂Ky/∂log σ² = σ²I: σ² tr G).
  function cov.noisy(noise)
    local Ky = cov.K:add_diag(noise)
    local link = {leaf = Ky, name = "values", d = dK}
    if not lt.is_tensor(noise) then
      link.noise = function(g) return noise * g:diagonal():sum() end
    end
    return Ky, {link}
  end
  function cov.cross(star) return (kernel_dense(kernel, star, points, false)) end
  function cov.test_covariance(star) return dense_test_covariance(kernel, star) end
  function cov.noise_explain(per_point)
    return per_point and "per-point noise: Ky = K + diag(σ²ᵢ), dense"
           or "noise σ²: Ky = K + σ²I, dense"
  end
  return cov
end

------------------------------------------------------ kernel (C, lazy) --

-- Base kernels lt.kernel computes, and the hyperparameters it knows.
local C_KINDS = {rbf = true, matern12 = true, matern32 = true, matern52 = true, periodic = true,
                 rq = true, linear = true, polynomial = true, cosine = true,
                 spectral_mixture = true}

local function c_spec(k)
  local w = k.values.weights -- the spectral mixture's
  return {kind = k.kind, lengthscale = k.values.lengthscale, variance = k.values.variance,
          period = k.values.period, alpha = k.values.alpha, offset = k.values.offset,
          degree = k.degree, num_mixtures = w and #w, weights = w, means = k.values.means,
          scales = k.values.scales}
end

-- A kernel tree as C operators: a plan {root = node, leaves = {...}} with
-- nodes {leaf = i} | {op = "sum" | "product", children = {...}} and one
-- leaf per occurrence of a base kernel in the tree, {kernel = k, kind =
-- k.kind, dims = k.dims, scales = {scale kernels folded into it}}. A sum
-- becomes lt.add, a product lt.mul (two lazy operators: the lazy
-- "hadamard", whose rows are its children's rows multiplied and whose
-- gradients flow to the children), a base kernel lt.kernel. kernels.scale's
-- factor s (a product's "scale" child) is folded into the variance of base
-- kernels: into one factor of a product, into every term of a sum —
-- s·(k1·k2) = (s·k1)·k2, s·(k1 + k2) = s·k1 + s·k2 — so that no operator
-- node is added and its gradient is the variance's own: V = v·Πs gives
-- ∂V/∂log v = ∂V/∂log s = V. A new base kind needs only its C_KINDS and
-- c_spec entries (and a variance, to take a scale).

-- Whether scales can be folded into the compiled node (a leaf whose spec
-- has a variance; a sum: every term; a product: one factor).
local function can_scale(plan, node)
  if node.leaf then return type(plan.leaves[node.leaf].variance) == "number" end
  for _, c in ipairs(node.children) do
    local ok = can_scale(plan, c)
    if node.op == "sum" and not ok then return false end
    if node.op == "product" and ok then return true end
  end
  return node.op == "sum"
end

-- Appends `scales` to the leaves under node (see can_scale for where).
local function fold_scales(plan, node, scales)
  if #scales == 0 then return end
  if node.leaf then
    local into = plan.leaves[node.leaf].scales
    for _, s in ipairs(scales) do into[#into + 1] = s end
    return
  end
  for _, c in ipairs(node.children) do
    if node.op == "sum" then
      fold_scales(plan, c, scales)
    elseif can_scale(plan, c) then
      return fold_scales(plan, c, scales)
    end
  end
end

-- Compiles kernel into a node of plan; nil and the reason when some part
-- has no C operator.
local function compile(plan, kernel)
  if kernel.kind == "sum" or kernel.kind == "product" then
    local node, scales = {op = kernel.kind, children = {}}, {}
    for _, c in ipairs(kernel.children) do
      if kernel.kind == "product" and c.kind == "scale" then
        scales[#scales + 1] = c
      else
        local child, why = compile(plan, c)
        if not child then return nil, why end
        node.children[#node.children + 1] = child
      end
    end
    if #node.children == 0 then return nil, "a constant kernel (scale factors alone)" end
    if #node.children == 1 then node = node.children[1] end
    if #scales > 0 and not can_scale(plan, node) then
      return nil, "a scale of kernels without a variance to fold it into"
    end
    fold_scales(plan, node, scales)
    return node
  end
  if kernel.kind == "scale" then return nil, "a constant kernel (a scale factor alone)" end
  if kernel.children or not C_KINDS[kernel.kind] then
    return nil, "a " .. kernel.kind .. " kernel"
  end
  local leaf = {kernel = kernel, kind = kernel.kind, dims = kernel.dims, scales = {},
                variance = c_spec(kernel).variance}
  plan.leaves[#plan.leaves + 1] = leaf
  return {leaf = #plan.leaves}
end

--- The plan of `kernel` (see above) when every part of it has a C
-- operator; nil and the reason otherwise.
local function c_plan(kernel)
  local plan = {leaves = {}}
  local root, why = compile(plan, kernel)
  if not root then return nil, why end
  plan.root = root
  return plan
end

-- lt.kernel's spec for a leaf: its kernel's, with the scales in the variance.
local function leaf_spec(leaf)
  local spec = c_spec(leaf.kernel)
  for _, s in ipairs(leaf.scales) do spec.variance = spec.variance * s.values.variance end
  return spec
end

--- The tree as text: "rbf * periodic + s·matern52".
local function plan_text(plan, node, inside)
  node = node or plan.root
  if node.leaf then
    local leaf = plan.leaves[node.leaf]
    return (#leaf.scales > 0 and "s·" or "") .. leaf.kind
  end
  local parts = {}
  for i, c in ipairs(node.children) do parts[i] = plan_text(plan, c, node.op) end
  local text = table.concat(parts, node.op == "sum" and " + " or " * ")
  if inside == "product" and node.op == "sum" then return "(" .. text .. ")" end
  return text
end

-- The columns dims of an n×d tensor of points (all when dims is nil) as
-- X·E, E a constant 0/1 selection: inside lt.grad followed points stay
-- followed (a copy into a view would be refused).
local function columns_of(X, dims)
  if not dims then return X end
  local E = lt.zeros(X:size(2), #dims)
  for q, d in ipairs(dims) do E:set(d, q, 1) end
  return X * E
end

-- The points (coordinate arrays, or an n×d tensor kept as it is) as an
-- n×d tensor of the active dimensions `dims` (in that order, which ARD's
-- lengthscales follow), all of them when dims is nil.
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

-- The points of each leaf's active dimensions, shared between the leaves
-- with the same dims.
local function plan_points(points, plan)
  local by_dims, out = {}, {}
  for i, c in ipairs(plan.leaves) do
    local key = c.dims and table.concat(c.dims, ",") or "all"
    by_dims[key] = by_dims[key] or points_tensor(points, c.dims)
    out[i] = by_dims[key]
  end
  return out
end

--- The plan's operator between x1 and x2 (per-leaf point tensors; x2 nil:
-- x1 with itself), its leaves lt.kernel (or make's: mpi.kernel); also the
-- list of the leaf operators, in plan.leaves' order.
local function plan_operator(plan, x1, x2, make)
  make = make or lt.kernel
  local parts = {}
  local function build(node)
    if node.leaf then
      local i, spec = node.leaf, leaf_spec(plan.leaves[node.leaf])
      parts[i] = x2 and make(x1[i], x2[i], spec) or make(x1[i], spec)
      return parts[i]
    end
    local K
    for _, c in ipairs(node.children) do
      local op = build(c)
      K = not K and op or node.op == "sum" and K + op or lt.mul(K, op)
    end
    return K
  end
  return build(plan.root), parts
end

-- ∂θ/∂log θ for a parameter of lt.kernel: θ, or with ARD a d-vector with
-- l_q at q (the C gradient of lengthscale is then a d-vector); an entry of
-- a matrix (the spectral mixture's means, scales): a matrix with θ there.
local function log_derivative(par)
  local v = par.kernel.values[par.name]
  if not par.index then return v end
  if par.col then
    local rows = {}
    for i, row in ipairs(v) do
      rows[i] = {}
      for j = 1, #row do rows[i][j] = (i == par.index and j == par.col) and row[j] or 0 end
    end
    return lt.tensor(rows)
  end
  local e = lt.zeros(#v)
  e[par.index] = v[par.index]
  return e
end

--- The links (see "Gradients" above) from the leaf operators `parts` to
-- kernel:parameters(): each leaf's own hyperparameters, and its variance
-- V = v·Πs to v and to each folded scale s (∂V/∂log v = ∂V/∂log s = V).
-- A kernel object that appears more than once in the tree has a parameter
-- per appearance (kernel:parameters()); each of them is linked to every
-- appearance, so its gradient is the sum over them — the derivative with
-- respect to the one shared value.
local function plan_links(kernel, plan, parts)
  local of = {} -- kernel object → its {p, par}
  for p, par in ipairs(kernel:parameters()) do
    of[par.kernel] = of[par.kernel] or {}
    table.insert(of[par.kernel], {p = p, par = par})
  end
  local links = {}
  for i, leaf in ipairs(plan.leaves) do
    local V, dV = leaf_spec(leaf).variance, {}
    for _, e in ipairs(of[leaf.kernel] or {}) do
      if e.par.name == "variance" then
        dV[e.p] = (dV[e.p] or 0) + V
      else
        links[#links + 1] = {leaf = parts[i], name = e.par.name,
                             d = {[e.p] = log_derivative(e.par)}}
      end
    end
    for _, s in ipairs(leaf.scales) do
      for _, e in ipairs(of[s] or {}) do dV[e.p] = (dV[e.p] or 0) + V end
    end
    if next(dV) then links[#links + 1] = {leaf = parts[i], name = "variance", d = dV} end
  end
  return links
end

-- <g, d> for a parameter's gradient g and a derivative d of the parameter:
-- numbers, tensors of the parameter's shape, or d a function of g.
local function contract(g, d)
  if type(d) == "function" then return d(g) end
  if type(d) == "number" then return type(g) == "number" and g * d or g:sum() * d end
  return g:cmul(d):sum()
end

--- The m kernel parameters' gradients (∂/∂log θ) from a gradient table
-- keyed by operators (bilinear_derivative's, inv_quad_logdet's), through
-- the links.
local function link_grads(links, grads, m)
  local g = {}
  for p = 1, m do g[p] = 0 end
  for _, link in ipairs(links) do
    local gl = grads[link.leaf] and grads[link.leaf][link.name]
    if gl ~= nil then
      for p, d in pairs(link.d) do g[p] = g[p] + contract(gl, d) end
    end
  end
  return g
end

-- Whether a plan multiplies kernels (a hadamard somewhere).
local function has_product(node)
  if node.leaf then return false end
  if node.op == "product" then return true end
  for _, c in ipairs(node.children) do
    if has_product(c) then return true end
  end
  return false
end

-- make: lt.kernel, or mpi.kernel (gp.exact's distributed = true) for K,
-- whose products and gradients are the n×n work; cross- and test
-- covariances stay lt.kernel.
local function build_kernel(kernel, points, plan, make)
  local X = plan_points(points, plan)
  local K, parts = plan_operator(plan, X, nil, make)
  local products = has_product(plan.root)
  local cov = {
    kind = "kernel",
    explain = string.format("kernel: %d inputs (d = %d), neither regularly spaced nor a grid "
                            .. "with a separable kernel; %s is computed by "
                            .. "lt.kernel in C%s: K lazy (entries on demand, row-block products, "
                            .. "O(n) memory), its gradients by one pass over the entries",
                            #points, #points[1], plan_text(plan),
                            products and " (products of kernels as lazy Hadamard products, "
                                         .. "lt.mul, a tile at a time)" or ""),
    K = K, -- PSD: sums and Hadamard products (Schur) of PSD kernel operators
  }
  local links = plan_links(kernel, plan, parts)
  function cov.noisy(noise)
    if lt.is_tensor(noise) then return K_plus_diag(cov.K, noise), links end
    local Ky, N = noisy_sum(cov.K, noise)
    local all = {unpack(links)}
    all[#all + 1] = {leaf = N, name = "scale", noise = noise}
    return Ky, all
  end
  function cov.cross(star)
    return (plan_operator(plan, plan_points(star, plan), X))
  end
  function cov.test_covariance(star)
    return (plan_operator(plan, plan_points(star, plan))) -- PSD, O(n*) memory
  end
  function cov.noise_explain(per_point)
    return (per_point and "per-point noise: Ky = K + diag(σ²ᵢ)" or "noise σ²: Ky = K + σ²I")
           .. ", a lazy sum: " .. lazy_sum_paths(products and "K's tiled products"
                                                 or "lt.kernel's row-block products")
  end
  return cov
end

----------------------------------------------------------------- choice --

-- The most grid cells SKI may use (m^d for m points in each of d
-- dimensions). Its grid is built and interpolated onto in full, so a huge
-- grid would run for minutes before running out of memory (grid = 1e7 in
-- 1-d: 31 s, then "not enough memory"): refuse it at once. A million cells
-- is 200 times the 1-d default and 36 times the 3-d one.
local MAX_SKI_CELLS = 1e6

-- structure = "ski": grid = m points per dimension, m^d cells at most
-- MAX_SKI_CELLS (the other checks on m are ski.lua's).
local function check_ski_grid(m, d)
  if type(m) ~= "number" or not (m >= 4) then return end -- luacheck: ignore 581 (NaN)
  local cells = m ^ d
  if cells > MAX_SKI_CELLS then
    error(string.format("lazytensor: gp: structure = 'ski' with grid = %s in %d-d is %.4g grid "
                        .. "cells, more than the %.4g SKI allows; take a smaller grid", tostring(m),
                        d, cells, MAX_SKI_CELLS), 0)
  end
end

--- Builds the covariance for `kernel` over `points` (an array of coordinate
-- arrays). opts.structure forces "toeplitz", "kron", "kernel", "dense" (or
-- "auto").
-- opts.make_kernel (mpi.kernel: gp.exact's distributed = true) builds K
-- with it and insists on the kernel structure.
function structure.build(kernel, points, opts)
  opts = opts or {}
  kernel:check_inputs(#points[1])
  local custom = require "lazytensor.gp.custom"
  if custom.contains(kernel) then -- lt.grad's
    local want = opts.structure or "auto"
    if (want ~= "auto" and want ~= "ski") or opts.make_kernel then
      error("lazytensor: gp: a custom kernel's covariance is what its k returns; structure = '"
            .. tostring(opts.structure or "kernel") .. "' (or distributed) is not available "
            .. "for it (structure = 'auto' or 'ski')", 0)
    end
    if want == "ski" then check_ski_grid(opts.grid, #points[1]) end
    return custom.build(kernel, points, {structure = want, grid = opts.grid})
  end
  local want = opts.structure or "auto"
  if opts.make_kernel then
    if want ~= "auto" and want ~= "kernel" then
      error("lazytensor: gp: distributed = true needs the kernel structure, got structure = '"
            .. tostring(want) .. "'", 0)
    end
    want = "kernel"
  end
  local want_grads = opts.gradients ~= false
  if want == "ski" then
    check_ski_grid(opts.grid, #points[1])
    return require("lazytensor.gp.ski").build(kernel, points, opts)
  end
  if want == "auto" or want == "toeplitz" then
    local x0, h = regular_spacing(points)
    if x0 and kernel:is_stationary() then
      return build_toeplitz(kernel, points, x0, h, want_grads)
    end
    if want == "toeplitz" then
      error("lazytensor: gp: toeplitz structure needs regularly spaced 1-d inputs and a "
            .. "stationary kernel", 0)
    end
  end
  if want == "auto" or want == "kron" then
    local axes, index, ngrid = grid_of(points)
    local cov = axes and build_kron(kernel, points, axes, index, ngrid, want_grads)
    if cov then return cov end
    if want == "kron" then
      error("lazytensor: gp: kron structure needs inputs on a grid and a separable kernel", 0)
    end
  end
  local why
  if want == "auto" or want == "kernel" then
    local plan
    plan, why = c_plan(kernel)
    if plan and opts.make_kernel and has_product(plan.root) then
      -- mpi.kernel distributes its own products; a Hadamard product takes
      -- its children's rows, which every rank would compute in full.
      error("lazytensor: gp: distributed = true needs a sum of base kernels (scale allowed): "
            .. "a product of kernels (" .. plan_text(plan) .. ") would be a Hadamard product "
            .. "computed in full on every rank, not distributed", 0)
    end
    if plan then return build_kernel(kernel, points, plan, opts.make_kernel) end
    if want == "kernel" or opts.make_kernel then
      error("lazytensor: gp: kernel structure needs sums, products and scales of "
            .. "lt.kernel's kinds, got " .. why, 0)
    end
  elseif want ~= "dense" then
    error("lazytensor: gp: unknown structure '" .. tostring(want) .. "' (expected auto, "
          .. "toeplitz, kron, kernel, ski or dense)", 0)
  end
  local cov = build_dense(kernel, points, want_grads)
  if why then
    cov.explain = string.format("dense: %d inputs without exploitable structure; %s has no "
                                .. "lt.kernel operator, so K and ∂K are n×n matrices", #points, why)
  elseif want == "dense" then
    cov.explain = string.format("dense: %d inputs, dense structure requested", #points)
  end
  return cov
end

--- The cross- and test covariances of a kernel with a C plan at test points
-- given as a tensor (n*×d), against the training points (coordinate
-- arrays): lt.kernel operators built from the test points' own tensor, so
-- inside lt.grad they follow it. For the structures whose covariances at
-- test points off their grid are the kernel's plain entries (kron,
-- kron_masked, dense): the same values as theirs, to rounding. nil when the
-- kernel has no C plan.
function structure.point_covariances(kernel, points)
  local plan = c_plan(kernel)
  if not plan then return nil end
  local X = plan_points(points, plan)
  return {
    cross = function(star) return (plan_operator(plan, plan_points(star, plan), X)) end,
    test_covariance = function(star)
      return lt.psd((plan_operator(plan, plan_points(star, plan))))
    end,
  }
end

--- Prior variances k(x, x) at each point.
function structure.prior_variance(kernel, points)
  local v = {}
  for i, p in ipairs(points) do v[i] = kernel:value(p, p) end
  return lt.tensor(v)
end

structure.regular_spacing = regular_spacing
structure.kernel_dense = kernel_dense
-- The kernel structure's tree of C operators, shared with gp/sgpr.lua and
-- gp/multitask.lua.
structure.c_plan = c_plan
structure.plan_text = plan_text
structure.plan_points = plan_points
structure.plan_operator = plan_operator
structure.plan_links = plan_links
structure.link_grads = link_grads
return structure
