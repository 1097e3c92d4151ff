-- lt.zeros_operator(m [, n]): the zero matrix, stored as nothing, against
-- references of zeros; what it does to the operators it meets.
local lt = require "lazytensor"
local conformance = require "support.conformance"

local function zeros(m, n)
  return function()
    local R = {}
    for i = 1, m do
      R[i] = {}
      for j = 1, n do R[i][j] = 0 end
    end
    return R
  end
end

-- (conformance.check must be called from the spec file's main chunk.)
conformance.check("zeros_operator 3x3 (singular, PSD)", function() return lt.zeros_operator(3) end,
  zeros(3, 3), {symmetric = true, singular = "rank 0 < 3"})
conformance.check("zeros_operator 2x4", function() return lt.zeros_operator(2, 4) end, zeros(2, 4))
conformance.check("zeros_operator 4x1", function() return lt.zeros_operator(4, 1) end, zeros(4, 1))
-- No parameters of its own: a gradient through a cat reaches the block
-- beside it.
local Bz = lt.tensor{{1, 2, 3}, {4, 5, 6}}
conformance.check("zeros_operator stacked over a dense block (gradients reach the block)",
  function() return lt.cat{lt.zeros_operator(1, 3), Bz} end,
  function() return {{0, 0, 0}, {1, 2, 3}, {4, 5, 6}} end, {leaves = {Bz}, singular = "a zero row"})

describe("zeros_operator structure", function()
  local A = lt.tensor{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}

  it("is the neutral element of + and absorbs products", function()
    local Z = lt.zeros_operator(3)
    assert.equal("zeros_operator", lt.type(Z))
    assert.same({3, 3}, Z:shape())
    assert.equal(A, Z + A) -- A itself, not a copy
    assert.equal(A, A + Z)
    assert.equal(A, A - Z)
    assert.same({{-1, -2, -3}, {-4, -5, -6}, {-7, -8, -9}}, (Z - A):dense():totable())
    assert.equal("zeros_operator", lt.type(Z * A))
    assert.same({3, 2}, (A * lt.zeros_operator(3, 2)):shape())
    assert.equal("zeros_operator", lt.type(A * lt.zeros_operator(3, 2)))
    assert.equal("zeros_operator", lt.type(lt.mul(Z, A)))
    assert.equal("zeros_operator", lt.type(2.5 * Z))
    assert.same({4, 2}, lt.zeros_operator(2, 4):t():shape())
    assert.same({0, 0, 0}, (Z * lt.ones(3)):totable())
    assert.same({{2, 2, 2}, {2, 2, 2}, {2, 2, 2}}, (Z + 2):dense():totable())
  end)

  it("is singular when square: logdet -inf, solves and factorisations refuse", function()
    local Z = lt.zeros_operator(3)
    assert.equal(-math.huge, Z:logdet())
    local sign, logabs = Z:slogdet()
    assert.equal(0, sign)
    assert.equal(-math.huge, logabs)
    assert.is_true(Z:is_psd())
    assert.is_true(Z:is_symmetric())
    assert.is_false(lt.zeros_operator(2, 3):is_symmetric())
    for name, call in pairs{solve = function() return Z:solve(lt.ones(3)) end,
                            inverse = function() return Z:inverse() end,
                            cholesky = function() return Z:cholesky() end,
                            inv_quad = function() return Z:inv_quad(lt.ones(3)) end} do
      local ok, err = pcall(call)
      assert.is_false(ok, name)
      assert.matches("^lazytensor: " .. name .. ": matrix is ", err)
    end
  end)

  it("has no parameters: its gradient is empty", function()
    local Z = lt.zeros_operator(2, 3)
    assert.same({}, Z:params())
    assert.is_nil(next(Z:bilinear_derivative(lt.tensor{{1}, {2}}, lt.tensor{{1}, {2}, {3}})))
    assert.is_nil(next(Z:bilinear_derivative(lt.tensor{{1, 2, 3}, {4, 5, 6}})))
  end)

  it("takes one size for a square one, two for any other", function()
    assert.same({5, 5}, lt.zeros_operator(5):shape())
    assert.same({0, 7}, lt.zeros_operator(0, 7):shape())
    local ok, err = pcall(lt.zeros_operator, -1)
    assert.is_false(ok)
    assert.matches("^lazytensor: zeros_operator: the number of rows must be a non%-negative integer", err)
  end)
end)
