-- bench/gp_predict.lua [n n*]: gp.exact's predict (mean and variances) on
-- the exact path, n training points (default 4000) and n* test points
-- (default 1000), Matérn-5/2 ARD in 3-d, against one Cholesky of Ky: CPU
-- seconds (os.clock, one thread), each run from fresh caches (the factor is
-- what is measured). JSON lines.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
lt.settings.num_threads = 1
local n, ns = tonumber(arg[1] or 4000), tonumber(arg[2] or 1000)
lt.manual_seed(1)
local X = lt.rand(n, 3) * 5
local y = lt.randn(n)
local Xs = lt.rand(ns, 3) * 5
local m = gp.exact{x = X, y = y, kernel = gp.kernels.matern52{lengthscale = {1, 1.5, 0.8}},
                   noise = 0.01, structure = "kernel"}
local function line(op, t)
  print(string.format('{"workload":"gp_predict","op":"%s","system":"lazytensor","n":%d,'
                      .. '"n_test":%d,"cpu_s":%.3f}', op, n, ns, t))
  io.stdout:flush()
end
lt.with_settings({max_cholesky_size = n}, function()
  local best_c, best_p = math.huge, math.huge
  for _ = 1, 3 do
    collectgarbage()
    local t0 = os.clock()
    local _ = m:covariance().noisy(m.noise):cholesky()
    best_c = math.min(best_c, os.clock() - t0)
    m.alpha_state, m.chol_state = nil, nil -- from fresh caches
    collectgarbage()
    t0 = os.clock()
    m:predict(Xs)
    best_p = math.min(best_p, os.clock() - t0)
  end
  line("cholesky", best_c)
  line("predict", best_p)
end)
