-- The parts of the binding where Lua 5.1, 5.2, 5.3, 5.4 and LuaJIT differ:
-- numbers (integers and floats), userdata lifetime, module loading. Runs
-- unchanged on every version (no 5.4-only syntax here: see close_spec.lua).
local lt = require "lazytensor"

describe("on " .. (type(jit) == "table" and jit.version or _VERSION), function()
  it("loads one module per Lua state", function()
    assert.are.equal(lt, require "lazytensor")
    assert.are.equal("string", type(lt._VERSION))
  end)

  it("takes sizes and indices as integers or integral floats alike", function()
    local a, b = lt.zeros(3, 2), lt.zeros(3.0, 2.0)
    assert.are.same(a:shape(), b:shape())
    local t = lt.tensor{10, 20, 30}
    assert.are.equal(20, t[2])
    assert.are.equal(20, t[2.0])
    assert.are.equal(3, #t)
  end)

  it("rejects non-integral and negative sizes on every version", function()
    assert.has_error(function() lt.zeros(2.5) end)
    assert.has_error(function() lt.zeros(-1) end)
    assert.has_error(function() lt.zeros(0 / 0) end)
    assert.has_error(function() lt.zeros(math.huge) end)
    local ok, err = pcall(lt.zeros, 2.5)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("lazytensor:", 1, true))
  end)

  it("returns sizes that are integers where the language has them", function()
    local n = lt.zeros(4, 5):size(2)
    assert.are.equal(5, n)
    if math.type then assert.are.equal("integer", math.type(n)) end
    assert.are.equal(800, lt.settings.max_cholesky_size)
  end)

  it("gives the same random numbers for the same seed", function()
    lt.manual_seed(1234)
    local a = lt.randn(5):totable()
    lt.manual_seed(1234.0)
    local b = lt.randn(5):totable()
    assert.are.same(a, b)
  end)

  it("frees explicitly with A:free() and refuses a freed tensor", function()
    collectgarbage()
    local before = lt.memory()
    local a = lt.zeros(100, 100)
    assert.is_true(lt.memory() >= before + 100 * 100 * 8)
    a:free()
    assert.are.equal(before, lt.memory())
    local ok, err = pcall(function() return a + 1 end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("freed", 1, true))
    assert.has_error(function() a:free() end)
    assert.are.equal("lazytensor.tensor (freed)", tostring(a))
  end)

  it("releases tensors on collection", function()
    collectgarbage()
    local before = lt.memory()
    do
      local _ = lt.ones(50, 50) + lt.diag(lt.ones(50)) * 0
    end
    collectgarbage()
    collectgarbage()
    assert.are.equal(before, lt.memory())
  end)
end)
