-- gp.multitask (ICM, B ⊗ K) against the full Kronecker matrix in plain Lua:
-- the kernel formulas written out again, B = W·Wᵀ + diag(v), the nt×nt
-- covariance B ⊗ K + σ²I (or its observed rows and columns) built by loops
-- and factored by a Cholesky by loops; gradients against central
-- differences of that plain-Lua MLL; predictions against the plain-Lua
-- posterior.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ref = require "support.ref"
local cholesky, chol_solve, close = ref.cholesky, ref.chol_solve, ref.close

local unpack = table.unpack or unpack -- luacheck: ignore 143 (Lua 5.1's global)

---------------------------------------------------- plain-Lua reference --

-- k(x, y): "rbf" and "scaled" v·exp(−r²/(2l²)), "rq" (α = 1)
-- v·(1 + r²/(2l²))⁻¹, 1-d.
local function ref_k(kind, p, x, y)
  local r2 = (x - y) ^ 2
  if kind == "rq" then return p.v / (1 + r2 / (2 * p.l ^ 2)) end
  if kind == "product" then -- rbf(l, v) · rq(l = 2, α = 1, v = 1), the rq fixed
    return p.v * math.exp(-r2 / (2 * p.l ^ 2)) / (1 + r2 / 8)
  end
  return p.v * math.exp(-r2 / (2 * p.l ^ 2))
end

-- Parameters from get_vector's order: log l, log variance (log variance,
-- log l for "scaled", whose scale comes first), W (t×r, row by row), log v
-- (t), log σ², the t means.
local function ref_params(vec, t, r, kind)
  local p = {l = math.exp(vec[1]), v = math.exp(vec[2]), W = {}, d = {}, means = {}}
  if kind == "scaled" then p.l, p.v = p.v, p.l end
  local off = 2
  for a = 1, t do
    p.W[a] = {}
    for j = 1, r do
      off = off + 1
      p.W[a][j] = vec[off]
    end
  end
  for a = 1, t do
    off = off + 1
    p.d[a] = math.exp(vec[off])
  end
  off = off + 1
  p.s2 = math.exp(vec[off])
  for a = 1, t do p.means[a] = vec[off + a] end
  return p
end

local function ref_B(p, t)
  local B = {}
  for a = 1, t do
    B[a] = {}
    for b = 1, t do
      local s = a == b and p.d[a] or 0
      for j = 1, #p.W[a] do s = s + p.W[a][j] * p.W[b][j] end
      B[a][b] = s
    end
  end
  return B
end

