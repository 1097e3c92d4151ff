-- Self-test of the conformance harness: it must pass on plain dense matrices
-- and on lt.diag, whose references are written out by hand here.
local lt = require "lazytensor"
local conformance = require "support.conformance"

local general = {{4, 1, -2}, {0.5, 3, 1}, {2, -1, 5}}
local spd = {{4, 1, 0.5}, {1, 3, -0.25}, {0.5, -0.25, 2}}
local rect = {{1, 2, 3, 4}, {-1, 0.5, 2, 0}, {3, 1, -2, 1}}

conformance.check("dense general 3x3", function() return lt.tensor(general) end,
  function() return general end)
conformance.check("dense SPD 3x3", function() return lt.tensor(spd) end,
  function() return spd end, {psd = true})
conformance.check("dense 3x4", function() return lt.tensor(rect) end,
  function() return rect end)
local singular = {{1, 2, 0}, {2, 4, 0}, {0, 0, 3}}
conformance.check("dense singular 3x3", function() return lt.tensor(singular) end,
  function() return singular end, {symmetric = true, singular = "row 2 = 2 · row 1"})

local d = {2, 0.5, 3, 1.5}
local function diag_reference()
  local R = {}
  for i = 1, #d do
    R[i] = {}
    for j = 1, #d do R[i][j] = i == j and d[i] or 0 end
  end
  return R
end
conformance.check("diag (positive)", function() return lt.diag(d) end, diag_reference,
  {psd = true})

local dn = {2, -0.5, 3}
conformance.check("diag (indefinite)", function() return lt.diag(dn) end, function()
  return {{2, 0, 0}, {0, -0.5, 0}, {0, 0, 3}}
end, {symmetric = true})

describe("conformance harness", function()
  it("fails on a wrong operator", function()
    -- run the comparison helper directly: a wrong value must raise
    assert.has_error(function()
      conformance.assert_close(lt.tensor{1, 2, 3}, {1, 2, 3.001}, 1e-10, "x")
    end)
    assert.has_no.errors(function()
      conformance.assert_close(lt.tensor{1, 2, 3}, {1, 2, 3}, 1e-10, "x")
    end)
  end)

  it("computes independent references", function()
    local ref = conformance.reference
    local solve, logabs, sign = ref.lu(general)
    local x = solve({1, 2, 3})
    local r = ref.mv(general, x)
    for i = 1, 3 do assert.is_true(math.abs(r[i] - i) < 1e-12) end
    -- det(general) = 4(15+1) - 1(2.5-2) + (-2)(-0.5-6) = 64 - 0.5 + 13 = 76.5
    assert.is_true(math.abs(logabs - math.log(76.5)) < 1e-12)
    assert.are.equal(1, sign)
    local w = ref.eigenvalues{{2, 1}, {1, 2}}
    assert.is_true(math.abs(w[1] - 1) < 1e-12 and math.abs(w[2] - 3) < 1e-12)
  end)
end)
