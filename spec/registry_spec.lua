-- The registry: resolution order, NotImplemented, overriding built-ins,
-- lt.explain, errors raised by Lua rules. Rules registered here can never
-- be removed, so those on built-in keys stay inert unless a flag is set.
local lt = require "lazytensor"

local function message(f)
  local ok, err = pcall(f)
  assert.is_false(ok, "expected an error")
  return err
end

describe("registry", function()
  local d = lt.diag{1, 2}
  local T = lt.tensor{{1, 2}, {3, 4}}

  it("resolves exact → (a, any) → (any, b) → (any, any)", function()
    local log = {}
    local function recorder(name, answer)
      return function(a, b)
        log[#log + 1] = name
        assert.equal("diag", lt.type(a))
        assert.equal("dense", lt.type(b))
        if answer then return answer end
        return lt.NotImplemented
      end
    end
    -- registered in an order unrelated to the resolution order
    lt.implements("probe_order", "any", "dense", recorder("any_b"))
    lt.implements("probe_order", "any", "any", recorder("any_any", lt.tensor{42}))
    lt.implements("probe_order", "diag", "dense", recorder("exact"))
    lt.implements("probe_order", "diag", "any", recorder("a_any"))
    local r = lt.call("probe_order", d, T)
    assert.same({"exact", "a_any", "any_b", "any_any"}, log)
    assert.same({42}, r:totable())
  end)

  it("stops at the first rule that answers", function()
    local log = {}
    lt.implements("probe_stop", "any", "any", function()
      log[#log + 1] = "generic"
      return lt.tensor{0}
    end)
    lt.implements("probe_stop", "diag", "any", function()
      log[#log + 1] = "diag"
      return lt.tensor{1}
    end)
    assert.same({1}, lt.call("probe_stop", d, T):totable())
    assert.same({"diag"}, log)
    -- another type skips the diag rule
    assert.same({0}, lt.call("probe_stop", T, T):totable())
    assert.same({"diag", "generic"}, log)
  end)

  it("tries a later registration for the same key first", function()
    local log = {}
    lt.implements("probe_later", "diag", function()
      log[#log + 1] = "first"
      return lt.tensor{1}
    end)
    lt.implements("probe_later", "diag", function()
      log[#log + 1] = "second"
      return lt.NotImplemented
    end)
    assert.same({1}, lt.call("probe_later", d):totable())
    assert.same({"second", "first"}, log)
  end)

  it("fails when every candidate hands the call on", function()
    lt.implements("probe_none", "diag", function() return lt.NotImplemented end)
    local err = message(function() return lt.call("probe_none", d) end)
    assert.matches("lazytensor: probe_none: not implemented for diag", err, 1, true)
  end)

  it("lets a user rule override a built-in (diag + diag)", function()
    local active, calls = false, 0
    lt.implements("add", "diag", "diag", function(a, b)
      if not active then return lt.NotImplemented end
      calls = calls + 1
      return lt.diag(a:diagonal() + b:diagonal() + 100)
    end)
    active = true
    local r = lt.diag{1, 2} + lt.diag{3, 4}
    assert.equal(1, calls)
    assert.equal("diag", lt.type(r))
    assert.same({104, 106}, r:diagonal():totable())
    active = false
    assert.same({4, 6}, (lt.diag{1, 2} + lt.diag{3, 4}):diagonal():totable())
    assert.equal(1, calls)
    -- explain lists the user rule first, then the built-in, then the generic
    local text = lt.explain("add", d, d)
    local user = text:find("Lua rule for add", 1, true)
    local builtin = text:find("diag + diag (stays diag)", 1, true)
    local generic = text:find("generic add (lazy sum)", 1, true)
    assert.truthy(user and builtin and generic)
    assert.is_true(user < builtin and builtin < generic)
    assert.truthy(text:find("1. Lua rule for add", 1, true))
  end)

  it("explains the candidates in resolution order", function()
    local text = lt.explain("add", d, T)
    assert.truthy(text:find("^add%(diag, dense%):"))
    assert.truthy(text:find("1. diag + dense (dense result) [diag, dense]  <- runs first", 1, true))
    assert.is_true(text:find("diag + dense", 1, true) < text:find("generic add", 1, true))
    local mirrored = lt.explain("add", T, d)
    assert.truthy(mirrored:find("(operands swapped)", 1, true))
    local unary = lt.explain("cholesky", d)
    assert.truthy(unary:find("^cholesky%(diag%):"))
    assert.truthy(unary:find("diag cholesky (closed form)", 1, true))
    assert.is_true(unary:find("diag cholesky", 1, true) < unary:find("generic cholesky", 1, true))
  end)

  it("propagates a Lua rule's own error and stays usable", function()
    lt.implements("probe_boom", "diag", function() error("my rule failed") end)
    local err = message(function() return lt.call("probe_boom", d) end)
    assert.matches("my rule failed", tostring(err), 1, true)
    local obj = {code = 7}
    lt.implements("probe_boom_table", "diag", function() error(obj) end)
    assert.equal(obj, message(function() return lt.call("probe_boom_table", d) end))
    -- the state still works
    assert.same({4, 6}, (lt.diag{1, 2} + lt.diag{3, 4}):diagonal():totable())
    assert.same({{2, 2}, {3, 6}}, (d + T):totable())
  end)

  it("rejects a rule's result of the wrong shape", function()
    local active = false
    lt.implements("add", "identity", "identity", function()
      if not active then return lt.NotImplemented end
      return lt.tensor{{1}}
    end)
    active = true
    local err = message(function() return lt.identity(2) + lt.identity(2) end)
    active = false
    assert.matches("lazytensor: add: a rule returned 1x1, expected 2x2", tostring(err), 1, true)
    assert.equal("identity", lt.type(lt.identity(2) + lt.identity(2)))
  end)

  it("rejects a rule's result of the wrong kind", function()
    lt.implements("probe_kind", "diag", function() return "nonsense" end)
    local err = message(function() return lt.call("probe_kind", d) end)
    assert.matches("a Lua rule must return a tensor", tostring(err), 1, true)
  end)

  it("receives extra arguments (scale factor, indices)", function()
    local seen, active = nil, false
    lt.implements("get", "operator", function(a, i, j)
      if not active then return lt.NotImplemented end
      seen = {lt.type(a), i, j}
      return 99
    end)
    local op = lt.operator{shape = {2, 2}, matmul = function(X) return X end}
    active = true
    local v = op:get(2, 1)
    active = false
    assert.equal(99, v)
    assert.same({"operator", 2, 1}, seen)
    assert.equal(1, op:get(1, 1))
    local scale_seen
    lt.implements("scale", "identity", function(_, c)
      scale_seen = c
      return lt.NotImplemented
    end)
    assert.equal(6, (lt.identity(2, 2) * 3):get(1, 1))
    assert.equal(3, scale_seen)
  end)

  it("reports unknown operations and types", function()
    assert.matches("unknown operation 'no_such_op'",
      tostring(message(function() return lt.explain("no_such_op", d) end)), 1, true)
    assert.matches("unknown operation 'no_such_op'",
      tostring(message(function() return lt.call("no_such_op", d) end)), 1, true)
    assert.matches("lazytensor: implements: unknown type 'no_such_type'",
      tostring(message(function() lt.implements("add", "no_such_type", function() end) end)),
      1, true)
    assert.matches("lazytensor: implements: the last argument must be a function",
      tostring(message(function() lt.implements("add", "diag", "diag") end)), 1, true)
    assert.matches("lazytensor: add: missing the second operand",
      tostring(message(function() return lt.call("add", d) end)), 1, true)
  end)
end)
