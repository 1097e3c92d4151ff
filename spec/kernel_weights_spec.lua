-- A symmetric kernel's bilinear derivative with low-rank weights L·Rᵀ:
-- columns whose R is L or −L (a GP gradient's inverse-quadratic and control
-- variate columns) are taken once (src/ops/kernel.c, sym_factors). Checked
-- against the same weights given as the dense W = L·Rᵀ (the pass that forms
-- W's and Wᵀ's rows), and the variance's derivative against a Lua sum over
-- the entries.
local lt = require "lazytensor"
local unpack = table.unpack or unpack -- luacheck: ignore (Lua 5.1)

local function lcg(seed)
  local s = seed
  return function()
    s = (1103515245 * s + 12345) % 2147483648
    return s / 2147483648
  end
end

local function matrix(n, k, rnd)
  local t = {}
  for i = 1, n do
    t[i] = {}
    for j = 1, k do t[i][j] = 2 * rnd() - 1 end
  end
  return t
end

local function close(a, b, rel, what)
  local scale = math.max(math.abs(a), math.abs(b), 1e-300)
  assert(math.abs(a - b) <= rel * scale, string.format("%s: %.17g vs %.17g", what, a, b))
end

local function close_tensor(a, b, rel, what)
  local na = a:numel()
  local fa, fb = a:reshape(na), b:reshape(na)
  local worst = 0
  for i = 1, na do worst = math.max(worst, math.abs(fa[i]), math.abs(fb[i])) end
  for i = 1, na do
    assert(math.abs(fa[i] - fb[i]) <= rel * worst,
           string.format("%s[%d]: %.17g vs %.17g", what, i, fa[i], fb[i]))
  end
end

-- signs: per column, "plus" (R = L), "minus" (R = −L) or "free" (R random)
local function weights(n, signs, rnd)
  local L = matrix(n, #signs, rnd)
  local R = matrix(n, #signs, rnd)
  for i = 1, n do
    for c, s in ipairs(signs) do
      if s == "plus" then R[i][c] = L[i][c] elseif s == "minus" then R[i][c] = -L[i][c] end
    end
  end
  return lt.tensor(L), lt.tensor(R)
end

describe("a symmetric kernel's bilinear derivative with low-rank weights", function()
  -- n = 600: more than one block of rows (the pass takes 256 at most)
  local n, d = 600, 3
  local rnd = lcg(7)
  local x = lt.tensor(matrix(n, d, rnd))
  local ls, v = {0.6, 0.9, 1.3}, 1.7

  for _, case in ipairs{
    {name = "mixed columns", signs = {"free", "minus", "plus", "free", "minus", "minus"}},
    {name = "only symmetric columns", signs = {"minus", "plus", "minus"}},
    {name = "no symmetric column", signs = {"free", "free"}},
    {name = "one R = −L column", signs = {"minus"}},
  } do
    it("equals the dense W = L·Rᵀ's: " .. case.name, function()
      local K = lt.kernel(x, {kind = "matern52", lengthscale = ls, variance = v})
      local L, R = weights(n, case.signs, rnd)
      local W = L * R:t()
      local g_lr = K:bilinear_derivative(L, R)
      local g_w = K:bilinear_derivative(W)
      local a, b = g_lr[K], g_w[K]
      close(a.variance, b.variance, 1e-11, "variance")
      close_tensor(a.lengthscale, b.lengthscale, 1e-11, "lengthscale")
      close_tensor(a.x1, b.x1, 1e-11, "x1")
      -- ∂/∂v of Σ W_ij k_ij = Σ W_ij k_ij / v
      local Kd, s = K:dense(), 0
      for i = 1, n do
        for j = 1, n do s = s + W:get(i, j) * Kd:get(i, j) end
      end
      close(a.variance, s / v, 1e-11, "variance against the entries")
    end)
  end

  it("leaves a cross-covariance (x2 given) and a masked part to the rows of W", function()
    local y = lt.tensor(matrix(n - 100, d, rnd))
    local K = lt.kernel(x, y, {kind = "rbf", lengthscale = 0.8, variance = 1.2})
    local L = lt.tensor(matrix(n, 2, rnd))
    local R = lt.tensor(matrix(n - 100, 2, rnd))
    local a, b = K:bilinear_derivative(L, R)[K], K:bilinear_derivative(L * R:t())[K]
    close(a.lengthscale, b.lengthscale, 1e-11, "lengthscale")
    close_tensor(a.x2, b.x2, 1e-11, "x2")
  end)
end)

-- The pass runs its chunks of row blocks on lt.settings.num_threads threads
-- and adds them in a fixed order: one thread and two give the same bits.
describe("the kernel's gradient pass on several threads", function()
  local n, d = 700, 2 -- three blocks of rows (256 at most a block)
  local rnd = lcg(11)
  local x = lt.tensor(matrix(n, d, rnd))
  local y = lt.tensor(matrix(n - 150, d, rnd))

  local function gradients(K, ...)
    local args = {...}
    local out = {}
    for _, threads in ipairs{1, 2} do
      out[threads] = lt.with_settings({num_threads = threads}, function()
        return K:bilinear_derivative(unpack(args))[K]
      end)
    end
    return out[1], out[2]
  end

  local function same_bits(a, b, what)
    for name, v in pairs(a) do
      if type(v) == "number" then
        assert.are.equal(v, b[name], what .. " " .. name)
      else
        local fa, fb = v:reshape(v:numel()), b[name]:reshape(v:numel())
        for i = 1, v:numel() do assert.are.equal(fa[i], fb[i], what .. " " .. name) end
      end
    end
  end

  for _, case in ipairs{
    {"matern52 ARD, K(x, x), low-rank W", {kind = "matern52", lengthscale = {0.5, 0.8}}, false, 3},
    {"rbf, K(x, y), low-rank W", {kind = "rbf", lengthscale = 0.7}, true, 2},
    {"periodic ARD, K(x, x), dense W", {kind = "periodic", lengthscale = {0.9, 1.1}, period = 1.3},
     false, 0},
    {"rq, K(x, y), dense W", {kind = "rq", lengthscale = 0.6, alpha = 1.5}, true, 0},
  } do
    local name, spec, cross, rank = case[1], case[2], case[3], case[4]
    it("one thread and two agree bit for bit, and with the entries: " .. name, function()
      spec.variance = 1.4
      local K = cross and lt.kernel(x, y, spec) or lt.kernel(x, spec)
      local m, c = K:size(1), K:size(2)
      local one, two, W
      if rank > 0 then
        local L, R = lt.tensor(matrix(m, rank, rnd)), lt.tensor(matrix(c, rank, rnd))
        one, two = gradients(K, L, R)
        W = L * R:t()
      else
        W = lt.tensor(matrix(m, c, rnd))
        one, two = gradients(K, W)
      end
      same_bits(one, two, name)
      -- ∂/∂v of Σ W_ij k_ij = Σ W_ij k_ij / v, summed here entry by entry
      local Kd, s = K:dense(), 0
      for i = 1, m do
        for j = 1, c do s = s + W:get(i, j) * Kd:get(i, j) end
      end
      close(one.variance, s / 1.4, 1e-11, name .. " variance against the entries")
    end)
  end
end)
