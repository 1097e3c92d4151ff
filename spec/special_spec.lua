-- Special functions: lt.erf, erfc, erfcx, normal_cdf, normal_pdf,
-- normal_log_cdf, normal_log_pdf (src/core/special.c). Values are checked
-- against references computed independently of the C code: series and
-- asymptotic expansions summed here in plain Lua, and a table of values
-- printed by mpmath at 50 digits (rounded to 20), at points chosen so that
-- the plain-Lua formulas are themselves exact to a few ulp (x²/2 exactly
-- representable, series far from cancellation).
local lt = require "lazytensor"

local sqrt, exp, log, abs, pi = math.sqrt, math.exp, math.log, math.abs, math.pi
local LOG_SQRT_2PI = 0.5 * log(2 * pi)

local function rel_err(got, want)
  if got == want then return 0 end
  return abs(got - want) / abs(want)
end

local function assert_rel(want, got, tol, what)
  local e = rel_err(got, want)
  assert(e <= tol, string.format("%s: got %.17g, want %.17g (relative error %.3g > %.3g)",
                                 what, got, want, e, tol))
end

-- erf(x) = 2/√π · e^{-x²} · Σ_n 2^n x^{2n+1} / (1·3·…·(2n+1)): every term
-- positive, so no cancellation (unlike the alternating Taylor series).
-- e2 is x², passed exactly.
local function erf_series(x, e2)
  local term, sum, n = x, x, 0
  while term > 1e-18 * sum do
    n = n + 1
    term = term * 2 * e2 / (2 * n + 1)
    sum = sum + term
  end
  return 2 / sqrt(pi) * exp(-e2) * sum
end

-- Σ_n (-1)^n (2n-1)!! / (2z²)^n, the asymptotic series of √π·z·erfcx(z),
-- summed up to its smallest term (the truncation error is below that term:
-- e^{-z²} in size).
local function asymptotic_sum(two_z2)
  local term, sum, n = 1, 1, 0
  while true do
    n = n + 1
    local next_term = -term * (2 * n - 1) / two_z2
    if abs(next_term) >= abs(term) or abs(next_term) < 1e-20 then break end
    term = next_term
    sum = sum + term
  end
  return sum
end

-- log(1 + u) for small |u| by its series (Lua 5.1 has no math.log1p).
local function log1p_small(u)
  assert(abs(u) < 0.1)
  local sum, power, n = 0, 1, 0
  repeat
    n = n + 1
    power = power * -u
    sum = sum - power / n
  until abs(power) < 1e-20
  return sum
end

-- The lower tail for x ≪ 0: Φ(x) = φ(x)/|x| · S, S = asymptotic_sum(x²)
-- (with z = x/√2, 2z² = x²).
local function cdf_tail(x)
  return exp(-x * x / 2) / sqrt(2 * pi) / -x * asymptotic_sum(x * x)
end

local function log_cdf_tail(x)
  return -x * x / 2 - log(-x) - LOG_SQRT_2PI + log1p_small(asymptotic_sum(x * x) - 1)
end

-- mpmath, 50 digits, rounded to 20.
local ERFC = {[0.5] = 0.47950012218695346232, [1] = 0.15729920705028513066,
              [2] = 0.0046777349810472658379, [3] = 0.000022090496998585441373,
              [4] = 1.5417257900280018852e-8, [5] = 1.5374597944280348502e-12,
              [6] = 2.1519736712498913117e-17, [10] = 2.088487583762544757e-45,
              [20] = 5.3958656116079009289e-176, [26] = 5.6631924088561428465e-296}
local ERFCX = {[0.5] = 0.61569034419292587487, [1] = 0.42758357615580700441,
               [2] = 0.25539567631050574387, [3] = 0.17900115118138995042,
               [4] = 0.13699945762506138989, [5] = 0.11070463773306862637,
               [6] = 0.092776567800538354389, [10] = 0.056140992743822585858,
               [20] = 0.028174348741051319319, [26] = 0.021683584850562906616,
               [-0.5] = 1.9523604891825570933, [-3] = 16205.988853999586625,
               [-10] = 5.3762342836322708968e+43, [-26] = 7.6577249314905683515e+293}
local CDF = {[-20] = 2.7536241186062336951e-89, [-8] = 6.2209605742717841235e-16,
             [-5] = 2.8665157187919391167e-7, [-3] = 0.0013498980316300945267,
             [5] = 0.99999971334842812081, [8] = 0.9999999999999993779}
local LOG_CDF = {[-1e10] = -50000000000000000024.0, [-1e3] = -500007.82669481218431,
                 [-40] = -804.60844201375378817, [-38] = -726.5572160188201301,
                 [-20] = -203.91715537109726394, [-8] = -35.013437159914549896,
                 [-5] = -15.064998393988725736, [-3] = -6.6077262215103495433,
                 [5] = -2.8665161296376359338e-7, [8] = -6.2209605742717860585e-16,
                 [10] = -7.619853024160526066e-24, [30] = -4.9067139271481870595e-198}

