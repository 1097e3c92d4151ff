-- lt.blockdiag against references assembled in plain Lua from the blocks.
local lt = require "lazytensor"
local conformance = require "support.conformance"
local ref = conformance.reference
local close = conformance.assert_close

-- The block-diagonal matrix of Lua tables of rows.
local function assemble(blocks)
  local rows, cols = 0, 0
  for _, b in ipairs(blocks) do
    rows, cols = rows + #b, cols + #b[1]
  end
  local R = {}
  for i = 1, rows do
    R[i] = {}
    for j = 1, cols do R[i][j] = 0 end
  end
  local r0, c0 = 0, 0
  for _, b in ipairs(blocks) do
    for i = 1, #b do
      for j = 1, #b[1] do R[r0 + i][c0 + j] = b[i][j] end
    end
    r0, c0 = r0 + #b, c0 + #b[1]
  end
  return R
end

local rand = ref.generator(4242)
local function spd(n)
  local M = ref.random_matrix(rand, n, n)
  local S = ref.mm(M, ref.transpose(M))
  for i = 1, n do S[i][i] = S[i][i] + n end
  return S
end
local S3, S2 = spd(3), spd(2)
local G3, G2 = ref.random_matrix(rand, 3, 3), ref.random_matrix(rand, 2, 2)
for i = 1, 3 do G3[i][i] = G3[i][i] + 3 end
for i = 1, 2 do G2[i][i] = G2[i][i] + 2 end
local R23, R31, R32 = ref.random_matrix(rand, 2, 3), ref.random_matrix(rand, 3, 1),
  ref.random_matrix(rand, 3, 2)
local T = lt.tensor
local dg = {{1.5, 0, 0, 0}, {0, 0.5, 0, 0}, {0, 0, 2, 0}, {0, 0, 0, 1}}

conformance.check("blockdiag of SPD blocks (dense, diag, dense)",
  function() return lt.blockdiag{lt.psd(T(S3)), lt.diag{1.5, 0.5, 2, 1}, lt.psd(T(S2))} end,
  function() return assemble{S3, dg, S2} end, {psd = true})
conformance.check("blockdiag of SPD blocks, unflagged",
  function() return lt.blockdiag{T(S3), T(S2)} end,
  function() return assemble{S3, S2} end, {psd = true})
conformance.check("blockdiag of general square blocks",
  function() return lt.blockdiag{T(G3), T(G2)} end,
  function() return assemble{G3, G2} end)
conformance.check("blockdiag of rectangular blocks (2x3, 3x1 = 5x4)",
  function() return lt.blockdiag{T(R23), T(R31)} end, function() return assemble{R23, R31} end)
local rank4 = "rank <= 2 + 2 = 4 < 5"
conformance.check("blockdiag of rectangular blocks making a square (2x3, 3x2)",
  function() return lt.blockdiag{T(R23), T(R32)} end, function() return assemble{R23, R32} end,
  {singular = rank4})
conformance.check("blockdiag with lazy blocks (lowrank + diag, kron)",
  function()
    return lt.blockdiag{lt.lowrank(T(R32)) + lt.diag{1, 2, 3},
      lt.kron(lt.psd(T(S2)), lt.psd(T(S2)))}
  end,
  function()
    local L = ref.mm(R32, ref.transpose(R32))
    for i = 1, 3 do L[i][i] = L[i][i] + i end
    local K = {}
    for i = 1, 4 do
      K[i] = {}
      for j = 1, 4 do
        K[i][j] = S2[math.floor((i - 1) / 2) + 1][math.floor((j - 1) / 2) + 1]
                  * S2[(i - 1) % 2 + 1][(j - 1) % 2 + 1]
      end
    end
    return assemble{L, K}
  end, {psd = true})

