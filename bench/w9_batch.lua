-- W9: a batch of 64 GP covariances of n = 200 (RBF on 200 points in [0, 1]^2
-- per member, lengthscale 0.3, plus 0.01·I): solve and inv_quad_logdet of
-- the 64 targets in one batched call, against the same work member by member
-- in a Lua loop (the baseline, system "lua-loop"). The covariances are built
-- inside every timed call (the batched kernel, or the 64 members), and the
-- kernel store is off (kernel_cache_bytes = 0), so every call evaluates its
-- kernels: nothing an earlier call computed is reused. The "dense" ops take the 64
-- covariances materialised as one {64, 200, 200} tensor (the dense batch's
-- Cholesky rule) against a loop over its members; "solve (CG)" runs both
-- sides with max_cholesky_size = 0: the batch as one block CG loop, the
-- loop as 64 preconditioned CG runs.

local dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir .. "/?.lua;" .. package.path
local B = require "benchlib"

local W = "W9"
local batch, n = 64, 200 -- members, points per member (in 2 dimensions)
local spec = { kind = "rbf", lengthscale = 0.3 }
local noise = 0.01
local OPS = { "solve", "inv_quad_logdet", "solve (CG)", "solve (dense)",
  "inv_quad_logdet (dense)" }

local lt, why = B.load()
if lt then why = B.missing(lt, { "tensor", "kernel", "identity", "batch" }) end
if why then
  B.skip_all(W, OPS, n, why)
  return
end

-- the points and targets, from the benchmark's own generator
local r = B.rng(9)
local xs, ys = {}, {}
for m = 1, batch do
  xs[m], ys[m] = {}, {}
  for i = 1, n do
    xs[m][i] = { r:unif(), r:unif() }
    ys[m][i] = r:sym()
  end
end
local X, Y = lt.tensor(xs), lt.tensor(ys) -- {64, 200, 2}, {64, 200}
pcall(function() lt.settings.kernel_cache_bytes = 0 end) -- (absent before the store)
local I = lt.identity(n, noise)

local function batched_cov() return lt.kernel(X, spec) + I end
local function member_cov(m) return lt.kernel(X[m], spec) + I end

-- Σ over members of what the batched results hold, to compare the systems
local function total(t) return B.num(t:sum()) end

-- B.measure, with the process's CPU seconds per call beside the wall
-- clock's: on a busy host (several programs on few cores) the CPU time says
-- more about the work than the wall time does.
local function measure(fn)
  local calls = 0
  local c0 = os.clock()
  local rec = B.measure(function()
    calls = calls + 1
    fn()
  end, { budget = 3, max = 20 })
  rec.cpu_s = (os.clock() - c0) / calls
  return rec
end

-- one measurement of each system, the baseline (the loop) first
local function pair(op, batched_fn, loop_fn)
  local value
  local loop = measure(function() value = loop_fn() end)
  loop.value = value
  loop.workload, loop.op, loop.system, loop.n, loop.batch = W, op, "lua-loop", n, batch
  B.emit(loop)
  B.run(W, op, n, function()
    local v
    local rec = measure(function() v = batched_fn() end)
    rec.value = v
    rec.batch = batch
    rec.rel_diff_vs_loop = B.rel_diff(v, value)
    rec.cpu_ratio_vs_loop = rec.cpu_s / loop.cpu_s
    return rec
  end)
end

pair("solve", function()
  return total(batched_cov():solve(Y))
end, function()
  local s = 0
  for m = 1, batch do s = s + B.num(member_cov(m):solve(Y[m]):sum()) end
  return s
end)

pair("inv_quad_logdet", function()
  local q, ld = batched_cov():inv_quad_logdet(Y)
  return total(q) + total(ld)
end, function()
  local s = 0
  for m = 1, batch do
    local q, ld = member_cov(m):inv_quad_logdet(Y[m])
    s = s + q + ld
  end
  return s
end)

lt.with_settings({ max_cholesky_size = 0 }, function()
  pair("solve (CG)", function()
    return total(batched_cov():solve(Y))
  end, function()
    local s = 0
    for m = 1, batch do s = s + B.num(member_cov(m):solve(Y[m]):sum()) end
    return s
  end)
end)

local K = batched_cov():dense() -- {64, 200, 200}
pair("solve (dense)", function()
  return total(K:solve(Y))
end, function()
  local s = 0
  for m = 1, batch do s = s + B.num(K[m]:solve(Y[m]):sum()) end
  return s
end)

pair("inv_quad_logdet (dense)", function()
  local q, ld = K:inv_quad_logdet(Y)
  return total(q) + total(ld)
end, function()
  local s = 0
  for m = 1, batch do
    local q, ld = K[m]:inv_quad_logdet(Y[m])
    s = s + q + ld
  end
  return s
end)
