--- Filling missing cells of a grid by interpolation along rows and columns.
--
-- This is the simple baseline the volcano demo compares a Kronecker GP with.
--
-- `interp.fill(grid [, opts])` returns a new nrows x ncols grid (a 2-d Lua
-- array) in which every known cell is copied and every missing cell is
-- estimated, and the number of cells it filled. A cell (i, j) is missing when
-- grid[i][j] is nil or NaN, or when opts.mask[i][j] is truthy (a held-out cell
-- whose true value the caller keeps for scoring).
--
-- The estimate for a missing cell (i, j), from the known cells only:
--   * Along row i, let L and R be the nearest known cells left and right of
--     (i, j). With both, the row estimate is the linear interpolation between
--     them at column j. Likewise along column j with the nearest known cells
--     above (U) and below (D).
--   * If at least one direction has known cells on both sides, the estimate is
--     the mean of the two-sided (interpolated) estimates only.
--   * Otherwise (borders and corners), the estimate is the mean of the values
--     of those of L, R, U, D that exist: nearest-value extrapolation.
--   * If row i and column j have no known cell at all, the estimate is the
--     value of the known cell nearest in Euclidean grid distance (ties go to
--     the first in row-major order).
-- Consequences: on a bilinear surface z = a + b i + c j + d i j (in
-- particular a plane) every cell with known neighbours on both sides in some
-- direction is reproduced exactly, since z is linear along every row and
-- column; extrapolated border cells are not.
--
-- Options: mask (as above), nrows and ncols (default: #grid and the largest
-- column index present in any row; pass ncols when the last column may be
-- entirely missing).

local options = require "lazytensor.options"

local interp = {}

local function is_known(v)
  return type(v) == "number" and v == v
end

-- Size of the grid: from opts, else from the grid's rows and largest key.
local function grid_size(grid, opts)
  local nrows, ncols = opts.nrows or #grid, opts.ncols
  if not ncols then
    ncols = 0
    for i = 1, nrows do
      for j in pairs(grid[i] or {}) do
        if type(j) == "number" and j % 1 == 0 and j > ncols then ncols = j end
      end
    end
  end
  return nrows, ncols
end

-- Copy the known cells into a fresh grid with `false` marking missing cells,
-- so that lookups never confuse holes with the end of a row.
local function known_cells(grid, mask, nrows, ncols)
  local k, nknown = {}, 0
  for i = 1, nrows do
    local row, mrow, krow = grid[i] or {}, mask and mask[i], {}
    for j = 1, ncols do
      local v = row[j]
      if is_known(v) and not (mrow and mrow[j]) then
        krow[j], nknown = v, nknown + 1
      else
        krow[j] = false
      end
    end
    k[i] = krow
  end
  return k, nknown
end

-- Nearest known cell from (i, j) stepping by (di, dj): its distance in cells
-- and its value, or nil when there is none before the edge.
local function nearest(k, i, j, di, dj, nrows, ncols)
  local step = 1
  i, j = i + di, j + dj
  while i >= 1 and i <= nrows and j >= 1 and j <= ncols do
    if k[i][j] then return step, k[i][j] end
    i, j, step = i + di, j + dj, step + 1
  end
  return nil
end

-- Linear interpolation between a value da cells before and one db cells after.
local function between(da, va, db, vb)
  return va + (vb - va) * da / (da + db)
end

-- Value of the known cell nearest to (i, j) in Euclidean distance.
local function nearest_anywhere(k, i, j, nrows, ncols)
  local best, best_d2 = nil, math.huge
  for r = 1, nrows do
    for c = 1, ncols do
      local v = k[r][c]
      if v then
        local d2 = (r - i) ^ 2 + (c - j) ^ 2
        if d2 < best_d2 then best, best_d2 = v, d2 end
      end
    end
  end
  return best
end

-- Estimate one missing cell by the rules in the module comment.
local function estimate(k, i, j, nrows, ncols)
  local dl, vl = nearest(k, i, j, 0, -1, nrows, ncols)
  local dr, vr = nearest(k, i, j, 0, 1, nrows, ncols)
  local du, vu = nearest(k, i, j, -1, 0, nrows, ncols)
  local dd, vd = nearest(k, i, j, 1, 0, nrows, ncols)

  local sum, count = 0, 0
  if dl and dr then sum, count = sum + between(dl, vl, dr, vr), count + 1 end
  if du and dd then sum, count = sum + between(du, vu, dd, vd), count + 1 end
  if count > 0 then return sum / count end

  for _, v in ipairs({ vl or false, vr or false, vu or false, vd or false }) do
    if v then sum, count = sum + v, count + 1 end
  end
  if count > 0 then return sum / count end
  return nearest_anywhere(k, i, j, nrows, ncols)
end

--- Fill the missing cells of a grid; see the module comment for the rules.
-- @return the filled grid (a new table), the number of cells filled
function interp.fill(grid, opts)
  if type(grid) ~= "table" then
    error("lazytensor: interp.fill: grid must be a table of rows, got " .. type(grid), 0)
  end
  opts = options.check("interp.fill", opts, {mask = "table", nrows = "number", ncols = "number"})
  local nrows, ncols = grid_size(grid, opts)
  if nrows < 1 or ncols < 1 then error("lazytensor: interp.fill: grid is empty", 0) end
  local k, nknown = known_cells(grid, opts.mask, nrows, ncols)
  if nknown == 0 then error("lazytensor: interp.fill: grid has no known cell", 0) end

  local out, filled = {}, 0
  for i = 1, nrows do
    local row = {}
    for j = 1, ncols do
      if k[i][j] then
        row[j] = k[i][j]
      else
        row[j], filled = estimate(k, i, j, nrows, ncols), filled + 1
      end
    end
    out[i] = row
  end
  return out, filled
end

--- Root-mean-square difference between two grids over the cells where
-- mask[i][j] is truthy (all cells when mask is nil), and the number of cells.
function interp.rmse(truth, estimate_grid, mask)
  local sum, count = 0, 0
  for i = 1, #truth do
    for j = 1, #truth[i] do
      if not mask or (mask[i] and mask[i][j]) then
        local d = truth[i][j] - estimate_grid[i][j]
        sum, count = sum + d * d, count + 1
      end
    end
  end
  if count == 0 then error("lazytensor: interp.rmse: no cells to compare", 0) end
  return math.sqrt(sum / count), count
end

return interp
