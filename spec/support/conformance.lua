-- spec/support/conformance.lua — the shared conformance test case for every
-- operator type, in the spirit of linear_operator's LinearOperatorTestCase.
--
--   local conformance = require "support.conformance"
--   conformance.check("lowrank U·Vᵀ", make_operator, make_reference, opts)
--
-- make_operator() returns a fresh operator (called once per `it`);
-- make_reference() returns the same matrix as a Lua table of rows (or a dense
-- tensor), BUILT INDEPENDENTLY: by loops over the operator's definition, never
-- with the operator itself. Every expected value below is computed in plain
-- Lua from that table (products, LU solves, Jacobi eigenvalues), so a check
-- can fail even when the library is consistently wrong.
--
-- opts (all optional):
--   square     the operator is square (default: inferred from the reference)
--   symmetric  run the symmetric-only checks (eigh); implied by psd
--   psd        run the positive-definite checks (cholesky, root, root_inv),
--              eigh, and require inv_quad and inv_quad_logdet to succeed
--   (svd runs on every operator, square or not; solve, logdet, inv_quad and
--   inv_quad_logdet on square ones: logdet expects nan or an error when
--   det <= 0; without psd, inv_quad(_logdet) may also refuse with an error)
--   tol        relative tolerance for exact results (products, entries): 1e-10
--   solve_tol  relative tolerance for factorisations and solves: 1e-7
--   leaves     a list of the leaf operators under the operator (for
--              composites): each must be in its gradients (see below)
--   singular   "why": the operator is square and singular by construction
--              (why says so: "rank 2 < 5"); the reference must be too. Then
--              solve, inv_quad and inv_quad_logdet must raise a
--              `lazytensor:` error naming the singular matrix, and logdet
--              must be -inf (det = 0), instead of the values checked below.
--
-- Gradients: every operator's bilinear_derivative (for low-rank, dense and
-- diagonal weights) is checked against central differences of Σ W∘A
-- computed from A:dense() at perturbed parameters (support/gradcheck.lua),
-- and its own parameters and those of opts.leaves must all be in it.
--
-- Every check runs: there is no way to skip one.
local lt = require "lazytensor"
local gradcheck = require "support.gradcheck"

local conformance = {}

local OPTIONS = {square = true, symmetric = true, psd = true, tol = true, solve_tol = true,
  singular = true, leaves = true}

-- ------------------------------------------------------------ plain Lua

local function to_rows(x)
  if type(x) == "table" then return x end
  if lt.is_tensor(x) then
    if lt.is_lazy(x) then
      error("conformance: the reference must be dense data, not an operator")
    end
    return x:totable()
  end
  error("conformance: the reference must be a table of rows or a dense tensor")
end

local function shape(M) return #M, #M[1] end

local function copy(M)
  local C = {}
  for i = 1, #M do
    C[i] = {}
    for j = 1, #M[i] do C[i][j] = M[i][j] end
  end
  return C
end

local function identity(n)
  local I = {}
  for i = 1, n do
    I[i] = {}
    for j = 1, n do I[i][j] = i == j and 1 or 0 end
  end
  return I
end

local function transpose(M)
  local m, n = shape(M)
  local T = {}
  for j = 1, n do
    T[j] = {}
    for i = 1, m do T[j][i] = M[i][j] end
  end
  return T
end

