-- gp.sgpr (Titsias' collapsed bound) against its closed form computed in
-- plain Lua: the kernel formulas written out again, Q = Kxz·Kzz⁻¹·Kzx and
-- Q + σ²I built by loops and factored by a Cholesky by loops; the gradient
-- against central differences of that plain-Lua bound.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local sgpr_module = require "lazytensor.gp.sgpr"
local ref = require "support.ref"
local cholesky, chol_solve, close = ref.cholesky, ref.chol_solve, ref.close
local K = gp.kernels

local unpack = table.unpack or unpack -- luacheck: ignore 143 (Lua 5.1's global)

---------------------------------------------------- plain-Lua reference --

-- rbf(l1, v1) + matern52(l2, v2), by API.md's formulas (or p.k's kernel).
local function ref_k(p, x, y)
  if p.k then return p.k(x, y) end
  local r2 = 0
  for d = 1, #x do r2 = r2 + (x[d] - y[d]) ^ 2 end
  local a = math.sqrt(5 * r2) / p.l2
  return p.v1 * math.exp(-r2 / (2 * p.l1 ^ 2)) + p.v2 * (1 + a + a * a / 3) * math.exp(-a)
end

local function matrix(p, A, B)
  local M = {}
  for i = 1, #A do
    M[i] = {}
    for j = 1, #B do M[i][j] = ref_k(p, A[i], B[j]) end
  end
  return M
end

-- Q = Kxz·(Kzz + jitter·I)⁻¹·Kzx by loops.
local function ref_Q(p, X, Z, jitter)
  local Kzz = matrix(p, Z, Z)
  for i = 1, #Z do Kzz[i][i] = Kzz[i][i] + jitter end
  local Lz = cholesky(Kzz)
  local Kxz = matrix(p, X, Z)
  local V = {} -- V[i] = Kzz⁻¹ k(Z, x_i)
  for i = 1, #X do V[i] = chol_solve(Lz, Kxz[i]) end
  local Q = {}
  for i = 1, #X do
    Q[i] = {}
    for j = 1, #X do
      local s = 0
      for k = 1, #Z do s = s + Kxz[i][k] * V[j][k] end
      Q[i][j] = s
    end
  end
  return Q, Kxz, Lz
end

-- log N(y | mean, C) by a Cholesky of C.
local function log_normal(C, y, mean)
  local n = #y
  local L = cholesky(C)
  local r = {}
  for i = 1, n do r[i] = y[i] - mean end
  local a = chol_solve(L, r)
  local q, ld = 0, 0
  for i = 1, n do
    q = q + r[i] * a[i]
    ld = ld + 2 * math.log(L[i][i])
  end
  return -0.5 * (q + ld + n * math.log(2 * math.pi))
end

-- Titsias' bound log N(y | mean, Q + σ²I) − tr(Kxx − Q)/(2σ²).
local function ref_bound(p, X, y, Z, jitter)
  local Q = ref_Q(p, X, Z, jitter)
  local C, trace = {}, 0
  for i = 1, #X do
    C[i] = {unpack(Q[i])}
    C[i][i] = C[i][i] + p.s2
    trace = trace + ref_k(p, X[i], X[i]) - Q[i][i]
  end
  return log_normal(C, y, p.mean) - trace / (2 * p.s2)
end

local function ref_exact(p, X, y)
  local C = matrix(p, X, X)
  for i = 1, #X do C[i][i] = C[i][i] + p.s2 end
  return log_normal(C, y, p.mean)
end

-- The parameters in get_vector's order: log l1, log v1, log l2, log v2,
-- log σ², mean, then Z row by row.
local function ref_params(v, m, d)
  local p = {l1 = math.exp(v[1]), v1 = math.exp(v[2]), l2 = math.exp(v[3]), v2 = math.exp(v[4]),
             s2 = math.exp(v[5]), mean = v[6]}
  local Z, off = {}, 6
  for i = 1, m do
    Z[i] = {}
    for k = 1, d do
      off = off + 1
      Z[i][k] = v[off]
    end
  end
  return p, Z
end

------------------------------------------------------------------ data --

local function data(n, d, seed)
  lt.manual_seed(seed)
  local X = (lt.rand(n, d) * 4):totable()
  local y = {}
  for i = 1, n do
    local s = 0
    for k = 1, d do s = s + math.sin(1.3 * X[i][k] + k) end
    y[i] = s + 0.2 * math.sin(17 * i)
  end
  return X, y
end

local function kernel()
  return K.rbf{lengthscale = 0.8, variance = 1.5} + K.matern52{lengthscale = 1.3, variance = 0.4}
end

local JITTER = 1e-6

local function model(X, y, inducing, extra)
  local spec = {x = lt.tensor(X), y = lt.tensor(y), kernel = kernel(), inducing = inducing,
                noise = 0.3, mean_value = 0.25, jitter = JITTER}
  for k, v in pairs(extra or {}) do spec[k] = v end
  return gp.sgpr(spec)
end

------------------------------------------------------------------ specs --

describe("gp.sgpr", function()
  local X, y = data(30, 2, 11)

  it("its bound is Titsias' closed form, computed densely in plain Lua", function()
    local mdl = model(X, y, 7)
    local v = mdl:get_vector()
    assert.are.equal(6 + 7 * 2, #v)
    local p, Z = ref_params(v, 7, 2)
    close(mdl:mll(), ref_bound(p, X, y, Z, JITTER), 1e-10, "bound")
    -- and it is a lower bound of the exact marginal likelihood
    assert.is_true(mdl:mll() < ref_exact(p, X, y))
  end)

  it("its gradient (hyperparameters, noise, mean, inducing points) matches central "
     .. "differences of the plain-Lua bound", function()
    local mdl = model(X, y, 5)
    local v0 = mdl:get_vector()
    local value, grad = mdl:mll_and_grad()
    close(value, mdl:mll(), 1e-14, "mll_and_grad's value")
    assert.are.equal(#v0, #grad)
    local h = 1e-5
    for i = 1, #v0 do
      local vp, vm = {unpack(v0)}, {unpack(v0)}
      vp[i], vm[i] = v0[i] + h, v0[i] - h
      local pp, Zp = ref_params(vp, 5, 2)
      local pm, Zm = ref_params(vm, 5, 2)
      local fd = (ref_bound(pp, X, y, Zp, JITTER) - ref_bound(pm, X, y, Zm, JITTER)) / (2 * h)
      assert(math.abs(grad[i] - fd) <= 1e-6 * math.max(1, math.abs(fd)),
             string.format("parameter %d: %.10g vs %.10g", i, grad[i], fd))
    end
  end)

  it("keeps the inducing points' gradient when Kzz is ill-conditioned (long lengthscale, "
     .. "crowded inducing points)", function()
    -- regression: the gradient through explicit Kzz⁻¹ and P = Kzx·Kxz lost
    -- every digit of the inducing points' gradient (990 for 0.003 on a
    -- 2000-point fit) and L-BFGS stalled after two iterations
    local mdl = gp.sgpr{x = lt.tensor(X), y = lt.tensor(y), inducing = 12, noise = 0.05,
                        mean_value = 0.25, jitter = JITTER,
                        kernel = K.rbf{lengthscale = 4, variance = 1.5}
                                 + K.matern52{lengthscale = 6, variance = 0.4}}
    local v0 = mdl:get_vector()
    local _, grad = mdl:mll_and_grad()
    local h = 1e-4
    for i = 7, #v0 do
      local vp, vm = {unpack(v0)}, {unpack(v0)}
      vp[i], vm[i] = v0[i] + h, v0[i] - h
      local pp, Zp = ref_params(vp, 12, 2)
      local pm, Zm = ref_params(vm, 12, 2)
      local fd = (ref_bound(pp, X, y, Zp, JITTER) - ref_bound(pm, X, y, Zm, JITTER)) / (2 * h)
      assert(math.abs(grad[i] - fd) <= 1e-3 * math.max(1, math.abs(fd)),
             string.format("inducing coordinate %d: %.10g vs %.10g", i - 6, grad[i], fd))
    end
  end)

  it("ARD lengthscales and a kernel over a subset of the dimensions: the gradient matches "
     .. "central differences of the bound", function()
    local mdl = gp.sgpr{x = lt.tensor(X), y = lt.tensor(y), inducing = 5, noise = 0.3,
                        jitter = JITTER,
                        kernel = K.rbf{lengthscale = {0.8, 1.4}, variance = 1.5}
                                 + K.matern52{lengthscale = 1.1, dims = {2}}}
    local v0 = mdl:get_vector()
    local _, grad = mdl:mll_and_grad()
    assert.are.equal(#v0, #grad)
    local h = 1e-5
    for i = 1, #v0 do
      local vp, vm = {unpack(v0)}, {unpack(v0)}
      vp[i], vm[i] = v0[i] + h, v0[i] - h
      mdl:set_vector(vp)
      local fp = mdl:mll()
      mdl:set_vector(vm)
      local fd = (fp - mdl:mll()) / (2 * h)
      assert(math.abs(grad[i] - fd) <= 1e-6 * math.max(1, math.abs(fd)),
             string.format("parameter %d: %.10g vs %.10g", i, grad[i], fd))
    end
  end)

  it("a scaled product of kernels on single dimensions: the bound is the closed form, the "
     .. "gradient matches central differences", function()
    local mdl = gp.sgpr{x = lt.tensor(X), y = lt.tensor(y), inducing = 5, noise = 0.3,
                        mean_value = 0.25, jitter = JITTER,
                        kernel = K.scale(K.rbf{lengthscale = 0.8, dims = {1}}
                                         * K.matern52{lengthscale = 1.3, dims = {2}}, 1.5)}
    local function k(a, b)
      local r1, r2 = math.abs(a[1] - b[1]), math.abs(a[2] - b[2])
      local s = math.sqrt(5) * r2 / 1.3
      return 1.5 * math.exp(-r1 ^ 2 / (2 * 0.8 ^ 2)) * (1 + s + s * s / 3) * math.exp(-s)
    end
    close(mdl:mll(), ref_bound({k = k, s2 = 0.3, mean = 0.25}, X, y, mdl:inducing():totable(),
                               JITTER), 1e-10, "bound")
    local v0 = mdl:get_vector()
    local _, grad = mdl:mll_and_grad()
    assert.are.equal(#v0, #grad)
    local h = 1e-5
    for i = 1, #v0 do
      local vp, vm = {unpack(v0)}, {unpack(v0)}
      vp[i], vm[i] = v0[i] + h, v0[i] - h
      mdl:set_vector(vp)
      local fp = mdl:mll()
      mdl:set_vector(vm)
      local fd = (fp - mdl:mll()) / (2 * h)
      assert(math.abs(grad[i] - fd) <= 1e-6 * math.max(1, math.abs(fd)),
             string.format("parameter %d: %.10g vs %.10g", i, grad[i], fd))
    end
  end)

  it("sums Kxz's blocks of rows: the same bound and gradient with 3-row blocks", function()
    local mdl = model(X, y, 6)
    local v1, g1 = mdl:mll_and_grad()
    local saved = sgpr_module.block_entries
    sgpr_module.block_entries = 3 * 6 -- 3 rows a block: 10 blocks
    local ok, v2, g2 = pcall(mdl.mll_and_grad, mdl)
    sgpr_module.block_entries = saved
    assert(ok, v2)
    close(v2, v1, 1e-12, "bound")
    for i = 1, #g1 do close(g2[i], g1[i], 1e-9, "gradient " .. i) end
  end)

  it("equals the exact marginal likelihood when the inducing points are the inputs", function()
    local mdl = model(X, y, X, {jitter = 1e-10})
    local p = ref_params(mdl:get_vector(), 30, 2)
    close(mdl:mll(), ref_exact(p, X, y), 1e-6, "bound at Z = X")
  end)

  it("predicts the optimal q(u)'s mean and variance (plain-Lua formulas)", function()
    local mdl = model(X, y, 6)
    local p, Z = ref_params(mdl:get_vector(), 6, 2)
    local S = {{0.5, 1.5}, {2.2, 3.1}, {3.9, 0.1}}
    local mean, var = mdl:predict(lt.tensor(S))
    -- Σ = Kzz + Kzx·Kxz/σ²; mean = K*z·Σ⁻¹·Kzx·(y − m)/σ² + m;
    -- var = k** − K*z·Kzz⁻¹·Kz* + K*z·Σ⁻¹·Kz*
    local Kxz = matrix(p, X, Z)
    local Kzz = matrix(p, Z, Z)
    local Sig = {}
    for a = 1, #Z do
      Sig[a] = {}
      for b = 1, #Z do
        local s = 0
        for i = 1, #X do s = s + Kxz[i][a] * Kxz[i][b] end
        Sig[a][b] = Kzz[a][b] + JITTER * (a == b and 1 or 0) + s / p.s2
        Kzz[a][b] = Kzz[a][b] + JITTER * (a == b and 1 or 0)
      end
    end
    local Ls, Lz = cholesky(Sig), cholesky(Kzz)
    local c = {}
    for a = 1, #Z do
      c[a] = 0
      for i = 1, #X do c[a] = c[a] + Kxz[i][a] * (y[i] - p.mean) end
    end
    local Sc = chol_solve(Ls, c)
    local Ksz = matrix(p, S, Z)
    for s = 1, #S do
      local mu, q, e = p.mean, 0, 0
      local zq, zs = chol_solve(Lz, Ksz[s]), chol_solve(Ls, Ksz[s])
      for a = 1, #Z do
        mu = mu + Ksz[s][a] * Sc[a] / p.s2
        q = q + Ksz[s][a] * zq[a]
        e = e + Ksz[s][a] * zs[a]
      end
      close(mean[s], mu, 1e-10, "mean " .. s)
      close(var[s], ref_k(p, S[s], S[s]) - q + e, 1e-8, "variance " .. s)
    end
    local post = mdl:posterior(lt.tensor(S))
    local pv = post:variance()
    for s = 1, #S do close(pv[s], var[s], 1e-8, "posterior variance " .. s) end
  end)

  it("keeps the inducing points when fixed, and fit raises the bound", function()
    local mdl = model(X, y, 5, {fixed = {inducing = true}})
    assert.are.equal(6, #mdl:get_vector())
    local Z0 = mdl:inducing():clone()
    local before = mdl:mll()
    local res = mdl:fit{max_iter = 15}
    assert.is_true(res.mll > before)
    close(res.mll, mdl:mll(), 1e-12, "fit's bound")
    assert.are.equal(0, (mdl:inducing() - Z0):abs():max())
    local learnt = model(X, y, 5)
    learnt:fit{max_iter = 15}
    assert.is_true(learnt:mll() > before)
    assert.is_true((learnt:inducing() - Z0):abs():max() > 0)
  end)

  it("rejects bad input with lazytensor: errors", function()
    local function err(spec, pattern)
      local ok, msg = pcall(gp.sgpr, spec)
      assert.is_false(ok)
      assert.truthy(tostring(msg):find("^lazytensor: gp: "), msg)
      assert.truthy(tostring(msg):find(pattern, 1, true), msg)
    end
    local x, yy = lt.tensor(X), lt.tensor(y)
    err({x = x, y = yy, kernel = kernel()}, "inducing")
    err({x = x, y = yy, kernel = kernel(), inducing = 31}, "from 1 to n = 30")
    err({x = x, y = yy, kernel = kernel(), inducing = 2.5}, "whole number")
    err({x = x, y = yy, kernel = kernel(), inducing = {{1, 2, 3}}}, "3 coordinates")
    -- a scale factor on its own (a constant kernel) has no lt.kernel operator
    err({x = x, y = yy, kernel = K.rbf{} + K.scale(K.rbf{}, 3).children[1], inducing = 3},
        "a constant kernel")
    err({x = x, y = yy, kernel = kernel(), inducing = 3, noise = lt.ones(30)}, "one variance")
    err({x = x, y = yy, kernel = kernel(), inducing = 3, inducng = 2}, "inducng")
    err({x = x, y = yy, kernel = kernel(), inducing = 3, jitter = -1}, "jitter")
    local mdl = model(X, y, 4)
    local ok, msg = pcall(mdl.predict, mdl, lt.tensor{{1, 2, 3}})
    assert.is_false(ok)
    assert.truthy(tostring(msg):find("xstar has 3 coordinates", 1, true), msg)
  end)
end)
