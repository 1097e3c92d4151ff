-- W10: what lt.grad costs.
--
--   tiny/*      a 3×3 operation (diag + dense, dense · dense, 2·dense),
--               10^4 per sample: plain, inside lt.grad's forward (recorded),
--               and the whole lt.grad call (forward + backward) per op;
--               ratio_to_plain in each taped row.
--   gp/*        the exact-GP log likelihood written from lazytensor
--               operations — lt.kernel with tensor hyperparameters,
--               add_diag, lt.mvn log_prob — differentiated by lt.grad,
--               against gp.exact's hand-wired mll_and_grad on the same data
--               (W5's points: n = 1000 on the Cholesky path, n = 4000
--               iterative); ratio_to_gp_exact, both sides' largest
--               relative gradient error against the exact (Cholesky)
--               gradient, and the records' memory (lt.memory() and the Lua
--               heap while the tape is alive, MB).
--
-- W10_PARTS="tiny" (or "gp") runs one part only; instruction counts of the
-- tiny rows: bench/w10_tiny_count.sh.

local dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir .. "/?.lua;" .. package.path
local B = require "benchlib"

local W = "W10"
local lt, why = B.load()
if not lt then
  B.skip_all(W, {"tiny", "gp"}, 0, why)
  return
end
local autograd = require "lazytensor.autograd"
local PARTS = os.getenv("W10_PARTS") or "tiny gp"

---------------------------------------------------------------------------
-- tiny operations

local NOPS = 10000
local A3 = lt.tensor{{4, 1, 0}, {1, 3, 0.5}, {0, 0.5, 2}}
local D3 = lt.diag{1, 2, 3}
local OPS = {
  {"diag+dense", function(X) return D3 + X end},
  {"dense*dense", function(X) return X * A3 end},
  {"scale", function(X) return 2 * X end},
}

for _, op in ipairs(PARTS:find("tiny") and OPS or {}) do
  local name, f = op[1], op[2]
  local function loop(X)
    local acc
    for _ = 1, NOPS do acc = f(X) end
    return acc:dense():sum()
  end
  local plain = B.measure(function() loop(A3) end, {budget = 1})
  local taped = B.measure(function() autograd.evaluate(loop, A3) end, {budget = 1})
  local grad = B.measure(function() lt.grad(loop)(A3) end, {budget = 1})
  local per = function(m) return m.median_s / NOPS end
  B.emit{workload = W, op = "tiny/" .. name, system = "lazytensor", n = 3, median_s = per(plain),
    min_s = plain.min_s / NOPS, repeats = plain.repeats, inner = NOPS, mode = "plain"}
  B.emit{workload = W, op = "tiny/" .. name, system = "lazytensor", n = 3, median_s = per(taped),
    min_s = taped.min_s / NOPS, repeats = taped.repeats, inner = NOPS, mode = "recorded",
    ratio_to_plain = per(taped) / per(plain)}
  B.emit{workload = W, op = "tiny/" .. name, system = "lazytensor", n = 3, median_s = per(grad),
    min_s = grad.min_s / NOPS, repeats = grad.repeats, inner = NOPS, mode = "grad",
    ratio_to_plain = per(grad) / per(plain)}
end

---------------------------------------------------------------------------
-- the exact-GP log likelihood

local data = B.w5_data()
local gp = lt.gp

-- n = 1000 on the Cholesky path (max_cholesky_size raised to it), 4000 on
-- the iterative one (the default setting)
local GP_ROWS = PARTS:find("gp") and {{1000, "cholesky", 1000}, {4000, "iterative", 800}} or {}
for _, row in ipairs(GP_ROWS) do
  local n, path, mcs = row[1], row[2], row[3]
  local x = lt.tensor(data.X):narrow(1, 1, n):contiguous()
  local y = lt.tensor(data.b):narrow(1, 1, n):contiguous()
  local theta = {lengthscale = data.lengthscale, variance = data.variance, noise = data.noise}
  local model = gp.exact{x = x, y = y, kernel = gp.kernels.rbf{
    lengthscale = theta.lengthscale, variance = theta.variance}, noise = theta.noise,
    mean = "zero"}
  local zero = lt.zeros(n)
  local function log_likelihood(p)
    local K = lt.kernel(x, {kind = "rbf", lengthscale = p.lengthscale, variance = p.variance})
    return lt.mvn(zero, K:add_diag(p.noise)):log_prob(y)
  end
  -- gp.exact's gradient is with respect to log-hyperparameters: θ·∂/∂θ
  local function log_gradient(g)
    return {g.lengthscale * theta.lengthscale, g.variance * theta.variance, g.noise * theta.noise}
  end
  local function rel_diff(a, b)
    local d = 0
    for i = 1, 3 do d = math.max(d, math.abs(a[i] - b[i]) / math.max(1e-12, math.abs(b[i]))) end
    return d
  end
  B.run(W, "gp/" .. path, n, function()
    -- the exact gradient, for the accuracy of both sides
    local exact = lt.with_settings({max_cholesky_size = n}, function()
      return log_gradient(lt.grad(log_likelihood)(theta))
    end)
    return lt.with_settings({max_cholesky_size = mcs}, function()
      lt.manual_seed(1)
      local ref_value, ref_grad = model:mll_and_grad()
      lt.manual_seed(1)
      local g, value = lt.grad(log_likelihood)(theta)
      local t_ref = B.measure(function() model:mll_and_grad() end, {budget = 4, min = 3, max = 10})
      local t_grad = B.measure(function() lt.grad(log_likelihood)(theta) end,
        {budget = 4, min = 3, max = 10})
      -- memory while the tape is alive: after the forward, before the backward
      collectgarbage("collect")
      local lt0, lua0 = lt.memory(), collectgarbage("count")
      local peak_lt, peak_lua = 0, 0
      lt.grad(function(p)
        local v = log_likelihood(p)
        peak_lt, peak_lua = lt.memory() - lt0, collectgarbage("count") - lua0
        return v
      end)(theta)
      return {median_s = t_grad.median_s, min_s = t_grad.min_s, repeats = t_grad.repeats,
        gp_exact_median_s = t_ref.median_s, gp_exact_min_s = t_ref.min_s,
        ratio_to_gp_exact = t_grad.median_s / t_ref.median_s,
        min_ratio_to_gp_exact = t_grad.min_s / t_ref.min_s,
        value = value, gp_exact_value = ref_value,
        grad_rel_err = rel_diff(log_gradient(g), exact),
        gp_exact_grad_rel_err = rel_diff(ref_grad, exact),
        tape_lt_mb = peak_lt / 2 ^ 20, tape_lua_mb = peak_lua / 1024}
    end)
  end)
end
