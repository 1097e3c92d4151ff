-- lt.submatrix: A[rows, cols] kept lazy, checked against the dense entries
-- picked by loops.
local lt = require "lazytensor"
local conformance = require "support.conformance"

-- A 6×6 SPD matrix, built by loops: M Mᵀ + 6 I with M_ij = sin(i + 2j).
local function spd_rows()
  local n, A = 6, {}
  for i = 1, n do
    A[i] = {}
    for j = 1, n do
      local s = 0
      for k = 1, n do s = s + math.sin(i + 2 * k) * math.sin(j + 2 * k) end
      A[i][j] = s + (i == j and 6 or 0)
    end
  end
  return A
end

local function pick(A, rows, cols)
  local out = {}
  for i, r in ipairs(rows) do
    out[i] = {}
    for j, c in ipairs(cols) do out[i][j] = A[r][c] end
  end
  return out
end

local rows, cols = {5, 2, 6, 1}, {3, 3, 4}

conformance.check("principal submatrix of an SPD matrix",
  function()
    local A = lt.psd(lt.tensor(spd_rows()))
    return lt.submatrix(A, rows)
  end,
  function() return pick(spd_rows(), rows, rows) end, {psd = true})

conformance.check("rectangular submatrix with a repeated column",
  function() return lt.submatrix(lt.tensor(spd_rows()), rows, cols) end,
  function() return pick(spd_rows(), rows, cols) end)

describe("submatrix", function()
  it("keeps a lazy child lazy and uses its products", function()
    local calls = 0
    local A = lt.tensor(spd_rows())
    local op = lt.operator{shape = {6, 6}, symmetric = true,
                           matmul = function(X) calls = calls + 1; return A * X end}
    local S = lt.submatrix(op, rows)
    assert.equal("submatrix", lt.type(S))
    local y = S * lt.tensor{1, 2, 3, 4}
    assert.equal(1, calls)
    local ref = pick(spd_rows(), rows, rows)
    for i = 1, 4 do
      local s = 0
      for j = 1, 4 do s = s + ref[i][j] * j end
      assert.near(s, y[i], 1e-12)
    end
  end)

  it("is PSD only as a principal submatrix of a PSD matrix", function()
    local A = lt.psd(lt.tensor(spd_rows()))
    assert.is_true(lt.submatrix(A, rows):is_psd())
    assert.is_false(lt.submatrix(A, rows, cols):is_psd())
    assert.is_nil(lt.submatrix(lt.tensor(spd_rows()) - lt.eye(6) * 100, rows):is_psd())
  end)

  it("rejects bad indices with clear errors", function()
    local A = lt.eye(3)
    for _, bad in ipairs{{0}, {4}, {1.5}, {"x"}} do
      local ok, err = pcall(lt.submatrix, A, bad)
      assert.is_false(ok)
      assert.matches("^lazytensor: submatrix: ", err)
    end
    local ok, err = pcall(lt.submatrix, lt.zeros(2, 3), {1})
    assert.is_false(ok)
    assert.matches("^lazytensor: submatrix: expected a square matrix", err)
    assert.equal(6, (lt.eye(3) + 5):get(1, 1))
  end)
end)
