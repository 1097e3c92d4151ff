-- script.lua — run by examples/embed/host.c, which provides the global
-- `host`: host.tridiag(n, a, b) makes a C-defined "tridiag" operator,
-- host.check(ok, what) records a check, host.bytes() reads the host's
-- allocator count, host.type_of(t) asks C for a tensor's type.
local lt = require "lazytensor"
local check = host.check

local function close(a, b, tol)
  return math.abs(a - b) <= (tol or 1e-10) * math.max(1, math.abs(b))
end

-- The same tridiagonal matrix, dense, for comparisons.
local function dense_tridiag(n, a, b)
  local t = lt.zeros(n, n)
  for i = 1, n do
    t:set(i, i, a)
    if i > 1 then t:set(i, i - 1, b) end
    if i < n then t:set(i, i + 1, b) end
  end
  return t
end

local n = 6
local T = host.tridiag(n, 2, -1)
local D = dense_tridiag(n, 2, -1)
check(lt.is_tensor(T) and lt.is_lazy(T), "a C-created tensor is a Lua tensor")
check(lt.type(T) == "tridiag", "lt.type names the C type")
check(host.type_of(T) == "tridiag", "ltb_lua_totensor reads it back in C")
check(T:is_symmetric() == true, "the C constructor's property flags")
check((T:dense() - D):norm() < 1e-12, "dense() through the C descriptor")
check(T:get(2, 3) == -1 and T:get(1, 3) == 0, "entries through the C descriptor")

-- The C rule keeps the structure; lt.explain names it.
local S = T + T
check(lt.type(S) == "tridiag", "tridiag + tridiag uses the C rule")
check((S:dense() - 2 * D):norm() < 1e-12, "the C rule's values")
check(lt.explain("add", T, T):find("tridiag + tridiag (C)", 1, true) ~= nil,
      "lt.explain shows the C rule")

-- Everything else comes from the generic rules, built on the C matmul.
-- (Skipped, with a note, while the library has no solver for the path.)
local function unless_missing(what, f)
  local ok, err = pcall(f)
  if ok then return end
  if tostring(err):find("not implemented", 1, true) then
    print("skipped: " .. what .. " (" .. tostring(err) .. ")")
  else
    check(false, what .. ": " .. tostring(err))
  end
end
local b = lt.tensor{1, 2, 3, 4, 5, 6}
unless_missing("solve", function()
  local x = T:solve(b)
  check((T * x - b):norm() < 1e-9, "solve through the generic path")
end)
unless_missing("logdet", function()
  check(close(T:logdet(), D:logdet(), 1e-9), "logdet agrees with the dense matrix")
end)
check(lt.type(T + D) == "dense" or lt.is_tensor(T + D), "mixing with dense operands")

-- A Lua rule for the C type: the registry is shared by both sides.
lt.implements("diagonal", "tridiag", function(t)
  return lt.full({t:size(1)}, t:get(1, 1))
end)
check(lt.explain("diagonal", T):find("Lua rule", 1, true) ~= nil, "a Lua rule on the C type")
check((T:diagonal() - lt.full({n}, 2)):norm() == 0, "the Lua rule answers")

-- The library allocates through the host's allocator: the host's count
-- moves by the library's bytes plus Lua's own (the binding may run a
-- collector step while the tensor is made, which frees Lua garbage).
collectgarbage()
local lib0, host0, lua0 = lt.memory(), host.bytes(), collectgarbage("count") * 1024
check(lib0 <= host0, "lt.memory() <= the host's count")
local big = lt.zeros(400, 300)
local dlib, dhost = lt.memory() - lib0, host.bytes() - host0
local dlua = collectgarbage("count") * 1024 - lua0
check(dlib >= 400 * 300 * 8, "lt.memory() counts the new tensor")
check(dhost == dlib + dlua, "the host's count grows as lt.memory() plus Lua's own count")
big:free()
check(lt.memory() == lib0, "free() returns the library's bytes at once")
