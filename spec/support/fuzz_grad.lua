-- spec/support/fuzz_grad.lua — the differential fuzzer's gradient mode.
--
-- Random operator trees (depth ≥ 3) built from parameters by every
-- constructor and operation, folding rules included (2·D, D1 + D2, Aᵀ of a
-- kernel, dense·D, kron + c·I, ...), a random scalar objective of the
-- result (Σ W∘A, a quadratic form, the trace; logdet, inv_quad_logdet, an
-- mvn log_prob and a Cholesky factor for positive definite trees), and
-- lt.grad of it against central differences for every parameter the tree
-- was built from (a few entries of each). Each disagreement is counted as
-- missing (lt.grad gave 0 where the difference is not), or wrong.
--
--   local fuzz_grad = require "support.fuzz_grad"
--   local report = fuzz_grad.run{seed = 1, cases = 200}
--   -- report.failures: strings; report.stats: trees, checked, missing, wrong
local lt = require "lazytensor"
local fuzz = require "support.fuzz"
local autograd = require "lazytensor.autograd"

local fuzz_grad = {}

-- A tree is a function of params p; the generator fills p's initial
-- values as it goes (p[name] = tensor) and describes the tree in text.
local Builder = {}
Builder.__index = Builder

local function new_builder(rng)
  return setmetatable({rng = rng, params = {}, count = 0}, Builder)
end

function Builder:param(value)
  self.count = self.count + 1
  local name = "t" .. self.count
  self.params[name] = value
  return name
end

function Builder:matrix(m, n, shift)
  local rows = {}
  for i = 1, m do
    rows[i] = {}
    for j = 1, n do rows[i][j] = self.rng.normal() * 0.5 + (i == j and (shift or 0) or 0) end
  end
  return lt.tensor(rows)
end

function Builder:vector(n)
  local v = {}
  for i = 1, n do v[i] = self.rng.normal() * 0.5 end
  return lt.tensor(v)
end

-- Leaves: {text, build(p), psd}. Positive definite ones make the diagonal
-- dominant or add a multiple of I.
local KINDS = {"rbf", "matern12", "matern32", "matern52"}

function Builder:leaf(n, psd)
  local rng = self.rng
  local choice = rng.int(1, psd and 8 or 10)
  if choice == 8 and psd or choice == 10 then -- a kernel transposed (a new kernel leaf)
    local x = self:param(self:matrix(n, 1))
    return "kernelᵀ", function(p)
      return lt.kernel(p[x], {kind = "matern52", lengthscale = 0.7}):t():add_diag(0.5)
    end
  end
  if choice == 1 then
    local d = self:param(self:vector(n))
    return "diag", function(p) return lt.diag(p[d]:exp()) end
  elseif choice == 2 then
    local U, d = self:param(self:matrix(n, 2)), self:param(self:vector(n))
    return "lowrank+diag", function(p) return lt.lowrank(p[U]) + lt.diag(p[d]:exp()) end
  elseif choice == 3 then
    local x = self:param(self:matrix(n, rng.int(1, 2)))
    local kind, ls = rng.pick(KINDS), 0.5 + rng.float()
    return "kernel(" .. kind .. ")+diag", function(p)
      return lt.kernel(p[x], {kind = kind, lengthscale = ls}):add_diag(0.3)
    end
  elseif choice == 4 then
    local X = self:param(self:matrix(n, n))
    return "X·Xᵀ+I", function(p) return p[X] * p[X]:t() + lt.eye(n) end
  elseif choice == 5 then
    local c = self:param(self:vector(n))
    return "toeplitz", function(p)
      local w = lt.zeros(n)
      w[1] = 2 * n
      return lt.toeplitz(lt.cmul(p[c], lt.full({n}, 0.3)) + w)
    end
  elseif choice == 6 then
    local d = self:param(self:vector(n))
    return "2·D+D", function(p)
      local D = lt.diag(p[d]:exp())
      return 2 * D + D
    end
  elseif choice == 7 then
    local a, b = self:param(self:vector(n)), self:param(self:vector(n))
    return "D1+D2", function(p) return lt.diag(p[a]:exp()) + lt.diag(p[b]:exp()) end
  elseif choice == 8 then
    local A = self:param(self:matrix(n, n, 2))
    return "dense", function(p) return p[A] end
  end
  local A = self:param(self:matrix(n, n, 2))
  return "triangular", function(p) return lt.triangular(p[A], "lower") end
