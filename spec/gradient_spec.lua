-- Gradients (API.md "Gradients"): params, bilinear_derivative through
-- composites nested three deep, with_params, inv_quad_logdet{grad = true}
-- against central differences, the stochastic estimate against the exact
-- one, and the userdata the gradients are keyed by.
local lt = require "lazytensor"
local conformance = require "support.conformance"
local gradcheck = require "support.gradcheck"
local ref = conformance.reference

local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

-- ------------------------------------------------------- plain Lua helpers

local function rows(t) return t:dense():totable() end

local function add(A, B)
  local C = {}
  for i = 1, #A do
    C[i] = {}
    for j = 1, #A[i] do C[i][j] = A[i][j] + B[i][j] end
  end
  return C
end

local function scale(A, c)
  local C = {}
  for i = 1, #A do
    C[i] = {}
    for j = 1, #A[i] do C[i][j] = c * A[i][j] end
  end
  return C
end

local function kron(A, B)
  local C = {}
  for i = 1, #A do
    for p = 1, #B do
      local row = {}
      for j = 1, #A[1] do
        for q = 1, #B[1] do row[#row + 1] = A[i][j] * B[p][q] end
      end
      C[#C + 1] = row
    end
  end
  return C
end

local function hadamard(A, B)
  local C = {}
  for i = 1, #A do
    C[i] = {}
    for j = 1, #A[i] do C[i][j] = A[i][j] * B[i][j] end
  end
  return C
end

local function inverse(A)
  local solve = ref.lu(A)
  local cols = {}
  for j = 1, #A do
    local e = {}
    for i = 1, #A do e[i] = i == j and 1 or 0 end
    cols[j] = solve(e)
  end
  return ref.transpose(cols)
end

local function select(A, r, c)
  local C = {}
  for i, ri in ipairs(r) do
    C[i] = {}
    for j, cj in ipairs(c) do C[i][j] = A[ri][cj] end
  end
  return C
end

-- ------------------------------------------------- leaves and composites

local rand = ref.generator(977)
local function matrix(m, n) return lt.tensor(ref.random_matrix(rand, m, n)) end

local U = matrix(6, 2)
local LR = lt.lowrank(U)
local D = lt.diag{1.5, 2, 0.7, 1.1, 3, 0.9}
local T = lt.toeplitz{2, 0.5, -0.3, 0.1, 0, 0.05}
local Lf = lt.tensor{{2, 0, 0}, {0.4, 1.2, 0}, {-0.3, 0.5, 0.8}}
local C = lt.chol(Lf)
local Tri = lt.triangular(matrix(2, 2) + lt.eye(2) * 3, "upper")
local Id = lt.identity(6, 0.6)
local Dn = matrix(6, 6)

-- 1. ((U·Uᵀ + D)·Tᵀ)·2.5 + c·I: product of a lowrank_plus_diag and a
-- transposed Toeplitz, scaled, in a sum
local A1 = (LR + D) * T:t() * 2.5 + Id
conformance.check("gradients: ((U·Uᵀ + D)·Tᵀ)·2.5 + c·I", function() return A1 end, function()
  return add(scale(ref.mm(add(rows(LR), rows(D)), ref.transpose(rows(T))), 2.5), rows(Id))
end, {leaves = {LR, D, T, Id}})

-- 2. kron(chol, triangular) of 6×6, in a Hadamard product with a dense
-- matrix's sum with D, inverted
local K = lt.kron(C, Tri)
local A2 = lt.inverse(lt.mul(K, lt.toeplitz{3, 0.5, 0.2, 0.1, 0, 0}) + D)
conformance.check("gradients: (kron(chol, triangular) ∘ T + D)⁻¹", function() return A2 end,
  function()
    local H = hadamard(kron(rows(C), rows(Tri)), rows(lt.toeplitz{3, 0.5, 0.2, 0.1, 0, 0}))
    return inverse(add(H, rows(D)))
  end, {leaves = {C, Tri, D}, solve_tol = 1e-6})

-- 3. rectangular: a submatrix of blockdiag{lowrank U·Vᵀ, Toeplitz} plus a
-- dense matrix, times a kron
local V = matrix(3, 2)
local LRr = lt.lowrank(matrix(4, 2), V)
local Tr = lt.toeplitz(lt.tensor{1, 0.5, -0.5}, lt.tensor{1, 2, 0.25, 0.125})
local BD = lt.blockdiag{LRr, Tr}
local rsel, csel = {1, 2, 2, 5, 7}, {1, 3, 4, 6, 7, 7}
local Dr = matrix(5, 6)
local Kr = lt.kron(lt.tensor{{1, 0.5}, {0.2, 2}, {0, 1}}, lt.diag{1, -1})
local A3 = (lt.submatrix(BD, rsel, csel) + Dr) * Kr
conformance.check("gradients: (blockdiag{U·Vᵀ, T}[r, c] + dense)·kron, 5×4 rectangular",
  function() return A3 end, function()
    return ref.mm(add(select(rows(BD), rsel, csel), rows(Dr)), rows(Kr))
  end, {leaves = {LRr, Tr, Dr}})

-- 4. a scaled Lua operator with parameters, in a sum with a lowrank
local theta = {a = 1.5, v = lt.tensor{1, 2, 3}}
local function make_op(p)
  local v = p.v
  local function apply(X) return lt.diag(v) * X * p.a + X end
  return lt.operator{shape = {3, 3}, matmul = apply, t_matmul = apply, name = "a·diag(v) + I",
    params = {a = p.a, v = v},
    bilinear_derivative = function(Lw, Rw)
      local Lm = Lw:dim() == 1 and Lw:reshape(3, 1) or Lw
      local Rm = Rw:dim() == 1 and Rw:reshape(3, 1) or Rw
      local rowsum = Lm:cmul(Rm):sum(2):reshape(3)
      return {a = rowsum:dot(v), v = rowsum * p.a}
    end,
    with_params = make_op}
end
local Op = make_op(theta)
local LR3 = lt.lowrank(matrix(3, 1))
local A4 = 0.5 * (Op + LR3)
conformance.check("gradients: 0.5·(Lua operator + u·uᵀ)", function() return A4 end, function()
  local M = {}
  local v = theta.v:totable()
  for i = 1, 3 do
    M[i] = {}
    for j = 1, 3 do M[i][j] = (i == j and theta.a * v[i] + 1 or 0) end
  end
  return scale(add(M, rows(LR3)), 0.5)
end, {leaves = {Op, LR3}})

-- 5. kernels under Hadamard products (a GP's product kernel): low-rank
-- weights reach each kernel masked by its partner ((L·Rᵀ) ∘ B, the
-- partner's rows on demand), nested — ((A∘B) + P)∘M — and rectangular
-- (cross-covariances)
local x6 = lt.tensor{{0.1}, {0.7}, {1.3}, {2.2}, {2.9}, {3.4}}
local z6 = lt.tensor{{0.5, 1}, {1.5, 0.2}, {0.3, 0.9}, {2.5, 2}, {1, 1.7}, {0.2, 0.4}}
local Ak = lt.kernel(x6, {kind = "rbf", lengthscale = 0.8, variance = 1.2})
local Bk = lt.kernel(z6, {kind = "matern52", lengthscale = {1.1, 0.7}})
local Pk = lt.kernel(x6, {kind = "periodic", lengthscale = 0.9, period = 1.6, variance = 0.5})
local Mk = lt.kernel(z6, {kind = "rq", lengthscale = 1.3, alpha = 0.8})
local A5 = lt.mul(lt.mul(Ak, Bk) + Pk, Mk)
conformance.check("gradients: ((rbf ∘ matern52) + periodic) ∘ rq, lt.kernel leaves",
  function() return A5 end, function()
    return hadamard(add(hadamard(rows(Ak), rows(Bk)), rows(Pk)), rows(Mk))
  end, {leaves = {Ak, Bk, Pk, Mk}})

local x4, z4 = lt.tensor{{0.4}, {1.9}, {2.6}, {3.1}}, lt.tensor{{1, 0.3}, {0.1, 2}, {2.2, 1.4}, {0.6, 0.6}}
local Ar = lt.kernel(x6, x4, {kind = "matern32", lengthscale = 1.4})
local Br = lt.kernel(z6, z4, {kind = "rbf", lengthscale = {0.9, 1.6}, variance = 0.7})
local A6 = lt.mul(Ar, Br)
conformance.check("gradients: matern32(x, x') ∘ rbf(z, z'), 6×4 cross kernels",
  function() return A6 end, function() return hadamard(rows(Ar), rows(Br)) end,
  {leaves = {Ar, Br}})

-- 6. an inner-product kernel under a Hadamard product: kernel_dot.c's
-- gradient takes unmasked weights, so the core gives it the masked
-- low-rank part dense
local Lk = lt.kernel(z6, {kind = "linear", variance = 0.8, offset = 0.3})
local A7 = lt.mul(Lk, Ak)
conformance.check("gradients: linear ∘ rbf, lt.kernel leaves", function() return A7 end,
  function() return hadamard(rows(Lk), rows(Ak)) end, {leaves = {Lk, Ak}})

-- ------------------------------------------------------------------ specs

describe("gradients", function()
  it("params gives every type's own parameters under the documented names", function()
    assert.are.same({"diag"}, (function()
      local k = {}
      for name in pairs(D:params()) do k[#k + 1] = name end
      return k
    end)())
    assert.are.same({1.5, 2, 0.7, 1.1, 3, 0.9}, D:params().diag:totable())
    assert.are.equal(0.6, Id:params().scale)
    assert.are.same(U:totable(), LR:params().U:totable())
    assert.is_nil(LR:params().V)
    assert.are.same(V:totable(), LRr:params().V:totable())
    assert.are.same({2, 0.5, -0.3, 0.1, 0, 0.05}, T:params().column:totable())
    assert.is_nil(T:params().row) -- symmetric: one vector
    assert.are.same({1, 0.5, -0.5}, Tr:params().column:totable())
    assert.are.same({1, 2, 0.25, 0.125}, Tr:params().row:totable())
    assert.are.same(Lf:totable(), C:params().L:totable())
    assert.are.same(Dn:totable(), Dn:params().values:totable())
    assert.are.equal(2.5, lt.scale(lt.operator{shape = {2, 2}, matmul = function(X) return X end},
                                   2.5):params().scale)
    for _, composite in ipairs{A1, A2, A3, K, BD} do
      assert.is_nil(next(composite:params()), lt.type(composite) .. " has parameters")
    end
    -- copies: writing into them changes nothing
    local p = D:params().diag
    p[1] = 100
    assert.are.equal(1.5, D:get(1, 1))
  end)

  it("keys gradients by the userdata the program holds", function()
    local g = A1:bilinear_derivative(lt.ones(6), lt.ones(6))
    local seen = {}
    for leaf in pairs(g) do seen[#seen + 1] = leaf end
    for _, leaf in ipairs{LR, D, T, Id} do
      local found = false
      for _, k in ipairs(seen) do found = found or rawequal(k, leaf) end
      assert.is_true(found, lt.type(leaf) .. " is not a key")
    end
    -- and the factor 2.5 of the scaled node the product was wrapped in
    assert.are.equal(5, #seen)
    -- another userdata of the same node (Dᵀ is D's own node) finds its entry
    local Dt = D:t()
    assert.are.equal(g[D], g[Dt])
  end)

  it("sums the gradients of a leaf reached by several paths", function()
    -- (U·Uᵀ + D) + T + D holds D twice: <W, ·>'s gradient for D is 2 diag(W)
    local W = matrix(6, 6)
    local g = ((LR + D) + T + D):bilinear_derivative(W)
    local d = g[D].diag:totable()
    local w = W:totable()
    for i = 1, 6 do assert.is_true(math.abs(d[i] - 2 * w[i][i]) < 1e-12) end
  end)

  it("gives the gradient of tr(Lᵀ·A·R) for vectors L and R", function()
    local l, r = lt.tensor{1, 2, 0, -1, 0.5, 3}, lt.tensor{0.5, -1, 2, 1, 0, 1}
    local g = D:bilinear_derivative(l, r)
    local want = {0.5, -2, 0, -1, 0, 3}
    assert.are.same(want, g[D].diag:totable())
  end)

  it("with_params rebuilds the operator with new values, sharing the rest", function()
    local B = A1:with_params{[D] = {diag = lt.ones(6)}, [Id] = {scale = 2}}
    local want = add(scale(ref.mm(add(rows(LR), ref.mm(rows(lt.eye(6)), rows(lt.eye(6)))),
                                  ref.transpose(rows(T))), 2.5), rows(lt.identity(6, 2)))
    conformance.assert_close(B:dense(), want, 1e-12, "rebuilt")
    conformance.assert_close(A1:dense(), add(scale(ref.mm(add(rows(LR), rows(D)),
      ref.transpose(rows(T))), 2.5), rows(Id)), 1e-12, "original unchanged")
  end)

  it("checks its arguments", function()
    local function raises(pattern, f)
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches("^lazytensor: " .. pattern, tostring(err))
    end
    raises("bilinear_derivative: L must be", function() return D:bilinear_derivative(lt.ones(5),
                                                                                     lt.ones(6)) end)
    raises("bilinear_derivative: R must be", function() return D:bilinear_derivative(lt.ones(6, 2),
                                                                                     lt.ones(6, 3)) end)
    raises("bilinear_derivative: W must be", function() return D:bilinear_derivative(lt.ones(6, 5)) end)
    raises("bilinear_derivative: d must be", function() return D:bilinear_derivative{d = lt.ones(5)} end)
    raises("with_params: parameter 'diag' must have shape", function()
      return D:with_params{[D] = {diag = lt.ones(5)}}
    end)
    raises("with_params: parameter 'scale' must be a number", function()
      return Id:with_params{[Id] = {scale = lt.ones(2)}}
    end)
    raises("with_params: keys must be", function() return D:with_params{diag = 1} end)
    raises("operator: bilinear_derivative gave 'b'", function()
      local bad = lt.operator{shape = {2, 2}, matmul = function(X) return X end, params = {a = 1},
        bilinear_derivative = function() return {b = 1} end}
      return bad:bilinear_derivative(lt.ones(2), lt.ones(2))
    end)
    raises("with_params: this operator", function()
      local op = lt.operator{shape = {2, 2}, matmul = function(X) return X end, params = {a = 1}}
      return op:with_params{[op] = {a = 2}}
    end)
    raises("inv_quad_logdet: matrix is not symmetric", function()
      return Dn:inv_quad_logdet(lt.ones(6), {grad = true})
    end)
    raises("inv_quad_logdet: control_variate needs grad", function()
      return A1:inv_quad_logdet(lt.ones(6), {control_variate = 4})
    end)
    -- the operators are intact
    conformance.assert_close(D:dense(), rows(lt.diag{1.5, 2, 0.7, 1.1, 3, 0.9}), 0, "D")
  end)

  -- inv_quad_logdet{grad = true}: the value of bᵀA⁻¹b + log det A at
  -- perturbed parameters, by central differences.
  local function objective(A, b)
    local q, ld = A:inv_quad_logdet(b)
    return q + ld
  end

  local function check_exact(A, b, leaves, tol)
    local q, ld, grads, info = A:inv_quad_logdet(b, {grad = true})
    local q0, ld0 = A:inv_quad_logdet(b)
    assert.is_true(math.abs(q - q0) <= 1e-10 * math.max(1, math.abs(q0)))
    assert.is_true(math.abs(ld - ld0) <= 1e-10 * math.max(1, math.abs(ld0)))
    assert.are.equal("cholesky", info.method)
    for _, leaf in ipairs(leaves) do assert.is_table(grads[leaf], lt.type(leaf)) end
    local checked = 0
    for leaf, named in pairs(grads) do
      for name, g in pairs(named) do
        local value = rawequal(leaf, b) and b or leaf:params()[name]
        local n = type(value) == "number" and 1 or value:numel()
        -- a dense covariance stays symmetric: entries (i, j) and (j, i) move
        -- together, and the gradient checked is the sum of theirs
        local mirror = lt.type(leaf) == "dense" and not rawequal(leaf, b)
        local cols = mirror and value:size(2) or 1
        for e = 1, math.min(n, 12) do
          local e2 = mirror and ((e - 1) % cols) * cols + math.floor((e - 1) / cols) + 1 or e
          local function moved(delta)
            if type(value) == "number" then return value + delta end
            local flat = value:contiguous():reshape(n):clone()
            flat[e] = flat[e] + delta
            if e2 ~= e then flat[e2] = flat[e2] + delta end
            return flat:reshape(unpack(value:shape()))
          end
          local v = type(value) == "number" and value or value:contiguous():reshape(n)[e]
          local h = 1e-6 * math.max(1, math.abs(v))
          local fp, fm
          if rawequal(leaf, b) then
            fp, fm = objective(A, moved(h)), objective(A, moved(-h))
          else
            fp = objective(A:with_params{[leaf] = {[name] = moved(h)}}, b)
            fm = objective(A:with_params{[leaf] = {[name] = moved(-h)}}, b)
          end
          local fd = (fp - fm) / (2 * h)
          local got = type(g) == "number" and g or g:contiguous():reshape(n)[e]
          if e2 ~= e then got = got + g:contiguous():reshape(n)[e2] end
          assert.is_true(math.abs(got - fd) <= tol * math.max(1, math.abs(fd)),
            string.format("%s.%s[%d]: %.10g vs central difference %.10g", lt.type(leaf), name, e,
                          got, fd))
          checked = checked + 1
        end
      end
    end
    return checked
  end

  it("inv_quad_logdet{grad = true}: exact gradients match central differences (1e-6)", function()
    local S = lt.psd(LR + D + T) -- lowrank_plus_diag + Toeplitz
    local b = lt.tensor{1, -2, 0.5, 0.25, 1, -1}
    assert.is_true(check_exact(S, b, {LR, D, T}, 1e-6) > 20)
    -- a matrix b, and a kron_plus_identity over a chol factor
    local Kpi = lt.kron(C, lt.chol(lt.tensor{{1, 0}, {0.3, 0.9}})) + lt.identity(6, 0.5)
    assert.are.equal("kron_plus_identity", lt.type(Kpi))
    assert.is_true(check_exact(Kpi, matrix(6, 2), {C, Kpi}, 1e-6) > 10)
    -- a dense covariance: its gradient is A⁻¹ − A⁻¹bbᵀA⁻¹
    local M = matrix(5, 5)
    local Sd = M * M:t() + lt.eye(5)
    assert.is_true(check_exact(Sd, lt.tensor{1, 2, 3, 4, 5}, {Sd}, 1e-6) > 10)
  end)

  it("inv_quad_logdet{grad = true}: grads[b] is 2·A⁻¹b", function()
    local S = lt.psd(LR + D + T)
    local b = lt.tensor{1, -2, 0.5, 0.25, 1, -1}
    local _, _, grads = S:inv_quad_logdet(b, {grad = true})
    conformance.assert_close(grads[b].values, (S:solve(b) * 2):totable(), 1e-10, "2·A⁻¹b")
  end)
end)

describe("gradients: lt.mvn log_prob{grad = true}", function()
  local k = 6
  local mean = lt.tensor{0.5, -1, 0, 2, 1, -0.5}
  local cov = lt.psd(LR + D + T)
  local dist = lt.mvn(mean, cov)
  local h = 1e-6

  local function central(f, t, i)
    local tp, tm = t:clone(), t:clone()
    local flat_p, flat_m = tp:reshape(t:numel()), tm:reshape(t:numel())
    flat_p[i] = flat_p[i] + h
    flat_m[i] = flat_m[i] - h
    return (f(tp) - f(tm)) / (2 * h)
  end

  it("gives the gradients of log_prob for the covariance's leaves, the mean and x", function()
    local x = lt.tensor{1, 0, -1, 1, 0.5, 2}
    local lp, g = dist:log_prob(x, {grad = true})
    assert.is_true(math.abs(lp - dist:log_prob(x)) < 1e-12)
    for i = 1, k do
      local fd_x = central(function(t) return dist:log_prob(t) end, x, i)
      local fd_m = central(function(t) return lt.mvn(t, cov):log_prob(x) end, mean, i)
      local fd_d = central(function(t)
        return lt.mvn(mean, cov:with_params{[D] = {diag = t}}):log_prob(x)
      end, D:params().diag, i)
      assert.is_true(math.abs(g[x].values[i] - fd_x) < 1e-6)
      assert.is_true(math.abs(g[mean].values[i] - fd_m) < 1e-6)
      assert.is_true(math.abs(g[D].diag[i] - fd_d) < 1e-6)
    end
    assert.is_table(g[LR])
    assert.is_table(g[T])
  end)

  it("gives the gradients of the summed log_prob of n points (rows of x)", function()
    local X = lt.tensor(ref.random_matrix(ref.generator(31), 3, k))
    local lps, g = dist:log_prob(X, {grad = true})
    conformance.assert_close(lps, dist:log_prob(X):totable(), 1e-12, "log_prob rows")
    local function total(Y) return dist:log_prob(Y):sum() end
    for i = 1, 3 * k, 4 do
      assert.is_true(math.abs(g[X].values:reshape(3 * k)[i] - central(total, X, i)) < 1e-6)
    end
    for i = 1, k do
      local fd = central(function(t)
        return lt.mvn(mean, cov:with_params{[D] = {diag = t}}):log_prob(X):sum()
      end, D:params().diag, i)
      assert.is_true(math.abs(g[D].diag[i] - fd) < 1e-6)
    end
  end)

  it("rejects unknown options", function()
    local ok, err = pcall(dist.log_prob, dist, mean, {gard = true})
    assert.is_false(ok)
    assert.matches("^lazytensor: mvn:log_prob: unknown option 'gard'", err)
  end)
end)

describe("gradients: the stochastic estimate", function()
  -- Toeplitz + U·Uᵀ + diag(σ²), n = 400 above max_cholesky_size = 100: one
  -- mBCG run over [b | 30 probes] with a pivoted-Cholesky preconditioner.
  local n = 400
  local c = {}
  for i = 1, n do c[i] = math.exp(-((i - 1) / 12) ^ 2) end
  local Tn = lt.toeplitz(lt.tensor(c))
  local Un = lt.lowrank(lt.tensor(ref.random_matrix(ref.generator(5), n, 2)))
  local noise = {}
  for i = 1, n do noise[i] = 0.05 + 0.01 * (i % 7) end
  local Dn2 = lt.diag(noise)
  local S = lt.psd(Tn + Un + Dn2)
  local b = lt.tensor(ref.random_vector(ref.generator(6), n))
  local exact_q, exact_ld, exact = S:inv_quad_logdet(b, {grad = true})

  local function relative(a, e) return (a - e):norm() / e:norm() end

  local function run(seed, cv)
    lt.manual_seed(seed)
    return lt.with_settings({max_cholesky_size = 100, num_trace_samples = 30}, function()
      return S:inv_quad_logdet(b, {grad = true, control_variate = cv})
    end)
  end

  it("is within a few per cent of the exact gradient, and the control variate helps", function()
    local worst = {[false] = 0, [true] = 0}
    for seed = 1, 4 do
      for _, cv in ipairs{false, true} do
        local q, ld, g, info = run(seed, cv and 40 or nil)
        assert.are.equal("slq", info.method)
        assert.is_true(info.converged)
        assert.is_true(math.abs(q - exact_q) <= 1e-4 * exact_q) -- a CG solve
        assert.is_true(math.abs(ld - exact_ld) <= 0.05 * math.abs(exact_ld))
        local e = math.max(relative(g[Tn].column, exact[Tn].column),
                           relative(g[Dn2].diag, exact[Dn2].diag))
        worst[cv] = math.max(worst[cv], e)
        assert.is_true(relative(g[b].values, exact[b].values) < 1e-4)
      end
    end
    -- measured: about 3 % without and 1 % with the control variate (4 seeds)
    assert.is_true(worst[false] < 0.06, "plain estimate off by " .. worst[false])
    assert.is_true(worst[true] < 0.03, "control variate estimate off by " .. worst[true])
    assert.is_true(worst[true] < worst[false])
  end)

  -- Regression: where the pivoted Cholesky misses much of K (an RBF kernel
  -- in 5 dimensions: a flat spectrum), a control variate L·Lᵀ + σ²I has an
  -- inverse far above Ky⁻¹ and made the estimate ten times worse than none
  -- (1.4e-1 against 1.6e-2 at n = 1000); with the left-out diagonal spread
  -- over it (L·Lᵀ + σ²I + τI) it is no worse than none.
  it("keeps the control variate useful where the preconditioner misses much of K", function()
    local m, d = 300, 5
    local gen = ref.generator(21)
    local X = ref.random_matrix(gen, m, d)
    for i = 1, m do
      for q = 1, d do X[i][q] = 2.5 * (X[i][q] + 1) end
    end
    local Kx = lt.kernel(lt.tensor(X), {kind = "rbf", lengthscale = 1})
    local N = lt.identity(m, 0.1)
    local A = Kx + N
    local y = lt.tensor(ref.random_vector(ref.generator(22), m))
    local _, _, ex = A:inv_quad_logdet(y, {grad = true})
    local function err(g)
      local num, den = 0, 0
      for _, key in ipairs{"lengthscale", "variance"} do
        num = num + (g[Kx][key] - ex[Kx][key]) ^ 2
        den = den + ex[Kx][key] ^ 2
      end
      num = num + (g[N].scale - ex[N].scale) ^ 2
      den = den + ex[N].scale ^ 2
      return math.sqrt(num / den)
    end
    local function median_error(cv)
      local es = {}
      for seed = 1, 5 do
        lt.manual_seed(seed)
        local _, _, g = lt.with_settings({max_cholesky_size = 100}, function()
          return A:inv_quad_logdet(y, {grad = true, control_variate = cv})
        end)
        es[seed] = err(g)
      end
      table.sort(es)
      return es[3]
    end
    local plain, cv = median_error(nil), median_error(64)
    assert.is_true(cv <= plain, string.format("with the control variate %.3g, without %.3g", cv,
                                              plain))
  end)
end)

describe("gradients: gradcheck", function()
  it("fails on a wrong gradient", function()
    local bad = lt.operator{shape = {2, 2}, matmul = function(X) return X * 3 end,
      params = {s = 3},
      bilinear_derivative = function(L, R) return {s = 2 * L:dot(R)} end, -- should be L·R
      with_params = function(p)
        return lt.operator{shape = {2, 2}, matmul = function(X) return X * p.s end,
          params = {s = p.s}}
      end}
    assert.has_error(function() gradcheck.check(bad) end)
  end)
end)
