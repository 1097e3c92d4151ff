-- lt.lowrank and lowrank + diag (Woodbury), against references built in
-- plain Lua from the factors.
local lt = require "lazytensor"
local conformance = require "support.conformance"
local ref = conformance.reference
local close = conformance.assert_close

local rand = ref.generator(2024)
local U = ref.random_matrix(rand, 5, 2)
local V = ref.random_matrix(rand, 5, 2)
local Ufull = ref.random_matrix(rand, 4, 4)
local Vfull = ref.random_matrix(rand, 4, 4)
local Urect = ref.random_matrix(rand, 5, 2)
local Vrect = ref.random_matrix(rand, 3, 2)
local d = {1.5, 0.7, 2.0, 1.1, 0.9}

-- U·Vᵀ by loops
local function outer(A, B)
  local R = {}
  for i = 1, #A do
    R[i] = {}
    for j = 1, #B do
      local s = 0
      for l = 1, #A[1] do s = s + A[i][l] * B[j][l] end
      R[i][j] = s
    end
  end
  return R
end

local function plus_diag(R, dv)
  local S = {}
  for i = 1, #R do
    S[i] = {}
    for j = 1, #R do S[i][j] = R[i][j] + (i == j and dv[i] or 0) end
  end
  return S
end

local singular = "rank 2 < 5"

conformance.check("lowrank U*U' (5x5, k=2)", function() return lt.lowrank(U) end,
  function() return outer(U, U) end,
  {symmetric = true, singular = singular})
conformance.check("lowrank U*V' (5x5, k=2)", function() return lt.lowrank(U, V) end,
  function() return outer(U, V) end,
  {singular = singular})
conformance.check("lowrank U*V' full rank (4x4, k=4)",
  function() return lt.lowrank(Ufull, Vfull) end,
  function() return outer(Ufull, Vfull) end)
conformance.check("lowrank U*V' rectangular (5x3, k=2)",
  function() return lt.lowrank(Urect, Vrect) end, function() return outer(Urect, Vrect) end)
conformance.check("lowrank_plus_diag U*U' + D (PSD)",
  function() return lt.lowrank(U) + lt.diag(d) end,
  function() return plus_diag(outer(U, U), d) end, {psd = true})
conformance.check("lowrank_plus_diag D + U*V' (general)",
  function() return lt.diag(d) + lt.lowrank(U, V) end,
  function() return plus_diag(outer(U, V), d) end)
conformance.check("lowrank_plus_diag with a zero on the diagonal (no Woodbury)",
  function() return lt.lowrank(U) + lt.diag{1.5, 0, 2.0, 1.1, 0.9} end,
  function() return plus_diag(outer(U, U), {1.5, 0, 2.0, 1.1, 0.9}) end, {psd = true})
conformance.check("lowrank_plus_diag with a negative diagonal",
  function() return lt.lowrank(U):add_diag(lt.tensor{1.5, -0.7, 2.0, 1.1, -0.9}) end,
  function() return plus_diag(outer(U, U), {1.5, -0.7, 2.0, 1.1, -0.9}) end, {symmetric = true})

