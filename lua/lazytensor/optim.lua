--- Optimisers over a flat Lua array of parameters.
--
-- Both optimisers take `f(x)`, which must return `value, grad` where `grad` is
-- a Lua array of the same length as `x`, and a starting point `x0` (never
-- modified). They minimise, or maximise when `opts.maximize` is true, and
-- return `x, value, info` with
--   info.iterations   number of iterations taken
--   info.evaluations  number of calls to f
--   info.converged    true when a convergence test was met
--   info.reason       "gtol", "ftol", "xtol" (converged), or "max_iter",
--                     "max_eval", "line_search", "nonfinite", "callback"
--   info.gradnorm     Euclidean norm of the gradient at the returned x
-- `opts.callback(iter, value, x, gradnorm)` is called after every iteration
-- (iter = 1, 2, ...; value in the caller's sign; x a copy); returning true
-- stops the run with reason "callback".
--
-- Points where f returns a non-finite value or gradient are never accepted:
-- L-BFGS shortens the step (the line search treats the point as too far),
-- Adam steps back and halves its learning rate. f(x0) itself must be finite.

local optim = {}

-------------------------------------------------------------------------------
-- Small vector helpers on Lua arrays

local function dot(a, b)
  local s = 0
  for i = 1, #a do s = s + a[i] * b[i] end
  return s
end

local function norm2(a)
  return math.sqrt(dot(a, a))
end

local function copy(a)
  local c = {}
  for i = 1, #a do c[i] = a[i] end
  return c
end

-- x + alpha * d, as a new array.
local function axpy(x, alpha, d)
  local r = {}
  for i = 1, #x do r[i] = x[i] + alpha * d[i] end
  return r
end

local function is_finite(v)
  return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge
end

local function all_finite(a)
  for i = 1, #a do
    if not is_finite(a[i]) then return false end
  end
  return true
end

-------------------------------------------------------------------------------
-- Argument checks and the objective wrapper shared by both optimisers

local function check_args(fname, f, x0, opts)
  if type(f) ~= "function" and not (getmetatable(f) or {}).__call then
    error(string.format("lazytensor: %s: f must be a function, got %s", fname, type(f)), 0)
  end
  if type(x0) ~= "table" or #x0 == 0 then
    error(string.format("lazytensor: %s: x0 must be a non-empty array of numbers", fname), 0)
  end
  for i = 1, #x0 do
    if not is_finite(x0[i]) then
      error(string.format("lazytensor: %s: x0[%d] is not a finite number", fname, i), 0)
    end
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(string.format("lazytensor: %s: opts must be a table, got %s", fname, type(opts)), 0)
  end
end

-- Wrap f so that the optimiser always minimises and counts evaluations.
-- The returned function gives value, grad and whether both are finite.
local function make_objective(fname, f, n, maximize)
  local counter = { evaluations = 0 }
  local sign = maximize and -1 or 1
  function counter.eval(x)
    counter.evaluations = counter.evaluations + 1
    local v, g = f(x)
    if type(g) ~= "table" or #g ~= n then
      error(string.format(
        "lazytensor: %s: f must return value, gradient (an array of %d numbers)", fname, n), 0)
    end
    if type(v) ~= "number" then
      error(string.format("lazytensor: %s: f returned a %s value, expected a number",
        fname, type(v)), 0)
    end
    local gs = {}
    for i = 1, n do
      if type(g[i]) ~= "number" then
        error(string.format("lazytensor: %s: gradient entry %d is a %s, expected a number",
          fname, i, type(g[i])), 0)
      end
      gs[i] = sign * g[i]
    end
    v = sign * v
    return v, gs, is_finite(v) and all_finite(gs)
  end
  return counter
end

-------------------------------------------------------------------------------
-- Strong-Wolfe line search (Nocedal & Wright, Algorithms 3.5 and 3.6) along a
-- descent direction d from x, where phi(alpha) = f(x + alpha d).

-- Minimiser of the cubic through (a, fa, ga) and (b, fb, gb); nil when the
-- cubic has none or the numbers are unusable (the caller bisects instead).
local function cubic_minimizer(a, fa, ga, b, fb, gb)
  local d1 = ga + gb - 3 * (fa - fb) / (a - b)
  local disc = d1 * d1 - ga * gb
  if disc < 0 or disc ~= disc then return nil end
  local d2 = math.sqrt(disc)
  if b < a then d2 = -d2 end
  local denom = gb - ga + 2 * d2
  if denom == 0 then return nil end
  local t = b - (b - a) * (gb + d2 - d1) / denom
  if is_finite(t) then return t end
  return nil
end

-- One evaluated trial point on the line.
local function trial(obj, x, d, alpha)
  local xa = axpy(x, alpha, d)
  local v, g, ok = obj.eval(xa)
  local slope = ok and dot(g, d) or nil
  return { alpha = alpha, value = ok and v or math.huge, slope = slope, x = xa, grad = g, ok = ok }
end

-- Zoom between lo (satisfies sufficient decrease, lowest so far) and hi.
local function zoom(obj, x, d, phi0, dphi0, lo, hi, ls)
  for _ = 1, ls.max_steps do
    local a_lo, a_hi = lo.alpha, hi.alpha
    local width = math.abs(a_hi - a_lo)
    if width <= 1e-16 * math.max(1, math.abs(a_lo)) then break end
    -- Interpolate when both ends are usable, keep clear of the ends, else bisect.
    local a = nil
    if lo.ok and hi.ok then
      a = cubic_minimizer(a_lo, lo.value, lo.slope, a_hi, hi.value, hi.slope)
    end
    local left, right = math.min(a_lo, a_hi), math.max(a_lo, a_hi)
    if not a or a < left + 0.1 * width or a > right - 0.1 * width then
      a = 0.5 * (a_lo + a_hi)
    end
    local t = trial(obj, x, d, a)
    if not t.ok or t.value > phi0 + ls.c1 * a * dphi0 or t.value >= lo.value then
      hi = t
    else
      if math.abs(t.slope) <= -ls.c2 * dphi0 then return t end
      if t.slope * (a_hi - a_lo) >= 0 then hi = lo end
      lo = t
    end
  end
  -- The interval collapsed: lo still decreases f, so take it as a weaker step.
  if lo.alpha > 0 then return lo end
  return nil
end

-- Search for a step satisfying the strong Wolfe conditions. Returns the
-- accepted trial point, or nil when no point decreasing f was found.
local function wolfe_search(obj, x, d, phi0, dphi0, alpha1, ls)
  local prev = { alpha = 0, value = phi0, slope = dphi0, ok = true }
  local alpha = alpha1
  for _ = 1, ls.max_steps do
    local t = trial(obj, x, d, alpha)
    if not t.ok then
      -- Non-finite point: the step overshot into a bad region; step back.
      return zoom(obj, x, d, phi0, dphi0, prev, t, ls)
    end
    if t.value > phi0 + ls.c1 * alpha * dphi0 or (prev.alpha > 0 and t.value >= prev.value) then
      return zoom(obj, x, d, phi0, dphi0, prev, t, ls)
    end
    if math.abs(t.slope) <= -ls.c2 * dphi0 then return t end
    if t.slope >= 0 then
      return zoom(obj, x, d, phi0, dphi0, t, prev, ls)
    end
    prev, alpha = t, 2 * alpha -- still descending steeply: extrapolate
  end
  if prev.alpha > 0 then return prev end
  return nil
end

-- Backtracking on the value alone: the first of alpha1, alpha1/2, ... (at
-- most ls.max_steps) where f decreases. For objectives whose gradient is an
-- estimate rather than the value's exact derivative (a stochastic MLL with
-- fixed probes: the gradient's trace estimate is not the derivative of the
-- SLQ log-determinant), where the Wolfe conditions, which compare slopes
-- with values, can fail at every step length although f decreases.
local function backtracking_search(obj, x, d, phi0, alpha1, ls)
  local alpha = alpha1
  for _ = 1, ls.max_steps do
    local t = trial(obj, x, d, alpha)
    if t.ok and t.value < phi0 then return t end
    alpha = 0.5 * alpha
  end
  return nil
