-- W2: Kronecker product of three 48 x 48 SPD factors (n = 110592):
-- matvec, solve, logdet; the baseline is baseline.c's factor-wise OpenBLAS
-- loops on the same data. The operator is built once and the three
-- operations are timed on it, as the baseline's loops work on factors already
-- in memory; the library keeps nothing between calls (no factorisation is
-- cached on a kron), so every call does its whole work. What building costs
-- (a private copy of each dense factor) is measured too and reported with
-- the logdet, the operation where it shows (build_median_s).

local dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir .. "/?.lua;" .. package.path
local B = require "benchlib"

local W = "W2"
local OPS = { "matvec", "solve", "logdet" }

local data = B.w2_data()
local n, m = data.n, data.m

local lt, why = B.load()
if not lt then
  B.skip_all(W, OPS, n, why)
  return
end
why = B.missing(lt, { "tensor", "kron" })
if why then
  B.skip_all(W, OPS, n, why)
  return
end

local ok, err = pcall(function()
  local F = {}
  for f = 1, 3 do
    F[f] = lt.tensor(data.A[f])
    -- the factors are SPD; say so where the library lets us
    if B.missing(lt, { "psd" }) == nil then F[f] = lt.psd(F[f]) end
  end
  data.F = F
  data.bt = lt.tensor(data.b)
end)
if not ok then
  B.skip_all(W, OPS, n, err)
  return
end

local F, b = data.F, data.bt
local function build()
  return lt.kron(F[1], F[2], F[3])
end
local K = build()

-- the 16 rows baseline.c checks, by direct sums: {index, value} pairs
local function expected_rows()
  local A1, A2, A3, x = data.A[1], data.A[2], data.A[3], data.b
  local m2 = m * m
  local rows = {}
  for s = 0, 15 do
    local i = s * (n - 1) // 15
    local i1, i2, i3 = i // m2 + 1, (i // m) % m + 1, i % m + 1
    local a3 = A3[i3]
    local sum = 0
    for j1 = 1, m do
      for j2 = 1, m do
        local a12 = A1[i1][j1] * A2[i2][j2]
        local base = (j1 - 1) * m2 + (j2 - 1) * m
        for j3 = 1, m do sum = sum + a12 * a3[j3] * x[base + j3] end
      end
    end
    rows[#rows + 1] = { i + 1, sum }
  end
  return rows
end
local EXPECTED = expected_rows()
data.b = nil -- keep the collector's work to the library's own garbage

local function row_error(y)
  local e, scale = 0, 0
  for _, r in ipairs(EXPECTED) do
    e = math.max(e, math.abs(r[2] - B.num(y:get(r[1]))))
    scale = math.max(scale, math.abs(r[2]))
  end
  return e / scale
end

B.run(W, "matvec", n, function()
  local y
  local rec = B.measure(function() y = K * b end, { budget = 2, max = 200 })
  rec.result_type = lt.type(y)
  rec.rel_err_rows = row_error(y)
  return rec
end)

B.run(W, "solve", n, function()
  local x, info
  local rec = B.measure(function() x, info = K:solve(b) end, { budget = 2, max = 100 })
  rec.rel_residual = B.rel_residual(K, x, b)
  return B.info_fields(rec, info)
end)

B.run(W, "logdet", n, function()
  local v
  local rec = B.measure(function() v = K:logdet() end, { budget = 1, max = 1000 })
  rec.value = B.num(v)
  rec.build_median_s = B.measure(build, { budget = 0.5, max = 1000 }).median_s
  return rec
end)
