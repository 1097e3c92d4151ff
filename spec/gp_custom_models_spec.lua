-- gp.kernels.custom in gp.sgpr (the collapsed bound), gp.multitask (the
-- Kronecker MLL) and gp.exact{structure = "ski"} (W·k(G, G)·Wᵀ): each
-- objective written with lazytensor operations and differentiated by
-- lt.grad. For each model: a custom rbf gives the built-in rbf's objective
-- and gradient, a kernel of its own (a product of a dense rq and a linear
-- factor, plus a built-in matern52) has the gradient of central
-- differences of the objective, fit improves it, predict agrees.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"

local x = {{0.1, 0.2}, {0.5, 0.1}, {0.9, -0.3}, {1.3, 0.4}, {0.2, 0.8}, {-0.4, 0.3},
           {0.7, 0.7}, {1.1, -0.1}}
local y = {1, 2, 0.5, -0.3, 0.7, 0.1, 0.4, -0.2}
local x1d = {{0.1}, {0.5}, {0.9}, {1.3}, {0.2}, {-0.4}, {0.7}, {1.1}}
-- two tasks, one value missing
local Y = {{1, 0.5}, {2, 1.1}, {0.5, 0 / 0}, {-0.3, 0.2}, {0.7, 0.9}, {0.1, -0.4},
           {0.4, 0.3}, {-0.2, -0.6}}
local Yfull = {{1, 0.5}, {2, 1.1}, {0.5, 0.3}, {-0.3, 0.2}, {0.7, 0.9}, {0.1, -0.4},
               {0.4, 0.3}, {-0.2, -0.6}}
local xs = {{0.3, 0.3}, {1.0, 0.0}, {0.6, -0.2}}
local xs1d = {{0.3}, {1.0}, {0.6}}

local function custom_rbf(ls, v)
  return gp.kernels.custom{params = {lengthscale = ls, variance = v}, k = function(x1, x2, p)
    return lt.kernel(x1, x2, {kind = "rbf", lengthscale = p.lengthscale, variance = p.variance})
  end}
end

-- rq(l, a) ∘ (1 + s·x1·x2ᵀ), from dense products: not stationary (k(x, x)
-- depends on x), no lt.kernel
local function custom_new()
  return gp.kernels.custom{params = {l = 0.7, a = 1.5, s = 0.4}, k = function(x1, x2, p)
    local n, m = x1:size(1), x2:size(1)
    local sq1 = lt.cmul(x1, x1):sum(2):reshape(n, 1)
    local sq2 = lt.cmul(x2, x2):sum(2):reshape(1, m)
    local dot = x1 * x2:t()
    local rq = ((sq1 + sq2 - 2 * dot) / (2 * p.a * p.l * p.l) + 1):pow(-p.a)
    return lt.cmul(rq, dot * p.s + 1)
  end}
end

local function new_tree()
  return gp.kernels.scale(custom_new(), 1.2) + gp.kernels.matern52{lengthscale = 0.6,
                                                                   variance = 0.3}
end

