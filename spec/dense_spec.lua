-- Dense tensors: creation, shape, indexing, views, element-wise operations,
-- reductions, products, printing and the random generator. Every value is
-- checked against hand-computed numbers or plain Lua loops.
local lt = require "lazytensor"
local ref = require "support.ref"

describe("dense tensors", function()
  describe("creation", function()
    it("builds from nested tables", function()
      local t = lt.tensor{{1, 2, 3}, {4, 5, 6}}
      assert.same({2, 3}, t:shape())
      assert.same({{1, 2, 3}, {4, 5, 6}}, t:totable())
      assert.same({7, 8}, lt.tensor{7, 8}:totable())
      assert.equal("dense", lt.type(t))
      assert.is_false(lt.is_lazy(t))
      assert.is_true(lt.is_tensor(t))
      assert.is_false(lt.is_tensor({}))
      assert.is_nil(lt.type(3))
    end)

    it("makes zeros, ones, full and eye", function()
      assert.same({{0, 0, 0}, {0, 0, 0}}, lt.zeros(2, 3):totable())
      assert.same({1, 1, 1, 1}, lt.ones(4):totable())
      assert.same({{2.5, 2.5}, {2.5, 2.5}}, lt.full({2, 2}, 2.5):totable())
      assert.same({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, lt.eye(3):totable())
      assert.same({2, 3, 4}, lt.zeros(2, 3, 4):shape())
    end)

    it("arange includes the end when it lands on it", function()
      assert.same({1, 2, 3, 4, 5}, lt.arange(1, 5):totable())
      assert.same({1, 1.5, 2}, lt.arange(1, 2, 0.5):totable())
      assert.same({0, 2, 4}, lt.arange(0, 5, 2):totable())
      assert.same({3, 2, 1}, lt.arange(3, 1, -1):totable())
    end)

    it("linspace has n points from a to b", function()
      ref.near({0, 0.25, 0.5, 0.75, 1}, lt.linspace(0, 1, 5):totable(), 1e-15)
      assert.same({-1, 1}, lt.linspace(-1, 1, 2):totable())
    end)
  end)

  describe("shape", function()
    it("reports shape, size, dim, numel and #", function()
      local t = lt.zeros(3, 4)
      assert.same({3, 4}, t:shape())
      assert.equal(3, t:size(1))
      assert.equal(4, t:size(2))
      assert.equal(2, t:dim())
      assert.equal(12, t:numel())
      assert.equal(3, #t)
      assert.equal(5, #lt.zeros(5))
    end)

    it("returns a new shape table each time", function()
      local t = lt.zeros(2, 2)
      local s = t:shape()
      s[1] = 99
      assert.same({2, 2}, t:shape())
    end)
  end)

  describe("indexing", function()
    it("t[i] is a number for 1-d and a row view for 2-d", function()
      local v = lt.tensor{10, 20, 30}
      assert.equal(20, v[2])
      local m = lt.tensor{{1, 2}, {3, 4}}
      assert.same({3, 4}, m[2]:totable())
    end)

    it("t[i] = number fills, t[i] = tensor copies", function()
      local m = lt.zeros(2, 3)
      m[1] = 7
      m[2] = lt.tensor{1, 2, 3}
      assert.same({{7, 7, 7}, {1, 2, 3}}, m:totable())
      local v = lt.zeros(3)
      v[3] = 5
      assert.same({0, 0, 5}, v:totable())
    end)

    it("get and set take one index per dimension", function()
      local t = lt.zeros(2, 3, 4)
      t:set(2, 3, 4, 9)
      assert.equal(9, t:get(2, 3, 4))
      assert.equal(0, t:get(1, 3, 4))
      assert.equal(9, t[2][3][4])
    end)
  end)

  describe("views", function()
    it("t() shares storage and writes go through", function()
      local m = lt.tensor{{1, 2}, {3, 4}}
      local mt = m:t()
      assert.same({{1, 3}, {2, 4}}, mt:totable())
      mt:set(1, 2, 30)
      assert.equal(30, m:get(2, 1))
    end)

    it("narrow, reshape and select share storage", function()
      local m = lt.tensor{{1, 2, 3}, {4, 5, 6}}
      local n = m:narrow(2, 2, 2)
      assert.same({{2, 3}, {5, 6}}, n:totable())
      n:set(2, 1, 50)
      assert.equal(50, m:get(2, 2))
      local r = m:reshape(3, 2)
      assert.same({{1, 2}, {3, 4}, {50, 6}}, r:totable())
      r:set(1, 1, 100)
      assert.equal(100, m:get(1, 1))
      local row = m[2]
      row[3] = 60
      assert.equal(60, m:get(2, 3))
    end)

    it("clone and contiguous copy or keep as needed", function()
      local m = lt.tensor{{1, 2}, {3, 4}}
      local c = m:clone()
      c:set(1, 1, 9)
      assert.equal(1, m:get(1, 1))
      local tc = m:t():contiguous()
      assert.same({{1, 3}, {2, 4}}, tc:totable())
      tc:set(1, 2, 0)
      assert.equal(3, m:get(2, 1))
      -- already contiguous: the same storage
      local same = m:contiguous()
      same:set(2, 2, 40)
      assert.equal(40, m:get(2, 2))
    end)

    it("reshape of a transposed view copies", function()
      local m = lt.tensor{{1, 2}, {3, 4}}
      assert.same({1, 3, 2, 4}, m:t():reshape(4):totable())
    end)
  end)

  describe("element-wise", function()
    it("adds, subtracts and multiplies with broadcasting", function()
      local a = lt.tensor{{1}, {2}, {3}}            -- 3x1
      local b = lt.tensor{{10, 20, 30, 40}}         -- 1x4
      local s = a + b
      assert.same({3, 4}, s:shape())
      for i = 1, 3 do
        for j = 1, 4 do assert.equal(i + 10 * j, s:get(i, j)) end
      end
      local m = lt.tensor{{1, 2}, {3, 4}}
      assert.same({{11, 22}, {13, 24}}, (m + lt.tensor{10, 20}):totable())
      assert.same({{0, 0}, {2, 2}}, (m - lt.tensor{{1, 2}}):totable())
      assert.same({{2, 6}, {6, 12}}, lt.mul(m, lt.tensor{2, 3}):totable())
      assert.same({{2, 6}, {6, 12}}, m:cmul(lt.tensor{2, 3}):totable())
      assert.same({{0.5, 2 / 3}, {1.5, 4 / 3}}, m:cdiv(lt.tensor{2, 3}):totable())
    end)

    it("numbers broadcast on either side", function()
      local m = lt.tensor{1, 2}
      assert.same({3, 4}, (m + 2):totable())
      assert.same({3, 4}, (2 + m):totable())
      assert.same({1, 0}, (2 - m):totable())
      assert.same({2, 4}, (2 * m):totable())
      assert.same({0.5, 1}, (m / 2):totable())
      assert.same({-1, -2}, (-m):totable())
    end)

    it("unary functions leave the receiver unchanged", function()
      local v = lt.tensor{1, 4, 9}
      assert.same({1, 2, 3}, v:sqrt():totable())
      assert.same({1, 4, 9}, v:totable())
      ref.near({math.exp(1), math.exp(4), math.exp(9)}, v:exp():totable(), 1e-9)
      ref.near({0, math.log(4), math.log(9)}, v:log():totable(), 1e-15)
      assert.same({1, 2}, lt.tensor{-1, 2}:abs():totable())
      assert.same({1, 8, 27}, lt.tensor{1, 2, 3}:pow(3):totable())
    end)

    it("rejects shapes that do not broadcast", function()
      assert.has_error(function() return lt.tensor{1, 2} + lt.tensor{1, 2, 3} end)
    end)
  end)

  describe("reductions", function()
    local m = lt.tensor{{1, 2, 3}, {4, 5, 6}}
    it("without a dim return numbers", function()
      assert.equal(21, m:sum())
      assert.equal(3.5, m:mean())
      assert.equal(6, m:max())
      assert.equal(1, m:min())
      ref.near(math.sqrt(91), m:norm(), 1e-14)
      assert.equal(32, lt.tensor{1, 2, 3}:dot(lt.tensor{4, 5, 6}))
    end)

    it("with a dim drop that dim", function()
      assert.same({5, 7, 9}, m:sum(1):totable())
      assert.same({6, 15}, m:sum(2):totable())
      assert.same({2.5, 3.5, 4.5}, m:mean(1):totable())
      assert.same({2, 5}, m:mean(2):totable())
    end)

    it("work on transposed views", function()
      assert.same({6, 15}, m:t():sum(1):totable())
    end)
  end)

  describe("matmul", function()
    local A = {{1, 2, 3}, {4, 5, 6}}
    local B = {{7, 8}, {9, 10}, {11, 12}}
    it("matrix by matrix", function()
      assert.same(ref.matmul(A, B), (lt.tensor(A) * lt.tensor(B)):totable())
      assert.same(ref.matmul(A, B), lt.matmul(lt.tensor(A), lt.tensor(B)):totable())
    end)

    it("matrix by vector and vector by matrix", function()
      assert.same(ref.matvec(A, {1, 0, 2}), (lt.tensor(A) * lt.tensor{1, 0, 2}):totable())
      local expected = ref.matvec(ref.transpose(A), {1, 2})
      assert.same(expected, (lt.tensor{1, 2} * lt.tensor(A)):totable())
    end)

    it("vector by vector is a number", function()
      local r = lt.tensor{1, 2, 3} * lt.tensor{4, 5, 6}
      assert.equal(32, r)
    end)

    it("uses transposed views without copying their values wrong", function()
      local a = lt.tensor(A)
      local b = lt.tensor(B)
      assert.same(ref.matmul(ref.transpose(B), ref.transpose(A)), (b:t() * a:t()):totable())
      assert.same(ref.matmul(A, ref.transpose(A)), (a * a:t()):totable())
      assert.same(ref.matmul(ref.transpose(A), A), (a:t() * a):totable())
      local sub = lt.tensor(B):narrow(1, 2, 2) -- rows 2..3
      assert.same(ref.matmul({{1, 2}}, {{9, 10}, {11, 12}}), (lt.tensor{{1, 2}} * sub):totable())
    end)

    it("rejects non-conforming shapes", function()
      assert.has_error(function() return lt.tensor(A) * lt.tensor(A) end)
    end)
  end)

  describe("printing", function()
    it("prints values then the shape", function()
      assert.equal("   1   2\n   3   4\n[lazytensor.dense of size 2x2]",
                   tostring(lt.tensor{{1, 2}, {3, 4}}))
      assert.equal("  1.5000\n  2.2500\n[lazytensor.dense of size 2]",
                   tostring(lt.tensor{1.5, 2.25}))
    end)
  end)

  describe("random numbers", function()
    -- xoshiro256** in plain Lua 64-bit integers: needs Lua 5.3's integers
    -- and bit operators, so it lives in a support file loaded only there.
    local first_uniform = math.type and require("support.xoshiro").first_uniform
    it("matches the reference generator", function()
      if not first_uniform then
        pending("the reference needs 64-bit integers (Lua 5.3+), this is " .. _VERSION)
        return
      end
      for _, seed in ipairs{0, 1, 42, 123456789} do
        lt.manual_seed(seed)
        assert.equal(first_uniform(seed), lt.rand(1)[1])
      end
    end)

    it("pins the first values for seeds 0 and 42", function()
      lt.manual_seed(0)
      assert.equal(0.60126299941790484, lt.rand(1)[1])
      lt.manual_seed(42)
      assert.equal(0.083862971059882163, lt.rand(1)[1])
      lt.manual_seed(0)
      ref.near(0.5981026483626094, lt.randn(1)[1], 1e-15)
    end)

    it("reproduces a stream from the same seed", function()
      lt.manual_seed(7)
      local a = lt.randn(3, 4):totable()
      lt.manual_seed(7)
      local b = lt.randn(3, 4):totable()
      assert.same(a, b)
      local u = lt.rand(1000)
      assert.is_true(u:min() >= 0 and u:max() < 1)
    end)
  end)
end)
