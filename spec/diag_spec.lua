-- diag and identity: every structure rule, result types through lt.type,
-- values against plain Lua loops on the dense matrices.
local lt = require "lazytensor"
local ref = require "support.ref"

local function message(f)
  local ok, err = pcall(f)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

local function isnan(x) return x ~= x end

describe("diag", function()
  local dv = {3, -1, 2}
  local ev = {0.5, 4, -2}
  local T = {{1, 2, 3}, {4, 5, 6}, {7, 8, 10}}

  it("builds from a table or a 1-d tensor and reads entries and rows", function()
    local d = lt.diag(dv)
    assert.equal("diag", lt.type(d))
    assert.is_true(lt.is_lazy(d))
    assert.same({3, 3}, d:shape())
    assert.same(ref.diagm(dv), d:dense():totable())
    assert.same(ref.diagm(dv), lt.diag(lt.tensor(dv)):dense():totable())
    assert.equal(-1, d:get(2, 2))
    assert.equal(0, d:get(1, 2))
    assert.same({0, -1, 0}, d[2]:totable())
    assert.same(dv, d:diagonal():totable())
    assert.equal(4, d:trace())
  end)

  it("copies its input: later writes do not change it", function()
    local v = lt.tensor{1, 2}
    local d = lt.diag(v)
    v[1] = 100
    assert.equal(1, d:get(1, 1))
  end)

  describe("arithmetic keeps structure", function()
    it("diag ± diag is diag", function()
      local s = lt.diag(dv) + lt.diag(ev)
      assert.equal("diag", lt.type(s))
      assert.same(ref.add(ref.diagm(dv), ref.diagm(ev)), s:dense():totable())
      local m = lt.diag(dv) - lt.diag(ev)
      assert.equal("diag", lt.type(m))
      assert.same({2.5, -5, 4}, m:diagonal():totable())
    end)

    it("diag · diag is diag", function()
      local p = lt.diag(dv) * lt.diag(ev)
      assert.equal("diag", lt.type(p))
      assert.same(ref.matmul(ref.diagm(dv), ref.diagm(ev)), p:dense():totable())
    end)

    it("number · diag is diag on either side, and so are / and -", function()
      for _, r in ipairs{2 * lt.diag(dv), lt.diag(dv) * 2, lt.scale(lt.diag(dv), 2)} do
        assert.equal("diag", lt.type(r))
        assert.same({6, -2, 4}, r:diagonal():totable())
      end
      assert.equal("diag", lt.type(lt.diag(dv) / 2))
      assert.same({1.5, -0.5, 1}, (lt.diag(dv) / 2):diagonal():totable())
      assert.equal("diag", lt.type(-lt.diag(dv)))
      assert.same({-3, 1, -2}, (-lt.diag(dv)):diagonal():totable())
      assert.equal("diag", lt.type(lt.diag(dv):t()))
    end)

    it("diag + dense and dense + diag are dense", function()
      local d = lt.diag(dv)
      local expected = ref.add(ref.diagm(dv), T)
      for _, r in ipairs{d + lt.tensor(T), lt.tensor(T) + d, lt.add(d, lt.tensor(T))} do
        assert.equal("dense", lt.type(r))
        assert.same(expected, r:totable())
      end
      local diff = lt.tensor(T) - d
      assert.equal("dense", lt.type(diff))
      assert.same({{-2, 2, 3}, {4, 6, 6}, {7, 8, 8}}, diff:totable())
      local diff2 = d - lt.tensor(T)
      assert.equal("dense", lt.type(diff2))
      assert.same({{2, -2, -3}, {-4, -6, -6}, {-7, -8, -8}}, diff2:totable())
    end)

    it("diag + identity is diag", function()
      local r = lt.diag(dv) + lt.identity(3, 2)
      assert.equal("diag", lt.type(r))
      assert.same({5, 1, 4}, r:diagonal():totable())
      local r2 = lt.identity(3, 2) - lt.diag(dv)
      assert.equal("diag", lt.type(r2))
      assert.same({-1, 3, 0}, r2:diagonal():totable())
    end)

    it("diag · identity and identity · diag are diag", function()
      for _, r in ipairs{lt.diag(dv) * lt.identity(3, 2), lt.identity(3, 2) * lt.diag(dv),
                         lt.mul(lt.diag(dv), lt.identity(3, 2))} do
        assert.equal("diag", lt.type(r))
        assert.same({6, -2, 4}, r:diagonal():totable())
      end
    end)

    it("diag .* dense keeps only the diagonal", function()
      local r = lt.mul(lt.diag(dv), lt.tensor(T))
      assert.equal("diag", lt.type(r))
      assert.same({3, -5, 20}, r:diagonal():totable())
    end)
  end)

  describe("products with dense", function()
    local B = {{1, 2}, {3, 4}, {5, 6}}
    it("diag · dense scales rows", function()
      local r = lt.diag(dv) * lt.tensor(B)
      assert.equal("dense", lt.type(r))
      assert.same(ref.matmul(ref.diagm(dv), B), r:totable())
      assert.same({3, -2, 6}, (lt.diag(dv) * lt.tensor{1, 2, 3}):totable())
      -- a transposed view as the dense operand
      local Bt = lt.tensor(ref.transpose(B)):t()
      assert.same(ref.matmul(ref.diagm(dv), B), (lt.diag(dv) * Bt):totable())
    end)

    it("dense · diag scales columns", function()
      local r = lt.tensor(ref.transpose(B)) * lt.diag(dv)
      assert.equal("dense", lt.type(r))
      assert.same(ref.matmul(ref.transpose(B), ref.diagm(dv)), r:totable())
      assert.same({3, -2, 6}, (lt.tensor{1, 2, 3} * lt.diag(dv)):totable())
    end)

    it("does not form the n×n diagonal matrix (n = 2000)", function()
      local n = 2000
      local d = lt.diag(lt.linspace(1, 2, n))
      local X = lt.ones(n, 2)
      collectgarbage()
      local before = lt.memory()
      local Y = d * X
      local Z = X:t() * d
      local grown = lt.memory() - before
      assert.is_true(grown < n * n * 8 / 10, ("memory grew by %d bytes"):format(grown))
      assert.equal(2, Y:get(n, 1))
      assert.equal(2, Z:get(1, n))
      assert.equal(1, Y:get(1, 2))
    end)
  end)

  describe("linear algebra in closed form", function()
    local pv = {4, 9, 0.25}
    it("cholesky of a diag is a diag of square roots", function()
      local L = lt.cholesky(lt.diag(pv))
      assert.equal("diag", lt.type(L))
      assert.same({2, 3, 0.5}, L:diagonal():totable())
      assert.equal("diag", lt.type(lt.diag(pv):cholesky(true)))
    end)

    it("cholesky refuses non-positive entries", function()
      assert.matches("lazytensor: cholesky: matrix is not positive definite",
        message(function() return lt.diag(dv):cholesky() end), 1, true)
      assert.matches("lazytensor: cholesky: matrix is not positive definite",
        message(function() return lt.diag{1, 0}:cholesky() end), 1, true)
    end)

    it("solve divides rows; zero entries are singular", function()
      local x, info = lt.diag(dv):solve(lt.tensor{3, 2, 1})
      assert.same({1, -2, 0.5}, x:totable())
      assert.equal("closed form", info.method)
      local X = lt.diag(dv):solve(lt.tensor{{3, 6}, {1, 1}, {2, 4}})
      assert.same({{1, 2}, {-1, -1}, {1, 2}}, X:totable())
      assert.matches("lazytensor: solve: matrix is singular",
        message(function() return lt.diag{1, 0}:solve(lt.tensor{1, 1}) end), 1, true)
    end)

    it("logdet sums logs; NaN for a negative product, -inf for a zero", function()
      ref.near(math.log(4 * 9 * 0.25), lt.diag(pv):logdet(), 1e-15)
      assert.is_true(isnan(lt.diag(dv):logdet()))
      ref.near(math.log(6), lt.diag{-2, -3}:logdet(), 1e-15)
      assert.equal(-math.huge, lt.diag{1, 0}:logdet())
    end)

    it("inverse is a diag of reciprocals", function()
      local I = lt.diag(pv):inverse()
      assert.equal("diag", lt.type(I))
      assert.same({0.25, 1 / 9, 4}, I:diagonal():totable())
      assert.matches("inverse: matrix is singular",
        message(function() return lt.diag{1, 0}:inverse() end), 1, true)
    end)

    it("inv_quad and inv_quad_logdet", function()
      local b = {2, 3, 1}
      local q = 0
      for i = 1, 3 do q = q + b[i] * b[i] / pv[i] end
      ref.near(q, lt.diag(pv):inv_quad(lt.tensor(b)), 1e-14)
      local q2, ld = lt.diag(pv):inv_quad_logdet(lt.tensor(b))
      ref.near(q, q2, 1e-14)
      ref.near(math.log(9), ld, 1e-14)
    end)

    it("root and root_inv", function()
      local R = lt.diag(pv):root()
      assert.equal("diag", lt.type(R))
      assert.same({2, 3, 0.5}, R:diagonal():totable())
      local S = lt.diag(pv):root_inv()
      assert.equal("diag", lt.type(S))
      ref.near({0.5, 1 / 3, 2}, S:diagonal():totable(), 1e-15)
      assert.same({0, 1}, lt.diag{0, 1}:root():diagonal():totable())
      assert.matches("root: matrix is not positive semi%-definite",
        message(function() return lt.diag(dv):root() end))
      assert.matches("root_inv: matrix is not positive definite",
        message(function() return lt.diag{0, 1}:root_inv() end))
    end)

    it("eigh sorts the diagonal", function()
      local w, Q = lt.diag(dv):eigh()
      assert.same({-1, 2, 3}, w:totable())
      local q = Q:totable()
      ref.near(ref.matmul(q, ref.diagm(w:totable())), ref.matmul(ref.diagm(dv), q), 0)
      ref.near(ref.eye(3), ref.matmul(ref.transpose(q), q), 0)
    end)

    it("eigh and svd form nothing n×n: their vectors are permutations", function()
      local n = 4000
      local v = {}
      for i = 1, n do v[i] = (i * 7919) % n - n / 2 end
      local D = lt.diag(v)
      collectgarbage()
      local before = lt.memory()
      local w, Q = D:eigh()
      local U, S, V = D:svd()
      assert.is_true(lt.memory() - before < 40 * n * 8, "eigh and svd held "
        .. (lt.memory() - before) .. " bytes") -- a dense Q alone: n² · 8
      assert.equal("permutation", lt.type(Q))
      assert.equal("permutation", lt.type(V))
      assert.equal("product", lt.type(U)) -- V · diag(signs): some entries are negative
      -- Q·diag(w) = D·Q and U·diag(S) = D·V, on a random probe
      local x = lt.randn(n)
      local err1 = (Q * (w:cmul(x)) - D * (Q * x)):norm()
      local err2 = (U * (S:cmul(x)) - D * (V * x)):norm()
      assert.is_true(err1 == 0 and err2 == 0, err1 .. " " .. err2)
      for j = 2, n do assert.is_true(w[j - 1] <= w[j] and S[j - 1] >= S[j]) end
    end)

    it("svd gives |d| descending and reconstructs", function()
      local U, S, V = lt.diag(dv):svd()
      assert.same({3, 2, 1}, S:totable())
      local back = ref.matmul(ref.matmul(U:totable(), ref.diagm(S:totable())),
                              ref.transpose(V:totable()))
      assert.same(ref.diagm(dv), back)
    end)
  end)
end)

