-- Regression specs for issue 19 items 3, 4, 7 (input) and 8a, and issue 17
-- item 5 (first point): flags that follow the matrix, NaN and infinite
-- input refused by linear algebra, bounded nesting, linear-time sums.
-- References are plain-Lua computations on the matrices' entries.
local lt = require "lazytensor"

local function entries(A)
  local t = A:dense():totable()
  return t, #t
end

local function symmetric(A)
  local t, n = entries(A)
  for i = 1, n do
    for j = 1, i - 1 do
      if math.abs(t[i][j] - t[j][i]) > 1e-12 * (1 + math.abs(t[i][j])) then return false end
    end
  end
  return true
end

-- log|det| and the sign by Gaussian elimination with partial pivoting.
local function logdet_ref(A)
  local M, n = entries(A)
  local sign, s = 1, 0
  for k = 1, n do
    local p = k
    for i = k + 1, n do if math.abs(M[i][k]) > math.abs(M[p][k]) then p = i end end
    if p ~= k then M[k], M[p], sign = M[p], M[k], -sign end
    if M[k][k] < 0 then sign = -sign end
    s = s + math.log(math.abs(M[k][k]))
    for i = k + 1, n do
      local f = M[i][k] / M[k][k]
      for j = k, n do M[i][j] = M[i][j] - f * M[k][j] end
    end
  end
  return s, sign
end

local function residual(A, x, b)
  local t, n = entries(A)
  local xs, bs = x:totable(), b:totable()
  local r = 0
  for i = 1, n do
    local s = -bs[i]
    for j = 1, n do s = s + t[i][j] * xs[j] end
    r = math.max(r, math.abs(s))
  end
  return r
end

local function psd_2x2(t)
  return math.abs(t[1][2] - t[2][1]) < 1e-12 and t[1][1] >= 0 and t[1][1] * t[2][2] - t[1][2] * t[2][1] >= 0
end

describe("flags of a dense · lazy product come from its own rule (issue 19.3)", function()
  local L = lt.tensor{{1, 0}, {0.5, 1}}

  it("lt.psd(A) * lt.chol(L) is not claimed symmetric or PSD, and its linear algebra is right", function()
    local P = lt.psd(lt.tensor{{2, 1}, {1, 2}}) * lt.chol(L)
    assert.is_false(symmetric(P)) -- [[2.5, 2.25], [2, 3]]
    assert.is_not_true(P:is_symmetric())
    assert.is_not_true(P:is_psd())
    local ld, sign = logdet_ref(P)
    assert.equal(1, sign)
    assert.near(ld, P:logdet(), 1e-12) -- log 3
    local b = lt.tensor{1, 2}
    assert.is_true(residual(P, P:solve(b), b) < 1e-12)
    assert.has_error(function() P:cholesky() end)
  end)

  it("the same after the dense operand cached 'symmetric'", function()
    local A = lt.tensor{{2, 1}, {1, 3}} -- commutes with none of the operators below
    assert.is_true(A:is_symmetric())
    for _, lazy in ipairs{lt.chol(L), lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1}),
                          lt.toeplitz{2, 1}, lt.triangular(L, "lower")} do
      for _, P in ipairs{A * lazy, lazy * A} do
        assert.is_false(symmetric(P), lt.type(lazy))
        assert.is_not_true(P:is_symmetric(), lt.type(lazy))
        assert.is_not_true(P:is_psd(), lt.type(lazy))
      end
    end
  end)
end)

describe("a 'no' flag is not carried where the arithmetic may make it false", function()
  -- found by the adversarial fuzzer on this branch: 0·A kept A's "not
  -- symmetric", and cholesky refused the (diagonal) result
  it("0 · A is symmetric, dense or lazy", function()
    local A = lt.tensor{{1, 2}, {3, 4}}
    assert.is_false(A:is_symmetric())
    local Z = A * 0
    assert.is_not_false(Z:is_symmetric())
    local L = (Z + lt.diag{1, 2}):cholesky():dense():totable()
    assert.near(math.sqrt(2), L[2][2], 1e-15)
    local B = lt.blockdiag{A, lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1})}
    assert.is_false(B:is_symmetric())
    assert.is_not_false((B * 0):is_symmetric())
    assert.is_not_false((B * 0):is_psd())
  end)
end)

