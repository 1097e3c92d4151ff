-- The iterative layer seen from Lua: operators larger than
-- max_cholesky_size (or set to 0 here) get CG / GMRES solves, SLQ
-- log-determinants, Lanczos roots and eigenpairs, each reporting its
-- method, iterations, residual and convergence in `info`.
local lt = require "lazytensor"
-- the heaviest cases (seconds here, many minutes under valgrind) are left to
-- full runs: with LT_SKIP_SLOW=1 they are not defined (spec/support/slow.lua)
local slow_it = require("support.slow")(it)

local function rel_residual(A, x, b)
  return ((A * x) - b):norm() / b:norm()
end

-- The exact log-determinant through the dense path.
local function exact_logdet(A)
  return lt.with_settings({max_cholesky_size = 1e9}, function() return A:logdet() end)
end

describe("iterative methods", function()
  local n = 3000
  local K, A, b

  setup(function()
    lt.manual_seed(2024)
    K = lt.kernel(lt.rand(n), {kind = "rbf", lengthscale = 0.05})
    A = K + lt.identity(n, 0.1)
    b = lt.randn(n)
  end)

  teardown(function()
    K, A, b = nil, nil, nil
    collectgarbage()
  end)

  it("solves the n = 3000 RBF system by CG to a relative residual < 1e-5", function()
    assert.equal("sum", lt.type(A))
    local x, info = A:solve(b, {max_cholesky_size = 0, cg_tolerance = 1e-6})
    assert.equal("cg", info.method)
    assert.is_true(info.converged)
    assert.is_true(info.iterations > 0)
    assert.is_true(rel_residual(A, x, b) < 1e-5)
    assert.is_true(math.abs(info.residual - rel_residual(A, x, b)) < 1e-10)
  end)

  slow_it("estimates log det by SLQ within 1% with 30 probes", function()
    local opts = {max_cholesky_size = 0, num_trace_samples = 30}
    local ld, info = A:logdet(opts)
    assert.equal("slq", info.method)
    assert.is_true(info.converged)
    local exact = exact_logdet(A)
    assert.is_true(math.abs(ld - exact) < 0.01 * math.abs(exact))
  end)

  it("gives bit-identical results for the same seed", function()
    local opts = {max_cholesky_size = 0, num_trace_samples = 5}
    lt.manual_seed(7)
    local a = A:logdet(opts)
    lt.manual_seed(7)
    local c = A:logdet(opts)
    assert.equal(string.format("%.17g", a), string.format("%.17g", c)) -- exact; %a is 5.2+
  end)

end)

describe("iterative methods on a smaller kernel", function()
  local n = 1000
  local K, A, b

  setup(function()
    lt.manual_seed(2025)
    K = lt.kernel(lt.rand(n), {kind = "rbf", lengthscale = 0.05})
    A = K + lt.identity(n, 0.1)
    b = lt.randn(n)
  end)

  it("shares one run for inv_quad_logdet", function()
    local opts = {max_cholesky_size = 0, num_trace_samples = 30}
    local q, ld, info = A:inv_quad_logdet(b, opts)
    local x = A:solve(b, opts)
    assert.equal("slq", info.method)
    assert.is_true(math.abs(q - b:dot(x)) < 1e-5 * math.abs(q))
    local exact = exact_logdet(A)
    assert.is_true(exact ~= nil and math.abs(ld - exact) < 0.01 * math.abs(exact))
  end)

  it("handles an operator known only by its product", function()
    local op = lt.operator{shape = {n, n}, matmul = function(X) return K * X end, psd = true}
    local B = op + lt.identity(n, 0.1)
    local x, info = B:solve(b, {max_cholesky_size = 0})
    assert.equal("cg", info.method)
    assert.is_true(info.converged)
    assert.is_true(rel_residual(B, x, b) < 1e-5)
  end)
end)

describe("a dense K + σ²I above max_cholesky_size", function()
  -- No K + D structure is visible in a dense matrix; the preconditioner
  -- estimates the diagonal part from a pivoted Cholesky (iterative.c) and
  -- CG then takes about the iterations of the kernel form.
  local n = 600
  lt.manual_seed(4)
  local x = lt.rand(n):reshape(n, 1)
  local spec = {kind = "rbf", lengthscale = 0.1}
  local A = lt.kernel(x, spec):dense():add_diag(0.01)
  local b = lt.randn(n)
  local exact = lt.with_settings({max_cholesky_size = 1e9}, function()
    local xe, info = A:solve(b)
    assert.equal("cholesky", info.method)
    return xe
  end)

  it("is preconditioned: CG converges in a few steps, and the answer is verified", function()
    local unpre = lt.with_settings({max_cholesky_size = 0, preconditioner_size = 0}, function()
      local _, info = A:solve(b)
      return info.iterations
    end)
    local kernel_steps = lt.with_settings({max_cholesky_size = 0}, function()
      local _, info = (lt.kernel(x, spec) + lt.identity(n, 0.01)):solve(b)
      return info.iterations
    end)
    lt.with_settings({max_cholesky_size = 0}, function()
      local xs, info = A:solve(b)
      assert.equal("cg", info.method)
      assert.is_true(info.converged)
      assert.is_true(info.iterations <= 2 * kernel_steps,
        "iterations " .. info.iterations .. " vs " .. kernel_steps .. " for the kernel form")
      assert.is_true(info.iterations * 3 < unpre, info.iterations .. " vs " .. unpre .. " unpreconditioned")
      -- the reported residual is the true one, and the answer the exact one
      local r = (A * xs - b):norm() / b:norm()
      assert.is_true(math.abs(r - info.residual) <= 1e-3 * r + 1e-15)
      assert.is_true(info.residual <= lt.settings.cg_tolerance)
      assert.is_true((xs - exact):norm() / exact:norm() < 1e-6)
    end)
  end)

  it("gives SLQ a preconditioner too: log det close to the exact one", function()
    local ld = lt.with_settings({max_cholesky_size = 1e9}, function() return A:logdet() end)
    lt.manual_seed(7)
    local est = lt.with_settings({max_cholesky_size = 0}, function() return A:logdet() end)
    assert.is_true(math.abs(est - ld) / math.abs(ld) < 2e-3, est .. " vs " .. ld)
  end)
end)

