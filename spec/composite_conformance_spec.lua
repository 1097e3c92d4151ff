-- The shared conformance case on the composite types the arithmetic makes
-- (sum, product, scaled, transpose, inverse) and on constant (c·11ᵀ, what a
-- number added to a lazy operator becomes). Each case checks that it built
-- the type it is about; references are the parts' tables combined by plain
-- Lua loops here, never with the library.
local lt = require "lazytensor"
local conformance = require "support.conformance"
local ref = conformance.reference

-- The parts: a Toeplitz matrix (positive definite: diagonally dominant), a
-- general square and a rectangular matrix behind lt.operator (no structure
-- rules: the composites stay composites), an SPD dense matrix.
local c = {4, 1, 0.5}
local Tref = {}
for i = 1, 3 do
  Tref[i] = {}
  for j = 1, 3 do Tref[i][j] = c[math.abs(i - j) + 1] end
end
local G = {{1, 2, 0}, {0, 1, 3}, {1, 0, 1}}
local R = {{1, -1}, {2, 0.5}, {0, 3}}
local S = {{5, 1, 0}, {1, 4, 1}, {0, 1, 3}}

-- One Toeplitz leaf and one dense leaf, shared by the cases that name them
-- as leaves: the gradient check then requires their parameters' gradients
-- to arrive through the composite (and checks them by differences).
local Tl, Sl = lt.toeplitz(c), lt.tensor(S)
local function T() return Tl end
local function op(M, flags)
  local D = lt.tensor(M)
  local def = {shape = {#M, #M[1]}, matmul = function(X) return D * X end}
  for k, v in pairs(flags or {}) do def[k] = v end
  return lt.operator(def)
end

-- f, checked to make a tensor of type `name`.
local function typed(name, f)
  return function()
    local A = f()
    assert(lt.type(A) == name, "the case made a " .. lt.type(A) .. ", not a " .. name)
    return A
  end
end

local function map2(A, B, f)
  local C = {}
  for i = 1, #A do
    C[i] = {}
    for j = 1, #A[1] do C[i][j] = f(A[i][j], B[i][j]) end
  end
  return C
end
local function plus(A, B) return map2(A, B, function(x, y) return x + y end) end
local function times(s, A) return map2(A, A, function(x) return s * x end) end
local function filled(m, n, v)
  local C = {}
  for i = 1, m do
    C[i] = {}
    for j = 1, n do C[i][j] = v end
  end
  return C
end
-- A⁻¹ by the plain-Lua LU of the harness, one column at a time.
local function inverse(A)
  local solve = ref.lu(A)
  local n, X = #A, {}
  for i = 1, n do X[i] = {} end
  for j = 1, n do
    local e = {}
    for i = 1, n do e[i] = i == j and 1 or 0 end
    local x = solve(e)
    for i = 1, n do X[i][j] = x[i] end
  end
  return X
end
local function value(M) return function() return M end end

-- (conformance.check must be called from the spec file's main chunk.)
-- sum
conformance.check("sum: toeplitz + operator (general)",
  typed("sum", function() return T() + op(G) end), value(plus(Tref, G)), {leaves = {Tl}})
conformance.check("sum: toeplitz + dense SPD (positive definite)",
  typed("sum", function() return T() + Sl end), value(plus(Tref, S)),
  {psd = true, leaves = {Tl, Sl}})
conformance.check("sum: toeplitz + 1 (with a constant term)",
  typed("sum", function() return T() + 1 end), value(plus(Tref, filled(3, 3, 1))),
  {psd = true, leaves = {Tl}})
conformance.check("sum: three terms",
  typed("sum", function() return T() + op(G) - Sl end),
  value(plus(plus(Tref, G), times(-1, S))), {leaves = {Tl}}) -- -Sl is a new dense tensor
conformance.check("sum: rectangular terms (3x2)",
  typed("sum", function() return op(R) + op(R) * 2 end), value(times(3, R)))
-- product
conformance.check("product: toeplitz * operator (general)",
  typed("product", function() return T() * op(G) end), value(ref.mm(Tref, G)), {leaves = {Tl}})
conformance.check("product: operator * its transpose (positive definite)",
  typed("product", function() return op(G) * op(G):t() end),
  value(ref.mm(G, ref.transpose(G))), {psd = true})
conformance.check("product: rectangular (3x3 * 3x2)",
  typed("product", function() return T() * op(R) end), value(ref.mm(Tref, R)), {leaves = {Tl}})
-- scaled
conformance.check("scaled: 2.5 * operator",
  typed("scaled", function() return 2.5 * op(G) end), value(times(2.5, G)))
conformance.check("scaled: -2 * operator (negative)",
  typed("scaled", function() return op(G) * -2 end), value(times(-2, G)))
conformance.check("scaled: 3 * an SPD operator flagged psd",
  typed("scaled", function() return 3 * op(S, {psd = true}) end), value(times(3, S)),
  {psd = true})
conformance.check("scaled: rectangular (0.5 * 3x2)",
  typed("scaled", function() return op(R) / 2 end), value(times(0.5, R)))
-- transpose
conformance.check("transpose: of a general operator",
  typed("transpose", function() return op(G):t() end), value(ref.transpose(G)))
conformance.check("transpose: of a rectangular operator (2x3)",
  typed("transpose", function() return op(R):t() end), value(ref.transpose(R)))
conformance.check("transpose: of an SPD operator not flagged (a flagged one is its own)",
  typed("transpose", function() return op(S):t() end), value(S), {psd = true})
-- inverse
conformance.check("inverse: of a toeplitz matrix (positive definite)",
  typed("inverse", function() return T():inverse() end), value(inverse(Tref)),
  {psd = true, tol = 1e-9, leaves = {Tl}})
conformance.check("inverse: of a general operator",
  typed("inverse", function() return op(G):inverse() end), value(inverse(G)), {tol = 1e-9})
-- constant
conformance.check("constant: 2x3 of -1.5",
  typed("constant", function() return lt.constant(2, 3, -1.5) end), value(filled(2, 3, -1.5)))
conformance.check("constant: 3x3 of 2 (rank 1)",
  typed("constant", function() return lt.constant(3, 3, 2) end), value(filled(3, 3, 2)),
  {symmetric = true, singular = "rank 1 < 3"})
conformance.check("constant: 1x1 of 2 (positive definite)",
  typed("constant", function() return lt.constant(1, 1, 2) end), value(filled(1, 1, 2)),
  {psd = true})
