-- gp.laplace with gp.likelihoods.softmax{classes = C} (R&W Algorithms 3.3
-- and 3.4) against independent references: the mode from a plain-Lua
-- Newton iteration on the whole nC-vector (dense W = D − ΠΠᵀ, ref.solve),
-- log q(y) by R&W eq. 3.44 in plain Lua (K⁻¹f̂ and det(I + K·W) by
-- ref.solve / ref.det), C = 2 against the binary logit Laplace with the
-- kernel 2K (the class difference f¹ − f² carries all of the likelihood),
-- the predictive moments from K** − K*ᵀW(I + K·W)⁻¹K*, class probabilities
-- against a fine 1-d quadrature (C = 2), the gradient against central
-- differences of log q with the mode found again, three blobs classified.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ref = require "support.ref"
local close = ref.close

local exp, log = math.exp, math.log

local function rbf(l, v, a, b)
  local r2 = 0
  for q = 1, #a do r2 = r2 + ((a[q] - b[q]) / l) ^ 2 end
  return v * exp(-0.5 * r2)
end

-- n points around C centres (deterministic scatter), labels 1..C.
local CENTRES = {{0, 0}, {2, 0}, {1, 1.7}, {-1, 1.5}}
local function blobs(n, C, spread, phase)
  local x, y = {}, {}
  for i = 1, n do
    local c = (i - 1) % C + 1
    local t = i + (phase or 0)
    x[i] = {CENTRES[c][1] + spread * math.sin(7.3 * t), CENTRES[c][2] + spread * math.cos(11.1 * t)}
    y[i] = c
  end
  return x, y
end

-- Mislabels every fifth point (the classes overlap: a finite mode).
local function noisy(y, C)
  local out = {}
  for i, c in ipairs(y) do out[i] = i % 5 == 0 and c % C + 1 or c end
  return out
end

---------------------------------------------------- plain-Lua reference --

