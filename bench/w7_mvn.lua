-- W7: multivariate normal log-density with cov = lowrank(U) + diag(d),
-- U 20000 x 50, mean 0, x = W3's b; the baseline is baseline.c's Woodbury
-- (one capacitance factorisation for the solve and the logdet) on the same
-- data. The covariance and the distribution are built inside every timed
-- call, so nothing cached by an earlier call is reused.

local dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = dir .. "/?.lua;" .. package.path
local B = require "benchlib"

local W = "W7"

local data = B.w3_data()
local n = data.n

local lt, why = B.load()
if not lt then
  B.skip(W, "log_prob", n, why)
  return
end
why = B.missing(lt, { "tensor", "lowrank", "diag", "zeros" })
-- lt.mvn as API.md names it, else the submodule's constructor directly
-- (the record says which)
local mvn, mvn_via = nil, "lt.mvn"
if not why then
  if B.missing(lt, { "mvn" }) == nil then
    mvn = lt.mvn
  else
    local ok, mod = pcall(require, "lazytensor.mvn")
    if ok and type(mod) == "table" and type(mod.new) == "function" then
      mvn, mvn_via = mod.new, "require('lazytensor.mvn').new"
    else
      why = B.missing(lt, { "mvn" })
    end
  end
end
if why then
  B.skip(W, "log_prob", n, why)
  return
end

B.run(W, "log_prob", n, function()
  local U, d, x = lt.tensor(data.U), lt.tensor(data.d), lt.tensor(data.b)
  data.U, data.d, data.b = nil, nil, nil -- the collector's work: the library's garbage only
  local mean = lt.zeros(n)
  local v
  local rec = B.measure(function()
    v = mvn(mean, lt.lowrank(U) + lt.diag(d)):log_prob(x)
  end, { budget = 1.5, max = 200 })
  rec.value = B.num(v)
  rec.k = data.k
  rec.mvn_via = mvn_via
  return rec
end)
