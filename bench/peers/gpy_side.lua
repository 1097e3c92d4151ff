-- bench/peers/gpy_side.lua DIR [ROW...]: lazytensor's side of workload GPY
-- (bench/peers/run.sh), the problems bench/peers/gpy_peer.py wrote into DIR
-- (its docstring describes them) run through lazytensor.gp: gp.exact's
-- mll_and_grad (exact: max_cholesky_size = huge; iterative: 0, the
-- library's other defaults), predict (exact, and {love = true} with the
-- defaults), gp.sgpr's mll_and_grad, and the BO loop (fit{method = "adam"}
-- then predict, every step). ROW: exact iterative predict love sgpr bo (the
-- default), exact4000 iterative4000 (n = 4000), bo60 (n = 5..60). One JSON
-- line each: wall and CPU medians (os.clock is this process's CPU time),
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
if #ROWS == 0 then ROWS = {"exact", "iterative", "predict", "love", "sgpr", "bo"} end

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

local RUN = {exact = row_mll, iterative = row_mll, predict = row_predict, love = row_predict,
             sgpr = row_sgpr, bo = row_bo, bo60 = row_bo,
             exact4000 = row_mll, iterative4000 = row_mll}
for _, row in ipairs(ROWS) do
  local fn = RUN[row]
  if not fn then
    io.stderr:write("gpy_side.lua: unknown row " .. row .. "\n")
    os.exit(2)
  end
  local ok, err = pcall(fn, row)
  if not ok then emit({op = row, skipped = B.reason_of(err)}) end
end
