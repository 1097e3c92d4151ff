-- lazytensor.bo's core: acquisitions against closed forms computed in plain
-- Lua from a dense plain-Lua posterior, LogEI in the far tail against an
-- asymptotic series, gradients against central differences, qEI against EI,
-- bo.optimize against known maximisers and a dense grid, Thompson draws,
-- the bounded L-BFGS, and the bad inputs.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local bo = require "lazytensor.bo"
local optim_bounded = require "lazytensor.optim_bounded"
local ref = require "support.ref"

----------------------------------------------------------- plain Lua --

local SQRT2, SQRT_PI = math.sqrt(2), math.sqrt(math.pi)

-- erfc(x), x >= 0: the power series of erf below 2.5, Lentz's continued
-- fraction erfc(x) = e^(−x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))) above.
local function erfc_pos(x)
  if x < 2.5 then
    local sum, term, n = x, x, 0
    repeat
      n = n + 1
      term = -term * x * x / n
      sum = sum + term / (2 * n + 1)
    until math.abs(term / (2 * n + 1)) <= 1e-17 * math.abs(sum)
    return 1 - 2 / SQRT_PI * sum
  end
  local tiny = 1e-300
  local f, C, D = x, x, 0
  for k = 1, 500 do
    local a = k / 2
    D = x + a * D
    if D == 0 then D = tiny end
    C = x + a / C
    if C == 0 then C = tiny end
    D = 1 / D
    local delta = C * D
    f = f * delta
    if math.abs(delta - 1) < 1e-16 then break end
  end
  return math.exp(-x * x) / SQRT_PI / f
end

local function Phi(z)
  if z < 0 then return 0.5 * erfc_pos(-z / SQRT2) end
  return 1 - 0.5 * erfc_pos(z / SQRT2)
end

local function phi(z) return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) end

-- log h(u), h(u) = φ(u) + u·Φ(u): directly above −15 (cancellation at most
-- 225-fold there), the asymptotic series of h(u)/φ(u) = 1/t² − 3/t⁴ + ...
-- (t = −u, 40 terms: far more than converge at t >= 15) below.
local function log_h_reference(u)
  if u >= -15 then return math.log(phi(u) + u * Phi(u)) end
  local t2 = u * u
  local sum, term = 0, 1 / t2
  for k = 0, 39 do
    if k > 0 then term = -term * (2 * k + 1) / t2 end
    sum = sum + term
  end
  return -0.5 * t2 - 0.5 * math.log(2 * math.pi) + math.log(sum)
end

-- The dense posterior of a zero-mean GP with an rbf kernel (variance v,
-- lengthscale l) and noise s2 at points xs: means and variances, by a
-- plain-Lua Cholesky.
local function rbf(a, b, l, v)
  local r2 = 0
  for j = 1, #a do r2 = r2 + (a[j] - b[j]) ^ 2 end
  return v * math.exp(-r2 / (2 * l * l))
end

local function dense_posterior(X, y, l, v, s2, xs)
  local n = #X
  local K = {}
  for i = 1, n do
    K[i] = {}
    for j = 1, n do K[i][j] = rbf(X[i], X[j], l, v) + (i == j and s2 or 0) end
  end
  local L = ref.cholesky(K)
  local w = ref.lower_solve(L, y)
  local means, vars = {}, {}
  for i, p in ipairs(xs) do
    local k = {}
    for j = 1, n do k[j] = rbf(p, X[j], l, v) end
    local a = ref.lower_solve(L, k)
    local m, e = 0, 0
    for j = 1, n do
      m = m + a[j] * w[j]
      e = e + a[j] * a[j]
    end
    means[i], vars[i] = m, rbf(p, p, l, v) - e
  end
  return means, vars
end

local function close(a, b, tol)
  return math.abs(a - b) <= tol * math.max(1, math.abs(b))
end

local function values_of(t)
  local v = t:totable()
  return type(v) == "table" and v or {v}
end

-- f raises an error containing pattern (plain text).
local function fails(pattern, f)
  local ok, err = pcall(f)
  assert.is_false(ok)
  assert.is_truthy(tostring(err):find(pattern, 1, true),
                   "expected '" .. pattern .. "', got: " .. tostring(err))
end

------------------------------------------------------------ fixtures --

local X2 = {{0.1, 0.2}, {0.8, 0.3}, {0.4, 0.9}, {0.55, 0.5}, {0.2, 0.7}, {0.95, 0.85}}
local Y2 = {0.3, -0.4, 0.8, -0.9, 0.1, 0.5}
local L2, V2, S2 = 0.35, 1.3, 1e-3

local function model2(structure)
  return gp.exact{x = X2, y = Y2, kernel = gp.kernels.rbf{lengthscale = L2, variance = V2},
                  noise = S2, mean = "zero", structure = structure}
end

local CANDIDATES = {{0.3, 0.4}, {0.7, 0.6}, {0.05, 0.95}, {0.55, 0.52}, {0.99, 0.01}}

