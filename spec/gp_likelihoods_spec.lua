-- gp.likelihoods against plain-Lua references: the closed forms (gaussian
-- ELL, poisson ELL, probit's predictive Φ(m/√(1 + v))) written out with
-- math.*, and the other expectations by Simpson's rule on a fine grid in
-- plain Lua; gradients through lt.gradcheck.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local close = require("support.ref").close
local L = gp.likelihoods

local sqrt, exp, log, pi = math.sqrt, math.exp, math.log, math.pi

---------------------------------------------------- plain-Lua reference --

-- erfc(x): the Maclaurin series of erf below |x| = 2, Lentz's continued
-- fraction above (both to ~1e-14; independent of lt.erfc's C code).
local function erfc(x)
  if x < 0 then return 2 - erfc(-x) end
  if x < 2 then
    local term, sum, n = x, x, 0
    repeat
      n = n + 1
      term = -term * x * x / n
      local add = term / (2 * n + 1)
      sum = sum + add
    until math.abs(add) < 1e-17
    return 1 - 2 / sqrt(pi) * sum
  end
  -- erfc(x) = e^{-x²}/√π · 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...))))
  local tiny = 1e-300
  local f, C, D = x, x, 0
  for k = 1, 300 do
    local a = k / 2
    D = x + a * D
    D = 1 / (math.abs(D) < tiny and tiny or D)
    C = x + a / C
    local delta = C * D
    f = f * delta
    if math.abs(delta - 1) < 1e-16 then break end
  end
  return exp(-x * x) / sqrt(pi) / f
end

local function Phi(x) return 0.5 * erfc(-x / sqrt(2)) end

-- ∫ N(f; m, v) g(f) df by composite Simpson on m ± 12√v, 4000 intervals.
local function simpson(g, m, v)
  local s = sqrt(v)
  local a, b, n = m - 12 * s, m + 12 * s, 4000
  local h = (b - a) / n
  local total = 0
  for i = 0, n do
    local f = a + i * h
    local w = (i == 0 or i == n) and 1 or (i % 2 == 1 and 4 or 2)
    total = total + w * g(f) * exp(-(f - m) ^ 2 / (2 * v)) / sqrt(2 * pi * v)
  end
  return total * h / 3
end

local function lgamma_ref(n) -- log n! ... for whole n, by a sum
  local s = 0
  for k = 2, n do s = s + log(k) end
  return s
end

local M = {0.3, -1.2, 2.1, 0.0, -0.4}
local V = {0.5, 0.1, 1.5, 2.0, 0.02}

local function vec(t) return lt.tensor(t) end

local function each(values, f)
  for i = 1, #M do f(i, values[i], M[i], V[i]) end
end

local function check_all(got, want, rel, what, abs_tol)
  local g = got:totable()
  for i = 1, #want do close(g[i], want[i], rel, what .. "[" .. i .. "]", abs_tol) end
end

