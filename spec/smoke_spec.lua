-- The smallest end-to-end check: the module loads and dispatch works in both
-- operand orders, against hand-computed values.
local lt = require "lazytensor"

describe("lazytensor smoke", function()
  it("adds a diagonal and a dense matrix in both orders", function()
    local d = lt.diag{1, 2}
    local T = lt.tensor{{1, 2}, {3, 4}}
    assert.same({{2, 2}, {3, 6}}, (d + T):totable())
    assert.same({{2, 2}, {3, 6}}, (T + d):totable())
  end)

  it("keeps diag + diag diagonal", function()
    local s = lt.diag{1, 2} + lt.diag{3, 4}
    assert.equal("diag", lt.type(s))
    assert.same({{4, 0}, {0, 6}}, s:dense():totable())
  end)
end)

describe("error messages", function()
  -- API.md: the message starts with "lazytensor:" (no "file:line:" prefix).
  local cases = {
    shape = function() return lt.tensor{{1, 2}} + lt.tensor{{1, 2, 3}} end,
    index = function() return lt.tensor{1, 2}[0] end,
    argument = function() return lt.zeros(-1) end,
    core = function() return lt.diag{1, 2}:solve(lt.tensor{1, 2, 3}) end,
    callback_result = function()
      return lt.operator{shape = {2, 2}, matmul = function() return 1 end} * lt.tensor{1, 2}
    end,
  }
  for name, f in pairs(cases) do
    it("start with 'lazytensor:' (" .. name .. ")", function()
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches("^lazytensor: ", err)
    end)
  end
end)
