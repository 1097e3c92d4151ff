-- Structured operators and linear algebra under allocation failure: each
-- type present in this build (probed, so the script runs as types land).
local lt = require "lazytensor"
local function close(a, b, what)
  assert(math.abs(a - b) < 1e-8 * (1 + math.abs(b)),
    (what or "") .. ": " .. tostring(a) .. " vs " .. tostring(b))
end

local A = lt.tensor{{4, 1, 0}, {1, 3, 1}, {0, 1, 2}}
if pcall(function() return lt.eye(2):cholesky() end) then
  close(A:logdet(), math.log(18), "logdet")
  close(A:solve(lt.tensor{5, 5, 3})[1], 1, "solve")
  close(A:cholesky():dense():get(1, 1), 2, "cholesky")
  close(A:inv_quad(lt.tensor{1, 0, 0}), 5 / 18, "inv_quad")
  local w = A:eigh()
  close(w:sum(), 9, "eigh")
  -- the iterative paths: CG, Lanczos/SLQ, pivoted Cholesky preconditioner
  lt.with_settings({max_cholesky_size = 1}, function()
    local x, info = A:solve(lt.tensor{5, 5, 3})
    assert(info.method ~= "cholesky", info.method)
    assert(math.abs(x[1] - 1) < 1e-4, "cg solve " .. x[1])
    local ld = A:logdet()
    assert(math.abs(ld - math.log(18)) < 1, "slq logdet " .. ld)
  end)
end
if lt.lowrank then
  local U = lt.tensor{{1, 0}, {0, 1}, {1, 1}}
  local L = lt.lowrank(U) + lt.identity(3)
  close(L:dense():get(3, 3), 3, "lowrank")
  close(L:logdet(), math.log(8), "lowrank logdet")
end
if lt.kron then
  local K = lt.kron(lt.tensor{{1, 2}, {3, 4}}, lt.eye(2))
  close(K:get(3, 1), 3, "kron")
  close((K * K):get(1, 1), 7, "kron * kron")
end
if lt.blockdiag then
  local B = lt.blockdiag{lt.diag{1, 2}, lt.tensor{{3}}}
  close(B:trace(), 6, "blockdiag")
end
if lt.toeplitz then
  local T = lt.toeplitz(lt.tensor{2, 1, 0.5})
  close((T * lt.ones(3))[2], 4, "toeplitz")
end
if lt.kernel then
  local x = lt.tensor{{0}, {1}, {2}}
  local K = lt.kernel(x, {kind = "rbf", lengthscale = 1, variance = 1})
  close(K:get(1, 2), math.exp(-0.5), "kernel")
  close(K:add_jitter(1e-2):logdet(), K:add_jitter(1e-2):dense():logdet(), "kernel logdet")
end
if lt.chol then
  local C = lt.chol(lt.tensor{{2, 0}, {1, 1}})
  close(C:dense():get(2, 2), 2, "chol")
end
if lt.triangular then
  local T = lt.triangular(A, "upper")
  close(T:get(3, 1), 0, "triangular")
end
if lt.interp then
  -- x = 1.5 on the grid 0..5: Keys' weights -1/16, 9/16, 9/16, -1/16
  local W = lt.interp(lt.tensor{1.5, 2.25}, {0, 5, 6})
  close(W:get(1, 2), 0.5625, "interp")
  local T = lt.psd(lt.toeplitz(lt.tensor{1, 0.5, 0.25, 0.1, 0.05, 0.01}))
  local S = lt.psd(W * T * W:t())
  local col = W * (T * (W:t() * lt.tensor{1, 0}))
  close(S:diagonal()[1], col[1], "SKI diagonal")
  close(S:dense():get(2, 1), col[2], "SKI dense")
end
close((A * A):trace(), 33, "product (sum of squares, A symmetric)")
