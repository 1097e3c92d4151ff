-- gp.laplace against independent references: the mode's fixed point
-- f̂ = K·∇log p(f̂), log q(y) by the direct formula −½ f̂ᵀK⁻¹f̂ + Σ log p −
-- ½ log det(I + K·W) in plain Lua (loops, ref.solve, ref.det), the
-- predictive moments from (K + W⁻¹)⁻¹ in plain Lua, and the gradient
-- against central differences of log q with the mode found again.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ref = require "support.ref"
local close = ref.close

local log, exp = math.log, math.exp

local function data(n)
  local x, y, counts = {}, {}, {}
  for i = 1, n do
    x[i] = {(i - n / 2) / 5, math.cos(i)}
    y[i] = (math.sin(2 * x[i][1]) + 0.5 * math.cos(11 * i) > 0) and 1 or 0
    counts[i] = math.floor(2 + 2 * math.sin(x[i][1])) + (i % 2)
  end
  return x, y, counts
end

local function rbf(l, v, a, b)
  local r2 = 0
  for q = 1, #a do r2 = r2 + ((a[q] - b[q]) / l[q]) ^ 2 end
  return v * exp(-0.5 * r2)
end

local function central(model, j, hstep)
  local v0 = model:get_vector()
  local vp, vm = {}, {}
  for i = 1, #v0 do vp[i], vm[i] = v0[i], v0[i] end
  vp[j], vm[j] = v0[j] + hstep, v0[j] - hstep
  model:set_vector(vp)
  local fp = model:mll()
  model:set_vector(vm)
  local fm = model:mll()
  model:set_vector(v0)
  return (fp - fm) / (2 * hstep)
end

local function fails(f, pattern)
  local ok, err = pcall(f)
  assert.is_false(ok)
  assert.truthy(tostring(err):find("^lazytensor:"), tostring(err))
  assert.truthy(tostring(err):find(pattern), tostring(err))
end

