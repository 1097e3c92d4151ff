-- lt.chol(L) = L·Lᵀ against references multiplied out in plain Lua.
local lt = require "lazytensor"
local conformance = require "support.conformance"
local ref = conformance.reference
local close = conformance.assert_close

local L = {{2, 0, 0, 0}, {0.5, 1.5, 0, 0}, {-1, 0.25, 1, 0}, {0.3, -0.7, 0.2, 0.8}}
local Lneg = {{-2, 0, 0}, {0.5, 1.5, 0}, {-1, 0.25, -1}}
local function llt(F) return ref.mm(F, ref.transpose(F)) end

conformance.check("chol from a dense lower factor", function() return lt.chol(lt.tensor(L)) end,
  function() return llt(L) end, {psd = true})
conformance.check("chol from a triangular operator",
  function() return lt.chol(lt.triangular(lt.tensor(L), "lower")) end,
  function() return llt(L) end, {psd = true})
conformance.check("chol with negative diagonal entries",
  function() return lt.chol(lt.tensor(Lneg)) end,
  function() return llt(Lneg) end, {psd = true})

describe("chol structure", function()
  it("is PSD and symmetric", function()
    local A = lt.chol(lt.tensor(L))
    assert.equal("chol", lt.type(A))
    assert.is_true(A:is_psd())
    assert.is_true(A:is_symmetric())
    assert.equal("chol", lt.type(3 * A))
    close(3 * A, llt(ref.mm(L, {{math.sqrt(3), 0, 0, 0}, {0, math.sqrt(3), 0, 0},
      {0, 0, math.sqrt(3), 0}, {0, 0, 0, math.sqrt(3)}})), 1e-12, "3A")
  end)

  it("has L as its Cholesky factor and root, logdet 2 Σ log L_ii", function()
    local A = lt.chol(lt.tensor(L))
    assert.equal("triangular", lt.type(A:cholesky()))
    assert.equal("triangular", lt.type(A:root()))
    assert.equal("inverse", lt.type(A:root_inv())) -- L⁻ᵀ, lazy
    close(A:cholesky(), L, 0, "cholesky")
    close(A:cholesky(true), ref.transpose(L), 0, "upper cholesky")
    close(A:root(), L, 0, "root")
    local want = 2 * (math.log(2) + math.log(1.5) + math.log(1) + math.log(0.8))
    close(A:logdet(), want, 1e-14, "logdet")
    local _, info = A:solve(lt.ones(4))
    assert.equal("cholesky", info.method)
    -- negative diagonal: the factor's columns are flipped
    local C = lt.chol(lt.tensor(Lneg)):cholesky():totable()
    for i = 1, 3 do assert.is_true(C[i][i] > 0) end
  end)

  it("rejects bad input with clear errors", function()
    local function fails(pattern, f, ...)
      local ok, err = pcall(f, ...)
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    fails("^lazytensor: chol: the factor must be lower triangular %(entry %(1, 2%)", lt.chol,
      lt.tensor{{1, 2}, {0, 1}})
    fails("^lazytensor: chol: expected a square lower%-triangular factor", lt.chol, lt.ones(2, 3))
    fails("^lazytensor: chol: expected a lower%-triangular factor", lt.chol,
      lt.triangular(lt.tensor(L), "upper"))
    fails("^lazytensor: solve: the matrix is singular", lt.solve,
      lt.chol(lt.tensor{{1, 0}, {1, 0}}), lt.ones(2))
    fails("^lazytensor: cholesky: the matrix is not positive definite", lt.cholesky,
      lt.chol(lt.tensor{{1, 0}, {1, 0}}))
  end)
end)
