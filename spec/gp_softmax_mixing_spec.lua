-- gp.likelihoods.softmax{classes = C, features = F}: F latent functions g
-- mixed into the class logits f = W g by learnt weights W (C×F), GPyTorch's
-- default SoftmaxLikelihood. Against references written in plain Lua: the
-- Monte Carlo average over the likelihood's base samples with f = W g
-- spelled out, a product Gauss–Hermite rule over the F latents, the
-- whitened KL; with F = C and W = I the numbers of softmax{classes = C}
-- bit for bit; gradients (W included) through lt.gradcheck; a fit; bad input.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local close = require("support.ref").close
local L = gp.likelihoods

local sqrt, exp, log = math.sqrt, math.exp, math.log

---------------------------------------------------- plain-Lua reference --

local function lse(f)
  local top = -math.huge
  for _, v in ipairs(f) do top = math.max(top, v) end
  local s = 0
  for _, v in ipairs(f) do s = s + exp(v - top) end
  return top + log(s)
end

-- f = W g (W a Lua array of C rows of F numbers)
local function mix(W, g)
  local f = {}
  for c, row in ipairs(W) do
    local s = 0
    for j, w in ipairs(row) do s = s + w * g[j] end
    f[c] = s
  end
  return f
end

-- (1/S) Σ_k log softmax(W (m + √v ⊙ ε_k))_y for one point.
local function mc_ell(y, m, v, W, base)
  local total = 0
  for _, e in ipairs(base) do
    local g = {}
    for j = 1, #m do g[j] = m[j] + sqrt(v[j]) * e[j] end
    local f = mix(W, g)
    total = total + f[y] - lse(f)
  end
  return total / #base
end

-- (1/S) Σ_k softmax(W g_k) for one point.
local function mc_probabilities(m, v, W, base)
  local P = {}
  for c = 1, #W do P[c] = 0 end
  for _, e in ipairs(base) do
    local g = {}
    for j = 1, #m do g[j] = m[j] + sqrt(v[j]) * e[j] end
    local f = mix(W, g)
    local z = lse(f)
    for c = 1, #W do P[c] = P[c] + exp(f[c] - z) / #base end
  end
  return P
end

-- E h(W g) for g ~ N(m, diag v) by the product rule of k Gauss–Hermite
-- nodes per latent (k^F points), h a function of the logits.
local function gh_expect(h, m, v, W, k)
  local x, w = L.gauss_hermite(k)
  local F = #m
  local idx = {}
  for j = 1, F do idx[j] = 1 end
  local total = 0
  while true do
    local g, weight = {}, 1
    for j = 1, F do
      g[j] = m[j] + sqrt(2 * v[j]) * x[idx[j]]
      weight = weight * w[idx[j]] / sqrt(math.pi)
    end
    total = total + weight * h(mix(W, g))
    local j = 1
    while j <= F and idx[j] == k do
      idx[j] = 1
      j = j + 1
    end
    if j > F then break end
    idx[j] = idx[j] + 1
  end
  return total
end

-- The whitened KL of F independent q(v_j) = N(μ_j, L_j L_jᵀ) against N(0, I):
-- ½ Σ_j (‖L_j‖² + ‖μ_j‖² − m − 2 Σ_i log |L_j,ii|); mean m×F, chol m×Fm.
local function whitened_kl(mean, chol)
  local m, F = #mean, #mean[1]
  local total = 0
  for j = 1, F do
    for i = 1, m do
      total = total + mean[i][j] ^ 2 - 1 - 2 * log(math.abs(chol[i][(j - 1) * m + i]))
      for k = 1, i do total = total + chol[i][(j - 1) * m + k] ^ 2 end
    end
  end
  return total / 2
end

