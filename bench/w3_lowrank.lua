-- W3: low rank plus diagonal, A = U U^T + diag(d) with U 20000 x 50:
-- solve, logdet, inv_quad; the baseline is baseline.c's Woodbury against
-- OpenBLAS/LAPACKE on the same data. A is built once and the operations are
-- timed on it, as the baseline works on U and d already in memory; the
-- library caches nothing between calls (no capacitance factorisation is
-- kept), so every call does its whole work. What building costs (a private
-- copy of U, 8 MB) is measured too and reported with each operation
-- (build_median_s).

local dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir .. "/?.lua;" .. package.path
local B = require "benchlib"

local W = "W3"
local OPS = { "solve", "logdet", "inv_quad" }

local data = B.w3_data()
local n = data.n

local lt, why = B.load()
if not lt then
  B.skip_all(W, OPS, n, why)
  return
end
why = B.missing(lt, { "tensor", "lowrank", "diag" })
if why then
  B.skip_all(W, OPS, n, why)
  return
end

local U, d, b, build
local ok, err = pcall(function()
  U, d, b = lt.tensor(data.U), lt.tensor(data.d), lt.tensor(data.b)
  -- lowrank + diag, or failing that lowrank:add_diag
  local tries = {
    function() return lt.lowrank(U) + lt.diag(d) end,
    function() return lt.lowrank(U):add_diag(d) end,
  }
  local errs = {}
  for _, try in ipairs(tries) do
    local good, A = pcall(try)
    if good then
      build = try
      return A
    end
    errs[#errs + 1] = B.reason_of(A)
  end
  error(table.concat(errs, "; "))
end)
data.U, data.d, data.b = nil, nil, nil -- the collector's work: the library's garbage only
if not ok then
  B.skip_all(W, OPS, n, err)
  return
end

local A = build()
local build_s = B.measure(build, { budget = 0.5, max = 100 }).median_s

local function common(rec)
  rec.k = data.k
  rec.operator_type = lt.type(A)
  rec.build_median_s = build_s
  return rec
end

B.run(W, "solve", n, function()
  local x, info
  local rec = B.measure(function() x, info = A:solve(b) end, { budget = 1.5, max = 200 })
  rec.rel_residual = B.rel_residual(A, x, b)
  return common(B.info_fields(rec, info))
end)

B.run(W, "logdet", n, function()
  local v
  local rec = B.measure(function() v = A:logdet() end, { budget = 1.5, max = 200 })
  rec.value = B.num(v)
  return common(rec)
end)

B.run(W, "inv_quad", n, function()
  local v
  local rec = B.measure(function() v = A:inv_quad(b) end, { budget = 1.5, max = 200 })
  rec.value = B.num(v)
  return common(rec)
end)
