-- Edge cases of the structured types: empty and 1x1 operands, rectangular
-- and square shapes through every operation. Each call must either succeed
-- or raise a `lazytensor:` error; none may crash the host. Values of
-- successful results are checked against the operator's own dense form.
local lt = require "lazytensor"

local makers = {
  {"lowrank U*V'", function(n, m) return lt.lowrank(lt.randn(n, 2), lt.randn(m, 2)) end},
  {"lowrank U*U'", function(n) return lt.lowrank(lt.randn(n, 1)) end},
  {"lowrank + diag", function(n) return lt.lowrank(lt.randn(n, 2)) + lt.diag(lt.rand(n) + 0.5) end},
  {"lowrank(U, V) + diag with a zero", function(n)
    local d = lt.rand(n) + 0.5
    if n > 0 then d[1] = 0 end
    return lt.lowrank(lt.randn(n, 2), lt.randn(n, 2)) + lt.diag(d)
  end},
  {"kron rectangular", function(n, m)
    return lt.kron(lt.randn(n, m), lt.randn(1, 1), lt.randn(1, 2))
  end},
  {"kron + s*I", function(n)
    return lt.kron(lt.eye(n), lt.psd(lt.eye(1) * 2)) + lt.identity(n, 0.5)
  end},
  {"kron non-symmetric + s*I", function(n)
    return lt.kron(lt.randn(n, n), lt.randn(1, 1)):add_diag(3)
  end},
  {"blockdiag with an empty block", function(n, m)
    return lt.blockdiag{lt.randn(n, m), lt.zeros(0, 0)}
  end},
  {"blockdiag of lazy blocks", function(n, m)
    return lt.blockdiag{lt.eye(n), lt.diag(lt.ones(n)), lt.lowrank(lt.randn(m, 1), lt.randn(n, 1))}
  end},
  {"chol", function(n) return lt.chol(lt.eye(n) * 2) end},
}
local sizes = {{0, 0}, {1, 1}, {0, 3}, {3, 0}, {2, 3}, {3, 3}}

local function operations(A)
  local m, n = A:size(1), A:size(2)
  return {
    function() return A * lt.randn(n) end, function() return lt.randn(m) * A end,
    function() return A * lt.randn(n, 2) end, function() return A:t():dense() end,
    function() return A:diagonal() end, function() return A:trace() end,
    function() return A:solve(lt.randn(m)) end, function() return A:solve(lt.randn(m, 2)) end,
    function() return A:logdet() end, function() return A:inv_quad_logdet(lt.randn(m)) end,
    function() return A:inv_quad(lt.randn(m)) end, function() return A:cholesky() end,
    function() return A:cholesky(true) end, function() return A:root() end,
    function() return A:root_inv() end, function() return A:inverse():dense() end,
    function() return A:add_diag(1) end, function() return A:add_jitter() end,
    function() return A + A end, function() return A - A end, function() return 2 * A end,
    function() return -A end, function() return A * A end, function() return A * A:t() end,
    function() return A:get(1, 1) end, function() return A[1] end,
    function() return A + lt.zeros(m, n) end, function() return A:is_psd() end,
    function() return A:is_symmetric() end,
    function() local _, Q = A:eigh(); return Q:dense() end,
    function() local U, _, V = A:svd(); return U:dense(), V:dense() end,
    function() return A * lt.randn(n + 1) end, function() return A:solve(lt.randn(m + 1)) end,
  }
end

describe("structured edge cases", function()
  for _, mk in ipairs(makers) do
    for _, sz in ipairs(sizes) do
      local name = string.format("%s (%d, %d): results or lazytensor: errors", mk[1], sz[1], sz[2])
      it(name, function()
        local ok, A = pcall(mk[2], sz[1], sz[2])
        if not ok then
          assert.matches("^lazytensor: ", tostring(A))
          return
        end
        local D = A:dense()
        assert.same(A:shape(), D:shape())
        for i, f in ipairs(operations(A)) do
          local ok2, err = pcall(f)
          if not ok2 then
            assert.matches("^lazytensor: ", tostring(err), "operation " .. i)
          end
        end
        -- products agree with the operator's dense form (zeros for empty inner sizes)
        local m, n = A:size(1), A:size(2)
        local v, u, M = lt.randn(n), lt.randn(m), lt.randn(n, 2)
        local function near(x, y)
          local dx, dy = x:totable(), y:totable()
          assert.equal(#dy, #dx)
          for i = 1, #dy do
            local a, b = dx[i], dy[i]
            if type(a) == "table" then
              for j = 1, #b do
                assert.is_true(math.abs(a[j] - b[j]) <= 1e-10 * (1 + math.abs(b[j])))
              end
            else
              assert.is_true(math.abs(a - b) <= 1e-10 * (1 + math.abs(b)))
            end
          end
        end
        if m > 0 then near(A * v, D * v) end
        if n > 0 then near(u * A, u * D) end
        if m > 0 then near(A * M, D * M) end
        if n > 0 and m > 0 then near(A:t():dense(), D:t()) end
        -- still intact
        assert.same(D:totable(), A:dense():totable())
      end)
    end
  end
end)
