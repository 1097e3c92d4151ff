-- Products, scales and nested trees of kernels in lazytensor.gp's "kernel"
-- structure: lt.kernel leaves under lt.add and lt.mul (the lazy Hadamard
-- product), scale factors folded into the variances. Checked against
-- kernels written out again here and a plain-Lua Cholesky (MLL to 1e-9,
-- posterior mean and covariance to 1e-8), gradients against central
-- differences, and the iterative path against the exact one.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ref = require "support.ref"
local K = gp.kernels
local cholesky, chol_solve, close = ref.cholesky, ref.chol_solve, ref.close

local unpack = table.unpack or unpack -- luacheck: ignore 143 (Lua 5.1's global)

---------------------------------------------------- plain-Lua reference --

-- Base kernels by API.md's formulas: p = {l (number or one per dim), v,
-- period, alpha, dims}.
local function base_value(kind, p, x, y)
  if kind == "linear" or kind == "polynomial" then
    local t = p.c
    for _, d in ipairs(p.dims) do t = t + x[d] * y[d] end
    return p.v * t ^ (p.degree or 1)
  end
  if kind == "periodic" then
    local s = 0
    for _, d in ipairs(p.dims) do s = s + math.sin(math.pi * math.abs(x[d] - y[d]) / p.period) ^ 2 end
    return p.v * math.exp(-2 * s / p.l ^ 2)
  end
  local q = 0
  for i, d in ipairs(p.dims) do
    local l = type(p.l) == "table" and p.l[i] or p.l
    q = q + ((x[d] - y[d]) / l) ^ 2
  end
  if kind == "rbf" then return p.v * math.exp(-q / 2) end
  if kind == "rq" then return p.v * (1 + q / (2 * p.alpha)) ^ -p.alpha end
  local r = math.sqrt(q)
  if kind == "matern12" then return p.v * math.exp(-r) end
  if kind == "matern32" then
    local a = math.sqrt(3) * r
    return p.v * (1 + a) * math.exp(-a)
  end
  local a = math.sqrt(5) * r -- matern52
  return p.v * (1 + a + a * a / 3) * math.exp(-a)
end

-- A reference tree: {"sum", t1, t2, ...}, {"product", t1, ...},
-- {"scale", s, t}, or {kind, p}.
local function tree_value(t, x, y)
  local op = t[1]
  if op == "sum" or op == "product" then
    local acc = op == "sum" and 0 or 1
    for i = 2, #t do
      local v = tree_value(t[i], x, y)
      acc = op == "sum" and acc + v or acc * v
    end
    return acc
  end
  if op == "scale" then return t[2] * tree_value(t[3], x, y) end
  return base_value(op, t[2], x, y)
end

local function ref_matrix(t, A, B)
  local M = {}
  for i = 1, #A do
    M[i] = {}
    for j = 1, #B do M[i][j] = tree_value(t, A[i], B[j]) end
  end
  return M
end

-- The exact GP by loops: the MLL, and the posterior mean and covariance at S.
local function ref_gp(t, P, y, noise, mean, S)
  local n = #P
  local A = ref_matrix(t, P, P)
  for i = 1, n do A[i][i] = A[i][i] + noise end
  local L = cholesky(A)
  local r = {}
  for i = 1, n do r[i] = y[i] - mean end
  local alpha = chol_solve(L, r)
  local q, ld = 0, 0
  for i = 1, n do
    q = q + r[i] * alpha[i]
    ld = ld + 2 * math.log(L[i][i])
  end
  local mll = -0.5 * (q + ld + n * math.log(2 * math.pi))
  local Ksx, Kss = ref_matrix(t, S, P), ref_matrix(t, S, S)
  local mu, V, C = {}, {}, {}
  for i = 1, #S do
    mu[i] = mean
    for j = 1, n do mu[i] = mu[i] + Ksx[i][j] * alpha[j] end
    V[i] = chol_solve(L, Ksx[i])
  end
  for i = 1, #S do
    C[i] = {}
    for j = 1, #S do
      local s = Kss[i][j]
      for k = 1, n do s = s - Ksx[i][k] * V[j][k] end
      C[i][j] = s
    end
  end
  return mll, mu, C
