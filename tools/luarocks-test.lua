-- Run by `luarocks test` (the rockspec's test command) with luarocks'
-- interpreter, from the checkout: the busted suite, in this process,
-- against the module `luarocks make` left in the root (built for this same
-- interpreter) and the checkout's Lua files. Extra arguments go to busted.
--   luarocks make --lua-version=5.4 rockspec/lazytensor-scm-1.rockspec
--   luarocks test --lua-version=5.4 rockspec/lazytensor-scm-1.rockspec [-- busted options]
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath

local args = { [0] = "busted" }
for i = 1, select("#", ...) do args[#args + 1] = select(i, ...) end
if #args == 0 then args[1] = "spec" end
arg = args -- busted's runner reads the global arg

require "busted.runner" ({ standalone = false })
