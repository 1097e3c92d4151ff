-- The seed example: lazy structure and dense tensors mixed through one
-- registry. Run from the repository root with `make demo`.
local lt = require "lazytensor"

local function section(title)
  print(("\n== %s"):format(title))
end

local function show(label, x)
  print(("%s  (lt.type: %s)"):format(label, lt.type(x)))
  print(lt.is_lazy(x) and x:dense() or x)
end

section("A diagonal and a dense matrix, added in both orders")
local d = lt.diag{1, 2, 3}
local T = lt.tensor{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}
show("d + T", d + T)
show("T + d", T + d)
print("Both orders reach the same rule: it is registered symmetrically, so")
print("T + d works the way __radd__ does in Python; the result is dense.")

section("Structure is kept where it can be")
show("lt.cholesky(lt.diag{4, 9, 16}) stays diagonal", lt.cholesky(lt.diag{4, 9, 16}))
show("diag + diag stays diagonal", d + lt.diag{10, 20, 30})
show("2 * diag stays diagonal", 2 * d)
local L = lt.tensor{{4, 2}, {2, 5}}:cholesky()
show("the Cholesky factor of a dense matrix is a triangular operator", L)

section("How add(diag, diag) is resolved before any user rule")
print((lt.explain("add", d, d):gsub("\n$", "")))

section("A user rule overriding the built-in diag + diag")
local calls = 0
lt.implements("add", "diag", "diag", function(a, _)
  calls = calls + 1
  print(("  [user rule] diag + diag on %dx%d operands"):format(a:size(1), a:size(2)))
  -- hand the actual work back to the rule registered before this one
  return lt.NotImplemented
end)
local s = d + lt.diag{10, 20, 30}
show("d + diag{10, 20, 30}", s)
print(("The user rule ran %d time(s), then answered NotImplemented,"):format(calls))
print("so the built-in rule computed the (still diagonal) result.")

section("The same call explained after the registration")
print((lt.explain("add", d, d):gsub("\n$", "")))
