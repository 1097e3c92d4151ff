-- bench/peers/scale.lua [n ...]: one GP marginal log-likelihood and its
-- gradient by lazytensor.gp's iterative path at a scale no dense matrix
-- reaches (issue 12, part 7): n = 100000 scattered 2-d points (W8's
-- problem: problems.lua), RBF, lengthscale 1, variance 1, noise 0.1 —
-- K would be 80 GB dense. Prints one JSON line per n: wall time, peak
-- resident memory of the process (VmHWM), the MLL and gradient, and, where
-- the exact answer can be formed (n ≤ problems.EXACT_GRADIENT_MAX), its
-- error against it — the same settings at a smaller n being the error
-- estimate for the large run.
--
--   SCALE_THREADS           lt.settings.num_threads (default 2)
--   SCALE_PRECONDITIONER    lt.settings.preconditioner_size (default 200:
--                           the RBF's spectrum on [0, 5]² needs about that
--                           rank; 15 takes ~100 CG steps at n = 20000)
--   SCALE_DATA              where problems.lua writes (default /tmp)
--
-- Run from the repository root after make, e.g.
--   LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;./bench/?.lua;;' \
--     lua5.4 bench/peers/scale.lua 4000 100000
local dir0 = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir0 .. "/?.lua;" .. dir0 .. "/../?.lua;" .. package.path
local B = require "benchlib"
local P = require "problems"
local lt = require "lazytensor"
local gp = require "lazytensor.gp"

local THREADS = tonumber(os.getenv("SCALE_THREADS") or "2")
local RANK = tonumber(os.getenv("SCALE_PRECONDITIONER") or "200")
local DIR = os.getenv("SCALE_DATA") or "/tmp"

-- peak resident set of this process, in bytes
local function peak_rss()
  local f = io.open("/proc/self/status", "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  local kb = s:match("VmHWM:%s*(%d+)")
  return kb and tonumber(kb) * 1024 or nil
end

local function run(n)
  local D = P.w8_data(DIR, 2, n)
  local W = P.W8
  local mref, gref
  if n <= P.EXACT_GRADIENT_MAX then mref, gref = P.w8_reference(lt, DIR, D, "rbf") end
  lt.settings.num_threads = THREADS
  lt.settings.preconditioner_size = RANK
  lt.settings.max_cholesky_size = 0
  lt.manual_seed(1)
  local model = gp.exact{
    x = lt.tensor(D.X), y = lt.tensor(D.y), mean = "zero", noise = W.noise,
    kernel = gp.kernels.rbf{lengthscale = W.lengthscale, variance = W.variance, dims = {1, 2}},
  }
  D = nil -- luacheck: ignore 311 (the Lua copies of the data are not needed any more)
  collectgarbage()
  local t0 = B.clock()
  local v, g = model:mll_and_grad()
  local rec = {workload = "SCALE", op = "mll_grad", system = "lazytensor", n = n,
               median_s = B.clock() - t0, repeats = 1, threads = THREADS,
               preconditioner_size = RANK, cg_tolerance = lt.settings.cg_tolerance,
               num_trace_samples = lt.settings.num_trace_samples,
               structure = (model:explain():match("^(%S+):")),
               mll = v, g1 = g[1], g2 = g[2], g3 = g[3], peak_rss_bytes = peak_rss(),
               lt_memory_after = lt.memory()}
  if mref then
    rec.exact_mll = mref
    rec.mll_relerr = math.abs(v - mref) / math.abs(mref)
    local num, den = 0, 0
    for i = 1, 3 do
      num = num + (g[i] - gref[i]) ^ 2
      den = den + gref[i] ^ 2
    end
    rec.grad_relerr = math.sqrt(num / den)
  else
    rec.exact = "none: K is n×n dense (" .. string.format("%.0f", 8 * n * n / 2 ^ 30) .. " GB)"
  end
  B.emit(rec)
end

local sizes = {}
for i = 1, #arg do sizes[#sizes + 1] = tonumber(arg[i]) end
if #sizes == 0 then sizes = {4000, 100000} end
for _, n in ipairs(sizes) do run(n) end
