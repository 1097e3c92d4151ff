-- bench/peers/problems.lua: the problems both systems solve, made once and
-- written where the Python side reads them (raw little-endian doubles), and
-- their exact answers.
--
--   W5  RBF on n = 4000 sorted points of [0, 1] (lengthscale 0.1,
--       variance 1) plus noise 1e-2: solve with b ~ N(0, 1), log det.
--   W8  a GP regression problem: n points uniform in [0, 5]^d,
--       y = Σ_q f_q(x_q) + 0.1 ε (f = sin, cos, sin(x/2), cos(x/3), ...);
--       MLL and its gradient with respect to log lengthscale, log variance
--       and log noise at lengthscale 1, variance 1, noise 0.1, zero mean.
--
-- Files in DIR: w5.bin (x then b), w8_<d>d_<n>.bin (X row-major then y),
-- and the exact answers, computed here by dense Cholesky on the explicit
-- matrix (not through lazytensor.gp): w5_ref.bin (x* then log det),
-- w8_<kind>_<d>d_<n>.ref (one line: mll and the 3 gradient entries; the
-- gradient is "nan" where Ky⁻¹ is too big to form).
local B = require "benchlib"

local P = {}

P.W5 = {n = 4000, lengthscale = 0.1, variance = 1.0, noise = 1e-2}
P.W8 = {lengthscale = 1.0, variance = 1.0, noise = 0.1}
-- The largest n whose exact gradient reference is formed (Ky⁻¹ is n×n and
-- costs n³); above it only the MLL is referenced.
P.EXACT_GRADIENT_MAX = 8000

local unpack = table.unpack

-- Box–Muller on the bench's generator: n standard normal numbers.
local function normals(r, n)
  local out = {}
  for i = 1, n, 2 do
    local u1, u2 = 1.0 - r:unif(), r:unif()
    local rad = math.sqrt(-2.0 * math.log(u1))
    out[i] = rad * math.cos(2 * math.pi * u2)
    if i + 1 <= n then out[i + 1] = rad * math.sin(2 * math.pi * u2) end
  end
  return out
end

