-- bench/stochastic_fit.lua: fitting a stochastic MLL with the default
-- L-BFGS (issue 25). Two workloads on the iterative path: gp.exact
-- Matérn-5/2 ARD in 3-d at n = 2000 (max_cholesky_size = 0), and KISS-GP
-- 1-d at n = 20,000 (grid 2000); fit{max_iter = 30} from the same start,
-- FIT_FIXED=0 to draw fresh probes at every evaluation (the old
-- behaviour). Reports CPU seconds (os.clock, one thread), L-BFGS's
-- iterations, evaluations and stopping reason, the fit's reported MLL, and
-- the MLL at the result by one Cholesky (gp.exact) or a 64-probe SLQ
-- estimate (KISS-GP). JSON lines.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
lt.settings.num_threads = 1
local fixed = os.getenv("FIT_FIXED") ~= "0"
local which = arg[1]

local function line(w, n, t, res, check)
  print(string.format('{"workload":"stochastic_fit","op":"%s","n":%d,"fixed_probes":%s,'
                      .. '"cpu_s":%.2f,"iterations":%d,"evaluations":%d,"reason":"%s",'
                      .. '"converged":%s,"mll_reported":%.4f,"mll_checked":%.4f}', w, n,
                      tostring(fixed), t, res.iterations, res.evaluations, tostring(res.reason),
                      tostring(res.converged), res.mll, check))
  io.stdout:flush()
end

local function fit(m)
  local opts = {max_iter = 30}
  if not fixed then opts.fixed_probes = false end
  lt.manual_seed(1)
  local t0 = os.clock()
  local res = m:fit(opts)
  return os.clock() - t0, res
end

if which == nil or which == "exact" then
  local n = 2000
  lt.manual_seed(5)
  local X = lt.rand(n, 3) * 5
  local y = {}
  for i, p in ipairs(X:totable()) do
    y[i] = math.sin(p[1]) + 0.5 * math.cos(1.3 * p[2]) + 0.2 * p[3]
  end
  y = lt.tensor(y) + lt.randn(n) * 0.1
  local m = gp.exact{x = X, y = y, kernel = gp.kernels.matern52{lengthscale = {1, 1, 1}},
                     noise = 0.05, structure = "kernel"}
  local t, res = lt.with_settings({max_cholesky_size = 0}, function() return fit(m) end)
  local check = lt.with_settings({max_cholesky_size = n}, function() return m:mll() end)
  line("exact_matern52_ard3", n, t, res, check)
end

if which == nil or which == "ski" then
  local n = 20000
  lt.manual_seed(3)
  local X = lt.rand(n, 1) * 10
  local y = {}
  for i, p in ipairs(X:totable()) do y[i] = math.sin(p[1]) + 0.3 * math.sin(3 * p[1]) end
  y = lt.tensor(y) + lt.randn(n) * 0.1
  local m = gp.exact{x = X, y = y, kernel = gp.kernels.rbf{lengthscale = 2}, noise = 0.05,
                     structure = "ski", grid = 2000}
  local t, res = fit(m)
  local check = lt.with_settings({num_trace_samples = 64}, function()
    lt.manual_seed(99)
    return m:mll()
  end)
  line("ski_1d", n, t, res, check)
end
