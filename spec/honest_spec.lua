-- Right or honest (issue 19, the numerical items): every result that says
-- converged = true is checked here against its reconstruction or residual,
-- computed independently (dense products, a plain-Lua determinant, the
-- exact dense path), and the wrong answers of the issue are regression
-- cases: each `it` below failed before its fix.
local lt = require "lazytensor"

-- ‖R·Rᵀv − Av‖/‖Av‖ and ‖S·Sᵀ·Av − v‖/‖v‖ on a few random probes (the worst).
local function root_error(A, R, k)
  local worst = 0
  for _ = 1, k or 3 do
    local v = lt.randn(A:size(1))
    local Av = A * v
    worst = math.max(worst, (R * (R:t() * v) - Av):norm() / Av:norm())
  end
  return worst
end

local function root_inv_error(A, S, k)
  local worst = 0
  for _ = 1, k or 3 do
    local v = lt.randn(A:size(1))
    worst = math.max(worst, (S * (S:t() * (A * v)) - v):norm() / v:norm())
  end
  return worst
end

local function exact(f) return lt.with_settings({max_cholesky_size = 1e9}, f) end

-- sign(det A) and log|det A| by Gaussian elimination in plain Lua.
local function slogdet_ref(rows)
  local n, M = #rows, {}
  for i = 1, n do
    M[i] = {}
    for j = 1, n do M[i][j] = rows[i][j] end
  end
  local sign, logabs = 1, 0
  for k = 1, n do
    local p = k
    for i = k + 1, n do if math.abs(M[i][k]) > math.abs(M[p][k]) then p = i end end
    if M[p][k] == 0 then return 0, -math.huge end
    if p ~= k then
      M[k], M[p] = M[p], M[k]
      sign = -sign
    end
    if M[k][k] < 0 then sign = -sign end
    logabs = logabs + math.log(math.abs(M[k][k]))
    for i = k + 1, n do
      local f = M[i][k] / M[k][k]
      for j = k, n do M[i][j] = M[i][j] - f * M[k][j] end
    end
  end
  return sign, logabs
end

local function rbf_plus_noise(n, l, noise)
  return lt.kernel(lt.linspace(0, 1, n), {kind = "rbf", lengthscale = l}) + lt.identity(n, noise)
end

describe("item 1: Lanczos root and root_inv above max_cholesky_size", function()
  local n = 1000
  local K

  setup(function()
    lt.manual_seed(19)
    K = rbf_plus_noise(n, 0.3, 0.01)
  end)

  teardown(function()
    K = nil
    collectgarbage()
  end)

  it("keeps the noise the Krylov space misses: R·Rᵀ reproduces K", function()
    local R, info = K:root()
    assert.equal("lanczos", info.method)
    assert.is_true(info.converged)
    assert.is_true(info.residual <= 1e-5, tostring(info.residual))
    -- the rank-14 root of the old code had a reconstruction error of 1e-3
    assert.is_true(root_error(K, R) < 1e-8)
  end)

  it("root_inv: S·Sᵀ·K is the identity (0.99 off before)", function()
    local S, info = K:root_inv()
    assert.is_true(info.converged)
    assert.is_true(root_inv_error(K, S) < 1e-6)
  end)

  it("samples of lt.mvn(0, K) have the noise and full rank", function()
    local X = lt.mvn(lt.zeros(n), K):rsample(60)
    local _, s = X:svd()
    local rank = 0
    for i = 1, s:size(1) do if s[i] > 1e-8 * s[1] then rank = rank + 1 end end
    assert.equal(60, rank)
    -- successive differences of an l = 0.3 RBF path are ~1e-3; the noise
    -- gives each a variance of 2·0.01
    local sq, count = 0, 0
    for r = 1, 60 do
      local x = X[r]
      for i = 1, n - 1 do
        sq = sq + (x[i + 1] - x[i]) ^ 2
        count = count + 1
      end
    end
    assert.near(0.02, sq / count, 0.002)
  end)

  it("says converged = false when the steps run out, with a true residual", function()
    local M = lt.kernel(lt.linspace(0, 1, n), {kind = "matern12", lengthscale = 0.3}) +
              lt.identity(n, 0.1)
    local R, info = M:root{max_root_decomposition_size = 20}
    assert.is_false(info.converged)
    local err = root_error(M, R)
    assert.is_true(err > 1e-5)
    -- the reported residual is the measured one, not a Krylov coupling
    assert.is_true(info.residual > err / 10 and info.residual < err * 10,
                   ("reported %g, measured %g"):format(info.residual, err))
  end)

  it("restarts when the Krylov space closes early, and a singular A has no root_inv", function()
    local d = {}
    for i = 1, 300 do d[i] = (i % 3) + 1 end
    local D = lt.operator{shape = {300, 300}, psd = true, matmul = function(X) return lt.diag(d) * X end}
    local R, info = D:root{max_cholesky_size = 0, max_root_decomposition_size = 300}
    if info.converged then assert.is_true(root_error(D, R) < 1e-5) end
    assert.is_true(info.iterations > 3) -- not the 3-step Krylov space of one start
    local L = lt.lowrank(lt.randn(300, 4))
    local S = lt.psd(L + lt.zeros(300, 300))
    assert.error_matches(function() S:root_inv{max_cholesky_size = 0} end, "root_inv")
  end)
end)

