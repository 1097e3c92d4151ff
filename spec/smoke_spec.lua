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
