-- bench/cv_default.lua [n ...]: the exact GP's iterative MLL + gradient
-- (gp.exact's mll_and_grad above max_cholesky_size) against trace_rank, the
-- rank of the stochastic gradient's control variate (issue 25). For each n
-- (default 2000 4000) and workload (Matérn-5/2 ARD in 3-d, RBF in 2-d, RBF in
-- 5-d; n points uniform in [0, 5]^d, y a smooth function plus noise), the
-- answer of one Cholesky (max_cholesky_size = n) is the reference; then for
-- each trace_rank in CV_RANKS (default "0 16 64") over CV_SEEDS seeds
-- (default 5): the median CPU seconds (os.clock, one thread) of one
-- mll_and_grad, the preconditioner's rank and CG's iterations, the rms over
-- seeds and components of the lengthscale gradient's error, and the MLL's
-- rms error. One JSON line per (workload, n, trace_rank).
--
--   LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;./bench/?.lua;;' \
--     OPENBLAS_NUM_THREADS=1 lua5.4 bench/cv_default.lua 2000 4000
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
lt.settings.num_threads = 1

local sizes = {}
for i = 1, #arg do sizes[#sizes + 1] = tonumber(arg[i]) end
if #sizes == 0 then sizes = {2000, 4000} end
local function list(name, default)
  local s = os.getenv(name)
  if not s then return default end
  local out = {}
  for w in s:gmatch("%S+") do out[#out + 1] = tonumber(w) or w end
  return out
end
local RANKS = list("CV_RANKS", {0, 16, 64})
local SEEDS = tonumber(os.getenv("CV_SEEDS") or "5")
local WORKLOADS = list("CV_WORKLOADS", {"matern52_ard3", "rbf2", "rbf5", "matern52_ard3_noisy",
                                        "rbf2_short", "rbf3_noisy"})

local state = 12345
local function uniform()
  state = (state * 1103515245 + 12345) % 2147483648
  return state / 2147483648
end

local function data(n, d)
  state = 12345
  local x, y = {}, {}
  for i = 1, n do
    local row, s = {}, 0
    for j = 1, d do
      row[j] = 5 * uniform()
      s = s + math.sin(row[j] * (1 + 0.3 * j))
    end
    x[i] = row
    y[i] = s / d + 0.1 * (2 * uniform() - 1)
  end
  return lt.tensor(x), lt.tensor(y)
end

local specs = {
  matern52_ard3 = {d = 3, kernel = function()
    return gp.kernels.matern52{lengthscale = {1.0, 1.5, 0.8}, variance = 1}
  end},
  rbf2 = {d = 2, kernel = function() return gp.kernels.rbf{lengthscale = 1, variance = 1} end},
  rbf5 = {d = 5, kernel = function() return gp.kernels.rbf{lengthscale = 1.5, variance = 1} end},
  -- the same with ten times the noise, and a short-lengthscale RBF
  matern52_ard3_noisy = {d = 3, noise = 0.1, kernel = function()
    return gp.kernels.matern52{lengthscale = {1.0, 1.5, 0.8}, variance = 1}
  end},
  rbf2_short = {d = 2, kernel = function()
    return gp.kernels.rbf{lengthscale = 0.3, variance = 1}
  end},
  rbf3_noisy = {d = 3, noise = 0.1, kernel = function()
    return gp.kernels.rbf{lengthscale = 1, variance = 1}
  end},
}

local function median(t)
  table.sort(t)
  local m = #t
  return m % 2 == 1 and t[(m + 1) / 2] or 0.5 * (t[m / 2] + t[m / 2 + 1])
end

for _, n in ipairs(sizes) do
  for _, w in ipairs(WORKLOADS) do
    local spec = specs[w]
    local X, y = data(n, spec.d)
    local model = gp.exact{x = X, y = y, kernel = spec.kernel(), noise = spec.noise or 0.01,
                           structure = "kernel"}
    local nls = w:find("ard") and spec.d or 1 -- lengthscale components lead get_vector()
    local ref_v, ref_g = lt.with_settings({max_cholesky_size = n},
                                          function() return model:mll_and_grad() end)
    for _, rank in ipairs(RANKS) do
      model.trace_rank = rank
      local times, gerr, verr, ranks, iters = {}, 0, 0, {}, {}
      for s = 1, SEEDS do
        lt.manual_seed(s)
        collectgarbage()
        local t0 = os.clock()
        local v, g, info = lt.with_settings({max_cholesky_size = 0},
                                            function() return model:mll_and_grad() end)
        times[s] = os.clock() - t0
        for q = 1, nls do gerr = gerr + (g[q] - ref_g[q]) ^ 2 end
        verr = verr + (v - ref_v) ^ 2
        ranks[s], iters[s] = info.preconditioner_rank or 0, info.iterations or 0
      end
      local gscale = 0
      for q = 1, nls do gscale = gscale + ref_g[q] ^ 2 end
      print(string.format('{"workload":"cv_default","op":"%s","n":%d,"trace_rank":%d,'
                          .. '"cpu_s":%.3f,"precond_rank":%d,"cg_iters":%d,'
                          .. '"ls_grad_rms_err":%.4g,"ls_grad_rms":%.4g,"mll_rms_err":%.4g,'
                          .. '"seeds":%d}', w, n, rank, median(times), median(ranks),
                          median(iters), math.sqrt(gerr / (SEEDS * nls)),
                          math.sqrt(gscale / nls), math.sqrt(verr / SEEDS), SEEDS))
      io.stdout:flush()
    end
  end
end
