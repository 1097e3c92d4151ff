--- A Kronecker GP over the Maunga Whau (volcano) heightmap with 20% of the
-- cells held out at random (seeded). The inputs lie on a grid and the
-- kernel is separable, so the model picks a Kronecker covariance (seen
-- through the observed cells, a lazy submatrix) by itself, and solves it
-- with preconditioned CG.
--
-- Prints the held-out RMSE of the GP beside that of bilinear interpolation
-- from the remaining cells, and writes out/volcano.svg (truth, held-out
-- mask, GP reconstruction, interpolation).
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local data = require "lazytensor.data"
local interp = require "lazytensor.interp"
local svg = require "lazytensor.svg"

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local heights, nrows, ncols = data.read_matrix(here .. "/data/volcano.csv")
local lo, hi = math.huge, -math.huge
for i = 1, nrows do
  for j = 1, ncols do lo, hi = math.min(lo, heights[i][j]), math.max(hi, heights[i][j]) end
end
print(string.format("volcano: %d x %d heights (10 m grid), %g to %g m", nrows, ncols, lo, hi))

-- Hold out 20% of the cells, chosen with the library's seeded generator.
lt.manual_seed(2024)
local u = lt.rand(nrows, ncols):totable()
local mask, x, y, held = {}, {}, {}, {}
for i = 1, nrows do
  mask[i] = {}
  for j = 1, ncols do
    if u[i][j] < 0.2 then
      mask[i][j] = true
      held[#held + 1] = {i, j}
    else
      x[#x + 1] = {i, j}
      y[#y + 1] = heights[i][j]
    end
  end
end
print(string.format("training on %d cells, %d held out", #x, #held))

-- A product of Matérn 5/2 kernels, one per grid axis: separable, so the grid
-- gives a Kronecker product, and rougher than an RBF, as terrain is.
local K = gp.kernels
local kernel = K.matern52{lengthscale = 5, variance = 500, dims = {1}}
             * K.matern52{lengthscale = 5, dims = {2}, fixed = {variance = true}}

-- Hyperparameters: fitted on the training cells of a 26 x 26 window over
-- the crater, few enough for the exact path (n <= max_cholesky_size), where
-- the marginal likelihood and its gradient are exact. A window (rather
-- than cells scattered over the map) keeps the short-range correlations
-- that interpolation needs in view.
local subset_x, subset_y = {}, {}
for k, p in ipairs(x) do
  if p[1] >= 30 and p[1] < 56 and p[2] >= 18 and p[2] < 44 then
    subset_x[#subset_x + 1] = p
    subset_y[#subset_y + 1] = y[k]
  end
end
local fit_model = gp.exact{x = subset_x, y = subset_y, kernel = kernel, noise = 0.1}
print(string.format("fitting the hyperparameters on %d of the training cells", #subset_x))
print("structure: " .. fit_model:explain())
local clock = os.clock()
local fit = fit_model:fit{max_iter = 40, callback = function(iter, mll)
  if iter % 5 == 0 then print(string.format("  iteration %2d  mll %.2f", iter, mll)) end
end}
print(string.format("fitted in %d iterations, %.1f s; log marginal likelihood %.2f", fit.iterations,
                    os.clock() - clock, fit.mll))
print("hyperparameters:\n" .. fit_model:describe())

-- Prediction from all training cells with the fitted kernel (shared object):
-- n is above max_cholesky_size, so the solve is CG through the Kronecker
-- products of the grid.
local model = gp.exact{x = x, y = y, kernel = kernel, noise = fit_model.noise,
                       mean_value = fit_model.mean_value}
print("structure: " .. model:explain())
clock = os.clock()
local pred = lt.with_settings({preconditioner_size = 100, cg_tolerance = 1e-6}, function()
  return model:predict(held, {variance = false})
end):totable()
print(string.format("predicted %d held-out cells in %.2f s", #held, os.clock() - clock))
local gp_grid = {}
for i = 1, nrows do
  gp_grid[i] = {}
  for j = 1, ncols do gp_grid[i][j] = heights[i][j] end
end
for k, cell in ipairs(held) do gp_grid[cell[1]][cell[2]] = pred[k] end

local bilinear = interp.fill(heights, {mask = mask})
local rmse_gp = interp.rmse(heights, gp_grid, mask)
local rmse_bi = interp.rmse(heights, bilinear, mask)
print(string.format("held-out RMSE: GP %.3f m, bilinear interpolation %.3f m", rmse_gp, rmse_bi))

-- Four panels side by side, on one colour scale.
local masked = {}
for i = 1, nrows do
  masked[i] = {}
  for j = 1, ncols do masked[i][j] = mask[i][j] and 0 / 0 or heights[i][j] end
end
local doc = svg.document{width = 1710, height = 470, background = "white"}
local panels = {
  {heights, "truth"}, {masked, "training cells (grey: held out)"},
  {gp_grid, string.format("Kronecker GP (RMSE %.2f m)", rmse_gp)},
  {bilinear, string.format("bilinear (RMSE %.2f m)", rmse_bi)},
}
for k, p in ipairs(panels) do
  local g = doc:group{transform = {translate = {(k - 1) * 410, 0}}}
  -- the last panel is wider by the colour bar's room, so all maps match in size
  svg.draw_heatmap(g, p[1], {width = k == 4 and 480 or 410, height = 470, vmin = lo, vmax = hi,
                             title = p[2],
                             colorbar = k == 4, colorbar_label = k == 4 and "m" or nil})
end
os.execute("mkdir -p out")
doc:write("out/volcano.svg")
print("wrote out/volcano.svg")
