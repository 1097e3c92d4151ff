-- lt.kernel(x1 [, x2], {..., derivative = "lengthscale" | "variance" | "period"}):
-- the operator ∂K/∂log θ. Entries are checked against central finite
-- differences of lt.kernel's own entries in log θ, and against the closed
-- forms written out here in Lua; products (several row blocks, symmetric and
-- not, transposed) against Lua loops over those closed forms.
local lt = require "lazytensor"

-- periodic_ard: periodic with one lengthscale per dimension
local KINDS = {"rbf", "matern12", "matern32", "matern52", "periodic", "periodic_ard", "cosine"}

local function derivatives_of(kind)
  if kind == "periodic" then return {"lengthscale", "period", "variance"} end
  if kind == "periodic_ard" or kind == "cosine" then return {"period", "variance"} end
  return {"lengthscale", "variance"}
end

-- k and ∂k/∂log θ from the formulas of the brief (r = ‖x − y‖).
local function value(s, x, y)
  local l, v = s.lengthscale, s.variance
  if s.kind == "periodic" then -- S and D over l² (ARD: each dimension's own)
    local S, D = 0, 0
    for d = 1, #x do
      local ld = type(l) == "table" and l[d] or l
      local u = math.pi * math.abs(x[d] - y[d]) / s.period
      S = S + math.sin(u) ^ 2 / ld ^ 2
      D = D + math.sin(2 * u) * u / ld ^ 2
    end
    local k = v * math.exp(-2 * S)
    return k, {lengthscale = k * 4 * S, period = k * 2 * D, variance = k}
  end
  local r2 = 0
  for d = 1, #x do r2 = r2 + (x[d] - y[d]) ^ 2 end
  local r = math.sqrt(r2)
  if s.kind == "cosine" then -- v cos(πr/p): ∂/∂log p = v sin(πr/p)·πr/p
    local a = math.pi * r / s.period
    return v * math.cos(a), {period = v * math.sin(a) * a, variance = v * math.cos(a)}
  end
  local k, dl
  if s.kind == "rbf" then
    k = v * math.exp(-r2 / (2 * l * l))
    dl = k * r2 / l ^ 2
  elseif s.kind == "matern12" then
    k = v * math.exp(-r / l)
    dl = k * r / l
  elseif s.kind == "matern32" then
    local a = math.sqrt(3) * r / l
    k = v * (1 + a) * math.exp(-a)
    dl = v * a * a * math.exp(-a)
  else
    local a = math.sqrt(5) * r / l
    k = v * (1 + a + a * a / 3) * math.exp(-a)
    dl = v * a * a * (1 + a) / 3 * math.exp(-a)
  end
  return k, {lengthscale = dl, variance = k}
end

-- d: the points' dimensions (periodic_ard's lengthscales)
local function spec_of(kind, derivative, d)
  if kind == "cosine" then
    return {kind = kind, variance = 1.6, period = 1.7, derivative = derivative}
  end
  if kind == "periodic_ard" then
    local ls = {}
    for q = 1, d or 2 do ls[q] = 0.6 + 0.5 * q end
    return {kind = "periodic", lengthscale = ls, variance = 1.6, period = 1.7,
            derivative = derivative}
  end
  return {kind = kind, lengthscale = 0.8, variance = 1.6,
          period = kind == "periodic" and 1.7 or nil, derivative = derivative}
end

local function close(a, b, rel, abs, what)
  assert(math.abs(a - b) <= rel * math.max(math.abs(a), math.abs(b)) + abs,
         string.format("%s: %.17g vs %.17g", what, a, b))
end

