--- Learning a covariance built by hand from operators.
--
-- Maunga Whau's heights (examples/data/volcano.csv: 87 rows north to south,
-- 61 columns west to east, 10 m apart), read as 87 draws — one per
-- west–east profile — of a Gaussian over the 61 positions:
--   x_i ~ N(m, A),  A = kernel(t; l, v) + U·Uᵀ + σ²·I,
-- an RBF kernel over the positions t (smooth terrain), a rank-2 term with a
-- learnt factor U (61×2: two shapes every profile is a mix of), and noise.
-- All of it — l, v, U, σ² and the mean m — is fitted by maximising the
-- summed log_prob of lt.mvn(m, A) with L-BFGS (lazytensor.optim).
--
-- The script writes no gradient code: lt.mvn(m, A):log_prob(x, {grad =
-- true}) returns the gradients for the operators A was built from (the
-- kernel's lengthscale and variance, the low-rank factor, the identity's
-- scale) and for the mean, keyed by those objects. The only chain rule here
-- is the log parameterisation of the positive numbers (∂/∂log θ = θ·∂/∂θ).
local lt = require "lazytensor"
local data = require "lazytensor.data"
local optim = require "lazytensor.optim"

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local heights, rows, cols = data.read_matrix(here .. "/data/volcano.csv")

-- The profiles, in standard units (the heights' overall mean and spread).
local total, count = 0, rows * cols
for i = 1, rows do
  for j = 1, cols do total = total + heights[i][j] end
end
local mean_h, var_h = total / count, 0
for i = 1, rows do
  for j = 1, cols do var_h = var_h + (heights[i][j] - mean_h) ^ 2 / count end
end
local X = (lt.tensor(heights) - mean_h) / math.sqrt(var_h) -- rows×cols: one profile per row
local positions = lt.linspace(0, (cols - 1) / 10, cols) -- west–east, in 100 m
print(string.format("volcano: %d west–east profiles of %d heights (%.0f to %.0f m)", rows, cols,
                    X:min() * math.sqrt(var_h) + mean_h, X:max() * math.sqrt(var_h) + mean_h))

-- The covariance from its parameters, built by hand (anew at every step).
local function covariance(p)
  local K = lt.kernel(positions, {kind = "rbf", lengthscale = p.lengthscale,
                                  variance = p.variance})
  local L = lt.lowrank(p.U)
  local N = lt.identity(cols, p.noise)
  return K + L + N, {kernel = K, lowrank = L, noise = N}
end

-- The parameters as one vector for the optimiser: log l, log v, log σ², U, m.
local function unpack_params(x)
  local U, m = {}, {}
  for j = 1, cols do
    U[j] = {x[2 + 2 * j], x[3 + 2 * j]}
    m[j] = x[3 + 2 * cols + j]
  end
  return {lengthscale = math.exp(x[1]), variance = math.exp(x[2]), noise = math.exp(x[3]),
          U = lt.tensor(U), mean = lt.tensor(m)}
end

local function pack_params(p)
  local x = {math.log(p.lengthscale), math.log(p.variance), math.log(p.noise)}
  for _, v in ipairs(p.U:reshape(2 * cols):totable()) do x[#x + 1] = v end
  for _, v in ipairs(p.mean:totable()) do x[#x + 1] = v end
  return x
end

-- Σ_i log N(x_i; m, A) and its gradient with respect to the vector.
local function objective(x)
  local p = unpack_params(x)
  local A, leaves = covariance(p)
  local lp, grads = lt.mvn(p.mean, A):log_prob(X, {grad = true})
  local g = {grads[leaves.kernel].lengthscale * p.lengthscale,
             grads[leaves.kernel].variance * p.variance, grads[leaves.noise].scale * p.noise}
  for _, v in ipairs(grads[leaves.lowrank].U:reshape(2 * cols):totable()) do g[#g + 1] = v end
  for _, v in ipairs(grads[p.mean].values:totable()) do g[#g + 1] = v end
  return lp:sum(), g
end

-- Start: a lengthscale of 500 m, U small and random, m = 0.
lt.manual_seed(7)
local start = {lengthscale = 5, variance = 0.5, noise = 0.1, U = lt.randn(cols, 2) * 0.1,
               mean = lt.zeros(cols)}
local x0 = pack_params(start)
local before = objective(x0)
print(string.format("initial log-likelihood %.2f (%d parameters)", before, #x0))

local clock = os.clock()
local x, best, info = optim.lbfgs(objective, x0, {maximize = true, max_iter = 2000,
  callback = function(iter, value)
    if iter % 250 == 0 then
      print(string.format("  iteration %3d  log-likelihood %.2f", iter, value))
    end
  end})
print(string.format("fitted in %d iterations, %d evaluations (%s), %.2f s CPU", info.iterations,
                    info.evaluations, info.reason, os.clock() - clock))
local p = unpack_params(x)
print(string.format("log-likelihood %.2f (gradient norm %.2g)", best, info.gradnorm))
print(string.format("kernel: lengthscale %.0f m, variance %.3f; noise %.4f (σ = %.2f m)",
                    100 * p.lengthscale, p.variance, p.noise, math.sqrt(p.noise * var_h)))
-- How much of the variance each part explains (its trace over the positions).
local A, leaves = covariance(p)
print(string.format("variance shares: kernel %.3f, low-rank %.3f, noise %.4f",
                    leaves.kernel:trace() / cols, leaves.lowrank:trace() / cols, p.noise))
assert(best > before + 1000, "the fit did not improve the likelihood")
assert(math.abs(lt.mvn(p.mean, A):log_prob(X):sum() - best) < 1e-8 * math.abs(best))
