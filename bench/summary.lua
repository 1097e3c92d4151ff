-- bench/summary.lua [--markdown] [FILE]: reads the benchmark's JSON lines (FILE or stdin)
-- and prints, per workload and op, lazytensor's median time against the
-- in-run baseline's, their ratio, the issue's target for it and whether this
-- run is within it (a report, not a check: nothing here fails), and the
-- accuracy fields. Lines that are not JSON objects are ignored. With
-- --markdown the tables are Markdown (for bench/RESULTS.md).

---------------------------------------------------------------------------
-- a parser for flat JSON objects: string keys; string, number, true,
-- false, null values

local function parse_error(s, pos, what)
  error(string.format("summary: bad JSON at column %d (%s): %s", pos, what, s), 0)
end

local ESCAPES = {
  ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t",
}

local function parse_string(s, pos)
  -- s:sub(pos, pos) is the opening quote
  local out = {}
  local i = pos + 1
  while true do
    local c = s:sub(i, i)
    if c == "" then parse_error(s, pos, "unterminated string") end
    if c == '"' then return table.concat(out), i + 1 end
    if c == "\\" then
      local e = s:sub(i + 1, i + 1)
      if e == "u" then
        local hex = s:sub(i + 2, i + 5)
        if not hex:match("^%x%x%x%x$") then parse_error(s, i, "bad \\u escape") end
        out[#out + 1] = utf8.char(tonumber(hex, 16))
        i = i + 6
      elseif ESCAPES[e] then
        out[#out + 1] = ESCAPES[e]
        i = i + 2
      else
        parse_error(s, i, "bad escape")
      end
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
end

local function parse_value(s, pos)
  local c = s:sub(pos, pos)
  if c == '"' then return parse_string(s, pos) end
  for word, v in pairs({ ["true"] = true, ["false"] = false, null = "null" }) do
    if s:sub(pos, pos + #word - 1) == word then
      if v == "null" then return nil, pos + #word end
      return v, pos + #word
    end
  end
  local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
  if num and num ~= "" and num ~= "-" then
    local v = tonumber(num)
    if v == nil then parse_error(s, pos, "bad number") end
    return v, pos + #num
  end
  parse_error(s, pos, "unexpected value")
end

-- the table of one line "{...}"; nil for lines that are not objects
local function parse_line(s)
  local pos = s:find("%S")
  if not pos or s:sub(pos, pos) ~= "{" then return nil end
  local obj = {}
  pos = s:find("%S", pos + 1) or #s + 1
  if s:sub(pos, pos) == "}" then return obj end
  while true do
    if s:sub(pos, pos) ~= '"' then parse_error(s, pos, "expected a key") end
    local key
    key, pos = parse_string(s, pos)
    pos = s:find("%S", pos) or #s + 1
    if s:sub(pos, pos) ~= ":" then parse_error(s, pos, "expected ':'") end
    pos = s:find("%S", pos + 1) or #s + 1
    local v
    v, pos = parse_value(s, pos)
    obj[key] = v
    pos = s:find("%S", pos) or #s + 1
    local c = s:sub(pos, pos)
    if c == "}" then return obj end
    if c ~= "," then parse_error(s, pos, "expected ',' or '}'") end
    pos = s:find("%S", pos + 1) or #s + 1
  end
end

---------------------------------------------------------------------------
-- reading

local recs = {}
local MARKDOWN = false
do
  local path
  for _, a in ipairs(arg) do
    if a == "--markdown" then MARKDOWN = true else path = a end
  end
  local f = io.stdin
  if path then f = assert(io.open(path, "r")) end
  for line in f:lines() do
    local ok, obj = pcall(parse_line, line)
    if not ok then
      io.stderr:write(obj, "\n")
    elseif obj and obj.workload then
      recs[#recs + 1] = obj
    end
  end
  if f ~= io.stdin then f:close() end
end

-- several rounds (BENCH_ROUNDS) measure the same thing more than once: keep,
-- per workload, op, system and n, the record with the lowest median (a
-- measurement beats a skip)
do
  local best, kept = {}, {}
  for _, r in ipairs(recs) do
    local key = table.concat({ tostring(r.workload), tostring(r.op), tostring(r.system),
      tostring(r.n) }, "|")
    local b = best[key]
    if r.workload == "meta" or r.op == "*" then
      kept[#kept + 1] = r
    elseif b == nil then
      best[key] = r
      kept[#kept + 1] = r
      r._rounds = 1
    else
      b._rounds = b._rounds + 1
      local better = (b.skipped and not r.skipped)
        or (r.median_s and b.median_s and r.median_s < b.median_s)
      if better then
        -- replace b's contents in place, keeping its position
        local rounds = b._rounds
        for k in pairs(b) do b[k] = nil end
        for k, v in pairs(r) do b[k] = v end
        b._rounds = rounds
      end
    end
  end
  recs = kept
end

---------------------------------------------------------------------------
-- formatting

local function fmt_time(s)
  if type(s) ~= "number" then return "-" end
  if s < 1e-3 then return string.format("%.3g us", s * 1e6) end
  if s < 1 then return string.format("%.3g ms", s * 1e3) end
  return string.format("%.3g s", s)
end

local function fmt_num(v)
  if type(v) == "number" then return string.format("%.3g", v) end
  return tostring(v)
end

local function pad(s, w)
  s = tostring(s)
  if #s >= w then return s end
  return s .. string.rep(" ", w - #s)
end

-- fields that are not measurements' accuracy or facts worth a column
local PLAIN = {
  workload = true, op = true, system = true, n = true, median_s = true, min_s = true,
  repeats = true, inner = true, value = true, skipped = true, k = true, reference_only = true,
  clock = true, us_per_op = true, _rounds = true,
}

local function extras(rec)
  local keys = {}
  for k in pairs(rec) do
    if not PLAIN[k] then keys[#keys + 1] = k end
  end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. fmt_num(rec[k]) end
  return table.concat(parts, " ")
end

---------------------------------------------------------------------------
-- the issue's targets: a description and, given the lazytensor record and
-- the ratio lazytensor / baseline time, whether this run is within it

local TARGETS = {
  W1 = function(lt)
    local limit = lt.op == "diag+diag" and 0.3e-6 or 0.5e-6
    return string.format("<= %.1f us", limit * 1e6), lt.median_s <= limit
  end,
  W2 = function(_, r) return "<= 1.1x", r and r <= 1.1 end,
  W3 = function(_, r) return "<= 1.1x", r and r <= 1.1 end,
  W4 = function(_, r) return ">= 0.95x speed", r and r <= 1 / 0.95 end,
  W5 = function() return "report", nil end,
  W6 = function() return "n log n", nil end,
  W7 = function(_, r) return "<= 1.2x", r and r <= 1.2 end,
  W9 = function(_, r) return "<= 1x (the loop)", r and r <= 1 end,
}

local TITLES = {
  W1 = "W1 overhead: tiny operands from Lua, per op incl. allocation and GC",
  W2 = "W2 kron: three 48x48 SPD factors, n = 110592",
  W3 = "W3 lowrank + diag: k = 50, n = 20000",
  W4 = "W4 dense: n = 2000",
  W5 = "W5 iterative: RBF n = 4000 + noise (CG / SLQ against dense Cholesky)",
  W6 = "W6 toeplitz: symmetric matvec",
  W7 = "W7 mvn: log_prob, cov = lowrank(k = 50) + diag, n = 20000",
  W9 = "W9 batches: 64 GP covariances (RBF + 0.01 I), n = 200, one batched call against a Lua loop",
}

---------------------------------------------------------------------------
-- the report

local function yesno(v)
  if v == nil then return "-" end
  return v and "yes" or "no"
end

local rows_out = 0
local function row(cols, widths)
  local parts = {}
  if MARKDOWN then
    for i, c in ipairs(cols) do parts[i] = tostring(c):gsub("|", "/") end
    print("| " .. table.concat(parts, " | ") .. " |")
    if rows_out == 0 then print("|" .. string.rep("---|", #cols)) end
  else
    for i, c in ipairs(cols) do parts[i] = pad(c, widths[i] or 0) end
    print("  " .. table.concat(parts, "  "))
  end
  rows_out = rows_out + 1
end

local WIDTHS = { 10, 7, 11, 24, 6, 6, 15, 6 }

-- "a; b" without empty parts
local function join(...)
  local parts = {}
  for _, p in ipairs({ ... }) do
    if p ~= nil and p ~= "" then parts[#parts + 1] = p end
  end
  return table.concat(parts, "; ")
end

local function report(w)
  local lts, bases, order, seen = {}, {}, {}, {}
  for _, r in ipairs(recs) do
    if r.workload == w then
      local key = tostring(r.op) .. "@" .. tostring(r.n)
      if r.op == "*" then
        lts[#lts + 1] = r
      elseif r.system == "lazytensor" then
        lts[#lts + 1] = r
      else
        bases[key] = bases[key] or {}
        table.insert(bases[key], r)
      end
      if not seen[key] and r.op ~= "*" then
        seen[key] = true
        order[#order + 1] = key
      end
    end
  end
  if #lts == 0 and next(bases) == nil then return end
  print((MARKDOWN and "#### " or "") .. (TITLES[w] or w))
  if MARKDOWN then print() end
  rows_out = 0
  row({ "op", "n", "lazytensor", "baseline", "ratio", "(min)", "target", "within",
    "accuracy / notes" }, WIDTHS)
  local by_key = {}
  for _, r in ipairs(lts) do
    if r.op == "*" then
      row({ "*", "-", r.system == "lazytensor" and "failed" or "", r.system ~= "lazytensor"
        and "failed" or "", "", "", "", "", r.skipped }, WIDTHS)
    else
      by_key[tostring(r.op) .. "@" .. tostring(r.n)] = r
    end
  end
  for _, key in ipairs(order) do
    local lt = by_key[key]
    local blist = bases[key] or { {} }
    for _, b in ipairs(blist) do
      local op = (lt or b).op
      local n = (lt or b).n
      local bcol = b.system and (fmt_time(b.median_s) .. " " .. b.system
        .. (b.estimated and " (est.)" or "")) or "-"
      if not lt and b.reference_only then
        row({ op, n, "n/a", bcol, "", "", "", "", "reference: part of the baseline's time" },
          WIDTHS)
      elseif not lt then
        row({ op, n, "missing", bcol, "", "", "", "", extras(b) }, WIDTHS)
      elseif lt.skipped then
        row({ op, n, "skipped", bcol, "", "", "", "", lt.skipped }, WIDTHS)
      else
        local ratio = b.median_s and lt.median_s / b.median_s or nil
        local ratio_min = b.min_s and lt.min_s and lt.min_s / b.min_s or nil
        local target, within = TARGETS[w](lt, ratio)
        local notes = extras(lt)
        if lt.value and b.value then
          notes = join(string.format("value %.10g, rel diff vs %s %.2g", lt.value, b.system,
            math.abs(lt.value - b.value) / math.max(math.abs(b.value), 1e-300)), notes)
        elseif lt.value then
          notes = join(string.format("value %.10g", lt.value), notes)
        end
        if w == "W4" and lt.op == "matmul" and b.gflops then
          notes = join(string.format("%.1f vs %.1f GFLOP/s", lt.gflops or 0, b.gflops), notes)
        end
        if w == "W7" and b.w3_solve_plus_logdet_s then
          notes = join(string.format("ratio vs W3 solve + logdet %.2f",
            lt.median_s / b.w3_solve_plus_logdet_s), notes)
        end
        row({ op, n, fmt_time(lt.median_s), bcol, ratio and string.format("%.2f", ratio) or "-",
          ratio_min and string.format("%.2f", ratio_min) or "-", target, yesno(within), notes },
          WIDTHS)
      end
    end
  end
  print()
end

-- the least-squares slope of log(time) against log(n): near 1 for n log n
-- over a range of n, 2 for n^2
local function loglog_slope(system)
  local xs, ys = {}, {}
  for _, r in ipairs(recs) do
    if r.workload == "W6" and r.system == system and r.median_s and not r.estimated then
      xs[#xs + 1] = math.log(r.n)
      ys[#ys + 1] = math.log(r.median_s)
    end
  end
  if #xs < 3 then return nil end
  local mx, my = 0, 0
  for i = 1, #xs do mx, my = mx + xs[i], my + ys[i] end
  mx, my = mx / #xs, my / #xs
  local sxy, sxx = 0, 0
  for i = 1, #xs do
    sxy = sxy + (xs[i] - mx) * (ys[i] - my)
    sxx = sxx + (xs[i] - mx) ^ 2
  end
  return sxy / sxx, #xs
end

for _, r in ipairs(recs) do
  if r.workload == "meta" and r.openblas_config then
    print(string.format("Baselines: %s (core %s), %s", r.openblas_config, tostring(r.openblas_core),
      tostring(r.fftw_version)))
    break
  end
end
for _, r in ipairs(recs) do
  if r.workload == "meta" and r.loadavg then
    print(string.format("Host load (%s): %s on %s CPUs", r.op, r.loadavg, tostring(r.nproc)))
  end
end
print("Summary: median seconds per op; ratio = lazytensor / baseline median (below 1: lazytensor")
print("faster); (min) = the same for the fastest samples, less sensitive to a busy host.")
print("'within' reports this run against the issue's target; nothing is asserted.")
print()
for _, w in ipairs({ "W1", "W2", "W3", "W4", "W5", "W6", "W7", "W9" }) do report(w) end

do
  local lines = {}
  for _, sys in ipairs({ "lazytensor", "fftw" }) do
    local slope, count = loglog_slope(sys)
    if slope then
      lines[#lines + 1] = string.format("%s %.2f over %d sizes", sys, slope, count)
    end
  end
  if #lines > 0 then
    print("W6 log-log slope of time against n (1 + a little for n log n, 2 for dense): "
      .. table.concat(lines, "; "))
    print()
  end
end

local skipped = 0
for _, r in ipairs(recs) do
  if r.skipped then skipped = skipped + 1 end
end
print(string.format("%d measurements read, %d skipped.", #recs, skipped))
