-- lt.mul of two lazy operators: the "hadamard" type (A ∘ B kept lazy, rows
-- on demand). References are built entry by entry in plain Lua.
local lt = require "lazytensor"
local conformance = require "support.conformance"

local x = {0, 0.4, 1.1, 2}
local function rbf(a, b) return 1.5 * math.exp(-(a - b) ^ 2 / (2 * 0.8 ^ 2)) end
local function m12(a, b) return math.exp(-math.abs(a - b) / 1.3) end
local U = {{1, 0.5}, {-1, 2}, {0.3, 0.3}, {2, -1}}
local V = {{0.5, 1}, {1, 0}, {-2, 1}, {0, 1}}

local function K1() return lt.kernel(lt.tensor(x), {kind = "rbf", lengthscale = 0.8, variance = 1.5}) end
local function K2() return lt.kernel(lt.tensor(x), {kind = "matern12", lengthscale = 1.3}) end

-- K1 ∘ K2 is PSD (Schur product theorem) and positive definite here.
conformance.check("hadamard kernel .* kernel", function()
  return lt.mul(K1(), K2())
end, function()
  local R = {}
  for i = 1, #x do
    R[i] = {}
    for j = 1, #x do R[i][j] = rbf(x[i], x[j]) * m12(x[i], x[j]) end
  end
  return R
end, {psd = true})

-- A general (non-symmetric) one: kernel ∘ U·Vᵀ.
conformance.check("hadamard kernel .* lowrank U·Vᵀ", function()
  return lt.mul(K1(), lt.lowrank(lt.tensor(U), lt.tensor(V)))
end, function()
  local R = {}
  for i = 1, #x do
    R[i] = {}
    for j = 1, #x do
      R[i][j] = rbf(x[i], x[j]) * (U[i][1] * V[j][1] + U[i][2] * V[j][2])
    end
  end
  return R
end)

describe("hadamard", function()
  it("is what lt.mul gives for two lazy operators, in either order", function()
    assert.equal("hadamard", lt.type(lt.mul(K1(), K2())))
    local L = lt.lowrank(lt.tensor(U), lt.tensor(V))
    assert.equal("hadamard", lt.type(lt.mul(L, K1())))
    assert.equal(lt.mul(L, K1()):get(2, 3), lt.mul(K1(), L):get(2, 3))
  end)

  it("leaves structured and dense cases to their own rules", function()
    assert.equal("diag", lt.type(lt.mul(lt.diag{1, 2, 3, 4}, K1())))
    assert.equal("dense", lt.type(lt.mul(K1(), lt.ones(4, 4))))
    assert.equal("kernel", lt.type(lt.mul(K1(), 2)))
  end)

  it("is PSD only when both factors are", function()
    assert.is_true(lt.mul(K1(), K2()):is_psd())
    assert.is_not_true(lt.mul(K1(), lt.lowrank(lt.tensor(U), lt.tensor(V))):is_psd())
  end)

  it("rejects operands of different shapes", function()
    local ok, err = pcall(lt.mul, K1(), lt.identity(3))
    assert.is_false(ok)
    assert.matches("^lazytensor: mul: shapes differ", err)
  end)
end)
