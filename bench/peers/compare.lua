-- bench/peers/compare.lua FILE.jsonl: pairs the lazytensor and peer lines of
-- one bench/peers/run.sh run and prints, per problem, both times, both
-- accuracies and the speed-up (peer time / lazytensor time) — as JSON lines
-- ("workload":"compare") and as a Markdown table for bench/RESULTS.md.

local path = arg[1] or "bench/peers/last_run.jsonl"

-- The lines are flat JSON objects of strings, numbers, booleans and nulls.
local function parse(line)
  local obj, pos = {}, 1
  local function skip() pos = line:find("[^%s,:]", pos) or #line + 1 end
  local function value()
    skip()
    local c = line:sub(pos, pos)
    if c == '"' then
      local out, i = {}, pos + 1
      while true do
        local ch = line:sub(i, i)
        if ch == "" then error("unterminated string") end
        if ch == '"' then break end
        if ch == "\\" then
          local e = line:sub(i + 1, i + 1)
          if e == "u" then -- \uXXXX (Python's json escapes non-ASCII): UTF-8
            out[#out + 1] = utf8.char(tonumber(line:sub(i + 2, i + 5), 16) or 63)
            i = i + 6
          else
            out[#out + 1] = ({n = "\n", t = "\t"})[e] or e
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
    local word = line:match("^[^,}%]]+", pos)
    pos = pos + #word
    word = word:gsub("%s+$", "")
    if word == "true" then return true end
    if word == "false" then return false end
    if word == "null" or word == "NaN" then return nil end
    return tonumber(word)
  end
  pos = line:find("{", 1, true)
  if not pos then return nil end
  pos = pos + 1
  while true do
    skip()
    if line:sub(pos, pos) == "}" or pos > #line then break end
    local key = value()
    obj[key] = value()
  end
  return obj
end

local function key_of(r)
  return table.concat({r.workload or "", r.op or "", tostring(r.n or ""), tostring(r.d or ""),
                       r.kind or "", r.path or ""}, "|")
end

-- GPY's rows (bench/peers/gpy_peer.py): op, n, d, path, kind (default
-- matern52) of each (spread: its first line, 10 probes)
local GPY_ROWS = {
  exact = {"mll_grad", 2000, 3, "exact"}, iterative = {"mll_grad", 2000, 3, "iterative"},
  exact4000 = {"mll_grad", 4000, 3, "exact"}, iterative4000 = {"mll_grad", 4000, 3, "iterative"},
  predict = {"predict", 2000, 3, "predict"}, love = {"predict", 2000, 3, "love"},
  sgpr = {"sgpr_mll_grad", 20000, 3}, bo = {"bo_step", 30, 2}, bo60 = {"bo_step", 60, 2},
  ski1d = {"ski_mll_grad", 100000, 1, "ski", "rbf"},
  ski2d = {"ski_mll_grad", 20000, 2, "ski", "rbf"},
  multitask = {"multitask_mll_grad", 1000, 1, "task_noise", "rbf"},
  multitask_shared = {"multitask_mll_grad", 1000, 1, "shared_noise", "rbf"},
  spread = {"spread", 2000, 3, "probes10"},
}

-- A line about a whole program (a failure, a timeout, a missing peer)
-- names its problem in "args" ("W8 n d kind path", or the workload alone).
local function from_args(r)
  if r.op ~= "*" or type(r.args) ~= "string" then return r end
  local w = {}
  for word in r.args:gmatch("%S+") do w[#w + 1] = word end
  if w[1] == "W8" and #w >= 5 then
    r.op, r.n, r.d, r.kind, r.path = "mll_grad", tonumber(w[2]), tonumber(w[3]), w[4], w[5]
  end
  -- GPY: the row is the last word (of "GPY row" or of the failed command)
  local gpy = r.workload == "GPY" and GPY_ROWS[w[#w]]
  if gpy then
    r.op, r.n, r.d, r.kind, r.path = gpy[1], gpy[2], gpy[3], gpy[5] or "matern52", gpy[4]
  end
  return r
end

local lt_rows, peer_rows, peer_any, order = {}, {}, {}, {}
for line in io.lines(path) do
  local ok, r = pcall(parse, line)
  if ok and r and r.workload ~= "meta" and r.workload ~= "compare" then
    r = from_args(r)
    local k = key_of(r)
    if r.system == "lazytensor" then
      if not lt_rows[k] then order[#order + 1] = k end
      lt_rows[k] = lt_rows[k] or {}
      table.insert(lt_rows[k], r)
    elseif r.system and r.op == "*" then
      peer_any[r.workload] = r -- the peer could not run any of this workload
    elseif r.system then
      peer_rows[k] = r
    end
  end
end

local function seconds(s)
  if not s then return "-" end
  if s >= 1 then return string.format("%.2f s", s) end
  return string.format("%.0f ms", s * 1e3)
end

-- wall time, and CPU time where the line has it
local function with_cpu(r)
  if not r.cpu_median_s then return seconds(r.median_s) end
  return seconds(r.median_s) .. " (CPU " .. seconds(r.cpu_median_s) .. ")"
end

local function sci(v) return v and string.format("%.1e", v) or "-" end

-- The accuracy a line reports: relative errors against the exact answer.
local function accuracy(r)
  if r.workload == "GPY" then
    if r.op == "predict" then
      return string.format("mean %s, var median %s (max %s; max abs %s)", sci(r.mean_relerr),
                           sci(r.var_medrelerr), sci(r.var_maxrelerr), sci(r.var_maxabserr))
    elseif r.op == "bo_step" then
      return string.format("final MLL %.2f", r.final_mll or 0 / 0)
    elseif r.op == "spread" then
      return string.format("MLL sd %.3g nats over %d seeds (median abs err %.3g, bias %.3g); "
                           .. "grad err median %.1e, sd %.1e, max %.1e", r.mll_sd or 0 / 0,
                           r.seeds or 0, r.mll_abserr or 0 / 0, r.mll_bias or 0 / 0,
                           r.grad_relerr or 0 / 0, r.grad_relerr_sd or 0 / 0,
                           r.grad_relerr_max or 0 / 0)
    end
    local s = string.format("mll %.1e nats", r.mll_abserr or 0 / 0)
    if r.grad_relerr then s = s .. ", grad " .. sci(r.grad_relerr) end
    if r.mll_abserr_same_jitter then
      s = s .. string.format(" (%.1e against its own Kzz + jitter)", r.mll_abserr_same_jitter)
    end
    return s
  end
  if r.workload == "W8" then
    local g = r.grad_relerr and ("grad " .. sci(r.grad_relerr)) or "grad: no exact reference"
    return "mll " .. sci(r.mll_relerr) .. ", " .. g
  end
  return sci(r.relerr_vs_exact)
end

local function describe(r)
  if r.workload == "GPY" then
    local what = ({mll_grad = "exact GP MLL + grad", predict = "prediction, 1000 test points",
                   sgpr_mll_grad = "SGPR m=300 bound + grad",
                   bo_step = "BO step (Adam 20 + predict), n from 5",
                   ski_mll_grad = "KISS-GP MLL + grad, grid " .. tostring(r.grid),
                   multitask_mll_grad = "ICM 3 tasks rank 1 MLL + grad",
                   spread = "iterative MLL + grad, 20 seeds"})[r.op] or r.op
    local variant = (r.variant and r.variant ~= "defaults") and (" [" .. r.variant .. "]") or ""
    return string.format("GPY %s d=%s n=%s%s%s", what, tostring(r.d), tostring(r.n),
                         r.path and (" " .. r.path) or "", variant)
  end
  if r.workload == "W8" then
    local variant = (r.variant and r.variant ~= "defaults") and (" [" .. r.variant .. "]") or ""
    return string.format("W8 %s d=%d n=%d %s%s", r.kind, r.d, r.n, r.path, variant)
  end
  return string.format("W5 %s%s", r.op, r.variant and (" [" .. r.variant .. "]") or "")
end

local function extra(r)
  local parts = {}
  if r.iterations then parts[#parts + 1] = "iters " .. r.iterations end
  if r.dense_products then parts[#parts + 1] = "products " .. r.dense_products end
  if r.method then parts[#parts + 1] = tostring(r.method) end
  if r.structure then parts[#parts + 1] = r.structure end
  if r.workload == "GPY" then
    if r.cg_iterations and r.cg_iterations > 0 then
      parts[#parts + 1] = "CG iters " .. r.cg_iterations .. ", precond rank "
        .. tostring(r.preconditioner_rank)
    end
    if r.no_preconditioner then parts[#parts + 1] = "no preconditioner: " .. r.no_preconditioner end
    if r.control_variate_rank then
      parts[#parts + 1] = "control variate " .. r.control_variate_rank
    end
    if r.mll_sd_calls then
      parts[#parts + 1] = string.format("MLL sd over %d calls %.3g", r.calls or 0, r.mll_sd_calls)
    end
    if r.settings then parts[#parts + 1] = r.settings end
  end
  return table.concat(parts, ", ")
end

local function json_line(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = t[k]
    local s = type(v) == "number" and string.format("%.6g", v)
      or (type(v) == "boolean" and tostring(v))
      or string.format("%q", tostring(v))
    parts[#parts + 1] = string.format("%q:%s", k, s)
  end
  print("{" .. table.concat(parts, ",") .. "}")
end

local table_rows = {}
for _, k in ipairs(order) do
  for _, r in ipairs(lt_rows[k]) do
    local p = peer_rows[k] or peer_any[r.workload]
    local speedup = (p and p.median_s and r.median_s) and p.median_s / r.median_s or nil
    local cpu_speedup = (p and p.cpu_median_s and r.cpu_median_s)
      and p.cpu_median_s / r.cpu_median_s or nil
    json_line({workload = "compare", problem = describe(r), lazytensor_s = r.median_s,
               peer = p and p.system or "none", peer_s = p and p.median_s or nil,
               speedup = speedup, cpu_speedup = cpu_speedup,
               lazytensor_cpu_s = r.cpu_median_s, peer_cpu_s = p and p.cpu_median_s or nil,
               lazytensor_accuracy = r.skipped or accuracy(r),
               peer_accuracy = p and (p.skipped or accuracy(p)) or "no peer line"})
    table_rows[#table_rows + 1] = string.format("| %s | %s | %s | %s | %s | %s | %s |",
      describe(r), r.skipped and ("skipped: " .. r.skipped) or with_cpu(r),
      p and (p.skipped and ("skipped: " .. p.skipped) or with_cpu(p)) or "no peer line",
      speedup and (string.format("%.2fx", speedup)
                   .. (cpu_speedup and string.format(" (CPU %.2fx)", cpu_speedup) or "")) or "-",
      r.skipped and "-" or accuracy(r),
      p and not p.skipped and accuracy(p) or "-",
      extra(r) .. ((p and not p.skipped) and (" / " .. extra(p)) or ""))
  end
end
print()
print("| problem | lazytensor | peer | speed-up | lazytensor error | peer error |"
      .. " notes (lt / peer) |")
print("|---|---|---|---|---|---|---|")
for _, row in ipairs(table_rows) do print(row) end
