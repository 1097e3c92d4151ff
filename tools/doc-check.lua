-- Checks doc/lazytensor.luadoc against the module it documents (make doc,
-- make lint): every function of the module and every tensor method must be
-- documented (an error otherwise); a documented function the module does not
-- have yet is reported as a warning (API.md may promise it before it lands).
-- Run from the repository root with the module on LUA_CPATH.
local lt = require "lazytensor"

local f = assert(io.open("doc/lazytensor.luadoc"))
local text = f:read("*a")
f:close()

local documented, documented_methods = {}, {}
for name in text:gmatch("@function ([%w_:]+)") do
  local method = name:match("^tensor:([%w_]+)$")
  if method then documented_methods[method] = true else documented[name] = true end
end
for name in text:gmatch("@field ([%w_]+)") do documented[name] = true end
for name in text:gmatch("@table ([%w_]+)") do documented[name] = true end

local errors, warnings = {}, {}
local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- The module's functions and fields (private ones start with "_" but _VERSION).
for _, name in ipairs(sorted_keys(lt)) do
  if (name:sub(1, 1) ~= "_" or name == "_VERSION") and not documented[name] then
    errors[#errors + 1] = "lt." .. name .. " is not documented"
  end
end
-- The methods: the third upvalue of the tensor metatable's __index.
local index = getmetatable(lt.zeros(1)).__index
local _, methods = debug.getupvalue(index, 3)
assert(type(methods) == "table", "doc-check: cannot find the methods table")
for _, name in ipairs(sorted_keys(methods)) do
  if not documented[name] and not documented_methods[name] then
    errors[#errors + 1] = "method :" .. name .. " is not documented"
  end
end
-- Documented but missing (lt[name] also loads lazy submodule fields).
for _, name in ipairs(sorted_keys(documented)) do
  if name ~= "metamethods" and lt[name] == nil then
    warnings[#warnings + 1] = "lt." .. name .. " is documented but not in the module (yet)"
  end
end
for _, name in ipairs(sorted_keys(documented_methods)) do
  if methods[name] == nil then
    errors[#errors + 1] = "method :" .. name .. " is documented but missing"
  end
end

for _, w in ipairs(warnings) do print("doc-check: warning: " .. w) end
for _, e in ipairs(errors) do print("doc-check: error: " .. e) end
print(("doc-check: %d documented functions, %d methods; %d errors, %d warnings"):format(
  #sorted_keys(documented), #sorted_keys(documented_methods), #errors, #warnings))
os.exit(#errors == 0 and 0 or 1)
