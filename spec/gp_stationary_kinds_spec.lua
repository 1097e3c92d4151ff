-- lazytensor.gp with the periodic kernel's ARD lengthscales, the cosine
-- kernel and the spectral mixture: gp.exact's MLL against a plain-Lua dense
-- computation (to 1e-9) and its gradient against central differences, on
-- every structure the kernels take (lt.kernel in C, Toeplitz, dense);
-- matrix-shaped hyperparameters through parameters / get_log_params /
-- set_log_params / describe / fingerprint; the data-driven initialisation;
-- bad input.
--
-- The kernel formulas are written out here again, independent of
-- gp/kernels.lua.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local lua_ref = require "support.ref"
local cholesky, chol_solve, close = lua_ref.cholesky, lua_ref.chol_solve, lua_ref.close
local K = gp.kernels

local unpack = table.unpack or unpack -- luacheck: ignore 143 (Lua 5.1's global)
local pi = math.pi

local function ref_kernel(kind, p, x, y)
  if kind == "periodic" then -- ARD: one lengthscale per coordinate
    local S = 0
    for d = 1, #x do
      S = S + math.sin(pi * math.abs(x[d] - y[d]) / p.period) ^ 2 / p.lengthscale[d] ^ 2
    end
    return (p.variance or 1) * math.exp(-2 * S)
  end
  if kind == "cosine" then
    local r2 = 0
    for d = 1, #x do r2 = r2 + (x[d] - y[d]) ^ 2 end
    return (p.variance or 1) * math.cos(pi * math.sqrt(r2) / p.period)
  end
  local total = 0 -- spectral mixture
  for q = 1, #p.weights do
    local t = p.weights[q]
    for d = 1, #x do
      local tau = x[d] - y[d]
      t = t * math.exp(-2 * pi * pi * tau * tau * p.scales[q][d] ^ 2)
        * math.cos(2 * pi * tau * p.means[q][d])
    end
    total = total + t
  end
  return total
end

-- The MLL of y − mean under K + noise·I by a Cholesky by loops.
local function ref_mll(kind, p, P, y, noise, mean)
  local n = #P
  local Ky = {}
  for i = 1, n do
    Ky[i] = {}
    for j = 1, n do Ky[i][j] = ref_kernel(kind, p, P[i], P[j]) end
    Ky[i][i] = Ky[i][i] + noise
  end
  local L = cholesky(Ky)
  local r = {}
  for i = 1, n do r[i] = y[i] - mean end
  local alpha = chol_solve(L, r)
  local q, logdet = 0, 0
  for i = 1, n do
    q = q + r[i] * alpha[i]
    logdet = logdet + 2 * math.log(L[i][i])
  end
  return -0.5 * (q + logdet + n * math.log(2 * pi))
end

local targets = lua_ref.sine_targets
local function scattered(...) return (lua_ref.scattered(...)) end -- the points alone

local function regular(n, h)
  local P = {}
  for i = 1, n do P[i] = {0.2 + h * (i - 1)} end
  return P
end

-- Fresh hyperparameter tables (the kernels copy them, the references read
-- them as given).
local function periodic_p() return {lengthscale = {0.8, 1.7}, period = 2.2, variance = 1.3} end
local function cosine_p() return {period = 3.1, variance = 0.9} end
local function sm_p(d)
  local p = {weights = {0.7, 0.4}, means = {}, scales = {}}
  for q = 1, 2 do
    p.means[q], p.scales[q] = {}, {}
    for c = 1, d do
      p.means[q][c] = 0.1 + 0.25 * q + 0.05 * c
      p.scales[q][c] = 0.2 + 0.1 * q + 0.03 * c
    end
  end
  return p
end

local function make(kind, p)
  if kind == "spectral_mixture" then
    return K.spectral_mixture{num_mixtures = #p.weights, weights = p.weights, means = p.means,
                              scales = p.scales}
  end
  return K[kind](p)
end

-- name, kind, parameters, points, structure (what explain() starts with)
local CASES = {
  {"periodic ARD, 2-d, lt.kernel", "periodic", periodic_p(), scattered(45, 2, 3, 3), "kernel"},
  {"periodic ARD, 2-d, dense", "periodic", periodic_p(), scattered(45, 2, 3, 3), "dense"},
  {"cosine, 1-d, lt.kernel", "cosine", cosine_p(), scattered(40, 1, 5, 4), "kernel"},
  {"cosine, 1-d, Toeplitz", "cosine", cosine_p(), regular(40, 0.13), "toeplitz"},
  {"spectral mixture, 1-d, lt.kernel", "spectral_mixture", sm_p(1), scattered(40, 1, 7, 4),
   "kernel"},
  {"spectral mixture, 1-d, Toeplitz", "spectral_mixture", sm_p(1), regular(40, 0.11),
   "toeplitz"},
  {"spectral mixture, 2-d, lt.kernel", "spectral_mixture", sm_p(2), scattered(45, 2, 9, 3),
   "kernel"},
  {"spectral mixture, 2-d, dense", "spectral_mixture", sm_p(2), scattered(45, 2, 9, 3), "dense"},
}

describe("gp kernels: periodic ARD, cosine, spectral mixture", function()
  for _, case in ipairs(CASES) do
    local name, kind, p, P, structure = unpack(case)
    it(name .. ": MLL against dense to 1e-9, gradient against central differences", function()
      local y = targets(P)
      local kernel = make(kind, p)
      local opts = {x = P, y = y, kernel = kernel, noise = 0.05, mean_value = 0.3}
      if structure == "dense" or structure == "kernel" then opts.structure = structure end
      local model = gp.exact(opts)
      local e = model:explain()
      assert.equal(1, e:find(structure, 1, true), e)
      close(model:mll(), ref_mll(kind, p, P, y, 0.05, 0.3), 1e-9, name .. " mll")
      local value, grad = model:mll_and_grad()
      close(value, ref_mll(kind, p, P, y, 0.05, 0.3), 1e-9, name .. " mll_and_grad")
      assert.equal(kernel:count() + 2, #grad) -- the kernel's, the noise, the mean
      lua_ref.check_model_gradient(model, grad, name)
    end)
  end

  it("gp.sgpr with them: the gradient (inducing points too) matches central differences",
     function()
    -- the inducing points' gradient is lt.kernel's x1 / x2 gradient
    local P = scattered(30, 2, 17, 3)
    local y = targets(P)
    local p = sm_p(2)
    local mdl = gp.sgpr{x = P, y = y, inducing = 5, noise = 0.2, jitter = 1e-6,
                        kernel = make("spectral_mixture", p) + make("periodic", periodic_p())}
    local _, grad = mdl:mll_and_grad()
    lua_ref.check_model_gradient(mdl, grad, "sgpr")
  end)

  it("counts, reads, writes and prints matrix-shaped hyperparameters", function()
    local k = make("spectral_mixture", sm_p(2))
    -- weights (2) + means (2×2) + scales (2×2)
    assert.equal(10, k:count())
    local params = k:parameters()
    assert.same({"means", 1, 2}, {params[4].name, params[4].index, params[4].col})
    assert.same({"scales", 2, 1}, {params[9].name, params[9].index, params[9].col})
    local v = k:get_log_params()
    close(v[4], math.log(0.1 + 0.25 + 0.1), 1e-15, "means[1][2]")
    v[4] = math.log(2.5)
    k:set_log_params(v)
    assert.equal(2.5, k.values.means[1][2])
    assert.matches("means = {{0.4, 2.5}, {0.65, 0.7}}", k:describe(), 1, true)
    local before = k:fingerprint()
    v[9] = math.log(0.75)
    k:set_log_params(v)
    assert.are_not.equal(before, k:fingerprint())
    -- fixed: the whole matrix leaves the free parameters
    local f = K.spectral_mixture{num_mixtures = 2, weights = {1, 2}, means = {0.1, 0.2},
                                 scales = {0.3, 0.4}, fixed = {means = true}}
    assert.equal(4, f:count())
    assert.matches("(fixed)", f:describe(), 1, true)
    -- periodic ARD: one parameter per lengthscale
    assert.equal(4, K.periodic{lengthscale = {1, 2}, period = 1}:count())
  end)

  it("initialises a spectral mixture from the data", function()
    -- x in [0, 3] at 4 points (mean spacing 1: ν = 1/2), y = {1, 2, 3, 6}
    -- (variance 3.5)
    local k = K.spectral_mixture_from_data({{0}, {1}, {2.5}, {3}}, {1, 2, 3, 6}, 3)
    assert.equal("spectral_mixture", k.kind)
    close(k.values.weights[1], 3.5 / 3, 1e-15, "weight")
    close(k.values.means[1][1], 0.5 / 4, 1e-15, "mean 1")
    close(k.values.means[3][1], 0.5 * 3 / 4, 1e-15, "mean 3")
    close(k.values.scales[2][1], 1 / 3, 1e-15, "scale")
    -- 2-d with dims: the columns follow dims
    local k2 = K.spectral_mixture_from_data(lt.tensor{{0, 5, 1}, {1, 7, 3}, {2, 9, 4}},
                                            lt.tensor{1, 2, 3}, 2, {dims = {3, 2}})
    assert.same({3, 2}, k2.dims)
    close(k2.values.scales[1][1], 1 / 3, 1e-15, "dims[1] = 3")
    close(k2.values.scales[1][2], 1 / 4, 1e-15, "dims[2] = 2")
    -- and a model with it fits: the MLL rises
    local P = scattered(30, 1, 13, 5)
    local y = targets(P)
    local model = gp.exact{x = P, y = y, kernel = K.spectral_mixture_from_data(P, y, 2)}
    local m0 = model:mll()
    model:fit{max_iter = 20}
    assert.is_true(model:mll() > m0)
  end)

  it("rejects bad hyperparameters with clear errors", function()
    local function fails(pattern, f, ...)
      local ok, err = pcall(f, ...)
      assert.is_false(ok, pattern)
      assert.matches("lazytensor: gp: " .. pattern, tostring(err))
    end
    local sm = K.spectral_mixture
    fails("spectral_mixture needs means", sm, {num_mixtures = 1, scales = {1}})
    fails("spectral_mixture num_mixtures must be a positive integer, got 0", sm,
          {num_mixtures = 0, means = {}, scales = {}})
    fails("spectral_mixture means must be a list of 2 rows %(num_mixtures%), got 1 rows", sm,
          {num_mixtures = 2, means = {1}, scales = {1, 2}})
    fails("spectral_mixture weights must be a list of 2 numbers", sm,
          {num_mixtures = 2, weights = {1}, means = {1, 2}, scales = {1, 2}})
    fails("spectral_mixture scales%[2%]%[1%] must be a positive number, got %-1", sm,
          {num_mixtures = 2, means = {1, 2}, scales = {1, -1}})
    fails("spectral_mixture means have 2 columns but scales have 1", sm,
          {num_mixtures = 1, means = {{1, 2}}, scales = {{1}}})
    fails("spectral_mixture means rows must be non%-empty and of one length", sm,
          {num_mixtures = 2, means = {{1, 2}, {1}}, scales = {{1, 2}, {1, 2}}})
    fails("spectral_mixture: unknown key 'lengthscale'", sm,
          {num_mixtures = 1, means = {1}, scales = {1}, lengthscale = 1})
    fails("cosine: unknown key 'lengthscale'", K.cosine, {lengthscale = 1})
    fails("periodic lengthscale%[2%] must be a positive number", K.periodic,
          {lengthscale = {1, 0}})
    -- the data's dimensions against the columns, when the model computes
    local function mll(kernel)
      return gp.exact{x = {{0}, {1}, {2}}, y = {1, 2, 3}, kernel = kernel}:mll()
    end
    fails("spectral_mixture has 2 columns of means and scales but the inputs have 1 dimension",
          mll, sm{num_mixtures = 1, means = {{1, 2}}, scales = {{1, 2}}})
    fails("periodic has 2 lengthscales but the inputs have 1 dimension", mll,
          K.periodic{lengthscale = {1, 2}})
  end)
end)
