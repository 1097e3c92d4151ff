-- Dense linear algebra against pure-Lua references: Gaussian elimination,
-- reconstruction from factors, known determinants.
local lt = require "lazytensor"
local ref = require "support.ref"

local function is_lower(m, tol)
  for i = 1, #m do
    for j = i + 1, #m do
      if math.abs(m[i][j]) > (tol or 0) then return false end
    end
  end
  return true
end

local function message(f)
  local ok, err = pcall(f)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

describe("dense linear algebra", function()
  local n = 5
  local S = ref.spd(n)
  local G = ref.general(n, n)

  describe("cholesky", function()
    it("returns a lower triangular operator with L Lᵀ = A", function()
      local L = lt.tensor(S):cholesky()
      assert.equal("triangular", lt.type(L))
      local l = L:dense():totable()
      assert.is_true(is_lower(l))
      ref.near(S, ref.matmul(l, ref.transpose(l)), 1e-10)
      for i = 1, n do assert.is_true(l[i][i] > 0) end
    end)

    it("returns upper U with Uᵀ U = A", function()
      local U = lt.cholesky(lt.tensor(S), true)
      local u = U:dense():totable()
      assert.is_true(is_lower(ref.transpose(u)))
      ref.near(S, ref.matmul(ref.transpose(u), u), 1e-10)
    end)

    it("matches the hand-computed factor of a 2x2", function()
      -- [[4, 2], [2, 5]] = [[2, 0], [1, 2]] [[2, 1], [0, 2]]
      assert.same({{2, 0}, {1, 2}}, lt.tensor{{4, 2}, {2, 5}}:cholesky():dense():totable())
    end)

    it("retries with jitter on a PSD singular matrix", function()
      local A = lt.tensor{{1, 1}, {1, 1}}
      local L = lt.with_settings({cholesky_jitter = 1e-8, cholesky_max_tries = 3}, function()
        return A:cholesky()
      end)
      local l = L:dense():totable()
      local back = ref.matmul(l, ref.transpose(l))
      ref.near({{1, 1}, {1, 1}}, back, 1e-6)
      -- the jitter is visible on the diagonal, and small
      assert.is_true(back[2][2] > 1)
      -- without retries the same matrix fails
      local err = message(function()
        return lt.with_settings({cholesky_max_tries = 0}, function() return A:cholesky() end)
      end)
      assert.matches("lazytensor: cholesky: matrix is not positive definite", err, 1, true)
    end)

    it("refuses an indefinite matrix with a clear error", function()
      local err = message(function() return lt.tensor{{1, 2}, {2, 1}}:cholesky() end)
      assert.matches("lazytensor: cholesky: matrix is not positive definite", err, 1, true)
    end)

    it("accepts X·Xᵀ, symmetric up to the rounding of blocked BLAS products", function()
      lt.manual_seed(3)
      local m = 300
      local X = lt.randn(m, 37)
      local K = X * X:t() + lt.eye(m)
      assert.is_true(K:is_symmetric())
      local L = K:cholesky()
      local row = L[m]:totable()
      -- the last diagonal entry of K from the factor: Σ_k L[m][k]²
      local s = 0
      for k = 1, m do s = s + row[k] * row[k] end
      ref.near(K:get(m, m), s, 1e-9)
      -- an asymmetry above rounding is refused
      local A = lt.tensor{{1, 1e-9}, {0, 1}}
      assert.is_false(A:is_symmetric())
      assert.matches("cholesky: matrix is not symmetric", message(function()
        return A:cholesky()
      end), 1, true)
    end)

    it("refuses a non-symmetric matrix instead of symmetrising it", function()
      local err = message(function() return lt.tensor{{4, 1}, {0, 4}}:cholesky() end)
      assert.matches("lazytensor: cholesky: matrix is not symmetric", err, 1, true)
    end)
  end)

  describe("solve", function()
    local b = {1, -2, 3, 0.5, 2}
    it("uses LU for a general matrix, matching elimination", function()
      local x, info = lt.tensor(G):solve(lt.tensor(b))
      assert.equal("lu", info.method)
      ref.near(ref.solve(G, b), x:totable(), 1e-10)
    end)

    it("uses Cholesky for a matrix flagged PSD", function()
      local x, info = lt.psd(lt.tensor(S)):solve(lt.tensor(b))
      assert.equal("cholesky", info.method)
      assert.is_true(info.converged)
      ref.near(ref.solve(S, b), x:totable(), 1e-10)
    end)

    it("falls back to LDLᵀ when a PSD-flagged matrix is not positive definite", function()
      local A = {{1, 2}, {2, 1}}
      local x, info = lt.psd(lt.tensor(A)):solve(lt.tensor{1, 1})
      assert.equal("ldl", info.method)
      ref.near(ref.solve(A, {1, 1}), x:totable(), 1e-12)
    end)

    it("solves several right-hand sides at once", function()
      local B = {{1, 2}, {0, 1}, {3, -1}, {2, 2}, {-1, 0}}
      local X = lt.solve(lt.tensor(G), lt.tensor(B))
      assert.same({n, 2}, X:shape())
      ref.near(ref.solve(G, B), X:totable(), 1e-10)
      -- a transposed view as the matrix
      local Xt = lt.solve(lt.tensor(G):t(), lt.tensor(B))
      ref.near(ref.solve(ref.transpose(G), B), Xt:totable(), 1e-10)
    end)

    it("raises on an exactly singular matrix", function()
      local err = message(function() return lt.tensor{{1, 2}, {2, 4}}:solve(lt.tensor{1, 1}) end)
      assert.matches("lazytensor: solve: matrix is singular", err, 1, true)
    end)
  end)

  -- MATLAB's `\` (API.md, "Properties follow the matrix"): a symmetric
  -- matrix of unknown definiteness is tried with Cholesky first, and its
  -- success proves positive definiteness; LDLᵀ when it fails; LU unless
  -- symmetric.
  describe("without a PSD flag", function()
    -- symmetric indefinite, with 2×2 pivots likely (zero diagonal entry)
    local I = {{0, 2, 1, 0}, {2, 1, 0, 3}, {1, 0, -3, 1}, {0, 3, 1, 2}}
    local b4 = {1, -1, 2, 0.5}

    it("solves a positive definite symmetric matrix by Cholesky and then knows it is PSD", function()
      local A = lt.tensor(S)
      assert.is_nil(A:is_psd())
      local x, info = A:solve(lt.tensor{1, -2, 3, 0.5, 2})
      assert.equal("cholesky", info.method)
      ref.near(ref.solve(S, {1, -2, 3, 0.5, 2}), x:totable(), 1e-10)
      assert.is_true(A:is_psd())
      -- a write makes it unknown again, and a matrix no longer PD takes LDLᵀ
      A:set(1, 1, -50)
      assert.is_nil(A:is_psd())
      local _, info2 = A:solve(lt.tensor{1, -2, 3, 0.5, 2})
      assert.equal("ldl", info2.method)
    end)

    it("solves a symmetric indefinite matrix by LDLᵀ, against elimination", function()
      local x, info = lt.tensor(I):solve(lt.tensor(b4))
      assert.equal("ldl", info.method)
      ref.near(ref.solve(I, b4), x:totable(), 1e-12)
      local B = {{1, 0}, {0, 1}, {2, -1}, {3, 3}}
      local X = lt.tensor(I):solve(lt.tensor(B))
      ref.near(ref.solve(I, B), X:totable(), 1e-12)
      assert.is_nil(lt.tensor(I):is_psd())
    end)

    it("takes LU for a matrix that is not symmetric", function()
      local A = {{4, 1, 0}, {0, 3, 1}, {1, 0, 2}}
      local x, info = lt.tensor(A):solve(lt.tensor{1, 2, 3})
      assert.equal("lu", info.method)
      ref.near(ref.solve(A, {1, 2, 3}), x:totable(), 1e-12)
    end)

    it("gives log det by LDLᵀ: exact for an indefinite matrix of positive determinant, NaN for a "
       .. "negative one", function()
      local d = ref.det(I)
      local v, info = lt.tensor(I):logdet()
      assert.equal("ldl", info.method)
      if d > 0 then ref.near(math.log(d), v, 1e-12) else assert.is_true(v ~= v) end
      -- det = (-1)(-2)·3 = 6 > 0, with negative pivots
      local w, info2 = lt.tensor{{-1, 0, 0}, {0, -2, 0}, {0, 0, 3}}:logdet()
      assert.equal("ldl", info2.method)
      ref.near(math.log(6), w, 1e-14)
      -- a 2×2 pivot of negative determinant
      assert.is_true(lt.tensor{{0, 1}, {1, 0}}:logdet() ~= lt.tensor{{0, 1}, {1, 0}}:logdet())
      assert.equal(-math.huge, lt.tensor{{1, 2}, {2, 4}}:logdet())
    end)

    it("raises on an exactly singular symmetric matrix", function()
      local err = message(function() return lt.tensor{{1, 2}, {2, 4}}:solve(lt.tensor{1, 1}) end)
      assert.matches("lazytensor: solve: matrix is singular", err, 1, true)
    end)
  end)

  describe("logdet", function()
    it("equals log det from elimination", function()
      local v, info = lt.tensor(G):logdet()
      local d = ref.det(G)
      assert.is_true(d > 0)
      ref.near(math.log(d), v, 1e-10)
      assert.equal("lu", info.method)
      local w, info2 = lt.psd(lt.tensor(S)):logdet()
      ref.near(math.log(ref.det(S)), w, 1e-10)
      assert.equal("cholesky", info2.method)
    end)

    it("knows simple determinants", function()
      ref.near(math.log(6), lt.tensor{{2, 0, 0}, {0, 3, 0}, {0, 0, 1}}:logdet(), 1e-15)
      ref.near(math.log(2), lt.tensor{{1, 2}, {3, 8}}:logdet(), 1e-14)
    end)

    it("is NaN for a negative determinant and -inf when singular", function()
      local v = lt.tensor{{0, 1}, {1, 0}}:logdet()
      assert.is_true(v ~= v)
      assert.equal(-math.huge, lt.tensor{{1, 2}, {2, 4}}:logdet())
      -- a row swap with positive determinant is not NaN
      ref.near(math.log(2), lt.tensor{{0, 1}, {-2, 0}}:logdet(), 1e-15)
    end)
  end)

  describe("inv_quad and inv_quad_logdet", function()
    local b = {1, 2, 3, 4, 5}
    it("give bᵀA⁻¹b and log det A", function()
      local x = ref.solve(S, b)
      local q = 0
      for i = 1, n do q = q + b[i] * x[i] end
      ref.near(q, lt.tensor(S):inv_quad(lt.tensor(b)), 1e-10)
      local q2, ld, info = lt.psd(lt.tensor(S)):inv_quad_logdet(lt.tensor(b))
      ref.near(q, q2, 1e-10)
      ref.near(math.log(ref.det(S)), ld, 1e-10)
      assert.equal("cholesky", info.method)
    end)

    it("sums over the columns of b", function()
      local B = {{1, 0}, {0, 1}, {1, 1}, {2, 0}, {0, 3}}
      local X = ref.solve(S, B)
      local q = 0
      for i = 1, n do
        for j = 1, 2 do q = q + B[i][j] * X[i][j] end
      end
      local q2, ld = lt.tensor(S):inv_quad_logdet(lt.tensor(B))
      ref.near(q, q2, 1e-10)
      ref.near(math.log(ref.det(S)), ld, 1e-10)
    end)

    it("raise for a matrix that is not symmetric positive definite (API.md)", function()
      local ok, err = pcall(function() return lt.tensor(G):inv_quad_logdet(lt.ones(n)) end)
      assert.is_false(ok)
      assert.matches("^lazytensor: inv_quad_logdet: matrix is not symmetric", err)
    end)
  end)

  describe("eigh", function()
    it("gives ascending eigenvalues and orthonormal eigenvectors", function()
      local w, Q = lt.tensor(S):eigh()
      local wv, q = w:totable(), Q:totable()
      for i = 2, n do assert.is_true(wv[i - 1] <= wv[i]) end
      ref.near(ref.eye(n), ref.matmul(ref.transpose(q), q), 1e-10)
      -- A Q = Q diag(w)
      ref.near(ref.matmul(q, ref.diagm(wv)), ref.matmul(S, q), 1e-9)
    end)

    it("knows a 2x2 spectrum", function()
      local w = lt.tensor{{2, 1}, {1, 2}}:eigh()
      ref.near({1, 3}, w:totable(), 1e-14)
    end)

    it("refuses a non-symmetric matrix", function()
      assert.matches("eigh: matrix is not symmetric", message(function()
        return lt.tensor(G):eigh()
      end), 1, true)
    end)
  end)

  describe("svd", function()
    it("reconstructs A = U diag(S) Vᵀ with descending S (thin)", function()
      for _, shape in ipairs{{4, 3}, {3, 4}, {5, 5}} do
        local A = ref.general(shape[1], shape[2])
        local U, Sv, V = lt.tensor(A):svd()
        local r = math.min(shape[1], shape[2])
        assert.same({shape[1], r}, U:shape())
        assert.same({r}, Sv:shape())
        assert.same({shape[2], r}, V:shape())
        local s = Sv:totable()
        for i = 2, r do assert.is_true(s[i - 1] >= s[i]) end
        local back = ref.matmul(ref.matmul(U:totable(), ref.diagm(s)), ref.transpose(V:totable()))
        ref.near(A, back, 1e-10)
        ref.near(ref.eye(r), ref.matmul(ref.transpose(U:totable()), U:totable()), 1e-10)
      end
    end)

    it("knows singular values of a diagonal-like matrix", function()
      local _, Sv = lt.tensor{{0, 3}, {-2, 0}}:svd()
      ref.near({3, 2}, Sv:totable(), 1e-14)
    end)
  end)

  describe("inverse, root, root_inv", function()
    it("inverse is lazy and its product solves", function()
      local Ai = lt.tensor(G):inverse()
      assert.equal("inverse", lt.type(Ai))
      local b = {1, 0, 0, 2, 1}
      ref.near(ref.solve(G, b), (Ai * lt.tensor(b)):totable(), 1e-10)
    end)

    it("root R has R Rᵀ = A", function()
      local R, info = lt.tensor(S):root()
      local r = R:dense():totable()
      ref.near(S, ref.matmul(r, ref.transpose(r)), 1e-10)
      assert.equal("cholesky", info.method)
    end)

    it("root of a PSD singular matrix goes through eigh", function()
      local A = {{1, 1}, {1, 1}}
      local R, info = lt.tensor(A):root()
      local r = R:dense():totable()
      ref.near(A, ref.matmul(r, ref.transpose(r)), 1e-12)
      assert.equal("eigh", info.method)
      assert.matches("root: matrix is not positive semi%-definite", message(function()
        return lt.tensor{{1, 2}, {2, 1}}:root()
      end))
    end)

    it("root_inv S has S Sᵀ = A⁻¹", function()
      local Sr = lt.tensor(S):root_inv()
      local s = Sr:dense():totable()
      local inv = ref.solve(S, ref.eye(n))
      ref.near(inv, ref.matmul(s, ref.transpose(s)), 1e-10)
      assert.matches("lazytensor: root_inv: matrix is not positive definite", message(function()
        return lt.tensor{{1, 1}, {1, 1}}:root_inv()
      end), 1, true)
    end)
  end)

  it("diagonal and trace", function()
    assert.same({1, 5, 9}, lt.tensor{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}:diagonal():totable())
    assert.equal(15, lt.tensor{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}:trace())
    assert.equal(15, lt.trace(lt.tensor{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}:t()))
  end)

  it("rejects NaN entries in factorisations", function()
    local A = lt.tensor{{1, 0}, {0, 0 / 0}}
    assert.matches("lazytensor: solve: matrix has NaN", message(function()
      return A:solve(lt.tensor{1, 1})
    end), 1, true)
    assert.matches("lazytensor: logdet: matrix has NaN", message(function()
      return A:logdet()
    end), 1, true)
  end)
end)
