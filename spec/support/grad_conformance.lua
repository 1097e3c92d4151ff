-- spec/support/grad_conformance.lua — the gradient conformance harness,
-- beside support/conformance.lua: every operation of the table, applied to
-- an operator built from parameters, differentiated by lt.grad and checked
-- against central differences (lt.gradcheck) for every tensor the program
-- made the operator from.
--
--   local gc = require "support.grad_conformance"
--   gc.check("lowrank + diag", function(p) return lt.lowrank(p.U) + lt.diag(p.d) end,
--     {U = ..., d = ...}, {psd = true})
--
-- build(p) must make the operator from p alone (every tensor in it comes
-- from p), so that lt.grad can follow all of them; params holds numbers and
-- dense tensors. opts: square (inferred), symmetric, psd (the
-- positive-definite operations: cholesky, root, inv_quad, logdet,
-- inv_quad_logdet, mvn log_prob, eigh), tol (gradcheck's rtol, 1e-5).
--
-- Each scalar function is Σ W∘result (W fixed, made here) for
-- matrix-valued results, or the result itself for numbers: a wrong share
-- for any parameter, a missing one, or one lost to a folding rule fails.
local lt = require "lazytensor"
local conformance = require "support.conformance"

local gc = {}

-- A fixed pseudo-random matrix of the given shape (not the library's RNG).
local function weights(m, n, seed)
  local state = seed or 7
  local rows = {}
  for i = 1, m do
    rows[i] = {}
    for j = 1, n do
      state = (state * 1103515245 + 12345) % 2147483648
      rows[i][j] = state / 2147483648 * 2 - 1
    end
  end
  return lt.tensor(rows)
end
gc.weights = weights

local function vector(n, seed)
  return weights(n, 1, seed):reshape(n)
end

local function wsum(X, W) return lt.cmul(X:dense(), W):sum() end

-- The operations, each a function of the operator (m×n) returning a scalar.
local function cases(m, n, opts)
  local W = weights(m, n, 11)
  local Wt = weights(n, m, 13)
  local Xr = weights(n, 2, 17)
  local Xl = weights(2, m, 19)
  local vr, vl = vector(n, 23), vector(m, 29)
  local D = lt.diag(vector(math.min(m, n), 31):abs() + 0.5)
  local list = {
    {"dense", function(A) return wsum(A, W) end},
    {"transpose", function(A) return wsum(A:t(), Wt) end},
    {"matmul dense (right)", function(A) return lt.cmul(A * Xr, weights(m, 2, 37)):sum() end},
    {"matmul dense (left)", function(A) return lt.cmul(Xl * A, weights(2, n, 41)):sum() end},
    {"matmul vector", function(A) return (A * vr):dot(vl) end},
    {"vector matmul", function(A) return (vl * A):dot(vr) end},
    {"add dense", function(A) return wsum(A + W, W) end},
    {"add dense (left)", function(A) return wsum(W + A, W) end},
    {"sub dense", function(A) return wsum(W - A, W) end},
    {"add number", function(A) return wsum(A + 2, W) end},
    {"scale", function(A) return wsum(2.5 * A, W) end},
    {"div", function(A) return wsum(A / 4, W) end},
    {"neg", function(A) return wsum(-A, W) end},
    {"add self", function(A) return wsum(2 * A + A, W) end},
    {"hadamard dense", function(A) return wsum(lt.mul(A, W), W) end},
    {"entries", function(A) return A:get(1, n) * 2 + A:get(m, 1) end},
    {"row", function(A) return A[m]:dot(vr) end},
    {"diagonal", function(A) return A:diagonal():dot(vector(math.min(m, n), 43)) end},
    {"svd values", function(A)
      local _, S = A:svd()
      return S:dot(vector(math.min(m, n), 47))
    end},
  }
  if m == n then
    local extra = {
      {"add diag operator", function(A) return wsum(A + D, W) end},
      {"diag times", function(A) return wsum(D * A, W) end},
      {"times diag", function(A) return wsum(A * D, W) end},
      {"trace", function(A) return A:trace() end},
      {"add_diag", function(A) return wsum(A:add_diag(vector(n, 53):abs()), W) end},
      {"matmul self", function(A) return wsum(A * A, W) end},
      {"solve", function(A) return (A + lt.eye(n) * 4):solve(vr):dot(vl) end},
      {"inverse", function(A) return wsum((A + lt.eye(n) * 4):inverse(), W) end},
    }
    for _, c in ipairs(extra) do list[#list + 1] = c end
  end
  if opts.psd then
    local y = vector(n, 59)
    local extra = {
      {"logdet", function(A) return A:logdet() end},
      {"inv_quad", function(A) return A:inv_quad(y) end},
      {"inv_quad_logdet", function(A)
        local q, ld = A:inv_quad_logdet(y)
        return 0.7 * q - 1.3 * ld
      end},
      {"cholesky", function(A) return wsum(A:cholesky(), W) end},
      {"root", function(A) return wsum(A:root() * A:root():t(), W) end},
      {"eigenvalues", function(A) return A:eigh():dot(vector(n, 61)) end},
      {"mvn log_prob", function(A) return lt.mvn(lt.zeros(n), A):log_prob(y) end},
      {"mvn entropy", function(A) return lt.mvn(lt.zeros(n), A):entropy() end},
      {"kl", function(A)
        return lt.kl(lt.mvn(y, A), lt.mvn(lt.zeros(n), lt.eye(n) * 2))
      end},
    }
    for _, c in ipairs(extra) do list[#list + 1] = c end
  end
  return list
end
gc.cases = cases

-- A private copy of params (the checks write into it).
local function copy(p)
  if type(p) == "number" then return p end
  if lt.is_tensor(p) then return p:clone() end
  local out = {}
  for k, v in pairs(p) do out[k] = copy(v) end
  return out
end

--- Registers one `it` per operation: lt.grad of op(build(p)) against
-- central differences for every parameter.
function gc.check(name, build, params, opts)
  local env = conformance.spec_env(2)
  local describe, it = env.describe, env.it
  opts = opts or {}
  local A = build(copy(params))
  local m, n = A:size(1), A:size(2)
  describe("gradient conformance: " .. name, function()
    for _, case in ipairs(cases(m, n, opts)) do
      it(case[1], function()
        local f = function(p) return case[2](build(p)) end
        local ok, err = lt.gradcheck(f, copy(params), {rtol = opts.tol or 1e-5, atol = 1e-7})
        assert(ok, ("%s / %s: gradient off by %.3g"):format(name, case[1], err))
      end)
    end
  end)
end

-- The operations on a batched operator ({b, n, n}, members positive
-- definite with opts.psd), each summed to a number over the members.
local function batch_cases(b, n, opts)
  local W = weights(n, n, 67)
  local X = weights(b * n, 2, 71):reshape(b, n, 2)
  local v = weights(b * n, 1, 73):reshape(b, n)
  local list = {
    {"dense", function(A) return lt.cmul(A:dense(), lt.cmul(lt.ones(b, n, n), W)):sum() end},
    {"matmul dense", function(A) return (A * X):sum() end},
    {"matmul vector", function(A) return lt.cmul(A * lt.ones(n), v):sum() end},
    {"add dense", function(A) return lt.cmul((A + W):dense(), lt.ones(b, n, n)):sum() end},
    {"scale", function(A) return (2.5 * A):trace():sum() end},
    {"diagonal", function(A) return lt.cmul(A:diagonal(), v):sum() end},
    {"member", function(A) return A[b]:trace() + A[1]:get(1, n) end},
  }
  if opts.psd then
    local extra = {
      {"logdet", function(A) return A:logdet():sum() end},
      {"solve", function(A) return lt.cmul(A:solve(v), v):sum() end},
      {"inv_quad_logdet", function(A)
        local q, ld = A:inv_quad_logdet(v)
        return (0.7 * q - 1.3 * ld):sum()
      end},
      {"add_diag", function(A) return A:add_diag(0.5):logdet():sum() end},
      {"mvn log_prob", function(A) return lt.mvn(lt.zeros(b, n), A):log_prob(v):sum() end},
    }
    for _, c in ipairs(extra) do list[#list + 1] = c end
  end
  return list
end

--- The same for a batched operator build(p) of shape {b, n, n}.
function gc.check_batch(name, build, params, opts)
  local env = conformance.spec_env(2)
  local describe, it = env.describe, env.it
  opts = opts or {}
  local A = build(copy(params))
  local b, n = A:size(1), A:size(2)
  describe("gradient conformance (batched): " .. name, function()
    for _, case in ipairs(batch_cases(b, n, opts)) do
      it(case[1], function()
        local f = function(p) return case[2](build(p)) end
        local ok, err = lt.gradcheck(f, copy(params), {rtol = opts.tol or 1e-5, atol = 1e-7})
        assert(ok, ("%s / %s: gradient off by %.3g"):format(name, case[1], err))
      end)
    end
  end)
end

return gc
