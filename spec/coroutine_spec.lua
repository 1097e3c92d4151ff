-- Coroutines: library calls inside coroutines, errors raised there, Lua
-- callbacks running on whichever thread calls into the library, and
-- callbacks that try to yield.
local lt = require "lazytensor"

local function is_lt_error(msg)
  return type(msg) == "string"
    and (msg:find("^lazytensor: ") ~= nil or msg:find("^[^\n]-:%d+: lazytensor: ") ~= nil)
end

local function check_usable()
  local a = lt.tensor{{1, 2}, {3, 4}}
  assert.equal(22, (a * a):get(2, 2))
  assert.same({{3, 2}, {3, 7}}, (lt.diag{2, 3} + a):dense():totable())
end

describe("coroutines", function()
  it("an lt error inside a coroutine: resume returns false and the message", function()
    local co = coroutine.create(function()
      local a = lt.eye(2)
      coroutine.yield(a:sum())
      return a + lt.ones(3) -- shapes do not broadcast
    end)
    local ok, v = coroutine.resume(co)
    assert.is_true(ok)
    assert.equal(2, v)
    local ok2, err = coroutine.resume(co)
    assert.is_false(ok2)
    assert.is_true(is_lt_error(err), tostring(err))
    assert.equal("dead", coroutine.status(co))
    check_usable()
  end)

  it("coroutine.wrap re-raises the same error", function()
    local f = coroutine.wrap(function() return lt.zeros(-1) end)
    local ok, err = pcall(f)
    assert.is_false(ok)
    assert.is_true(is_lt_error(err), tostring(err))
    check_usable()
  end)

  it("tensors made in a coroutine outlive it", function()
    local made
    local co = coroutine.create(function()
      made = lt.diag{1, 2, 3} * 2
      return made:trace()
    end)
    local ok, tr = coroutine.resume(co)
    assert.is_true(ok)
    assert.equal(12, tr)
    co = nil -- luacheck: ignore 311 (dropped for the collector)
    collectgarbage()
    collectgarbage()
    assert.equal(6, made:get(3, 3))
    check_usable()
  end)

  it("a suspended coroutine holding tensors can be collected", function()
    local before
    collectgarbage()
    collectgarbage()
    before = lt.memory()
    do
      local co = coroutine.create(function()
        local big = lt.ones(100, 100)
        coroutine.yield(big:sum())
        return big
      end)
      assert.is_true((coroutine.resume(co)))
    end
    collectgarbage()
    collectgarbage()
    assert.equal(before, lt.memory())
    check_usable()
  end)

  it("an lt.operator made in one coroutine works from another and from the main thread", function()
    local op
    local co1 = coroutine.create(function()
      local M = lt.tensor{{2, 1}, {1, 3}}
      op = lt.operator{shape = {2, 2}, matmul = function(X) return M * X end}
      coroutine.yield()
    end)
    assert.is_true((coroutine.resume(co1)))
    local co2 = coroutine.create(function() return (op * lt.tensor{1, 1})[2] end)
    local ok, v = coroutine.resume(co2)
    assert.is_true(ok)
    assert.equal(4, v)
    assert.equal(3, op:dense():get(2, 2))
    assert.is_true((coroutine.resume(co1)))
    check_usable()
  end)

  it("a callback may itself run a coroutine that calls the library", function()
    local op = lt.operator{shape = {2, 2}, matmul = function(X)
      local co = coroutine.create(function() return lt.scale(X, 2) end)
      local ok, r = coroutine.resume(co)
      assert(ok, r)
      return r
    end}
    assert.same({2, 4}, (op * lt.tensor{1, 2}):totable())
    check_usable()
  end)

  it("an lt.operator callback that errors inside a coroutine", function()
    local op = lt.operator{shape = {2, 2}, matmul = function() error("callback failed", 0) end}
    local co = coroutine.create(function() return op:dense() end)
    local ok, err = coroutine.resume(co)
    assert.is_false(ok)
    assert.equal("callback failed", err)
    check_usable()
  end)

  it("an lt.operator callback that yields gives a clear error", function()
    local op = lt.operator{shape = {2, 2}, matmul = function(X)
      coroutine.yield("from inside")
      return X
    end}
    local co = coroutine.create(function() return op * lt.ones(2) end)
    local ok, err = coroutine.resume(co)
    assert.is_false(ok)
    assert.is_true(is_lt_error(err), tostring(err))
    assert.is_truthy(err:find("cannot yield", 1, true))
    assert.equal("dead", coroutine.status(co))
    -- the operator itself is fine when it does not yield
    local op2 = lt.operator{shape = {2, 2}, matmul = function(X) return X end}
    assert.same({1, 1}, (op2 * lt.ones(2)):totable())
    check_usable()
  end)

  it("an lt.implements rule that yields gives a clear error", function()
    local used = false
    lt.implements("diagonal", "identity", function()
      if used then return lt.NotImplemented end
      used = true
      coroutine.yield()
    end)
    local co = coroutine.create(function() return lt.identity(3):diagonal() end)
    local ok, err = coroutine.resume(co)
    assert.is_false(ok)
    assert.is_true(is_lt_error(err), tostring(err))
    assert.is_truthy(err:find("cannot yield", 1, true))
    assert.same({1, 1, 1}, lt.identity(3):diagonal():totable())
    check_usable()
  end)

  it("yielding from a callback on the main thread gives a clear error", function()
    local op = lt.operator{shape = {1, 1}, matmul = function() coroutine.yield() end}
    local ok, err = pcall(function() return op:dense() end)
    assert.is_false(ok)
    assert.is_true(is_lt_error(err), tostring(err))
    check_usable()
  end)

  it("with_settings restores settings when a coroutine inside errors", function()
    local before = lt.settings.max_cg_iterations
    local co = coroutine.create(function()
      return lt.with_settings({max_cg_iterations = 7}, function()
        assert(lt.settings.max_cg_iterations == 7)
        error("inside", 0)
      end)
    end)
    local ok, err = coroutine.resume(co)
    assert.is_false(ok)
    assert.equal("inside", err)
    assert.equal(before, lt.settings.max_cg_iterations)
    check_usable()
  end)
end)