local FUNCTIONS = {"erf", "erfc", "erfcx", "normal_cdf", "normal_pdf", "normal_log_cdf",
                   "normal_log_pdf"}

describe("special functions", function()
  describe("erf, erfc and erfcx", function()
    it("match the positive series of erf at moderate x", function()
      for _, x in ipairs{0.25, 0.5, 1, 1.5, 2, 2.5, 3} do
        -- the series' own rounding grows with its ~4x² terms (2e-15 at x = 3)
        local want = erf_series(x, x * x)
        assert_rel(want, lt.erf(x), 2e-15, "erf(" .. x .. ")")
        assert_rel(-want, lt.erf(-x), 2e-15, "erf(" .. -x .. ")")
      end
      -- erfc near 0 from the same series, where 1 - erf does not cancel
      assert_rel(1 - erf_series(0.25, 0.0625), lt.erfc(0.25), 1e-15, "erfc(0.25)")
    end)

    it("match the table of erfc and erfcx, deep into the tail", function()
      for x, want in pairs(ERFC) do assert_rel(want, lt.erfc(x), 1e-15, "erfc(" .. x .. ")") end
      for x, want in pairs(ERFCX) do
        assert_rel(want, lt.erfcx(x), 1e-15, "erfcx(" .. x .. ")")
      end
    end)

    it("erfcx matches the asymptotic series beyond erfc's underflow", function()
      for _, z in ipairs{8, 10, 20, 26, 30, 100, 1e4, 1e8, 1e150} do
        local want = asymptotic_sum(2 * z * z) / (sqrt(pi) * z)
        assert_rel(want, lt.erfcx(z), 4e-16, "erfcx(" .. z .. ")")
      end
    end)

    it("keeps erf + erfc = 1, erfc(x) + erfc(-x) = 2 and erfcx = exp(x²)·erfc", function()
      for x = -6, 6, 0.37 do
        assert(abs(lt.erf(x) + lt.erfc(x) - 1) <= 2.3e-16, "erf + erfc at " .. x)
        assert(abs(lt.erfc(x) + lt.erfc(-x) - 2) <= 4.5e-16, "erfc symmetry at " .. x)
        assert_rel(exp(x * x) * lt.erfc(x), lt.erfcx(x), 2e-15 * math.max(1, x * x),
                   "erfcx at " .. x)
      end
    end)
  end)

  describe("the normal distribution", function()
    it("normal_cdf matches erf's series in the middle and the tail series below", function()
      for _, x in ipairs{-2, -1, -0.5, 0.5, 1, 2, 3} do
        local z = x / sqrt(2)
        local e = erf_series(abs(z), x * x / 2)
        local want = x < 0 and (1 - e) / 2 or (1 + e) / 2
        -- 1 - e cancels: the reference is good to 2e-15 / (1 - e) (the
        -- table below checks those points to 1e-15)
        assert_rel(want, lt.normal_cdf(x), 4e-15 / (1 - e), "normal_cdf(" .. x .. ")")
      end
      for _, x in ipairs{-10, -20, -30, -37.5} do
        assert_rel(cdf_tail(x), lt.normal_cdf(x), 1e-14, "normal_cdf(" .. x .. ")")
      end
      for x, want in pairs(CDF) do
        assert_rel(want, lt.normal_cdf(x), 1e-15, "normal_cdf(" .. x .. ")")
      end
      assert.equal(0.5, lt.normal_cdf(0))
    end)

    it("normal_log_cdf is right far below the mean, as LogEI needs", function()
      for _, x in ipairs{-10, -20, -40, -100, -1e3, -1e5, -1e10, -1e100} do
        assert_rel(log_cdf_tail(x), lt.normal_log_cdf(x), 1e-14, "normal_log_cdf(" .. x .. ")")
      end
      for x, want in pairs(LOG_CDF) do
        assert_rel(want, lt.normal_log_cdf(x), 1e-14, "normal_log_cdf(" .. x .. ")")
      end
      -- above the mean it is log1p(-Φ(-x)), tiny and still right
      for _, x in ipairs{10, 20, 30} do
        assert_rel(-cdf_tail(-x), lt.normal_log_cdf(x), 1e-14, "normal_log_cdf(" .. x .. ")")
      end
      -- the middle: log of the cdf
      for x = -1, 2, 0.25 do
        assert_rel(log(lt.normal_cdf(x)), lt.normal_log_cdf(x), 1e-15, "log_cdf(" .. x .. ")")
      end
    end)

    it("normal_pdf and normal_log_pdf match their formulas", function()
      for _, x in ipairs{0, 0.5, 1, 2, 3, 10, 20, 30, 37.5} do
        local want = exp(-x * x / 2) / sqrt(2 * pi)
        assert_rel(want, lt.normal_pdf(x), 5e-16, "normal_pdf(" .. x .. ")")
        assert.equal(lt.normal_pdf(x), lt.normal_pdf(-x))
        assert_rel(-x * x / 2 - LOG_SQRT_2PI, lt.normal_log_pdf(x), 2e-16,
                   "normal_log_pdf(" .. x .. ")")
      end
      -- x² not exact in doubles: the square's rounding is carried (mpmath's
      -- values; exp(-x·x/2) would be off by 2.4e-15 at 16.9)
      assert_rel(3.814930036150278e-63, lt.normal_pdf(16.9), 5e-16, "normal_pdf(16.9)")
      -- a subnormal result: about 1e-8 relative at best
      assert_rel(2.4423259731384405e-316, lt.normal_pdf(38.1), 1e-7, "normal_pdf(38.1)")
    end)

    it("keeps Φ(x) + Φ(-x) = 1 and exp(log Φ) = Φ", function()
      for x = -8, 8, 0.173 do
        assert(abs(lt.normal_cdf(x) + lt.normal_cdf(-x) - 1) <= 3.4e-16, "symmetry at " .. x)
        assert_rel(lt.normal_cdf(x), exp(lt.normal_log_cdf(x)), 1e-15 * math.max(1, x * x),
                   "exp(log_cdf) at " .. x)
      end
    end)

    it("is monotone, also across the switches between formulas", function()
      local xs = {}
      for x = -50, 50, 0.0173 do xs[#xs + 1] = x end
      -- the formulas switch at x = -1 (normal), 0 (log_cdf), ±5 and ±5√2
      -- (erfcx): a jump there would show between points 1e-13 apart (closer
      -- ones may differ by less than the functions' own ulp-sized error)
      for _, s in ipairs{-1, 0, 5, -5, 5 * sqrt(2), -5 * sqrt(2)} do
        for k = -8, 8 do xs[#xs + 1] = s + k * 1e-13 * math.max(1, abs(s)) end
      end
      table.sort(xs)
      local function check(name, sign)
        local f = lt[name]
        for i = 2, #xs do
          local a, b = f(xs[i - 1]), f(xs[i])
          assert(a == b or sign * (b - a) >= 0, string.format("%s not monotone between %.17g and %.17g: "
                                                    .. "%.17g, %.17g", name, xs[i - 1], xs[i],
                                                    a, b))
        end
      end
      check("erf", 1)
      check("erfc", -1)
      check("erfcx", -1)
      check("normal_cdf", 1)
      check("normal_log_cdf", 1)
    end)

    it("gives d/dx log Φ = exp(log φ - log Φ) = √(2/π)/erfcx(-x/√2) stably", function()
      -- the inverse Mills ratio φ/Φ at x ≪ 0: -x / S(x²), S the asymptotic sum
      for _, case in ipairs{{-10, 1e-14}, {-40, 1e-12}, {-1e3, 1e-9}} do
        local x, tol = case[1], case[2]
        local want = -x / asymptotic_sum(x * x)
        local diff = exp(lt.normal_log_pdf(x) - lt.normal_log_cdf(x))
        assert_rel(want, diff, tol, "exp(log_pdf - log_cdf) at " .. x)
        assert_rel(want, sqrt(2 / pi) / lt.erfcx(-x / sqrt(2)), 1e-15, "erfcx form at " .. x)
      end
      local x = -1e10
      assert_rel(1e10, sqrt(2 / pi) / lt.erfcx(-x / sqrt(2)), 1e-15, "erfcx form at -1e10")
      -- and it is the derivative: central differences of log_cdf at moderate x
      for _, x0 in ipairs{-30, -5, -1, 0, 2} do
        local h = 1e-5
        local fd = (lt.normal_log_cdf(x0 + h) - lt.normal_log_cdf(x0 - h)) / (2 * h)
        assert_rel(fd, exp(lt.normal_log_pdf(x0) - lt.normal_log_cdf(x0)), 1e-7,
                   "derivative at " .. x0)
      end
    end)
  end)

  it("has the derivatives lazytensor_special.h lists (central differences)", function()
    -- the difference quotient's error: O(h²) truncation and the rounding of
    -- f's values, about ulp(f)/h
    local function check(name, x, want)
      local f = lt[name]
      local h = 1e-6 * math.max(1, abs(x))
      local a, b = f(x + h), f(x - h)
      local got = (a - b) / (2 * h)
      local tol = 1e-6 * abs(want) + 4e-16 * math.max(abs(a), abs(b)) / h
      assert(abs(got - want) <= tol, string.format("%s' at %g: %.10g, want %.10g", name, x, got,
                                                   want))
    end
    for _, x in ipairs{-3, -0.7, 0.2, 1.5, 4, 12} do
      check("erf", x, 2 / sqrt(pi) * exp(-x * x))
      check("erfc", x, -2 / sqrt(pi) * exp(-x * x))
      check("erfcx", x, 2 * x * lt.erfcx(x) - 2 / sqrt(pi))
      check("normal_cdf", x, lt.normal_pdf(x))
      check("normal_pdf", x, -x * lt.normal_pdf(x))
      check("normal_log_cdf", x, sqrt(2 / pi) / lt.erfcx(-x / sqrt(2)))
      check("normal_log_pdf", x, -x)
    end
  end)

  describe("NaN and infinities", function()
    it("propagates NaN through every function", function()
      for _, name in ipairs(FUNCTIONS) do
        local v = lt[name](0 / 0)
        assert(v ~= v, name .. "(NaN) should be NaN")
        local t = lt[name](lt.tensor{1, 0 / 0})
        assert(t[2] ~= t[2], name .. " of a tensor with a NaN")
        assert.equal(lt[name](1), t[1])
      end
    end)

    it("gives the limits at ±Inf", function()
      local inf = math.huge
      local limits = {erf = {-1, 1}, erfc = {2, 0}, erfcx = {inf, 0}, normal_cdf = {0, 1},
                      normal_pdf = {0, 0}, normal_log_cdf = {-inf, 0},
                      normal_log_pdf = {-inf, -inf}}
      for name, lim in pairs(limits) do
        assert.equal(lim[1], lt[name](-inf), name .. "(-inf)")
        assert.equal(lim[2], lt[name](inf), name .. "(inf)")
      end
      -- beyond the doubles: x²/2 overflows, and the answer is the limit
      assert.equal(-inf, lt.normal_log_cdf(-1e200))
      assert.equal(-inf, lt.normal_log_pdf(1e200))
      assert.equal(0, lt.normal_cdf(-1e200))
      assert.equal(inf, lt.erfcx(-27))
    end)
  end)

  describe("on tensors", function()
    it("works elementwise on a dense tensor of any shape, as function and as method", function()
      local rows = {{-40, -3, -0.5}, {0, 1.5, 9}}
      local t = lt.tensor(rows)
      for _, name in ipairs(FUNCTIONS) do
        local r = lt[name](t)
        assert.same({2, 3}, r:shape())
        assert.equal("dense", lt.type(r))
        for i = 1, 2 do
          for j = 1, 3 do assert.equal(lt[name](rows[i][j]), r[i][j]) end
        end
        assert.same(r:totable(), t[name](t):totable())
      end
    end)

    it("reads strided views and keeps 0-d and batched shapes", function()
      local t = lt.tensor{{-2, -1}, {1, 2}}
      local tt = t:t() -- a transposed view
      assert.same({{lt.erf(-2), lt.erf(1)}, {lt.erf(-1), lt.erf(2)}}, lt.erf(tt):totable())
      local s = lt.normal_cdf(lt.tensor(0.5)) -- 0-d
      assert.equal(0, s:dim())
      assert.equal(lt.normal_cdf(0.5), s:totable())
      local b = lt.normal_log_cdf(lt.full({2, 3, 4}, -50))
      assert.same({2, 3, 4}, b:shape())
      assert.equal(lt.normal_log_cdf(-50), b[2][3][4])
      assert.is_number(lt.erfc(3)) -- a number gives a number
    end)

    it("leaves its argument unchanged", function()
      local t = lt.tensor{-1, 0, 1}
      lt.normal_log_cdf(t)
      assert.same({-1, 0, 1}, t:totable())
    end)
  end)

  describe("bad input", function()
    it("refuses strings, tables, nil and lazy operators with clear errors", function()
      for _, name in ipairs(FUNCTIONS) do
        for _, bad in ipairs{{"1", "got string"}, {{1, 2}, "got table"}, {true, "got boolean"}} do
          local ok, err = pcall(lt[name], bad[1])
          assert.is_false(ok)
          assert.matches("^lazytensor: " .. name .. ": argument #1: expected a number or a "
                         .. "dense tensor, " .. bad[2], err)
        end
        local ok, err = pcall(lt[name])
        assert.is_false(ok)
        assert.matches("^lazytensor: " .. name .. ":.*got no value", err)
        local D = lt.diag(lt.tensor{1, 2})
        ok, err = pcall(function() return D[name](D) end)
        assert.is_false(ok)
        assert.matches("^lazytensor: " .. name .. ": expected a dense tensor, got a lazy diag", err)
      end
    end)
  end)
end)
