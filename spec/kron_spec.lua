-- lt.kron and kron + s*I, against references built in plain Lua by the
-- definition (A ⊗ B)[(i-1)·p + k][(j-1)·q + l] = A[i][j]·B[k][l].
local lt = require "lazytensor"
local conformance = require "support.conformance"
local ref = conformance.reference
local close = conformance.assert_close
local gauss = require("support.ref").solve

local function kron2(A, B)
  local R = {}
  local p, q = #B, #B[1]
  for i = 1, #A do
    for k = 1, p do
      local row = {}
      for j = 1, #A[1] do
        for l = 1, q do row[(j - 1) * q + l] = A[i][j] * B[k][l] end
      end
      R[(i - 1) * p + k] = row
    end
  end
  return R
end

local function kron(...)
  local fs = {...}
  local R = fs[1]
  for i = 2, #fs do R = kron2(R, fs[i]) end
  return R
end

local function shifted(R, s)
  local S = {}
  for i = 1, #R do
    S[i] = {}
    for j = 1, #R[i] do S[i][j] = R[i][j] + (i == j and s or 0) end
  end
  return S
end

local rand = ref.generator(99)
-- SPD factors: M·Mᵀ + n·I
local function spd(n)
  local M = ref.random_matrix(rand, n, n)
  return shifted(ref.mm(M, ref.transpose(M)), n)
end

local A3, B2, C2 = spd(3), spd(2), spd(2)
local G3 = ref.random_matrix(rand, 3, 3)
local G2 = ref.random_matrix(rand, 2, 2)
local R23 = ref.random_matrix(rand, 2, 3)
local R32 = ref.random_matrix(rand, 3, 2)
local R22 = ref.random_matrix(rand, 2, 2)
for i = 1, 3 do G3[i][i] = G3[i][i] + 3 end
for i = 1, 2 do G2[i][i] = G2[i][i] + 2 end

local function T(x) return lt.tensor(x) end

conformance.check("kron of two SPD factors (3x3 ⊗ 2x2)",
  function() return lt.kron(T(A3), T(B2)) end,
  function() return kron(A3, B2) end, {psd = true})
conformance.check("kron of three SPD factors (2x2 ⊗ 3x3 ⊗ 2x2)",
  function() return lt.kron(T(B2), T(A3), T(C2)) end, function() return kron(B2, A3, C2) end,
  {psd = true})
conformance.check("kron of factors flagged positive definite (solves by explicit inverses)",
  function() return lt.kron(lt.psd(T(B2)), lt.psd(T(A3)), lt.psd(T(C2))) end,
  function() return kron(B2, A3, C2) end, {psd = true})
conformance.check("kron of non-symmetric factors", function() return lt.kron(T(G3), T(G2)) end,
  function() return kron(G3, G2) end)
conformance.check("kron of rectangular factors (2x3 ⊗ 2x2 = 4x6)",
  function() return lt.kron(T(R23), T(R22)) end, function() return kron(R23, R22) end)
local rank4 = "rank 2·2 = 4 < 6"
conformance.check("kron of rectangular factors making a square (2x3 ⊗ 3x2)",
  function() return lt.kron(T(R23), T(R32)) end, function() return kron(R23, R32) end,
  {singular = rank4})
conformance.check("kron with a lazy factor (diag ⊗ SPD)",
  function() return lt.kron(lt.diag{2, 0.5, 3}, T(B2)) end,
  function() return kron({{2, 0, 0}, {0, 0.5, 0}, {0, 0, 3}}, B2) end, {psd = true})
conformance.check("kron + s*I (kron_plus_identity)",
  function() return lt.kron(T(A3), T(B2)) + lt.identity(6, 0.5) end,
  function() return shifted(kron(A3, B2), 0.5) end, {psd = true})
-- the eigenvalues of A3 ⊗ B2 are about 6.1, 6.8, 7.6, 8.5, 9.0, 11.3:
-- s = -8 leaves three negative (det < 0: logdet NaN), s = -7 two (det > 0)
conformance.check("kron + s*I, indefinite, det < 0",
  function() return lt.kron(T(A3), T(B2)) + lt.identity(6, -8) end,
  function() return shifted(kron(A3, B2), -8) end, {symmetric = true})
conformance.check("kron + s*I, indefinite, det > 0",
  function() return lt.kron(T(A3), T(B2)):add_diag(-7) end,
  function() return shifted(kron(A3, B2), -7) end, {symmetric = true})
conformance.check("kron of non-symmetric factors + s*I",
  function() return lt.kron(T(G3), T(G2)):add_diag(0.25) end,
  function() return shifted(kron(G3, G2), 0.25) end)

