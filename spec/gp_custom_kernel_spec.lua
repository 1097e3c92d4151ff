-- gp.kernels.custom: a kernel written in Lua from lazytensor operations,
-- trained in gp.exact through lt.grad: against the built-in kinds it
-- restates, against central differences of the MLL, in sums, products and
-- scales with built-in kernels, and with bad input.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"

local x = {{0.1, 0.2}, {0.5, 0.1}, {0.9, -0.3}, {1.3, 0.4}, {0.2, 0.8}, {-0.4, 0.3}}
local y = {1, 2, 0.5, -0.3, 0.7, 0.1}

local function custom_rbf(ls, v)
  return gp.kernels.custom{params = {lengthscale = ls, variance = v}, k = function(x1, x2, p)
    return lt.kernel(x1, x2, {kind = "rbf", lengthscale = p.lengthscale, variance = p.variance})
  end}
end

-- (1 + r²/(2αl²))^−α from dense products: no lt.kernel at all
local function custom_rq(l, a)
  return gp.kernels.custom{params = {l = l, a = a}, k = function(x1, x2, p)
    local n, m = x1:size(1), x2:size(1)
    local sq1 = lt.cmul(x1, x1):sum(2):reshape(n, 1)
    local sq2 = lt.cmul(x2, x2):sum(2):reshape(1, m)
    local r2 = sq1 + sq2 - 2 * (x1 * x2:t())
    return (r2 / (2 * p.a * p.l * p.l) + 1):pow(-p.a)
  end}
end

local function central_differences(model)
  local v0 = model:get_vector()
  local out = {}
  for i = 1, #v0 do
    local h = 1e-5
    local vp, vm = {}, {}
    for j = 1, #v0 do vp[j], vm[j] = v0[j], v0[j] end
    vp[i], vm[i] = v0[i] + h, v0[i] - h
    model:set_vector(vp)
    local fp = model:mll()
    model:set_vector(vm)
    local fm = model:mll()
    out[i] = (fp - fm) / (2 * h)
  end
  model:set_vector(v0)
  return out
end

describe("gp.kernels.custom", function()
  it("restates a built-in kind exactly: MLL and gradient", function()
    for _, ls in ipairs{0.4, {0.3, 0.8}} do
      local m1 = gp.exact{x = x, y = y, kernel = custom_rbf(ls, 1.3), noise = 0.1}
      local m2 = gp.exact{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = ls, variance = 1.3},
                          noise = 0.1}
      local v1, g1 = m1:mll_and_grad()
      local v2, g2 = m2:mll_and_grad()
      assert(math.abs(v1 - v2) < 1e-10, v1 .. " vs " .. v2)
      assert.are.equal(#g2, #g1)
      for i = 1, #g1 do assert(math.abs(g1[i] - g2[i]) < 1e-9, i .. ": " .. g1[i] .. " vs " .. g2[i]) end
    end
  end)

  it("trains in sums and products with built-in kernels, gradients against differences", function()
    local k = gp.kernels.scale(custom_rq(0.7, 1.5), 2) + gp.kernels.matern52{lengthscale = 0.5}
    local model = gp.exact{x = x, y = y, kernel = k, noise = 0.1}
    local _, g = model:mll_and_grad()
    local fd = central_differences(model)
    for i = 1, #g do
      assert(math.abs(g[i] - fd[i]) < 1e-6 * (1 + math.abs(fd[i])), i .. ": " .. g[i] .. " vs " .. fd[i])
    end
    local before = model:mll()
    local result = model:fit{max_iter = 40}
    assert(result.mll > before + 0.1, result.mll .. " vs " .. before)
    assert.matches("custom", model:explain(), 1, true)
  end)

  it("predicts as the dense posterior of its own covariance", function()
    local k = custom_rq(0.6, 2)
    local model = gp.exact{x = x, y = y, kernel = k, noise = 0.2, mean = "zero"}
    local xs = {{0.3, 0.3}, {1.0, 0.0}}
    local mu, var = model:predict(xs)
    local X, Xs = lt.tensor(x), lt.tensor(xs)
    local p = {l = lt.tensor(0.6), a = lt.tensor(2)}
    local Kxx = k.k(X, X, p):add_diag(0.2)
    local Ksx = k.k(Xs, X, p)
    local alpha = Kxx:solve(lt.tensor(y))
    local want_mu = Ksx * alpha
    local want_var = lt.ones(2) - lt.cmul(Ksx, Kxx:solve(Ksx:t()):t()):sum(2)
    for i = 1, 2 do
      assert(math.abs(mu[i] - want_mu[i]) < 1e-10)
      assert(math.abs(var[i] - want_var[i]) < 1e-10)
    end
  end)

  it("works in gp.variational and gp.laplace as the kind it restates", function()
    local labels = {1, 0, 1, 1, 0, 0}
    local L1 = gp.laplace{x = x, y = labels, kernel = custom_rbf(0.6, 1.2),
                          likelihood = gp.likelihoods.bernoulli{link = "probit"}}
    local L2 = gp.laplace{x = x, y = labels, kernel = gp.kernels.rbf{lengthscale = 0.6,
                          variance = 1.2}, likelihood = gp.likelihoods.bernoulli{link = "probit"}}
    assert(math.abs(L1:mll() - L2:mll()) < 1e-8)
    local m1, v1 = L1:predict({{0.3, 0.3}})
    local m2, v2 = L2:predict({{0.3, 0.3}})
    assert(math.abs(m1[1] - m2[1]) < 1e-8 and math.abs(v1[1] - v2[1]) < 1e-8)
    local V1 = gp.variational{x = x, y = y, kernel = custom_rbf(0.6, 1.2), inducing = 3,
                              likelihood = gp.likelihoods.gaussian{noise = 0.1}}
    local V2 = gp.variational{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.6,
                              variance = 1.2}, inducing = 3,
                              likelihood = gp.likelihoods.gaussian{noise = 0.1}}
    assert(math.abs(V1:elbo() - V2:elbo()) < 1e-10)
    local before = V1:elbo()
    V1:fit{epochs = 20, lr = 0.05}
    assert(V1:elbo() > before)
  end)

  it("refuses bad input and the models that cannot take it", function()
    local function raises(pattern, f)
      local ok, err = pcall(f)
      assert(not ok)
      assert(tostring(err):find(pattern, 1, true), tostring(err))
    end
    raises("k must be a function", function() return gp.kernels.custom{params = {}} end)
    raises("must be a positive number", function()
      return gp.kernels.custom{params = {l = -1}, k = function() end}
    end)
    raises("unknown key 'kind'", function()
      return gp.kernels.custom{kind = "rbf", k = function() end}
    end)
    local wrong = gp.kernels.custom{params = {l = 1}, k = function(x1) return lt.eye(x1:size(1) + 1) end}
    raises("k returned a dense of shape 7x7 for 6x6 points", function()
      return gp.exact{x = x, y = y, kernel = wrong, noise = 0.1}:mll()
    end)
    -- gp.sgpr, gp.multitask and SKI take it (spec/gp_custom_models_spec.lua);
    -- the structures that assume a kind's form do not
    raises("structure = 'toeplitz'", function()
      return gp.exact{x = x, y = y, kernel = custom_rbf(0.4, 1), noise = 0.1,
                      structure = "toeplitz"}:mll()
    end)
    raises("more than the 4096 allowed", function()
      return gp.exact{x = x, y = y, kernel = custom_rbf(0.4, 1), noise = 0.1, structure = "ski",
                      grid = 100}:mll()
    end)
  end)
end)
