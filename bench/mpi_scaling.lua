-- bench/mpi_scaling.lua — strong scaling of the distributed kernel
-- (make mpi; doc/mpi.md):
--
--   mpirun -np P --bind-to none lua5.4 bench/mpi_scaling.lua [n] [threads]
--   lua5.4 bench/mpi_scaling.lua [n] [threads] local   -- lt.kernel, no MPI
--
-- (LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;./bench/?.lua;;')
-- For a GP of n points in 3-d (rbf kernel, learnt noise σ² = 1 and mean) on the
-- iterative path it times: one product K·V with 11 columns (CG's block
-- [r | 10 probes]) and with 75 (the gradient's [α | probes | control
-- variate]); then one model:mll_and_grad(), counting the products of the
-- kernel operators and their columns (a Lua rule on matmul that counts and
-- hands on). Rank 0 prints one JSON line per measurement.
local lt = require "lazytensor"
local bench = require "benchlib"

local n = tonumber(arg[1]) or 50000
local threads = tonumber(arg[2]) or 1
local mode = arg[3] or "mpi"
lt.settings.num_threads = threads

local mpi, rank, size = nil, 0, 1
if mode == "mpi" then
  mpi = require "lazytensor.mpi"
  rank, size = mpi.rank(), mpi.size()
end
local gp = require "lazytensor.gp"
local clock = bench.clock

local function emit(fields)
  if rank ~= 0 then return end
  local keys = {}
  for k in pairs(fields) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = fields[k]
    parts[#parts + 1] = string.format("%q: %s", k, type(v) == "string" and string.format("%q", v)
                                      or string.format("%.6g", v))
  end
  io.write("{", table.concat(parts, ", "), "}\n")
  io.flush()
end

-- points uniform in a cube whose side grows as n^(1/3): the same density,
-- so the same conditioning (and CG iterations) at every n
lt.manual_seed(2026)
local X = lt.rand(n, 3) * (4 * (n / 3000) ^ (1 / 3))
local y = (X:narrow(2, 1, 1):reshape(n) * 1.3):exp():log() + lt.randn(n) * 0.1
local spec = {kind = "rbf", lengthscale = 0.2, variance = 1}
local make = mpi and mpi.kernel or lt.kernel
local common = {n = n, ranks = size, threads = threads, mode = mode}

local function with(fields)
  local out = {}
  for k, v in pairs(common) do out[k] = v end
  for k, v in pairs(fields) do out[k] = v end
  return out
end

-- products: the median of 3 (after one warm-up)
local K = make(X, spec)
for _, k in ipairs({11, 75}) do
  local V = lt.randn(n, k)
  local _ = K * V
  local times, cpus = {}, {}
  for i = 1, 3 do
    local t0, c0 = clock(), os.clock()
    _ = K * V
    times[i], cpus[i] = clock() - t0, os.clock() - c0
  end
  table.sort(times)
  table.sort(cpus)
  emit(with({what = "product", columns = k, seconds = times[2], cpu_seconds_rank0 = cpus[2],
             ns_per_entry_rank = times[2] * 1e9 / (n * n / size)}))
end

-- one MLL and gradient; products counted two ways: iterations of the
-- iterative methods (lt.settings.progress: each is one product with the
-- block of CG's or Lanczos' columns) and the products the GP code makes
-- itself (∂K·[α | Z | M], through a counting Lua rule on matmul that hands on)
local counted = {products = 0, columns = 0}
lt.implements("matmul", lt.type(K), "any", function(_, V)
  counted.products = counted.products + 1
  counted.columns = counted.columns + (V:dim() == 1 and 1 or V:size(2))
  return lt.NotImplemented
end)
local iterations = {}
lt.settings.progress = function(p)
  iterations[p.method] = (iterations[p.method] or 0) + 1
end
local model = gp.exact{x = X, y = y, kernel = gp.kernels.rbf{lengthscale = spec.lengthscale},
                       noise = 1, distributed = mpi ~= nil}
lt.manual_seed(7)
local t0, c0 = clock(), os.clock()
local value, grad = model:mll_and_grad()
local seconds, cpu = clock() - t0, os.clock() - c0
lt.settings.progress = nil
local fields = {what = "mll_and_grad", seconds = seconds, cpu_seconds_rank0 = cpu, mll = value,
                grad_lengthscale = grad[1],
                lua_products = counted.products, lua_product_columns = counted.columns}
for method, count in pairs(iterations) do fields["iterations_" .. method] = count end
emit(with(fields))
