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

  -- A symmetric product of kernels (and of sums and products of them) goes
  -- by tiles of 256 on and above the diagonal: n = 600 takes three row
  -- blocks, the last one short, and the off-diagonal tiles twice.
  it("multiplies by tiles when symmetric with kernel factors: the plain-Lua product", function()
    local n, k = 600, 3
    local pts = {}
    for i = 1, n do pts[i] = {math.sin(1.7 * i) * 3, math.cos(0.37 * i * i) * 2} end
    local xs, zs = {}, {}
    for i = 1, n do xs[i], zs[i] = {pts[i][1]}, {pts[i][2]} end
    local A = lt.kernel(lt.tensor(xs), {kind = "rbf", lengthscale = 0.8, variance = 1.5})
    local B = lt.kernel(lt.tensor(zs), {kind = "matern12", lengthscale = 1.3})
    local C = lt.kernel(lt.tensor(pts), {kind = "matern52", lengthscale = {0.9, 1.4}})
    local function entry(i, j, nested)
      local a = rbf(pts[i][1], pts[j][1])
      local b = m12(pts[i][2], pts[j][2])
      if not nested then return a * b end
      local q = ((pts[i][1] - pts[j][1]) / 0.9) ^ 2 + ((pts[i][2] - pts[j][2]) / 1.4) ^ 2
      local r = math.sqrt(5 * q)
      return (a * b + a) * ((1 + r + r * r / 3) * math.exp(-r))
    end
    local X = {}
    for i = 1, n do X[i] = {math.sin(i), math.cos(3 * i), (i % 7) / 7} end
    for _, nested in ipairs{false, true} do
      local H = nested and lt.mul(lt.mul(A, B) + A, C) or lt.mul(A, B)
      assert.equal("hadamard", lt.type(H))
      local Y = (H * lt.tensor(X)):totable()
      local Yt = (H:t() * lt.tensor(X)):totable()
      for _, i in ipairs{1, 2, 256, 257, 300, 512, 513, 600} do
        for c = 1, k do
          local want = 0
          for j = 1, n do want = want + entry(i, j, nested) * X[j][c] end
          assert(math.abs(Y[i][c] - want) <= 1e-12 * (1 + math.abs(want)),
                 string.format("row %d col %d: %.17g vs %.17g", i, c, Y[i][c], want))
          assert(math.abs(Yt[i][c] - want) <= 1e-12 * (1 + math.abs(want)), "transposed")
        end
      end
    end
  end)

  it("rejects operands of different shapes", function()
    local ok, err = pcall(lt.mul, K1(), lt.identity(3))
    assert.is_false(ok)
    assert.matches("^lazytensor: mul: shapes differ", err)
  end)
end)