describe("kron structure", function()
  it("flattens nested krons", function()
    local K = lt.kron(lt.kron(T(B2), T(A3)), T(C2))
    assert.equal("kron", lt.type(K))
    close(K, kron(B2, A3, C2), 1e-12, "nested")
  end)

  it("multiplies conforming krons factor-wise", function()
    local P = lt.kron(T(A3), T(B2)) * lt.kron(T(G3), T(G2))
    assert.equal("kron", lt.type(P))
    close(P, ref.mm(kron(A3, B2), kron(G3, G2)), 1e-11, "kron * kron")
    local Q = lt.kron(T(R23), T(R22)) * lt.kron(T(R32), T(R22))
    assert.equal("kron", lt.type(Q))
    close(Q, ref.mm(kron(R23, R22), kron(R32, R22)), 1e-11, "rectangular kron * kron")
    -- not conforming factor-wise (2 vs 3 factors): stays a lazy product
    local N = lt.kron(T(A3), T(B2)) * lt.kron(T(G3), lt.tensor{{1}}, T(G2))
    assert.equal("product", lt.type(N))
  end)

  it("keeps kron under transpose, scale, cholesky, root, inverse", function()
    local K = lt.kron(T(G3), T(G2))
    assert.equal("kron", lt.type(K:t()))
    close(K:t(), ref.transpose(kron(G3, G2)), 1e-14, "transpose")
    assert.equal("kron", lt.type(2 * K))
    assert.equal("kron", lt.type(K:inverse()))
    local S = lt.kron(lt.psd(T(A3)), lt.psd(T(B2)))
    assert.is_nil(lt.kron(T(A3), T(B2)):is_psd()) -- dense factors: PSD unknown
    assert.is_true(S:is_psd())
    assert.is_true(S:is_symmetric())
    assert.is_nil(K:is_psd())
    assert.is_not_true(K:is_symmetric())
    assert.is_nil((-1 * S):is_psd())
  end)

  it("has diagonal, trace from the factors", function()
    local K = lt.kron(T(G3), T(G2))
    local R = kron(G3, G2)
    local d, t = {}, 0
    for i = 1, 6 do d[i] = R[i][i]; t = t + R[i][i] end
    close(K:diagonal(), d, 1e-14, "diagonal")
    close(K:trace(), t, 1e-12, "trace")
    assert.matches("kron of diagonals", lt.explain("diagonal", K))
  end)

  it("makes kron_plus_identity from + c*I, add_diag(c), add_jitter, constant diag", function()
    local K = lt.kron(T(A3), T(B2))
    for _, x in ipairs{K + lt.identity(6, 0.5), lt.identity(6, 0.5) + K, K:add_diag(0.5),
      K:add_jitter(), K + lt.diag{0.5, 0.5, 0.5, 0.5, 0.5, 0.5}} do
      assert.equal("kron_plus_identity", lt.type(x))
    end
    assert.equal("sum", lt.type(K + lt.diag{1, 2, 3, 4, 5, 6}))
    local S = (K + lt.identity(6, 0.5)):add_jitter(0.25)
    assert.equal("kron_plus_identity", lt.type(S))
    close(S, shifted(kron(A3, B2), 0.75), 1e-12, "shifts add")
    assert.is_true((lt.kron(lt.psd(T(A3)), lt.psd(T(B2))) + lt.identity(6, 0.5)):is_psd())
    assert.is_nil((K + lt.identity(6, -1)):is_psd())
  end)

  it("rejects bad input with clear errors", function()
    local function fails(pattern, f, ...)
      local ok, err = pcall(f, ...)
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    fails("^lazytensor: kron: needs at least one factor", lt.kron)
    fails("^lazytensor: kron: factor 2 must be a matrix", lt.kron, T(A3), lt.ones(3))
    fails("^lazytensor: kron: factor 2: expected a tensor or a table of numbers, got boolean",
      lt.kron, T(A3), true)
    local K = lt.kron(T(R23), T(R22))
    fails("^lazytensor: logdet: expected a square matrix", lt.logdet, K)
    fails("^lazytensor: matmul:", function() return K * lt.ones(5) end)
    close(K, kron(R23, R22), 1e-14, "intact")
  end)
end)

