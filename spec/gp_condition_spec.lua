-- model:condition(x_new, y_new [, noise_new]) (gp/condition.lua): the new
-- model predicts as a fresh gp.exact over all the points with the same
-- hyperparameters (the independent reference: one Cholesky factorisation of
-- the whole covariance), to 1e-10; bad input leaves the model as it was.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ref = require "support.ref"

local TOL = 1e-10

-- Largest |a - b| over two 1-d tensors (or {b, m} batches).
local function maxdiff(a, b)
  return (a - b):abs():max()
end

local function concat(a, b)
  local out = {}
  for _, v in ipairs(a) do out[#out + 1] = v end
  for _, v in ipairs(b) do out[#out + 1] = v end
  return out
end

-- A fresh model over old and new points with the conditioned model's
-- hyperparameters (kernel made again by make_kernel, mean value kept).
local function fresh_like(model, make_kernel, x, y, noise)
  return gp.exact{x = x, y = y, kernel = make_kernel(), noise = noise,
                  mean_value = model.mean_value}
end

local function assert_same_predictions(a, b, xs, what)
  local ma, va = a:predict(xs)
  local mb, vb = b:predict(xs)
  local dm, dv = maxdiff(ma, mb), maxdiff(va, vb)
  assert(dm <= TOL, ("%s: means differ by %.3g"):format(what, dm))
  assert(dv <= TOL, ("%s: variances differ by %.3g"):format(what, dv))
end

describe("gp.exact condition", function()
  local function rbf1() return gp.kernels.rbf{lengthscale = 0.4, variance = 1.3} end
  local function ard2() return gp.kernels.rbf{lengthscale = {0.3, 0.7}, variance = 0.9} end

  it("equals a fresh model with all the points, 1-d, one point and several", function()
    local P = ref.scattered(30, 1, 11, 3)
    local y = ref.sine_targets(P)
    local model = gp.exact{x = P, y = y, kernel = rbf1(), noise = 0.02}
    local xs = ref.scattered(9, 1, 5, 3.4, -0.2)
    for _, k in ipairs{1, 4} do
      local Pn = ref.scattered(k, 1, 100 + k, 3.2, -0.1)
      local yn = ref.sine_targets(Pn)
      local c = model:condition(Pn, yn)
      assert.equal(30 + k, c.n)
      local f = fresh_like(model, rbf1, concat(P, Pn), concat(y, yn), 0.02)
      assert_same_predictions(c, f, xs, k .. " new points")
      -- the updated factor is what predicted (one row panel on the first)
      assert.equal(1, #c.chol_factor.panels)
      -- and the posterior's covariance operator agrees too
      local dv = maxdiff(c:posterior(xs):variance(), f:posterior(xs):variance())
      assert(dv <= TOL, "posterior variances differ by " .. dv)
    end
  end)

  it("equals a fresh model with ARD inputs in 2-d, and a chain of conditions", function()
    local P = ref.scattered(40, 2, 3, 2)
    local y = ref.sine_targets(P)
    local model = gp.exact{x = P, y = y, kernel = ard2(), noise = 0.05}
    local xs = ref.scattered(12, 2, 8, 2)
    local P1 = ref.scattered(1, 2, 41, 2)
    local P3 = ref.scattered(3, 2, 43, 2)
    local y1, y3 = ref.sine_targets(P1), ref.sine_targets(P3)
    local c1 = model:condition(lt.tensor(P1), lt.tensor(y1))
    assert_same_predictions(c1, fresh_like(model, ard2, concat(P, P1), concat(y, y1), 0.05), xs,
                            "one point")
    local c13 = c1:condition(P3, y3)
    assert.equal(2, #c13.chol_factor.panels)
    local all = concat(concat(P, P1), P3)
    assert_same_predictions(c13, fresh_like(model, ard2, all, concat(concat(y, y1), y3), 0.05),
                            xs, "chain 1 + 3")
    -- the factor stands for Ky: its solve and product are Ky's, and any
    -- other method is answered by L·Lᵀ over the whole factor
    local F = c13.chol_factor
    local Ky = fresh_like(model, ard2, all, concat(concat(y, y1), y3), 0.05)
    Ky = Ky:covariance().noisy(Ky.noise)
    local r = lt.tensor(concat(concat(y, y1), y3))
    assert(maxdiff(F:solve(r), Ky:solve(r)) <= 1e-9, "solve")
    assert(maxdiff(F * r, Ky * r) <= 1e-12, "product")
    assert(maxdiff(F:diagonal(), Ky:diagonal()) <= 1e-12, "diagonal")
    ref.close(Ky:logdet(), F:logdet(), 1e-12, "logdet")
    -- LOVE multiplies by Ky through the blocks: the same variances to its own accuracy
    local _, v_love = c13:predict(xs, {love = true})
    local _, v = c13:predict(xs)
    assert(maxdiff(v_love, v) <= 1e-6, "LOVE on the updated factor")
  end)

  it("stays exact along a long chain (the blocks are joined past 32 panels)", function()
    local P = ref.scattered(15, 1, 97, 3)
    local y = ref.sine_targets(P)
    local model = gp.exact{x = P, y = y, kernel = rbf1(), noise = 0.05}
    local first = model
    local Pn = ref.scattered(40, 1, 101, 3)
    local yn = ref.sine_targets(Pn)
    local most = 0
    for i = 1, 40 do
      model = model:condition({Pn[i]}, {yn[i]})
      most = math.max(most, #model.chol_factor.panels)
    end
    assert.equal(32, most)
    assert.is_true(#model.chol_factor.panels < 32)
    assert_same_predictions(model, fresh_like(first, rbf1, concat(P, Pn), concat(y, yn), 0.05),
                            ref.scattered(9, 1, 103, 3), "40 conditions")
  end)

  it("keeps the hyperparameters and leaves the model it came from as it was", function()
    local P = ref.scattered(25, 2, 17, 2)
    local y = ref.sine_targets(P)
    local model = gp.exact{x = P, y = y, kernel = ard2(), noise = 0.03}
    local xs = ref.scattered(6, 2, 19, 2)
    local m0, v0 = model:predict(xs)
    local c = model:condition({{0.5, 0.5}, {1.5, 0.2}}, {0.1, -0.3})
    assert.same(model:get_vector(), c:get_vector())
    assert.equal(model.mean_value, c.mean_value)
    assert.equal(25, model.n)
    assert.equal(25, #model.points)
    local m1, v1 = model:predict(xs)
    assert(maxdiff(m0, m1) <= 1e-12 and maxdiff(v0, v1) <= 1e-12)
    -- the new model's kernel is its own: fitting it does not move the old one
    c:set_vector({0, 0, 0, math.log(0.1), 0})
    assert.same(ard2():get_log_params(), model.kernel:get_log_params())
  end)

  it("computes as a fresh model once its hyperparameters change", function()
    local P = ref.scattered(30, 1, 23, 3)
    local y = ref.sine_targets(P)
    local model = gp.exact{x = P, y = y, kernel = rbf1(), noise = 0.02}
    local Pn, yn = {{1.7}}, {0.4}
    local c = model:condition(Pn, yn)
    local v = c:get_vector()
    v[1] = v[1] + 0.3 -- log lengthscale
    c:set_vector(v)
    local f = fresh_like(model, rbf1, concat(P, Pn), concat(y, yn), 0.02)
    f:set_vector(v)
    assert_same_predictions(c, f, ref.scattered(5, 1, 29, 3), "after set_vector")
    assert.is_nil(require("lazytensor.gp.condition").factor(c))
  end)

  it("works on Toeplitz, Kronecker and dense structures (the new model chooses its own)", function()
    local P = {}
    for i = 1, 32 do P[i] = {(i - 1) * 0.1} end
    local y = ref.sine_targets(P)
    local model = gp.exact{x = P, y = y, kernel = rbf1(), noise = 0.02}
    assert.matches("^toeplitz", model:explain())
    local Pn, yn = {{0.55}, {3.3}}, {0.2, -0.1}
    local c = model:condition(Pn, yn)
    assert_same_predictions(c, fresh_like(model, rbf1, concat(P, Pn), concat(y, yn), 0.02),
                            ref.scattered(7, 1, 31, 3.3), "toeplitz")
    -- a full grid with a separable kernel: Kronecker structure
    local G = {}
    for i = 1, 6 do
      for j = 1, 5 do G[#G + 1] = {i * 0.3, j * 0.25} end
    end
    local yg = ref.sine_targets(G)
    local km = gp.exact{x = G, y = yg, kernel = ard2(), noise = 0.02}
    assert.matches("^kron", km:explain())
    local Gn, ygn = {{0.77, 0.61}, {1.5, 1.4}}, {0.3, -0.2}
    assert_same_predictions(km:condition(Gn, ygn),
                            fresh_like(km, ard2, concat(G, Gn), concat(yg, ygn), 0.02),
                            ref.scattered(7, 2, 43, 1.8), "kron")
    -- a product of kernels: dense structure
    local function prod() return gp.kernels.rbf{lengthscale = 0.8} * gp.kernels.periodic{period = 1.1} end
    local Q = ref.scattered(28, 1, 37, 3)
    local yq = ref.sine_targets(Q)
    local pm = gp.exact{x = Q, y = yq, kernel = prod(), noise = 0.05}
    local pc = pm:condition({{1.01}}, {0.5})
    assert_same_predictions(pc, fresh_like(pm, prod, concat(Q, {{1.01}}), concat(yq, {0.5}), 0.05),
                            ref.scattered(7, 1, 41, 3), "dense")
  end)

  describe("with per-point noise", function()
    local P = ref.scattered(30, 1, 47, 3)
    local y = ref.sine_targets(P)
    local noise = {}
    for i = 1, 30 do noise[i] = 0.01 + 0.002 * (i % 7) end
    local function model() return gp.exact{x = P, y = y, kernel = rbf1(), noise = lt.tensor(noise)} end

    it("needs the new points' noise: an error without it", function()
      local m = model()
      local ok, err = pcall(m.condition, m, {{1.2}}, {0.3})
      assert.is_false(ok)
      assert.matches("lazytensor: gp: condition: the model has per%-point noise", err)
    end)

    it("equals a fresh model with the noises appended (one variance or k)", function()
      local m = model()
      local xs = ref.scattered(8, 1, 53, 3)
      local Pn, yn = {{1.2}, {2.9}}, {0.3, -0.2}
      local c = m:condition(Pn, yn, 0.04)
      local f = fresh_like(m, rbf1, concat(P, Pn), concat(y, yn), lt.tensor(concat(noise, {0.04, 0.04})))
      assert_same_predictions(c, f, xs, "one noise for all")
      c = m:condition(Pn, yn, lt.tensor{0.02, 0.09})
      f = fresh_like(m, rbf1, concat(P, Pn), concat(y, yn), lt.tensor(concat(noise, {0.02, 0.09})))
      assert_same_predictions(c, f, xs, "a noise each")
      assert.is_true(c:per_point_noise())
    end)
  end)

  it("on the iterative path builds the new model plainly, and it equals a fresh one", function()
    local P = ref.scattered(60, 2, 59, 2)
    local y = ref.sine_targets(P)
    local xs = ref.scattered(5, 2, 61, 2)
    lt.with_settings({max_cholesky_size = 40, cg_tolerance = 1e-12, max_cg_iterations = 500}, function()
      local model = gp.exact{x = P, y = y, kernel = ard2(), noise = 0.1}
      local Pn, yn = ref.scattered(2, 2, 67, 2), {0.1, 0.2}
      local c = model:condition(Pn, yn)
      assert.is_nil(c.chol_factor)
      local f = fresh_like(model, ard2, concat(P, Pn), concat(y, yn), 0.1)
      local mc, vc = c:predict(xs)
      local mf, vf = f:predict(xs)
      assert(maxdiff(mc, mf) <= 1e-8 and maxdiff(vc, vf) <= 1e-8)
    end)
  end)

  it("conditions a batch member by member", function()
    local X = lt.tensor{(ref.scattered(20, 1, 71, 3)), (ref.scattered(20, 1, 73, 3))}
    local Y = lt.tensor{ref.sine_targets(X[1]:totable()), ref.sine_targets(X[2]:totable())}
    local model = gp.exact{x = X, y = Y, kernel = rbf1(), noise = 0.03}
    local Xn = lt.tensor{{{0.4}, {2.2}}, {{1.1}, {2.8}}}
    local Yn = lt.tensor{{0.5, -0.5}, {0.2, 0.1}}
    local c = model:condition(Xn, Yn)
    assert.equal(22, c.n)
    local xs = ref.scattered(6, 1, 79, 3)
    for i = 1, 2 do
      local f = fresh_like(model:member(i), rbf1, concat(X[i]:totable(), Xn[i]:totable()),
                           concat(Y[i]:totable(), Yn[i]:totable()), 0.03)
      assert_same_predictions(c:member(i), f, xs, "member " .. i)
    end
    local mb = c:predict(xs)
    assert.same({2, 6}, mb:shape())
    local ok, err = pcall(model.condition, model, Xn[1], Yn[1])
    assert.is_false(ok)
    assert.matches("lazytensor: gp: condition: a batch of 2 needs x_new {2, k, d}", err)
  end)

  it("refuses bad input with clear errors, leaving the model untouched", function()
    local P = ref.scattered(20, 2, 83, 2)
    local y = ref.sine_targets(P)
    local model = gp.exact{x = P, y = y, kernel = ard2(), noise = 0.03}
    local xs = ref.scattered(4, 2, 89, 2)
    local m0, v0 = model:predict(xs)
    local cases = {
      {{{0.5}}, {1}, nil, "x_new has 1 coordinate per point, the model's inputs 2"},
      {{{0.5, 0 / 0}}, {1}, nil, "x_new%[1%]%[2%] .*%-?nan"},
      {{{0.5, math.huge}}, {1}, nil, "x_new%[1%]%[2%] .*inf"},
      {{{0.5, 0.5}}, {0 / 0}, nil, "y_new%[1%] is %-?nan"},
      {{{0.5, 0.5}, {1, 1}}, {1}, nil, "y_new %(one target per new point%) must be a vector of 2"},
      {{{0.5, 0.5}}, {1}, 0.1, "noise_new is for models with per%-point noise"},
      {nil, {1}, nil, "x_new is missing"},
      {"x", {1}, nil, "x_new must be a non%-empty tensor or table"},
      {{{0.5, 0.5}}, "y", nil, "y_new"},
    }
    for _, case in ipairs(cases) do
      local ok, err = pcall(model.condition, model, case[1], case[2], case[3])
      assert.is_false(ok)
      assert.matches("^lazytensor: gp: condition: .*" .. case[4], err)
    end
    assert.equal(20, model.n)
    assert.equal(20, model.y:size(1))
    local m1, v1 = model:predict(xs)
    assert(maxdiff(m0, m1) == 0 and maxdiff(v0, v1) == 0)
  end)
end)
