-- gp.likelihoods.softmax{classes} (multiclass, one latent function per
-- class) and its use in gp.variational, against plain-Lua references: the
-- Monte Carlo average over the likelihood's base samples written out with
-- math.*, a product Gauss–Hermite rule over the C = 3 latents, and for C = 2
-- the logistic identity softmax(f₁, f₂)₁ = σ(f₁ − f₂) (a bernoulli-logit
-- model whose one latent is f₁ − f₂); gradients through lt.gradcheck; a fit
-- on three Gaussian blobs; bad input.
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

-- m_y − (1/S) Σ_k log Σ_c e^{m_c + √v_c·ε_kc} for one point.
local function mc_ell(y, m, v, base)
  local total = 0
  for _, e in ipairs(base) do
    local f = {}
    for c = 1, #m do f[c] = m[c] + sqrt(v[c]) * e[c] end
    total = total + lse(f)
  end
  return m[y] - total / #base
end

-- The Monte Carlo estimate's standard error: the sample standard deviation
-- of the antithetic pairs' mean log Σ e^f over √(S/2).
local function standard_error(m, v, base)
  local pairs_mean = {}
  for k = 1, #base, 2 do
    local total = 0
    for j = k, k + 1 do
      local f = {}
      for c = 1, #m do f[c] = m[c] + sqrt(v[c]) * base[j][c] end
      total = total + lse(f) / 2
    end
    pairs_mean[#pairs_mean + 1] = total
  end
  local mean, ss = 0, 0
  for _, a in ipairs(pairs_mean) do mean = mean + a / #pairs_mean end
  for _, a in ipairs(pairs_mean) do ss = ss + (a - mean) ^ 2 end
  return sqrt(ss / (#pairs_mean - 1) / #pairs_mean)
end

-- E log softmax(f)_y for f ~ N(m, diag v), C = 3, by the product rule of k
-- Gauss–Hermite nodes per latent (k³ points).
local function gh3_ell(y, m, v, k)
  local x, w = L.gauss_hermite(k)
  local total = 0
  for a = 1, k do
    for b = 1, k do
      for c = 1, k do
        local f = {m[1] + sqrt(2 * v[1]) * x[a], m[2] + sqrt(2 * v[2]) * x[b],
                   m[3] + sqrt(2 * v[3]) * x[c]}
        total = total + w[a] * w[b] * w[c] * (f[y] - lse(f))
      end
    end
  end
  return total / math.pi ^ 1.5
end

-- Points in three Gaussian blobs (centres on a circle of radius 1.5,
-- standard deviation 0.6), classes 1, 2, 3 in turn, from Park–Miller's
-- generator (the same points on every Lua).
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

local M3 = {{0.3, -0.2, 1.0}, {2.0, 0.0, -1.0}, {-0.5, 0.4, 0.1}, {0.0, 0.0, 0.0}}
local V3 = {{0.5, 0.2, 0.1}, {1.0, 0.3, 0.7}, {0.05, 2.0, 0.4}, {1e-8, 1e-8, 1e-8}}
local Y3 = {1, 3, 2, 2}

describe("gp.likelihoods.softmax", function()
  it("C = 3: the Monte Carlo expected log-likelihood, and its convergence to quadrature", function()
    local lik = L.softmax{classes = 3}
    local base = lik.base_samples()
    assert.are.equal(64, #base)
    local y, M, V = lt.tensor(Y3), lt.tensor(M3), lt.tensor(V3)
    local ell = lik:expected_log_prob(y, M, V):totable()
    local big = L.softmax{classes = 3, samples = 4096, seed = 5}
    local ell_big = big:expected_log_prob(y, M, V):totable()
    for i = 1, #Y3 do
      close(ell[i], mc_ell(Y3[i], M3[i], V3[i], base), 1e-12, "same base samples " .. i)
      close(ell_big[i], mc_ell(Y3[i], M3[i], V3[i], big.base_samples()), 1e-12, "4096 " .. i)
      -- within 4 standard errors of the quadrature (measured: at most 0.85)
      local exact = gh3_ell(Y3[i], M3[i], V3[i], 20)
      local se = standard_error(M3[i], V3[i], base)
      local se_big = standard_error(M3[i], V3[i], big.base_samples())
      assert.is_true(math.abs(ell[i] - exact) <= 4 * se + 1e-9,
                     string.format("point %d, 64 samples: %.3g off, se %.3g", i, ell[i] - exact, se))
      assert.is_true(math.abs(ell_big[i] - exact) <= 4 * se_big + 1e-9,
                     string.format("point %d, 4096: %.3g off, se %.3g", i, ell_big[i] - exact,
                                   se_big))
      assert.is_true(se_big < se / 4 + 1e-12, "the error shrinks as 1/√S")
    end
    close(ell[4], -log(3), 1e-7, "no variance")
    -- no quadrature rule in 3 dimensions: asking for one is refused
    local ok, err = pcall(lik.expected_log_prob, lik, y, M, V, nil, {quadrature = true})
    assert.is_false(ok)
    assert.truthy(tostring(err):find("lazytensor: gp.likelihoods: softmax: no quadrature for 3", 1,
                                     true), tostring(err))
    -- deterministic: the same seed, the same numbers; another seed, others
    local again = L.softmax{classes = 3}:expected_log_prob(lt.tensor(Y3), lt.tensor(M3),
                                                          lt.tensor(V3)):totable()
    for i = 1, #Y3 do assert.are.equal(ell[i], again[i]) end
    local other = L.softmax{classes = 3, seed = 2}:expected_log_prob(lt.tensor(Y3),
                    lt.tensor(M3), lt.tensor(V3)):totable()
    assert.are_not.equal(ell[1], other[1])
    -- log_prob is log softmax(f)_y exactly
    local lp = lik:log_prob(lt.tensor(Y3), lt.tensor(M3)):totable()
    for i = 1, #Y3 do close(lp[i], M3[i][Y3[i]] - lse(M3[i]), 1e-14, "log_prob " .. i) end
  end)

  it("C = 3: predict_y is the average softmax over the base samples; rows sum to 1", function()
    local lik = L.softmax{classes = 3}
    local base = lik.base_samples()
    local P, var = lik:predict_y(lt.tensor(M3), lt.tensor(V3))
    P, var = P:totable(), var:totable()
    for i = 1, #M3 do
      local want, sum = {0, 0, 0}, 0
      for _, e in ipairs(base) do
        local f = {}
        for c = 1, 3 do f[c] = M3[i][c] + sqrt(V3[i][c]) * e[c] end
        local z = lse(f)
        for c = 1, 3 do want[c] = want[c] + exp(f[c] - z) / #base end
      end
      for c = 1, 3 do
        close(P[i][c], want[c], 1e-12, "probability")
        close(var[i][c], want[c] * (1 - want[c]), 1e-12, "variance")
        sum = sum + P[i][c]
      end
      close(sum, 1, 1e-14, "row sum")
    end
  end)

  it("C = 2: the logistic identity, E log σ(±(f₁ − f₂)) by quadrature, exactly", function()
    local lik = L.softmax{classes = 2}
    local logit = L.bernoulli{link = "logit"}
    local M = lt.tensor{{0.3, -0.2}, {2.0, 0.5}, {-1.0, 1.5}}
    local V = lt.tensor{{0.5, 0.2}, {1.0, 0.3}, {0.05, 2.0}}
    local y = lt.tensor{1, 2, 2}
    local g_mean = lt.tensor{0.5, 1.5, -2.5}
    local g_var = lt.tensor{0.7, 1.3, 2.05}
    local ell = lik:expected_log_prob(y, M, V):totable()
    local want = logit:expected_log_prob(lt.tensor{1, 0, 0}, g_mean, g_var):totable()
    for i = 1, 3 do close(ell[i], want[i], 1e-13, "ell " .. i) end
    local P = lik:predict_y(M, V):totable()
    local p1 = logit:predict_y(g_mean, g_var):totable()
    for i = 1, 3 do
      close(P[i][1], p1[i], 1e-13, "P(class 1)")
      close(P[i][1] + P[i][2], 1, 1e-15, "sum")
    end
  end)

  it("C = 2 in gp.variational: the ELBO's likelihood term is a bernoulli-logit model's", function()
    -- q(u₁) = N(μ₁, S), q(u₂) = N(μ₂, S) whitened with kernel k; then
    -- f₁ − f₂ has mean aᵀ(μ₁ − μ₂) and variance 2(k − ‖a‖² + ‖Lᵀa‖²): the
    -- latent of a whitened bernoulli model with kernel 2k and q(v) =
    -- N((μ₁ − μ₂)/√2, S) (a → √2·a).
    local x, y3 = blobs(24, 3)
    local y2, yb = {}, {}
    for i, c in ipairs(y3) do
      y2[i] = c == 1 and 1 or 2
      yb[i] = c == 1 and 1 or 0
    end
    local m = 6
    local soft = gp.variational{x = x, y = y2, kernel = gp.kernels.rbf{lengthscale = 0.8,
                                variance = 1.5}, likelihood = L.softmax{classes = 2},
                                inducing = m, mean = "zero"}
    local bern = gp.variational{x = x, y = yb, kernel = gp.kernels.rbf{lengthscale = 0.8,
                                variance = 3.0}, likelihood = L.bernoulli{link = "logit"},
                                inducing = m, mean = "zero"}
    local mu, diff, chol = {}, {}, {}
    for i = 1, m do
      mu[i] = {0.3 * math.sin(i), -0.4 * math.cos(2 * i)}
      diff[i] = (mu[i][1] - mu[i][2]) / sqrt(2)
      chol[i] = {}
      for j = 1, m do chol[i][j] = j < i and 0.1 * math.sin(i + j) or (j == i and 0.5 + 0.05 * i or 0) end
    end
    local both = {}
    for i = 1, m do
      both[i] = {}
      for j = 1, m do both[i][j], both[i][m + j] = chol[i][j], chol[i][j] end
    end
    soft:set_variational(mu, both)
    bern:set_variational(diff, chol)
    local Ms, Vs = soft:predict(x)
    local gm, gv = bern:predict(x)
    Ms, Vs, gm, gv = Ms:totable(), Vs:totable(), gm:totable(), gv:totable()
    for i = 1, #x do
      close(Ms[i][1] - Ms[i][2], gm[i], 1e-10, "f1 - f2 mean", 1e-12)
      close(Vs[i][1] + Vs[i][2], gv[i], 1e-10, "f1 - f2 variance")
    end
    local ell_soft = soft.likelihood:expected_log_prob(soft.y, soft:predict(x))
    local ell_bern = bern.likelihood:expected_log_prob(bern.y, bern:predict(x))
    close(ell_soft:sum(), ell_bern:sum(), 1e-11, "likelihood term")
    -- the ELBO = that term − Σ_c KL(q_c ‖ N(0, I)), the KLs in plain Lua:
    -- ½(tr S + μ_cᵀμ_c − m − log|S|) with S = L·Lᵀ
    local kl = 0
    for c = 1, 2 do
      local trace, logdet, quad = 0, 0, 0
      for i = 1, m do
        for j = 1, i do trace = trace + chol[i][j] ^ 2 end
        logdet = logdet + 2 * log(chol[i][i])
        quad = quad + mu[i][c] ^ 2
      end
      kl = kl + 0.5 * (trace + quad - m - logdet)
    end
    close(soft:elbo(), ell_soft:sum() - kl, 1e-11, "ELBO")
  end)

  it("every gradient passes lt.gradcheck (C = 2 and 3, cholesky and meanfield)", function()
    local x, y = blobs(30, 11)
    local y2 = {}
    for i, c in ipairs(y) do y2[i] = c == 3 and 2 or 1 end
    local cases = {
      {classes = 3, y = y, distribution = "cholesky", whiten = true},
      {classes = 3, y = y, distribution = "cholesky", whiten = false},
      {classes = 3, y = y, distribution = "meanfield", whiten = true},
      {classes = 2, y = y2, distribution = "cholesky", whiten = true},
    }
    for k, case in ipairs(cases) do
      local model = gp.variational{x = x, y = case.y, kernel = gp.kernels.rbf{},
                                   likelihood = L.softmax{classes = case.classes, samples = 16},
                                   inducing = 5, distribution = case.distribution,
                                   whiten = case.whiten}
      local p = model:parameters()
      -- away from the prior: a q whose mean and factor are not symmetric
      local shift = {}
      for i = 1, p.mean:size(1) do
        shift[i] = {}
        for c = 1, p.mean:size(2) do shift[i][c] = 0.3 * math.sin(3 * i + c) end
      end
      p.mean = p.mean + lt.tensor(shift)
      p.chol = p.chol * 0.8
      model:set_parameters(p)
      local f, q = model:objective({1, 4, 7, 9, 17})
      local ok, err = lt.gradcheck(f, q, {rtol = 1e-5, atol = 1e-6})
      assert(ok, "case " .. k .. ": gradcheck " .. tostring(err))
    end
  end)

  it("fits three Gaussian blobs: held-out accuracy > 0.9, probabilities summing to 1", function()
    local x, y = blobs(90, 7)
    local xt, yt = blobs(300, 99)
    local model = gp.variational{x = x, y = y, kernel = gp.kernels.rbf{},
                                 likelihood = L.softmax{classes = 3}, inducing = 12}
    local before = model:elbo()
    local result = model:fit{lr = 0.05, epochs = 150}
    assert.is_true(result.elbo > before + 50, "ELBO " .. before .. " → " .. result.elbo)
    local P = model:predict_y(xt):totable()
    local correct, nlpd, confidence = 0, 0, 0
    for i, row in ipairs(P) do
      local best = 1
      for c = 2, 3 do if row[c] > row[best] then best = c end end
      if best == yt[i] then correct = correct + 1 end
      close(row[1] + row[2] + row[3], 1, 1e-13, "row sum")
      nlpd = nlpd - log(row[yt[i]]) / #yt
      confidence = confidence + row[best] / #yt
    end
    local accuracy = correct / #yt
    -- measured: ELBO −125.98 → −25.83, accuracy 0.947, NLPD 0.158, mean
    -- confidence 0.910
    assert.is_true(accuracy > 0.9, "accuracy " .. accuracy)
    assert.is_true(nlpd < 0.3, "NLPD " .. nlpd)
    -- calibrated: the mean probability of the chosen class is near the accuracy
    assert.is_true(math.abs(confidence - accuracy) < 0.06,
                   "confidence " .. confidence .. " vs accuracy " .. accuracy)
    -- predict: latent means and variances per class; posterior: one mvn per class
    local mean, var = model:predict(xt)
    assert.are.same({300, 3}, mean:shape())
    assert.are.same({300, 3}, var:shape())
    local post = model:posterior(lt.tensor(xt):narrow(1, 1, 5))
    assert.are.equal(3, #post)
    for c = 1, 3 do
      local pm, pv = post[c]:mean():totable(), post[c]:variance():totable()
      for i = 1, 5 do
        close(pm[i], mean:get(i, c), 1e-10, "posterior mean", 1e-12)
        close(pv[i], var:get(i, c), 1e-8, "posterior variance")
      end
    end
    assert.are.equal(3, #model:variational_distribution())
    assert.is_truthy(model:describe():find("3 classes", 1, true))
  end)

  it("bad input: clear errors, the model untouched", function()
    local function fails(pattern, fn)
      local ok, err = pcall(fn)
      assert.is_false(ok)
      assert.is_truthy(tostring(err):find("lazytensor:", 1, true), tostring(err))
      assert.is_truthy(tostring(err):find(pattern, 1, true), tostring(err))
    end
    fails("classes", function() L.softmax{} end)
    fails("classes", function() L.softmax{classes = 1} end)
    fails("classes", function() L.softmax{classes = 2.5} end)
    fails("samples", function() L.softmax{classes = 3, samples = 7} end)
    fails("unknown key", function() L.softmax{classes = 3, links = "x"} end)
    local x = blobs(6, 1)
    local function build(y, extra)
      local spec = {x = x, y = y, kernel = gp.kernels.rbf{}, inducing = 3,
                    likelihood = L.softmax{classes = 3}}
      for k, v in pairs(extra or {}) do spec[k] = v end
      return gp.variational(spec)
    end
    fails("classes 1..3", function() build{1, 2, 3, 0, 1, 2} end)
    fails("classes 1..3", function() build{1, 2, 3, 4, 1, 2} end)
    fails("classes 1..3", function() build{1, 2, 3, 1.5, 1, 2} end)
    fails("NaN", function() build{1, 2, 3, 0 / 0, 1, 2} end)
    fails("mean_value", function() build({1, 2, 3, 1, 2, 3}, {mean_value = {1, 2}}) end)
    local model = build{1, 2, 3, 1, 2, 3}
    local before = model:elbo()
    fails("natural gradients", function() model:fit{natural_gradient = true, epochs = 1} end)
    local p = model:parameters()
    p.chol = lt.zeros(3, 3)
    fails("chol must be 3×9", function() model:set_parameters(p) end)
    p = model:parameters()
    p.constant = lt.tensor{1, 2}
    fails("mean_value", function() model:set_parameters(p) end)
    assert.are.equal(before, model:elbo())
    local lik = L.softmax{classes = 3}
    fails("n×3", function() lik:expected_log_prob(lt.tensor{1}, lt.tensor{0.1}, lt.tensor{1}) end)
  end)
end)