-- Three Gaussian blobs in 2-d (classes 1, 2, 3 in turn), from Park–Miller.
local function blobs(n, seed)
  local s = seed
  local function u()
    s = (16807 * s) % 2147483647
    return s / 2147483647
  end
  local function normal() return sqrt(-2 * log(u())) * math.cos(2 * math.pi * u()) end
  local centres = {{0, 1.5}, {-1.3, -0.75}, {1.3, -0.75}}
  local x, y = {}, {}
  for i = 1, n do
    local c = (i - 1) % 3 + 1
    x[i] = {centres[c][1] + 0.6 * normal(), centres[c][2] + 0.6 * normal()}
    y[i] = c
  end
  return x, y
end

-- n×F latent means and variances, labels 1..C, away from symmetry.
local function latents(n, F, C)
  local M, V, y = {}, {}, {}
  for i = 1, n do
    M[i], V[i] = {}, {}
    for j = 1, F do
      M[i][j] = 1.2 * math.sin(1.7 * i + 0.9 * j)
      V[i][j] = 0.1 + 0.6 * (((i * 7 + j * 3) % 5) / 4)
    end
    y[i] = (i * 5) % C + 1
  end
  return M, V, y
end

local W32 = {{0.8, -0.3}, {-0.4, 0.9}, {0.2, 0.5}} -- C = 3, F = 2
local W23 = {{0.7, -0.2, 0.4}, {-0.5, 0.6, 0.1}}   -- C = 2, F = 3

local function same_numbers(a, b, what)
  a, b = a:totable(), b:totable()
  for i, row in ipairs(a) do
    if type(row) == "table" then
      for j, v in ipairs(row) do assert.are.equal(v, b[i][j], what .. " " .. i .. "," .. j) end
    else
      assert.are.equal(row, b[i], what .. " " .. i)
    end
  end
end

