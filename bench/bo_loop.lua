-- bench/bo_loop.lua: a Bayesian-optimisation-style loop on Branin (issue
-- 25): gp.exact (Matérn-5/2 ARD, 2-d, structure "auto") on the first n of
-- 60 points (n = 5, 10, ..., 60), a new model and fit{max_iter = 50} at
-- every step, then one prediction at two points. CPU seconds (os.clock, one
-- thread) a step, L-BFGS's iterations and evaluations. JSON lines, then the
-- total.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
lt.settings.num_threads = 1
local function branin(x1, x2)
  local b, c, t = 5.1 / (4 * math.pi ^ 2), 5 / math.pi, 1 / (8 * math.pi)
  return (x2 - b * x1 ^ 2 + c * x1 - 6) ^ 2 + 10 * (1 - t) * math.cos(x1) + 10
end
-- points from a small LCG (the same on every Lua)
local state = 2024
local function uniform()
  state = (state * 1103515245 + 12345) % 2147483648
  return state / 2147483648
end
local X, y = {}, {}
for i = 1, 60 do
  local x1, x2 = -5 + 15 * uniform(), 15 * uniform()
  X[i], y[i] = {x1, x2}, branin(x1, x2)
end
local total, steps = 0, 0
for n = 5, 60, 5 do
  local xs, ys = {}, {}
  for i = 1, n do xs[i], ys[i] = X[i], y[i] end
  local t0 = os.clock()
  local m = gp.exact{x = lt.tensor(xs), y = lt.tensor(ys),
                     kernel = gp.kernels.matern52{lengthscale = {1, 1}}}
  local res = m:fit{max_iter = 50}
  m:predict(lt.tensor({{1, 2}, {3, 4}}))
  local t = os.clock() - t0
  total, steps = total + t, steps + 1
  print(string.format('{"workload":"bo_loop","op":"step","system":"lazytensor","n":%d,'
                      .. '"cpu_s":%.4f,"iterations":%d,"evaluations":%d,"mll":%.4f}', n, t,
                      res.iterations, res.evaluations, res.mll))
  io.stdout:flush()
end
print(string.format('{"workload":"bo_loop","op":"total","system":"lazytensor","steps":%d,'
                    .. '"cpu_s":%.4f,"cpu_s_per_step":%.4f}', steps, total, total / steps))