end

-- A tree of the given depth and size n; psd trees stay positive definite.
function Builder:tree(depth, n, psd)
  if depth <= 1 then return self:leaf(n, psd) end
  local rng = self.rng
  local op = rng.int(1, psd and 7 or 11)
  if psd and (op == 4 and n % 2 == 1 or op == 5 and n < 2) then op = 1 end
  local extra = rng.int(1, 8)
  if extra == 1 then -- kron(·) + c·I: the rule that folds it (kron_plus_identity)
    local ta, a = self:tree(depth - 1, n, psd)
    local c = 0.2 + rng.float()
    return "(" .. ta .. " + " .. c .. "·I)", function(p) return a(p) + lt.identity(n, c) end
  elseif extra == 2 then
    local ta, a = self:tree(depth - 1, n, psd)
    return "dense(" .. ta .. ")", function(p) return a(p):dense() end
  elseif extra == 3 and psd then
    local ta, a = self:tree(depth - 1, n, psd)
    return "inverse(" .. ta .. ")", function(p) return a(p):inverse() end
  elseif extra == 3 then
    local ta, a = self:tree(depth - 1, n, psd)
    return "−" .. ta, function(p) return -a(p) end
  end
  if op == 1 then
    local ta, a = self:tree(depth - 1, n, psd)
    local tb, b = self:tree(depth - 1, n, psd)
    return "(" .. ta .. " + " .. tb .. ")", function(p) return a(p) + b(p) end
  elseif op == 2 then
    local ta, a = self:tree(depth - 1, n, psd)
    local c = 0.5 + rng.float()
    return c .. "·" .. ta, function(p) return c * a(p) end
  elseif op == 3 then
    local ta, a = self:tree(depth - 1, n, psd)
    return ta .. "ᵀ", function(p) return a(p):t() end
  elseif op == 4 and n % 2 == 0 then
    local ta, a = self:tree(depth - 1, n / 2, psd)
    local S = self:param(self:matrix(2, 2))
    return "kron(" .. ta .. ", S)", function(p)
      return lt.kron(a(p), p[S] * p[S]:t() + lt.eye(2))
    end
  elseif op == 5 and n >= 2 then
    local k = rng.int(1, n - 1)
    local ta, a = self:tree(depth - 1, k, psd)
    local tb, b = self:tree(depth - 1, n - k, psd)
    return "blockdiag{" .. ta .. ", " .. tb .. "}", function(p) return lt.blockdiag{a(p), b(p)} end
  elseif op == 6 then
    local ta, a = self:tree(depth - 1, n, psd)
    local d = self:param(self:vector(n))
    return ta .. ":add_diag", function(p) return a(p):add_diag(p[d]:exp()) end
  elseif op == 7 then
    local ta, a = self:tree(depth - 1, n, psd)
    local X = self:param(self:matrix(n, n))
    return ta .. "∘(X·Xᵀ+I)", function(p) return lt.mul(a(p), p[X] * p[X]:t() + lt.eye(n)) end
  elseif op == 8 then
    local ta, a = self:tree(depth - 1, n, psd)
    local B = self:param(self:matrix(n, n))
    return "B·" .. ta, function(p) return p[B] * a(p) end
  elseif op == 9 then
    local ta, a = self:tree(depth - 1, n, psd)
    local B = self:param(self:matrix(n, n))
    return ta .. "·B", function(p) return a(p) * p[B] end
  elseif op == 10 then
    local ta, a = self:tree(depth - 1, n, psd)
    local tb, b = self:tree(depth - 1, n, psd)
    return "(" .. ta .. " − " .. tb .. ")", function(p) return a(p) - b(p) end
  end
  local ta, a = self:tree(depth - 1, n, psd)
  local tb, b = self:tree(depth - 1, n, psd)
  return "(" .. ta .. "·" .. tb .. ")", function(p) return a(p) * b(p) end