end

-------------------------------------------------------------------------------
-- L-BFGS

-- Two-loop recursion: the quasi-Newton direction -H g from the stored pairs.
local function lbfgs_direction(g, hist)
  local q = copy(g)
  local k = #hist
  local alphas = {}
  for i = k, 1, -1 do
    local h = hist[i]
    alphas[i] = h.rho * dot(h.s, q)
    for j = 1, #q do q[j] = q[j] - alphas[i] * h.y[j] end
  end
  -- Scale by s'y / y'y of the newest pair: a good estimate of the curvature.
  local gamma = 1
  if k > 0 then gamma = dot(hist[k].s, hist[k].y) / dot(hist[k].y, hist[k].y) end
  for j = 1, #q do q[j] = gamma * q[j] end
  for i = 1, k do
    local h = hist[i]
    local beta = h.rho * dot(h.y, q)
    for j = 1, #q do q[j] = q[j] + (alphas[i] - beta) * h.s[j] end
  end
  for j = 1, #q do q[j] = -q[j] end
  return q
end

-- Store the pair (s, y) unless its curvature s'y is too small to keep H
-- positive definite; drop the oldest pair beyond the history size.
local function push_pair(hist, s, y, m)
  local sy, yy = dot(s, y), dot(y, y)
  -- (written as "not >" so that a NaN product is also refused)
  if not (sy > 1e-10 * yy) or yy == 0 then return false end -- luacheck: ignore 581
  hist[#hist + 1] = { s = s, y = y, rho = 1 / sy }
  if #hist > m then table.remove(hist, 1) end
  return true
end

local function inf_norm(a)
  local m = 0
  for i = 1, #a do m = math.max(m, math.abs(a[i])) end
  return m
end

-- Decide whether to stop after a step; returns a reason or nil.
local function lbfgs_converged(o, f_old, f_new, gnorm, x_old, x_new)
  if gnorm <= o.gtol then return "gtol" end
  if math.abs(f_old - f_new) <= o.ftol * math.max(1, math.abs(f_old), math.abs(f_new)) then
    return "ftol"
  end
  local dx = 0
  for i = 1, #x_new do dx = math.max(dx, math.abs(x_new[i] - x_old[i])) end
  if dx <= o.xtol * math.max(1, inf_norm(x_new)) then return "xtol" end
  return nil
end

-- A failed line search at a point where the step promised a decrease within
-- ftol of f: rounding hides any decrease that small, and the ftol test would
-- have stopped after the step anyway, so the run has converged by ftol.
local function at_rounding_floor(o, f, promised)
  return promised >= 0 and promised <= o.ftol * math.max(1, math.abs(f))
end

-- Ranges an option may be restricted to: a test and how to say it.
local RANGES = {
  count = { function(v) return v >= 1 and v == math.floor(v) end, "a positive integer" },
  positive = { function(v) return v > 0 end, "a number > 0" },
  nonneg = { function(v) return v >= 0 end, "a number >= 0" },
  unit = { function(v) return v > 0 and v < 1 end, "a number in (0, 1)" },
}

-- Check that each named option, when given, is a number in its range.
local function check_options(fname, opts, ranges)
  for name, range in pairs(ranges) do
    local v, r = opts[name], RANGES[range]
    if v ~= nil and not (type(v) == "number" and v == v and r[1](v)) then
      error(string.format("lazytensor: %s: opts.%s must be %s, got %s",
        fname, name, r[2], tostring(v)), 0)
    end
  end
  if opts.callback ~= nil and type(opts.callback) ~= "function" then
    error(string.format("lazytensor: %s: opts.callback must be a function", fname), 0)
  end
end

local function lbfgs_options(opts)
  check_options("lbfgs", opts, { history = "count", max_iter = "count", max_eval = "count",
    gtol = "nonneg", ftol = "nonneg", xtol = "nonneg", c1 = "unit", c2 = "unit", max_ls = "count" })
  if (opts.c1 or 1e-4) >= (opts.c2 or 0.9) then
    error("lazytensor: lbfgs: opts.c1 must be smaller than opts.c2", 0)
  end
  local search = opts.line_search or "strong_wolfe"
  if search ~= "strong_wolfe" and search ~= "backtracking" then
    error("lazytensor: lbfgs: opts.line_search must be 'strong_wolfe' or 'backtracking', got "
          .. tostring(search), 0)
  end
  return {
    m = opts.history or 10,
    max_iter = opts.max_iter or 200,
    max_eval = opts.max_eval or math.huge,
    gtol = opts.gtol or 1e-6,
    ftol = opts.ftol or 1e-12,
    xtol = opts.xtol or 1e-12,
    ls = { c1 = opts.c1 or 1e-4, c2 = opts.c2 or 0.9, max_steps = opts.max_ls or 25 },
    backtracking = search == "backtracking",
  }
end

--- Minimise (or maximise) f with limited-memory BFGS and a strong-Wolfe line search.
-- opts: maximize, history (10), max_iter (200), max_eval (unlimited),
-- gtol (1e-6, on the gradient's Euclidean norm), ftol (1e-12, relative change
-- of the value), xtol (1e-12, largest change of a coordinate relative to
-- max(1, |x|)), c1 (1e-4), c2 (0.9), max_ls (25 evaluations per search),
-- line_search ("strong_wolfe", or "backtracking": the first of 1, 1/2, ...
-- times the step where f decreases, for a gradient that is only an estimate
-- of f's derivative), callback.
-- Stopping on ftol leaves x about sqrt(ftol) from the minimiser (f is flat
-- there); lower ftol for more accurate x. When f no longer changes in floating
-- point, no step can decrease it: if the step promised (to first order) a
-- decrease within ftol of f, the run has converged by "ftol"; otherwise it
-- ends with reason "line_search".
function optim.lbfgs(f, x0, opts)
  check_args("lbfgs", f, x0, opts)
  opts = opts or {}
  local o = lbfgs_options(opts)
  local sign = opts.maximize and -1 or 1
  local obj = make_objective("lbfgs", f, #x0, opts.maximize)

  local x = copy(x0)
  local fx, g, ok = obj.eval(x)
  if not ok then error("lazytensor: lbfgs: f(x0) or its gradient is not finite", 0) end
  local gnorm = norm2(g)
  local hist, iter, reason = {}, 0, nil
  if gnorm <= o.gtol then reason = "gtol" end

  while not reason do
    if iter >= o.max_iter then reason = "max_iter" break end
    if obj.evaluations >= o.max_eval then reason = "max_eval" break end
    local d = lbfgs_direction(g, hist)
    local dphi0 = dot(g, d)
    -- Lost descent (bad curvature, or a NaN slope): restart from -g.
    if not (dphi0 < 0) then -- luacheck: ignore 581
      hist, d = {}, lbfgs_direction(g, {})
      dphi0 = dot(g, d)
    end
    -- Without curvature information, a first step of unit length in x.
    local alpha1 = (#hist == 0) and math.min(1, 1 / inf_norm(g)) or 1
    local function search(dir, slope, a1)
      if o.backtracking then return backtracking_search(obj, x, dir, fx, a1, o.ls) end
      return wolfe_search(obj, x, dir, fx, slope, a1, o.ls)
    end
    local t = search(d, dphi0, alpha1)
    -- The decrease the first trial step promises to first order.
    local promised = -dphi0 * alpha1
    if not t and #hist > 0 then -- retry once along steepest descent
      hist, d = {}, lbfgs_direction(g, {})
      t = search(d, dot(g, d), math.min(1, 1 / inf_norm(g)))
    end
    if not t then
      reason = at_rounding_floor(o, fx, promised) and "ftol" or "line_search"
      break
    end

    iter = iter + 1
    local s, y = {}, {}
    for i = 1, #x do
      s[i] = t.x[i] - x[i]
      y[i] = t.grad[i] - g[i]
    end
    push_pair(hist, s, y, o.m)
    local x_old, f_old = x, fx
    x, fx, g = t.x, t.value, t.grad
    gnorm = norm2(g)
    reason = lbfgs_converged(o, f_old, fx, gnorm, x_old, x)
    if opts.callback and opts.callback(iter, sign * fx, copy(x), gnorm) == true then
      reason = reason or "callback"
    end
  end

  local converged = reason == "gtol" or reason == "ftol" or reason == "xtol"
  return x, sign * fx, {
    iterations = iter, evaluations = obj.evaluations, converged = converged,
    reason = reason, gradnorm = gnorm,
  }
end

-------------------------------------------------------------------------------
-- Adam

--- Minimise (or maximise) f with Adam (Kingma & Ba, 2015).
-- opts: maximize, lr (0.01), beta1 (0.9), beta2 (0.999), eps (1e-8),
-- max_iter (1000), gtol (0: off; stop when the gradient norm falls below it),
-- callback. Returns the best point seen (Adam's iterates are not monotone)
-- with its value; info.gradnorm is the gradient norm there.
function optim.adam(f, x0, opts)
  check_args("adam", f, x0, opts)
  opts = opts or {}
  check_options("adam", opts, { lr = "positive", beta1 = "unit", beta2 = "unit", eps = "positive",
    max_iter = "count", gtol = "nonneg" })
  local lr = opts.lr or 0.01
  local b1, b2, eps = opts.beta1 or 0.9, opts.beta2 or 0.999, opts.eps or 1e-8
  local max_iter, gtol = opts.max_iter or 1000, opts.gtol or 0
  local sign = opts.maximize and -1 or 1
  local obj = make_objective("adam", f, #x0, opts.maximize)
  local n = #x0

  local x = copy(x0)
  local fx, g, ok = obj.eval(x)
  if not ok then error("lazytensor: adam: f(x0) or its gradient is not finite", 0) end
  local best = { x = x, value = fx, gradnorm = norm2(g) }
  local m, v = {}, {}
  for i = 1, n do m[i], v[i] = 0, 0 end
  local t, iter, reason, min_lr = 0, 0, nil, lr * 1e-12

  while not reason do
    if norm2(g) <= gtol then reason = "gtol" break end
    if iter >= max_iter then reason = "max_iter" break end
    iter = iter + 1
    -- Propose a step from moments updated with the current gradient.
    local tn = t + 1
    local m_new, v_new, x_new = {}, {}, {}
    for i = 1, n do
      m_new[i] = b1 * m[i] + (1 - b1) * g[i]
      v_new[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]
      local mhat = m_new[i] / (1 - b1 ^ tn)
      local vhat = v_new[i] / (1 - b2 ^ tn)
      x_new[i] = x[i] - lr * mhat / (math.sqrt(vhat) + eps)
    end
    local f_new, g_new, good = obj.eval(x_new)
    if good then
      t, m, v, x, fx, g = tn, m_new, v_new, x_new, f_new, g_new
      if fx < best.value then best = { x = x, value = fx, gradnorm = norm2(g) } end
    else
      -- Step back: stay at x and try again with half the learning rate.
      lr = lr / 2
      if lr < min_lr then reason = "nonfinite" break end
    end
    if opts.callback and opts.callback(iter, sign * fx, copy(x), norm2(g)) == true then
      reason = "callback"
    end
  end

  return copy(best.x), sign * best.value, {
    iterations = iter, evaluations = obj.evaluations, converged = reason == "gtol",
    reason = reason, gradnorm = best.gradnorm, lr = lr,
  }
end

return optim
