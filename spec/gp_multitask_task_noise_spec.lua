-- gp.multitask{task_noise = true} with every value observed: the whitened
-- eigen rule (Ky = (S ⊗ I)(B̃ ⊗ K + I)(S ⊗ I), S = diag(σ² + τ)^½) against a
-- plain-Lua dense Cholesky MLL, the general path (the lazy (B ⊗ K)[obs, obs]
-- + diag(σ² + τ_task), exact at these sizes) for value, gradient and
-- predictions, central differences, for t = 2..4, rank 1 and full, free
-- and fixed task noise, fixed σ², and a bounded fit.
local gp = require "lazytensor.gp"
local ref = require "support.ref"
local close = ref.close

local log, pi, exp = math.log, math.pi, math.exp

-- Park and Miller's generator: the same data on every Lua.
local function generator(seed)
  local s = seed
  return function()
    s = (s * 16807) % 2147483647
    return s / 2147483647
  end
end

local function data(n, t, seed)
  local rnd = generator(seed)
  local x, Y = {}, {}
  for i = 1, n do
    x[i] = {rnd(), rnd()}
    Y[i] = {}
    for a = 1, t do
      Y[i][a] = math.sin(3 * x[i][1] + a) * (1 + 0.3 * a) + 0.5 * x[i][2] + 0.2 * (rnd() - 0.5)
    end
  end
  return x, Y
end

