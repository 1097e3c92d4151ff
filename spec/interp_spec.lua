-- Specs for lazytensor.interp: exactness on bilinear surfaces, the documented
-- border rules on small grids worked by hand, masks, and errors.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
local interp = require "lazytensor.interp"

-- A bilinear surface sampled on an nr x nc grid.
local function bilinear(nr, nc)
  local g = {}
  for i = 1, nr do
    g[i] = {}
    for j = 1, nc do g[i][j] = 3 + 0.5 * i - 2 * j + 0.25 * i * j end
  end
  return g
end

local function copy_grid(g)
  local c = {}
  for i, row in pairs(g) do
    c[i] = {}
    for j, v in pairs(row) do c[i][j] = v end
  end
  return c
end

local function assert_error_with(fn, frag)
  local ok, err = pcall(fn)
  assert.is_false(ok)
  assert.is_truthy(err:find(frag, 1, true), "expected '" .. frag .. "' in: " .. tostring(err))
end

describe("interp.fill", function()
  it("reproduces a bilinear surface exactly wherever it interpolates", function()
    local truth = bilinear(8, 7)
    local g = copy_grid(truth)
    -- single cells, a run of three in a row, a 2x2 block, and two edge cells
    -- (1, 4) and (5, 7) that have known cells on both sides along the edge
    local holes = { { 2, 2 }, { 4, 3 }, { 4, 4 }, { 4, 5 }, { 6, 2 }, { 6, 3 }, { 7, 2 },
      { 7, 3 }, { 1, 4 }, { 5, 7 } }
    for _, h in ipairs(holes) do g[h[1]][h[2]] = nil end
    local out, filled = interp.fill(g, { ncols = 7 })
    assert.equal(#holes, filled)
    for i = 1, 8 do
      for j = 1, 7 do
        assert.near(truth[i][j], out[i][j], 1e-12, ("cell %d,%d"):format(i, j))
      end
    end
  end)

  it("fills a whole missing row from the columns, exactly on a plane", function()
    local truth = bilinear(5, 4)
    local g = copy_grid(truth)
    g[3] = {}
    local out, filled = interp.fill(g, { ncols = 4 })
    assert.equal(4, filled)
    for j = 1, 4 do assert.near(truth[3][j], out[3][j], 1e-12) end
  end)

  it("averages the nearest known values at a corner (extrapolation)", function()
    -- (1,1) missing: nearest right is (1,2) = 5, nearest below is (3,1) = 9
    -- ((2,1) is missing too); no direction has both sides, so (5 + 9) / 2.
    local g = {
      { nil, 5, 6 },
      { nil, 7, 8 },
      { 9, 10, 11 },
    }
    local out, filled = interp.fill(g, { ncols = 3 })
    assert.equal(2, filled)
    assert.equal(7, out[1][1])
    -- (2,1): right (2,2) = 7, below (3,1) = 9, nothing left or above: mean 8.
    assert.equal(8, out[2][1])
  end)

  it("uses only two-sided estimates when some direction has them", function()
    -- (1,2): row gives (1 + 3) / 2 = 2 interpolated; the column only has
    -- (3,2) = 100 below, which is ignored.
    local g = {
      { 1, nil, 3 },
      { 4, nil, 6 },
      { 7, 100, 9 },
    }
    local out = interp.fill(g)
    assert.equal(2, out[1][2])
    -- (2,2): row gives 5, column has nothing above: 5.
    assert.equal(5, out[2][2])
  end)

  it("falls back to the nearest known cell when row and column are empty", function()
    local g = {
      { nil, nil, 10 },
      { nil, nil, nil },
      { 20, nil, nil },
    }
    local out, filled = interp.fill(g, { nrows = 3, ncols = 3 })
    assert.equal(7, filled)
    assert.equal(10, out[2][2]) -- tie at distance sqrt 2: (1,3) comes first
    assert.equal(15, out[1][1]) -- right 10 and below 20
    assert.equal(10, out[1][2]) -- only right
    assert.equal(15, out[3][3]) -- left 20 and above 10
    assert.equal(20, out[2][1]) -- only below: column 1 has (3,1)
  end)

  it("treats masked and NaN cells as missing and leaves the input alone", function()
    local truth = bilinear(4, 4)
    local g = copy_grid(truth)
    g[2][3] = 0 / 0
    g[3][2] = 1e6 -- a wrong value, held out by the mask
    local mask = { [3] = { [2] = true } }
    local out, filled = interp.fill(g, { mask = mask })
    assert.equal(2, filled)
    assert.near(truth[2][3], out[2][3], 1e-12)
    assert.near(truth[3][2], out[3][2], 1e-12)
    assert.equal(1e6, g[3][2])
    assert.is_true(g[2][3] ~= g[2][3])
  end)

  it("infers the size from the largest column index, or takes ncols", function()
    local g = { { 1, nil, 3 }, { 4 } }
    local out = interp.fill(g)
    assert.equal(3, #out[1])
    assert.equal(3, #out[2])
    assert.equal(2, out[1][2])
    local wide = interp.fill(g, { ncols = 4 })
    assert.equal(3, wide[1][4]) -- nearest known value in row 1, to the left
  end)

  it("does reasonably on held-out volcano cells", function()
    local data = require "lazytensor.data"
    local volcano = data.read_matrix("examples/data/volcano.csv")
    local mask, held = {}, 0
    for i = 1, #volcano do
      mask[i] = {}
      for j = 1, #volcano[i] do
        if (i * 61 + j) % 7 == 0 then mask[i][j], held = true, held + 1 end
      end
    end
    local out, filled = interp.fill(volcano, { mask = mask })
    assert.equal(held, filled)
    local rmse, n = interp.rmse(volcano, out, mask)
    assert.equal(held, n)
    assert.is_true(rmse > 0 and rmse < 3, "rmse " .. rmse)
  end)

  it("raises lazytensor errors on bad input", function()
    assert_error_with(function() interp.fill(42) end, "lazytensor: interp.fill: grid must be")
    assert_error_with(function() interp.fill({}) end, "lazytensor: interp.fill: grid is empty")
    assert_error_with(function() interp.fill({ { nil, nil } }, { ncols = 2 }) end,
      "lazytensor: interp.fill: grid has no known cell")
  end)
end)

describe("interp.rmse", function()
  it("compares the masked cells only", function()
    local a = { { 1, 2 }, { 3, 4 } }
    local b = { { 1, 5 }, { 7, 4 } }
    local r, n = interp.rmse(a, b, { { false, true }, { true, false } })
    assert.equal(2, n)
    assert.near(math.sqrt((9 + 16) / 2), r, 1e-15)
    local all, m = interp.rmse(a, b)
    assert.equal(4, m)
    assert.near(math.sqrt(25 / 4), all, 1e-15)
  end)
end)
