-- `local A <close> = ...` (Lua 5.4): a closed tensor's memory is returned at the end
-- of its scope. The syntax does not parse on older versions, so the chunk
-- is compiled with load() and the spec is pending there.
local lt = require "lazytensor"

local has_close = _VERSION >= "Lua 5.4" and type(jit) ~= "table"

describe("local A <close>", function()
  if not has_close then
    pending("needs Lua 5.4 (this is " .. _VERSION .. "): use A:free() instead")
    return
  end

  local function compile(src)
    local chunk = assert((loadstring or load)(src))
    return chunk
  end

  it("frees at the end of the scope", function()
    local run = compile [[
      local lt = ...
      collectgarbage()
      local before = lt.memory()
      local kept
      do
        local A <close> = lt.zeros(64, 64)
        kept = A
        assert(lt.memory() >= before + 64 * 64 * 8)
      end
      return before, lt.memory(), kept
    ]]
    local before, after, kept = run(lt)
    assert.are.equal(before, after)
    local ok, err = pcall(function() return kept * 2 end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("freed", 1, true))
  end)

  it("frees when the scope is left by an error", function()
    local run = compile [[
      local lt = ...
      collectgarbage()
      local before = lt.memory()
      local ok = pcall(function()
        local A <close> = lt.zeros(32, 32)
        error("boom")
      end)
      return ok, before, lt.memory()
    ]]
    local ok, before, after = run(lt)
    assert.is_false(ok)
    assert.are.equal(before, after)
  end)
end)
