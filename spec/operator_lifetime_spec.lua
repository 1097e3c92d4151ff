-- lt.operator's lifetime and ownership: an operator whose matmul closure
-- reaches the operator (or an expression built on it) is collected with it
-- (issue 19, item 9: the closure used to be held through a registry
-- reference, a GC root, so such cycles lived until the state closed), an
-- operator still reachable through an expression keeps its functions, and
-- a product the closure shares with the program (its input, a tensor it
-- keeps) is never written into by the library.
local lt = require "lazytensor"

local function collect()
  for _ = 1, 3 do collectgarbage() end
end

local n = 20
local v = lt.ones(n)

-- One round of operators in cycles: through the operator itself, through a
-- sum on it, through a transpose, and a product of two.
local function make_cycles(rounds)
  for _ = 1, rounds do
    local op
    op = lt.operator{shape = {n, n}, matmul = function(X) local _ = op; return X * 2 end}
    local sum
    local inner = lt.operator{shape = {n, n}, matmul = function(X) local _ = sum; return X end,
                              t_matmul = function(X) local _ = sum; return X end}
    sum = inner + lt.eye(n)
    local both
    local a = lt.operator{shape = {n, n}, matmul = function(X) local _ = both; return X * 3 end}
    both = (a * op):t()
    local y = op * v + sum * v + both * v
    assert(math.abs(y:get(1) - (2 + 2 + 6)) < 1e-12)
  end
end

describe("lt.operator lifetime", function()
  it("cycles through its closure are collected: lt.memory() and the Lua heap stay bounded", function()
    -- a first batch lets the library's tables (and the state's) reach the
    -- size the garbage of one collection cycle needs; then batches of 300
    -- must leave nothing behind (before the fix each one kept about 100 kB
    -- of the library's memory and 40 kB of the Lua heap)
    make_cycles(300)
    collect()
    local m0, c0 = lt.memory(), collectgarbage("count")
    make_cycles(300)
    collect()
    local m1, c1 = lt.memory(), collectgarbage("count")
    make_cycles(300)
    collect()
    local m2, c2 = lt.memory(), collectgarbage("count")
    assert.equal(m0, m1, "the library's memory grew by " .. (m1 - m0) .. " bytes")
    assert.equal(m0, m2, "the library's memory grew by " .. (m2 - m0) .. " bytes")
    assert.is_true(c1 - c0 < 8 and c2 - c1 < 8,
      ("the Lua heap grew by %.1f kB, then %.1f kB"):format(c1 - c0, c2 - c1))
  end)

  it("keeps its functions while an expression on it is alive", function()
    local function make()
      local op = lt.operator{shape = {n, n}, matmul = function(X) return X * 5 end}
      return op + lt.eye(n), (op * lt.eye(n)):t()
    end
    local s, p = make()
    collect() -- the operator's own userdata is gone
    assert.equal(6, (s * v):get(1))
    assert.equal(5, (p * v):get(n))
    assert.equal(5, lt.dense(p):get(1, 1))
  end)

  it("keeps its functions for a rule that kept the operand", function()
    local kept
    local active = false
    lt.implements("trace", "operator", function(A)
      if not active then return lt.NotImplemented end
      kept = A -- a userdata made for the call
      return lt.NotImplemented
    end)
    do
      local op = lt.operator{shape = {n, n}, matmul = function(X) return X * 7 end}
      active = true
      assert.equal(7 * n, op:trace())
      active = false
    end
    collect()
    assert.equal("operator", lt.type(kept))
    assert.equal(7, (kept * v):get(1))
    kept = nil -- luacheck: ignore 311 (dropped for the collector)
    collect()
  end)

  it("may return its input or a tensor it keeps: the library copies it", function()
    local x = lt.ones(n)
    local kept = lt.ones(n, 1)
    local id = lt.operator{shape = {n, n}, matmul = function(X) return X end}
    local const = lt.operator{shape = {n, n}, matmul = function() return kept end,
                              t_matmul = function() return kept end}
    -- a sum accumulates its terms' products in the first one's
    assert.equal(2, ((id + lt.eye(n)) * x):get(1))
    assert.equal(2, ((const + lt.eye(n)) * x):get(n))
    assert.equal(2, (x * (const + lt.eye(n))):get(1))
    assert.same(lt.ones(n):totable(), x:totable(), "the input was written into")
    assert.same(lt.ones(n, 1):totable(), kept:totable(), "the kept tensor was written into")
  end)

  it("says so when a product is lazy where a dense one is needed", function()
    local op = lt.operator{shape = {2, 2}, matmul = function() return lt.diag{1, 2} end}
    local ok, err = pcall(function() return op * lt.ones(2) end)
    assert.is_false(ok)
    assert.matches('lazytensor: operator: matmul must return a dense tensor, got a lazy "diag"',
      tostring(err), 1, true)
  end)
end)
