--- Checking option tables of the pure-Lua modules (data, interp, svg): every
-- key a known option, every value of an expected type, as the C module's
-- per-call settings and definition tables are checked. A misspelt option
-- is an error naming it instead of a default silently used.
--
--   local options = require "lazytensor.options"
--   opts = options.check("read_csv", opts, {sep = "string", header = "boolean"})
--
-- `spec` maps each option's name to the Lua types its value may have, one
-- type name or several separated by "|" ("number|table"), or "any". nil is
-- always allowed: an absent option. Errors read
-- "lazytensor: <fname>: unknown option 'x' (expected a, b or c)" and
-- "lazytensor: <fname>: option sep must be a string, got number".

local options = {}

local function sorted_names(spec)
  local names = {}
  for name in pairs(spec) do names[#names + 1] = name end
  table.sort(names)
  return names
end

local function listing(names)
  if #names == 1 then return names[1] end
  return table.concat(names, ", ", 1, #names - 1) .. " or " .. names[#names]
end

local function allows(types, value)
  if types == "any" then return true end
  for t in types:gmatch("[^|]+") do
    if type(value) == t then return true end
  end
  return false
end

--- Checks opts (nil: no options) against spec and returns it (or a new
-- empty table for nil).
function options.check(fname, opts, spec)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error(string.format("lazytensor: %s: options must be a table, got %s", fname, type(opts)), 0)
  end
  for key, value in pairs(opts) do
    local types = spec[key]
    if types == nil then
      error(string.format("lazytensor: %s: unknown option '%s' (expected %s)", fname,
        tostring(key), listing(sorted_names(spec))), 0)
    end
    if not allows(types, value) then
      error(string.format("lazytensor: %s: option %s must be a %s, got %s", fname, key,
        types:gsub("|", " or "), type(value)), 0)
    end
  end
  return opts
end

return options