local function write_doubles(path, arrays)
  local f = assert(io.open(path, "wb"))
  for _, a in ipairs(arrays) do
    for i = 1, #a, 512 do
      f:write(string.pack("<" .. string.rep("d", math.min(512, #a - i + 1)),
                          unpack(a, i, math.min(#a, i + 511))))
    end
  end
  f:close()
end

local function read_doubles(path, count)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  if #s ~= 8 * count then return nil end
  local out = {}
  for i = 1, count do out[i] = string.unpack("<d", s, 8 * (i - 1) + 1) end
  return out
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

------------------------------------------------------------------- W5 --

function P.w5_data(dir)
  local n = P.W5.n
  local r = B.rng(55)
  local x = {}
  for i = 1, n do x[i] = r:unif() end
  table.sort(x)
  local b = normals(r, n)
  local path = dir .. "/w5.bin"
  if not exists(path) then write_doubles(path, {x, b}) end
  return {n = n, x = x, b = b, path = path}
end

-- x* = (K + σ²I)⁻¹ b and log det (K + σ²I) by dense Cholesky, cached.
function P.w5_reference(lt, dir, D)
  local n, path = D.n, dir .. "/w5_ref.bin"
  local v = read_doubles(path, n + 1)
  if v then return lt.tensor({unpack(v, 1, n)}), v[n + 1] end
  local X = lt.tensor(D.x):reshape(n, 1)
  local A = lt.kernel(X, {kind = "rbf", lengthscale = P.W5.lengthscale, variance = P.W5.variance})
  local Ky = lt.psd(A:dense():add_diag(P.W5.noise))
  local x, ld
  lt.with_settings({max_cholesky_size = math.huge}, function()
    x = Ky:solve(lt.tensor(D.b))
    ld = Ky:logdet()
  end)
  local xs = x:totable()
  xs[n + 1] = ld
  write_doubles(path, {xs})
  return x, ld
end

------------------------------------------------------------------- W8 --

local FUNCS = {math.sin, math.cos, function(t) return math.sin(0.5 * t) end,
               function(t) return math.cos(t / 3) end, function(t) return math.sin(0.25 * t) end}

function P.w8_name(d, n) return string.format("w8_%dd_%d", d, n) end

function P.w8_data(dir, d, n)
  local r = B.rng(800 + 10 * d + n)
  local X, flat, y = {}, {}, {}
  for i = 1, n do
    local row = {}
    for q = 1, d do
      row[q] = 5.0 * r:unif()
      flat[#flat + 1] = row[q]
    end
    X[i] = row
  end
  local eps = normals(r, n)
  for i = 1, n do
    local s = 0
    for q = 1, d do s = s + FUNCS[(q - 1) % #FUNCS + 1](X[i][q]) end
    y[i] = s + 0.1 * eps[i]
  end
  local path = string.format("%s/%s.bin", dir, P.w8_name(d, n))
  if not exists(path) then write_doubles(path, {flat, y}) end
  return {n = n, d = d, X = X, y = y, path = path}
end

local function read_ref(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local line = f:read("l")
  f:close()
  local v = {}
  for w in (line or ""):gmatch("%S+") do v[#v + 1] = tonumber(w) or (0 / 0) end
  if #v ~= 4 then return nil end
  return v[1], {v[2], v[3], v[4]}
end

-- The exact MLL and gradient, written out from their definitions:
--   Ky = K + σ²I,  α = Ky⁻¹y,  mll = −½(yᵀα + log det Ky + n log 2π),
--   ∂mll/∂θ = ½ Σ_ij (ααᵀ − Ky⁻¹)_ij (∂Ky/∂θ)_ij
-- with ∂K/∂log l and ∂K/∂log v = K from lt.kernel's derivative entries and
-- ∂Ky/∂log σ² = σ²I. Dense Cholesky throughout; cached in DIR.
function P.w8_reference(lt, dir, D, kind)
  local path = string.format("%s/w8_%s_%dd_%d.ref", dir, kind, D.d, D.n)
  local mll, g = read_ref(path)
  if mll then return mll, g end
  local n, W = D.n, P.W8
  local X, y = lt.tensor(D.X), lt.tensor(D.y)
  local spec = {kind = kind, lengthscale = W.lengthscale, variance = W.variance}
  lt.with_settings({max_cholesky_size = math.huge}, function()
    local K = lt.kernel(X, spec):dense()
    local Ky = lt.psd(K:add_diag(W.noise))
    local q, ld = Ky:inv_quad_logdet(y) -- one Cholesky
    mll = -0.5 * (q + ld + n * math.log(2 * math.pi))
    g = {0 / 0, 0 / 0, 0 / 0}
    if n <= P.EXACT_GRADIENT_MAX then
      local alpha = Ky:solve(y)
      local Kinv = Ky:solve(lt.eye(n))
      Ky = nil -- luacheck: ignore 311 (released before the next n×n matrices)
      collectgarbage()
      local a = alpha:reshape(n, 1)
      local Wm = a * a:t() - Kinv
      Kinv = nil -- luacheck: ignore 311
      collectgarbage()
      local dl = lt.kernel(X, {kind = kind, lengthscale = W.lengthscale, variance = W.variance,
                               derivative = "lengthscale"}):dense()
      g[1] = 0.5 * Wm:cmul(dl):sum()
      dl = nil -- luacheck: ignore 311
      collectgarbage()
      g[2] = 0.5 * Wm:cmul(K):sum()
      g[3] = 0.5 * W.noise * Wm:diagonal():sum()
    end
  end)
  collectgarbage()
  local f = assert(io.open(path, "w"))
  f:write(string.format("%.17g %.17g %.17g %.17g\n", mll, g[1], g[2], g[3]))
  f:close()
  return mll, g
end

return P
