--- KISS-GP / SKI (Wilson & Nickisch 2015): `gp.exact{..., structure = "ski",
-- grid = m}`.
--
-- The kernel matrix is approximated by interpolation from a regular grid of
-- m points per dimension: K ≈ W·K_grid·Wᵀ, W = lt.interp(x, grids) (sparse,
-- 4^d cubic weights per row), K_grid the kernel on the grid: Toeplitz in
-- 1-d, a Kronecker product of Toeplitz factors (one per dimension) in 2-d
-- and 3-d for a separable kernel. The product stays lazy (lt.psd(W·K_grid·Wᵀ)),
-- so CG, SLQ and the gradients of inv_quad_logdet{grad = true} run on it at
-- O(n + m^d log m) a product; K_grid's Toeplitz columns are the parameters
-- the gradient reaches (through the product's chain rule and W, which has
-- none), linked to the hyperparameters by the kernel's derivatives at the
-- grid's lags.
--
-- The grid spans the inputs with one step to spare on each side (cubic
-- interpolation needs two grid points on either side of a point); test
-- points inside it are interpolated the same way, others get the exact
-- kernel's cross-covariance.
local lt = require "lazytensor"

local ski = {}

local abs = math.abs
local unpack = table.unpack or unpack -- luacheck: ignore 143 (Lua 5.1's global)

-- Grid points per dimension when `grid` is not given.
local DEFAULT_GRID = {[1] = 5000, [2] = 100, [3] = 30}

local function fail(fmt, ...)
  error("lazytensor: gp: ski: " .. string.format(fmt, ...), 0)
end

-- Per dimension {lo, h, m}: m points from lo with step h, the inputs inside
-- [lo + h, lo + (m − 3)·h].
local function grid_axes(points, m)
  local d = #points[1]
  local axes = {}
  for k = 1, d do
    local lo, hi = math.huge, -math.huge
    for _, p in ipairs(points) do
      lo, hi = math.min(lo, p[k]), math.max(hi, p[k])
    end
    local h = hi > lo and (hi - lo) / (m - 3) or 1
    axes[k] = {lo = lo - h, h = h, m = m}
  end
  return axes
end

-- lt.interp's grids argument: {lo, hi, m} per dimension.
local function interp_grids(axes)
  local g = {}
  for k, a in ipairs(axes) do g[k] = {a.lo, a.lo + (a.m - 1) * a.h, a.m} end
  return g
end

-- True when every point is inside the grid's interpolation range.
local function inside(axes, points)
  for _, p in ipairs(points) do
    for k, a in ipairs(axes) do
      local u = (p[k] - a.lo) / a.h
      if u < 1 or u > a.m - 2 then return false end
    end
  end
  return true
end

-- The grid's origin, with coordinate k moved by `steps` grid steps.
local function along(axes, k, steps)
  local p = {}
  for j, a in ipairs(axes) do p[j] = a.lo end
  p[k] = p[k] + steps * axes[k].h
  return p
end

-- k(x, y) = Π_k F_k(x_k, y_k) / c^(d−1) at a spread of grid point pairs,
-- F_k the kernel along axis k through the origin, c = k(origin, origin).
local function separable(kernel, axes, c)
  local d = #axes
  for t = 1, 12 do
    local x, y, prod = {}, {}, 1
    for k, a in ipairs(axes) do
      local i = (t * 7919 + k * 104729) % a.m
      local j = (t * t * 31 + 3 * t + k) % a.m
      x[k], y[k] = a.lo + i * a.h, a.lo + j * a.h
      prod = prod * kernel:value(along(axes, k, i), along(axes, k, j))
    end
    local direct = kernel:value(x, y)
    prod = prod / c ^ (d - 1)
    if abs(direct - prod) > 1e-9 * math.max(abs(direct), c) then return false end
  end
  return true
end

-- The Toeplitz column of axis k (the kernel at lags 0, h, 2h, ... along it)
-- and its derivatives ∂/∂log θ_p, as tensors.
local function axis_column(kernel, axes, k)
  local np = kernel:count()
  local col, dcol = {}, {}
  for p = 1, np do dcol[p] = {} end
  local g = {}
  local origin = along(axes, k, 0)
  for j = 1, axes[k].m do
    col[j] = kernel:value(origin, along(axes, k, j - 1), g, 0)
    for p = 1, np do dcol[p][j] = g[p] end
  end
  local dt = {}
  for p = 1, np do dt[p] = lt.tensor(dcol[p]) end
  return lt.tensor(col), dt
end

-- K_grid's factors (Toeplitz leaves) and each one's links to the
-- hyperparameters: K_grid = T_1 ⊗ ... ⊗ T_d with the normalisation 1/c^(d−1)
-- in T_1's column.
local function grid_factors(kernel, axes)
  local d = #axes
  local np = kernel:count()
  local gc = {}
  local origin = along(axes, 1, 0)
  local c = kernel:value(origin, origin, gc, 0)
  if d > 1 and not (c > 0 and separable(kernel, axes, c)) then -- luacheck: ignore 581
    fail("a %d-d grid needs a kernel that is a product over the dimensions (rbf, periodic); "
         .. "sums of kernels are not separable", d)
  end
  local factors, links = {}, {}
  for k = 1, d do
    local col, dcol = axis_column(kernel, axes, k)
    if k == 1 and d > 1 then -- ∂(F/c^(d−1)) = ∂F/c^(d−1) − (d−1)·F·∂c/c^d
      local scale = c ^ (d - 1)
      for p = 1, np do dcol[p] = dcol[p] / scale - col * ((d - 1) * gc[p] / c ^ d) end
      col = col / scale
    end
    factors[k] = lt.psd(lt.toeplitz(col)) -- a stationary kernel's Gram matrix
    links[k] = {leaf = factors[k], name = "column", d = dcol}
  end
  return factors, links
end

--- The "ski" covariance of gp/structure.lua (see there for the fields).
-- opts.grid: points per dimension (default 5000 in 1-d, 100 in 2-d, 30 in 3-d).
function ski.build(kernel, points, opts)
  local n, d = #points, #points[1]
  if d > 3 then fail("SKI interpolates in 1 to 3 dimensions, x has %d", d) end
  if not kernel:is_stationary() then fail("SKI needs a stationary kernel") end
  local m = opts.grid or DEFAULT_GRID[d]
  if type(m) ~= "number" or m ~= math.floor(m) or m < 4 then
    fail("grid = %s must be a whole number of at least 4 points per dimension", tostring(m))
  end
  local axes = grid_axes(points, m)
  local factors, links = grid_factors(kernel, axes)
  local Kgrid = d == 1 and factors[1] or lt.kron(unpack(factors))
  local grids = interp_grids(axes)
  local W = lt.interp(lt.tensor(points), grids)
  local size = d > 1 and string.format("%d^%d", m, d) or tostring(m)
  local cov = {
    kind = "ski",
    explain = string.format("ski: %d inputs interpolated (cubic, 4^%d weights a row) from a "
                            .. "regular grid of %s points; K ≈ W·K_grid·Wᵀ with K_grid %s, "
                            .. "kept lazy", n, d, size,
                            d == 1 and "Toeplitz" or "a Kronecker product of Toeplitz factors"),
    K = lt.psd(W * Kgrid * W:t()),
    W = W,
    grid = Kgrid,
  }
  function cov.noisy(noise)
    if lt.is_tensor(noise) then return cov.K:add_diag(noise), links end
    local N = lt.identity(n, noise)
    local all = {}
    for i, l in ipairs(links) do all[i] = l end
    all[#all + 1] = {leaf = N, name = "scale", noise = noise}
    return cov.K + N, all
  end
  local structure = require "lazytensor.gp.structure"
  function cov.cross(star)
    if not inside(axes, star) then
      return (structure.kernel_dense(kernel, star, points, false))
    end
    return lt.interp(lt.tensor(star), grids) * Kgrid * W:t()
  end
  function cov.test_covariance(star)
    if not inside(axes, star) then
      return lt.psd((structure.kernel_dense(kernel, star, star, false)))
    end
    local Ws = lt.interp(lt.tensor(star), grids)
    return lt.psd(Ws * Kgrid * Ws:t())
  end
  function cov.noise_explain(per_point)
    return (per_point and "per-point noise: Ky = W·K_grid·Wᵀ + diag(σ²ᵢ)"
            or "noise σ²: Ky = W·K_grid·Wᵀ + σ²I")
           .. ", a lazy sum: Cholesky of its dense form up to max_cholesky_size, CG and SLQ "
           .. "with the sparse and FFT products above"
  end
  return cov
end

-- A custom kernel's (gp.kernels.custom) K_grid is k(G, G) over the grid's
-- points, dense (its structure is unknown: neither Toeplitz nor separable
-- can be assumed), so the grid is smaller by default and capped.
ski.CUSTOM_DEFAULT_GRID = {[1] = 1000, [2] = 30, [3] = 12}
ski.MAX_CUSTOM_CELLS = 4096

--- For a tree with a custom kernel (gp/custom.lua's SKI covariance): the
-- interpolation W of the points, the grid's points G (m^d rows of d
-- coordinates, dimension 1 slowest: the order of lt.interp's columns and
-- of a Kronecker product), and interp(star) → W* for test points inside
-- the grid (nil outside).
function ski.custom_grid(points, opts)
  local n, d = #points, #points[1]
  if d > 3 then fail("SKI interpolates in 1 to 3 dimensions, x has %d", d) end
  local m = opts.grid or ski.CUSTOM_DEFAULT_GRID[d]
  if type(m) ~= "number" or m ~= math.floor(m) or m < 4 then
    fail("grid = %s must be a whole number of at least 4 points per dimension", tostring(m))
  end
  if m ^ d > ski.MAX_CUSTOM_CELLS then
    fail("a custom kernel's K_grid is k(G, G) over the grid's points, dense (Toeplitz or "
         .. "Kronecker structure cannot be assumed of it): grid = %d in %d-d is %d cells, more "
         .. "than the %d allowed; take a smaller grid", m, d, m ^ d, ski.MAX_CUSTOM_CELLS)
  end
  local axes = grid_axes(points, m)
  local grids = interp_grids(axes)
  local G = {}
  local idx = {}
  for k = 1, d do idx[k] = 0 end
  for _ = 1, m ^ d do
    local row = {}
    for k, a in ipairs(axes) do row[k] = a.lo + idx[k] * a.h end
    G[#G + 1] = row
    for k = d, 1, -1 do -- the last dimension fastest
      idx[k] = idx[k] + 1
      if idx[k] < m then break end
      idx[k] = 0
    end
  end
  local function interp(star)
    if not inside(axes, star) then return nil end
    return lt.interp(lt.tensor(star), grids)
  end
  local size = d > 1 and string.format("%d^%d", m, d) or tostring(m)
  return {W = lt.interp(lt.tensor(points), grids), G = G, interp = interp,
          explain = string.format("ski: %d inputs interpolated (cubic, 4^%d weights a row) from "
                                  .. "a regular grid of %s points; K ≈ W·K_grid·Wᵀ with K_grid "
                                  .. "= k(G, G) of the custom kernel, dense", n, d, size)}
end

return ski
