--- Cotangents for lt.grad's backward pass.
--
-- A value's cotangent takes the form its value has:
--   a scalar (a 0-d tensor)        a Lua number;
--   a dense tensor of any shape    a dense tensor of that shape;
--   a lazy operator (m x n)        a list of parts whose sum it is, as
--                                  linear_operator carries it:
--                                  {L = , R = } for L·Rᵀ (m×k, n×k),
--                                  {L = , R = , M = } for (L·Rᵀ) ∘ M,
--                                  {W = } dense m×n, {d = } a diagonal.
-- Parts stay low-rank through products, solves and transposes; only a value
-- that is itself dense gets a dense cotangent. The functions here combine
-- and reshape cotangents; they run with nothing recorded.

local cot = {}
local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

local lt -- the library, set by cot.bind

function cot.bind(lib) lt = lib end

local function is_parts(c) return type(c) == "table" and not lt.is_tensor(c) end
cot.is_parts = is_parts

-- A vector as an n×1 matrix (a matrix unchanged).
local function column(v)
  if v:dim() == 1 then return v:reshape(v:size(1), 1) end
  return v
end
cot.column = column

--- The dense m×n matrix a list of parts stands for.
function cot.dense_of(parts, m, n)
  local W
  local function add(X)
    if W == nil then W = X else W = W + X end
  end
  for _, p in ipairs(parts) do
    if p.W then
      add(p.W)
    elseif p.L then
      local X = column(p.L) * column(p.R):t()
      if p.M then X = lt.cmul(X, p.M:dense()) end
      add(X)
    else -- diag(d) in the leading k×k block (k = min(m, n))
      local k = p.d:size(1)
      local X = lt.diag(p.d):dense()
      if k ~= m or k ~= n then
        local Y = lt.zeros(m, n)
        Y:narrow(1, 1, k):narrow(2, 1, k):copy(X)
        X = Y
      end
      add(X)
    end
  end
  return W or lt.zeros(m, n)
end

--- A cotangent given in any form as a list of parts (dense: one W).
function cot.parts_of(c)
  if is_parts(c) then return c end
  return {{W = c}}
end

--- c·P for a number c.
function cot.scale(parts, c)
  local out = {}
  for i, p in ipairs(parts) do
    if p.W then out[i] = {W = p.W * c}
    elseif p.L then out[i] = {L = column(p.L) * c, R = p.R, M = p.M}
    else out[i] = {d = p.d * c} end
  end
  return out
end

--- Pᵀ.
function cot.transpose(parts)
  local out = {}
  for i, p in ipairs(parts) do
    if p.W then out[i] = {W = p.W:t():contiguous()}
    elseif p.L then out[i] = {L = p.R, R = p.L, M = p.M and p.M:t()}
    else out[i] = {d = p.d} end
  end
  return out
end

-- A masked part as the dense W it stands for (the other algebra below
-- needs no mask).
local function unmasked(p, m, n)
  if p.M then return {W = cot.dense_of({p}, m, n)} end
  if p.d then return {W = cot.dense_of({p}, m, n)} end
  return p
end

--- Σ_ij P_ij.
function cot.sum(parts)
  local s = 0
  for _, p in ipairs(parts) do
    if p.W then s = s + p.W:sum()
    elseif p.d then s = s + p.d:sum()
    elseif p.M then
      s = s + cot.dense_of({p}, p.L:size(1), p.R:size(1)):sum()
    else
      s = s + column(p.L):sum(1):dot(column(p.R):sum(1))
    end
  end
  return s
end

--- The diagonal of an m×n P (k = min(m, n) entries).
function cot.diagonal(parts, m, n)
  local k = math.min(m, n)
  local out = lt.zeros(k)
  for _, p in ipairs(parts) do
    if p.W then out = out + p.W:diagonal()
    elseif p.d then out = out + p.d
    else
      local L = column(p.L):narrow(1, 1, k)
      local R = column(p.R):narrow(1, 1, k)
      local d = lt.cmul(L, R):sum(2)
      if p.M then d = lt.cmul(d, p.M:diagonal()) end
      out = out + d
    end
  end
  return out
end

--- tr(P).
function cot.trace(parts, m, n) return cot.diagonal(parts, m, n):sum() end

--- <P, A> = Σ_ij P_ij A_ij for an operator or dense matrix A of P's shape.
function cot.inner(parts, A)
  local s = 0
  for _, p in ipairs(parts) do
    if p.M then
      s = s + lt.cmul(cot.dense_of({p}, A:size(1), A:size(2)), A:dense()):sum()
    elseif p.W then s = s + lt.cmul(p.W, A:dense()):sum()
    elseif p.d then s = s + p.d:dot(A:diagonal())
    else s = s + lt.cmul(column(p.L), A * column(p.R)):sum() end
  end
  return s
end

