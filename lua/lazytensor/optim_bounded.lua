--- Bound-constrained limited-memory BFGS: minimise f over a box lo <= x <= hi.
--
-- A projected quasi-Newton method in the spirit of L-BFGS-B (Byrd, Lu,
-- Nocedal and Zhu, 1995) and of Kim, Sra and Dhillon's projected
-- quasi-Newton (2010): at each iterate the coordinates held at a bound by
-- the gradient (at lo with ∂f/∂x > 0, at hi with ∂f/∂x < 0) are fixed; the
-- L-BFGS two-loop recursion gives the direction in the others; the step is
-- searched along the projected path P(x + α·d) (P clips into the box) by
-- backtracking until the Armijo condition f(x(α)) <= f(x) + c1·gᵀ(x(α) − x)
-- holds, falling back to the projected steepest-descent path when the
-- quasi-Newton one fails. Every point f is evaluated at lies inside the box
-- exactly (clipped with math.min / math.max), so a result never leaves it.
--
-- optim_bounded.lbfgsb(f, x0, lo, hi [, opts]) → x, value, info
--   f(x) returns value, grad (a Lua array of #x numbers), as optim.lbfgs's;
--   x0, lo, hi: Lua arrays (x0 is clipped into the box first; lo < hi).
--   opts: maximize, history (10), max_iter (100), max_eval (unlimited),
--   pgtol (1e-8: stop when the projected gradient's largest entry,
--   |P(x − g) − x|, is at most it), ftol (1e-12, relative change of f),
--   c1 (1e-4), max_ls (30 trials per search), callback(iter, value, x).
--   info: iterations, evaluations, converged, reason ("pgtol", "ftol",
--   "max_iter", "max_eval", "line_search", "callback"), pgnorm.
local optim_bounded = {}

local function fail(fmt, ...) error("lazytensor: lbfgsb: " .. string.format(fmt, ...), 0) end

local function is_finite(v)
  return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge
end

local function dot(a, b)
  local s = 0
  for i = 1, #a do s = s + a[i] * b[i] end
  return s
end

local function copy(a)
  local c = {}
  for i = 1, #a do c[i] = a[i] end
  return c
end

local function clip(v, lo, hi)
  return math.min(hi, math.max(lo, v))
end

-------------------------------------------------------------- checks --

local function check_array(name, a, n)
  if type(a) ~= "table" or (n and #a ~= n) or #a == 0 then
    fail("%s must be an array of %s numbers", name, n and tostring(n) or "one or more")
  end
  for i = 1, #a do
    if not is_finite(a[i]) then fail("%s[%d] is not a finite number", name, i) end
  end
end

local DEFAULTS = {history = 10, max_iter = 100, max_eval = math.huge, pgtol = 1e-8,
                  ftol = 1e-12, c1 = 1e-4, max_ls = 30}
local COUNTS = {history = true, max_iter = true, max_eval = true, max_ls = true}

local function options(opts)
  if opts ~= nil and type(opts) ~= "table" then fail("opts must be a table, got %s", type(opts)) end
  opts = opts or {}
  local o = {}
  for key, v in pairs(opts) do
    if DEFAULTS[key] == nil and key ~= "maximize" and key ~= "callback" then
      fail("unknown option '%s'", tostring(key))
    end
    if DEFAULTS[key] ~= nil then
      local ok = type(v) == "number" and v == v and v >= 0
      if COUNTS[key] then ok = ok and v >= 1 and v == math.floor(v) end
      if key == "c1" then ok = ok and v > 0 and v < 1 end
      if not ok then fail("opts.%s has a bad value %s", key, tostring(v)) end
    end
  end
  for key, v in pairs(DEFAULTS) do
    if opts[key] == nil then o[key] = v else o[key] = opts[key] end
  end
  if opts.callback ~= nil and type(opts.callback) ~= "function" then
    fail("opts.callback must be a function")
  end
  o.callback, o.sign = opts.callback, opts.maximize and -1 or 1
  return o
end

-------------------------------------------------------------- pieces --

-- f in the minimising sign, counted; value, gradient and whether both are
-- finite.
local function objective(f, n, sign)
  local obj = {evaluations = 0}
  function obj.eval(x)
    obj.evaluations = obj.evaluations + 1
    local v, g = f(x)
    if type(v) ~= "number" or type(g) ~= "table" or #g ~= n then
      fail("f must return value, gradient (a number and an array of %d numbers)", n)
    end
    local gs, ok = {}, is_finite(v)
    for i = 1, n do
      if type(g[i]) ~= "number" then fail("gradient entry %d is a %s", i, type(g[i])) end
      gs[i] = sign * g[i]
      ok = ok and is_finite(gs[i])
    end
    return sign * v, gs, ok
  end
  return obj
end

-- Coordinates the gradient holds at a bound: true where fixed.
local function held(x, g, lo, hi)
  local fixed = {}
  for i = 1, #x do
    fixed[i] = (x[i] <= lo[i] and g[i] > 0) or (x[i] >= hi[i] and g[i] < 0)
  end
  return fixed
end

-- The projected gradient's largest entry, |P(x − g) − x|∞.
local function projected_gradient_norm(x, g, lo, hi)
  local m = 0
  for i = 1, #x do m = math.max(m, math.abs(clip(x[i] - g[i], lo[i], hi[i]) - x[i])) end
  return m
end

-- The L-BFGS direction −H·g over the free coordinates (zero on the fixed):
-- the two-loop recursion. (bo.optimize runs it on restarts × d coordinates
-- at every iteration: the history's arrays are read into locals.)
local function direction(g, fixed, hist)
  local n = #g
  local q = {}
  for i = 1, n do q[i] = fixed[i] and 0 or g[i] end
  local alphas = {}
  for k = #hist, 1, -1 do
    local h = hist[k]
    local a, y = h.rho * dot(h.s, q), h.y
    alphas[k] = a
    for i = 1, n do q[i] = q[i] - a * y[i] end
  end
  local gamma = 1
  local newest = hist[#hist]
  if newest then gamma = newest.sy / newest.yy end
  for i = 1, n do q[i] = gamma * q[i] end
  for k = 1, #hist do
    local h = hist[k]
    local c, s = alphas[k] - h.rho * dot(h.y, q), h.s
    for i = 1, n do q[i] = q[i] + c * s[i] end
  end
  for i = 1, n do q[i] = fixed[i] and 0 or -q[i] end
  return q
end

local function steepest(g, fixed)
  local d = {}
  for i = 1, #g do d[i] = fixed[i] and 0 or -g[i] end
  return d
end

-- P(x + α·d), clipped into the box.
local function projected_step(x, alpha, d, lo, hi)
  local xa = {}
  for i = 1, #x do xa[i] = clip(x[i] + alpha * d[i], lo[i], hi[i]) end
  return xa
end

-- Backtracking along the projected path from alpha1: the first point that
-- satisfies Armijo's condition, or nil.
local function search(obj, x, fx, g, d, lo, hi, alpha1, o)
  local alpha = alpha1
  for _ = 1, o.max_ls do
    local xa = projected_step(x, alpha, d, lo, hi)
    local decrease = 0
    for i = 1, #x do decrease = decrease + g[i] * (xa[i] - x[i]) end
    if decrease >= 0 then
      -- at this length the projected path no longer descends to first
      -- order (or does not move): a shorter step may
      if decrease == 0 and alpha < 1e-20 then return nil end
    else
      local v, ga, ok = obj.eval(xa)
      if ok and v <= fx + o.c1 * decrease then return xa, v, ga end
    end
    alpha = alpha * 0.5
  end
  return nil
end

local function push_pair(hist, s, y, m)
  local sy, yy = dot(s, y), dot(y, y)
  if not (sy > 1e-10 * yy) or yy == 0 then return end -- luacheck: ignore 581 (NaN)
  hist[#hist + 1] = {s = s, y = y, rho = 1 / sy, sy = sy, yy = yy}
  if #hist > m then table.remove(hist, 1) end
end

local function inf_norm(a)
  local m = 0
  for i = 1, #a do m = math.max(m, math.abs(a[i])) end
  return m
end

-- One iteration: a step from x, or nil when no search succeeds.
local function step(obj, st, lo, hi, o)
  local fixed = held(st.x, st.g, lo, hi)
  local d = direction(st.g, fixed, st.hist)
  local first = #st.hist == 0 and math.min(1, 1 / math.max(inf_norm(d), 1e-300)) or 1
  local xn, fn, gn = nil, nil, nil
  if dot(d, st.g) < 0 then xn, fn, gn = search(obj, st.x, st.f, st.g, d, lo, hi, first, o) end
  if not xn then -- the projected steepest-descent path, memory dropped
    st.hist = {}
    d = steepest(st.g, fixed)
    xn, fn, gn = search(obj, st.x, st.f, st.g, d, lo, hi,
                        math.min(1, 1 / math.max(inf_norm(d), 1e-300)), o)
  end
  return xn, fn, gn
end

--- Minimise (or maximise) f over the box [lo, hi]: see the header.
function optim_bounded.lbfgsb(f, x0, lo, hi, opts)
  if type(f) ~= "function" and not (getmetatable(f) or {}).__call then
    fail("f must be a function, got %s", type(f))
  end
  check_array("x0", x0)
  check_array("lo", lo, #x0)
  check_array("hi", hi, #x0)
  for i = 1, #x0 do
    if lo[i] >= hi[i] then fail("lo[%d] = %s must be below hi[%d] = %s", i, lo[i], i, hi[i]) end
  end
  local o = options(opts)
  local obj = objective(f, #x0, o.sign)
  local st = {x = {}, hist = {}}
  for i = 1, #x0 do st.x[i] = clip(x0[i], lo[i], hi[i]) end
  local ok
  st.f, st.g, ok = obj.eval(st.x)
  if not ok then fail("f(x0) or its gradient is not finite") end
  local iter, reason = 0, nil
  local pg = projected_gradient_norm(st.x, st.g, lo, hi)
  if pg <= o.pgtol then reason = "pgtol" end
  while not reason do
    if iter >= o.max_iter then reason = "max_iter" break end
    if obj.evaluations >= o.max_eval then reason = "max_eval" break end
    local xn, fn, gn = step(obj, st, lo, hi, o)
    if not xn then
      -- at the rounding floor no step lowers f: converged when the
      -- projected gradient promised less than ftol of f
      local promised = 0
      for i = 1, #st.x do
        promised = promised + st.g[i] * (st.x[i] - clip(st.x[i] - st.g[i], lo[i], hi[i]))
      end
      reason = promised <= o.ftol * math.max(1, math.abs(st.f)) and "ftol" or "line_search"
      break
    end
    iter = iter + 1
    local s, y = {}, {}
    for i = 1, #xn do s[i], y[i] = xn[i] - st.x[i], gn[i] - st.g[i] end
    push_pair(st.hist, s, y, o.history)
    local f_old = st.f
    st.x, st.f, st.g = xn, fn, gn
    pg = projected_gradient_norm(st.x, st.g, lo, hi)
    if pg <= o.pgtol then
      reason = "pgtol"
    elseif math.abs(f_old - fn) <= o.ftol * math.max(1, math.abs(f_old), math.abs(fn)) then
      reason = "ftol"
    end
    if o.callback and o.callback(iter, o.sign * st.f, copy(st.x)) == true then
      reason = reason or "callback"
    end
  end
  return copy(st.x), o.sign * st.f, {
    iterations = iter, evaluations = obj.evaluations, reason = reason, pgnorm = pg,
    converged = reason == "pgtol" or reason == "ftol",
  }
end

-- The pieces optim_bounded_batch.lua runs several of these with.
optim_bounded.pieces = {
  options = options, check_array = check_array, is_finite = is_finite, clip = clip, copy = copy,
  dot = dot, held = held, direction = direction, steepest = steepest, inf_norm = inf_norm,
  projected_step = projected_step, push_pair = push_pair,
  projected_gradient_norm = projected_gradient_norm,
}

return optim_bounded
