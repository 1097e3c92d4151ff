-- bench/kernel_flops.lua [n]: the lazy kernel product's flop rate as a
-- fraction of this machine's dgemm rate, measured in the same run (issue
-- 25). K = lt.kernel(X, rbf) on n points (default 4000) in d = 2 and 10
-- dimensions, times X of k = 1, 8 and 32 columns, with kernel_cache_bytes =
-- 0 (every product evaluates the n² entries); dgemm: a dense 2000×2000
-- times 2000×2000 product (2·2000³ flops, one thread: OPENBLAS_NUM_THREADS=1).
-- K(x, x) is symmetric: the product evaluates the n²/2 entries on and right
-- of the diagonal, each at about 3d (distance) + 15 (exp and the scaling)
-- flops, and uses each twice (2k multiply-adds a use): flops = n²/2·(3d +
-- 15) + 2k·n², the rate that / t. (Issue 25's estimate, d + 15 + k an entry
-- of n², is also given.) Seconds are wall time (luasystem's monotonic clock
-- when it loads, else os.clock), or CPU time with KF_CLOCK=cpu (on a shared
-- machine: other processes' load then slows the run less), best of KF_REPS
-- (default 3); KF_KS lists the k (default "1 8 16 32"), KF_THREADS the
-- kernel products' thread counts (default "1"). JSON lines; the dgemm line
-- and a last line record the load.
local lt = require "lazytensor"
lt.settings.num_threads = 1
local n = tonumber(arg[1] or 4000)
local reps = tonumber(os.getenv("KF_REPS") or "3")
local ks, threads = {}, {}
for w in (os.getenv("KF_KS") or "1 8 16 32"):gmatch("%S+") do ks[#ks + 1] = tonumber(w) end
for w in (os.getenv("KF_THREADS") or "1"):gmatch("%S+") do threads[#threads + 1] = tonumber(w) end

local clock = os.clock
if os.getenv("KF_CLOCK") ~= "cpu" then
  local ok, system = pcall(require, "system")
  if ok and type(system) == "table" and type(system.monotime) == "function" then
    clock = system.monotime
  end
end

local function best(f)
  local b = math.huge
  for _ = 1, reps do
    collectgarbage()
    local t0 = clock()
    f()
    b = math.min(b, clock() - t0)
  end
  return b
end

local function loadavg()
  local f = io.open("/proc/loadavg")
  if not f then return "" end
  local s = f:read("*l") or ""
  f:close()
  return s
end

lt.manual_seed(1)
local m = 2000
local A, B = lt.randn(m, m), lt.randn(m, m)
local tg = best(function() return A * B end)
local peak = 2 * m ^ 3 / tg
local clock_name = clock == os.clock and "cpu" or "wall"
print(string.format('{"workload":"kernel_flops","op":"dgemm","system":"openblas","n":%d,'
                    .. '"seconds":%.4f,"gflops":%.2f,"clock":"%s","loadavg":"%s"}', m, tg,
                    peak / 1e9, clock_name, loadavg()))
io.stdout:flush()

lt.with_settings({kernel_cache_bytes = 0}, function()
  for _, d in ipairs({2, 10}) do
    local X = lt.rand(n, d) * 5
    local K = lt.kernel(X, {kind = "rbf", lengthscale = 1})
    for _, k in ipairs(ks) do
      local V = lt.randn(n, k)
      for _, nt in ipairs(threads) do
        local t = lt.with_settings({num_threads = nt}, function()
          return best(function() return K * V end)
        end)
        local flops = n * n / 2 * (3 * d + 15) + 2 * k * n * n
        local issue = n * n * (d + 15 + k)
        print(string.format('{"workload":"kernel_flops","op":"rbf_matmul","system":"lazytensor",'
                            .. '"n":%d,"d":%d,"k":%d,"threads":%d,"seconds":%.4f,'
                            .. '"ns_per_entry":%.3f,"gflops":%.2f,"fraction_of_dgemm":%.3f,'
                            .. '"fraction_issue_model":%.3f}', n, d, k, nt, t,
                            t / (n * n) * 1e9, flops / t / 1e9, flops / t / peak,
                            issue / t / peak))
        io.stdout:flush()
      end
    end
  end
end)
print(string.format('{"workload":"kernel_flops","op":"end","loadavg":"%s"}', loadavg()))
