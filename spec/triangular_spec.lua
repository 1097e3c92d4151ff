-- triangular: A's lower or upper triangle, kept lazily over A's storage.
local lt = require "lazytensor"
local ref = require "support.ref"

local function message(f)
  local ok, err = pcall(f)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

local A = {{2, 9, 9}, {1, 3, 9}, {4, -1, 5}}
local Lref = {{2, 0, 0}, {1, 3, 0}, {4, -1, 5}}
local Uref = {{2, 9, 9}, {0, 3, 9}, {0, 0, 5}}

describe("triangular", function()
  it("takes the lower (default) or upper triangle", function()
    local L = lt.triangular(lt.tensor(A), "lower")
    assert.equal("triangular", lt.type(L))
    assert.same(Lref, L:dense():totable())
    assert.same(Lref, lt.triangular(lt.tensor(A)):dense():totable())
    assert.same(Uref, lt.triangular(lt.tensor(A), "upper"):dense():totable())
  end)

  it("reads entries and rows without materialising", function()
    local L = lt.triangular(lt.tensor(A))
    assert.equal(0, L:get(1, 2))
    assert.equal(-1, L:get(3, 2))
    assert.same({1, 3, 0}, L[2]:totable())
    assert.same({2, 3, 5}, L:diagonal():totable())
    assert.equal(10, L:trace())
  end)

  it("multiplies like its dense triangle on both sides", function()
    local L = lt.triangular(lt.tensor(A))
    local U = lt.triangular(lt.tensor(A), "upper")
    local B = {{1, 2}, {3, 4}, {5, 6}}
    assert.same(ref.matmul(Lref, B), (L * lt.tensor(B)):totable())
    assert.same(ref.matmul(Uref, B), (U * lt.tensor(B)):totable())
    assert.same(ref.matvec(Lref, {1, 1, 1}), (L * lt.tensor{1, 1, 1}):totable())
    local Bt = ref.transpose(B)
    assert.same(ref.matmul(Bt, Lref), (lt.tensor(Bt) * L):totable())
    assert.same(ref.matmul(Bt, Uref), (lt.tensor(Bt) * U):totable())
  end)

  it("transposes to the other triangle, sharing the storage", function()
    local M = lt.tensor(A)
    local Lt = lt.triangular(M):t()
    assert.equal("triangular", lt.type(Lt))
    assert.same(ref.transpose(Lref), Lt:dense():totable())
    local B = {{1, 2}, {3, 4}, {5, 6}}
    assert.same(ref.matmul(ref.transpose(Lref), B), (Lt * lt.tensor(B)):totable())
    assert.same(Lref, Lt:t():dense():totable())
    -- shared: a write to the matrix shows through (the storage is not copied)
    M:set(3, 1, 40)
    assert.equal(40, Lt:get(1, 3))
  end)

  it("accepts a transposed view", function()
    local L = lt.triangular(lt.tensor(A):t(), "lower")
    assert.same(ref.transpose(Uref), L:dense():totable())
    assert.same(ref.matvec(ref.transpose(Uref), {1, 2, 3}), (L * lt.tensor{1, 2, 3}):totable())
  end)

  it("solves by substitution", function()
    local b = {2, 7, 20}
    local x, info = lt.triangular(lt.tensor(A)):solve(lt.tensor(b))
    assert.equal("triangular", info.method)
    ref.near(ref.solve(Lref, b), x:totable(), 1e-14)
    local xu = lt.triangular(lt.tensor(A), "upper"):solve(lt.tensor(b))
    ref.near(ref.solve(Uref, b), xu:totable(), 1e-14)
    local B = {{1, 0}, {0, 1}, {2, 2}}
    local X = lt.triangular(lt.tensor(A)):t():solve(lt.tensor(B))
    ref.near(ref.solve(ref.transpose(Lref), B), X:totable(), 1e-14)
    assert.matches("lazytensor: solve: matrix is singular", message(function()
      return lt.triangular(lt.tensor{{1, 0}, {2, 0}}):solve(lt.tensor{1, 1})
    end), 1, true)
  end)

  it("logdet from the diagonal, NaN for a negative product", function()
    ref.near(math.log(30), lt.triangular(lt.tensor(A)):logdet(), 1e-14)
    local v = lt.triangular(lt.tensor{{-1, 0}, {3, 2}}):logdet()
    assert.is_true(v ~= v)
    ref.near(math.log(2), lt.triangular(lt.tensor{{-1, 0}, {3, -2}}):logdet(), 1e-15)
    assert.equal(-math.huge, lt.triangular(lt.tensor{{1, 0}, {3, 0}}):logdet())
  end)

  it("is what cholesky returns", function()
    local L = lt.tensor{{4, 2}, {2, 5}}:cholesky()
    assert.equal("triangular", lt.type(L))
    ref.near(math.log(16), L:logdet() * 2, 1e-14)
  end)

  it("has no special cholesky: a non-diagonal triangle is not symmetric", function()
    assert.matches("cholesky: matrix is not symmetric", message(function()
      return lt.triangular(lt.tensor(A)):cholesky()
    end), 1, true)
  end)

  it("rejects what is not a square dense matrix", function()
    assert.matches("lazytensor: triangular: expected a square dense matrix",
      message(function() return lt.triangular(lt.zeros(2, 3)) end), 1, true)
    assert.matches("lazytensor: triangular: expected \"lower\" or \"upper\"",
      message(function() return lt.triangular(lt.zeros(2, 2), "left") end), 1, true)
  end)
  -- n = 150 spans three of the derivative's 64-row blocks (triangle_weights
  -- in triangular.c multiplies out only the triangle's blocks)
  it("bilinear_derivative is tr(Lᵀ·A·R)'s gradient, the triangle of L·Rᵀ, over several blocks",
     function()
    local n, k = 150, 3
    local seed = 7
    local function rnd()
      seed = (seed * 1103515245 + 12345) % 2147483648
      return seed / 2147483648 - 0.5
    end
    local P, Lw, Rw = {}, {}, {}
    for i = 1, n do
      P[i], Lw[i], Rw[i] = {}, {}, {}
      for j = 1, n do P[i][j] = rnd() end
      for c = 1, k do Lw[i][c], Rw[i][c] = rnd(), rnd() end
    end
    -- the gradient of tr(Lᵀ·tri(P)·R) in P: (L·Rᵀ)_ij on the triangle, 0 off it
    local function expected(keep)
      local out = {}
      for i = 1, n do
        out[i] = {}
        for j = 1, n do
          local v = 0
          if keep(i, j) then
            for c = 1, k do v = v + Lw[i][c] * Rw[j][c] end
          end
          out[i][j] = v
        end
      end
      return out
    end
    local function worst(got, want)
      local d = 0
      for i = 1, n do
        for j = 1, n do d = math.max(d, math.abs(got[i][j] - want[i][j])) end
      end
      return d
    end
    local Pt = lt.tensor(P)
    for _, case in ipairs{
      {"lower", function(i, j) return j <= i end},
      {"upper", function(i, j) return j >= i end},
    } do
      local T = lt.triangular(Pt, case[1])
      local g = T:bilinear_derivative(lt.tensor(Lw), lt.tensor(Rw))[T].L:totable()
      assert.is_true(worst(g, expected(case[2])) < 1e-13, case[1])
    end
    -- a transposed view: the lower triangle of Pᵀ is Pᵀ's, its gradient Pᵀ-shaped
    local V = lt.triangular(Pt:t(), "lower")
    local gv = V:bilinear_derivative(lt.tensor(Lw), lt.tensor(Rw))[V].L:totable()
    assert.is_true(worst(gv, expected(function(i, j) return j <= i end)) < 1e-13, "view")
  end)
end)
