-- spec/support/gradcheck.lua — the gradient check of the conformance
-- harness: every bilinear_derivative against central differences.
--
--   local gradcheck = require "support.gradcheck"
--   gradcheck.check(A, {leaves = {U, D}, tol = 1e-6})
--
-- For an m×n operator A it takes three kinds of weights — low-rank L·Rᵀ
-- (k = 2), a dense W and a diagonal d — and compares A:bilinear_derivative
-- for each with central differences of the objective Σ W_ij A_ij, computed
-- in plain Lua from A:dense() at perturbed parameters: every parameter of
-- every leaf in the gradient (A:with_params{[leaf] = {name = v ± h}}), every
-- entry of a tensor parameter up to MAX_ENTRIES of them (spread over the
-- tensor). It also checks that A's own parameters (A:params()) and those of
-- every leaf in opts.leaves are all in the gradient, under the same names.
local lt = require "lazytensor"

local gradcheck = {}
local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

local MAX_ENTRIES = 24

-- A deterministic generator independent of the library's (as conformance.lua's).
local function generator(seed)
  local state = seed
  return function()
    local hi = (state * 16838) % 32768 * 65536
    state = (hi + state * 20077 + 12345) % 2147483648
    return state / 2147483648 * 2 - 1
  end
end

local function random_rows(rand, m, n)
  local M = {}
  for i = 1, m do
    M[i] = {}
    for j = 1, n do M[i][j] = rand() end
  end
  return M
end

-- The dense weights of each kind, as Lua rows (m×n).
local function weights(rand, m, n)
  local L, R = random_rows(rand, m, 2), random_rows(rand, n, 2)
  local lowrank = {}
  for i = 1, m do
    lowrank[i] = {}
    for j = 1, n do lowrank[i][j] = L[i][1] * R[j][1] + L[i][2] * R[j][2] end
  end
  local dense = random_rows(rand, m, n)
  local d = {}
  local diag = {}
  for i = 1, m do
    diag[i] = {}
    for j = 1, n do diag[i][j] = 0 end
  end
  for i = 1, math.min(m, n) do
    d[i] = rand()
    diag[i][i] = d[i]
  end
  return {
    {name = "L·Rᵀ", W = lowrank, arg = function(A) return A:bilinear_derivative(lt.tensor(L),
                                                                               lt.tensor(R)) end},
    {name = "dense W", W = dense, arg = function(A) return A:bilinear_derivative(lt.tensor(dense)) end},
    {name = "diagonal d", W = diag, arg = function(A) return A:bilinear_derivative{d = lt.tensor(d)} end},
  }
end

-- Σ W_ij B_ij for each kind's W, from B's dense entries.
local function objectives(B, kinds)
  local rows = B:dense():totable()
  local out = {}
  for k, kind in ipairs(kinds) do
    local s = 0
    for i, row in ipairs(rows) do
      local w = kind.W[i]
      for j, v in ipairs(row) do s = s + w[j] * v end
    end
    out[k] = s
  end
  return out
end

local function names_of(t)
  local names = {}
  for k in pairs(t) do names[#names + 1] = tostring(k) end
  table.sort(names)
  return table.concat(names, ", ")
end

-- The entries of a parameter checked: all, or MAX_ENTRIES spread evenly.
local function entries(value)
  if type(value) == "number" then return {0} end
  local n = value:numel()
  local list = {}
  local step = math.max(1, math.floor(n / MAX_ENTRIES))
  for e = 1, n, step do
    if #list == MAX_ENTRIES then break end
    list[#list + 1] = e
  end
  return list
end

-- value with entry e (1-based, row-major; 0 for a number) moved by delta.
local function moved(value, e, delta)
  if type(value) == "number" then return value + delta end
  local flat = value:contiguous():reshape(value:numel()):clone()
  flat[e] = flat[e] + delta
  return flat:reshape(unpack(value:shape()))
end

local function entry_of(value, e)
  if type(value) == "number" then return value end
  return value:contiguous():reshape(value:numel())[e]
end

-- Checks that leaf has every parameter of leaf:params() in grads[leaf].
local function check_complete(grads, leaf, what)
  local params = leaf:params()
  if next(params) == nil then return end
  local g = grads[leaf]
  if g == nil then
    local types = {}
    for k in pairs(grads) do types[#types + 1] = lt.type(k) end
    error(string.format("gradcheck: %s (%s) is not in the gradient, whose leaves are: %s", what,
                        lt.type(leaf), table.concat(types, ", ")), 2)
  end
  for name, v in pairs(params) do
    local gv = g[name]
    if gv == nil then
      error(string.format("gradcheck: %s has no gradient for '%s' (it has %s)", what, name,
                          names_of(g)), 2)
    end
    if type(v) ~= type(gv) or (type(v) ~= "number" and
                               table.concat(v:shape(), "x") ~= table.concat(gv:shape(), "x")) then
      error(string.format("gradcheck: %s's gradient for '%s' does not have the parameter's shape",
                          what, name), 2)
    end
  end
end

function gradcheck.check(A, opts)
  opts = opts or {}
  local tol = opts.tol or 1e-6
  local m, n = A:size(1), A:size(2)
  local kinds = weights(generator(4242 + 7 * m + n), m, n)
  local grads = {}
  for k, kind in ipairs(kinds) do grads[k] = kind.arg(A) end
  for k, kind in ipairs(kinds) do
    check_complete(grads[k], A, "the operator (" .. kind.name .. ")")
    for i, leaf in ipairs(opts.leaves or {}) do
      check_complete(grads[k], leaf, "leaf " .. i .. " (" .. kind.name .. ")")
    end
  end
  -- every (leaf, name) any kind reports, perturbed once for all kinds
  local checked = 0
  for leaf, named in pairs(grads[1]) do
    for name, _ in pairs(named) do
      local value = leaf:params()[name]
      if value == nil then
        error(string.format("gradcheck: a %s leaf has a gradient for '%s', which is not among its "
                            .. "parameters (%s)", lt.type(leaf), name, names_of(leaf:params())))
      end
      for _, e in ipairs(entries(value)) do
        local v = entry_of(value, e)
        local h = (opts.step or 1e-5) * math.max(1, math.abs(v))
        local plus = objectives(A:with_params{[leaf] = {[name] = moved(value, e, h)}}, kinds)
        local minus = objectives(A:with_params{[leaf] = {[name] = moved(value, e, -h)}}, kinds)
        for k, kind in ipairs(kinds) do
          local fd = (plus[k] - minus[k]) / (2 * h)
          local g = grads[k][leaf] and grads[k][leaf][name]
          if g == nil then
            error(string.format("gradcheck: %s: no gradient for %s's '%s'", kind.name,
                                lt.type(leaf), name))
          end
          local got = entry_of(g, e)
          local scale = math.max(1, math.abs(fd), math.abs(plus[k]))
          if not (math.abs(got - fd) <= tol * scale) then -- luacheck: ignore 581 (NaN)
            error(string.format("gradcheck: %s: d/d %s.%s[%d] = %.10g, central difference %.10g "
                                .. "(tolerance %.3g)", kind.name, lt.type(leaf), name, e, got, fd,
                                tol * scale))
          end
        end
        checked = checked + 1
      end
    end
  end
  return checked
end

return gradcheck
