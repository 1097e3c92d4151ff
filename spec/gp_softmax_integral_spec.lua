-- E softmax(f), f ~ N(μ, Σ) with a full C×C covariance (gp/softmax_integral.lua,
-- gp.laplace's multiclass predict_y) against independent references: at C = 2
-- the logistic-normal integral E σ(f₁ − f₂) by a fine composite Simpson rule
-- in plain Lua; at C = 3 a plain-Lua product Simpson rule in the class
-- differences (f₁ − f₃, f₂ − f₃) through their Cholesky factor; at C = 3,
-- 4 and 6 10⁶ Monte Carlo draws from a fixed portable generator, within
-- 4 standard errors; the invariances of softmax (μ + t·1, Σ + α·11ᵀ).
local integral = require "lazytensor.gp.softmax_integral"
local gp = require "lazytensor.gp"
local ref = require "support.ref"
local close = ref.close

local exp, sqrt, pi = math.exp, math.sqrt, math.pi

-- Park–Miller's generator and Box–Muller: the same draws on every Lua.
local function normals(seed)
  local s = seed
  local function uniform()
    s = (16807 * s) % 2147483647
    return s / 2147483647
  end
  local spare
  return function()
    if spare then
      local v = spare
      spare = nil
      return v
    end
    local r, t = sqrt(-2 * math.log(uniform())), 2 * pi * uniform()
    spare = r * math.sin(t)
    return r * math.cos(t)
  end
end

-- Monte Carlo of E softmax(f) over N draws: the means and standard errors.
local function monte_carlo(mu, S, N, seed)
  local C, L = #mu, ref.cholesky(S)
  local draw = normals(seed)
  local sum, sum2, e, f = {}, {}, {}, {}
  for c = 1, C do sum[c], sum2[c] = 0, 0 end
  for _ = 1, N do
    local top = -math.huge
    for c = 1, C do
      e[c] = draw()
      local v = mu[c]
      for k = 1, c do v = v + L[c][k] * e[k] end
      f[c] = v
      if v > top then top = v end
    end
    local z = 0
    for c = 1, C do
      f[c] = exp(f[c] - top)
      z = z + f[c]
    end
    for c = 1, C do
      local p = f[c] / z
      sum[c], sum2[c] = sum[c] + p, sum2[c] + p * p
    end
  end
  local m, se = {}, {}
  for c = 1, C do
    m[c] = sum[c] / N
    se[c] = sqrt((sum2[c] / N - m[c] * m[c]) / N)
  end
  return m, se
end

-- Composite Simpson's nodes and weights for ∫ g(z)φ(z) dz on [−L, L], 2k intervals.
local function simpson_rule(L, k)
  local h, z, w = L / k, {}, {}
  for i = 0, 2 * k do
    z[i + 1] = -L + i * h
    local m = (i == 0 or i == 2 * k) and 1 or (i % 2 == 1 and 4 or 2)
    w[i + 1] = m * h / 3 * exp(-0.5 * z[i + 1] ^ 2) / sqrt(2 * pi)
  end
  return z, w
end

local function simpson(g, L, k)
  local z, w = simpson_rule(L, k)
  local total = 0
  for i = 1, #z do total = total + w[i] * g(z[i]) end
  return total
end

-- A C×C covariance: v·(A·Aᵀ/C + ½I), A fixed (correlated classes).
local function covariance(C, v)
  local A, S = {}, {}
  for i = 1, C do
    A[i] = {}
    for k = 1, C do A[i][k] = math.sin(3.1 * i + 1.7 * k) end
  end
  for i = 1, C do
    S[i] = {}
    for j = 1, C do
      local t = i == j and 0.5 or 0
      for k = 1, C do t = t + A[i][k] * A[j][k] / C end
      S[i][j] = v * t
    end
  end
  return S
end

local function means(C)
  local mu = {}
  for i = 1, C do mu[i] = math.sin(1.3 * i) end
  return mu
end

local function row_sum(p)
  local s = 0
  for _, x in ipairs(p) do s = s + x end
  return s
end

describe("E softmax(f) under a full covariance (gp/softmax_integral.lua)", function()
  it("C = 2 is the logistic-normal integral E σ(f₁ − f₂) (exact binary, 1-d Simpson)", function()
    for _, v in ipairs{0.01, 0.3, 1, 5, 30, 400} do
      local mu = {0.7, -0.2}
      local S = {{v, 0.3 * v}, {0.3 * v, 0.8 * v}}
      local p, err, info = integral.expected_softmax(mu, S)
      assert.are.equal("product", info.method)
      local m, sd = mu[1] - mu[2], sqrt(S[1][1] + S[2][2] - 2 * S[1][2])
      local want = simpson(function(z) return 1 / (1 + exp(-(m + sd * z))) end, 10, 40000)
      close(p[1], want, 0, "P(class 1) at variance " .. v, 1e-11)
      close(p[2], 1 - want, 0, "P(class 2) at variance " .. v, 1e-11)
      assert(err <= 1e-8, "error estimate " .. err)
    end
  end)

  it("C = 3 against a plain-Lua product Simpson rule in the class differences", function()
    for _, v in ipairs{0.2, 2, 10} do
      local mu, S = means(3), covariance(3, v)
      local p, err = integral.expected_softmax(mu, S)
      -- g = (f₁ − f₃, f₂ − f₃) ~ N(m, G), G = D S Dᵀ; g = m + L·(u, w)
      local D = {{1, 0, -1}, {0, 1, -1}}
      local G = ref.matmul(ref.matmul(D, S), ref.transpose(D))
      local L = ref.cholesky(G)
      local m = {mu[1] - mu[3], mu[2] - mu[3]}
      local want = {0, 0, 0}
      local z, w = simpson_rule(9, 250)
      for i = 1, #z do
        for j = 1, #z do
          local g1 = m[1] + L[1][1] * z[i]
          local g2 = m[2] + L[2][1] * z[i] + L[2][2] * z[j]
          local top = math.max(g1, g2, 0)
          local e1, e2, e3 = exp(g1 - top), exp(g2 - top), exp(-top)
          local s = w[i] * w[j] / (e1 + e2 + e3)
          want[1], want[2], want[3] = want[1] + s * e1, want[2] + s * e2, want[3] + s * e3
        end
      end
      for c = 1, 3 do close(p[c], want[c], 0, "P(class " .. c .. "), variance " .. v, 1e-9) end
      assert(err <= 1e-8, "error estimate " .. err)
    end
  end)

  it("C = 3 within 4 standard errors of 10⁶ Monte Carlo draws (fixed seed), C = 4, 6 of 2·10⁵",
     function()
    local cases = {{C = 3, v = 3, method = "product", draws = 1000000},
                   {C = 4, v = 1, method = "product", draws = 200000},
                   {C = 6, v = 2, method = "qmc", draws = 200000}}
    for _, case in ipairs(cases) do
      local mu, S = means(case.C), covariance(case.C, case.v)
      local p, err, info = integral.expected_softmax(mu, S)
      assert.are.equal(case.method, info.method)
      local m, se = monte_carlo(mu, S, case.draws, 12345)
      for c = 1, case.C do
        -- the quadrature's own error (tiny, or the quasi-Monte Carlo's 3 standard errors) added
        local bound = 4 * sqrt(se[c] ^ 2 + (err / 3) ^ 2)
        close(p[c], m[c], 0, "C = " .. case.C .. ", class " .. c, bound)
      end
      close(row_sum(p), 1, 0, "Σ p", 1e-12)
      if case.method == "product" then assert(err <= 1e-6, "error estimate " .. err) end
    end
  end)

  it("softmax's invariances: μ + t·1 and Σ + α·11ᵀ change nothing; Σ = 0 is softmax(μ)", function()
    for _, C in ipairs{3, 4, 5} do
      local mu, S = means(C), covariance(C, 0.5)
      local p = integral.expected_softmax(mu, S)
      local mu2, S2 = {}, {}
      for i = 1, C do
        mu2[i] = mu[i] + 3.7
        S2[i] = {}
        for j = 1, C do S2[i][j] = S[i][j] + 2.5 end
      end
      local q = integral.expected_softmax(mu2, S2)
      for c = 1, C do close(q[c], p[c], 0, "shifted, class " .. c, 1e-11) end
      close(row_sum(p), 1, 0, "Σ p", 1e-12)
      -- all the variance along 1: the latents move together, softmax(μ) exactly
      local flat = {}
      for i = 1, C do
        flat[i] = {}
        for j = 1, C do flat[i][j] = 4 end
      end
      local r, err, info = integral.expected_softmax(mu, flat)
      local z = 0
      for c = 1, C do z = z + exp(mu[c]) end
      for c = 1, C do close(r[c], exp(mu[c]) / z, 1e-14, "softmax(μ)") end
      assert.are.equal(0, err)
      assert.are.equal("exact", info.method)
    end
  end)

  it("a tighter tol refines the rule; the estimate bounds the change", function()
    local mu, S = means(3), covariance(3, 20)
    local p, err = integral.expected_softmax(mu, S, {tol = 1e-4})
    local q, err2 = integral.expected_softmax(mu, S, {tol = 1e-13, max_nodes = 2e6})
    for c = 1, 3 do assert(math.abs(p[c] - q[c]) <= err + err2, "change beyond the estimate") end
    assert(err2 <= 1e-10, "error estimate " .. err2)
  end)

  it("gp.laplace's predict_y: the quadrature by default, rows summing to 1", function()
    local x, y = {}, {}
    for i = 1, 24 do
      local c = (i - 1) % 4 + 1
      x[i] = {math.cos(c * pi / 2) + 0.6 * math.sin(7.3 * i), math.sin(c * pi / 2) + 0.6 * math.cos(5.1 * i)}
      y[i] = c
    end
    local model = gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.8, variance = 3},
                             likelihood = gp.likelihoods.softmax{classes = 4}}
    local xs = {{0, 0}, {1, 0.2}, {5, 5}}
    local P, V, err = model:predict_y(xs)
    local mean, _, covs = model:predict(xs)
    for s = 1, #xs do
      local mu = {}
      for c = 1, 4 do mu[c] = mean:get(s, c) end
      local m, se = monte_carlo(mu, covs[s], 50000, 777)
      local sum = 0
      for c = 1, 4 do
        sum = sum + P:get(s, c)
        close(P:get(s, c), m[c], 0, "point " .. s .. " class " .. c, 4 * se[c] + 1e-12)
        close(V:get(s, c), P:get(s, c) * (1 - P:get(s, c)), 1e-14, "p(1 − p)")
      end
      close(sum, 1, 0, "Σ p", 1e-12)
      assert(err:get(s) <= 1e-6, "error estimate " .. err:get(s))
    end
  end)
end)