local function mm(A, B)
  local m, k = shape(A)
  local n = #B[1]
  assert(#B == k, "conformance: internal shape error")
  local C = {}
  for i = 1, m do
    local row = {}
    for j = 1, n do
      local s = 0
      for l = 1, k do s = s + A[i][l] * B[l][j] end
      row[j] = s
    end
    C[i] = row
  end
  return C
end

local function mv(A, v)
  local out = {}
  for i = 1, #A do
    local s = 0
    for j = 1, #v do s = s + A[i][j] * v[j] end
    out[i] = s
  end
  return out
end

local function vm(v, A)
  local n = #A[1]
  local out = {}
  for j = 1, n do
    local s = 0
    for i = 1, #v do s = s + v[i] * A[i][j] end
    out[j] = s
  end
  return out
end

local function ew(A, B, f)
  local C = {}
  for i = 1, #A do
    C[i] = {}
    for j = 1, #A[i] do C[i][j] = f(A[i][j], B and B[i][j]) end
  end
  return C
end

local function max_abs(x)
  local m = 0
  if type(x) == "number" then return math.abs(x) end
  for _, v in ipairs(x) do
    local a = max_abs(v)
    if a > m then m = a end
  end
  return m
end

local function dot(a, b)
  local s = 0
  for i = 1, #a do s = s + a[i] * b[i] end
  return s
end

-- A deterministic generator independent of the library's RNG. The product
-- is split (1103515245 = 16838 * 2^16 + 20077) so that every step stays
-- below 2^53: the same numbers with Lua 5.3+ integers and with the doubles
-- of Lua 5.1, 5.2 and LuaJIT.
local function generator(seed)
  local state = seed
  return function()
    local hi = (state * 16838) % 32768 * 65536
    state = (hi + state * 20077 + 12345) % 2147483648
    return state / 2147483648 * 2 - 1
  end
end

local function random_vector(rand, n)
  local v = {}
  for i = 1, n do v[i] = rand() end
  return v
end

local function random_matrix(rand, m, n)
  local M = {}
  for i = 1, m do M[i] = random_vector(rand, n) end
  return M
end

-- LU with partial pivoting: returns a solver and log|det|, sign(det).
local function lu(A)
  local n = #A
  local U = copy(A)
  local perm = {}
  for i = 1, n do perm[i] = i end
  local sign, logabs = 1, 0
  for k = 1, n do
    local p, best = k, math.abs(U[k][k])
    for i = k + 1, n do
      if math.abs(U[i][k]) > best then p, best = i, math.abs(U[i][k]) end
    end
    if best == 0 then return nil, -math.huge, 0 end
    if p ~= k then
      U[p], U[k] = U[k], U[p]
      perm[p], perm[k] = perm[k], perm[p]
      sign = -sign
    end
    if U[k][k] < 0 then sign = -sign end
    logabs = logabs + math.log(math.abs(U[k][k]))
    for i = k + 1, n do
      local f = U[i][k] / U[k][k]
      U[i][k] = f
      for j = k + 1, n do U[i][j] = U[i][j] - f * U[k][j] end
    end
  end
  local function solve(b)
    local y = {}
    for i = 1, n do
      local s = b[perm[i]]
      for j = 1, i - 1 do s = s - U[i][j] * y[j] end
      y[i] = s
    end
    local x = {}
    for i = n, 1, -1 do
      local s = y[i]
      for j = i + 1, n do s = s - U[i][j] * x[j] end
      x[i] = s / U[i][i]
    end
    return x
  end
  return solve, logabs, sign
end

-- Cyclic Jacobi eigenvalues of a symmetric matrix, ascending.
local function jacobi_eigenvalues(S)
  local n = #S
  local A = copy(S)
  for _ = 1, 100 do
    local off = 0
    for i = 1, n do
      for j = i + 1, n do off = off + A[i][j] ^ 2 end
    end
    if off < 1e-30 * (1 + max_abs(A) ^ 2) then break end
    for p = 1, n - 1 do
      for q = p + 1, n do
        if A[p][q] ~= 0 then
          local theta = (A[q][q] - A[p][p]) / (2 * A[p][q])
          local t = (theta >= 0 and 1 or -1) / (math.abs(theta) + math.sqrt(theta * theta + 1))
          local c = 1 / math.sqrt(t * t + 1)
          local s = t * c
          for k = 1, n do
            local akp, akq = A[k][p], A[k][q]
            A[k][p], A[k][q] = c * akp - s * akq, s * akp + c * akq
          end
          for k = 1, n do
            local apk, aqk = A[p][k], A[q][k]
            A[p][k], A[q][k] = c * apk - s * aqk, s * apk + c * aqk
          end
        end
      end
    end
  end
  local w = {}
  for i = 1, n do w[i] = A[i][i] end
  table.sort(w)
  return w
end

local function asymmetry(M)
  local m, n = shape(M)
  if m ~= n then return math.huge end
  local a = 0
  for i = 1, n do
    for j = 1, i - 1 do a = math.max(a, math.abs(M[i][j] - M[j][i])) end
  end
  return a
end

-- ------------------------------------------------------------ comparisons

local function values(x)
  if type(x) == "number" then return x end
  if lt.is_tensor(x) then
    if lt.is_lazy(x) then x = x:dense() end
    if x:dim() == 0 then return x:get() end
    return x:totable()
  end
  return x
end

-- Largest deviation between got and want (nested tables or numbers);
-- errors on shape differences.
local function deviation(got, want, where)
  if type(want) == "number" then
    if type(got) ~= "number" then error(where .. ": expected a number, got " .. type(got), 0) end
    if got ~= got then return math.huge, where end
    return math.abs(got - want), where
  end
  if type(got) ~= "table" or #got ~= #want then
    error(string.format("%s: expected %d entries, got %s", where, #want,
      type(got) == "table" and #got or type(got)), 0)
  end
  local worst, at = 0, where
  for i = 1, #want do
    local d, w = deviation(got[i], want[i], where .. "[" .. i .. "]")
    if d > worst then worst, at = d, w end
  end
  return worst, at
end

local function assert_close(got, want, tol, what, scale)
  got = values(got)
  scale = math.max(1, scale or max_abs(want))
  local d, at = deviation(got, want, what)
  if d ~= d or d > tol * scale then
    error(string.format("%s: deviates by %.3g (tolerance %.3g) at %s", what, d, tol * scale, at), 2)
  end
end

local function is_lower(M, tol)
  for i = 1, #M do
    for j = i + 1, #M[i] do
      if math.abs(M[i][j]) > tol then return false end
    end
  end
  return true
end

-- ------------------------------------------------------------ the check

-- busted's API lives in the spec file's environment, not in _G: find the
-- calling spec's _ENV (a proxy that resolves names in the running block).
local function spec_env(level)
  -- Lua 5.1 and LuaJIT: the spec's function environment.
  -- (Not a tail call: LuaJIT would drop this frame from the count.)
  if getfenv then
    local env = getfenv(level + 1)
    return env
  end
  local info = debug.getinfo(level + 1, "f")
  local f = info and info.func
  for i = 1, 255 do
    local name, value = debug.getupvalue(f, i)
    if name == nil then break end
    if name == "_ENV" then return value end
  end
  return _G
end

function conformance.check(name, make, make_reference, opts)
  local env = spec_env(2)
  local describe, it, assert = env.describe, env.it, env.assert
  opts = opts or {}
  for k in pairs(opts) do assert(OPTIONS[k], "conformance: unknown option " .. tostring(k)) end
  local singular = opts.singular
  assert(singular == nil or (type(singular) == "string" and singular ~= ""),
    "conformance: singular needs the reason (a string)")
  local tol = opts.tol or 1e-10
  local stol = opts.solve_tol or 1e-7
  local psd = opts.psd or false
  local symmetric = opts.symmetric or psd

  describe("conformance: " .. name, function()
    local R = to_rows(make_reference())
    local m, n = shape(R)
    local square = opts.square
    if square == nil then square = m == n end
    local rand = generator(12345 + m * 31 + n)
    local scale = max_abs(R)

    local function case(check, fn)
      it(check, function() fn(make()) end)
    end

    it("reference matches the declared options", function()
      assert.is_true(m >= 1 and n >= 1, "empty reference")
      if square then assert.are.equal(m, n, "square declared but the reference is not") end
      if symmetric then
        assert.is_true(asymmetry(R) <= 1e-12 * math.max(1, scale), "reference is not symmetric")
      end
      if psd then
        local w = jacobi_eigenvalues(R)
        assert.is_true(w[1] > 0, "psd declared but the reference is not positive definite")
      end
      if singular then
        assert.is_true(square, "singular declared for a non-square operator")
        -- the smallest eigenvalue of RᵀR is the smallest singular value squared
        local w = jacobi_eigenvalues(mm(transpose(R), R))
        assert.is_true(w[1] <= 1e-12 * math.max(1, scale) ^ 2,
          "singular declared but the reference has full rank")
      end
      local A = make()
      assert.are.same({m, n}, A:shape())
    end)

    -- products ----------------------------------------------------------
    local v = random_vector(rand, n)
    local u = random_vector(rand, m)
    local X = random_matrix(rand, n, 3)
    local Y = random_matrix(rand, 2, m)
    local D = random_matrix(rand, m, n)

    case("matvec", function(A)
      local r = A * lt.tensor(v)
      assert.are.equal(1, r:dim())
      assert_close(r, mv(R, v), tol, "A*v", scale * max_abs(v) * n)
    end)
    case("matmat", function(A)
      local r = A * lt.tensor(X)
      assert.are.same({m, 3}, r:shape())
      assert_close(r, mm(R, X), tol, "A*M", scale * n)
    end)
    case("vecmat", function(A)
      local r = lt.tensor(u) * A
      assert.are.equal(1, r:dim())
      assert_close(r, vm(u, R), tol, "v*A", scale * m)
    end)
    case("matmat_left", function(A)
      local r = lt.tensor(Y) * A
      assert.are.same({2, n}, r:shape())
      assert_close(r, mm(Y, R), tol, "M*A", scale * m)
    end)
    case("transpose", function(A)
      local T = A:t()
      assert.are.same({n, m}, T:shape())
      assert_close(T:dense(), transpose(R), tol, "A:t() values")
      assert_close(T * lt.tensor(u), vm(u, R), tol, "A:t()*v", scale * m)
      assert_close(lt.tensor(v) * T, mv(R, v), tol, "v*A:t()", scale * n)
      assert_close(T:t():dense(), R, tol, "A:t():t()")
    end)

    -- arithmetic ----------------------------------------------------------
    case("add", function(A)
      local Dt = lt.tensor(D)
      local want = ew(R, D, function(a, b) return a + b end)
      assert_close(A + Dt, want, tol, "A + D")
      assert_close(Dt + A, want, tol, "D + A")
      assert_close((A + Dt) * lt.tensor(v), mv(want, v), tol, "(A + D)*v", scale * n)
      assert_close(A + A, ew(R, nil, function(a) return 2 * a end), tol, "A + A")
      assert_close(lt.add(A, Dt), want, tol, "lt.add(A, D)")
    end)
    case("sub", function(A)
      local Dt = lt.tensor(D)
      assert_close(A - Dt, ew(R, D, function(a, b) return a - b end), tol, "A - D")
      assert_close(Dt - A, ew(R, D, function(a, b) return b - a end), tol, "D - A")
      assert_close(A - A, ew(R, nil, function() return 0 end), tol, "A - A", scale)
    end)
    case("scale", function(A)
      local twice = ew(R, nil, function(a) return 2 * a end)
      assert_close(2 * A, twice, tol, "2*A")
      assert_close(A * 2, twice, tol, "A*2")
      assert_close(A / 2, ew(R, nil, function(a) return a / 2 end), tol, "A/2")
      assert_close(-3.5 * A, ew(R, nil, function(a) return -3.5 * a end), tol, "-3.5*A")
      assert_close((2 * A) * lt.tensor(v), mv(twice, v), tol, "(2*A)*v", 2 * scale * n)
    end)
    case("neg", function(A)
      assert_close(-A, ew(R, nil, function(a) return -a end), tol, "-A")
      local want = mv(R, v)
      for i = 1, m do want[i] = -want[i] end
      assert_close(lt.neg(A) * lt.tensor(v), want, tol, "(-A)*v", scale * n)
    end)
    case("add_lazy", function(A)
      -- A lazy partner of the same shape, defined through a dense matrix.
      local Dt = lt.tensor(D)
      local L = lt.operator{shape = {m, n}, matmul = function(Z) return Dt * Z end,
        t_matmul = function(Z) return Dt:t() * Z end}
      local want = ew(R, D, function(a, b) return a + b end)
      assert_close(A + L, want, tol, "A + lazy")
      assert_close(L + A, want, tol, "lazy + A")
      assert_close((A + L) * lt.tensor(v), mv(want, v), tol, "(A + lazy)*v", scale * n)
      assert_close(A - L, ew(R, D, function(a, b) return a - b end), tol, "A - lazy")
      if square then
        local d = random_vector(rand, n)
        local dg = {}
        for i = 1, n do
          dg[i] = {}
          for j = 1, n do dg[i][j] = R[i][j] + (i == j and d[i] or 0) end
        end
        assert_close(A + lt.diag(d), dg, tol, "A + diag")
        assert_close(lt.diag(d) + A, dg, tol, "diag + A")
        assert_close(A:add_diag(lt.tensor(d)), dg, tol, "A:add_diag(d)")
        local jit = ew(R, nil, function(a) return a end)
        for i = 1, n do jit[i][i] = jit[i][i] + 0.25 end
        assert_close(A:add_jitter(0.25), jit, tol, "A:add_jitter(0.25)")
        assert_close(A:add_diag(0.25), jit, tol, "A:add_diag(0.25)")
      end
    end)

    -- extraction ----------------------------------------------------------
    case("entries", function(A)
      for i = 1, m do
        for j = 1, n do
          assert_close(A:get(i, j), R[i][j], tol, string.format("A:get(%d, %d)", i, j), scale)
        end
      end
    end)
    case("rows", function(A)
      for i = 1, m do
        local r = A[i]
        assert.are.equal(1, r:dim())
        assert_close(r, R[i], tol, string.format("A[%d]", i), scale)
      end
    end)
    case("diagonal", function(A)
      local d = {}
      for i = 1, math.min(m, n) do d[i] = R[i][i] end
      assert_close(A:diagonal(), d, tol, "diagonal")
    end)
    case("dense", function(A)
      local Dn = A:dense()
      assert.are.equal("dense", lt.type(Dn))
      assert_close(Dn, R, tol, "dense")
    end)
    if square then
      case("trace", function(A)
        local t = 0
        for i = 1, n do t = t + R[i][i] end
        assert_close(A:trace(), t, tol, "trace", scale * n)
      end)
    end

    -- properties ------------------------------------------------------------
    case("properties", function(A)
      local asym = asymmetry(R)
      local s = A:is_symmetric()
      if s == true then
        assert.is_true(asym <= stol * math.max(1, scale), "claims symmetric, reference is not")
      elseif s == false then
        assert.is_true(asym > 1e-14 * math.max(1, scale), "claims not symmetric, reference is")
      end
      local p = A:is_psd()
      if p == true then
        assert.is_true(asym <= stol * math.max(1, scale), "claims psd, reference not symmetric")
        local w = jacobi_eigenvalues(R)
        assert.is_true(w[1] >= -stol * math.max(1, scale), "claims psd, reference has eigenvalue "
          .. w[1])
      elseif p == false and asym <= 1e-14 * math.max(1, scale) then
        local w = jacobi_eigenvalues(R)
        assert.is_true(w[1] < stol * math.max(1, scale), "claims not psd, reference is")
      end
    end)

    -- errors ----------------------------------------------------------------
    -- a `lazytensor:` error, as API.md says: the message starts with it
    local function expect_error(ok, err)
      assert.is_false(ok, "expected an error")
      assert.matches("^lazytensor: %a", tostring(err))
    end
    case("errors", function(A)
      local ok, err = pcall(function() return A * lt.zeros(n + 1) end)
      expect_error(ok, err)
      ok, err = pcall(function() return A + lt.zeros(m + 1, n) end)
      expect_error(ok, err)
      if not square then
        ok, err = pcall(function() return A:logdet() end)
        expect_error(ok, err)
        ok, err = pcall(function() return A:solve(lt.zeros(m)) end)
        expect_error(ok, err)
      else
        ok, err = pcall(function() return A:solve(lt.zeros(n + 1)) end)
        expect_error(ok, err)
      end
      -- the operator is intact afterwards
      assert_close(A * lt.tensor(v), mv(R, v), tol, "A*v after errors", scale * n)
    end)

    case("bilinear_derivative", function(A)
      -- leaves are the spec's own operators: make() builds A over them
      gradcheck.check(A, {leaves = opts.leaves})
    end)

    case("svd", function(A)
      local U, S, V = A:svd()
      local Uv, Sv, Vv = values(U), values(S), values(V)
      local k = math.min(m, n)
      assert.are.equal(k, #Sv)
      for i = 2, k do assert.is_true(Sv[i - 1] >= Sv[i] - stol * scale, "S not descending") end
      local US = {}
      for i = 1, m do
        US[i] = {}
        for j = 1, k do US[i][j] = Uv[i][j] * Sv[j] end
      end
      assert_close(mm(US, transpose(Vv)), R, stol, "U·diag(S)·Vᵀ = A")
      assert_close(mm(transpose(Uv), Uv), identity(k), stol, "UᵀU = I")
      assert_close(mm(transpose(Vv), Vv), identity(k), stol, "VᵀV = I")
      -- singular values: square roots of the eigenvalues of AᵀA (or AAᵀ)
      local G = m >= n and mm(transpose(R), R) or mm(R, transpose(R))
      local w = jacobi_eigenvalues(G)
      local want = {}
      for i = 1, k do want[i] = math.sqrt(math.max(0, w[#w + 1 - i])) end
      assert_close(Sv, want, stol, "singular values", scale)
    end)

    if not square then return end

    -- square: solves and determinants -----------------------------------------
    local ref_solve, ref_logabs, ref_sign = lu(R)
    local b = random_vector(rand, n)
    local B = random_matrix(rand, n, 2)
    local Bt = transpose(B)

    -- singular by construction: no x satisfies A·x = b for b outside the
    -- range, so any value would be wrong; det = 0
    -- (inv_quad may refuse it as not positive definite, which it is not)
    local function refuses(what, f, also)
      local ok, err = pcall(f)
      assert.is_false(ok, what .. " of a singular matrix (" .. tostring(singular)
        .. ") returned a value")
      local msg = tostring(err)
      assert.matches("^lazytensor: %a", msg)
      assert.truthy(msg:find("singular", 1, true) or (also and msg:find(also, 1, true)),
        what .. ": the error does not say the matrix is singular: " .. msg)
    end

    case("solve", function(A)
      if singular then
        refuses("solve", function() return A:solve(lt.tensor(b)) end)
        refuses("solve", function() return A:solve(lt.tensor(B)) end)
        return
      end
      assert(ref_solve, "conformance: the reference is singular; pick another test matrix")
      local x, info = A:solve(lt.tensor(b))
      assert.are.equal("table", type(info))
      assert.are.equal(1, x:dim())
      local want = ref_solve(b)
      assert_close(x, want, stol, "solve(vector)")
      local Xs = A:solve(lt.tensor(B))
      assert.are.same({n, 2}, Xs:shape())
      local cols = {ref_solve(Bt[1]), ref_solve(Bt[2])}
      assert_close(Xs, transpose(cols), stol, "solve(matrix)")
      -- residual, with the reference matrix
      assert_close(mv(R, values(x)), b, stol, "A·solve(b) = b")
    end)

    case("logdet", function(A)
      if singular then
        assert.are.equal(-math.huge, (A:logdet()), "logdet of a singular matrix")
      elseif ref_sign > 0 then
        assert_close(A:logdet(), ref_logabs, stol, "logdet", math.abs(ref_logabs))
      else
        local ok, ld = pcall(A.logdet, A)
        assert.is_true(not ok or ld ~= ld, "logdet of a matrix with det < 0 must be nan or raise")
      end
    end)

    if symmetric then
      case("eigh", function(A)
        local w, Q = A:eigh()
        local wv, Qv = values(w), values(Q)
        assert.are.equal(n, #wv)
        for i = 2, n do
          assert.is_true(wv[i - 1] <= wv[i] + stol * scale, "eigenvalues not ascending")
        end
        assert_close(wv, jacobi_eigenvalues(R), stol, "eigenvalues", scale)
        local QW = {}
        for i = 1, n do
          QW[i] = {}
          for j = 1, n do QW[i][j] = Qv[i][j] * wv[j] end
        end
        assert_close(mm(R, Qv), QW, stol, "A·Q = Q·diag(w)", scale)
        assert_close(mm(transpose(Qv), Qv), identity(n), stol, "QᵀQ = I")
      end)
    end

    -- inv_quad and inv_quad_logdet: required on PSD operators; on others
    -- either the right value or a `lazytensor:` error (API.md lets methods
    -- that need positive definiteness refuse)
    local inv_quad_ref, inv_quad_mat = 0, 0
    if ref_solve then
      inv_quad_ref = dot(b, ref_solve(b))
      for c = 1, 2 do inv_quad_mat = inv_quad_mat + dot(Bt[c], ref_solve(Bt[c])) end
    end
    local function allowed_to_refuse(f)
      if psd and ref_solve then
        f()
        return
      end
      local ok, err = pcall(f)
      if not ok then assert.matches("^lazytensor: %a", tostring(err)) end
    end

    case("inv_quad", function(A)
      if singular then
        refuses("inv_quad", function() return A:inv_quad(lt.tensor(b)) end,
          "not positive definite")
        return
      end
      allowed_to_refuse(function()
        assert_close(A:inv_quad(lt.tensor(b)), inv_quad_ref, stol, "inv_quad(vector)")
        assert_close(A:inv_quad(lt.tensor(B)), inv_quad_mat, stol, "inv_quad(matrix)")
      end)
    end)
    case("inv_quad_logdet", function(A)
      if singular then
        refuses("inv_quad_logdet", function() return A:inv_quad_logdet(lt.tensor(b)) end,
          "not positive definite")
        return
      end
      local q, ld
      allowed_to_refuse(function()
        q, ld = A:inv_quad_logdet(lt.tensor(b))
      end)
      if q == nil then return end
      assert_close(q, inv_quad_ref, stol, "inv_quad_logdet: inv_quad")
      if ref_sign > 0 then
        assert_close(ld, ref_logabs, stol, "inv_quad_logdet: logdet", math.abs(ref_logabs))
      else
        assert.is_true(ld ~= ld, "inv_quad_logdet: logdet with det <= 0 must be nan")
      end
    end)

    if not psd then return end

    case("cholesky", function(A)
      local L = values(A:cholesky())
      assert.is_true(is_lower(L, 0), "cholesky factor is not lower triangular")
      assert_close(mm(L, transpose(L)), R, stol, "L·Lᵀ = A")
      local U = values(A:cholesky(true))
      assert.is_true(is_lower(transpose(U), 0), "upper cholesky factor is not upper triangular")
      assert_close(mm(transpose(U), U), R, stol, "Uᵀ·U = A")
    end)
    case("root", function(A)
      local Rt = values(A:root())
      assert.are.equal(n, #Rt)
      assert_close(mm(Rt, transpose(Rt)), R, stol, "R·Rᵀ = A")
    end)
    case("root_inv", function(A)
      local S = values(A:root_inv())
      assert.are.equal(n, #S)
      -- A·S·Sᵀ = I
      assert_close(mm(R, mm(S, transpose(S))), identity(n), stol * 10, "A·S·Sᵀ = I")
    end)
  end)
end

-- Exposed for specs that want the same plain-Lua references.
conformance.reference = {
  mm = mm, mv = mv, vm = vm, transpose = transpose, lu = lu,
  eigenvalues = jacobi_eigenvalues, generator = generator,
  random_matrix = random_matrix, random_vector = random_vector,
}
conformance.assert_close = assert_close
conformance.spec_env = spec_env

return conformance
