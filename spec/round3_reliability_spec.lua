-- Issue 26 (round 3): what adversarial and first-time use found, one
-- describe per numbered item. Each case failed before its fix: it returned
-- a NaN or a wrong answer, or raised the wrong error.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"

local NaN, inf = 0 / 0, math.huge

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  e = tostring(e)
  assert.matches("^lazytensor: ", e)
  return e
end

local function expect_error(plain, f, ...)
  local e = err_of(f, ...)
  assert.is_truthy(e:find(plain, 1, true), "expected '" .. plain .. "' in: " .. e)
  return e
end

-- Deterministic points in [0, 1)^d from a small LCG (no library RNG).
local function lcg_points(n, d, seed)
  local s, pts = seed or 12345, {}
  for i = 1, n do
    local p = {}
    for k = 1, d do
      s = (1103515245 * s + 12345) % 2147483648
      p[k] = s / 2147483648
    end
    pts[i] = p
  end
  return pts
end

local function near_list(expected, got, tol, what)
  got = got:totable()
  assert.equal(#expected, #got, what)
  for i = 1, #expected do assert.near(expected[i], got[i], tol, (what or "") .. " [" .. i .. "]") end
end

local function lcg_values(n, seed)
  local out = {}
  for i, p in ipairs(lcg_points(n, 1, seed)) do out[i] = 2 * p[1] - 1 end
  return out
end

describe("issue 26.1: {grad = true} refuses NaN and infinite input as the value path does", function()
  it("diag:inv_quad_logdet(b, {grad = true}) with a NaN or infinite b", function()
    for _, bad in ipairs{NaN, inf, -inf} do
      local b = lt.tensor{bad, 1, 1}
      expect_error("inv_quad_logdet: right-hand side has NaN or infinite entries",
                   function() return lt.diag{1, 2, 3}:inv_quad_logdet(b) end)
      expect_error("inv_quad_logdet: right-hand side has NaN or infinite entries",
                   function() return lt.diag{1, 2, 3}:inv_quad_logdet(b, {grad = true}) end)
    end
  end)

  it("a NaN matrix under {grad = true} says NaN, not 'not symmetric'", function()
    -- off the diagonal: NaN ~= NaN made the symmetry test fail first
    for _, A in ipairs{lt.tensor{{2, NaN}, {NaN, 2}}, lt.tensor{{2, 0}, {0, NaN}}} do
      local e = expect_error("inv_quad_logdet: matrix has NaN or infinite entries",
                             function() return A:inv_quad_logdet(lt.tensor{1, 1}, {grad = true}) end)
      assert.is_nil(e:find("symmetric", 1, true))
    end
    local D = lt.diag{1, inf}
    expect_error("inv_quad_logdet: matrix has NaN or infinite entries",
                 function() return D:inv_quad_logdet(lt.tensor{1, 1}, {grad = true}) end)
  end)

  it("the stochastic path (n > max_cholesky_size) refuses it before CG runs", function()
    local n = 12
    local A = lt.diag(lt.linspace(1, 2, n)) + lt.lowrank(lt.tensor(lcg_points(n, 2)))
    local b = lt.ones(n)
    b:set(5, NaN)
    lt.with_settings({max_cholesky_size = 4}, function()
      local e = expect_error("inv_quad_logdet: right-hand side has NaN or infinite entries",
                             function() return A:inv_quad_logdet(b, {grad = true}) end)
      assert.is_nil(e:find("cg", 1, true))
    end)
  end)

  it("the grad path still works on finite input (the check refuses only what it must)", function()
    local q, ld, g = lt.diag{2, 4}:inv_quad_logdet(lt.tensor{2, 2}, {grad = true})
    assert.near(3, q, 1e-14)
    assert.near(math.log(8), ld, 1e-14)
    assert.equal("table", type(g))
  end)

  it("mvn:log_prob(x, {grad = true}) with a NaN x raises, as without grad", function()
    local d = lt.mvn(lt.zeros(3), lt.diag{1, 2, 3})
    local x = lt.tensor{NaN, 1, 1}
    expect_error("has NaN or infinite entries", function() return d:log_prob(x) end)
    expect_error("has NaN or infinite entries", function() return d:log_prob(x, {grad = true}) end)
  end)

  it("gp.exact and gp.sgpr refuse NaN or infinite targets and inputs at construction", function()
    local k = gp.kernels.rbf{}
    expect_error("gp: y[2] must be a finite number",
                 gp.exact, {x = {1, 2, 3, 4}, y = {1, NaN, 3, 1}, kernel = k})
    expect_error("gp: y[4] must be a finite number",
                 gp.exact, {x = {1, 2, 3, 4}, y = lt.tensor{1, 2, 3, inf}, kernel = k})
    expect_error("gp: x[2][1] must be a finite number",
                 gp.exact, {x = {1, NaN, 3, 4}, y = {1, 2, 3, 1}, kernel = k})
    expect_error("gp: x[3][2] must be a finite number",
                 gp.exact, {x = {{1, 1}, {2, 2}, {3, -inf}}, y = {1, 2, 3}, kernel = k})
    expect_error("gp: y[2] must be a finite number",
                 gp.sgpr, {x = {1, 2, 3, 4}, y = {1, NaN, 3, 1}, kernel = k, inducing = 2})
    -- a batch names the member
    expect_error("member 1: y[2] must be a finite number",
                 gp.exact, {x = lt.tensor{{{0.1}, {0.4}, {0.7}}, {{0.2}, {0.5}, {0.9}}},
                            y = lt.tensor{{1, NaN, 2}, {1, 2, 3}}, kernel = k})
  end)
end)

describe("issue 26.2: grid detection in many dimensions", function()
  it("30 scattered points in 13, 14 and 20 dimensions (and 4 in 32) use the kernel structure", function()
    for _, case in ipairs{{30, 13}, {30, 14}, {30, 20}, {4, 32}} do
      local n, d = case[1], case[2]
      local x = lt.tensor(lcg_points(n, d, 7 + d))
      local m = gp.exact{x = x, y = lcg_values(n, 3), kernel = gp.kernels.rbf{lengthscale = 2}}
      assert.matches("^kernel:", m:explain())
      local v = m:mll()
      -- against the dense computation of the same MLL
      local Kd = lt.kernel(x, {kind = "rbf", lengthscale = 2}):dense():add_diag(m.noise)
      local r = lt.tensor(lcg_values(n, 3)) - m.mean_value
      local q, ld = Kd:inv_quad_logdet(r)
      assert.near(-0.5 * (q + ld + n * math.log(2 * math.pi)), v, 1e-8 * math.abs(v))
    end
  end)

  it("a real grid in 2-d is still found", function()
    local pts = {}
    for i = 1, 4 do for j = 1, 3 do pts[#pts + 1] = {i, j} end end
    local m = gp.exact{x = pts, y = lcg_values(12, 5), kernel = gp.kernels.rbf{}}
    assert.matches("^kron", m:explain())
  end)
end)

describe("issue 26.3: A:dense() of a PSD operator is known PSD", function()
  it("for every lt.kernel kind that is PSD, and for lt.psd of a lazy operator", function()
    local x = lt.tensor{{0}, {0.5}, {1.5}}
    local specs = {
      {kind = "rbf", lengthscale = 1}, {kind = "matern12", lengthscale = 1},
      {kind = "matern32", lengthscale = 1}, {kind = "matern52", lengthscale = 1},
      {kind = "periodic", lengthscale = 1, period = 2}, {kind = "rq", lengthscale = 1, alpha = 2},
      {kind = "linear"}, {kind = "polynomial"}, {kind = "cosine", period = 3},
    }
    for _, spec in ipairs(specs) do
      local K = lt.kernel(x, spec)
      assert.is_true(K:is_psd(), spec.kind)
      assert.is_true(K:dense():is_psd(), spec.kind .. ": dense()")
      assert.is_true((2 * K):dense():is_psd(), spec.kind .. ": (2K):dense()")
    end
    local T = lt.psd(lt.toeplitz(lt.tensor{2, 1, 0}))
    assert.is_true(T:dense():is_psd())
  end)

  it("and nothing more: unknown and non-PSD operators' dense forms are not marked", function()
    local T = lt.toeplitz(lt.tensor{2, 1, 0})
    assert.is_nil(T:is_psd())
    assert.is_nil(T:dense():is_psd())
    local x = lt.tensor{{0, 0}, {1, 0}, {0.5, 0.8660254037844386}}
    -- cosine in 2-d is not PSD (API.md): its dense form must not say it is
    local C = lt.kernel(x, {kind = "cosine", period = 1})
    assert.is_not_true(C:is_psd())
    assert.is_not_true(C:dense():is_psd())
    -- the flag is on the fresh dense result only, never on a shared tensor
    local A = lt.tensor{{2, 1}, {1, 2}}
    local P = lt.psd(A)
    assert.is_true(P:dense():is_psd())
    assert.equal(lt.is_psd(A), A:is_psd()) -- A itself unchanged by P's dense()
  end)

  it("A:clone() of a PSD dense tensor is PSD (API.md, second round)", function()
    local P = lt.psd(lt.tensor{{2, 1, 0}, {1, 2, 1}, {0, 1, 2}})
    assert.is_true(P:clone():is_psd())
    assert.is_true(P:clone():is_symmetric())
    local c = P:clone()
    c:set(1, 2, 5) -- a write lapses the copied flag as any flag
    assert.is_false(c:is_psd())
  end)
end)

describe("issue 26.4: lt.toeplitz(c, r) keeps its row as a parameter", function()
  it("a 1x1 Toeplitz matrix made with a row has it in params()", function()
    local T = lt.toeplitz(lt.tensor{2}, lt.tensor{2})
    local p = T:params()
    assert.equal(2, p.column:get(1))
    assert.equal(2, p.row:get(1))
    local W = T:with_params{[T] = {row = lt.tensor{2}, column = lt.tensor{3}}}
    assert.equal(3, W:get(1, 1))
  end)

  it("an n×n one with r == c too, with separate gradients for column and row", function()
    local T = lt.toeplitz(lt.tensor{2, 1, 0.5}, lt.tensor{2, 1, 0.5})
    assert.is_true(T:is_symmetric())
    local p = T:params()
    assert.is_truthy(p.row)
    -- d tr(Lᵀ T R)/d c, d/d r for L = e1, R = e2: T[1][2] = r[2] only
    local g = T:bilinear_derivative(lt.tensor{1, 0, 0}, lt.tensor{0, 1, 0})[T]
    near_list({0, 0, 0}, g.column, 1e-14, "column") -- FFT sums: rounding only
    near_list({0, 1, 0}, g.row, 1e-14, "row")
    -- a new row gives a non-symmetric matrix
    local W = T:with_params{[T] = {row = lt.tensor{2, 7, 0.5}}}
    assert.equal(7, W:get(1, 2))
    assert.equal(1, W:get(2, 1))
  end)

  it("lt.toeplitz(c) without r has only its column, whose gradient folds both sides", function()
    local S = lt.toeplitz(lt.tensor{2, 1, 0.5})
    assert.is_nil(S:params().row)
    local g = S:bilinear_derivative(lt.tensor{1, 0, 0}, lt.tensor{0, 1, 0})[S]
    near_list({0, 1, 0}, g.column, 1e-14, "column")
    assert.is_nil(g.row)
  end)
end)

describe("issue 26.5: SKI refuses a grid too large at once", function()
  it("grid = 1e9 and 1e7 are refused in well under a second, naming the grid", function()
    local x, y = lcg_values(20, 2), lcg_values(20, 4)
    for _, g in ipairs{1e9, 1e7, 2000} do
      local t0 = os.clock()
      local m = gp.exact{x = lcg_points(20, 2, 9), y = y, kernel = gp.kernels.rbf{}, structure = "ski",
                         grid = g}
      expect_error("structure = 'ski' with grid = ", function() return m:mll() end)
      assert.is_true(os.clock() - t0 < 1)
    end
    local m = gp.exact{x = x, y = y, kernel = gp.kernels.rbf{}, structure = "ski", grid = 1e7}
    expect_error("more than the 1e+06 SKI allows", function() return m:mll() end)
  end)

  it("a grid within the limit still works", function()
    local m = gp.exact{x = lcg_values(20, 2), y = lcg_values(20, 4), kernel = gp.kernels.rbf{},
                       structure = "ski", grid = 200}
    local v = m:mll()
    assert.is_true(v == v and v > -math.huge)
  end)
end)

describe("issue 26.6: errors point the right way", function()
  it("a Toeplitz matrix known not symmetric is 'not symmetric' on the stochastic grad path", function()
    local T = lt.toeplitz(lt.tensor{3, 1, 0.5, 0.2, 0.1, 0}, lt.tensor{3, 0.9, 0.4, 0.2, 0.1, 0})
    assert.is_false(T:is_symmetric())
    lt.with_settings({max_cholesky_size = 3}, function()
      local e = expect_error("inv_quad_logdet: the operator is not symmetric",
                             function() return T:inv_quad_logdet(lt.ones(6), {grad = true}) end)
      assert.is_nil(e:find("unknown", 1, true))
    end)
  end)

  it("bilinear_derivative with a lazy W says it is lazy, not a shape problem", function()
    local D = lt.diag{1, 2, 3, 4, 5}
    local e = expect_error("W must be a dense matrix, got a lazy diag operator",
                           function() return D:bilinear_derivative(lt.diag{1, 1, 1, 1, 1}) end)
    assert.is_nil(e:find("got 5x5", 1, true))
    -- and the dense W it asks for works: <W, ∂D/∂d> = diag(W)
    local g = D:bilinear_derivative(lt.diag{1, 2, 3, 4, 5}:dense())
    assert.same({1, 2, 3, 4, 5}, g[D].diag:totable())
  end)

  it("gp.sgpr with jitter = 0 and a near-singular Kzz names Kzz, not a bare 'cholesky'", function()
    -- 18 of 23 points in the unit square as inducing points, lengthscale 3:
    -- Kzz is singular to working precision
    local pts = lcg_points(23, 2, 99)
    local Z = {}
    for i = 1, 18 do Z[i] = pts[i] end
    local m = gp.sgpr{x = pts, y = lcg_values(23, 8), kernel = gp.kernels.rbf{lengthscale = 3},
                      inducing = Z, jitter = 0, noise = 1e-4, fixed = {noise = true}}
    local e = expect_error("sgpr: Kzz + jitter·I (the inducing points' kernel matrix, jitter = 0)",
                           function() return m:mll() end)
    assert.is_truthy(e:find("raise jitter", 1, true))
    -- the default jitter fits the same model
    local ok = gp.sgpr{x = pts, y = lcg_values(23, 8), kernel = gp.kernels.rbf{lengthscale = 3},
                       inducing = Z, noise = 1e-4, fixed = {noise = true}}
    local v = ok:mll()
    assert.is_true(v == v)
  end)
end)

describe("issue 26.7: lt.with_settings restores the settings it was given, and only those", function()
  it("a setting fn assigns itself stays; those in the table go back, also on error", function()
    local mcs, tol, nts = lt.settings.max_cholesky_size, lt.settings.cg_tolerance,
                          lt.settings.num_trace_samples
    local inside = lt.with_settings({max_cholesky_size = 5}, function()
      lt.settings.cg_tolerance = tol * 10
      return lt.settings.max_cholesky_size
    end)
    assert.equal(5, inside)
    assert.equal(mcs, lt.settings.max_cholesky_size)
    assert.equal(tol * 10, lt.settings.cg_tolerance)
    lt.settings.cg_tolerance = tol
    local ok = pcall(lt.with_settings, {max_cholesky_size = 7}, function()
      lt.settings.max_cholesky_size = 9 -- in the table: restored anyway
      lt.settings.num_trace_samples = nts + 3
      error("boom")
    end)
    assert.is_false(ok)
    assert.equal(mcs, lt.settings.max_cholesky_size)
    assert.equal(nts + 3, lt.settings.num_trace_samples)
    lt.settings.num_trace_samples = nts
  end)

  it("nested calls each restore their own keys, progress included", function()
    local f = function() end
    lt.with_settings({progress = f}, function()
      lt.with_settings({max_cholesky_size = 3}, function()
        assert.equal(f, lt.settings.progress)
      end)
      assert.equal(f, lt.settings.progress)
      assert.equal(800, lt.settings.max_cholesky_size)
    end)
    assert.is_nil(lt.settings.progress)
  end)
end)

describe("issue 26.9: fit's lr belongs to adam", function()
  it("lr with the default L-BFGS is an error, with adam it is the step", function()
    local m = gp.exact{x = {0.1, 0.3, 0.5, 0.9}, y = {1, 2, 1, 0}, kernel = gp.kernels.rbf{}}
    expect_error("fit: lr is the step of method = 'adam'", m.fit, m, {lr = 0.1})
    local before = m:mll()
    local r = m:fit{method = "adam", lr = 0.05, max_iter = 20}
    assert.is_true(r.mll > before)
  end)
end)

describe("issue 26, not yet tried before: ground the first rounds' fuzzers did not cover", function()
  -- 1-d points on [0, 8) and targets from the LCG
  local n = 400
  local pts, y = lcg_points(n, 1, 4242), {}
  for i = 1, n do
    pts[i][1] = 8 * pts[i][1]
    y[i] = math.sin(2 * pts[i][1]) + 0.1 * math.cos(7 * i)
  end

  it("periodic and spectral-mixture kernels under the stochastic estimator match the exact MLL",
     function()
       local kinds = {
         {"periodic", gp.kernels.periodic{lengthscale = 1, period = 3}},
         {"spectral_mixture", gp.kernels.spectral_mixture_from_data(pts, y, 2)},
         {"rbf * periodic", gp.kernels.rbf{} * gp.kernels.periodic{period = 3}},
       }
       for _, case in ipairs(kinds) do
         local m = gp.exact{x = pts, y = y, kernel = case[2], noise = 0.1, structure = "kernel"}
         local v, g = m:mll_and_grad()
         lt.manual_seed(11)
         local vs, gs = lt.with_settings({max_cholesky_size = 100, num_trace_samples = 30}, function()
           return m:mll_and_grad()
         end)
         local _, info = lt.with_settings({max_cholesky_size = 100}, function() return m:mll() end)
         assert.equal("slq", info.method, case[1])
         assert.is_true(info.converged, case[1])
         -- measured: 1e-5 nats a point and 4e-4 relative gradient error
         -- (the rank-64 control variate); the bounds leave a factor 10+
         assert.near(v, vs, 1e-3 * n, case[1] .. ": mll")
         for p = 1, #g do
           assert.near(g[p], gs[p], 1e-2 * (1 + math.abs(g[p])), case[1] .. ": gradient " .. p)
         end
       end
     end)

  it("LOVE on a batch of GPs gives the exact predictive variances", function()
    local X, Y = {}, {}
    for b = 1, 3 do
      X[b], Y[b] = {}, {}
      for i = 1, 120 do
        X[b][i] = {pts[i + 40 * b][1] / 8}
        Y[b][i] = y[i + 40 * b]
      end
    end
    local m = gp.exact{x = lt.tensor(X), y = lt.tensor(Y), kernel = gp.kernels.rbf{lengthscale = 0.3},
                       noise = 0.05}
    local xs = lt.tensor{{{0.1}, {0.5}}, {{0.2}, {0.9}}, {{0.33}, {0.7}}}
    local mean, var = m:predict(xs)
    local lmean, lvar = m:predict(xs, {love = true})
    assert.same(mean:shape(), lvar:shape())
    assert.is_true((var - lvar):abs():max() < 1e-8)
    assert.is_true((mean - lmean):abs():max() < 1e-12)
  end)
end)
