-- spec/support/fuzz.lua — differential fuzzing of the registry.
--
-- Random expression trees over every operator type the library has (probed
-- at run time, so types that land later join in by themselves) and the
-- arithmetic between them, each evaluated twice: through lazytensor, and
-- by a tiny dense reference in plain Lua (tables of rows and loops) that
-- shares no code with the library. Seeded and reproducible: a failure names
-- its seed and the expression.
--
--   local fuzz = require "support.fuzz"
--   local report = fuzz.run{seed = 1, cases = 2000}
--   -- report.failures: list of strings; report.stats: counters
local lt = require "lazytensor"

local fuzz = {}

------------------------------------------------------------------ random
-- Park–Miller "minimal standard" generator: exact in doubles, so the same
-- seed gives the same cases on every Lua version. The seed is scrambled
-- first: case seeds are consecutive, and consecutive Park–Miller states
-- give first draws only 2e-5 apart (the first size of thousands of cases
-- in a row would be the same).
local PRIME = 2147483647

local function mulmod(a, b) -- a·b mod PRIME, exact: every product < 2^48
  local hi, lo = math.floor(b / 65536), b % 65536
  return ((a * hi) % PRIME * 65536 + a * lo) % PRIME
end

local function new_rng(seed)
  local x = math.floor(seed) % (PRIME - 1) + 1
  for i = 1, 3 do x = (mulmod(x, x) + 40503 * i) % PRIME end -- nonlinear mixing
  if x == 0 then x = 1 end
  local r = {}
  function r.float() -- [0, 1)
    x = (x * 48271) % 2147483647
    return (x - 1) / 2147483646
  end
  function r.int(a, b) return a + math.floor(r.float() * (b - a + 1)) end
  function r.normal() -- values in about [-2, 2], never tiny denominators
    return (r.float() * 4 - 2)
  end
  function r.pick(t) return t[r.int(1, #t)] end
  return r
end
fuzz.new_rng = new_rng

--------------------------------------------------------- dense reference
local ref = {}
fuzz.ref = ref

function ref.new(m, n, f)
  local A = {}
  for i = 1, m do
    A[i] = {}
    for j = 1, n do A[i][j] = f and f(i, j) or 0 end
  end
  A.m, A.n = m, n
  return A
end

function ref.map2(A, B, f) return ref.new(A.m, A.n, function(i, j) return f(A[i][j], B[i][j]) end) end
function ref.add(A, B) return ref.map2(A, B, function(x, y) return x + y end) end
function ref.sub(A, B) return ref.map2(A, B, function(x, y) return x - y end) end
function ref.hadamard(A, B) return ref.map2(A, B, function(x, y) return x * y end) end
function ref.scale(A, c) return ref.new(A.m, A.n, function(i, j) return c * A[i][j] end) end
function ref.add_number(A, c) return ref.new(A.m, A.n, function(i, j) return A[i][j] + c end) end
function ref.t(A) return ref.new(A.n, A.m, function(i, j) return A[j][i] end) end

function ref.matmul(A, B)
  return ref.new(A.m, B.n, function(i, j)
    local s = 0
    for k = 1, A.n do s = s + A[i][k] * B[k][j] end
    return s
  end)
end

function ref.matvec(A, x)
  local y = {}
  for i = 1, A.m do
    local s = 0
    for k = 1, A.n do s = s + A[i][k] * x[k] end
    y[i] = s
  end
  return y
end

-- Gaussian elimination with partial pivoting: x = A⁻¹b and log|det A|.
function ref.solve_logdet(A, b)
  local n = A.m
  local M, x = {}, {}
  for i = 1, n do
    M[i] = {}
    for j = 1, n do M[i][j] = A[i][j] end
    x[i] = b[i]
  end
  local logdet = 0
  for k = 1, n do
    local p = k
    for i = k + 1, n do if math.abs(M[i][k]) > math.abs(M[p][k]) then p = i end end
    M[k], M[p] = M[p], M[k]
    x[k], x[p] = x[p], x[k]
    logdet = logdet + math.log(math.abs(M[k][k]))
    for i = k + 1, n do
      local f = M[i][k] / M[k][k]
      for j = k, n do M[i][j] = M[i][j] - f * M[k][j] end
      x[i] = x[i] - f * x[k]
    end
  end
  for i = n, 1, -1 do
    local s = x[i]
    for j = i + 1, n do s = s - M[i][j] * x[j] end
    x[i] = s / M[i][i]
  end
  return x, logdet
end

-- A⁻¹ by Gauss-Jordan elimination with partial pivoting.
function ref.inverse(A)
  local n = A.m
  local M, X = {}, ref.new(n, n, function(i, j) return i == j and 1 or 0 end)
  for i = 1, n do
    M[i] = {}
    for j = 1, n do M[i][j] = A[i][j] end
  end
  for k = 1, n do
    local p = k
    for i = k + 1, n do if math.abs(M[i][k]) > math.abs(M[p][k]) then p = i end end
    M[k], M[p] = M[p], M[k]
    X[k], X[p] = X[p], X[k]
    local d = M[k][k]
    for j = 1, n do M[k][j], X[k][j] = M[k][j] / d, X[k][j] / d end
    for i = 1, n do
      if i ~= k then
        local f = M[i][k]
        for j = 1, n do M[i][j], X[i][j] = M[i][j] - f * M[k][j], X[i][j] - f * X[k][j] end
      end
    end
  end
  return X
end

function ref.from_tensor(t)
  local tab = t:totable()
  local A = ref.new(#tab, #tab[1] or 0, function(i, j) return tab[i][j] end)
  return A
end

function ref.tensor(A) -- a dense lazytensor from a reference matrix
  local rows = {}
  for i = 1, A.m do
    rows[i] = {}
    for j = 1, A.n do rows[i][j] = A[i][j] end
  end
  if A.m == 0 then return lt.zeros(0, A.n) end
  return lt.tensor(rows)
end

-------------------------------------------------------------- the leaves
-- Each maker(r, m, n) returns node {op = tensor, ref = matrix, s = text}, or
-- nil when it cannot make an m×n operator. `square` makers need m == n.

local function rand_matrix(r, m, n) return ref.new(m, n, function() return r.normal() end) end

local function rand_vec(r, n, lo)
  local v = {}
  for i = 1, n do v[i] = (lo or 0) + r.normal() end
  return v
end

local function vec_text(v)
  local t = {}
  for i = 1, #v do t[i] = string.format("%.17g", v[i]) end
  return "{" .. table.concat(t, ",") .. "}"
end

local function mat_text(A)
  local rows = {}
  for i = 1, A.m do
    local t = {}
    for j = 1, A.n do t[j] = string.format("%.17g", A[i][j]) end
    rows[i] = "{" .. table.concat(t, ",") .. "}"
  end
  return "{" .. table.concat(rows, ",") .. "}"
end

local leaves = {}

leaves.dense = function(r, m, n)
  local A = rand_matrix(r, m, n)
  return {op = ref.tensor(A), ref = A, s = "lt.tensor" .. mat_text(A)}
end

leaves.diag = function(r, m, n)
  if m ~= n then return nil end
  local v = rand_vec(r, n)
  return {op = lt.diag(v), ref = ref.new(n, n, function(i, j) return i == j and v[i] or 0 end),
          s = "lt.diag" .. vec_text(v)}
end

leaves.identity = function(r, m, n)
  if m ~= n then return nil end
  local c = r.float() < 0.5 and 1 or r.normal()
  return {op = lt.identity(n, c), ref = ref.new(n, n, function(i, j) return i == j and c or 0 end),
          s = ("lt.identity(%d, %.17g)"):format(n, c)}
end

leaves.triangular = function(r, m, n)
  if m ~= n or not lt.triangular then return nil end
  local A = rand_matrix(r, n, n)
  local upper = r.float() < 0.5
  local which = upper and "upper" or "lower"
  return {op = lt.triangular(ref.tensor(A), which),
          ref = ref.new(n, n, function(i, j)
            if (upper and j >= i) or (not upper and i >= j) then return A[i][j] end
            return 0
          end),
          s = ("lt.triangular(lt.tensor%s, %q)"):format(mat_text(A), which)}
end

leaves.lowrank = function(r, m, n)
  if not lt.lowrank then return nil end
  local k = r.int(1, 3)
  local U = rand_matrix(r, m, k)
  if m == n and r.float() < 0.5 then
    return {op = lt.lowrank(ref.tensor(U)), ref = ref.matmul(U, ref.t(U)),
            s = ("lt.lowrank(lt.tensor%s)"):format(mat_text(U))}
  end
  local V = rand_matrix(r, n, k)
  return {op = lt.lowrank(ref.tensor(U), ref.tensor(V)), ref = ref.matmul(U, ref.t(V)),
          s = ("lt.lowrank(lt.tensor%s, lt.tensor%s)"):format(mat_text(U), mat_text(V))}
end

local function divisors(n)
  local d = {}
  for i = 1, n do if n % i == 0 then d[#d + 1] = i end end
  return d
end

leaves.kron = function(r, m, n)
  if not lt.kron then return nil end
  local m1, n1 = r.pick(divisors(m)), r.pick(divisors(n))
  local m2, n2 = math.floor(m / m1), math.floor(n / n1)
  local A, B = rand_matrix(r, m1, n1), rand_matrix(r, m2, n2)
  local K = ref.new(m, n, function(i, j)
    local i1, i2 = math.floor((i - 1) / m2) + 1, (i - 1) % m2 + 1
    local j1, j2 = math.floor((j - 1) / n2) + 1, (j - 1) % n2 + 1
    return A[i1][j1] * B[i2][j2]
  end)
  return {op = lt.kron(ref.tensor(A), ref.tensor(B)), ref = K,
          s = ("lt.kron(lt.tensor%s, lt.tensor%s)"):format(mat_text(A), mat_text(B))}
end

leaves.blockdiag = function(r, m, n)
  if not lt.blockdiag or m < 2 or n < 2 then return nil end
  local m1, n1 = r.int(1, m - 1), r.int(1, n - 1)
  local A, B = rand_matrix(r, m1, n1), rand_matrix(r, m - m1, n - n1)
  local K = ref.new(m, n, function(i, j)
    if i <= m1 and j <= n1 then return A[i][j] end
    if i > m1 and j > n1 then return B[i - m1][j - n1] end
    return 0
  end)
  return {op = lt.blockdiag{ref.tensor(A), ref.tensor(B)}, ref = K,
          s = ("lt.blockdiag{lt.tensor%s, lt.tensor%s}"):format(mat_text(A), mat_text(B))}
end

leaves.toeplitz = function(r, m, n)
  if not lt.toeplitz or m ~= n then return nil end
  local c = rand_vec(r, n)
  if r.float() < 0.5 then
    return {op = lt.toeplitz(c), ref = ref.new(n, n, function(i, j) return c[math.abs(i - j) + 1] end),
            s = ("lt.toeplitz(%s)"):format(vec_text(c))}
  end
  local row = rand_vec(r, n)
  row[1] = c[1]
  return {op = lt.toeplitz(c, row),
          ref = ref.new(n, n, function(i, j) return i >= j and c[i - j + 1] or row[j - i + 1] end),
          s = ("lt.toeplitz(%s, %s)"):format(vec_text(c), vec_text(row))}
end

leaves.kernel = function(r, m, n)
  if not lt.kernel then return nil end
  local d = r.int(1, 2)
  local x1 = rand_matrix(r, m, d)
  local same = m == n and r.float() < 0.5
  local x2 = same and x1 or rand_matrix(r, n, d)
  local l, v = 0.5 + r.float(), 0.5 + r.float()
  local K = ref.new(m, n, function(i, j)
    local s = 0
    for k = 1, d do s = s + (x1[i][k] - x2[j][k]) ^ 2 end
    return v * math.exp(-s / (2 * l * l))
  end)
  local spec = {kind = "rbf", lengthscale = l, variance = v}
  local spec_s = ("{kind = \"rbf\", lengthscale = %.17g, variance = %.17g}"):format(l, v)
  if same then
    return {op = lt.kernel(ref.tensor(x1), spec), ref = K,
            s = ("lt.kernel(lt.tensor%s, %s)"):format(mat_text(x1), spec_s)}
  end
  return {op = lt.kernel(ref.tensor(x1), ref.tensor(x2), spec), ref = K,
          s = ("lt.kernel(lt.tensor%s, lt.tensor%s, %s)"):format(mat_text(x1), mat_text(x2), spec_s)}
end

leaves.chol = function(r, m, n)
  if not lt.chol or m ~= n then return nil end
  local L = ref.new(n, n, function(i, j)
    if j > i then return 0 end
    if i == j then return 1 + r.float() end
    return r.normal()
  end)
  return {op = lt.chol(ref.tensor(L)), ref = ref.matmul(L, ref.t(L)),
          s = ("lt.chol(lt.tensor%s)"):format(mat_text(L))}
end

leaves.operator = function(r, m, n)
  local A = rand_matrix(r, m, n)
  local M = ref.tensor(A)
  local def = {shape = {m, n}, matmul = function(X) return M * X end}
  if r.float() < 0.5 then def.t_matmul = function(X) return M:t() * X end end
  return {op = lt.operator(def), ref = A,
          s = ("lt.operator{shape = {%d, %d}, matmul = <lt.tensor%s * X>%s}"):format(
            m, n, mat_text(A), def.t_matmul and ", t_matmul = <...>" or "")}
end

-- The types the arithmetic makes of two leaves: made here on purpose, as
-- random trees make them rarely.
leaves.lowrank_plus_diag = function(r, m, n)
  if m ~= n then return nil end
  local a, d = leaves.lowrank(r, n, n), leaves.diag(r, n, n)
  return {op = a.op + d.op, ref = ref.add(a.ref, d.ref), s = ("(%s + %s)"):format(a.s, d.s)}
end

leaves.kron_plus_identity = function(r, m, n)
  if m ~= n then return nil end
  local n1 = r.pick(divisors(n))
  local n2 = math.floor(n / n1)
  local A, B = rand_matrix(r, n1, n1), rand_matrix(r, n2, n2)
  local c = r.normal()
  local K = ref.new(n, n, function(i, j)
    local i1, i2 = math.floor((i - 1) / n2) + 1, (i - 1) % n2 + 1
    local j1, j2 = math.floor((j - 1) / n2) + 1, (j - 1) % n2 + 1
    return A[i1][j1] * B[i2][j2] + (i == j and c or 0)
  end)
  return {op = lt.kron(ref.tensor(A), ref.tensor(B)) + lt.identity(n, c), ref = K,
          s = ("(lt.kron(lt.tensor%s, lt.tensor%s) + lt.identity(%d, %.17g))"):format(
            mat_text(A), mat_text(B), n, c)}
end

leaves.zeros_operator = function(_, m, n)
  return {op = lt.zeros_operator(m, n), ref = ref.new(m, n, function() return 0 end),
          s = ("lt.zeros_operator(%d, %d)"):format(m, n)}
end

leaves.constant = function(r, m, n)
  local c = r.normal()
  return {op = lt.constant(m, n, c), ref = ref.new(m, n, function() return c end),
          s = ("lt.constant(%d, %d, %.17g)"):format(m, n, c)}
end

leaves.permutation = function(r, m, n)
  if m ~= n then return nil end
  local p = {}
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do -- Fisher-Yates
    local j = r.int(1, i)
    p[i], p[j] = p[j], p[i]
  end
  return {op = lt.permutation(p), ref = ref.new(n, n, function(i, j) return p[i] == j and 1 or 0 end),
          s = "lt.permutation" .. vec_text(p)}
end

leaves.cat = function(r, m, n)
  local dim = r.int(1, 2)
  local size = dim == 1 and m or n
  if size < 2 then return nil end
  local k = r.int(1, size - 1)
  local A = dim == 1 and rand_matrix(r, k, n) or rand_matrix(r, m, k)
  local B = dim == 1 and rand_matrix(r, m - k, n) or rand_matrix(r, m, n - k)
  local C = ref.new(m, n, function(i, j)
    if dim == 1 then return i <= k and A[i][j] or B[i - k][j] end
    return j <= k and A[i][j] or B[i][j - k]
  end)
  return {op = lt.cat({ref.tensor(A), ref.tensor(B)}, dim), ref = C,
          s = ("lt.cat({lt.tensor%s, lt.tensor%s}, %d)"):format(mat_text(A), mat_text(B), dim)}
end

leaves.submatrix = function(r, m, n)
  local M = rand_matrix(r, r.int(1, 5), r.int(1, 5))
  local rows, cols = {}, {}
  for i = 1, m do rows[i] = r.int(1, M.m) end
  for j = 1, n do cols[j] = r.int(1, M.n) end
  return {op = lt.submatrix(ref.tensor(M), rows, cols),
          ref = ref.new(m, n, function(i, j) return M[rows[i]][cols[j]] end),
          s = ("lt.submatrix(lt.tensor%s, %s, %s)"):format(mat_text(M), vec_text(rows), vec_text(cols))}
end

-- A lazy inverse of a diagonally dominant (well-conditioned) matrix behind
-- an lt.operator, so that no structure rule turns it into something else.
leaves.inverse = function(r, m, n)
  if m ~= n then return nil end
  local A = ref.new(n, n, function(i, j) return r.normal() + (i == j and 2 * n + 1 or 0) end)
  local M = ref.tensor(A)
  local op = lt.operator{shape = {n, n}, matmul = function(X) return M * X end}:inverse()
  return {op = op, ref = ref.inverse(A),
          s = ("lt.operator{shape = {%d, %d}, matmul = <lt.tensor%s * X>}:inverse()"):format(
            n, n, mat_text(A))}
end

-- The leaf kinds this build can make: every registered type (lt.types(),
-- in the order of their ids) with a maker above, each probed once on a
-- small case. A type without one is still fuzzed where the arithmetic
-- makes it (sum, product, ...); fuzz.unseen says which never appeared.
-- The leaf makers by type name (maker(rng, m, n) → {op =, ref =, s =} or
-- nil) and the generator they take: spec/batch_conformance_spec.lua
-- batches every type that has one.
fuzz.leaves = leaves
fuzz.new_rng = new_rng

function fuzz.available_leaves()
  local r = new_rng(12345)
  local kinds = {}
  for _, k in ipairs(lt.types()) do
    local ok, node = pcall(leaves[k] or error, r, 2, 2)
    if ok and node and pcall(function() return node.op:dense() end) then kinds[#kinds + 1] = k end
  end
  return kinds
end

-- The types of the nodes fuzz.run made (set in fuzz.run, read by gen).
local types_seen

-- The registered types (lt.types()) that no node of the runs given made,
-- neither as a leaf nor by the arithmetic: what the fuzzer does not cover.
-- "batch" is left out: its operators have batch dimensions, which this 2-d
-- fuzzer never makes; spec/batch_conformance_spec.lua runs every type
-- batched against its members.
function fuzz.unseen(reports)
  local missing = {}
  for _, name in ipairs(lt.types()) do
    local seen = name == "batch"
    for _, report in ipairs(reports) do seen = seen or report.stats.types[name] ~= nil end
    if not seen then missing[#missing + 1] = name end
  end
  return missing
end

----------------------------------------------------------- the generator

local gen

local function gen_leaf(r, m, n, kinds)
  for _ = 1, 20 do
    local k = r.pick(kinds)
    local node = leaves[k](r, m, n)
    if node then
      node.kind = k
      return node
    end
  end
  return leaves.dense(r, m, n)
end

-- Internal nodes: arithmetic through metamethods and functions alike.
local function gen_node(r, m, n, depth, kinds)
  local choice = r.int(1, 9)
  if choice == 1 then
    local a, b = gen(r, m, n, depth - 1, kinds), gen(r, m, n, depth - 1, kinds)
    local op = r.float() < 0.5 and (a.op + b.op) or lt.add(a.op, b.op)
    return {op = op, ref = ref.add(a.ref, b.ref), s = ("(%s + %s)"):format(a.s, b.s)}
  elseif choice == 2 then
    local a, b = gen(r, m, n, depth - 1, kinds), gen(r, m, n, depth - 1, kinds)
    return {op = a.op - b.op, ref = ref.sub(a.ref, b.ref), s = ("(%s - %s)"):format(a.s, b.s)}
  elseif choice == 3 then
    local a = gen(r, m, n, depth - 1, kinds)
    local c = r.normal()
    local how = r.int(1, 4)
    if how == 1 then
      return {op = c * a.op, ref = ref.scale(a.ref, c), s = ("(%.17g * %s)"):format(c, a.s)}
    elseif how == 2 then
      return {op = a.op * c, ref = ref.scale(a.ref, c), s = ("(%s * %.17g)"):format(a.s, c)}
    elseif how == 3 then
      c = (c >= 0 and 0.5 or -0.5) + c
      return {op = a.op / c, ref = ref.scale(a.ref, 1 / c), s = ("(%s / %.17g)"):format(a.s, c)}
    end
    return {op = lt.scale(a.op, c), ref = ref.scale(a.ref, c), s = ("lt.scale(%s, %.17g)"):format(a.s, c)}
  elseif choice == 4 then
    local a = gen(r, m, n, depth - 1, kinds)
    return {op = -a.op, ref = ref.scale(a.ref, -1), s = ("(-%s)"):format(a.s)}
  elseif choice == 5 or choice == 6 then
    local k = r.int(1, 4)
    local a, b = gen(r, m, k, depth - 1, kinds), gen(r, k, n, depth - 1, kinds)
    local op = r.float() < 0.5 and (a.op * b.op) or lt.matmul(a.op, b.op)
    return {op = op, ref = ref.matmul(a.ref, b.ref), s = ("(%s * %s)"):format(a.s, b.s)}
  elseif choice == 7 then
    local a = gen(r, n, m, depth - 1, kinds)
    local op = r.float() < 0.5 and a.op:t() or lt.t(a.op)
    return {op = op, ref = ref.t(a.ref), s = ("%s:t()"):format(a.s)}
  elseif choice == 8 then
    local a, b = gen(r, m, n, depth - 1, kinds), gen(r, m, n, depth - 1, kinds)
    return {op = lt.mul(a.op, b.op), ref = ref.hadamard(a.ref, b.ref),
            s = ("lt.mul(%s, %s)"):format(a.s, b.s)}
  end
  -- a number added to every entry, on either side
  local a = gen(r, m, n, depth - 1, kinds)
  local c = r.normal()
  if r.float() < 0.5 then
    return {op = c + a.op, ref = ref.add_number(a.ref, c), s = ("(%.17g + %s)"):format(c, a.s)}
  end
  return {op = a.op - c, ref = ref.add_number(a.ref, -c), s = ("(%s - %.17g)"):format(a.s, c)}
end

gen = function(r, m, n, depth, kinds)
  local node
  if depth <= 0 or r.float() < 0.3 then node = gen_leaf(r, m, n, kinds)
  else node = gen_node(r, m, n, depth, kinds) end
  if types_seen then
    local t = lt.type(node.op) or "?"
    types_seen[t] = (types_seen[t] or 0) + 1
  end
  return node
end
fuzz.gen = gen -- (r, m, n, depth, kinds) → node {op, ref, s}

---------------------------------------------------------------- checking

local function scale_of(A)
  local s = 1
  for i = 1, A.m do for j = 1, A.n do s = math.max(s, math.abs(A[i][j])) end end
  return s
end

local function near(x, y, scale, tol)
  return x == y or math.abs(x - y) <= tol * scale
end

-- Compares one case; returns nil or a description of the first mismatch.
local function check_matrix(node, r, tol)
  local A, op = node.ref, node.op
  if not lt.is_tensor(op) then return "not a tensor: " .. tostring(op) end
  local shape = op:shape()
  if shape[1] ~= A.m or shape[2] ~= A.n then
    return ("shape %s, expected %dx%d"):format(table.concat(shape, "x"), A.m, A.n)
  end
  local scale = scale_of(A)
  local D = ref.from_tensor(op:dense())
  for i = 1, A.m do
    for j = 1, A.n do
      if not near(D[i][j], A[i][j], scale, tol) then
        return ("dense()[%d][%d] = %.17g, expected %.17g"):format(i, j, D[i][j], A[i][j])
      end
    end
  end
  -- a product with a vector, one entry, one row
  local x = rand_vec(r, A.n)
  local y = op * lt.tensor(x)
  local yr = ref.matvec(A, x)
  local xs = 0
  for k = 1, A.n do xs = math.max(xs, math.abs(x[k])) end
  for i = 1, A.m do
    if not near(y[i], yr[i], scale * math.max(1, xs) * A.n, tol) then
      return ("(A*x)[%d] = %.17g, expected %.17g (x = %s)"):format(i, y[i], yr[i], vec_text(x))
    end
  end
  local i, j = r.int(1, A.m), r.int(1, A.n)
  local g = op:get(i, j)
  if not near(g, A[i][j], scale, tol) then
    return ("get(%d, %d) = %.17g, expected %.17g"):format(i, j, g, A[i][j])
  end
  local row = op[i]
  for jj = 1, A.n do
    if not near(row[jj], A[i][jj], scale, tol) then
      return ("A[%d][%d] = %.17g, expected %.17g"):format(i, jj, row[jj], A[i][jj])
    end
  end
  -- the diagonal, and the trace of square ones
  local dg = op:diagonal()
  local k = math.min(A.m, A.n)
  if dg:numel() ~= k then return ("diagonal() has %d entries, expected %d"):format(dg:numel(), k) end
  local tr = 0
  for d = 1, k do
    tr = tr + A[d][d]
    if not near(dg[d], A[d][d], scale, tol) then
      return ("diagonal()[%d] = %.17g, expected %.17g"):format(d, dg[d], A[d][d])
    end
  end
  if A.m == A.n then
    local t = op:trace()
    if not near(t, tr, scale * A.n, tol) then return ("trace() = %.17g, expected %.17g"):format(t, tr) end
  end
  -- Aᵀ·x through the transpose
  local z = rand_vec(r, A.m)
  local w = op:t() * lt.tensor(z)
  local wr = ref.matvec(ref.t(A), z)
  for jj = 1, A.n do
    if not near(w[jj], wr[jj], scale * 2 * A.m, tol) then
      return ("(Aᵀ*z)[%d] = %.17g, expected %.17g (z = %s)"):format(jj, w[jj], wr[jj], vec_text(z))
    end
  end
  return nil
end

-- S = B·Bᵀ + n·I for a random expression B: symmetric positive definite and
-- well conditioned; solve and logdet are checked against the reference.
local function check_spd(r, n, depth, kinds, tol)
  local b = gen(r, n, n, depth, kinds)
  local S = b.op * b.op:t() + lt.identity(n, n)
  local Sr = ref.add(ref.matmul(b.ref, ref.t(b.ref)), ref.new(n, n, function(i, j) return i == j and n or 0 end))
  local s = ("(%s * (%s):t() + lt.identity(%d, %d))"):format(b.s, b.s, n, n, n)
  local rhs = rand_vec(r, n)
  local xr, ldr = ref.solve_logdet(Sr, rhs)
  local ok, x = pcall(function() return S:solve(lt.tensor(rhs)) end)
  if not ok then return s, "solve: " .. tostring(x), true end
  local xs = 1
  for i = 1, n do xs = math.max(xs, math.abs(xr[i])) end
  for i = 1, n do
    if not near(x[i], xr[i], xs, 1e3 * tol) then
      return s, ("solve(b)[%d] = %.17g, expected %.17g (b = %s)"):format(i, x[i], xr[i], vec_text(rhs))
    end
  end
  local ok2, ld = pcall(function() return S:logdet() end)
  if not ok2 then return s, "logdet: " .. tostring(ld), true end
  if not near(ld, ldr, math.max(1, math.abs(ldr)), 1e3 * tol) then
    return s, ("logdet = %.17g, expected %.17g"):format(ld, ldr)
  end
  -- bᵀS⁻¹b, and a Cholesky factor: L·Lᵀ = S
  local qr = 0
  for i = 1, n do qr = qr + rhs[i] * xr[i] end
  local q = S:inv_quad(lt.tensor(rhs))
  if not near(q, qr, math.max(1, math.abs(qr)), 1e3 * tol) then
    return s, ("inv_quad = %.17g, expected %.17g (b = %s)"):format(q, qr, vec_text(rhs))
  end
  local L = ref.from_tensor(S:cholesky():dense())
  local LLt = ref.matmul(L, ref.t(L))
  local sc = scale_of(Sr)
  for i = 1, n do
    for j = 1, n do
      if not near(LLt[i][j], Sr[i][j], sc, 1e3 * tol) then
        return s, ("cholesky: (L·Lᵀ)[%d][%d] = %.17g, expected %.17g"):format(i, j, LLt[i][j], Sr[i][j])
      end
      if j > i and L[i][j] ~= 0 then
        return s, ("cholesky: L[%d][%d] = %.17g above the diagonal"):format(i, j, L[i][j])
      end
    end
  end
  return s, nil
end

-- Runs `cases` cases from `seed`; returns {failures = {...}, stats = {...}}.
-- opts: seed, cases, max_size (6), max_depth (4), tol (1e-9), kinds (default:
-- every available leaf), spd_every (every k-th case is an SPD solve/logdet
-- case; 5), max_failures (10). stats.types counts the nodes made by type.
function fuzz.run(opts)
  opts = opts or {}
  local seed, cases = opts.seed or 1, opts.cases or 2000
  local max_size, max_depth = opts.max_size or 6, opts.max_depth or 4
  local tol, spd_every = opts.tol or 1e-9, opts.spd_every or 5
  local kinds = opts.kinds or fuzz.available_leaves()
  local report = {failures = {}, stats = {cases = 0, spd = 0, spd_unavailable = 0, kinds = kinds,
                                         types = {}}}
  types_seen = report.stats.types
  local function fail(case_seed, s, what)
    if #report.failures < (opts.max_failures or 10) then
      report.failures[#report.failures + 1] = ("case seed %d: %s\n  expression: %s"):format(case_seed, what, s)
    end
  end
  for c = 1, cases do
    local case_seed = seed * 1000003 + c
    local r = new_rng(case_seed)
    report.stats.cases = report.stats.cases + 1
    if c % spd_every == 0 then
      local n = r.int(1, max_size)
      local ok, s, err, unavailable = pcall(check_spd, r, n, math.min(2, max_depth), kinds, tol)
      if not ok then
        fail(case_seed, "(spd case)", "raised: " .. tostring(s))
      elseif unavailable and tostring(err):find("not implemented", 1, true) then
        report.stats.spd_unavailable = report.stats.spd_unavailable + 1
        report.stats.spd_unavailable_reason = err
      elseif err then
        fail(case_seed, s, err)
      else
        report.stats.spd = report.stats.spd + 1
      end
    else
      local m, n = r.int(1, max_size), r.int(1, max_size)
      local node
      local ok, err = pcall(function()
        node = gen(r, m, n, r.int(0, max_depth), kinds)
        return check_matrix(node, r, tol)
      end)
      if not ok then
        fail(case_seed, node and node.s or "(while building)", "raised: " .. tostring(err))
      elseif err then
        fail(case_seed, node.s, err)
      end
    end
    if c % 200 == 0 then collectgarbage() end
  end
  types_seen = nil
  return report
end

return fuzz