--- P·Bᵀ for an m×n P and a k×n operator or dense B: the cotangent of A in
-- A·B. Low-rank parts stay low-rank (L·(B·R)ᵀ); a dense W against a dense B
-- becomes the low-rank W·Bᵀ itself.
function cot.times_transpose(parts, B, m, n)
  local out = {}
  local dense_B = not lt.is_lazy(B)
  for i, p in ipairs(parts) do
    p = unmasked(p, m, n)
    if p.L then out[i] = {L = column(p.L), R = B * column(p.R)}
    elseif dense_B then out[i] = {L = p.W, R = B}
    else out[i] = {W = (B * p.W:t()):t():contiguous()} end
  end
  return out
end

--- Aᵀ·P for an m×k A and an m×n P: the cotangent of B in A·B.
function cot.transpose_times(A, parts, m, n)
  local out = {}
  local dense_A = not lt.is_lazy(A)
  for i, p in ipairs(parts) do
    p = unmasked(p, m, n)
    if p.L then out[i] = {L = A:t() * column(p.L), R = column(p.R)}
    elseif dense_A then out[i] = {L = A:t():contiguous(), R = p.W:t():contiguous()}
    else out[i] = {W = A:t() * p.W} end
  end
  return out
end

--- P·X and Pᵀ·X for a dense X.
function cot.apply(parts, X, m, n)
  local Y
  for _, p in ipairs(parts) do
    p = unmasked(p, m, n)
    local Z
    if p.L then Z = column(p.L) * (column(p.R):t() * X) else Z = p.W * X end
    if Y == nil then Y = Z else Y = Y + Z end
  end
  return Y
end

--- The parts as few as they can be for a leaf's derivative, which passes
-- over the operator's entries once per part (a kernel evaluates them all
-- each time): with a dense W, every unmasked low-rank part folded into it
-- (the W is stored already); without one, the unmasked low-rank parts
-- joined column-wise into one L·Rᵀ.
function cot.compact(parts)
  local W, lowrank = nil, 0
  for _, p in ipairs(parts) do
    if p.W then W = p.W elseif p.L and not p.M then lowrank = lowrank + 1 end
  end
  if W == nil and lowrank < 2 then return parts end
  local out, sum, Ls, Rs = {}, nil, {}, {}
  for _, p in ipairs(parts) do
    if p.W then
      sum = sum and sum + p.W or p.W
    elseif p.L and not p.M then
      if W then
        local X = column(p.L) * column(p.R):t()
        sum = sum and sum + X or X
      else
        Ls[#Ls + 1], Rs[#Rs + 1] = column(p.L), column(p.R)
      end
    else
      out[#out + 1] = p
    end
  end
  if sum then out[#out + 1] = {W = sum} end
  if #Ls > 0 then
    out[#out + 1] = {L = lt.cat(Ls, 2):dense():contiguous(), R = lt.cat(Rs, 2):dense():contiguous()}
  end
  return out
end

--- The cotangent c (number, dense or parts) in the form a value of the
-- given kind and shape takes: "scalar" → number, "dense" → tensor,
-- "lazy" → parts.
function cot.as_kind(c, kind, shape)
  if kind == "scalar" then
    if type(c) == "number" then return c end
    if is_parts(c) then return cot.sum(c) end
    return c:sum()
  elseif kind == "dense" then
    if is_parts(c) then return cot.dense_of(c, shape[1], shape[2]) end
    if type(c) == "number" then return lt.full(shape, c) end
    return c
  end
  if type(c) == "number" then error("lazytensor: grad: a number cotangent for an operator", 0) end
  return cot.parts_of(c)
end

--- a + b for two cotangents of one value's kind (parts lists concatenate,
-- their dense parts summed into one).
function cot.add(a, b)
  if a == nil then return b end
  if b == nil then return a end
  if type(a) == "number" then return a + b end
  if not is_parts(a) then return a + b end
  local out, W = {}, nil
  for _, list in ipairs{a, b} do
    for _, p in ipairs(list) do
      if p.W then W = W and W + p.W or p.W else out[#out + 1] = p end
    end
  end
  if W then out[#out + 1] = {W = W} end
  return out
end

--- The dense cotangent g of a broadcast result, summed down to shape
-- (numpy's broadcasting read backwards).
function cot.sum_to(g, shape)
  local gs = g:shape()
  if #gs == #shape then
    local same = true
    for i = 1, #gs do if gs[i] ~= shape[i] then same = false end end
    if same then return g end
  end
  if #shape == 0 then return g:sum() end
  while g:dim() > #shape do g = g:sum(1) end
  for i = 1, #shape do
    if shape[i] == 1 and g:size(i) ~= 1 then
      local s = g:shape()
      s[i] = 1
      g = g:sum(i):reshape(unpack(s))
    end
  end
  return g
end

return cot