describe("iterative methods and memory", function()
  -- (A kernel operator multiplied many times may keep its entries, memory
  -- that is A's, not the methods': kernel_spec covers it. Off here.)
  local saved
  before_each(function() saved = lt.settings.kernel_cache_bytes; lt.settings.kernel_cache_bytes = 0 end)
  after_each(function() lt.settings.kernel_cache_bytes = saved end)

  it("hold nothing once their results are gone", function()
    local n = 500
    local A = lt.kernel(lt.rand(n), {kind = "rbf", lengthscale = 0.1}) + lt.identity(n, 0.1)
    local b = lt.randn(n, 2)
    local o = {max_cholesky_size = 0}
    collectgarbage()
    collectgarbage()
    local before = lt.memory()
    do
      local x = A:solve(b, o)
      local q, l = A:inv_quad_logdet(b, o)
      local R, S = A:root(o), A:root_inv(o)
      local w, Q = A:eigh(o)
      assert.is_true(x ~= nil and q ~= nil and l ~= nil and R ~= nil and S ~= nil and w ~= nil
                     and Q ~= nil)
    end
    collectgarbage()
    collectgarbage()
    assert.equal(before, lt.memory())
  end)
end)

describe("iterative methods and symmetry", function()
  local n = 300
  local M, b

  setup(function()
    lt.manual_seed(5)
    M = lt.randn(n, n) * (1 / math.sqrt(n)) + lt.identity(n, 3)
    b = lt.randn(n)
  end)

  it("solves an operator of unknown symmetry by GMRES", function()
    local op = lt.operator{shape = {n, n}, matmul = function(X) return M * X end}
    local x, info = op:solve(b, {max_cholesky_size = 0})
    assert.equal("gmres", info.method)
    assert.is_true(info.converged)
    assert.is_true(rel_residual(M, x, b) < 1e-5)
  end)

  it("refuses SLQ on an operator of unknown symmetry, suggesting lt.psd", function()
    local op = lt.operator{shape = {n, n}, matmul = function(X) return M * X end}
    local ok, err = pcall(function() return op:logdet({max_cholesky_size = 0}) end)
    assert.is_false(ok)
    assert.matches("lazytensor: logdet:", err, 1, true)
    assert.matches("lt.psd", err, 1, true)
  end)

  it("raises, naming the operation, on non-finite products and singular operators", function()
    local nan = lt.operator{shape = {n, n}, matmul = function(X) return X * (0 / 0) end,
                            psd = true}
    local ok, err = pcall(function() return nan:solve(b, {max_cholesky_size = 0}) end)
    assert.is_false(ok)
    assert.matches("lazytensor: solve: cg: the product with the operator is not finite", err, 1,
                   true)
    local zero = lt.operator{shape = {n, n}, matmul = function(X) return X * 0 end}
    ok, err = pcall(function() return zero:solve(b, {max_cholesky_size = 0}) end)
    assert.is_false(ok)
    assert.matches("lazytensor: solve: gmres: the operator is singular", err, 1, true)
  end)

  it("reports non-convergence instead of hiding it", function()
    local MMt = M * M:t()
    local S = lt.operator{shape = {n, n}, matmul = function(X) return MMt * X end, psd = true}
              + lt.identity(n, 1e-3)
    local _, info = S:solve(b, {max_cholesky_size = 0, max_cg_iterations = 2,
                                preconditioner_size = 0})
    assert.is_false(info.converged)
    assert.equal(2, info.iterations)
    assert.is_true(info.residual > 1e-6)
  end)
end)

describe("Lanczos", function()
  it("finds a root of a low-rank PSD operator", function()
    local n = 400
    lt.manual_seed(9)
    local U = lt.randn(n, 4)
    local op = lt.operator{shape = {n, n}, matmul = function(X) return U * (U:t() * X) end,
                           psd = true}
    local R, info = op:root({max_cholesky_size = 0})
    assert.equal("lanczos", info.method)
    assert.is_true(info.converged)
    local err = ((R * R:t()) - U * U:t()):norm() / (U * U:t()):norm()
    assert.is_true(err < 1e-8)
  end)

  it("returns the extreme Ritz values of a large symmetric operator", function()
    local n = 1000
    local d = {}
    for i = 1, n do d[i] = 1 + i / n end
    d[n] = 10
    local D = lt.diag(d)
    local op = lt.operator{shape = {n, n}, matmul = function(X) return D * X end, psd = true}
    local w, Q, info = op:eigh({max_cholesky_size = 0})
    assert.equal("lanczos", info.method)
    assert.is_true(math.abs(w:get(w:size(1)) - 10) < 1e-8)
    assert.equal(n, Q:size(1))
  end)
end)
