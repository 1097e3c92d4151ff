-- luacheck configuration (make lint). The library's Lua code runs on Lua
-- 5.1, 5.2, 5.3, 5.4 and LuaJIT, so the standard is "max" (the union of
-- their globals): version-specific functions must be reached through
-- guards such as `table.unpack or unpack`, which the specs check by running
-- on every version.
std = "max"
max_line_length = 100
codes = true

-- busted's globals in the specs (describe, it, assert, spy, ...); spec
-- lines may run longer (tables of expected values, messages).
files["spec/"] = { std = "max+busted", max_line_length = 120 }
-- Support code of the specs may be loaded outside busted too.
files["spec/support/"] = { std = "max+busted", max_line_length = 120 }

-- The embedding example's script runs in a host that provides `host`.
files["examples/embed/"] = { read_globals = { "host" } }

-- The luarocks test driver hands busted its arguments through `arg`.
files["tools/luarocks-test.lua"] = { globals = { "arg" } }

exclude_files = { "build/", ".luarocks-test/", "doc/api/" }
