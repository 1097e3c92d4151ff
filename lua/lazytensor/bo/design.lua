--- Space-filling designs in the unit cube for Bayesian optimisation's
-- first points: a scrambled Sobol sequence and a Latin hypercube.
--
--   local design = require "lazytensor.bo.design"
--   local X = design.sobol(16, 3, {seed = 1})       -- 16×3 tensor in [0, 1)³
--   local U = design.sobol(8, 2, {scramble = false}) -- the plain sequence
--   local L = design.latin_hypercube(10, 4, {seed = 2})
--
-- Sobol: the direction numbers of Joe and Kuo (2008, new-joe-kuo-6.21201,
-- their first 32 dimensions), points in Gray-code order (as SciPy's and
-- BoTorch's), 30 binary digits. Scrambled (the default) by a random linear
-- matrix scramble (Matoušek 1998: each dimension's generator matrix
-- multiplied on the left by a random unit lower-triangular binary matrix)
-- and a random digital shift; both keep the net property, so the first 2^m
-- points put exactly one point in each of the 2^m intervals [k/2^m,
-- (k+1)/2^m) of every coordinate. Lua 5.1 has no bit operations, so the
-- digits are kept as arrays of 0/1 and XOR is done digit by digit (n·d·30
-- steps: a millisecond for a BO design).
--
-- Random numbers come from lazytensor's generator (lt.rand), so every Lua
-- gives the same design; opts.seed reseeds it first (lt.manual_seed).
local lt = require "lazytensor"

local design = {}

local BITS = 30

-- Joe–Kuo: per dimension from the second, {s, a, m_1, ..., m_s}: the degree
-- of the primitive polynomial, its inner coefficients as an integer, and the
-- initial direction numbers. The first dimension is van der Corput's.
local JOE_KUO = {
  {1, 0, 1}, {2, 1, 1, 3}, {3, 1, 1, 3, 1}, {3, 2, 1, 1, 1}, {4, 1, 1, 1, 3, 3},
  {4, 4, 1, 3, 5, 13}, {5, 2, 1, 1, 5, 5, 17}, {5, 4, 1, 1, 5, 5, 5},
  {5, 7, 1, 1, 7, 11, 19}, {5, 11, 1, 1, 5, 1, 1}, {5, 13, 1, 1, 1, 3, 11},
  {5, 14, 1, 3, 5, 5, 31}, {6, 1, 1, 3, 3, 9, 7, 49}, {6, 13, 1, 1, 1, 15, 21, 21},
  {6, 16, 1, 3, 1, 13, 27, 49}, {6, 19, 1, 1, 1, 15, 7, 5}, {6, 22, 1, 3, 1, 15, 13, 25},
  {6, 25, 1, 1, 5, 5, 19, 61}, {7, 1, 1, 3, 7, 11, 23, 15, 103},
  {7, 4, 1, 3, 7, 13, 13, 15, 69}, {7, 7, 1, 1, 3, 13, 7, 35, 63},
  {7, 8, 1, 3, 5, 9, 1, 25, 53}, {7, 14, 1, 3, 1, 13, 9, 35, 107},
  {7, 19, 1, 3, 1, 5, 27, 61, 31}, {7, 21, 1, 1, 5, 11, 19, 41, 61},
  {7, 28, 1, 3, 5, 3, 3, 13, 69}, {7, 31, 1, 1, 7, 13, 1, 19, 1},
  {7, 32, 1, 3, 7, 5, 13, 19, 59}, {7, 37, 1, 1, 3, 9, 25, 29, 41},
  {7, 41, 1, 3, 5, 13, 23, 1, 55}, {7, 42, 1, 3, 7, 3, 13, 59, 17},
}

--- The largest dimension the built-in direction numbers cover.
design.max_sobol_dim = #JOE_KUO + 1

local function fail(fmt, ...)
  error("lazytensor: bo: " .. string.format(fmt, ...), 0)
end

-- Bit p (0 = least significant) of a non-negative integer.
local function bit(v, p)
  return math.floor(v / 2 ^ p) % 2
end

-- Direction number V_k as BITS binary digits (digit 1 is worth 1/2):
-- m_k / 2^k, whose k digits are m_k's.
local function initial_direction(m, k)
  local v = {}
  for t = 1, BITS do v[t] = t <= k and bit(m, k - t) or 0 end
  return v
end

local function xor_into(acc, v)
  for t = 1, BITS do acc[t] = (acc[t] + v[t]) % 2 end
end

-- The BITS direction numbers of one dimension (Bratley–Fox's recurrence:
-- V_k = V_{k−s} ⊕ (V_{k−s} >> s) ⊕ Σ_r a_r·V_{k−r}).
local function directions(dim)
  local V = {}
  if dim == 1 then
    for k = 1, BITS do V[k] = initial_direction(1, k) end
    return V
  end
  local row = JOE_KUO[dim - 1]
  local s, a = row[1], row[2]
  for k = 1, math.min(s, BITS) do V[k] = initial_direction(row[2 + k], k) end
  for k = s + 1, BITS do
    local base, v = V[k - s], {}
    for t = 1, BITS do v[t] = (base[t] + (t > s and base[t - s] or 0)) % 2 end
    for r = 1, s - 1 do
      if bit(a, s - 1 - r) == 1 then xor_into(v, V[k - r]) end
    end
    V[k] = v
  end
  return V
end

-- n uniform draws in [0, 1) as a Lua array, from lazytensor's generator.
local function uniforms(n)
  if n == 0 then return {} end
  return lt.rand(n):totable()
end

-- Matoušek's linear matrix scramble of one dimension's directions, L·V_k with
-- L unit lower triangular and random below the diagonal, then a random shift.
local function scramble(V)
  local L = uniforms(BITS * (BITS - 1) / 2 + BITS)
  local at = 0
  local lower = {}
  for r = 1, BITS do
    lower[r] = {}
    for c = 1, r - 1 do
      at = at + 1
      lower[r][c] = L[at] < 0.5 and 1 or 0
    end
  end
  local out = {}
  for k = 1, BITS do
    local v, w = V[k], {}
    for r = 1, BITS do
      local sum = v[r]
      for c = 1, r - 1 do sum = sum + lower[r][c] * v[c] end
      w[r] = sum % 2
    end
    out[k] = w
  end
  local shift = {}
  for t = 1, BITS do
    at = at + 1
    shift[t] = L[at] < 0.5 and 1 or 0
  end
  return out, shift
end

-- Position (1-based) of the lowest zero bit of the non-negative integer i.
local function lowest_zero_bit(i)
  local c = 1
  while i % 2 == 1 do
    i = (i - 1) / 2
    c = c + 1
  end
  return c
end

local function value_of(digits)
  local x, w = 0, 0.5
  for t = 1, BITS do
    if digits[t] == 1 then x = x + w end
    w = w * 0.5
  end
  return x
end

local function check_count(fname, what, v, lo, hi)
  if type(v) ~= "number" or v ~= math.floor(v) or v < lo or v > hi then
    fail("%s: %s must be an integer from %d to %d, got %s", fname, what, lo, hi, tostring(v))
  end
end

local function check_opts(fname, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail("%s: opts must be a table, got %s", fname, type(opts)) end
  for k in pairs(opts) do
    if not allowed[k] then fail("%s: unknown option '%s'", fname, tostring(k)) end
  end
  if opts.seed ~= nil then check_count(fname, "seed", opts.seed, 0, 2 ^ 53) end
  return opts
end

--- The first n points of the d-dimensional Sobol sequence as a Lua array of
-- n rows (each d numbers in [0, 1)); opts as design.sobol's.
function design.sobol_rows(n, d, opts)
  opts = check_opts("sobol", opts, {seed = true, scramble = true})
  check_count("sobol", "n", n, 1, 2 ^ BITS)
  check_count("sobol", "d", d, 1, design.max_sobol_dim)
  if opts.scramble ~= nil and type(opts.scramble) ~= "boolean" then
    fail("sobol: scramble must be a boolean, got %s", type(opts.scramble))
  end
  if opts.seed ~= nil then lt.manual_seed(opts.seed) end
  local V, state = {}, {}
  for j = 1, d do
    V[j] = directions(j)
    state[j] = {}
    for t = 1, BITS do state[j][t] = 0 end
    if opts.scramble ~= false then V[j], state[j] = scramble(V[j]) end
  end
  local rows = {}
  for i = 1, n do
    if i > 1 then
      local c = lowest_zero_bit(i - 2)
      for j = 1, d do xor_into(state[j], V[j][c]) end
    end
    local row = {}
    for j = 1, d do row[j] = value_of(state[j]) end
    rows[i] = row
  end
  return rows
end

--- The first n points of the d-dimensional Sobol sequence, an n×d tensor.
-- opts: seed (reseeds lazytensor's generator first), scramble (default
-- true; false gives the plain sequence, whose first point is 0).
function design.sobol(n, d, opts)
  return lt.tensor(design.sobol_rows(n, d, opts))
end

--- A Latin hypercube of n points in [0, 1)^d as a Lua array of rows: in
-- every coordinate each interval [k/n, (k+1)/n) holds exactly one point,
-- placed uniformly inside it; the intervals are paired across coordinates
-- by independent random permutations. opts: seed.
function design.latin_hypercube_rows(n, d, opts)
  opts = check_opts("latin_hypercube", opts, {seed = true})
  check_count("latin_hypercube", "n", n, 1, 2 ^ 31)
  check_count("latin_hypercube", "d", d, 1, 2 ^ 20)
  if opts.seed ~= nil then lt.manual_seed(opts.seed) end
  local rows = {}
  for i = 1, n do rows[i] = {} end
  for j = 1, d do
    local u = uniforms(2 * n)
    local perm = {}
    for i = 1, n do perm[i] = i end
    for i = n, 2, -1 do -- Fisher–Yates
      local k = math.floor(u[i] * i) + 1
      perm[i], perm[k] = perm[k], perm[i]
    end
    for i = 1, n do rows[i][j] = (perm[i] - 1 + u[n + i]) / n end
  end
  return rows
end

--- A Latin hypercube of n points in [0, 1)^d, an n×d tensor (see
-- latin_hypercube_rows).
function design.latin_hypercube(n, d, opts)
  return lt.tensor(design.latin_hypercube_rows(n, d, opts))
end

return design