describe("gp.likelihoods", function()
  it("Gauss-Hermite integrates polynomials of degree < 2k exactly", function()
    local x, w = L.gauss_hermite(20)
    -- ∫ e^{-x²} x^{2j} dx = Γ(j + ½) = (2j − 1)!!/2^j · √π
    for j = 0, 19 do
      local s = 0
      for i = 1, 20 do s = s + w[i] * x[i] ^ (2 * j) end
      local want = sqrt(pi)
      for q = 1, j do want = want * (2 * q - 1) / 2 end
      close(s, want, 1e-12, "moment " .. 2 * j)
    end
    assert.has_error(function() L.gauss_hermite(0) end)
  end)

  it("gaussian: closed form and quadrature equal the exact formula", function()
    local lik = L.gaussian{noise = 0.3}
    local y = {0.5, -1, 2.5, 0.2, -0.3}
    local want = {}
    each(y, function(i, yi, m, v)
      want[i] = -0.5 * log(2 * pi * 0.3) - ((yi - m) ^ 2 + v) / (2 * 0.3)
    end)
    check_all(lik:expected_log_prob(vec(y), vec(M), vec(V)), want, 1e-13, "closed")
    check_all(lik:quadrature_log_prob(vec(y), vec(M), vec(V)), want, 1e-12, "quadrature")
    local mean, var = lik:predict_y(vec(M), vec(V))
    check_all(mean, M, 1e-15, "mean")
    local wv = {}
    for i = 1, #V do wv[i] = V[i] + 0.3 end
    check_all(var, wv, 1e-15, "variance")
  end)

  it("poisson: quadrature equals Σ y·m − exp(m + v/2) − log y!", function()
    local lik = L.poisson{}
    local y = {0, 3, 7, 1, 2}
    local want = {}
    each(y, function(i, yi, m, v) want[i] = yi * m - exp(m + v / 2) - lgamma_ref(yi) end)
    check_all(lik:quadrature_log_prob(vec(y), vec(M), vec(V)), want, 1e-10, "quadrature")
    check_all(lik:expected_log_prob(vec(y), vec(M), vec(V)), want, 1e-13, "closed")
    local mean, var = lik:predict_y(vec(M), vec(V))
    local wm, wv = {}, {}
    each(y, function(i, _, m, v)
      wm[i] = exp(m + v / 2)
      wv[i] = wm[i] + (exp(v) - 1) * exp(2 * m + v)
    end)
    check_all(mean, wm, 1e-13, "mean")
    check_all(var, wv, 1e-13, "variance")
  end)

  it("bernoulli probit: predictive Φ(m/√(1+v)), ELL against Simpson", function()
    local lik = L.bernoulli{link = "probit"}
    local y = {1, 0, 1, 0, 1}
    local p = lik:predict_y(vec(M), vec(V))
    local want, ell = {}, {}
    each(y, function(i, yi, m, v)
      want[i] = Phi(m / sqrt(1 + v))
      local s = 2 * yi - 1
      ell[i] = simpson(function(f) return log(Phi(s * f)) end, m, v)
    end)
    check_all(p, want, 1e-12, "P(y = 1)")
    -- the quadrature of E Φ(f) itself, through the log-likelihood
    local ones = vec{1, 1, 1, 1, 1}
    local r, w = L.gauss_hermite(20)
    for i = 1, #M do
      local e = 0
      for k = 1, 20 do
        local f = lt.tensor{M[i] + sqrt(2 * V[i]) * r[k]}
        e = e + w[k] / sqrt(pi) * exp(lik:log_prob(ones:narrow(1, 1, 1), f):get(1))
      end
      close(e, want[i], 1e-8, "E Phi(f) by quadrature")
    end
    check_all(lik:expected_log_prob(vec(y), vec(M), vec(V)), ell, 1e-6, "ELL")
  end)

  it("bernoulli logit and student_t: ELL against Simpson", function()
    local y01 = {1, 0, 1, 0, 1}
    local ell = {}
    each(y01, function(i, yi, m, v)
      local s = 2 * yi - 1
      ell[i] = simpson(function(f) return -log(1 + exp(-s * f)) end, m, v)
    end)
    check_all(L.bernoulli{link = "logit"}:expected_log_prob(vec(y01), vec(M), vec(V)), ell, 1e-6,
              "logit ELL")
    local pm = {}
    each(y01, function(i, _, m, v) pm[i] = simpson(function(f) return 1 / (1 + exp(-f)) end, m, v) end)
    check_all(L.bernoulli{link = "logit"}:predict_y(vec(M), vec(V)), pm, 1e-7, "logit P(y = 1)")

    local y = {0.5, -3, 2.5, 0.2, 6}
    local nu, sc = 3, 0.7
    local c = L.lgamma((nu + 1) / 2) - L.lgamma(nu / 2) - 0.5 * log(nu * pi * sc * sc)
    close(L.lgamma(2), 0, 1e-14, "lgamma(2)")
    close(L.lgamma(0.5), 0.5 * log(pi), 1e-14, "lgamma(1/2)")
    local want = {}
    each(y, function(i, yi, m, v)
      want[i] = simpson(function(f)
        return c - (nu + 1) / 2 * log(1 + (yi - f) ^ 2 / (nu * sc * sc))
      end, m, v)
    end)
    local lik = L.student_t{df = nu, scale = sc}
    check_all(lik:expected_log_prob(vec(y), vec(M), vec(V)), want, 1e-3, "student_t ELL (20)")
    check_all(lik:expected_log_prob(vec(y), vec(M), vec(V), nil, {nodes = 100}), want, 1e-6,
              "student_t ELL (100)")
    local _, var = lik:predict_y(vec(M), vec(V))
    close(var:get(1), V[1] + sc * sc * nu / (nu - 2), 1e-14, "student_t variance")
  end)

  it("Newton derivatives are the log-likelihood's (gp.laplace)", function()
    for _, link in ipairs{"probit", "logit"} do
      local lik = L.bernoulli{link = link}
      local y = vec{1, 0, 1, 0, 1}
      local f = vec{0.3, -1.2, 2.1, 0.0, -6}
      local d1, d2 = lik:derivatives(y, f)
      local g = lt.grad(function(ff) return lik:log_prob(y, ff):sum() end)(f)
      check_all(d1, g:totable(), 1e-10, link .. " d1 vs lt.grad")
      local h = 1e-5
      for i = 1, 5 do
        local fp, fm = f:clone(), f:clone()
        fp:set(i, f:get(i) + h)
        fm:set(i, f:get(i) - h)
        local a = lik:derivatives(y, fp):get(i)
        local b = lik:derivatives(y, fm):get(i)
        close(d2:get(i), (a - b) / (2 * h), 1e-6, link .. " d2", 1e-9)
      end
    end
  end)

  it("expected log-likelihoods pass lt.gradcheck in m, v and hyperparameters", function()
    local cases = {
      {L.gaussian{noise = 0.3}, {0.5, -1, 2.5, 0.2, -0.3}, {noise = 0.3}},
      {L.poisson{}, {0, 3, 7, 1, 2}, {}},
      {L.bernoulli{link = "probit"}, {1, 0, 1, 0, 1}, {}},
      {L.bernoulli{link = "logit"}, {1, 0, 1, 0, 1}, {}},
      {L.student_t{df = 3, scale = 0.7}, {0.5, -3, 2.5, 0.2, 6}, {scale = 0.7}},
    }
    for _, case in ipairs(cases) do
      local lik, y = case[1], vec(case[2])
      local ok, err = lt.gradcheck(function(p)
        local theta = {}
        for name in pairs(case[3]) do theta[name] = p[name] end
        return lik:expected_log_prob(y, p.m, p.v, theta):sum()
      end, {m = vec(M), v = vec(V), noise = case[3].noise, scale = case[3].scale})
      assert(ok, lik.kind .. " gradcheck " .. tostring(err))
    end
  end)

  it("bad labels and options are clear errors", function()
    local function fails(f, pattern)
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("^lazytensor:"), tostring(err))
      assert.truthy(tostring(err):find(pattern), tostring(err))
    end
    fails(function() L.bernoulli{}:check_labels{0, 1, 2} end, "0 or 1")
    fails(function() L.bernoulli{}:check_labels{0, -1} end, "0 or 1")
    fails(function() L.poisson{}:check_labels{0, -1} end, "non%-negative")
    fails(function() L.poisson{}:check_labels{0, 1.5} end, "non%-negative")
    fails(function() L.gaussian{}:check_labels{0, 0 / 0} end, "NaN")
    fails(function() L.bernoulli{}:check_labels{0 / 0} end, "NaN")
    fails(function() L.bernoulli{link = "cauchit"} end, "link")
    fails(function() L.gaussian{noise = -1} end, "positive")
    fails(function() L.student_t{df = 0} end, "positive")
    fails(function() L.gaussian{nosie = 1} end, "unknown key")
    fails(function() L.gaussian{fixed = {scale = true}} end, "no hyperparameter")
    assert.same({0, 1, 1}, L.bernoulli{}:check_labels{0, 1, 1}:totable())
  end)
end)
