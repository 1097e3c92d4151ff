-- bo.minimize, its designs and test problems (issue 28): the Sobol sequence
-- against published values and an independent integer computation, the
-- scrambled and Latin-hypercube designs' strata, the problems' optima, the
-- loop against random search on Branin, the failure rule, bad input, the
-- callback and the history.
local lt = require "lazytensor"
local bo = require "lazytensor.bo"
local gp = require "lazytensor.gp"
local design = require "lazytensor.bo.design"
local problems = require "lazytensor.bo.problems"

local unpack = table.unpack or unpack -- luacheck: ignore 143

local function errors_with(fn, pattern)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.is_string(err)
  assert.truthy(err:find(pattern, 1, true), "got: " .. tostring(err))
  return err
end

----------------------------------------------------- an integer Sobol --
-- The sequence computed from Joe and Kuo's published (s, a, m) with
-- integers (XOR by arithmetic: the specs run on Lua 5.1), point i in
-- Gray-code order as the XOR of the direction numbers at the set bits of
-- gray(i) = i ⊕ ⌊i/2⌋ — not the incremental digit arrays design.lua keeps.
local B = 30
local function xor(a, b)
  local r, w = 0, 1
  for _ = 1, B + 1 do
    local x, y = a % 2, b % 2
    if x ~= y then r = r + w end
    a, b, w = (a - x) / 2, (b - y) / 2, w * 2
  end
  return r
end

-- new-joe-kuo-6.21201, lines for dimensions 2, 3, 20 and 21: s, a, m_1..m_s
local PUBLISHED = {[2] = {1, 0, {1}}, [3] = {2, 1, {1, 3}}, [20] = {7, 1, {1, 3, 7, 11, 23, 15, 103}},
                   [21] = {7, 4, {1, 3, 7, 13, 13, 15, 69}}}

local function integer_directions(dim)
  local V = {}
  if dim == 1 then
    for k = 1, B do V[k] = 2 ^ (B - k) end
    return V
  end
  local s, a, m = unpack(PUBLISHED[dim])
  for k = 1, s do V[k] = m[k] * 2 ^ (B - k) end
  for k = s + 1, B do
    local v = xor(V[k - s], math.floor(V[k - s] / 2 ^ s))
    for r = 1, s - 1 do
      if math.floor(a / 2 ^ (s - 1 - r)) % 2 == 1 then v = xor(v, V[k - r]) end
    end
    V[k] = v
  end
  return V
end

local function integer_point(V, i)
  local g = xor(i, math.floor(i / 2))
  local x, k = 0, 1
  while g > 0 do
    if g % 2 == 1 then x = xor(x, V[k]) end
    g, k = math.floor(g / 2), k + 1
  end
  return x / 2 ^ B
end

