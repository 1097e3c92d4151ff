-- Every registered type batched (batch shapes {3} and {2, 2}, broadcast
-- against unbatched operands) against its members made one at a time:
-- spec/support/batch_conformance.lua runs every operation on both.
local lt = require "lazytensor"
local bc = require "support.batch_conformance"

local unpack = table.unpack or unpack -- luacheck: ignore 143
local env = {describe = describe, it = it, assert = assert}
local at = bc.at
local n = 4

local function sizes(shape, ...)
  local r = {unpack(shape)}
  for _, s in ipairs{...} do r[#r + 1] = s end
  return unpack(r)
end

-- A batched input and its member idx as a tensor of its own (a copy).
local function part(T, idx) return at(T, idx):clone() end

-- f(idx) for every batch index, stacked with lt.batch (nested for more
-- batch dimensions): how types without batched constructor inputs batch.
local function stack(shape, f, prefix)
  prefix = prefix or {}
  if #prefix == #shape then return f(prefix) end
  local members = {}
  for i = 1, shape[#prefix + 1] do
    local p = {unpack(prefix)}
    p[#p + 1] = i
    members[i] = stack(shape, f, p)
  end
  return lt.batch(members)
end

local function linear(idx)
  local k = 0
  for _, i in ipairs(idx) do k = k * 2 + i end
  return k
end

-- Inputs: symmetric positive definite Toeplitz columns (diagonally dominant),
-- positive diagonals, points for kernels.
local e1 = lt.tensor{1, 0, 0, 0}
local function columns(shape) return lt.rand(sizes(shape, n)) * 0.3 + e1 * 3 end
local function positive(shape, k) return lt.rand(sizes(shape, k or n)) + 0.5 end
local function points(shape) return lt.randn(sizes(shape, n, 2)) end
local rbf = {kind = "rbf", lengthscale = 0.6}
-- (a linear K(x, x) of n > 3 points in 2-d is singular: linear only as K(x1, x2))
local poly = {kind = "polynomial", degree = 2, variance = 0.8, offset = 1}
local linear_kernel = {kind = "linear", variance = 1.3, offset = 0.5}
local function spd_dense(shape)
  local G = lt.randn(sizes(shape, n, n))
  return G * G:t() + lt.eye(n) * n
end
local function small_columns(shape) return lt.rand(sizes(shape, 2)) * 0.5 + lt.tensor{2, 0} end

-- A callback operator over a dense matrix (no structure rules of its own).
local function operator(M, flags)
  local def = {shape = M:shape(), matmul = function(X) return M * X end}
  for k, v in pairs(flags or {}) do def[k] = v end
  return lt.operator(def)
end

local function general(idx) return lt.tensor{{4, 1, 0, 2}, {1, 5, 1, 0}, {0, 2, 6, 1}, {1, 0, 1, 3 + linear(idx)}} end
local function spd(idx) return lt.tensor{{4, 1, 0, 0}, {1, 5, 1, 0}, {0, 1, 6, 1}, {0, 0, 1, 3 + linear(idx)}} end

local cases = {
  {name = "dense SPD", type = "dense", psd = true, build = function(shape)
    local S = spd_dense(shape)
    return S, function(idx) return part(S, idx) end
  end},
  {name = "dense general", type = "dense", build = function(shape)
    local G = lt.randn(sizes(shape, n, n)) + lt.eye(n) * 3
    return G, function(idx) return part(G, idx) end
  end},
  {name = "dense 4x3", type = "dense", build = function(shape)
    local G = lt.randn(sizes(shape, n, 3))
    return G, function(idx) return part(G, idx) end
  end},
  {name = "diag", type = "diag", psd = true, build = function(shape)
    local V = positive(shape)
    return lt.diag(V), function(idx) return lt.diag(part(V, idx)) end
  end},
  {name = "identity", type = "identity", psd = true, build = function(shape)
    local function f(idx) return lt.identity(n, 1 + linear(idx)) end
    return stack(shape, f), f
  end},
  {name = "triangular", type = "triangular", build = function(shape)
    local L = lt.randn(sizes(shape, n, n)) + lt.eye(n) * 4
    return lt.triangular(L), function(idx) return lt.triangular(part(L, idx)) end
  end},
  {name = "constant", type = "constant", build = function(shape)
    local function f(idx) return lt.constant(3, n, linear(idx) - 2.5) end
    return stack(shape, f), f
  end},
  {name = "sum", type = "sum", psd = true, build = function(shape)
    local C, X = columns(shape), points(shape)
    return lt.toeplitz(C) + lt.kernel(X, rbf), function(idx)
      return lt.toeplitz(part(C, idx)) + lt.kernel(part(X, idx), rbf)
    end
  end},
  {name = "product", type = "product", build = function(shape)
    local C, V = columns(shape), positive(shape)
    return lt.toeplitz(C) * lt.diag(V), function(idx)
      return lt.toeplitz(part(C, idx)) * lt.diag(part(V, idx))
    end
  end},
  {name = "scaled", type = "scaled", symmetric = true, build = function(shape)
    local function f(idx) return operator(spd(idx), {symmetric = true}) * 2 end
    return stack(shape, f), f
  end},
  {name = "transpose", type = "transpose", build = function(shape)
    local function f(idx) return operator(general(idx)):t() end
    return stack(shape, f), f
  end},
  {name = "inverse", type = "inverse", psd = true, build = function(shape)
    local C = columns(shape)
    return lt.toeplitz(C):inverse(), function(idx) return lt.toeplitz(part(C, idx)):inverse() end
  end},
  {name = "lowrank", type = "lowrank", symmetric = true, singular = true, build = function(shape)
    local U = lt.randn(sizes(shape, n, 2))
    return lt.lowrank(U), function(idx) return lt.lowrank(part(U, idx)) end
  end},
  {name = "kron", type = "kron", psd = true, build = function(shape)
    local V, C = positive(shape, 2), small_columns(shape)
    return lt.kron(lt.diag(V), lt.toeplitz(C)), function(idx)
      return lt.kron(lt.diag(part(V, idx)), lt.toeplitz(part(C, idx)))
    end
  end},
  {name = "blockdiag", type = "blockdiag", psd = true, build = function(shape)
    local V, C = positive(shape, 2), small_columns(shape)
    return lt.blockdiag{lt.diag(V), lt.toeplitz(C)}, function(idx)
      return lt.blockdiag{lt.diag(part(V, idx)), lt.toeplitz(part(C, idx))}
    end
  end},
  {name = "toeplitz", type = "toeplitz", psd = true, build = function(shape)
    local C = columns(shape)
    return lt.toeplitz(C), function(idx) return lt.toeplitz(part(C, idx)) end
  end},
  {name = "toeplitz (column and row)", type = "toeplitz", build = function(shape)
    local C = columns(shape)
    local R = lt.mul(lt.rand(sizes(shape, n)), 1 - e1) + lt.mul(C, e1) -- r[1] = c[1]
    return lt.toeplitz(C, R), function(idx) return lt.toeplitz(part(C, idx), part(R, idx)) end
  end},
  {name = "kernel", type = "kernel", psd = true, build = function(shape)
    local X = points(shape)
    return lt.kernel(X, rbf), function(idx) return lt.kernel(part(X, idx), rbf) end
  end},
  {name = "kernel (x1, x2; x2 unbatched)", type = "kernel", build = function(shape)
    local X, Z = points(shape), lt.randn(3, 2)
    return lt.kernel(X, Z, rbf), function(idx) return lt.kernel(part(X, idx), Z, rbf) end
  end},
  {name = "kernel polynomial", type = "kernel", psd = true, build = function(shape)
    local X = points(shape)
    return lt.kernel(X, poly), function(idx) return lt.kernel(part(X, idx), poly) end
  end},
  {name = "kernel linear (x1, x2; x2 unbatched)", type = "kernel", build = function(shape)
    local X, Z = points(shape), lt.randn(3, 2)
    return lt.kernel(X, Z, linear_kernel), function(idx)
      return lt.kernel(part(X, idx), Z, linear_kernel)
    end
  end},
  {name = "chol", type = "chol", psd = true, build = function(shape)
    local lower = lt.tensor{{1, 0, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}}
    local L = lt.mul(lt.randn(sizes(shape, n, n)) * 0.3, lower) + lt.eye(n) * 2
    return lt.chol(L), function(idx) return lt.chol(part(L, idx)) end
  end},
  {name = "operator", type = "operator", symmetric = true, build = function(shape)
    local function f(idx) return operator(spd(idx), {symmetric = true}) end
    return stack(shape, f), f
  end},
  {name = "lowrank_plus_diag", type = "lowrank_plus_diag", psd = true, build = function(shape)
    local U, V = lt.randn(sizes(shape, n, 2)), positive(shape)
    return lt.lowrank(U) + lt.diag(V), function(idx)
      return lt.lowrank(part(U, idx)) + lt.diag(part(V, idx))
    end
  end},
  {name = "kron_plus_identity (identity unbatched)", type = "kron_plus_identity", psd = true,
   build = function(shape)
    local V, C = positive(shape, 2), small_columns(shape)
    local I = lt.identity(n, 0.5)
    return lt.kron(lt.diag(V), lt.toeplitz(C)) + I, function(idx)
      return lt.kron(lt.diag(part(V, idx)), lt.toeplitz(part(C, idx))) + I
    end
  end},
  {name = "submatrix", type = "submatrix", psd = true, build = function(shape)
    local C = columns(shape)
    return lt.submatrix(lt.toeplitz(C), {1, 2, 4}), function(idx)
      return lt.submatrix(lt.toeplitz(part(C, idx)), {1, 2, 4})
    end
  end},
  {name = "hadamard", type = "hadamard", psd = true, build = function(shape)
    local C, X = columns(shape), points(shape)
    return lt.mul(lt.toeplitz(C), lt.kernel(X, rbf)), function(idx)
      return lt.mul(lt.toeplitz(part(C, idx)), lt.kernel(part(X, idx), rbf))
    end
  end},
  {name = "permutation", type = "permutation", build = function(shape)
    local orders = {{2, 1, 4, 3}, {4, 3, 2, 1}, {1, 3, 4, 2}, {3, 1, 2, 4}, {2, 4, 1, 3}}
    local function f(idx) return lt.permutation(orders[linear(idx) % #orders + 1]) end
    return stack(shape, f), f
  end},
  {name = "cat", type = "cat", build = function(shape)
    local C, V = columns(shape), positive(shape)
    return lt.cat{lt.toeplitz(C), lt.diag(V)}, function(idx)
      return lt.cat{lt.toeplitz(part(C, idx)), lt.diag(part(V, idx))}
    end
  end},
  {name = "zeros_operator", type = "zeros_operator", build = function(shape)
    local function f() return lt.zeros_operator(3, n) end
    return stack(shape, f), f
  end},
  {name = "interp", type = "interp", build = function(shape)
    local function f(idx)
      return lt.interp(lt.tensor{1 + 0.1 * (linear(idx) % 7), 1.5, 2}, {0, n - 1, n})
    end
    return stack(shape, f), f
  end},
  {name = "batch of mixed types", type = "batch", psd = true, build = function(shape)
    local function f(idx)
      local k = linear(idx) % 3
      if k == 0 then return lt.diag{1, 2, 3, 4 + linear(idx)} end
      if k == 1 then return spd(idx) end
      return lt.toeplitz{4, 1, 0.5, linear(idx) * 0.1}
    end
    return stack(shape, f), f
  end},
}

-- Every other type with a leaf maker in the fuzzer (spec/support/fuzz.lua,
-- which every registered type needs): a batch of its random 4x4 leaves,
-- each member made again alone from the same seed. Solves and
-- factorisations are left out (a random leaf may be singular).
local fuzz = require "support.fuzz"
local explicit = {}
for _, c in ipairs(cases) do explicit[c.type] = true end
for _, name in ipairs(lt.types()) do
  local maker = fuzz.leaves[name]
  if not explicit[name] and maker then
    local function f(idx) return maker(fuzz.new_rng(1000 + linear(idx)), n, n).op end
    local ok, M = pcall(f, {1})
    if ok and M then
      cases[#cases + 1] = {name = name .. " (the fuzzer's leaves)", type = lt.type(M),
                           singular = true, build = function(shape) return stack(shape, f), f end}
    end
  end
end

for _, c in ipairs(cases) do bc.check(env, c.name, c) end

describe("batch conformance", function()
  it("covers every registered type", function()
    local covered = {}
    for _, c in ipairs(cases) do covered[c.type] = true end
    local missing = {}
    for _, name in ipairs(lt.types()) do
      if not covered[name] then missing[#missing + 1] = name end
    end
    assert.same({}, missing, "types without a batched case: " .. table.concat(missing, ", "))
  end)
end)