-- A 1-d model on irregular points (the kernel structure).
local X1 = {0.04, 0.19, 0.33, 0.52, 0.61, 0.78, 0.93}
local function f1(x) return math.sin(6 * x) + 0.5 * x end
local function model1()
  local y = {}
  for i, x in ipairs(X1) do y[i] = f1(x) end
  return gp.exact{x = X1, y = y, kernel = gp.kernels.rbf{lengthscale = 0.15, variance = 1},
                  noise = 1e-4, fixed = {noise = true}, mean = "zero"}, y
end

local function min_of(t)
  local m = math.huge
  for _, v in ipairs(t) do m = math.min(m, v) end
  return m
end

describe("bo: the module", function()
  it("loads the loop, the designs and the problems on first use", function()
    assert.are.equal("function", type(bo.minimize))
    assert.are.same({4, 3}, bo.sobol(4, 3):shape())
    assert.are.same({5, 2}, bo.latin_hypercube(5, 2):shape())
    assert.are.equal(require("lazytensor.bo.problems"), bo.problems)
    assert.are.equal(require("lazytensor.bo.problems").branin, bo.problem("branin"))
  end)
end)

------------------------------------------------------- the posterior --

describe("bo: the posterior follows the candidates", function()
  it("posterior(X) has a gradient with respect to X (kernel, kron_masked, custom, dense, "
     .. "sgpr, variational)", function()
    local custom = gp.kernels.custom{params = {l = 0.4}, k = function(x1, x2, p)
      return lt.kernel(x1, x2, {kind = "matern32", lengthscale = p.l})
    end}
    local models = {
      model2("kernel"), model2(), -- auto: scattered 2-d points give kron_masked
      gp.exact{x = X2, y = Y2, kernel = custom, noise = 0.01},
      model2("dense"),
      gp.sgpr{x = X2, y = Y2, kernel = gp.kernels.rbf{lengthscale = L2}, inducing = 4,
              noise = 0.01},
      gp.variational{x = X2, y = Y2, kernel = gp.kernels.matern52{lengthscale = 0.5},
                     likelihood = gp.likelihoods.gaussian{noise = 0.05}, inducing = 4},
    }
    -- q(u) moved off the prior (untrained, whitened: the posterior is the prior)
    models[6]:set_variational(lt.tensor{0.5, -0.3, 0.2, 0.1}, lt.eye(4) * 0.5)
    assert.are.equal("custom", models[3]:covariance().kind)
    assert.are.equal("dense", models[4]:covariance().kind)
    assert.are.equal("kron_masked", models[2]:covariance().kind)
    local X = lt.tensor{{0.3, 0.4}, {0.7, 0.6}}
    for i, m in ipairs(models) do
      local function f(Z)
        local post = m:posterior(Z)
        return (post:mean() + post:variance():sqrt()):sum()
      end
      local ok, err = lt.gradcheck(f, X)
      assert.is_true(ok, "model " .. i .. ": " .. tostring(err))
      local g = lt.grad(f)(X)
      assert.is_true(g:abs():max() > 1e-3, "model " .. i .. ": a zero gradient")
    end
  end)

  it("gp.exact's mean_and_variance(X): the dense posterior's numbers, a gradient with "
     .. "respect to X (kernel, kron_masked, custom, dense)", function()
    local custom = gp.kernels.custom{params = {l = 0.4}, k = function(x1, x2, p)
      return lt.kernel(x1, x2, {kind = "matern32", lengthscale = p.l})
    end}
    local models = {model2("kernel"), model2(), model2("dense"),
                    gp.exact{x = X2, y = Y2, kernel = custom, noise = 0.01}}
    local means, vars = dense_posterior(X2, Y2, L2, V2, S2, CANDIDATES)
    for i = 1, 3 do
      local m, v = models[i]:mean_and_variance(lt.tensor(CANDIDATES))
      m, v = m:totable(), v:totable()
      assert.are.equal(#CANDIDATES, #m)
      assert.are.equal(#CANDIDATES, #v)
      for j = 1, #CANDIDATES do
        assert.is_true(close(m[j], means[j], 1e-10), string.format("model %d mean %d", i, j))
        assert.is_true(close(v[j], vars[j], 1e-10), string.format("model %d variance %d", i, j))
      end
    end
    local X = lt.tensor{{0.3, 0.4}, {0.7, 0.6}}
    for i, m in ipairs(models) do
      local function f(Z)
        local mean, var = m:mean_and_variance(Z)
        return (mean + var:sqrt()):sum()
      end
      local post = m:posterior(X)
      local mean, var = m:mean_and_variance(X)
      for j = 1, 2 do
        assert.is_true(close(mean[j], post:mean()[j], 1e-12), "model " .. i)
        assert.is_true(close(var[j], post:variance()[j], 1e-10), "model " .. i)
      end
      local ok, err = lt.gradcheck(f, X)
      assert.is_true(ok, "model " .. i .. ": " .. tostring(err))
      assert.is_true(lt.grad(f)(X):abs():max() > 1e-3, "model " .. i .. ": a zero gradient")
    end
  end)

  it("mean_and_variance: k(x, x) of stationary and other kernels, a later candidate's "
     .. "non-finite entry and width refused as posterior refuses them", function()
    -- kernels whose k(x, x) is a constant (product, periodic, spectral mixture:
    -- the shortcut) and one whose k(x, x) varies (polynomial: the test covariance)
    local K = gp.kernels
    local kernels = {K.rbf{lengthscale = 0.3, variance = 1.7} * K.periodic{period = 0.9},
                     K.spectral_mixture{num_mixtures = 2, weights = {0.6, 1.1},
                                        means = {{0.4, 0.2}, {1, 0.7}},
                                        scales = {{0.3, 0.4}, {0.5, 0.2}}},
                     K.polynomial{degree = 2, offset = 0.4}}
    local Z = lt.tensor{{0.3, 0.4}, {0.7, 0.6}, {0.05, 0.95}}
    for i, k in ipairs(kernels) do
      local m = gp.exact{x = X2, y = Y2, kernel = k, noise = 0.01, structure = "kernel"}
      local post = m:posterior(Z)
      local mean, var = m:mean_and_variance(Z)
      for j = 1, 3 do
        assert.is_true(close(mean[j], post:mean()[j], 1e-12), "kernel " .. i)
        assert.is_true(close(var[j], post:variance()[j], 1e-10), "kernel " .. i)
      end
    end
    -- the kept k(x, x) follows a hyperparameter written into the kernel
    local m = model2("kernel")
    local _, before = m:mean_and_variance(Z)
    m.kernel.values.variance = 2 * V2
    local _, after = m:mean_and_variance(Z)
    local _, again = gp.exact{x = X2, y = Y2, kernel = gp.kernels.rbf{lengthscale = L2,
                              variance = 2 * V2}, noise = S2, mean = "zero",
                              structure = "kernel"}:mean_and_variance(Z)
    for j = 1, 3 do
      assert.is_true(close(after[j], again[j], 1e-12))
      assert.is_false(close(after[j], before[j], 1e-3))
    end
    fails("lazytensor: gp: xstar[2][1] must be a finite number, got inf",
          function() m:mean_and_variance(lt.tensor{{0.1, 0.2}, {1 / 0, 0.3}}) end)
    fails("lazytensor: gp: xstar[2][1] must be a finite number, got inf",
          function() m:posterior(lt.tensor{{0.1, 0.2}, {1 / 0, 0.3}}) end)
    fails("lazytensor: gp: xstar has 3 coordinates, the training inputs 2",
          function() m:mean_and_variance(lt.tensor{{0.1, 0.2, 0.3}}) end)
    fails("lazytensor: bo: expected_improvement: candidate 3, coordinate 2 is nan",
          function() bo.expected_improvement(m, 0)(lt.tensor{{1, 0}, {0, 1}, {0.5, 0 / 0}}) end)
    -- a transposed view: its entries where its strides put them
    fails("lazytensor: bo: expected_improvement: candidate 1, coordinate 2 is nan",
          function() bo.expected_improvement(m, 0)(lt.tensor{{1, 0}, {0 / 0, 1}}:t()) end)
  end)

  it("a kernel's fingerprint follows values written into it in place", function()
    local k = gp.kernels.rbf{lengthscale = {0.3, 0.4}, variance = 1}
    local first = k:fingerprint()
    assert.are.equal(first, k:fingerprint())
    k.values.lengthscale[2] = 0.5
    local second = k:fingerprint()
    assert.are_not.equal(first, second)
    assert.are.equal(gp.kernels.rbf{lengthscale = {0.3, 0.5}, variance = 1}:fingerprint(), second)
    k.values.lengthscale[2] = 0 / 0
    assert.are_not.equal(second, k:fingerprint())
    k.values.lengthscale = {0.3, 0.4}
    assert.are.equal(first, k:fingerprint())
  end)

  it("a tensor and a Lua array give the same posterior", function()
    local m = model2()
    local a, b = m:posterior(lt.tensor(CANDIDATES)), m:posterior(CANDIDATES)
    local ma, mb = a:mean():totable(), b:mean():totable()
    local va, vb = a:variance():totable(), b:variance():totable()
    for i = 1, #CANDIDATES do
      assert.is_true(close(ma[i], mb[i], 1e-12))
      assert.is_true(close(va[i], vb[i], 1e-12))
    end
  end)
end)

------------------------------------------------- analytic acquisitions --

describe("bo: analytic acquisitions", function()
  local model = model2()
  local means, vars = dense_posterior(X2, Y2, L2, V2, S2, CANDIDATES)
  local best = -0.7

  -- reference value at candidate i from μ, σ in plain Lua
  local function reference(kind, i, maximize, beta)
    local mu, sigma = means[i], math.sqrt(vars[i])
    local u = maximize and (mu - best) / sigma or (best - mu) / sigma
    if kind == "ei" then return sigma * (phi(u) + u * Phi(u)) end
    if kind == "logei" then return math.log(sigma) + log_h_reference(u) end
    if kind == "pi" then return Phi(u) end
    if kind == "ucb" then
      return maximize and mu + math.sqrt(beta) * sigma or -(mu - math.sqrt(beta) * sigma)
    end
    return maximize and mu or -mu
  end

  local cases = {
    {"ei", function(o) return bo.expected_improvement(model, best, o) end},
    {"logei", function(o) return bo.log_expected_improvement(model, best, o) end},
    {"pi", function(o) return bo.probability_of_improvement(model, best, o) end},
    {"ucb", function(o) return bo.upper_confidence_bound(model, 2.5, o) end},
    {"mean", function(o) return bo.posterior_mean(model, o) end},
  }

  it("equal their closed forms from the dense posterior (both directions)", function()
    for _, c in ipairs(cases) do
      for _, maximize in ipairs{false, true} do
        local acq = c[2]({maximize = maximize})
        local got = values_of(acq(lt.tensor(CANDIDATES)))
        assert.are.equal(#CANDIDATES, #got)
        for i = 1, #CANDIDATES do
          local want = reference(c[1], i, maximize, 2.5)
          assert.is_true(close(got[i], want, 1e-9),
            string.format("%s maximize=%s candidate %d: %.17g vs %.17g", c[1],
                          tostring(maximize), i, got[i], want))
        end
      end
    end
  end)

  it("take one point as a {d} tensor or a Lua array", function()
    local ei = bo.expected_improvement(model, best)
    local one = values_of(ei(lt.tensor(CANDIDATES[2])))
    local arr = values_of(ei({CANDIDATES[2]}))
    assert.are.equal(1, #one)
    assert.is_true(close(one[1], reference("ei", 2), 1e-9))
    assert.is_true(close(arr[1], reference("ei", 2), 1e-9))
  end)

  it("have gradients that pass lt.gradcheck with respect to the candidates", function()
    local X = lt.tensor{{0.3, 0.4}, {0.7, 0.6}, {0.5, 0.45}}
    for _, c in ipairs(cases) do
      for _, maximize in ipairs{false, true} do
        local acq = c[2]({maximize = maximize})
        local ok, err = lt.gradcheck(function(Z) return acq(Z):sum() end, X)
        assert.is_true(ok, c[1] .. ": " .. tostring(err))
      end
    end
  end)
end)

describe("bo: LogEI far below the mean", function()
  it("log h(u) matches the asymptotic series where EI underflows", function()
    local acquisition = require "lazytensor.bo.acquisition"
    local us = {-1e4, -1000, -40, -30, -25, -20.000001, -19.999999, -15, -5, -1.000001,
                -0.999999, 0, 2, 40}
    local got = acquisition.log_h(lt.tensor(us)):totable()
    for i, u in ipairs(us) do
      local want = log_h_reference(u)
      assert.is_true(math.abs(got[i] - want) <= 1e-10 * math.max(1, math.abs(want)),
        string.format("u = %g: %.17g vs %.17g", u, got[i], want))
    end
    -- EI itself is 0 in double there: e^(−800) underflows
    assert.are.equal(0, phi(-40) + (-40) * Phi(-40) > 1e-300 and 1 or 0)
  end)

  it("LogEI of a model is finite and right where EI is 0", function()
    local model = model2()
    local means, vars = dense_posterior(X2, Y2, L2, V2, S2, {{0.55, 0.5}})
    local sigma = math.sqrt(vars[1])
    -- best 40 standard deviations below the mean at the candidate
    local best = means[1] - 40 * sigma
    local ei = values_of(bo.expected_improvement(model, best)({{0.55, 0.5}}))[1]
    local logei = values_of(bo.log_expected_improvement(model, best)({{0.55, 0.5}}))[1]
    assert.are.equal(0, ei)
    local want = math.log(sigma) + log_h_reference((best - means[1]) / sigma)
    assert.is_true(close(logei, want, 1e-7), string.format("%.17g vs %.17g", logei, want))
  end)

  it("log h's gradient passes lt.gradcheck in every piece", function()
    local acquisition = require "lazytensor.bo.acquisition"
    local ok, err = lt.gradcheck(function(u) return acquisition.log_h(u):sum() end,
                                 lt.tensor{-300, -35, -21, -12, -3, -0.5, 0.7, 6})
    assert.is_true(ok, tostring(err))
  end)
end)

------------------------------------------------- Monte-Carlo batches --

describe("bo: Monte-Carlo batch acquisitions", function()
  local model = model2()
  local best = -0.7

  it("qEI at q = 1 approaches EI within the Monte-Carlo error", function()
    local x = {{0.6, 0.45}}
    local means, vars = dense_posterior(X2, Y2, L2, V2, S2, x)
    local mu, sigma = means[1], math.sqrt(vars[1])
    local u = (best - mu) / sigma
    local ei = sigma * (phi(u) + u * Phi(u))
    -- E[I²] = σ²((u² + 1)Φ(u) + uφ(u)): the standard error of the mean
    local second = sigma ^ 2 * ((u * u + 1) * Phi(u) + u * phi(u))
    local samples = 8192
    local se = math.sqrt((second - ei * ei) / samples)
    local qei = values_of(bo.q_expected_improvement(model, best, {samples = samples, seed = 5})(x))
    assert.are.equal(1, #qei)
    assert.is_true(math.abs(qei[1] - ei) < 4 * se,
      string.format("qEI %.6g, EI %.6g, standard error %.3g", qei[1], ei, se))
    assert.is_true(se < 0.02 * ei) -- a test that can fail
  end)

  it("are deterministic in X (fixed base samples) and grow with q", function()
    local qei = bo.q_expected_improvement(model, best, {samples = 256, seed = 9})
    local a = values_of(qei({{0.6, 0.45}}))[1]
    local b = values_of(qei({{0.6, 0.45}}))[1]
    assert.are.equal(a, b)
    local two = values_of(qei({{0.6, 0.45}, {0.3, 0.3}}))[1]
    assert.is_true(two >= a - 1e-12)
    -- another seed, other base samples
    local other = values_of(bo.q_expected_improvement(model, best, {samples = 256, seed = 10})(
      {{0.6, 0.45}}))[1]
    assert.are_not.equal(a, other)
  end)

  it("qNEI and qUCB against their Monte-Carlo definitions at q = 1", function()
    -- qUCB at q = 1: mean over z of −μ + √(βπ/2)·σ|z| → −μ + √β·σ (E|z| = √(2/π))
    local x = {{0.6, 0.45}}
    local means, vars = dense_posterior(X2, Y2, L2, V2, S2, x)
    local mu, sigma = means[1], math.sqrt(vars[1])
    local qucb = values_of(bo.q_upper_confidence_bound(model, 2, {samples = 8192, seed = 3})(x))[1]
    local want = -mu + math.sqrt(2) * sigma
    -- sd of √(βπ/2)·σ|z| is √(βπ/2)·σ·√(1 − 2/π)
    local se = math.sqrt(2 * math.pi / 2) * sigma * math.sqrt(1 - 2 / math.pi) / math.sqrt(8192)
    assert.is_true(math.abs(qucb - want) < 4 * se, string.format("%.6g vs %.6g", qucb, want))
    -- qNEI is positive and at most the improvement over the lowest
    -- posterior sample of the observed points can give: compare with qEI
    -- at the best observed mean (noise 1e-3: nearly the observations)
    local qnei = values_of(bo.q_noisy_expected_improvement(model, X2, {samples = 4096,
                                                                          seed = 3})(x))[1]
    local qei = values_of(bo.q_expected_improvement(model, min_of(Y2), {samples = 4096,
                                                                          seed = 3})(x))[1]
    assert.is_true(qnei > 0)
    assert.is_true(math.abs(qnei - qei) < 0.1 * qei + 1e-3,
                   string.format("qNEI %.6g, qEI at the best observation %.6g", qnei, qei))
  end)

  it("have gradients that pass lt.gradcheck (q = 1 and q = 3)", function()
    local acqs = {
      qei = bo.q_expected_improvement(model, best, {samples = 64, seed = 1}),
      qei_max = bo.q_expected_improvement(model, 0.9, {samples = 64, seed = 1, maximize = true}),
      qnei = bo.q_noisy_expected_improvement(model, X2, {samples = 64, seed = 1}),
      qucb = bo.q_upper_confidence_bound(model, 1.5, {samples = 64, seed = 1}),
    }
    for name, acq in pairs(acqs) do
      for _, X in ipairs{lt.tensor{{0.6, 0.45}}, lt.tensor{{0.6, 0.45}, {0.3, 0.35}, {0.1, 0.6}}} do
        local ok, err = lt.gradcheck(function(Z) return acq(Z):sum() end, X)
        assert.is_true(ok, name .. ": " .. tostring(err))
      end
    end
  end)
end)

------------------------------------------------------------ optimize --

describe("bo.optimize", function()
  it("finds the maximiser of a smooth function, inside and on the bounds", function()
    local function peak(c)
      return function(X)
        local d = X - lt.tensor{c}
        return d:cmul(d):sum(2) * -1 + 1 -- {1}
      end
    end
    local x, v = bo.optimize(peak{0.3, -0.2, 0.7}, {{0, -1, 0}, {1, 1, 1}}, {seed = 1,
                                                                             raw_samples = 64})
    local got = x:totable()[1]
    assert.is_true(close(got[1], 0.3, 1e-6) and close(got[2], -0.2, 1e-6)
                   and close(got[3], 0.7, 1e-6))
    assert.is_true(close(v, 1, 1e-10))
    -- the peak outside the box: the maximiser is the nearest corner/face
    x = bo.optimize(peak{1.5, -0.2, -3}, lt.tensor{{0, -1, 0}, {1, 1, 1}}, {seed = 2,
                                                                             raw_samples = 64})
    got = x:totable()[1]
    assert.are.equal(1, got[1])
    assert.is_true(close(got[2], -0.2, 1e-6))
    assert.are.equal(0, got[3])
  end)

  it("maximises EI of a 1-d model as a dense grid search does", function()
    local model, y = model1()
    local ei = bo.expected_improvement(model, min_of(y))
    local grid = {}
    for i = 0, 2000 do grid[#grid + 1] = {i / 2000} end
    local values = values_of(ei(lt.tensor(grid)))
    local gbest, gi = -math.huge, 1
    for i, v in ipairs(values) do
      if v > gbest then gbest, gi = v, i end
    end
    local x, v = bo.optimize(ei, {{0}, {1}}, {seed = 4})
    assert.is_true(v >= gbest - 1e-12, string.format("%.17g vs grid %.17g", v, gbest))
    assert.is_true(math.abs(x:totable()[1][1] - grid[gi][1]) < 2e-3)
    -- and LogEI has the same maximiser
    local xl = bo.optimize(bo.log_expected_improvement(model, min_of(y)), {{0}, {1}}, {seed = 4})
    assert.is_true(math.abs(xl:totable()[1][1] - x:totable()[1][1]) < 1e-4)
  end)

  it("keeps every result inside the bounds (q = 1 and q = 2)", function()
    local model = model2()
    local bounds = {{0.2, 0.1}, {0.6, 0.4}}
    for _, case in ipairs{{bo.upper_confidence_bound(model, 4), 1},
                          {bo.q_expected_improvement(model, -0.7, {samples = 32, seed = 1}), 2}} do
      local x, v = bo.optimize(case[1], bounds, {q = case[2], seed = 3, raw_samples = 32,
                                                 restarts = 3})
      assert.are.same({case[2], 2}, x:shape())
      for _, row in ipairs(x:totable()) do
        for j = 1, 2 do
          assert.is_true(row[j] >= bounds[1][j] and row[j] <= bounds[2][j])
        end
      end
      assert.is_true(math.abs(v - values_of(case[1](x))[1]) < 1e-12)
    end
  end)

  it("is reproducible with a seed", function()
    local model = model2()
    local acq = bo.log_expected_improvement(model, -0.7)
    local a, va = bo.optimize(acq, {{0, 0}, {1, 1}}, {seed = 11, raw_samples = 64})
    local b, vb = bo.optimize(acq, {{0, 0}, {1, 1}}, {seed = 11, raw_samples = 64})
    assert.are.same(a:totable(), b:totable())
    assert.are.equal(va, vb)
  end)
end)

------------------------------------------------------------ thompson --

describe("bo.thompson", function()
  it("draws inside the bounds, near the minimum of a sharply peaked posterior", function()
    local xs, ys = {}, {}
    for i = 1, 25 do
      local x = (i - 0.5) / 25 + 0.01 * math.sin(7 * i) -- irregular: the kernel structure
      xs[i], ys[i] = x, 20 * (x - 0.3) ^ 2
    end
    local model = gp.exact{x = xs, y = ys, kernel = gp.kernels.rbf{lengthscale = 0.2,
                                                                    variance = 1},
                           noise = 1e-6, fixed = {noise = true}, mean = "zero"}
    local x, v = bo.thompson(model, {{0}, {1}}, {samples = 8, n_candidates = 400, seed = 3})
    assert.are.same({8, 1}, x:shape())
    assert.are.same({8}, v:shape())
    for s, row in ipairs(x:totable()) do
      assert.is_true(row[1] >= 0 and row[1] <= 1)
      assert.is_true(math.abs(row[1] - 0.3) < 0.05, "draw " .. s .. " at " .. row[1])
    end
    -- maximize: the highest value of a draw, at an end of the interval
    local xm = bo.thompson(model, {{0}, {1}}, {samples = 4, seed = 3, maximize = true})
    for _, row in ipairs(xm:totable()) do assert.is_true(row[1] > 0.9) end
  end)

  it("picks among given candidates, and the draws spread where the posterior is wide", function()
    local model = model2()
    local cands = {{0.1, 0.1}, {0.9, 0.9}, {0.5, 0.1}, {0.3, 0.6}, {0.55, 0.5}}
    local x = bo.thompson(model, cands, {samples = 200, seed = 1})
    local seen = {}
    for _, row in ipairs(x:totable()) do
      local found = false
      for i, c in ipairs(cands) do
        if row[1] == c[1] and row[2] == c[2] then
          found = true
          seen[i] = (seen[i] or 0) + 1
        end
      end
      assert.is_true(found)
    end
    -- the observed low point (0.55, 0.5: y = −0.9, σ ≈ 0.03) wins most draws,
    -- but not all: the far corners are uncertain
    assert.is_true((seen[5] or 0) > 60 and (seen[5] or 0) < 200)
  end)
end)

------------------------------------------------------ optim_bounded --

describe("optim_bounded.lbfgsb", function()
  local function rosenbrock(x)
    local a, b = x[1], x[2]
    return (1 - a) ^ 2 + 100 * (b - a * a) ^ 2,
           {-2 * (1 - a) - 400 * a * (b - a * a), 200 * (b - a * a)}
  end

  it("finds Rosenbrock's minimum, and the constrained one on a bound", function()
    local x, v, info = optim_bounded.lbfgsb(rosenbrock, {-1.5, 1.5}, {-2, -2}, {2, 2})
    assert.is_true(info.converged)
    assert.is_true(close(x[1], 1, 1e-6) and close(x[2], 1, 1e-6) and v < 1e-12)
    -- a <= 0.5: b = a², (1 − a)² is least at a = 0.5
    x, v = optim_bounded.lbfgsb(rosenbrock, {-1.5, 1.5}, {-2, -2}, {0.5, 2})
    assert.are.equal(0.5, x[1])
    assert.is_true(close(x[2], 0.25, 1e-6) and close(v, 0.25, 1e-10))
  end)

  it("maximises, clips x0 into the box, and refuses bad input", function()
    local function neg(x) return -(x[1] - 3) ^ 2, {-2 * (x[1] - 3)} end
    local x = optim_bounded.lbfgsb(neg, {-7}, {-1}, {1}, {maximize = true})
    assert.are.equal(1, x[1])
    assert.has_error(function() optim_bounded.lbfgsb(neg, {0}, {1}, {1}) end,
                     "lazytensor: lbfgsb: lo[1] = 1 must be below hi[1] = 1")
    assert.has_error(function() optim_bounded.lbfgsb(neg, {0}, {0 / 0}, {1}) end,
                     "lazytensor: lbfgsb: lo[1] is not a finite number")
    assert.has_error(function() optim_bounded.lbfgsb(neg, {0}, {-1}, {1}, {history = 0}) end,
                     "lazytensor: lbfgsb: opts.history has a bad value 0")
  end)
end)

---------------------------------------------------------- bad input --

describe("bo: bad input", function()
  local model = model2()

  it("acquisitions refuse bad models, best, beta and options", function()
    fails("lazytensor: bo: expected_improvement: the model must have a posterior(X) method",
          function() bo.expected_improvement({}, 0) end)
    fails("lazytensor: bo: q_expected_improvement: the model must have a posterior",
          function() bo.q_expected_improvement(42, 0) end)
    fails("lazytensor: bo: expected_improvement: best must be a finite number, got x",
          function() bo.expected_improvement(model, "x") end)
    fails("lazytensor: bo: log_expected_improvement: best must be a finite number, got nan",
          function() bo.log_expected_improvement(model, 0 / 0) end)
    fails("lazytensor: bo: probability_of_improvement: best must be a finite number, got nil",
          function() bo.probability_of_improvement(model) end)
    fails("lazytensor: bo: upper_confidence_bound: beta must be >= 0, got -1",
          function() bo.upper_confidence_bound(model, -1) end)
    fails("lazytensor: bo: q_upper_confidence_bound: beta must be >= 0",
          function() bo.q_upper_confidence_bound(model, -0.5) end)
    fails("lazytensor: bo: expected_improvement: unknown option 'maximise'",
          function() bo.expected_improvement(model, 0, {maximise = true}) end)
    fails("lazytensor: bo: posterior_mean: opts.maximize must be a boolean",
          function() bo.posterior_mean(model, {maximize = 1}) end)
    fails("lazytensor: bo: q_expected_improvement: opts.samples must be a positive integer",
          function() bo.q_expected_improvement(model, 0, {samples = 0}) end)
    fails("lazytensor: bo: q_expected_improvement: opts.seed must be an integer",
          function() bo.q_expected_improvement(model, 0, {seed = 1.5}) end)
    fails("lazytensor: bo: q_noisy_expected_improvement: x_observed",
          function() bo.q_noisy_expected_improvement(model) end)
    fails("lazytensor: bo: q_noisy_expected_improvement: x_observed: candidates have 3 "
          .. "coordinates, the model's inputs 2",
          function() bo.q_noisy_expected_improvement(model, {{1, 2, 3}}) end)
  end)

  it("a model whose posterior has no gradient in X (Toeplitz) is refused", function()
    local m = gp.exact{x = {0, 0.25, 0.5, 0.75, 1}, y = {1, 0, 2, 1, 0},
                       kernel = gp.kernels.rbf{lengthscale = 0.3}, noise = 0.01}
    assert.are.equal("toeplitz", m:covariance().kind)
    fails("lazytensor: bo: expected_improvement: the model's posterior (structure 'toeplitz') "
          .. "has no gradient with respect to the candidates; build the model with structure = "
          .. "'kernel'", function() bo.expected_improvement(m, 0) end)
    -- with structure = "kernel" it works
    local k = gp.exact{x = {0, 0.25, 0.5, 0.75, 1}, y = {1, 0, 2, 1, 0}, structure = "kernel",
                       kernel = gp.kernels.rbf{lengthscale = 0.3}, noise = 0.01}
    assert.is_true(values_of(bo.expected_improvement(k, 0)({{0.4}}))[1] > 0)
  end)

  it("candidates of the wrong width, shape or values are refused", function()
    local ei = bo.expected_improvement(model, 0)
    local qei = bo.q_expected_improvement(model, 0, {samples = 8})
    fails("lazytensor: bo: expected_improvement: candidates have 3 coordinates, the model's "
          .. "inputs 2", function() ei(lt.tensor{{1, 2, 3}}) end)
    fails("lazytensor: bo: q_expected_improvement: candidates have 1 coordinates",
          function() qei(lt.tensor{{1}, {2}}) end)
    fails("lazytensor: bo: expected_improvement: candidate 1, coordinate 2 is nan",
          function() ei(lt.tensor{{1, 0 / 0}}) end)
    fails("lazytensor: bo: expected_improvement: candidates must be a dense {q, d} or {d} tensor",
          function() ei(lt.diag{1, 1}) end)
    fails("lazytensor: bo: expected_improvement: candidates must be a {q, d} or {d} tensor",
          function() ei(lt.zeros(2, 2, 2)) end)
    fails("lazytensor: bo: thompson: candidates have 1 coordinates",
          function() bo.thompson(model, {{0.1}, {0.2}, {0.3}}) end)
  end)

  it("bo.optimize refuses bad bounds and options", function()
    local ei = bo.expected_improvement(model, 0)
    fails("lazytensor: bo: optimize: bounds of coordinate 2: lo = 1 must be below hi = 1",
          function() bo.optimize(ei, {{0, 1}, {1, 1}}) end)
    fails("lazytensor: bo: optimize: bounds of coordinate 1: lo = 2 must be below hi = 1",
          function() bo.optimize(ei, lt.tensor{{2, 0}, {1, 1}}) end)
    fails("lazytensor: bo: optimize: bounds must be a {2, d} tensor, got dense of shape {3, 2}",
          function() bo.optimize(ei, lt.zeros(3, 2)) end)
    fails("lazytensor: bo: optimize: bounds must be a {2, d} tensor or {{lo...}, {hi...}}",
          function() bo.optimize(ei, {0, 1}) end)
    fails("lazytensor: bo: optimize: bounds' rows must have the same number",
          function() bo.optimize(ei, {{0, 0}, {1}}) end)
    fails("lazytensor: bo: optimize: bounds of coordinate 1 must be finite numbers, got -inf",
          function() bo.optimize(ei, {{-math.huge, 0}, {1, 1}}) end)
    fails("lazytensor: bo: optimize: opts.q must be a positive integer, got 0",
          function() bo.optimize(ei, {{0, 0}, {1, 1}}, {q = 0}) end)
    fails("lazytensor: bo: optimize: opts.q must be a positive integer, got 1.5",
          function() bo.optimize(ei, {{0, 0}, {1, 1}}, {q = 1.5}) end)
    fails("lazytensor: bo: optimize: opts.restarts must be a positive integer",
          function() bo.optimize(ei, {{0, 0}, {1, 1}}, {restarts = 0}) end)
    fails("lazytensor: bo: optimize: opts.ftol must be a finite number >= 0, got -1",
          function() bo.optimize(ei, {{0, 0}, {1, 1}}, {ftol = -1}) end)
    fails("lazytensor: bo: optimize: opts.pgtol must be a finite number >= 0, got nan",
          function() bo.optimize(ei, {{0, 0}, {1, 1}}, {pgtol = 0 / 0}) end)
    fails("lazytensor: bo: optimize: unknown option 'raw'",
          function() bo.optimize(ei, {{0, 0}, {1, 1}}, {raw = 4}) end)
    fails("lazytensor: bo: optimize: q = 2 needs a batch acquisition",
          function() bo.optimize(ei, {{0, 0}, {1, 1}}, {q = 2}) end)
    fails("lazytensor: bo: optimize: acq must be a function of candidates, got nil",
          function() bo.optimize(nil, {{0, 0}, {1, 1}}) end)
    fails("lazytensor: bo: expected_improvement: candidates have 3 coordinates",
          function() bo.optimize(ei, {{0, 0, 0}, {1, 1, 1}}, {raw_samples = 4}) end)
    fails("lazytensor: bo: optimize: the acquisition must return one value for a batch of "
          .. "candidates, got a tensor of 2 values",
          function() bo.optimize(function() return lt.ones(2) end, {{0}, {1}}, {raw_samples = 3}) end)
  end)

  it("bo.thompson refuses bad models and options", function()
    fails("lazytensor: bo: thompson: the model must have a posterior(X) method",
          function() bo.thompson({}, {{0, 0}, {1, 1}}) end)
    fails("lazytensor: bo: thompson: opts.samples must be a positive integer",
          function() bo.thompson(model, {{0, 0}, {1, 1}}, {samples = -1}) end)
    fails("lazytensor: bo: thompson: bounds have 1 coordinates, the model's inputs 2",
          function() bo.thompson(model, {{0}, {1}}) end)
    fails("lazytensor: bo: thompson: bounds of coordinate 1: lo = 1 must be below hi = 0",
          function() bo.thompson(model, {{1, 0}, {0, 1}}) end)
  end)
end)

describe("bo.optimize{independent = true}", function()
  it("runs the starts as independent L-BFGS runs: each start's optimum, the best of them",
     function()
    -- a one-bump acquisition in 2-d (a pointwise function of the rows),
    -- maximised at (0.3, 0.6): both ways find it
    local centre = lt.tensor{{0.3, 0.6}}
    local function acq(X)
      local d = X - centre
      return (d:cmul(d):sum(2) * -4):exp():reshape(X:size(1))
    end
    require("lazytensor.bo.acquisition").pointwise[acq] = true
    for _, independent in ipairs{false, true} do
      local x, v = bo.optimize(acq, {{0, 0}, {1, 1}}, {seed = 3, independent = independent})
      assert.is_true(math.abs(x[1][1] - 0.3) < 1e-4 and math.abs(x[1][2] - 0.6) < 1e-4,
                     tostring(independent))
      assert.is_true(math.abs(v - 1) < 1e-8)
    end
    local ok, err = pcall(bo.optimize, acq, {{0, 0}, {1, 1}}, {independent = 1})
    assert.is_false(ok)
    assert.matches("lazytensor: bo: optimize: opts.independent must be true or false", err)
  end)
end)
