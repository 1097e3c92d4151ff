-- The Lua API contract (API.md), sentence by sentence: one describe per
-- API.md section, each `it` quoting the sentence it checks. Expected values
-- are hand-computed or come from plain-Lua loops, never from the library.
local lt = require "lazytensor"

-- The suite also runs on Lua 5.1-5.3 and LuaJIT: no 5.4-only syntax here
-- (`<close>` is compiled with load), and these stand in for 5.4 library calls.
local pack = table.pack or function(...) return {n = select("#", ...), ...} end
local unpack = table.unpack or unpack -- luacheck: ignore 143
local has_close = _VERSION >= "Lua 5.4" and type(jit) ~= "table"

local function rows_near(expected, got, tol, what)
  tol = tol or 1e-12
  if lt.is_tensor(got) then
    got = lt.is_lazy(got) and got:dense():totable() or got:totable()
  end
  assert.equal(#expected, #got, what)
  for i = 1, #expected do
    if type(expected[i]) == "table" then
      assert.equal(#expected[i], #got[i], what)
      for j = 1, #expected[i] do
        assert.near(expected[i][j], got[i][j], tol, (what or "") .. " [" .. i .. "," .. j .. "]")
      end
    else
      assert.near(expected[i], got[i], tol, (what or "") .. " [" .. i .. "]")
    end
  end
end

local function errmsg(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

local function lazy_error(pattern, f, ...)
  local err = errmsg(f, ...)
  assert.matches("^lazytensor: ", err)
  if pattern then assert.matches(pattern, err, 1, true) end
end

local function settle()
  collectgarbage()
  collectgarbage()
  return lt.memory()
end

-- Plain-Lua matrix helpers.
local ref = require "support.ref"
local matmul, transpose = ref.matmul, ref.transpose

local function map2(a, f)
  local out = {}
  for i = 1, #a do
    out[i] = {}
    for j = 1, #a[i] do out[i][j] = f(a[i][j], i, j) end
  end
  return out
end

-- A 2x2 SPD matrix used throughout: A = {{4, 1}, {1, 3}}, det 11,
-- A⁻¹ = {{3, -1}, {-1, 4}} / 11.
local A_rows = {{4, 1}, {1, 3}}

-------------------------------------------------------------------------------
describe("API.md: Loading from a checkout", function()
  local root = (debug.getinfo(1, "S").source:match("^@(.*)spec/[^/]*$") or "./")
  if root == "" then root = "./" end

  it("'make leaves the C module lazytensor.so in the root'", function()
    local f = io.open(root .. "lazytensor.so", "rb")
    assert.truthy(f, "lazytensor.so is not in the repository root")
    f:close()
  end)

  it("'After make in the repository root, this must work from that root: " ..
     "LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' lua5.4 script.lua'", function()
    local script = os.tmpname() -- the script's name does not matter
    local f = assert(io.open(script, "w"))
    f:write([[
local lt = require "lazytensor"
local mvn = require "lazytensor.mvn"
assert(type(mvn.new) == "function")
if package.searchpath then -- Lua 5.2+
  assert(package.searchpath("lazytensor", package.cpath) == "./lazytensor.so")
  assert(package.searchpath("lazytensor.mvn", package.path) == "./lua/lazytensor/mvn.lua")
end
io.write(lt.type(lt.diag{1, 2}), " ", (lt.tensor{1, 2} * lt.tensor{3, 4}))
]])
    f:close()
    -- `make LUA=lua5.3 test` builds the module for that interpreter: run it
    local lua = os.getenv("LUA") or "lua5.4"
    local cmd = "cd '" .. root .. "' && LUA_CPATH='./?.so;;' " ..
                "LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' " .. lua .. " '" .. script .. "' 2>&1"
    local p = assert(io.popen(cmd))
    local out = p:read("*a")
    p:close()
    os.remove(script)
    assert.equal("diag 11", out) -- io.write prints 11.0 as "11"; an error shows here
  end)
end)

-------------------------------------------------------------------------------
describe("API.md: Values", function()
  local A = lt.tensor(A_rows)
  local x = lt.tensor{0, 1}
  local rbf = {kind = "rbf", lengthscale = 1}
  local makers = {
    dense = function() return lt.tensor(A_rows) end,
    diag = function() return lt.diag{1, 2} end,
    identity = function() return lt.identity(2) end,
    triangular = function() return lt.triangular(A, "lower") end,
    lowrank = function() return lt.lowrank(lt.tensor{{1}, {2}}) end,
    kron = function() return lt.kron(A, A) end,
    blockdiag = function() return lt.blockdiag{A, A} end,
    toeplitz = function() return lt.toeplitz(lt.tensor{2, 1}) end,
    kernel = function() return lt.kernel(x, rbf) end,
    chol = function() return lt.chol(lt.tensor{{2, 0}, {1, 1}}) end,
    sum = function() return lt.kernel(x, rbf) + lt.lowrank(lt.tensor{{1}, {2}}) end,
    product = function() return lt.kernel(x, rbf) * lt.lowrank(lt.tensor{{1}, {2}}) end,
    scaled = function()
      return 2 * lt.operator{shape = {2, 2}, matmul = function(X) return X end}
    end,
    inverse = function() return lt.kernel(x, rbf):inverse() end,
    operator = function() return lt.operator{shape = {2, 2}, matmul = function(X) return X end} end,
  }

  it("'lt.type(x) names its structure: \"dense\", \"diag\", ... \"operator\"'", function()
    for name, make in pairs(makers) do
      assert.equal(name, lt.type(make()), name)
    end
  end)

  it("'lt.type of a non-tensor is nil'", function()
    for _, v in ipairs{0, 1.5, "dense", true, {}, print, io.stdout, coroutine.create(function() end)} do
      assert.is_nil(lt.type(v), type(v))
    end
    assert.is_nil(lt.type(nil))
    assert.is_nil(lt.type(lt.tensor{1, 2}:totable()))
  end)

  it("'lt.is_tensor(x), lt.is_lazy(x) (true for every type but \"dense\")'", function()
    for name, make in pairs(makers) do
      local t = make()
      assert.is_true(lt.is_tensor(t), name)
      assert.equal(name ~= "dense", lt.is_lazy(t), name)
    end
    for _, v in ipairs{1, "x", {}, print} do
      assert.is_false(lt.is_tensor(v))
      assert.is_false(lt.is_lazy(v))
    end
    -- views and results of dense arithmetic are dense too
    assert.is_false(lt.is_lazy(A:t()))
    assert.is_false(lt.is_lazy(A + A))
  end)

  it("'There is no wrapper for dense data: a dense tensor is itself an operator'", function()
    -- the same userdata answers tensor methods and operator methods
    assert.equal(7, A:trace())
    assert.near(math.log(11), A:logdet(), 1e-12)
    rows_near({3 / 11 - 2 / 11, -1 / 11 + 8 / 11}, (A:solve(lt.tensor{1, 2})))
    assert.equal(getmetatable(A), getmetatable(lt.diag{1, 2}))
    -- and it goes straight into lazy constructors and rules
    rows_near({{4, 1, 0, 0}, {1, 3, 0, 0}, {0, 0, 4, 1}, {0, 0, 1, 3}}, lt.blockdiag{A, A})
  end)

  it("'Element type is double'", function()
    local t = lt.tensor{1, 2}
    if math.type then
      assert.equal("float", math.type(t:get(1)))
      assert.equal("float", math.type(t[2]))
    end
    -- 1/3 is stored to double precision, not single
    local third = lt.tensor{1 / 3}:get(1)
    assert.equal(1 / 3, third)
    local big = lt.tensor{2 ^ 53}:get(1)
    assert.equal(2 ^ 53, big)
  end)

  it("'Indices are 1-based, as everywhere in Lua'", function()
    local t = lt.tensor{{1, 2}, {3, 4}}
    assert.equal(1, t:get(1, 1))
    assert.equal(4, t:get(2, 2))
    lazy_error(nil, function() return t:get(0, 1) end)
    lazy_error(nil, function() return t:get(3, 1) end)
    lazy_error(nil, function() return t[0] end)
    assert.equal(2, lt.diag{1, 2}:get(2, 2))
    lazy_error(nil, function() return lt.diag{1, 2}:get(0, 1) end)
    assert.equal(5, lt.tensor{5, 6}[1])
  end)
end)

-------------------------------------------------------------------------------
describe("API.md: Dense tensors", function()
  describe("Create", function()
    it("'lt.tensor{{1,2},{3,4}}, lt.tensor{1,2,3}'", function()
      local t = lt.tensor{{1, 2}, {3, 4}}
      assert.same({2, 2}, t:shape())
      assert.same({{1, 2}, {3, 4}}, t:totable())
      local v = lt.tensor{1, 2, 3}
      assert.same({3}, v:shape())
      assert.same({1, 2, 3}, v:totable())
    end)

    it("'lt.zeros(d1, d2, ...)', 'lt.ones(...)', 'lt.full({d1, d2}, v)', 'lt.eye(n)'", function()
      local z = lt.zeros(2, 3, 4)
      assert.same({2, 3, 4}, z:shape())
      assert.equal(0, z:sum())
      assert.equal(0, z:abs():max())
      local o = lt.ones(3, 2)
      assert.same({{1, 1}, {1, 1}, {1, 1}}, o:totable())
      local f = lt.full({2, 3}, 7.5)
      assert.same({{7.5, 7.5, 7.5}, {7.5, 7.5, 7.5}}, f:totable())
      assert.same({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, lt.eye(3):totable())
      assert.equal("dense", lt.type(lt.eye(3)))
    end)

    it("'lt.arange(a, b [, step]) (inclusive of b when it lands on it)'", function()
      assert.same({1, 2, 3, 4, 5}, lt.arange(1, 5):totable())
      assert.same({1, 3, 5}, lt.arange(1, 5, 2):totable())
      assert.same({1, 3}, lt.arange(1, 4, 2):totable()) -- 4 is not landed on
      assert.same({5, 4, 3, 2, 1}, lt.arange(5, 1, -1):totable())
      assert.same({2}, lt.arange(2, 2):totable())
      -- fractional steps: 0, 0.1, ..., 1.0 is 11 values despite rounding
      local r = lt.arange(0, 1, 0.1)
      assert.equal(11, r:numel())
      for i = 1, 11 do assert.near((i - 1) / 10, r:get(i), 1e-12) end
      assert.equal(11, lt.arange(1, 2, 0.1):numel())
      assert.equal(4, lt.arange(0, 0.3, 0.1):numel())
      rows_near({0, 0.3, 0.6, 0.9}, lt.arange(0, 1, 0.3), 1e-12)
      lazy_error("arange", function() return lt.arange(0, 1, 0) end)
    end)

    it("'lt.linspace(a, b, n)'", function()
      rows_near({0, 0.25, 0.5, 0.75, 1}, lt.linspace(0, 1, 5))
      rows_near({-1, 1}, lt.linspace(-1, 1, 2))
      local l = lt.linspace(2, 3, 11)
      assert.equal(2, l:get(1))
      assert.equal(3, l:get(11))
    end)

    it("'lt.rand(...)', 'lt.randn(...)'", function()
      lt.manual_seed(3)
      local u = lt.rand(2000)
      assert.same({2000}, u:shape())
      assert.is_true(u:min() >= 0 and u:max() < 1)
      assert.near(0.5, u:mean(), 0.05)
      local g = lt.randn(40, 50)
      assert.same({40, 50}, g:shape())
      local m = g:mean()
      local var = ((g - m):pow(2)):mean()
      assert.near(0, m, 0.1)
      assert.near(1, var, 0.1)
      assert.same({2, 3, 4}, lt.randn(2, 3, 4):shape())
    end)
  end)

  describe("Shape", function()
    it("'t:shape() (a new table {d1, ...}), t:size(d), t:dim(), t:numel(), #t = t:size(1)'",
       function()
      local t = lt.zeros(2, 3, 4)
      local s = t:shape()
      assert.same({2, 3, 4}, s)
      s[1] = 99
      assert.same({2, 3, 4}, t:shape())
      assert.are_not.equal(t:shape(), t:shape())
      assert.equal(3, t:size(2))
      assert.equal(4, t:size(3))
      assert.equal(3, t:dim())
      assert.equal(24, t:numel())
      assert.equal(2, #t)
      assert.equal(5, #lt.zeros(5))
      assert.equal(3, #lt.diag{1, 2, 3})
    end)
  end)

  describe("Access", function()
    it("'t[i] is a view of slice i (a number when t is 1-d)'", function()
      local v = lt.tensor{10, 20, 30}
      assert.equal("number", type(v[2]))
      assert.equal(20, v[2])
      local t = lt.tensor{{1, 2, 3}, {4, 5, 6}}
      local row = t[2]
      assert.equal("dense", lt.type(row))
      assert.same({3}, row:shape())
      assert.same({4, 5, 6}, row:totable())
      row:set(1, 40) -- writes through to the parent
      assert.equal(40, t:get(2, 1))
      t:set(2, 3, 60) -- and the parent's writes show in the view
      assert.equal(60, row:get(3))
      -- n-d: a slice of a 3-d tensor is a 2-d view
      local c = lt.zeros(2, 3, 4)
      local s = c[2]
      assert.same({3, 4}, s:shape())
      s:set(3, 4, 9)
      assert.equal(9, c:get(2, 3, 4))
      assert.equal(0, c:get(1, 3, 4))
      c[2][1][2] = 5 -- chained views
      assert.equal(5, c:get(2, 1, 2))
    end)

    it("'t[i] = v writes (a number fills, a tensor copies)'", function()
      local t = lt.zeros(2, 3)
      t[1] = 7
      assert.same({{7, 7, 7}, {0, 0, 0}}, t:totable())
      local src = lt.tensor{1, 2, 3}
      t[2] = src
      assert.same({{7, 7, 7}, {1, 2, 3}}, t:totable())
      src:set(1, 100) -- a copy, not a view of src
      assert.equal(1, t:get(2, 1))
      local v = lt.tensor{1, 2}
      v[2] = 5
      assert.same({1, 5}, v:totable())
      lazy_error(nil, function() t[1] = lt.tensor{1, 2} end)
    end)

    it("'t:get(i, j, ...), t:set(i, j, ..., v)'", function()
      local t = lt.zeros(2, 3, 4)
      t:set(2, 3, 4, 1.5)
      assert.equal(1.5, t:get(2, 3, 4))
      assert.equal(1.5, t:sum())
      lazy_error(nil, function() return t:get(1, 1) end) -- one index per dimension
    end)
  end)

  describe("Views and copies", function()
    it("'t:t() (2-d transpose view; a batch's members transposed; an error for 1-d)'", function()
      local a = lt.tensor{{1, 2, 3}, {4, 5, 6}}
      local b = a:t()
      assert.same({{1, 4}, {2, 5}, {3, 6}}, b:totable())
      b:set(3, 1, 30)
      assert.equal(30, a:get(1, 3))
      lazy_error("t", function() return lt.zeros(3):t() end)
      local batch = lt.tensor{{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}}
      assert.same({{{1, 3}, {2, 4}}, {{5, 7}, {6, 8}}}, batch:t():totable())
    end)

    it("'t:reshape(...) (a view when contiguous)'", function()
      local a = lt.tensor{1, 2, 3, 4, 5, 6}
      local b = a:reshape(2, 3)
      assert.same({{1, 2, 3}, {4, 5, 6}}, b:totable())
      b:set(2, 1, 40)
      assert.equal(40, a:get(4))
      assert.same({3, 2}, a:reshape{3, 2}:shape())
      -- contiguous views of a parent reshape into views of that parent
      local m3 = lt.zeros(3, 4)
      m3[2]:reshape(2, 2):set(1, 2, 5)
      assert.equal(5, m3:get(2, 2))
      local rows = lt.zeros(4, 3)
      rows:narrow(1, 2, 2):reshape(6):set(4, 7)
      assert.equal(7, rows:get(3, 1))
      -- not contiguous: a copy with the values in row-major order
      local m = lt.tensor{{1, 2}, {3, 4}}
      local c = m:t():reshape(4)
      assert.same({1, 3, 2, 4}, c:totable())
      lazy_error("reshape", function() return a:reshape(4, 2) end)
    end)

    it("'t:narrow(dim, start, len) (a view)'", function()
      local a = lt.tensor{{1, 2, 3}, {4, 5, 6}}
      local b = a:narrow(2, 2, 2)
      assert.same({{2, 3}, {5, 6}}, b:totable())
      b:set(2, 2, 60)
      assert.equal(60, a:get(2, 3))
      local r = a:narrow(1, 2, 1)
      assert.same({{4, 5, 60}}, r:totable())
    end)

    it("'t:clone(), t:contiguous(), t:totable()'", function()
      local a = lt.tensor{{1, 2}, {3, 4}}
      local c = a:clone()
      c:set(1, 1, 9)
      assert.equal(1, a:get(1, 1))
      local ct = a:t():contiguous()
      assert.same({{1, 3}, {2, 4}}, ct:totable())
      ct:set(1, 2, 30)
      assert.equal(3, a:get(2, 1))
      assert.same({{{0, 0}, {0, 0}}, {{0, 0}, {0, 0}}}, lt.zeros(2, 2, 2):totable())
      local tt = a:totable()
      tt[1][1] = 100 -- a fresh table
      assert.equal(1, a:get(1, 1))
    end)
  end)

  describe("Element-wise", function()
    it("'each returning a new tensor and leaving the receiver unchanged: " ..
       "t:cmul(u), t:cdiv(u), t:exp(), t:log(), t:sqrt(), t:abs(), t:pow(p)'", function()
      local vals = {0.5, 4, 9}
      local cases = {
        exp = {function(t) return t:exp() end, math.exp},
        log = {function(t) return t:log() end, math.log},
        sqrt = {function(t) return t:sqrt() end, math.sqrt},
        abs = {function(t) return (-t):abs() end, function(v) return v end},
        pow = {function(t) return t:pow(3) end, function(v) return v ^ 3 end},
        cmul = {function(t) return t:cmul(lt.tensor{2, 3, 4}) end, nil},
        cdiv = {function(t) return t:cdiv(lt.tensor{2, 4, 3}) end, nil},
      }
      local expected_cmul, expected_cdiv = {1, 12, 36}, {0.25, 1, 3}
      for name, c in pairs(cases) do
        local t = lt.tensor(vals)
        local r = c[1](t)
        assert.same(vals, t:totable(), name .. " changed its receiver")
        assert.is_true(lt.is_tensor(r))
        local want = {}
        for i, v in ipairs(vals) do
          want[i] = c[2] and c[2](v) or (name == "cmul" and expected_cmul[i] or expected_cdiv[i])
        end
        rows_near(want, r, 1e-12, name)
        r:set(1, -100) -- new storage
        assert.same(vals, t:totable(), name .. " returned a view")
      end
    end)

    it("'(numpy broadcasting)'", function()
      local m = lt.tensor{{1, 2}, {3, 4}}
      assert.same({{10, 40}, {30, 80}}, m:cmul(lt.tensor{10, 20}):totable())
      assert.same({{10, 20}, {300, 400}}, m:cmul(lt.tensor{{10}, {100}}):totable())
      assert.same({{1, 1}, {3, 2}}, m:cdiv(lt.tensor{1, 2}):totable())
      assert.same({{1, 2}, {3, 4}}, m:totable())
      assert.same({{11, 12}, {21, 22}}, (lt.tensor{{1}, {2}} * 10 + lt.tensor{1, 2}):totable())
      lazy_error("shapes", function() return m:cmul(lt.tensor{1, 2, 3}) end)
    end)
  end)

  describe("Reductions", function()
    it("'t:sum([dim]), t:mean([dim]) (with a dim: a tensor without that dim)'", function()
      local m = lt.tensor{{1, 2, 3}, {4, 5, 6}}
      assert.equal(21, m:sum())
      assert.equal(3.5, m:mean())
      local s1, s2 = m:sum(1), m:sum(2)
      assert.same({3}, s1:shape())
      assert.same({5, 7, 9}, s1:totable())
      assert.same({2}, s2:shape())
      assert.same({6, 15}, s2:totable())
      assert.same({2.5, 3.5, 4.5}, m:mean(1):totable())
      assert.same({2, 5}, m:mean(2):totable())
      -- 3-d: the reduced dimension disappears
      local c = lt.ones(2, 3, 4)
      assert.same({2, 4}, c:sum(2):shape())
      assert.same({2, 3}, c:mean(3):shape())
      assert.equal(3, c:sum(2):get(1, 1))
      lazy_error("sum", function() return m:sum(3) end)
    end)

    it("'t:max(), t:min(), t:norm(), t:dot(u); without a dim they return Lua numbers'", function()
      local m = lt.tensor{{1, -2}, {3, 4}}
      for _, v in ipairs{m:sum(), m:mean(), m:max(), m:min(), m:norm(), m:dot(m)} do
        assert.equal("number", type(v))
      end
      assert.equal(4, m:max())
      assert.equal(-2, m:min())
      assert.near(math.sqrt(30), m:norm(), 1e-12)
      assert.equal(30, m:dot(m))
      assert.equal(11, lt.tensor{1, 2}:dot(lt.tensor{3, 4}))
      assert.equal(6, m:sum())
      assert.equal(1.5, m:mean())
    end)
  end)

  describe("Sizes", function()
    it("'Sizes are non-negative integers; anything else is a lazytensor: error'", function()
      local bad = {2.5, -1, "2", 0 / 0, math.huge, true}
      local makers = {
        zeros = function(s) return lt.zeros(2, s) end,
        ones = function(s) return lt.ones(s) end,
        full = function(s) return lt.full({s, 2}, 1) end,
        eye = function(s) return lt.eye(s) end,
        rand = function(s) return lt.rand(s) end,
        randn = function(s) return lt.randn(2, s) end,
        linspace = function(s) return lt.linspace(0, 1, s) end,
        reshape = function(s) return lt.zeros(4):reshape(s, 2) end,
        narrow = function(s) return lt.zeros(4):narrow(1, 1, s) end,
        identity = function(s) return lt.identity(s) end,
        operator = function(s)
          return lt.operator{shape = {s, 2}, matmul = function(X) return X end}
        end,
      }
      for name, make in pairs(makers) do
        for _, s in ipairs(bad) do
          local err = errmsg(make, s)
          assert.matches("^lazytensor: " .. name, err)
        end
      end
      -- zero is a size
      assert.same({0, 3}, lt.zeros(0, 3):shape())
      assert.equal(0, lt.linspace(0, 1, 0):numel())
      assert.equal(0, lt.eye(0):numel())
    end)
  end)

  it("'tostring(t) prints values and shape, as Torch7 does'", function()
    local s = tostring(lt.tensor{{1, 2}, {3, 4.5}})
    assert.matches("1", s, 1, true)
    assert.matches("4.5", s, 1, true)
    assert.matches("2x2", s, 1, true)
    assert.is_true(s:find("4.5", 1, true) < s:find("2x2", 1, true))
    local v = tostring(lt.tensor{7, 8, 9})
    assert.matches("7", v)
    assert.matches("of size 3]", v, 1, true)
  end)
end)

-------------------------------------------------------------------------------
describe("API.md: Lazy operators (constructors)", function()
  it("'lt.diag(v): diagonal matrix from a 1-d tensor or a Lua table'", function()
    rows_near({{1, 0}, {0, 2}}, lt.diag{1, 2})
    rows_near({{3, 0, 0}, {0, 4, 0}, {0, 0, 5}}, lt.diag(lt.tensor{3, 4, 5}))
    assert.equal("diag", lt.type(lt.diag(lt.tensor{3, 4})))
  end)

  it("'lt.identity(n [, c]): c·I (c = 1 by default)'", function()
    rows_near({{1, 0}, {0, 1}}, lt.identity(2))
    rows_near({{2.5, 0, 0}, {0, 2.5, 0}, {0, 0, 2.5}}, lt.identity(3, 2.5))
  end)

  it("'lt.triangular(A, \"lower\"|\"upper\"): A's lower or upper triangle'", function()
    local A = lt.tensor{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}
    rows_near({{1, 0, 0}, {4, 5, 0}, {7, 8, 9}}, lt.triangular(A, "lower"))
    rows_near({{1, 2, 3}, {0, 5, 6}, {0, 0, 9}}, lt.triangular(A, "upper"))
    lazy_error("triangular", function() return lt.triangular(A, "middle") end)
  end)

  it("'lt.psd(A): A, marked symmetric positive semi-definite (the caller's promise)'", function()
    local A = lt.tensor(A_rows)
    assert.is_nil(A:is_psd())
    local P = lt.psd(A)
    rows_near(A_rows, P)
    assert.is_true(P:is_psd())
    assert.is_true(P:is_symmetric())
  end)

  it("'lt.lowrank(U [, V]): U·Vᵀ; U·Uᵀ (PSD) when V is omitted'", function()
    local U = {{1, 2}, {0, 1}, {3, -1}}
    local V = {{2, 0}, {1, 1}, {0, 4}}
    rows_near(matmul(U, transpose(V)), lt.lowrank(lt.tensor(U), lt.tensor(V)))
    local S = lt.lowrank(lt.tensor(U))
    rows_near(matmul(U, transpose(U)), S)
    assert.is_true(S:is_psd())
  end)

  it("'lt.kron(A, B, ...): Kronecker product'", function()
    local K = lt.kron(lt.tensor{{1, 2}, {3, 4}}, lt.tensor{{0, 1}, {1, 0}})
    rows_near({{0, 1, 0, 2}, {1, 0, 2, 0}, {0, 3, 0, 4}, {3, 0, 4, 0}}, K)
    local K3 = lt.kron(lt.tensor{{2}}, lt.tensor{{1, 2}}, lt.tensor{{1}, {3}})
    rows_near({{2, 4}, {6, 12}}, K3)
  end)

  it("'lt.blockdiag{A, B, ...}: block-diagonal matrix'", function()
    local B = lt.blockdiag{lt.tensor{{1, 2}, {3, 4}}, lt.tensor{{5}}, lt.diag{6, 7}}
    rows_near({{1, 2, 0, 0, 0}, {3, 4, 0, 0, 0}, {0, 0, 5, 0, 0}, {0, 0, 0, 6, 0},
               {0, 0, 0, 0, 7}}, B)
  end)

  it("'lt.toeplitz(c [, r]): Toeplitz matrix from first column c (and first row r; " ..
     "symmetric when omitted)'", function()
    rows_near({{1, 2, 3}, {2, 1, 2}, {3, 2, 1}}, lt.toeplitz(lt.tensor{1, 2, 3}))
    rows_near({{1, 5, 6}, {2, 1, 5}, {3, 2, 1}},
              lt.toeplitz(lt.tensor{1, 2, 3}, lt.tensor{1, 5, 6}))
    assert.is_true(lt.toeplitz(lt.tensor{1, 2, 3}):is_symmetric())
  end)

  it("'lt.kernel(x1 [, x2], spec): kernel matrix k(x1ᵢ, x2ⱼ) ... x1, x2 are n×d (or 1-d) " ..
     "dense; PSD when x2 is omitted'", function()
    local spec = {kind = "rbf", lengthscale = 2, variance = 3}
    local k = function(r2) return 3 * math.exp(-r2 / 8) end
    local x1 = {0, 1, 3}
    local K = lt.kernel(lt.tensor(x1), spec)
    rows_near(map2({{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}, function(_, i, j)
      return k((x1[i] - x1[j]) ^ 2)
    end), K, 1e-14)
    assert.is_true(K:is_psd())
    -- n×d inputs and a rectangular cross-kernel
    local a = {{0, 0}, {1, 2}}
    local b = {{1, 0}, {0, 1}, {2, 2}}
    local C = lt.kernel(lt.tensor(a), lt.tensor(b), spec)
    assert.same({2, 3}, C:shape())
    rows_near(map2({{0, 0, 0}, {0, 0, 0}}, function(_, i, j)
      return k((a[i][1] - b[j][1]) ^ 2 + (a[i][2] - b[j][2]) ^ 2)
    end), C, 1e-14)
    assert.is_not_true(C:is_psd())
  end)

  it("'entries computed on demand, never stored'", function()
    local n = 4000 -- n² doubles would be 128 MB
    local x = lt.linspace(0, 1, n)
    local m0 = settle()
    local K = lt.kernel(x, {kind = "matern52", lengthscale = 0.2})
    local e = K:get(1, n)
    local y = K * lt.ones(n)
    local row = K[7]
    assert.is_true(settle() - m0 < 2e6, "the kernel stored its entries")
    local r = 1 / 0.2
    assert.near((1 + math.sqrt(5) * r + 5 * r * r / 3) * math.exp(-math.sqrt(5) * r), e, 1e-12)
    assert.equal(n, y:numel())
    assert.equal(n, row:numel())
  end)

  it("'lt.chol(L): L·Lᵀ from a lower-triangular factor'", function()
    local L = {{2, 0, 0}, {1, 3, 0}, {-1, 2, 1}}
    local C = lt.chol(lt.tensor(L))
    rows_near(matmul(L, transpose(L)), C)
    assert.is_true(C:is_psd())
  end)

  it("'lt.operator{shape = {m, n}, matmul = f [, t_matmul = g] [, psd = true] " ..
     "[, symmetric = true] [, name = \"...\"]}: f(X) gets a dense n×k matrix and returns " ..
     "the dense m×k product'", function()
    local M = {{1, 0}, {0, 1}, {2, 3}} -- 3x2
    local seen = {}
    local op = lt.operator{shape = {3, 2}, name = "tall", matmul = function(X)
      assert.equal("dense", lt.type(X))
      seen[#seen + 1] = X:shape()
      return lt.tensor(M) * X
    end, t_matmul = function(X)
      seen[#seen + 1] = {"t", unpack(X:shape())}
      return lt.tensor(transpose(M)) * X
    end}
    rows_near({1, 2, 8}, op * lt.tensor{1, 2})
    rows_near({{1, 0}, {0, 1}, {2, 3}}, op * lt.eye(2))
    rows_near({7, 9}, lt.tensor{1, 0, 3} * op)
    assert.same({{2, 1}, {2, 2}, {"t", 3, 1}}, seen)
    assert.same({3, 2}, op:shape())
    assert.matches("tall", tostring(op), 1, true)
    local s = lt.operator{shape = {2, 2}, matmul = function(X) return lt.tensor(A_rows) * X end,
                          psd = true, symmetric = true}
    assert.is_true(s:is_psd())
    assert.is_true(s:is_symmetric())
  end)
end)

-------------------------------------------------------------------------------
describe("API.md: Kernel formulas", function()
  -- two points in 2-d, r² = 1.2² + 0.5² = 1.69, r = 1.3
  local x = {{0.3, -0.1}, {1.5, 0.4}}
  local r = 1.3
  local l, v, p = 0.7, 1.8, 2.5
  local s3, s5 = math.sqrt(3), math.sqrt(5)
  local formulas = {
    rbf = v * math.exp(-r * r / (2 * l * l)),
    matern12 = v * math.exp(-r / l),
    matern32 = v * (1 + s3 * r / l) * math.exp(-s3 * r / l),
    matern52 = v * (1 + s5 * r / l + 5 * r * r / (3 * l * l)) * math.exp(-s5 * r / l),
    periodic = v * math.exp(-2 * (math.sin(math.pi * 1.2 / p) ^ 2 + math.sin(math.pi * 0.5 / p) ^ 2)
                            / (l * l)),
  }
  for kind, want in pairs(formulas) do
    it("'" .. kind .. "' matches the formula in API.md", function()
      local K = lt.kernel(lt.tensor(x), {kind = kind, lengthscale = l, variance = v, period = p})
      assert.near(want, K:get(1, 2), 1e-13)
      assert.near(want, K:get(2, 1), 1e-13)
      assert.near(v, K:get(1, 1), 1e-13) -- r = 0
    end)
  end
end)

-------------------------------------------------------------------------------
describe("API.md: Arithmetic", function()
  local D = lt.tensor{{1, 2}, {3, 4}}
  local Drows = {{1, 2}, {3, 4}}
  local d = lt.diag{5, 6}
  local drows = {{5, 0}, {0, 6}}
  local op = lt.operator{shape = {2, 2},
                         matmul = function(X) return lt.tensor{{0, 1}, {1, 0}} * X end}
  local oprows = {{0, 1}, {1, 0}}
  local operands = {
    {"dense", D, Drows}, {"diag", d, drows}, {"operator", op, oprows},
  }

  it("'a + b, a - b, -a, a * b, a / c behave exactly as lt.add, lt.sub, lt.neg, lt.matmul or " ..
     "lt.scale, lt.div, whichever operand is lazy, dense or a number, and in either order'",
     function()
    for _, A in ipairs(operands) do
      for _, B in ipairs(operands) do
        local what = A[1] .. ", " .. B[1]
        local a, b = A[2], B[2]
        local sum = map2(A[3], function(x, i, j) return x + B[3][i][j] end)
        local diff = map2(A[3], function(x, i, j) return x - B[3][i][j] end)
        local prod = matmul(A[3], B[3])
        rows_near(sum, a + b, 1e-12, "+ " .. what)
        rows_near(sum, lt.add(a, b), 1e-12, "add " .. what)
        assert.equal(lt.type(lt.add(a, b)), lt.type(a + b), what)
        rows_near(diff, a - b, 1e-12, "- " .. what)
        rows_near(diff, lt.sub(a, b), 1e-12, "sub " .. what)
        assert.equal(lt.type(lt.sub(a, b)), lt.type(a - b), what)
        rows_near(prod, a * b, 1e-12, "* " .. what)
        rows_near(prod, lt.matmul(a, b), 1e-12, "matmul " .. what)
        assert.equal(lt.type(lt.matmul(a, b)), lt.type(a * b), what)
      end
      local a, rows, what = A[2], A[3], A[1]
      local neg = map2(rows, function(x) return -x end)
      rows_near(neg, -a, 1e-12, "unary - " .. what)
      rows_near(neg, lt.neg(a), 1e-12, "neg " .. what)
      local twice = map2(rows, function(x) return 2 * x end)
      for _, r in ipairs{a * 2, 2 * a, lt.scale(a, 2), lt.scale(2, a)} do
        rows_near(twice, r, 1e-12, "scale " .. what)
      end
      assert.equal(lt.type(lt.scale(a, 2)), lt.type(2 * a), what)
      local half = map2(rows, function(x) return x / 2 end)
      rows_near(half, a / 2, 1e-12, "/ " .. what)
      rows_near(half, lt.div(a, 2), 1e-12, "div " .. what)
      local plus = map2(rows, function(x) return x + 3 end)
      rows_near(plus, a + 3, 1e-12, "a + 3 " .. what)
      rows_near(plus, 3 + a, 1e-12, "3 + a " .. what)
      rows_near(plus, lt.add(3, a), 1e-12, "add(3, a) " .. what)
      rows_near(map2(rows, function(x) return 3 - x end), 3 - a, 1e-12, "3 - a " .. what)
      rows_near(map2(rows, function(x) return x - 3 end), lt.sub(a, 3), 1e-12, "a - 3 " .. what)
    end
  end)

  it("'* between two tensors is the matrix product: (m×k)·(k×n) → m×n, (m×k)·(k) → (m), " ..
     "(k)·(k) → a number'", function()
    local M = lt.tensor{{1, 2, 3}, {4, 5, 6}} -- 2x3
    local N = lt.tensor{{1, 0}, {0, 1}, {1, 1}} -- 3x2
    local P = M * N
    assert.same({2, 2}, P:shape())
    assert.same({{4, 5}, {10, 11}}, P:totable())
    local y = M * lt.tensor{1, 1, 1}
    assert.same({2}, y:shape())
    assert.same({6, 15}, y:totable())
    local z = lt.tensor{1, 1} * M
    assert.same({3}, z:shape())
    assert.same({5, 7, 9}, z:totable())
    local s = lt.tensor{1, 2, 3} * lt.tensor{4, 5, 6}
    assert.equal("number", type(s))
    assert.equal(32, s)
    -- the same ranks through a lazy operator
    local L = lt.diag{2, 3}
    local lv = L * lt.tensor{1, 1}
    assert.same({2}, lv:shape())
    assert.same({2, 3}, lv:totable())
    assert.same({2, 3}, (lt.tensor{1, 1} * L):totable())
    assert.same({2, 2}, (L * lt.eye(2)):shape())
    lazy_error("matmul", function() return M * M end)
  end)

  it("'With a number on either side it scales'", function()
    assert.same({{2, 4}, {6, 8}}, (D * 2):totable())
    assert.same({{2, 4}, {6, 8}}, (2 * D):totable())
    assert.same({2, 4}, (lt.tensor{1, 2} * 2):totable())
    assert.equal("diag", lt.type(2 * d))
  end)

  it("'lt.mul(a, b) is the element-wise (Hadamard) product'", function()
    assert.same({{1, 4}, {9, 16}}, lt.mul(D, D):totable())
    rows_near({{5, 0}, {0, 24}}, lt.mul(d, D))
    rows_near({{5, 0}, {0, 24}}, lt.mul(D, d))
    rows_near({{0, 2}, {3, 0}}, lt.mul(op, D))
    rows_near({{0, 0}, {0, 0}}, lt.mul(op, d))
    rows_near({{2, 4}, {6, 8}}, lt.mul(D, 2))
    local K = lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1})
    local e = math.exp(-0.5)
    rows_near({{1, e * e}, {e * e, 1}}, lt.mul(K, K), 1e-14)
    local op2 = lt.operator{shape = {2, 2},
                            matmul = function(X) return lt.tensor{{1, 2}, {3, 4}} * X end}
    rows_near({{0, 2}, {3, 0}}, lt.mul(op, op2))
    rows_near({{0, 2 * e}, {3 * e, 0}}, lt.mul(op2, lt.mul(op, K)), 1e-14)
    rows_near({2 * e, 3 * e}, lt.mul(op2, lt.mul(op, K)) * lt.tensor{1, 1}, 1e-14)
  end)

  it("'a / c divides by a number'", function()
    assert.same({{0.5, 1}, {1.5, 2}}, (D / 2):totable())
    rows_near({{2.5, 0}, {0, 3}}, d / 2)
    lazy_error("div", function() return D / D end)
    lazy_error("div", function() return 2 / D end)
  end)

  it("'A number added to a tensor is added to every entry' (dense and lazy operands)",
     function()
    -- lt.diag{1,2} + 1 is {{2,1},{1,3}}: the off-diagonal zeros become 1
    for _, s in ipairs{lt.diag{1, 2} + 1, 1 + lt.diag{1, 2}, lt.add(lt.diag{1, 2}, 1)} do
      rows_near({{2, 1}, {1, 3}}, s)
    end
    rows_near({{2, 3}, {4, 5}}, D + 1)
    rows_near({{1.5, 1}, {1, 1.5}}, lt.identity(2, 0.5) + 1)
    local K = lt.kernel(lt.tensor{0, 1}, {kind = "rbf", lengthscale = 1})
    local e = math.exp(-0.5)
    rows_near({{3, 2 + e}, {2 + e, 3}}, K + 2, 1e-14)
    rows_near({{-1, e - 2}, {e - 2, -1}}, K - 2, 1e-14)
    local k = lt.kron(lt.tensor{{1, 2}, {3, 4}}, lt.eye(2))
    rows_near({{2, 1, 3, 1}, {1, 2, 1, 3}, {4, 1, 5, 1}, {1, 4, 1, 5}}, k + 1)
    rows_near({{1, 2}, {2, 1}}, op + 1)
    -- with a 1-d dense tensor too
    assert.same({2, 3}, (lt.tensor{1, 2} + 1):totable())
    -- the product of the result sees every entry
    rows_near({4, 7}, (lt.diag{1, 2} + 1) * lt.tensor{1, 2}) -- {{2,1},{1,3}}·{1,2}
  end)

  it("'Structure is kept where it can be: diag + diag is \"diag\", diag · diag is \"diag\", " ..
     "number · diag is \"diag\", kron · kron (conforming factors) is \"kron\", " ..
     "lt.cholesky(diag) is \"diag\". diag + dense is \"dense\"'", function()
    local a, b = lt.diag{1, 2}, lt.diag{3, 4}
    local s = a + b
    assert.equal("diag", lt.type(s))
    rows_near({{4, 0}, {0, 6}}, s)
    local p = a * b
    assert.equal("diag", lt.type(p))
    rows_near({{3, 0}, {0, 8}}, p)
    assert.equal("diag", lt.type(3 * a))
    assert.equal("diag", lt.type(a * 3))
    rows_near({{3, 0}, {0, 6}}, 3 * a)
    local P = lt.tensor{{1, 2}, {3, 4}}
    local Q = lt.tensor{{0, 1}, {1, 1}}
    local kk = lt.kron(P, Q) * lt.kron(Q, P)
    assert.equal("kron", lt.type(kk))
    local PQ, QP = matmul(Drows, {{0, 1}, {1, 1}}), matmul({{0, 1}, {1, 1}}, Drows)
    -- (P⊗Q)(Q⊗P) = PQ ⊗ QP
    local want = {}
    for i = 1, 4 do
      want[i] = {}
      for j = 1, 4 do
        local i1, i2 = math.floor((i - 1) / 2) + 1, (i - 1) % 2 + 1
        local j1, j2 = math.floor((j - 1) / 2) + 1, (j - 1) % 2 + 1
        want[i][j] = PQ[i1][j1] * QP[i2][j2]
      end
    end
    rows_near(want, kk)
    local c = lt.cholesky(lt.diag{4, 9})
    assert.equal("diag", lt.type(c))
    rows_near({{2, 0}, {0, 3}}, c)
    local ad = a + P
    assert.equal("dense", lt.type(ad))
    assert.same({{2, 2}, {3, 6}}, ad:totable())
    assert.equal("dense", lt.type(P + a))
  end)

  describe("'A rule never materialises more than its inputs already hold in memory: " ..
           "where a dense result would, the result stays lazy'", function()
    local n = 3000 -- n² doubles = 72 MB; the inputs below hold O(n)
    local limit = 4e6
    local x, dg, K, Kr

    setup(function()
      lt.manual_seed(11)
      x = lt.randn(n, 2)
      dg = lt.diag(lt.rand(n) + 1)
      K = lt.kernel(x, {kind = "rbf", lengthscale = 1})
      Kr = lt.kron(lt.randn(50, 50), lt.randn(60, 60))
    end)
    teardown(function() x, dg, K, Kr = nil, nil, nil, nil end)

    local cases = {
      {"diag + number", function() return dg + 1 end},
      {"number - diag", function() return 1 - dg end},
      {"kernel + number", function() return K + 1 end},
      {"kernel + diag", function() return K + dg end},
      {"kernel · kernel", function() return K * K end},
      {"kernel · diag", function() return K * dg end},
      {"number · kernel", function() return 2 * K end},
      {"-kernel", function() return -K end},
      {"kernel transpose", function() return K:t() end},
      {"kernel add_jitter", function() return K:add_jitter() end},
      {"diag .* kernel", function() return lt.mul(dg, K) end},
      {"kernel .* diag", function() return lt.mul(K, dg) end},
      {"kron · vector", function() return Kr * lt.ones(n) end},
      {"kron + number", function() return Kr + 1 end},
      {"kron · kron", function() return Kr * Kr end},
      {"kron + diag", function() return Kr + dg end},
      {"kernel · vector", function() return K * lt.ones(n) end},
      {"kernel row", function() return K[3] end},
    }
    for _, c in ipairs(cases) do
      it(c[1], function()
        local m0 = settle()
        local r = c[2]()
        local used = settle() - m0
        assert.is_true(used < limit, string.format("%s used %.1f MB", c[1], used / 1e6))
        assert.is_true(lt.is_tensor(r))
      end)
    end

    it("keeps the values: (diag + 1)·v and (kron)·v at full size", function()
      local v = lt.ones(n)
      local y = (dg + 1) * v
      local dv = dg:diagonal()
      for _, i in ipairs{1, 17, n} do assert.near(dv:get(i) + n, y:get(i), 1e-9) end
    end)

    it("lazy .* lazy stays lazy, and its products see every entry", function()
      local L = lt.lowrank(lt.randn(n, 2))
      local T = lt.toeplitz(lt.linspace(1, 0, n))
      local m0 = settle()
      local KK, LT = lt.mul(K, K), lt.mul(L, T)
      local y = KK * lt.ones(n)
      local z = LT:t() * lt.ones(n)
      local used = settle() - m0
      assert.is_true(used < limit, string.format("lazy .* lazy used %.1f MB", used / 1e6))
      assert.is_true(lt.is_lazy(KK) and lt.is_lazy(LT))
      assert.is_true(KK:is_psd()) -- Schur product theorem
      -- row 5 of K∘K summed in plain Lua from K's entries
      local s = 0
      for j = 1, n do s = s + K:get(5, j) ^ 2 end
      assert.near(s, y:get(5), 1e-9 * s)
      -- column 7 of L∘T summed: (L∘T)ᵀ·1 at 7 = Σ_i L[i,7]·T[i,7]
      local c = 0
      for i = 1, n do c = c + L:get(i, 7) * T:get(i, 7) end
      assert.near(c, z:get(7), 1e-9 * math.max(1, math.abs(c)))
    end)
  end)
end)

-------------------------------------------------------------------------------
describe("API.md: Linear algebra", function()
  -- A lazy SPD operator with a known dense matrix: toeplitz {4, 1, 0.5}.
  local Trows = {{4, 1, 0.5}, {1, 4, 1}, {0.5, 1, 4}}
  local function T() return lt.toeplitz(lt.tensor{4, 1, 0.5}) end
  local b = {1, 2, 3}

  -- plain-Lua solve of a 3x3 (Cramer) and its determinant
  local function det3(m)
    return m[1][1] * (m[2][2] * m[3][3] - m[2][3] * m[3][2])
         - m[1][2] * (m[2][1] * m[3][3] - m[2][3] * m[3][1])
         + m[1][3] * (m[2][1] * m[3][2] - m[2][2] * m[3][1])
  end
  local function solve3(m, rhs)
    local dm, out = det3(m), {}
    for c = 1, 3 do
      local mc = map2(m, function(v, i, j) return j == c and rhs[i] or v end)
      out[c] = det3(mc) / dm
    end
    return out
  end
  local Tb = solve3(Trows, b)
  local quad = 0
  for i = 1, 3 do quad = quad + b[i] * Tb[i] end

  it("'(method A:f(...) and function lt.f(A, ...) alike)' for every call listed", function()
    local calls = {
      dense = {}, diagonal = {}, trace = {}, t = {}, get = {2, 3}, add_diag = {2},
      add_jitter = {0.5}, solve = {lt.tensor(b)}, inv_quad = {lt.tensor(b)}, logdet = {},
      inv_quad_logdet = {lt.tensor(b)}, cholesky = {}, root = {}, root_inv = {}, eigh = {},
      svd = {}, inverse = {}, is_psd = {}, is_symmetric = {},
    }
    for name, args in pairs(calls) do
      for _, make in ipairs{T, function() return T():dense() end} do
        local A = make()
        assert.equal("function", type(lt[name]), "lt." .. name .. " is missing")
        assert.equal("function", type(A[name]), "A:" .. name .. " is missing")
        local m = pack(A[name](A, unpack(args)))
        local f = pack(lt[name](A, unpack(args)))
        assert.equal(m.n, f.n, name)
        for i = 1, m.n do
          local u, v = m[i], f[i]
          if lt.is_tensor(u) then
            assert.equal(lt.type(u), lt.type(v), name)
            local du = lt.is_lazy(u) and u:dense() or u
            local dv = lt.is_lazy(v) and v:dense() or v
            assert.same(du:totable(), dv:totable(), name)
          elseif type(u) == "table" then
            assert.same(u, v, name)
          else
            assert.equal(u, v, name)
          end
        end
      end
    end
  end)

  it("'A:dense(): the dense matrix', 'A:diagonal(): 1-d dense diagonal'", function()
    local A = T()
    local D = A:dense()
    assert.equal("dense", lt.type(D))
    rows_near(Trows, D:totable())
    local g = A:diagonal()
    assert.equal("dense", lt.type(g))
    assert.same({3}, g:shape())
    rows_near({4, 4, 4}, g)
  end)

  it("'A:trace(), A:t(): number; transpose (lazy where A is)'", function()
    assert.equal(12, T():trace())
    local N = lt.toeplitz(lt.tensor{1, 2, 3}, lt.tensor{1, 5, 6})
    local Nt = N:t()
    assert.is_true(lt.is_lazy(Nt))
    rows_near(transpose({{1, 5, 6}, {2, 1, 5}, {3, 2, 1}}), Nt)
    assert.is_false(lt.is_lazy(lt.tensor{{1, 2}, {3, 4}}:t()))
    local L = lt.lowrank(lt.tensor{{1, 2}, {3, 4}, {5, 6}}, lt.tensor{{1, 0}, {0, 1}})
    assert.is_true(lt.is_lazy(L:t()))
    rows_near({{1, 3, 5}, {2, 4, 6}}, L:t())
  end)

  it("'A:get(i, j), A[i]: entry, row i as 1-d dense (no materialisation of A)'", function()
    local A = T()
    assert.equal(0.5, A:get(1, 3))
    local r = A[2]
    assert.equal("dense", lt.type(r))
    assert.same({3}, r:shape())
    rows_near({1, 4, 1}, r)
    local n = 3000
    local K = lt.kernel(lt.linspace(0, 1, n), {kind = "matern12", lengthscale = 0.5})
    local m0 = settle()
    local row = K[n]
    local e = K:get(n, 1)
    assert.is_true(settle() - m0 < 1e6)
    assert.near(math.exp(-2), row:get(1), 1e-14)
    assert.near(math.exp(-2), e, 1e-14)
  end)

  it("'A:add_diag(d), A:add_jitter([eps]): A + diag(d) (d a number or 1-d); A + eps·I " ..
     "(eps 1e-6 by default)'", function()
    local A = T()
    rows_near({{6, 1, 0.5}, {1, 6, 1}, {0.5, 1, 6}}, A:add_diag(2))
    rows_near({{5, 1, 0.5}, {1, 6, 1}, {0.5, 1, 7}}, A:add_diag(lt.tensor{1, 2, 3}))
    rows_near({{4.25, 1, 0.5}, {1, 4.25, 1}, {0.5, 1, 4.25}}, A:add_jitter(0.25))
    local J = A:add_jitter()
    for i = 1, 3 do assert.near(4 + 1e-6, J:get(i, i), 1e-15) end
    assert.equal(1, J:get(1, 2))
    rows_near(Trows, A) -- A itself is unchanged
  end)

  it("'A:solve(B [, opts]): A⁻¹B, and an info table as second result' with " ..
     "'info = {method = ..., iterations = , residual = , converged = }'", function()
    local x, info = T():solve(lt.tensor(b))
    rows_near(Tb, x, 1e-12)
    assert.equal("table", type(info))
    assert.equal("string", type(info.method))
    if math.type then assert.equal("integer", math.type(info.iterations)) end
    assert.equal("number", type(info.residual))
    assert.equal("boolean", type(info.converged))
    -- the iterative path fills the same four fields
    local _, it_info = T():solve(lt.tensor(b), {max_cholesky_size = 0})
    assert.matches("^cg", it_info.method)
    if math.type then assert.equal("integer", math.type(it_info.iterations)) end
    assert.is_true(it_info.iterations >= 1)
    assert.equal("number", type(it_info.residual))
    assert.is_true(it_info.converged)
    -- several right-hand sides at once
    local X = T():solve(lt.tensor{{1, 0}, {2, 0}, {3, 1}})
    assert.same({3, 2}, X:shape())
    local e3 = solve3(Trows, {0, 0, 1})
    rows_near({{Tb[1], e3[1]}, {Tb[2], e3[2]}, {Tb[3], e3[3]}}, X, 1e-12)
  end)

  it("'A:inv_quad(b): bᵀA⁻¹b (summed over the columns of b)'", function()
    assert.near(quad, T():inv_quad(lt.tensor(b)), 1e-12)
    local e1 = solve3(Trows, {1, 0, 0})
    local both = T():inv_quad(lt.tensor{{1, 1}, {2, 0}, {3, 0}})
    assert.near(quad + e1[1], both, 1e-12)
  end)

  it("'A:logdet(): log det A', 'A:inv_quad_logdet(b): both'", function()
    local ld = math.log(det3(Trows))
    assert.near(ld, T():logdet(), 1e-12)
    local q, l = T():inv_quad_logdet(lt.tensor(b))
    assert.near(quad, q, 1e-12)
    assert.near(ld, l, 1e-12)
  end)

  it("'A:inv_quad_logdet(b): both, sharing one factorisation or one iterative run'", function()
    local n = 120
    lt.manual_seed(4)
    local M = lt.randn(n, n)
    local A = M * M:t() / n + lt.eye(n)
    local columns = 0
    local op = lt.operator{shape = {n, n}, psd = true, matmul = function(X)
      columns = columns + X:size(2)
      return A * X
    end}
    local rhs = lt.randn(n)
    local function cost(f)
      columns = 0
      local r = pack(f())
      return columns, r
    end
    -- direct: the operator is read once (n columns), as for logdet alone
    local both, r = cost(function() return op:inv_quad_logdet(rhs) end)
    local ld = cost(function() return op:logdet() end)
    assert.equal(n, both)
    assert.equal(n, ld)
    local x = A:solve(rhs)
    assert.near(rhs:dot(x), r[1], 1e-8 * math.abs(r[1]))
    assert.near(A:logdet(), r[2], 1e-8 * math.abs(r[2]))
    -- iterative: one run costs less than the two parts
    lt.with_settings({max_cholesky_size = 0}, function()
      local joint = cost(function() return op:inv_quad_logdet(rhs) end)
      local parts = cost(function() return op:inv_quad(rhs) end) +
                    cost(function() return op:logdet() end)
      assert.is_true(joint < parts, joint .. " >= " .. parts)
    end)
  end)

  it("'A:cholesky([upper]): lower L with L·Lᵀ = A, or upper U with Uᵀ·U = A " ..
     "(an operator; ...; an error if A is not positive definite)'", function()
    local L = T():cholesky()
    assert.is_true(lt.is_tensor(L))
    local Lr = L:dense():totable()
    for i = 1, 3 do for j = i + 1, 3 do assert.equal(0, Lr[i][j]) end end
    rows_near(Trows, matmul(Lr, transpose(Lr)), 1e-12)
    local U = T():cholesky(true)
    local Ur = U:dense():totable()
    for i = 1, 3 do for j = 1, i - 1 do assert.equal(0, Ur[i][j]) end end
    rows_near(Trows, matmul(transpose(Ur), Ur), 1e-12)
    -- the 2x2 by hand: L = {{2, 0}, {1/2, sqrt(11)/2}}
    rows_near({{2, 0}, {0.5, math.sqrt(11) / 2}}, lt.tensor(A_rows):cholesky(), 1e-14)
    rows_near({{2, 0.5}, {0, math.sqrt(11) / 2}}, lt.cholesky(lt.tensor(A_rows), true), 1e-14)
    lazy_error("not positive definite", function()
      return lt.tensor{{1, 2}, {2, 1}}:cholesky()
    end)
  end)

  it("'A:root(): R with A ≈ R·Rᵀ', 'A:root_inv(): S with A⁻¹ ≈ S·Sᵀ'", function()
    local R = T():root():dense():totable()
    rows_near(Trows, matmul(R, transpose(R)), 1e-10)
    local S = T():root_inv():dense():totable()
    local SSt = matmul(S, transpose(S))
    rows_near({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, matmul(Trows, SSt), 1e-10)
  end)

  it("'A:eigh(): w, Q: eigenvalues (1-d, ascending) and eigenvectors as columns'", function()
    -- {{2,1},{1,2}}: eigenvalues 1 and 3, eigenvectors (1,-1)/√2 and (1,1)/√2
    local w, Q = lt.psd(lt.tensor{{2, 1}, {1, 2}}):eigh()
    assert.same({2}, w:shape())
    rows_near({1, 3}, w, 1e-12)
    local q = Q:totable()
    local h = 1 / math.sqrt(2)
    assert.near(h, math.abs(q[1][1]), 1e-12)
    assert.near(-1, q[1][1] * q[2][1] / (h * h), 1e-12) -- column 1 ∝ (1, -1)
    assert.near(1, q[1][2] * q[2][2] / (h * h), 1e-12) -- column 2 ∝ (1, 1)
    -- a lazy operator: ascending too
    local dw = lt.diag{3, -1, 2}:eigh()
    rows_near({-1, 2, 3}, dw)
    local tw = T():eigh():totable()
    for i = 2, 3 do assert.is_true(tw[i - 1] <= tw[i]) end
    assert.near(12, tw[1] + tw[2] + tw[3], 1e-12)
  end)

  it("'A:svd(): U, S (1-d, descending), V with A = U·diag(S)·Vᵀ (thin)'", function()
    local M = {{3, 0}, {0, 4}, {0, 0}}
    local U, S, V = lt.tensor(M):svd()
    assert.same({3, 2}, U:shape()) -- thin
    assert.same({2}, S:shape())
    assert.same({2, 2}, V:shape())
    rows_near({4, 3}, S, 1e-12)
    local s = S:totable()
    local US = map2(U:totable(), function(v, _, j) return v * s[j] end)
    rows_near(M, matmul(US, transpose(V:totable())), 1e-12)
    local U2, S2, V2 = lt.tensor(transpose(M)):svd()
    assert.same({2, 2}, U2:shape())
    assert.same({2}, S2:shape())
    assert.same({3, 2}, V2:shape())
    -- a lazy operator: descending too
    local ls = lt.diag{1, -5, 3}:svd()
    rows_near({5, 3, 1}, (select(2, lt.diag{1, -5, 3}:svd())))
    assert.is_true(lt.is_tensor(ls))
  end)

  it("'A:inverse(): a lazy inverse: its product solves'", function()
    local I = T():inverse()
    assert.is_true(lt.is_lazy(I))
    rows_near(Tb, I * lt.tensor(b), 1e-12)
  end)

  it("'A:is_psd(), A:is_symmetric(): true, false, or nil when unknown'", function()
    assert.is_true(lt.diag{1, 2}:is_psd())
    assert.is_false(lt.diag{1, -2}:is_psd())
    assert.is_false(lt.zeros(2, 3):is_psd())
    assert.is_false(lt.tensor{{1, 2}, {3, 4}}:is_symmetric())
    local op = lt.operator{shape = {2, 2}, matmul = function(X) return X end}
    assert.is_nil(op:is_psd())
    assert.is_nil(op:is_symmetric())
    assert.is_nil(lt.tensor(A_rows):is_psd())
    assert.is_true(lt.tensor(A_rows):is_symmetric())
  end)

  it("'An iterative method that does not converge says so in info and never returns " ..
     "silently wrong numbers'", function()
    local n = 200
    lt.manual_seed(5)
    local M = lt.randn(n, n)
    local MMt = M * M:t()
    local S = lt.operator{shape = {n, n}, matmul = function(X) return MMt * X end, psd = true}
              + lt.identity(n, 1e-3)
    local rhs = lt.randn(n)
    local x, info = S:solve(rhs, {max_cholesky_size = 0, max_cg_iterations = 3,
                                  preconditioner_size = 0})
    assert.is_false(info.converged)
    -- the residual it reports is the true one, within rounding
    local r = (S * x - rhs):norm() / rhs:norm()
    assert.near(r, info.residual, 1e-6 + 1e-3 * r)
  end)

  it("'Methods that need positive definiteness (cholesky, root, inv_quad, logdet by " ..
     "Cholesky) work on any operator that is positive definite, flagged or not, and raise a " ..
     "clear error when it is not'", function()
    local unflagged = lt.operator{shape = {2, 2},
                                  matmul = function(X) return lt.tensor(A_rows) * X end}
    assert.is_nil(unflagged:is_psd())
    rows_near({{2, 0}, {0.5, math.sqrt(11) / 2}}, unflagged:cholesky(), 1e-12)
    local R = unflagged:root():dense():totable()
    rows_near(A_rows, matmul(R, transpose(R)), 1e-10)
    -- bᵀA⁻¹b for b = (1, 2): (3 - 4 + 16 - 2·... ) = (3·1 - 2·2·1 + 4·4) / 11 = 15/11
    assert.near(15 / 11, unflagged:inv_quad(lt.tensor{1, 2}), 1e-12)
    assert.near(math.log(11), unflagged:logdet(), 1e-12)
    local indefinite = lt.operator{shape = {2, 2},
                                   matmul = function(X) return lt.tensor{{1, 2}, {2, 1}} * X end}
    lazy_error("not positive definite", function() return indefinite:cholesky() end)
    lazy_error("cholesky", function() return indefinite:cholesky() end)
    local flagged = lt.operator{shape = {2, 2}, psd = true,
                                matmul = function(X) return lt.tensor{{1, 2}, {2, 1}} * X end}
    lazy_error(nil, function() return flagged:cholesky() end)
    -- inv_quad of an indefinite matrix either refuses or gives the exact bᵀA⁻¹b
    -- ({{1,2},{2,1}}⁻¹ = {{-1,2},{2,-1}}/3, b = (1,1): 2/3), never another number
    local ok, v = pcall(function() return indefinite:inv_quad(lt.tensor{1, 1}) end)
    if ok then assert.near(2 / 3, v, 1e-12) else assert.matches("^lazytensor: ", v) end
  end)

  it("'An exactly singular solve raises'", function()
    lazy_error("singular", function() return lt.tensor{{1, 2}, {2, 4}}:solve(lt.tensor{1, 1}) end)
    lazy_error("singular", function() return lt.diag{1, 0}:solve(lt.tensor{1, 1}) end)
    local zero = lt.operator{shape = {3, 3}, matmul = function(X) return X * 0 end}
    lazy_error("singular", function() return zero:solve(lt.tensor{1, 1, 1}) end)
  end)
end)

-------------------------------------------------------------------------------
describe("API.md: The registry", function()
  it("'lt.implements(op, type_a [, type_b], fn) registers a rule for an operation name ... " ..
     "fn receives the operands and returns the result, or lt.NotImplemented'", function()
    -- Each listed operation reaches a user rule through its public call.
    local active, seen = nil, {}
    local function spy(name, answer)
      lt.implements(name, "operator", function(a)
        if active ~= name then return lt.NotImplemented end
        seen[name] = lt.type(a)
        return answer()
      end)
    end
    local op = lt.operator{shape = {2, 2}, matmul = function(X) return lt.tensor(A_rows) * X end}
    local marker = function() return lt.tensor{{7, 7}, {7, 7}} end
    local unary = {
      cholesky = {marker, function() return op:cholesky() end},
      diagonal = {function() return lt.tensor{7, 7} end, function() return op:diagonal() end},
      dense = {marker, function() return op:dense() end},
      root = {marker, function() return op:root() end},
      transpose = {marker, function() return op:t() end},
      logdet = {function() return 7 end, function() return op:logdet() end},
    }
    for name, c in pairs(unary) do
      spy(name, c[1])
      active = name
      local r = c[2]()
      active = nil
      assert.equal("operator", seen[name], name)
      if type(r) == "number" then
        assert.equal(7, r, name)
      else
        local rr = lt.is_lazy(r) and r:dense():totable() or r:totable()
        assert.equal(7, type(rr[1]) == "table" and rr[1][1] or rr[1], name)
      end
    end
    -- binary ops with "any" on the other side
    local binary = {
      add = function() return op + lt.diag{1, 1} end,
      sub = function() return op - lt.diag{1, 1} end,
      matmul = function() return op * lt.diag{1, 1} end,
      mul = function() return lt.mul(op, lt.diag{1, 1}) end,
    }
    for name, call in pairs(binary) do
      lt.implements(name, "operator", "any", function(a, b)
        if active ~= name then return lt.NotImplemented end
        seen[name] = {lt.type(a), lt.type(b)}
        return lt.tensor{{7, 7}, {7, 7}}
      end)
      active = name
      local r = call()
      active = nil
      assert.same({"operator", "diag"}, seen[name], name)
      assert.same({{7, 7}, {7, 7}}, r:totable(), name)
    end
    -- and the built-in answers are back once the rules hand the call on
    rows_near({{5, 1}, {1, 4}}, op + lt.diag{1, 1})
  end)

  it("'(\"any\" matches every type)' and 'Resolution for op(a, b): (type(a), type(b)), then " ..
     "(type(a), \"any\"), then (\"any\", type(b)), then the generic (\"any\", \"any\")'", function()
    local log = {}
    local function rule(tag)
      return function() log[#log + 1] = tag; return lt.NotImplemented end
    end
    lt.implements("contract_order", "any", "any", function(a, b)
      log[#log + 1] = "any,any"
      return lt.tensor{lt.type(a) == "toeplitz" and 1 or 0, lt.type(b) == "lowrank" and 1 or 0}
    end)
    lt.implements("contract_order", "any", "lowrank", rule("any,lowrank"))
    lt.implements("contract_order", "toeplitz", "any", rule("toeplitz,any"))
    lt.implements("contract_order", "toeplitz", "lowrank", rule("toeplitz,lowrank"))
    local t = lt.toeplitz(lt.tensor{1, 0})
    local l = lt.lowrank(lt.tensor{{1}, {1}})
    assert.same({1, 1}, lt.call("contract_order", t, l):totable())
    assert.same({"toeplitz,lowrank", "toeplitz,any", "any,lowrank", "any,any"}, log)
    -- "any" on either side matches a type no rule names
    log = {}
    assert.same({0, 0}, lt.call("contract_order", l, t):totable())
    assert.same({"any,any"}, log)
  end)

  it("'the generic (\"any\", \"any\") fallback, which needs nothing but products with dense " ..
     "matrices'", function()
    -- an operator known only through its product gets every operation
    local op = lt.operator{shape = {2, 2}, matmul = function(X) return lt.tensor(A_rows) * X end}
    rows_near(A_rows, op:dense())
    rows_near({4, 3}, op:diagonal())
    assert.near(7, op:trace(), 1e-12)
    rows_near({1 / 11, 7 / 11}, (op:solve(lt.tensor{1, 2})), 1e-12)
    assert.near(math.log(11), op:logdet(), 1e-12)
    local w = op:eigh()
    rows_near({(7 - math.sqrt(5)) / 2, (7 + math.sqrt(5)) / 2}, w, 1e-12)
    local _, S = op:svd()
    rows_near({(7 + math.sqrt(5)) / 2, (7 - math.sqrt(5)) / 2}, S, 1e-12)
    rows_near(A_rows, op:t())
    rows_near({{4, 1}, {1, 3}}, op:cholesky():dense() * op:cholesky():dense():t())
  end)

  it("a rule's own info table (after its results) is what solve reports: 'An iterative " ..
     "method that does not converge says so in info'", function()
    local active = false
    lt.implements("solve", "operator", "any", function(_, b)
      if not active then return lt.NotImplemented end
      return b * 0.5, {method = "my_iterative", iterations = 4, residual = 0.25, converged = false}
    end)
    lt.implements("eigh", "operator", function()
      if not active then return lt.NotImplemented end
      return lt.tensor{1, 2}, lt.eye(2), {method = "my_eigh", iterations = 2, converged = true}
    end)
    local op = lt.operator{shape = {2, 2}, matmul = function(X) return X * 2 end}
    active = true
    local x, info = op:solve(lt.tensor{2, 4})
    local w, Q, einfo = op:eigh()
    active = false
    assert.same({1, 2}, x:totable())
    assert.same({method = "my_iterative", iterations = 4, residual = 0.25, converged = false}, info)
    assert.same({1, 2}, w:totable())
    assert.same({2, 2}, Q:shape())
    assert.equal("my_eigh", einfo.method)
    assert.equal(2, einfo.iterations)
    assert.is_true(einfo.converged)
    -- a rule without an info table still reports one
    local _, plain = op:solve(lt.tensor{2, 4})
    assert.is_true(plain.converged)
  end)

  it("'A rule registered later for the same key is tried before an earlier one'", function()
    local log = {}
    lt.implements("contract_later", "diag", function() log[#log + 1] = 1; return lt.tensor{1} end)
    lt.implements("contract_later", "diag", function() log[#log + 1] = 2; return lt.tensor{2} end)
    assert.same({2}, lt.call("contract_later", lt.diag{1}):totable())
    assert.same({2}, log)
  end)

  it("'lt.explain(op, a [, b]) returns a readable string: the rule that would run and the " ..
     "candidates before it'", function()
    local l = lt.lowrank(lt.tensor{{1}, {1}})
    local d = lt.diag{1, 2}
    lt.implements("contract_explain", "any", "any", function() return lt.NotImplemented end)
    lt.implements("contract_explain", "lowrank", "any", function() return lt.NotImplemented end)
    local text = lt.explain("contract_explain", l, d)
    assert.equal("string", type(text))
    assert.matches("contract_explain(lowrank, diag)", text, 1, true)
    local first = text:find("1. ", 1, true)
    local second = text:find("2. ", 1, true)
    assert.truthy(first and second and first < second)
    assert.truthy(text:find("[lowrank, any]", 1, true) < text:find("[any, any]", 1, true))
    -- a built-in: the rule that runs is named, with the generic fallback after it
    local t = lt.explain("add", d, d)
    assert.truthy(t:find("diag + diag", 1, true))
    assert.truthy(t:find("runs first", 1, true))
    assert.truthy(t:find("diag + diag", 1, true) < t:find("generic add", 1, true))
  end)
end)

-------------------------------------------------------------------------------
describe("API.md: Settings, randomness, memory", function()
  local values = {
    max_cholesky_size = 123, cg_tolerance = 1e-4, max_cg_iterations = 77,
    num_trace_samples = 5, max_lanczos_iterations = 33, cholesky_jitter = 1e-7,
    cholesky_max_tries = 6, preconditioner_size = 4, num_threads = 2,
  }

  it("'lt.settings.NAME reads and writes a setting: max_cholesky_size (800), ..., num_threads'",
     function()
    assert.equal(800, lt.settings.max_cholesky_size)
    for name, v in pairs(values) do
      local old = lt.settings[name]
      assert.equal("number", type(old), name)
      lt.settings[name] = v
      assert.equal(v, lt.settings[name], name)
      lt.settings[name] = old
      assert.equal(old, lt.settings[name], name)
    end
    lazy_error("unknown setting", function() return lt.settings.no_such_setting end)
    lazy_error("num_threads", function() lt.settings.num_threads = -1 end)
  end)

  it("'max_cholesky_size' decides between the direct and the iterative solve", function()
    local A = lt.toeplitz(lt.tensor{4, 1, 0.5})
    local _, small = A:solve(lt.tensor{1, 2, 3})
    assert.is_nil(small.method:match("^cg"))
    local _, big = lt.with_settings({max_cholesky_size = 2}, function()
      return A:solve(lt.tensor{1, 2, 3})
    end)
    assert.matches("^cg", big.method)
  end)

  it("'lt.with_settings(tbl, fn) runs fn with those settings and restores them afterwards, " ..
     "also on error'", function()
    local before = {}
    for name in pairs(values) do before[name] = lt.settings[name] end
    local inside = lt.with_settings(values, function()
      local t = {}
      for name in pairs(values) do t[name] = lt.settings[name] end
      return t
    end)
    assert.same(values, inside)
    for name in pairs(values) do assert.equal(before[name], lt.settings[name], name) end
    local ok, err = pcall(lt.with_settings, values, function() error("boom") end)
    assert.is_false(ok)
    assert.matches("boom", tostring(err), 1, true)
    for name in pairs(values) do assert.equal(before[name], lt.settings[name], name) end
    ok = pcall(lt.with_settings, {num_threads = 3}, function()
      return lt.tensor{{1, 2}, {2, 1}}:cholesky()
    end)
    assert.is_false(ok)
    assert.equal(before.num_threads, lt.settings.num_threads)
  end)

  it("'lt.manual_seed(n): the same seed gives the same numbers'", function()
    lt.manual_seed(1234)
    local a, b, c = lt.randn(50):totable(), lt.rand(20):totable(), lt.randn(3, 3):totable()
    lt.manual_seed(1234)
    assert.same(a, lt.randn(50):totable())
    assert.same(b, lt.rand(20):totable())
    assert.same(c, lt.randn(3, 3):totable())
    lt.manual_seed(1235)
    assert.are_not.same(a, lt.randn(50):totable())
  end)

  it("'local <close> A = ... frees A's memory at the end of the scope; a closed tensor used " ..
     "again raises an error'", function()
    if not has_close then
      pending("needs Lua 5.4 (this is " .. _VERSION .. ")")
      return
    end
    -- compiled at run time: `<close>` does not parse before Lua 5.4
    local scope = assert((loadstring or load)([[
      local lt, settle = ...
      local m0 = settle()
      local keep, lazy, inside
      do
        local A <close> = lt.zeros(500, 500) -- 2 MB
        inside = lt.memory() - m0
        keep = A
      end
      local after = lt.memory() - m0 -- before any collection
      do
        local D <close> = lt.diag{1, 2}
        lazy = D
      end
      return inside, after, keep, lazy
    ]]))
    local inside, after, keep, lazy = scope(lt, settle)
    assert.is_true(inside >= 500 * 500 * 8)
    assert.is_true(after < 100000)
    local uses = {
      function() return keep:sum() end,
      function() return keep[1] end,
      function() return #keep end,
      function() return keep + 1 end,
      function() return lt.add(keep, keep) end,
      function() return lazy:trace() end,
      function() return lazy * lt.tensor{1, 1} end,
      function() return lazy:solve(lt.tensor{1, 1}) end,
    }
    for i, use in ipairs(uses) do
      local err = errmsg(use)
      assert.matches("^lazytensor: ", err, nil, "use " .. i)
      assert.matches("closed", err, 1, true)
    end
  end)

  it("'lt.memory() is the number of bytes the library holds for this Lua state'", function()
    local m0 = settle()
    if math.type then assert.equal("integer", math.type(m0)) end
    local t = lt.zeros(1000, 100)
    assert.equal(100000, t:numel())
    local held = lt.memory() - m0
    assert.is_true(held >= 1000 * 100 * 8 and held < 1000 * 100 * 8 + 4096, tostring(held))
    t = nil -- luacheck: ignore 311
    -- and it returns to its baseline once the tensors are collected (in a
    -- function: LuaJIT keeps a finished block's locals on the stack)
    local function work()
      local x = lt.randn(300, 4)
      local K = lt.kernel(x, {kind = "rbf", lengthscale = 1}):add_jitter(0.1)
      local s = K:solve(lt.ones(300))
      local w = (K + lt.diag(lt.ones(300))):logdet()
      assert.is_true(lt.is_tensor(s) and w == w)
    end
    work()
    assert.equal(m0, settle())
  end)
end)

-------------------------------------------------------------------------------
describe("API.md: Errors", function()
  it("'Bad input raises a Lua error whose message starts with lazytensor: and names the " ..
     "operation and what was wrong (shapes, types, not positive definite, ...)'", function()
    local cases = {
      {"add", "2x2", function() return lt.tensor{{1, 2}, {3, 4}} + lt.eye(3) end},
      {"matmul", "3x3", function() return lt.diag{1, 2} * lt.eye(3) end},
      {"mul", "shapes", function() return lt.mul(lt.diag{1, 2}, lt.diag{1, 2, 3}) end},
      {"solve", "", function() return lt.diag{1, 2}:solve(lt.tensor{1, 2, 3}) end},
      {"matmul", "string", function() return lt.diag{1, 2} * "x" end},
      {"tensor", "", function() return lt.tensor{1, "a"} end},
      {"cholesky", "not positive definite",
       function() return lt.tensor{{1, 2}, {2, 1}}:cholesky() end},
      {"solve", "singular", function() return lt.tensor{{1, 1}, {1, 1}}:solve(lt.tensor{1, 2}) end},
      {"kernel", "",
       function() return lt.kernel(lt.tensor{1, 2}, {kind = "nope", lengthscale = 1}) end},
      {"kron", "", function() return lt.kron() end},
      {"zeros", "non-negative integer", function() return lt.zeros(-2) end},
      -- arguments of the wrong Lua type, in the helpers too
      {"with_settings", "function", function() return lt.with_settings({}, 5) end},
      {"with_settings", "table", function() return lt.with_settings(5, print) end},
      {"settings", "string", function() return lt.settings[{}] end},
      {"full", "table", function() return lt.full(5, 1) end},
      {"implements", "string", function() lt.implements("add", {}, print) end},
      {"call", "string", function() return lt.call({}, lt.diag{1}) end},
      {"explain", "string", function() return lt.explain(nil, lt.diag{1}) end},
      {"mvn", "cov", function() return lt.mvn(lt.zeros(2)) end},
      {"mvn", "mean", function() return lt.mvn(5, lt.eye(2)) end},
      -- (a 2-d mean is a batch of means: of 2 entries each here, for a 4x4 cov)
      {"mvn", "2 entries per member but cov is 4x4",
       function() return lt.mvn(lt.zeros(2, 2), lt.eye(4)) end},
      {"mvn:log_prob", "x", function() return lt.mvn(lt.zeros(2), lt.eye(2)):log_prob(5) end},
    }
    for _, c in ipairs(cases) do
      local err = errmsg(function()
        local r = c[3]() -- not a tail call: a position prefix would show
        return r
      end)
      assert.matches("^lazytensor: " .. c[1], err)
      if c[2] ~= "" then assert.matches(c[2], err, 1, true) end
    end
  end)

  it("'No input ... leaks memory'", function()
    local m0 = settle()
    for _ = 1, 20 do
      pcall(function() return lt.tensor{{1, 2}, {2, 1}}:cholesky() end)
      pcall(function() return lt.randn(50, 50) + lt.eye(3) end)
      pcall(function() return lt.tensor{{1, 1}, {1, 1}}:solve(lt.randn(2)) end)
      pcall(function()
        return lt.operator{shape = {3, 3}, matmul = function() error("cb") end} * lt.ones(3)
      end)
      pcall(function() return lt.kernel(lt.randn(10), {kind = "nope"}) end)
    end
    assert.equal(m0, settle())
  end)
end)

-------------------------------------------------------------------------------
describe("API.md: Distributions", function()
  -- μ = (1, -1), Σ = {{2, 0.8}, {0.8, 1}}: det 1.36, Σ⁻¹ = {{1, -0.8}, {-0.8, 2}} / 1.36
  local LOG2PI = math.log(2 * math.pi)
  local det = 1.36
  local Sinv = {{1 / det, -0.8 / det}, {-0.8 / det, 2 / det}}
  local function log_prob(x)
    local d1, d2 = x[1] - 1, x[2] + 1
    local q = Sinv[1][1] * d1 * d1 + 2 * Sinv[1][2] * d1 * d2 + Sinv[2][2] * d2 * d2
    return -0.5 * (q + math.log(det) + 2 * LOG2PI)
  end
  local function P() return lt.mvn(lt.tensor{1, -1}, lt.tensor{{2, 0.8}, {0.8, 1}}) end

  it("'lt.mvn(mean, cov) (mean a 1-d tensor of k, cov any k×k operator)'", function()
    for _, cov in ipairs{lt.tensor{{2, 0.8}, {0.8, 1}}, lt.toeplitz(lt.tensor{2, 0.8}) * 1,
                         lt.lowrank(lt.tensor{{1.2, 0.4}, {0.4, 0.6}}) + lt.diag{0.4, 0.48}} do
      local d = lt.mvn(lt.tensor{1, 0}, cov)
      assert.equal("number", type(d:log_prob(lt.tensor{0, 0})))
    end
    -- Σ = toeplitz(2, 0.8) has the same log_prob formula with σ₂² = 2
    local d = lt.mvn(lt.tensor{1, -1}, lt.diag{2, 1})
    assert.near(-0.5 * (0.5 + 1 + math.log(2) + 2 * LOG2PI), d:log_prob(lt.tensor{0, 0}), 1e-12)
  end)

  it("'d:log_prob(x) (a number for x of k; a 1-d tensor of n for an n×k x)'", function()
    local d = P()
    local v = d:log_prob(lt.tensor{0.5, 0.25})
    assert.equal("number", type(v))
    assert.near(log_prob{0.5, 0.25}, v, 1e-12)
    local xs = {{0, 0}, {1, -1}, {3, 2}}
    local b = d:log_prob(lt.tensor(xs))
    assert.equal("dense", lt.type(b))
    assert.same({3}, b:shape())
    for i, x in ipairs(xs) do assert.near(log_prob(x), b:get(i), 1e-12) end
  end)

  it("'d:rsample([n]) (shape {k}, or {n, k})'", function()
    lt.manual_seed(2)
    local d = P()
    assert.same({2}, d:rsample():shape())
    assert.same({5, 2}, d:rsample(5):shape())
    assert.same({1, 2}, d:rsample(1):shape())
    -- 'Sizes are non-negative integers': n = 0 is a size, others are errors
    assert.same({0, 2}, d:rsample(0):shape())
    for _, bad in ipairs{-1, 1.5, 0 / 0, math.huge, "3"} do
      lazy_error("rsample", function() return d:rsample(bad) end)
    end
    local n = 20000
    local xs = d:rsample(n)
    local mean = xs:mean(1)
    assert.near(1, mean:get(1), 0.05)
    assert.near(-1, mean:get(2), 0.05)
  end)

  it("'d:entropy(), d:mean(), d:variance(), d:covariance()'", function()
    local d = P()
    assert.near(0.5 * (2 * (1 + LOG2PI) + math.log(det)), d:entropy(), 1e-12)
    assert.same({1, -1}, d:mean():totable())
    rows_near({2, 1}, d:variance(), 1e-14)
    rows_near({{2, 0.8}, {0.8, 1}}, d:covariance(), 1e-14)
  end)

  it("'lt.kl(p, q)' against the closed form, correlated covariances", function()
    -- KL(p‖q) = ½ (tr(Σq⁻¹Σp) + (μq−μp)ᵀΣq⁻¹(μq−μp) − k + ln(det Σq / det Σp))
    local p = P()
    local Sq = {{1, 0.3}, {0.3, 2}}
    local detq = 2 - 0.09
    local Sqinv = {{2 / detq, -0.3 / detq}, {-0.3 / detq, 1 / detq}}
    local q = lt.mvn(lt.tensor{0, 0.5}, lt.tensor(Sq))
    local Sp = {{2, 0.8}, {0.8, 1}}
    local tr = 0
    for i = 1, 2 do for j = 1, 2 do tr = tr + Sqinv[i][j] * Sp[j][i] end end
    local dm = {0 - 1, 0.5 + 1}
    local quad = 0
    for i = 1, 2 do for j = 1, 2 do quad = quad + dm[i] * Sqinv[i][j] * dm[j] end end
    local want = 0.5 * (tr + quad - 2 + math.log(detq / det))
    assert.near(want, lt.kl(p, q), 1e-12)
    assert.near(0, lt.kl(p, P()), 1e-12)
    assert.is_true(lt.kl(q, p) > 0)
  end)
end)
