--- ARD on real data: disease progression of 442 diabetes patients (Efron et
-- al., 2004; examples/data/diabetes.csv) from 10 inputs — age, sex, body
-- mass index, blood pressure and six blood serum measurements — by an exact
-- GP with an RBF kernel, once with one lengthscale for all inputs and once
-- with one per input (ARD), each fitted by L-BFGS on the marginal
-- likelihood's gradient (lt.kernel's gradient pass, per dimension for ARD).
--
-- Held out: every 5th patient (88); inputs standardised by the training
-- rows. Prints both fits (LML, held-out RMSE and mean negative log
-- predictive density), the ARD lengthscales from the most to the least
-- relevant input, and writes out/diabetes_ard.svg: the held-out patients
-- ranked by the ARD model's prediction, with its 95% predictive interval
-- and the observed values.
local gp = require "lazytensor.gp"
local data = require "lazytensor.data"
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

-- standardise every input by the training rows
for j = 1, #inputs do
  local col = {}
  for i, r in ipairs(xt) do col[i] = r[j] end
  local m, v = mean_var(col)
  for _, set in ipairs{xt, xs} do
    for _, r in ipairs(set) do r[j] = (r[j] - m) / math.sqrt(v) end
  end
end
print(string.format("diabetes: %d training patients, %d held out, %d inputs", #yt, #ys, #inputs))

local ymean, yvar = mean_var(yt)

-- Fits v·rbf + σ² from l = 3 (one or one per input), v = var(y), σ² = var(y)/2.
local function fit(lengthscale)
  local model = gp.exact{x = xt, y = yt, kernel = gp.kernels.rbf{lengthscale = lengthscale,
                                                                 variance = yvar},
                         noise = yvar / 2, mean_value = ymean}
  local clock = os.clock()
  local result = model:fit{max_iter = 150}
  local mean, var = model:predict(xs)
  mean, var = mean:totable(), var:totable()
  local se, nlpd = 0, 0
  for i = 1, #ys do
    local s2 = var[i] + model.noise
    local r = ys[i] - mean[i]
    se = se + r * r
    nlpd = nlpd + 0.5 * math.log(2 * math.pi * s2) + r * r / (2 * s2)
  end
  print(string.format("  %-10s LML %.3f  held-out RMSE %.2f  NLPD %.4f  (%d iterations, %.2f s)",
                      type(lengthscale) == "table" and "ARD" or "isotropic", result.mll,
                      math.sqrt(se / #ys), nlpd / #ys, result.iterations, os.clock() - clock))
  return model, mean, var
end

local iso = fit(3)
print("  " .. iso:describe():gsub("\n", "\n  "))
local ard_start = {}
for j = 1, #inputs do ard_start[j] = 3 end
local ard, mean, var = fit(ard_start)

-- relevance: a short lengthscale means the prediction changes fast with the input
local ls = ard.kernel.values.lengthscale
local order = {}
for j = 1, #inputs do order[j] = j end
table.sort(order, function(a, b) return ls[a] < ls[b] end)
print("ARD lengthscales, most relevant input first:")
for _, j in ipairs(order) do
  -- lengthscales far beyond the data's spread (a few units) switch the input off
  print(string.format("  %-4s %10.4g%s", inputs[j], ls[j], ls[j] > 1e3 and "  (irrelevant)" or ""))
end

-- the held-out patients ranked by the ARD prediction
local rank = {}
for i = 1, #ys do rank[i] = i end
table.sort(rank, function(a, b) return mean[a] < mean[b] end)
local pos, m, lo, hi, obs = {}, {}, {}, {}, {}
for k, i in ipairs(rank) do
  local sd = math.sqrt(math.max(var[i], 0) + ard.noise)
  pos[k], m[k], lo[k], hi[k], obs[k] = k, mean[i], mean[i] - 1.96 * sd, mean[i] + 1.96 * sd, ys[i]
end
local chart = svg.chart{title = "Diabetes progression, held-out patients: ARD GP prediction",
                        xlabel = "held-out patient (ranked by prediction)",
                        ylabel = "disease progression after one year", width = 900, height = 500}
chart:band(pos, lo, hi, {label = "95% predictive interval", color = "#4c72b0"})
chart:line(pos, m, {label = "predicted mean", color = "#c44e52"})
chart:scatter(pos, obs, {label = "observed", r = 2.5, color = "#333333"})
os.execute("mkdir -p out")
chart:write("out/diabetes_ard.svg")
print("wrote out/diabetes_ard.svg")
