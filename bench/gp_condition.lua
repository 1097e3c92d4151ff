-- bench/gp_condition.lua [N] [K]: model:condition with K new points (default
-- 1) on an exact GP of N points (default 2000), against a fresh
-- factorisation of the covariance over all N + K points (issue 28's
-- target: the condition costs at most 1/10 of it). Inputs: N scattered
-- points in [0, 1]², an ARD rbf kernel, noise 0.01; max_cholesky_size is
-- raised above N + K so that both run the exact (Cholesky) path.
--
-- One JSON line per measurement (workload "condition"):
--   fresh_factorisation  gp.exact over all N + K points, its covariance
--                        built and factored (Ky:cholesky())
--   condition            model:condition(x_new, y_new) on a model whose
--                        factor is already there (a Bayesian-optimisation
--                        loop's case: the model predicted, or was itself
--                        conditioned); ratio = condition / fresh
--   condition_first      the same on a model that has to factor its own Ky
--                        first (once; O(N³))
--   condition_predict / fresh_predict  the new model's first predict at
--                        one test point after condition / on the fresh
--                        model (α and the variance: solves with the
--                        updated factor, or a factorisation)
-- and the largest difference of the two models' means and variances at 16
-- test points (max_mean_diff, max_var_diff).
--
-- Run from the repository root after `make`:
--   OPENBLAS_NUM_THREADS=1 LUA_CPATH='./?.so;;' \
--     LUA_PATH='./lua/?.lua;./lua/?/init.lua;./bench/?.lua;;' lua5.4 bench/gp_condition.lua
local B = require "benchlib"

local W = "condition"
local n, k = tonumber(arg and arg[1] or "") or 2000, tonumber(arg and arg[2] or "") or 1
local OPS = {"fresh_factorisation", "condition", "condition_first", "condition_predict",
             "fresh_predict"}

local lt, why = B.load()
if not lt then
  B.skip_all(W, OPS, n, why)
  return
end
local ok_gp, gp = pcall(require, "lazytensor.gp")
if not ok_gp then
  B.skip_all(W, OPS, n, gp)
  return
end

lt.settings.max_cholesky_size = n + k + 1
lt.manual_seed(28)
local x = lt.rand(n, 2):totable()
local x_new = lt.rand(k, 2):totable()
local xs = lt.rand(16, 2):totable()
local function target(p) return math.sin(6 * p[1]) + math.cos(4 * p[2]) end
local y, y_new = {}, {}
for i, p in ipairs(x) do y[i] = target(p) end
for i, p in ipairs(x_new) do y_new[i] = target(p) end
local all_x, all_y = {}, {}
for i = 1, n do all_x[i], all_y[i] = x[i], y[i] end
for i = 1, k do all_x[n + i], all_y[n + i] = x_new[i], y_new[i] end

local function kernel() return gp.kernels.rbf{lengthscale = {0.2, 0.3}} end
local NOISE = 0.01
local model = gp.exact{x = x, y = y, kernel = kernel(), noise = NOISE}
local function fresh()
  return gp.exact{x = all_x, y = all_y, kernel = kernel(), noise = NOISE,
                  mean_value = model.mean_value}
end

local fresh_rec = B.run(W, "fresh_factorisation", n, function()
  local rec = B.measure(function()
    local f = fresh()
    return f:covariance().noisy(f.noise):cholesky()
  end, {budget = 4, max = 10})
  rec.k = k
  return rec
end)

B.run(W, "condition", n, function()
  model:condition(x_new, y_new) -- the model's own factor, computed once
  local c
  local rec = B.measure(function() c = model:condition(x_new, y_new) end, {budget = 2, max = 50})
  rec.k = k
  if fresh_rec then rec.ratio = rec.median_s / fresh_rec.median_s end
  local f = fresh()
  local mc, vc = c:predict(xs)
  local mf, vf = f:predict(xs)
  rec.max_mean_diff = (mc - mf):abs():max()
  rec.max_var_diff = (vc - vf):abs():max()
  return rec
end)

B.run(W, "condition_first", n, function()
  local rec = B.measure(function()
    local m = gp.exact{x = x, y = y, kernel = kernel(), noise = NOISE}
    return m:condition(x_new, y_new)
  end, {budget = 4, max = 10})
  rec.k = k
  return rec
end)

B.run(W, "condition_predict", n, function()
  local rec = B.measure(function() model:condition(x_new, y_new):predict({xs[1]}) end,
                        {budget = 2, max = 50})
  rec.k = k
  return rec
end)

B.run(W, "fresh_predict", n, function()
  local rec = B.measure(function() fresh():predict({xs[1]}) end, {budget = 4, max = 10})
  rec.k = k
  return rec
end)