describe("lowrank structure", function()
  it("keeps its type under transpose, scale, +, *", function()
    local A, B = lt.lowrank(U, V), lt.lowrank(V, U)
    assert.equal("lowrank", lt.type(A:t()))
    assert.equal("lowrank", lt.type(2 * A))
    assert.equal("lowrank", lt.type(-A))
    assert.equal("lowrank", lt.type(A + B))
    assert.equal("lowrank", lt.type(A - B))
    assert.equal("lowrank", lt.type(A * B))
    local want = ref.mm(outer(U, V), outer(V, U))
    close(A * B, want, 1e-12, "lowrank * lowrank")
    local sum = outer(U, V)
    local other = outer(V, U)
    for i = 1, 5 do for j = 1, 5 do sum[i][j] = sum[i][j] - other[i][j] end end
    close(A - B, sum, 1e-12, "lowrank - lowrank")
    for i = 1, 5 do for j = 1, 5 do sum[i][j] = sum[i][j] + 2 * other[i][j] end end
    close(A + B, sum, 1e-12, "lowrank + lowrank")
  end)

  it("stays lowrank when multiplied by a diag on either side", function()
    local A = lt.lowrank(U, V)
    local D = lt.diag(d)
    local Dm = plus_diag(outer(U, U), d)
    for i = 1, 5 do for j = 1, 5 do Dm[i][j] = i == j and d[i] or 0 end end
    assert.equal("lowrank", lt.type(A * D))
    assert.equal("lowrank", lt.type(D * A))
    close(A * D, ref.mm(outer(U, V), Dm), 1e-13, "A * D")
    close(D * A, ref.mm(Dm, outer(U, V)), 1e-13, "D * A")
    assert.equal("lowrank", lt.type(lt.lowrank(Urect, Vrect) * lt.diag{1, 2, 3}))
  end)

  it("keeps PSD for U*U' under positive scaling and sums", function()
    local A = lt.lowrank(U)
    assert.is_true((3 * A):is_psd())
    assert.is_true((A + lt.lowrank(V)):is_psd())
    assert.is_not_true((-1 * A):is_psd())
    assert.is_nil(lt.lowrank(U, V):is_psd())
  end)

  it("makes lowrank_plus_diag from +diag, diag+, +identity, add_diag, add_jitter", function()
    local A = lt.lowrank(U)
    for _, x in ipairs{A + lt.diag(d), lt.diag(d) + A, A + lt.identity(5, 2), lt.identity(5, 2) + A,
      A:add_diag(lt.tensor(d)), A:add_diag(0.5), A:add_jitter(), A:add_jitter(1e-3),
      lt.lowrank(U, V) + lt.diag(d), A - lt.diag(d)} do
      assert.equal("lowrank_plus_diag", lt.type(x))
    end
    local B = A + lt.diag(d)
    assert.equal("lowrank_plus_diag", lt.type(B + lt.diag(d)))
    assert.equal("lowrank_plus_diag", lt.type(B:add_jitter(0.1)))
    assert.equal("lowrank_plus_diag", lt.type(2 * B))
    local dd = {}
    for i = 1, 5 do dd[i] = d[i] * 2 + 0.1 end
    close((B + lt.diag(d)):add_jitter(0.1), plus_diag(outer(U, U), dd), 1e-12, "merged diagonals")
    assert.is_true(B:is_psd())
    assert.is_nil((A - lt.diag(d)):is_psd())
    -- low-rank parts concatenate, diagonals add
    local C = lt.lowrank(V) + lt.diag(d)
    for _, x in ipairs{B + lt.lowrank(V), lt.lowrank(V) + B, B + C} do
      assert.equal("lowrank_plus_diag", lt.type(x))
      assert.is_true(x:is_psd())
    end
    local want = plus_diag(outer(U, U), d)
    local other = plus_diag(outer(V, V), d)
    for i = 1, 5 do for j = 1, 5 do want[i][j] = want[i][j] + other[i][j] end end
    close(B + C, want, 1e-12, "(D + UU') + (D + VV')")
  end)

  it("has a lazy root, a cat [sqrt(D) | U], only when PSD", function()
    assert.equal("cat", lt.type((lt.lowrank(U) + lt.diag(d)):root()))
    local R = (lt.lowrank(U) + lt.diag(d)):root()
    close(R * R:t(), plus_diag(outer(U, U), d), 1e-12, "R R'")
    -- not PSD: the generic (dense) root, which raises or factors a dense matrix
    assert.is_not.equal("cat", lt.type(select(2, pcall(function()
      return (lt.lowrank(U, V) + lt.diag(d)):root()
    end))))
  end)

  it("solves with Woodbury and the determinant lemma", function()
    local B = lt.lowrank(U) + lt.diag(d)
    local _, info = B:solve(lt.tensor{1, 2, 3, 4, 5})
    assert.equal("woodbury", info.method)
    local _, linfo = B:logdet()
    assert.equal("woodbury", linfo.method)
    assert.matches("Woodbury", lt.explain("solve", B, lt.ones(5)))
  end)

  it("is singular when k < n", function()
    assert.equal(-math.huge, lt.lowrank(U):logdet())
    assert.has_error(function() lt.lowrank(U):solve(lt.ones(5)) end)
    local ok, err = pcall(lt.solve, lt.lowrank(U), lt.ones(5))
    assert.is_false(ok)
    assert.matches("^lazytensor: solve: the matrix is singular", err)
  end)

  it("has U as a root of U*U'", function()
    local R = lt.lowrank(U):root()
    close(R, U, 0, "root")
  end)

  it("rejects bad input with clear errors", function()
    local function fails(pattern, f, ...)
      local ok, err = pcall(f, ...)
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    fails("^lazytensor: lowrank: U and V need the same number of columns", lt.lowrank,
      lt.ones(5, 2), lt.ones(5, 3))
    fails("^lazytensor: lowrank: U must be a dense vector or matrix", lt.lowrank, lt.diag{1, 2})
    fails("^lazytensor: lowrank: missing", lt.lowrank)
    fails("^lazytensor: add: shapes differ", lt.add, lt.lowrank(U), lt.diag{1, 2})
    fails("^lazytensor: logdet: expected a square matrix", lt.logdet, lt.lowrank(Urect, Vrect))
    local A = lt.lowrank(U)
    fails("^lazytensor: solve:", lt.solve, A + lt.diag(d), lt.ones(4))
    close(A, outer(U, U), 1e-14, "intact after errors")
  end)

  it("copies its factors", function()
    local Ut = lt.tensor(U)
    local A = lt.lowrank(Ut)
    Ut[1] = 100
    close(A, outer(U, U), 1e-14, "unchanged by writes to U")
  end)
end)

