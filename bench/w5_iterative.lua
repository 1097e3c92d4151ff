-- W5: RBF kernel (n = 4000 points in [0,1]^2, lengthscale 0.2) plus noise
-- 0.1 I: CG solve to 1e-6 and SLQ logdet, with the library's defaults
-- otherwise (n is above max_cholesky_size, so the iterative paths run). The
-- baseline is dense Cholesky in baseline.c on the same data; summary.lua
-- sets the SLQ value against the exact one. The operator is rebuilt inside
-- every timed call. Calls take seconds, so there is no warm-up call.

local dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir .. "/?.lua;" .. package.path
local B = require "benchlib"

local W = "W5"
local OPS = { "solve", "logdet" }

local data = B.w5_data()
local n = data.n

local lt, why = B.load()
if not lt then
  B.skip_all(W, OPS, n, why)
  return
end
why = B.missing(lt, { "tensor", "kernel" })
if why then
  B.skip_all(W, OPS, n, why)
  return
end

local X, b
local ok, err = pcall(function()
  X, b = lt.tensor(data.X), lt.tensor(data.b)
  lt.settings.cg_tolerance = 1e-6
end)
data.X, data.b = nil, nil
if not ok then
  B.skip_all(W, OPS, n, err)
  return
end
pcall(lt.manual_seed, 5)

local spec = { kind = "rbf", lengthscale = data.lengthscale, variance = data.variance }
local function K()
  return lt.kernel(X, spec):add_diag(data.noise)
end

local function setting(name)
  local good, v = pcall(function() return lt.settings[name] end)
  if good then return v end
  return nil
end

local OPTS = { budget = 10, max = 3, min = 1, warmup = false }

B.run(W, "solve", n, function()
  local x, info
  local rec = B.measure(function() x, info = K():solve(b) end, OPTS)
  rec.rel_residual = B.rel_residual(K(), x, b)
  rec.cg_tolerance = setting("cg_tolerance")
  return B.info_fields(rec, info)
end)

B.run(W, "logdet", n, function()
  local v
  local rec = B.measure(function() v = K():logdet() end, OPTS)
  rec.value = B.num(v)
  rec.num_trace_samples = setting("num_trace_samples")
  rec.max_lanczos_iterations = setting("max_lanczos_iterations")
  return rec
end)
