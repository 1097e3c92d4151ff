--- One vector-Jacobian product per operation, for lt.grad's backward pass.
--
-- Every rule for an operation computes the same matrix, so the VJP here
-- belongs to the operation (its name in the registry or the dense API) and
-- serves every rule and type: no structure rule carries gradient code, and
-- a new rule cannot break a gradient. Each entry is
--   vjp[name](r, g)
-- with r the record (r.args, r.outs: the call's arguments and results) and
-- g[j] the cotangent of result j (in the form autograd/cotangent.lua
-- describes; nil when nothing reached it). It hands each argument its share
-- with r:give(i, c) (r:give_key(i, key, c) for an entry of a table
-- argument); r:wants(i) says whether argument i is followed at all.
-- Constructors (lt.diag, lt.kernel, lt.kron, ...) are not here: their
-- records go through the type's own bilinear_derivative (autograd.lua).

local cot = require "lazytensor.autograd.cotangent"

local vjp = {}
local lt
local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

function vjp.bind(lib) lt = lib end

local column = cot.column

local function is_scalar(x)
  return type(x) == "number" or (lt.is_tensor(x) and not lt.is_lazy(x) and x:dim() == 0)
end

local function value(x) -- a scalar argument's number
  if type(x) == "number" then return x end
  return x:sum()
end

local function shape2(x) return x:size(1), x:size(2) end

-- c / x element-wise for a dense x and a number c.
local function over(c, x) return lt.full(x:shape(), c):cdiv(x) end

local function zeros_like(x) return lt.full(x:shape(), 0) end

-- The cotangent g of a result, as a list of parts for an m×n operator.
local function parts(g) return cot.parts_of(g) end

-- Σ_ij G_ij for a result's cotangent of any form.
local function total(g)
  if type(g) == "number" then return g end
  if cot.is_parts(g) then return cot.sum(g) end
  return g:sum()
end

-- <G, X> for a result's cotangent and a value X of the result's shape.
local function inner(g, X)
  if type(g) == "number" then return g * value(X) end
  if cot.is_parts(g) then return cot.inner(g, X) end
  if lt.is_lazy(X) then return cot.inner({{W = g}}, X) end
  return lt.cmul(g, X):sum()
end

-- c·G for a number c.
local function times(g, c)
  if type(g) == "number" then return g * c end
  if cot.is_parts(g) then return cot.scale(g, c) end
  return g * c
end

-- G handed to argument i of a broadcasting result: summed down to the
-- argument's shape when it is dense, whole when it is an operator.
local function give_broadcast(r, i, g)
  if not r:wants(i) then return end
  local a = r.args[i]
  if is_scalar(a) then return r:give(i, total(g)) end
  if lt.is_lazy(a) or type(g) == "number" or cot.is_parts(g) then return r:give(i, g) end
  r:give(i, cot.sum_to(g, a:shape()))
end

-- ----------------------------------------------------------- arithmetic

function vjp.add(r, g)
  give_broadcast(r, 1, g[1])
  give_broadcast(r, 2, g[1])
end

function vjp.sub(r, g)
  give_broadcast(r, 1, g[1])
  if r:wants(2) then give_broadcast(r, 2, times(g[1], -1)) end
end

function vjp.neg(r, g) r:give(1, times(g[1], -1)) end

-- a·c or c·a with c a scalar.
local function scale_by(r, g, ia, ic)
  local a, c = r.args[ia], r.args[ic]
  if r:wants(ia) then r:give(ia, times(g, value(c))) end
  if r:wants(ic) then r:give(ic, inner(g, a)) end
end

function vjp.scale(r, g)
  if is_scalar(r.args[2]) then scale_by(r, g[1], 1, 2) else scale_by(r, g[1], 2, 1) end
end

function vjp.div(r, g)
  local a, c = r.args[1], r.args[2]
  if is_scalar(c) then
    local cv = value(c)
    if r:wants(1) then give_broadcast(r, 1, times(g[1], 1 / cv)) end
    if r:wants(2) then r:give(2, -inner(g[1], a) / (cv * cv)) end
    return
  end
  -- a scalar (or dense) over a dense tensor, elementwise
  vjp.cdiv(r, g)
end

-- The cotangents of A·B for matrices (lazy or dense) A (m×k), B (k×n).
local function matmul_matrices(r, G, A, B)
  local m, n = A:size(1), B:size(2)
  local P = parts(G)
  if r:wants(1) then r:give(1, cot.times_transpose(P, B, m, n)) end
  if r:wants(2) then r:give(2, cot.transpose_times(A, P, m, n)) end
end

function vjp.matmul(r, g)
  local a, b = r.args[1], r.args[2]
  if is_scalar(a) and not lt.is_tensor(b) or is_scalar(b) and not lt.is_tensor(a) then
    return vjp.scale(r, g)
  end
  if is_scalar(a) then return scale_by(r, g[1], 2, 1) end
  if is_scalar(b) then return scale_by(r, g[1], 1, 2) end
  local G = g[1]
  if lt.is_tensor(a) and lt.batch_shape(a)[1] or lt.batch_shape(b)[1] then
    error("lazytensor: grad: products of batched operators are not followed yet", 0)
  end
  local da, db = a:dim(), b:dim()
  if da == 1 and db == 1 then -- a number
    if r:wants(1) then r:give(1, b * G) end
    if r:wants(2) then r:give(2, a * G) end
  elseif db == 1 then -- A·x: Ā = g·xᵀ, x̄ = Aᵀ·g
    if r:wants(1) then r:give(1, {{L = column(G), R = column(b)}}) end
    if r:wants(2) then r:give(2, a:t() * G) end
  elseif da == 1 then -- x·B: x̄ = B·g, B̄ = x·gᵀ
    if r:wants(1) then r:give(1, b * G) end
    if r:wants(2) then r:give(2, {{L = column(a), R = column(G)}}) end
  else
    matmul_matrices(r, G, a, b)
  end
end

-- The metamethod *: a product of tensors, or a scaling by a number.
vjp.mul_meta = vjp.matmul

-- Element-wise products (lt.mul, t:cmul): Hadamard products of operators
-- keep their cotangents masked, (L·Rᵀ) ∘ B, never an n×n matrix.
local function hadamard_share(G, other, m, n)
  local out = {}
  for i, p in ipairs(parts(G)) do
    if p.L and not p.M then out[i] = {L = p.L, R = p.R, M = other}
    else out[i] = {W = lt.cmul(cot.dense_of({p}, m, n), other:dense())} end
  end
  return out
end

function vjp.mul(r, g)
  local a, b = r.args[1], r.args[2]
  if is_scalar(a) or is_scalar(b) then return vjp.matmul(r, g) end
  local G = g[1]
  if lt.is_lazy(a) or lt.is_lazy(b) then
    local m, n = shape2(r.outs[1])
    if r:wants(1) then r:give(1, hadamard_share(G, b, m, n)) end
    if r:wants(2) then r:give(2, hadamard_share(G, a, m, n)) end
    return
  end
  G = cot.as_kind(G, "dense", r.outs[1]:shape())
  give_broadcast(r, 1, lt.cmul(G, b))
  give_broadcast(r, 2, lt.cmul(G, a))
end
vjp.cmul = vjp.mul

function vjp.cdiv(r, g)
  local b = r.args[2]
  local out = r.outs[1]
  local G = g[1]
  if type(G) == "number" then G = lt.full(out:shape(), G) end
  local function dense(x) return is_scalar(x) and lt.full(out:shape(), value(x)) or x end
  if r:wants(1) then give_broadcast(r, 1, G:cdiv(dense(b))) end
  if r:wants(2) then give_broadcast(r, 2, -lt.cmul(G, out):cdiv(dense(b))) end
end

-- ------------------------------------------------- element-wise, dense

local function elementwise(factor)
  return function(r, g)
    if not r:wants(1) then return end
    local G = g[1]
    local f = factor(r.args[1], r.outs[1], r)
    if type(G) == "number" then r:give(1, G * value(f)) else r:give(1, lt.cmul(G, f)) end
  end
end

vjp.exp = elementwise(function(_, y) return y end)
vjp.log = elementwise(function(x) return over(1, x) end)
vjp.sqrt = elementwise(function(_, y) return over(0.5, y) end)
-- |x|' = sign(x), and 0 at 0 (a subgradient): x / max(|x|, tiny), the max
-- as (a + t + |a − t|)/2, exact for every |x| above 1e-284.
local TINY = 1e-300
vjp.abs = elementwise(function(x)
  local a = x:abs()
  return x:cdiv((a + TINY + (a - TINY):abs()) * 0.5)
end)

-- The special functions (lazytensor_special.h lists the derivatives):
-- erf' = 2/√π·e^(−x²) = −erfc', Φ' = φ, φ' = −x·φ, (log Φ)' =
-- √(2/π)/erfcx(−x/√2) (no cancellation far below the mean), (log φ)' = −x,
-- erfcx' = 2x·erfcx(x) − 2/√π. On numbers as on tensors.
local TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
local SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
local SQRT2 = math.sqrt(2)

local function special(factor)
  return function(r, g)
    if not r:wants(1) then return end
    local x, G = r.args[1], g[1]
    local f = factor(x, r.outs[1])
    if type(G) == "number" then r:give(1, G * value(f)) else r:give(1, lt.cmul(G, f)) end
  end
end

vjp.erf = special(function(x) return (lt.cmul(x, x) * -1):exp() * TWO_OVER_SQRT_PI end)
vjp.erfc = special(function(x) return (lt.cmul(x, x) * -1):exp() * -TWO_OVER_SQRT_PI end)
vjp.normal_cdf = special(function(x) return lt.normal_pdf(x) end)
vjp.normal_pdf = special(function(x, y) return lt.cmul(x, y) * -1 end)
vjp.normal_log_cdf = special(function(x)
  return over(SQRT_2_OVER_PI, lt.erfcx(x * (-1 / SQRT2)))
end)
vjp.normal_log_pdf = special(function(x) return x * -1 end)
vjp.erfcx = special(function(x, y) return lt.cmul(x, y) * 2 - TWO_OVER_SQRT_PI end)

function vjp.pow(r, g)
  local x, p, y = r.args[1], r.args[2], r.outs[1]
  local G = g[1]
  if r:wants(1) then
    if is_scalar(p) then
      local pv = value(p)
      local f = lt.is_tensor(x) and x:pow(pv - 1) * pv or pv * value(x) ^ (pv - 1)
      if type(G) == "number" then r:give(1, G * value(f)) else r:give(1, lt.cmul(G, f)) end
    else
      local f = lt.cmul(p, lt.is_tensor(x) and y:cdiv(x) or y * (1 / value(x)))
      give_broadcast(r, 1, lt.cmul(G, f))
    end
  end
  if r:wants(2) then
    local lx = lt.is_tensor(x) and x:log() or math.log(value(x))
    local f = lt.is_tensor(lx) and lt.cmul(y, lx) or y * lx
    if type(G) == "number" and not lt.is_tensor(f) then
      r:give(2, G * f)
    else
      give_broadcast(r, 2, lt.cmul(cot.as_kind(G, "dense", y:shape()), f))
    end
  end
end

-- ------------------------------------------------------------ reductions

-- The dimension a reduction of x runs along, nil for all of x: a 1-d x
-- reduced along its only dimension gives a scalar, as a full reduction does.
local function reduced_dim(x, dim)
  if dim ~= nil and x:dim() == 1 then return nil end
  return dim
end

-- G spread back over a dense x reduced along dim (or over all of x).
local function spread(x, G, dim)
  dim = reduced_dim(x, dim)
  if dim == nil then return lt.full(x:shape(), G) end
  local s = x:shape()
  s[dim] = 1
  return lt.cmul(lt.full(x:shape(), 1), G:reshape(s))
end

function vjp.sum(r, g)
  local x, dim = r.args[1], r.args[2]
  if lt.is_lazy(x) then -- Σ of an operator's entries: G·11ᵀ
    local m, n = shape2(x)
    return r:give(1, {{L = lt.full({m}, total(g[1])), R = lt.ones(n)}})
  end
  r:give(1, spread(x, g[1], dim))
end

function vjp.mean(r, g)
  local x, dim = r.args[1], r.args[2]
  local count = dim and x:size(dim) or x:numel()
  r:give(1, spread(x, times(g[1], 1 / count), dim))
end

-- max / min: the cotangent goes to the first entry that attains it.
local function extremum(r, g)
  local x, y = r.args[1], r.outs[1]
  local dim = reduced_dim(x, r.args[2])
  local mask = zeros_like(x)
  local flat_mask = mask:reshape(mask:numel())
  local flat_x
  if dim ~= nil then -- entries equal to their slice's extremum share it
    local s = x:shape()
    s[dim] = 1
    flat_x = (x - lt.cmul(lt.full(x:shape(), 1), y:reshape(s))):abs()
    flat_x = flat_x:reshape(flat_x:numel())
    for i = 1, flat_x:numel() do
      if flat_x[i] == 0 then flat_mask[i] = 1 end
    end
    local counts = mask:sum(dim):reshape(s)
    return r:give(1, lt.cmul(mask:cdiv(counts), g[1]:reshape(s)))
  end
  local target = value(y)
  flat_x = x:reshape(x:numel())
  for i = 1, flat_x:numel() do
    if flat_x[i] == target then
      flat_mask[i] = value(g[1])
      break
    end
  end
  r:give(1, mask)
end
vjp.max = extremum
vjp.min = extremum

function vjp.norm(r, g)
  local x, y = r.args[1], r.outs[1]
  local yv = value(y)
  r:give(1, x * (value(g[1]) / (yv == 0 and 1 or yv)))
end

function vjp.dot(r, g)
  local a, b = r.args[1], r.args[2]
  if r:wants(1) then r:give(1, b * value(g[1])) end
  if r:wants(2) then r:give(2, a * value(g[1])) end
end

-- ------------------------------------------------ views and copies, dense

function vjp.reshape(r, g)
  local x = r.args[1]
  local G = cot.as_kind(g[1], "dense", r.outs[1]:shape())
  if x:dim() == 0 then return r:give(1, G:sum()) end
  r:give(1, G:reshape(x:shape()))
end

function vjp.narrow(r, g)
  local x, dim, start, len = r.args[1], r.args[2], r.args[3], r.args[4]
  local G = zeros_like(x)
  G:narrow(value(dim), value(start), value(len)):copy(cot.as_kind(g[1], "dense",
    r.outs[1]:shape()))
  r:give(1, G)
end

local function identity(r, g) r:give(1, g[1]) end
vjp.clone = identity
vjp.contiguous = identity
vjp.psd = identity

function vjp.transpose(r, g)
  local G = g[1]
  if cot.is_parts(G) then return r:give(1, cot.transpose(G)) end
  r:give(1, G:t():contiguous())
end
vjp.t = vjp.transpose

function vjp.dense(r, g)
  local x = r.args[1]
  if lt.is_lazy(x) then return r:give(1, {{W = cot.as_kind(g[1], "dense", r.outs[1]:shape())}}) end
  r:give(1, g[1])
end

-- t[i]: a slice of a dense tensor, row i of an operator, a batch's member.
function vjp.index(r, g)
  local x, i = r.args[1], value(r.args[2])
  if lt.is_lazy(x) then
    if lt.batch_shape(x)[1] then
      error("lazytensor: grad: members of batched operators are not followed yet", 0)
    end
    local e = lt.zeros(x:size(1))
    e[i] = 1
    return r:give(1, {{L = column(e), R = column(g[1])}})
  end
  local G = zeros_like(x)
  if x:dim() == 1 then G[i] = value(g[1])
  else G[i] = cot.as_kind(g[1], "dense", r.outs[1]:shape()) end
  r:give(1, G)
end

-- A:get(i, j, ...): one entry.
function vjp.get(r, g)
  local x = r.args[1]
  local idx = {}
  for k = 2, r.nargs do idx[#idx + 1] = value(r.args[k]) end
  if lt.is_lazy(x) then
    local m, n = shape2(x)
    local ei, ej = lt.zeros(m), lt.zeros(n)
    ei[idx[1]] = value(g[1])
    ej[idx[2]] = 1
    return r:give(1, {{L = column(ei), R = column(ej)}})
  end
  local G = zeros_like(x)
  idx[#idx + 1] = value(g[1])
  G:set(unpack(idx))
  r:give(1, G)
end

function vjp.row(r, g)
  local x, i = r.args[1], value(r.args[2])
  local e = lt.zeros(x:size(1))
  e[i] = 1
  if lt.is_lazy(x) then return r:give(1, {{L = column(e), R = column(g[1])}}) end
  r:give(1, column(e) * column(g[1]):t())
end

function vjp.diagonal(r, g)
  local x = r.args[1]
  if lt.batch_shape(x)[1] then
    error("lazytensor: grad: diagonals of batched operators are not followed yet", 0)
  end
  local part = {{d = g[1]}}
  if lt.is_lazy(x) then return r:give(1, part) end
  r:give(1, cot.dense_of(part, shape2(x)))
end

function vjp.trace(r, g)
  local x = r.args[1]
  local m, n = shape2(x)
  local part = {{d = lt.full({math.min(m, n)}, value(g[1]))}}
  if lt.is_lazy(x) then return r:give(1, part) end
  r:give(1, cot.dense_of(part, m, n))
end

function vjp.add_diag(r, g)
  local d = r.args[2]
  r:give(1, g[1])
  if not r:wants(2) then return end
  local m, n = shape2(r.outs[1])
  local diag = cot.diagonal(cot.parts_of(g[1]), m, n)
  if is_scalar(d) then r:give(2, diag:sum()) else r:give(2, diag) end
end

function vjp.add_jitter(r, g)
  r:give(1, g[1])
  if r:wants(2) then
    local m, n = shape2(r.outs[1])
    r:give(2, cot.trace(cot.parts_of(g[1]), m, n))
  end
end

function vjp.full(r, g)
  r:give(2, total(g[1]))
end

-- ------------------------------------------------------- linear algebra

-- A⁻ᵀ·Y: A's own solve when A is known symmetric.
local function solve_transposed(A, Y)
  if A:is_symmetric() == true then return (A:solve(Y)) end
  return (A:t():solve(Y))
end

-- A⁻ᵀ as a cotangent (times g): exact up to max_cholesky_size (dense n×n,
-- small by definition); above it the stochastic estimate from probe
-- solves, (A⁻ᵀZ)·Zᵀ/t with Rademacher Z, as GPyTorch's backward.
local function inverse_transposed(A, g)
  local n = A:size(1)
  if n <= lt.settings.max_cholesky_size then
    return {{W = (solve_transposed(A, lt.eye(n)) * g):contiguous()}}
  end
  local t = lt.settings.num_trace_samples
  local Z = lt.rand(n, t)
  Z = (Z - 0.5):cdiv((Z - 0.5):abs()) -- ±1
  local S = solve_transposed(A, Z)
  return {{L = S * (g / t), R = Z}}
end

function vjp.solve(r, g)
  local A, X = r.args[1], r.outs[1]
  local G = g[1]
  if G == nil then return end
  G = cot.as_kind(G, "dense", X:shape())
  local Bbar = solve_transposed(A, G)
  if r:wants(2) then r:give(2, Bbar) end
  if r:wants(1) then r:give(1, {{L = column(Bbar) * -1, R = column(X)}}) end
end

-- bᵀA⁻¹b (summed over b's columns): b̄ = g·(A⁻¹ + A⁻ᵀ)b, Ā = −g·A⁻ᵀb·(A⁻¹b)ᵀ.
local function inv_quad_share(r, gq, alpha, beta)
  if r:wants(2) then r:give(2, (alpha + beta) * gq) end
  if r:wants(1) then r:give(1, {{L = column(beta) * -gq, R = column(alpha)}}) end
end

local function inv_quad_solves(A, b)
  local alpha = A:solve(b)
  local beta = A:is_symmetric() == true and alpha or A:t():solve(b)
  return alpha, beta
end

function vjp.inv_quad(r, g)
  local alpha, beta = inv_quad_solves(r.args[1], r.args[2])
  inv_quad_share(r, value(g[1]), alpha, beta)
end

-- The log det's cotangent g·A⁻ᵀ: the one the forward kept (a positive
-- definite A: lt_inv_quad_logdet_parts), or computed here.
local function logdet_share(r, g)
  if r.kept and r.kept.logdet then return cot.scale(r.kept.logdet, g) end
  return inverse_transposed(r.args[1], g)
end

function vjp.logdet(r, g)
  r:give(1, logdet_share(r, value(g[1])))
end

function vjp.slogdet(r, g)
  if g[2] ~= nil then r:give(1, inverse_transposed(r.args[1], value(g[2]))) end
end

function vjp.inv_quad_logdet(r, g)
  local A, b = r.args[1], r.args[2]
  if g[1] ~= nil and b ~= nil then
    local solved = r.kept and r.kept.solved
    if solved then -- A is symmetric: A⁻ᵀb = A⁻¹b
      if b:dim() == 1 then solved = solved:reshape(b:size(1)) end
      inv_quad_share(r, value(g[1]), solved, solved)
    else
      local alpha, beta = inv_quad_solves(A, b)
      inv_quad_share(r, value(g[1]), alpha, beta)
    end
  end
  if g[2] ~= nil then r:give(1, logdet_share(r, value(g[2]))) end
end

-- The lower triangle of X with its diagonal halved (Murray's Φ).
local function phi(X)
  return lt.triangular(X, "lower"):dense() - lt.diag(X:diagonal() * 0.5):dense()
end

-- The cotangent of A from that of its lower Cholesky factor L (Murray
-- 2016): Ā = ½·(S + Sᵀ), S = L⁻ᵀ·Φ(Lᵀ·L̄)·L⁻¹.
local function cholesky_share(Lfactor, Lbar)
  local L = Lfactor:dense()
  local T = lt.triangular(L, "lower")
  local P = phi(L:t() * Lbar)
  local Y = T:t():solve(P)           -- L⁻ᵀ·P
  local S = T:t():solve(Y:t()):t()   -- (L⁻ᵀ·(L⁻ᵀP)ᵀ)ᵀ = L⁻ᵀ·P·L⁻¹
  return ((S + S:t()) * 0.5):contiguous()
end

function vjp.cholesky(r, g)
  local L = r.outs[1]
  local n = L:size(1)
  local Gbar = cot.as_kind(g[1], "dense", {n, n})
  if cot.is_parts(g[1]) then Gbar = cot.dense_of(g[1], n, n) end
  local upper = r.args[2] == true
  local lower = upper and L:t() or L
  if upper then Gbar = Gbar:t():contiguous() end
  local W = cholesky_share(lower, Gbar)
  if lt.is_lazy(r.args[1]) then r:give(1, {{W = W}}) else r:give(1, W) end
end

-- R with A = R·Rᵀ: the Cholesky factor, a diagonal's closed form, or
-- Q·diag(√w) from eigh. (lt.grad's forward turns other roots into the
-- Cholesky factor: autograd.lua.)
function vjp.root(r, g)
  local A, R, info = r.args[1], r.outs[1], r.outs[2]
  local method = type(info) == "table" and info.method
  if method == "cholesky" then return vjp.cholesky(r, g) end
  local n = A:size(1)
  local Rbar = cot.as_kind(g[1], "dense", {n, R:size(2)})
  if method == "closed form" then -- R = diag(√a): ā = diag(R̄) / (2√a)
    return r:give(1, {{d = lt.cmul(Rbar:diagonal(), over(0.5, R:diagonal()))}})
  end
  if method == "eigh" then -- R = Q·diag(√w): w̄ = diag(QᵀR̄)/(2√w), Q̄ = R̄·diag(√w)
    -- Q and w from R itself (its columns' lengths and directions), in R's
    -- own column order, whichever order the rule that made it chose
    local Rd = R:dense()
    local s = lt.cmul(Rd, Rd):sum(1):sqrt()
    local Q = Rd:cdiv(s:reshape(1, s:size(1)))
    local fake = setmetatable({args = r.args, outs = {lt.cmul(s, s), Q}, nargs = 1}, {__index = r})
    return vjp.eigh(fake, {lt.cmul((Q:t() * Rbar):diagonal(), over(0.5, s)),
      Rbar * lt.diag(s)})
  end
  error(string.format("lazytensor: grad: root by %s is not differentiable", tostring(method)), 0)
end

-- B = A⁻¹: Ā = −A⁻ᵀ·B̄·A⁻ᵀ, low-rank parts kept low-rank.
function vjp.inverse(r, g)
  local A = r.args[1]
  local n = A:size(1)
  local out = {}
  for i, p in ipairs(cot.parts_of(g[1])) do
    if p.L and not p.M then
      out[i] = {L = solve_transposed(A, column(p.L)) * -1, R = (A:solve(column(p.R)))}
    else
      local W = cot.dense_of({p}, n, n)
      local X = solve_transposed(A, W)
      out[i] = {W = (A:solve(X:t())):t():contiguous() * -1}
    end
  end
  r:give(1, out)
end

-- Symmetric eigendecomposition A = Q·diag(w)·Qᵀ: Ā = Q·(diag(w̄) + F ∘
-- (Qᵀ·Q̄))·Qᵀ symmetrised, F_ij = 1/(w_j − w_i) off the diagonal.
function vjp.eigh(r, g)
  local A, w, Q = r.args[1], r.outs[1], r.outs[2]
  local n = w:size(1)
  local inner_m = lt.zeros(n, n)
  if g[1] ~= nil then inner_m = inner_m + lt.diag(g[1]):dense() end
  if g[2] ~= nil then
    local QtG = Q:t() * cot.as_kind(g[2], "dense", {n, n})
    -- F_ij = 1/(w_j − w_i) off the diagonal: the gaps, with 1 on the diagonal
    local gaps = lt.ones(n, 1) * w:reshape(1, n) - w:reshape(n, 1) * lt.ones(1, n) + lt.eye(n)
    if gaps:abs():min() == 0 then
      error("lazytensor: grad: eigh with repeated eigenvalues has no derivative for its "
        .. "eigenvectors", 0)
    end
    local F = QtG:cdiv(gaps)
    inner_m = inner_m + F - lt.diag(F:diagonal()):dense()
  end
  local W = Q * inner_m * Q:t()
  W = ((W + W:t()) * 0.5):contiguous()
  if lt.is_lazy(A) then r:give(1, {{W = W}}) else r:give(1, W) end
end

-- Thin SVD A = U·diag(S)·Vᵀ (Townsend 2016) for distinct singular values.
function vjp.svd(r, g)
  local A, U, S, V = r.args[1], r.outs[1], r.outs[2], r.outs[3]
  local m, n = shape2(A)
  local k = S:size(1)
  local Ud, Vd = U:dense(), V:dense()
  local Abar = lt.zeros(m, n)
  if g[2] ~= nil then Abar = Abar + Ud * lt.diag(g[2]):dense() * Vd:t() end
  if g[1] ~= nil or g[3] ~= nil then
    local Gu = g[1] and cot.as_kind(g[1], "dense", {m, k}) or lt.zeros(m, k)
    local Gv = g[3] and cot.as_kind(g[3], "dense", {n, k}) or lt.zeros(n, k)
    local F = lt.zeros(k, k)
    for i = 1, k do
      for j = 1, k do
        if i ~= j then
          local gap = S[j] ^ 2 - S[i] ^ 2
          if gap == 0 then
            error("lazytensor: grad: svd with repeated singular values has no derivative for "
              .. "its singular vectors", 0)
          end
          F:set(i, j, 1 / gap)
        end
      end
    end
    local UtGu, VtGv = Ud:t() * Gu, Vd:t() * Gv
    local Sd = lt.diag(S):dense()
    local J = lt.cmul(F, UtGu - UtGu:t())
    local K = lt.cmul(F, VtGv - VtGv:t())
    Abar = Abar + Ud * (J * Sd + Sd * K) * Vd:t()
    local Sinv = lt.diag(over(1, S)):dense()
    if m > k then Abar = Abar + (lt.eye(m) - Ud * Ud:t()) * Gu * Sinv * Vd:t() end
    if n > k then Abar = Abar + Ud * Sinv * Gv:t() * (lt.eye(n) - Vd * Vd:t()) end
  end
  if lt.is_lazy(A) then r:give(1, {{W = Abar:contiguous()}}) else r:give(1, Abar) end
end

-- --------------------------------------------------- composite operators
-- Composites are operations too: their VJPs hand each operand its block of
-- the cotangent, whatever the C tree looks like (blockdiag of blockdiags
-- flattened, copies of dense operands).

-- The rows r0+1..r0+m and columns c0+1..c0+n of an M×N cotangent's parts,
-- low-rank parts kept low-rank.
local function block_of(P, M, N, r0, m, c0, n)
  local out = {}
  local rows, cols
  for i, p in ipairs(P) do
    if p.L then
      local part = {L = column(p.L):narrow(1, r0 + 1, m):contiguous(),
        R = column(p.R):narrow(1, c0 + 1, n):contiguous()}
      if p.M then
        if rows == nil then
          rows, cols = {}, {}
          for k = 1, m do rows[k] = r0 + k end
          for k = 1, n do cols[k] = c0 + k end
        end
        part.M = lt.submatrix(p.M, rows, cols)
      end
      out[i] = part
    elseif p.d and r0 == c0 and m == n then
      out[i] = {d = p.d:narrow(1, r0 + 1, m):contiguous()}
    else
      local W = p.W or cot.dense_of({p}, M, N)
      out[i] = {W = W:narrow(1, r0 + 1, m):narrow(2, c0 + 1, n):contiguous()}
    end
  end
  return out
end

-- A share for operand k (the node's kind takes it from parts).
local function give_block(r, i, k, share, operand)
  if lt.is_lazy(operand) then return r:give_key(i, k, share) end
  r:give_key(i, k, cot.dense_of(share, operand:size(1), operand:size(2)))
end

function vjp.blockdiag(r, g)
  local out = r.outs[1]
  local M, N = shape2(out)
  local P = parts(g[1])
  local row, col = 0, 0
  for k, B in ipairs(r.args[1]) do
    local m, n = shape2(B)
    if r.tnodes[1] and r.tnodes[1][k] then
      give_block(r, 1, k, block_of(P, M, N, row, m, col, n), B)
    end
    row, col = row + m, col + n
  end
end

-- lt.cat(blocks [, dim]): blocks side by side (dim 2) or stacked (dim 1).
function vjp.cat(r, g)
  local out, dim = r.outs[1], value(r.args[2] or 1)
  local M, N = shape2(out)
  local P = parts(g[1])
  local offset = 0
  for k, B in ipairs(r.args[1]) do
    local m, n = shape2(B)
    if r.tnodes[1] and r.tnodes[1][k] then
      local share = dim == 1 and block_of(P, M, N, offset, m, 0, n) or
        block_of(P, M, N, 0, m, offset, n)
      give_block(r, 1, k, share, B)
    end
    offset = offset + (dim == 1 and m or n)
  end
end

-- lt.submatrix(A, rows [, cols]): Ā scatters the cotangent back.
function vjp.submatrix(r, g)
  local A, rows, cols = r.args[1], r.args[2], r.args[3] or r.args[2]
  local M, N = shape2(A)
  local m, n = #rows, #cols
  local out = {}
  local function scatter(X, idx, size)
    X = column(X)
    local Y = lt.zeros(size, X:size(2))
    for k, i in ipairs(idx) do Y[i] = Y[i] + X[k] end
    return Y
  end
  for i, p in ipairs(parts(g[1])) do
    if p.L and not p.M then
      out[i] = {L = scatter(p.L, rows, M), R = scatter(p.R, cols, N)}
    else -- dense: (Eᵣ·W)·E_cᵀ as two scatters
      local W = p.W or cot.dense_of({p}, m, n)
      out[i] = {W = scatter(scatter(W, rows, M):t():contiguous(), cols, N):t():contiguous()}
    end
  end
  if lt.is_lazy(A) then r:give(1, out) else r:give(1, cot.dense_of(out, M, N)) end
end

-- The factors' shares of a Kronecker product's cotangent, from its
-- low-rank form: with row-major vec, <L·Rᵀ, A⊗B> = Σ_c tr(L_cᵀ·A·R_c·Bᵀ)
-- for L_c, R_c the columns reshaped to (m_A × m_B) and (n_A × n_B), so
-- Ā = Σ_c L_c·B·R_cᵀ and B̄ = Σ_c L_cᵀ·A·R_c.
local function kron_pair(P, A, B)
  local ma, na = shape2(A)
  local mb, nb = shape2(B)
  local Abar, Bbar = lt.zeros(ma, na), lt.zeros(mb, nb)
  for _, p in ipairs(P) do
    local L, R
    if p.L and not p.M then
      L, R = column(p.L), column(p.R)
    else -- W = W·I
      L, R = p.W or cot.dense_of({p}, ma * mb, na * nb), lt.eye(na * nb)
    end
    for c = 1, L:size(2) do
      local Lc = L:narrow(2, c, 1):contiguous():reshape(ma, mb)
      local Rc = R:narrow(2, c, 1):contiguous():reshape(na, nb)
      Abar = Abar + Lc * (B * Rc:t())
      Bbar = Bbar + Lc:t() * (A * Rc)
    end
  end
  return Abar, Bbar
end

function vjp.kron(r, g)
  local factors = {}
  for i = 1, r.nargs do factors[i] = r.args[i] end
  local P = parts(g[1])
  for i = 1, r.nargs - 1 do
    local rest = r.nargs - i == 1 and factors[i + 1] or lt.kron(unpack(factors, i + 1, r.nargs))
    local Abar, Rbar = kron_pair(P, factors[i], rest)
    if r:wants(i) then r:give(i, lt.is_lazy(factors[i]) and {{W = Abar}} or Abar) end
    P = {{W = Rbar}}
    if i == r.nargs - 1 and r:wants(i + 1) then
      r:give(i + 1, lt.is_lazy(rest) and P or Rbar)
    end
  end
end

-- lt.tensor{...} of followed 0-d tensors (autograd.lua's followed_stack):
-- each entry's cotangent to its tensor.
function vjp.tensor(r, g)
  local G = g[1]
  for _, e in ipairs(r.kept.entries) do
    local c = e.j and G:get(e.i, e.j) or G:dim() == 1 and G[e.i] or G:get(e.i)
    r.tape:accumulate(e.node, c)
  end
end

-- -------------------------------------------------------------- writes

-- t[i] = v and t:set(i, ..., v): the written entries' cotangent goes to v,
-- the rest to t as it was.
function vjp.newindex(r, g)
  local t, i = r.args[1], value(r.args[2])
  local G = cot.as_kind(g[1], "dense", t:shape())
  if r:wants(3) then
    local slot = t:dim() == 1 and G[i] or G[i]:clone()
    if is_scalar(r.args[3]) then slot = type(slot) == "number" and slot or slot:sum() end
    r:give(3, slot)
  end
  if r:wants(1) then
    local rest = G:clone()
    rest[i] = 0
    r:give(1, rest)
  end
end

function vjp.set(r, g)
  local t = r.args[1]
  local idx = {}
  for k = 2, r.nargs - 1 do idx[#idx + 1] = value(r.args[k]) end
  local G = cot.as_kind(g[1], "dense", t:shape())
  if r:wants(r.nargs) then r:give(r.nargs, G:get(unpack(idx))) end
  if r:wants(1) then
    local rest = G:clone()
    idx[#idx + 1] = 0
    rest:set(unpack(idx))
    r:give(1, rest)
  end
end

-- t:fill(v): every entry is v; t:copy(src): t's entries are src's.
function vjp.fill(r, g)
  if r:wants(2) then r:give(2, total(g[1])) end
end

function vjp.copy(r, g)
  if r:wants(2) then
    local src = r.args[2]
    r:give(2, cot.as_kind(g[1], "dense", r.args[1]:shape()):reshape(src:shape()))
  end
end

return vjp
