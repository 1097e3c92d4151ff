-- Bad input: every case raises a clear `lazytensor:` error (or, for Lua
-- callbacks, the callback's own error object, unchanged), leaks nothing
-- (lt.memory() is back where it was once the garbage is collected), and
-- leaves the state usable: after each case a small computation is checked.
local lt = require "lazytensor"

-- "lazytensor: " first, possibly after the caller's position ("file:12: ").
local function is_lt_error(msg)
  return type(msg) == "string"
    and (msg:find("^lazytensor: ") ~= nil or msg:find("^[^\n]-:%d+: lazytensor: ") ~= nil)
end

local function collect()
  collectgarbage()
  collectgarbage()
end

-- The state still computes correctly.
local function check_usable()
  local a = lt.tensor{{1, 2}, {3, 4}}
  local d = lt.diag{2, 3}
  assert.equal(22, (a * a):get(2, 2))
  assert.same({{3, 2}, {3, 7}}, (d + a):dense():totable())
  assert.equal("diag", lt.type(d * d))
  assert.equal(6, (d * d):get(2, 2) - 3)
end

-- One case: f must raise; `expect` is a pattern the message must contain
-- (plain text), or a function checking the error object.
local function case(name, f, expect, opts)
  opts = opts or {}
  it(name, function()
    collect()
    local before = lt.memory()
    local ok, err = pcall(f)
    assert.is_false(ok, "expected an error")
    if type(expect) == "function" then
      expect(err)
    else
      assert.is_true(is_lt_error(err), "not a lazytensor: error: " .. tostring(err))
      if expect then
        assert.is_truthy(tostring(err):find(expect, 1, true),
          ("message %q lacks %q"):format(tostring(err), expect))
      end
    end
    err, f = nil, nil -- luacheck: ignore 311 (dropped for the collector)
    collect()
    if not opts.keeps_memory then assert.equal(before, lt.memory(), "memory leaked") end
    check_usable()
  end)
end

-- Rules registered here stay in the state's registry; each one answers only
-- its first call (then lt.NotImplemented), so other specs never meet it.
local function one_shot_rule(op, type_a, fn)
  local used = false
  lt.implements(op, type_a, function(...)
    if used then return lt.NotImplemented end
    used = true
    return fn(...)
  end)
end

-- The error object is exactly the one the callback raised.
local function own_error(text)
  return function(err)
    assert.is_truthy(tostring(err):find(text, 1, true), "lost the callback's message: " .. tostring(err))
  end
end

describe("bad input", function()
  local T = lt.tensor{{1, 2}, {3, 4}}
  local v = lt.tensor{1, 2}
  local D = lt.diag{1, 2}

  describe("sizes and shapes", function()
    case("negative size", function() return lt.zeros(-1) end, "non-negative integer")
    case("fractional size", function() return lt.zeros(2, 1.5) end, "non-negative integer")
    case("string size", function() return lt.ones("three") end, "non-negative integer")
    case("NaN size", function() return lt.zeros(0 / 0) end, "zeros")
    case("infinite size", function() return lt.zeros(math.huge) end, "zeros")
    case("size product overflows", function() return lt.zeros(2 ^ 40, 2 ^ 40) end, "overflows")
    case("size product overflows (full)", function() return lt.full({2 ^ 33, 2 ^ 33}, 1) end, "overflows")
    case("size product overflows (three dims)", function() return lt.ones(2 ^ 22, 2 ^ 22, 2 ^ 22) end, "overflow")
    case("size beyond 2^53", function() return lt.zeros(2 ^ 60) end, "too large")
    case("too many dimensions", function() return lt.zeros(1, 1, 1, 1, 1, 1, 1, 1, 1) end, "too many dimensions")
    case("nesting too deep", function() return lt.tensor{{{{{{{{{1}}}}}}}}} end, "too many nested levels")
    case("ragged table", function() return lt.tensor{{1, 2}, {3}} end, "ragged")
    case("non-number element", function() return lt.tensor{{1, "x"}} end, "expected a number")
    case("NaN count in linspace", function() return lt.linspace(0, 1, 0 / 0) end, "linspace")
    case("zero step in arange", function() return lt.arange(1, 10, 0) end, "step")
    case("arange with too many elements", function() return lt.arange(0, 1e300, 1e-300) end, "arange")
    case("identity of negative size", function() return lt.identity(-2) end, "identity")
    case("add: shapes do not broadcast", function() return lt.tensor{{1, 2}} + lt.tensor{{1, 2, 3}} end, "broadcast")
    case("matmul: inner dimensions differ", function() return lt.ones(2, 3) * lt.ones(2, 3) end, "matmul")
    case("diag + dense of another size", function() return D + lt.ones(3, 3) end, "add")
    -- (a matrix's rows are a batch of diagonals)
    case("diag of a scalar", function() return lt.diag(lt.tensor(2)) end, "diag")
    case("reshape to another element count", function() return T:reshape(5) end, "reshape")
    case("reshape with a negative size", function() return T:reshape(-1, 4) end, "reshape")
    case("transpose of a vector", function() return v:t() end, "transpose")
    case("solve with a non-conforming right-hand side", function() return D:solve(lt.ones(3)) end, "solve")
    case("add_diag of the wrong length", function() return D:add_diag(lt.ones(3)) end, "add_diag")
    case("element-wise product that does not broadcast", function() return T:cmul(lt.ones(3)) end, "broadcast")
    case("dot of different lengths", function() return v:dot(lt.ones(3)) end, "dot")
    case("max of an empty tensor", function() return lt.zeros(0):max() end, "empty")
  end)

  describe("indices", function()
    case("index 0", function() return T[0] end, "out of range")
    case("negative index", function() return T[-1] end, "out of range")
    case("index past the end", function() return T[3] end, "out of range")
    case("fractional index", function() return T[1.5] end, "integer")
    case("NaN index", function() return T:get(0 / 0, 1) end, "get")
    case("get with too few indices", function() return T:get(1) end, "indices")
    case("get with too many indices", function() return T:get(1, 1, 1) end, "indices")
    case("get with index 0", function() return T:get(1, 0) end, "out of range")
    case("get of a lazy operator out of range", function() return D:get(3, 1) end, "get")
    case("row of a lazy operator out of range", function() return D[5] end, "out of range")
    case("set without a value", function() return T:clone():set(1, 1) end, "set")
    case("narrow: dimension out of range", function() return T:narrow(3, 1, 1) end, "narrow")
    case("narrow: start 0", function() return T:narrow(1, 0, 1) end, "narrow")
    case("narrow: past the end", function() return T:narrow(1, 2, 5) end, "narrow")
    case("size(0)", function() return T:size(0) end, "size")
    case("sum over a missing dimension", function() return T:sum(3) end, "sum")
  end)

  describe("types and argument counts", function()
    case("adding a string", function() return T + "x" end, "add")
    case("adding a boolean", function() return true + T end, "add")
    case("dividing by a tensor", function() return T / T end, "div")
    case("dividing a number by a tensor", function() return 1 / T end, "div")
    case("scale by a string", function() return lt.scale(T, "a") end, "scale")
    case("add with no arguments", function() return lt.add() end, "add")
    case("matmul with one argument", function() return lt.matmul(T) end, "matmul")
    case("a method called on a non-tensor", function() return T.dense(true) end, "dense")
    case("writing a string into a row", function() local c = T:clone(); c[1] = "x" end, "newindex")
    case("writing a row of the wrong size", function() local c = T:clone(); c[1] = lt.ones(5) end, "elements")
    case("writing into a lazy operator", function() D[1] = 1 end, "immutable")
    case("options that are not a table", function() return D:solve(v, 42) end, "solve")
    case("unknown setting (write)", function() lt.settings.no_such_setting = 1 end, "unknown setting")
    case("unknown setting (read)", function() return lt.settings.no_such_setting end, "unknown setting")
    case("negative max_cholesky_size", function() lt.settings.max_cholesky_size = -1 end, "max_cholesky_size")
    case("string setting", function() lt.settings.cg_tolerance = "tight" end, "cg_tolerance")
    case("with_settings with a bad value", function()
      lt.with_settings({max_cholesky_size = -5}, function() end)
    end, "max_cholesky_size")
    case("fractional seed", function() lt.manual_seed(1.5) end, "manual_seed")
    case("unknown operation in explain", function() return lt.explain("no_such_op", T) end, "unknown operation")
  end)

  describe("NaN and Inf", function()
    it("NaN and Inf entries propagate instead of failing", function()
      local t = lt.tensor{0 / 0, 1, math.huge}
      local s = t:sum()
      assert.is_true(s ~= s)
      assert.equal(math.huge, lt.tensor{1, math.huge}:max())
      local p = lt.diag{0 / 0, 1} * lt.ones(2)
      assert.is_true(p[1] ~= p[1])
      assert.equal(1, p[2])
      check_usable()
    end)
    case("cholesky of a matrix with a NaN", function()
      return lt.tensor{{0 / 0, 0}, {0, 1}}:cholesky()
    end, "cholesky")
    case("cholesky of a matrix with an Inf", function()
      return lt.tensor{{math.huge, 0}, {0, 1}}:cholesky()
    end, "cholesky")
  end)

  describe("empty and zero-size tensors", function()
    it("work where the result is defined", function()
      assert.equal(0, lt.zeros(0):sum())
      assert.same({0, 2}, (lt.zeros(0, 3) * lt.zeros(3, 2)):shape())
      assert.same({2, 2}, (lt.zeros(2, 0) * lt.zeros(0, 2)):shape())
      assert.equal(0, (lt.zeros(2, 0) * lt.zeros(0, 2)):sum())
      assert.equal(0, lt.tensor{}:numel())
      assert.equal(0, lt.diag{}:trace())
      -- lazy 0×0 operators in products (a constant 0×n once overflowed its
      -- result, found by the libFuzzer harness)
      local c = 1 + lt.diag{}
      assert.same({0, 2}, (c * lt.zeros(0, 2)):shape())
      assert.same({0, 0}, (c * c):dense():shape())
      assert.same({0, 3}, (lt.diag{} * lt.zeros(0, 3)):shape())
      check_usable()
    end)
    case("a 0-d tensor cannot be indexed", function() return lt.tensor(3)[1] end, "0-d")
  end)

  describe("positive definiteness", function()
    case("cholesky of an indefinite matrix", function()
      return lt.tensor{{1, 2}, {2, 1}}:cholesky()
    end, "cholesky")
    case("cholesky of a diagonal with a negative entry", function()
      return lt.diag{1, -1}:cholesky()
    end, "cholesky")
    case("cholesky of an indefinite matrix wrongly marked PSD", function()
      return lt.psd(lt.tensor{{1, 2}, {2, 1}}):cholesky()
    end, "positive definite")
    case("inv_quad of an indefinite matrix wrongly marked PSD", function()
      return lt.psd(lt.tensor{{1, 2}, {2, 1}}):inv_quad(lt.ones(2))
    end, "inv_quad: matrix is not positive definite")
    case("inv_quad of a diagonal with a negative entry", function()
      return lt.diag{1, -1}:inv_quad(lt.ones(2))
    end, "inv_quad: matrix is not positive definite")
    case("inv_quad of a non-symmetric matrix", function()
      return lt.tensor{{2, 1}, {0, 2}}:inv_quad(lt.ones(2))
    end, "inv_quad: matrix is not symmetric")
    case("solve with an exactly singular matrix", function()
      return lt.zeros(2, 2):solve(lt.ones(2))
    end, "solve")
  end)

  describe("closed and freed tensors", function()
    -- `local x <close>` is Lua 5.4 syntax: compiled from a string so that this
    -- file still loads on older Lua versions.
    local use_after_close = _VERSION >= "Lua 5.4" and load([[
      local lt = ...
      local t = lt.eye(2)
      do
        local c <close> = t
      end
      return t + 1
    ]])
    if use_after_close then
      case("using a tensor after its <close> scope", function() return use_after_close(lt) end, "freed")
    end
    case("a closed tensor as the second operand", function()
      local t = lt.eye(2)
      t:free()
      return D + t
    end, "freed")
    case("freeing twice", function()
      local t = lt.eye(2)
      t:free()
      t:free()
    end, "freed")
    case("a method on a freed lazy operator", function()
      local d = lt.diag{1, 2}
      lt.free(d)
      return d:dense()
    end, "freed")
    it("an operator keeps a closed child alive", function()
      local x = lt.tensor{1, 2}
      local d = lt.diag(x)
      x:free()
      assert.equal("lazytensor.tensor (freed)", tostring(x))
      assert.equal(2, d:get(2, 2))
      check_usable()
    end)
  end)

  describe("Lua callbacks", function()
    case("an lt.operator matmul that raises: its message passes through", function()
      local op = lt.operator{shape = {2, 2}, matmul = function() error("matmul went wrong", 0) end}
      return op * v
    end, own_error("matmul went wrong"))
    case("an lt.operator matmul that raises a table: the same table comes back", function()
      local obj = {code = 7}
      local op = lt.operator{shape = {2, 2}, matmul = function() error(obj) end}
      local ok, err = pcall(function() return op:dense() end)
      assert(not ok and rawequal(err, obj), "the error object changed")
      error(err)
    end, function(err) assert.equal(7, err.code) end)
    case("an lt.operator matmul that returns a number", function()
      return lt.operator{shape = {2, 2}, matmul = function() return 1 end} * v
    end, "matmul must return a dense tensor")
    case("an lt.operator matmul that returns the wrong shape", function()
      return lt.operator{shape = {2, 2}, matmul = function() return lt.ones(3, 1) end} * v
    end, "3x1")
    case("an lt.operator with a bad shape", function()
      return lt.operator{shape = {2, -2}, matmul = function(X) return X end}
    end, "shape")
    case("an lt.operator without matmul", function() return lt.operator{shape = {2, 2}} end, "matmul")
    case("an lt.operator whose t_matmul is not a function", function()
      return lt.operator{shape = {2, 2}, matmul = function(X) return X end, t_matmul = 3}
    end, "t_matmul")
    case("an lt.implements rule that raises: its message passes through", function()
      one_shot_rule("trace", "identity", function() error("rule went wrong", 0) end)
      return lt.identity(3):trace()
    end, own_error("rule went wrong"), {keeps_memory = true})
    case("an lt.implements rule that returns a string", function()
      one_shot_rule("neg", "identity", function() return "nope" end)
      return -lt.identity(3)
    end, "must return a tensor", {keeps_memory = true})
    case("an lt.implements rule that returns the wrong shape", function()
      one_shot_rule("scale", "identity", function() return lt.ones(5, 5) end)
      return lt.identity(3) * 2
    end, "expected 3x3", {keeps_memory = true})
    case("lt.implements with an unknown type", function()
      lt.implements("add", "no_such_type", function() end)
    end, "unknown type")
    case("lt.implements with too few arguments", function()
      lt.implements("add", function() end)
    end, "implements")
    case("lt.implements without a function", function()
      lt.implements("add", "diag", 3)
    end, "function")
  end)

  -- Found by the libFuzzer harness of the binding (tests/fuzz/fuzz_lua.c);
  -- the inputs are kept in tests/fuzz/corpus_lua/.
  describe("found by fuzzing the binding", function()
    it("the tensor metatable's __gc and __close ignore values that are no tensor", function()
      -- crash-gc-foreign-userdata: __gc took any userdata for a tensor box
      -- and released what its first word pointed to (lt._state's context)
      local mt = getmetatable(lt.zeros(1))
      for _, x in ipairs{lt._state, io.stdout, {}, lt.NotImplemented, 1, "x", false} do
        mt.__gc(x)
        mt.__close(x)
      end
      mt.__gc()
      check_usable()
    end)
    it("lt._state does not hand out its metatable (its __gc frees the context)", function()
      assert.equal("lazytensor.state", getmetatable(lt._state))
      check_usable()
    end)
    it("solve, inv_quad and inv_quad_logdet take a lazy right-hand side", function()
      -- crash-inv-quad-lazy-rhs: the closed-form diag and identity rules
      -- read a lazy right-hand side as if it were dense
      local B = lt.identity(2)
      local Bd = B:dense()
      for _, A in ipairs{lt.diag{2, 4}, lt.identity(2, 2), lt.tensor{{2, 1}, {1, 2}},
                         lt.lowrank(lt.tensor{{1}, {2}}) + lt.diag{1, 1}} do
        assert.same(A:solve(Bd):totable(), A:solve(B):totable())
        assert.near(A:inv_quad(Bd), A:inv_quad(B), 1e-12)
        local q, l = A:inv_quad_logdet(B)
        local qd, ld = A:inv_quad_logdet(Bd)
        assert.near(qd, q, 1e-12)
        assert.near(ld, l, 1e-12)
      end
      assert.near(3, lt.diag{2, 4}:inv_quad(lt.diag{2, 2}), 1e-12) -- 2²/2 + 2²/4
      check_usable()
    end)
    case("a table with an empty row and a number is ragged", function()
      -- seen in a fuzz_lua trace (seed-empty-row): with a size 0 the rows
      -- went unchecked, and the table became a 2x0 tensor
      return lt.tensor{{}, 1}
    end, "ragged")
    case("a table with an empty row and a longer one is ragged", function()
      return lt.tensor{{}, {1}}
    end, "ragged")
    case("an operand with an empty row and a string is ragged", function()
      return lt.kernel({{}, "x"}, {kind = "rbf", lengthscale = 1})
    end, "ragged")
    it("empty rows of the same length make an empty tensor", function()
      assert.same({2, 0}, lt.tensor{{}, {}}:shape())
      assert.same({2, 1, 0}, lt.tensor{{{}}, {{}}}:shape())
    end)
    it("CG with a right-hand side of 0 columns gives back all its memory", function()
      -- crash-cg-zero-columns: a k = 0 work array was freed with another
      -- size than it was allocated with (lt.memory() crept up, and the
      -- host allocator got a wrong osize)
      local K = lt.kernel(lt.tensor{1, 2, 3}, {kind = "rbf", lengthscale = 1})
      local B = lt.zeros(3, 0)
      collect()
      local before = lt.memory()
      lt.with_settings({max_cholesky_size = 0}, function()
        assert.equal(0, K:inv_quad(B))
        assert.same({3, 0}, K:solve(B):shape())
      end)
      collect()
      assert.equal(before, lt.memory())
    end)
  end)

  describe("batch shapes", function()
    case("matmul of batches {3} and {2}", function()
      return lt.randn(3, 4, 4) * lt.randn(2, 4, 2)
    end, "matmul: batch shapes {3} and {2} do not broadcast (shapes 3x4x4 and 2x4x2)")
    case("a lazy batch plus a dense batch that do not broadcast", function()
      return lt.diag(lt.rand(3, 4)) + lt.randn(2, 4, 4)
    end, "add: batch shapes {3} and {2} do not broadcast (shapes 3x4x4 and 2x4x4)")
    case("solve with right-hand sides of another batch", function()
      return lt.diag(lt.rand(3, 4) + 1):solve(lt.randn(2, 4, 1))
    end, "solve: batch shapes {3} and {2} do not broadcast (shapes 3x4x4 and 2x4x1)")
    -- above max_cholesky_size the batched block-CG rule looked at the last
    -- two dimensions of a number (shape[-1]: UBSan's find, from the fuzzer)
    case("solve of a number by a batch above max_cholesky_size", function()
      return lt.with_settings({max_cholesky_size = 3}, function() return lt.solve(2, lt.zeros(7, 7, 0)) end)
    end, "solve (batch member {1}): expected a square matrix, got a scalar")
    case("batch shapes {2, 3} and {2, 2}", function()
      return lt.randn(2, 3, 4, 4) * lt.randn(2, 2, 4, 4)
    end, "batch shapes {2, 3} and {2, 2} do not broadcast")
    case("constructor inputs of batches {3} and {2}", function()
      return lt.lowrank(lt.randn(3, 4, 2), lt.randn(2, 4, 2))
    end, "lowrank: batch shapes {3} and {2} do not broadcast (shapes 3x4x2 and 2x4x2)")
    case("kernel inputs of batches {3} and {2}", function()
      return lt.kernel(lt.randn(3, 4, 2), lt.randn(2, 5, 2), {kind = "rbf", lengthscale = 1})
    end, "kernel: batch shapes {3} and {2} do not broadcast")
    case("lt.batch of members of different shapes", function()
      return lt.batch{lt.eye(2), lt.diag{1, 2, 3}}
    end, "batch: the members differ in shape (2x2 and 3x3)")
    case("lt.batch of batches of different batch shapes", function()
      return lt.batch{lt.diag(lt.rand(3, 2)), lt.diag(lt.rand(2, 2))}
    end, "batch: the members differ in shape (3x2x2 and 2x2x2)")
    case("lt.batch of nothing", function() return lt.batch{} end, "batch")
    case("a member's shapes that do not conform", function()
      return lt.diag(lt.rand(3, 4)) * lt.randn(3, 5, 2)
    end, "matmul (batch member {1}): inner dimensions differ")
    case("a member that is not positive definite", function()
      return lt.batch{lt.diag{1, 2}, lt.diag{1, -1}}:cholesky()
    end, "cholesky (batch member {2}):")
    case("a member of a batch out of range", function()
      return lt.diag(lt.rand(3, 4))[4]
    end, "index")
    case("an empty batch", function() return lt.zeros(0, 2, 2) * lt.randn(2) end, "empty batch")
  end)
end)
