-- bench/peers/lt_side.lua DIR W5|W8 [n d kind path]: lazytensor's side of
-- the side-by-side benchmark (bench/peers/run.sh runs it). Writes the
-- problem's data and exact answers into DIR (problems.lua), then prints
-- one JSON line per measurement: wall-clock median, the accuracy against
-- the exact answer, and the solver's own report.
--
--   W5                      CG solve and SLQ log det of K + σ²I, K as
--                           lt.kernel and as a dense matrix; the dense
--                           matrix solved exactly
--   W8 n d kind path        one GP marginal log-likelihood and its
--                           gradient by lazytensor.gp (kind rbf|matern52,
--                           path exact|iterative), and by lt.grad of the
--                           same computation written from operations
--                           (variant "lt_grad", as the peer's autograd)
--
-- BENCH_THREADS (default 1) sets lt.settings.num_threads.
local dir0 = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir0 .. "/?.lua;" .. dir0 .. "/../?.lua;" .. package.path
local B = require "benchlib"
local P = require "problems"

local DIR, WHICH = arg[1], arg[2]
if not DIR or (WHICH ~= "W5" and WHICH ~= "W8") then
  io.stderr:write("usage: lt_side.lua DIR W5 | W8 n d kind exact|iterative\n")
  os.exit(2)
end

local lt, why = B.load()
if not lt then
  B.emit({workload = WHICH, op = "*", system = "lazytensor", n = 0, skipped = why})
  return
end
local THREADS = tonumber(os.getenv("BENCH_THREADS") or "1") or 1
lt.settings.num_threads = THREADS

local function emit(rec)
  rec.system = "lazytensor"
  rec.threads = THREADS
  B.emit(rec)
end

local function relerr(x, ref)
  return B.num((x - ref):norm()) / B.num(ref:norm())
end

------------------------------------------------------------------- W5 --

local function w5()
  local W = P.W5
  local D = P.w5_data(DIR)
  local n = D.n
  local xref, ldref = P.w5_reference(lt, DIR, D)
  local X, b = lt.tensor(D.x):reshape(n, 1), lt.tensor(D.b)
  local spec = {kind = "rbf", lengthscale = W.lengthscale, variance = W.variance}
  local Kn = lt.kernel(X, spec):dense():add_diag(W.noise) -- the dense input (not flagged PSD)
  local ops = {
    kernel = function() return lt.kernel(X, spec):add_diag(W.noise) end,
    dense = function() return Kn end,
  }
  local OPTS = {budget = 6, max = 7, min = 3}
  for _, variant in ipairs({"kernel", "dense"}) do
    local mk = ops[variant]
    lt.with_settings({max_cholesky_size = 0, cg_tolerance = 1e-6}, function()
      local x, info
      local rec = B.measure(function() x, info = mk():solve(b) end, OPTS)
      rec = B.info_fields(rec, info)
      rec.workload, rec.op, rec.n, rec.variant = "W5", "solve_cg", n, variant
      rec.relerr_vs_exact = relerr(x, xref)
      rec.rel_residual = B.rel_residual(mk(), x, b)
      rec.cg_tolerance = 1e-6
      emit(rec)
      -- SLQ with the default 10 probes, and with 20 (the estimate's spread
      -- shrinks as 1/√probes); 15 calls, each with new probes, for the
      -- median error
      for _, probes in ipairs({10, 20}) do
        local errs, v = {}, nil
        local seed = 100
        lt.settings.num_trace_samples = probes
        rec = B.measure(function()
          seed = seed + 1
          lt.manual_seed(seed) -- new probes every call, as the peer's
          v = mk():logdet()
          errs[#errs + 1] = math.abs(v - ldref) / math.abs(ldref)
        end, {budget = 8, max = 15, min = 15})
        table.sort(errs)
        rec.workload, rec.op, rec.n = "W5", "logdet_slq", n
        rec.variant = variant .. (probes == 10 and "" or ", 20 probes")
        rec.value, rec.exact_value = v, ldref
        rec.relerr_vs_exact = errs[(#errs + 1) // 2] -- median over the calls
        rec.relerr_vs_exact_max = errs[#errs]
        rec.num_trace_samples = probes
        emit(rec)
      end
      lt.settings.num_trace_samples = 10
    end)
  end
  -- the dense matrix solved exactly: Cholesky first (not flagged PSD)
  lt.with_settings({max_cholesky_size = math.huge}, function()
    local x, info
    local rec = B.measure(function() x, info = Kn:solve(b) end, {budget = 6, max = 5, min = 3})
    rec = B.info_fields(rec, info)
    rec.workload, rec.op, rec.n, rec.variant = "W5", "solve_exact", n, "dense"
    rec.relerr_vs_exact = relerr(x, xref)
    emit(rec)
  end)
end

------------------------------------------------------------------- W8 --

local function grad_relerr(g, gref)
  local num, den = 0, 0
  for i = 1, 3 do
    num = num + (g[i] - gref[i]) ^ 2
    den = den + gref[i] ^ 2
  end
  return math.sqrt(num / den)
end

-- The GP layer's exact path forms Ky⁻¹ by a solve with I (2n³ flops) and
-- holds about five n×n matrices: above this n it is not run.
local GP_EXACT_MAX = 8000

local function w8(n, d, kind, path)
  local gp = require "lazytensor.gp"
  local W = P.W8
  local D = P.w8_data(DIR, d, n)
  if path == "exact" and n > GP_EXACT_MAX then
    emit({workload = "W8", op = "mll_grad", n = n, d = d, kind = kind, path = path,
          skipped = string.format("lazytensor.gp's exact path forms Ky^-1 (a solve with I, "
                                  .. "2n^3 flops) and ~5 n x n matrices (%.0f GB)",
                                  5 * 8 * n * n / 2 ^ 30)})
    return
  end
  local mref, gref = P.w8_reference(lt, DIR, D, kind)
  local dims = {}
  for q = 1, d do dims[q] = q end
  local model = gp.exact{
    x = lt.tensor(D.X), y = lt.tensor(D.y), mean = "zero", noise = W.noise,
    kernel = gp.kernels[kind]{lengthscale = W.lengthscale, variance = W.variance, dims = dims},
  }
  -- the iterative path with the library's defaults (the preconditioner's rank
  -- adapts), and with a fixed rank 100 beside it (doc/iterative.md, "The
  -- preconditioner's rank")
  local variants = {{name = "defaults", settings = {}}}
  if path == "iterative" then
    variants[2] = {name = "precond100", settings = {preconditioner_size = 100}}
  end
  for _, variant in ipairs(variants) do
    local settings = {max_cholesky_size = path == "exact" and math.huge or 0}
    for k, v in pairs(variant.settings) do settings[k] = v end
    local v, g, rec, info
    local mll_errs, grad_errs = {}, {}
    lt.with_settings(settings, function()
      lt.manual_seed(1)
      rec = B.measure(function()
        -- a new covariance every call, as an optimiser's step makes it
        model:set_vector(model:get_vector())
        v, g, info = model:mll_and_grad()
        mll_errs[#mll_errs + 1] = math.abs(v - mref) / math.abs(mref)
        if gref[1] == gref[1] then grad_errs[#grad_errs + 1] = grad_relerr(g, gref) end
      end, {budget = 20, max = 5, min = 1, warmup = n <= 4000})
    end)
    table.sort(mll_errs)
    table.sort(grad_errs)
    rec.workload, rec.op, rec.n, rec.d, rec.kind, rec.path = "W8", "mll_grad", n, d, kind, path
    rec.variant = variant.name
    rec.preconditioner_size = settings.preconditioner_size or lt.settings.preconditioner_size
    rec.preconditioner_rank = info and info.preconditioner_rank -- the rank that ran
    rec.cg_iterations = info and info.iterations
    rec.structure = model:explain():match("^(%S+):")
    rec.mll, rec.g1, rec.g2, rec.g3 = v, g[1], g[2], g[3]
    rec.exact_mll = mref
    -- medians over the calls (new probes each call)
    rec.mll_relerr = mll_errs[(#mll_errs + 1) // 2]
    if #grad_errs > 0 then
      rec.grad_relerr = grad_errs[(#grad_errs + 1) // 2]
    else
      rec.grad_reference = string.format("none: Ky^-1 not formed above n = %d",
                                         P.EXACT_GRADIENT_MAX)
    end
    emit(rec)
  end
  -- The same MLL and gradient written from lazytensor operations and
  -- differentiated by lt.grad (as the peer's torch autograd does it):
  -- lt.kernel with tensor hyperparameters, add_diag, lt.mvn's log_prob.
  local X, Y = lt.tensor(D.X), lt.tensor(D.y)
  local zero = lt.zeros(n)
  local function mll(p)
    local K = lt.kernel(X, {kind = kind, lengthscale = p[1]:exp(), variance = p[2]:exp()})
    return lt.mvn(zero, K:add_diag(p[3]:exp())):log_prob(Y)
  end
  local df = lt.grad(mll)
  local theta = {math.log(W.lengthscale), math.log(W.variance), math.log(W.noise)}
  local settings = {max_cholesky_size = path == "exact" and math.huge or 0}
  local v, g, rec
  local mll_errs, grad_errs = {}, {}
  lt.with_settings(settings, function()
    lt.manual_seed(1)
    rec = B.measure(function()
      g, v = df(theta)
      mll_errs[#mll_errs + 1] = math.abs(v - mref) / math.abs(mref)
      if gref[1] == gref[1] then grad_errs[#grad_errs + 1] = grad_relerr(g, gref) end
    end, {budget = 20, max = 5, min = 1, warmup = n <= 4000})
  end)
  table.sort(mll_errs)
  table.sort(grad_errs)
  rec.workload, rec.op, rec.n, rec.d, rec.kind, rec.path = "W8", "mll_grad", n, d, kind, path
  rec.variant = "lt_grad"
  rec.mll, rec.g1, rec.g2, rec.g3 = v, g[1], g[2], g[3]
  rec.exact_mll = mref
  rec.mll_relerr = mll_errs[(#mll_errs + 1) // 2]
  if #grad_errs > 0 then rec.grad_relerr = grad_errs[(#grad_errs + 1) // 2] end
  emit(rec)
end

if WHICH == "W5" then
  local ok, err = pcall(w5)
  if not ok then emit({workload = "W5", op = "*", n = 4000, skipped = B.reason_of(err)}) end
else
  local n, d, kind, path = tonumber(arg[3]), tonumber(arg[4]), arg[5], arg[6]
  local ok, err = pcall(w8, n, d, kind, path)
  if not ok then
    emit({workload = "W8", op = "mll_grad", n = n, d = d, kind = kind, path = path,
          skipped = B.reason_of(err)})
  end
end