describe("bo.sobol", function()
  it("gives the published first points of the plain sequence", function()
    -- SciPy's documented qmc.Sobol(d=2, scramble=False).random_base2(3)
    -- (Joe–Kuo's directions), and the third coordinate of the same points
    local expected = {{0, 0, 0}, {0.5, 0.5, 0.5}, {0.75, 0.25, 0.25}, {0.25, 0.75, 0.75},
                      {0.375, 0.375, 0.625}, {0.875, 0.875, 0.125}, {0.625, 0.125, 0.875},
                      {0.125, 0.625, 0.375}}
    local X = bo.sobol(8, 3, {scramble = false})
    assert.same({8, 3}, X:shape())
    assert.same(expected, X:totable())
  end)

  it("equals an integer computation from Joe–Kuo's table in dimensions 1, 2, 3, 20, 21", function()
    local rows = design.sobol_rows(300, 21, {scramble = false})
    for _, dim in ipairs{1, 2, 3, 20, 21} do
      local V = integer_directions(dim)
      for i = 1, 300 do
        assert.are.equal(integer_point(V, i - 1), rows[i][dim])
      end
    end
  end)

  it("scrambled: one point in each of the 2^m intervals of every coordinate", function()
    for _, m in ipairs{4, 7} do
      local rows = design.sobol_rows(2 ^ m, 21, {seed = 3})
      for j = 1, 21 do
        local seen = {}
        for i = 1, 2 ^ m do
          local k = math.floor(rows[i][j] * 2 ^ m)
          assert.is_nil(seen[k], ("m = %d, dimension %d, interval %d twice"):format(m, j, k))
          seen[k] = true
        end
      end
    end
  end)

  it("scrambled: the first two coordinates stay a (0, m, 2)-net", function()
    -- every box of area 2^-m, [a/2^k, (a+1)/2^k) × [b/2^(m-k), ...), one point
    local m = 6
    local rows = design.sobol_rows(2 ^ m, 2, {seed = 11})
    for k = 0, m do
      local seen = {}
      for i = 1, 2 ^ m do
        local key = math.floor(rows[i][1] * 2 ^ k) .. ":" .. math.floor(rows[i][2] * 2 ^ (m - k))
        assert.is_nil(seen[key], "box " .. key .. " holds two points")
        seen[key] = true
      end
    end
  end)

  it("is deterministic for a seed, different across seeds, and not the plain sequence", function()
    local a = bo.sobol(16, 4, {seed = 5}):totable()
    local b = bo.sobol(16, 4, {seed = 5}):totable()
    local c = bo.sobol(16, 4, {seed = 6}):totable()
    assert.same(a, b)
    assert.are_not.same(a, c)
    assert.are_not.equal(0, a[1][1])
    for _, row in ipairs(a) do
      for _, v in ipairs(row) do assert.is_true(v >= 0 and v < 1) end
    end
  end)

  it("refuses bad sizes and options", function()
    errors_with(function() bo.sobol(0, 2) end, "lazytensor: bo: sobol: n must be an integer")
    errors_with(function() bo.sobol(4, design.max_sobol_dim + 1) end, "sobol: d must be an integer")
    errors_with(function() bo.sobol(4, 2, {scrambel = true}) end, "unknown option 'scrambel'")
  end)
end)

describe("bo.latin_hypercube", function()
  it("puts one point in each of the n strata of every coordinate, seeded", function()
    local n, d = 37, 5
    local rows = bo.latin_hypercube(n, d, {seed = 9}):totable()
    for j = 1, d do
      local seen = {}
      for i = 1, n do
        local k = math.floor(rows[i][j] * n)
        assert.is_true(k >= 0 and k < n)
        assert.is_nil(seen[k])
        seen[k] = true
      end
    end
    assert.same(rows, bo.latin_hypercube(n, d, {seed = 9}):totable())
    assert.are_not.same(rows, bo.latin_hypercube(n, d, {seed = 10}):totable())
  end)
end)

----------------------------------------------------------- problems --
describe("bo.problems", function()
  local cases = {problems.branin, problems.hartmann3, problems.hartmann6, problems.ackley(3),
                 problems.levy(4), problems.rosenbrock(3)}

  it("reach their known minimum at their minimisers, which are local minima", function()
    for _, p in ipairs(cases) do
      for _, xstar in ipairs(p.minimizers) do
        local v = p(xstar)
        assert.is_true(math.abs(v - p.optimum) < 1e-9, p.name .. ": " .. v)
        for j = 1, p.dim do
          for _, h in ipairs{-1e-3, 1e-3} do
            local x = {unpack(xstar)}
            x[j] = x[j] + h
            assert.is_true(p(x) > v - 1e-12, p.name .. " lower beside its minimiser")
          end
        end
      end
    end
  end)

  it("agree with values computed by hand", function()
    -- Branin at the origin: (−6)² + 10(1 − 1/(8π)) + 10
    assert.is_true(math.abs(problems.branin{0, 0} - (46 + 10 * (1 - 1 / (8 * math.pi)))) < 1e-12)
    -- Rosenbrock (0, 0): 100·0 + 1; Levy (1, 1, 1, 1) = sin²(π) ≈ 0
    assert.are.equal(1, problems.rosenbrock(2){0, 0})
    -- Ackley at (1, 0): −20 e^{−0.2/√2} − e^{(1 + 1)/2} + 20 + e
    local expected = -20 * math.exp(-0.2 * math.sqrt(0.5)) - math.exp(1) + 20 + math.exp(1)
    assert.is_true(math.abs(problems.ackley(2){1, 0} - expected) < 1e-12)
    -- Hartmann-6 at the centre of the cube (BoTorch: −0.505)
    local h = problems.hartmann6{0.5, 0.5, 0.5, 0.5, 0.5, 0.5}
    assert.is_true(h < -0.50 and h > -0.51, tostring(h))
    assert.are.equal(problems.branin{1, 2}, problems.branin(lt.tensor{1, 2}))
  end)

  it("by name, and refuse a wrong point", function()
    assert.are.equal(4, problems.get("levy4").dim)
    assert.are.equal(problems.hartmann6, problems.get("hartmann6"))
    errors_with(function() problems.get("nope") end, "lazytensor: bo: problems: get: unknown")
    errors_with(function() problems.branin{1} end, "branin takes 2 coordinates")
  end)
end)

------------------------------------------------------------- the loop --
-- Small settings for speed: the acquisition's optimiser with few starts.
local FAST = {restarts = 2, raw_samples = 64}
local function opts(t)
  local o = {}
  for k, v in pairs(FAST) do o[k] = v end
  for k, v in pairs(t) do o[k] = v end
  return o
end

local function branin(x) return problems.branin.f(x) end

local function median(t)
  local s = {unpack(t)}
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

describe("bo.minimize", function()
  local bounds = problems.branin.bounds

  it("on Branin beats random search's median and gets close to the optimum", function()
    -- The median of 5 seeds: with these small settings one run's regret is
    -- chaotic in the last bits of the fit (over 40 seeds the median is 0.017
    -- to 0.019 whether the loop fits the model itself or by model:fit, 4 and
    -- 9 of the 40 runs end above 0.05), and seeds 1-3's median moved from 0.039
    -- to 0.052 with a change of 10⁻⁷ in the log posterior.
    local budget, found, random = 25, {}, {}
    for seed = 1, 5 do
      local _, y = bo.minimize(branin, bounds, opts{budget = budget, seed = seed})
      found[seed] = y
      -- random search: the same budget of uniform points
      lt.manual_seed(1000 + seed)
      local U = lt.rand(budget, 2):totable()
      local best = math.huge
      for _, u in ipairs(U) do best = math.min(best, branin{-5 + 15 * u[1], 15 * u[2]}) end
      random[seed] = best
    end
    assert.is_true(median(found) < median(random),
                   ("bo %.4g, random %.4g"):format(median(found), median(random)))
    assert.is_true(median(found) - 0.397887 < 0.05, "bo's median " .. median(found))
  end)

  it("keeps a history: every evaluation, its phase, the best so far", function()
    local seen = {}
    local x, y, h = bo.minimize(function(p)
      seen[#seen + 1] = {p[1], p[2]}
      return branin(p)
    end, bounds, opts{budget = 9, seed = 2, init = 4})
    assert.are.equal(9, #h)
    assert.are.equal("budget", h.reason)
    local best = math.huge
    for i, rec in ipairs(h) do
      assert.are.equal(i, rec.evaluation)
      assert.are.equal(i <= 4 and "init" or "bo", rec.phase)
      assert.same(seen[i], rec.x)
      assert.are.equal(branin(rec.x), rec.y)
      for j = 1, 2 do
        assert.is_true(rec.x[j] >= bounds[1][j] and rec.x[j] <= bounds[2][j])
      end
      best = math.min(best, rec.y)
      assert.are.equal(best, rec.best)
      if rec.phase == "bo" then
        assert.are.equal(i - 4, rec.step)
        assert.are.equal("logei", rec.acquisition)
        assert.is_number(rec.acquisition_value)
        assert.is_table(rec.fit) -- refit_every = 1: a fit at every step
      end
    end
    assert.are.equal(best, y)
    assert.same(h[h.best_index].x, x)
    assert.are.equal(9, h.model.n)
  end)

  it("with refit_every = 3 conditions the model between refits", function()
    local _, _, h = bo.minimize(branin, bounds, opts{budget = 11, seed = 4, init = 5,
                                                      refit_every = 3})
    for i = 6, 11 do
      assert.are.equal((i - 5) % 3 == 0, h[i].fit ~= nil, "evaluation " .. i)
    end
    assert.are.equal(11, h.model.n)
  end)

  it("takes q points a step, and init as a list of points", function()
    local init = {{0, 0}, {5, 5}, {-2, 10}}
    local _, _, h = bo.minimize(branin, bounds, opts{budget = 8, init = init, q = 2, seed = 1})
    assert.are.equal(8, #h)
    for i = 1, 3 do assert.same(init[i], h[i].x) end
    assert.are.equal(1, h[4].step)
    assert.are.equal(1, h[5].step)
    assert.are.equal(3, h[8].step) -- the last step has one evaluation left
    assert.are_not.same(h[4].x, h[5].x)
  end)

  it("runs every acquisition, the batch ones q points at a time", function()
    for _, case in ipairs{{"ei", 1}, {"pi", 1}, {"ucb", 1}, {"qei", 2}, {"qnei", 2},
                          {"thompson", 2}} do
      local name, q = case[1], case[2]
      local _, y, h = bo.minimize(branin, bounds, opts{budget = 3 + 2 * q, init = 3, q = q,
                                                        seed = 7, acquisition = name,
                                                        samples = name:sub(1, 1) == "q" and 32 or nil})
      assert.are.equal(3 + 2 * q, #h, name)
      for i = 4, #h do
        assert.are.equal(name, h[i].acquisition)
        assert.is_nil(h[i].acquisition_error, name .. ": " .. tostring(h[i].acquisition_error))
        assert.are.equal(branin(h[i].x), h[i].y)
      end
      assert.are_not.same(h[4].x, h[5].x)
      assert.is_true(y <= h[1].y and y <= h[2].y and y <= h[3].y)
    end
  end)

  it("with a known noise variance takes noisy values", function()
    lt.manual_seed(3)
    local noise = lt.randn(40):totable()
    local k = 0
    local _, _, h = bo.minimize(function(p)
      k = k + 1
      return branin(p) + 0.5 * noise[k]
    end, bounds, opts{budget = 9, seed = 8, noise = 0.25})
    assert.are.equal(9, #h)
    assert.is_true(h.model.fixed.noise)
    -- the model's noise is the known variance over the values' variance
    assert.is_true(math.abs(h.model.noise - 0.25 / h.transform.std ^ 2) < 1e-12)
  end)

  it("builds its model with BoTorch's priors and the noise floor, kept by condition", function()
    local _, _, h = bo.minimize(branin, bounds, opts{budget = 9, seed = 2, refit_every = 2})
    -- the last step (k = 4) refitted, the one before conditioned (k = 3)
    local function check(model)
      local names = {}
      for name, p in pairs(model.priors) do names[#names + 1] = name .. " " .. p:describe() end
      table.sort(names)
      assert.are.same({"lengthscale gamma(3, 6)", "noise gamma(1.1, 0.05)",
                       "variance gamma(2, 0.15)"}, names)
      assert.are.same({noise = {1e-4, math.huge}}, model.bounds)
      assert.is_true(model.noise > 1e-4)
    end
    check(h.model)
    assert.is_table(h[9].fit)
    -- the fit is the model's own: its log posterior is the model's
    assert.is_true(math.abs(h[9].fit.log_posterior - h.model:log_posterior()) < 1e-8)
    check(h.model:condition({{0.5, 0.5}}, {0}))
    -- a step by model:condition keeps them as well
    local _, _, h2 = bo.minimize(branin, bounds, opts{budget = 8, seed = 2, refit_every = 5})
    assert.is_nil(h2[8].fit)
    check(h2.model)
  end)

  it("gives a caller's kernel the priors of the names it has, the noise's always", function()
    local function prior_names(model)
      local names = {}
      for name in pairs(model.priors) do names[#names + 1] = name end
      table.sort(names)
      return names
    end
    local _, _, h = bo.minimize(branin, bounds, opts{budget = 7, seed = 1,
      kernel = gp.kernels.rbf{lengthscale = {0.3, 0.3}, variance = 1}})
    assert.are.same({"lengthscale", "noise", "variance"}, prior_names(h.model))
    -- a tree's hyperparameters are k<i>_<name>: only the noise's prior and floor
    local _, _, h2 = bo.minimize(branin, bounds, opts{budget = 7, seed = 1,
      kernel = gp.kernels.rbf{lengthscale = 0.3} + gp.kernels.matern52{lengthscale = 0.5}})
    assert.are.same({"noise"}, prior_names(h2.model))
    assert.are.same({noise = {1e-4, math.huge}}, h2.model.bounds)
    -- a known noise: no prior or bound on it
    local _, _, h3 = bo.minimize(branin, bounds, opts{budget = 7, seed = 1, noise = 0.01})
    assert.are.same({"lengthscale", "variance"}, prior_names(h3.model))
    assert.are.same({}, h3.model.bounds)
  end)

  it("maximises with maximize = true", function()
    local x, y = bo.minimize(function(p) return -branin(p) end, bounds,
                             opts{budget = 14, seed = 3, maximize = true})
    assert.are.equal(-branin(x), y)
    assert.is_true(y > -1.5, "best " .. y)
  end)

  it("the failure rule: a failed evaluation is recorded and the loop goes on", function()
    local calls = 0
    local x, y, h = bo.minimize(function(p)
      calls = calls + 1
      if calls % 3 == 0 then error("simulator crashed") end
      if calls % 5 == 0 then return 0 / 0 end
      return branin(p)
    end, bounds, opts{budget = 12, seed = 5})
    assert.are.equal(12, #h)
    local failed = 0
    for _, rec in ipairs(h) do
      if rec.failed then
        failed = failed + 1
        assert.is_nil(rec.y)
        assert.truthy(rec.error:find("simulator crashed", 1, true)
                      or rec.error:find("non-finite", 1, true), rec.error)
      else
        assert.are.equal(branin(rec.x), rec.y)
      end
    end
    assert.are.equal(6, failed) -- errors at calls 3, 6, 9, 12; NaN at 5, 10
    assert.are.equal(failed, h.failed)
    assert.are.equal(branin(x), y)
  end)

  it("all initial points failing is an error, the history kept in opts.history", function()
    local history = {}
    local err = errors_with(function()
      bo.minimize(function() error("no licence") end, bounds,
                  {budget = 10, seed = 1, history = history})
    end, "lazytensor: bo: minimize: all 5 initial points failed")
    assert.truthy(err:find("no licence", 1, true))
    assert.are.equal(5, #history)
    assert.is_true(history[5].failed)
    assert.are.equal("all initial points failed", history.reason)
    -- non-numbers count as failures too
    errors_with(function()
      bo.minimize(function() return "3" end, bounds, {budget = 10, init = 2})
    end, "f returned string")
  end)

  it("stops when the callback returns true, returning what it found", function()
    local calls = 0
    local x, y, h = bo.minimize(branin, bounds, opts{budget = 30, seed = 1, callback = function(rec, hist)
      calls = calls + 1
      assert.are.equal(hist[#hist], rec)
      return rec.evaluation == 7
    end})
    assert.are.equal(7, calls)
    assert.are.equal(7, #h)
    assert.are.equal("callback", h.reason)
    assert.are.equal(h[h.best_index].y, y)
    assert.same(h[h.best_index].x, x)
  end)

  it("reports progress through lt.settings.progress", function()
    local seen = {}
    lt.settings.progress = function(p)
      if p.method == "bo.minimize" then seen[#seen + 1] = p end
    end
    local ok, err = pcall(bo.minimize, branin, bounds, opts{budget = 6, seed = 1})
    lt.settings.progress = false
    assert.is_true(ok, err)
    assert.are.equal(6, #seen)
    assert.are.equal(6, seen[6].iteration)
  end)

  it("refuses bad input with clear errors", function()
    local f = branin
    errors_with(function() bo.minimize(f, {{0, 0}, {1, 0}}, {budget = 10}) end,
                "lazytensor: bo: minimize: bounds: lo[2] = 0 is not below hi[2] = 0")
    errors_with(function() bo.minimize(f, {{0, 2}, {1, 1}}, {budget = 10}) end,
                "lo[2] = 2 is not below hi[2] = 1")
    errors_with(function() bo.minimize(f, {{0, 0}, {1}}, {budget = 10}) end,
                "bounds: lo has 2 entries and hi 1")
    errors_with(function() bo.minimize(f, {0, 1}, {budget = 10}) end, "bounds must be")
    errors_with(function() bo.minimize(f, lt.zeros(3, 2), {budget = 10}) end,
                "bounds must be a 2×d tensor")
    errors_with(function() bo.minimize(f, bounds, {budget = 4}) end,
                "budget = 4 is below the initial design's 5 points")
    errors_with(function() bo.minimize(f, bounds, {budget = 10, init = 11}) end,
                "budget = 10 is below the initial design's 11 points")
    errors_with(function() bo.minimize(f, bounds, {}) end, "opts.budget")
    errors_with(function() bo.minimize(f, bounds, {budget = 10, q = 0}) end,
                "q must be a positive integer, got 0")
    errors_with(function() bo.minimize(f, bounds, {budget = 10, q = 1.5}) end, "q must be")
    errors_with(function() bo.minimize(f, bounds, {budget = 10, acquisition = "EI"}) end,
                "unknown acquisition 'EI'")
    errors_with(function() bo.minimize("f", bounds, {budget = 10}) end,
                "f must be a function, got string")
    errors_with(function() bo.minimize(f, bounds, {budget = 10, bugdet = 3}) end,
                "unknown option 'bugdet'")
    errors_with(function() bo.minimize(f, bounds, {budget = 10, init = {{20, 0}}}) end,
                "init[1][1] = 20 is not inside the bounds")
    errors_with(function() bo.minimize(f, bounds, {budget = 10, design = "grid"}) end,
                "design must be 'sobol' or 'lhs'")
  end)
end)
