-- bench/precond_rank.lua [n ...]: the pivoted-Cholesky preconditioner's rank
-- against CG iterations and time (doc/iterative.md, "The preconditioner's
-- rank"). For RBF and Matérn-5/2 kernels on n points uniform in [0, 5]^d
-- (d = 2, 5), lengthscales long (1) and short (0.25), noise 1e-2 and 1e-4,
-- one A:inv_quad_logdet(y, {grad = true, control_variate = 64}) — the GP
-- layer's iterative MLL and gradient — per rank: fixed ranks and the
-- adaptive default (-1). Prints one line per run: the rank used, CG
-- iterations, the relative residual and the CPU seconds (os.clock, one
-- thread; K's entries are cached before the first run, so every rank is
-- timed alike). PRECOND_RANKS, PRECOND_KINDS, PRECOND_DIMS, PRECOND_ELLS,
-- PRECOND_NOISES (space-separated lists) pick subsets. Run with
-- LUA_CPATH/LUA_PATH pointing at the build (README.md).
local lt = require "lazytensor"
lt.settings.num_threads = 1

local sizes = {}
for i = 1, #arg do sizes[#sizes + 1] = tonumber(arg[i]) end
if #sizes == 0 then sizes = {1000} end
local function list(name, default, convert)
  local s = os.getenv(name)
  if not s then return default end
  local out = {}
  for w in s:gmatch("%S+") do out[#out + 1] = convert and convert(w) or w end
  return out
end
local RANKS = list("PRECOND_RANKS", {0, 15, 64, 100, 200, -1}, tonumber)
local KINDS = list("PRECOND_KINDS", {"rbf", "matern52"})
local DIMS = list("PRECOND_DIMS", {2, 5}, tonumber)
local ELLS = list("PRECOND_ELLS", {1, 0.25}, tonumber)
local NOISES = list("PRECOND_NOISES", {1e-2, 1e-4}, tonumber)

-- splitmix64-free: a small LCG is enough for uniform points
local state = 12345
local function uniform()
  state = (state * 1103515245 + 12345) % 2147483648
  return state / 2147483648
end

local function points(n, d)
  local x = {}
  for i = 1, n do
    local row = {}
    for j = 1, d do row[j] = 5 * uniform() end
    x[i] = row
  end
  return lt.tensor(x)
end

print(string.format("%-8s %5s %1s %5s %6s %6s %5s %5s %9s %8s", "kind", "n", "d", "ell", "noise",
                    "rank", "used", "iters", "residual", "cpu_s"))
for _, n in ipairs(sizes) do
  for _, d in ipairs(DIMS) do
    local X = points(n, d)
    local y = lt.randn({n})
    for _, kind in ipairs(KINDS) do
      for _, ell in ipairs(ELLS) do
        for _, noise in ipairs(NOISES) do
          local Ky = lt.kernel(X, {kind = kind, lengthscale = ell, variance = 1}):add_diag(noise)
          lt.with_settings({max_cholesky_size = 0, max_cg_iterations = 1, preconditioner_size = 0},
                           function() Ky:solve(y) end) -- fills K's cache
          for _, rank in ipairs(RANKS) do
            lt.with_settings({max_cholesky_size = 0, preconditioner_size = rank}, function()
              lt.manual_seed(1)
              collectgarbage()
              local t0 = os.clock()
              local _, _, _, info = Ky:inv_quad_logdet(y, {grad = true, control_variate = 64})
              local t = os.clock() - t0
              print(string.format("%-8s %5d %1d %5.2f %6.0e %6d %5d %5d %9.1e %8.3f", kind, n, d,
                                  ell, noise, rank, info.preconditioner_rank or 0,
                                  info.iterations, info.residual, t))
              io.stdout:flush()
            end)
          end
        end
      end
    end
  end
end