-- Deterministic scattered points (a small LCG; independent of lt's RNG).
local function points(n, d, seed, scale)
  local P = {}
  local function rnd()
    -- 1103515245 = 16838 * 2^16 + 20077: every step below 2^53, so the same
    -- points with the doubles of Lua 5.1, 5.2 and LuaJIT as with 5.3+ integers
    seed = ((seed * 16838) % 32768 * 65536 + seed * 20077 + 12345) % 2147483648
    return seed / 2147483648
  end
  for i = 1, n do
    P[i] = {}
    for q = 1, d do P[i][q] = scale * rnd() end
  end
  return P, rnd
end

describe("kernel derivatives", function()
  local X, Y = points(7, 2, 3, 2.5), points(5, 2, 17, 2.5)
  local X1 = points(6, 1, 29, 4)

  for _, kind in ipairs(KINDS) do
    for _, dname in ipairs(derivatives_of(kind)) do
      it(kind .. " d/dlog " .. dname .. " matches central differences of lt.kernel", function()
        local base = spec_of(kind)
        local D = lt.kernel(lt.tensor(X), lt.tensor(Y), spec_of(kind, dname))
        local h = 1e-5
        local up, down = spec_of(kind), spec_of(kind)
        up[dname] = base[dname] * math.exp(h)
        down[dname] = base[dname] * math.exp(-h)
        local Kp = lt.kernel(lt.tensor(X), lt.tensor(Y), up)
        local Km = lt.kernel(lt.tensor(X), lt.tensor(Y), down)
        for i = 1, #X do
          for j = 1, #Y do
            local fd = (Kp:get(i, j) - Km:get(i, j)) / (2 * h)
            close(D:get(i, j), fd, 1e-8, 1e-11, string.format("(%d, %d)", i, j))
          end
        end
      end)

      it(kind .. " d/dlog " .. dname .. " entries, rows, diagonal, trace, dense", function()
        for _, P in ipairs{X, X1} do
          local s = spec_of(kind, dname, #P[1])
          local D = lt.kernel(lt.tensor(P), s)
          assert.equal("kernel", lt.type(D))
          assert.is_true(D:is_symmetric())
          -- cosine: PSD on the line only
          if dname == "variance" and (kind ~= "cosine" or #P[1] == 1) then
            assert.is_true(D:is_psd())
          else
            assert.is_not_true(D:is_psd())
          end
          local dense = D:dense():totable()
          local diag = D:diagonal():totable()
          local tr = 0
          for i = 1, #P do
            local row = D[i]:totable()
            for j = 1, #P do
              local _, g = value(s, P[i], P[j])
              close(D:get(i, j), g[dname], 1e-13, 1e-15, "entry")
              close(row[j], g[dname], 1e-13, 1e-15, "row")
              close(dense[i][j], g[dname], 1e-13, 1e-15, "dense")
            end
            local _, g = value(s, P[i], P[i])
            close(diag[i], g[dname], 0, 1e-15, "diagonal")
            tr = tr + g[dname]
          end
          close(D:trace(), tr, 1e-13, 1e-15, "trace")
        end
        -- with x2: the diagonal is entry by entry, and 3·D scales the variance
        local s = spec_of(kind, dname)
        local D = lt.kernel(lt.tensor(X), lt.tensor(Y), s)
        local S3 = 3 * D
        assert.equal("kernel", lt.type(S3))
        local d = D:diagonal():totable()
        for i = 1, #Y do
          local _, g = value(s, X[i], Y[i])
          close(d[i], g[dname], 1e-13, 1e-15, "diagonal with x2")
          close(S3:get(i, 2), 3 * D:get(i, 2), 1e-14, 1e-15, "3 * D")
        end
      end)
    end
  end

  it("multiplies in several row blocks (symmetric, rectangular, transposed)", function()
    -- 300 points: row blocks of 256 and 44, so the symmetric path's
    -- transposed contributions are exercised.
    local n, m = 300, 120
    local P, rnd = points(n, 2, 5, 3)
    local Q = points(m, 2, 41, 3)
    local V, W = {}, {}
    for i = 1, n do V[i] = {rnd() - 0.5, rnd() - 0.5} end
    for j = 1, m do W[j] = rnd() - 0.5 end
    for _, kind in ipairs(KINDS) do
      for _, dname in ipairs(derivatives_of(kind)) do
        local s = spec_of(kind, dname)
        local what = kind .. " " .. dname
        local got = (lt.kernel(lt.tensor(P), s) * lt.tensor(V)):totable()
        local rect = lt.kernel(lt.tensor(P), lt.tensor(Q), s)
        local got2 = (rect * lt.tensor(W)):totable()
        local got3 = (rect:t() * lt.tensor(V)):totable()
        for i = 1, n, 7 do
          local a, b, c = 0, 0, 0
          for j = 1, n do
            local _, g = value(s, P[i], P[j])
            a, b = a + g[dname] * V[j][1], b + g[dname] * V[j][2]
          end
          for j = 1, m do
            local _, g = value(s, P[i], Q[j])
            c = c + g[dname] * W[j]
          end
          close(got[i][1], a, 1e-11, 1e-12, what .. " symmetric row " .. i)
          close(got[i][2], b, 1e-11, 1e-12, what .. " symmetric row " .. i)
          close(got2[i], c, 1e-11, 1e-12, what .. " rectangular row " .. i)
        end
        for j = 1, m, 11 do
          local a = 0
          for i = 1, n do
            local _, g = value(s, P[i], Q[j])
            a = a + g[dname] * V[i][2]
          end
          close(got3[j][2], a, 1e-11, 1e-12, what .. " transposed row " .. j)
        end
      end
    end
  end)

  -- their gradients (second derivatives of k) against central differences
  it("have gradients: lengthscale, variance, period, x1 and x2", function()
    local gradcheck = require "support.gradcheck"
    local x, y = lt.tensor(X), lt.tensor(Y)
    for _, kind in ipairs(KINDS) do
      for _, dname in ipairs(derivatives_of(kind)) do
        assert.is_true(gradcheck.check(lt.kernel(x, spec_of(kind, dname))) > 0)
        assert.is_true(gradcheck.check(lt.kernel(x, y, spec_of(kind, dname))) > 0)
      end
    end
  end)

  it("rejects bad derivative names with clear errors, without leaking", function()
    local x = lt.tensor(X)
    local function fails(pattern, spec)
      collectgarbage()
      local before = lt.memory()
      local ok, err = pcall(lt.kernel, x, spec)
      assert.is_false(ok)
      assert.matches("lazytensor: kernel: " .. pattern, tostring(err))
      collectgarbage()
      collectgarbage()
      assert.is_true(lt.memory() <= before)
    end
    fails("unknown derivative 'scale' %(expected lengthscale, variance or period%)",
          {kind = "rbf", lengthscale = 1, derivative = "scale"})
    fails("spec.derivative must be a string", {kind = "rbf", lengthscale = 1, derivative = 1})
    fails("derivative 'period' needs a periodic or cosine kernel, got kind 'matern32'",
          {kind = "matern32", lengthscale = 1, derivative = "period"})
    assert.equal("kernel", lt.type(lt.kernel(x, {kind = "rbf", lengthscale = 1,
                                                 derivative = "variance"})))
  end)
end)
