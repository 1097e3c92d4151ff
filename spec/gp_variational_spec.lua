-- gp.variational (SVGP) against independent references: the exact GP's
-- MLL (Z = x at the optimal q: the bound is tight), gp.sgpr's collapsed
-- Titsias bound (m < n at the optimal q), and the bound written out in
-- plain Lua (kernel, Cholesky and solves by loops) at a given q; every
-- gradient through lt.gradcheck.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ref = require "support.ref"
local close = ref.close

local log, exp, pi = math.log, math.exp, math.pi

local function data(n)
  local x, y = {}, {}
  for i = 1, n do
    x[i] = {i * 0.2}
    y[i] = math.sin(i * 0.3) + 0.1 * math.cos(7 * i)
  end
  return x, y
end

-- The optimal whitened q for a Gaussian likelihood (σ²) and zero mean:
-- S = (I + A·Aᵀ/σ²)⁻¹, μ = S·A·y/σ², A = Lz⁻¹·Kzx.
local function optimal_q(model, kspec, noise, x, y)
  local Lz = model:prior_factor()
  local A = lt.triangular(Lz, "lower"):solve(lt.kernel(model.Z, lt.tensor(x), kspec):dense())
  local S = lt.psd(lt.eye(model.m) + A * A:t() * (1 / noise)):inverse():dense()
  S = (S + S:t()) * 0.5
  local mu = S * (A * lt.tensor(y)) * (1 / noise)
  return mu, lt.psd(S):cholesky():dense(), Lz
end

---------------------------------------------------- plain-Lua reference --

local function rbf(l, v, a, b)
  local r2 = 0
  for q = 1, #a do r2 = r2 + ((a[q] - b[q]) / l[q]) ^ 2 end
  return v * exp(-0.5 * r2)
end

local function forward(L, b) -- L⁻¹b
  local out = {}
  for i = 1, #L do
    local s = b[i]
    for k = 1, i - 1 do s = s - L[i][k] * out[k] end
    out[i] = s / L[i][i]
  end
  return out
end

local function backward(L, b) -- L⁻ᵀb
  local out = {}
  for i = #L, 1, -1 do
    local s = b[i]
    for k = i + 1, #L do s = s - L[k][i] * out[k] end
    out[i] = s / L[i][i]
  end
  return out
end

-- The ELBO in plain Lua: r = {l (lengthscales), v, jitter, Z, X, y, mu, L,
-- whiten, lik = "gaussian" | "poisson", noise, constant, idx, num_data,
-- data_jitter (added to k(x, x), default 0)}.
local function ref_elbo(r)
  local m = #r.Z
  local Kzz = {}
  for i = 1, m do
    Kzz[i] = {}
    for j = 1, m do Kzz[i][j] = rbf(r.l, r.v, r.Z[i], r.Z[j]) + (i == j and r.jitter or 0) end
  end
  local Lz = ref.cholesky(Kzz)
  local ell = 0
  for _, i in ipairs(r.idx) do
    local k = {}
    for j = 1, m do k[j] = rbf(r.l, r.v, r.Z[j], r.X[i]) end
    local a = forward(Lz, k)
    local proj = r.whiten and a or backward(Lz, a)
    local mean, var = r.constant, r.v + (r.data_jitter or 0)
    for j = 1, m do
      mean = mean + proj[j] * r.mu[j]
      var = var - a[j] ^ 2
      local t = 0
      for q = j, m do t = t + r.L[q][j] * proj[q] end -- (Lᵀproj)_j
      var = var + t * t
    end
    local y = r.y[i]
    if r.lik == "gaussian" then
      ell = ell - 0.5 * log(2 * pi * r.noise) - ((y - mean) ^ 2 + var) / (2 * r.noise)
    else
      local lf = 0
      for q = 2, y do lf = lf + log(q) end
      ell = ell + y * mean - exp(mean + var / 2) - lf
    end
  end
  local trS, mm, logdetS = 0, 0, 0
  for i = 1, m do
    logdetS = logdetS + 2 * log(math.abs(r.L[i][i]))
  end
  if r.whiten then
    for i = 1, m do
      mm = mm + r.mu[i] ^ 2
      for j = 1, m do trS = trS + r.L[i][j] ^ 2 end
    end
    return r.num_data / #r.idx * ell - 0.5 * (trS + mm - m - logdetS)
  end
  local a = forward(Lz, r.mu)
  for i = 1, m do mm = mm + a[i] ^ 2 end
  for j = 1, m do
    local col = {}
    for i = 1, m do col[i] = r.L[i][j] end
    for _, w in ipairs(forward(Lz, col)) do trS = trS + w * w end
  end
  local logdetK = 0
  for i = 1, m do logdetK = logdetK + 2 * log(Lz[i][i]) end
  return r.num_data / #r.idx * ell - 0.5 * (trS + mm - m + logdetK - logdetS)
