-- lazytensor's side of tools/gp_compare.py (a held-out comparison with
-- scikit-learn's GaussianProcessRegressor): fits one data set's model with
-- lazytensor.gp and prints "key value" lines for the Python script to read.
--
--   LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' \
--     lua5.4 tools/gp_compare.lua co2|diabetes [--ard]
--
-- The data sets, splits, kernels and starting values are defined twice, here
-- and in gp_compare.py, and must stay the same:
--   co2       examples/data/co2.csv; train: time < 1991 (384 months), test:
--             1991-1997 (84 months, a 7-year forecast); R&W's kernel (GPML
--             §5.4.3, as examples/co2.lua) from R&W's values. The full-data
--             fit is reported too (scikit-learn: LML −83.24).
--   diabetes  examples/data/diabetes.csv (10 inputs); test: every 5th row
--             (rows 5, 10, ...), train: the others; inputs standardised by
--             the training rows' mean and (population) standard deviation;
--             v·rbf(l) over all 10 inputs (one lengthscale, or one per input
--             with --ard) + noise, from v = var(y), l = 3, σ² = var(y)/2.
-- The mean is constant and fixed at the training targets' mean, as
-- scikit-learn's GaussianProcessRegressor has it when given y − mean(y):
-- the same model on both sides. The predictive variance for the held-out
-- negative log predictive density (NLPD) is var f(x*) + σ², as scikit-learn's
-- with a WhiteKernel.
local gp = require "lazytensor.gp"
local data = require "lazytensor.data"

local K = gp.kernels
local name = arg[1]
local ard = arg[2] == "--ard"
if name ~= "co2" and name ~= "diabetes" then
  io.stderr:write("usage: lua5.4 tools/gp_compare.lua co2|diabetes [--ard]\n")
  os.exit(2)
end

local function mean_of(v)
  local s = 0
  for _, x in ipairs(v) do s = s + x end
  return s / #v
end

local function variance_of(v)
  local m, s = mean_of(v), 0
  for _, x in ipairs(v) do s = s + (x - m) ^ 2 end
  return s / #v
end

local function report(key, value)
  if type(value) == "number" then
    print(string.format("%s %.10g", key, value))
  else
    print(key .. " " .. tostring(value):gsub("\n", " | "))
  end
end

-- Fits with the mean fixed at mean(y); returns the model and the fit result.
local function fit(x, y, kernel, noise, max_iter)
  local model = gp.exact{x = x, y = y, kernel = kernel, noise = noise, mean = "constant",
                         mean_value = mean_of(y), fixed = {mean = true}}
  local clock = os.clock()
  local result = model:fit{max_iter = max_iter}
  return model, result, os.clock() - clock
end

-- RMSE of the posterior mean and mean NLPD of the held-out targets.
local function held_out(model, xs, ys)
  local mean, var = model:predict(xs)
  local se, nlpd = 0, 0
  for i = 1, #ys do
    local s2 = var[i] + model.noise
    local r = ys[i] - mean[i]
    se = se + r * r
    nlpd = nlpd + 0.5 * math.log(2 * math.pi * s2) + r * r / (2 * s2)
  end
  return math.sqrt(se / #ys), nlpd / #ys
end

local here = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../examples/data/"

if name == "co2" then
  local cols = data.read_csv(here .. "co2.csv")
  local function kernel()
    return K.rbf{lengthscale = 67, variance = 66 ^ 2}
      + K.rbf{lengthscale = 90, variance = 2.4 ^ 2}
        * K.periodic{lengthscale = 1.3, period = 1, fixed = {period = true, variance = true}}
      + K.rq{lengthscale = 1.2, alpha = 0.78, variance = 0.66 ^ 2}
      + K.rbf{lengthscale = 0.134, variance = 0.18 ^ 2}
  end
  local full, full_result, full_time = fit(cols.time, cols.ppm, kernel(), 0.19 ^ 2, 200)
  report("structure", full:explain():match("^[%w_]+"))
  report("lml_full", full_result.mll)
  report("fit_seconds_full", full_time)
  report("iterations_full", full_result.iterations)
  report("hyper_full", full:describe())
  local xt, yt, xs, ys = {}, {}, {}, {}
  for i, t in ipairs(cols.time) do
    if t < 1991 then
      xt[#xt + 1], yt[#yt + 1] = t, cols.ppm[i]
    else
      xs[#xs + 1], ys[#ys + 1] = t, cols.ppm[i]
    end
  end
  local model, result, seconds = fit(xt, yt, kernel(), 0.19 ^ 2, 200)
  local rmse, nlpd = held_out(model, xs, ys)
  report("n_train", #yt)
  report("n_test", #ys)
  report("lml_train", result.mll)
  report("fit_seconds", seconds)
  report("rmse", rmse)
  report("nlpd", nlpd)
  report("hyper", model:describe())
else
  local cols, header = data.read_csv(here .. "diabetes.csv")
  local inputs = {}
  for _, h in ipairs(header) do
    if h ~= "y" then inputs[#inputs + 1] = h end
  end
  local rows, n = {}, #cols.y
  for i = 1, n do
    local r = {}
    for j, h in ipairs(inputs) do r[j] = cols[h][i] end
    rows[i] = r
  end
  local xt, yt, xs, ys = {}, {}, {}, {}
  for i = 1, n do
    if i % 5 == 0 then
      xs[#xs + 1], ys[#ys + 1] = rows[i], cols.y[i]
    else
      xt[#xt + 1], yt[#yt + 1] = rows[i], cols.y[i]
    end
  end
  -- standardise by the training rows
  for j = 1, #inputs do
    local col = {}
    for i, r in ipairs(xt) do col[i] = r[j] end
    local m, sd = mean_of(col), math.sqrt(variance_of(col))
    for _, set in ipairs{xt, xs} do
      for _, r in ipairs(set) do r[j] = (r[j] - m) / sd end
    end
  end
  local vy = variance_of(yt)
  local lengthscale = 3
  if ard then
    lengthscale = {}
    for j = 1, #inputs do lengthscale[j] = 3 end
  end
  local ok, model, result, seconds = pcall(fit, xt, yt,
                                           K.rbf{lengthscale = lengthscale, variance = vy}, vy / 2,
                                           200)
  if not ok then
    report("error", model)
    os.exit(1)
  end
  local rmse, nlpd = held_out(model, xs, ys)
  report("structure", model:explain():match("^[%w_]+"))
  report("n_train", #yt)
  report("n_test", #ys)
  report("lml_train", result.mll)
  report("fit_seconds", seconds)
  report("iterations", result.iterations)
  report("rmse", rmse)
  report("nlpd", nlpd)
  report("hyper", model:describe())
end
