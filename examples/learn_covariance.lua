--- Learning a covariance built by hand from operators, with lt.grad.
--
-- Maunga Whau's heights (examples/data/volcano.csv: 87 rows north to south,
-- 61 columns west to east, 10 m apart), read as 87 draws — one per
-- west–east profile — of a Gaussian over the 61 positions:
--   x_i ~ N(m, A),  A = kernel(t; l, v) + (U·Uᵀ)ᵀ + 2·(D_pos + D_all),
-- an RBF kernel over the positions t (smooth terrain), a rank-2 term with a
-- learnt factor U (61×2: two shapes every profile is a mix of), and noise
-- in half-variances (a difference of two readings has twice a reading's
-- variance): a log-linear trend across the positions (D_pos) plus a nugget
-- shared by all (D_all).
-- All of it — l, v, U, the noise and the mean m — is fitted by maximising
-- the summed log_prob of lt.mvn(m, A) with L-BFGS (lazytensor.optim).
--
-- The covariance is written as a user would write it, and the structure
-- rules fold it: (U·Uᵀ)ᵀ is a new low-rank leaf, D_pos + D_all a new
-- diagonal, 2·D another. The script writes no gradient code: lt.grad
-- follows every call and hands back the gradient of every parameter
-- through those folds (the tape-free log_prob{grad = true} could not).
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

-- The covariance from its parameters (log values for the positive ones).
local function covariance(p)
  local K = lt.kernel(positions, {kind = "rbf", lengthscale = p.log_l:exp(),
                                  variance = p.log_v:exp()})
  local L = lt.lowrank(p.U):t()
  local D_pos = lt.diag((p.noise_a + positions * p.noise_b):exp())
  local D_all = lt.diag(lt.full({cols}, 1) * p.log_nugget:exp())
  return K + L + 2 * (D_pos + D_all)
end

local function log_likelihood(p) return lt.mvn(p.mean, covariance(p)):log_prob(X):sum() end

-- The parameters as one vector for the optimiser, in a fixed order.
local ORDER = {"log_l", "log_v", "log_nugget", "noise_a", "noise_b", "U", "mean"}

local function to_vector(p)
  local x = {}
  for _, name in ipairs(ORDER) do
    local v = p[name]
    if type(v) == "number" then x[#x + 1] = v
    else
      for _, e in ipairs(v:reshape(v:numel()):totable()) do x[#x + 1] = e end
    end
  end
  return x
end

local function from_vector(x, like)
  local p, k = {}, 0
  for _, name in ipairs(ORDER) do
    local v = like[name]
    if type(v) == "number" then
      k = k + 1
      p[name] = x[k]
    else
      local values = {}
      for i = 1, v:numel() do values[i] = x[k + i] end
      k = k + v:numel()
      p[name] = lt.tensor(values):reshape(v:shape())
    end
  end
  return p
end

local grad_ll = lt.grad(log_likelihood)

-- Start: a lengthscale of 500 m, U small and random, m = 0.
lt.manual_seed(7)
local start = {log_l = math.log(5), log_v = math.log(0.5), log_nugget = math.log(0.02),
               noise_a = math.log(0.03), noise_b = 0, U = lt.randn(cols, 2) * 0.1,
               mean = lt.zeros(cols)}
local function objective(x)
  local grads, value = grad_ll(from_vector(x, start))
  return value, to_vector(grads)
end
local x0 = to_vector(start)
local before = objective(x0)
print(string.format("initial log-likelihood %.2f (%d parameters)", before, #x0))

local clock = os.clock()
local x, best, info = optim.lbfgs(objective, x0, {maximize = true, max_iter = 3000, ftol = 1e-10,
  callback = function(iter, value)
    if iter % 250 == 0 then
      print(string.format("  iteration %3d  log-likelihood %.2f", iter, value))
    end
  end})
print(string.format("fitted in %d iterations, %d evaluations (%s), %.2f s CPU", info.iterations,
                    info.evaluations, info.reason, os.clock() - clock))
local p = from_vector(x, start)
print(string.format("log-likelihood %.2f (gradient norm %.2g)", best, info.gradnorm))
local noise = 2 * ((p.noise_a + positions * p.noise_b):exp() + math.exp(p.log_nugget))
print(string.format("kernel: lengthscale %.0f m, variance %.3f; noise %.4f on average "
                    .. "(σ = %.2f m), %.4f to %.4f", 100 * math.exp(p.log_l), math.exp(p.log_v),
                    noise:mean(), math.sqrt(noise:mean() * var_h), noise:min(), noise:max()))
-- How much of the variance each part explains (its trace over the positions).
print(string.format("variance shares: kernel %.3f, low-rank %.3f, noise %.4f", math.exp(p.log_v),
                    lt.lowrank(p.U):trace() / cols, noise:mean()))
-- lt.grad's gradient against central differences at the optimum (the
-- log-likelihood is about 10⁴, so the differences carry about 1e-5 of
-- rounding; the gradient there is near 0, hence the absolute tolerance)
local ok, err = lt.gradcheck(log_likelihood, p, {rtol = 1e-4, atol = 1e-3})
print(string.format("gradient check at the optimum: %s (largest difference %.2g)",
                    ok and "passed" or "FAILED", err))
assert(best > before + 1000, "the fit did not improve the likelihood")
assert(ok, "lt.grad disagrees with central differences")
local again = require("lazytensor.autograd").evaluate(log_likelihood, p)
assert(math.abs(again - best) < 1e-8 * math.abs(best))
