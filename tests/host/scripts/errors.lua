-- Bad input under allocation failure: every error is a lazytensor one (or a
-- memory error), and the state stays usable afterwards.
local lt = require "lazytensor"
local function close(a, b) assert(math.abs(a - b) < 1e-9, tostring(a) .. " vs " .. tostring(b)) end
local function expect_error(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error")
  err = tostring(err)
  if err:find("not enough memory") then error(err, 0) end
  -- "lazytensor:" first, after the caller's position when there is one
  if not (err:find("^lazytensor:") or err:find("^[^\n]-:%d+: lazytensor:")) then
    error("unexpected error: " .. err, 0)
  end
end

expect_error(lt.zeros, 2^40, 2^40)
expect_error(lt.zeros, -1)
expect_error(lt.zeros, 1.5)
expect_error(lt.tensor, {{1, 2}, {3}})
expect_error(lt.tensor, {{1, "x"}})
expect_error(function() return lt.tensor{{1, 2}} + lt.tensor{{1, 2, 3}} end)
expect_error(function() return lt.tensor{{1, 2}} * lt.tensor{{1, 2}} end)
expect_error(function() return lt.eye(2)[3] end)
expect_error(function() return lt.eye(2):get(0, 1) end)
expect_error(function() return lt.diag{1, -1}:cholesky() end)
expect_error(function() return lt.tensor{{1, 2}, {2, 1}}:cholesky() end)
expect_error(function() return lt.zeros(2, 2):solve(lt.ones(2)) end)
expect_error(function() return lt.eye(2):logdet(lt.ones(2)) end)
expect_error(function() return lt.eye(2) + "x" end)
expect_error(function() return lt.eye(2):narrow(1, 2, 5) end)
expect_error(function() return lt.eye(2):reshape(3) end)
-- `local x <close>` is 5.4 syntax: compiled from a string, so that the
-- script still loads on older Lua versions.
local use_after_close = _VERSION >= "Lua 5.4" and load([[
  local lt = ...
  local t = lt.eye(2)
  do local c <close> = t end
  return t + 1
]])
if use_after_close then expect_error(use_after_close, lt) end
expect_error(function()
  local t = lt.eye(2)
  t:free()
  return t + 1
end)
close((lt.eye(2) * 3):sum(), 6)
