-- Diagonal, identity and structured rules under allocation failure.
local lt = require "lazytensor"
local function close(a, b) assert(math.abs(a - b) < 1e-9, tostring(a) .. " vs " .. tostring(b)) end

local d = lt.diag{1, 2, 3}
local e = lt.diag(lt.tensor{4, 5, 6})
assert(lt.type(d + e) == "diag")
assert(lt.type(d * e) == "diag")
assert(lt.type(2 * d) == "diag")
close((d * e):trace(), 4 + 10 + 18)
local A = lt.tensor{{2, 1, 0}, {1, 3, 1}, {0, 1, 4}}
local s = d + A
close(s:get(2, 2), 5)
local p = d * A
close(p:get(3, 3), 12)
close((A * d):dense():get(1, 2), 2)
local I = lt.identity(3, 2)
close((I + d):diagonal()[3], 5)
-- Linear algebra on dense matrices may not be there yet: probe once.
local HAVE_LINALG = pcall(function() return lt.eye(2):solve(lt.ones(2)) end)
if HAVE_LINALG then
close(d:logdet(), math.log(6))
local x = d:solve(lt.tensor{1, 2, 3})
close(x[3], 1)
local L = lt.cholesky(d)
close(L:dense():get(2, 2), math.sqrt(2))
close(d:inv_quad(lt.tensor{1, 1, 1}), 1 + 0.5 + 1 / 3)
close(lt.psd(A):logdet(), math.log(18))
local y = lt.psd(A):solve(lt.tensor{2, 1, 0})
close(y[1], 1)
end
if lt.triangular then
  local tri = lt.triangular(A, "lower")
  close(tri:get(1, 2), 0)
  close(tri:dense():get(2, 1), 1)
end
close(d:t():get(3, 3), 3)
close(d:add_diag(1):get(1, 1), 2)
close(d:add_jitter(0.5):get(2, 2), 2.5)
if HAVE_LINALG then
close(d:inverse():dense():get(2, 2), 0.5)
close(d[2][2], 2)
local w = A:eigh()
close(w:sum(), 9)
local sv = select(2, d:svd())
close(sv[1], 3)
end
assert(tostring(d):find("diag"))
