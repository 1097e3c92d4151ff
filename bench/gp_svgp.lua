--- SVGP regression timing (doc/gp.md, "SVGP"): f(x) = sin x₁·cos 0.7x₂ on
-- [0, 10]² plus N(0, 0.1²) noise, n points (BENCH_SVGP_N, default 20000),
-- rbf kernel, m inducing points (BENCH_SVGP_M, default "100,500"), minibatch
-- 1024, Adam lr 0.01: the time per minibatch step (bound and lt.grad
-- gradient and the update) over one epoch, the full-data ELBO, and the
-- held-out RMSE of the latent mean against f at 2000 points.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"

lt.settings.num_threads = tonumber(os.getenv("BENCH_THREADS") or "1") -- one thread, as the peers

local n = tonumber(os.getenv("BENCH_SVGP_N") or "20000")
local ms = os.getenv("BENCH_SVGP_M") or "100,500"
local epochs = tonumber(os.getenv("BENCH_SVGP_EPOCHS") or "1")

local seed = 12345
local function rnd()
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed / 2147483648
end
local function gauss()
  return math.sqrt(-2 * math.log(1 - rnd())) * math.cos(2 * math.pi * rnd())
end
local function f(a, b) return math.sin(a) * math.cos(0.7 * b) end

local X, Y = lt.zeros(n, 2), lt.zeros(n)
for i = 1, n do
  local a, b = 10 * rnd(), 10 * rnd()
  X:set(i, 1, a)
  X:set(i, 2, b)
  Y:set(i, f(a, b) + 0.1 * gauss())
end
local Xs, truth = lt.zeros(2000, 2), {}
for i = 1, 2000 do
  local a, b = 10 * rnd(), 10 * rnd()
  Xs:set(i, 1, a)
  Xs:set(i, 2, b)
  truth[i] = f(a, b)
end

-- the machine's 1-minute load average (timings on a shared machine need it)
local function load_avg()
  local file = io.open("/proc/loadavg")
  if not file then return "unknown" end
  local v = file:read("n")
  file:close()
  return tostring(v)
end

for m in ms:gmatch("%d+") do
  m = tonumber(m)
  local model = gp.variational{x = X, y = Y, kernel = gp.kernels.rbf{lengthscale = 1},
                               likelihood = gp.likelihoods.gaussian{noise = 0.1}, inducing = m}
  local t0 = os.clock()
  local wall = os.time()
  local res = model:fit{lr = 0.01, epochs = epochs, batch_size = 1024}
  local t = os.clock() - t0
  local mean = model:predict(Xs):totable()
  local se = 0
  for i = 1, 2000 do se = se + (mean[i] - truth[i]) ^ 2 end
  print(string.format("n = %d, m = %d: %d steps, %.4f s CPU a step (wall %d s in all), ELBO %.2f, "
                      .. "RMSE %.4f, load %s", n, m, res.steps, t / res.steps, os.time() - wall,
                      res.elbo, math.sqrt(se / 2000), load_avg()))
end