describe("gp.laplace", function()
  it("log q(y) equals the direct formula at the mode (logit, plain Lua)", function()
    local x, y = data(20)
    local l, v = {0.7, 1.3}, 1.8
    local model = gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = l, variance = v},
                             likelihood = gp.likelihoods.bernoulli{link = "logit"}, jitter = 0}
    local value, info = model:mll()
    assert.is_true(info.converged)
    local f = model:find_mode().f:totable()
    local n = #x
    local K = {}
    for i = 1, n do
      K[i] = {}
      for j = 1, n do K[i][j] = rbf(l, v, x[i], x[j]) end
    end
    -- fixed point: f̂ = K·∇log p(f̂), ∇ = t − σ(f̂)
    local grad, W = {}, {}
    for i = 1, n do
      local p = 1 / (1 + exp(-f[i]))
      grad[i] = y[i] - p
      W[i] = p * (1 - p)
    end
    local Kg = ref.matvec(K, grad)
    for i = 1, n do close(Kg[i], f[i], 1e-8, "fixed point", 1e-9) end
    -- −½ f̂ᵀK⁻¹f̂ + Σ log p(y|f̂) − ½ log det(I + K·W)
    local alpha = ref.solve(K, f)
    local quad, lp = 0, 0
    for i = 1, n do
      quad = quad + f[i] * alpha[i]
      lp = lp - log(1 + exp(-(2 * y[i] - 1) * f[i]))
    end
    local IKW = {}
    for i = 1, n do
      IKW[i] = {}
      for j = 1, n do IKW[i][j] = (i == j and 1 or 0) + K[i][j] * W[j] end
    end
    close(value, -0.5 * quad + lp - 0.5 * log(ref.det(IKW)), 1e-9, "log q(y)")
    -- predictions: mean k*ᵀ∇, variance k** − k*ᵀ(K + W⁻¹)⁻¹k*
    local xs = {{0.3, -0.2}, {-1.1, 0.8}}
    local mean, var = model:predict(xs)
    local KW = {}
    for i = 1, n do
      KW[i] = {}
      for j = 1, n do KW[i][j] = K[i][j] + (i == j and 1 / W[i] or 0) end
    end
    for s, p in ipairs(xs) do
      local ks = {}
      for i = 1, n do ks[i] = rbf(l, v, x[i], p) end
      local m, q = 0, 0
      local sol = ref.solve(KW, ks)
      for i = 1, n do
        m = m + ks[i] * grad[i]
        q = q + ks[i] * sol[i]
      end
      close(mean:get(s), m, 1e-8, "predictive mean")
      close(var:get(s), v - q, 1e-8, "predictive variance")
    end
    local post = model:posterior(xs)
    close(post:variance():get(2), var:get(2), 1e-10, "posterior variance")
  end)

  it("the gradient (explicit + implicit) matches central differences of log q", function()
    local x, y, counts = data(24)
    local cases = {
      {gp.likelihoods.bernoulli{link = "probit"}, y, gp.kernels.rbf{lengthscale = {0.7, 1.3},
                                                                    variance = 2}},
      {gp.likelihoods.bernoulli{link = "logit"}, y, gp.kernels.matern52{lengthscale = 0.9,
                                                                        variance = 3}},
      {gp.likelihoods.poisson{}, counts, gp.kernels.rbf{lengthscale = 1.1, variance = 0.5}},
      -- a tree: scale(rbf) + matern32 (hyperparameters k1_variance, k2_lengthscale, ...)
      {gp.likelihoods.bernoulli{link = "probit"}, y,
       gp.kernels.scale(gp.kernels.rbf{lengthscale = 0.8, fixed = {variance = true}}, 2)
       + gp.kernels.matern32{lengthscale = 1.5, variance = 0.3}},
    }
    for c, case in ipairs(cases) do
      local model = gp.laplace{x = x, y = case[2], kernel = case[3], likelihood = case[1]}
      local _, g = model:mll_and_grad()
      local f, p = model:gradient_objective{implicit = false}
      local explicit = lt.grad(f)(p)
      local ex_flat = {}
      local names = {}
      for name in pairs(p) do names[#names + 1] = name end
      table.sort(names) -- get_vector's order
      for _, name in ipairs(names) do
        local e = explicit[name]
        if lt.is_tensor(e) and e:dim() > 0 then
          for _, q in ipairs(e:totable()) do ex_flat[#ex_flat + 1] = q end
        else
          ex_flat[#ex_flat + 1] = lt.is_tensor(e) and e:item() or e
        end
      end
      local worst_explicit = 0
      for j = 1, #g do
        local fd = central(model, j, 1e-5)
        close(g[j], fd, 1e-5, string.format("case %d, parameter %d", c, j), 1e-7)
        worst_explicit = math.max(worst_explicit, math.abs(ex_flat[j] - fd) / math.abs(fd))
      end
      -- the implicit term matters: without it the gradient is wrong (measured
      -- worst components: 77%, 77% and 74% for the first three cases)
      if c <= 3 then assert.is_true(worst_explicit > 0.5, "explicit-only error " .. worst_explicit) end
      if c == 4 then assert.equal(4, #g) end
    end
  end)

  it("fit raises log q and predicts the classes", function()
    local x, y = data(40)
    local model = gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.5, variance = 0.5},
                             likelihood = gp.likelihoods.bernoulli{}}
    local before = model:mll()
    local res = model:fit{max_iter = 30}
    assert.is_true(res.mll > before + 1, string.format("%g -> %g", before, res.mll))
    close(res.mll, model:mll(), 1e-14, "reported mll")
    assert.is_true(res.mode_converged)
    -- a Newton budget of one iteration cannot find the mode: never "converged"
    local short = gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.5},
                             likelihood = gp.likelihoods.bernoulli{}, max_newton = 1}
    assert.is_false(select(2, short:mll()).converged)
    assert.is_false(short:fit{max_iter = 3}.converged)
    local p = model:predict_y(x)
    local right = 0
    for i = 1, #x do
      if (p:get(i) > 0.5) == (y[i] == 1) then right = right + 1 end
    end
    assert.is_true(right >= 30, right .. " of 40")
  end)

  it("equals scikit-learn's GaussianProcessClassifier (logit Laplace) on breast cancer", function()
    -- the split of examples/breast_cancer.lua; the reference numbers are
    -- sklearn 1.2.1's (bench/peers/breast_cancer_sklearn.py)
    local cols, header = require("lazytensor.data").read_csv("examples/data/breast_cancer.csv")
    local features = {}
    for _, name in ipairs(header) do
      if name ~= "benign" then features[#features + 1] = name end
    end
    local n, seed = #cols.benign, 2026
    local order = {}
    for i = 1, n do order[i] = i end
    for i = n, 2, -1 do
      seed = ((16838 * seed) % 2147483648 * 65536 + 20077 * seed + 12345) % 2147483648
      local j = math.floor(seed / 2147483648 * i) + 1
      order[i], order[j] = order[j], order[i]
    end
    local x, y = {}, {}
    for k = 1, math.floor(0.8 * n + 0.5) do
      x[k] = {}
      for j, f in ipairs(features) do x[k][j] = cols[f][order[k]] end
      y[k] = cols.benign[order[k]]
    end
    for j = 1, #features do
      local m, s = 0, 0
      for _, r in ipairs(x) do m = m + r[j] end
      m = m / #x
      for _, r in ipairs(x) do s = s + (r[j] - m) ^ 2 end
      for _, r in ipairs(x) do r[j] = (r[j] - m) / math.sqrt(s / #x) end
    end
    local model = gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 5, variance = 2},
                             likelihood = gp.likelihoods.bernoulli{link = "logit"}, jitter = 0}
    local value, g = model:mll_and_grad()
    close(value, -92.5783154161217, 1e-11, "LML at (2, 5)")
    close(g[1], 4.79788391792, 1e-9, "d/dlog lengthscale")
    close(g[2], 22.7544519528, 1e-9, "d/dlog variance")
    model:set_vector{math.log(11.37799859), math.log(385.1816426)} -- sklearn's optimum
    close(model:mll(), -49.9540879227, 1e-10, "LML at sklearn's optimum")
  end)

  it("bad input is a clear error", function()
    local x, y = data(10)
    local k = gp.kernels.rbf{}
    local bad = {}
    for i = 1, 10 do bad[i] = y[i] end
    bad[3] = 2
    fails(function() gp.laplace{x = x, y = bad, kernel = k, likelihood = gp.likelihoods.bernoulli{}} end,
          "0 or 1")
    bad[3] = 0 / 0
    fails(function() gp.laplace{x = x, y = bad, kernel = k, likelihood = gp.likelihoods.bernoulli{}} end,
          "NaN")
    fails(function() gp.laplace{x = x, y = y, kernel = k, likelihood = gp.likelihoods.gaussian{}} end,
          "likelihood")
    fails(function() gp.laplace{x = x, y = {1, 0}, kernel = k, likelihood = gp.likelihoods.bernoulli{}} end,
          "rows")
    -- bounds are refused under the model's own name
    fails(function()
      gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.1},
                 likelihood = gp.likelihoods.bernoulli{}, bounds = {lengthscale = {0.1, 10}}}
    end, "^lazytensor: gp: laplace: lengthscale = 0.1 is outside its bounds")
    local model = gp.laplace{x = x, y = y, kernel = k, likelihood = gp.likelihoods.bernoulli{}}
    k.values.lengthscale = 0.123 -- e^{log 0.123} is not 0.123
    local before = model:mll()
    fails(function() model:fit{method = "newton"} end, "method")
    assert.equal(before, model:mll())
    -- a fit stopped by an error in its callback restores the values exactly
    fails(function()
      model:fit{callback = function() error("lazytensor: stop", 0) end}
    end, "stop")
    assert.equal(0.123, k.values.lengthscale)
    assert.equal(before, model:mll())
  end)
end)
