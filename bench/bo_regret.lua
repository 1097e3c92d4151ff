-- bench/bo_regret.lua: lazytensor.bo.minimize against random search (issue
-- 28) — the median simple regret (best value found − the known minimum)
-- over seeds at a fixed budget of evaluations, and the time per BO step.
--
--   lua5.4 bench/bo_regret.lua [--problems branin,hartmann6,levy4]
--       [--seeds 10] [--seed-from 1] [--designs DIR] [--write-designs DIR]
--       [--acquisition logei] [--refit-every 1] [--no-random]
--
-- Problems and budgets (init = 2·d + 1 points of the initial design):
--   branin (d = 2) budget 30, hartmann6 (d = 6) budget 60, levy4 (d = 4)
--   budget 60; "name:budget" sets a budget (branin:20); any name of
--   lazytensor.bo.problems works (ackley2, hartmann3, rosenbrock4, ...).
--
-- Initial designs: by default seed s (1, ..., seeds) uses lazytensor's
-- scrambled Sobol design (bo.sobol(init, d, {seed = s}) scaled to the
-- bounds). So that a peer loop (bench/peers/bo_peer.py, BoTorch-style with
-- GPyTorch) starts from the very same points, the designs can be written
-- out (--write-designs DIR) or read in (--designs DIR). The file format, one
-- plain-text file per problem and seed, DIR/bo_init_<problem>_<seed>.txt
-- (e.g. DIR/bo_init_branin_1.txt):
--
--   5 2                  <- first line: n (points) and d (coordinates)
--   -2.5 7.5             <- then n lines of d numbers: one point each,
--   5 3.75                  in the problem's ORIGINAL coordinates
--   ...                     (Branin: x1 in [-5, 10], x2 in [0, 15])
--
-- numbers separated by spaces or tabs, written with %.17g (a design read
-- back is bit for bit the one written). With --designs, seed s reads
-- bo_init_<problem>_<s>.txt for s = 1, ..., seeds; a missing file, a point
-- outside the bounds or a wrong count is an error. --seed-from s0 runs
-- seeds s0, ..., seeds only (to split a run over processes).
--
-- Random search: the design's points, then uniform points (seeded), as
-- bench/peers/bo_peer.py's.
--
-- Output: JSON lines. One per (problem, method, seed):
--   {"workload":"bo_regret","system":"lazytensor","method":"bo"|"random",
--    "problem":"branin","seed":1,"budget":30,"init":5,"best":0.3981,
--    "regret":0.0002,"failed":0,"steps":25,"wall_s_per_step":0.12,
--    "cpu_s_per_step":0.12,"acquisition_cpu_s_per_step":0.1,
--    "update_cpu_s_per_step":0.02,"trace":[regret after evaluation 1, 2, ...]}
-- (acquisition: bo.optimize of the acquisition; update: the refit or
-- model:condition after the step; both CPU seconds, os.clock)
-- then one summary per (problem, method): "op":"summary" with
-- median_regret, the quartiles q25_regret / q75_regret, and the median time
-- per BO step (a step: acquire, evaluate, condition or refit; the initial
-- design's fit is counted in the first step).
-- Timing: wall clock (luasystem's monotime when it loads, else CPU) and CPU
-- (os.clock), one thread (lt.settings.num_threads = 1).
local lt = require "lazytensor"
local bo = require "lazytensor.bo"
local problems = require "lazytensor.bo.problems"

lt.settings.num_threads = 1

local wall = os.clock
do
  local ok, system = pcall(require, "system")
  if ok and type(system) == "table" and type(system.monotime) == "function" then
    wall = system.monotime
  end
end

local DEFAULT = {{"branin", 30}, {"hartmann6", 60}, {"levy4", 60}}

local function parse_args(argv)
  local o = {seeds = 10, acquisition = "logei", refit_every = 1, random = true}
  local i = 1
  while i <= #argv do
    local a, v = argv[i], argv[i + 1]
    if a == "--problems" then o.problems = v
    elseif a == "--seeds" then o.seeds = tonumber(v)
    elseif a == "--seed-from" then o.seed_from = tonumber(v)
    elseif a == "--designs" then o.designs = v
    elseif a == "--write-designs" then o.write_designs = v
    elseif a == "--acquisition" then o.acquisition = v
    elseif a == "--refit-every" then o.refit_every = tonumber(v)
    elseif a == "--no-random" then o.random, i = false, i - 1
    else error("bo_regret: unknown argument " .. tostring(a)) end
    i = i + 2
  end
  local list = {}
  if o.problems then
    for item in o.problems:gmatch("[^,]+") do
      local name, budget = item:match("^([%w]+):?(%d*)$")
      local default
      for _, p in ipairs(DEFAULT) do if p[1] == name then default = p[2] end end
      list[#list + 1] = {name, tonumber(budget) or default or 50}
    end
  else
    list = DEFAULT
  end
  o.problems = list
  return o
end

-- Designs file: see the header.
local function design_path(dir, problem, seed)
  return string.format("%s/bo_init_%s_%d.txt", dir, problem.name, seed)
end

local function read_design(dir, problem, seed)
  local path = design_path(dir, problem, seed)
  local fh = assert(io.open(path, "r"))
  local text = fh:read("*a")
  fh:close()
  local nums = {}
  for tok in text:gmatch("%S+") do
    nums[#nums + 1] = assert(tonumber(tok), path .. ": not a number: " .. tok)
  end
  local n, d = nums[1], nums[2]
  assert(d == problem.dim, string.format("%s: d = %s, %s has %d", path, tostring(d),
                                         problem.name, problem.dim))
  assert(#nums == 2 + n * d, string.format("%s: %d numbers, expected 2 + %d × %d", path,
                                           #nums, n, d))
  local points = {}
  for i = 1, n do
    local row = {}
    for j = 1, d do
      row[j] = nums[2 + (i - 1) * d + j]
      assert(row[j] >= problem.bounds[1][j] and row[j] <= problem.bounds[2][j],
             string.format("%s: point %d, coordinate %d outside the bounds", path, i, j))
    end
    points[i] = row
  end
  return {seed = seed, points = points}
end

local function write_design(dir, problem, dsg)
  local fh = assert(io.open(design_path(dir, problem, dsg.seed), "w"))
  fh:write(string.format("%d %d\n", #dsg.points, problem.dim))
  for _, row in ipairs(dsg.points) do
    local parts = {}
    for j, v in ipairs(row) do parts[j] = string.format("%.17g", v) end
    fh:write(table.concat(parts, " "), "\n")
  end
  fh:close()
end

local function sobol_design(problem, n, seed)
  local rows = bo.sobol(n, problem.dim, {seed = seed}):totable()
  local lo, hi = problem.bounds[1], problem.bounds[2]
  for _, row in ipairs(rows) do
    for j = 1, problem.dim do row[j] = lo[j] + (hi[j] - lo[j]) * row[j] end
  end
  return {seed = seed, points = rows}
end

local function json_array(values)
  local parts = {}
  for i, v in ipairs(values) do parts[i] = string.format("%.6g", v) end
  return "[" .. table.concat(parts, ",") .. "]"
end

local function emit(fields, trace)
  local parts = {'"workload":"bo_regret"', '"system":"lazytensor"'}
  for _, kv in ipairs(fields) do
    local k, v = kv[1], kv[2]
    if type(v) == "string" then
      parts[#parts + 1] = string.format('"%s":"%s"', k, v)
    elseif v == math.floor(v) and math.abs(v) < 1e9 then
      parts[#parts + 1] = string.format('"%s":%d', k, v)
    else
      parts[#parts + 1] = string.format('"%s":%.6g', k, v)
    end
  end
  if trace then parts[#parts + 1] = '"trace":' .. json_array(trace) end
  print("{" .. table.concat(parts, ",") .. "}")
  io.stdout:flush()
end

local function regret_trace(problem, history)
  local trace, best = {}, math.huge
  for i, rec in ipairs(history) do
    if rec.y and rec.y < best then best = rec.y end
    trace[i] = best - problem.optimum
  end
  return trace, best
end

local function run_bo(problem, budget, dsg, o)
  local steps, wall_total, cpu_total, acq_total, update_total = 0, 0, 0, 0, 0
  local w0, c0 = wall(), os.clock()
  local _, best, history = bo.minimize(function(x) return problem.f(x) end, problem.bounds, {
    budget = budget, init = dsg.points, seed = dsg.seed, acquisition = o.acquisition,
    refit_every = o.refit_every,
    callback = function(rec)
      local w, c = wall(), os.clock()
      if rec.phase == "bo" then
        steps, wall_total, cpu_total = steps + 1, wall_total + (w - w0), cpu_total + (c - c0)
        acq_total = acq_total + rec.acquisition_seconds
        update_total = update_total + rec.update_seconds
      end
      w0, c0 = w, c
    end})
  local trace = regret_trace(problem, history)
  local per = math.max(steps, 1)
  return best, trace, history.failed or 0, steps, wall_total / per, cpu_total / per,
         acq_total / per, update_total / per
end

-- Random search as the peer's: the design's points, then uniform ones.
local function run_random(problem, budget, dsg)
  lt.manual_seed(100000 + dsg.seed)
  local n0 = #dsg.points
  local U = lt.rand(budget - n0, problem.dim):totable()
  local lo, hi = problem.bounds[1], problem.bounds[2]
  local history = {}
  for i, x in ipairs(dsg.points) do history[i] = {x = x, y = problem.f(x)} end
  for i, u in ipairs(U) do
    local x = {}
    for j = 1, problem.dim do x[j] = lo[j] + (hi[j] - lo[j]) * u[j] end
    history[n0 + i] = {x = x, y = problem.f(x)}
  end
  local trace, best = regret_trace(problem, history)
  return best, trace
end

local function quantile(values, p)
  local s = {}
  for i, v in ipairs(values) do s[i] = v end
  table.sort(s)
  local pos = 1 + (#s - 1) * p
  local lo = math.floor(pos)
  local hi = math.min(lo + 1, #s)
  return s[lo] + (s[hi] - s[lo]) * (pos - lo)
end

local function designs_for(problem, o)
  local init = 2 * problem.dim + 1
  local out = {}
  if o.write_designs then os.execute("mkdir -p '" .. o.write_designs .. "'") end
  for seed = o.seed_from or 1, o.seeds do
    if o.designs then
      out[#out + 1] = read_design(o.designs, problem, seed)
    else
      out[#out + 1] = sobol_design(problem, init, seed)
    end
    if o.write_designs then write_design(o.write_designs, problem, out[#out]) end
  end
  return out
end

local function summary(problem, method, budget, regrets, times, cpu)
  local fields = {{"op", "summary"}, {"method", method}, {"problem", problem.name},
                  {"budget", budget}, {"seeds", #regrets},
                  {"median_regret", quantile(regrets, 0.5)},
                  {"q25_regret", quantile(regrets, 0.25)}, {"q75_regret", quantile(regrets, 0.75)}}
  if times then
    fields[#fields + 1] = {"median_wall_s_per_step", quantile(times, 0.5)}
    fields[#fields + 1] = {"median_cpu_s_per_step", quantile(cpu, 0.5)}
  end
  emit(fields)
end

local function main(argv)
  local o = parse_args(argv)
  for _, pb in ipairs(o.problems) do
    local problem, budget = problems.get(pb[1]), pb[2]
    local designs = designs_for(problem, o)
    local regrets, times, cpus, random_regrets = {}, {}, {}, {}
    for _, dsg in ipairs(designs) do
      local best, trace, failed, steps, per_step, cpu_step, acq_step, update_step =
        run_bo(problem, budget, dsg, o)
      regrets[#regrets + 1], times[#times + 1], cpus[#cpus + 1] = trace[#trace], per_step, cpu_step
      emit({{"method", "bo"}, {"acquisition", o.acquisition}, {"problem", problem.name},
            {"seed", dsg.seed}, {"budget", budget}, {"init", #dsg.points}, {"best", best},
            {"regret", trace[#trace]}, {"failed", failed}, {"steps", steps},
            {"wall_s_per_step", per_step}, {"cpu_s_per_step", cpu_step},
            {"acquisition_cpu_s_per_step", acq_step}, {"update_cpu_s_per_step", update_step}},
           trace)
      if o.random then
        local rbest, rtrace = run_random(problem, budget, dsg)
        random_regrets[#random_regrets + 1] = rtrace[#rtrace]
        emit({{"method", "random"}, {"problem", problem.name}, {"seed", dsg.seed},
              {"budget", budget}, {"best", rbest}, {"regret", rtrace[#rtrace]}}, rtrace)
      end
    end
    summary(problem, "bo", budget, regrets, times, cpus)
    if o.random then summary(problem, "random", budget, random_regrets) end
  end
end

main(arg or {})
