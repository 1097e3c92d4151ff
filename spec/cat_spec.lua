-- lt.cat(blocks [, dim]): blocks stacked (dim 1) or side by side (dim 2),
-- against references written out by loops over the blocks' entries.
local lt = require "lazytensor"
local conformance = require "support.conformance"
local close = conformance.assert_close

local A = {{4, 1, 0}, {1, 3, 1}}         -- 2×3
local B = {{2, -1, 1}}                   -- 1×3
local C = {{1, 2}, {0, 1}}               -- 2×2
local S = {{5, 1, 0}, {1, 4, 1}, {0, 1, 3}}

-- The blocks' entries copied into one table: stacked (dim 1) or side by side.
local function joined(blocks, dim)
  return function()
    local R = {}
    if dim == 1 then
      for _, M in ipairs(blocks) do
        for _, row in ipairs(M) do
          local r = {}
          for j = 1, #row do r[j] = row[j] end
          R[#R + 1] = r
        end
      end
    else
      for i = 1, #blocks[1] do
        local r = {}
        for _, M in ipairs(blocks) do
          for j = 1, #M[i] do r[#r + 1] = M[i][j] end
        end
        R[i] = r
      end
    end
    return R
  end
end

-- (conformance.check must be called from the spec file's main chunk.)
-- Blocks made once, outside make(), so the gradient check can be told
-- they are the leaves: each must get its gradient through the cat.
local tA, tB, tC = lt.tensor(A), lt.tensor(B), lt.tensor(C)
conformance.check("cat of dense blocks stacked (2x3 over 1x3: square)",
  function() return lt.cat{tA, tB} end, joined({A, B}, 1), {leaves = {tA, tB}})
conformance.check("cat of dense blocks side by side (2x2 | 2x3)",
  function() return lt.cat({tC, tA}, 2) end, joined({C, A}, 2), {leaves = {tC, tA}})
local D2, LR = lt.diag{2, 3}, lt.lowrank({{1}, {2}}, {{1}, {0}, {1}})
conformance.check("cat of lazy blocks side by side (diag | lowrank)", function()
  return lt.cat({D2, LR}, 2)
end, joined({{{2, 0}, {0, 3}}, {{1, 0, 1}, {2, 0, 2}}}, 2), {leaves = {D2, LR}})
local D3 = lt.diag{1, 2, 3}
conformance.check("cat of lazy blocks stacked (lowrank over diag, 5x3)", function()
  return lt.cat{LR, D3}
end, joined({{{1, 0, 1}, {2, 0, 2}}, {{1, 0, 0}, {0, 2, 0}, {0, 0, 3}}}, 1), {leaves = {LR, D3}})
conformance.check("cat of one block (SPD)", function() return lt.cat{lt.tensor(S)} end,
  joined({S}, 1), {psd = true})
conformance.check("cat transposed", function() return lt.cat({lt.tensor(C), lt.tensor(A)}, 2):t() end,
  function()
    local R = joined({C, A}, 2)()
    local T = {}
    for j = 1, #R[1] do
      T[j] = {}
      for i = 1, #R do T[j][i] = R[i][j] end
    end
    return T
  end)

describe("cat structure", function()
  it("keeps its blocks lazy and shares them", function()
    local D = lt.diag{1, 2}
    local K = lt.cat({D, lt.kron({{1, 2}}, {{3}, {4}})}, 2)
    assert.equal("cat", lt.type(K))
    assert.same({2, 4}, K:shape())
    assert.equal("cat", lt.type(K:t()))
    close(K * lt.tensor{1, 1, 1, 1}, {1 + 3 + 6, 2 + 4 + 8}, 1e-15, "K·1")
  end)

  it("is the lazy root of a low-rank + diagonal matrix", function()
    local R = (lt.lowrank{{1}, {2}, {3}} + lt.diag{1, 1, 1}):root()
    assert.equal("cat", lt.type(R))
    close(R * R:t(), {{2, 2, 3}, {2, 5, 6}, {3, 6, 10}}, 1e-14, "R·Rᵀ")
  end)

  it("hands each block its part of the weights (gradients) and rebuilds over new blocks", function()
    local X, Y = lt.tensor{{1, 2}, {3, 4}}, lt.tensor{{5, 6, 7}, {8, 9, 10}}
    local K = lt.cat({X, Y}, 2) -- 2×5
    local g = K:bilinear_derivative(lt.tensor{{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}})
    close(g[X].values, {{1, 2}, {6, 7}}, 1e-15, "dense W: X's columns")
    close(g[Y].values, {{3, 4, 5}, {8, 9, 10}}, 1e-15, "dense W: Y's columns")
    -- W = L·Rᵀ with L = (1, 2)ᵀ, R = (1, -1, 2, 0, 3)ᵀ: each block its rows of R
    g = K:bilinear_derivative(lt.tensor{{1}, {2}}, lt.tensor{{1}, {-1}, {2}, {0}, {3}})
    close(g[X].values, {{1, -1}, {2, -2}}, 1e-15, "L·Rᵀ: X's columns")
    close(g[Y].values, {{2, 0, 3}, {4, 0, 6}}, 1e-15, "L·Rᵀ: Y's columns")
    -- stacked, diagonal W = diag(1, 2, 3): the second block's part is off
    -- its own diagonal
    g = lt.cat{tA, tB}:bilinear_derivative{d = lt.tensor{1, 2, 3}}
    close(g[tA].values, {{1, 0, 0}, {0, 2, 0}}, 1e-15, "diag W: A's rows")
    close(g[tB].values, {{0, 0, 3}}, 1e-15, "diag W: B's row")
    local K2 = K:with_params{[Y] = {values = lt.tensor{{0, 0, 0}, {0, 0, 1}}}}
    assert.equal("cat", lt.type(K2))
    close(K2, {{1, 2, 0, 0, 0}, {3, 4, 0, 0, 1}}, 1e-15, "rebuilt")
    close(K, {{1, 2, 5, 6, 7}, {3, 4, 8, 9, 10}}, 1e-15, "the original unchanged")
  end)

  it("refuses blocks that do not line up", function()
    local function fails(pattern, ...)
      local ok, err = pcall(lt.cat, ...)
      assert.is_false(ok)
      assert.matches("^lazytensor: cat: " .. pattern, err)
    end
    fails("block 2 has 2 columns, block 1 has 3", {A, C})
    fails("block 2 has 1 rows, block 1 has 2", {A, B}, 2)
    fails("dim must be 1 %(rows%) or 2 %(columns%), got 3", {A}, 3)
    fails("needs at least one block", {})
    fails("expected a table of blocks", lt.tensor(A))
  end)
end)
