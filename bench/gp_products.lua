-- bench/gp_products.lua DATA N WHICH: one MLL + gradient of a product
-- kernel on scattered inputs (doc/gp.md, "Kernels", records the figures).
--   DATA  co2: 1-d scattered (CO2-like: trend and yearly cycle), rbf * periodic
--         grid2: 2-d scattered on [0, 10]², rbf(dims {1}) * matern52(dims {2})
--         rbf2: the same points, rbf(dims {1}) * rbf(dims {2}) — equal to
--               one ARD rbf, which WHICH = ard computes as one lt.kernel
--   WHICH dense:   the Lua loops (structure = "dense": K and every ∂K by
--                  kernel:value) — how products were computed before
--         kernel:  the C operators (lt.kernel leaves under a lazy Hadamard)
--         sum:     the same two kernels added, not multiplied (a plain sum
--                  of lt.kernel operators), for the iterative path's cost
--         ard:     (rbf2 only) the product as the one ARD kernel it equals:
--                  the same matrix, so the same CG run, without the Hadamard
--   N > max_cholesky_size (800 by default) takes the iterative path.
-- Run from the repository root after `make`, one process per measurement:
--
--   OPENBLAS_NUM_THREADS=1 LUA_CPATH='./?.so;;' \
--     LUA_PATH='./lua/?.lua;./lua/?/init.lua;./bench/?.lua;;' \
--     lua5.4 bench/gp_products.lua grid2 4000 kernel
--
-- Prints wall seconds (luasystem's monotonic clock when it loads), the
-- MLL, the CG iterations, lt.memory()'s peak above the start and the
-- gradient's norm.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local bench = require "benchlib"
local K = gp.kernels

local data_name, n, which = arg[1] or "grid2", tonumber(arg[2] or 1000), arg[3] or "kernel"

-- Scattered inputs and targets, from lt's generator (seeded).
local function dataset()
  lt.manual_seed(7)
  if data_name == "co2" then
    local t = (lt.rand(n) * 40):totable()
    table.sort(t)
    local e = lt.randn(n):totable()
    local x, y = {}, {}
    for i, ti in ipairs(t) do
      x[i] = {ti}
      y[i] = 0.05 * ti + math.sin(2 * math.pi * ti) * (1 + 0.02 * ti) + 0.1 * e[i]
    end
    return x, y, function(multiply)
      local a, b = K.rbf{lengthscale = 20}, K.periodic{lengthscale = 1, period = 1}
      return multiply and a * b or a + b
    end
  end
  local X = (lt.rand(n, 2) * 10):totable()
  local e = lt.randn(n):totable()
  local y = {}
  for i, p in ipairs(X) do y[i] = math.sin(p[1]) * math.cos(0.7 * p[2]) + 0.1 * e[i] end
  return X, y, function(multiply)
    if which == "ard" then return K.rbf{lengthscale = {1.5, 2}} end
    local a = K.rbf{lengthscale = 1.5, dims = {1}}
    local b = (data_name == "rbf2" and K.rbf or K.matern52){lengthscale = 2, dims = {2}}
    return multiply and a * b or a + b
  end
end

local x, y, kernel_of = dataset()
local model = gp.exact{x = x, y = y, kernel = kernel_of(which ~= "sum"), noise = 0.01,
                       structure = which == "dense" and "dense" or "kernel"}
collectgarbage()
collectgarbage()
local before = lt.memory()
local peak, cg = before, 0
lt.settings.progress = function(ev)
  peak = math.max(peak, lt.memory())
  if ev.method == "cg" then cg = cg + 1 end
end
lt.manual_seed(11)
local t0 = bench.clock()
local value, grad = model:mll_and_grad()
local seconds = bench.clock() - t0
peak = math.max(peak, lt.memory())
local norm = 0
for _, g in ipairs(grad) do norm = norm + g * g end
print(string.format("%s n=%d %s: %.2f s, mll %.4f, %d CG steps, peak lt.memory +%.0f MB, "
                    .. "|grad| %.4g  (%s)", data_name, n, which, seconds, value, cg,
                    (peak - before) / 2 ^ 20, math.sqrt(norm), model:explain():match("^%w+")))
