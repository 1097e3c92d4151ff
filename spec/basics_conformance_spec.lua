-- The shared conformance case on identity and triangular operators, and on
-- Cholesky factors; references written out by loops here, never with the
-- library. (conformance.check runs from the main chunk.)
local lt = require "lazytensor"
local conformance = require "support.conformance"

local function scaled_identity(n, c)
  return function()
    local R = {}
    for i = 1, n do
      R[i] = {}
      for j = 1, n do R[i][j] = i == j and c or 0 end
    end
    return R
  end
end

conformance.check("identity 4x4", function() return lt.identity(4) end, scaled_identity(4, 1),
  {psd = true})
conformance.check("identity 3x3 times 2.5", function() return lt.identity(3, 2.5) end,
  scaled_identity(3, 2.5), {psd = true})
conformance.check("identity 3x3 times -2", function() return lt.identity(3, -2) end,
  scaled_identity(3, -2), {symmetric = true})

local A = {{3, 7, -1, 2}, {1, -2, 5, 4}, {0.5, 2, 4, -3}, {-1, 1.5, 2, 5}}

-- A's triangle, by loops over the definition.
local function triangle(upper, transposed)
  return function()
    local R = {}
    for i = 1, #A do
      R[i] = {}
      for j = 1, #A do
        local r, c = i, j
        if transposed then r, c = j, i end
        local inside = upper and c >= r or (not upper and c <= r)
        R[i][j] = inside and A[r][c] or 0
      end
    end
    return R
  end
end

conformance.check("triangular lower 4x4", function() return lt.triangular(lt.tensor(A)) end,
  triangle(false))
conformance.check("triangular upper 4x4",
  function() return lt.triangular(lt.tensor(A), "upper") end, triangle(true))
conformance.check("triangular lower, transposed", function()
  return lt.triangular(lt.tensor(A)):t()
end, triangle(false, true))
conformance.check("triangular over a transposed view", function()
  return lt.triangular(lt.tensor(A):t(), "upper")
end, function()
  -- the upper triangle of Aᵀ
  local R = {}
  for i = 1, #A do
    R[i] = {}
    for j = 1, #A do R[i][j] = j >= i and A[j][i] or 0 end
  end
  return R
end)

-- The Cholesky factor of [[4, 2, 0], [2, 5, 1], [0, 1, 3]], by hand:
-- l11 = 2, l21 = 1, l22 = 2, l32 = 1/2, l33 = sqrt(3 - 1/4).
conformance.check("cholesky factor (triangular)", function()
  return lt.tensor{{4, 2, 0}, {2, 5, 1}, {0, 1, 3}}:cholesky()
end, function()
  return {{2, 0, 0}, {1, 2, 0}, {0, 0.5, math.sqrt(2.75)}}
end)
