-- SKI / KISS-GP: lt.interp (the sparse cubic interpolation operator)
-- through the conformance harness, and gp.exact{structure = "ski"}'s MLL,
-- gradient and predictions against the interpolated dense matrix
-- W·K_grid·Wᵀ built in plain Lua (Keys' cubic weights and the kernel
-- formulas written out again, a Cholesky by loops).
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local conformance = require "support.conformance"
local ref = require "support.ref"
local cholesky, chol_solve, close = ref.cholesky, ref.chol_solve, ref.close

local unpack = table.unpack or unpack -- luacheck: ignore 143 (Lua 5.1's global)

---------------------------------------------------- plain-Lua reference --

-- Keys' cubic convolution kernel, a = −1/2.
local function keys(t)
  t = math.abs(t)
  if t <= 1 then return 1.5 * t ^ 3 - 2.5 * t ^ 2 + 1 end
  if t < 2 then return -0.5 * t ^ 3 + 2.5 * t ^ 2 - 4 * t + 2 end
  return 0
end

-- The interpolation matrix by its definition: W[i][g] = Π_k keys(u_k − j_k)
-- over the grid point g = (j_1, ..., j_d) (0-based, the first dimension
-- slowest), u_k = (x_ik − lo_k)/h_k.
local function ref_interp(P, axes)
  local d = #axes
  local total = 1
  for k = 1, d do total = total * axes[k].m end
  local W = {}
  for i, p in ipairs(P) do
    W[i] = {}
    for g = 0, total - 1 do
      local v, rest = 1, g
      for k = d, 1, -1 do
        local j = rest % axes[k].m
        rest = (rest - j) / axes[k].m
        v = v * keys((p[k] - axes[k].lo) / axes[k].h - j)
      end
      W[i][g + 1] = v
    end
  end
  return W
end

local function grid_points(axes)
  local G, d = {}, #axes
  local total = 1
  for k = 1, d do total = total * axes[k].m end
  for g = 0, total - 1 do
    local p, rest = {}, g
    for k = d, 1, -1 do
      local j = rest % axes[k].m
      rest = (rest - j) / axes[k].m
      p[k] = axes[k].lo + j * axes[k].h
    end
    G[g + 1] = p
  end
  return G
end

-- gp/ski.lua's documented grid: m points per dimension, step
-- (max − min)/(m − 3), from min − step.
local function ski_axes(P, m)
  local axes = {}
  for k = 1, #P[1] do
    local lo, hi = math.huge, -math.huge
    for _, p in ipairs(P) do lo, hi = math.min(lo, p[k]), math.max(hi, p[k]) end
    local h = (hi - lo) / (m - 3)
    axes[k] = {lo = lo - h, h = h, m = m}
  end
  return axes
end

local function rbf(l, v, x, y)
  local r2 = 0
  for k = 1, #x do r2 = r2 + (x[k] - y[k]) ^ 2 end
  return v * math.exp(-r2 / (2 * l * l))
end

local function matmul(A, B)
  local C = {}
  for i = 1, #A do
    C[i] = {}
    for j = 1, #B[1] do
      local s = 0
      for k = 1, #B do s = s + A[i][k] * B[k][j] end
      C[i][j] = s
    end
  end
  return C
end

local function transpose(A)
  local T = {}
  for j = 1, #A[1] do
    T[j] = {}
    for i = 1, #A do T[j][i] = A[i][j] end
  end
  return T
end

-- The interpolated covariance W·K_grid·Wᵀ between two point sets.
local function ski_matrix(l, v, P1, P2, axes)
  local G = grid_points(axes)
  local Kg = {}
  for a = 1, #G do
    Kg[a] = {}
    for b = 1, #G do Kg[a][b] = rbf(l, v, G[a], G[b]) end
  end
  return matmul(matmul(ref_interp(P1, axes), Kg), transpose(ref_interp(P2, axes)))
end

-- The MLL with K = W·K_grid·Wᵀ from log l, log v, log σ², mean.
local function ref_mll(vec, P, y, axes)
  local l, v, s2, mean = math.exp(vec[1]), math.exp(vec[2]), math.exp(vec[3]), vec[4]
  local C = ski_matrix(l, v, P, P, axes)
  for i = 1, #P do C[i][i] = C[i][i] + s2 end
  local L = cholesky(C)
  local r = {}
  for i = 1, #P do r[i] = y[i] - mean end
  local a = chol_solve(L, r)
  local q, ld = 0, 0
  for i = 1, #P do
    q = q + r[i] * a[i]
    ld = ld + 2 * math.log(L[i][i])
  end
  return -0.5 * (q + ld + #P * math.log(2 * math.pi)), L, a
end

------------------------------------------------------------- lt.interp --

local X1 = {1.3, 2.05, 2.9, 3.5, 4.75, 5.0}
local AX1 = {{lo = 0, h = 1, m = 7}}
conformance.check("interp 1-d, 6 points on 7 grid points", function()
  return lt.interp(lt.tensor(X1), {0, 6, 7})
end, function()
  local P = {}
  for i, x in ipairs(X1) do P[i] = {x} end
  return ref_interp(P, AX1)
end)

local X2 = {{1.2, 1.5}, {2.5, 1.1}, {1.9, 2.9}, {3.0, 2.2}, {2.2, 2.0}}
local AX2 = {{lo = 0, h = 1, m = 5}, {lo = 0, h = 0.8, m = 6}}
conformance.check("interp 2-d, 5 points on a 5x6 grid", function()
  return lt.interp(lt.tensor(X2), {{0, 4, 5}, {0, 4, 6}})
end, function() return ref_interp(X2, AX2) end)

-- W·W2ᵀ with W2 = W: square and PSD (a Gram matrix of the rows), through
-- the W·K·Wᵀ diagonal rule.
conformance.check("interp W·T·Wᵀ (SKI's covariance), 1-d", function()
  local W = lt.interp(lt.tensor(X1), {0, 6, 7})
  local c = {}
  for j = 1, 7 do c[j] = rbf(1.5, 1, {0}, {j - 1}) end
  return lt.psd(W * lt.psd(lt.toeplitz(lt.tensor(c))) * W:t()):add_diag(0.1)
end, function()
  local P = {}
  for i, x in ipairs(X1) do P[i] = {x} end
  local C = ski_matrix(1.5, 1, P, P, AX1)
  for i = 1, #P do C[i][i] = C[i][i] + 0.1 end
  return C
end, {psd = true})

describe("lt.interp", function()
  it("reproduces quadratics exactly (Keys' a = −1/2), rows sum to one", function()
    local W = lt.interp(lt.tensor(X1), {0, 6, 7})
    local g = lt.linspace(0, 6, 7)
    local f = W * (g:cmul(g) * 0.5 - g * 2 + 1)
    for i, x in ipairs(X1) do close(f[i], 0.5 * x * x - 2 * x + 1, 1e-13, "quadratic") end
    local rows = W:dense():sum(2)
    for i = 1, #X1 do close(rows[i], 1, 1e-14, "row sum") end
  end)

  it("has no parameters and an empty gradient", function()
    local W = lt.interp(lt.tensor(X1), {0, 6, 7})
    assert.is_nil(next(W:params()))
    assert.is_nil(next(W:bilinear_derivative(lt.ones(6), lt.ones(7))))
  end)

  it("rejects bad input with lazytensor: errors", function()
    local function err(pattern, ...)
      local ok, msg = pcall(lt.interp, ...)
      assert.is_false(ok)
      assert.truthy(tostring(msg):find("^lazytensor: interp: "), msg)
      assert.truthy(tostring(msg):find(pattern, 1, true), msg)
    end
    err("outside the grid's interior", lt.tensor{0.5, 2}, {0, 6, 7})
    err("outside the grid's interior", lt.tensor{2, 5.5}, {0, 6, 7})
    err("at least 4 points", lt.tensor{1.5}, {0, 3, 3})
    err("hi = 0 must be greater", lt.tensor{1.5}, {1, 0, 5})
    err("2 dimensions but 1 grids", lt.tensor{{1, 2}}, {{0, 4, 5}})
    err("give one grid for each", lt.tensor{{1, 2}}, {0, 4, 5})
    err("1 to 3", lt.ones(2, 4), {{0, 4, 5}, {0, 4, 5}, {0, 4, 5}, {0, 4, 5}})
    err("grid 1 must be a table", lt.tensor{1.5}, {"a"})
    err("outside the grid's interior", lt.tensor{0 / 0}, {0, 6, 7})
  end)
end)

------------------------------------------------------------ the model --

local function data(n, d, seed)
  lt.manual_seed(seed)
  local P = (lt.rand(n, d) * 4):totable()
  local y = {}
  for i, p in ipairs(P) do y[i] = math.sin(p[1]) + (p[2] and 0.5 * math.cos(p[2]) or 0) end
  return P, y
end

describe("gp.exact{structure = 'ski'}", function()
  for _, case in ipairs{{d = 1, n = 25, m = 12}, {d = 2, n = 20, m = 7}, {d = 3, n = 8, m = 5}} do
    it(string.format("%d-d: MLL and gradient are those of the interpolated dense matrix",
                     case.d), function()
      local P, y = data(case.n, case.d, 3)
      local model = gp.exact{x = lt.tensor(P), y = lt.tensor(y), noise = 0.1, mean_value = 0.2,
                             kernel = gp.kernels.rbf{lengthscale = 1.1, variance = 1.3},
                             structure = "ski", grid = case.m}
      assert.truthy(model:explain():find("^ski: "))
      local axes = ski_axes(P, case.m)
      local v0 = model:get_vector()
      local value, grad = model:mll_and_grad()
      close(value, (ref_mll(v0, P, y, axes)), 1e-10, "mll")
      local h = 1e-5
      for i = 1, #v0 do
        local vp, vm = {unpack(v0)}, {unpack(v0)}
        vp[i], vm[i] = v0[i] + h, v0[i] - h
        local fd = ((ref_mll(vp, P, y, axes)) - (ref_mll(vm, P, y, axes))) / (2 * h)
        assert(math.abs(grad[i] - fd) <= 1e-6 * math.max(1, math.abs(fd)),
               string.format("parameter %d: %.10g vs %.10g", i, grad[i], fd))
      end
    end)
  end

  it("predicts with the interpolated cross-covariance W*·K_grid·Wᵀ", function()
    local P, y = data(25, 1, 4)
    local model = gp.exact{x = lt.tensor(P), y = lt.tensor(y), noise = 0.1, mean_value = 0.2,
                           kernel = gp.kernels.rbf{lengthscale = 1.1, variance = 1.3},
                           structure = "ski", grid = 12}
    local axes = ski_axes(P, 12)
    local S = {{0.7}, {1.9}, {3.3}}
    local _, _, alpha = ref_mll(model:get_vector(), P, y, axes)
    local Ksx = ski_matrix(1.1, 1.3, S, P, axes)
    local mean = model:predict(lt.tensor(S), {variance = false})
    for s = 1, #S do
      local mu = 0.2
      for i = 1, #P do mu = mu + Ksx[s][i] * alpha[i] end
      close(mean[s], mu, 1e-10, "mean")
    end
  end)

  it("fits, and above max_cholesky_size runs CG/SLQ on the lazy product", function()
    local P, y = data(200, 1, 5)
    local function model()
      return gp.exact{x = lt.tensor(P), y = lt.tensor(y), noise = 0.1,
                      kernel = gp.kernels.rbf{lengthscale = 1.1}, structure = "ski", grid = 100}
    end
    local exact = model():mll()
    lt.manual_seed(1)
    local stochastic = lt.with_settings({max_cholesky_size = 100}, function()
      local value, _, info = model():mll_and_grad()
      assert.are.equal("slq", info.method)
      return value
    end)
    -- SLQ's estimate: within 0.01 nats a point
    assert(math.abs(stochastic - exact) < 0.01 * 200,
           string.format("stochastic MLL %.6g vs %.6g", stochastic, exact))
    local m = model()
    local before = m:mll()
    assert.is_true(m:fit{max_iter = 5}.mll > before)
  end)

  it("rejects what SKI cannot do with lazytensor: errors", function()
    local function err(pattern, spec)
      local ok, msg = pcall(function() return gp.exact(spec):mll() end)
      assert.is_false(ok)
      assert.truthy(tostring(msg):find("^lazytensor: gp: "), msg)
      assert.truthy(tostring(msg):find(pattern, 1, true), msg)
    end
    local P2, y2 = data(10, 2, 1)
    err("not separable", {x = lt.tensor(P2), y = lt.tensor(y2), structure = "ski", grid = 6,
                          kernel = gp.kernels.rbf{} + gp.kernels.matern52{}})
    err("whole number of at least 4", {x = lt.tensor(P2), y = lt.tensor(y2), structure = "ski",
                                       grid = 3, kernel = gp.kernels.rbf{}})
    err("1 to 3 dimensions", {x = lt.rand(10, 4), y = lt.tensor(y2), structure = "ski",
                              kernel = gp.kernels.rbf{}})
  end)
end)