describe("item 2: kron and blockdiag with a factor above max_cholesky_size", function()
  it("solves the issue's kron + 0.1·I (NaN with converged = true before)", function()
    local n, c = 1000, {}
    for k = 1, n do c[k] = math.exp(-((k - 1) / 30) ^ 2 / 2) end
    local K = lt.kron(lt.toeplitz(c), lt.tensor{{1, .3}, {.3, 1}}) + lt.identity(2 * n, .1)
    local b = lt.randn(2 * n)
    local x, info = K:solve(b)
    assert.is_true(info.converged)
    assert.is_true((K * x - b):norm() / b:norm() < 1e-5)
  end)

  local m, c = 150, {}
  for k = 1, m do c[k] = math.exp(-((k - 1) / 10) ^ 2 / 2) end
  local small = {max_cholesky_size = 100}

  local cases = {
    {"kron + s·I", function()
      return lt.kron(lt.toeplitz(c), lt.tensor{{1, .3}, {.3, 1}}) + lt.identity(2 * m, .1)
    end},
    {"kron", function()
      local T = lt.toeplitz(c) + lt.identity(m, .1)
      return lt.kron(lt.psd(T), lt.psd(lt.tensor{{2, .3}, {.3, 1}}))
    end},
    {"blockdiag", function()
      return lt.blockdiag{lt.psd(lt.toeplitz(c) + lt.identity(m, .1)), lt.psd(lt.tensor{{2, .3}, {.3, 1}})}
    end},
  }
  for _, case in ipairs(cases) do
    local name, make = case[1], case[2]
    it(name .. ": solve, logdet, inv_quad_logdet and eigh agree with the exact path", function()
      lt.manual_seed(7)
      local A = make()
      local N = A:size(1)
      local b = lt.randn(N)
      local ld_exact = exact(function() return A:logdet() end)
      local q_exact = exact(function() return A:inv_quad(b) end)
      lt.with_settings(small, function()
        local x, info = A:solve(b)
        assert.is_true(info.converged)
        assert.is_true((A * x - b):norm() / b:norm() < 1e-5)
        local ld, linfo = A:logdet()
        -- SLQ's error is stochastic: within a few of its standard errors
        local tol = math.max(1e-8 * math.abs(ld_exact), 5 * (linfo.stderr or 0))
        assert.is_true(math.abs(ld - ld_exact) <= tol, ("%g vs %g"):format(ld, ld_exact))
        local q, l2 = A:inv_quad_logdet(b)
        assert.is_true(q > 0)
        assert.near(q_exact, q, 1e-4 * q_exact)
        assert.is_true(l2 == l2)
        local ok, w, Q, einfo = pcall(A.eigh, A)
        assert.is_true(ok, tostring(w))
        if einfo.converged then
          assert.equal(N, w:size(1))
          assert.equal(N, Q:size(2))
        else
          assert.is_true(w:size(1) <= N)
        end
      end)
    end)
  end

  it("eigh of a big operator is complete or says converged = false", function()
    local T = lt.psd(lt.toeplitz(c))
    local w, _, info = T:eigh{max_cholesky_size = 100}
    assert.is_true(w:size(1) < m)
    assert.is_false(info.converged)
  end)
end)

