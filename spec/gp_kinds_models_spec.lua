-- The linear, polynomial, cosine and spectral_mixture kernel kinds in
-- gp.variational and gp.laplace, against independent references: each
-- kind's formula written out in plain Lua (the models' K(x, x), k(x, z) and
-- k(x, x)), gp.sgpr's collapsed (Titsias) bound, which the ELBO equals at
-- the optimal q (gp.sgpr evaluates gp.kernels' own kernel code), the
-- ELBO's gradient through lt.gradcheck, the Laplace log q(y)'s gradient
-- against central differences with the mode found again at each point,
-- bounds and priors by name, and a short fit that raises each objective.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ltkernel = require "lazytensor.gp.ltkernel"
local ref = require "support.ref"
local close = ref.close

local K = gp.kernels
local exp, cos, pi, sqrt = math.exp, math.cos, math.pi, math.sqrt

---------------------------------------------------- plain-Lua formulas --

local function dot(a, b)
  local s = 0
  for q = 1, #a do s = s + a[q] * b[q] end
  return s
end

local formula = {}
function formula.linear(p, a, b) return p.variance * (dot(a, b) + p.offset) end
function formula.polynomial(p, a, b) return p.variance * (dot(a, b) + p.offset) ^ p.degree end
function formula.cosine(p, a, b)
  local r2 = 0
  for q = 1, #a do r2 = r2 + (a[q] - b[q]) ^ 2 end
  return p.variance * cos(pi * sqrt(r2) / p.period)
end
function formula.spectral_mixture(p, a, b)
  local total = 0
  for q = 1, #p.weights do
    local term = p.weights[q]
    for d = 1, #a do
      local tau = a[d] - b[d]
      term = term * exp(-2 * pi * pi * tau * tau * p.scales[q][d] ^ 2)
                  * cos(2 * pi * tau * p.means[q][d])
    end
    total = total + term
  end
  return total
end
local function rbf(p, a, b)
  local r2 = 0
  for q = 1, #a do r2 = r2 + ((a[q] - b[q]) / p.lengthscale[q]) ^ 2 end
  return p.variance * exp(-0.5 * r2)
end

-- Each case: a kernel maker, its plain-Lua k(a, b) and whether its inputs
-- are 1-d (cosine of a distance is PSD on the line only).
local CASES = {
  {name = "linear", one_d = false,
   make = function() return K.linear{variance = 1.3, offset = 0.4} end,
   k = function(a, b) return formula.linear({variance = 1.3, offset = 0.4}, a, b) end},
  {name = "polynomial", one_d = false,
   make = function() return K.polynomial{variance = 0.7, offset = 0.5, degree = 3} end,
   k = function(a, b)
     return formula.polynomial({variance = 0.7, offset = 0.5, degree = 3}, a, b)
   end},
  {name = "cosine", one_d = true,
   make = function() return K.cosine{period = 1.7, variance = 1.2} end,
   k = function(a, b) return formula.cosine({period = 1.7, variance = 1.2}, a, b) end},
  {name = "spectral_mixture", one_d = false,
   make = function()
     return K.spectral_mixture{num_mixtures = 2, weights = {0.5, 1.0},
                               means = {{0.3, 0.2}, {0.9, 0.5}}, scales = {{0.3, 0.2}, {0.6, 0.4}}}
   end,
   k = function(a, b)
     return formula.spectral_mixture({weights = {0.5, 1.0}, means = {{0.3, 0.2}, {0.9, 0.5}},
                                      scales = {{0.3, 0.2}, {0.6, 0.4}}}, a, b)
   end},
  -- a tree: rbf(ARD)·linear + 2·polynomial (dims: the polynomial reads column 2)
  {name = "tree", one_d = false,
   make = function()
     return K.product(K.rbf{lengthscale = {0.9, 1.4}}, K.linear{variance = 0.5, offset = 0.2})
            + K.scale(K.polynomial{degree = 2, offset = 1, dims = {2}}, 2.0)
   end,
   k = function(a, b)
     return rbf({lengthscale = {0.9, 1.4}, variance = 1}, a, b)
            * formula.linear({variance = 0.5, offset = 0.2}, a, b)
            + 2 * formula.polynomial({variance = 1, offset = 1, degree = 2}, {a[2]}, {b[2]})
   end},
}

---------------------------------------------------------------- data --

local function data(n, one_d)
  local x, y, labels = {}, {}, {}
  for i = 1, n do
    local t = (i - 1) / (n - 1) * 2 - 1
    x[i] = one_d and {t} or {t, 0.8 * math.sin(3 * t + 0.5)}
    y[i] = math.sin(2.5 * t) + 0.4 * t + 0.1 * math.cos(7 * i)
    labels[i] = (math.sin(3 * t) + 0.3 * math.cos(5 * i) > 0) and 1 or 0
  end
  return x, y, labels
end

local function max_abs_diff(M, f, A, B)
  local worst = 0
  for i = 1, #A do
    for j = 1, #B do worst = math.max(worst, math.abs(M[i][j] - f(A[i], B[j]))) end
  end
  return worst
end

local function gaussian(noise) return gp.likelihoods.gaussian{noise = noise} end

describe("new kernel kinds in gp.variational and gp.laplace", function()
  it("the models' kernel matrices and k(x, x) are each kind's formula", function()
    for _, c in ipairs(CASES) do
      local x = data(9, c.one_d)
      local z = data(4, c.one_d)
      local ev = ltkernel.evaluator(c.make())
      local X, Z = lt.tensor(x), lt.tensor(z)
      assert(max_abs_diff(ev:matrix(X):totable(), c.k, x, x) < 1e-12, c.name .. " K(x, x)")
      assert(max_abs_diff(ev:matrix(Z, X):totable(), c.k, z, x) < 1e-12, c.name .. " K(z, x)")
      local d = ev:diag(X):totable()
      for i = 1, #x do close(d[i], c.k(x[i], x[i]), 1e-12, c.name .. " k(x, x)", 1e-12) end
      -- gp.laplace's K (jitter on the diagonal) and its prior variance at test points
      local _, _, labels = data(9, c.one_d)
      local model = gp.laplace{x = x, y = labels, kernel = c.make(), jitter = 0,
                               likelihood = gp.likelihoods.bernoulli{}}
      assert(max_abs_diff(model:find_mode().K:totable(), c.k, x, x) < 1e-12, c.name .. " laplace")
    end
  end)

  it("gp.variational: the ELBO at the optimal q is gp.sgpr's Titsias bound; lt.gradcheck", function()
    for _, c in ipairs(CASES) do
      local x, y = data(24, c.one_d)
      local z = data(6, c.one_d)
      local noise = 0.05
      local model = gp.variational{x = x, y = y, kernel = c.make(), likelihood = gaussian(noise),
                                   inducing = z, mean = "zero", jitter = 1e-6}
      -- the optimal whitened q, A = Lz⁻¹·Kzx with the plain-Lua Kzx
      local Kzx = {}
      for i = 1, #z do
        Kzx[i] = {}
        for j = 1, #x do Kzx[i][j] = c.k(z[i], x[j]) end
      end
      local A = lt.triangular(model:prior_factor(), "lower"):solve(lt.tensor(Kzx))
      local S = lt.psd(lt.eye(#z) + A * A:t() * (1 / noise)):inverse():dense()
      S = (S + S:t()) * 0.5
      model:set_variational(S * (A * lt.tensor(y)) * (1 / noise), lt.psd(S):cholesky():dense())
      local sgpr = gp.sgpr{x = x, y = y, kernel = c.make(), noise = noise, mean = "zero",
                           inducing = z, jitter = 1e-6}
      close(model:elbo(), sgpr:mll(), 1e-7, c.name .. ": ELBO vs Titsias", 1e-6)
      -- the gradient (q, Z, every kernel hyperparameter) on a minibatch
      local f, p = model:objective({2, 5, 11, 17, 23})
      local ok, err = lt.gradcheck(f, p, {rtol = 1e-5, atol = 1e-6})
      assert(ok, c.name .. ": gradcheck " .. tostring(err))
    end
  end)

  it("gp.variational: every hyperparameter is in the parameter table and a fit raises the ELBO",
     function()
    for _, c in ipairs(CASES) do
      local x, y = data(24, c.one_d)
      local model = gp.variational{x = x, y = y, kernel = c.make(), likelihood = gaussian(0.1),
                                   inducing = 6}
      local before = model:elbo()
      local res = model:fit{epochs = 15, lr = 0.05}
      assert(res.elbo > before + 1, c.name .. ": " .. res.elbo .. " vs " .. before)
    end
    local x, y = data(24, false)
    local model = gp.variational{x = x, y = y, kernel = CASES[4].make() + K.linear{offset = 0.3},
                                 likelihood = gaussian(0.1), inducing = 6}
    local p = model:parameters()
    -- the mixture's 2×2 means and scales: flat lists of 4, as ARD's
    assert.are.same({4}, p.kernel.log_k1_means:shape())
    assert.are.same({4}, p.kernel.log_k1_scales:shape())
    assert.are.same({2}, p.kernel.log_k1_weights:shape())
    assert.truthy(p.kernel.log_k2_offset and p.kernel.log_k2_variance)
    local before = model:elbo()
    local res = model:fit{epochs = 30, lr = 0.05}
    assert(res.elbo > before + 1, res.elbo .. " vs " .. before)
    -- the fit wrote back into the kernel: still a 2×2 matrix, moved
    local means = model.kernel.children[1].values.means
    assert.are.equal(2, #means)
    assert.are.equal(2, #means[2])
    assert.are_not.equal(0.9, means[2][1])
  end)

  it("gp.laplace: log q(y)'s gradient is central differences of log q, for each kind",
     function()
    for _, c in ipairs(CASES) do
      local x, _, labels = data(16, c.one_d)
      local model = gp.laplace{x = x, y = labels, kernel = c.make(), tol = 1e-13,
                               likelihood = gp.likelihoods.bernoulli{link = "logit"}}
      local _, g = model:mll_and_grad()
      -- central differences of log q, the mode found again at each point
      ref.check_model_gradient(model, g, c.name)
    end
  end)

  it("gp.laplace: a short fit raises log q(y) for each kind", function()
    for _, c in ipairs(CASES) do
      local x, _, labels = data(16, c.one_d)
      local model = gp.laplace{x = x, y = labels, kernel = c.make(),
                               likelihood = gp.likelihoods.bernoulli{}}
      local before = model:mll()
      local res = model:fit{max_iter = 8}
      assert(res.mll > before + 1e-3, c.name .. ": " .. res.mll .. " vs " .. before)
      close(model:mll(), res.mll, 1e-10, c.name .. " stored")
    end
  end)

  it("bounds and priors by name on the new kinds' hyperparameters", function()
    local x, y, labels = data(16, false)
    local function kernel()
      return K.spectral_mixture{num_mixtures = 1, weights = {0.8}, means = {{0.4, 0.3}},
                                scales = {{0.5, 0.2}}} + K.polynomial{offset = 0.5, degree = 2}
    end
    local prior = gp.priors.lognormal(0, 1)
    local bounded = gp.laplace{x = x, y = labels, kernel = kernel(), tol = 1e-13,
                               likelihood = gp.likelihoods.bernoulli{},
                               bounds = {k2_offset = {0.1, 2}, k1_means = {0.01, 3}},
                               priors = {k1_scales = prior, k2_offset = prior}}
    local p = bounded:parameters()
    assert.truthy(p.raw_k2_offset and p.raw_k1_means and p.log_k1_scales)
    assert.is_nil(p.log_k2_offset)
    -- log_posterior = log q + the priors' log densities (plain Lua)
    local function lognormal_logpdf(v) return -math.log(v) - 0.5 * math.log(2 * pi)
                                              - 0.5 * math.log(v) ^ 2 end
    local want = bounded:mll() + lognormal_logpdf(0.5) + lognormal_logpdf(0.5)
                 + lognormal_logpdf(0.2)
    close(bounded:log_posterior(), want, 1e-10, "laplace log posterior")
    -- its gradient (raw and log entries) against central differences
    local _, g = bounded:mll_and_grad{posterior = true}
    local v0 = bounded:get_vector()
    for j = 1, #v0 do
      local vp, vm = {}, {}
      for i = 1, #v0 do vp[i], vm[i] = v0[i], v0[i] end
      vp[j], vm[j] = v0[j] + 1e-5, v0[j] - 1e-5
      bounded:set_vector(vp)
      local fp = bounded:log_posterior()
      bounded:set_vector(vm)
      local fm = bounded:log_posterior()
      close(g[j], (fp - fm) / 2e-5, 1e-6, "posterior d/dr" .. j, 1e-7)
    end
    bounded:set_vector(v0)
    -- a fit keeps the bounded ones inside
    bounded:fit{max_iter = 10}
    local off = bounded.kernel.children[2].values.offset
    assert(off > 0.1 and off < 2, "offset " .. off)
    for _, v in ipairs(bounded.kernel.children[1].values.means[1]) do
      assert(v > 0.01 and v < 3, "mean " .. v)
    end
    -- gp.variational: the same names
    local sv = gp.variational{x = x, y = y, kernel = kernel(), likelihood = gaussian(0.1),
                              inducing = 5, bounds = {k2_offset = {0.1, 2}},
                              priors = {k1_weights = prior}}
    assert.truthy(sv:parameters().kernel.raw_k2_offset)
    close(sv:log_posterior(), sv:elbo() + lognormal_logpdf(0.8), 1e-10, "svgp log posterior")
    local f, q = sv:objective(nil, {posterior = true})
    local ok, err = lt.gradcheck(f, q, {rtol = 1e-5, atol = 1e-6})
    assert(ok, "gradcheck " .. tostring(err))
    -- unknown names and values outside their bounds are refused
    local function refused(pattern, spec)
      local ok2, e = pcall(gp.laplace, spec)
      assert(not ok2)
      assert.truthy(tostring(e):find("^lazytensor:"), tostring(e))
      assert.truthy(tostring(e):find(pattern, 1, true), tostring(e))
    end
    refused("unknown hyperparameter 'offset'", {x = x, y = labels, kernel = kernel(),
            likelihood = gp.likelihoods.bernoulli{}, priors = {offset = prior}})
    refused("outside its bounds", {x = x, y = labels, kernel = kernel(),
            likelihood = gp.likelihoods.bernoulli{}, bounds = {k1_means = {0.35, 1}}})
  end)
end)
