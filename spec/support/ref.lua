-- Pure-Lua reference computations for the specs: plain loops over nested
-- tables, independent of the library they check.
local ref = {}

function ref.matmul(a, b)
  local out = {}
  for i = 1, #a do
    out[i] = {}
    for j = 1, #b[1] do
      local s = 0
      for k = 1, #b do s = s + a[i][k] * b[k][j] end
      out[i][j] = s
    end
  end
  return out
end

function ref.matvec(a, x)
  local out = {}
  for i = 1, #a do
    local s = 0
    for k = 1, #x do s = s + a[i][k] * x[k] end
    out[i] = s
  end
  return out
end

function ref.transpose(a)
  local out = {}
  for j = 1, #a[1] do
    out[j] = {}
    for i = 1, #a do out[j][i] = a[i][j] end
  end
  return out
end

function ref.eye(n)
  local out = {}
  for i = 1, n do
    out[i] = {}
    for j = 1, n do out[i][j] = i == j and 1 or 0 end
  end
  return out
end

function ref.diagm(d)
  local out = {}
  for i = 1, #d do
    out[i] = {}
    for j = 1, #d do out[i][j] = i == j and d[i] or 0 end
  end
  return out
end

function ref.add(a, b)
  local out = {}
  for i = 1, #a do
    out[i] = {}
    for j = 1, #a[i] do out[i][j] = a[i][j] + b[i][j] end
  end
  return out
end

-- Copy of a matrix (nested table).
local function copy(a)
  local out = {}
  for i = 1, #a do
    out[i] = {}
    for j = 1, #a[i] do out[i][j] = a[i][j] end
  end
  return out
end
ref.copy = copy

-- Gaussian elimination with partial pivoting: solves A x = b for a vector b
-- or a matrix b (list of rows). Returns x (same form as b) and det A.
function ref.solve(a, b)
  local n = #a
  local m = copy(a)
  local vector = type(b[1]) == "number"
  local rhs = {}
  for i = 1, n do rhs[i] = vector and {b[i]} or {table.unpack(b[i])} end
  local k = #rhs[1]
  local det = 1
  for c = 1, n do
    local p = c
    for r = c + 1, n do
      if math.abs(m[r][c]) > math.abs(m[p][c]) then p = r end
    end
    if m[p][c] == 0 then return nil, 0 end
    if p ~= c then
      m[p], m[c] = m[c], m[p]
      rhs[p], rhs[c] = rhs[c], rhs[p]
      det = -det
    end
    det = det * m[c][c]
    for r = c + 1, n do
      local f = m[r][c] / m[c][c]
      for j = c, n do m[r][j] = m[r][j] - f * m[c][j] end
      for j = 1, k do rhs[r][j] = rhs[r][j] - f * rhs[c][j] end
    end
  end
  local x = {}
  for i = n, 1, -1 do
    x[i] = {}
    for j = 1, k do
      local s = rhs[i][j]
      for c = i + 1, n do s = s - m[i][c] * x[c][j] end
      x[i][j] = s / m[i][i]
    end
  end
  if vector then
    local v = {}
    for i = 1, n do v[i] = x[i][1] end
    return v, det
  end
  return x, det
end

function ref.det(a)
  local _, d = ref.solve(a, (function()
    local z = {}
    for i = 1, #a do z[i] = 0 end
    return z
  end)())
  return d
end

