-- Bad input raises "lazytensor: <op>: ..." errors and leaves the state usable.
local lt = require "lazytensor"

local function message(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

-- The error's message starts with "lazytensor:" (after Lua's position
-- prefix) and contains the expected text.
local function raises(expected, f, ...)
  local err = message(f, ...)
  assert.truthy(err:find("lazytensor: ", 1, true), "no lazytensor: prefix in: " .. err)
  assert.truthy(err:find(expected, 1, true), ("expected %q in: %s"):format(expected, err))
  -- and the state is usable afterwards
  assert.same({{2, 2}, {3, 6}}, (lt.diag{1, 2} + lt.tensor{{1, 2}, {3, 4}}):totable())
end

describe("errors", function()
  it("shape mismatches", function()
    raises("add: shapes differ (2x2 and 3x3)",
      function() return lt.diag{1, 2} + lt.diag{1, 2, 3} end)
    raises("matmul: inner dimensions differ (1x2 and 1x2)",
      function() return lt.tensor{{1, 2}} * lt.tensor{{1, 2}} end)
    raises("matmul: inner dimensions differ (2x2 and 3)",
      function() return lt.diag{1, 2} * lt.tensor{1, 2, 3} end)
    raises("solve: right-hand side does not conform (2x2 and 3)",
      function() return lt.diag{1, 2}:solve(lt.tensor{1, 2, 3}) end)
    raises("logdet: expected a square matrix, got 3x2",
      function() return lt.tensor{{1, 2}, {3, 4}, {5, 6}}:logdet() end)
    raises("cholesky: expected a square matrix, got 3x2",
      function() return lt.tensor{{1, 2}, {3, 4}, {5, 6}}:cholesky() end)
    raises("do not broadcast", function() return lt.tensor{1, 2} + lt.tensor{1, 2, 3} end)
    raises("transpose: expected a matrix, got 1-d", function() return lt.tensor{1, 2}:t() end)
  end)

  it("wrong types", function()
    raises("add: argument #1: expected a tensor, a number or a table, got string",
      function() return lt.add("x", lt.tensor{1}) end)
    raises("div: can only divide by a number",
      function() return lt.diag{1, 2} / lt.diag{1, 2} end)
    raises("triangular: expected a square dense matrix",
      function() return lt.triangular(lt.diag{1, 2}) end)
    raises("diag: expected a 1-d dense tensor", function() return lt.diag(lt.tensor(2)) end)
  end)

  it("ragged and non-numeric tables", function()
    raises("tensor: ragged table", function() return lt.tensor{{1, 2}, {3}} end)
    raises("tensor: element 2 at depth 1 is a string", function() return lt.tensor{1, "a"} end)
  end)

  it("bad sizes", function()
    raises("zeros: a size must be a non-negative integer, got -1",
      function() return lt.zeros(-1) end)
    raises("zeros: a size must be a non-negative integer, got 1.5",
      function() return lt.zeros(1.5) end)
  end)

  it("bad indices", function()
    local v = lt.tensor{1, 2}
    raises("index: index 0 out of range (1..2)", function() return v[0] end)
    raises("index: index 3 out of range (1..2)", function() return v[3] end)
    raises("index: index must be an integer, got 1.5", function() return v[1.5] end)
    raises("get: index 3 out of range (1..2)", function() return lt.diag{1, 2}:get(3, 1) end)
    raises("get: index must be an integer, got 1.5",
      function() return lt.diag{1, 2}:get(1.5, 1) end)
    raises("get: 1 indices for a 2-d tensor", function() return lt.eye(2):get(1) end)
    raises("index: index 0 out of range", function() return lt.diag{1, 2}[0] end)
    raises("newindex: cannot assign into a diag operator",
      function() local d = lt.diag{1, 2}; d[1] = 3 end)
  end)

  it("not positive definite, singular, NaN", function()
    raises("cholesky: matrix is not positive definite",
      function() return lt.tensor{{1, 2}, {2, 1}}:cholesky() end)
    raises("cholesky: matrix is not positive definite",
      function() return lt.diag{1, -1}:cholesky() end)
    raises("cholesky: matrix has NaN or infinite entries",
      function() return lt.tensor{{1, 0 / 0}, {0 / 0, 1}}:cholesky() end)
    raises("solve: matrix has NaN or infinite entries",
      function() return lt.tensor{{1, 0}, {0, math.huge}}:solve(lt.tensor{1, 1}) end)
    raises("eigh: matrix has NaN or infinite entries",
      function() return lt.tensor{{0 / 0, 0}, {0, 1}}:eigh() end)
    raises("solve: matrix is singular",
      function() return lt.tensor{{1, 1}, {1, 1}}:solve(lt.tensor{1, 2}) end)
    raises("solve: matrix is singular", function() return lt.diag{0, 1}:solve(lt.tensor{1, 2}) end)
  end)

  it("closed and freed tensors", function()
    -- (`local t <close>` is Lua 5.4 syntax: spec/close_spec.lua covers it;
    -- here free() closes the tensor the same way on every Lua.)
    local kept = lt.tensor{1, 2}
    assert.equal(3, kept:sum())
    kept:free()
    raises("sum: argument #1: the tensor was freed (closed)", function() return kept:sum() end)
    raises("add: argument #1: the tensor was freed (closed)", function() return kept + 1 end)
    local f = lt.diag{1, 2}
    f:free()
    raises("the tensor was freed (closed)", function() return f:logdet() end)
    raises("the tensor was freed (closed)", function() return lt.tensor{{1, 0}, {0, 1}} * f end)
    raises("free: argument #1: the tensor was freed (closed)", function() f:free() end)
  end)

  it("freeing releases memory", function()
    collectgarbage()
    local before = lt.memory()
    local big = lt.zeros(500, 500)
    assert.equal(250000, big:numel())
    assert.is_true(lt.memory() - before >= 500 * 500 * 8)
    big:free()
    assert.is_true(lt.memory() - before < 500 * 500 * 8)
  end)

  it("bad settings", function()
    raises("settings: cholesky_jitter must be at least 0 (got -1)",
      function() lt.settings.cholesky_jitter = -1 end)
    raises("settings: max_cg_iterations must be an integer",
      function() lt.settings.max_cg_iterations = 1.5 end)
    raises("settings: unknown setting 'nope'", function() lt.settings.nope = 1 end)
    raises("settings: unknown setting 'nope'", function() return lt.settings.nope end)
    raises("settings: cholesky_max_tries must be a number, got string",
      function() lt.settings.cholesky_max_tries = "x" end)
    raises("manual_seed: the seed must be an integer", function() lt.manual_seed(1.5) end)
    assert.equal(1e-8, lt.settings.cholesky_jitter)
  end)

  it("unknown operations", function()
    raises("unknown operation 'frobnicate'",
      function() return lt.explain("frobnicate", lt.eye(2)) end)
  end)
end)
