-- W6: symmetric Toeplitz matvec over n = 2^10 ... 2^18, c_k = 1 / (1 + k);
-- baselines in baseline.c: FFTW circulant embedding at every n, and a dense
-- dgemv at n = 2^12 scaled to n = 2^16. s_per_nlog2n (median / (n log2 n))
-- staying flat is the O(n log n) evidence. The operator is rebuilt inside
-- every timed call.

local dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir .. "/?.lua;" .. package.path
local B = require "benchlib"

local W = "W6"

local sizes = {}
for p = 10, 18 do sizes[#sizes + 1] = 2 ^ p // 1 end

local lt, why = B.load()
if lt then why = B.missing(lt, { "tensor", "toeplitz" }) end
if why then
  for _, n in ipairs(sizes) do B.skip(W, "matvec", n, why) end
  return
end

-- the 16 rows baseline.c checks, by direct sums: {index, value} pairs
local function expected_rows(d)
  local n, c, x = d.n, d.c, d.x
  local rows = {}
  for s = 0, 15 do
    local i = s * (n - 1) // 15 + 1
    local v = 0
    for j = 1, n do v = v + c[math.abs(i - j) + 1] * x[j] end
    rows[#rows + 1] = { i, v }
  end
  return rows
end

local function row_error(rows, y)
  local e, scale = 0, 0
  for _, r in ipairs(rows) do
    e = math.max(e, math.abs(r[2] - B.num(y:get(r[1]))))
    scale = math.max(scale, math.abs(r[2]))
  end
  return e / scale
end

for _, n in ipairs(sizes) do
  B.run(W, "matvec", n, function()
    -- the Lua data goes out of scope before timing: the collector's work
    -- is then the library's own garbage
    local rows, c, x
    do
      local d = B.w6_data(n)
      rows = expected_rows(d)
      c, x = lt.tensor(d.c), lt.tensor(d.x)
    end
    local y
    local rec = B.measure(function() y = lt.toeplitz(c) * x end, { budget = 0.6, max = 200 })
    rec.rel_err_rows = row_error(rows, y)
    rec.s_per_nlog2n = rec.median_s / (n * math.log(n, 2))
    return rec
  end)
end
