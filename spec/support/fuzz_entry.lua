-- spec/support/fuzz_entry.lua — NaN and infinite input at the public entry
-- points of the GP layer and the distributions (issue 26: "check every
-- public entry point of the previous rounds for NaN/Inf inputs with and
-- without {grad = true}").
--
-- Each case builds a small problem (n points in d dimensions), picks an
-- entry point and, in most cases, one input to poison with NaN, +inf or
-- -inf: a coordinate of x, a target y, a test point, the noise, the mean,
-- an inducing point, a lengthscale. A poisoned call must raise an error
-- starting "lazytensor:" (never return, never return a NaN); a clean one
-- must return finite numbers — so a check that refused everything fails
-- too. Multitask targets may hold NaN (a missing value), not ±inf.
--
--   local fz = require "support.fuzz_entry"
--   local report = fz.run{seed = 1, cases = 200}
--   -- report.failures: strings naming the seed, entry point and input
local lt = require "lazytensor"
local gp = require "lazytensor.gp"

local fz = {}

-- Park and Miller's minimal standard generator: 16807·s stays below 2^46,
-- exact in doubles and in 5.3+ integers alike, so a case replays from its
-- seed on every Lua.
local function new_rng(seed)
  local s = seed % 2147483647
  if s == 0 then s = 1 end
  local r = {}
  function r.float()
    s = (16807 * s) % 2147483647
    return s / 2147483647
  end
  function r.int(a, b) return a + math.floor(r.float() * (b - a + 1)) end
  function r.pick(t) return t[r.int(1, #t)] end
  return r
end

local BAD = {0 / 0, math.huge, -math.huge}
local BAD_TEXT = {"NaN", "inf", "-inf"}

local function finite(v)
  if lt.is_tensor(v) then
    for _, x in ipairs(v:reshape(v:numel()):totable()) do
      if not finite(x) then return false end
    end
    return true
  end
  return type(v) == "number" and v == v and v > -math.huge and v < math.huge
end

-- The problem: inputs, targets, a test point, a kernel, options; as Lua
-- tables so that one entry can be poisoned.
local function problem(r)
  local n, d = r.int(3, 7), r.int(1, 2)
  local x, y, xs = {}, {}, {}
  for i = 1, n do
    x[i] = {}
    for k = 1, d do x[i][k] = r.float() * 2 + (k == 1 and i * 0.05 or 0) end
    y[i] = math.sin(3 * x[i][1]) + 0.1 * r.float()
  end
  for k = 1, d do xs[k] = r.float() end
  return {n = n, d = d, x = x, y = y, xs = {xs}, noise = 0.05 + 0.1 * r.float(),
          mean_value = 0.1, lengthscale = 0.3 + r.float(), inducing = {x[1], x[n]}}
end

local function kernel(p) return gp.kernels.rbf{lengthscale = p.lengthscale} end

local function exact(p, extra)
  local spec = {x = p.x, y = p.y, kernel = kernel(p), noise = p.noise, mean_value = p.mean_value}
  for k, v in pairs(extra or {}) do spec[k] = v end
  return gp.exact(spec)
end

local function sgpr(p)
  return gp.sgpr{x = p.x, y = p.y, kernel = kernel(p), noise = p.noise, inducing = p.inducing,
                 mean_value = p.mean_value}
end

-- Entry points: name, the inputs it reads (what may be poisoned), and the
-- call, returning the numbers that must be finite when nothing is bad.
local ENTRIES = {
  {"gp.exact:mll", {"x", "y", "noise", "mean_value", "lengthscale"},
   function(p) return (exact(p):mll()) end},
  {"gp.exact:mll_and_grad", {"x", "y", "noise", "mean_value", "lengthscale"}, function(p)
    local v, g = exact(p):mll_and_grad()
    return v, lt.tensor(g)
  end},
  {"gp.exact(structure = dense):mll_and_grad", {"x", "y", "noise", "lengthscale"}, function(p)
    local v, g = exact(p, {structure = "dense"}):mll_and_grad()
    return v, lt.tensor(g)
  end},
  {"gp.exact:predict", {"x", "y", "xs", "noise", "lengthscale"}, function(p)
    local mean, var = exact(p):predict(p.xs)
    return mean, var
  end},
  {"gp.exact:posterior", {"x", "y", "xs", "noise"}, function(p)
    local post = exact(p):posterior(p.xs)
    return post:mean(), post:variance()
  end},
  {"gp.exact:fit (adam, 2 steps)", {"x", "y", "noise", "mean_value"}, function(p)
    local m = exact(p)
    local r = m:fit{method = "adam", lr = 0.01, max_iter = 2}
    return r.mll
  end},
  {"gp.sgpr:mll_and_grad", {"x", "y", "noise", "inducing", "lengthscale"}, function(p)
    local v, g = sgpr(p):mll_and_grad()
    return v, lt.tensor(g)
  end},
  {"gp.sgpr:predict", {"x", "y", "xs", "inducing"}, function(p)
    local mean, var = sgpr(p):predict(p.xs)
    return mean, var
  end},
  {"gp.multitask:mll", {"x", "y_inf", "noise"}, function(p)
    local Y = {}
    for i, v in ipairs(p.y) do Y[i] = {v, p.y2 and p.y2[i] or 0.5 * v} end
    return (gp.multitask{x = p.x, y = lt.tensor(Y), kernel = kernel(p), noise = p.noise}:mll())
  end},
  {"gp.exact (a batch of 2):mll", {"x", "y", "lengthscale"}, function(p)
    local X, Y = {{}, {}}, {{}, {}}
    for i = 1, p.n do
      X[1][i], X[2][i] = p.x[i], {}
      for k = 1, p.d do X[2][i][k] = p.x[i][k] * 0.9 end
      Y[1][i], Y[2][i] = p.y[i], -p.y[i]
    end
    return (exact(p, {x = lt.tensor(X), y = lt.tensor(Y), noise = nil, mean_value = nil}):mll())
  end},
  {"lt.kernel:inv_quad_logdet{grad}", {"x", "y", "noise"}, function(p)
    local K = lt.kernel(lt.tensor(p.x), {kind = "matern52", lengthscale = 0.5})
    local q, ld = K:add_diag(p.noise):inv_quad_logdet(lt.tensor(p.y), {grad = true})
    return q, ld
  end},
  {"lt.mvn:log_prob{grad}", {"y", "noise", "mean_value"}, function(p)
    local mean = lt.full({p.n}, p.mean_value)
    local cov = lt.kernel(lt.tensor(p.x), {kind = "rbf", lengthscale = 0.7}):add_diag(p.noise)
    local lp = lt.mvn(mean, cov):log_prob(lt.tensor(p.y), {grad = true})
    local lp0 = lt.mvn(mean, cov):log_prob(lt.tensor(p.y))
    return lp, lp0
  end},
}

-- Puts bad into the input `what` of p; returns a text saying where.
local function poison(r, p, what, bad)
  if what == "x" then
    local i, k = r.int(1, p.n), r.int(1, p.d)
    p.x[i][k] = bad
    return ("x[%d][%d]"):format(i, k)
  elseif what == "y" or what == "y_inf" then
    local i = r.int(1, p.n)
    if what == "y_inf" then
      p.y2 = {}
      for j, v in ipairs(p.y) do p.y2[j] = 0.5 * v end
      p.y2[i] = bad
      return ("y[%d][2]"):format(i)
    end
    p.y[i] = bad
    return ("y[%d]"):format(i)
  elseif what == "xs" then
    p.xs[1][r.int(1, p.d)] = bad
    return "xstar"
  elseif what == "inducing" then
    p.inducing = {{}, p.inducing[2]}
    for k = 1, p.d do p.inducing[1][k] = k == 1 and bad or 0.5 end
    return "inducing[1][1]"
  end
  p[what] = bad
  return what
end

-- fz.run{seed =, cases =} → {stats = {cases, poisoned, clean, failed}, failures = {...}}
function fz.run(opts)
  local stats = {cases = 0, poisoned = 0, clean = 0, failed = 0}
  local failures = {}
  for c = 1, opts.cases do
    local seed = opts.seed * 100000 + c
    local r = new_rng(seed)
    local p = problem(r)
    local entry = ENTRIES[r.int(1, #ENTRIES)]
    local name, inputs, call = entry[1], entry[2], entry[3]
    local where, clean = nil, r.float() < 0.2
    if not clean then
      local what = r.pick(inputs)
      local b = r.int(1, 3)
      -- a multitask target may be NaN (missing): only ±inf is bad there
      if what == "y_inf" and b == 1 then b = 2 end
      where = poison(r, p, what, BAD[b]) .. " = " .. BAD_TEXT[b]
    end
    stats.cases = stats.cases + 1
    local res = {pcall(call, p)}
    local ok, why = res[1], nil
    if clean then
      stats.clean = stats.clean + 1
      if not ok then
        why = "raised on clean input: " .. tostring(res[2])
      else
        for i = 2, #res do
          if not finite(res[i]) then why = "returned a non-finite result on clean input" end
        end
      end
    else
      stats.poisoned = stats.poisoned + 1
      if ok then
        why = "returned instead of raising"
      elseif not tostring(res[2]):find("^lazytensor: ") then
        why = "raised a non-lazytensor error: " .. tostring(res[2])
      end
    end
    if why then
      stats.failed = stats.failed + 1
      if #failures < 10 then
        failures[#failures + 1] = ("[entry seed %d] %s with %s: %s"):format(seed, name,
                                                                            where or "clean input",
                                                                            why)
      end
    end
  end
  return {stats = stats, failures = failures}
end

return fz
