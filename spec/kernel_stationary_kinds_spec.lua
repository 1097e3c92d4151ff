-- lt.kernel's cosine, spectral_mixture and periodic-with-ARD kinds beyond the
-- conformance harness (spec/kernel_spec.lua): hand-checked values, products
-- over several row blocks and without storing K, the kernel store, batches
-- and gradients through lt.grad, each against plain-Lua loops over the
-- formulas.
local lt = require "lazytensor"
local conformance = require "support.conformance"

local pi = math.pi
local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

-- The formulas, written out here independently of the C code.
local function k(s, x, y)
  if s.kind == "cosine" then
    local r2 = 0
    for d = 1, #x do r2 = r2 + (x[d] - y[d]) ^ 2 end
    return (s.variance or 1) * math.cos(pi * math.sqrt(r2) / s.period)
  end
  if s.kind == "periodic" then
    local S = 0
    for d = 1, #x do
      S = S + math.sin(pi * math.abs(x[d] - y[d]) / s.period) ^ 2 / s.lengthscale[d] ^ 2
    end
    return (s.variance or 1) * math.exp(-2 * S)
  end
  local total = 0 -- spectral mixture
  for q = 1, s.num_mixtures do
    local t = s.weights[q]
    for d = 1, #x do
      local tau = x[d] - y[d]
      t = t * math.exp(-2 * pi ^ 2 * tau ^ 2 * s.scales[q][d] ^ 2)
        * math.cos(2 * pi * tau * s.means[q][d])
    end
    total = total + t
  end
  return total
end

local SPECS = {
  {kind = "cosine", period = 1.9, variance = 1.4},
  {kind = "periodic", lengthscale = {0.7, 1.6}, period = 2.3, variance = 0.8},
  {kind = "spectral_mixture", num_mixtures = 2, weights = {0.6, 1.1},
   means = {{0.2, 0.45}, {0.7, 0.1}}, scales = {{0.35, 0.2}, {0.15, 0.4}}},
}

local function lcg(seed)
  return function()
    seed = ((seed * 16838) % 32768 * 65536 + seed * 20077 + 12345) % 2147483648
    return seed / 2147483648
  end
end

local function points(n, d, seed, scale)
  local rnd, P = lcg(seed), {}
  for i = 1, n do
    P[i] = {}
    for q = 1, d do P[i][q] = scale * rnd() end
  end
  return P
end

local function close(a, b, rel, what)
  assert(math.abs(a - b) <= rel * math.max(1, math.abs(b)),
         string.format("%s: %.17g vs %.17g", what, a, b))
end