describe("item 5: logdet through signs", function()
  local T = lt.toeplitz{1, 2} -- det -3
  local P = lt.tensor{{0, 1}, {1, 0}} -- det -1
  local cases = {
    {"product of two negative determinants", T * T},
    {"product with a dense factor", lt.matmul(T, lt.operator{shape = {2, 2}, matmul = function(X) return P * X end})},
    {"kron of two negative determinants", lt.kron(T, P)},
    {"kron with an even power", lt.kron(T, lt.eye(2))},
    {"scaled by a negative number", lt.scale(T, -1)},
    {"scaled, odd size", lt.scale(lt.eye(3), -2)},
    {"blockdiag", lt.blockdiag{T, lt.diag{-1, 2}}},
    {"inverse", T:inverse()},
    {"transpose", lt.toeplitz({1, 2, 0}, {1, 3, 1}):t()},
    {"diag", lt.diag{-1, 2, 3}},
    {"triangular", lt.triangular(lt.tensor{{-1, 0}, {2, 3}}, "lower")},
    {"lowrank + diag", lt.lowrank(lt.tensor{{1}, {2}}) + lt.diag{-1, 1}},
  }
  for _, case in ipairs(cases) do
    it(case[1] .. ": slogdet and logdet agree with a plain-Lua determinant", function()
      local A = case[2]
      local s_ref, l_ref = slogdet_ref(A:dense():totable())
      local ld = A:logdet()
      if s_ref > 0 then
        assert.near(l_ref, ld, 1e-12 * math.max(1, math.abs(l_ref)))
      else
        assert.is_true(ld ~= ld, "logdet of a negative determinant is NaN") -- as torch.logdet
      end
      local s, l = A:slogdet()
      assert.equal(s_ref, s)
      assert.near(l_ref, l, 1e-12 * math.max(1, math.abs(l_ref)))
    end)
  end

  it("a singular matrix: sign 0 and -inf, for every type", function()
    for _, A in ipairs{lt.diag{0, 1}, lt.tensor{{1, 2}, {2, 4}}, lt.kron(lt.diag{0, 1}, T)} do
      local s, l = A:slogdet()
      assert.equal(0, s)
      assert.equal(-math.huge, l)
      assert.equal(-math.huge, A:logdet())
    end
  end)
end)

describe("item 6: root of lowrank_plus_diag with U ~= V", function()
  it("reproduces the matrix (616 off before)", function()
    lt.manual_seed(6)
    local G = lt.lowrank(lt.randn(6, 2), lt.randn(6, 2))
    local S = lt.psd(G * G:t()):add_diag(.5)
    assert.equal("lowrank_plus_diag", lt.type(S))
    local R = S:root()
    assert.is_true(((R * R:t()):dense() - S:dense()):norm() < 1e-10 * S:dense():norm())
  end)
end)

describe("item 7: inv_quad needs a positive definite operator, for every type", function()
  local T = lt.toeplitz{1, 2}
  local indefinite = {
    {"dense", lt.tensor{{1, 2}, {2, 1}}},
    {"toeplitz", T},
    {"kron", lt.kron(T, lt.eye(2))},
    {"scaled", lt.scale(lt.psd(lt.tensor{{2, 1}, {1, 2}}), -1)},
    {"sum", T + lt.diag{0.5, 0.5}},
    {"lowrank + diag", lt.lowrank(lt.tensor{{1}, {2}}) + lt.diag{-1, 1}},
    {"kron + s·I", lt.kron(lt.tensor{{1, 2}, {2, 1}}, lt.eye(2)) + lt.identity(4, 0.5)},
    {"blockdiag", lt.blockdiag{T, lt.eye(2)}},
  }
  for _, case in ipairs(indefinite) do
    it(case[1] .. ": raises, also through inv_quad_logdet and above max_cholesky_size", function()
      local A = case[2]
      local b = lt.ones(A:size(1))
      b[1] = 2
      for _, settings in ipairs{{}, {max_cholesky_size = 0}} do
        assert.error_matches(function() A:inv_quad(b, settings) end, "positive definite")
        assert.error_matches(function() A:inv_quad_logdet(b, settings) end, "positive definite")
      end
    end)
  end

  it("lt.mvn(0, toeplitz{1, 2}):log_prob raises instead of NaN", function()
    assert.error_matches(function() lt.mvn(lt.zeros(2), T):log_prob(lt.tensor{1, 0}) end,
                         "positive definite")
  end)

  it("positive definite operators of the same types still work", function()
    local S = lt.toeplitz{2, 1}
    local b = lt.tensor{1, 2}
    for _, A in ipairs{S, lt.scale(S, 2), S + lt.diag{1, 1}, lt.kron(S, lt.eye(2))} do
      local bb = lt.ones(A:size(1))
      local want = bb:dot(A:dense():solve(bb))
      assert.near(want, A:inv_quad(bb), 1e-12 * want)
    end
    assert.near(2, S:inv_quad(b), 1e-12)
  end)
end)

