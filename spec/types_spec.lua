-- lt.types() and the constructors made from the types' descriptors
-- (lua/bind_types.c): every type with a constructor is lt.<name>, takes
-- numbers and tables where a tensor is expected, and refuses what it does
-- not take with a "lazytensor: <name>:" error, leaving the state usable.
local lt = require "lazytensor"
local unpack = table.unpack or unpack -- luacheck: ignore

local function message(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

describe("lt.types", function()
  it("lists every type by id, dense first, each one lt.type can name", function()
    local types = lt.types()
    assert.equal("dense", types[1])
    local seen = {}
    for _, name in ipairs(types) do
      assert.is_nil(seen[name], "listed twice: " .. name)
      seen[name] = true
    end
    -- a value of every type the API contract names is among them
    for _, x in ipairs{lt.tensor{1}, lt.diag{1}, lt.identity(2), lt.triangular{{1}},
                       lt.lowrank{{1}}, lt.kron({{1}}, {{2}}), lt.blockdiag{{{1}}},
                       lt.toeplitz{1}, lt.chol{{1}}, lt.diag{1} + lt.diag{1, 2}:get(1, 1),
                       lt.constant(1, 1, 2)} do
      assert.is_true(seen[lt.type(x)], lt.type(x) .. " is not in lt.types()")
    end
  end)

  it("has a function for every type that has a constructor", function()
    local expected = {"diag", "identity", "triangular", "lowrank", "kron", "blockdiag", "toeplitz",
                      "chol", "submatrix", "constant", "kernel", "operator"}
    local listed = {}
    for _, name in ipairs(lt.types()) do listed[name] = true end
    for _, name in ipairs(expected) do
      assert.is_true(listed[name], name .. " is not a type")
      assert.equal("function", type(lt[name]), "lt." .. name)
    end
  end)
end)

describe("constructors from the descriptors", function()
  it("make their type from tensors, numbers and tables alike", function()
    local M = {{4, 1}, {1, 3}}
    local cases = {
      {"diag", lt.diag{1, 2}, {{1, 0}, {0, 2}}},
      {"identity", lt.identity(2, 3), {{3, 0}, {0, 3}}},
      {"triangular", lt.triangular(M, "upper"), {{4, 1}, {0, 3}}},
      {"lowrank", lt.lowrank{{1}, {2}}, {{1, 2}, {2, 4}}},
      {"kron", lt.kron({{1, 2}}, {{3}, {4}}), {{3, 6}, {4, 8}}},
      {"blockdiag", lt.blockdiag{{{1}}, {{2}}}, {{1, 0}, {0, 2}}},
      {"toeplitz", lt.toeplitz{1, 2}, {{1, 2}, {2, 1}}},
      {"chol", lt.chol{{2, 0}, {1, 1}}, {{4, 2}, {2, 2}}},
      {"submatrix", lt.submatrix(M, {2, 1}), {{3, 1}, {1, 4}}},
      {"constant", lt.constant(2, 3, 1.5), {{1.5, 1.5, 1.5}, {1.5, 1.5, 1.5}}},
    }
    for _, c in ipairs(cases) do
      local name, A, want = c[1], c[2], c[3]
      assert.equal(name, lt.type(A))
      assert.same(want, A:dense():totable(), name)
    end
  end)

  it("takes a trailing nil as an absent argument, and ignores extra ones as Lua does", function()
    assert.equal("toeplitz", lt.type(lt.toeplitz({1, 2}, nil)))
    assert.same({{1, 0}, {0, 1}}, lt.identity(2, nil):dense():totable())
    local L, info = lt.tensor{{4, 2}, {2, 5}}:cholesky()
    assert.equal("table", type(info))
    assert.same({{4, 2}, {2, 5}}, lt.chol(L, info):dense():totable())
    assert.same({{1, 0}, {0, 2}}, lt.diag({1, 2}, "ignored"):dense():totable())
  end)

  it("names the operation and the argument in every error", function()
    local cases = {
      {"^lazytensor: lowrank: missing the factor U", lt.lowrank},
      {"^lazytensor: identity: the size must be a non%-negative integer, got %-1", lt.identity, -1},
      {"^lazytensor: identity: the scale must be a number, got string", lt.identity, 2, "x"},
      {"^lazytensor: constant: missing the value", lt.constant, 2, 2},
      {"^lazytensor: triangular: expected \"lower\" or \"upper\" for the triangle, got left",
       lt.triangular, lt.eye(2), "left"},
      {"^lazytensor: triangular: expected \"lower\" or \"upper\" for the triangle, got number",
       lt.triangular, lt.eye(2), 1},
      {"^lazytensor: kron: needs at least one factor", lt.kron},
      {"^lazytensor: kron: factor 2: expected a tensor or a table of numbers, got boolean",
       lt.kron, lt.eye(2), true},
      {"^lazytensor: blockdiag: expected a table of blocks", lt.blockdiag, lt.eye(2)},
      {"^lazytensor: blockdiag: needs at least one block", lt.blockdiag, {}},
      {"^lazytensor: submatrix: rows%[2%] = 0 is not an index", lt.submatrix, lt.eye(3), {1, 0}},
      {"^lazytensor: submatrix: rows%[1%] is not a number", lt.submatrix, lt.eye(3), {"x"}},
      {"^lazytensor: submatrix: cols must be a 1%-d tensor or an array of indices, got string",
       lt.submatrix, lt.eye(3), {1}, "x"},
      {"^lazytensor: submatrix: row index 4 out of range %(1%.%.3%)", lt.submatrix, lt.eye(3), {4}},
      {"^lazytensor: diag: argument #1: expected a tensor", lt.diag, "x"},
    }
    for _, c in ipairs(cases) do
      local before = lt.memory()
      assert.matches(c[1], message(unpack(c, 2)))
      collectgarbage()
      collectgarbage()
      assert.is_true(lt.memory() <= before, c[1] .. ": memory grew after the error")
    end
    assert.equal(3, lt.diag{1, 2}:trace()) -- the state is still usable
  end)

  it("take indices from a 1-d tensor too", function()
    local A = lt.tensor{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}
    assert.same({{9, 7}, {3, 1}}, lt.submatrix(A, lt.tensor{3, 1}, {3, 1}):dense():totable())
  end)
end)

describe("operands", function()
  -- Everywhere a tensor is expected, a number or a (nested) table of numbers
  -- is one (as LPeg's getpatt makes patterns): constructors (above), the
  -- operations of the table, introspection, get, add_jitter, lt.mvn.
  it("are converted from tables and numbers by every entry point", function()
    local M = {{4, 1}, {1, 3}}
    assert.same({2, 2}, lt.shape(M))
    assert.equal(2, lt.size(M, 1))
    assert.equal(2, lt.dim(M))
    assert.equal(4, lt.numel(M))
    assert.equal(0, lt.dim(5))
    assert.is_true(lt.is_symmetric(M))
    assert.equal(1, lt.get(M, 2, 1))
    assert.same({{5, 1}, {1, 4}}, lt.add_jitter(M, 1):totable())
    assert.same({{2, 0}, {0, math.sqrt(3)}}, lt.cholesky{{4, 0}, {0, 3}}:dense():totable())
    assert.is_true(math.abs(lt.logdet{{4, 0}, {0, 3}} - math.log(12)) < 1e-14)
    assert.same({{1, 3}, {2, 4}}, lt.t{{1, 2}, {3, 4}}:totable())
    local d = lt.mvn({0, 0}, {{2, 0}, {0, 1}})
    local want = -math.log(2 * math.pi) - 0.5 * math.log(2) - 0.5 * (1 / 2 + 1)
    assert.is_true(math.abs(d:log_prob{1, 1} - want) < 1e-12)
  end)

  it("still name the operation when a value is no tensor at all", function()
    assert.matches("^lazytensor: shape: argument #1: expected a tensor, a number or a table, got "
      .. "string", message(lt.shape, "x"))
    assert.matches("^lazytensor: is_psd: argument #1", message(lt.is_psd, true))
    assert.is_nil(lt.type{{1}}) -- lt.type names tensors only (the contract)
    assert.is_false(lt.is_tensor{{1}})
  end)
end)
