-- bench/peers/gpy_side.lua DIR [ROW...]: lazytensor's side of workload GPY
-- (bench/peers/run.sh), the problems bench/peers/gpy_peer.py wrote into DIR
-- (its docstring describes them) run through lazytensor.gp: gp.exact's
-- mll_and_grad (exact: max_cholesky_size = huge; iterative: 0, the
-- library's other defaults), predict (exact, and {love = true} with the
-- defaults), gp.sgpr's mll_and_grad, the BO loop (fit{method = "adam"}
-- then predict, every step), KISS-GP (gp.exact{structure = "ski"}: ski1d,
-- ski2d), ICM (gp.multitask: multitask, multitask_shared) and the
-- stochastic estimator's spread over 20 seeds at 10 and 64 probes (spread).
-- ROW: exact iterative predict love sgpr bo ski1d ski2d multitask
-- multitask_shared spread (the default), exact4000 iterative4000
-- (n = 4000), bo60 (n = 5..60). One JSON line each (spread: one per probe
-- count): wall and CPU medians (os.clock is this process's CPU time),
-- errors against DIR's exact answers.
local dir0 = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir0 .. "/?.lua;" .. dir0 .. "/../?.lua;" .. package.path
local B = require "benchlib"
local unpack = table.unpack or unpack -- luacheck: ignore (Lua 5.1)

local DIR = arg[1]
if not DIR then
  io.stderr:write("usage: gpy_side.lua DIR [exact iterative predict love sgpr bo]\n")
  os.exit(2)
end
local ROWS = {}
for i = 2, #arg do ROWS[#ROWS + 1] = arg[i] end
if #ROWS == 0 then
  ROWS = {"exact", "iterative", "predict", "love", "sgpr", "bo", "ski1d", "ski2d", "multitask",
          "multitask_shared", "spread"}
end

local lt, why = B.load()
if not lt then
  B.emit({workload = "GPY", op = "*", system = "lazytensor", n = 0, skipped = why})
  return
end
local gp = require "lazytensor.gp"
local K = gp.kernels
local THREADS = tonumber(os.getenv("BENCH_THREADS") or "1") or 1
lt.settings.num_threads = THREADS

-- the fixed values of gpy_peer.py
local LENGTHSCALE, OUTPUTSCALE, NOISE = {0.3, 0.5, 0.7}, 1.0, 0.05
local BO_LENGTHSCALE, BO_NOISE, BO_START, BO_ITERS, BO_LR = {0.2, 0.2}, 1e-2, 5, 20, 0.1
local BO_ENDS = {bo = 30, bo60 = 60} -- the rows: n = 5..30 and 5..60

local function emit(rec)
  rec.system, rec.workload, rec.threads = "lazytensor", "GPY", THREADS
  B.emit(rec)
end

-- A matrix file of gpy_peer.py: "rows cols", then the numbers; rows of
-- numbers as Lua tables (a single column as a flat list).
local function read_matrix(name)
  local f = assert(io.open(DIR .. "/" .. name, "r"))
  local text = f:read("*a")
  f:close()
  local nums = {}
  for t in text:gmatch("%S+") do nums[#nums + 1] = tonumber(t) end
  local r, c = nums[1], nums[2]
  local out = {}
  if c == 1 or r == 1 then
    for i = 1, r * c do out[i] = nums[2 + i] end
    return out
  end
  for i = 1, r do
    local row = {}
    for j = 1, c do row[j] = nums[2 + (i - 1) * c + j] end
    out[i] = row
  end
  return out
end

local function median(t)
  local s = {}
  for i = 1, #t do s[i] = t[i] end
  table.sort(s)
  local k = #s
  return k % 2 == 1 and s[(k + 1) / 2] or 0.5 * (s[k / 2] + s[k / 2 + 1])
end

-- Medians of wall (benchlib's clock) and CPU (os.clock) time over repeats
-- calls after one warm-up.
local function measure(fn, repeats)
  fn()
  local walls, cpus = {}, {}
  for i = 1, repeats do
    collectgarbage("collect")
    local w0, c0 = B.clock(), os.clock()
    fn()
    cpus[i] = os.clock() - c0
    walls[i] = B.clock() - w0
  end
  return {median_s = median(walls), cpu_median_s = median(cpus), min_s = math.min(unpack(walls)),
          repeats = repeats}
end

local function relerr(a, b)
  local num, den = 0, 0
  for i = 1, #b do
    num = num + (a[i] - b[i]) ^ 2
    den = den + b[i] ^ 2
  end
  return math.sqrt(num / den)
end

local function tolist(t)
  local out = {}
  for i = 1, t:numel() do out[i] = B.num(t[i]) end
  return out
end

local function exact_model(x, y, ls, noise)
  return gp.exact{x = x, y = y, mean = "zero", noise = noise,
                  kernel = K.matern52{lengthscale = ls, variance = OUTPUTSCALE}}
end

local X, Y, XS = lt.tensor(read_matrix("gpy_x.txt")), lt.tensor(read_matrix("gpy_y.txt")),
  lt.tensor(read_matrix("gpy_xs.txt"))
local N, D = #read_matrix("gpy_y.txt"), 3
local REF = read_matrix("gpy_ref_mll.txt")
local MREF, GREF = REF[1], {unpack(REF, 2)}

-- exact, iterative: n = 2000; exact4000, iterative4000: the same at 4000
local function row_mll(row)
  local path, x, y, mref, gref, n, reps = row, X, Y, MREF, GREF, N, 5
  if row:sub(-4) == "4000" then
    path, reps = row:sub(1, -5), 3
    local ys = read_matrix("gpy4000_y.txt")
    x, y, n = lt.tensor(read_matrix("gpy4000_x.txt")), lt.tensor(ys), #ys
    local ref = read_matrix("gpy4000_ref_mll.txt")
    mref, gref = ref[1], {unpack(ref, 2)}
  end
  local model = exact_model(x, y, LENGTHSCALE, NOISE)
  -- the iterative path with the library's defaults (adaptive preconditioner
  -- rank), and with a fixed rank 100 beside it (variant "precond100")
  local variants = {{name = "defaults", settings = {}}}
  if path == "iterative" then
    variants[2] = {name = "precond100", settings = {preconditioner_size = 100}}
  end
  for _, variant in ipairs(variants) do
    local settings = {max_cholesky_size = path == "exact" and math.huge or 0}
    for k, val in pairs(variant.settings) do settings[k] = val end
    local merrs, gerrs, v, g, info = {}, {}, nil, nil, nil
    local rec
    lt.with_settings(settings, function()
      lt.manual_seed(1)
      rec = measure(function()
        model:set_vector(model:get_vector()) -- a new covariance every call
        v, g, info = model:mll_and_grad()
        merrs[#merrs + 1] = math.abs(v - mref) / math.abs(mref)
        -- get_vector's order: log lengthscales, log variance, log σ² (as gref)
        gerrs[#gerrs + 1] = relerr(g, gref)
      end, reps)
    end)
    rec.op, rec.path, rec.n, rec.d, rec.kind = "mll_grad", path, n, D, "matern52"
    rec.variant = variant.name
    rec.settings = path == "exact" and "max_cholesky_size = huge"
      or ("max_cholesky_size = 0" .. (variant.name == "defaults" and ", defaults"
                                      or ", preconditioner_size = 100"))
    rec.mll, rec.exact_mll = v, mref
    rec.mll_relerr, rec.grad_relerr = median(merrs), median(gerrs)
    rec.mll_abserr = median(merrs) * math.abs(mref)
    rec.cg_iterations = type(info) == "table" and info.iterations or nil
    rec.preconditioner_rank = type(info) == "table" and info.preconditioner_rank or nil
    emit(rec)
  end
end

local function row_predict(path)
  local rmean, rvar = read_matrix("gpy_ref_mean.txt"), read_matrix("gpy_ref_var.txt")
  local mean, var
  local rec
  local settings = path == "predict" and {max_cholesky_size = math.huge} or {}
  lt.with_settings(settings, function()
    rec = measure(function()
      -- a new model every call: its factorisation (and LOVE root) are timed
      local model = exact_model(X, Y, LENGTHSCALE, NOISE)
      mean, var = model:predict(XS, path == "love" and {love = true} or nil)
    end, 5)
  end)
  local m, v = tolist(mean), tolist(var)
  local worst, errs, worst_abs = 0, {}, 0
  for i = 1, #rvar do
    errs[i] = math.abs(v[i] - rvar[i]) / rvar[i]
    worst = math.max(worst, errs[i])
    worst_abs = math.max(worst_abs, math.abs(v[i] - rvar[i]))
  end
  rec.op, rec.path, rec.n, rec.d, rec.kind, rec.m = "predict", path, N, D, "matern52", #rvar
  rec.settings = path == "predict" and "max_cholesky_size = huge" or "{love = true}, defaults"
  rec.mean_relerr, rec.var_maxrelerr = relerr(m, rmean), worst
  rec.var_medrelerr = median(errs)
  rec.var_maxabserr = worst_abs -- against the prior variance 1
  emit(rec)
end

local function row_sgpr()
  local xl, yl = lt.tensor(read_matrix("gpy_sgpr_x.txt")), lt.tensor(read_matrix("gpy_sgpr_y.txt"))
  local z = lt.tensor(read_matrix("gpy_sgpr_z.txt"))
  local refs = read_matrix("gpy_ref_sgpr.txt")
  local sref = refs[1] -- no jitter; refs[2]: with gp.sgpr's default jitter
  local model = gp.sgpr{x = xl, y = yl, mean = "zero", noise = NOISE, inducing = z,
                        kernel = K.matern52{lengthscale = LENGTHSCALE, variance = OUTPUTSCALE}}
  local v, g
  local rec = measure(function()
    model:set_vector(model:get_vector())
    v, g = model:mll_and_grad()
  end, 3)
  rec.op, rec.n, rec.d, rec.kind, rec.m = "sgpr_mll_grad", xl:size(1), D, "matern52", z:size(1)
  rec.settings = "defaults (jitter 1e-6 * mean k(x,x) on Kzz)"
  rec.mll, rec.exact_mll, rec.mll_relerr = v, sref, math.abs(v - sref) / math.abs(sref)
  rec.mll_abserr = math.abs(v - sref)
  rec.mll_abserr_same_jitter = math.abs(v - refs[2]) -- against its own model (Kzz + jitter I)
  rec.g1, rec.g2, rec.g3, rec.g4, rec.g5 = g[1], g[2], g[3], g[4], g[5]
  emit(rec)
end

local function row_bo(row)
  local bx, by = read_matrix("gpy_bo_x.txt"), read_matrix("gpy_bo_y.txt")
  by = {unpack(by, 1, BO_ENDS[row])}
  local cand = lt.tensor(read_matrix("gpy_bo_cand.txt"))
  local walls, cpus, final, total = {}, {}, nil, 0
  for n = BO_START, #by do
    local w0, c0 = B.clock(), os.clock()
    local model = exact_model(lt.tensor({unpack(bx, 1, n)}), lt.tensor({unpack(by, 1, n)}),
                              BO_LENGTHSCALE, BO_NOISE)
    local res = model:fit{method = "adam", max_iter = BO_ITERS, lr = BO_LR}
    local _, _ = model:predict(cand)
    cpus[#cpus + 1] = os.clock() - c0
    walls[#walls + 1] = B.clock() - w0
    total = total + walls[#walls]
    if n == #by then final = {mll = model:mll(), fit = res, model = model} end
  end
  local vec = final.model:get_vector()
  emit({op = "bo_step", n = #by, d = 2, kind = "matern52", median_s = median(walls),
        cpu_median_s = median(cpus), total_s = total, repeats = #walls,
        settings = string.format("fit{method = 'adam', lr = %g, max_iter = %d} on log parameters",
                                 BO_LR, BO_ITERS),
        final_mll = final.mll, final_lengthscale1 = math.exp(vec[1]),
        final_lengthscale2 = math.exp(vec[2]), final_noise = math.exp(vec[4])})
end

-- ski1d, ski2d: KISS-GP, gp.exact{structure = "ski", grid = m} (doc/gp.md),
-- rbf lengthscale 1, variance 1, noise 0.01, zero mean; the library's
-- defaults (n > max_cholesky_size: mBCG + SLQ with its probes, the adaptive
-- preconditioner, the control variate). Errors against the exact MLL and
-- gradient of lazytensor's own SKI model (its grid), gpy_peer.py's answer.
local SKI = {ski1d = {grid = 2000, reps = 3}, ski2d = {grid = 100, reps = 3}}
local SKI_LS, SKI_V, SKI_NOISE = 1.0, 1.0, 0.01

local function std(t)
  local mu, s = 0, 0
  for _, v in ipairs(t) do mu = mu + v / #t end
  for _, v in ipairs(t) do s = s + (v - mu) ^ 2 end
  return math.sqrt(s / math.max(#t - 1, 1)), mu
end

local function info_fields(rec, info)
  if type(info) ~= "table" then return end
  rec.cg_iterations, rec.preconditioner_rank = info.iterations, info.preconditioner_rank
  rec.no_preconditioner = info.no_preconditioner
  rec.control_variate_rank = info.control_variate_rank
  rec.no_control_variate, rec.converged = info.no_control_variate, info.converged
end

local function row_ski(row)
  local spec = SKI[row]
  local xs = read_matrix("gpy_" .. row .. "_x.txt")
  local ref = read_matrix("gpy_" .. row .. "_ref_lazytensor.txt")
  local x, y = lt.tensor(xs), lt.tensor(read_matrix("gpy_" .. row .. "_y.txt"))
  local d = type(xs[1]) == "table" and #xs[1] or 1
  local model = gp.exact{x = x, y = y, mean = "zero", noise = SKI_NOISE, structure = "ski",
                         grid = spec.grid,
                         kernel = K.rbf{lengthscale = SKI_LS, variance = SKI_V}}
  local vals, merrs, gerrs, info = {}, {}, {}, nil
  lt.manual_seed(1)
  local rec = measure(function()
    model:set_vector(model:get_vector()) -- a new covariance every call
    local v, g
    v, g, info = model:mll_and_grad()
    vals[#vals + 1] = v
    merrs[#merrs + 1] = math.abs(v - ref[1])
    gerrs[#gerrs + 1] = relerr(g, {unpack(ref, 2)}) -- log ℓ, log v, log σ²
  end, spec.reps)
  rec.op, rec.path, rec.n, rec.d, rec.kind = "ski_mll_grad", "ski", #xs, d, "rbf"
  rec.grid = spec.grid
  rec.settings = "structure = 'ski', defaults"
  rec.mll, rec.exact_mll, rec.mll_abserr = vals[#vals], ref[1], median(merrs)
  rec.mll_relerr, rec.grad_relerr = median(merrs) / math.abs(ref[1]), median(gerrs)
  rec.mll_sd_calls, rec.calls = std(vals), #vals
  info_fields(rec, info)
  emit(rec)
end

-- multitask, multitask_shared: ICM, gp.multitask{rank = 1} over rbf
-- (variance fixed at 1: B carries the scale, as GPyTorch's MultitaskKernel),
-- zero mean, task_noise = true (multitask) or false (multitask_shared); the
-- values of gpy_peer.py set through set_vector. Exact: below
-- max_cholesky_size a Cholesky of the nt × nt Ky (task noises) or the eigen
-- rule (one noise).
local MT_LS, MT_W, MT_V, MT_NOISE, MT_TAU = 0.2, {1.0, 0.5, -0.8}, 0.1, 0.01, {0.01, 0.02, 0.03}

local function row_multitask(row)
  local shared = row == "multitask_shared"
  local ref = read_matrix(shared and "gpy_mt_ref_shared_noise.txt" or "gpy_mt_ref_task_noise.txt")
  local x, ys = lt.tensor(read_matrix("gpy_mt_x.txt")), lt.tensor(read_matrix("gpy_mt_y.txt"))
  local model = gp.multitask{x = x, y = ys, rank = 1, mean = "zero", noise = MT_NOISE,
                             task_noise = not shared,
                             kernel = K.rbf{lengthscale = MT_LS, variance = 1,
                                            fixed = {variance = true}}}
  local vec = {math.log(MT_LS)}
  for _, w in ipairs(MT_W) do vec[#vec + 1] = w end
  for _ = 1, #MT_W do vec[#vec + 1] = math.log(MT_V) end
  vec[#vec + 1] = math.log(MT_NOISE)
  if not shared then
    for _, tau in ipairs(MT_TAU) do vec[#vec + 1] = math.log(tau) end
  end
  model:set_vector(vec)
  assert(#model:get_vector() == #ref - 1, "gpy_side.lua: multitask vector and reference differ")
  -- with task noises nt = 3000 > max_cholesky_size: the defaults take the
  -- stochastic estimator on the lazy submatrix; "exact" raises the limit
  -- (one nt × nt Cholesky), the accuracy GPyTorch's eigen path has
  local variants = {{name = "defaults", settings = {}}}
  if not shared then variants[2] = {name = "exact", settings = {max_cholesky_size = math.huge}} end
  for _, variant in ipairs(variants) do
    local v, info, merrs, gerrs, rec = nil, nil, {}, {}, nil
    lt.with_settings(variant.settings, function()
      lt.manual_seed(1)
      rec = measure(function()
        model:set_vector(vec)
        local g
        v, g, info = model:mll_and_grad()
        merrs[#merrs + 1] = math.abs(v - ref[1])
        gerrs[#gerrs + 1] = relerr(g, {unpack(ref, 2)})
      end, 5)
    end)
    rec.op, rec.path, rec.n, rec.d, rec.kind = "multitask_mll_grad", shared and "shared_noise"
      or "task_noise", #read_matrix("gpy_mt_x.txt"), 1, "rbf"
    rec.tasks, rec.rank, rec.variant = #MT_W, 1, variant.name
    rec.settings = "gp.multitask{rank = 1, task_noise = " .. tostring(not shared) .. "}, "
      .. (variant.name == "exact" and "max_cholesky_size = huge" or "defaults")
    rec.mll, rec.exact_mll, rec.mll_abserr = v, ref[1], median(merrs)
    rec.mll_relerr, rec.grad_relerr = median(merrs) / math.abs(ref[1]), median(gerrs)
    info_fields(rec, info)
    emit(rec)
  end
end

-- spread: the iterative row's problem (n = 2000) on the iterative path
-- (max_cholesky_size = 0, other defaults) with num_trace_samples = P
-- probes, P = 10 and 64, lt.manual_seed(s) for s = 1..20: one line per P,
-- the MLL's and the gradient error's standard deviations over the seeds.
local SPREAD_SEEDS, SPREAD_PROBES = 20, {10, 64}

local function row_spread()
  local model = exact_model(X, Y, LENGTHSCALE, NOISE)
  for _, probes in ipairs(SPREAD_PROBES) do
    local vals, gerrs, walls, cpus, info = {}, {}, {}, {}, nil
    lt.with_settings({max_cholesky_size = 0, num_trace_samples = probes}, function()
      lt.manual_seed(1000)
      model:set_vector(model:get_vector())
      model:mll_and_grad() -- warm-up
      for seed = 1, SPREAD_SEEDS do
        lt.manual_seed(seed)
        collectgarbage("collect")
        local w0, c0 = B.clock(), os.clock()
        model:set_vector(model:get_vector())
        local v, g
        v, g, info = model:mll_and_grad()
        cpus[seed], walls[seed] = os.clock() - c0, B.clock() - w0
        vals[seed], gerrs[seed] = v, relerr(g, GREF)
      end
    end)
    local sd, mu = std(vals)
    local abserr, gmax = {}, 0
    for i, v in ipairs(vals) do
      abserr[i] = math.abs(v - MREF)
      gmax = math.max(gmax, gerrs[i])
    end
    local rec = {op = "spread", path = "probes" .. probes, n = N, d = D, kind = "matern52",
                 probes = probes, seeds = SPREAD_SEEDS, repeats = SPREAD_SEEDS,
                 settings = string.format("max_cholesky_size = 0, num_trace_samples = %d, "
                                          .. "lt.manual_seed(1..%d), other defaults", probes,
                                          SPREAD_SEEDS),
                 median_s = median(walls), cpu_median_s = median(cpus), mll_mean = mu,
                 exact_mll = MREF, mll_sd = sd, mll_abserr = median(abserr), mll_bias = mu - MREF,
                 grad_relerr = median(gerrs), grad_relerr_sd = (std(gerrs)),
                 grad_relerr_max = gmax}
    info_fields(rec, info)
    emit(rec)
  end
end

local RUN = {exact = row_mll, iterative = row_mll, predict = row_predict, love = row_predict,
             sgpr = row_sgpr, bo = row_bo, bo60 = row_bo,
             exact4000 = row_mll, iterative4000 = row_mll, ski1d = row_ski, ski2d = row_ski,
             multitask = row_multitask, multitask_shared = row_multitask, spread = row_spread}
for _, row in ipairs(ROWS) do
  local fn = RUN[row]
  if not fn then
    io.stderr:write("gpy_side.lua: unknown row " .. row .. "\n")
    os.exit(2)
  end
  local ok, err = pcall(fn, row)
  if not ok then emit({op = row, skipped = B.reason_of(err)}) end
end
