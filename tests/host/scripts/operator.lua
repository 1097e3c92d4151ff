-- lt.operator callbacks under allocation failure.
local lt = require "lazytensor"
local function close(a, b) assert(math.abs(a - b) < 1e-9, tostring(a) .. " vs " .. tostring(b)) end

local M = lt.tensor{{2, 1}, {1, 3}}
local op = lt.operator{shape = {2, 2}, matmul = function(X) return M * X end,
                       t_matmul = function(X) return M:t() * X end,
                       symmetric = true, psd = true, name = "M"}
assert(lt.type(op) == "operator")
close((op * lt.tensor{1, 1})[2], 4)
close(op:dense():get(1, 2), 1)
close(op:get(2, 2), 3)
close(op:trace(), 5)
close((op + lt.eye(2)):dense():get(1, 1), 3)
close(op:t():dense():get(2, 1), 1)
if pcall(function() return lt.eye(2):solve(lt.ones(2)) end) then
  close(op:logdet(), math.log(5))
  close(op:solve(lt.tensor{3, 4})[1], 1)
end
close(op[1][2], 1)
-- A failing callback: its own error passes through, the state stays usable.
local bad = lt.operator{shape = {2, 2}, matmul = function() error("boom from matmul") end}
local ok, err = pcall(function() return bad:dense() end)
assert(not ok)
if not tostring(err):find("boom from matmul") then error(err, 0) end
local wrong = lt.operator{shape = {2, 2}, matmul = function() return 42 end}
ok, err = pcall(function() return wrong * lt.tensor{1, 1} end)
assert(not ok)
if not tostring(err):find("lazytensor:") then error(err, 0) end
close((op * lt.tensor{1, 0})[1], 2)