describe("flags follow writes to a shared dense child (issue 19.4)", function()
  local K = lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1})

  it("L = lt.psd(A) + K; A:set(2, 1, 1.5): flags lapse, solve and logdet use the new A", function()
    local A = lt.tensor{{2, 1}, {1, 2}}
    local Lz = lt.psd(A) + K
    assert.is_true(Lz:is_psd())
    local before = Lz:logdet()
    assert.near(logdet_ref(Lz), before, 1e-12)
    A:set(2, 1, 1.5)
    assert.is_false(symmetric(Lz))
    assert.is_not_true(Lz:is_symmetric())
    assert.is_not_true(Lz:is_psd())
    local ld, sign = logdet_ref(Lz)
    assert.equal(1, sign)
    assert.near(ld, Lz:logdet(), 1e-12)
    assert.is_true(math.abs(ld - before) > 1e-3)
    local b = lt.tensor{1, 2}
    assert.is_true(residual(Lz, Lz:solve(b), b) < 1e-12)
    assert.has_error(function() Lz:cholesky() end)
  end)

  it("through every level of a deeper expression", function()
    local A = lt.tensor{{3, 1}, {1, 3}}
    local E = lt.submatrix((lt.psd(A) + K) * 2, {1, 2}):t()
    assert.is_true(E:is_psd())
    A:set(1, 2, -4) -- symmetric no more
    assert.is_not_true(E:is_symmetric())
    assert.is_not_true(E:is_psd())
    local ld, sign = logdet_ref(E)
    if sign > 0 then assert.near(ld, E:logdet(), 1e-10) end
  end)

  it("a promise made with lt.psd on a lazy operator lapses when data beneath is written", function()
    local A = lt.tensor{{3, 0}, {0, 3}}
    local T = lt.psd(lt.submatrix(A, {1, 2}) + K)
    assert.equal("sum", lt.type(T))
    assert.is_true(T:is_psd())
    A:set(1, 1, -10)
    assert.is_not_true(T:is_psd())
    assert.is_false(psd_2x2(T:dense():totable()))
  end)

  it("a write that keeps the matrix PSD still drops the promise (a flag holds for the data it was made for)",
     function()
    local A = lt.tensor{{2, 0}, {0, 2}}
    local Lz = lt.psd(A) + K
    A:set(1, 1, 4)
    assert.is_not_true(Lz:is_psd())
    assert.is_true((lt.psd(A) + K):is_psd()) -- a new promise is the caller's to make
  end)
end)

describe("lt.psd on a lazy operator leaves the operator as it was (issue 17.5)", function()
  it("returns a marked copy; the original's flags do not change", function()
    local K = lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1})
    local P = K * K -- a lazy product: symmetric in fact, flagged unknown
    assert.equal("product", lt.type(P))
    assert.is_nil(P:is_psd())
    local Q = lt.psd(P)
    assert.is_true(Q:is_psd())
    assert.is_true(Q:is_symmetric())
    assert.is_nil(P:is_psd())
    assert.is_nil(P:is_symmetric())
    assert.equal("product", lt.type(Q))
    assert.same(P:dense():totable(), Q:dense():totable())
  end)
end)

describe("NaN and infinite input to linear algebra raise, naming the operation (issue 19.7)", function()
  local nan, inf = 0 / 0, math.huge
  local b = lt.tensor{1, 2}
  local ops = {
    solve = function(A) return A:solve(b) end,
    inv_quad = function(A) return A:inv_quad(b) end,
    logdet = function(A) return A:logdet() end,
    slogdet = function(A) return A:slogdet() end,
    inv_quad_logdet = function(A) return A:inv_quad_logdet(b) end,
    cholesky = function(A) return A:cholesky() end,
    root = function(A) return A:root() end,
    root_inv = function(A) return A:root_inv() end,
    eigh = function(A) return A:eigh() end,
    svd = function(A) return A:svd() end,
  }
  local poisoned = {
    ["diag with NaN"] = function() return lt.diag{1, nan} end,
    ["lowrank + diag with NaN in U"] = function() return lt.lowrank(lt.tensor{{1}, {nan}}) + lt.diag{1, 1} end,
    ["dense with Inf"] = function() return lt.tensor{{2, 1}, {1, inf}} end,
    ["identity times NaN"] = function() return lt.identity(2) * nan end,
    ["toeplitz with -Inf"] = function() return lt.toeplitz{3, -inf} end,
    ["kron with a NaN factor"] = function() return lt.kron(lt.tensor{{nan}}, lt.eye(2)) end,
    ["kernel + scaled NaN"] = function()
      return lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1}) + lt.eye(2) * nan
    end,
  }
  for what, make in pairs(poisoned) do
    for name, f in pairs(ops) do
      it(("%s: %s"):format(what, name), function()
        for _, size in ipairs{800, 0} do
          lt.with_settings({max_cholesky_size = size}, function()
            local ok, err = pcall(f, make())
            assert.is_false(ok)
            assert.matches("^lazytensor: " .. name .. ": matrix has NaN or infinite entries", tostring(err))
          end)
        end
      end)
    end
  end

  it("a NaN or infinite right-hand side raises on every type", function()
    local K = lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1}) + lt.identity(2, 0.1)
    for _, A in ipairs{lt.tensor{{2, 1}, {1, 2}}, lt.diag{1, 2}, K,
                       lt.lowrank(lt.tensor{{1}, {2}}) + lt.diag{1, 1}} do
      for _, bad in ipairs{lt.tensor{1, nan}, lt.tensor{inf, 0}} do
        for _, name in ipairs{"solve", "inv_quad", "inv_quad_logdet"} do
          local ok, err = pcall(function() return A[name](A, bad) end)
          assert.is_false(ok, lt.type(A) .. " " .. name)
          assert.matches("^lazytensor: " .. name .. ": right%-hand side has NaN or infinite entries",
                         tostring(err))
        end
      end
    end
  end)

  it("arithmetic stays IEEE", function()
    local D = lt.diag{1, nan}
    local S = D + lt.identity(2)
    local d = S:dense():totable()
    assert.equal(2, d[1][1])
    assert.is_true(d[2][2] ~= d[2][2])
    local P = (lt.tensor{{1, 2}, {3, 4}} * inf):totable()
    assert.equal(inf, P[1][1])
  end)

  it("a matrix whose non-finite value is written later raises then", function()
    local A = lt.tensor{{2, 1}, {1, 2}}
    local S = A + lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1}) -- shares A
    assert.equal("sum", lt.type(S))
    assert.is_number(S:logdet())
    A:set(1, 1, nan)
    assert.has_error(function() S:logdet() end, "lazytensor: logdet: matrix has NaN or infinite entries")
    A:set(1, 1, 5)
    assert.near(logdet_ref(S), S:logdet(), 1e-12)
  end)
