-- bench/benchlib.lua: what the benchmark scripts share.
--
-- * the data generator: splitmix64, bit for bit the one in bench/baseline.c,
--   so the Lua side and the C baselines work on the same numbers and their
--   results (log-determinants, log-probabilities) can be compared;
-- * the workloads' data, built exactly as baseline.c builds them;
-- * timing with a warm-up and a median: a monotonic wall clock like
--   baseline.c's (luasystem's system.monotime, Debian lua-system, which
--   busted needs anyway) when it loads, else os.clock (CPU time, 1 µs
--   resolution); short calls are batched;
-- * one JSON line per measurement, and "skipped" lines when the library
--   lacks what a measurement needs.

local M = {}

local clock, clock_name = os.clock, "os.clock"
do
  local ok, system = pcall(require, "system")
  if ok and type(system) == "table" and type(system.monotime) == "function" then
    clock, clock_name = system.monotime, "monotime"
  end
end
M.clock, M.clock_name = clock, clock_name

local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min

-- BENCH_QUICK=1 quarters every time budget
M.budget_scale = 1.0
do
  local q = os.getenv("BENCH_QUICK")
  if q and q ~= "" and q ~= "0" then M.budget_scale = 0.25 end
end

---------------------------------------------------------------------------
-- random numbers

local Rng = {}
Rng.__index = Rng

function M.rng(seed)
  return setmetatable({ s = seed }, Rng)
end

-- Lua 5.4 integers are 64-bit and wrap around; >> is a logical shift.
function Rng:next()
  local z = self.s + 0x9E3779B97F4A7C15
  self.s = z
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return z ~ (z >> 31)
end

-- uniform on [0, 1) with 53 random bits
function Rng:unif()
  return (self:next() >> 11) * 0x1p-53
end

-- uniform on [-1, 1)
function Rng:sym()
  return 2.0 * self:unif() - 1.0
end

---------------------------------------------------------------------------
-- the workloads' data (see the comments in baseline.c)

function M.w2_data()
  local m, l, nugget = 48, 0.3, 0.1
  local r = M.rng(2)
  local A = {}
  for f = 1, 3 do
    local p = {}
    for i = 1, m do p[i] = r:unif() end
    local F = {}
    for i = 1, m do
      local row = {}
      for j = 1, m do
        local d = p[i] - p[j]
        row[j] = math.exp(-0.5 * d * d / (l * l)) + (i == j and nugget or 0.0)
      end
      F[i] = row
    end
    A[f] = F
  end
  local n = m * m * m
  local b = {}
  for i = 1, n do b[i] = r:sym() end
  return { m = m, n = n, A = A, b = b }
end

function M.w3_data()
  local n, k = 20000, 50
  local r = M.rng(3)
  local U = {}
  for i = 1, n do
    local row = {}
    for j = 1, k do row[j] = r:sym() end
    U[i] = row
  end
  local d, b = {}, {}
  for i = 1, n do d[i] = 0.5 + r:unif() end
  for i = 1, n do b[i] = r:sym() end
  return { n = n, k = k, U = U, d = d, b = b }
end

function M.w4_data()
  local n = 2000
  local r = M.rng(4)
  local A = {}
  for i = 1, n do A[i] = {} end
  for i = 1, n do
    local row = A[i]
    row[i] = n + 0.0
    for j = i + 1, n do
      local v = r:sym()
      row[j] = v
      A[j][i] = v
    end
  end
  local b = {}
  for i = 1, n do b[i] = r:sym() end
  return { n = n, A = A, b = b }
end

function M.w5_data()
  local n = 4000
  local r = M.rng(5)
  local X = {}
  for i = 1, n do
    local a = r:unif()
    X[i] = { a, r:unif() }
  end
  local b = {}
  for i = 1, n do b[i] = r:sym() end
  return { n = n, X = X, b = b, lengthscale = 0.2, variance = 1.0, noise = 0.1 }
end

function M.w6_data(n)
  local r = M.rng(6)
  local c, x = {}, {}
  for k = 1, n do c[k] = 1.0 / k end -- c_k = 1 / (1 + k), k from 0
  for i = 1, n do x[i] = r:sym() end
  return { n = n, c = c, x = x }
end

---------------------------------------------------------------------------
-- timing

