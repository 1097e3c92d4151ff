-- lazytensor.gp's inner-product kernels, gp.kernels.linear{variance,
-- offset} and gp.kernels.polynomial{degree, variance, offset}: gp.exact on
-- multi-d data (lt.kernel in C) against a plain-Lua dense MLL over the
-- formulas written out here, gradients against central differences, the
-- dense path (gp/kernels.lua's Lua formulas) agreeing, offset 0 fixed, bad
-- options.
local gp = require "lazytensor.gp"
local K = gp.kernels
local ref = require "support.ref"
local close = ref.close

-- points in [−scale/2, scale/2]^d
local function scattered(n, d, seed, scale) return ref.scattered(n, d, seed, scale, -scale / 2) end

local function targets(P, rnd)
  local y = {}
  for i, p in ipairs(P) do
    local v = 0
    for q = 1, #p do v = v + q * p[q] + 0.3 * p[q] ^ 2 end
    y[i] = v + 0.2 * (rnd() - 0.5)
  end
  return y
end

-- v·(xᵀy + c)^p over the dimensions dims.
local function ref_kernel(p, v, c, dims)
  return function(x, y)
    local t = c
    for _, d in ipairs(dims) do t = t + x[d] * y[d] end
    return v * t ^ p
  end
end

-- MLL of N(mean, Σ_f f(x_i, x_j) + noise·I) by a plain-Lua Cholesky.
local function ref_mll(kfuns, P, y, noise, mean)
  local n, A = #P, {}
  for i = 1, n do
    A[i] = {}
    for j = 1, n do
      local k = i == j and noise or 0
      for _, f in ipairs(kfuns) do k = k + f(P[i], P[j]) end
      A[i][j] = k
    end
  end
  local L = ref.cholesky(A)
  local r = {}
  for i = 1, n do r[i] = y[i] - mean end
  local z, q, ld = {}, 0, 0
  for i = 1, n do
    local t = r[i]
    for k = 1, i - 1 do t = t - L[i][k] * z[k] end
    z[i] = t / L[i][i]
    q = q + z[i] ^ 2
    ld = ld + 2 * math.log(L[i][i])
  end
  return -0.5 * (q + ld + n * math.log(2 * math.pi))
end

describe("gp inner-product kernels: gp.exact against plain Lua", function()
  local cases = {
    {"linear, d = 3", 3, function() return K.linear{variance = 0.8, offset = 0.5} end,
     {{1, 0.8, 0.5, {1, 2, 3}}}, 2},
    {"polynomial p = 2, d = 3", 3, function() return K.polynomial{variance = 0.3, offset = 1.5} end,
     {{2, 0.3, 1.5, {1, 2, 3}}}, 2},
    {"polynomial p = 3 on dims {2, 3} + rbf, d = 3", 3,
     function()
       return K.polynomial{degree = 3, variance = 0.2, offset = 0.7, dims = {2, 3}}
              + K.rbf{lengthscale = 0.9, variance = 0.4}
     end,
     {{3, 0.2, 0.7, {2, 3}}, "rbf"}, 4},
    {"linear with offset 0 (fixed), d = 2", 2, function() return K.linear{variance = 1.2} end,
     {{1, 1.2, 0, {1, 2}}}, 1},
  }
  for ci, c in ipairs(cases) do
    local name, d, make, refs, nparams = c[1], c[2], c[3], c[4], c[5]
    it(name .. ": MLL to 1e-9 of plain Lua, gradient to central differences", function()
      local P, rnd = scattered(40, d, 500 + ci, 2)
      local y = targets(P, rnd)
      local noise, mean = 0.05, 0.2
      local kernel = make()
      assert.is_false(kernel:is_stationary())
      assert.equal(nparams, kernel:count())
      local model = gp.exact{x = P, y = y, kernel = kernel, noise = noise, mean_value = mean}
      assert.matches("^kernel", model:explain())
      local kfuns = {}
      for i, r in ipairs(refs) do
        kfuns[i] = r == "rbf" and function(a, b)
          local q = 0
          for k = 1, #a do q = q + (a[k] - b[k]) ^ 2 end
          return 0.4 * math.exp(-q / (2 * 0.81))
        end or ref_kernel(r[1], r[2], r[3], r[4])
      end
      close(model:mll(), ref_mll(kfuns, P, y, noise, mean), 1e-9, "mll vs plain Lua")
      local v, g = model:mll_and_grad()
      assert.equal(nparams + 2, #g) -- and the noise and the mean
      ref.check_model_gradient(model, g, name)
      local dense = gp.exact{x = P, y = y, kernel = kernel, noise = noise, mean_value = mean,
                             structure = "dense"}
      local v2, g2 = dense:mll_and_grad()
      close(v, v2, 1e-9, "dense mll")
      for p = 1, #g do close(g[p], g2[p], 1e-8, "dense gradient " .. p) end
    end)
  end

  it("predicts at new points with the C cross-covariance (against the dense path)", function()
    local P, rnd = scattered(30, 2, 77, 2)
    local y = targets(P, rnd)
    local kernel = K.polynomial{degree = 2, variance = 0.5, offset = 1}
    local xs = scattered(5, 2, 99, 2)
    local a = gp.exact{x = P, y = y, kernel = kernel, noise = 0.1}
    local b = gp.exact{x = P, y = y, kernel = kernel, noise = 0.1, structure = "dense"}
    local ma, va = a:predict(xs)
    local mb, vb = b:predict(xs)
    for i = 1, 5 do
      close(ma[i], mb[i], 1e-9, "mean " .. i)
      close(va[i], vb[i], 1e-8, "variance " .. i)
    end
  end)

  it("give gp.sgpr the bound of a non-stationary kernel: tr Kxx point by point", function()
    -- Regression: sgpr took tr Kxx = n·k(x₁, x₁) (right for stationary
    -- kernels only): with this polynomial kernel its "lower bound" was 672
    -- against an exact MLL of 7.5. p = 2 in d = 2 has rank 6 ≤ m = 10
    -- inducing points: Q = K but for the jitter on Kzz (the points chosen
    -- leave it some small eigenvalues): the bound within 0.05 of the MLL.
    local P, rnd = scattered(120, 2, 7, 2)
    local y = targets(P, rnd)
    local kernel = K.polynomial{degree = 2, variance = 0.7, offset = 1}
    local exact = gp.exact{x = P, y = y, kernel = kernel, noise = 0.1}:mll()
    local model = gp.sgpr{x = P, y = y, kernel = kernel, noise = 0.1, inducing = 10}
    local bound = model:mll()
    assert.is_true(bound <= exact + 1e-9, string.format("bound %.10g > exact %.10g", bound, exact))
    assert.is_true(exact - bound < 0.05, string.format("bound %.10g, exact %.10g", bound, exact))
    -- its gradient (hyperparameters, noise, mean, inducing points) to central differences
    local _, g = model:mll_and_grad()
    ref.check_model_gradient(model, g, "sgpr", 1e-5, 1e-5)
    -- a linear kernel (rank 3 < m) with a small rbf: still below the exact MLL
    local sum = K.linear{variance = 1, offset = 0.5} + K.rbf{lengthscale = 1, variance = 0.1}
    local e2 = gp.exact{x = P, y = y, kernel = sum, noise = 0.1}:mll()
    local b2 = gp.sgpr{x = P, y = y, kernel = sum, noise = 0.1, inducing = 10}:mll()
    assert.is_true(b2 <= e2 + 1e-9, string.format("bound %.10g > exact %.10g", b2, e2))
  end)

  it("describe the degree and keep it out of the hyperparameters", function()
    local k = K.polynomial{degree = 4, offset = 0.5}
    assert.equal(2, k:count())
    assert.matches("degree = 4", k:describe())
    assert.are_not.equal(k:fingerprint(), K.polynomial{degree = 3, offset = 0.5}:fingerprint())
    assert.matches("offset = 0 %(fixed%)", K.linear{}:describe())
  end)

  it("reject bad options", function()
    local function fails(pattern, f, spec)
      local ok, err = pcall(f, spec)
      assert.is_false(ok)
      assert.matches("^lazytensor: gp: " .. pattern, tostring(err))
    end
    fails("linear offset must be a non%-negative number, got %-1", K.linear, {offset = -1})
    fails("polynomial degree must be an integer from 1 to 64, got 2.5", K.polynomial,
          {degree = 2.5})
    fails("polynomial degree must be an integer from 1 to 64, got 0", K.polynomial, {degree = 0})
    fails("linear: unknown key 'lengthscale'", K.linear, {lengthscale = {1, 2}})
    fails("linear: unknown key 'degree'", K.linear, {degree = 2})
    fails("polynomial has no hyperparameter 'degree' %(fixed%)", K.polynomial,
          {fixed = {degree = true}})
    fails("linear variance must be a positive number", K.linear, {variance = 0})
  end)
end)
