-- bench/peers/bo_compare.lua FILE.jsonl...: pairs the BO lines of
-- bench/peers/run.sh (workload "BO": bench/bo_regret.lua's lazytensor.bo
-- runs, bench/peers/bo_peer.py's BoTorch-style GPyTorch loop and random
-- search, one line per problem and seed) and prints, per problem, the simple
-- regret (best found - known minimum) of each system over the seeds all
-- three ran (median and quartiles), how many seeds lazytensor did at least as
-- well as the GPyTorch loop, and the time per BO step (wall and CPU; the mean
-- over all steps = total / steps, and the median of the runs' medians) with
-- the ratio lazytensor / GPyTorch (issue 28 asks for at most 1/3) — as JSON
-- lines ("workload":"compare_bo") and as Markdown tables for bench/RESULTS.md.

-- A small JSON reader (objects, arrays, strings, numbers, literals).
local function decode(s)
  local pos = 1
  local value
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local function str()
    local out, i = {}, pos + 1
    while true do
      local ch = s:sub(i, i)
      if ch == "" then error("unterminated string") end
      if ch == '"' then break end
      if ch == "\\" then
        local e = s:sub(i + 1, i + 1)
        if e == "u" then -- Python's json escapes non-ASCII
          out[#out + 1] = utf8.char(tonumber(s:sub(i + 2, i + 5), 16) or 63)
          i = i + 6
        else
          out[#out + 1] = ({n = "\n", t = "\t", r = "\r", b = "\b", f = "\f"})[e] or e
          i = i + 2
        end
      else
        out[#out + 1] = ch
        i = i + 1
      end
    end
    pos = i + 1
    return table.concat(out)
  end
  local function list(close, item)
    local out = {}
    pos = pos + 1
    ws()
    if s:sub(pos, pos) == close then pos = pos + 1 return out end
    while true do
      item(out)
      ws()
      local c = s:sub(pos, pos)
      pos = pos + 1
      if c == close then return out end
      if c ~= "," then error("expected ',' or '" .. close .. "' at " .. pos) end
    end
  end
  function value()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      return list("}", function(out)
        ws()
        local k = str()
        ws()
        pos = pos + 1 -- ':'
        out[k] = value()
      end)
    elseif c == "[" then
      return list("]", function(out) out[#out + 1] = value() end)
    elseif c == '"' then
      return str()
    end
    local word = s:match("^[^,}%]%s]+", pos) or error("bad JSON at " .. pos)
    pos = pos + #word
    if word == "true" then return true elseif word == "false" then return false end
    if word == "null" or word == "NaN" then return nil end
    return tonumber(word)
  end
  return value()
end

local function quantile(sorted, p) -- linear interpolation (numpy's default)
  local n = #sorted
  if n == 0 then return nil end
  local h = (n - 1) * p + 1
  local lo = math.floor(h)
  local hi = math.min(lo + 1, n)
  return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo])
end

local function stats(values)
  local v = {}
  for i, x in ipairs(values) do v[i] = x end
  table.sort(v)
  return {median = quantile(v, 0.5), q1 = quantile(v, 0.25), q3 = quantile(v, 0.75), n = #v}
end

-- ------------------------------------------------------------ the lines --
-- bench/bo_regret.lua's lines ("workload":"bo_regret", method "bo" or
-- "random", the mean time per step) in bo_peer.py's terms.
local function normalise(r)
  if r.workload ~= "bo_regret" or r.op or not r.method then return r end
  r.system = r.method == "bo" and "lazytensor" or "lazytensor_random"
  if r.steps and r.wall_s_per_step then
    r.step_wall_total_s = r.wall_s_per_step * r.steps
    r.step_cpu_total_s = r.cpu_s_per_step * r.steps
  end
  -- bo_regret.lua runs at lt.settings.num_threads = 1 (it says so in no field)
  r.workload, r.op, r.threads = "BO", "bo_run", r.threads or 1
  return r
end

local runs, skipped, meta = {}, {}, {}   -- runs[problem][system][seed] = line
local order = {}
for _, path in ipairs(#arg > 0 and arg or {"bench/peers/last_run.jsonl"}) do
  local fh = assert(io.open(path))
  for line in fh:lines() do
    local ok, r = pcall(decode, line)
    if ok and type(r) == "table" then
      r = normalise(r)
      if (r.workload == "BO" or r.workload == "bo_regret") and r.skipped then
        skipped[#skipped + 1] = r
      elseif r.workload == "BO" and r.op == "bo_run" and r.problem and r.seed and r.system then
        if not runs[r.problem] then runs[r.problem] = {}; order[#order + 1] = r.problem end
        runs[r.problem][r.system] = runs[r.problem][r.system] or {}
        runs[r.problem][r.system][r.seed] = r
      elseif r.workload == "meta" then
        meta[#meta + 1] = r
      end
    end
  end
  fh:close()
end

local SYSTEMS = {"lazytensor", "gpytorch", "random"}
local LABEL = {lazytensor = "lazytensor.bo", gpytorch = "GPyTorch (BoTorch-style)",
               random = "random search"}
-- Random search from the same designs (bo_peer.py) when it ran, else
-- bench/bo_regret.lua's own (uniform from the first evaluation).
for _, by in pairs(runs) do
  if not by.random and by.lazytensor_random then by.random = by.lazytensor_random end
  by.lazytensor_random = nil
end

-- The seeds every system that ran this problem ran.
local function common_seeds(by_system)
  local seeds = {}
  for seed in pairs(by_system.lazytensor or by_system.gpytorch or by_system.random or {}) do
    local all = true
    for _, s in ipairs(SYSTEMS) do
      if by_system[s] and not by_system[s][seed] then all = false end
    end
    if all then seeds[#seeds + 1] = seed end
  end
  table.sort(seeds)
  return seeds
end

-- The mean time of a step over all steps of all seeds (total / steps).
local function step_times(lines, seeds)
  local wall, cpu, steps = 0, 0, 0
  for _, seed in ipairs(seeds) do
    local r = lines[seed]
    if not r.steps or not r.step_wall_total_s then return nil end
    steps = steps + r.steps
    wall, cpu = wall + r.step_wall_total_s, cpu + (r.step_cpu_total_s or 0 / 0)
  end
  if steps == 0 then return nil end
  return {wall_mean = wall / steps, cpu_mean = cpu / steps, steps = steps}
end

local function fmt(x, f)
  if x == nil or x ~= x then return "—" end
  return string.format(f or "%.3g", x)
end

local function json_line(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = t[k]
    if type(v) == "number" then
      v = (v ~= v or v == math.huge or v == -math.huge) and "null" or string.format("%.6g", v)
    elseif type(v) == "boolean" then
      v = tostring(v)
    else
      v = string.format("%q", tostring(v))
    end
    parts[#parts + 1] = string.format('"%s":%s', k, v)
  end
  print("{" .. table.concat(parts, ",") .. "}")
end

local regret_rows, time_rows = {}, {}
for _, name in ipairs(order) do
  local by = runs[name]
  local seeds = common_seeds(by)
  local any = (by.lazytensor or by.gpytorch or by.random)[seeds[1]]
  local d
  for _, s in ipairs(SYSTEMS) do d = d or (by[s] and by[s][seeds[1]] or {}).d end
  local rec = {workload = "compare_bo", problem = name, seeds = #seeds, d = d,
               budget = any and any.budget, init = any and any.init}
  local st = {}
  for _, s in ipairs(SYSTEMS) do
    if by[s] then
      local reg = {}
      for _, seed in ipairs(seeds) do reg[#reg + 1] = by[s][seed].regret end
      st[s] = stats(reg)
      rec[s .. "_regret_median"], rec[s .. "_regret_q1"], rec[s .. "_regret_q3"] =
        st[s].median, st[s].q1, st[s].q3
      local t = step_times(by[s], seeds)
      if t then
        st[s].time = t
        rec[s .. "_step_wall_mean_s"], rec[s .. "_step_cpu_mean_s"] = t.wall_mean, t.cpu_mean
        rec[s .. "_steps"] = t.steps
      end
      rec[s .. "_threads"] = (by[s][seeds[1]] or {}).threads
    end
  end
  local lt, gp = st.lazytensor, st.gpytorch
  if lt and gp then
    local wins = 0
    for _, seed in ipairs(seeds) do
      if by.lazytensor[seed].regret <= by.gpytorch[seed].regret then wins = wins + 1 end
    end
    rec.lazytensor_at_least_as_good_seeds = wins
    rec.regret_median_ratio = lt.median / gp.median
    if lt.time and gp.time then
      rec.time_ratio_wall_mean = lt.time.wall_mean / gp.time.wall_mean
      rec.time_ratio_cpu_mean = lt.time.cpu_mean / gp.time.cpu_mean
    end
  end
  json_line(rec)
  local cells = {string.format("%s (d = %s, budget %s, %s initial)", name, fmt(d, "%d"),
                               fmt(rec.budget, "%d"), fmt(rec.init, "%d")),
                 tostring(#seeds)}
  for _, s in ipairs(SYSTEMS) do
    local x = st[s]
    cells[#cells + 1] = x and string.format("%s [%s, %s]", fmt(x.median), fmt(x.q1), fmt(x.q3))
      or "—"
  end
  cells[#cells + 1] = rec.lazytensor_at_least_as_good_seeds
    and string.format("%d / %d", rec.lazytensor_at_least_as_good_seeds, #seeds) or "—"
  regret_rows[#regret_rows + 1] = "| " .. table.concat(cells, " | ") .. " |"
  local tc = {name}
  for _, s in ipairs({"lazytensor", "gpytorch"}) do
    local t = st[s] and st[s].time
    tc[#tc + 1] = t and fmt(t.wall_mean * 1e3, "%.1f") or "—"
    tc[#tc + 1] = t and fmt(t.cpu_mean * 1e3, "%.1f") or "—"
  end
  tc[#tc + 1] = fmt(rec.time_ratio_wall_mean, "%.3f")
  tc[#tc + 1] = fmt(rec.time_ratio_cpu_mean, "%.3f")
  tc[#tc + 1] = tostring(rec.lazytensor_threads or "—") .. " / "
    .. tostring(rec.gpytorch_threads or "—")
  time_rows[#time_rows + 1] = "| " .. table.concat(tc, " | ") .. " |"
end

print()
print("Simple regret (best f found − known minimum) after the budget: median [lower quartile, "
      .. "upper quartile] over the seeds")
print()
print("| problem | seeds | " .. LABEL.lazytensor .. " | " .. LABEL.gpytorch .. " | " .. LABEL.random
      .. " | seeds lazytensor ≤ GPyTorch |")
print("|---|---|---|---|---|---|")
for _, row in ipairs(regret_rows) do print(row) end
print()
print("Time per BO step (fit or refit + acquisition optimisation + conditioning), ms, the mean "
      .. "over all steps of all seeds")
print()
print("| problem | lazytensor wall | lazytensor CPU | GPyTorch wall | GPyTorch CPU "
      .. "| ratio lt / GPyTorch, wall | ratio, CPU | threads lt / torch |")
print("|---|---|---|---|---|---|---|---|")
for _, row in ipairs(time_rows) do print(row) end
for _, r in ipairs(skipped) do
  print(string.format("\nskipped: %s %s: %s", tostring(r.system), tostring(r.args),
                      tostring(r.skipped)))
end
for _, m in ipairs(meta) do
  if m.loadavg then print(string.format("load (%s): %s", tostring(m.op), m.loadavg)) end
end
