-- Bounds and priors of gp.variational and gp.laplace (gp/hyper.lua,
-- gp/priors.lua): the densities against their formulas in plain Lua, the
-- constrained parameterisation round trip and its gradients, the noise
-- floor holding where an unbounded noise runs away, a prior pulling a fit,
-- gp.variational's inducing points and constant mean (real-valued: per-entry
-- bounds and priors, fits against gp.sgpr's and at a box's edge), and the
-- errors.
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

  it("densities on the real line: per-entry normal, smoothed_box; support", function()
    local function n(v, m, s) return -0.5 * ((v - m) / s) ^ 2 - log(s) - 0.5 * log(2 * pi) end
    -- per-entry mean and sd, x a 2×2 matrix read row by row
    local per = P.normal({{0, 1}, {2, 3}}, {{0.5, 1}, {2, 4}})
    local x = lt.tensor{{0.1, 0.9}, {2.5, -1}}
    close(per:log_density(x), n(0.1, 0, 0.5) + n(0.9, 1, 1) + n(2.5, 2, 2) + n(-1, 3, 4), 1e-14,
          "per-entry normal")
    local shared = P.normal(0.3, 2)
    close(shared:log_density(x), n(0.1, 0.3, 2) + n(0.9, 0.3, 2) + n(2.5, 0.3, 2) + n(-1, 0.3, 2),
          1e-14, "one normal over a matrix's entries")
    -- smoothed_box(a, b, σ): −d²/(2σ²) − log(b − a + √(2π)σ), d the distance to [a, b]
    local box = P.smoothed_box(-1, 2, 0.3)
    local norm = log(3 + math.sqrt(2 * pi) * 0.3)
    for _, case in ipairs{{0.5, 0}, {-1, 0}, {2, 0}, {2.4, 0.4}, {-1.6, 0.6}} do
      close(box:log_density(case[1]), -0.5 * (case[2] / 0.3) ^ 2 - norm, 1e-14,
            "smoothed_box at " .. case[1])
    end
    -- it integrates to 1 (the trapezoid rule over [−6, 7], the tails beyond negligible)
    local integral, h = 0, 1e-3
    for i = 0, 13000 do
      local w = (i == 0 or i == 13000) and 0.5 or 1
      integral = integral + w * math.exp(box:log_density(-6 + i * h)) * h
    end
    close(integral, 1, 1e-9, "smoothed_box's mass")
    local perbox = P.smoothed_box({0, 1}, {1, 3}, {0.1, 0.5})
    close(perbox:log_density(lt.tensor{1.2, 0}),
          -0.5 * (0.2 / 0.1) ^ 2 - log(1 + math.sqrt(2 * pi) * 0.1)
          - 0.5 * (1 / 0.5) ^ 2 - log(2 + math.sqrt(2 * pi) * 0.5), 1e-14, "per-entry smoothed_box")
    for _, prior in ipairs{per, box, perbox} do
      local ok, err = lt.gradcheck(function(p) return prior:log_density(p.v) end,
                                   {v = prior == per and x or (prior == box and lt.tensor{2.4, 0.5,
                                      -1.6} or lt.tensor{1.2, 0.5})})
      assert(ok, prior.kind .. " gradcheck " .. tostring(err))
    end
    assert.equal("real", P.normal(0, 1).support)
    assert.equal("real", P.uniform(0, 1).support)
    assert.equal("real", box.support)
    for _, prior in ipairs{P.gamma(2, 1), P.lognormal(0, 1), P.half_cauchy(1)} do
      assert.equal("positive", prior.support)
    end
    fails(function() per:log_density(lt.tensor{1, 2, 3}) end, "x has 3 entries")
    fails(function() P.normal({0, 1}, {1, 1, 1}) end, "shapes 2 and 3")
    fails(function() P.normal({0, 1}, {1, 0}) end, "sd%[2%] must be positive")
    fails(function() P.smoothed_box(1, 1) end, "a < b")
    fails(function() P.smoothed_box({0, 2}, {1, 1}) end, "a < b, got 2, 1 %(entry 2%)")
    fails(function() P.normal({{1, 2}, {3}}, 1) end, "rows of equal length")
    fails(function() P.normal("0", 1) end, "a number or one per entry")
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

describe("gp.variational: priors and bounds on the inducing points and the constant mean", function()
  local x, y = {}, {}
  for i = 1, 20 do
    x[i] = {i * 0.25}
    y[i] = 0.3 * math.sin(i * 0.25) + 3
  end
  local Z0 = {{0.5}, {1.6}, {2.7}, {3.8}}
  local centre = {{0.4}, {1.5}, {3}, {4}}
  local function normal_logpdf(v, mu, sd)
    return -0.5 * ((v - mu) / sd) ^ 2 - log(sd) - 0.5 * log(2 * pi)
  end
  local function make(spec)
    spec.x, spec.y = x, y
    spec.inducing = spec.inducing or Z0
    spec.kernel = spec.kernel or gp.kernels.rbf{lengthscale = 0.8}
    spec.likelihood = spec.likelihood or gp.likelihoods.gaussian{noise = 0.1}
    return gp.variational(spec)
  end

  it("log_posterior: the ELBO plus the densities in plain Lua; raw_Z, raw_constant", function()
    local model = make{mean_value = 2, bounds = {inducing = {0, 4.5}, mean = {1, math.huge}},
                       priors = {inducing = P.normal(centre, 0.5),
                                 mean = P.smoothed_box(2.5, 3.5, 0.25)}}
    local lp = 0
    for i = 1, 4 do lp = lp + normal_logpdf(Z0[i][1], centre[i][1], 0.5) end
    -- the constant 2 lies 0.5 below the box [2.5, 3.5]
    lp = lp - 0.5 * (0.5 / 0.25) ^ 2 - log(1 + math.sqrt(2 * pi) * 0.25)
    close(model:log_posterior(), model:elbo() + lp, 1e-12, "log posterior")
    local p = model:parameters()
    assert.is_nil(p.Z)
    assert.is_nil(p.constant)
    for i = 1, 4 do
      local z = Z0[i][1]
      close(p.raw_Z:get(i, 1), log(z / (4.5 - z)), 1e-13, "raw_Z " .. i)
    end
    close(p.raw_constant, log(2 - 1), 1e-14, "raw_constant above lo = 1")
    -- the round trip: r → θ → r
    p.raw_Z = lt.tensor{{-3}, {0}, {1}, {40}}
    p.raw_constant = -2
    model:set_parameters(p)
    close(model.mean_value, 1 + math.exp(-2), 1e-14, "constant from r")
    close(model.Z:get(1, 1), 4.5 / (1 + math.exp(3)), 1e-14, "Z from r")
    close(model.Z:get(4, 1), 4.5, 1e-14, "Z from r far out: at hi")
    local back = model:parameters()
    close(back.raw_Z:get(2, 1), 0, 1e-14, "raw_Z back")
    close(back.raw_constant, -2, 1e-13, "raw_constant back")
    -- Z on its edges (rounded there by a fit): r far out, θ and the
    -- gradient finite (−745 at the lower edge made e^{−r} overflow: NaN)
    p = model:parameters()
    p.raw_Z = lt.tensor{{-800}, {0}, {1}, {800}}
    model:set_parameters(p)
    assert.equal(0, model.Z:get(1, 1))
    local f, q = model:objective(nil, {posterior = true})
    local g = lt.grad(f)(q)
    assert.is_true(q.raw_Z:get(1, 1) < -600 and q.raw_Z:get(4, 1) > 600)
    assert.is_true(g.raw_Z:abs():sum() < math.huge, "a finite gradient at the edges")
  end)

  it("the log posterior's gradient: lt.gradcheck and central differences of log_posterior", function()
    local inf = math.huge
    -- per-entry bounds of each kind: a box, above lo, below hi, none
    local model = make{mean_value = 2, bounds = {inducing = {{{0}, {1}, {-inf}, {-inf}},
                                                             {{1}, {inf}, {3}, {inf}}},
                                                 mean = {-5, 5}},
                       priors = {inducing = P.normal(centre, {{0.3}, {0.4}, {0.5}, {0.6}}),
                                 mean = P.normal(3, 0.5)}}
    model:set_variational(lt.tensor{0.3, -0.2, 0.5, 0.1},
                          lt.tensor{{1, 0, 0, 0}, {0.1, 0.9, 0, 0}, {0, 0.2, 0.8, 0},
                                    {0.05, 0, 0.1, 0.7}})
    -- the map inside the objective is the one set_parameters uses: the same
    -- model unbounded (Z and the constant as they are) has the same log posterior
    local plain = make{mean_value = 2, priors = model.priors}
    plain:set_variational(model.q_mean, model.q_chol)
    close(model:log_posterior(), plain:log_posterior(), 1e-12, "bounded against unbounded")
    local unit = hyper.real_map(model.bounds.inducing, lt.tensor{{-0.7}, {0.4}, {-1.2}, {2.5}})
    for i, r in ipairs{-0.7, 0.4, -1.2, 2.5} do
      local want = ({1 / (1 + math.exp(0.7)), 1 + math.exp(0.4), 3 - math.exp(-1.2), 2.5})[i]
      close(unit:get(i, 1), want, 1e-14, "real_map entry " .. i .. " at r = " .. r)
    end
    local f, p = model:objective({1, 4, 7, 11, 16}, {posterior = true})
    local ok, err = lt.gradcheck(f, p)
    assert(ok, "gradcheck " .. tostring(err))
    -- over all rows: lt.grad of the objective against model:log_posterior()
    local full, p0 = model:objective(nil, {posterior = true})
    local g = lt.grad(full)(p0)
    local function at(change)
      local q = model:parameters()
      change(q)
      model:set_parameters(q)
      local v = model:log_posterior()
      model:set_parameters(p0)
      return v
    end
    local h = 1e-5
    for i = 1, 4 do
      local function shift(d)
        return function(q)
          local r = q.raw_Z:clone()
          r:set(i, 1, r:get(i, 1) + d)
          q.raw_Z = r
        end
      end
      close(g.raw_Z:get(i, 1), (at(shift(h)) - at(shift(-h))) / (2 * h), 1e-6, "d/d raw_Z " .. i,
            1e-6)
    end
    local dc = (at(function(q) q.raw_constant = q.raw_constant + h end)
                - at(function(q) q.raw_constant = q.raw_constant - h end)) / (2 * h)
    close(type(g.raw_constant) == "number" and g.raw_constant or g.raw_constant:item(), dc, 1e-6,
          "d/d raw_constant", 1e-6)
  end)

  it("fit honours the bounds and the priors (the constant against gp.sgpr's at the optimal q)", function()
    -- kernel, noise and Z fixed; natural gradients with ρ = 1 keep q optimal,
    -- so Adam moves the constant on the collapsed bound: gp.sgpr's
    local function fixed_kernel()
      return gp.kernels.rbf{lengthscale = 1, variance = 0.1, fixed = {lengthscale = true,
                                                                      variance = true}}
    end
    local function with_q(spec)
      spec.kernel = fixed_kernel()
      spec.likelihood = gp.likelihoods.gaussian{noise = 0.05, fixed = {noise = true}}
      spec.fixed = {inducing = true}
      return make(spec)
    end
    local function sgpr(spec, jitter)
      spec.x, spec.y, spec.inducing, spec.kernel, spec.noise = x, y, Z0, fixed_kernel(), 0.05
      spec.fixed, spec.jitter = {noise = true, inducing = true}, jitter
      local m = gp.sgpr(spec)
      m:fit{}
      return m
    end
    local prior = P.normal(0, 0.5)
    local map = with_q{priors = {mean = prior}}
    map:fit{lr = 0.1, epochs = 150, natural_gradient = true, natural_lr = 1}
    local ref_map = sgpr({priors = {mean = prior}}, map.jitter)
    -- measured 2.5790 against 2.5798 (Adam's last steps)
    close(map.mean_value, ref_map.mean_value, 2e-3, "MAP constant against gp.sgpr's")
    local free = sgpr({}, map.jitter)
    assert.is_true(free.mean_value > 2.9, "unbounded optimum " .. free.mean_value) -- 2.9955
    -- the unbounded optimum (≈ 3) lies above the box (−1, 1): the fit ends at 1
    local boxed = with_q{bounds = {mean = {-1, 1}}}
    boxed:fit{lr = 1, epochs = 60, natural_gradient = true, natural_lr = 1}
    assert.is_true(boxed.mean_value <= 1 and boxed.mean_value > 1 - 1e-3,
                   string.format("%.17g", boxed.mean_value)) -- 1 − 5e-5 measured
    -- a far too large rate cannot take Z out of its box
    local z = make{mean_value = 2, bounds = {inducing = {0.3, 4}}}
    z:fit{lr = 2, epochs = 30}
    for i = 1, 4 do
      local v = z.Z:get(i, 1)
      assert.is_true(v >= 0.3 and v <= 4, "Z " .. v)
    end
  end)

  it("several latent functions (softmax): one constant per class, a prior per class", function()
    local labels = {}
    for i = 1, 20 do labels[i] = (i % 3) + 1 end
    local model = gp.variational{x = x, y = labels, kernel = gp.kernels.rbf{lengthscale = 1},
                                 likelihood = gp.likelihoods.softmax{classes = 3}, inducing = 4,
                                 mean_value = {0.1, -0.2, 0.3},
                                 bounds = {mean = {{-1, -1, 0}, {1, 1, math.huge}}},
                                 priors = {mean = P.normal({0, 0, 1}, {1, 2, 0.5})}}
    local lp = normal_logpdf(0.1, 0, 1) + normal_logpdf(-0.2, 0, 2) + normal_logpdf(0.3, 1, 0.5)
    close(model:log_posterior(), model:elbo() + lp, 1e-12, "log posterior, C = 3")
    local f, p = model:objective({1, 2, 3, 5, 8}, {posterior = true})
    assert.truthy(lt.is_tensor(p.raw_constant))
    local ok, err = lt.gradcheck(f, p)
    assert(ok, "gradcheck " .. tostring(err))
    fails(function()
      gp.variational{x = x, y = labels, kernel = gp.kernels.rbf{}, inducing = 4,
                     likelihood = gp.likelihoods.softmax{classes = 3},
                     priors = {mean = P.normal({0, 0}, 1)}}
    end, "per%-entry parameters are 2, mean is 3")
  end)

  it("bad input: clear errors, the model untouched", function()
    fails(function() make{priors = {inducing = P.gamma(2, 1)}} end,
          "priors.inducing: gamma is a density on positive values")
    fails(function() make{priors = {mean = P.lognormal(0, 1)}} end, "real%-valued")
    fails(function() make{priors = {inducing = P.normal({0, 1, 2, 3}, 1)}} end,
          "per%-entry parameters are 4, inducing is 4×1")
    fails(function() make{bounds = {inducing = {1, 0}}} end, "lo = 1 must be below hi = 0")
    fails(function() make{bounds = {inducing = {0, 1}}} end, "outside its bounds")
    fails(function() make{bounds = {inducing = {0, 5}}, fixed = {inducing = true}} end,
          "inducing is fixed")
    fails(function() make{mean = "zero", priors = {mean = P.normal(0, 1)}} end,
          "unknown hyperparameter 'mean'")
    fails(function() make{priors = {task_factor = P.normal(0, 1)}} end,
          "unknown hyperparameter 'task_factor'")
    fails(function()
      gp.laplace{x = x, y = (function()
        local l = {}
        for i = 1, 20 do l[i] = i % 2 end
        return l
      end)(), kernel = gp.kernels.rbf{}, likelihood = gp.likelihoods.bernoulli{},
                 priors = {mean = P.normal(0, 1)}}
    end, "unknown hyperparameter 'mean'")
    -- set_parameters with a wrong raw_Z, or raw_Z without bounds: the model as it was
    local model = make{bounds = {inducing = {0, 4.5}}}
    local before = model.Z:clone()
    local p = model:parameters()
    p.raw_Z = lt.tensor{{0}, {0}, {0}}
    fails(function() model:set_parameters(p) end, "raw_Z must be 4×1")
    assert.equal(0, (model.Z - before):abs():max())
    local plain = make{}
    local q = plain:parameters()
    q.raw_Z, q.Z = q.Z, nil
    fails(function() plain:set_parameters(q) end, "raw_Z needs bounds.inducing")
  end)
end)