-- The MLL in plain Lua: B ⊗ K + diag(σ² + τ_a) ⊗ I, K read from the model's
-- own kernel matrix entries by k(x_i, x_j) computed here (rbf, one lengthscale).
local function dense_mll(model)
  local n, t = model.n, model.t
  local W, v = model.W:totable(), model.v
  local l, kv = model.kernel.values.lengthscale, model.kernel.values.variance
  local function k(p, q)
    local s = 0
    for j = 1, #p do s = s + ((p[j] - q[j]) / l) ^ 2 end
    return kv * exp(-0.5 * s)
  end
  local C, r = {}, {}
  for a = 1, t do
    for i = 1, n do
      local row = {}
      for b = 1, t do
        local B = a == b and v[a] or 0
        for c = 1, model.rank do B = B + W[a][c] * W[b][c] end
        for j = 1, n do
          row[(b - 1) * n + j] = B * k(model.points[i], model.points[j])
        end
      end
      local p = (a - 1) * n + i
      row[p] = row[p] + model.noise + (model.task_noise and model.task_noise[a] or 0)
      C[p] = row
      r[p] = model.rows[i][a] - model.means[a]
    end
  end
  local L = ref.cholesky(C)
  local alpha = ref.chol_solve(L, r)
  local q, ld = 0, 0
  for p = 1, #r do
    q = q + r[p] * alpha[p]
    ld = ld + 2 * log(L[p][p])
  end
  return -0.5 * (q + ld + #r * log(2 * pi))
end

-- The general path's answer: the same model with the eigen rule switched off.
local function general(model, f)
  model.complete = false
  local ok, a, b = pcall(f)
  model.complete = true
  assert(ok, a)
  return a, b
end

local function model_for(t, rank, opts)
  local x, Y = data(10, t, 11 + 7 * t + rank)
  local spec = {x = x, y = Y, kernel = gp.kernels.rbf{lengthscale = 0.45}, rank = rank,
                task_noise = true}
  for key, value in pairs(opts or {}) do spec[key] = value end
  local m = gp.multitask(spec)
  local tau = {}
  for a = 1, t do tau[a] = 0.003 * a * a + 0.001 end
  m.task_noise = tau
  -- W away from its initial value, so B's eigenvectors are not aligned with the noises
  local W = m.W:totable()
  for a = 1, t do
    for c = 1, rank do W[a][c] = W[a][c] + 0.2 * math.sin(a + 3 * c) end
  end
  m.W = require("lazytensor").tensor(W)
  return m
end

describe("gp.multitask: per-task noise by the whitened eigen rule", function()
  for t = 2, 4 do
    for _, rank in ipairs{1, t} do
      for _, fixed in ipairs{false, true} do
        local what = string.format("t = %d, rank %d, task noise %s", t, rank,
                                   fixed and "fixed" or "free")
        it(what .. ": MLL and gradient against dense, the general path and differences",
           function()
          local m = model_for(t, rank, fixed and {fixed = {task_noise = true}} or nil)
          assert.is_true(m.complete)
          local value, g = m:mll_and_grad()
          close(value, dense_mll(m), 1e-10, what .. ": against the dense Cholesky MLL")
          close(m:mll(), value, 1e-13, what .. ": mll = mll_and_grad's value")
          local gvalue, gg = general(m, function() return m:mll_and_grad() end)
          close(value, gvalue, 1e-10, what .. ": against the general path")
          assert.equal(#gg, #g)
          assert.equal(#m:get_vector(), #g)
          for p = 1, #g do
            close(g[p], gg[p], 1e-9, what .. ": d/dθ " .. p .. " against the general path", 1e-9)
          end
          ref.check_model_gradient(m, g, what)
        end)
      end
    end
  end

  it("fixed σ² and zero means: the entries left match the general path", function()
    local m = model_for(3, 2, {fixed = {noise = true}, mean = "zero"})
    local value, g = m:mll_and_grad()
    close(value, dense_mll(m), 1e-10, "fixed noise: dense")
    local gvalue, gg = general(m, function() return m:mll_and_grad() end)
    close(value, gvalue, 1e-10, "fixed noise: general path")
    assert.equal(#gg, #g)
    for p = 1, #g do close(g[p], gg[p], 1e-9, "fixed noise: d/dθ " .. p, 1e-9) end
    ref.check_model_gradient(m, g, "fixed noise")
  end)

  it("without task noise, the whitened rule is the shared-noise rule (dense MLL)", function()
    local x, Y = data(10, 3, 5)
    local m = gp.multitask{x = x, y = Y, kernel = gp.kernels.rbf{lengthscale = 0.45}, rank = 2}
    local value, g = m:mll_and_grad()
    close(value, dense_mll(m), 1e-10, "shared: dense")
    local gvalue, gg = general(m, function() return m:mll_and_grad() end)
    close(value, gvalue, 1e-10, "shared: general path")
    for p = 1, #g do close(g[p], gg[p], 1e-9, "shared: d/dθ " .. p, 1e-9) end
  end)

  for t = 2, 4 do
    it("predictions, t = " .. t .. ": mean and variance against the general path", function()
      local m = model_for(t, 1)
      local xs = {{0.3, 0.7}, {0.9, 0.1}, {0.55, 0.55}}
      local mean, var = m:predict(xs)
      local gmean, gvar = general(m, function() return m:predict(xs) end)
      for s = 1, #xs do
        for a = 1, t do
          close(mean:get(s, a), gmean:get(s, a), 1e-9, "mean " .. s .. "," .. a, 1e-11)
          close(var:get(s, a), gvar:get(s, a), 1e-8, "variance " .. s .. "," .. a, 1e-11)
          assert.is_true(var:get(s, a) > 0)
        end
      end
      local only = m:predict(xs, {variance = false})
      close(only:get(2, t), mean:get(2, t), 1e-14, "variance = false")
    end)
  end

  it("bounds on the task noises: a fit stays inside them, the gradient is the general path's",
     function()
    local m = model_for(3, 1, {bounds = {task_noise = {2e-3, 0.5}, noise = {1e-4, 0.05}}})
    m.task_noise = {0.01, 0.02, 0.004}
    local value, g = m:log_posterior_and_grad()
    local gvalue, gg = general(m, function() return m:log_posterior_and_grad() end)
    close(value, gvalue, 1e-10, "bounded: value")
    for p = 1, #g do close(g[p], gg[p], 1e-9, "bounded: d/dr " .. p, 1e-9) end
    local start = m:mll()
    m:fit{max_iter = 40}
    assert.is_true(m:mll() > start)
    for a = 1, 3 do
      assert.is_true(m.task_noise[a] >= 2e-3 and m.task_noise[a] <= 0.5, "task noise " .. a)
    end
    assert.is_true(m.noise <= 0.05)
    close(m:mll(), dense_mll(m), 1e-10, "after the fit: dense")
  end)
end)
