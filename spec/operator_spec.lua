-- lt.operator: operators defined in Lua by their product. Conformance against
-- the matrices the callbacks multiply by, transposed products with and
-- without t_matmul, flags, callback errors (which must come through
-- unchanged, leaving the state usable) and operators inside sums/products.
local lt = require "lazytensor"
local conformance = require "support.conformance"

local ref = conformance.reference

local G = {{4, 1, -2, 0.5}, {0.5, 3, 1, -1}, {2, -1, 5, 0.25}, {1, 0, -0.5, 2}}
local SPD = {{4, 1, 0.5}, {1, 3, -0.25}, {0.5, -0.25, 2}}
local RECT = {{1, 2, 3, 4, -1}, {-1, 0.5, 2, 0, 3}, {3, 1, -2, 1, 0.5}}

-- An operator multiplying by the dense matrix of table M (the Lua
-- callbacks use the library's dense product; the reference is M itself).
local function by_matrix(M, opts)
  opts = opts or {}
  local D = lt.tensor(M)
  local def = {shape = {#M, #M[1]}, matmul = function(X) return D * X end,
    psd = opts.psd, symmetric = opts.symmetric, name = opts.name}
  if opts.t_matmul then def.t_matmul = function(X) return D:t() * X end end
  return lt.operator(def)
end

-- (conformance.check must be called from the spec file's main chunk: it
-- finds busted's describe/it through its caller's _ENV.)
local function case(M, make_opts, opts)
  return function() return by_matrix(M, make_opts) end, function() return M end, opts
end

conformance.check("operator general 4x4 with t_matmul", case(G, {t_matmul = true}))
conformance.check("operator general 4x4 without t_matmul", case(G, {}))
conformance.check("operator SPD 3x3 flagged psd", case(SPD, {psd = true}, {psd = true}))
conformance.check("operator SPD 3x3 unflagged", case(SPD, {}, {psd = true}))
conformance.check("operator 3x5 with t_matmul", case(RECT, {t_matmul = true}))
conformance.check("operator 3x5 without t_matmul", case(RECT, {}))

local function values(t)
  return t:totable()
end

local function close(a, b, tol)
  tol = tol or 1e-12
  if type(a) == "table" then
    for i = 1, #b do
      if not close(a[i], b[i], tol) then return false end
    end
    return #a == #b
  end
  return math.abs(a - b) <= tol * math.max(1, math.abs(b))
end

describe("operator", function()
  local v = {1, -2, 0.5, 3, -1}
  local u = {0.5, 2, -1}

  it("multiplies vectors and matrices through matmul", function()
    local calls, seen = 0, nil
    local D = lt.tensor(RECT)
    local A = lt.operator{shape = {3, 5}, matmul = function(X)
      calls = calls + 1
      seen = X:shape()
      return D * X
    end}
    assert.equal("operator", lt.type(A))
    assert.same({3, 5}, A:shape())
    local y = A * lt.tensor(v)
    assert.equal(1, calls)
    assert.same({5, 1}, seen) -- the callback always gets a matrix
    assert.same({3}, y:shape())
    assert.is_true(close(values(y), ref.mv(RECT, v)))
    local X = {{1, 0}, {0, 1}, {2, -1}, {0.5, 0.5}, {-1, 3}}
    assert.is_true(close(values(A * lt.tensor(X))[2], ref.mm(RECT, X)[2]))
  end)

  it("uses t_matmul for transposed products when given", function()
    local t_calls = 0
    local D = lt.tensor(RECT)
    local A = lt.operator{shape = {3, 5}, matmul = function(X) return D * X end,
      t_matmul = function(X)
        t_calls = t_calls + 1
        return D:t() * X
      end}
    local want = ref.vm(u, RECT)
    assert.is_true(close(values(lt.tensor(u) * A), want))
    assert.is_true(close(values(A:t() * lt.tensor(u)), want))
    assert.equal(2, t_calls)
  end)

  it("gets transposed products without t_matmul from its own products", function()
    local calls = 0
    local D = lt.tensor(RECT)
    local A = lt.operator{shape = {3, 5}, matmul = function(X)
      calls = calls + 1
      return D * X
    end}
    assert.is_true(close(values(lt.tensor(u) * A), ref.vm(u, RECT)))
    assert.is_true(close(values(A:t() * lt.tensor(u)), ref.vm(u, RECT)))
    assert.is_true(calls >= 2)
    assert.same(ref.transpose(RECT), A:t():dense():totable())
  end)

  it("a symmetric operator answers transposed products with matmul", function()
    local calls = 0
    local D = lt.tensor(SPD)
    local A = lt.operator{shape = {3, 3}, symmetric = true, matmul = function(X)
      calls = calls + 1
      return D * X
    end}
    assert.is_true(close(values(lt.tensor(u) * A), ref.vm(u, SPD)))
    assert.equal(1, calls) -- one product, not column probes
  end)

  it("carries the psd and symmetric flags it is given, and only those", function()
    local function op(t)
      t.shape = t.shape or {3, 3}
      t.matmul = function(X) return X end
      return lt.operator(t)
    end
    assert.is_true(op{psd = true}:is_psd())
    assert.is_true(op{psd = true}:is_symmetric()) -- PSD implies symmetric
    assert.is_true(op{symmetric = true}:is_symmetric())
    assert.is_nil(op{symmetric = true}:is_psd())
    assert.is_nil(op{}:is_psd())
    assert.is_nil(op{}:is_symmetric())
    assert.is_false(op{symmetric = false}:is_symmetric())
    assert.is_false(op{symmetric = false}:is_psd())
    assert.is_false(op{psd = false}:is_psd())
    -- a rectangular operator is never symmetric, whatever it claims
    assert.is_false(op{shape = {2, 3}, psd = true, symmetric = true}:is_psd())
    assert.is_false(op{shape = {2, 3}, symmetric = true}:is_symmetric())
  end)

  it("works inside sums, scalings, products and with other operators", function()
    local A = by_matrix(G)
    local B = by_matrix(G, {t_matmul = true})
    local D = lt.tensor(SPD)
    local w = {1, 2, -1, 0.5}
    local GG = ref.mm(G, G)
    local function twice(M)
      local out = {}
      for i = 1, #M do
        out[i] = {}
        for j = 1, #M[i] do out[i][j] = 2 * M[i][j] end
      end
      return out
    end
    assert.is_true(close(values((A + B) * lt.tensor(w)), ref.mv(twice(G), w)))
    assert.is_true(close(values((2 * A) * lt.tensor(w)), ref.mv(twice(G), w)))
    assert.is_true(close(values((A * B) * lt.tensor(w)), ref.mv(GG, w)))
    assert.is_true(close(values((A - B) * lt.tensor(w)), {0, 0, 0, 0}))
    local Gw_plus_w = ref.mv(G, w)
    for i = 1, 4 do Gw_plus_w[i] = Gw_plus_w[i] + w[i] end
    assert.is_true(close(values((A + lt.diag{1, 1, 1, 1}) * lt.tensor(w)), Gw_plus_w))
    -- an operator whose product calls another operator (nested callbacks)
    local C = lt.operator{shape = {4, 4}, matmul = function(X) return A * (B * X) end}
    assert.is_true(close(values(C * lt.tensor(w)), ref.mv(GG, w)))
    -- entries, rows, diagonal, trace, dense through products
    assert.equal(G[2][3], A:get(2, 3))
    assert.same(G[3], A[3]:totable())
    assert.is_true(close(values(A:diagonal()), {4, 3, 5, 2}))
    assert.is_true(close(A:trace(), 14))
    assert.same(G, A:dense():totable())
    local P = by_matrix(SPD, {psd = true})
    local twice_Su = ref.mv(SPD, u)
    for i = 1, 3 do twice_Su[i] = 2 * twice_Su[i] end
    assert.is_true(close(values((P + D) * lt.tensor(u)), twice_Su))
  end)

  describe("errors", function()
    local function raises(pattern, f)
      local ok, err = pcall(f)
      assert.is_false(ok, "expected an error")
      assert.matches(pattern, tostring(err))
      return err
    end

    it("rejects bad definitions", function()
      raises("lazytensor: operator: matmul must be a function, got nil", function()
        return lt.operator{shape = {2, 2}}
      end)
      raises("lazytensor: operator: matmul must be a function, got number", function()
        return lt.operator{shape = {2, 2}, matmul = 3}
      end)
      raises("lazytensor: operator: t_matmul must be a function, got string", function()
        return lt.operator{shape = {2, 2}, matmul = function(X) return X end, t_matmul = "x"}
      end)
      raises("lazytensor: operator: shape must be a table", function()
        return lt.operator{matmul = function(X) return X end}
      end)
      raises("lazytensor: operator: shape%[1%] must be a non%-negative integer", function()
        return lt.operator{shape = {-1, 2}, matmul = function(X) return X end}
      end)
      raises("lazytensor: operator: expected a table", function() return lt.operator(3) end)
    end)

    it("reports a product of the wrong shape or type", function()
      local bad_shape = lt.operator{shape = {3, 2}, matmul = function() return lt.zeros(2, 1) end}
      raises("lazytensor: matmul: .*returned 2x1, expected 3x1", function()
        return bad_shape * lt.ones(2)
      end)
      local not_tensor = lt.operator{shape = {2, 2}, matmul = function() return 42 end}
      raises("lazytensor: operator: matmul must return a dense tensor, got number", function()
        return not_tensor * lt.ones(2)
      end)
      local nothing = lt.operator{shape = {2, 2}, matmul = function() end}
      raises("lazytensor: operator: matmul must return a dense tensor, got nil", function()
        return nothing * lt.ones(2)
      end)
      local lazy = lt.operator{shape = {2, 2}, matmul = function() return lt.diag{1, 2} end}
      raises('lazytensor: operator: matmul must return a dense tensor, got a lazy "diag"',
        function() return lazy * lt.ones(2) end)
      local bad_t = lt.operator{shape = {2, 3},
        matmul = function(X) return lt.zeros(2, X:size(2)) end,
        t_matmul = function() return lt.zeros(2, 1) end}
      raises("lazytensor: matmul: .*expected 3x1", function() return lt.ones(2) * bad_t end)
    end)

    it("passes a callback's own error through, and the state stays usable", function()
      local boom = lt.operator{shape = {2, 2}, matmul = function() error("my operator broke") end}
      raises("my operator broke", function() return boom * lt.ones(2) end)
      -- inside a sum and a product: the same message
      raises("my operator broke", function() return (boom + lt.eye(2)) * lt.ones(2) end)
      raises("my operator broke", function() return (lt.eye(2) * boom):dense() end)
      -- a non-string error object comes through unchanged
      local obj = {code = 7}
      local thrower = lt.operator{shape = {2, 2}, matmul = function() error(obj) end}
      local ok, err = pcall(function() return thrower * lt.ones(2) end)
      assert.is_false(ok)
      assert.equal(obj, err)
      -- repeated failures leak nothing; the library keeps working
      collectgarbage()
      collectgarbage()
      local before = lt.memory()
      for _ = 1, 50 do pcall(function() return boom * lt.ones(2) end) end
      collectgarbage()
      collectgarbage()
      assert.is_true(lt.memory() <= before, "memory grew from " .. before .. " to " .. lt.memory())
      local A = by_matrix(SPD)
      assert.is_true(close(values(A * lt.tensor(u)), ref.mv(SPD, u)))
      -- a failing operator whose error is caught inside another callback
      local catcher = lt.operator{shape = {2, 2}, matmul = function(X)
        local okc = pcall(function() return boom * X end)
        assert(not okc)
        return X
      end}
      assert.same({1, 1}, (catcher * lt.ones(2)):totable())
    end)
  end)
end)
