-- W1: per-operation overhead on tiny operands, from Lua.
--
-- Three operations, 10^5 of each per sample, eleven samples, median per op:
--   diag+diag    diag(3) + diag(3)
--   diag+dense   diag(3) + dense 3x3
--   diag*dense   diag(3) * dense 3x1
-- once on plain Lua tables (system "lua-tables": generic loops over rows,
-- a new table per result, as a small pure-Lua matrix library would do) and
-- once with lazytensor. A sample starts from a full collection and ends with
-- one, so the allocation and the collection of every result are paid for
-- inside it. cpu_us_per_op is the median CPU time per op (os.clock) of the
-- same samples. bytes_per_op is the growth of collectgarbage("count") over 1000
-- ops with the collector stopped; lt_bytes_per_op is the growth of
-- lt.memory() over the same (the library's own allocations).

local dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir .. "/?.lua;" .. package.path
local B = require "benchlib"

local W = "W1"
local NOPS = 100000
local SAMPLES = 11
local OPS = { "diag+diag", "diag+dense", "diag*dense" }

local clock = B.clock

---------------------------------------------------------------------------
-- plain tables

local function tdiag_add_diag(a, b)
  local r = {}
  for i = 1, #a do r[i] = a[i] + b[i] end
  return r
end

local function tdiag_add_dense(d, M)
  local r = {}
  for i = 1, #M do
    local src, row = M[i], {}
    for j = 1, #src do row[j] = src[j] end
    row[i] = row[i] + d[i]
    r[i] = row
  end
  return r
end

local function tdiag_mul_dense(d, X)
  local r = {}
  for i = 1, #X do
    local src, row = X[i], {}
    for j = 1, #src do row[j] = d[i] * src[j] end
    r[i] = row
  end
  return r
end

---------------------------------------------------------------------------
-- timed loops: one per operator form, so no closure call sits in the loop

local function loop_call(f, a, b, nops)
  local sink
  for _ = 1, nops do sink = f(a, b) end
  return sink
end

local function loop_add(a, b, nops)
  local sink
  for _ = 1, nops do sink = a + b end
  return sink
end

local function loop_mul(a, b, nops)
  local sink
  for _ = 1, nops do sink = a * b end
  return sink
end

-- median and min seconds per op over SAMPLES samples of nops ops each, and
-- the median CPU seconds per op (os.clock: what a busy host disturbs least)
local function time_loop(loop, f, a, b)
  local samples, cpu = {}, {}
  loop(f, a, b, 1000) -- warm-up
  for s = 1, SAMPLES do
    collectgarbage("collect")
    local c0, t0 = os.clock(), clock()
    loop(f, a, b, NOPS)
    collectgarbage("collect")
    samples[s] = (clock() - t0) / NOPS
    cpu[s] = (os.clock() - c0) / NOPS
  end
  table.sort(samples)
  table.sort(cpu)
  local mid = (SAMPLES + 1) // 2
  return samples[mid], samples[1], cpu[mid]
end

local function bytes_per_op(loop, f, a, b)
  collectgarbage("collect")
  collectgarbage("stop")
  local c0 = collectgarbage("count")
  loop(f, a, b, 1000)
  local c1 = collectgarbage("count")
  collectgarbage("restart")
  collectgarbage("collect")
  return (c1 - c0) * 1024 / 1000
end

local function record(loop, f, a, b)
  local med, mn, cpu = time_loop(loop, f, a, b)
  return {
    median_s = med,
    min_s = mn,
    repeats = SAMPLES,
    inner = NOPS,
    us_per_op = med * 1e6,
    cpu_us_per_op = cpu * 1e6,
    clock = B.clock_name,
    bytes_per_op = bytes_per_op(loop, f, a, b),
  }
end

-- max |got - want| over nested tables of numbers
local function max_err(got, want)
  if type(want) == "number" then return math.abs(got - want) end
  local e = 0
  for i = 1, #want do e = math.max(e, max_err(got[i], want[i])) end
  return e
end

local D1, D2 = { 1, 2, 3 }, { 4, 5, 6 }
local M3 = { { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 10 } }
local X31 = { { 1 }, { 2 }, { 3 } }
local WANT = {
  ["diag+diag"] = { 5, 7, 9 },
  ["diag+dense"] = { { 2, 2, 3 }, { 4, 7, 6 }, { 7, 8, 13 } },
  ["diag*dense"] = { { 1 }, { 4 }, { 9 } },
}

local function emit_tables(op, f, a, b)
  local rec = record(loop_call, f, a, b)
  rec.workload, rec.op, rec.system, rec.n = W, op, "lua-tables", 3
  rec.max_abs_err = max_err(f(a, b), WANT[op])
  B.emit(rec)
end

emit_tables("diag+diag", tdiag_add_diag, D1, D2)
emit_tables("diag+dense", tdiag_add_dense, D1, M3)
emit_tables("diag*dense", tdiag_mul_dense, D1, X31)

---------------------------------------------------------------------------
-- lazytensor

local lt, why = B.load()
if not lt then
  B.skip_all(W, OPS, 3, why)
  return
end

-- the result as nested tables: diagonal for a "diag", else its dense values
local function values_of(op, r)
  if op == "diag+diag" then return r:diagonal():totable() end
  if lt.is_lazy(r) then r = r:dense() end
  return r:totable()
end

local function run_lt(op, loop, make)
  B.run(W, op, 3, function()
    local a, b = make()
    local rec = record(loop, nil, a, b)
    local r = loop(nil, a, b, 1)
    rec.result_type = lt.type(r)
    -- the library's own bytes per op (lt.memory), results left uncollected
    if B.missing(lt, { "memory" }) == nil then
      collectgarbage("collect")
      collectgarbage("stop")
      local m0 = lt.memory()
      loop(nil, a, b, 1000)
      local m1 = lt.memory()
      collectgarbage("restart")
      collectgarbage("collect")
      rec.lt_bytes_per_op = (m1 - m0) / 1000
    end
    rec.max_abs_err = max_err(values_of(op, r), WANT[op])
    return rec
  end)
end

-- the loops take (f, a, b, nops); lazytensor's operators need no f
local function lt_add(_, a, b, nops) return loop_add(a, b, nops) end
local function lt_mul(_, a, b, nops) return loop_mul(a, b, nops) end

run_lt("diag+diag", lt_add, function() return lt.diag(D1), lt.diag(D2) end)
run_lt("diag+dense", lt_add, function() return lt.diag(D1), lt.tensor(M3) end)
run_lt("diag*dense", lt_mul, function() return lt.diag(D1), lt.tensor(X31) end)
