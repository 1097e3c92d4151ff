-- (The iterative layer's own study, kept from main's bench/w5_iterative.lua;
-- not run by bench/run.sh. Issue 6's W5 is bench/w5_iterative.lua.)
-- Iterative layer benchmark: CG solves and SLQ log-determinants of an RBF
-- kernel + 0.1·I on [0, 1], with and without the pivoted-Cholesky
-- preconditioner, and through a matmul-only operator.
-- Prints one JSON line per measurement (cpu_seconds: os.clock, all threads).
local lt = require "lazytensor"

local function rbf(x, lengthscale)
  local n = x:size(1)
  local d = x:reshape(n, 1) - x:reshape(1, n)
  return (d:pow(2) * (-1 / (2 * lengthscale ^ 2))):exp()
end

local function emit(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = t[k]
    local s = type(v) == "string" and string.format("%q", v) or tostring(v)
    parts[#parts + 1] = string.format("%q: %s", k, s)
  end
  print("{" .. table.concat(parts, ", ") .. "}")
end

local function timed(f)
  local t0 = os.clock()
  local a, b = f()
  return os.clock() - t0, a, b
end

for _, n in ipairs{1000, 2000, 3000} do
  lt.manual_seed(1)
  local K = rbf(lt.rand(n), 0.05)
  local b = lt.randn(n)
  local variants = {
    {"dense+identity", lt.psd(K) + lt.identity(n, 0.1), 15},
    {"dense+identity", lt.psd(K) + lt.identity(n, 0.1), 0},
    {"operator+identity",
     lt.operator{shape = {n, n}, matmul = function(X) return K * X end, psd = true}
       + lt.identity(n, 0.1), 15},
  }
  for _, v in ipairs(variants) do
    local name, A, rank = v[1], v[2], v[3]
    local opts = {max_cholesky_size = 0, cg_tolerance = 1e-6, preconditioner_size = rank,
                  num_trace_samples = 30}
    local secs, x, info = timed(function() return A:solve(b, opts) end)
    emit{bench = "w5_iterative", op = "solve", operand = name, n = n, precond_rank = rank,
         cpu_seconds = secs, iterations = info.iterations, residual = info.residual,
         converged = info.converged, method = info.method}
    local _ = x
    local secs2, ld, info2 = timed(function() return A:logdet(opts) end)
    emit{bench = "w5_iterative", op = "logdet", operand = name, n = n, precond_rank = rank,
         cpu_seconds = secs2, iterations = info2.iterations, value = ld,
         converged = info2.converged, method = info2.method, probes = 30}
  end
end
