-- Bounds and priors on gp.exact, gp.sgpr and gp.multitask (gp/hyper.lua's
-- log-space models), the noise floor, log_posterior, and
-- gp.multitask{task_noise = true}: values against plain dense
-- computations in Lua, gradients through the bounded transform against
-- central differences, the small Bayesian-optimisation fit where the noise
-- and an irrelevant lengthscale ran away, the real-valued hyperparameters
-- (the means, multitask's task_factor W, SGPR's inducing points: priors,
-- per-entry bounds of every kind, fits against closed forms and at a box's
-- edge), and the errors.
local gp = require "lazytensor.gp"
local ref = require "support.ref"
local close = ref.close

local log, exp, pi = math.log, math.exp, math.pi
local P = gp.priors

local function fails(f, pattern)
  local ok, err = pcall(f)
  assert.is_false(ok)
  assert.truthy(tostring(err):find("^lazytensor:"), tostring(err))
  assert.truthy(tostring(err):find(pattern), tostring(err))
end

-- A noise-free objective at a few points of [0, 1]³ whose third
-- coordinate does not matter (a small BO loop's first design). The points
-- from Park and Miller's generator, whose products are exact in doubles:
-- the same design on every Lua.
local function bo_design(seed)
  seed = seed or 7
  local function rnd()
    seed = (seed * 16807) % 2147483647
    return seed / 2147483647
  end
  local X, y = {}, {}
  for i = 1, 10 do
    X[i] = {rnd(), rnd(), rnd()}
    y[i] = math.sin(3 * X[i][1]) + (X[i][2] - 0.5) ^ 2
  end
  return X, y
end

-- v·exp(−½ Σ ((a − b)/ℓ_q)²).
local function rbf(a, b, l, v)
  local s = 0
  for q = 1, #a do s = s + ((a[q] - b[q]) / l[q]) ^ 2 end
  return v * exp(-0.5 * s)
end

-- log N(r; 0, C) in plain Lua (C a table of rows).
local function log_normal(r, C)
  local L = ref.cholesky(C)
  local a = ref.chol_solve(L, r)
  local q, ld = 0, 0
  for i = 1, #r do
    q = q + r[i] * a[i]
    ld = ld + 2 * log(L[i][i])
  end
  return -0.5 * (q + ld + #r * log(2 * pi))
end

-- The exact model's MLL in plain Lua: rbf (ARD) + σ², a constant mean.
local function dense_exact_mll(X, y, l, v, s2, m)
  local C, r = {}, {}
  for i = 1, #X do
    C[i] = {}
    for j = 1, #X do C[i][j] = rbf(X[i], X[j], l, v) + (i == j and s2 or 0) end
    r[i] = y[i] - m
  end
  return log_normal(r, C)
end

-- The central difference of log_posterior in raw_vector's entry p
-- (Richardson's extrapolation of two steps, as ref.check_model_gradient).
local function raw_difference(model, r0, p)
  local function at(h)
    local rp, rm = {}, {}
    for i = 1, #r0 do rp[i], rm[i] = r0[i], r0[i] end
    rp[p], rm[p] = r0[p] + h, r0[p] - h
    model:set_raw_vector(rp)
    local fp = model:log_posterior()
    model:set_raw_vector(rm)
    local fm = model:log_posterior()
    return (fp - fm) / (2 * h)
  end
  local d1, d2 = at(1e-3), at(5e-4)
  model:set_raw_vector(r0)
  return (4 * d2 - d1) / 3
end

-- log_posterior_and_grad's gradient (over raw_vector) against central
-- differences of log_posterior; returns it.
local function check_raw_gradient(model, what, rel, abs_tol)
  local r0 = model:raw_vector()
  local value, g = model:log_posterior_and_grad()
  close(value, model:log_posterior(), 1e-12, what .. ": value")
  assert.equal(#r0, #g)
  for p = 1, #r0 do
    close(g[p], raw_difference(model, r0, p), rel or 1e-6, what .. ": d/dr " .. p, abs_tol or 1e-7)
  end
  return g
end

describe("gp.exact: bounds, priors and the noise floor", function()
  local X, y = bo_design()

  local function bounded_model(spec)
    spec = spec or {}
    spec.x, spec.y = X, y
    spec.kernel = spec.kernel or gp.kernels.rbf{lengthscale = {0.3, 0.6, 0.9}, variance = 1.5}
    spec.noise = spec.noise or 0.01
    spec.bounds = spec.bounds or {lengthscale = {0.05, 4}, variance = {0.1, math.huge}}
    spec.priors = spec.priors or {lengthscale = P.gamma(3, 6), noise = P.lognormal(-4, 1),
                                  variance = P.half_cauchy(2)}
    return gp.exact(spec)
  end

  it("log_posterior is a dense MLL plus the priors' densities in plain Lua", function()
    local model = bounded_model()
    local m = model.mean_value
    local mll = dense_exact_mll(X, y, {0.3, 0.6, 0.9}, 1.5, 0.01, m)
    close(model:mll(), mll, 1e-11, "mll")
    -- gamma(3, 6): 3 log 6 − log Γ(3) + 2 log x − 6x; lognormal(−4, 1); half_cauchy(2)
    local lp = 0
    for _, l in ipairs{0.3, 0.6, 0.9} do lp = lp + 3 * log(6) - log(2) + 2 * log(l) - 6 * l end
    lp = lp - 0.5 * (log(0.01) + 4) ^ 2 - log(0.01) - 0.5 * log(2 * pi)
    lp = lp + log(2 / (pi * 2 * (1 + (1.5 / 2) ^ 2)))
    close(model:log_prior(), lp, 1e-12, "log prior")
    close(model:log_posterior(), mll + lp, 1e-11, "log posterior")
  end)

  it("the raw parameters: log θ unbounded, r = log(θ − lo) or logit above lo", function()
    local model = bounded_model()
    local r = model:raw_vector()
    -- lengthscale in (0.05, 4): logit((θ − lo)/(hi − lo)); variance above 0.1;
    -- noise above the floor 1e-4; the mean as it is
    local function logit(v, lo, hi) return log((v - lo) / (hi - v)) end
    close(r[1], logit(0.3, 0.05, 4), 1e-13, "lengthscale 1")
    close(r[3], logit(0.9, 0.05, 4), 1e-13, "lengthscale 3")
    close(r[4], log(1.5 - 0.1), 1e-13, "variance")
    close(r[5], log(0.01 - 1e-4), 1e-13, "noise")
    close(r[6], model.mean_value, 1e-15, "mean")
    -- get_vector stays in log space
    local v = model:get_vector()
    close(v[1], log(0.3), 1e-15, "log lengthscale")
    close(v[5], log(0.01), 1e-15, "log noise")
    -- the round trip
    model:set_raw_vector({0.2, -1, 3, 0.5, -2, 0.1})
    local back = model:raw_vector()
    for i, x in ipairs{0.2, -1, 3, 0.5, -2, 0.1} do close(back[i], x, 1e-15, "raw " .. i) end
    close(model.noise, 1e-4 + exp(-2), 1e-14, "noise from r")
    close(model.kernel.values.lengthscale[3], 0.05 + 3.95 / (1 + exp(-3)), 1e-14, "ℓ3 from r")
  end)

  it("the log posterior's gradient through the bounds equals central differences", function()
    local model = bounded_model()
    local g = check_raw_gradient(model, "exact")
    -- the log-space gradient is not it: the noise entry differs by (θ − lo)/θ
    -- and by the prior's term
    local _, glog = model:mll_and_grad()
    assert.is_true(math.abs(g[5] - glog[5]) > 1e-3 * math.abs(glog[5]),
                   string.format("%g vs %g", g[5], glog[5]))
    -- also without priors, a product kernel (the dense structure) and a fixed mean
    local plain = bounded_model{priors = {}, fixed = {mean = true},
                                kernel = gp.kernels.rbf{lengthscale = 0.5}
                                         * gp.kernels.matern52{lengthscale = 0.8},
                                bounds = {k1_lengthscale = {0.1, 2}, k2_variance = {0.5, 3}}}
    check_raw_gradient(plain, "exact, a product")
  end)

  it("a custom kernel (differentiated by lt.grad) takes bounds and priors too", function()
    local lt = require "lazytensor"
    local k = gp.kernels.custom{params = {l = 0.4, v = 1.3}, k = function(x1, x2, p)
      return lt.kernel(x1, x2, {kind = "rbf", lengthscale = p.l, variance = p.v})
    end}
    local model = gp.exact{x = X, y = y, kernel = k, noise = 0.01, bounds = {l = {0.1, 2}},
                           priors = {v = P.gamma(2, 1), l = P.lognormal(0, 1)}}
    local mll = dense_exact_mll(X, y, {0.4, 0.4, 0.4}, 1.3, 0.01, model.mean_value)
    close(model:mll(), mll, 1e-11, "custom kernel's mll")
    close(model:log_posterior(), mll + log(1.3) - 1.3
          - 0.5 * log(0.4) ^ 2 - log(0.4) - 0.5 * log(2 * pi), 1e-11, "custom log posterior")
    check_raw_gradient(model, "exact, custom kernel")
  end)

  it("a small BO fit: the noise floor holds, a lengthscale prior or bound keeps ℓ finite", function()
    local function fit(spec)
      spec.x, spec.y = X, y
      spec.kernel = gp.kernels.rbf{lengthscale = {0.5, 0.5, 0.5}}
      local model = gp.exact(spec)
      local res = model:fit{max_iter = 200}
      return model, res
    end
    -- the floor removed: the noise runs to nothing and the third,
    -- irrelevant, lengthscale away (measured 2.2e-16 and 1.1e23, on every Lua)
    local free = fit{bounds = {noise = {0, math.huge}}}
    assert.is_true(free.noise < 1e-8, "unbounded noise " .. free.noise)
    assert.is_true(free.kernel.values.lengthscale[3] > 1e6)
    -- the default: the noise stops at its floor (1e-4 + 1.5e-14 measured)
    local floored = fit{}
    assert.is_true(floored.noise >= 1e-4 and floored.noise < 1.001e-4, "floor " .. floored.noise)
    -- GPyTorch's usual lengthscale prior keeps ℓ3 finite (0.62 measured),
    -- and fit reports the MLL and the log posterior it maximised
    local with_prior, res = fit{priors = {lengthscale = P.gamma(3, 6)}}
    local l = with_prior.kernel.values.lengthscale
    assert.is_true(l[3] < 5, "ℓ3 with the prior " .. l[3])
    assert.is_true(with_prior.noise >= 1e-4)
    close(res.log_posterior, with_prior:log_posterior(), 1e-9, "fit's log posterior")
    close(res.mll, with_prior:mll(), 1e-9, "fit's mll")
    -- the prior's optimum is a maximum of the log posterior, not of the MLL
    local _, g = with_prior:log_posterior_and_grad()
    for p = 1, #g do assert.is_true(math.abs(g[p]) < 1e-3, "gradient " .. p .. " " .. g[p]) end
    -- a bound stops it at the bound
    local bounded = fit{bounds = {lengthscale = {0.01, 10}}}
    local lb = bounded.kernel.values.lengthscale[3]
    assert.is_true(lb <= 10 and lb > 9, string.format("ℓ3 with the bound %.17g", lb))
  end)

  it("the floor on a fitted noise only: fixed and per-point noise are left alone", function()
    local fixed = gp.exact{x = X, y = y, kernel = gp.kernels.rbf{}, noise = 1e-6,
                           fixed = {noise = true}}
    assert.is_nil(fixed.bounds.noise)
    fixed:fit{max_iter = 5}
    assert.equal(1e-6, fixed.noise)
    local per = {}
    for i = 1, #X do per[i] = 1e-6 * i end
    local pp = gp.exact{x = X, y = y, kernel = gp.kernels.rbf{}, noise = per}
    assert.is_nil(pp.bounds.noise)
    -- a default start (1% of var(y)) below the floor moves above it
    local small = {}
    for i = 1, #y do small[i] = 1e-3 * y[i] end
    local m = gp.exact{x = X, y = small, kernel = gp.kernels.rbf{}}
    close(m.noise, 2e-4, 1e-15, "default start above the floor")
  end)

  it("batches give each member the bounds and priors; condition keeps them", function()
    local lt = require "lazytensor"
    local Xb = lt.tensor{X, (bo_design(11))}
    local Yb = lt.tensor{y, y}
    local batch = gp.exact{x = Xb, y = Yb, kernel = gp.kernels.rbf{lengthscale = {0.5, 0.5, 0.5}},
                           priors = {lengthscale = P.gamma(3, 6)}}
    batch:fit{max_iter = 100}
    for i = 1, 2 do
      local member = batch:member(i)
      assert.is_true(member.noise >= 1e-4)
      for _, l in ipairs(member.kernel.values.lengthscale) do assert.is_true(l < 5) end
    end
    close(batch:log_posterior()[1], batch:member(1):log_posterior(), 1e-12, "member 1")
    local model = bounded_model()
    local c = model:condition({{0.5, 0.5, 0.5}}, {0.3})
    assert.same(model.bounds, c.bounds)
    assert.equal(model.priors, c.priors)
    close(c:log_prior(), model:log_prior(), 1e-14, "the same priors")
  end)

  it("bad bounds and priors are lazytensor: errors; the kernel is untouched", function()
    local k = gp.kernels.rbf{lengthscale = {0.3, 0.6, 0.9}}
    local before = k:fingerprint()
    local function make(spec)
      spec.x, spec.y, spec.kernel = X, y, k
      return gp.exact(spec)
    end
    fails(function() make{bounds = {lengthscale = {2, 1}}} end, "below hi")
    fails(function() make{bounds = {lengthscale = {1, 1}}} end, "below hi")
    fails(function() make{bounds = {lengthscale = {-1, 1}}} end, "lo must be")
    fails(function() make{bounds = {lenghtscale = {0.1, 1}}} end, "unknown hyperparameter")
    fails(function() make{priors = {lenghtscale = P.gamma(2, 1)}} end,
          "unknown hyperparameter 'lenghtscale'")
    fails(function() make{priors = {lengthscale = {2, 1}}} end, "gp.priors")
    fails(function() make{bounds = {lengthscale = {0.5, 3}}} end,
          "lengthscale = 0.3 is outside its bounds")
    fails(function() make{noise = 5e-5} end, "noise = 5e%-05 is outside its bounds")
    fails(function() make{noise = 0.1, fixed = {noise = true}, bounds = {noise = {0.01, 1}}} end,
          "noise is fixed")
    fails(function() make{noise = {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1},
                          bounds = {noise = {0.01, 1}}} end, "per point")
    fails(function() make{bounds = 3} end, "bounds must be a table")
    assert.equal(before, k:fingerprint())
    -- an explicit {0, ∞} removes the floor and a start below it is allowed
    local m = make{noise = 5e-5, bounds = {noise = {0, math.huge}}}
    assert.is_nil(m.bounds.noise)
  end)
end)

-- The SGPR bound in plain Lua: log N(r; 0, Q + σ²I) − tr(K − Q)/(2σ²),
-- Q = Kxz·(Kzz + jitter·I)⁻¹·Kzx, rbf with one lengthscale.
local function dense_sgpr_bound(X, y, Z, l, v, s2, m, jitter)
  local n, mz = #X, #Z
  local ls = {}
  for q = 1, #X[1] do ls[q] = l end
  local Kzz, Kzx = {}, {}
  for a = 1, mz do
    Kzz[a] = {}
    for b = 1, mz do Kzz[a][b] = rbf(Z[a], Z[b], ls, v) + (a == b and jitter or 0) end
    Kzx[a] = {}
    for i = 1, n do Kzx[a][i] = rbf(Z[a], X[i], ls, v) end
  end
  local Lz = ref.cholesky(Kzz)
  local cols = {} -- Kzz⁻¹·Kzx, column by column
  for i = 1, n do
    local col = {}
    for a = 1, mz do col[a] = Kzx[a][i] end
    cols[i] = ref.chol_solve(Lz, col)
  end
  local C, r, trace = {}, {}, 0
  for i = 1, n do
    C[i] = {}
    for j = 1, n do
      local q = 0
      for a = 1, mz do q = q + Kzx[a][i] * cols[j][a] end
      C[i][j] = q + (i == j and s2 or 0)
      if i == j then trace = trace + v - q end
    end
    r[i] = y[i] - m
  end
  return log_normal(r, C) - trace / (2 * s2)
end

describe("gp.sgpr: bounds, priors and the noise floor", function()
  local X, y = bo_design()
  local Z = {X[1], X[4], X[7]}

  local function model(spec)
    spec = spec or {}
    spec.x, spec.y, spec.inducing = X, y, Z
    spec.kernel = gp.kernels.rbf{lengthscale = 0.4, variance = 1.2}
    spec.noise = spec.noise or 0.02
    return gp.sgpr(spec)
  end

  it("log_posterior is the dense bound plus the priors; its gradient through the bounds", function()
    local mdl = model{bounds = {lengthscale = {0.1, 3}}, priors = {lengthscale = P.gamma(3, 6),
                      noise = P.lognormal(-4, 1)}}
    local bound = dense_sgpr_bound(X, y, Z, 0.4, 1.2, 0.02, mdl.mean_value, mdl.jitter)
    close(mdl:mll(), bound, 1e-10, "sgpr bound")
    local lp = 3 * log(6) - log(2) + 2 * log(0.4) - 6 * 0.4
               - 0.5 * (log(0.02) + 4) ^ 2 - log(0.02) - 0.5 * log(2 * pi)
    close(mdl:log_posterior(), bound + lp, 1e-10, "sgpr log posterior")
    local r = mdl:raw_vector()
    close(r[3], log(0.02 - 1e-4), 1e-13, "the noise's r above the floor")
    -- the kernel's, the noise's, the mean's and the inducing points' entries
    check_raw_gradient(mdl, "sgpr", 1e-6, 1e-6)
  end)

  it("a fit to noise-free targets stops the noise at the floor", function()
    local x1, y1 = {}, {}
    for i = 1, 20 do
      x1[i] = {i * 0.25}
      y1[i] = math.sin(i * 0.25)
    end
    local function smooth(bounds)
      return gp.sgpr{x = x1, y = y1, kernel = gp.kernels.rbf{lengthscale = 1}, inducing = 6,
                     noise = 0.02, bounds = bounds}
    end
    -- without the floor the noise runs to 1.9e-6 (measured), with it stops at 1e-4
    local free = smooth{noise = {0, math.huge}}
    free:fit{max_iter = 100}
    assert.is_true(free.noise < 1e-5, "unbounded " .. free.noise)
    local floored = smooth()
    floored:fit{max_iter = 100}
    assert.is_true(floored.noise >= 1e-4 and floored.noise < 1.01e-4, "floor " .. floored.noise)
  end)

  it("bad bounds and priors are lazytensor: errors", function()
    fails(function() model{bounds = {lengthscale = {3, 0.1}}} end, "below hi")
    fails(function() model{priors = {period = P.gamma(2, 1)}} end, "unknown hyperparameter 'period'")
    fails(function() model{bounds = {lengthscale = {1, 3}}} end, "outside its bounds")
    fails(function() model{noise = 1e-4} end, "noise = 0.0001 is outside its bounds")
  end)
end)

-- The multitask MLL in plain Lua: the observed entries of B ⊗ K + diag of
-- σ² + τ_task, B = W·Wᵀ + diag(v), rbf(ℓ) with the kernel's variance.
local function dense_multitask_mll(model, l)
  local n = model.n
  local W, v = model.W:totable(), model.v
  local tau = model.task_noise or {}
  local obs = model.observed
  local function task(idx) return math.floor((idx - 1) / n) + 1 end
  local function point(idx) return (idx - 1) % n + 1 end
  local C, r = {}, {}
  for p, i in ipairs(obs) do
    C[p] = {}
    local a, xi = task(i), point(i)
    for q, j in ipairs(obs) do
      local b, xj = task(j), point(j)
      local B = (a == b and v[a] or 0)
      for k = 1, model.rank do B = B + W[a][k] * W[b][k] end
      C[p][q] = B * rbf(model.points[xi], model.points[xj], {l}, model.kernel.values.variance)
                + (p == q and model.noise + (tau[a] or 0) or 0)
    end
    r[p] = model.rows[xi][a] - model.means[a]
  end
  return log_normal(r, C)
end

-- The multitask predictive mean at one input xs in plain Lua:
-- m_a + Σ_obs B_ab·k(xs, x_j)·(C⁻¹r)_j.
local function dense_multitask_mean(model, l, xs)
  local n, kv = model.n, model.kernel.values.variance
  local W, v = model.W:totable(), model.v
  local tau = model.task_noise or {}
  local obs = model.observed
  local function task(idx) return math.floor((idx - 1) / n) + 1 end
  local function point(idx) return (idx - 1) % n + 1 end
  local function B(a, b)
    local s = a == b and v[a] or 0
    for k = 1, model.rank do s = s + W[a][k] * W[b][k] end
    return s
  end
  local C, r = {}, {}
  for p, i in ipairs(obs) do
    C[p] = {}
    for q, j in ipairs(obs) do
      C[p][q] = B(task(i), task(j)) * rbf(model.points[point(i)], model.points[point(j)], {l}, kv)
                + (p == q and model.noise + (tau[task(i)] or 0) or 0)
    end
    r[p] = model.rows[point(i)][task(i)] - model.means[task(i)]
  end
  local alpha = ref.chol_solve(ref.cholesky(C), r)
  local out = {}
  for a = 1, model.t do
    local s = model.means[a]
    for p, j in ipairs(obs) do
      s = s + B(a, task(j)) * rbf(xs, model.points[point(j)], {l}, kv) * alpha[p]
    end
    out[a] = s
  end
  return out
end

-- Nine 1-d points and three tasks' outputs (the multitask blocks' data).
local function multitask_data()
  local x, Y = {}, {}
  for i = 1, 9 do
    x[i] = {i / 9}
    Y[i] = {math.sin(3 * i / 9), math.cos(2 * i / 9) + 0.1 * math.sin(7 * i), 0.5 * i / 9}
  end
  return x, Y
end

describe("gp.multitask: task_noise, bounds and priors", function()
  local x, Y = multitask_data()

  local function model(spec, rows)
    spec = spec or {}
    spec.x, spec.y = x, rows or Y
    spec.kernel = gp.kernels.rbf{lengthscale = 0.4}
    spec.rank = 1
    return gp.multitask(spec)
  end

  it("task_noise: one fitted variance per task added to σ², against a dense MLL", function()
    local mdl = model{task_noise = true}
    assert.equal(3, #mdl.task_noise)
    mdl.task_noise = {0.01, 0.05, 0.002}
    close(mdl:mll(), dense_multitask_mll(mdl, 0.4), 1e-11, "multitask mll with task noise")
    local _, g = mdl:mll_and_grad()
    ref.check_model_gradient(mdl, g, "multitask, task noise")
    -- with missing values (the general path)
    local rows = {}
    for i, row in ipairs(Y) do rows[i] = {row[1], row[2], row[3]} end
    rows[3][2], rows[7][1] = 0 / 0, 0 / 0
    local missing = model({task_noise = true}, rows)
    missing.task_noise = {0.02, 0.004, 0.03}
    close(missing:mll(), dense_multitask_mll(missing, 0.4), 1e-11, "with missing values")
    _, g = missing:mll_and_grad()
    ref.check_model_gradient(missing, g, "multitask, task noise, missing values")
    -- without task_noise, the dense MLL is the eigen rule's
    local shared = model()
    close(shared:mll(), dense_multitask_mll(shared, 0.4), 1e-11, "shared noise only")
  end)

  it("bounds and priors on the task variances and noises; the floors hold in a fit", function()
    local mdl = model{task_noise = true, bounds = {task_variance = {1e-3, 10}},
                      priors = {task_noise = P.lognormal(-5, 2), lengthscale = P.gamma(3, 6)}}
    mdl.task_noise = {0.01, 0.05, 0.002}
    check_raw_gradient(mdl, "multitask", 1e-6, 1e-6)
    local res = mdl:fit{max_iter = 60}
    close(res.log_posterior, mdl:log_posterior(), 1e-9, "fit's log posterior")
    assert.is_true(mdl.noise >= 1e-4)
    for a = 1, 3 do
      assert.is_true(mdl.task_noise[a] >= 1e-4, "task noise " .. a)
      assert.is_true(mdl.v[a] > 1e-3 and mdl.v[a] < 10, "task variance " .. a)
    end
    -- a fit without priors raises the MLL from the start
    local plain = model{task_noise = true}
    local start = plain:mll()
    plain:fit{max_iter = 40}
    assert.is_true(plain:mll() > start)
    assert.truthy(plain:describe():find("task noise = {", 1, true))
    -- the predictive mean at a new input against the dense kᵀ·C⁻¹·r
    local xs = {0.37}
    local mean = plain:predict({xs})
    local dense = dense_multitask_mean(plain, plain.kernel.values.lengthscale, xs)
    for a = 1, 3 do close(mean:get(1, a), dense[a], 1e-9, "predictive mean " .. a) end
  end)

  it("bad input: task_noise, fixed and bounds", function()
    fails(function() model{task_noise = 1} end, "task_noise must be true or false")
    fails(function() model{fixed = {task_noise = true}} end, "needs task_noise = true")
    fails(function() model{bounds = {task_noise = {1e-3, 1}}} end, "unknown hyperparameter")
    fails(function() model{task_noise = true, bounds = {task_noise = {0.5, 1}}} end,
          "outside its bounds")
    fails(function() model{bounds = {task_variance = {2, 1}}} end, "below hi")
    fails(function() model{noise = 0.1, fixed = {noise = true}, bounds = {noise = {0, 1}}} end,
          "noise is fixed")
  end)
end)

-- log N(x; mu, sd) summed over the entries of x (a list), plain Lua; mu and
-- sd numbers or lists.
local function normal_logpdf(x, mu, sd)
  local s = 0
  for k, v in ipairs(x) do
    local m = type(mu) == "table" and mu[k] or mu
    local d = type(sd) == "table" and sd[k] or sd
    s = s - 0.5 * ((v - m) / d) ^ 2 - log(d) - 0.5 * log(2 * pi)
  end
  return s
end

local function logit(v, lo, hi) return log((v - lo) / (hi - v)) end

describe("real-valued hyperparameters: the means, task_factor (W), the inducing points", function()
  -- gp.exact with the kernel and the noise fixed: the MLL is a concave
  -- quadratic in the mean, maximised at m* = 1ᵀC⁻¹y / 1ᵀC⁻¹1 (generalised
  -- least squares), and with a N(μ0, s²) prior at (1ᵀC⁻¹y + μ0/s²)/(1ᵀC⁻¹1 + 1/s²).
  local X, y = {}, {}
  for i = 1, 10 do
    X[i] = {i / 10}
    y[i] = math.sin(3 * i / 10) + 2
  end
  local function mean_only(spec)
    spec.x, spec.y, spec.noise, spec.fixed = X, y, 0.01, {noise = true}
    spec.kernel = gp.kernels.rbf{lengthscale = 0.3, variance = 1.2,
                                 fixed = {lengthscale = true, variance = true}}
    return gp.exact(spec)
  end
  local function gls()
    local C = {}
    for i = 1, #X do
      C[i] = {}
      for j = 1, #X do C[i][j] = rbf(X[i], X[j], {0.3}, 1.2) + (i == j and 0.01 or 0) end
    end
    local ones = {}
    for i = 1, #X do ones[i] = 1 end
    local L = ref.cholesky(C)
    local a1, ay = ref.chol_solve(L, ones), ref.chol_solve(L, y)
    local s11, s1y = 0, 0
    for i = 1, #X do s11, s1y = s11 + a1[i], s1y + ay[i] end
    return s11, s1y
  end

  it("exact: a prior on the mean is a normal density in plain Lua, its gradient through bounds", function()
    local model = mean_only{mean_value = 1, bounds = {mean = {-1, 2.5}},
                            priors = {mean = P.normal(0.5, 0.7)}}
    local mll = dense_exact_mll(X, y, {0.3}, 1.2, 0.01, 1)
    close(model:log_prior(), normal_logpdf({1}, 0.5, 0.7), 1e-14, "normal prior on the mean")
    close(model:log_posterior(), mll + normal_logpdf({1}, 0.5, 0.7), 1e-11, "log posterior")
    -- the mean is the only free entry: its r is the logit inside (−1, 2.5)
    local r = model:raw_vector()
    assert.equal(1, #r)
    close(r[1], logit(1, -1, 2.5), 1e-14, "r of the mean")
    model:set_raw_vector({0.3})
    close(model.mean_value, -1 + 3.5 / (1 + exp(-0.3)), 1e-14, "the mean from r")
    close(model:log_posterior(), dense_exact_mll(X, y, {0.3}, 1.2, 0.01, model.mean_value)
          + normal_logpdf({model.mean_value}, 0.5, 0.7), 1e-11, "log posterior there")
    check_raw_gradient(model, "exact mean")
    -- with the kernel free too, an ARD lengthscale prior and a smoothed box on the mean
    local free = gp.exact{x = X, y = y, kernel = gp.kernels.rbf{lengthscale = {0.4}}, noise = 0.02,
                          mean_value = 1.7, bounds = {mean = {-math.huge, 3}},
                          priors = {mean = P.smoothed_box(1, 1.5, 0.2),
                                    lengthscale = P.gamma(3, 6)}}
    -- d = 0.2 beyond the box: −½(0.2/0.2)² − log(0.5 + √(2π)·0.2)
    close(free:log_prior(), -0.5 - log(0.5 + math.sqrt(2 * pi) * 0.2)
          + 3 * log(6) - log(2) + 2 * log(0.4) - 6 * 0.4, 1e-13, "smoothed box + gamma")
    -- raw_vector: ℓ, v, the noise, the mean
    close(free:raw_vector()[4], log(3 - 1.7), 1e-14, "r = log(hi − θ) below hi")
    check_raw_gradient(free, "exact, mean below hi")
  end)

  it("exact: fit honours the mean's prior and bounds (the closed forms; the box's edge)", function()
    local s11, s1y = gls()
    local mstar = s1y / s11 -- 2.298
    local free = mean_only{}
    free:fit{}
    close(free.mean_value, mstar, 1e-8, "unbounded fit: the GLS mean")
    local map = mean_only{priors = {mean = P.normal(0.5, 0.5)}}
    map:fit{}
    close(map.mean_value, (s1y + 0.5 / 0.25) / (s11 + 1 / 0.25), 1e-8, "MAP mean")
    -- m* above the box: the fit ends at hi (measured 1.5 − 5e-7), inside it
    for _, b in ipairs{{-1, 1.5}, {-math.huge, 1.5}} do
      local boxed = mean_only{mean_value = 0, bounds = {mean = b}}
      boxed:fit{}
      assert.is_true(boxed.mean_value <= 1.5 and boxed.mean_value > 1.5 - 1e-5,
                     string.format("{%g, %g}: %.17g", b[1], b[2], boxed.mean_value))
    end
    -- below the box's lower edge: the fit ends at lo
    local above = mean_only{mean_value = 3, bounds = {mean = {2.5, math.huge}}}
    above:fit{}
    assert.is_true(above.mean_value >= 2.5 and above.mean_value < 2.5 + 1e-5,
                   string.format("%.17g", above.mean_value))
    -- a box holding m*: the bound does not move the optimum
    local inside = mean_only{mean_value = 3, bounds = {mean = {2.2, math.huge}}}
    inside:fit{}
    close(inside.mean_value, mstar, 1e-6, "m* inside the box")
  end)

  local X3, y3 = bo_design()
  local Z = {X3[1], X3[4], X3[7]}
  local function zflat()
    local out = {}
    for _, row in ipairs(Z) do
      for _, z in ipairs(row) do out[#out + 1] = z end
    end
    return out
  end

  it("sgpr: per-entry priors and bounds on the inducing points, a prior on the mean", function()
    local centre = {{0.5, 0.5, 0.5}, {0.2, 0.4, 0.6}, {0.8, 0.1, 0.3}}
    local sd = {{0.3, 0.3, 0.3}, {0.5, 0.5, 0.5}, {1, 1, 1}}
    -- each entry's map of another kind: a box, above lo, below hi, free
    local inf = math.huge
    local lo = {{0, -inf, -inf}, {-0.5, 0, -inf}, {0, 0, 0}}
    local hi = {{1, 2, inf}, {inf, 1, 1.5}, {1, 1, 1}}
    local mdl = gp.sgpr{x = X3, y = y3, inducing = Z, noise = 0.02,
                        kernel = gp.kernels.rbf{lengthscale = 0.4, variance = 1.2},
                        bounds = {inducing = {lo, hi}},
                        priors = {inducing = P.normal(centre, sd), mean = P.normal(0, 2)}}
    local bound = dense_sgpr_bound(X3, y3, Z, 0.4, 1.2, 0.02, mdl.mean_value, mdl.jitter)
    local flat_c, flat_s = {}, {}
    for i = 1, 3 do
      for k = 1, 3 do flat_c[#flat_c + 1], flat_s[#flat_s + 1] = centre[i][k], sd[i][k] end
    end
    local lp = normal_logpdf(zflat(), flat_c, flat_s) + normal_logpdf({mdl.mean_value}, 0, 2)
    close(mdl:log_prior(), lp, 1e-13, "priors on Z and the mean")
    close(mdl:log_posterior(), bound + lp, 1e-10, "sgpr log posterior")
    -- the inducing entries of raw_vector (after ℓ, σ², noise and the mean)
    local r, z = mdl:raw_vector(), zflat()
    local flo, fhi = {}, {}
    for i = 1, 3 do
      for k = 1, 3 do flo[#flo + 1], fhi[#fhi + 1] = lo[i][k], hi[i][k] end
    end
    for k = 1, 9 do
      local want
      if flo[k] == -inf and fhi[k] == inf then want = z[k]
      elseif fhi[k] == inf then want = log(z[k] - flo[k])
      elseif flo[k] == -inf then want = log(fhi[k] - z[k])
      else want = logit(z[k], flo[k], fhi[k]) end
      close(r[4 + k], want, 1e-13, "r of Z entry " .. k)
    end
    check_raw_gradient(mdl, "sgpr, Z bounded per entry", 1e-6, 1e-6)
    -- a fit keeps every coordinate of Z inside its bounds (Z ± 0.05 per entry)
    local zlo, zhi = {}, {}
    for i, row in ipairs(Z) do
      zlo[i], zhi[i] = {}, {}
      for k2, v in ipairs(row) do zlo[i][k2], zhi[i][k2] = v - 0.05, v + 0.05 end
    end
    local boxed = gp.sgpr{x = X3, y = y3, inducing = Z, noise = 0.02,
                          kernel = gp.kernels.rbf{lengthscale = 0.4},
                          bounds = {inducing = {zlo, zhi}}, priors = {inducing = P.normal(0.5, 1)}}
    local start = boxed:log_posterior()
    local res = boxed:fit{max_iter = 60}
    assert.is_true(res.log_posterior > start)
    local at_edge = 0
    for i, row in ipairs(boxed:inducing():totable()) do
      for k2, v in ipairs(row) do
        assert.is_true(v >= zlo[i][k2] and v <= zhi[i][k2], "Z entry " .. v)
        if math.min(v - zlo[i][k2], zhi[i][k2] - v) < 1e-4 then at_edge = at_edge + 1 end
      end
    end
    assert.is_true(at_edge >= 1, "no coordinate of Z at its bounds")
  end)

  it("multitask: priors and bounds on task_factor (W) and the task means", function()
    local x, Y = multitask_data()
    local probe = gp.multitask{x = x, y = Y, kernel = gp.kernels.rbf{lengthscale = 0.4}, rank = 1}
    local W0 = {}
    for a, row in ipairs(probe.W:totable()) do W0[a] = row[1] end
    -- per-entry bounds: W0 ± 0.02, hi = ∞ on the third task's entry
    local lo, hi = {}, {}
    for a = 1, 3 do lo[a], hi[a] = {W0[a] - 0.02}, {a == 3 and math.huge or W0[a] + 0.02} end
    local mdl = gp.multitask{x = x, y = Y, kernel = gp.kernels.rbf{lengthscale = 0.4}, rank = 1,
                             bounds = {task_factor = {lo, hi}, mean = {-2, 2}},
                             priors = {task_factor = P.normal(0, 0.5),
                                       mean = P.normal({0, 0.5, 0}, {1, 1, 0.1})}}
    local lp = normal_logpdf(W0, 0, 0.5) + normal_logpdf(mdl.means, {0, 0.5, 0}, {1, 1, 0.1})
    close(mdl:log_prior(), lp, 1e-13, "priors on W and the means")
    close(mdl:log_posterior(), dense_multitask_mll(mdl, 0.4) + lp, 1e-11, "log posterior")
    check_raw_gradient(mdl, "multitask, W and means bounded", 1e-6, 1e-6)
    local start = mdl:log_posterior()
    local res = mdl:fit{max_iter = 60}
    assert.is_true(res.log_posterior > start)
    close(res.log_posterior, mdl:log_posterior(), 1e-9, "fit's log posterior")
    -- W within W0 ± 0.02 (the third only above): the box binds at an edge
    local W, at_edge = mdl.W:totable(), 0
    for a = 1, 3 do
      local w = W[a][1]
      assert.is_true(w >= lo[a][1] and w <= hi[a][1], string.format("W[%d] = %g", a, w))
      if math.min(w - lo[a][1], hi[a][1] - w) < 1e-4 then at_edge = at_edge + 1 end
    end
    assert.is_true(at_edge >= 1, "no entry of W at its bounds")
    for a = 1, 3 do assert.is_true(math.abs(mdl.means[a]) <= 2) end
  end)

  it("bad input: unknown names, positive-only priors, lo ≥ hi, wrong shapes, fixed", function()
    local k = gp.kernels.rbf{lengthscale = 0.4}
    local before = k:fingerprint()
    local function sgpr(spec)
      spec.x, spec.y, spec.inducing, spec.kernel, spec.noise = X3, y3, Z, k, 0.02
      return gp.sgpr(spec)
    end
    local function exact(spec)
      spec.x, spec.y, spec.kernel, spec.noise = X, y, k, 0.02
      return gp.exact(spec)
    end
    fails(function() exact{priors = {inducing = P.normal(0, 1)}} end,
          "unknown hyperparameter 'inducing'")
    fails(function() sgpr{bounds = {task_factor = {0, 1}}} end, "unknown hyperparameter 'task_factor'")
    fails(function() exact{mean = "zero", priors = {mean = P.normal(0, 1)}} end,
          "unknown hyperparameter 'mean'")
    fails(function() exact{priors = {mean = P.gamma(2, 1)}} end,
          "priors.mean: gamma is a density on positive values")
    fails(function() sgpr{priors = {inducing = P.lognormal(0, 1)}} end, "lognormal is a density on positive")
    fails(function() sgpr{priors = {inducing = P.half_cauchy(1)}} end, "real%-valued")
    fails(function() exact{mean_value = 0, bounds = {mean = {2, 1}}} end,
          "bounds.mean: lo = 2 must be below hi = 1")
    fails(function() exact{mean_value = 0, bounds = {mean = {1, 1}}} end, "below hi")
    fails(function() exact{mean_value = 0, bounds = {mean = {math.huge, math.huge}}} end, "below hi")
    fails(function() exact{mean_value = 0, bounds = {mean = {0 / 0, 1}}} end, "NaN")
    fails(function() exact{mean_value = 0, bounds = {mean = {0.5, 1}}} end,
          "mean = 0 is outside its bounds")
    fails(function() exact{bounds = {mean = {0}}} end, "must be {lo, hi}")
    fails(function() exact{bounds = {mean = {-1, 5}}, fixed = {mean = true}} end, "mean is fixed")
    fails(function() sgpr{bounds = {inducing = {0, 1}}, fixed = {inducing = true}} end,
          "inducing is fixed")
    -- shapes: Z is 3×3
    fails(function() sgpr{priors = {inducing = P.normal({{0, 0, 0}, {0, 0, 0}}, 1)}} end,
          "the prior's per%-entry parameters are 2×3, inducing is 3×3")
    fails(function() exact{priors = {mean = P.normal({0, 1}, 1)}} end,
          "per%-entry parameters are 2, mean is a number")
    fails(function() sgpr{bounds = {inducing = {{0, 0, 0}, 1}}} end, "lo is 3 per entry, inducing is 3×3")
    local lo = {{0, 0, 0}, {0, 0, 0}, {0, 2, 0}}
    fails(function() sgpr{bounds = {inducing = {lo, 1}}} end, "bounds.inducing%[8%]: lo = 2 must be below")
    fails(function() sgpr{bounds = {inducing = {0.5, 1}}} end, "inducing%[%d%] = .* is outside its bounds")
    assert.equal(before, k:fingerprint())
    -- a prior on a fixed mean is a constant of the log posterior (not in raw_vector)
    local fixed = exact{mean_value = 0.3, fixed = {mean = true}, priors = {mean = P.normal(0, 1)}}
    close(fixed:log_prior(), normal_logpdf({0.3}, 0, 1), 1e-14, "a fixed mean's prior")
    assert.equal(#fixed:get_vector(), #fixed:raw_vector())
    local _, g = fixed:log_posterior_and_grad()
    assert.equal(#fixed:get_vector(), #g)
  end)
end)