-- A full collection runs before the warm-up and before every sample,
-- outside the timed region. fn is called once untimed (unless opts.warmup == false, for calls of
-- seconds), then sampled between opts.min (3) and opts.max (100) times, as
-- many as fit in opts.budget seconds. Calls under 5 ms are batched so that a
-- sample lasts about 5 ms.
function M.measure(fn, opts)
  opts = opts or {}
  local budget = (opts.budget or 1.0) * M.budget_scale
  local max_rep, min_rep = opts.max or 100, opts.min or 3
  local samples = {}
  collectgarbage("collect")
  local t0 = clock()
  fn()
  local first = clock() - t0
  if opts.warmup == false then samples[1] = first end
  local inner = 1
  if first < 5e-3 then inner = ceil(5e-3 / max(first, 1e-7)) end
  local reps = floor(budget / max(first * inner, 1e-9))
  reps = max(min_rep, min(max_rep, reps)) - #samples
  for _ = 1, reps do
    -- the library's memory may be invisible to the collector: free the
    -- previous results between samples, outside the timed region
    collectgarbage("collect")
    t0 = clock()
    for _ = 1, inner do fn() end
    samples[#samples + 1] = (clock() - t0) / inner
  end
  table.sort(samples)
  local k = #samples
  local median = k % 2 == 1 and samples[(k + 1) // 2]
    or 0.5 * (samples[k // 2] + samples[k // 2 + 1])
  return { median_s = median, min_s = samples[1], repeats = k, inner = inner, clock = clock_name }
end

---------------------------------------------------------------------------
-- JSON lines

local ORDER = { "workload", "op", "system", "n", "median_s", "min_s", "repeats", "inner" }
local IN_ORDER = {}
for _, k in ipairs(ORDER) do IN_ORDER[k] = true end

local function json_string(s)
  s = s:gsub('[%c"\\]', function(ch)
    if ch == '"' then return '\\"' end
    if ch == "\\" then return "\\\\" end
    return " "
  end)
  return '"' .. s .. '"'
end

-- "value" (compared across systems) gets every digit, other numbers seven
local function json_value(v, key)
  local t = type(v)
  if t == "number" then
    if math.type(v) == "integer" then return string.format("%d", v) end
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    return string.format(key == "value" and "%.17g" or "%.7g", v)
  elseif t == "boolean" then
    return tostring(v)
  elseif v == nil then
    return "null"
  end
  return json_string(tostring(v))
end

-- one flat object per line: the fixed keys first, the others sorted
function M.emit(rec)
  local parts = {}
  for _, k in ipairs(ORDER) do
    if rec[k] ~= nil then parts[#parts + 1] = json_string(k) .. ":" .. json_value(rec[k], k) end
  end
  local rest = {}
  for k in pairs(rec) do
    if not IN_ORDER[k] then rest[#rest + 1] = k end
  end
  table.sort(rest)
  for _, k in ipairs(rest) do
    parts[#parts + 1] = json_string(k) .. ":" .. json_value(rec[k], k)
  end
  io.write("{", table.concat(parts, ","), "}\n")
  io.stdout:flush()
end

-- the first line of an error, without the "file:line:" of this directory
local function reason_of(err)
  local s = tostring(err):match("^[^\n]*") or "?"
  s = s:gsub("^[^:]*%.lua:%d+: ", "")
  if #s > 240 then s = s:sub(1, 240) .. "..." end
  return s
end
M.reason_of = reason_of

function M.skip(workload, op, n, reason)
  M.emit({
    workload = workload, op = op, system = "lazytensor", n = n, skipped = reason_of(reason),
  })
end

-- Runs fn, which measures and returns a record; emits it, or a "skipped"
-- line with the error's first line when fn raises.
function M.run(workload, op, n, fn)
  local ok, rec = pcall(fn)
  if not ok then
    M.skip(workload, op, n, rec)
    return nil
  end
  rec.workload, rec.op, rec.system, rec.n = workload, op, "lazytensor", n
  M.emit(rec)
  return rec
end

---------------------------------------------------------------------------
-- the library

-- lt, or nil and the reason it could not be loaded; single-threaded
function M.load()
  local ok, lt = pcall(require, "lazytensor")
  if not ok then return nil, "require 'lazytensor' failed: " .. reason_of(lt) end
  if type(lt) ~= "table" then return nil, "require 'lazytensor' returned no module table" end
  pcall(function() lt.settings.num_threads = 1 end)
  return lt
end

-- nil when lt has every named field, else "missing lt.a, lt.b"
function M.missing(lt, names)
  local miss = {}
  for _, name in ipairs(names) do
    local ok, v = pcall(function() return lt[name] end)
    if not ok then
      miss[#miss + 1] = "lt." .. name .. " (" .. reason_of(v) .. ")"
    elseif v == nil then
      miss[#miss + 1] = "lt." .. name
    end
  end
  if #miss == 0 then return nil end
  return "missing " .. table.concat(miss, ", ")
end

-- skip every op of a workload
function M.skip_all(workload, ops, n, reason)
  for _, op in ipairs(ops) do M.skip(workload, op, n, reason) end
end

-- a Lua number from a number or a one-element tensor
function M.num(v)
  if type(v) == "number" then return v end
  local ok, t = pcall(function() return v:totable() end)
  if ok then
    while type(t) == "table" do t = t[1] end
    if type(t) == "number" then return t end
  end
  error("expected a number, got " .. tostring(v))
end

-- ||A x - b|| / ||b|| for 1-d dense x, b
function M.rel_residual(A, x, b)
  return M.num((A * x - b):norm()) / M.num(b:norm())
end

-- the info table's fields a record reports
function M.info_fields(rec, info)
  if type(info) ~= "table" then return rec end
  rec.method = info.method
  rec.iterations = info.iterations
  rec.converged = info.converged
  if type(info.residual) == "number" then rec.info_residual = info.residual end
  return rec
end

-- relative difference, for values compared across systems
function M.rel_diff(a, b)
  return math.abs(a - b) / math.max(math.abs(b), 1e-300)
end

return M
