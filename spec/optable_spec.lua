-- The operation table seen from Lua: every operation is lt.<op> and A:<op>
-- with the arguments and results its row gives (extra arguments, per-call
-- settings, several results, info), lt.call runs any of them by name the
-- same way, and a rule's results are checked by kind as well as by shape.
local lt = require "lazytensor"

local function message(f)
  local ok, err = pcall(f)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

local function collect()
  collectgarbage()
  collectgarbage()
end

local OPERATIONS = {"add", "sub", "mul", "matmul", "scale", "neg", "transpose", "dense",
  "diagonal", "trace", "get", "row", "add_diag", "solve", "inv_quad", "logdet", "inv_quad_logdet",
  "cholesky", "root", "root_inv", "eigh", "svd", "inverse", "equal"}

describe("the operation table", function()
  local S = lt.tensor{{4, 2}, {2, 3}}
  local b = lt.tensor{1, 2}

  it("gives every operation as a function and a method", function()
    local methods = getmetatable(S).__index
    for _, name in ipairs(OPERATIONS) do
      assert.equal("function", type(lt[name]), "lt." .. name)
      assert.equal("function", type(methods(S, name)), "A:" .. name)
    end
    assert.equal(lt.transpose, lt.t)
  end)

  it("passes each operation's extra argument", function()
    assert.same({{8, 4}, {4, 6}}, S:scale(2):totable())
    assert.equal(2, S:get(1, 2))
    assert.same({2, 3}, S:row(2):totable())
    assert.same({2, 6}, lt.row(lt.diag{1, 3} + S, 2):totable())
    local U = S:cholesky(true)
    assert.near(0, (U:t() * U - S):dense():norm(), 1e-12)
    assert.has_error(function() S:cholesky("upper") end,
      "lazytensor: cholesky: argument #2: expected a boolean, got string")
    assert.matches("row: index 3 out of range", message(function() return S:row(3) end), 1, true)
    assert.matches("row: argument #2: expected an index", message(function() return S:row(0) end),
      1, true)
  end)

  it("returns several results and info where the row says so", function()
    local w, Q, info = S:eigh()
    assert.equal(2, w:numel())
    assert.same({2, 2}, Q:shape())
    assert.equal("table", type(info))
    local q, ld, info2 = S:inv_quad_logdet(b)
    assert.equal("number", type(q))
    assert.near(math.log(8), ld, 1e-12)
    assert.equal("table", type(info2))
    assert.is_true(lt.equal(S, S:clone()))
    assert.is_false(S:equal(S:t() + lt.tensor{{0, 1}, {0, 0}}))
    assert.is_false(lt.equal(S, lt.ones(3)))
  end)

  it("runs every operation through lt.call with the same arguments", function()
    assert.same(lt.scale(S, 3):totable(), lt.call("scale", S, 3):totable())
    assert.equal(3, lt.call("get", S, 2, 2))
    assert.same({2, 3}, lt.call("row", S, 2):totable())
    local x, info = lt.call("solve", S, b, {max_cholesky_size = 10})
    assert.near(0, (S * x - b):norm(), 1e-12)
    assert.equal("table", type(info))
    local w, Q = lt.call("eigh", S)
    assert.near(0, (S * Q - Q * lt.diag(w)):dense():norm(), 1e-12)
    assert.is_true(lt.call("equal", S, S))
    assert.matches("lazytensor: add: missing the second operand",
      message(function() return lt.call("add", S) end), 1, true)
    assert.matches("lazytensor: scale: the factor must be a number, got n",
      message(function() return lt.call("scale", S) end), 1, true) -- "got no value" / "got nil"
  end)

  it("turns numbers and tables into tensors for every operand", function()
    assert.same({{2}}, lt.cholesky{{4}}:dense():totable())
    assert.near(math.log(2), lt.logdet{{2}}, 1e-15)
    assert.same({{1}, {2}}, lt.t{{1, 2}}:totable())
    local x = lt.solve({{2, 0}, {0, 2}}, {1, 2}):totable() -- by Cholesky: 1/√2/√2
    assert.near(0.5, x[1], 1e-15)
    assert.near(1, x[2], 1e-15)
  end)
end)

describe("a Lua rule's results", function()
  -- The rules answer only while `active`: they stay registered for the
  -- other specs, and must not change them.
  local active = false
  local lazy = lt.diag{1, 2}
  for _, op in ipairs{"dense", "diagonal", "row", "solve", "eigh", "svd", "root"} do
    lt.implements(op, "operator", function()
      if not active then return lt.NotImplemented end
      if op == "eigh" then return lazy, lt.eye(2) end
      if op == "svd" then return lt.eye(2), lazy, lt.eye(2) end
      if op == "root" then return lt.ones(3, 1) end
      return lazy
    end)
  end
  local A = lt.operator{shape = {2, 2}, matmul = function(X) return X * 2 end, symmetric = true,
                        psd = true}

  local function refused(f, text)
    collect()
    local before = lt.memory()
    active = true
    local ok, err = pcall(f)
    active = false
    assert.is_false(ok, "a lazy result where a dense one is required was accepted")
    assert.matches(text, tostring(err), 1, true)
    err = nil -- luacheck: ignore 311 (dropped for the collector)
    collect()
    assert.equal(before, lt.memory(), "memory leaked")
    assert.same({{2, 0}, {0, 2}}, A:dense():totable())
  end

  it("must be dense where the operation promises a dense tensor", function()
    local want = 'a rule returned a lazy "diag" where a dense tensor is required'
    refused(function() return A:dense() end, "lazytensor: dense: " .. want)
    refused(function() return A:diagonal() end, "lazytensor: diagonal: " .. want)
    refused(function() return A[1] end, "lazytensor: row: " .. want)
    refused(function() return A:solve(lt.ones(2)) end, "lazytensor: solve: " .. want)
    refused(function() return A:eigh() end, "lazytensor: eigh: " .. want .. " (result 1 of 2)")
    refused(function() return A:svd() end, "lazytensor: svd: " .. want .. " (result 2 of 3)")
  end)

  it("are refused before a caller reads their entries (once a crash)", function()
    -- generic inv_quad reads the solve's entries; kron + σI solves through
    -- its factors' eigenvalues
    refused(function() return A:inv_quad(lt.ones(2)) end, "solve: a rule returned a lazy")
    refused(function() return (lt.kron(A, lt.psd(lt.eye(2))) + lt.identity(4, 0.5)):solve(lt.ones(4)) end,
      "eigh: a rule returned a lazy")
    refused(function() return A:root() end, "root: a rule returned 3x1, expected 2xk")
  end)
end)
