-- tools/busted-tap.lua — busted's TAP output (busted -o tools/busted-tap.lua),
-- except that a skipped test's line names the test and its reason:
--   ok 12 - # SKIP close specs frees at scope end: needs Lua 5.4 (this is Lua 5.1)
-- (busted's own TAP handler prints the reason alone, or the name alone).
-- tools/run-tests.sh counts and lists these lines. Loaded by busted under
-- every supported Lua, so it sticks to what Lua 5.1 has.
return function(options)
  local busted = require "busted"
  local handler = require "busted.outputHandlers.base"()
  local counter = 0

  local function line(s)
    io.write(s, "\n")
  end

  local function one_line(s)
    return (tostring(s):gsub("%s*\n%s*", " "))
  end

  handler.suiteReset = function()
    counter = 0
    return nil, true
  end

  handler.suiteEnd = function()
    line("1.." .. counter)
    io.flush()
    return nil, true
  end

  local function show_failure(t)
    local message = t.message
    if message == nil then
      message = "Nil error"
    elseif type(message) ~= "string" then
      message = require("pl.pretty").write(message)
    end
    line(("not ok %u - %s"):format(counter, t.name))
    local trace = t.element.trace
    if trace and trace.short_src then
      line("# " .. trace.short_src .. " @ " .. tostring(trace.currentline))
    end
    line("# Failure message: " .. message:gsub("\n", "\n# "))
    if options.verbose and t.trace and t.trace.traceback then
      line("# " .. t.trace.traceback:gsub("^\n", "", 1):gsub("\n", "\n# "))
    end
  end

  handler.testEnd = function(_, _, status)
    counter = counter + 1
    if status == "success" then
      line(("ok %u - %s"):format(counter, handler.successes[#handler.successes].name))
    elseif status == "pending" then
      local t = handler.pendings[#handler.pendings]
      local why = (t.message and t.message ~= t.name) and ": " .. one_line(t.message) or ""
      line(("ok %u - # SKIP %s%s"):format(counter, one_line(t.name), why))
    elseif status == "failure" then
      show_failure(handler.failures[#handler.failures])
    elseif status == "error" then
      show_failure(handler.errors[#handler.errors])
    end
    io.flush()
    return nil, true
  end

  -- Errors outside a test (in a describe block, a setup, loading a file).
  handler.error = function(element)
    if element.descriptor ~= "it" then
      counter = counter + 1
      show_failure(handler.errors[#handler.errors])
    end
    io.flush()
    return nil, true
  end

  busted.subscribe({"suite", "reset"}, handler.suiteReset)
  busted.subscribe({"suite", "end"}, handler.suiteEnd)
  busted.subscribe({"test", "end"}, handler.testEnd, {predicate = handler.cancelOnPending})
  busted.subscribe({"error"}, handler.error)

  return handler
end