end

------------------------------------------------------------------ data --

local targets = ref.sine_targets
local function scattered(...) return (ref.scattered(...)) end -- the points alone
local check_gradient = ref.check_model_gradient

------------------------------------------------------------------ cases --

-- {name, d, the gp kernel, the reference tree, the lt type of K}
local function cases()
  return {
    {"rbf(dims 1) * matern52(dims 2)", 2,
     K.rbf{lengthscale = 0.7, variance = 1.3, dims = {1}}
       * K.matern52{lengthscale = 1.4, variance = 0.6, dims = {2}},
     {"product", {"rbf", {l = 0.7, v = 1.3, dims = {1}}},
      {"matern52", {l = 1.4, v = 0.6, dims = {2}}}}, "hadamard"},
    {"rbf * periodic on 1-d scattered inputs", 1,
     K.rbf{lengthscale = 2.5, variance = 1.1} * K.periodic{lengthscale = 0.9, period = 1.3},
     {"product", {"rbf", {l = 2.5, v = 1.1, dims = {1}}},
      {"periodic", {l = 0.9, period = 1.3, v = 1, dims = {1}}}}, "hadamard"},
    {"scale of an ARD rbf", 2, K.scale(K.rbf{lengthscale = {0.6, 1.5}, variance = 0.8}, 2.5),
     {"scale", 2.5, {"rbf", {l = {0.6, 1.5}, v = 0.8, dims = {1, 2}}}}, "kernel"},
    {"scale of a sum (fixed variance inside)", 2,
     K.scale(K.rbf{lengthscale = 0.5, dims = {1}, fixed = {variance = true}}
             + K.matern32{lengthscale = 1.1, variance = 0.4, dims = {2}}, 1.7),
     {"scale", 1.7, {"sum", {"rbf", {l = 0.5, v = 1, dims = {1}}},
                     {"matern32", {l = 1.1, v = 0.4, dims = {2}}}}}, "sum"},
    {"products with ARD (rbf * rq) and a fixed period", 2,
     K.rbf{lengthscale = {0.7, 1.3}, variance = 0.9}
       * K.rq{lengthscale = {1.1, 0.6}, alpha = 0.8}
       * K.periodic{lengthscale = 1.2, period = 2.2, dims = {2}, fixed = {period = true}},
     {"product", {"rbf", {l = {0.7, 1.3}, v = 0.9, dims = {1, 2}}},
      {"rq", {l = {1.1, 0.6}, alpha = 0.8, v = 1, dims = {1, 2}}},
      {"periodic", {l = 1.2, period = 2.2, v = 1, dims = {2}}}}, "hadamard"},
    {"nested: (s·(rbf + periodic)) * (matern32 + s·rq) + s·(matern12 * rbf)", 2,
     K.scale(K.rbf{lengthscale = 0.8, dims = {1}} + K.periodic{period = 1.9, dims = {2}}, 1.4)
       * (K.matern32{lengthscale = 1.3, variance = 0.7}
          + K.scale(K.rq{lengthscale = 0.9, alpha = 2.1, dims = {1}}, 0.5))
       + K.scale(K.matern12{lengthscale = 2.2, dims = {2}} * K.rbf{lengthscale = {1.6, 0.9}}, 0.3),
     {"sum",
      {"product",
       {"scale", 1.4, {"sum", {"rbf", {l = 0.8, v = 1, dims = {1}}},
                       {"periodic", {l = 1, period = 1.9, v = 1, dims = {2}}}}},
       {"sum", {"matern32", {l = 1.3, v = 0.7, dims = {1, 2}}},
        {"scale", 0.5, {"rq", {l = 0.9, alpha = 2.1, v = 1, dims = {1}}}}}},
      {"scale", 0.3, {"product", {"matern12", {l = 2.2, v = 1, dims = {2}}},
                      {"rbf", {l = {1.6, 0.9}, v = 1, dims = {1, 2}}}}}}, "sum"},
    {"inner-product kinds in products: s·(rbf * linear) + polynomial * matern32", 2,
     K.scale(K.rbf{lengthscale = 1.1, dims = {1}} * K.linear{variance = 0.4, offset = 0.5,
                                                             dims = {2}}, 1.3)
       + K.polynomial{degree = 2, variance = 0.2, offset = 1.5}
         * K.matern32{lengthscale = 2, dims = {1}},
     {"sum", {"scale", 1.3, {"product", {"rbf", {l = 1.1, v = 1, dims = {1}}},
                             {"linear", {v = 0.4, c = 0.5, dims = {2}}}}},
      {"product", {"polynomial", {v = 0.2, c = 1.5, degree = 2, dims = {1, 2}}},
       {"matern32", {l = 2, v = 1, dims = {1}}}}}, "sum"},
    {"scale of a scale of a product of three", 2,
     K.scale(K.scale(K.matern52{lengthscale = 0.9, dims = {1}} * K.rbf{lengthscale = 1.2, dims = {2}}
                     * K.matern12{lengthscale = 3}, 2), 0.6),
     {"scale", 0.6, {"scale", 2, {"product", {"matern52", {l = 0.9, v = 1, dims = {1}}},
                                  {"rbf", {l = 1.2, v = 1, dims = {2}}},
                                  {"matern12", {l = 3, v = 1, dims = {1, 2}}}}}}, "hadamard"},
  }