describe("gp.likelihoods.softmax with mixing weights", function()
  it("F = C and W = I: softmax{classes = C}'s numbers bit for bit (C = 2, 3, 4)", function()
    for _, C in ipairs{2, 3, 4} do
      local M, V, y = latents(7, C, C)
      M, V, y = lt.tensor(M), lt.tensor(V), lt.tensor(y)
      local plain = L.softmax{classes = C}
      local mixed = L.softmax{classes = C, features = C, mixing_weights = lt.eye(C)}
      assert.is_true(mixed.mixing)
      same_numbers(plain:expected_log_prob(y, M, V), mixed:expected_log_prob(y, M, V), "ell")
      same_numbers(plain:predict_y(M, V), mixed:predict_y(M, V), "predict_y")
      same_numbers(plain:log_prob(y, M), mixed:log_prob(y, M), "log_prob")
      -- mixing = false (features = C allowed) is the plain likelihood
      local off = L.softmax{classes = C, features = C, mixing = false}
      assert.is_nil(off.mixing)
      assert.is_nil(off:mixing_weights())
      same_numbers(plain:expected_log_prob(y, M, V), off:expected_log_prob(y, M, V), "off")
    end
  end)

  it("C = 3, F = 2: the Monte Carlo ELL and predict_y of f = W g, against plain Lua", function()
    local lik = L.softmax{classes = 3, features = 2, mixing_weights = W32}
    local base = lik.base_samples()
    assert.are.equal(64, #base)
    assert.are.equal(2, #base[1])
    local Mt, Vt, yt = latents(6, 2, 3)
    local M, V, y = lt.tensor(Mt), lt.tensor(Vt), lt.tensor(yt)
    local ell = lik:expected_log_prob(y, M, V):totable()
    local P = lik:predict_y(M, V):totable()
    local lp = lik:log_prob(y, M):totable()
    local big = L.softmax{classes = 3, features = 2, mixing_weights = W32, samples = 4096, seed = 3}
    local ell_big = big:expected_log_prob(y, M, V):totable()
    for i = 1, #yt do
      close(ell[i], mc_ell(yt[i], Mt[i], Vt[i], W32, base), 1e-12, "ell " .. i)
      local want = mc_probabilities(Mt[i], Vt[i], W32, base)
      for c = 1, 3 do close(P[i][c], want[c], 1e-12, "P " .. i .. "," .. c) end
      close(P[i][1] + P[i][2] + P[i][3], 1, 1e-14, "row sum")
      local f = mix(W32, Mt[i])
      close(lp[i], f[yt[i]] - lse(f), 1e-14, "log_prob " .. i)
      -- an independent integral: 30² Gauss–Hermite nodes over the two latents
      local exact = gh_expect(function(fv) return fv[yt[i]] - lse(fv) end, Mt[i], Vt[i], W32, 30)
      assert.is_true(math.abs(ell_big[i] - exact) < 0.01,
                     string.format("point %d: 4096 samples %.6f, quadrature %.6f", i,
                                   ell_big[i], exact))
      assert.is_true(math.abs(ell[i] - exact) < 0.06,
                     string.format("point %d: 64 samples %.6f, quadrature %.6f", i, ell[i], exact))
    end
  end)

  it("F = 1: one latent, given as n×1 or as a vector (a one-latent model's)", function()
    local W = {{1.0}, {-0.5}, {0.25}}
    local lik = L.softmax{classes = 3, features = 1, mixing_weights = W}
    local Mt, Vt, yt = latents(5, 1, 3)
    local M, V, y = lt.tensor(Mt), lt.tensor(Vt), lt.tensor(yt)
    local ell = lik:expected_log_prob(y, M, V):totable()
    same_numbers(lik:expected_log_prob(y, M:reshape(5), V:reshape(5)), lt.tensor(ell), "vector")
    for i = 1, #yt do
      close(ell[i], mc_ell(yt[i], Mt[i], Vt[i], W, lik.base_samples()), 1e-12, "ell " .. i)
    end
    local x, labels = blobs(12, 3)
    local m = gp.variational{x = x, y = labels, kernel = gp.kernels.rbf{}, inducing = 4,
                             likelihood = lik}
    local P = m:predict_y(x)
    assert.are.same({12, 3}, P:shape())
    close(P:sum(), 12, 1e-12, "rows sum to 1")
  end)

  it("C = 2, F = 3: Gauss–Hermite on (w₁ − w₂)ᵀg, equal to a 3-d product rule", function()
    local lik = L.softmax{classes = 2, features = 3, mixing_weights = W23, nodes = 40}
    local Mt, Vt, yt = latents(5, 3, 2)
    local ell = lik:expected_log_prob(lt.tensor(yt), lt.tensor(Mt), lt.tensor(Vt)):totable()
    local P = lik:predict_y(lt.tensor(Mt), lt.tensor(Vt)):totable()
    for i = 1, #yt do
      local exact = gh_expect(function(f) return f[yt[i]] - lse(f) end, Mt[i], Vt[i], W23, 30)
      close(ell[i], exact, 1e-11, "ell " .. i)
      local p1 = gh_expect(function(f) return exp(f[1] - lse(f)) end, Mt[i], Vt[i], W23, 30)
      close(P[i][1], p1, 1e-11, "P " .. i)
      close(P[i][1] + P[i][2], 1, 1e-14, "row sum")
    end
  end)

  it("the ELL's gradient in M, V and W passes lt.gradcheck (C = 3 and 2)", function()
    for _, case in ipairs{{C = 3, F = 2, W = W32}, {C = 2, F = 3, W = W23}} do
      local lik = L.softmax{classes = case.C, features = case.F, samples = 16}
      local Mt, Vt, yt = latents(4, case.F, case.C)
      local y = lt.tensor(yt)
      local f = function(q)
        return lik:expected_log_prob(y, q.M, q.V:exp(), {mixing_weights = q.W}):sum()
      end
      local logV = lt.tensor(Vt):log()
      local ok, err = lt.gradcheck(f, {M = lt.tensor(Mt), V = logV, W = lt.tensor(case.W)},
                                   {rtol = 1e-6, atol = 1e-8})
      assert(ok, "C = " .. case.C .. ": " .. tostring(err))
    end
  end)

  it("initial W: GPyTorch's N(0, 1)/F, deterministic given the seed", function()
    local a = L.softmax{classes = 4, features = 3}:mixing_weights():totable()
    local b = L.softmax{classes = 4, features = 3}:mixing_weights():totable()
    local other = L.softmax{classes = 4, features = 3, seed = 2}:mixing_weights():totable()
    assert.are.same(a, b)
    assert.are_not.same(a, other)
    -- a wide draw has GPyTorch's spread: standard deviation 1/F
    local wide = L.softmax{classes = 20, features = 10}:mixing_weights():totable()
    local s, s2, count = 0, 0, 0
    for _, row in ipairs(wide) do
      for _, w in ipairs(row) do s, s2, count = s + w, s2 + w * w, count + 1 end
    end
    local mean, sd = s / count, sqrt(s2 / count - (s / count) ^ 2)
    assert.is_true(math.abs(mean) < 0.03, "mean " .. mean)
    assert.is_true(math.abs(sd - 0.1) < 0.02, "sd " .. sd)
  end)
end)

describe("gp.variational with softmax mixing weights", function()
  local x, y = blobs(45, 5)
  local function model(lik, extra)
    local spec = {x = x, y = y, kernel = gp.kernels.rbf{}, likelihood = lik, inducing = 6}
    for k, v in pairs(extra or {}) do spec[k] = v end
    return gp.variational(spec)
  end

  it("F = C with W = I fixed: today's ELBO, fit and predictions bit for bit", function()
    local plain = model(L.softmax{classes = 3})
    local mixed = model(L.softmax{classes = 3, features = 3, mixing_weights = lt.eye(3),
                                  fixed = {mixing_weights = true}})
    assert.is_nil(mixed:parameters().mixing_weights)
    assert.are.equal(plain:elbo(), mixed:elbo())
    plain:fit{epochs = 4, lr = 0.05, batch_size = 15}
    mixed:fit{epochs = 4, lr = 0.05, batch_size = 15}
    assert.are.equal(plain:elbo(), mixed:elbo())
    same_numbers(plain:parameters().mean, mixed:parameters().mean, "q mean")
    same_numbers(plain:predict_y(x), mixed:predict_y(x), "predict_y")
    -- learnt from W = I: the same bound at the start, W a leaf with a gradient
    local learnt = model(L.softmax{classes = 3, features = 3, mixing_weights = lt.eye(3)})
    assert.are.equal(model(L.softmax{classes = 3}):elbo(), learnt:elbo())
    local _, grads = learnt:elbo_and_grad()
    assert.are.same({3, 3}, grads.mixing_weights:shape())
    assert.is_true(grads.mixing_weights:abs():sum() > 0)
  end)

  it("F = 2 latents, C = 3: the ELBO is the plain-Lua ELL sum minus the whitened KL", function()
    local m = model(L.softmax{classes = 3, features = 2, mixing_weights = W32})
    local p = m:parameters()
    local shift = {}
    for i = 1, 6 do shift[i] = {0.4 * math.sin(i), 0.3 * math.cos(2 * i)} end
    p.mean = lt.tensor(shift)
    p.chol = p.chol * 0.7
    m:set_parameters(p)
    local mean, var = m:predict(x)
    assert.are.same({45, 2}, mean:shape())
    local base = m.likelihood.base_samples()
    local Mt, Vt, ell = mean:totable(), var:totable(), 0
    for i = 1, #y do ell = ell + mc_ell(y[i], Mt[i], Vt[i], W32, base) end
    local kl = whitened_kl(p.mean:totable(), m:parameters().chol:totable())
    close(m:elbo(), ell - kl, 1e-11, "ELBO")
    -- q(u) and posterior: one lt.mvn per latent g_j
    assert.are.equal(2, #m:variational_distribution())
    assert.are.equal(2, #m:posterior(lt.tensor(x):narrow(1, 1, 3)))
  end)

  it("every gradient passes lt.gradcheck, W free, bounded and under a prior", function()
    local cases = {
      {lik = {classes = 3, features = 2}, extra = {}},
      {lik = {classes = 3, features = 4}, extra = {whiten = false}},
      {lik = {classes = 3, features = 2}, extra = {distribution = "meanfield"}},
      {lik = {classes = 2, features = 3}, extra = {}},
      {lik = {classes = 3, features = 2},
       extra = {bounds = {mixing_weights = {-3, 3}},
                priors = {mixing_weights = gp.priors.normal(0, 1)}}},
    }
    for k, case in ipairs(cases) do
      case.lik.samples = 16
      local labels = y
      if case.lik.classes == 2 then
        labels = {}
        for i, c in ipairs(y) do labels[i] = c == 3 and 2 or 1 end
      end
      local spec = {x = x, y = labels, kernel = gp.kernels.rbf{}, inducing = 5,
                    likelihood = L.softmax(case.lik)}
      for key, v in pairs(case.extra) do spec[key] = v end
      local m = gp.variational(spec)
      local p = m:parameters()
      assert.is_truthy(p.mixing_weights or p.raw_mixing_weights, "case " .. k)
      p.mean = p.mean + 0.3
      m:set_parameters(p)
      local f, q = m:objective({1, 4, 7, 9, 17}, {posterior = true})
      local ok, err = lt.gradcheck(f, q, {rtol = 1e-5, atol = 1e-6})
      assert(ok, "case " .. k .. ": gradcheck " .. tostring(err))
    end
  end)

  it("bounds and a prior on mixing_weights: raw_ keys, the log posterior in plain Lua", function()
    local m = model(L.softmax{classes = 3, features = 2, mixing_weights = W32},
                    {bounds = {mixing_weights = {-1, 1}},
                     priors = {mixing_weights = gp.priors.normal(0, 0.5)}})
    local p = m:parameters()
    assert.is_nil(p.mixing_weights)
    -- θ = lo + (hi − lo)σ(r): r = log((θ + 1)/(1 − θ))
    close(p.raw_mixing_weights:get(1, 2), log((1 - 0.3) / (1 + 0.3)), 1e-12, "raw")
    local lp = 0
    for _, row in ipairs(W32) do
      for _, w in ipairs(row) do lp = lp - 0.5 * log(2 * math.pi * 0.25) - w * w / 0.5 end
    end
    close(m:log_posterior(), m:elbo() + lp, 1e-11, "log posterior")
    m:fit{epochs = 30, lr = 0.1}
    for _, row in ipairs(m.likelihood:mixing_weights():totable()) do
      for _, w in ipairs(row) do assert.is_true(w > -1 and w < 1, "inside the bounds") end
    end
  end)

  it("fits three blobs with two mixed latents: W learnt, held-out accuracy > 0.85", function()
    local xt, yt = blobs(240, 99)
    local m = model(L.softmax{classes = 3, features = 2})
    local W0 = m.likelihood:mixing_weights()
    local before = m:elbo()
    local result = m:fit{lr = 0.05, epochs = 120}
    assert.is_true(result.elbo > before + 15, "ELBO " .. before .. " → " .. result.elbo)
    assert.is_true((m.likelihood:mixing_weights() - W0):abs():sum() > 0.1, "W moved")
    local P = m:predict_y(xt):totable()
    local correct = 0
    for i, row in ipairs(P) do
      local best = 1
      for c = 2, 3 do if row[c] > row[best] then best = c end end
      if best == yt[i] then correct = correct + 1 end
      close(row[1] + row[2] + row[3], 1, 1e-13, "row sum")
    end
    assert.is_true(correct / #yt > 0.85, "accuracy " .. correct / #yt)
    assert.is_truthy(m:describe():find("2 features mixed by W (learnt)", 1, true), m:describe())
  end)

  it("bad input: clear lazytensor errors, the model untouched", function()
    local function fails(pattern, fn)
      local ok, err = pcall(fn)
      assert.is_false(ok)
      assert.is_truthy(tostring(err):find("lazytensor:", 1, true), tostring(err))
      assert.is_truthy(tostring(err):find(pattern, 1, true), tostring(err))
    end
    fails("features must be a positive whole number", function()
      L.softmax{classes = 3, features = 0} end)
    fails("features must be a positive whole number", function()
      L.softmax{classes = 3, features = 2.5} end)
    fails("features must be a positive whole number", function()
      L.softmax{classes = 3, features = "2"} end)
    fails("mixing must be true or false", function() L.softmax{classes = 3, mixing = 1} end)
    fails("need features = F", function() L.softmax{classes = 3, mixing = true} end)
    fails("features = 2 must be classes = 3", function()
      L.softmax{classes = 3, features = 2, mixing = false} end)
    fails("mixing_weights must be 3×2", function()
      L.softmax{classes = 3, features = 2, mixing_weights = lt.eye(2)} end)
    fails("mixing_weights must be 3×2", function()
      L.softmax{classes = 3, features = 2, mixing_weights = {1, 2, 3}} end)
    fails("not a finite number", function()
      L.softmax{classes = 2, features = 1, mixing_weights = {{1}, {0 / 0}}} end)
    fails("fixed.mixing_weights needs", function()
      L.softmax{classes = 3, fixed = {mixing_weights = true}} end)
    fails("bernoulli has one latent function", function() L.bernoulli{features = 2} end)
    fails("bernoulli has one latent function", function() L.bernoulli{mixing = true} end)
    fails("poisson has one latent function", function()
      L.poisson{mixing_weights = {{1}}} end)
    local lik = L.softmax{classes = 3, features = 2, mixing_weights = W32}
    fails("must be 3×2", function() lik:set_mixing_weights(lt.eye(3)) end)
    assert.are.same(W32, lik:mixing_weights():totable())
    fails("has no mixing weights", function() L.softmax{classes = 3}:set_mixing_weights(W32) end)
    fails("n×2 matrices", function()
      lik:expected_log_prob(lt.tensor{1}, lt.zeros(1, 3), lt.ones(1, 3)) end)
    -- a prior of positive support on the real-valued W
    fails("real-valued", function()
      model(lik, {priors = {mixing_weights = gp.priors.gamma(2, 1)}}) end)
    fails("bounds.mixing_weights", function()
      model(lik, {bounds = {mixing_weights = {1, 0}}}) end)
    fails("fixed", function()
      model(L.softmax{classes = 3, features = 2, fixed = {mixing_weights = true}},
            {bounds = {mixing_weights = {-5, 5}}}) end)
    -- set_parameters: W of the wrong shape, raw without bounds, W on a plain model
    local m = model(lik)
    local before, W_before = m:elbo(), m.likelihood:mixing_weights():totable()
    local p = m:parameters()
    p.mean = p.mean + 1
    p.mixing_weights = lt.eye(2)
    fails("mixing_weights must be a 3×2 tensor", function() m:set_parameters(p) end)
    p.mixing_weights, p.raw_mixing_weights = nil, lt.tensor(W32)
    fails("raw_mixing_weights needs bounds.mixing_weights", function() m:set_parameters(p) end)
    assert.are.equal(before, m:elbo())
    assert.are.same(W_before, m.likelihood:mixing_weights():totable())
    local plain = model(L.softmax{classes = 3})
    local q = plain:parameters()
    q.mixing_weights = lt.tensor(W32)
    fails("has no mixing weights", function() plain:set_parameters(q) end)
    fails("natural gradients", function() m:fit{natural_gradient = true, epochs = 1} end)
    assert.are.equal(before, m:elbo())
  end)
end)