end)

describe("deep expressions (issue 19.8a)", function()
  -- in a child process (loading the module this process loaded): a stack
  -- overflow must show up as a failure here, not take the test runner down
  local function run(code)
    local lua = os.getenv("LUA") or "lua5.4"
    local env = ("LUA_CPATH='%s' LUA_PATH='./lua/?.lua;./lua/?/init.lua;;'"):format(package.cpath)
    local p = assert(io.popen(("%s %s -e %q 2>&1; echo \"exit $?\""):format(env, lua, code)))
    local out = p:read("*a")
    p:close()
    return out
  end

  it("a 5000-deep (A + B):inverse() chain raises a depth error at construction, and the deepest built evaluates",
     function()
    local out = run([[
      local lt = require "lazytensor"
      local K = lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1})
      local B = lt.tensor{{2, 0}, {0, 3}}
      local x, built = K, 0
      local ok, err = pcall(function()
        for _ = 1, 5000 do x = (x + B):inverse(); built = built + 1 end
      end)
      print(ok, err)
      print(built, x:dense():totable()[1][1], x:logdet())
    ]])
    assert.matches("exit 0%s*$", out)
    assert.matches("false%s+lazytensor: %a+: the expression would nest %d+ levels deep", out)
    local built, v = out:match("\n(%d+)%s+(%S+)")
    assert.is_truthy(built, out)
    assert.is_true(tonumber(built) >= 400, out)
    assert.is_true(tonumber(v) > 0, out)
  end)

  for _, chain in ipairs{
    {"blockdiag", "lt.blockdiag{x + K}"},
    {"submatrix", "lt.submatrix(x + K, {1, 2})"},
    {"hadamard", "lt.mul(x, K)"},
    {"kron", "lt.kron(x + K, lt.tensor{{0.5}})"},
    {"transpose of a product", "(x * K):t()"},
  } do
    it(("a 20000-step %s chain stops at the depth limit with an error, never crashes"):format(chain[1]), function()
      local out = run(([[
        local lt = require "lazytensor"
        local K = lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1})
        local x, built = K, 0
        local ok, err = pcall(function()
          for _ = 1, 20000 do x = %s; built = built + 1 end
        end)
        print(ok, err)
        print(built, pcall(function() return x:dense() end))
      ]]):format(chain[2]))
      assert.matches("exit 0%s*$", out)
      assert.matches("false%s+lazytensor: %a+: the expression would nest %d+ levels deep", out)
      assert.matches("\n%d+%s+true", out)
    end)
  end

  it("a 20000-term + chain builds in linear time", function()
    -- in a child process: a state where an lt.operator lives walks new
    -- expressions to anchor its callbacks (lua/bind_callbacks.c); only the
    -- parts that contain one (lt_contains_operator), or this was quadratic
    local out = run([[
      local lt = require "lazytensor"
      local function seconds(terms)
        local u = lt.tensor{{1}, {2}}
        local s = lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1})
        local t0 = os.clock()
        for _ = 1, terms do s = s + lt.lowrank(u) end
        local t = os.clock() - t0
        assert(math.abs(s:get(2, 2) - (1 + 4 * terms)) <= 1e-9 * terms)
        return t
      end
      print(("times %.6f %.6f"):format(seconds(5000), seconds(20000)))
    ]])
    local t1, t2 = out:match("times (%S+) (%S+)")
    assert.is_truthy(t1, out)
    t1, t2 = tonumber(t1), tonumber(t2)
    -- quadratic building made this ratio 16 (and 20000 terms take seconds)
    assert.is_true(t2 < 0.5 or t2 < 8 * t1, ("5000 terms %.3f s, 20000 terms %.3f s"):format(t1, t2))
  end)
end)
