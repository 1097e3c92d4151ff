-- Dense creation and arithmetic under allocation failure.
local lt = require "lazytensor"
local function close(a, b) assert(math.abs(a - b) < 1e-9, tostring(a) .. " vs " .. tostring(b)) end

local a = lt.tensor{{1, 2}, {3, 4}}
local b = lt.ones(2, 2)
local c = a + b
close(c:get(2, 2), 5)
local d = a * b            -- matrix product
close(d:get(1, 1), 3)
local e = 2 * a - b / 2
close(e:get(2, 1), 5.5)
local v = lt.tensor{1, 2}
local w = a * v
close(w[2], 11)
close(v * v, 5)
local z = lt.zeros(3, 4)
z[2] = 7
close(z:sum(), 28)
local r = lt.arange(1, 6):reshape(2, 3)
close(r:get(2, 3), 6)
local n = r:narrow(2, 2, 2):clone()
close(n:sum(), 2 + 3 + 5 + 6)
close(r:t():get(3, 1), 3)
close(lt.linspace(0, 1, 5)[5], 1)
close(a:cmul(a):sum(), 30)
close(a:exp():log():sum(), 10)
close(a:pow(2):sqrt():abs():max(), 4)
close(a:mean(), 2.5)
close(a:sum(1)[2], 6)
close(a:norm(), math.sqrt(30))
close(lt.eye(3):trace(), 3)
local s = tostring(a)
assert(s:find("4"))
local t = a:totable()
close(t[2][1], 3)
lt.manual_seed(7)
local g = lt.randn(3, 3)
assert(g:numel() == 9)
local u = lt.rand(4)
assert(u:max() < 1)
close(lt.full({2, 2}, 3):sum(), 12)
local x = a + 1
close(x:get(1, 1), 2)
assert(a == lt.tensor{{1, 2}, {3, 4}})
