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

-- max relative error of y on the 16 rows baseline.c checks, by direct sums
local function row_error(d, y)
  local n, c, x = d.n, d.c, d.x
  local err, scale = 0, 0
  for s = 0, 15 do
    local i = s * (n - 1) // 15 + 1
    local v = 0
    for j = 1, n do v = v + c[math.abs(i - j) + 1] * x[j] end
    err = math.max(err, math.abs(v - B.num(y:get(i))))
    scale = math.max(scale, math.abs(v))
  end
  return err / scale
end

for _, n in ipairs(sizes) do
  B.run(W, "matvec", n, function()
    local d = B.w6_data(n)
    local c, x = lt.tensor(d.c), lt.tensor(d.x)
    local y
    local rec = B.measure(function() y = lt.toeplitz(c) * x end, { budget = 0.6, max = 200 })
    rec.rel_err_rows = row_error(d, y)
    rec.s_per_nlog2n = rec.median_s / (n * math.log(n, 2))
    return rec
  end)
end