-- Factors of Hadamard products (gp's kernel products): their gradients with
-- masked weights (the spectral mixture's pass takes them dense) and every
-- operation against the plain-Lua products of the formulas.
local HX = {{0, 0}, {1.1, 0.3}, {-0.4, 1.2}, {2.0, -1.0}, {0.7, 2.1}}
local function product_case(s1, s2)
  return function()
    return lt.mul(lt.kernel(lt.tensor(HX), s1), lt.kernel(lt.tensor(HX), s2))
  end, function()
    local R = {}
    for i = 1, #HX do
      R[i] = {}
      for j = 1, #HX do R[i][j] = k(s1, HX[i], HX[j]) * k(s2, HX[i], HX[j]) end
    end
    return R
  end
end
local make_p, ref_p = product_case(SPECS[3], SPECS[2])
conformance.check("hadamard spectral_mixture .* periodic ARD", make_p, ref_p, {psd = true})
local make_c, ref_c = product_case(SPECS[1], SPECS[3])
conformance.check("hadamard cosine .* spectral_mixture", make_c, ref_c, {symmetric = true})

describe("kernel kinds cosine, spectral_mixture, periodic ARD", function()
  it("give hand-checked values", function()
    -- 2·cos(5π/4) at distance 5 with period 4: −√2
    local C = lt.kernel(lt.tensor{{0, 0}}, lt.tensor{{3, 4}},
                        {kind = "cosine", period = 4, variance = 2})
    close(C:get(1, 1), -math.sqrt(2), 1e-15, "cosine")
    -- sin²(π/4)/1² + sin²(π/2)/2² = 0.75: e^{−1.5}
    local P = lt.kernel(lt.tensor{{0, 0}}, lt.tensor{{1, 2}},
                        {kind = "periodic", lengthscale = {1, 2}, period = 4})
    close(P:get(1, 1), 0.22313016014842982, 1e-15, "periodic ARD")
    -- 2·exp(−2π²·0.5²·0.5²)·cos(2π·0.5·0.25) = √2·e^{−π²/8}
    local S = lt.kernel(lt.tensor{0}, lt.tensor{0.5},
                        {kind = "spectral_mixture", num_mixtures = 1, weights = {2},
                         means = {{0.25}}, scales = {{0.5}}})
    close(S:get(1, 1), 0.41183727968971867, 1e-15, "spectral mixture")
  end)

  it("multiply in several row blocks (symmetric, rectangular, transposed)", function()
    local n, m = 300, 150 -- row blocks of 256 and 44
    local x, y = points(n, 2, 7, 3), points(m, 2, 19, 3)
    local V = lt.randn(n, 2)
    local W = lt.randn(m, 1)
    local v, w = V:totable(), W:totable()
    for _, s in ipairs(SPECS) do
      local Ks = lt.kernel(lt.tensor(x), s)
      local Kr = lt.kernel(lt.tensor(x), lt.tensor(y), s)
      local a, b, c = (Ks * V):totable(), (Kr * W):totable(), (Kr:t() * V):totable()
      for i = 1, n, 13 do
        local sa, sb = 0, 0
        for j = 1, n do sa = sa + k(s, x[i], x[j]) * v[j][2] end
        for j = 1, m do sb = sb + k(s, x[i], y[j]) * w[j][1] end
        close(a[i][2], sa, 1e-12, s.kind .. " symmetric row " .. i)
        close(b[i][1], sb, 1e-12, s.kind .. " rectangular row " .. i)
      end
      for j = 1, m, 11 do
        local sc = 0
        for i = 1, n do sc = sc + k(s, x[i], y[j]) * v[i][1] end
        close(c[j][1], sc, 1e-12, s.kind .. " transposed row " .. j)
      end
      -- rows, entries, the diagonal of K(x1, x2)
      local row = Kr[5]:totable()
      local diag = Kr:diagonal():totable()
      for j = 1, m, 17 do close(row[j], k(s, x[5], y[j]), 1e-14, s.kind .. " row") end
      for i = 1, m, 17 do close(diag[i], k(s, x[i], y[i]), 1e-14, s.kind .. " diagonal") end
      close(Ks:trace(), n * k(s, x[1], x[1]), 1e-14, s.kind .. " trace")
    end
  end)

  it("store their entries within kernel_cache_bytes, the same products as evaluated", function()
    local x = points(300, 2, 3, 3)
    local X, B = lt.tensor(x), lt.randn(300, 2)
    for _, s in ipairs(SPECS) do
      local Y = {}
      for run, budget in ipairs{0, 2 ^ 30} do
        lt.with_settings({kernel_cache_bytes = budget}, function()
          collectgarbage()
          collectgarbage()
          local m0 = lt.memory()
          local K = lt.kernel(X, s)
          for _ = 1, 12 do Y[run] = K * B end
          local kept = lt.memory() - m0
          if budget == 0 then
            assert.is_true(kept < 300 * 300 * 8 / 4, s.kind .. ": evaluating kept " .. kept)
          else
            assert.is_true(kept >= 300 * 150 * 8, s.kind .. ": stored " .. kept .. " bytes")
          end
          Y[run] = Y[run]:totable()
        end)
      end
      for i = 1, 300, 7 do
        close(Y[2][i][1], Y[1][i][1], 1e-14, s.kind .. " stored vs evaluated")
      end
    end
  end)

  it("solve above max_cholesky_size by products, without storing K", function()
    local n = 1500
    local x = points(n, 2, 11, 20)
    for _, s in ipairs{SPECS[2], SPECS[3]} do -- PSD kinds
      lt.with_settings({kernel_cache_bytes = 0, max_cholesky_size = 100}, function()
        collectgarbage()
        collectgarbage()
        local m0 = lt.memory()
        local A = lt.kernel(lt.tensor(x), s):add_diag(0.5)
        local b = lt.randn(n)
        local sol = A:solve(b)
        assert.is_true(lt.memory() - m0 < n * n * 8 / 4, s.kind .. ": K was stored")
        -- the residual by Lua loops, at a few rows
        local xs, bs = sol:totable(), b:totable()
        for i = 1, n, 149 do
          local r = 0.5 * xs[i]
          for j = 1, n do r = r + k(s, x[i], x[j]) * xs[j] end
          close(r, bs[i], 1e-5, s.kind .. " residual row " .. i)
        end
      end)
    end
  end)

  it("build batches from X {b, n, d}, each member the kernel of its points", function()
    local X = lt.tensor{points(5, 2, 23, 2), points(5, 2, 29, 2), points(5, 2, 31, 2)}
    local Y = lt.tensor(points(4, 2, 37, 2))
    for _, s in ipairs(SPECS) do
      local K, Kc = lt.kernel(X, s), lt.kernel(X, Y, s)
      for b = 1, 3 do
        local P = X[b]:totable()
        local D, Dc = K[b]:dense():totable(), Kc[b]:dense():totable()
        local yy = Y:totable()
        for i = 1, 5 do
          for j = 1, 5 do close(D[i][j], k(s, P[i], P[j]), 1e-14, s.kind .. " batch") end
          for j = 1, 4 do close(Dc[i][j], k(s, P[i], yy[j]), 1e-14, s.kind .. " batch x2") end
        end
      end
    end
  end)

  it("give gradients of <L·Rᵀ, K> for every hyperparameter and the points", function()
    local x, y = points(9, 2, 41, 2), points(7, 2, 43, 2)
    local L, R = lt.randn(9, 2), lt.randn(7, 2)
    local l, r = L:totable(), R:totable()
    -- f(s, x, y) = Σ_ij (L·Rᵀ)_ij k(x_i, y_j) by loops
    local function f(s, xs, ys)
      local total = 0
      for i = 1, #xs do
        for j = 1, #ys do
          total = total + (l[i][1] * r[j][1] + l[i][2] * r[j][2]) * k(s, xs[i], ys[j])
        end
      end
      return total
    end
    local function copy(s)
      local c = {}
      for key, v in pairs(s) do
        if type(v) == "table" then
          c[key] = {}
          for i, e in ipairs(v) do
            if type(e) == "table" then
              c[key][i] = {unpack(e)}
            else
              c[key][i] = e
            end
          end
        else
          c[key] = v
        end
      end
      return c
    end
    local h = 1e-6
    for _, s in ipairs(SPECS) do
      local X1, X2 = lt.tensor(x), lt.tensor(y)
      local K = lt.kernel(X1, X2, s)
      local gk = K:bilinear_derivative(L, R)[K]
      -- each hyperparameter entry against a central difference of f
      for name, v in pairs(s) do
        if type(v) == "number" and name ~= "num_mixtures" then
          local up, down = copy(s), copy(s)
          up[name], down[name] = v + h, v - h
          close(gk[name], (f(up, x, y) - f(down, x, y)) / (2 * h), 1e-6, s.kind .. " " .. name)
        elseif type(v) == "table" then
          local got = gk[name]:totable()
          for i, e in ipairs(v) do
            for c = 1, type(e) == "table" and #e or 1 do
              local up, down = copy(s), copy(s)
              if type(e) == "table" then
                up[name][i][c], down[name][i][c] = e[c] + h, e[c] - h
              else
                up[name][i], down[name][i] = e + h, e - h
              end
              local want = (f(up, x, y) - f(down, x, y)) / (2 * h)
              local have = type(e) == "table" and got[i][c] or got[i]
              close(have, want, 1e-6, string.format("%s %s[%d][%d]", s.kind, name, i, c))
            end
          end
        end
      end
      -- the points: x1's first coordinate of point 3, x2's second of point 2
      local gx1, gx2 = gk.x1:totable(), gk.x2:totable()
      local xu, xd = points(9, 2, 41, 2), points(9, 2, 41, 2)
      xu[3][1], xd[3][1] = xu[3][1] + h, xd[3][1] - h
      close(gx1[3][1], (f(s, xu, y) - f(s, xd, y)) / (2 * h), 1e-6, s.kind .. " x1")
      local yu, yd = points(7, 2, 43, 2), points(7, 2, 43, 2)
      yu[2][2], yd[2][2] = yu[2][2] + h, yd[2][2] - h
      close(gx2[2][2], (f(s, x, yu) - f(s, x, yd)) / (2 * h), 1e-6, s.kind .. " x2")
    end
  end)
end)