end

------------------------------------------------------------------ specs --

describe("gp kernel trees (products, scales) in the kernel structure", function()
  for ci, case in ipairs(cases()) do
    local name, d, kernel, tree, ktype = unpack(case)
    it(name .. ": lt.kernel operators; MLL to 1e-9 of plain Lua, gradient to central "
       .. "differences, posterior to 1e-8", function()
      -- (60 points: fewer could pass as a sparse grid, which a separable
      -- product takes as a masked Kronecker product)
      local P = scattered(60, d, 40 + ci, 4)
      local y = targets(P)
      local S = scattered(4, d, 900 + ci, 4)
      local noise, mean = 0.04, 0.15
      local model = gp.exact{x = P, y = y, kernel = kernel, noise = noise, mean_value = mean}
      local e = model:explain()
      assert.matches("^kernel: 60 inputs", e)
      assert.matches("is computed by lt.kernel in C", e, 1, true)
      assert.equal(ktype, lt.type(model:covariance().K))
      local mll, mu, C = ref_gp(tree, P, y, noise, mean, S)
      close(model:mll(), mll, 1e-9, name .. ": mll")
      local value, grad = model:mll_and_grad()
      close(value, mll, 1e-9, name .. ": mll_and_grad")
      assert.equal(kernel:count() + 2, #grad)
      check_gradient(model, grad, name)
      local post = model:posterior(S)
      local cov, m = post:covariance():dense(), post:mean()
      for i = 1, #S do
        close(m[i], mu[i], 1e-8, "mean " .. i, 1e-10)
        for j = 1, #S do close(cov:get(i, j), C[i][j], 1e-8, "cov " .. i .. "," .. j, 1e-10) end
      end
      local pm, pv = model:predict(S)
      for i = 1, #S do
        close(pm[i], mu[i], 1e-8, "predict mean " .. i, 1e-10)
        close(pv[i], C[i][i], 1e-8, "predict variance " .. i, 1e-10)
      end
    end)
  end

  it("links every free hyperparameter to an lt.kernel leaf of Ky", function()
    local P = scattered(50, 2, 5, 4)
    for _, case in ipairs(cases()) do
      local kernel = case[3]
      local cov = gp.structure.build(kernel, P, {structure = "kernel"})
      local _, links = cov.noisy(0.1)
      local covered = {}
      for _, link in ipairs(links) do
        if not link.noise then
          assert.equal("kernel", lt.type(link.leaf))
          for p in pairs(link.d) do covered[p] = true end
        end
      end
      for p = 1, kernel:count() do assert.is_true(covered[p], case[1] .. ": parameter " .. p) end
    end
  end)

  it("adds the gradients of a kernel that appears more than once (r * m + r)", function()
    local P = scattered(60, 2, 77, 4)
    local y = targets(P)
    local r = K.rbf{lengthscale = 0.9, variance = 0.7, dims = {1}}
    local kernel = r * K.matern52{lengthscale = 1.2, dims = {2}} + r
    local model = gp.exact{x = P, y = y, kernel = kernel, noise = 0.05}
    assert.matches("^kernel", model:explain())
    local tree = {"sum", {"product", {"rbf", {l = 0.9, v = 0.7, dims = {1}}},
                          {"matern52", {l = 1.2, v = 1, dims = {2}}}},
                  {"rbf", {l = 0.9, v = 0.7, dims = {1}}}}
    close(model:mll(), (ref_gp(tree, P, y, 0.05, model.mean_value, {})), 1e-9, "mll")
    local _, grad = model:mll_and_grad()
    -- parameters: r's (lengthscale, variance), matern52's two, r's again:
    -- each of r's gets the derivative with respect to r's one shared value
    local params = kernel:parameters()
    assert.equal(6, #params)
    for _, name in ipairs{"lengthscale", "variance"} do
      local v0, h = r.values[name], 1e-5
      r.values[name] = v0 * math.exp(h)
      local fp = model:mll()
      r.values[name] = v0 * math.exp(-h)
      local fm = model:mll()
      r.values[name] = v0
      local fd, seen = (fp - fm) / (2 * h), 0
      for p, par in ipairs(params) do
        if par.kernel == r and par.name == name then
          close(grad[p], fd, 1e-6, "shared " .. name .. " (parameter " .. p .. ")", 1e-7)
          seen = seen + 1
        end
      end
      assert.equal(2, seen)
    end
  end)

  it("refuses products with distributed = true, takes scales there", function()
    local P = scattered(30, 2, 3, 4)
    -- opts.make_kernel is how gp.exact's distributed = true passes mpi.kernel
    local ok, err = pcall(gp.structure.build, K.rbf{dims = {1}} * K.rbf{dims = {2}}, P,
                          {make_kernel = lt.kernel})
    assert.is_false(ok)
    assert.matches("^lazytensor: gp: distributed = true needs a sum of base kernels %(scale "
                   .. "allowed%): a product of kernels %(rbf %* rbf%)", err)
    local cov = gp.structure.build(K.scale(K.rbf{}, 2) + K.matern32{}, P, {make_kernel = lt.kernel})
    assert.equal("kernel", cov.kind)
    close(cov.K:get(1, 1), 3, 1e-15, "s·v + v")
  end)
end)

describe("gp kernel trees: the iterative path", function()
  it("agrees with the exact one above max_cholesky_size (MLL within 1%, gradient within 10%)",
     function()
    local P = scattered(500, 2, 11, 3)
    local y = targets(P)
    local kernel = K.rbf{lengthscale = 0.8, dims = {1}} * K.matern52{lengthscale = 1.1, dims = {2}}
                   + K.scale(K.periodic{period = 1.5, dims = {1}}, 0.3)
    local model = gp.exact{x = P, y = y, kernel = kernel, noise = 0.1}
    local ev, eg = model:mll_and_grad()
    lt.manual_seed(21)
    local cg = 0
    local v, g = lt.with_settings({max_cholesky_size = 100, num_trace_samples = 20}, function()
      lt.settings.progress = function(ev_)
        if ev_.method == "cg" then cg = cg + 1 end
      end
      return model:mll_and_grad()
    end)
    assert.is_true(cg > 0, "the iterative path ran no CG")
    close(v, ev, 0.01, "iterative mll")
    for p = 1, #g do close(g[p], eg[p], 0.1, "stochastic gradient " .. p, 0.5) end
  end)
end)
