-- bench/gp_scalable.lua MODEL: the scalable GP models of issue 16 at their
-- target sizes, against the exact GP where it fits (doc/gp.md records the
-- figures). Run from the repository root after `make`:
--
--   LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;./bench/?.lua;;' \
--     lua5.4 bench/gp_scalable.lua sgpr
--
-- Prints one line per measurement: wall seconds (luasystem's monotonic clock
-- when it loads), the library's memory, held-out RMSE of the predictive
-- mean against the noiseless function.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local bench = require "benchlib"

local clock = bench.clock

local function timed(f)
  local t0 = clock()
  local a, b, c = f()
  return clock() - t0, a, b, c
end

local function mb(bytes)
  return string.format("%.0f MB", bytes / 2 ^ 20)
end

-- f(x) = sin(x₁)·cos(0.7·x₂) on [0, 10]², observed with noise 0.1.
local function smooth2(x1, x2)
  return math.sin(x1) * math.cos(0.7 * x2)
end

local function data2d(n, seed)
  lt.manual_seed(seed)
  local X = lt.rand(n, 2) * 10
  local e = lt.randn(n):totable()
  local y = {}
  for i, p in ipairs(X:totable()) do y[i] = smooth2(p[1], p[2]) + 0.1 * e[i] end
  return X, lt.tensor(y)
end

local function truth2d(X)
  local f = {}
  for i, p in ipairs(X:totable()) do f[i] = smooth2(p[1], p[2]) end
  return lt.tensor(f)
end

local function rmse(a, b)
  local d = a - b
  return math.sqrt(d:dot(d) / d:size(1))
end

local function report(fmt, ...)
  io.write(string.format(fmt, ...), "\n")
  io.flush()
end

local models = {}

-- SGPR: m = 500 on n = 100,000 (seconds per bound + gradient, fit), and on
-- n = 3000 beside the exact GP (held-out RMSE, MLL vs bound).
function models.sgpr()
  local Xs = data2d(2000, 7)
  local fs = truth2d(Xs)
  local function kernel() return gp.kernels.rbf{lengthscale = 1, variance = 1} end

  local n_small = 2000
  local X, y = data2d(n_small, 1)
  local exact = gp.exact{x = X, y = y, kernel = kernel(), noise = 0.05, structure = "kernel"}
  lt.with_settings({max_cholesky_size = n_small}, function()
    local t, res = timed(function() return exact:fit{max_iter = 30} end)
    report("exact n = %d: fit %.1f s (%d iterations, %.2f s each), mll %.2f, RMSE %.4f",
           n_small, t, res.iterations, t / math.max(res.evaluations, 1), res.mll,
           rmse(exact:predict(Xs, {variance = false}), fs))
  end)
  for _, m in ipairs{100, 500} do
    local s = gp.sgpr{x = X, y = y, kernel = kernel(), inducing = m, noise = 0.05}
    local t, res = timed(function() return s:fit{max_iter = 30} end)
    report("sgpr n = %d, m = %d: fit %.1f s (%d iterations), bound %.2f, RMSE %.4f", n_small, m,
           t, res.iterations, res.mll, rmse(s:predict(Xs, {variance = false}), fs))
  end

  local n, m = 100000, 500
  X, y = data2d(n, 2)
  local s = gp.sgpr{x = X, y = y, kernel = kernel(), inducing = m, noise = 0.05}
  collectgarbage()
  local base = lt.memory()
  local tb = timed(function() return s:mll() end)
  local tg = timed(function() return s:mll_and_grad() end)
  report("sgpr n = %d, m = %d: bound %.2f s, bound + gradient %.2f s (%d parameters), "
         .. "memory %s over the data", n, m, tb, tg, #s:get_vector(), mb(lt.memory() - base))
  local iters = tonumber(os.getenv("SGPR_ITERS") or "10")
  local t, res = timed(function() return s:fit{max_iter = iters} end)
  report("sgpr n = %d, m = %d: fit %.1f s (%d iterations, %d evaluations, %.1f s each), "
         .. "bound %.1f, RMSE %.4f", n, m, t, res.iterations, res.evaluations,
         t / math.max(res.evaluations, 1), res.mll, rmse(s:predict(Xs, {variance = false}), fs))
end

local which = arg[1]
if not models[which] then
  local names = {}
  for k in pairs(models) do names[#names + 1] = k end
  table.sort(names)
  io.stderr:write("usage: gp_scalable.lua " .. table.concat(names, "|") .. "\n")
  os.exit(1)
end
models[which]()