-- Largest absolute difference between two numbers / nested tables.
function ref.maxdiff(a, b)
  if type(a) == "number" then return math.abs(a - b) end
  assert(#a == #b, ("lengths differ: %d and %d"):format(#a, #b))
  local m = 0
  for i = 1, #a do m = math.max(m, ref.maxdiff(a[i], b[i])) end
  return m
end

-- Asserts two numbers or nested tables agree to tol (1e-10 by default).
function ref.near(expected, actual, tol)
  tol = tol or 1e-10
  local d = ref.maxdiff(expected, actual)
  if d ~= d or d > tol then
    error(("values differ by %g (tolerance %g)"):format(d, tol), 2)
  end
  return true
end

-- Symmetric positive definite test matrix: B Bᵀ + n I from a fixed pattern.
function ref.spd(n)
  local b = {}
  for i = 1, n do
    b[i] = {}
    for j = 1, n do b[i][j] = math.sin(i * 1.3 + j * 0.7) end
  end
  local a = ref.matmul(b, ref.transpose(b))
  for i = 1, n do a[i][i] = a[i][i] + n end
  return a
end

-- A general (non-symmetric) test matrix.
function ref.general(m, n)
  local a = {}
  for i = 1, m do
    a[i] = {}
    for j = 1, n do a[i][j] = math.cos(i * 0.9 - j * 1.7) + (i == j and 2 or 0) end
  end
  return a
end

-- The Cholesky factor L (lower, A = L·Lᵀ) of a symmetric positive definite
-- matrix, by the textbook loops.
function ref.cholesky(A)
  local n, L = #A, {}
  for i = 1, n do
    L[i] = {}
    for j = 1, n do L[i][j] = 0 end
  end
  for j = 1, n do
    local s = A[j][j]
    for k = 1, j - 1 do s = s - L[j][k] ^ 2 end
    assert(s > 0, "reference cholesky: not positive definite")
    L[j][j] = math.sqrt(s)
    for i = j + 1, n do
      local t = A[i][j]
      for k = 1, j - 1 do t = t - L[i][k] * L[j][k] end
      L[i][j] = t / L[j][j]
    end
  end
  return L
end

-- y with L·y = b (L lower triangular, b a vector).
function ref.lower_solve(L, b)
  local y = {}
  for i = 1, #b do
    local s = b[i]
    for k = 1, i - 1 do s = s - L[i][k] * y[k] end
    y[i] = s / L[i][i]
  end
  return y
end

-- x with L·Lᵀ·x = b (L from ref.cholesky, b a vector).
function ref.chol_solve(L, b)
  local n, y, x = #L, ref.lower_solve(L, b), {}
  for i = n, 1, -1 do
    local s = y[i]
    for k = i + 1, n do s = s - L[k][i] * x[k] end
    x[i] = s / L[i][i]
  end
  return x
end

-- Asserts a and b agree to rel (relative to the larger) plus abs_tol.
function ref.close(a, b, rel, what, abs_tol)
  local scale = math.max(math.abs(a), math.abs(b), 1e-300)
  assert(math.abs(a - b) <= rel * scale + (abs_tol or 0),
         string.format("%s: %.15g vs %.15g (rel %.3g)", what or "value", a, b,
                       math.abs(a - b) / scale))
end

-- Deterministic scattered points in [lo, lo + scale]^d (lo defaults to 0),
-- n×d as nested tables, from an LCG (not lt's RNG): the same points on every
-- Lua. Also returns the generator, continuing the same stream.
function ref.scattered(n, d, seed, scale, lo)
  lo = lo or 0
  local function rnd()
    seed = (seed * 1103515245 + 12345) % 2147483648
    return seed / 2147483648
  end
  local P = {}
  for i = 1, n do
    P[i] = {}
    for q = 1, d do P[i][q] = lo + scale * rnd() end
  end
  return P, rnd
end

-- Smooth targets at points P: Σ_q sin(2 p_q + q) + 0.1 sin(37 i).
function ref.sine_targets(P)
  local y = {}
  for i, p in ipairs(P) do
    local v = 0.1 * math.sin(37 * i)
    for q = 1, #p do v = v + math.sin(2 * p[q] + q) end
    y[i] = v
  end
  return y
end

-- The central difference of model:mll() in its parameter p (of the vector
-- v0, restored afterwards) with step h.
function ref.central_difference(model, v0, p, h)
  local vp, vm = {}, {}
  for i = 1, #v0 do vp[i], vm[i] = v0[i], v0[i] end
  vp[p], vm[p] = v0[p] + h, v0[p] - h
  model:set_vector(vp)
  local fp = model:mll()
  model:set_vector(vm)
  local fm = model:mll()
  model:set_vector(v0)
  return (fp - fm) / (2 * h)
end

-- Asserts each entry of grad (model:mll_and_grad()'s, over
-- model:get_vector()) against Richardson's extrapolation of two central
-- differences, (4·D(h/2) − D(h))/3 with h = 1e-3: its h⁴ error and the
-- MLL's rounding over h (about 2e-8 on these models) sit well below the
-- default tolerance (rel 1e-6, abs 1e-7), where a plain D(1e-5)'s
-- rounding alone can reach it.
function ref.check_model_gradient(model, grad, what, rel, abs_tol)
  local v0 = model:get_vector()
  assert(#v0 == #grad, string.format("%s: %d parameters, %d gradient entries", what, #v0, #grad))
  local h = 1e-3
  for p = 1, #v0 do
    local d1 = ref.central_difference(model, v0, p, h)
    local d2 = ref.central_difference(model, v0, p, h / 2)
    ref.close(grad[p], (4 * d2 - d1) / 3, rel or 1e-6, what .. ": gradient " .. p, abs_tol or 1e-7)
  end
end

return ref