describe("lowrank + diag at n = 1e5, k = 20", function()
  local n, k = 100000, 20
  local g = ref.generator(7)
  local Ub, dv, b = {}, {}, {}
  for i = 1, n do
    local row = {}
    for l = 1, k do row[l] = g() end
    Ub[i] = row
    dv[i] = 1 + 0.5 * (g() + 1)
    b[i] = g()
  end
  local A = lt.lowrank(lt.tensor(Ub)) + lt.diag(dv)

  it("is a lowrank_plus_diag", function()
    assert.equal("lowrank_plus_diag", lt.type(A))
    assert.is_true(A:is_psd())
  end)

  it("solves (residual checked in plain Lua)", function()
    local x = A:solve(lt.tensor(b)):totable()
    -- r = D x + U (Uᵀ x) − b
    local t = {}
    for l = 1, k do t[l] = 0 end
    for i = 1, n do
      local row, xi = Ub[i], x[i]
      for l = 1, k do t[l] = t[l] + row[l] * xi end
    end
    local worst = 0
    for i = 1, n do
      local row, s = Ub[i], dv[i] * x[i]
      for l = 1, k do s = s + row[l] * t[l] end
      worst = math.max(worst, math.abs(s - b[i]))
    end
    assert.is_true(worst < 1e-9, "residual " .. worst)
    assert.is_true(lt.memory() < 200e6)
  end)

  it("has a lazy root [sqrt(D) | U] (sampling without n x n)", function()
    local R = A:root()
    assert.equal("cat", lt.type(R))
    assert.same({n, n + k}, R:shape())
    local g2 = ref.generator(3)
    local z = ref.random_vector(g2, n + k)
    local y = (R * lt.tensor(z)):totable()
    local worst = 0
    for i = 1, n, 997 do
      local s = math.sqrt(dv[i]) * z[i]
      for l = 1, k do s = s + Ub[i][l] * z[n + l] end
      worst = math.max(worst, math.abs(y[i] - s))
    end
    assert.is_true(worst < 1e-12, "R*z deviates by " .. worst)
    assert.is_true(lt.memory() < 200e6)
  end)

  it("has the log-determinant of the determinant lemma (k x k in Lua)", function()
    -- C = I + Uᵀ D⁻¹ U, log det A = Σ log dᵢ + log det C
    local C = {}
    for a = 1, k do
      C[a] = {}
      for c = 1, k do C[a][c] = a == c and 1 or 0 end
    end
    local logd = 0
    for i = 1, n do
      local row, inv = Ub[i], 1 / dv[i]
      logd = logd + math.log(dv[i])
      for a = 1, k do
        local ra = row[a] * inv
        local Ca = C[a]
        for c = 1, k do Ca[c] = Ca[c] + ra * row[c] end
      end
    end
    local _, logc, sign = ref.lu(C)
    assert.equal(1, sign)
    local ld = A:logdet()
    assert.is_true(math.abs(ld - (logd + logc)) < 1e-8 * math.abs(ld), "logdet " .. ld)
    local q, ld2 = A:inv_quad_logdet(lt.tensor(b))
    assert.is_true(math.abs(ld2 - ld) < 1e-9 * math.abs(ld))
    assert.is_true(q > 0)
    assert.is_true(lt.memory() < 200e6)
  end)
end)