-- Objective and gradient of two models agree.
local function same_objective(m1, m2, tol)
  local v1, g1 = m1:mll_and_grad()
  local v2, g2 = m2:mll_and_grad()
  assert(math.abs(v1 - v2) < tol, v1 .. " vs " .. v2)
  assert(math.abs(m1:mll() - v2) < tol)
  assert.are.equal(#g2, #g1)
  for i = 1, #g1 do
    assert(math.abs(g1[i] - g2[i]) < tol * (1 + math.abs(g2[i])),
           i .. ": " .. g1[i] .. " vs " .. g2[i])
  end
end

-- mll_and_grad's gradient against central differences of mll over get_vector.
local function check_differences(model, tol)
  local v0 = model:get_vector()
  local _, g = model:mll_and_grad()
  assert.are.equal(#v0, #g)
  for i = 1, #v0 do
    local h = 1e-5
    local vp, vm = {}, {}
    for j = 1, #v0 do vp[j], vm[j] = v0[j], v0[j] end
    vp[i], vm[i] = v0[i] + h, v0[i] - h
    model:set_vector(vp)
    local fp = model:mll()
    model:set_vector(vm)
    local fm = model:mll()
    local fd = (fp - fm) / (2 * h)
    assert(math.abs(g[i] - fd) < tol * (1 + math.abs(fd)), i .. ": " .. g[i] .. " vs " .. fd)
  end
  model:set_vector(v0)
end

local function same_prediction(m1, m2, points, tol)
  local mu1, var1 = m1:predict(points)
  local mu2, var2 = m2:predict(points)
  local d1, d2 = mu1 - mu2, var1 - var2
  assert(d1:abs():max() < tol, "mean " .. d1:abs():max())
  assert(d2:abs():max() < tol, "variance " .. d2:abs():max())
end

local function improves(model)
  local before = model:mll()
  local result = model:fit{max_iter = 25}
  assert(result.mll > before + 1e-3, result.mll .. " vs " .. before)
  assert(math.abs(model:mll() - result.mll) < 1e-8)
end

describe("gp.kernels.custom in gp.sgpr", function()
  local function model(kernel, extra)
    local spec = {x = x, y = y, kernel = kernel, inducing = 3, noise = 0.1}
    for k, v in pairs(extra or {}) do spec[k] = v end
    return gp.sgpr(spec)
  end

  it("restates rbf: the bound, its gradient (inducing points too), predict, posterior", function()
    for _, ls in ipairs{0.5, {0.5, 0.7}} do
      local m1 = model(custom_rbf(ls, 1.3))
      local m2 = model(gp.kernels.rbf{lengthscale = ls, variance = 1.3})
      same_objective(m1, m2, 1e-8)
      same_prediction(m1, m2, xs, 1e-8)
      local p1 = m1:posterior(xs):log_prob(lt.tensor{0.1, 0.2, 0.3})
      local p2 = m2:posterior(xs):log_prob(lt.tensor{0.1, 0.2, 0.3})
      assert(math.abs(p1 - p2) < 1e-8)
    end
    -- fixed inducing points and mean
    same_objective(model(custom_rbf(0.5, 1.3), {fixed = {inducing = true, mean = true}}),
                   model(gp.kernels.rbf{lengthscale = 0.5, variance = 1.3},
                         {fixed = {inducing = true, mean = true}}), 1e-8)
  end)

  it("a kernel of its own: gradient against differences, fit improves the bound", function()
    local m = model(new_tree())
    check_differences(m, 1e-6)
    improves(m)
    local mu, var = m:predict(xs)
    assert.are.equal(3, mu:size(1))
    assert(var:min() > 0)
  end)
end)

describe("gp.kernels.custom in gp.multitask", function()
  it("restates rbf: MLL and gradient (complete, missing, task_noise), predict", function()
    for _, case in ipairs{{Yfull, false}, {Y, false}, {Yfull, true}} do
      local function model(kernel)
        return gp.multitask{x = x, y = case[1], kernel = kernel, noise = 0.1,
                            task_noise = case[2]}
      end
      local m1 = model(custom_rbf({0.5, 0.8}, 1.3))
      local m2 = model(gp.kernels.rbf{lengthscale = {0.5, 0.8}, variance = 1.3})
      same_objective(m1, m2, 1e-8)
      same_prediction(m1, m2, xs, 1e-8)
    end
  end)

  it("a kernel of its own: gradient against differences, fit improves the MLL", function()
    local m = gp.multitask{x = x, y = Y, kernel = new_tree(), noise = 0.1, rank = 1,
                           task_noise = true}
    check_differences(m, 1e-6)
    improves(m)
    local mu = m:predict(xs)
    assert.are.same({3, 2}, mu:shape())
  end)
end)

describe("gp.kernels.custom with structure = 'ski'", function()
  it("restates rbf on a 1-d and a 2-d grid: MLL, gradient, predict", function()
    for _, case in ipairs{{x1d, 40, xs1d, {{5}, {-3}}}, {x, 16, xs, {{5, 5}, {-3, 0}}}} do
      local function model(kernel)
        return gp.exact{x = case[1], y = y, kernel = kernel, noise = 0.1, structure = "ski",
                        grid = case[2]}
      end
      local m1 = model(custom_rbf(0.5, 1.3))
      local m2 = model(gp.kernels.rbf{lengthscale = 0.5, variance = 1.3})
      same_objective(m1, m2, 1e-8)
      same_prediction(m1, m2, case[3], 1e-8)
      -- outside the grid: the exact cross-covariance, as the built-in's
      same_prediction(m1, m2, case[4], 1e-8)
      assert.matches("K_grid = k(G, G) of the custom kernel", m1:explain(), 1, true)
    end
  end)

  it("a kernel of its own: gradient against differences, fit improves the MLL", function()
    local m = gp.exact{x = x1d, y = y, kernel = new_tree(), noise = 0.1, structure = "ski",
                       grid = 30}
    check_differences(m, 1e-6)
    improves(m)
  end)

  it("refuses a grid it would hold dense beyond 4096 cells", function()
    local ok, err = pcall(function()
      return gp.exact{x = x, y = y, kernel = custom_rbf(0.5, 1), noise = 0.1, structure = "ski",
                      grid = 70}:mll()
    end)
    assert(not ok)
    assert.matches("lazytensor: gp: ski: a custom kernel's K_grid is k(G, G)", tostring(err), 1,
                   true)
  end)
end)