describe("blockdiag structure", function()
  it("stays blockdiag under +, -, * with matching blocks, transpose, scale", function()
    local A = lt.blockdiag{T(G3), T(G2)}
    local B = lt.blockdiag{T(S3), T(S2)}
    for _, x in ipairs{A + B, A - B, A * B, A:t(), 2 * A, -A, A:inverse()} do
      assert.equal("blockdiag", lt.type(x))
    end
    local sum = assemble{G3, G2}
    local other = assemble{S3, S2}
    close(A * B, ref.mm(sum, other), 1e-12, "A * B")
    for i = 1, 5 do for j = 1, 5 do sum[i][j] = sum[i][j] + other[i][j] end end
    close(A + B, sum, 1e-12, "A + B")
    -- blocks that do not match: a lazy sum / product
    local C = lt.blockdiag{T(G2), T(G3)}
    assert.equal("sum", lt.type(A + C))
    assert.equal("product", lt.type(A * C))
    close(A + C, (function()
      local s = assemble{G3, G2}
      local o = assemble{G2, G3}
      for i = 1, 5 do for j = 1, 5 do s[i][j] = s[i][j] + o[i][j] end end
      return s
    end)(), 1e-12, "non-matching sum")
  end)

  it("adds diagonals block by block", function()
    local A = lt.blockdiag{T(G3), T(G2)}
    for _, x in ipairs{A + lt.diag{1, 2, 3, 4, 5}, lt.diag{1, 2, 3, 4, 5} + A, A:add_jitter(),
      A:add_diag(2), A + lt.identity(5, 2)} do
      assert.equal("blockdiag", lt.type(x))
    end
    local want = assemble{G3, G2}
    for i = 1, 5 do want[i][i] = want[i][i] + i end
    close(A:add_diag(T{1, 2, 3, 4, 5}), want, 1e-14, "add_diag")
  end)

  it("flattens nested blockdiags and propagates properties soundly", function()
    local A = lt.blockdiag{lt.blockdiag{T(S3), T(S2)}, T(S2)}
    assert.equal("blockdiag", lt.type(A))
    close(A, assemble{S3, S2, S2}, 0, "nested")
    assert.is_true(A:is_symmetric())
    assert.is_nil(A:is_psd())
    assert.is_true(lt.blockdiag{lt.psd(T(S3)), lt.diag{1, 2}}:is_psd())
    assert.is_false(lt.blockdiag{lt.psd(T(S3)), lt.diag{1, -2}}:is_psd())
    assert.is_false(lt.blockdiag{T(G3), T(S2)}:is_symmetric())
    -- square overall from rectangular blocks: unknown, never a wrong yes
    assert.is_not_true(lt.blockdiag{T(R23), T(R32)}:is_psd())
    assert.is_not_true(lt.blockdiag{T(R23), T(R32)}:is_symmetric())
  end)

  it("factors block by block", function()
    local A = lt.blockdiag{lt.psd(T(S3)), lt.psd(T(S2))}
    assert.equal("blockdiag", lt.type(A:cholesky()))
    assert.equal("blockdiag", lt.type((A:root())))
    local _, la = ref.lu(S3)
    local _, lb = ref.lu(S2)
    close(A:logdet(), la + lb, 1e-10, "logdet")
    local w = A:eigh():totable()
    for i = 2, 5 do assert.is_true(w[i - 1] <= w[i], "ascending") end
    assert.matches("blockdiag solve", lt.explain("solve", A, lt.ones(5)))
  end)

  it("gets the sign of the determinant right across blocks", function()
    -- two blocks with negative determinants: det > 0 overall
    local A = lt.blockdiag{T{{0, 1}, {1, 0}}, T{{-2}}}
    close(A:logdet(), math.log(2), 1e-12, "logdet")
  end)

  it("rejects bad input with clear errors", function()
    local function fails(pattern, f, ...)
      local ok, err = pcall(f, ...)
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    fails("^lazytensor: blockdiag: expected a table of blocks", lt.blockdiag, T(S3))
    fails("^lazytensor: blockdiag: needs at least one block", lt.blockdiag, {})
    fails("^lazytensor: blockdiag: block 2 must be a matrix", lt.blockdiag, {T(S3), lt.ones(3)})
    fails("^lazytensor: blockdiag: block 2: expected a tensor or a table of numbers, got string",
      lt.blockdiag, {T(S3), "x"})
    local A = lt.blockdiag{T(R23), T(R31)}
    fails("^lazytensor: solve: expected a square matrix", lt.solve, A, lt.ones(5))
    close(A, assemble{R23, R31}, 0, "intact")
  end)
end)