describe("kron linear algebra through the factors", function()
  it("solves and has logdet = Σ n/nᵢ logdet Fᵢ", function()
    local K = lt.kron(T(A3), T(B2))
    local _, la = ref.lu(A3)
    local _, lb = ref.lu(B2)
    close(K:logdet(), 2 * la + 3 * lb, 1e-10, "logdet")
    assert.matches("kron logdet", lt.explain("logdet", K))
  end)

  it("solves with flagged positive definite factors by their inverses, when well conditioned", function()
    local b = ref.random_matrix(rand, 12, 2)
    local want = gauss(kron(B2, A3, C2), b)
    local x, info = lt.kron(lt.psd(T(B2)), lt.psd(T(A3)), lt.psd(T(C2))):solve(T(b))
    assert.equal("cholesky_inverse", info.method)
    close(x:totable(), want, 1e-12, "solve by inverses")
    -- unflagged factors: a solve per factor
    x, info = lt.kron(T(B2), T(A3), T(C2)):solve(T(b))
    assert.are_not.equal("cholesky_inverse", info.method)
    close(x:totable(), want, 1e-12, "factor solves")
    -- condition estimates multiplying past 1e12: a solve per factor
    local bad = {{1, 0.5}, {0.5, 0.25 + 1e-7}} -- κ ≈ 1.6e7 each
    local K = lt.kron(lt.psd(T(bad)), lt.psd(T(bad)))
    local c = {{1}, {2}, {3}, {4}}
    x, info = K:solve(T(c))
    assert.equal("cholesky", info.method)
    close(ref.mm(kron(bad, bad), x:totable()), c, 1e-6, "residual, ill conditioned")
  end)

  it("returns structured factors: cholesky, eigh sorted ascending", function()
    local K = lt.kron(T(A3), T(B2))
    assert.equal("kron", lt.type(K:cholesky()))
    local w = K:eigh():totable()
    for i = 2, #w do assert.is_true(w[i - 1] <= w[i]) end
    close(w, ref.eigenvalues(kron(A3, B2)), 1e-9, "eigenvalues")
  end)

  it("gets the sign of det(kron + s*I) from the eigenvalues", function()
    local K = lt.kron(T(A3), T(B2))
    local ld = (K + lt.identity(6, -8)):logdet()
    assert.is_true(ld ~= ld, "three negative eigenvalues: NaN")
    local _, l, sign = ref.lu(shifted(kron(A3, B2), -7))
    assert.equal(1, sign)
    close((K + lt.identity(6, -7)):logdet(), l, 1e-10, "two negative eigenvalues")
  end)

  it("solves kron + s*I through the factors' eigendecompositions", function()
    local S = lt.kron(T(A3), T(B2)) + lt.identity(6, 0.5)
    local _, info = S:solve(lt.ones(6))
    assert.equal("kron_plus_identity", lt.type(S))
    assert.is_string(info.method)
    local _, l = ref.lu(shifted(kron(A3, B2), 0.5))
    close(S:logdet(), l, 1e-10, "logdet")
  end)
end)

describe("kron of three 100x100 SPD factors (n = 1e6)", function()
  local m = 100
  local g = ref.generator(31)
  local F = {}
  for f = 1, 3 do
    local M = {}
    for i = 1, m do
      M[i] = {}
      for j = 1, m do M[i][j] = g() end
    end
    -- SPD: M Mᵀ / m + I, built in Lua
    local S = ref.mm(M, ref.transpose(M))
    for i = 1, m do
      for j = 1, m do S[i][j] = S[i][j] / m + (i == j and 1 or 0) end
    end
    F[f] = S
  end
  local a, b, c = ref.random_vector(g, m), ref.random_vector(g, m), ref.random_vector(g, m)
  local function kv(x, y, z)
    local out, n = {}, 0
    for i = 1, m do
      for j = 1, m do
        local xy = x[i] * y[j]
        for l = 1, m do n = n + 1; out[n] = xy * z[l] end
      end
    end
    return out
  end
  local K = lt.kron(T(F[1]), T(F[2]), T(F[3]))
  local v = lt.tensor(kv(a, b, c))

  local function check_vector(got, want, tol, what)
    local g2 = got:totable()
    local worst, scale = 0, 0
    for i = 1, #want do
      worst = math.max(worst, math.abs(g2[i] - want[i]))
      scale = math.max(scale, math.abs(want[i]))
    end
    assert.is_true(worst <= tol * scale, what .. ": deviates by " .. worst)
  end

  it("multiplies a vector: K (a⊗b⊗c) = Aa ⊗ Bb ⊗ Cc", function()
    assert.same({1000000, 1000000}, K:shape())
    local y = K * v
    check_vector(y, kv(ref.mv(F[1], a), ref.mv(F[2], b), ref.mv(F[3], c)), 1e-12, "K*v")
    assert.is_true(lt.memory() < 200e6, "memory " .. lt.memory())
  end)

  it("solves: K⁻¹(a⊗b⊗c) = A⁻¹a ⊗ B⁻¹b ⊗ C⁻¹c", function()
    local x = K:solve(v)
    local sa, sb, sc = ref.lu(F[1]), ref.lu(F[2]), ref.lu(F[3])
    check_vector(x, kv(sa(a), sb(b), sc(c)), 1e-9, "solve")
    assert.is_true(lt.memory() < 200e6, "memory " .. lt.memory())
  end)

  it("has logdet = 1e4 Σ logdet Fᵢ", function()
    local want = 0
    for f = 1, 3 do
      local _, l = ref.lu(F[f])
      want = want + 10000 * l
    end
    local ld = K:logdet()
    assert.is_true(math.abs(ld - want) <= 1e-9 * math.abs(want), "logdet " .. ld .. " vs " .. want)
    assert.is_true(lt.memory() < 200e6, "memory " .. lt.memory())
  end)
end)