-- The observed entries as {task, point} in task-major order.
local function observed(Y)
  local obs = {}
  for a = 1, #Y[1] do
    for i = 1, #Y do
      if Y[i][a] == Y[i][a] then obs[#obs + 1] = {a, i} end
    end
  end
  return obs
end

-- The MLL of the observed values under B ⊗ K + σ²I (the full nt×nt
-- Kronecker matrix's observed rows and columns), and what predictions need.
local function ref_fit(kind, p, X, Y)
  local t = #Y[1]
  local B = ref_B(p, t)
  local obs = observed(Y)
  local C, r = {}, {}
  for u, ou in ipairs(obs) do
    C[u] = {}
    for w, ow in ipairs(obs) do
      C[u][w] = B[ou[1]][ow[1]] * ref_k(kind, p, X[ou[2]], X[ow[2]]) + (u == w and p.s2 or 0)
    end
    r[u] = Y[ou[2]][ou[1]] - p.means[ou[1]]
  end
  local L = cholesky(C)
  local alpha = chol_solve(L, r)
  local q, ld = 0, 0
  for u = 1, #obs do
    q = q + r[u] * alpha[u]
    ld = ld + 2 * math.log(L[u][u])
  end
  return {mll = -0.5 * (q + ld + #obs * math.log(2 * math.pi)), L = L, alpha = alpha, B = B,
          obs = obs}
end

------------------------------------------------------------------ data --

local function data(n, seed)
  lt.manual_seed(seed)
  local X = (lt.rand(n) * 5):totable()
  local Y = {}
  for i, x in ipairs(X) do
    Y[i] = {math.sin(x) + 0.05 * math.sin(13 * i), 0.8 * math.sin(x) + 0.3 * math.cos(2 * x),
            -0.5 * math.sin(x) + 0.1 * math.cos(7 * i)}
  end
  return X, Y
end

-- rq with α = 1 fixed: its free parameters are lengthscale and variance,
-- as rbf's (both lt.kernel operators); "scaled" is kernels.scale of an rbf
-- with its variance fixed — the scale folded into the lt.kernel's variance;
-- "product" an rbf times a fixed rq (a lazy Hadamard product of the two).
local function kernel_of(kind)
  if kind == "rq" then
    return gp.kernels.rq{lengthscale = 0.9, variance = 1.2, alpha = 1, fixed = {alpha = true}}
  end
  if kind == "product" then
    return gp.kernels.rbf{lengthscale = 0.9, variance = 1.2}
           * gp.kernels.rq{lengthscale = 2, alpha = 1,
                           fixed = {lengthscale = true, alpha = true, variance = true}}
  end
  if kind == "scaled" then
    return gp.kernels.scale(gp.kernels.rbf{lengthscale = 0.9, fixed = {variance = true}}, 1.2)
  end
  return gp.kernels.rbf{lengthscale = 0.9, variance = 1.2}
end

-- Central differences of the plain-Lua MLL against the model's gradient.
local function check_gradient(kind, model, X, Y, rank)
  local v0 = model:get_vector()
  local value, grad = model:mll_and_grad()
  close(value, ref_fit(kind, ref_params(v0, 3, rank, kind), X, Y).mll, 1e-9, "mll")
  assert.are.equal(#v0, #grad)
  local h = 1e-5
  for i = 1, #v0 do
    local vp, vm = {unpack(v0)}, {unpack(v0)}
    vp[i], vm[i] = v0[i] + h, v0[i] - h
    local fd = (ref_fit(kind, ref_params(vp, 3, rank, kind), X, Y).mll
                - ref_fit(kind, ref_params(vm, 3, rank, kind), X, Y).mll) / (2 * h)
    assert(math.abs(grad[i] - fd) <= 1e-6 * math.max(1, math.abs(fd)),
           string.format("%s parameter %d: %.10g vs %.10g", kind, i, grad[i], fd))
  end
end

-- The plain-Lua posterior mean and variance of task a at s.
local function ref_predict(kind, p, X, Y, S)
  local fit = ref_fit(kind, p, X, Y)
  local t = #Y[1]
  local mean, var = {}, {}
  for s = 1, #S do
    mean[s], var[s] = {}, {}
    for a = 1, t do
      local kvec = {}
      for u, ou in ipairs(fit.obs) do
        kvec[u] = fit.B[a][ou[1]] * ref_k(kind, p, S[s], X[ou[2]])
      end
      local m, sol = p.means[a], chol_solve(fit.L, kvec)
      local e = 0
      for u = 1, #kvec do
        m = m + kvec[u] * fit.alpha[u]
        e = e + kvec[u] * sol[u]
      end
      mean[s][a], var[s][a] = m, fit.B[a][a] * ref_k(kind, p, S[s], S[s]) - e
    end
  end
  return mean, var
end

------------------------------------------------------------------ specs --

describe("gp.multitask", function()
  local X, Y = data(14, 5)
  local Ymiss = {}
  for i, row in ipairs(Y) do Ymiss[i] = {unpack(row)} end
  Ymiss[2][1], Ymiss[7][3], Ymiss[8][3], Ymiss[11][2] = 0 / 0, 0 / 0, 0 / 0, 0 / 0

  for _, kind in ipairs{"rbf", "rq", "scaled", "product"} do
    for _, rank in ipairs{1, 2} do
      it(string.format("all tasks observed (%s, rank %d): the eigen rule's MLL and gradient are "
                       .. "the full Kronecker matrix's", kind, rank), function()
        local model = gp.multitask{x = X, y = Y, kernel = kernel_of(kind), rank = rank,
                                   noise = 0.05}
        check_gradient(kind, model, X, Y, rank)
      end)

      it(string.format("missing values (%s, rank %d): the lazy submatrix's MLL and gradient are "
                       .. "the observed rows' and columns'", kind, rank), function()
        local model = gp.multitask{x = X, y = Ymiss, kernel = kernel_of(kind), rank = rank,
                                   noise = 0.05}
        check_gradient(kind, model, X, Ymiss, rank)
      end)
    end
  end

  it("predicts every task's posterior mean and variance (complete and missing data)", function()
    local S = {0.3, 2.05, 4.4, 6.0}
    for _, Yc in ipairs{Y, Ymiss} do
      local model = gp.multitask{x = X, y = Yc, kernel = kernel_of("rbf"), rank = 2, noise = 0.05}
      local p = ref_params(model:get_vector(), 3, 2)
      local mean, var = model:predict(lt.tensor(S))
      local rm, rv = ref_predict("rbf", p, X, Yc, S)
      assert.are.same({4, 3}, mean:shape())
      for s = 1, #S do
        for a = 1, 3 do
          close(mean:get(s, a), rm[s][a], 1e-9, "mean")
          close(var:get(s, a), rv[s][a], 1e-7, "variance")
        end
      end
    end
  end)

  it("task_covariance() is W·Wᵀ + diag(v), and fit raises the MLL and learns the tasks' "
     .. "correlation", function()
    local model = gp.multitask{x = X, y = Y, kernel = kernel_of("rbf"), rank = 1}
    local p = ref_params(model:get_vector(), 3, 1)
    local B = model:task_covariance():dense()
    local Bref = ref_B(p, 3)
    for a = 1, 3 do
      for b = 1, 3 do close(B:get(a, b), Bref[a][b], 1e-14, "B") end
    end
    local before = model:mll()
    local res = model:fit{max_iter = 40}
    assert.is_true(res.mll > before)
    close(res.mll, model:mll(), 1e-12, "fit's mll")
    -- tasks 1 and 3 are ±sin(x): their learnt correlation is strongly negative
    B = model:task_covariance():dense()
    assert.is_true(B:get(1, 3) / math.sqrt(B:get(1, 1) * B:get(3, 3)) < -0.8)
  end)

  it("rejects bad input with lazytensor: errors", function()
    local function err(spec, pattern)
      local ok, msg = pcall(gp.multitask, spec)
      assert.is_false(ok)
      assert.truthy(tostring(msg):find("^lazytensor: gp: "), msg)
      assert.truthy(tostring(msg):find(pattern, 1, true), msg)
    end
    local k = kernel_of("rbf")
    err({x = X, y = Y, kernel = k, rank = 4}, "from 1 to t = 3")
    err({x = X, y = Y, kernel = k, rank = 0}, "from 1 to t = 3")
    err({x = X, y = {1, 2}, kernel = k}, "n = 14 rows")
    err({x = X, y = lt.ones(14), kernel = k}, "n×t matrix")
    local bad = {}
    for i, row in ipairs(Y) do bad[i] = {unpack(row)} end
    bad[3] = {1, 2}
    err({x = X, y = bad, kernel = k}, "y[3] must have 3 values")
    bad[3] = {1, math.huge, 2}
    err({x = X, y = bad, kernel = k}, "finite number")
    for i = 1, #bad do bad[i] = {1, 0 / 0, 2} end
    err({x = X, y = bad, kernel = k}, "task 2 has no observed value")
    err({x = X, y = Y, kernel = k, rnak = 1}, "rnak")
    err({x = X, y = Y, kernel = k, noise = -1}, "noise")
  end)
end)