describe("identity", function()
  it("is c·I with entries, rows, diagonal and trace", function()
    local I = lt.identity(3, 2)
    assert.equal("identity", lt.type(I))
    assert.same(ref.diagm{2, 2, 2}, I:dense():totable())
    assert.equal(2, I:get(3, 3))
    assert.same({0, 2, 0}, I[2]:totable())
    assert.equal(6, I:trace())
    assert.same(ref.eye(2), lt.identity(2):dense():totable())
  end)

  it("keeps structure", function()
    assert.equal("identity", lt.type(3 * lt.identity(2)))
    assert.equal("identity", lt.type(lt.identity(2) + lt.identity(2, 3)))
    assert.same({{4, 0}, {0, 4}}, (lt.identity(2) + lt.identity(2, 3)):dense():totable())
    local r = lt.identity(2, 3) + lt.tensor{{1, 2}, {3, 4}}
    assert.equal("dense", lt.type(r))
    assert.same({{4, 2}, {3, 7}}, r:totable())
    assert.same({{3, 6}, {9, 12}}, (lt.identity(2, 3) * lt.tensor{{1, 2}, {3, 4}}):totable())
    assert.same({{3, 6}, {9, 12}}, (lt.tensor{{1, 2}, {3, 4}} * lt.identity(2, 3)):totable())
  end)

  it("has closed-form linear algebra", function()
    local I = lt.identity(3, 4)
    assert.equal("identity", lt.type(I:cholesky()))
    assert.equal(2, I:cholesky():get(1, 1))
    assert.same({0.5, 1}, lt.identity(2, 2):solve(lt.tensor{1, 2}):totable())
    ref.near(3 * math.log(4), I:logdet(), 1e-14)
    assert.is_true(isnan(lt.identity(3, -1):logdet()))
    ref.near(0, lt.identity(2, -1):logdet(), 0)
    assert.equal(-math.huge, lt.identity(2, 0):logdet())
    assert.equal("identity", lt.type(I:inverse()))
    assert.equal(0.25, I:inverse():get(2, 2))
    ref.near(14 / 4, I:inv_quad(lt.tensor{1, 2, 3}), 1e-15)
    assert.equal(2, I:root():get(1, 1))
    assert.equal(0.5, I:root_inv():get(1, 1))
    local w, Q = I:eigh()
    assert.same({4, 4, 4}, w:totable())
    assert.same(ref.eye(3), Q:totable())
    local U, S, V = lt.identity(2, -3):svd()
    assert.same({3, 3}, S:totable())
    assert.same({{-3, 0}, {0, -3}},
      ref.matmul(ref.matmul(U:totable(), ref.diagm(S:totable())), ref.transpose(V:totable())))
    assert.matches("cholesky: matrix is not positive definite", message(function()
      return lt.identity(2, -1):cholesky()
    end), 1, true)
    assert.matches("solve: matrix is singular", message(function()
      return lt.identity(2, 0):solve(lt.tensor{1, 1})
    end), 1, true)
  end)

  it("is O(1) in memory at any size", function()
    collectgarbage()
    local before = lt.memory()
    local I = lt.identity(100000, 2)
    assert.is_true(lt.memory() - before < 4096)
    assert.equal(2e5, I:trace())
  end)
end)