end

local function fails(f, pattern)
  local ok, err = pcall(f)
  assert.is_false(ok)
  assert.truthy(tostring(err):find("^lazytensor:"), tostring(err))
  assert.truthy(tostring(err):find(pattern), tostring(err))
end

describe("gp.variational", function()
  local kspec = {kind = "matern52", lengthscale = 0.8, variance = 1.3}

  it("with Z = x and the optimal q, the bound is the exact MLL (and so is its gradient)", function()
    local x, y = data(30)
    local noise = 0.1
    local model = gp.variational{x = x, y = y, kernel = gp.kernels.matern52{lengthscale = 0.8,
      variance = 1.3}, likelihood = gp.likelihoods.gaussian{noise = noise}, inducing = x,
      mean = "zero", jitter = 1e-9, bounds = {noise = {0, math.huge}}} -- log σ², as gp.exact's
    model:set_variational(optimal_q(model, kspec, noise, x, y))
    local exact = gp.exact{x = x, y = y, kernel = gp.kernels.matern52{lengthscale = 0.8,
      variance = 1.3}, noise = noise, mean = "zero"}
    local mll, grad = exact:mll_and_grad()
    close(model:elbo(), mll, 0, "ELBO vs exact MLL", 1e-6)
    -- q optimal: the bound's hyperparameter gradient is the MLL's (envelope)
    local _, g = model:elbo_and_grad()
    close(g.kernel.log_lengthscale, grad[1], 1e-5, "d/dlog lengthscale")
    close(g.kernel.log_variance, grad[2], 1e-5, "d/dlog variance")
    close(g.likelihood.log_noise, grad[3], 1e-5, "d/dlog noise")
  end)

  it("with m < n at the optimal q, the bound is gp.sgpr's collapsed (Titsias) bound", function()
    local x, y = data(40)
    local Z = {{0.3}, {1.7}, {3.1}, {4.4}, {6.0}, {7.9}}
    local noise = 0.05
    for _, whiten in ipairs{true, false} do
      local model = gp.variational{x = x, y = y, kernel = gp.kernels.matern52{lengthscale = 0.8,
        variance = 1.3}, likelihood = gp.likelihoods.gaussian{noise = noise}, inducing = Z,
        mean = "zero", jitter = 1e-6, whiten = whiten}
      local mu, L, Lz = optimal_q(model, kspec, noise, x, y)
      if not whiten then mu, L = Lz * mu, Lz * L end -- u = Lz·v
      model:set_variational(mu, L)
      local sgpr = gp.sgpr{x = x, y = y, kernel = gp.kernels.matern52{lengthscale = 0.8,
        variance = 1.3}, noise = noise, mean = "zero", inducing = Z, jitter = 1e-6}
      close(model:elbo(), sgpr:mll(), 0, "ELBO vs Titsias (whiten " .. tostring(whiten) .. ")",
            1e-6)
      -- and any other q is worse
      local mu2 = mu:clone()
      mu2:set(1, mu:get(1) + 0.1)
      model:set_variational(mu2, L)
      assert.is_true(model:elbo() < sgpr:mll())
    end
  end)

  it("one natural-gradient step of size 1 (Gaussian, all rows) lands on the optimal q", function()
    local x, y = data(40)
    local Z = {{0.3}, {1.7}, {3.1}, {4.4}, {6.0}, {7.9}}
    local sgpr = gp.sgpr{x = x, y = y, kernel = gp.kernels.matern52{lengthscale = 0.8,
      variance = 1.3}, noise = 0.05, mean = "zero", inducing = Z, jitter = 1e-6}
    for _, whiten in ipairs{true, false} do
      local k = gp.kernels.matern52{lengthscale = 0.8, variance = 1.3,
                                    fixed = {lengthscale = true, variance = true}}
      local model = gp.variational{x = x, y = y, kernel = k, inducing = Z, mean = "zero",
        likelihood = gp.likelihoods.gaussian{noise = 0.05, fixed = {noise = true}},
        jitter = 1e-6, whiten = whiten, fixed = {inducing = true}}
      assert.is_true(model:elbo() < sgpr:mll() - 100)
      model:fit{natural_gradient = true, natural_lr = 1, epochs = 1}
      close(model:elbo(), sgpr:mll(), 1e-10, "after one step (whiten " .. tostring(whiten) .. ")")
    end
    -- with the hyperparameters learnt by Adam beside it, minibatches of 10
    local model = gp.variational{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.5},
                                 likelihood = gp.likelihoods.gaussian{noise = 0.5}, inducing = 8}
    local before = model:elbo()
    local res = model:fit{natural_gradient = true, natural_lr = 0.2, lr = 0.05, epochs = 30,
                          batch_size = 10}
    assert.is_true(res.elbo > before + 20, string.format("%g -> %g", before, res.elbo))
    fails(function()
      gp.variational{x = x, y = y, kernel = gp.kernels.rbf{}, inducing = 4,
                     likelihood = gp.likelihoods.gaussian{}, distribution = "meanfield"}
        :fit{natural_gradient = true}
    end, "cholesky")
    fails(function() model:fit{natural_gradient = true, natural_lr = 2} end, "natural_lr")
  end)

  it("sums, products and scales of kernels: Titsias's bound at the optimal q, gradcheck", function()
    local x, y = data(40)
    local Z = {{0.3}, {1.7}, {3.1}, {4.4}, {6.0}, {7.9}}
    local function sum_kernel()
      return gp.kernels.rbf{lengthscale = 2, variance = 0.7}
             + gp.kernels.matern52{lengthscale = 0.6, variance = 0.4}
    end
    local model = gp.variational{x = x, y = y, kernel = sum_kernel(), inducing = Z, mean = "zero",
      likelihood = gp.likelihoods.gaussian{noise = 0.05}, jitter = 1e-6}
    local p = model:parameters()
    assert.truthy(p.kernel.log_k1_lengthscale and p.kernel.log_k2_variance)
    -- the optimal whitened q, A = Lz⁻¹Kzx with the sum's Kzx
    local Lz = model:prior_factor()
    local Kzx = lt.kernel(model.Z, lt.tensor(x), {kind = "rbf", lengthscale = 2, variance = 0.7})
                  :dense()
                + lt.kernel(model.Z, lt.tensor(x), {kind = "matern52", lengthscale = 0.6,
                                                    variance = 0.4}):dense()
    local A = lt.triangular(Lz, "lower"):solve(Kzx)
    local S = lt.psd(lt.eye(6) + A * A:t() * (1 / 0.05)):inverse():dense()
    S = (S + S:t()) * 0.5
    model:set_variational(S * (A * lt.tensor(y)) * (1 / 0.05), lt.psd(S):cholesky():dense())
    local sgpr = gp.sgpr{x = x, y = y, kernel = sum_kernel(), noise = 0.05, mean = "zero",
                         inducing = Z, jitter = 1e-6}
    close(model:elbo(), sgpr:mll(), 0, "sum kernel: ELBO vs Titsias", 1e-6)
    -- a product with a scale factor, and ARD, through lt.gradcheck
    local k = gp.kernels.scale(gp.kernels.rbf{lengthscale = {1.1}, fixed = {variance = true}}, 1.5)
              * gp.kernels.periodic{period = 3}
    local prod = gp.variational{x = x, y = y, kernel = k, inducing = Z,
                                likelihood = gp.likelihoods.gaussian{noise = 0.1}}
    local f, q = prod:objective({1, 7, 20, 33})
    assert.truthy(q.kernel.log_k1_variance and q.kernel.log_k2_lengthscale)
    assert.is_nil(q.kernel.log_k2_variance) -- fixed
    local ok, err = lt.gradcheck(f, q)
    assert(ok, "gradcheck " .. tostring(err))
    -- the prior variance k(x, x) = 1.5·1·1 and a fit writes back into the leaves
    local _, var = prod:predict{{1e6}}
    close(var:get(1), 1.5, 1e-9, "prior variance far away")
    prod:fit{lr = 0.05, epochs = 5}
    assert.are_not.equal(1.5, k.children[1].children[1].values.variance)
  end)

  it("dims: a sum of kernels over different columns equals gp.sgpr's bound", function()
    local X = ref.scattered(30, 2, 5, 4)
    local y = {}
    for i = 1, 30 do y[i] = math.sin(X[i][1]) + 0.5 * math.cos(2 * X[i][2]) end
    local Z = ref.scattered(7, 2, 9, 4)
    local function k()
      return gp.kernels.rbf{lengthscale = 1.2, dims = {1}}
             + gp.kernels.matern52{lengthscale = 0.9, variance = 0.5, dims = {2}}
    end
    local model = gp.variational{x = X, y = y, kernel = k(), inducing = Z, mean = "zero",
      likelihood = gp.likelihoods.gaussian{noise = 0.1}, jitter = 1e-6}
    local Lz = model:prior_factor()
    local Kzx = require("lazytensor.gp.ltkernel").evaluator(k()):matrix(model.Z, lt.tensor(X))
    local A = lt.triangular(Lz, "lower"):solve(Kzx)
    local S = lt.psd(lt.eye(7) + A * A:t() * 10):inverse():dense()
    S = (S + S:t()) * 0.5
    model:set_variational(S * (A * lt.tensor(y)) * 10, lt.psd(S):cholesky():dense())
    local sgpr = gp.sgpr{x = X, y = y, kernel = k(), noise = 0.1, mean = "zero", inducing = Z,
                         jitter = 1e-6}
    close(model:elbo(), sgpr:mll(), 0, "dims: ELBO vs Titsias", 1e-6)
    local f, p = model:objective({3, 8, 21})
    local ok, err = lt.gradcheck(f, p)
    assert(ok, "gradcheck " .. tostring(err))
    fails(function()
      gp.variational{x = X, y = y, kernel = gp.kernels.rbf{dims = {3}}, inducing = 3,
                     likelihood = gp.likelihoods.gaussian{}}
    end, "dimension")
  end)

  it("the bound at a given q equals a plain-Lua computation", function()
    local X = ref.scattered(12, 2, 7, 3)
    local Z = ref.scattered(4, 2, 11, 3)
    local ys = {}
    local counts = {}
    for i = 1, 12 do
      ys[i] = math.sin(X[i][1]) - X[i][2] * 0.3
      counts[i] = (i * 7) % 5
    end
    local mu = {0.3, -0.2, 0.5, 0.1}
    local L = {{0.9, 0, 0, 0}, {0.2, 0.7, 0, 0}, {-0.1, 0.3, 0.8, 0}, {0.05, -0.2, 0.1, 0.6}}
    local idx = {2, 5, 6, 11}
    for _, whiten in ipairs{true, false} do
      for _, lik in ipairs{"gaussian", "poisson"} do
        for _, dist in ipairs{"cholesky", "meanfield"} do
          local Lq = L
          if dist == "meanfield" then
            Lq = {}
            for i = 1, 4 do
              Lq[i] = {0, 0, 0, 0}
              Lq[i][i] = L[i][i]
            end
          end
          local likelihood = lik == "gaussian" and gp.likelihoods.gaussian{noise = 0.2}
                             or gp.likelihoods.poisson{}
          local y = lik == "gaussian" and ys or counts
          local model = gp.variational{x = X, y = y,
            kernel = gp.kernels.rbf{lengthscale = {0.9, 1.4}, variance = 0.8},
            likelihood = likelihood, inducing = Z, whiten = whiten, distribution = dist,
            mean_value = 0.25, num_data = 100, jitter = 1e-5}
          local diag = {}
          for i = 1, 4 do diag[i] = L[i][i] end
          model:set_variational(mu, dist == "meanfield" and diag or L)
          local r = {l = {0.9, 1.4}, v = 0.8, jitter = 1e-5, Z = Z, X = X, y = y, mu = mu, L = Lq,
                     whiten = whiten, lik = lik, noise = 0.2, constant = 0.25, num_data = 100}
          local what = string.format("%s %s whiten=%s", lik, dist, tostring(whiten))
          r.idx = idx
          close(model:elbo(idx), ref_elbo(r), 1e-11, what .. " minibatch")
          r.idx = {}
          for i = 1, 12 do r.idx[i] = i end
          close(model:elbo(), ref_elbo(r), 1e-11, what .. " all rows")
          -- and over blocks of 5, 5 and 2 rows
          local module = require "lazytensor.gp.variational"
          local saved = module.block_entries
          module.block_entries = 5 * 4
          local blocked = model:elbo()
          module.block_entries = saved
          close(blocked, ref_elbo(r), 1e-11, what .. " all rows, in blocks")
        end
      end
    end
  end)

  it("data_jitter (GPyTorch's jitter on k(x, x)) enters q(f): the bound, predict, posterior",
     function()
    local X = ref.scattered(10, 2, 5, 3)
    local Z = ref.scattered(4, 2, 13, 3)
    local y = {}
    for i = 1, 10 do y[i] = math.cos(X[i][1]) + 0.2 * X[i][2] end
    local mu = {0.2, -0.4, 0.1, 0.3}
    local L = {{0.8, 0, 0, 0}, {0.1, 0.6, 0, 0}, {-0.2, 0.1, 0.7, 0}, {0.1, 0.05, -0.1, 0.5}}
    local idx = {1, 4, 7, 8, 10}
    local function model_with(dj)
      local model = gp.variational{x = X, y = y,
        kernel = gp.kernels.rbf{lengthscale = {0.7, 1.1}, variance = 1.2},
        likelihood = gp.likelihoods.gaussian{noise = 0.05}, inducing = Z, mean_value = -0.1,
        jitter = 1e-6, data_jitter = dj}
      model:set_variational(mu, L)
      return model
    end
    local r = {l = {0.7, 1.1}, v = 1.2, jitter = 1e-6, Z = Z, X = X, y = y, mu = mu, L = L,
               whiten = true, lik = "gaussian", noise = 0.05, constant = -0.1, num_data = 10,
               idx = idx}
    for _, dj in ipairs{0, 1e-6, 0.03} do
      local model = model_with(dj)
      r.data_jitter = dj
      close(model:elbo(idx), ref_elbo(r), 1e-11, "data_jitter " .. dj)
    end
    -- the bound moves by −num_data/|B|·Σ δ/(2σ²) = −10·0.03/0.1 = −3
    close(model_with(0.03):elbo(idx) - model_with(0):elbo(idx), -3, 1e-9, "shift")
    local xs = {{0.3, 0.4}, {1.2, -0.5}}
    local _, v0 = model_with(0):predict(xs)
    local model = model_with(0.03)
    local _, v1 = model:predict(xs)
    local var_post = model:posterior(xs):variance()
    for i = 1, 2 do
      close(v1:get(i) - v0:get(i), 0.03, 1e-12, "predict's variance")
      close(var_post:get(i), v1:get(i), 1e-10, "posterior's variance")
    end
    fails(function() model_with(-1) end, "data_jitter must be a non%-negative number")
    fails(function() model_with(0 / 0) end, "data_jitter must be a non%-negative number")
  end)

  it("every gradient passes lt.gradcheck", function()
    local X = ref.scattered(10, 2, 3, 3)
    local Z = ref.scattered(3, 2, 5, 3)
    local y01, yr = {}, {}
    for i = 1, 10 do
      y01[i] = (X[i][1] > 1.5) and 1 or 0
      yr[i] = X[i][1] - X[i][2]
    end
    local cases = {
      {gp.likelihoods.gaussian{noise = 0.3}, yr, true, "cholesky", gp.kernels.rbf{lengthscale = {1, 1.5}}},
      {gp.likelihoods.gaussian{noise = 0.3}, yr, false, "cholesky", gp.kernels.matern32{}},
      {gp.likelihoods.bernoulli{link = "probit"}, y01, true, "meanfield", gp.kernels.rbf{}},
      {gp.likelihoods.bernoulli{link = "logit"}, y01, false, "cholesky", gp.kernels.matern52{}},
      {gp.likelihoods.student_t{df = 4, scale = 0.5}, yr, true, "cholesky",
       gp.kernels.rq{alpha = 2, lengthscale = 1.2}},
      {gp.likelihoods.gaussian{noise = 0.3}, yr, true, "cholesky", gp.kernels.periodic{period = 2}},
    }
    for c, case in ipairs(cases) do
      local model = gp.variational{x = X, y = case[2], kernel = case[5], likelihood = case[1],
                                   inducing = Z, whiten = case[3], distribution = case[4]}
      local m = model.m
      local mu, L = {}, {}
      for i = 1, m do
        mu[i] = 0.1 * i - 0.15
        L[i] = {}
        for j = 1, m do L[i][j] = i == j and 0.8 + 0.1 * i or (j < i and 0.1 * (i - j) or 0) end
      end
      local diag = {}
      for i = 1, m do diag[i] = L[i][i] end
      model:set_variational(mu, case[4] == "meanfield" and diag or L)
      local f, p = model:objective({1, 4, 7, 9})
      local ok, err = lt.gradcheck(f, p, {rtol = 1e-5, atol = 1e-6})
      assert(ok, "case " .. c .. ": gradcheck " .. tostring(err))
      assert.truthy(p.Z and p.kernel.log_variance and p.chol and p.mean and p.constant)
    end
  end)

  it("fit raises the bound, and predict agrees with posterior and q(u)", function()
    local x, y = data(40)
    local model = gp.variational{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.5},
                                 likelihood = gp.likelihoods.gaussian{noise = 0.5}, inducing = 8}
    local before = model:elbo()
    local seen = 0
    local res = model:fit{lr = 0.05, epochs = 60, batch_size = 10, seed = 3,
                          callback = function() seen = seen + 1 end}
    assert.equal(60, seen)
    assert.equal(240, res.steps)
    close(res.elbo, model:elbo(), 1e-14, "reported ELBO")
    assert.is_true(res.elbo > before + 20, string.format("%g -> %g", before, res.elbo))
    -- fitted predictions follow the data
    local mean, var = model:predict(x)
    local rss = 0
    for i = 1, 40 do rss = rss + (mean:get(i) - y[i]) ^ 2 end
    assert.is_true(rss / 40 < 0.05, "mse " .. rss / 40)
    local post = model:posterior(x)
    local pv = post:variance()
    for i = 1, 40, 7 do
      close(post:mean():get(i), mean:get(i), 1e-12, "posterior mean")
      close(pv:get(i), var:get(i), 1e-8, "posterior variance")
    end
    local ym, yv = model:predict_y(x)
    close(ym:get(3), mean:get(3), 1e-14, "predict_y mean")
    close(yv:get(3), var:get(3) + model.likelihood.params.noise, 1e-12, "predict_y variance")
    -- q(u) = q(f(Z)): its mean and variance are the latent's at Z
    local qu = model:variational_distribution()
    local zm, zv = model:predict(model:inducing())
    local quv = qu:variance()
    for i = 1, model.m do
      close(qu:mean():get(i), zm:get(i), 1e-4, "q(u) mean (up to the jitter)")
      close(quv:get(i), zv:get(i), 1e-3, "q(u) variance", 1e-5)
    end
  end)

  it("classifies (bernoulli) with minibatches", function()
    local x, y = {}, {}
    for i = 1, 60 do
      x[i] = {(i - 30) / 10}
      y[i] = (math.sin(x[i][1] * 2) + 0.3 * math.cos(13 * i) > 0) and 1 or 0
    end
    local model = gp.variational{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 1},
                                 likelihood = gp.likelihoods.bernoulli{}, inducing = 10}
    model:fit{lr = 0.05, epochs = 40, batch_size = 20}
    local p = model:predict_y(x)
    local right = 0
    for i = 1, 60 do
      if (p:get(i) > 0.5) == (y[i] == 1) then right = right + 1 end
    end
    assert.is_true(right >= 50, right .. " of 60 right")
  end)

  it("Student-t regression shrugs off outliers that pull a Gaussian fit", function()
    local x, y, truth = {}, {}, {}
    for i = 1, 50 do
      x[i] = {i * 0.15}
      truth[i] = math.sin(x[i][1])
      y[i] = truth[i] + 0.05 * math.cos(17 * i)
      if i % 10 == 5 then y[i] = y[i] + 4 end -- five gross outliers
    end
    local function error_of(lik)
      local model = gp.variational{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 1},
                                   likelihood = lik, inducing = 12, mean = "zero"}
      model:fit{lr = 0.05, epochs = 150}
      local mean = model:predict(x)
      local worst = 0
      for i = 1, 50 do worst = math.max(worst, math.abs(mean:get(i) - truth[i])) end
      return worst
    end
    local t = error_of(gp.likelihoods.student_t{df = 3, scale = 0.1})
    local g = error_of(gp.likelihoods.gaussian{noise = 0.1})
    assert.is_true(t < 0.2 and g > 2 * t, string.format("student_t %g, gaussian %g", t, g))
  end)

  it("Poisson regression recovers the rate of counts", function()
    -- counts drawn from rate e^{f(x)}, f = 1 + sin x, by inversion with a fixed LCG
    local x, y, seed = {}, {}, 7
    local function rnd()
      seed = (seed * 1103515245 + 12345) % 2147483648
      return seed / 2147483648
    end
    for i = 1, 120 do
      x[i] = {i * 0.05}
      local rate, u, k = math.exp(1 + math.sin(x[i][1])), rnd(), 0
      local p = math.exp(-rate)
      local c = p
      while u > c do
        k = k + 1
        p = p * rate / k
        c = c + p
      end
      y[i] = k
    end
    local model = gp.variational{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 1},
                                 likelihood = gp.likelihoods.poisson{}, inducing = 10}
    model:fit{lr = 0.05, epochs = 150}
    local rate = model:predict_y{{1.5}, {4.7}}
    -- e^{1 + sin 1.5} = 7.36, e^{1 + sin 4.7} = 1.00
    close(rate:get(1), math.exp(1 + math.sin(1.5)), 0.2, "rate at 1.5")
    close(rate:get(2), math.exp(1 + math.sin(4.7)), 0.4, "rate at 4.7")
  end)

  it("bad input is a clear error and leaves the model untouched", function()
    local x, y = data(10)
    local lik = gp.likelihoods.gaussian{noise = 0.1}
    local k = gp.kernels.rbf{}
    fails(function() gp.variational{x = x, y = y, kernel = k, likelihood = lik, inducing = 11} end,
          "from 1 to n")
    local Z = {}
    for i = 1, 11 do Z[i] = {i} end
    fails(function() gp.variational{x = x, y = y, kernel = k, likelihood = lik, inducing = Z} end,
          "m > n")
    local xbad = {}
    for i = 1, 10 do xbad[i] = {x[i][1]} end
    xbad[6][1] = 0 / 0
    fails(function() gp.variational{x = xbad, y = y, kernel = k, likelihood = lik, inducing = 3} end,
          "finite")
    local bad = {}
    for i = 1, 10 do bad[i] = y[i] end
    bad[4] = 0 / 0
    fails(function() gp.variational{x = x, y = bad, kernel = k, likelihood = lik, inducing = 3} end,
          "NaN")
    fails(function()
      gp.variational{x = x, y = y, kernel = k, likelihood = gp.likelihoods.bernoulli{},
                     inducing = 3}
    end, "0 or 1")
    fails(function() gp.variational{x = x, y = y, kernel = k, likelihood = {}, inducing = 3} end,
          "likelihood")
    fails(function()
      gp.variational{x = x, y = y, kernel = k, likelihood = lik, inducing = 3, distribution = "x"}
    end, "distribution")
    local model = gp.variational{x = x, y = y, kernel = k, likelihood = lik, inducing = 3}
    k.values.lengthscale = 0.123 -- a value e^{log θ} does not give back exactly
    lik.params.noise = 0.123
    local before = model:elbo()
    local fp = k:fingerprint()
    fails(function() model:fit{batch_size = 11} end, "batch_size")
    fails(function() model:fit{batch_size = 0} end, "batch_size")
    fails(function() model:fit{batch_size = -2} end, "batch_size")
    fails(function() model:fit{lr = -1} end, "lr")
    fails(function() model:fit{method = "lbfgs"} end, "adam")
    fails(function() model:fit{epocs = 3} end, "unknown")
    fails(function() model:elbo{0, 3} end, "idx")
    fails(function() model:set_variational({1, 2}, lt.eye(3)) end, "mean")
    -- a fit that fails halfway restores where it started
    local ok = pcall(model.fit, model, {epochs = 5, lr = 0.1, callback = function(epoch)
      if epoch == 2 then error("lazytensor: stop here", 0) end
    end})
    assert.is_false(ok)
    assert.equal(before, model:elbo())
    assert.equal(fp, k:fingerprint())
  end)
end)
