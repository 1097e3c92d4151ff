-- 0-d tensors as numbers under allocation failure: arithmetic with each
-- other, with numbers, dense and lazy tensors, powers, comparisons, item,
-- number arguments, and the errors of the scalar paths.
local lt = require "lazytensor"
local function close(a, b) assert(math.abs(a - b) < 1e-12, tostring(a) .. " vs " .. tostring(b)) end

local s, t = lt.tensor(0.4), lt.tensor(-2)
close((s * s):item(), 0.16)
close((s * t - s / t + 2 / s):item(), -0.8 + 0.2 + 5)
close((2 - s):item(), 1.6)
close((-s):item(), -0.4)
close((s ^ 2):item(), 0.16)
close((2 ^ s):item(), 2 ^ 0.4)
close(lt.matmul(s, t):item(), -0.8)
close(lt.scale(s, 3):item(), 1.2)
close(lt.div(s, t):item(), -0.2)
assert(t < s and s <= s and (s < t) == false)
if not (type(jit) == "table" or _VERSION == "Lua 5.1") then
  assert(s < 1 and 0 <= s) -- a number and a tensor: Lua 5.2+ only
end
local A = lt.tensor{{1, 2}, {3, 4}}
close((s * A):get(2, 2), 1.6)
close((A * s):get(1, 2), 0.8)
close((A / s):get(1, 1), 2.5)
close((s + A - s):get(2, 1), 3)
close((A ^ s):get(2, 2), 4 ^ 0.4)
close((s ^ A):get(1, 2), 0.16)
local D = lt.diag{1, 2}
assert(lt.type(s * D) == "diag")
close((D / s):dense():get(2, 2), 5)
close((s + D):dense():get(1, 2), 0.4)
close(lt.identity(2, s):dense():get(1, 1), 0.4)
close(lt.full({2}, s):sum(), 0.8)
close(A:add_jitter(s):get(1, 1), 1.4)
local x = lt.tensor{{0.1}, {0.5}}
local K = lt.kernel(x, {kind = "rbf", lengthscale = s, variance = lt.tensor(2)})
close(K:params().lengthscale, 0.4)
close(K:get(1, 1), 2)
close(lt.item(lt.tensor{{7}}), 7)
close(lt.diag{5}:item(), 5)
assert(not pcall(function() return A ^ A end))
assert(not pcall(function() return A / A end))
assert(not pcall(function() return s < A end))
assert(not pcall(function() return A:item() end))
assert(not pcall(lt.solve, A, s))
