-- The batch conformance case: a batched operator of some type against its
-- members built one at a time (each a plain 2-d operator, made from that
-- member's inputs alone), for every operation: each member of a batched
-- result must equal the operation on the member. The 2-d operations
-- themselves are checked against dense references by support/conformance.lua;
-- this harness checks what batching adds: shapes, members, broadcasting
-- (batch shapes {3} and {2, 2}, operands with fewer or size-1 batch
-- dimensions, unbatched operands shared by every member) and info.
--
--   batch_conformance.check({describe = describe, it = it, assert = assert}, name, {
--     type = "diag",                   -- what lt.type must say
--     -- the batched operator of batch shape `shape`, and a function making
--     -- its member idx (1-based indices) alone, from that member's inputs
--     build = function(shape) return A, function(idx) ... end end,
--     psd = true | symmetric = true | square = true | singular = true,
--   })
local lt = require "lazytensor"

local unpack = table.unpack or unpack -- luacheck: ignore 143

local batch_conformance = {}

local SHAPES = {{3}, {2, 2}}

-- Values of a tensor (dense or lazy) or a number, as nested tables.
local function values(x)
  if type(x) == "number" or not lt.is_tensor(x) then return x end -- (a table of numbers)
  if lt.is_lazy(x) then x = x:dense() end
  if x:dim() == 0 then return x:totable()[1] or x:sum() end
  return x:totable()
end

local function flatten(v, out)
  out = out or {}
  if type(v) == "number" then
    out[#out + 1] = v
  else
    for _, w in ipairs(v) do flatten(w, out) end
  end
  return out
end

-- got ≈ want entry by entry, relative to the largest |want| (at least 1).
local function close(got, want, tol, what)
  local g, w = flatten(values(got)), flatten(values(want))
  assert(#g == #w, ("%s: %d entries, expected %d"):format(what, #g, #w))
  local scale = 1
  for _, x in ipairs(w) do scale = math.max(scale, math.abs(x)) end
  for i = 1, #g do
    local d = math.abs(g[i] - w[i])
    local both_nan = g[i] ~= g[i] and w[i] ~= w[i] -- (a negative determinant's logdet)
    if not both_nan and (d ~= d or d > tol * scale) then
      error(("%s: entry %d is %.17g, expected %.17g"):format(what, i, g[i], w[i]), 2)
    end
  end
end

-- R[i1][i2]...: a batched result's member (a number for a tensor of the
-- batch shape).
local function at(R, idx)
  for _, i in ipairs(idx) do R = R[i] end
  return R
end

-- Every batch index of shape, row-major.
local function indices(shape)
  local all, idx = {}, {}
  local function walk(d)
    if d > #shape then
      all[#all + 1] = {unpack(idx)}
      return
    end
    for i = 1, shape[d] do
      idx[d] = i
      walk(d + 1)
    end
  end
  walk(1)
  return all
end

local function concat(a, b)
  local r = {}
  for _, x in ipairs(a) do r[#r + 1] = x end
  for _, x in ipairs(b) do r[#r + 1] = x end
  return r
end

local function text(idx) return "member {" .. table.concat(idx, ", ") .. "}" end

-- A tensor of random numbers with this shape (a table of sizes).
local function randn(shape)
  return lt.randn(unpack(shape))
end

batch_conformance.close = close
batch_conformance.at = at
batch_conformance.indices = indices
batch_conformance.shapes = SHAPES

-- R A: the members of result R of op on the batched A against op on
-- members made alone.
local function each_member(shape, R, member, op, tol, what)
  for _, idx in ipairs(indices(shape)) do
    close(at(R, idx), op(member(idx), idx), tol, what .. ", " .. text(idx))
  end
end

-- env: the spec's busted functions {describe =, it =, assert =} (they live
-- in the spec file's environment, not in _G).
function batch_conformance.check(env, name, c)
  local describe, it, assert = env.describe, env.it, env.assert
  local tol = c.tol or 1e-9
  for _, shape in ipairs(SHAPES) do
    describe(("batch conformance: %s, batch {%s}"):format(name, table.concat(shape, ", ")),
      function()
        lt.manual_seed(2024)
        local A, member = c.build(shape)
        local M1 = member(indices(shape)[1])
        local m, n = M1:size(1), M1:size(2)
        local square = m == n
        local symmetric = c.psd or c.symmetric
        local function case(what, f) it(what, f) end

        case("shape, batch shape, type and members", function()
          assert.same(concat(shape, {m, n}), A:shape())
          assert.same(shape, A:batch_shape())
          assert.equal(c.type, lt.type(A))
          assert.same({}, M1:batch_shape())
          for _, idx in ipairs(indices(shape)) do
            local Ai = at(A, idx)
            assert.same({m, n}, Ai:shape())
            assert.equal(lt.is_lazy(member(idx)), lt.is_lazy(Ai)) -- lazy where A is
            close(Ai, member(idx), tol, "A[i], " .. text(idx))
          end
          assert.same(concat({unpack(shape, 2)}, {m, n}), A[1]:shape())
        end)

        case("dense, diagonal, transpose, neg, scale", function()
          each_member(shape, A:dense(), member, function(Mi) return Mi:dense() end, tol, "dense")
          each_member(shape, A:diagonal(), member, function(Mi) return Mi:diagonal() end, tol,
            "diagonal")
          assert.same(concat(shape, {n, m}), A:t():shape())
          each_member(shape, A:t(), member, function(Mi) return Mi:t() end, tol, "transpose")
          each_member(shape, -A, member, function(Mi) return -Mi end, tol, "neg")
          each_member(shape, A * 2.5, member, function(Mi) return Mi * 2.5 end, tol, "scale")
          for _, idx in ipairs(indices(shape)) do -- one index per dimension, as dense
            local args = concat(idx, {m, 1})
            close(A:get(unpack(args)), member(idx):get(m, 1), tol, "get, " .. text(idx))
          end
          each_member(shape, A:row(1), member, function(Mi) return Mi:row(1) end, tol, "row")
          assert.is_true(lt.equal(A, A))
        end)

        case("products, broadcast against batched and unbatched operands", function()
          local X = randn(concat(shape, {n, 2}))
          local R = A * X
          assert.same(concat(shape, {m, 2}), R:shape())
          each_member(shape, R, member, function(Mi, idx) return Mi * at(X, idx) end, tol, "A*X")
          local X2 = randn{n, 2} -- unbatched: shared by every member
          each_member(shape, A * X2, member, function(Mi) return Mi * X2 end, tol, "A*X (shared)")
          local v = randn{n}
          local r = A * v
          assert.same(concat(shape, {m}), r:shape())
          each_member(shape, r, member, function(Mi) return Mi * v end, tol, "A*v")
          local Y = randn{2, m}
          each_member(shape, Y * A, member, function(Mi) return Y * Mi end, tol, "Y*A")
          -- a batch dimension of one size fewer: aligned at the right
          local last = shape[#shape]
          local Xl = randn{last, n, 2}
          each_member(shape, A * Xl, member, function(Mi, idx) return Mi * Xl[idx[#idx]] end,
            tol, "A*X (broadcast batch)")
          local X1 = randn(concat({1}, {n, 2}))
          each_member(shape, A * X1, member, function(Mi) return Mi * X1[1] end, tol,
            "A*X (batch of one)")
        end)

        case("element-wise arithmetic with batched and unbatched operands", function()
          local D = randn(concat(shape, {m, n}))
          each_member(shape, A + D, member, function(Mi, idx) return Mi + at(D, idx) end, tol,
            "A + D")
          each_member(shape, D - A, member, function(Mi, idx) return at(D, idx) - Mi end, tol,
            "D - A")
          local D2 = randn{m, n}
          each_member(shape, A + D2, member, function(Mi) return Mi + D2 end, tol, "A + D (shared)")
          each_member(shape, lt.mul(A, D2), member, function(Mi) return lt.mul(Mi, D2) end, tol,
            "A .* D (shared)")
          each_member(shape, A + M1, member, function(Mi) return Mi + M1 end, tol,
            "A + member 1 (a lazy unbatched operand)")
          each_member(shape, A - A, member, function(Mi) return Mi - Mi end, tol, "A - A")
          each_member(shape, A + 1.5, member, function(Mi) return Mi + 1.5 end, tol, "A + c")
          each_member(shape, A * A:t(), member, function(Mi) return Mi * Mi:t() end, tol,
            "A * A^T (both batched)")
        end)

        if square then
          case("trace and add_diag", function()
            local t = A:trace()
            assert.same(shape, t:shape())
            each_member(shape, t, member, function(Mi) return Mi:trace() end, tol, "trace")
            each_member(shape, A:add_diag(0.5), member, function(Mi) return Mi:add_diag(0.5) end,
              tol, "add_diag (number)")
            local d = lt.rand(unpack(concat(shape, {n})))
            each_member(shape, A:add_diag(d), member,
              function(Mi, idx) return Mi:add_diag(at(d, idx)) end, tol, "add_diag (batched)")
          end)
        end

        if square and not c.singular then
          case("solve, logdet, inverse, info aggregated", function()
            local B = randn(concat(shape, {n})) -- a batch of vectors
            local x, info = A:solve(B)
            assert.same(concat(shape, {n}), x:shape())
            assert.is_true(info.converged)
            each_member(shape, x, member, function(Mi, idx) return Mi:solve(at(B, idx)) end,
              1e-7, "solve (vectors)")
            local B2 = randn{n, 2}
            each_member(shape, A:solve(B2), member, function(Mi) return Mi:solve(B2) end, 1e-7,
              "solve (shared matrix)")
            local B3 = randn(concat(shape, {n, 2}))
            each_member(shape, A:solve(B3), member, function(Mi, idx) return Mi:solve(at(B3, idx)) end,
              1e-7, "solve (batched matrices)")
            local ld = A:logdet()
            assert.same(shape, ld:shape())
            each_member(shape, ld, member, function(Mi) return Mi:logdet() end, 1e-8, "logdet")
            each_member(shape, A:inverse(), member, function(Mi) return Mi:inverse() end, 1e-7,
              "inverse")
          end)
        end

        if square and symmetric and not c.singular then
          case("inv_quad, inv_quad_logdet, eigh", function()
            local b = randn(concat(shape, {n}))
            each_member(shape, A:inv_quad(b), member, function(Mi, idx) return Mi:inv_quad(at(b, idx)) end,
              1e-7, "inv_quad")
            local q, ld, info = A:inv_quad_logdet(b)
            assert.same(shape, q:shape())
            assert.is_true(info.converged)
            each_member(shape, q, member, function(Mi, idx)
              return (Mi:inv_quad_logdet(at(b, idx)))
            end, 1e-7, "inv_quad_logdet (quad)")
            each_member(shape, ld, member, function(Mi, idx)
              return select(2, Mi:inv_quad_logdet(at(b, idx)))
            end, 1e-7, "inv_quad_logdet (logdet)")
            local w, Q = A:eigh()
            each_member(shape, w, member, function(Mi) return (Mi:eigh()) end, 1e-8, "eigh values")
            for _, idx in ipairs(indices(shape)) do
              local Qi = at(Q, idx)
              close(Qi * lt.diag(at(w, idx)) * Qi:t(), member(idx), 1e-8,
                "eigh reconstruction, " .. text(idx))
            end
          end)
        end

        if c.psd and not c.singular then
          case("cholesky and root", function()
            local L, info = A:cholesky()
            assert.is_true(info.converged)
            each_member(shape, L, member, function(Mi) return Mi:cholesky() end, 1e-8, "cholesky")
            local R = A:root()
            for _, idx in ipairs(indices(shape)) do
              local Ri = at(R, idx)
              close(Ri * Ri:t(), member(idx), 1e-8, "root reconstruction, " .. text(idx))
            end
          end)
        end

        case("svd", function()
          local U, S, V = A:svd()
          each_member(shape, S, member, function(Mi) return select(2, Mi:svd()) end, 1e-8,
            "singular values")
          for _, idx in ipairs(indices(shape)) do
            local Ui, Vi = at(U, idx), at(V, idx)
            close(Ui * lt.diag(at(S, idx)) * Vi:t(), member(idx), 1e-8,
              "svd reconstruction, " .. text(idx))
          end
        end)
      end)
  end
end

return batch_conformance
