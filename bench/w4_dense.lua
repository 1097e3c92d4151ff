-- W4: dense n = 2000: matmul (GFLOP/s), cholesky, solve, logdet; the
-- baseline is raw cblas_dgemm / LAPACKE dpotrf, dpotrs in baseline.c on the
-- same SPD matrix. max_cholesky_size is raised above n so the exact
-- (Cholesky) paths run, and the matrix is marked PSD with lt.psd (inside the
-- timed call) where the library has it.

local dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir .. "/?.lua;" .. package.path
local B = require "benchlib"

local W = "W4"
local OPS = { "matmul", "cholesky", "solve", "logdet" }

local data = B.w4_data()
local n = data.n

-- what the checks need, computed before the Lua matrix is dropped:
-- 64 entries of A * A and 64 entries of A, as {i, j, value}
local PRODUCT, ENTRIES = {}, {}
do
  local Ad = data.A
  for s = 0, 63 do
    local i, j = s * 31 % n + 1, s * 977 % n + 1
    local v = 0
    for q = 1, n do v = v + Ad[i][q] * Ad[q][j] end
    PRODUCT[#PRODUCT + 1] = { i, j, v }
    i, j = s * 131 % n + 1, s * 7919 % n + 1
    ENTRIES[#ENTRIES + 1] = { i, j, Ad[i][j] }
  end
end

local lt, why = B.load()
if not lt then
  B.skip_all(W, OPS, n, why)
  return
end
why = B.missing(lt, { "tensor" })
if why then
  B.skip_all(W, OPS, n, why)
  return
end

local A, b
local ok, err = pcall(function()
  A, b = lt.tensor(data.A), lt.tensor(data.b)
end)
data = nil -- the collector's work is then the library's own garbage
if not ok then
  B.skip_all(W, OPS, n, err)
  return
end
pcall(function() lt.settings.max_cholesky_size = 1000000 end)
local flagged = B.missing(lt, { "psd" }) == nil
local function spd()
  if flagged then return lt.psd(A) end
  return A
end

B.run(W, "matmul", n, function()
  local C
  local rec = B.measure(function() C = A * A end, { budget = 3, max = 20 })
  rec.gflops = 2 * n ^ 3 / rec.median_s * 1e-9
  local e, scale = 0, 0
  for _, p in ipairs(PRODUCT) do
    e = math.max(e, math.abs(p[3] - B.num(C:get(p[1], p[2]))))
    scale = math.max(scale, math.abs(p[3]))
  end
  rec.rel_err_entries = e / scale
  return rec
end)

B.run(W, "cholesky", n, function()
  local L
  local rec = B.measure(function() L = spd():cholesky() end, { budget = 2, max = 50 })
  local e, scale = 0, 0
  for _, p in ipairs(ENTRIES) do
    local i, j = p[1], p[2]
    local v = 0
    for q = 1, math.min(i, j) do v = v + B.num(L:get(i, q)) * B.num(L:get(j, q)) end
    e = math.max(e, math.abs(v - p[3]))
    scale = math.max(scale, math.abs(p[3]))
  end
  rec.rel_err_LLt_entries = e / scale
  rec.result_type = lt.type(L)
  rec.psd_flagged = flagged
  return rec
end)

B.run(W, "solve", n, function()
  local x, info
  local rec = B.measure(function() x, info = spd():solve(b) end, { budget = 2, max = 50 })
  rec.rel_residual = B.rel_residual(A, x, b)
  rec.psd_flagged = flagged
  return B.info_fields(rec, info)
end)

B.run(W, "logdet", n, function()
  local v
  local rec = B.measure(function() v = spd():logdet() end, { budget = 2, max = 50 })
  rec.value = B.num(v)
  rec.psd_flagged = flagged
  return rec
end)
