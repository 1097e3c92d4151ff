--- Bayesian optimisation with lazytensor.bo: find the summit of Maunga
-- Whau (Mt Eden, Auckland) from as few height readings as possible.
--
-- The objective is the real terrain — R's `volcano` heights on a 10 m grid
-- (examples/data/volcano.csv), read between grid points by bilinear
-- interpolation — as a surveyor with a costly instrument would meet it: one
-- reading per evaluation, no gradient, a crater beside the summit. Each of
-- five seeds runs bo.minimize (maximize = true; a scrambled-Sobol start of
-- 5 readings, then LogEI) for 40 readings, and random search gets the same
-- number beside it. The map has several hilltops near 180 m (the crater's
-- rim, a ridge to the east) around the 195 m summit: a run often climbs one
-- of them first and finds the summit in its later readings.
--
-- Prints the best height each found per seed and their medians, and writes
-- out/bo_demo.svg: the best height so far against the number of readings
-- (medians over the seeds, with the range of the seeds as a band).
local lt = require "lazytensor"
local bo = require "lazytensor.bo"
local data = require "lazytensor.data"
local svg = require "lazytensor.svg"

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local heights, nrows, ncols = data.read_matrix(here .. "/data/volcano.csv")
local summit = -math.huge
for i = 1, nrows do
  for j = 1, ncols do summit = math.max(summit, heights[i][j]) end
end

-- Height in metres at (east, north) in metres from the south-west corner.
local function height(x)
  local c = x[1] / 10 + 1                 -- column, west to east
  local r = nrows - x[2] / 10             -- row, north to south
  local c0 = math.min(math.floor(c), ncols - 1)
  local r0 = math.min(math.floor(r), nrows - 1)
  local tc, tr = c - c0, r - r0
  local h00, h01 = heights[r0][c0], heights[r0][c0 + 1]
  local h10, h11 = heights[r0 + 1][c0], heights[r0 + 1][c0 + 1]
  return (1 - tr) * ((1 - tc) * h00 + tc * h01) + tr * ((1 - tc) * h10 + tc * h11)
end

local bounds = {{0, 0}, {(ncols - 1) * 10, (nrows - 1) * 10}}
local BUDGET, SEEDS = 40, 5
print(string.format("volcano: %d x %d heights, summit %g m; %d readings per run, %d seeds",
                    nrows, ncols, summit, BUDGET, SEEDS))

local function best_so_far(values)
  local trace, best = {}, -math.huge
  for i, v in ipairs(values) do
    best = math.max(best, v)
    trace[i] = best
  end
  return trace
end

local bo_traces, random_traces = {}, {}
local clock = os.clock()
for seed = 1, SEEDS do
  -- 4 starts from the best of 256 raw candidates (the defaults: 10 of 512):
  -- on a 2-d map as good, and the demo's five runs take half the time
  local x, y, history = bo.minimize(height, bounds, {budget = BUDGET, seed = seed,
                                                     maximize = true, restarts = 4,
                                                     raw_samples = 256})
  local values = {}
  for i, rec in ipairs(history) do values[i] = rec.y end
  bo_traces[seed] = best_so_far(values)
  lt.manual_seed(500 + seed)
  local U = lt.rand(BUDGET, 2):totable()
  local rvalues = {}
  for i, u in ipairs(U) do rvalues[i] = height{u[1] * bounds[2][1], u[2] * bounds[2][2]} end
  random_traces[seed] = best_so_far(rvalues)
  print(string.format("seed %d: bo %.1f m at (%.0f m E, %.0f m N); random search %.1f m",
                      seed, y, x[1], x[2], random_traces[seed][BUDGET]))
end
local seconds = os.clock() - clock

-- Median and range over the seeds after each reading.
local function across(traces)
  local med, lo, hi = {}, {}, {}
  for i = 1, BUDGET do
    local col = {}
    for s = 1, #traces do col[s] = traces[s][i] end
    table.sort(col)
    med[i], lo[i], hi[i] = col[(#col + 1) / 2], col[1], col[#col]
  end
  return med, lo, hi
end
local bo_med, bo_lo, bo_hi = across(bo_traces)
local rs_med, rs_lo, rs_hi = across(random_traces)
print(string.format("median best after %d readings: bo %.1f m, random search %.1f m "
                    .. "(summit %g m); bo %.2f s a run", BUDGET, bo_med[BUDGET], rs_med[BUDGET],
                    summit, seconds / SEEDS))
for _, n in ipairs{10, 20, 30} do
  print(string.format("  after %2d readings: bo %.1f m, random %.1f m", n, bo_med[n], rs_med[n]))
end

local xs = {}
for i = 1, BUDGET do xs[i] = i end
local chart = svg.chart{title = "Finding Maunga Whau's summit: best height so far (5 seeds)",
                        xlabel = "readings (evaluations)", ylabel = "best height (m)",
                        width = 800, height = 480}
chart:band(xs, rs_lo, rs_hi, {label = "random search, range of seeds", color = "#999999"})
chart:band(xs, bo_lo, bo_hi, {label = "bo.minimize, range of seeds", color = "#4c72b0"})
chart:line(xs, rs_med, {label = "random search, median", color = "#555555", dash = "4 2"})
chart:line(xs, bo_med, {label = "bo.minimize (LogEI), median", color = "#4c72b0"})
local top = {}
for i = 1, BUDGET do top[i] = summit end
chart:line(xs, top, {label = "summit", color = "#c44e52", dash = "2 2"})
os.execute("mkdir -p out")
chart:write("out/bo_demo.svg")
print("wrote out/bo_demo.svg")
