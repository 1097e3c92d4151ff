-- Gradient conformance: every operation of the table on every operator
-- type (leaves, folded results, composites three deep, square and
-- rectangular), differentiated by lt.grad with respect to every tensor the
-- operator was built from, against central differences.
local lt = require "lazytensor"
local gc = require "support.grad_conformance"

local W = gc.weights

local function spd(X, n) return X * X:t() + lt.eye(n) * 0.5 end

local x3 = lt.tensor{{0.1, 0.3}, {0.5, -0.2}, {0.9, 0.4}}
local x4 = lt.tensor{{0.0}, {0.35}, {0.7}, {1.2}}

gc.check("dense general", function(p) return p.A end, {A = W(3, 3, 1) + lt.eye(3) * 2})
gc.check("dense SPD", function(p) return spd(p.X, 3) end, {X = W(3, 3, 2)}, {psd = true})
gc.check("dense 3x4", function(p) return p.A end, {A = W(3, 4, 3)})
gc.check("diag", function(p) return lt.diag(p.d:exp()) end, {d = W(4, 1, 4):reshape(4)},
  {psd = true})
gc.check("2·D + D (folded)", function(p)
  local D = lt.diag(p.d:exp())
  return 2 * D + D
end, {d = W(3, 1, 5):reshape(3)}, {psd = true})
gc.check("D1 + D2", function(p) return lt.diag(p.a:exp()) + lt.diag(p.b:exp()) end,
  {a = W(3, 1, 6):reshape(3), b = W(3, 1, 7):reshape(3)}, {psd = true})
gc.check("triangular", function(p) return lt.triangular(p.A, "lower") end,
  {A = W(3, 3, 8) + lt.eye(3) * 3})
gc.check("lowrank U·Uᵀ + diag", function(p)
  return lt.lowrank(p.U) + lt.diag(p.d:exp())
end, {U = W(4, 2, 9), d = W(4, 1, 10):reshape(4)}, {psd = true})
gc.check("lowrank U·Vᵀ (rectangular)", function(p) return lt.lowrank(p.U, p.V) end,
  {U = W(3, 2, 11), V = W(4, 2, 12)})
gc.check("−LR and A − LR", function(p) return p.A - lt.lowrank(p.U) + (-lt.lowrank(p.U)) end,
  {A = W(3, 3, 13) + lt.eye(3) * 3, U = W(3, 1, 14)})
gc.check("toeplitz symmetric", function(p)
  return lt.toeplitz(lt.cmul(p.c, lt.tensor{1, 0.3, 0.1}) + lt.tensor{2, 0, 0})
end, {c = lt.tensor{1, 0.8, 0.5}}, {psd = true})
gc.check("toeplitz (c, r) and its transpose", function(p)
  -- r's first entry is c's (so that every perturbation stays a Toeplitz pair)
  local r = p.r + lt.cmul(lt.tensor{1, 0, 0, 0}, p.c - p.r)
  return lt.toeplitz(p.c, r):t()
end, {c = lt.tensor{2, 0.5, -0.3, 0.1}, r = lt.tensor{2, 0.2, 0.4, -0.1}})
gc.check("kernel points", function(p)
  return lt.kernel(p.x, {kind = "rbf", lengthscale = 0.8}):add_diag(0.1)
end, {x = x3}, {psd = true})
gc.check("kernel (x1, x2) rectangular, transposed", function(p)
  return lt.kernel(p.x1, p.x2, {kind = "matern52", lengthscale = 0.6}):t()
end, {x1 = x3, x2 = lt.tensor{{0.2, 0.1}, {-0.4, 0.3}}})
gc.check("chol(L)", function(p) return lt.chol(lt.triangular(p.L, "lower"):dense()) end,
  {L = W(3, 3, 15) + lt.eye(3) * 2}, {psd = true})
gc.check("kron of dense factors", function(p) return lt.kron(spd(p.A, 2), spd(p.B, 2)) end,
  {A = W(2, 2, 16), B = W(2, 2, 17)}, {psd = true})
