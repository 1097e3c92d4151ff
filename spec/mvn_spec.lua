-- Specs for lazytensor.mvn, against closed forms computed here in plain Lua.
--
-- The module needs the library's function API. The same checks run twice:
-- against a small pure-Lua stand-in of that API (dense matrices only; it
-- shows exactly which calls mvn makes, and runs everywhere), and against the
-- real `require "lazytensor"`.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath

-------------------------------------------------------------------------------
-- A pure-Lua stand-in for the dense part of the function API.

local function make_standin()
  local lt = {}
  local T = {}
  T.__index = T

  local function new(shape, data)
    return setmetatable({ shp = shape, data = data }, T)
  end

  function lt.tensor(tbl)
    if type(tbl[1]) == "table" then
      local data, m, n = {}, #tbl, #tbl[1]
      for i = 1, m do for j = 1, n do data[(i - 1) * n + j] = tbl[i][j] end end
      return new({ m, n }, data)
    end
    local data = {}
    for i = 1, #tbl do data[i] = tbl[i] end
    return new({ #tbl }, data)
  end

  local function filled(shape, f)
    local n = 1
    for _, d in ipairs(shape) do n = n * d end
    local data = {}
    for i = 1, n do data[i] = f() end
    return new(shape, data)
  end

  function lt.ones(...) return filled({ ... }, function() return 1 end) end

  -- Box-Muller over a fixed LCG (Park-Miller: exact in doubles, so the same
  -- numbers on every Lua version): reproducible, good enough for moments.
  local state = 42
  local function uniform()
    state = (state * 16807) % 2147483647
    return state / 2147483647
  end
  function lt.randn(...)
    return filled({ ... }, function()
      return math.sqrt(-2 * math.log(uniform())) * math.cos(2 * math.pi * uniform())
    end)
  end

  function T:dim() return #self.shp end
  function T:size(d) return self.shp[d] end
  function T:numel() return #self.data end
  function T:shape() return { (table.unpack or unpack)(self.shp) } end
  function T:dense() return self end
  function T:reshape(...) return new({ ... }, self.data) end
  function T:get(i, j)
    if j then return self.data[(i - 1) * self.shp[2] + j] end
    return self.data[i]
  end
  function T:t()
    local m, n = self.shp[1], self.shp[2]
    local data = {}
    for i = 1, m do for j = 1, n do data[(j - 1) * m + i] = self.data[(i - 1) * n + j] end end
    return new({ n, m }, data)
  end
  function T:diagonal()
    local data = {}
    for i = 1, self.shp[1] do data[i] = self:get(i, i) end
    return new({ self.shp[1] }, data)
  end
  function T:sum(dim)
    assert(dim == 1 and #self.shp == 2, "stand-in: only sum(1) of a matrix")
    local m, n = self.shp[1], self.shp[2]
    local data = {}
    for j = 1, n do
      data[j] = 0
      for i = 1, m do data[j] = data[j] + self.data[(i - 1) * n + j] end
    end
    return new({ n }, data)
  end

  local function zip(a, b, f)
    if type(a) == "number" then a, b, f = b, a, function(x, y) return f(y, x) end end
    local data = {}
    for i = 1, #a.data do
      data[i] = f(a.data[i], type(b) == "number" and b or b.data[i])
    end
    if type(b) ~= "number" then assert(#a.data == #b.data, "stand-in: shape mismatch") end
    return new(a:shape(), data)
  end
  T.__add = function(a, b) return zip(a, b, function(x, y) return x + y end) end
  T.__sub = function(a, b) return zip(a, b, function(x, y) return x - y end) end
  function lt.mul(a, b) return zip(a, b, function(x, y) return x * y end) end

  T.__mul = function(a, b)
    if type(a) == "number" or type(b) == "number" then return lt.mul(a, b) end
    local vec = (#b.shp == 1)
    local m, k = a.shp[1], a.shp[2]
    local n = vec and 1 or b.shp[2]
    assert(k == b.shp[1], "stand-in: matmul shapes")
    local data = {}
    for i = 1, m do
      for j = 1, n do
        local s = 0
        for l = 1, k do s = s + a.data[(i - 1) * k + l] * b.data[(l - 1) * n + j] end
        data[(i - 1) * n + j] = s
      end
    end
    return new(vec and { m } or { m, n }, data)
  end

  -- Cholesky factor (lower) of a positive definite matrix.
  function T:root()
    local n = self.shp[1]
    local L = {}
    for i = 1, n * n do L[i] = 0 end
    for j = 1, n do
      local s = self:get(j, j)
      for l = 1, j - 1 do s = s - L[(j - 1) * n + l] ^ 2 end
      assert(s > 0, "stand-in: not positive definite")
      L[(j - 1) * n + j] = math.sqrt(s)
      for i = j + 1, n do
        local t = self:get(i, j)
        for l = 1, j - 1 do t = t - L[(i - 1) * n + l] * L[(j - 1) * n + l] end
        L[(i - 1) * n + j] = t / L[(j - 1) * n + j]
      end
    end
    return new({ n, n }, L)
  end
  function T:logdet()
    local L, s = self:root(), 0
    for i = 1, self.shp[1] do s = s + 2 * math.log(L:get(i, i)) end
    return s
  end
  -- Solve A X = B by forward and back substitution with the Cholesky factor.
  function T:solve(B)
    local n, L = self.shp[1], self:root()
    local vec = (#B.shp == 1)
    local cols = vec and 1 or B.shp[2]
    local X = {}
    for c = 1, cols do
      local y = {}
      for i = 1, n do
        local s = B.data[(i - 1) * cols + c]
        for l = 1, i - 1 do s = s - L:get(i, l) * y[l] end
        y[i] = s / L:get(i, i)
      end
      for i = n, 1, -1 do
        local s = y[i]
        for l = i + 1, n do s = s - L:get(l, i) * X[(l - 1) * cols + c] end
        X[(i - 1) * cols + c] = s / L:get(i, i)
      end
    end
    return new(B:shape(), X), { method = "cholesky" }
  end
  function T:inv_quad(b)
    local x = self:solve(b)
    local s = 0
    for i = 1, #b.data do s = s + b.data[i] * x.data[i] end
    return s
  end
  function T:inv_quad_logdet(b) return self:inv_quad(b), self:logdet() end
  return lt
end

-------------------------------------------------------------------------------
-- Closed forms in plain Lua

local LOG_2PI = math.log(2 * math.pi)

-- log N(x; m, diag(v)) as a sum of univariate terms.
local function diag_log_prob(x, m, v)
  local s = 0
  for i = 1, #x do s = s - 0.5 * (LOG_2PI + math.log(v[i]) + (x[i] - m[i]) ^ 2 / v[i]) end
  return s
end

-- log N(x; m, S) for a 2 x 2 S, with its explicit inverse and determinant.
local function log_prob_2x2(x, m, S)
  local det = S[1][1] * S[2][2] - S[1][2] * S[2][1]
  local d1, d2 = x[1] - m[1], x[2] - m[2]
  local quad = (S[2][2] * d1 * d1 - (S[1][2] + S[2][1]) * d1 * d2 + S[1][1] * d2 * d2) / det
  return -0.5 * (quad + math.log(det) + 2 * LOG_2PI)
end

-- KL between diagonal normals, dimension by dimension.
local function diag_kl(mp, vp, mq, vq)
  local s = 0
  for i = 1, #mp do
    s = s + 0.5 * (vp[i] / vq[i] + (mq[i] - mp[i]) ^ 2 / vq[i] - 1 + math.log(vq[i] / vp[i]))
  end
  return s
end

local function dense_diag(v)
  local m = {}
  for i = 1, #v do
    m[i] = {}
    for j = 1, #v do m[i][j] = (i == j) and v[i] or 0 end
  end
  return m
end

-------------------------------------------------------------------------------
-- The checks, given a library table `lt` and how to build a covariance.

-- Each check requires mvn afresh: the describe's setup has cleared it from
-- package.loaded and put the right library under "lazytensor".
local function run_checks(get_lt, make_cov, to_number)
  it("log_prob matches the diagonal closed form, for one point and for rows", function()
    local lt, mvn = get_lt(), require "lazytensor.mvn"
    local m, v = { 0.5, -1, 2 }, { 0.5, 2, 1.5 }
    local d = mvn.new(lt.tensor(m), make_cov(lt, dense_diag(v)))
    local x1, x2 = { 1, 0, 1 }, { -0.3, 2.5, 2 }
    assert.near(diag_log_prob(x1, m, v), to_number(d:log_prob(lt.tensor(x1))), 1e-10)
    assert.near(diag_log_prob(x2, m, v), to_number(d:log_prob(x2)), 1e-10)
    local batch = d:log_prob(lt.tensor({ x1, x2 }))
    assert.equal(1, batch:dim())
    assert.equal(2, batch:numel())
    assert.near(diag_log_prob(x1, m, v), batch:get(1), 1e-10)
    assert.near(diag_log_prob(x2, m, v), batch:get(2), 1e-10)
  end)

  it("log_prob matches the 2x2 closed form with correlation", function()
    local lt, mvn = get_lt(), require "lazytensor.mvn"
    local S = { { 2, 0.8 }, { 0.8, 1 } }
    local m = { 1, -1 }
    local d = mvn.new(m, make_cov(lt, S))
    for _, x in ipairs({ { 0, 0 }, { 1, -1 }, { 3, 2 } }) do
      assert.near(log_prob_2x2(x, m, S), to_number(d:log_prob(x)), 1e-10)
    end
  end)

  it("entropy, mean, variance and covariance", function()
    local lt, mvn = get_lt(), require "lazytensor.mvn"
    local S = { { 2, 0.8 }, { 0.8, 1 } }
    local cov = make_cov(lt, S)
    local d = mvn.new({ 1, -1 }, cov)
    local det = 2 - 0.64
    assert.near(0.5 * (2 * (1 + LOG_2PI) + math.log(det)), d:entropy(), 1e-10)
    assert.near(1, d:mean():get(1), 0)
    assert.near(-1, d:mean():get(2), 0)
    assert.near(2, d:variance():get(1), 1e-12)
    assert.near(1, d:variance():get(2), 1e-12)
    assert.equal(cov, d:covariance())
  end)

  it("kl matches the diagonal closed form and is zero for equal arguments", function()
    local lt, mvn = get_lt(), require "lazytensor.mvn"
    local mp, vp, mq, vq = { 0, 1 }, { 1, 2 }, { 0.5, -1 }, { 3, 0.5 }
    local p = mvn.new(mp, make_cov(lt, dense_diag(vp)))
    local q = mvn.new(mq, make_cov(lt, dense_diag(vq)))
    assert.near(diag_kl(mp, vp, mq, vq), mvn.kl(p, q), 1e-10)
    assert.near(diag_kl(mq, vq, mp, vp), mvn.kl(q, p), 1e-10)
    assert.near(0, mvn.kl(p, p), 1e-12)
  end)

  it("rsample has the right shapes, mean and covariance", function()
    local lt, mvn = get_lt(), require "lazytensor.mvn"
    local S = { { 2, 0.8 }, { 0.8, 1 } }
    local d = mvn.new({ 1, -1 }, make_cov(lt, S))
    local one = d:rsample()
    assert.same({ 2 }, one:shape())
    local n = 20000
    local xs = d:rsample(n)
    assert.same({ n, 2 }, xs:shape())
    local s1, s2, s11, s12, s22 = 0, 0, 0, 0, 0
    for i = 1, n do
      local a, b = xs:get(i, 1), xs:get(i, 2)
      s1, s2 = s1 + a, s2 + b
      s11, s12, s22 = s11 + a * a, s12 + a * b, s22 + b * b
    end
    local m1, m2 = s1 / n, s2 / n
    -- standard errors are about sqrt(2 / n) = 0.01 for the mean, 0.02 for S
    assert.near(1, m1, 0.05)
    assert.near(-1, m2, 0.05)
    assert.near(2, s11 / n - m1 * m1, 0.1)
    assert.near(0.8, s12 / n - m1 * m2, 0.06)
    assert.near(1, s22 / n - m2 * m2, 0.05)
  end)

  it("raises lazytensor errors on mismatched sizes", function()
    local lt, mvn = get_lt(), require "lazytensor.mvn"
    local ok, err = pcall(mvn.new, { 1, 2, 3 }, make_cov(lt, dense_diag({ 1, 1 })))
    assert.is_false(ok)
    assert.matches("^lazytensor: mvn: mean has 3 entries but cov is 2x2", err)
    local d = mvn.new({ 0, 0 }, make_cov(lt, dense_diag({ 1, 1 })))
    ok, err = pcall(d.log_prob, d, { 1, 2, 3 })
    assert.is_false(ok)
    assert.matches("lazytensor: mvn:log_prob: x has 3 entries, expected 2", err)
    local e = mvn.new({ 0, 0, 0 }, make_cov(lt, dense_diag({ 1, 1, 1 })))
    ok, err = pcall(mvn.kl, d, e)
    assert.is_false(ok)
    assert.matches("lazytensor: kl: dimensions differ %(2 and 3%)", err)
  end)
end

local function plain_number(v) return v end

describe("mvn against a pure-Lua stand-in of the function API", function()
  local standin = make_standin()
  setup(function()
    package.loaded["lazytensor.mvn"] = nil
    package.loaded["lazytensor"] = standin
  end)
  teardown(function()
    package.loaded["lazytensor"] = nil
    package.loaded["lazytensor.mvn"] = nil
  end)
  run_checks(function() return standin end, function(lt, m) return lt.tensor(m) end, plain_number)
end)

-------------------------------------------------------------------------------
-- The real library.

describe("mvn against the real library", function()
  package.loaded["lazytensor"] = nil
  local lt = require "lazytensor"
  setup(function()
    package.loaded["lazytensor.mvn"] = nil
    package.loaded["lazytensor"] = lt
    lt.manual_seed(7)
  end)
  run_checks(function() return lt end, function(l, m) return l.tensor(m) end, plain_number)

  it("is reachable as lt.mvn and lt.kl", function()
    local m, v = { 0.5, -1 }, { 0.5, 2 }
    local p = lt.mvn(lt.tensor(m), lt.diag(v))
    local q = lt.mvn(lt.tensor({ 0, 0 }), lt.diag({ 1, 1 }))
    assert.near(diag_log_prob({ 0, 0 }, m, v), p:log_prob({ 0, 0 }), 1e-10)
    assert.near(diag_kl(m, v, { 0, 0 }, { 1, 1 }), lt.kl(p, q), 1e-10)
  end)

  it("agrees with the dense evaluation for structured covariances", function()
    local mvn = require "lazytensor.mvn"
    local covs = {
      lt.diag({ 1, 2, 3, 4, 5 }),
      lt.toeplitz(lt.tensor({ 1.5, 0.6, 0.2, 0.05, 0 })),
      lt.kernel(lt.linspace(0, 2, 5), { kind = "rbf", lengthscale = 0.7, variance = 1.3 })
        :add_jitter(1e-3),
    }
    local std = mvn.new(lt.zeros(5), lt.eye(5))
    for _, cov in ipairs(covs) do
      local mean = lt.randn(5)
      local lazy, dense = mvn.new(mean, cov), mvn.new(mean, cov:dense())
      local x = lt.randn(4, 5)
      local a, b = lazy:log_prob(x), dense:log_prob(x)
      for i = 1, 4 do assert.near(b:get(i), a:get(i), 1e-8, lt.type(cov)) end
      assert.near(dense:entropy(), lazy:entropy(), 1e-8)
      assert.near(mvn.kl(dense, std), mvn.kl(lazy, std), 1e-8)
      assert.same({ 3, 5 }, lazy:rsample(3):shape())
    end
  end)

  it("stddev and confidence_region: √variance and mean ∓ 2·stddev", function()
    local mvn = require "lazytensor.mvn"
    local d = mvn.new(lt.tensor({ 1, -2, 0.5 }), lt.diag({ 4, 0.25, 9 }))
    local sd = d:stddev()
    local lo, hi = d:confidence_region()
    local want_sd, want_lo, want_hi = { 2, 0.5, 3 }, { -3, -3, -5.5 }, { 5, -1, 6.5 }
    for i = 1, 3 do
      assert.near(want_sd[i], sd:get(i), 1e-15)
      assert.near(want_lo[i], lo:get(i), 1e-15)
      assert.near(want_hi[i], hi:get(i), 1e-15)
    end
  end)

  it("root retries with jitter when the covariance is PSD only up to a tiny negative "
     .. "eigenvalue, and still fails an indefinite one", function()
    local mvn = require "lazytensor.mvn"
    lt.manual_seed(3)
    local n = 40
    local U, e = lt.randn(n, 3), lt.randn(n, 1)
    e = e / math.sqrt((e:t() * e):get(1, 1))
    -- U·Uᵀ (rank 3) with one eigenvalue pushed to about −1e-6: the root
    -- alone refuses it
    local nearly = lt.psd(U * U:t() - e * e:t() * 1e-6)
    assert.has_error(function() nearly:root() end)
    local d = mvn.new(lt.zeros(n), nearly)
    local R, info = d:root()
    assert.is_true(info.jitter > 0)
    assert.is_true(info.jitter < 1e-4 * nearly:diagonal():mean())
    local Rd = R:dense()
    assert.is_true((Rd * Rd:t() - nearly:dense()):abs():max() < 10 * info.jitter)
    assert.same({ 2, n }, d:rsample(2):shape())
    local indefinite = mvn.new(lt.zeros(n), lt.psd(U * U:t() - e * e:t()))
    local ok, err = pcall(indefinite.rsample, indefinite, 1)
    assert.is_false(ok)
    assert.matches("^lazytensor: root:", err)
  end)

  it("gives the same log_prob with a structured (diag) covariance", function()
    local mvn = require "lazytensor.mvn"
    local m, v = { 0.5, -1, 2 }, { 0.5, 2, 1.5 }
    local d = mvn.new(lt.tensor(m), lt.diag(v))
    local x = { 1, 0, 1 }
    assert.near(diag_log_prob(x, m, v), d:log_prob(lt.tensor(x)), 1e-10)
  end)
end)
