-- bench/ski_predict.lua [n d grid n*]: KISS-GP's predict (mean and
-- variances) above max_cholesky_size: gp.exact{structure = "ski"}, rbf
-- lengthscale 1, noise 0.01, n points in [0, 10]^d (default 20,000, 1-d,
-- grid 2000), n* test points inside the grid (default 500); CPU seconds
-- (os.clock, one thread). One JSON line.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
lt.settings.num_threads = 1
local n, d = tonumber(arg[1] or 20000), tonumber(arg[2] or 1)
local grid, ns = tonumber(arg[3] or 2000), tonumber(arg[4] or 500)
lt.manual_seed(3)
local X = lt.rand(n, d) * 10
local y = {}
for i, p in ipairs(X:totable()) do
  local s = 0
  for k = 1, d do s = s + math.sin(p[k]) end
  y[i] = s
end
y = lt.tensor(y) + lt.randn(n) * 0.1
local Xs = lt.rand(ns, d) * 9 + 0.5
local m = gp.exact{x = X, y = y, kernel = gp.kernels.rbf{lengthscale = 1}, noise = 0.01,
                   structure = "ski", grid = grid}
local t0 = os.clock()
local _, var = m:predict(Xs)
print(string.format('{"workload":"ski_predict","op":"predict","system":"lazytensor","n":%d,'
                    .. '"d":%d,"grid":%d,"n_test":%d,"cpu_s":%.3f,"var1":%.8g}', n, d, grid, ns,
                    os.clock() - t0, var[1]))
