-- bench/ski_precond.lua [n d grid]: KISS-GP's iterative MLL + gradient
-- (gp.exact{structure = "ski"}, rbf lengthscale 1, noise 0.01, n points in
-- [0, 10]^d, y = Σ sin(x_k) + noise) over SKI_SEEDS seeds (default 5): per
-- seed the CPU seconds (os.clock, one thread), CG's iterations, the
-- preconditioner's and control variate's ranks (or why there is none), the
-- MLL and ∂/∂log ℓ; then the MLL's spread (sd) over the seeds. JSON lines.
-- TR sets trace_rank (default: the model's, 64).
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
lt.settings.num_threads = 1
local n, d, grid = tonumber(arg[1] or 20000), tonumber(arg[2] or 1), tonumber(arg[3] or 2000)
local seeds = tonumber(os.getenv("SKI_SEEDS") or "5")
lt.manual_seed(3)
local X = lt.rand(n, d) * 10
local y = {}
for i, p in ipairs(X:totable()) do
  local s = 0
  for k = 1, d do s = s + math.sin(p[k]) end
  y[i] = s
end
y = lt.tensor(y) + lt.randn(n) * 0.1
local m = gp.exact{x = X, y = y, kernel = gp.kernels.rbf{lengthscale = 1}, noise = 0.01,
                   structure = "ski", grid = grid, trace_rank = tonumber(os.getenv("TR") or "64")}
local function str(v) return v == nil and "null" or string.format("%q", tostring(v)) end
local vals = {}
for s = 1, seeds do
  lt.manual_seed(s)
  local t0 = os.clock()
  local v, g, info = m:mll_and_grad()
  vals[s] = v
  print(string.format('{"workload":"ski_precond","op":"mll_and_grad","n":%d,"d":%d,"grid":%d,'
                      .. '"seed":%d,"cpu_s":%.3f,"cg_iters":%d,"precond_rank":%d,'
                      .. '"no_preconditioner":%s,"cv_rank":%d,"mll":%.6f,"dlog_lengthscale":%.6f}',
                      n, d, grid, s, os.clock() - t0, info.iterations,
                      info.preconditioner_rank or 0, str(info.no_preconditioner),
                      info.control_variate_rank or 0, v, g[1]))
  io.stdout:flush()
end
local mu, sd = 0, 0
for _, v in ipairs(vals) do mu = mu + v / #vals end
for _, v in ipairs(vals) do sd = sd + (v - mu) ^ 2 / math.max(#vals - 1, 1) end
print(string.format('{"workload":"ski_precond","op":"mll_spread","n":%d,"d":%d,"grid":%d,'
                    .. '"seeds":%d,"mll_sd":%.6g}', n, d, grid, seeds, math.sqrt(sd)))