end

-- A scalar objective of an n×n result.
function Builder:objective(n, psd)
  local rng = self.rng
  local W = self:matrix(n, n)
  local v = self:vector(n)
  local choice = rng.int(1, psd and 8 or 3)
  if choice == 1 then return "Σ W∘A", function(A) return lt.cmul(A:dense(), W):sum() end end
  if choice == 2 then return "vᵀ·A·v", function(A) return v:dot(A * v) end end
  if choice == 3 then return "trace", function(A) return A:trace() end end
  if choice == 4 then return "logdet", function(A) return A:logdet() end end
  if choice == 5 then
    return "inv_quad_logdet", function(A)
      local q, ld = A:inv_quad_logdet(v)
      return q - 0.5 * ld
    end
  end
  if choice == 6 then return "mvn log_prob", function(A) return lt.mvn(v, A):log_prob(v * 0.5) end end
  if choice == 7 then return "inv_quad", function(A) return A:inv_quad(v) end end
  return "Σ W∘chol", function(A) return lt.cmul(A:cholesky():dense(), W):sum() end
end

local ENTRIES = 4 -- entries of each parameter checked (spread over it)

-- lt.grad of f at params against central differences, a few entries each.
local function compare(f, params, tol, out)
  local grads = lt.grad(f)(params)
  for name, value in pairs(params) do
    local g = grads[name]
    local flat, gflat = value:reshape(value:numel()), g:reshape(g:numel())
    local count = value:numel()
    local step = math.max(1, math.floor(count / ENTRIES))
    for i = 1, count, step do
      local x = flat[i]
      local h = 1e-6 * math.max(1, math.abs(x))
      flat[i] = x + h
      local fp = autograd.evaluate(f, params)
      flat[i] = x - h
      local fm = autograd.evaluate(f, params)
      flat[i] = x
      local fd = (fp - fm) / (2 * h)
      local ad = gflat[i]
      out.checked = out.checked + 1
      if math.abs(ad - fd) > tol * (1 + math.abs(fd)) then
        local what = ad == 0 and "missing" or "wrong"
        out[what] = out[what] + 1
        return ("%s gradient of %s[%d]: lt.grad %.10g, differences %.10g"):format(what, name, i, ad,
          fd)
      end
    end
  end
end

--- Case number case of seed: its description, its function of params and
-- the params (for replaying a failure).
function fuzz_grad.case(seed, case, max_depth)
  local rng = fuzz.new_rng(seed * 100003 + case)
  local b = new_builder(rng)
  local psd = rng.float() < 0.5
  local n = rng.int(2, 5)
  local text, build = b:tree(rng.int(3, max_depth or 4), n, psd)
  local otext, objective = b:objective(n, psd)
  return otext .. " of " .. text, function(p) return objective(build(p)) end, b.params
end

--- Runs cases random trees from seed; returns {failures, stats}.
function fuzz_grad.run(opts)
  local seed, cases = opts.seed or 1, opts.cases or 100
  local stats = {trees = 0, checked = 0, missing = 0, wrong = 0, errors = 0}
  local failures = {}
  for case = 1, cases do
    local text, f, params = fuzz_grad.case(seed, case, opts.max_depth)
    stats.trees = stats.trees + 1
    local ok, err = pcall(compare, f, params, opts.tol or 1e-4, stats)
    if not ok then
      stats.errors = stats.errors + 1
      err = "error: " .. tostring(err)
    end
    if err and #failures < 10 then
      failures[#failures + 1] = ("seed %d case %d: %s: %s"):format(seed, case, text, err)
    end
  end
  return {failures = failures, stats = stats}
end

return fuzz_grad
