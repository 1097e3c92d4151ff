-- The binding and Lua's collector: Lua sees only the small boxes, so the
-- binding runs an incremental step each time the library's memory has grown
-- by a stride (lua/lazytensor.c, gc_nudge). Garbage tensors are freed in a
-- loop of small operations, and a collector the program stopped stays
-- stopped.
local lt = require "lazytensor"

-- one diag + diag result's bytes, measured with the collector stopped
local function bytes_per_op(a, b)
  collectgarbage()
  collectgarbage("stop")
  local m0 = lt.memory()
  local r = a + b -- luacheck: ignore 211 (kept until the measurement)
  local per = lt.memory() - m0
  collectgarbage("restart")
  return per
end

describe("the collector and the library's memory", function()
  local a, b = lt.diag{1, 2, 3}, lt.diag{4, 5, 6}

  it("frees garbage results while a loop of small operations runs", function()
    -- in a fresh interpreter: how much garbage Lua lets pile up grows with
    -- its heap, and busted's is large (LuaJIT then holds ~10000 results)
    local lua = os.getenv("LUA") or "lua5.4"
    local env = "LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;;'"
    local p = assert(io.popen(env .. " " .. lua .. " spec/support/gc_loop.lua 2>&1"))
    local out = p:read("*a")
    p:close()
    local per, peak, left = out:match("^(%d+)%s+(%d+)%s+(%d+)")
    assert.is_truthy(per, out)
    per, peak, left = tonumber(per), tonumber(peak), tonumber(left)
    assert.is_true(per > 0)
    -- never collected, 20000 results would hold 20000 * per bytes
    assert.is_true(peak < 4000 * per, ("peak %d bytes, %d per result"):format(peak, per))
    assert.equal(0, left)
  end)

  it("does not run a collector the program stopped", function()
    if not pcall(collectgarbage, "isrunning") then
      pending("collectgarbage('isrunning') needs Lua 5.2 or later (this is " .. _VERSION .. ")")
      return
    end
    local per = bytes_per_op(a, b)
    collectgarbage()
    collectgarbage("stop")
    local m0 = lt.memory()
    local n = 5000 -- several strides' worth
    for _ = 1, n do
      local r = a + b -- luacheck: ignore 211
    end
    local grown = lt.memory() - m0
    assert.is_false(collectgarbage("isrunning"))
    collectgarbage("restart")
    assert.equal(n * per, grown)
    collectgarbage()
    assert.equal(m0, lt.memory())
  end)
end)