-- The nC×nC block-diagonal K (class-major: entry (c−1)n + i); l, v
-- numbers (one kernel shared) or per class lists (class c: l[c], v[c]).
local function big_K(x, C, l, v, jitter)
  local n, K = #x, {}
  for c = 1, C do
    local lc = type(l) == "table" and l[c] or l
    local vc = type(v) == "table" and v[c] or v
    local jc = type(jitter) == "table" and jitter[c] or jitter
    for i = 1, n do
      local row = {}
      for c2 = 1, C do
        for j = 1, n do
          row[#row + 1] = c == c2 and rbf(lc, vc, x[i], x[j]) + (i == j and jc or 0) or 0
        end
      end
      K[(c - 1) * n + i] = row
    end
  end
  return K
end

-- π (nC, class-major) and W = D − ΠΠᵀ at f.
local function pi_W(f, n, C)
  local p = {}
  for i = 1, n do
    local top = -math.huge
    for c = 1, C do top = math.max(top, f[(c - 1) * n + i]) end
    local z = 0
    for c = 1, C do z = z + exp(f[(c - 1) * n + i] - top) end
    for c = 1, C do p[(c - 1) * n + i] = exp(f[(c - 1) * n + i] - top) / z end
  end
  local W = {}
  for r = 1, n * C do
    W[r] = {}
    for s = 1, n * C do W[r][s] = 0 end
  end
  for i = 1, n do
    for c = 1, C do
      local r = (c - 1) * n + i
      for c2 = 1, C do
        local s = (c2 - 1) * n + i
        W[r][s] = (c == c2 and p[r] or 0) - p[r] * p[s]
      end
    end
  end
  return p, W
end

local function one_hot_vec(y, n, C)
  local t = {}
  for c = 1, C do
    for i = 1, n do t[(c - 1) * n + i] = y[i] == c and 1 or 0 end
  end
  return t
end

-- I + K·W (nC×nC).
local function I_plus_KW(K, W)
  local KW = ref.matmul(K, W)
  for r = 1, #KW do KW[r][r] = KW[r][r] + 1 end
  return KW
end

-- Newton on the whole vector: f ← K(I + W K)⁻¹(W f + t − π) = (K⁻¹ + W)⁻¹(W f + t − π).
local function ref_mode(K, y, n, C)
  local N, f = n * C, {}
  for r = 1, N do f[r] = 0 end
  local t = one_hot_vec(y, n, C)
  for _ = 1, 60 do
    local p, W = pi_W(f, n, C)
    local Wf = ref.matvec(W, f)
    local b = {}
    for r = 1, N do b[r] = Wf[r] + t[r] - p[r] end
    local IWK = ref.matmul(W, K)
    for r = 1, N do IWK[r][r] = IWK[r][r] + 1 end
    f = ref.matvec(K, ref.solve(IWK, b))
  end
  return f
end

-- R&W eq. 3.44: −½ f̂ᵀK⁻¹f̂ + tᵀf̂ − Σ_i log Σ_c e^{f̂_ic} − ½ log det(I + K·W).
local function ref_log_q(K, f, y, n, C)
  local t = one_hot_vec(y, n, C)
  local alpha = ref.solve(K, f)
  local value = 0
  for r = 1, n * C do value = value - 0.5 * f[r] * alpha[r] + t[r] * f[r] end
  for i = 1, n do
    local z = 0
    for c = 1, C do z = z + exp(f[(c - 1) * n + i]) end
    value = value - log(z)
  end
  local _, W = pi_W(f, n, C)
  return value - 0.5 * log(ref.det(I_plus_KW(K, W)))
end

local function fails(f, pattern)
  local ok, err = pcall(f)
  assert.is_false(ok)
  assert.truthy(tostring(err):find("^lazytensor:"), tostring(err))
  assert.truthy(tostring(err):find(pattern, 1, true), tostring(err))
end

local function model_of(x, y, C, l, v, extra)
  local spec = {x = x, y = y, kernel = gp.kernels.rbf{lengthscale = l, variance = v},
                likelihood = gp.likelihoods.softmax{classes = C}, jitter = 1e-8}
  for k, val in pairs(extra or {}) do spec[k] = val end
  return gp.laplace(spec)
end

describe("gp.laplace multiclass (softmax)", function()
  it("the mode is a plain-Lua Newton iteration's, log q is eq. 3.44 (C = 2 and 3)", function()
    for _, C in ipairs{2, 3} do
      local x, y = blobs(12, C, 0.6)
      y = noisy(y, C)
      local n, l, v = #x, 0.9, 1.7
      local model = model_of(x, y, C, l, v)
      local value, info = model:mll()
      assert.is_true(info.converged)
      local K = big_K(x, C, l, v, 1e-8)
      local f = ref_mode(K, y, n, C)
      local F = model:find_mode().F:totable()
      for c = 1, C do
        for i = 1, n do close(F[i][c], f[(c - 1) * n + i], 1e-7, "mode", 1e-8) end
      end
      close(value, ref_log_q(K, f, y, n, C), 1e-9, "log q (C = " .. C .. ")")
    end
  end)

  it("C = 2: log q and the class difference are the binary logit Laplace's with 2K", function()
    local x, y = blobs(16, 2, 0.7)
    y = noisy(y, 2)
    local multi = model_of(x, y, 2, 0.8, 1.5)
    local labels = {}
    for i, c in ipairs(y) do labels[i] = c == 1 and 1 or 0 end
    local binary = gp.laplace{x = x, y = labels, jitter = 2e-8,
                              kernel = gp.kernels.rbf{lengthscale = 0.8, variance = 3},
                              likelihood = gp.likelihoods.bernoulli{link = "logit"}}
    close(multi:mll(), binary:mll(), 1e-9, "log q")
    local F, g = multi:find_mode().F:totable(), binary:find_mode().f:totable()
    for i = 1, #x do close(F[i][1] - F[i][2], g[i], 1e-7, "f1 − f2", 1e-8) end
  end)

  it("predictions: the moments of Algorithm 3.4 and the class probabilities", function()
    local C, l, v = 3, 0.9, 1.7
    local x, y = blobs(12, C, 0.6)
    y = noisy(y, C)
    local n = #x
    local model = model_of(x, y, C, l, v)
    local xs = {{0.5, 0.3}, {1.2, 1.1}}
    local mean, var, covs = model:predict(xs)
    -- plain Lua: μ* = K*ᵀ(t − π̂), Σ* = K** − K*ᵀ W (I + K W)⁻¹ K*
    local K = big_K(x, C, l, v, 1e-8)
    local f = ref_mode(K, y, n, C)
    local p, W = pi_W(f, n, C)
    local t = one_hot_vec(y, n, C)
    local IKW = I_plus_KW(K, W)
    for s, point in ipairs(xs) do
      local Q = {} -- nC×C: class c's column k* in block c
      for r = 1, n * C do
        Q[r] = {}
        for c = 1, C do Q[r][c] = 0 end
      end
      for c = 1, C do
        for i = 1, n do Q[(c - 1) * n + i][c] = rbf(l, v, x[i], point) end
      end
      for c = 1, C do
        local m = 0
        for i = 1, n do m = m + Q[(c - 1) * n + i][c] * (t[(c - 1) * n + i] - p[(c - 1) * n + i]) end
        close(mean:get(s, c), m, 1e-7, "mean", 1e-8)
        local col = {}
        for r = 1, n * C do col[r] = Q[r][c] end
        local WX = ref.matvec(W, ref.solve(IKW, col))
        for c2 = 1, C do
          local q = 0
          for r = 1, n * C do q = q + Q[r][c2] * WX[r] end
          local want = (c == c2 and v or 0) - q
          close(covs[s][c2][c], want, 1e-7, "covariance", 1e-8)
        end
        close(var:get(s, c), covs[s][c][c], 1e-12, "variance")
      end
    end
    -- the joint posterior's blocks are the same covariances
    local post = model:posterior(xs)
    local S = post:covariance():dense()
    close(S:get(2, 2 + 2), covs[2][1][2], 1e-9, "posterior (class 1, class 2) at point 2")
    close(post:mean():get(2 * 2 + 1), mean:get(1, 3), 1e-12, "posterior mean")
    -- class probabilities: rows sum to 1
    local P = model:predict_y(xs)
    for s = 1, #xs do
      local sum = 0
      for c = 1, C do sum = sum + P:get(s, c) end
      close(sum, 1, 1e-12, "Σ p")
    end
  end)

  it("C = 2: predict_y is E σ(f¹ − f²) under the correlated latents (1-d quadrature)", function()
    local x, y = blobs(14, 2, 0.8)
    y = noisy(y, 2)
    local model = gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.8, variance = 2},
                             likelihood = gp.likelihoods.softmax{classes = 2}}
    local xs = {{0.9, 0.1}, {2.4, 0.3}, {6, -4}}
    local mean, _, covs = model:predict(xs)
    local P, _, err = model:predict_y(xs)
    local Pmc, _, se = model:predict_y(xs, {samples = 4000})
    for s = 1, #xs do
      local m = mean:get(s, 1) - mean:get(s, 2)
      local S = covs[s]
      local sd = math.sqrt(S[1][1] + S[2][2] - 2 * S[1][2])
      -- softmax's W couples the classes: the covariance counts in f¹ − f²'s variance
      -- (not at the third point, far from the data: there the prior's, 0)
      if s < 3 then assert(math.abs(S[1][2]) > 0.05 * S[1][1], "cross-class covariance " .. S[1][2]) end
      local total, steps = 0, 4000
      for k = 0, steps do -- trapezoid on ±8 sd
        local z = -8 + 16 * k / steps
        local w = (k == 0 or k == steps) and 0.5 or 1
        total = total + w * exp(-0.5 * z * z) / (1 + exp(-(m + sd * z)))
      end
      local want = total * 16 / steps / math.sqrt(2 * math.pi)
      close(P:get(s, 1), want, 0, "P(class 1)", 1e-10)
      close(P:get(s, 2), 1 - want, 0, "P(class 2)", 1e-10)
      assert(err:get(s) <= 1e-8, "error estimate " .. err:get(s))
      -- Monte Carlo over 4000 fixed antithetic samples: within 4 of its standard errors
      close(Pmc:get(s, 1), want, 0, "P(class 1), Monte Carlo", 4 * se:get(s))
    end
  end)

  it("the gradient matches central differences of log q (mode found again)", function()
    local C = 3
    local x, y = blobs(15, C, 0.7)
    y = noisy(y, C)
    local kernels = {
      gp.kernels.rbf{lengthscale = {0.8, 1.2}, variance = 1.5},
      gp.kernels.scale(gp.kernels.matern52{lengthscale = 0.9, fixed = {variance = true}}, 2)
      + gp.kernels.linear{variance = 0.3, offset = 0.5},
    }
    for k, kernel in ipairs(kernels) do
      local model = gp.laplace{x = x, y = y, kernel = kernel, tol = 1e-13,
                               likelihood = gp.likelihoods.softmax{classes = C}}
      local _, g = model:mll_and_grad()
      local f, p = model:gradient_objective{implicit = false}
      local explicit = lt.grad(f)(p)
      local v0 = model:get_vector()
      assert.are.equal(#v0, #g)
      local implicit_matters = false
      local names = {}
      for name in pairs(p) do names[#names + 1] = name end
      table.sort(names)
      local flat = {}
      for _, name in ipairs(names) do
        local e = explicit[name]
        if lt.is_tensor(e) and e:dim() > 0 then
          for _, q in ipairs(e:totable()) do flat[#flat + 1] = q end
        else
          flat[#flat + 1] = lt.is_tensor(e) and e:item() or e
        end
      end
      for j = 1, #v0 do
        local fd = ref.central_difference(model, v0, j, 1e-5)
        close(g[j], fd, 1e-5, "kernel " .. k .. " d/dθ" .. j, 1e-6)
        if math.abs(flat[j] - fd) > 1e-3 * (1 + math.abs(fd)) then implicit_matters = true end
      end
      model:set_vector(v0)
      assert.is_true(implicit_matters, "the explicit part alone should be wrong somewhere")
    end
  end)

  it("classifies three overlapping blobs as well as the nearest centre; fit raises log q",
     function()
    -- isotropic blobs of one spread: the nearest centre is (near) the Bayes rule
    local C = 3
    local x, y = blobs(45, C, 1.0)
    local xt, yt = blobs(60, C, 1.0, 0.37)
    local model = gp.laplace{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.5},
                             likelihood = gp.likelihoods.softmax{classes = C}}
    local before = model:mll()
    local res = model:fit{max_iter = 20}
    assert(res.mll > before + 1, res.mll .. " vs " .. before)
    assert.is_true(res.mode_converged)
    local P = model:predict_y(xt):totable()
    local right, nearest, nlpd = 0, 0, 0
    for i, row in ipairs(P) do
      local best, near, dist = 1, 1, math.huge
      for c = 1, C do
        if row[c] > row[best] then best = c end
        local d = (xt[i][1] - CENTRES[c][1]) ^ 2 + (xt[i][2] - CENTRES[c][2]) ^ 2
        if d < dist then near, dist = c, d end
      end
      if best == yt[i] then right = right + 1 end
      if near == yt[i] then nearest = nearest + 1 end
      nlpd = nlpd - log(row[yt[i]]) / #xt
    end
    -- measured: 0.85 held-out against the nearest centre's 0.867, NLPD 0.372 (log 3 = 1.10)
    assert(right / #xt >= 0.8, "held-out accuracy " .. right / #xt)
    assert(right / #xt >= nearest / #xt - 0.05, right / #xt .. " vs " .. nearest / #xt)
    assert(nlpd < 0.6, "NLPD " .. nlpd)
  end)

  it("bad input: labels outside 1..C, fractional or NaN; NaN inputs", function()
    local x = blobs(6, 3, 0.5)
    local lik = gp.likelihoods.softmax{classes = 3}
    local function build(y, xx)
      return gp.laplace{x = xx or x, y = y, kernel = gp.kernels.rbf{}, likelihood = lik}
    end
    fails(function() build{1, 2, 3, 4, 1, 2} end, "labels must be classes 1..3")
    fails(function() build{0, 2, 3, 1, 1, 2} end, "labels must be classes 1..3")
    fails(function() build{1, 2, 1.5, 1, 1, 2} end, "labels must be classes 1..3")
    fails(function() build{1, 2, 0 / 0, 1, 1, 2} end, "laplace y")
    fails(function() build{1, 2, 3} end, "y has 3 values for 6 rows of x")
    local bad = blobs(6, 3, 0.5)
    bad[4][2] = 0 / 0
    fails(function() build({1, 2, 3, 1, 2, 3}, bad) end, "x[4][2]")
    -- the multiclass model keeps the binary model's option checks
    fails(function()
      gp.laplace{x = x, y = {1, 2, 3, 1, 2, 3}, kernel = gp.kernels.rbf{}, likelihood = lik,
                 max_newton = 0}
    end, "max_newton")
  end)
end)

---------------------------------------------------- a kernel per class --

-- Class c's kernel: rbf with its own lengthscale and variance.
local LS, VS = {0.7, 1.3, 0.9}, {1.2, 0.6, 2.5}
local function class_kernels(C, ls, vs)
  local ks = {}
  for c = 1, C do ks[c] = gp.kernels.rbf{lengthscale = ls[c], variance = vs[c]} end
  return ks
end

local function per_class_model(x, y, C, extra)
  local spec = {x = x, y = y, kernels = class_kernels(C, LS, VS),
                likelihood = gp.likelihoods.softmax{classes = C}, jitter = 1e-8}
  for k, val in pairs(extra or {}) do spec[k] = val end
  return gp.laplace(spec)
end

describe("gp.laplace multiclass with a kernel per class (kernels = {...})", function()
  it("the mode is a plain-Lua Newton iteration's with block-diagonal K, log q eq. 3.44", function()
    local C = 3
    local x, y = blobs(15, C, 0.7)
    y = noisy(y, C)
    local n = #x
    local model = per_class_model(x, y, C)
    local value, info = model:mll()
    assert.is_true(info.converged)
    local K = big_K(x, C, LS, VS, 1e-8)
    local f = ref_mode(K, y, n, C)
    local F = model:find_mode().F:totable()
    for c = 1, C do
      for i = 1, n do close(F[i][c], f[(c - 1) * n + i], 1e-7, "mode", 1e-8) end
    end
    close(value, ref_log_q(K, f, y, n, C), 1e-9, "log q")
    -- not the shared kernel's numbers: the per-class kernels matter
    for c = 1, C do
      local shared = model_of(x, y, C, LS[c], VS[c])
      assert(math.abs(shared:mll() - value) > 1e-3, shared:mll() .. " vs " .. value)
    end
  end)

  it("the default jitter is each class's: 10⁻⁸ times its own variance", function()
    local C = 3
    local x, y = blobs(12, C, 0.6)
    y = noisy(y, C)
    local model = gp.laplace{x = x, y = y, kernels = class_kernels(C, LS, VS),
                             likelihood = gp.likelihoods.softmax{classes = C}}
    local jit = {}
    for c = 1, C do jit[c] = 1e-8 * VS[c] end
    local K = big_K(x, C, LS, VS, jit)
    close(model:mll(), ref_log_q(K, ref_mode(K, y, #x, C), y, #x, C), 1e-9, "log q")
  end)

  it("predict: means and C×C covariances against K** − Q*ᵀW(I + KW)⁻¹Q* with per-class blocks",
     function()
    local C = 3
    local x, y = blobs(12, C, 0.6)
    y = noisy(y, C)
    local n = #x
    local model = per_class_model(x, y, C)
    local xs = {{0.5, 0.3}, {1.2, 1.1}}
    local mean, var, covs = model:predict(xs)
    local K = big_K(x, C, LS, VS, 1e-8)
    local f = ref_mode(K, y, n, C)
    local p, W = pi_W(f, n, C)
    local t = one_hot_vec(y, n, C)
    local IKW = I_plus_KW(K, W)
    for s, point in ipairs(xs) do
      local Q = {}
      for r = 1, n * C do
        Q[r] = {}
        for c = 1, C do Q[r][c] = 0 end
      end
      for c = 1, C do
        for i = 1, n do Q[(c - 1) * n + i][c] = rbf(LS[c], VS[c], x[i], point) end
      end
      for c = 1, C do
        local m = 0
        for i = 1, n do m = m + Q[(c - 1) * n + i][c] * (t[(c - 1) * n + i] - p[(c - 1) * n + i]) end
        close(mean:get(s, c), m, 1e-7, "mean", 1e-8)
        local col = {}
        for r = 1, n * C do col[r] = Q[r][c] end
        local WX = ref.matvec(W, ref.solve(IKW, col))
        for c2 = 1, C do
          local q = 0
          for r = 1, n * C do q = q + Q[r][c2] * WX[r] end
          close(covs[s][c2][c], (c == c2 and VS[c] or 0) - q, 1e-7, "covariance", 1e-8)
        end
        close(var:get(s, c), covs[s][c][c], 1e-12, "variance")
      end
    end
    local post = model:posterior(xs)
    local S = post:covariance():dense()
    close(S:get(2, 2 + 2), covs[2][1][2], 1e-9, "posterior (class 1, class 2) at point 2")
    close(S:get(2 * 2 + 1, 2 * 2 + 1), covs[1][3][3], 1e-9, "posterior (class 3, class 3)")
    close(post:mean():get(2 * 2 + 1), mean:get(1, 3), 1e-12, "posterior mean")
  end)

  it("the gradient in every class's hyperparameters matches central differences", function()
    local C = 3
    local x, y = blobs(15, C, 0.7)
    y = noisy(y, C)
    local cases = {
      per_class_model(x, y, C, {tol = 1e-13}),
      gp.laplace{x = x, y = y, tol = 1e-13, likelihood = gp.likelihoods.softmax{classes = C},
                 kernels = {gp.kernels.rbf{lengthscale = {0.8, 1.2}, variance = 1.5},
                            gp.kernels.matern52{lengthscale = 0.9, variance = 0.7},
                            gp.kernels.scale(gp.kernels.rbf{lengthscale = 1.1,
                                                            fixed = {variance = true}}, 2)
                            + gp.kernels.linear{variance = 0.3, offset = 0.5}}},
    }
    -- rbf ×3 (ℓ, v); rbf ARD (ℓ₁, ℓ₂, v), matern52 (ℓ, v), scale·rbf + linear (s, ℓ, v, c)
    local counts = {6, 9}
    for k, model in ipairs(cases) do
      local names = {}
      for name in pairs(model:parameters()) do names[#names + 1] = name end
      table.sort(names)
      local _, g = model:mll_and_grad()
      local v0 = model:get_vector()
      assert.are.equal(counts[k], #v0, table.concat(names, " "))
      ref.check_model_gradient(model, g, "per-class kernels " .. k, 1e-6, 1e-7)
      for _, name in ipairs(names) do assert.truthy(name:find("^log_c[123]_"), name) end
    end
  end)

  it("C identical kernels give the shared-kernel model (log q, gradient, predictions, fit)",
     function()
    local C = 3
    local x, y = blobs(15, C, 0.7)
    y = noisy(y, C)
    local l, v = 0.9, 1.7
    local shared = model_of(x, y, C, l, v)
    local per = per_class_model(x, y, C)
    -- the layout is get_vector's: names sorted (log_c1_lengthscale, log_c1_variance, ...)
    local p = per:parameters()
    local names = {}
    for name in pairs(p) do names[#names + 1] = name end
    table.sort(names)
    local vec = {}
    for i, name in ipairs(names) do vec[i] = name:find("lengthscale") and log(l) or log(v) end
    per:set_vector(vec)
    close(per:mll(), shared:mll(), 1e-10, "log q")
    local _, gs = shared:mll_and_grad()
    local _, gp_ = per:mll_and_grad()
    -- shared names sorted: log_lengthscale, log_variance; a class's share sums to the shared one
    local sum = {lengthscale = 0, variance = 0}
    for i, name in ipairs(names) do
      local key = name:match("_(%a+)$")
      sum[key] = sum[key] + gp_[i]
    end
    close(sum.lengthscale, gs[1], 1e-9, "d/dlog ℓ summed over the classes", 1e-10)
    close(sum.variance, gs[2], 1e-9, "d/dlog v summed over the classes", 1e-10)
    local xs = {{0.5, 0.3}, {1.2, 1.1}, {4, 4}}
    local m1, v1, c1 = shared:predict(xs)
    local m2, v2, cov2 = per:predict(xs)
    local P1 = shared:predict_y(xs)
    local P2 = per:predict_y(xs)
    for s = 1, #xs do
      for c = 1, C do
        close(m2:get(s, c), m1:get(s, c), 1e-10, "mean", 1e-12)
        close(v2:get(s, c), v1:get(s, c), 1e-10, "variance", 1e-12)
        close(P2:get(s, c), P1:get(s, c), 1e-10, "probability", 1e-12)
        for k = 1, C do close(cov2[s][c][k], c1[s][c][k], 1e-10, "covariance", 1e-12) end
      end
    end
  end)

  it("bounds and priors by the per-class names; fit trains the classes apart", function()
    local C = 3
    local x, y = blobs(30, C, 0.8)
    local prior = gp.priors.lognormal(0, 1)
    local model = per_class_model(x, y, C, {bounds = {c2_lengthscale = {0.3, 3}},
                                            priors = {c3_variance = prior}})
    assert.truthy(model:parameters().raw_c2_lengthscale)
    -- log_posterior = log q + the lognormal density of c3's variance, in plain Lua
    local vv = VS[3]
    local density = -log(vv) - 0.5 * log(2 * math.pi) - 0.5 * log(vv) ^ 2
    close(model:log_posterior(), model:mll() + density, 1e-12, "log posterior")
    local before = model:mll()
    local res = model:fit{max_iter = 15}
    assert(res.mll > before, res.mll .. " vs " .. before)
    local ls = {}
    for c = 1, C do ls[c] = model.kernels[c].kernel.values.lengthscale end
    assert(ls[2] > 0.3 and ls[2] < 3, "bounded lengthscale " .. ls[2])
    assert(math.abs(ls[1] - ls[3]) > 1e-3, "the classes' lengthscales moved apart")
  end)

  it("bad input: a clear lazytensor error, the kernels and the model untouched", function()
    local C = 3
    local x, y = blobs(9, C, 0.5)
    local lik = gp.likelihoods.softmax{classes = C}
    local function build(extra)
      local spec = {x = x, y = y, likelihood = lik}
      for k, val in pairs(extra) do spec[k] = val end
      return gp.laplace(spec)
    end
    local ks = class_kernels(C, LS, VS)
    fails(function() build{kernels = {ks[1], ks[2]}} end,
          "kernels must be a list of 3 gp kernels (one per class), got 2 entries")
    fails(function() build{kernels = {ks[1], ks[2], ks[3], gp.kernels.rbf{}}} end, "got 4 entries")
    fails(function() build{kernels = gp.kernels.rbf{}} end, "kernels must be a list of 3")
    fails(function() build{kernels = {ks[1], ks[2], 7}} end, "kernels[3] must be a gp kernel")
    fails(function() build{kernels = {ks[1], ks[2], ks[1]}} end,
          "kernels[1] and kernels[3] share a rbf kernel object")
    fails(function() build{kernels = {ks[1], ks[2], ks[3] + ks[1]}} end, "share a rbf kernel")
    fails(function() build{kernel = ks[1], kernels = ks} end, "not both")
    fails(function()
      gp.laplace{x = x, y = {1, 0, 1, 0, 1, 0, 1, 0, 1}, kernels = ks,
                 likelihood = gp.likelihoods.bernoulli{}}
    end, "kernels (one per class) needs likelihood = gp.likelihoods.softmax")
    fails(function() build{kernels = {ks[1], ks[2], gp.kernels.rbf{lengthscale = {1, 1, 1}}}} end,
          "3 lengthscales")
    fails(function() build{kernels = {ks[1], ks[2], gp.kernels.rbf{dims = {3}}}} end,
          "kernels[3] reads input dimension 3")
    fails(function() build{kernels = ks, bounds = {lengthscale = {0.1, 5}}} end,
          "c<class>_<name> (c1_lengthscale")
    fails(function() build{kernels = ks, priors = {c4_variance = gp.priors.gamma(2, 1)}} end,
          "unknown hyperparameter 'c4_variance'")
    fails(function() build{kernels = ks, bounds = {c1_lengthscale = {2, 5}}} end, "outside its bounds")
    -- the kernels are as they were
    for c = 1, C do
      assert.are.equal(LS[c], ks[c].values.lengthscale)
      assert.are.equal(VS[c], ks[c].values.variance)
    end
    -- a model: set_vector with the wrong length or a non-number leaves it as it was
    local model = build{kernels = ks}
    local v0, q0 = model:get_vector(), model:mll()
    fails(function() model:set_vector{1, 2, 3} end, "set_vector needs a list of 6 numbers")
    fails(function() model:set_vector{1, 2, 3, 4, 5, "x"} end, "entry 6 is not a number")
    assert.are.same(v0, model:get_vector())
    assert.are.equal(q0, model:mll())
    -- predict_y's options
    fails(function() model:predict_y({{0, 0}}, {samples = 3}) end, "even whole number")
    fails(function() model:predict_y({{0, 0}}, {tol = -1}) end, "tol must be a positive number")
    fails(function() model:predict_y({{0, 0}}, {tol = 1e-6, samples = 8}) end, "not both")
    fails(function() model:predict_y({{0, 0}}, {nodes = 8}) end, "nodes")
  end)
end)
