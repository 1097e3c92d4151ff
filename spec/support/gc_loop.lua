-- Run by spec/gc_spec.lua in a fresh interpreter (a host's small heap, not
-- busted's): 20000 garbage diag + diag results in a loop. Prints
-- "<bytes per result> <peak library memory above the start> <left after a
-- full collection>".
local lt = require "lazytensor"
local a, b = lt.diag{1, 2, 3}, lt.diag{4, 5, 6}

collectgarbage()
collectgarbage("stop")
local m0 = lt.memory()
local kept = a + b -- alive until the measurement
local per = lt.memory() - m0
assert(kept:numel() == 9)
collectgarbage("restart")

collectgarbage()
m0 = lt.memory()
local peak = 0
for i = 1, 20000 do
  local _ = a + b
  if i % 1000 == 0 then peak = math.max(peak, lt.memory() - m0) end
end
collectgarbage()
print(per, peak, lt.memory() - m0)
