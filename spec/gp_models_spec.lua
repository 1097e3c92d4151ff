-- lazytensor.gp as users of GPyTorch and scikit-learn expect it: kernels
-- over every input dimension by default, unknown options rejected, per-point
-- (heteroscedastic) noise on every structure, the posterior as an lt.mvn
-- with a lazy covariance, and LOVE variances.
--
-- The references here are plain Lua and independent of gp/kernels.lua: the
-- kernel formulas are written out again (API.md's) over all coordinates, the
-- matrices built by loops and factored by a Cholesky by loops.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local lua_ref = require "support.ref"
local cholesky, chol_solve, close = lua_ref.cholesky, lua_ref.chol_solve, lua_ref.close
local K = gp.kernels

local unpack = table.unpack or unpack -- luacheck: ignore 143 (Lua 5.1's global)

---------------------------------------------------- plain-Lua reference --

-- k(x, y) by API.md's formulas, every coordinate of x and y active.
local function ref_kernel(kind, p, x, y)
  local r2, s2 = 0, 0
  for d = 1, #x do
    local t = x[d] - y[d]
    r2 = r2 + t * t
    s2 = s2 + math.sin(math.pi * math.abs(t) / (p.period or 1)) ^ 2
  end
  local l, v, r = p.lengthscale or 1, p.variance or 1, math.sqrt(r2)
  if kind == "rbf" then return v * math.exp(-r2 / (2 * l * l)) end
  if kind == "matern12" then return v * math.exp(-r / l) end
  if kind == "matern32" then
    local a = math.sqrt(3) * r / l
    return v * (1 + a) * math.exp(-a)
  end
  if kind == "matern52" then
    local a = math.sqrt(5) * r / l
    return v * (1 + a + a * a / 3) * math.exp(-a)
  end
  if kind == "periodic" then return v * math.exp(-2 * s2 / (l * l)) end
  if kind == "rq" then
    local al = p.alpha or 1
    return v * (1 + r2 / (2 * al * l * l)) ^ (-al)
  end
  error("ref_kernel: unknown kind " .. kind)
end

-- A reference kernel: a list of terms, each a list of factors {kind, params};
-- k = Σ_terms Π_factors.
local function ref_value(ref, x, y)
  local total = 0
  for _, term in ipairs(ref) do
    local prod = 1
    for _, f in ipairs(term) do prod = prod * ref_kernel(f[1], f[2], x, y) end
    total = total + prod
  end
  return total
end

local function ref_matrix(ref, A, B)
  local M = {}
  for i = 1, #A do
    M[i] = {}
    for j = 1, #B do M[i][j] = ref_value(ref, A[i], B[j]) end
  end
  return M
end

-- Ky = K + diag(noise) (noise a number or a Lua array), its Cholesky factor,
-- α = Ky⁻¹(y − m) and the MLL.
local function ref_fit(ref, P, y, noise, mean)
  local n = #P
  local Ky = ref_matrix(ref, P, P)
  for i = 1, n do Ky[i][i] = Ky[i][i] + (type(noise) == "table" and noise[i] or noise) end
  local L = cholesky(Ky)
  local r = {}
  for i = 1, n do r[i] = y[i] - mean end
  local alpha = chol_solve(L, r)
  local q, logdet = 0, 0
  for i = 1, n do
    q = q + r[i] * alpha[i]
    logdet = logdet + 2 * math.log(L[i][i])
  end
  return {L = L, alpha = alpha, mll = -0.5 * (q + logdet + n * math.log(2 * math.pi))}
end

-- Posterior mean and covariance of f at S by loops.
local function ref_posterior(ref, P, S, fit, mean)
  local Ksx = ref_matrix(ref, S, P)
  local Kss = ref_matrix(ref, S, S)
  local mu, V = {}, {} -- V[i] = Ky⁻¹ k(x, s_i)
  for i = 1, #S do
    local m = mean
    for j = 1, #P do m = m + Ksx[i][j] * fit.alpha[j] end
    mu[i] = m
    V[i] = chol_solve(fit.L, Ksx[i])
  end
  local C = {}
  for i = 1, #S do
    C[i] = {}
    for j = 1, #S do
      local s = Kss[i][j]
      for k = 1, #P do s = s - Ksx[i][k] * V[j][k] end
      C[i][j] = s
    end
  end
  return mu, C
end

local targets = lua_ref.sine_targets
local function scattered(...) return (lua_ref.scattered(...)) end -- the points alone

-- Heteroscedastic noise variances between lo and hi.
local function noise_levels(n, lo, hi)
  local v = {}
  for i = 1, n do v[i] = lo + (hi - lo) * (0.5 + 0.5 * math.sin(1.7 * i)) end
  return v
end

local function expect_error(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err))
end

------------------------------------------------------ dims: all by default --

describe("gp kernels use every input dimension by default", function()
  local P = scattered(60, 2, 5, 3)
  local y = targets(P)
  local cases = {
    {"rbf", K.rbf{lengthscale = 0.8, variance = 1.3}, {{{"rbf", {lengthscale = 0.8, variance = 1.3}}}}},
    {"matern52", K.matern52{lengthscale = 0.7}, {{{"matern52", {lengthscale = 0.7}}}}},
    {"periodic", K.periodic{lengthscale = 1.1, period = 2.3},
     {{{"periodic", {lengthscale = 1.1, period = 2.3}}}}},
    {"rq (dense path)", K.rq{lengthscale = 0.9, alpha = 1.5},
     {{{"rq", {lengthscale = 0.9, alpha = 1.5}}}}},
    {"a product (dense path)", K.rbf{lengthscale = 1.2} * K.matern32{lengthscale = 2},
     {{{"rbf", {lengthscale = 1.2}}, {"matern32", {lengthscale = 2}}}}},
  }
  for _, case in ipairs(cases) do
    local name, kernel, ref = case[1], case[2], case[3]
    it(name .. ": the MLL on 2-d inputs is the all-dimension one (dense, to 1e-9)", function()
      local model = gp.exact{x = P, y = y, kernel = kernel, noise = 0.05, mean_value = 0.1}
      local want = ref_fit(ref, P, y, 0.05, 0.1).mll
      close(model:mll(), want, 1e-9, name .. " mll")
      -- what the old default (dims = {1}) computed is far from it
      local first = {}
      for i, p in ipairs(P) do first[i] = {p[1]} end
      assert.is_true(math.abs(ref_fit(ref, first, y, 0.05, 0.1).mll - want) > 1)
    end)
  end

  it("on a grid too (Kronecker), and explicit dims still select", function()
    local x, yy = {}, {}
    for i = 1, 6 do
      for j = 1, 5 do
        x[#x + 1] = {0.4 * i, 0.3 * j}
        yy[#yy + 1] = math.sin(i) * math.cos(j)
      end
    end
    local model = gp.exact{x = x, y = yy, kernel = K.rbf{lengthscale = 0.6}, noise = 0.02,
                           mean_value = 0}
    assert.matches("^kron:", model:explain())
    close(model:mll(), ref_fit({{{"rbf", {lengthscale = 0.6}}}}, x, yy, 0.02, 0).mll, 1e-9)
    local second = {}
    for i, p in ipairs(x) do second[i] = {p[2]} end
    local sel = gp.exact{x = x, y = yy, kernel = K.rbf{lengthscale = 0.6, dims = {2}},
                         noise = 0.02, mean_value = 0}
    close(sel:mll(), ref_fit({{{"rbf", {lengthscale = 0.6}}}}, second, yy, 0.02, 0).mll, 1e-9)
  end)

  it("rejects dims beyond the inputs and malformed dims", function()
    expect_error("lazytensor: gp: the kernel reads input dimension 3 but x has 2 dimensions",
                 gp.exact, {x = P, y = y, kernel = K.rbf{dims = {1, 3}}})
    expect_error("lazytensor: gp: rbf dims repeats dimension 1", K.rbf, {dims = {1, 1}})
    expect_error("lazytensor: gp: matern32 dims%[2%] must be a positive integer",
                 K.matern32, {dims = {1, 1.5}})
    expect_error("lazytensor: gp: rbf dims must be a non%-empty list", K.rbf, {dims = {}})
  end)
end)

describe("gp rq kernel at large alpha", function()
  it("tends to the rbf kernel instead of rounding (1 + q)^(−α) to garbage", function()
    local x = {}
    for i = 1, 40 do x[i] = {0.25 * i} end
    local y = targets(x)
    local rbf = gp.exact{x = x, y = y, kernel = K.rbf{lengthscale = 0.9, variance = 0.5},
                         noise = 0.03}
    for _, alpha in ipairs{1e8, 1e16, 1e20} do
      local rq = gp.exact{x = x, y = y, kernel = K.rq{lengthscale = 0.9, variance = 0.5,
                                                      alpha = alpha}, noise = 0.03}
      close(rq:mll(), rbf:mll(), alpha > 1e9 and 1e-12 or 1e-7, "rq mll at alpha " .. alpha)
      local _, g = rq:mll_and_grad()
      assert.is_true(math.abs(g[2]) < 1e-6, "d mll / d log alpha " .. g[2])
    end
  end)
end)

------------------------------------------------------------ unknown keys --

describe("gp rejects unknown keys", function()
  local x, y = {0.1, 0.5, 0.9, 1.3}, {1, 2, 1.5, 0.7}
  it("in gp.exact{...} and its fixed table", function()
    expect_error("^lazytensor: gp: exact: unknown key 'nosie' %(expected one of .*noise",
                 gp.exact, {x = x, y = y, kernel = K.rbf{}, nosie = 0.1})
    expect_error("^lazytensor: gp: exact fixed: unknown key 'noize'",
                 gp.exact, {x = x, y = y, kernel = K.rbf{}, fixed = {noize = true}})
  end)

  it("in kernel constructors", function()
    expect_error("^lazytensor: gp: rbf: unknown key 'lenghtscale' %(expected one of dims, "
                 .. "fixed, lengthscale, variance%)", K.rbf, {lenghtscale = 2})
    expect_error("^lazytensor: gp: matern52: unknown key 'period'", K.matern52, {period = 1})
    expect_error("^lazytensor: gp: periodic has no hyperparameter 'alpha'",
                 K.periodic, {fixed = {alpha = true}})
  end)

  it("in fit, predict and posterior options", function()
    local model = gp.exact{x = x, y = y, kernel = K.rbf{}}
    expect_error("^lazytensor: gp: fit: unknown key 'maxiter'", model.fit, model, {maxiter = 3})
    expect_error("^lazytensor: gp: predict: unknown key 'lov'", model.predict, model, {0.2},
                 {lov = true})
    expect_error("^lazytensor: gp: posterior: unknown key 'exact'", model.posterior, model,
                 {0.2}, {exact = true})
    -- the model is unchanged and usable
    assert.is_number(model:mll())
  end)
end)

--------------------------------------------------------- per-point noise --

-- Each structure with per-point noise: its name (the start of explain()),
-- inputs, targets, the gp kernel and its reference.
local function noise_cases()
  local cases = {}
  local x1 = {}
  for i = 1, 40 do x1[i] = {0.15 * i} end
  cases[#cases + 1] = {"toeplitz", x1, K.rbf{lengthscale = 0.7} + K.matern32{lengthscale = 1.5,
                                                                           variance = 0.4},
                       {{{"rbf", {lengthscale = 0.7}}},
                        {{"matern32", {lengthscale = 1.5, variance = 0.4}}}}}
  local grid = {}
  for i = 1, 6 do
    for j = 1, 5 do grid[#grid + 1] = {0.5 * i, 0.4 * j} end
  end
  cases[#cases + 1] = {"kron:", grid, K.rbf{lengthscale = 0.8, variance = 1.5},
                       {{{"rbf", {lengthscale = 0.8, variance = 1.5}}}}}
  cases[#cases + 1] = {"kron_masked", {unpack(grid, 3)}, K.rbf{lengthscale = 0.8},
                       {{{"rbf", {lengthscale = 0.8}}}}}
  local P = scattered(60, 2, 11, 3)
  cases[#cases + 1] = {"kernel", P, K.matern52{lengthscale = 0.9} + K.rbf{lengthscale = 2,
                                                                         variance = 0.5},
                       {{{"matern52", {lengthscale = 0.9}}},
                        {{"rbf", {lengthscale = 2, variance = 0.5}}}}}
  -- a product: lt.kernel operators under a lazy Hadamard product, and (forced)
  -- the dense matrices
  for _, name in ipairs{"kernel", "dense"} do
    cases[#cases + 1] = {name, P, K.rbf{lengthscale = 1.1} * K.periodic{lengthscale = 1,
                                                                        period = 2.5},
                         {{{"rbf", {lengthscale = 1.1}}, {"periodic", {lengthscale = 1,
                                                                      period = 2.5}}}}}
  end
  return cases
end

describe("gp per-point noise", function()
  for _, case in ipairs(noise_cases()) do
    local name, P, kernel, ref = case[1], case[2], case[3], case[4]
    it(name .. ": MLL against dense to 1e-9, gradient against central differences", function()
      local y = targets(P)
      local noise = noise_levels(#P, 0.01, 0.2)
      local model = gp.exact{x = P, y = y, kernel = kernel, noise = lt.tensor(noise),
                             mean_value = 0.3, structure = name == "dense" and "dense" or nil}
      assert.is_true(model:per_point_noise())
      local e = model:explain()
      assert.equal(1, e:find(name, 1, true), e)
      assert.matches("per-point noise: Ky = K + diag(σ²ᵢ)", e, 1, true)
      close(model:mll(), ref_fit(ref, P, y, noise, 0.3).mll, 1e-9, name .. " mll")
      local value, grad = model:mll_and_grad()
      close(value, ref_fit(ref, P, y, noise, 0.3).mll, 1e-9, name .. " mll_and_grad")
      -- per-point noise is fixed: the parameters are the kernel's and the mean
      assert.equal(kernel:count() + 1, #grad)
      lua_ref.check_model_gradient(model, grad, name)
    end)
  end

  it("Ky's type says why: K + σ²I keeps Toeplitz and Kronecker structure, K + diag does not",
     function()
    local cases = noise_cases()
    local expect = {toeplitz = {"toeplitz", "sum"}, ["kron:"] = {"kron_plus_identity", "sum"}}
    for _, case in ipairs(cases) do
      local want = expect[case[1]]
      if want then
        local cov = gp.structure.build(case[3], case[2])
        assert.equal(want[1], lt.type(cov.K:add_diag(0.1)))
        assert.equal(want[2], lt.type(cov.K:add_diag(lt.tensor(noise_levels(#case[2], 0.1, 1)))))
        local scalar = gp.exact{x = case[2], y = targets(case[2]), kernel = case[3], noise = 0.1}
        assert.matches("noise σ²: Ky = K + σ²I", scalar:explain(), 1, true)
      end
    end
  end)

  it("the iterative path (CG, SLQ, control variate with a diagonal) agrees with the exact one",
     function()
    local P = scattered(300, 2, 3, 4)
    local y = targets(P)
    local model = gp.exact{x = P, y = y, kernel = K.rbf{lengthscale = 0.6} + K.matern32{},
                           noise = lt.tensor(noise_levels(300, 0.02, 0.3))}
    lt.manual_seed(4)
    local exact_v, exact_g = model:mll_and_grad()
    local logdet = model:covariance().K:add_diag(model.noise):logdet()
    local v, g = lt.with_settings({max_cholesky_size = 100, num_trace_samples = 30,
                                   cg_tolerance = 1e-9},
                                  function() return model:mll_and_grad() end)
    -- the MLL's error is half SLQ's log-determinant error: with 30 probes
    -- within 2% of |log det Ky| (−398 here) over seeds
    close(v, exact_v, 0, "iterative mll", 0.5 * 0.02 * math.abs(logdet))
    for p = 1, #g do close(g[p], exact_g[p], 0.1, "stochastic gradient " .. p, 0.5) end
  end)

  it("rejects a wrong length, non-positive values and fixed.noise = false", function()
    local x, y = {0.1, 0.5, 0.9}, {1, 2, 1.5}
    expect_error("lazytensor: gp: noise %(a number, or one variance per point%) must be a "
                 .. "vector of 3 values", gp.exact, {x = x, y = y, kernel = K.rbf{}, noise = {1, 2}})
    expect_error("lazytensor: gp: per%-point noise must be positive and finite",
                 gp.exact, {x = x, y = y, kernel = K.rbf{}, noise = {0.1, 0, 0.2}})
    expect_error("lazytensor: gp: per%-point noise must be positive and finite",
                 gp.exact, {x = x, y = y, kernel = K.rbf{}, noise = {0.1, 0 / 0, 0.2}})
    expect_error("lazytensor: gp: per%-point noise is fixed",
                 gp.exact, {x = x, y = y, kernel = K.rbf{}, noise = {0.1, 0.1, 0.2},
                            fixed = {noise = false}})
    expect_error("lazytensor: gp: noise must be a positive number",
                 gp.exact, {x = x, y = y, kernel = K.rbf{}, noise = -1})
  end)

  it("keeps a copy: changing the caller's tensor afterwards changes nothing", function()
    local x, y = {0.1, 0.5, 0.9}, {1, 2, 1.5}
    local noise = lt.tensor{0.1, 0.2, 0.3}
    local model = gp.exact{x = x, y = y, kernel = K.rbf{}, noise = noise}
    local before = model:mll()
    noise:fill(5)
    assert.equal(before, model:mll())
  end)
end)

--------------------------------------------------------------- posterior --

describe("gp posterior", function()
  -- Structure name, training inputs, test inputs, kernel and reference,
  -- noise (scalar or per point).
  local function cases()
    local out = {}
    local x1, s1, s1b = {}, {}, {}
    for i = 1, 30 do x1[i] = {0.2 * i} end
    for i = 1, 12 do s1[i] = {0.2 * (i + 25)} end -- continues the grid: Toeplitz blocks
    for i = 1, 9 do s1b[i] = {0.37 * i + 0.05} end -- off the grid: dense blocks
    local kr = {{{"rbf", {lengthscale = 0.9, variance = 1.2}}}}
    out[#out + 1] = {"toeplitz (test points on the grid)", x1, s1,
                     K.rbf{lengthscale = 0.9, variance = 1.2}, kr, 0.03}
    out[#out + 1] = {"toeplitz (test points off it)", x1, s1b,
                     K.rbf{lengthscale = 0.9, variance = 1.2}, kr, 0.03}
    out[#out + 1] = {"toeplitz, per-point noise", x1, s1,
                     K.rbf{lengthscale = 0.9, variance = 1.2}, kr, noise_levels(30, 0.01, 0.1)}
    local grid, sgrid = {}, {}
    for i = 1, 5 do
      for j = 1, 4 do grid[#grid + 1] = {0.5 * i, 0.4 * j} end
    end
    for i = 2, 5, 3 do
      for j = 1, 4 do sgrid[#sgrid + 1] = {0.5 * i, 0.4 * j} end
    end
    out[#out + 1] = {"kron", grid, sgrid, K.rbf{lengthscale = 0.7},
                     {{{"rbf", {lengthscale = 0.7}}}}, 0.05}
    local P = scattered(70, 2, 9, 3)
    local S = scattered(15, 2, 21, 3)
    out[#out + 1] = {"kernel", P, S, K.matern52{lengthscale = 0.8} + K.rbf{lengthscale = 2},
                     {{{"matern52", {lengthscale = 0.8}}}, {{"rbf", {lengthscale = 2}}}}, 0.02}
    out[#out + 1] = {"kernel, per-point noise", P, S, K.matern32{lengthscale = 0.8},
                     {{{"matern32", {lengthscale = 0.8}}}}, noise_levels(70, 0.005, 0.3)}
    out[#out + 1] = {"dense", P, S, K.rq{lengthscale = 0.8, alpha = 2},
                     {{{"rq", {lengthscale = 0.8, alpha = 2}}}}, 0.02}
    return out
  end

  for _, case in ipairs(cases()) do
    local name, P, S, kernel, ref, noise = unpack(case)
    it(name .. ": mean and covariance against dense to 1e-8", function()
      local y = targets(P)
      local model = gp.exact{x = P, y = y, kernel = kernel, mean_value = -0.2,
                             noise = type(noise) == "table" and lt.tensor(noise) or noise}
      local post = model:posterior(S)
      local mu, C = ref_posterior(ref, P, S, ref_fit(ref, P, y, noise, -0.2), -0.2)
      local cov = post:covariance()
      assert.is_true(lt.is_lazy(cov))
      assert.is_true(cov:is_psd())
      local Cd, m = cov:dense(), post:mean()
      for i = 1, #S do
        close(m[i], mu[i], 1e-8, "mean " .. i, 1e-10)
        for j = 1, #S do close(Cd:get(i, j), C[i][j], 1e-8, "cov " .. i .. "," .. j, 1e-10) end
      end
      local var, sd = post:variance(), post:stddev()
      local lo, hi = post:confidence_region()
      local pm, pv = model:predict(S)
      for i = 1, #S do
        close(var[i], C[i][i], 1e-8, "variance " .. i, 1e-10)
        close(pv[i], C[i][i], 1e-8, "predict variance " .. i, 1e-10)
        close(pm[i], mu[i], 1e-8, "predict mean " .. i, 1e-10)
        close(sd[i], math.sqrt(math.max(C[i][i], 0)), 1e-8, "stddev " .. i, 1e-9)
        close(lo[i], mu[i] - 2 * sd[i], 1e-12, "lo " .. i, 1e-12)
        close(hi[i], mu[i] + 2 * sd[i], 1e-12, "hi " .. i, 1e-12)
      end
    end)
  end

  it("Toeplitz: test points on the grid use the grid positions K uses (rounded inputs)",
     function()
    -- monthly inputs rounded to 4 decimals, as in co2.csv: within SPACING_TOL
    -- of a regular grid, which K uses. At the training inputs the posterior
    -- variance is σ² − σ⁴[Ky⁻¹]ᵢᵢ, which needs nothing but Ky.
    local n, x, grid = 150, {}, {}
    for i = 1, n do x[i] = math.floor((1959 + (i - 1) / 12) * 1e4 + 0.5) / 1e4 end
    local h = (x[n] - x[1]) / (n - 1)
    for i = 1, n do grid[i] = {x[1] + (i - 1) * h} end
    local kernel = K.rbf{lengthscale = 40, variance = 1000} + K.rbf{lengthscale = 0.14,
                                                                    variance = 0.04}
    local ref = {{{"rbf", {lengthscale = 40, variance = 1000}}},
                 {{"rbf", {lengthscale = 0.14, variance = 0.04}}}}
    local noise = 0.03
    local model = gp.exact{x = x, y = targets(grid), kernel = kernel, noise = noise}
    assert.matches("^toeplitz", model:explain())
    local fit = ref_fit(ref, grid, targets(grid), noise, 0)
    local _, var = model:predict(x)
    local post = model:posterior(x):variance()
    for i = 1, n, 7 do
      local e = {}
      for j = 1, n do e[j] = i == j and 1 or 0 end
      local want = noise - noise * noise * chol_solve(fit.L, e)[i]
      close(var[i], want, 1e-6, "predict variance " .. i)
      close(post[i], want, 1e-6, "posterior variance " .. i)
    end
  end)

  it("keeps the kernel structure's covariance lazy (no n*×n* matrix)", function()
    local P = scattered(80, 2, 9, 3)
    local model = gp.exact{x = P, y = targets(P), kernel = K.rbf{}, noise = 0.1}
    local post = model:posterior(scattered(500, 2, 4, 3))
    local cov = post:covariance()
    assert.equal("sum", lt.type(cov))
    local before = lt.memory()
    local v = post:variance()
    assert.equal(500, v:size(1))
    assert.is_true(lt.memory() - before < 500 * 500 * 8 / 4)
  end)

  it("on the iterative path (CG solves) agrees with the exact posterior", function()
    local P = scattered(120, 2, 13, 3)
    local S = scattered(10, 2, 17, 3)
    local model = gp.exact{x = P, y = targets(P), kernel = K.rbf{lengthscale = 0.7}, noise = 0.05}
    local exact = model:posterior(S):covariance():dense()
    local iter = lt.with_settings({max_cholesky_size = 50, cg_tolerance = 1e-12}, function()
      return model:posterior(S):covariance():dense()
    end)
    assert.is_true((exact - iter):abs():max() < 1e-8)
  end)

  it("rsample draws with the posterior covariance: exact root, and Lanczos when large", function()
    local P = scattered(60, 2, 9, 3)
    local model = gp.exact{x = P, y = targets(P), kernel = K.rbf{lengthscale = 0.8}, noise = 0.05}
    local S = scattered(6, 2, 31, 3)
    local post = model:posterior(S)
    local R, info = post:root()
    assert.is_true(info.converged)
    local Cd = post:covariance():dense()
    assert.is_true((R:dense() * R:dense():t() - Cd):abs():max() < 1e-10)
    lt.manual_seed(8)
    local n = 20000
    local draws = post:rsample(n)
    assert.same({n, 6}, draws:shape())
    local centred = draws - lt.ones(n, 1) * post:mean():reshape(1, 6)
    local emp = centred:t() * centred / n
    local scale = Cd:diagonal():max()
    -- standard error of a sample covariance entry: about scale·√(2/n) ≈ 0.01·scale
    assert.is_true((emp - Cd):abs():max() < 0.05 * scale)

    -- many test points above max_cholesky_size: a Lanczos root, converged
    local big = scattered(150, 2, 41, 3)
    lt.with_settings({max_cholesky_size = 100}, function()
      local p = model:posterior(big)
      local Rb, ib = p:root()
      assert.equal("lanczos", ib.method)
      assert.is_true(ib.converged)
      local Bd = p:covariance():dense()
      assert.is_true((Rb * Rb:t() - Bd):abs():max() < 1e-6 * Bd:diagonal():max())
      assert.same({2, 150}, p:rsample(2):shape())
    end)
  end)

  it("rsample refuses a Lanczos root that has not converged", function()
    local P = scattered(60, 2, 9, 3)
    local model = gp.exact{x = P, y = targets(P), kernel = K.rbf{lengthscale = 0.3}, noise = 0.05}
    lt.with_settings({max_cholesky_size = 50, max_root_decomposition_size = 3}, function()
      local p = model:posterior(scattered(120, 2, 43, 6))
      local ok, err = pcall(p.rsample, p, 1)
      assert.is_false(ok)
      assert.matches("lazytensor: mvn:rsample: the covariance's lanczos root did not converge "
                     .. "%(rank 3", err)
    end)
  end)
end)

--------------------------------------------------------------------- LOVE --

describe("gp LOVE predictive variances", function()
  local function exact_and_love(model, S)
    local _, exact = model:predict(S)
    local mean, love, info = model:predict(S, {love = true})
    return exact, love, info, mean
  end

  it("match the exact variances on a 2-d model, and say when they do not", function()
    lt.manual_seed(6) -- (Lanczos starts from a random vector)
    local P = scattered(300, 2, 9, 4)
    local S = scattered(200, 2, 33, 4)
    local function model(lengthscale)
      return gp.exact{x = P, y = targets(P), kernel = K.rbf{lengthscale = lengthscale},
                      noise = 0.05}
    end
    -- lengthscale 1.5 on [0, 4]²: K has few eigenvalues above σ², Ky's
    -- spectrum is a handful over a cluster at σ², and Lanczos is invariant
    -- long before 100 steps.
    local exact, love, info = exact_and_love(model(1.5), S)
    assert.equal("lanczos", info.method)
    assert.is_true(info.converged)
    assert.is_true((love - exact):abs():max() < 1e-10)
    -- lengthscale 0.7: Lanczos's residual is about 5e-6, above cg_tolerance,
    -- yet the variances are within 1e-4 (relative): the check at training
    -- inputs says so; and they are never too small (the Lanczos
    -- approximation of Ky⁻¹ is a Galerkin one, from below).
    exact, love, info = exact_and_love(model(0.7), S)
    assert.is_true(info.converged)
    assert.is_true(info.variance_error < 1e-4)
    assert.is_true((love - exact):abs():cdiv(exact):max() < 1e-4)
    assert.is_true((love - exact):min() > -1e-12)
    lt.with_settings({max_root_decomposition_size = 10}, function()
      local e, l, i = exact_and_love(model(0.7), S)
      assert.is_false(i.converged)
      assert.equal(10, i.iterations)
      assert.is_true((l - e):min() > -1e-12)
      assert.is_true((l - e):max() > 1e-4)
    end)
  end)

  it("on the iterative path: LOVE's check solves for α in the same block solve, the "
     .. "same means as without LOVE and as the Cholesky path", function()
    lt.manual_seed(8)
    local P = scattered(300, 2, 9, 4)
    local S = scattered(50, 2, 33, 4)
    local function model()
      return gp.exact{x = P, y = targets(P), kernel = K.rbf{lengthscale = 1.2}, noise = 0.05}
    end
    local exact_mean, exact_var = model():predict(S) -- Cholesky: n ≤ max_cholesky_size
    lt.with_settings({max_cholesky_size = 100, cg_tolerance = 1e-10}, function()
      local m = model()
      local love_mean, love_var, info = m:predict(S, {love = true}) -- α from the check's solve
      local plain_mean = model():predict(S, {variance = false}) -- α from a solve of its own
      assert.is_true(info.converged)
      assert.is_true((love_mean - plain_mean):abs():max() < 1e-8)
      assert.is_true((love_mean - exact_mean):abs():max() < 1e-8)
      assert.is_true((love_var - exact_var):abs():cdiv(exact_var):max() < 1e-3)
      -- α is kept: a second prediction gives the same means exactly
      local again = m:predict(S, {love = true})
      assert.is_true((again - love_mean):abs():max() == 0)
    end)
  end)

  it("are checked against exact variances, not trusted to Lanczos's residual (co2)", function()
    local data = require "lazytensor.data"
    local cols = data.read_csv("examples/data/co2.csv")
    -- the fitted hyperparameters of examples/co2.lua (mean fixed)
    local kernel = K.rbf{lengthscale = 41.77, variance = 1187}
      + K.rbf{lengthscale = 180.5, variance = 10.66}
        * K.periodic{lengthscale = 1.436, period = 1, fixed = {period = true, variance = true}}
      + K.rq{lengthscale = 0.957, alpha = 17.64, variance = 0.199}
      + K.rbf{lengthscale = 0.1376, variance = 0.0389}
    local model = gp.exact{x = cols.time, y = cols.ppm, kernel = kernel, noise = 0.0336}
    local _, exact = model:predict(cols.time)
    lt.manual_seed(5)
    -- rank 100: the variances are off; root_inv's residual (measured on
    -- random vectors since issue 19, no longer Lanczos's last coupling,
    -- 8e-8 here) says the root is too
    local _, love, info = model:predict(cols.time, {love = true})
    local true_error = (love - exact):abs():cdiv(exact):max()
    assert.is_true(info.residual > 1e-2)
    assert.is_true(true_error > 0.5)
    assert.is_false(info.converged)
    assert.is_true(info.variance_error > 0.3 * true_error and info.variance_error <= true_error)
    -- rank 400: right, and said so
    lt.with_settings({max_root_decomposition_size = 400}, function()
      _, love, info = model:predict(cols.time, {love = true})
      assert.is_true(info.converged)
      assert.equal(400, info.rank)
      assert.is_true((love - exact):abs():cdiv(exact):max() < 1e-3)
    end)
  end)

  it("match on a Toeplitz model with per-point noise within the stated error", function()
    lt.manual_seed(7)
    local x = {}
    for i = 1, 400 do x[i] = {0.05 * i} end
    local noise = noise_levels(400, 0.01, 0.05)
    local model = gp.exact{x = x, y = targets(x), kernel = K.matern52{lengthscale = 1.5},
                           noise = lt.tensor(noise)}
    local S = {}
    for i = 1, 100 do S[i] = 0.21 * i - 0.5 end
    local exact, love, info = exact_and_love(model, S)
    local rel = (love - exact):abs():cdiv(exact):max()
    -- whitened by the noise, Ky's spectrum clusters at 1 again: at rank 100
    -- the relative error is 3e-4 (0.33 without the whitening)
    assert.is_true(info.converged)
    assert.is_true(rel < 1e-3, "LOVE relative variance error " .. rel)
    assert.is_true((love - exact):min() > -1e-12)
  end)

  it("caches the root and recomputes it when the hyperparameters or noise change", function()
    local P = scattered(100, 2, 9, 3)
    local model = gp.exact{x = P, y = targets(P), kernel = K.rbf{lengthscale = 0.7}, noise = 0.05}
    local R1 = model:love_root()
    assert.is_true(rawequal(R1, model:love_root()))
    local S = scattered(5, 2, 3, 3)
    local _, before = model:predict(S, {love = true})
    -- a hyperparameter set behind the model's back (not through set_vector)
    model.kernel:set_log_params({math.log(0.3), 0})
    local R2 = model:love_root()
    assert.is_false(rawequal(R1, R2))
    local _, exact = model:predict(S)
    local _, after = model:predict(S, {love = true})
    assert.is_true((after - exact):abs():max() < 1e-8)
    assert.is_true((after - before):abs():max() > 1e-3)
    model.noise = 0.2
    assert.is_false(rawequal(R2, model:love_root()))
    -- and the mean cache too: predict follows the new noise
    local fresh = gp.exact{x = P, y = targets(P), kernel = K.rbf{lengthscale = 0.3}, noise = 0.2}
    assert.is_true((model:predict(S) - fresh:predict(S)):abs():max() < 1e-12)
  end)

  it("gives a low-rank posterior covariance with opts.love", function()
    local P = scattered(100, 2, 9, 3)
    local model = gp.exact{x = P, y = targets(P), kernel = K.rbf{lengthscale = 0.7}, noise = 0.05}
    local S = scattered(30, 2, 5, 3)
    local exact = model:posterior(S):covariance():dense()
    local love = model:posterior(S, {love = true}):covariance():dense()
    assert.is_true((exact - love):abs():max() < 1e-8)
  end)
end)