describe("item 10: honest info", function()
  it("A:inverse():solve(b) is an exact product: converged", function()
    local A = lt.tensor{{2, 1}, {1, 2}}
    local x, info = A:inverse():solve(lt.tensor{1, 1})
    assert.same({3, 3}, x:totable())
    assert.is_true(info.converged)
  end)

  it("cholesky says how much jitter it added", function()
    local L, info = lt.tensor{{1, 1}, {1, 1}}:cholesky()
    assert.is_true(info.jitter > 0)
    local D = L:dense()
    local LLt = D * D:t()
    assert.near(1 + info.jitter, LLt:get(1, 1), 1e-12)
    local _, clean = lt.tensor{{2, 1}, {1, 2}}:cholesky()
    assert.is_nil(clean.jitter)
  end)

  it("accepts only a jitter that repairs rounding", function()
    assert.error_matches(function() lt.settings.cholesky_jitter = 0.5 end, "cholesky_jitter")
    assert.error_matches(function()
      lt.with_settings({cholesky_max_tries = 30}, function()
        return lt.tensor{{1, 2}, {2, 1}}:cholesky()
      end)
    end, "not positive definite")
    lt.with_settings({cholesky_max_tries = 30}, function()
      local _, info = lt.tensor{{1, 1}, {1, 1 - 1e-12}}:cholesky()
      assert.is_true(info.jitter <= 1e-3)
    end)
  end)

  it("SLQ's logdet comes with its standard error", function()
    lt.manual_seed(10)
    local n = 400
    local K = lt.kernel(lt.rand(n), {kind = "rbf", lengthscale = 0.05}) + lt.identity(n, 0.1)
    local l, info = K:logdet{max_cholesky_size = 0}
    assert.equal("slq", info.method)
    assert.is_true(info.stderr > 0)
    local want = exact(function() return K:logdet() end)
    assert.is_true(math.abs(l - want) < 5 * info.stderr, ("%g vs %g ± %g"):format(l, want, info.stderr))
  end)
end)

describe("what the fuzzer found next to issue 19", function()
  -- two negative definite factors: a positive definite product whose
  -- factors have no Cholesky factor, root or SLQ log-determinant
  local A = lt.scale(lt.psd(lt.tensor{{2, 1}, {1, 2}}), -1)
  local B = lt.scale(lt.diag{1, 2, 3}, -0.5)
  local K = lt.kron(A, B)

  it("kron of negative definite factors: cholesky, root and logdet of the whole", function()
    local D = K:dense()
    local L = K:cholesky():dense()
    assert.is_true((L * L:t() - D):norm() < 1e-12 * D:norm())
    local R = K:root():dense()
    assert.is_true((R * R:t() - D):norm() < 1e-12 * D:norm())
    local want = D:logdet()
    local ld, info = K:logdet{max_cholesky_size = 0, num_trace_samples = 50}
    assert.is_true(math.abs(ld - want) < 1e-8 + 8 * (info.stderr or 0), ("%g vs %g"):format(ld, want))
  end)

  it("the product of an inverse never hides an unconverged solve", function()
    lt.manual_seed(3)
    local n = 50
    local S = lt.kernel(lt.rand(n), {kind = "rbf", lengthscale = 0.3}) + lt.identity(n, 1e-3)
    local v = lt.randn(n)
    assert.error_matches(function()
      lt.with_settings({max_cholesky_size = 0, max_cg_iterations = 2, preconditioner_size = 0}, function()
        return S:inverse() * v
      end)
    end, "did not converge")
    local x = lt.with_settings({max_cholesky_size = 0}, function() return S:inverse() * v end)
    assert.is_true((S * x - v):norm() / v:norm() < 1e-5)
  end)
end)
