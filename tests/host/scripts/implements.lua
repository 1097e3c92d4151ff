-- lt.implements rules under allocation failure.
local lt = require "lazytensor"
local function close(a, b) assert(math.abs(a - b) < 1e-9, tostring(a) .. " vs " .. tostring(b)) end

local calls = 0
lt.implements("trace", "diag", function(_)
  calls = calls + 1
  return lt.NotImplemented
end)
local d = lt.diag{1, 2, 3}
close(d:trace(), 6)
assert(calls >= 1)
lt.implements("add", "diag", "dense", function(a, b) return b + a:dense() end)
local s = d + lt.eye(3)
close(s:get(3, 3), 4)
lt.implements("logdet", "diag", function(_) return 42 end)
close(d:logdet(), 42)
lt.implements("frobenius", "any", function(a)
  local x = a:dense()
  return math.sqrt(x:cmul(x):sum())
end)
close(lt.call("frobenius", d), math.sqrt(14))
assert(type(lt.explain("trace", d)) == "string")
-- A failing rule: its own message passes through.
lt.implements("diagonal", "diag", function() error("rule failed on purpose") end)
local ok, err = pcall(function() return d:diagonal() end)
assert(not ok)
if not tostring(err):find("rule failed on purpose") then error(err, 0) end
lt.implements("transpose", "diag", function() return "not a tensor" end)
ok, err = pcall(function() return d:t() end)
assert(not ok)
if not tostring(err):find("lazytensor:") then error(err, 0) end
close(d:get(2, 2), 2)
