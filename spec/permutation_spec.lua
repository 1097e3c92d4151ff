-- lt.permutation(p): P with (P·x)ᵢ = x[pᵢ], against references written out
-- by loops over that definition (row i holds its 1 in column pᵢ).
local lt = require "lazytensor"
local conformance = require "support.conformance"
local close = conformance.assert_close

local function reference(p)
  return function()
    local R = {}
    for i = 1, #p do
      R[i] = {}
      for j = 1, #p do R[i][j] = p[i] == j and 1 or 0 end
    end
    return R
  end
end

local function make(p) return function() return lt.permutation(p) end end

-- (conformance.check must be called from the spec file's main chunk.)
conformance.check("permutation, a 4-cycle (odd: det -1)", make{2, 3, 4, 1}, reference{2, 3, 4, 1})
conformance.check("permutation, two 2-cycles (even, symmetric)", make{2, 1, 4, 3},
  reference{2, 1, 4, 3}, {symmetric = true})
conformance.check("permutation, a 3-cycle and a fixed point (even)", make{3, 1, 2, 4},
  reference{3, 1, 2, 4})
conformance.check("permutation, the identity (PSD)", make{1, 2, 3}, reference{1, 2, 3},
  {psd = true})
conformance.check("permutation of one", make{1}, reference{1}, {psd = true})
conformance.check("permutation from a 1-d tensor", function()
  return lt.permutation(lt.tensor{5, 3, 1, 2, 4})
end, reference{5, 3, 1, 2, 4})
conformance.check("permutation transposed (the inverse)", function()
  return lt.permutation{2, 3, 4, 1}:t()
end, reference{4, 1, 2, 3})
-- No parameters of its own: a gradient through it reaches the diag beside it.
local Dp = lt.diag{2, -1, 0.5, 3}
conformance.check("permutation times a diag (gradients reach the diag)", function()
  return lt.permutation{2, 3, 4, 1} * Dp
end, function()
  local R, p, d = reference{2, 3, 4, 1}(), {2, 3, 4, 1}, {2, -1, 0.5, 3}
  for i = 1, 4 do R[i][p[i]] = d[p[i]] end
  return R
end, {leaves = {Dp}})

describe("permutation structure", function()
  it("gathers rows, and its transpose scatters them", function()
    local P = lt.permutation{3, 1, 2}
    assert.same({30, 10, 20}, (P * lt.tensor{10, 20, 30}):totable())
    assert.same({20, 30, 10}, (P:t() * lt.tensor{10, 20, 30}):totable())
    assert.same({{3, 30}, {1, 10}, {2, 20}}, (P * lt.tensor{{1, 10}, {2, 20}, {3, 30}}):totable())
  end)

  it("stays a permutation under transpose, inverse and products", function()
    local P, Q = lt.permutation{3, 1, 2, 4}, lt.permutation{2, 1, 4, 3}
    assert.equal("permutation", lt.type(P:t()))
    assert.equal("permutation", lt.type(P:inverse()))
    assert.equal("permutation", lt.type(P * Q))
    -- (P·Q·x)ᵢ = x[q[p[i]]]: p = {3, 1, 2, 4}, q = {2, 1, 4, 3} → {4, 2, 1, 3}
    close(P * Q, reference{4, 2, 1, 3}(), 0, "P*Q")
    close(P:inverse() * P, reference{1, 2, 3, 4}(), 0, "P⁻¹P")
  end)

  it("solves exactly, with the sign of the permutation as its determinant", function()
    local P = lt.permutation{2, 3, 1}
    local x, info = P:solve(lt.tensor{7, 8, 9})
    assert.same({9, 7, 8}, x:totable())
    assert.equal("permutation", info.method)
    assert.is_true(info.converged)
    assert.equal(0, P:logdet()) -- a 3-cycle is even
    assert.is_true(lt.permutation{2, 1, 3}:logdet() ~= lt.permutation{2, 1, 3}:logdet()) -- odd: NaN
    local function slogdet(Q)
      local sign, logabs = Q:slogdet()
      return {sign, logabs}
    end
    assert.same({1, 0}, slogdet(P))
    assert.same({-1, 0}, slogdet(lt.permutation{2, 1, 3}))
    assert.same({-1, 0}, slogdet(lt.permutation{2, 3, 4, 1}:t()))
    assert.same({0, 0, 0}, P:diagonal():totable())
    assert.equal(2, lt.permutation{1, 3, 2, 4}:trace())
  end)

  it("knows its flags: symmetric when an involution, PSD only as the identity", function()
    assert.is_true(lt.permutation{2, 1, 3}:is_symmetric())
    assert.is_false(lt.permutation{2, 3, 1}:is_symmetric())
    assert.is_false(lt.permutation{2, 1}:is_psd())
    assert.is_true(lt.permutation{1, 2}:is_psd())
  end)

  it("has no parameters: its gradient is empty, and with_params refuses to move it", function()
    local P = lt.permutation{3, 1, 2}
    assert.same({}, P:params())
    assert.is_nil(next(P:bilinear_derivative(lt.tensor{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}})))
    assert.is_nil(next(P:bilinear_derivative{d = lt.tensor{1, 2, 3}}))
    local ok, err = pcall(P.with_params, P, {[P] = {p = lt.tensor{1, 2, 3}}})
    assert.is_false(ok)
    assert.matches("^lazytensor: with_params: ", err)
  end)

  it("refuses what is not a permutation", function()
    local function fails(pattern, ...)
      local ok, err = pcall(lt.permutation, ...)
      assert.is_false(ok)
      assert.matches("^lazytensor: permutation: " .. pattern, err)
    end
    fails("2 appears twice %(a permutation holds each of 1%.%.3 once%)", {1, 2, 2})
    fails("index 4 out of range %(1%.%.3%)", {1, 4, 2})
    fails("p%[2%] = 0 is not an index", {1, 0})
    fails("p%[1%] = 1%.5 is not an index", {1.5})
    fails("p must be a 1%-d tensor or an array of indices, got number", 3)
    fails("missing p")
  end)
end)
