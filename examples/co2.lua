--- The Mauna Loa CO2 model of Rasmussen & Williams (GPML §5.4.3), fitted
-- with lazytensor.gp: long-term trend (RBF) + seasonal (periodic · RBF) +
-- medium-term irregularities (rational quadratic) + short-term noise
-- (RBF + white). The monthly inputs are regularly spaced and every kernel is
-- stationary, so the model picks a Toeplitz covariance by itself.
--
-- Prints the fitted hyperparameters and the marginal log-likelihood,
-- forecasts 10 years past the data, and writes out/co2.svg (data, posterior
-- mean, 95% band).
local gp = require "lazytensor.gp"
local data = require "lazytensor.data"
local svg = require "lazytensor.svg"

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local columns = data.read_csv(here .. "/data/co2.csv")
local t, ppm = columns.time, columns.ppm
print(string.format("co2: %d monthly readings, %.2f to %.2f", #t, t[1], t[#t]))

local K = gp.kernels
-- Starting values: R&W's fitted hyperparameters (their θ1..θ11), in years and ppm.
local kernel = K.rbf{lengthscale = 67, variance = 66 ^ 2}                      -- long-term trend
  + K.rbf{lengthscale = 90, variance = 2.4 ^ 2}
    * K.periodic{lengthscale = 1.3, period = 1,
                 fixed = {period = true, variance = true}}                     -- seasonal
  + K.rq{lengthscale = 1.2, alpha = 0.78, variance = 0.66 ^ 2}                 -- medium term
  + K.rbf{lengthscale = 0.134, variance = 0.18 ^ 2}                            -- short-term noise

local model = gp.exact{x = t, y = ppm, kernel = kernel, noise = 0.19 ^ 2, mean = "constant"}
print("structure: " .. model:explain())
print(string.format("initial log marginal likelihood: %.3f", (model:mll())))

local clock = os.clock()
local result = model:fit{max_iter = 60, callback = function(iter, mll)
  if iter % 10 == 0 then print(string.format("  iteration %3d  mll %.3f", iter, mll)) end
end}
print(string.format("fitted in %d iterations (%s), %.1f s", result.iterations,
                    result.reason or (result.converged and "converged" or "stopped"),
                    os.clock() - clock))
print(string.format("log marginal likelihood: %.3f", result.mll))
print("hyperparameters:\n" .. model:describe())

-- Forecast: the data's months and 10 years (120 months) beyond them.
local h = (t[#t] - t[1]) / (#t - 1)
local xs = {}
for i = 1, #t + 120 do xs[i] = t[1] + (i - 1) * h end
local mean, var = model:predict(xs)
mean, var = mean:totable(), var:totable()
local lo, hi = {}, {}
for i = 1, #xs do
  local sd = math.sqrt(math.max(var[i], 0) + model.noise)
  lo[i], hi[i] = mean[i] - 1.96 * sd, mean[i] + 1.96 * sd
end
for _, year in ipairs{1998, 2000, 2004, 2007} do
  local i = math.floor((year - t[1]) / h + 0.5) + 1
  print(string.format("forecast %d.0: %.2f ppm (95%%: %.2f to %.2f)", year, mean[i], lo[i], hi[i]))
end

local chart = svg.chart{title = "Mauna Loa CO2: GP fit and 10-year forecast", xlabel = "year",
                        ylabel = "CO2 (ppm)", width = 900, height = 500}
chart:band(xs, lo, hi, {label = "95% interval", color = "#4c72b0"})
chart:scatter(t, ppm, {label = "monthly data", r = 1.5, color = "#333333"})
chart:line(xs, mean, {label = "posterior mean", color = "#c44e52"})
os.execute("mkdir -p out")
chart:write("out/co2.svg")
print("wrote out/co2.svg")
