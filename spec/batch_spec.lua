-- Batches (API.md "Batches"): what the conformance harness does not cover
-- on its own: info aggregated over members, stacking with lt.batch,
-- broadcast shapes, batched constructor inputs beside unbatched ones, the
-- dense batch rules, and the memory a batched call leaves.
local lt = require "lazytensor"
local bc = require "support.batch_conformance"

local close = bc.close

local function collect()
  collectgarbage()
  collectgarbage()
end

describe("batches", function()
  before_each(function() lt.manual_seed(7) end)

  describe("info", function()
    -- A batch of kernel + σ²I solved by CG (max_cholesky_size = 0): the
    -- batch's info is the largest iterations and residual over members,
    -- converged when all are.
    local X = lt.randn(3, 30, 1)
    local noise = {0.5, 0.05, 0.005} -- harder and harder to solve
    local function member(i)
      return lt.kernel(X[i], {kind = "rbf", lengthscale = 0.5}) + lt.identity(30, noise[i])
    end
    local K = lt.batch{member(1), member(2), member(3)}
    local b = lt.randn(3, 30)

    it("takes the largest iterations and residual, converged when all are", function()
      lt.with_settings({max_cholesky_size = 0, preconditioner_size = 0}, function()
        local x, info = K:solve(b)
        local most, worst = 0, 0
        for i = 1, 3 do
          local xi, mi = member(i):solve(b[i])
          close(x[i], xi, 1e-12, "member " .. i)
          most, worst = math.max(most, mi.iterations), math.max(worst, mi.residual)
          assert.is_true(mi.converged)
        end
        assert.equal(most, info.iterations)
        assert.equal(worst, info.residual)
        assert.is_true(info.converged)
        assert.equal("cg", info.method)
      end)
    end)

    it("is not converged when one member is not", function()
      local settings = {max_cholesky_size = 0, preconditioner_size = 0, max_cg_iterations = 16}
      lt.with_settings(settings, function()
        local _, info = K:solve(b)
        local converged, most = {}, 0
        for i = 1, 3 do
          local _, mi = member(i):solve(b[i])
          converged[#converged + 1] = mi.converged
          most = math.max(most, mi.iterations)
        end
        table.sort(converged, function(x, y) return x and not y end)
        assert.same({true, false}, {converged[1], converged[3]}, "the case needs both kinds")
        assert.is_false(info.converged)
        assert.equal(most, info.iterations)
      end)
    end)
  end)

  describe("block CG above max_cholesky_size", function()
    local X = lt.randn(4, 40, 2)
    local function member(i)
      return lt.kernel(X[i], {kind = "matern52", lengthscale = 0.7}) + lt.identity(40, 0.01 * i)
    end
    local K = lt.batch{member(1), member(2), member(3), member(4)}

    it("solves every member's columns in one run, as each member's CG alone", function()
      lt.with_settings({max_cholesky_size = 0}, function()
        assert.matches("batch_solve_block_cg", lt.explain("solve", K, lt.randn(4, 40)), 1, true)
        for _, B in ipairs{lt.randn(4, 40), lt.randn(4, 40, 3), lt.randn(40, 2)} do
          local x, info = K:solve(B)
          assert.equal("cg", info.method)
          assert.is_true(info.converged)
          local most = 0
          for i = 1, 4 do
            local Bi = B:dim() == 2 and B:size(1) == 4 and B[i] or (B:dim() == 3 and B[i] or B)
            local xi, mi = member(i):solve(Bi)
            most = math.max(most, mi.iterations)
            close(x[i], xi, 1e-10, "member " .. i)
            assert.is_true((member(i) * x[i] - Bi):norm() <= 1e-5 * Bi:norm(), "residual " .. i)
          end
          assert.equal(most, info.iterations)
        end
      end)
    end)

    it("leaves members not flagged positive definite to their own methods", function()
      local S = lt.randn(40, 40)
      S = S * S:t() + lt.eye(40) * 40
      local op = lt.operator{shape = {40, 40}, symmetric = true, matmul = function(v) return S * v end}
      local B = lt.batch{op, member(1)}
      lt.with_settings({max_cholesky_size = 0}, function()
        local b = lt.randn(2, 40)
        local x = B:solve(b)
        close(x[1], S:solve(b[1]), 1e-5, "the operator member")
        close(x[2], member(1):solve(b[2]), 1e-12, "the kernel member")
      end)
    end)
  end)

  describe("lt.batch", function()
    it("stacks operators of any types; dense members into a dense tensor", function()
      local B = lt.batch{lt.diag{1, 2}, lt.tensor{{1, 2}, {3, 4}}}
      assert.equal("batch", lt.type(B))
      assert.is_true(lt.is_lazy(B))
      assert.same({2, 2, 2}, B:shape())
      assert.equal("diag", lt.type(B[1]))
      close(B:dense(), {{{1, 0}, {0, 2}}, {{1, 2}, {3, 4}}}, 0, "dense")
      local D = lt.batch{lt.eye(2), lt.tensor{{1, 2}, {3, 4}}}
      assert.is_false(lt.is_lazy(D))
      close(D, {{{1, 0}, {0, 1}}, {{1, 2}, {3, 4}}}, 0, "dense stack")
    end)

    it("stacks dense tensors of any shape, vectors too", function()
      local S = lt.batch{lt.tensor{1, 2, 3}, lt.tensor{4, 5, 6}}
      close(S, {{1, 2, 3}, {4, 5, 6}}, 0, "two vectors")
      assert.is_false(pcall(lt.batch, {lt.tensor{1, 2}, lt.diag{1, 2}}))
    end)

    it("of batches adds a leading batch dimension", function()
      local V, W = lt.rand(3, 2) + 1, lt.rand(3, 2) + 1
      local B = lt.batch{lt.diag(V), lt.diag(W)}
      assert.same({2, 3, 2, 2}, B:shape())
      assert.same({2, 3}, B:batch_shape())
      assert.equal("diag", lt.type(B))
      close(B[2][3]:diagonal(), W[3], 0, "member {2, 3}")
      close(B:logdet()[1][2], lt.diag(V[2]):logdet(), 1e-15, "logdet {1, 2}")
    end)

    it("members are the operators given, shared, not copied", function()
      local T = lt.toeplitz{3, 1, 0.5}
      local B = lt.batch{T, T}
      assert.equal(T, B[2])
    end)
  end)

  describe("members", function()
    it("A[i] is lazy where A is, one batch dimension fewer", function()
      local V = lt.rand(2, 3, 4) + 1
      local D = lt.diag(V)
      assert.same({2, 3}, D:batch_shape())
      assert.equal("diag", lt.type(D[2]))
      assert.same({3}, D[2]:batch_shape())
      assert.same({}, D[2][3]:batch_shape())
      close(D[2][3]:diagonal(), V[2][3], 0, "the member's diagonal")
      -- a plain matrix's A[i] stays row i
      close(lt.diag{1, 2, 3}[2], {0, 2, 0}, 0, "row 2")
    end)

    it("prints its head", function()
      assert.equal("[lazytensor.diag of size 3x4x4, symmetric: yes, psd: yes]",
        tostring(lt.diag(lt.rand(3, 4) + 1)))
    end)

    it("lt.psd marks every member", function()
      local T = lt.batch{lt.operator{shape = {2, 2}, matmul = function(x) return x * 2 end},
                         lt.operator{shape = {2, 2}, matmul = function(x) return x * 3 end}}
      assert.is_nil(lt.is_psd(T))
      local P = lt.psd(T)
      assert.is_true(lt.is_psd(P))
      assert.is_true(lt.is_psd(P[2]))
      assert.is_nil(lt.is_psd(T[2])) -- T itself keeps its flags
      close(P:logdet(), {2 * math.log(2), 2 * math.log(3)}, 1e-12, "logdet")
    end)

    it("explain says which batch rules run, then member by member", function()
      local text = lt.explain("solve", lt.randn(3, 4, 4), lt.randn(3, 4))
      assert.matches("solve(dense, dense, batched):", text, 1, true)
      assert.matches("batch_dense_solve_cholesky", text, 1, true)
      assert.matches("member by member", lt.explain("logdet", lt.diag(lt.rand(3, 4))), 1, true)
    end)

    it("equals only a tensor of its shape and entries", function()
      local D = lt.diag(lt.tensor{{1, 2}, {1, 2}})
      assert.is_true(lt.equal(D, D:dense()))
      assert.is_false(lt.equal(D, lt.diag{1, 2})) -- every member equal, but not the shape
      assert.is_false(lt.equal(D, lt.diag(lt.tensor{{1, 2}, {1, 3}})))
    end)

    it("is symmetric and PSD when every member is", function()
      assert.is_true(lt.is_psd(lt.diag(lt.rand(3, 4) + 1)))
      assert.is_false(lt.is_psd(lt.batch{lt.diag{1, 2}, lt.diag{1, -2}}))
      local G = lt.randn(3, 4, 4) -- a dense batch: its members looked at
      assert.is_false(lt.is_symmetric(G))
      assert.is_true(lt.is_symmetric(G * G:t()))
      assert.is_nil(lt.is_psd(G * G:t())) -- as for a plain dense matrix: not proven
    end)
  end)

  describe("broadcasting", function()
    it("gives numpy's shapes", function()
      local A = lt.diag(lt.rand(5, 4) + 1)
      assert.same({5, 4}, (A * lt.randn(4)):shape())
      assert.same({5, 4, 2}, (A * lt.randn(4, 2)):shape())
      assert.same({5, 4, 2}, (lt.randn(4, 4) * lt.randn(5, 4, 2)):shape())
      assert.same({2, 3, 4, 2}, (lt.randn(2, 1, 4, 4) * lt.randn(3, 4, 2)):shape())
      assert.same({5, 4, 4}, (A + lt.randn(4, 4)):shape())
      assert.same({2, 5, 4, 4}, (A + lt.randn(2, 1, 4, 4)):shape())
    end)

    it("reads a right-hand side of the batch's rows as vectors, else as a matrix", function()
      local A = lt.diag(lt.rand(3, 4) + 1)
      assert.same({3, 4}, A:solve(lt.randn(3, 4)):shape()) -- a vector per member
      assert.same({3, 4, 3}, A:solve(lt.randn(4, 3)):shape()) -- one matrix for all
      assert.same({3}, A:inv_quad(lt.randn(3, 4)):shape())
    end)
  end)

  describe("constructors", function()
    it("broadcast batched inputs against unbatched ones", function()
      local U, V = lt.randn(3, 4, 2), lt.randn(4, 2)
      local L = lt.lowrank(U, V)
      assert.same({3, 4, 4}, L:shape())
      for i = 1, 3 do close(L[i], lt.lowrank(U[i], V), 1e-15, "member " .. i) end
      local c, r = lt.rand(2, 3) + lt.tensor{2, 0, 0}, lt.tensor{2, 0.5, 0.25}
      c = lt.mul(c, lt.tensor{0, 1, 1}) + lt.tensor{2, 0, 0} -- c[1] = r[1] = 2
      local T = lt.toeplitz(c, r)
      assert.same({2, 3, 3}, T:shape())
      close(T[2], lt.toeplitz(c[2], r), 0, "toeplitz member 2")
      local K = lt.kron(lt.diag(lt.rand(3, 2) + 1), lt.eye(2))
      assert.same({3, 4, 4}, K:shape())
      assert.equal("kron", lt.type(K))
    end)

    it("take a batch of kernel inputs {b, n, d}", function()
      local X = lt.randn(4, 6, 2)
      local K = lt.kernel(X, {kind = "matern52", lengthscale = 0.8, variance = 2})
      assert.same({4, 6, 6}, K:shape())
      for i = 1, 4 do
        close(K[i], lt.kernel(X[i], {kind = "matern52", lengthscale = 0.8, variance = 2}), 0,
          "kernel member " .. i)
      end
    end)
  end)

  describe("dense batches", function()
    local function spd(b, n)
      local G = lt.randn(b, n, n)
      return G * G:t() + lt.eye(n) * n
    end

    it("solve positive definite members by Cholesky, member by member otherwise", function()
      -- (the batch rule answers for positive definite batches; with one
      -- indefinite member it hands the batch to the 2-d rules)
      local S = spd(4, 5)
      local B = lt.randn(4, 5, 2)
      local x, info = S:solve(B)
      assert.equal("cholesky", info.method)
      for i = 1, 4 do close(S[i] * x[i], B[i], 1e-10, "residual " .. i) end
      -- one indefinite member: the fallback runs (LU for all)
      local M = S:clone()
      M[3] = -M[3]
      local y = M:solve(B)
      for i = 1, 4 do
        close(M[i] * y[i], B[i], 1e-10, "indefinite batch, residual " .. i)
        close(y[i], M[i]:solve(B[i]), 1e-12, "indefinite batch, member " .. i)
      end
    end)

    it("multiply member by member with BLAS, broadcasting; views go member by member", function()
      assert.matches("batch_dense_matmul", lt.explain("matmul", lt.randn(3, 4, 4), lt.randn(4, 2)),
        1, true)
      local A, B = lt.randn(2, 1, 4, 5), lt.randn(3, 5, 2)
      local C = A * B
      assert.same({2, 3, 4, 2}, C:shape())
      local v = lt.randn(5)
      local Av = A * v
      assert.same({2, 1, 4}, Av:shape())
      for i = 1, 2 do
        close(Av[i][1], A[i][1] * v, 1e-14, "matvec " .. i)
        for j = 1, 3 do close(C[i][j], A[i][1] * B[j], 1e-14, ("member {%d, %d}"):format(i, j)) end
      end
      local W = lt.randn(3, 5, 4):narrow(3, 1, 2) -- not contiguous: the fallback
      local Cw = A[1] * W
      assert.same({3, 4, 2}, Cw:shape())
      for j = 1, 3 do close(Cw[j], A[1][1] * W[j], 1e-14, "view member " .. j) end
    end)

    it("inv_quad_logdet equals the members' own", function()
      local S, b = spd(6, 8), lt.randn(6, 8)
      local q, ld, info = S:inv_quad_logdet(b)
      assert.equal("cholesky", info.method)
      for i = 1, 6 do
        local qi, ldi = S[i]:inv_quad_logdet(b[i])
        close(q[i], qi, 1e-10, "quad " .. i)
        close(ld[i], ldi, 1e-12, "logdet " .. i)
      end
      close(S:logdet(), ld, 1e-12, "logdet")
      close(S:inv_quad(b), q, 1e-12, "inv_quad")
    end)

    it("leave no memory behind, after results or errors", function()
      local S, b = spd(3, 4), lt.randn(3, 4)
      collect()
      local before = lt.memory()
      for _ = 1, 3 do
        local q, ld = S:inv_quad_logdet(b)
        local x = lt.diag(lt.rand(3, 4) + 1):solve(b)
        assert(q and ld and x)
        assert.is_false(pcall(function() return lt.batch{lt.diag{1, -1}, lt.eye(2)}:cholesky() end))
        assert(S * lt.randn(3, 4, 2) and lt.is_symmetric(S))
        lt.with_settings({max_cholesky_size = 0}, function() assert(S:solve(b)) end)
      end
      q, ld, x = nil, nil, nil -- luacheck: ignore
      collect()
      assert.equal(before, lt.memory())
    end)
  end)
end)
