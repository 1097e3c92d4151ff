-- spec/support/slow.lua — specs that take minutes of CPU (large GPs,
-- n = 3000 log-determinants) run in the default Lua's full `make test`;
-- CI runs the other Luas and the sanitizer build with LT_SKIP_SLOW=1, where
-- they are not defined at all (so they are neither passes nor skips) and a
-- "# not run: <file>: <name>" note says so (tools/run-tests.sh lists them).
--
--   local slow_it = require("support.slow")(it)
--   slow_it("fits n = 5000 points", function() ... end)
return function(it)
  if os.getenv("LT_SKIP_SLOW") ~= "1" then return it end
  return function(name)
    local where = debug.getinfo(2, "S").short_src
    io.write(("# not run: %s: %s (slow; LT_SKIP_SLOW=1)\n"):format(where, name))
  end
end
