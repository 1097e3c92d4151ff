--- bench/peers/svgp_side.lua DIR elbo M | step M | big: lazytensor's side of
-- workload SVGP (bench/peers/svgp_peer.py's docstring describes the
-- problems; that script writes DIR's data and GPyTorch's gradient).
-- gp.variational with the same data and parameters: rbf{lengthscale,
-- variance} (GPyTorch's ScaleKernel(RBFKernel)), a gaussian likelihood
-- (noise floor 1e-4, as GaussianLikelihood's), the constant mean, whitened
-- q with a Cholesky factor, jitter = data_jitter = 1e-6 (GPyTorch's float64
-- jitter on Kzz and on k(x, x)).
--   elbo M  the bound on all rows and on rows 1..1024 against GPyTorch's,
--           and the batch bound's gradient (lt.grad, mapped to the same
--           coordinates) against svgp_m<M>_gpytorch_grad.txt: relative
--           differences, one JSON line.
--   step M  CPU a minibatch step (batch 1024, Adam lr 0.01, 3 epochs): the
--           median over epochs of the epoch's CPU / its steps.
--   big     10⁶ points (svgp_big_*.txt), m = 500, one epoch: its CPU time
--           and the RMSE of the predictive mean against f.
--   compare FILE  pairs the two sides' step and big lines of a run.sh
--           output (FILE.jsonl): a Markdown table with the ratios.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"

lt.settings.num_threads = tonumber(os.getenv("BENCH_THREADS") or "1")
local DIR, WHAT, M = arg[1], arg[2], tonumber(arg[3] or "0") -- compare: arg[3] is FILE
local N, BATCH, LR, JITTER, FLOOR = 20000, 1024, 0.01, 1e-6, 1e-4

local function emit(rec)
  local keys = {}
  for k in pairs(rec) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = rec[k]
    local s
    if type(v) == "number" then s = string.format("%.17g", v)
    elseif type(v) == "table" then
      local items = {}
      for i, x in ipairs(v) do items[i] = string.format("%.17g", x) end
      s = "[" .. table.concat(items, ",") .. "]"
    else s = string.format("%q", tostring(v)) end
    parts[#parts + 1] = string.format("%q:%s", k, s)
  end
  print("{" .. table.concat(parts, ",") .. ',"system":"lazytensor","workload":"SVGP","threads":'
        .. lt.settings.num_threads .. "}")
  io.stdout:flush()
end

-- A "%d %d" header and the numbers: a list (one column) or a list of rows.
local function read_matrix(name)
  local f = assert(io.open(DIR .. "/" .. name, "r"))
  local r, c = f:read("n", "n")
  local out = {}
  if c == 1 then
    for i = 1, r do out[i] = f:read("n") end
  else
    for i = 1, r do
      local row = {}
      for j = 1, c do row[j] = f:read("n") end
      out[i] = row
    end
  end
  f:close()
  return out
end

local function load_avg()
  local f = io.open("/proc/loadavg")
  if not f then return -1 end
  local v = f:read("n")
  f:close()
  return v
end

local function model_of(x, y, Z, hyper)
  return gp.variational{
    x = x, y = y, inducing = lt.tensor(Z), mean = "constant", mean_value = hyper[4],
    kernel = gp.kernels.rbf{lengthscale = hyper[1], variance = hyper[2]},
    likelihood = gp.likelihoods.gaussian{noise = hyper[3]},
    jitter = JITTER, data_jitter = JITTER}
end

local function problem(m)
  local pre = string.format("svgp_m%d_", m)
  local x, y = lt.tensor(read_matrix("svgp_x.txt")), lt.tensor(read_matrix("svgp_y.txt"))
  local model = model_of(x, y, read_matrix(pre .. "Z.txt"), read_matrix(pre .. "hyper.txt"))
  model:set_variational(read_matrix(pre .. "mu.txt"), read_matrix(pre .. "L.txt"))
  return model
end

-- max |a − b| / max |b| over two lists
local function rel(a, b)
  local num, den = 0, 0
  for i = 1, #b do
    num = math.max(num, math.abs(a[i] - b[i]))
    den = math.max(den, math.abs(b[i]))
  end
  return num / den
end

-- The batch gradient in GPyTorch's coordinates: μ, L (m×m, row by row),
-- Z (row by row), then ∂/∂lengthscale, ∂/∂outputscale, ∂/∂noise, ∂/∂constant.
local function blocks(model, grads)
  local p = model:parameters()
  local out = {mu = grads.mean:totable(), L = {}, Z = {}}
  for _, row in ipairs(grads.chol:totable()) do
    for _, v in ipairs(row) do out.L[#out.L + 1] = v end
  end
  for _, row in ipairs(grads.Z:totable()) do
    for _, v in ipairs(row) do out.Z[#out.Z + 1] = v end
  end
  local function num(v) return type(v) == "number" and v or v:item() end
  local ell, var = math.exp(p.kernel.log_lengthscale), math.exp(p.kernel.log_variance)
  local noise = FLOOR + math.exp(p.likelihood.raw_noise)
  out.hyper = {num(grads.kernel.log_lengthscale) / ell, num(grads.kernel.log_variance) / var,
               num(grads.likelihood.raw_noise) / (noise - FLOOR), num(grads.constant)}
  return out
end

local function elbo(m, ref)
  local model = problem(m)
  local idx = {}
  for i = 1, BATCH do idx[i] = i end
  local full = model:elbo()
  local value, grads = model:elbo_and_grad(idx)
  local g = read_matrix(string.format("svgp_m%d_gpytorch_grad.txt", m))
  local mine = blocks(model, grads)
  local at, theirs = 1, {}
  for _, name in ipairs{"mu", "L", "Z", "hyper"} do
    theirs[name] = {}
    for i = 1, #mine[name] do theirs[name][i] = g[at + i - 1] end
    at = at + #mine[name]
  end
  local rec = {op = "elbo", m = m, n = N, batch = BATCH, elbo_full = full, elbo_batch = value}
  if ref then
    rec.rel_elbo_full = math.abs(full - ref.elbo_full) / math.abs(ref.elbo_full)
    rec.rel_elbo_batch = math.abs(value - ref.elbo_batch) / math.abs(ref.elbo_batch)
  end
  for _, name in ipairs{"mu", "L", "Z", "hyper"} do
    rec["rel_grad_" .. name] = rel(mine[name], theirs[name])
  end
  rec.grad_hyper = mine.hyper
  rec.gpytorch_grad_hyper = theirs.hyper
  emit(rec)
end

-- Epoch CPU times of an Adam fit (callback at each epoch's end).
local function epoch_times(model, epochs)
  local marks, t0 = {}, os.clock()
  local res = model:fit{lr = LR, epochs = epochs, batch_size = BATCH, seed = 1,
                        callback = function()
                          marks[#marks + 1] = os.clock() - t0
                          t0 = os.clock()
                        end}
  return marks, res.steps / epochs
end

local function step(m)
  local model = problem(m)
  local marks, steps = epoch_times(model, 3)
  local per = {}
  for i, t in ipairs(marks) do per[i] = t / steps end
  table.sort(per)
  emit({op = "step", m = m, n = N, batch = BATCH, steps_per_epoch = steps,
        cpu_step_median = per[2], cpu_epochs = marks, load = load_avg()})
end

local function big()
  local x, y = lt.tensor(read_matrix("svgp_big_x.txt")), lt.tensor(read_matrix("svgp_big_y.txt"))
  local xs, fs = lt.tensor(read_matrix("svgp_big_xs.txt")), read_matrix("svgp_big_fs.txt")
  local model = model_of(x, y, x:narrow(1, 1, 500):totable(), {1, 1, 0.1, 0})
  local marks, steps = epoch_times(model, 1)
  io.stderr:write(string.format("svgp_side big: one epoch, %d steps, %.1f s CPU\n", steps,
                                marks[1]))
  local mean = model:predict(xs):totable()
  local se = 0
  for i = 1, #fs do se = se + (mean[i] - fs[i]) ^ 2 end
  local values = model.kernel.values
  emit({op = "big", n = x:size(1), m = 500, batch = BATCH, epochs = 1, steps = steps,
        cpu_epoch = marks[1], cpu_step = marks[1] / steps, rmse_f = math.sqrt(se / #fs),
        lengthscale = values.lengthscale, noise = model.likelihood.params.noise, load = load_avg()})
end

-- A field of a flat JSON line (Python's "k": v or this file's "k":v).
local function field(line, key)
  local v = line:match('"' .. key .. '"%s*:%s*([^,}]+)')
  if v == nil then return nil end
  return tonumber(v) or v:gsub('"', "")
end

local function compare(path)
  local by = {}
  for line in io.lines(path) do
    if field(line, "workload") == "SVGP" and not field(line, "skipped") then
      local op, m, sys = field(line, "op"), field(line, "m"), field(line, "system")
      local key = op .. " " .. tostring(m)
      by[key] = by[key] or {}
      by[key][sys] = line
    end
  end
  print("| row | lazytensor | GPyTorch | GPyTorch / lazytensor |")
  print("|---|---|---|---|")
  for _, key in ipairs{"elbo 100", "elbo 500", "step 100", "step 500", "big 500"} do
    local pair = by[key]
    if pair and pair.lazytensor then
      local lt_line, gp_line = pair.lazytensor, pair.gpytorch or ""
      if key:match("^elbo") then
        print(string.format("| %s: relative difference, bound (all rows / batch) "
                            .. "| %.1e / %.1e | | |",
                            key, field(lt_line, "rel_elbo_full") or 0 / 0,
                            field(lt_line, "rel_elbo_batch") or 0 / 0))
        print(string.format("| %s: relative difference, gradient (μ, L, Z, hyper) "
                            .. "| %.1e, %.1e, %.1e, %.1e | | |", key,
                            field(lt_line, "rel_grad_mu"), field(lt_line, "rel_grad_L"),
                            field(lt_line, "rel_grad_Z"), field(lt_line, "rel_grad_hyper")))
      elseif key:match("^step") then
        local a, b = field(lt_line, "cpu_step_median"), field(gp_line, "cpu_step_median")
        print(string.format("| %s: CPU a step | %.4f s | %s | %s |", key, a,
                            b and string.format("%.4f s", b) or "-",
                            b and string.format("%.2f", b / a) or "-"))
      else
        local a, b = field(lt_line, "cpu_epoch"), field(gp_line, "cpu_epoch")
        print(string.format("| %s: CPU an epoch, RMSE against f | %.1f s, %.4f | %s | %s |", key,
                            a, field(lt_line, "rmse_f"),
                            b and string.format("%.1f s, %.4f", b, field(gp_line, "rmse_f")) or "-",
                            b and string.format("%.2f", b / a) or "-"))
      end
    end
  end
end

if WHAT == "elbo" then
  local ref = nil
  local f = io.open(string.format("%s/svgp_m%d_gpytorch_elbo.txt", DIR, M))
  if f then -- the peer's bound on all rows and on the batch
    f:close()
    local v = read_matrix(string.format("svgp_m%d_gpytorch_elbo.txt", M))
    ref = {elbo_full = v[1], elbo_batch = v[2]}
  end
  elbo(M, ref)
elseif WHAT == "step" then
  step(M)
elseif WHAT == "big" then
  big()
elseif WHAT == "compare" then
  compare(arg[3])
else
  error("usage: lua svgp_side.lua DIR elbo M | step M | big | compare FILE")
end
