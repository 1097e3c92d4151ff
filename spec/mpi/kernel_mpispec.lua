-- spec/mpi/kernel_mpispec.lua — mpi.kernel under mpirun (make test-mpi):
-- products, solves and log-determinants against lt.kernel in one process
-- (to rounding) and, through support.bits, against the one-rank run of
-- this file (bit for bit); agreed errors.
local support = require "mpi.support"
local lt, mpi = support.lt, support.mpi

local RBF = {kind = "rbf", lengthscale = 0.8, variance = 1.5}
local MATERN = {kind = "matern52", lengthscale = 1.3, variance = 0.7}

describe("mpi.rank and mpi.size", function()
  it("number the ranks 0 .. size − 1, as many as mpirun started", function()
    local np = tonumber(os.getenv("LT_MPI_NP") or "") or mpi.size()
    assert.are.equal(np, mpi.size())
    assert.is_true(mpi.rank() >= 0 and mpi.rank() < mpi.size())
    assert.are.equal(math.type(mpi.rank()), "integer")
  end)

  it("fixes the thread count, alike on every rank", function()
    -- 0 (OpenBLAS's count) by default; the module sets the smallest count
    -- any rank had (test-mpi.sh runs unbound, so every rank and the
    -- one-rank run see all the cores, and the bits checks compare runs of
    -- one count)
    assert.is_true(lt.settings.num_threads >= 1)
  end)
end)

describe("mpi.kernel products", function()
  -- n = 333: five whole 64-row blocks and a partial one, split unevenly
  -- over 2 and 3 ranks
  local n = 333

  it("K·V equals lt.kernel's product, with the one-rank bits", function()
    local X = support.points(1, n, 3)
    local K, ref = mpi.kernel(X, RBF), lt.kernel(X, RBF)
    assert.are.equal("mpi_kernel", lt.type(K))
    assert.is_true(K:is_symmetric())
    assert.is_true(K:is_psd())
    for _, k in ipairs({1, 5, 40}) do
      local V = lt.randn(n, k)
      local Y = K * V
      assert.are.same({n, k}, Y:shape())
      assert.is_true(support.relative_error(Y, ref * V) < 1e-13)
      support.bits("symmetric product k=" .. k, Y)
    end
    local v = lt.randn(n)
    local y = K * v
    assert.are.same({n}, y:shape())
    assert.is_true(support.relative_error(y, ref * v) < 1e-13)
    support.bits("symmetric product 1-d", y)
  end)

  it("K(x1, x2)·V and its transpose equal lt.kernel's", function()
    local X1, X2 = support.points(2, 200, 2), lt.randn(150, 2)
    local K, ref = mpi.kernel(X1, X2, MATERN), lt.kernel(X1, X2, MATERN)
    assert.are.same({200, 150}, K:shape())
    assert.is_false(K:is_symmetric())
    local V, W = lt.randn(150, 3), lt.randn(200, 2)
    local Y, Z = K * V, K:t() * W
    assert.is_true(support.relative_error(Y, ref * V) < 1e-13)
    assert.is_true(support.relative_error(Z, ref:t() * W) < 1e-13)
    assert.are.equal("mpi_kernel", lt.type(K:t()))
    support.bits("rectangular product", Y)
    support.bits("rectangular transposed product", Z)
  end)

  it("keeps entries, rows, the diagonal and scaling exact", function()
    local X = support.points(3, 100, 2)
    local K, ref = mpi.kernel(X, RBF), lt.kernel(X, RBF)
    assert.are.equal(ref:get(7, 42), K:get(7, 42))
    assert.are.same(ref[5]:totable(), K[5]:totable())
    assert.are.same(ref:diagonal():totable(), K:diagonal():totable())
    assert.are.equal(ref:trace(), K:trace())
    assert.are.same(ref:dense():totable(), K:dense():totable())
    local S = 2.5 * K
    assert.are.equal("mpi_kernel", lt.type(S))
    local v = lt.randn(100)
    assert.is_true(support.relative_error(S * v, 2.5 * (ref * v)) < 1e-13)
  end)
end)

describe("mpi.kernel in the iterative methods", function()
  local n = 400

  it("solves by preconditioned CG like lt.kernel, converged", function()
    lt.with_settings({max_cholesky_size = 50, cg_tolerance = 1e-8}, function()
      local X = support.points(4, n, 2)
      local A, ref = mpi.kernel(X, RBF):add_diag(0.05), lt.kernel(X, RBF):add_diag(0.05)
      local b = lt.randn(n, 2)
      local x, info = A:solve(b)
      assert.is_true(info.converged)
      assert.are_not.equal("cholesky", info.method)
      -- the residual against the exact (dense) matrix
      local D = ref:dense()
      assert.is_true(support.relative_error(D * x, b) < 1e-6)
      support.bits("cg solve", x)
      support.bits("cg iterations", info.iterations)
    end)
  end)

  it("estimates inv_quad_logdet by SLQ close to the dense values", function()
    lt.with_settings({max_cholesky_size = 50}, function()
      local X = support.points(5, n, 2)
      local A = mpi.kernel(X, MATERN):add_diag(0.1)
      local D = lt.kernel(X, MATERN):add_diag(0.1):dense()
      local b = lt.randn(n)
      lt.manual_seed(55) -- the probes: the same stream on every rank
      local q, ld, info = A:inv_quad_logdet(b)
      local q0, ld0 = D:inv_quad_logdet(b)
      assert.is_true(math.abs(q - q0) < 1e-5 * math.abs(q0))
      assert.is_true(math.abs(ld - ld0) < 0.05 * math.abs(ld0))
      assert.is_true(info.converged)
      support.bits("slq inv_quad_logdet", {q, ld})
    end)
  end)

  it("gives the Cholesky path the same dense matrix on every rank", function()
    local X = support.points(6, 120, 2)
    local A = mpi.kernel(X, RBF):add_diag(0.1)
    local b = lt.randn(120)
    local q, ld, info = A:inv_quad_logdet(b)
    local q0, ld0 = lt.kernel(X, RBF):add_diag(0.1):inv_quad_logdet(b)
    assert.are.equal("cholesky", info.method)
    assert.are.equal(q0, q)
    assert.are.equal(ld0, ld)
  end)
end)

describe("mpi.kernel errors", function()
  local last = mpi.size() - 1
  local X = support.points(7, 80, 2)

  it("makes every rank raise the failing rank's error", function()
    local bad = {kind = "rbf", lengthscale = mpi.rank() == last and -1 or 1}
    local err = support.error_of(mpi.kernel, X, bad)
    local where = mpi.size() > 1 and "rank " .. last .. ": " or ""
    assert.are.equal("lazytensor: mpi.kernel: " .. where
                     .. "kernel: lengthscale must be a positive number, got -1", err)
  end)

  it("refuses points that differ between ranks", function()
    local mine = X:clone()
    if mpi.rank() == last then mine:set(1, 1, mine:get(1, 1) + 1e-9) end
    local err = support.error_of(mpi.kernel, mine, RBF)
    if mpi.size() == 1 then
      assert.is_nil(err)
    else
      assert.are.equal("lazytensor: mpi.kernel: the kernel differs between ranks (every rank "
                       .. "must pass the same points and spec)", err)
    end
  end)

  it("refuses a product whose right-hand side differs, and stays usable", function()
    local K = mpi.kernel(X, RBF)
    local v = lt.randn(80)
    local mine = v:clone()
    if mpi.rank() == last then mine[1] = mine[1] * 2 end
    local err = support.error_of(function() return K * mine end)
    if mpi.size() == 1 then
      assert.is_nil(err)
    else
      assert.is_truthy(err:find("^lazytensor: .*mpi_kernel product: the right%-hand side "
                                .. "differs between ranks"))
    end
    assert.is_true(support.relative_error(K * v, lt.kernel(X, RBF) * v) < 1e-13)
  end)

  it("names bad arguments as lt.kernel does", function()
    local err = support.error_of(mpi.kernel, "points", RBF)
    assert.is_truthy(err:find("^lazytensor: mpi.kernel: "))
    assert.is_truthy(err:find("kernel"))
  end)
end)

describe("mpi.kernel gradients", function()
  local n = 333

  local function close(a, b)
    if type(b) == "number" then return math.abs(a - b) <= 1e-12 * math.abs(b) end
    return support.relative_error(a, b) < 1e-12
  end

  for _, cross in ipairs({false, true}) do
    it("bilinear_derivative equals lt.kernel's" .. (cross and " (K(x1, x2))" or ""), function()
      local X1 = support.points(21, n, 2)
      local X2 = cross and lt.randn(170, 2) or nil
      local spec = cross and MATERN or RBF
      local K = mpi.kernel(X1, X2, spec)
      local K0 = cross and lt.kernel(X1, X2, spec) or lt.kernel(X1, spec)
      local L, R = lt.randn(n, 3), lt.randn(K:size(2), 3)
      local g, g0 = K:bilinear_derivative(L, R)[K], K0:bilinear_derivative(L, R)[K0]
      local names = cross and {"lengthscale", "variance", "x1", "x2"}
                    or {"lengthscale", "variance", "x1"}
      for _, name in ipairs(names) do
        assert.is_true(close(g[name], g0[name]), name)
      end
      if not cross then assert.is_nil(g.x2) end -- K(x, x): one set of points
      -- the hyperparameters' sums are added in block order: the same bits
      -- for any number of ranks (the points' gradients: to rounding)
      support.bits("gradient hyperparameters" .. (cross and " cross" or ""),
                   {g.lengthscale, g.variance})
    end)
  end

  it("takes a dense or diagonal W on every rank, as lt.kernel", function()
    local X = support.points(22, 90, 2)
    local K, K0 = mpi.kernel(X, RBF), lt.kernel(X, RBF)
    local v = lt.randn(90)
    local a, b = K:bilinear_derivative(v, v)[K], K0:bilinear_derivative(v, v)[K0]
    assert.is_true(close(a.lengthscale, b.lengthscale))
    local q, ld, grads = K:add_diag(0.1):inv_quad_logdet(v, {grad = true})
    local q0, ld0, grads0 = K0:add_diag(0.1):inv_quad_logdet(v, {grad = true})
    assert.are.equal(q0, q)
    assert.are.equal(ld0, ld)
    assert.is_true(close(grads[K].lengthscale, grads0[K0].lengthscale))
    assert.is_true(close(grads[K].x1, grads0[K0].x1))
  end)

  it("has lt.kernel's parameters and rebuilds distributed", function()
    local X = support.points(23, 100, 2)
    local K = mpi.kernel(X, RBF)
    local p = K:params()
    assert.are.equal(RBF.lengthscale, p.lengthscale)
    assert.are.equal(RBF.variance, p.variance)
    assert.are.same(X:totable(), p.x1:totable())
    local K2 = K:with_params{[K] = {lengthscale = 2}}
    assert.are.equal("mpi_kernel", lt.type(K2))
    local ref = lt.kernel(X, {kind = "rbf", lengthscale = 2, variance = RBF.variance})
    local v = lt.randn(100)
    assert.is_true(support.relative_error(K2 * v, ref * v) < 1e-13)
  end)
end)

describe("mpi.kernel of the cosine, spectral_mixture and periodic ARD kinds", function()
  local SPECS = {
    {kind = "cosine", period = 1.9, variance = 1.4},
    {kind = "periodic", lengthscale = {0.7, 1.6}, period = 2.3, variance = 0.8},
    {kind = "spectral_mixture", num_mixtures = 2, weights = {0.6, 1.1},
     means = {{0.2, 0.45}, {0.7, 0.1}}, scales = {{0.35, 0.2}, {0.15, 0.4}}},
  }

  it("multiply and differentiate like lt.kernel", function()
    local n = 200
    local X = support.points(4, n, 2)
    for _, s in ipairs(SPECS) do
      local K, ref = mpi.kernel(X, s), lt.kernel(X, s)
      local V = lt.randn(n, 3)
      local Y = K * V
      assert.is_true(support.relative_error(Y, ref * V) < 1e-13, s.kind .. " product")
      support.bits(s.kind .. " product", Y)
      local L, R = lt.randn(n, 2), lt.randn(n, 2)
      local g = K:bilinear_derivative(L, R)[K]
      local g0 = ref:bilinear_derivative(L, R)[ref]
      for name, want in pairs(g0) do
        local got = g[name]
        assert.is_not_nil(got, s.kind .. ": no gradient of " .. name)
        if lt.is_tensor(want) then
          assert.is_true(support.relative_error(got, want) < 1e-12, s.kind .. " " .. name)
        else
          assert.is_true(math.abs(got - want) <= 1e-12 * math.max(1, math.abs(want)),
                         s.kind .. " " .. name)
        end
      end
    end
  end)
end)

-- The inner-product kinds go through the same row blocks (tiles of inner
-- products; lt.kernel's own linear product uses the low rank instead, so
-- the two agree to rounding) and the same block gradients.
describe("mpi.kernel with linear and polynomial kernels", function()
  local n = 333
  local LINEAR = {kind = "linear", variance = 0.7, offset = 0.4}
  local POLY = {kind = "polynomial", degree = 3, variance = 0.3, offset = 1}

  for _, spec in ipairs({LINEAR, POLY}) do
    it(spec.kind .. ": products, rows and gradients equal lt.kernel's", function()
      local X1, X2 = support.points(31, n, 3), support.points(32, 150, 3)
      local K, ref = mpi.kernel(X1, spec), lt.kernel(X1, spec)
      assert.is_true(K:is_psd())
      local V = lt.randn(n, 4)
      local Y = K * V
      assert.is_true(support.relative_error(Y, ref * V) < 1e-12)
      support.bits(spec.kind .. " symmetric product", Y)
      assert.are.same(ref[7]:totable(), K[7]:totable())
      assert.are.same(ref:diagonal():totable(), K:diagonal():totable())
      local C, C0 = mpi.kernel(X1, X2, spec), lt.kernel(X1, X2, spec)
      local W = lt.randn(n, 2)
      assert.is_true(support.relative_error(C:t() * W, C0:t() * W) < 1e-12)
      local L, R = lt.randn(n, 3), lt.randn(150, 3)
      local g, g0 = C:bilinear_derivative(L, R)[C], C0:bilinear_derivative(L, R)[C0]
      for _, name in ipairs({"variance", "offset"}) do
        assert.is_true(math.abs(g[name] - g0[name]) <= 1e-11 * math.abs(g0[name]), name)
      end
      for _, name in ipairs({"x1", "x2"}) do
        assert.is_true(support.relative_error(g[name], g0[name]) < 1e-11, name)
      end
      support.bits(spec.kind .. " gradient hyperparameters", {g.variance, g.offset})
    end)
  end
end)
