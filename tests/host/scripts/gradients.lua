-- Gradients under allocation failure: params, bilinear_derivative through
-- composites, with_params, a Lua operator's callbacks, inv_quad_logdet with
-- grad = true (exact and stochastic paths, vector and matrix right-hand
-- sides). (lt.mvn is a Lua submodule the host scripts cannot load.)
local lt = require "lazytensor"
local function close(a, b, what)
  assert(math.abs(a - b) < 1e-8 * (1 + math.abs(b)),
    (what or "") .. ": " .. tostring(a) .. " vs " .. tostring(b))
end

local U = lt.tensor{{1, 0}, {0, 1}, {1, 1}}
local LR = lt.lowrank(U)
local D = lt.diag{2, 1, 3}
local T = lt.toeplitz{1, 0.5, 0.25}
local A = LR + D + T * 0.5
close(D:params().diag[3], 3, "params")
local g = A:bilinear_derivative(lt.tensor{1, 0, 0}, lt.tensor{1, 0, 0})
close(g[D].diag[1], 1, "diag gradient")
close(g[LR].U:get(1, 1), 2, "lowrank gradient")
local B = A:with_params{[D] = {diag = lt.ones(3)}}
close(B:get(2, 2), 1 + 1 + 0.5, "with_params")
local q, ld, grads, info = A:inv_quad_logdet(lt.tensor{1, 2, 3}, {grad = true})
local q0, ld0 = A:inv_quad_logdet(lt.tensor{1, 2, 3})
close(q, q0, "inv_quad")
close(ld, ld0, "logdet")
assert(info.method == "cholesky" and grads[D] ~= nil)
lt.with_settings({max_cholesky_size = 1, num_trace_samples = 4}, function()
  local _, _, sg = lt.psd(A):inv_quad_logdet(lt.tensor{1, 2, 3}, {grad = true,
                                                                  control_variate = 2})
  assert(sg[D].diag:numel() == 3)
end)
-- The callbacks allocate nothing in Lua code (only through the library):
-- a memory error raised by LuaJIT's VM inside a function it runs for a C
-- caller corrupts its byte count (LuaJIT issue #906; see allocfail.c).
local spec = {shape = {3, 3}, params = {s = 2}}
local grad_out = {s = 0}
function spec.matmul(X) return X * spec.params.s end
function spec.bilinear_derivative(L, R)
  grad_out.s = L:dot(R)
  return grad_out
end
function spec.with_params(p)
  spec.params.s = p.s
  return lt.operator(spec)
end
local op = lt.operator(spec)
local go = (op + D):bilinear_derivative(lt.ones(3), lt.ones(3))
close(go[op].s, 3, "operator gradient")
close(op:with_params{[op] = {s = 4}}:get(1, 1), 4, "operator with_params")
-- a matrix right-hand side (lt.mvn's log_prob of several points runs this)
local _, _, mg = A:inv_quad_logdet(lt.tensor{{1, 0}, {0, 1}, {1, 1}}, {grad = true})
assert(mg[D] ~= nil and mg[LR] ~= nil)
