-- How accurate and how fast LOVE's predictive variances are (doc/gp.md
-- keeps the figures): model:predict(xs, {love = true}) against the exact
-- model:predict(xs) on
--   co2    the Mauna Loa model (examples/co2.lua's kernel, fitted; 468
--          monthly inputs, Toeplitz), at its months and 10 years beyond;
--   2-d    2000 scattered points in [0, 10]², rbf (lengthscale l) +
--          matern32 (lengthscale 3l), σ² = 0.01, l = 2.5 and 1, at 4000 test
--          points (the exact variances by Cholesky: max_cholesky_size raised
--          to 2000).
-- at LOVE ranks (max_root_decomposition_size) 100 and up.
--
--   LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' lua5.4 tools/gp_love.lua
--
-- Timings are CPU seconds (os.clock) on whatever else the machine runs:
-- compare the two columns of one run, not runs.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local data = require "lazytensor.data"

local K = gp.kernels

local function timed(fn)
  local clock = os.clock()
  local a, b, c = fn()
  return os.clock() - clock, a, b, c
end

local function compare(name, model, xs, rank)
  lt.with_settings({max_root_decomposition_size = rank}, function()
    lt.manual_seed(1)
    local love_setup, R, info = timed(function() return model:love_root() end)
    local t_exact, _, exact = timed(function() return model:predict(xs) end)
    local t_love, _, love = timed(function() return model:predict(xs, {love = true}) end)
    local err = (love - exact):abs()
    local rel = err:cdiv(exact:abs() + 1e-300)
    print(string.format("%s: n = %d, %d test points, rank %d (Lanczos residual %.2g; check: "
                        .. "variance_error %.2g, converged %s)", name, model.n, exact:size(1),
                        R:size(2), info.residual or 0, info.variance_error,
                        tostring(info.converged)))
    print(string.format("  variance: max rel error %.3g, max abs error %.3g (largest variance "
                        .. "%.3g), min(LOVE − exact) %.3g", rel:max(), err:max(), exact:max(),
                        (love - exact):min()))
    print(string.format("  CPU s: LOVE root and check %.2f once, then predict %.2f; exact "
                        .. "predict %.2f", love_setup, t_love, t_exact))
  end)
end

-- co2
local here = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../examples/data/"
local cols = data.read_csv(here .. "co2.csv")
local kernel = K.rbf{lengthscale = 67, variance = 66 ^ 2}
  + K.rbf{lengthscale = 90, variance = 2.4 ^ 2}
    * K.periodic{lengthscale = 1.3, period = 1, fixed = {period = true, variance = true}}
  + K.rq{lengthscale = 1.2, alpha = 0.78, variance = 0.66 ^ 2}
  + K.rbf{lengthscale = 0.134, variance = 0.18 ^ 2}
local co2 = gp.exact{x = cols.time, y = cols.ppm, kernel = kernel, noise = 0.19 ^ 2}
co2:fit{max_iter = 60}
local t = cols.time
local h = (t[#t] - t[1]) / (#t - 1)
local xs = {}
for i = 1, #t + 120 do xs[i] = t[1] + (i - 1) * h end
for _, rank in ipairs{100, 200, 300, 400} do compare("co2 (fitted)", co2, xs, rank) end

-- 2-d
lt.manual_seed(2)
local n = 2000
local X = lt.rand(n, 2) * 10
local P = X:totable()
local y = {}
for i = 1, n do y[i] = math.sin(P[i][1]) * math.cos(0.7 * P[i][2]) + 0.1 * math.sin(31 * i) end
local S = lt.rand(4000, 2) * 10
for _, l in ipairs{2.5, 1} do
  local model = gp.exact{x = X, y = y, kernel = K.rbf{lengthscale = l}
                                                 + K.matern32{lengthscale = 3 * l}, noise = 0.01}
  print("2-d structure: " .. model:explain():match("^[^;]*"))
  lt.with_settings({max_cholesky_size = 2000}, function()
    for _, rank in ipairs{100, 200, 400} do compare("2-d, l = " .. l, model, S, rank) end
  end)
end
