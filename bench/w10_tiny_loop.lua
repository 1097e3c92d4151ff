-- W10's tiny operations in loops of 10^4 (bench/w10_grad.lua's), for an
-- instruction count (bench/w10_tiny_count.sh):
--
--   lua5.4 bench/w10_tiny_loop.lua OP MODE REPS   (in a built tree)
--
-- OP: diag+dense, dense*dense or scale (each loop's results but the last
-- are dropped: the backward reaches one record), or chain (X ← 0.5·X,
-- every record reached); MODE: plain (untaped), recorded
-- (the forward inside lt.grad, autograd.evaluate) or grad (the whole
-- lt.grad call). The loop runs REPS times after one warm-up, each time a
-- new tape (as B.measure runs it): counts at two REPS difference out the
-- start-up and leave the steady state, the collection of the tapes before
-- included.

-- The library of the tree it runs in (the current directory).
package.cpath = "./?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
local lt = require "lazytensor"
local autograd = require "lazytensor.autograd"

local NOPS = 10000
local op, mode, reps = arg[1] or "scale", arg[2] or "recorded", tonumber(arg[3] or "1")
local A3 = lt.tensor{{4, 1, 0}, {1, 3, 0.5}, {0, 0.5, 2}}
local D3 = lt.diag{1, 2, 3}
local OPS = {
  ["diag+dense"] = function(X) return D3 + X end,
  ["dense*dense"] = function(X) return X * A3 end,
  scale = function(X) return 2 * X end,
}
local f = assert(OPS[op] or op == "chain" and OPS.scale, "unknown op " .. op)
local function loop(X)
  local acc
  for _ = 1, NOPS do acc = f(X) end
  return acc:dense():sum()
end
if op == "chain" then
  loop = function(X)
    for _ = 1, NOPS do X = 0.5 * X end
    return X:sum()
  end
end
local run = ({
  plain = function() loop(A3) end,
  recorded = function() autograd.evaluate(loop, A3) end,
  grad = function() lt.grad(loop)(A3) end,
})[mode] or error("unknown mode " .. mode)
for _ = 0, reps do run() end
