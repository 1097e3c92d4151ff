-- Bounds and priors of gp.variational and gp.laplace (gp/hyper.lua,
-- gp/priors.lua): the densities against their formulas in plain Lua, the
-- constrained parameterisation round trip and its gradients, the noise
-- floor holding where an unbounded noise runs away, a prior pulling a fit,
-- and the errors.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local hyper = require "lazytensor.gp.hyper"
local close = require("support.ref").close

local log, pi = math.log, math.pi
local P = gp.priors

local function fails(f, pattern)
  local ok, err = pcall(f)
  assert.is_false(ok)
  assert.truthy(tostring(err):find("^lazytensor:"), tostring(err))
  assert.truthy(tostring(err):find(pattern), tostring(err))
end

local function smooth(n)
  local x, y = {}, {}
  for i = 1, n do
    x[i] = {i * 0.25}
    y[i] = math.sin(i * 0.25) -- no noise at all
  end
  return x, y
end

describe("gp.priors and bounds", function()
  it("log densities equal their formulas", function()
    local x = 0.7
    close(P.normal(0.5, 2):log_density(x), -0.5 * ((x - 0.5) / 2) ^ 2 - log(2) - 0.5 * log(2 * pi),
          1e-14, "normal")
    close(P.lognormal(-1, 0.5):log_density(x),
          -0.5 * ((log(x) + 1) / 0.5) ^ 2 - log(x) - log(0.5) - 0.5 * log(2 * pi), 1e-14,
          "lognormal")
    -- Γ(3) = 2
    close(P.gamma(3, 6):log_density(x), 3 * log(6) - log(2) + 2 * log(x) - 6 * x, 1e-13, "gamma")
    close(P.half_cauchy(0.3):log_density(x), log(2 / (pi * 0.3 * (1 + (x / 0.3) ^ 2))), 1e-14,
          "half_cauchy")
    close(P.uniform(0.1, 2):log_density(x), -log(1.9), 1e-14, "uniform")
    assert.equal(-math.huge, P.uniform(0.1, 2):log_density(3))
    -- a 1-d tensor sums over its entries
    local v = lt.tensor{0.7, 1.9}
    close(P.gamma(3, 6):log_density(v), P.gamma(3, 6):log_density(0.7)
          + P.gamma(3, 6):log_density(1.9), 1e-13, "gamma of a vector")
    for _, prior in ipairs{P.normal(0.5, 2), P.lognormal(-1, 0.5), P.gamma(3, 6),
                           P.half_cauchy(0.3)} do
      local ok, err = lt.gradcheck(function(p) return prior:log_density(p.x) + prior:log_density(p.v) end,
                                   {x = 0.7, v = lt.tensor{0.4, 1.3}})
      assert(ok, prior.kind .. " gradcheck " .. tostring(err))
    end
  end)

  it("bounded hyperparameters: raw parameters, the round trip and gradcheck", function()
    local b = {lengthscale = {0.1, 5}, variance = {0.5, math.huge}}
    for _, case in ipairs{{"lengthscale", 0.3}, {"lengthscale", 4.9}, {"variance", 0.6},
                          {"variance", 30}, {"noise", 0.02}} do
      local r = hyper.to_raw(b, case[1], case[2])
      close(hyper.from_raw(b, case[1], r), case[2], 1e-13, case[1])
    end
    local x, y = smooth(12)
    local model = gp.variational{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = {0.8}},
                                 likelihood = gp.likelihoods.gaussian{noise = 0.1}, inducing = 4,
                                 bounds = b, priors = {lengthscale = P.gamma(2, 1)}}
    local p = model:parameters()
    assert.truthy(lt.is_tensor(p.kernel.raw_lengthscale))
    assert.truthy(p.kernel.raw_variance and p.likelihood.raw_noise) -- the noise floor
    assert.is_nil(p.kernel.log_lengthscale)
    local f = model:objective({2, 5, 9}, {posterior = true})
    local ok, err = lt.gradcheck(f, p)
    assert(ok, "gradcheck " .. tostring(err))
    -- a far too large learning rate cannot leave the bounds
    model:fit{lr = 2, epochs = 20}
    local l = model.kernel.values.lengthscale[1]
    assert.is_true(l > 0.1 and l < 5, "lengthscale " .. l)
    assert.is_true(model.kernel.values.variance > 0.5)
  end)

  it("the noise floor: a gaussian noise cannot go below 1e-4 unless its bounds say so", function()
    local x, y = smooth(30)
    local function make(bounds)
      return gp.variational{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 1},
                            likelihood = gp.likelihoods.gaussian{noise = 0.05}, inducing = 10,
                            bounds = bounds}
    end
    local floored, free = make(nil), make({noise = {0, math.huge}})
    -- the unconstrained parameter far out: e^-50 = 2e-22 without the floor
    local p = floored:parameters()
    p.likelihood.raw_noise = -50
    floored:set_parameters(p)
    close(floored.likelihood.params.noise, 1e-4, 1e-15, "floored noise")
    p = free:parameters()
    p.likelihood.log_noise = -50
    free:set_parameters(p)
    close(free.likelihood.params.noise, math.exp(-50), 1e-13, "unbounded noise")
    -- noise-free targets pull the noise down; a fit keeps it above the floor
    local model = make(nil)
    model:fit{lr = 0.1, epochs = 200}
    local noise = model.likelihood.params.noise
    assert.is_true(noise > 1e-4 and noise < 0.01, "fitted noise " .. noise) -- measured 0.005
    assert.is_true(model:elbo() == model:elbo() and model:elbo() > -math.huge)
  end)

  it("priors: log_posterior adds them, fit follows them (laplace, with its gradient)", function()
    local x, y = {}, {}
    for i = 1, 30 do
      x[i] = {(i - 15) / 5}
      y[i] = (math.sin(2 * x[i][1]) + 0.4 * math.cos(11 * i) > 0) and 1 or 0
    end
    local prior = P.gamma(200, 100) -- mode 1.99, sd 0.14
    local model = gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.7},
                             likelihood = gp.likelihoods.bernoulli{},
                             priors = {lengthscale = prior}}
    close(model:log_posterior(), model:mll() + prior:log_density(0.7), 1e-13, "log posterior")
    -- the posterior's gradient against central differences
    local _, g = model:mll_and_grad{posterior = true}
    local v0 = model:get_vector()
    for j = 1, #v0 do
      local vp, vm = {v0[1], v0[2]}, {v0[1], v0[2]}
      vp[j], vm[j] = v0[j] + 1e-5, v0[j] - 1e-5
      model:set_vector(vp)
      local fp = model:log_posterior()
      model:set_vector(vm)
      local fm = model:log_posterior()
      close(g[j], (fp - fm) / 2e-5, 1e-5, "d log posterior " .. j, 1e-7)
    end
    model:set_vector(v0)
    local free = gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.7},
                            likelihood = gp.likelihoods.bernoulli{}}
    free:fit{}
    model:fit{}
    local lf, lp = free.kernel.values.lengthscale, model.kernel.values.lengthscale
    assert.is_true(math.abs(lp - 2) < 0.3, "with the prior " .. lp)
    assert.is_true(math.abs(lf - 2) > math.abs(lp - 2), string.format("%g vs %g", lf, lp))
  end)

  it("bad bounds and priors are clear errors", function()
    local x, y = smooth(10)
    local function make(spec)
      spec.x, spec.y, spec.kernel = x, y, gp.kernels.rbf{}
      spec.likelihood, spec.inducing = gp.likelihoods.gaussian{noise = 0.1}, 3
      return gp.variational(spec)
    end
    fails(function() make{bounds = {lengthscale = {2, 1}}} end, "below hi")
    fails(function() make{bounds = {lengthscale = {-1, 1}}} end, "lo must be")
    fails(function() make{bounds = {lenghtscale = {0.1, 1}}} end, "unknown hyperparameter")
    fails(function() make{priors = {lenghtscale = P.gamma(2, 1)}} end, "unknown hyperparameter")
    fails(function() make{priors = {lengthscale = {2, 1}}} end, "gp.priors")
    fails(function() make{bounds = {lengthscale = {2, 3}}} end, "outside its bounds")
    fails(function()
      gp.variational{x = x, y = y, kernel = gp.kernels.rbf{}, inducing = 3,
                     likelihood = gp.likelihoods.gaussian{noise = 1e-5}}
    end, "noise = 1e%-05 is outside")
    fails(function()
      gp.laplace{x = x, y = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1}, kernel = gp.kernels.rbf{},
                 likelihood = gp.likelihoods.bernoulli{}, priors = {noise = P.gamma(2, 1)}}
    end, "unknown hyperparameter 'noise'")
    fails(function() P.gamma(-1, 1) end, "positive")
    fails(function() P.uniform(2, 1) end, "lo < hi")
  end)
end)