gc.check("kron + c·I", function(p)
  return lt.kron(spd(p.A, 2), lt.diag(p.d:exp())) + lt.identity(4, 0.5)
end, {A = W(2, 2, 18), d = W(2, 1, 19):reshape(2)}, {psd = true})
gc.check("blockdiag", function(p)
  return lt.blockdiag{spd(p.A, 2), lt.diag(p.d:exp())}
end, {A = W(2, 2, 20), d = W(2, 1, 21):reshape(2)}, {psd = true})
gc.check("dense·D and D·dense", function(p)
  local D = lt.diag(p.d:exp())
  return p.A * D + D * p.A:t()
end, {A = W(3, 3, 22), d = W(3, 1, 23):reshape(3)})
gc.check("Hadamard of a kernel and a dense", function(p)
  return lt.mul(lt.kernel(p.x, {kind = "rbf", lengthscale = 0.9}), spd(p.A, 3))
end, {x = x3, A = W(3, 3, 24)}, {psd = true})
gc.check("three deep: 0.5·(kron(A, B) + D)ᵀ", function(p)
  local K = lt.kron(spd(p.A, 2), spd(p.B, 2))
  return (0.5 * (K + lt.diag(p.d:exp()))):t()
end, {A = W(2, 2, 25), B = W(2, 2, 26), d = W(4, 1, 27):reshape(4)}, {psd = true})
gc.check("three deep: blockdiag{lowrank + D, kernel}", function(p)
  return lt.blockdiag{lt.lowrank(p.U) + lt.diag(p.d:exp()),
    lt.kernel(p.x, {kind = "matern32", lengthscale = 0.5}):add_diag(0.2)}
end, {U = W(2, 1, 28), d = W(2, 1, 29):reshape(2), x = x4}, {psd = true})
gc.check("the issue's covariance: kernel + lowrank + 2·D + (D1 + D2)", function(p)
  local K = lt.kernel(p.x, {kind = "rbf", lengthscale = 0.7})
  return K + lt.lowrank(p.U) + 2 * lt.diag(p.d:exp()) + (lt.diag(p.a:exp()) + lt.diag(p.b:exp()))
end, {x = x4, U = W(4, 1, 30), d = W(4, 1, 31):reshape(4), a = W(4, 1, 32):reshape(4),
  b = W(4, 1, 33):reshape(4)}, {psd = true})
gc.check("product of operators", function(p)
  return lt.lowrank(p.U) * lt.diag(p.d:exp()) + lt.eye(3)
end, {U = W(3, 2, 34), d = W(3, 1, 35):reshape(3)})

-- An lt.operator takes part through its own bilinear_derivative.
local function lua_operator(p)
  local v = p.v
  local function apply(X) return lt.diag(v) * X + X end
  return lt.operator{shape = {3, 3}, matmul = apply, t_matmul = apply, symmetric = true,
    params = {v = v},
    bilinear_derivative = function(L, R)
      local Lm = L:dim() == 1 and L:reshape(3, 1) or L
      local Rm = R:dim() == 1 and R:reshape(3, 1) or R
      return {v = Lm:cmul(Rm):sum(2):reshape(3)}
    end}
end
gc.check("lt.operator", lua_operator, {v = lt.tensor{0.5, 1.5, 2.5}})

-- Batched operators: every operation member by member, broadcast operands
-- summed over the members.
local X2 = W(6, 1, 40):reshape(2, 3, 1)
gc.check_batch("batched diag", function(p) return lt.diag(p.v:exp()) end,
  {v = W(6, 1, 41):reshape(2, 3)}, {psd = true})
gc.check_batch("batched kernel + σ²I", function(p)
  return lt.kernel(p.x, {kind = "rbf", lengthscale = p.l}):add_diag(0.2)
end, {x = X2, l = 0.8}, {psd = true})
gc.check_batch("batched lowrank + diag", function(p)
  return lt.lowrank(p.U) + lt.diag(p.d:exp())
end, {U = W(6, 2, 42):reshape(2, 3, 2), d = W(6, 1, 43):reshape(2, 3)}, {psd = true})
gc.check_batch("lt.batch of different types", function(p)
  return lt.batch{lt.diag(p.a:exp()), lt.lowrank(p.U) + lt.eye(3)}
end, {a = W(3, 1, 44):reshape(3), U = W(3, 1, 45)}, {psd = true})
gc.check_batch("2·D + D of a batch, transposed", function(p)
  local D = lt.diag(p.v:exp())
  return (2 * D + D):t()
end, {v = W(6, 1, 46):reshape(2, 3)}, {psd = true})
