--- gp.laplace's multiclass case: C independent latent GPs, f_c ~ GP(0, k_c),
-- either sharing one kernel (k_c = k, the default) or each with its own
-- (gp.laplace{kernels = {k_1, ..., k_C}}); K = blockdiag(K_1, ..., K_C) is
-- never formed: every product and factor below works block by block. The
-- softmax likelihood, Laplace's method (Rasmussen & Williams 2006, §3.5,
-- Algorithms 3.3 and 3.4, which are written for a block-diagonal K).
--
-- The latents are n×C matrices F (column c: class c's f^c at the n points).
-- With π = softmax(F) per row, D = diag(π), Π the nC×n stack of diag(π^c),
-- W = D − ΠΠᵀ (−∇∇ log p, dense within each point's C×C block):
--   E_c = D_c^½ (I + D_c^½ K_c D_c^½)⁻¹ D_c^½,  M Mᵀ = Σ_c E_c,
--   Ẽ v = E v − E R (Σ_c E_c)⁻¹ Rᵀ E v        (R: C stacked n×n identities),
-- so that (K⁻¹ + W)⁻¹ = K − K Ẽ K and (I + W K)⁻¹ = I − Ẽ K. Newton's
-- step is f ← K·a, a = b − Ẽ K b, b = W f + y − π (Algorithm 3.3), and
--   ½ log|I + K W| = Σ_c Σ_i log (L_c)_ii + Σ_i log M_ii
-- (|I + K W| = Π_c |I + D_c^½ K_c D_c^½| · |Σ_c E_c|, since Σ_c D_c = I).
-- log q(y | θ) = −½ Σ_c â_cᵀ f̂_c + Σ_i log softmax(f̂_i)_{y_i} − ½ log|I + K W|
-- (eq. 3.44 with f̂ = K·â).
--
-- The gradient is gp.laplace's binary one (R&W §5.5.1, all in lazytensor
-- operations, by lt.grad): with â = y − π̂ and b = (I + W K)⁻¹ g = g − Ẽ K g,
-- g = ∂(−½ log|I + K W(f)|)/∂f by lt.grad through π(f), one lt.grad of
--   ½ Σ_c â_cᵀ K_c(θ) â_c − ½ log|I + K(θ) W| + Σ_c b_cᵀ K_c(θ) â_c
-- (â, W, b constants) is the total derivative of log q at the mode.
--
-- Ks below is a Lua array of the C blocks K_c (n×n, dense); with a shared
-- kernel every entry is the same matrix, multiplied once for all classes.
local lt = require "lazytensor"
local integral = require "lazytensor.gp.softmax_integral"

local multiclass = {}

local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

-- F (n×C) less each row's largest entry (a constant shift).
local function shifted(F)
  local shift = {}
  for i, row in ipairs(F:totable()) do shift[i] = {math.max(unpack(row))} end
  return F - lt.tensor(shift)
end

-- softmax of each row of F, written with lazytensor operations, so that
-- lt.grad follows it.
local function softmax_rows(F)
  local E = shifted(F):exp()
  return E:cdiv(E:sum(2):reshape(F:size(1), 1))
end
multiclass.softmax_rows = softmax_rows

local function column(A, c) return A:narrow(2, c, 1):contiguous():reshape(A:size(1)) end

-- Columns (1-d tensors) side by side as an n×C matrix.
local function side_by_side(cols)
  local n = cols[1]:size(1)
  local out
  for c, v in ipairs(cols) do
    local unit = lt.zeros(1, #cols)
    unit:set(1, c, 1)
    local term = v:reshape(n, 1) * unit
    out = out and out + term or term
  end
  return out
end

-- Whether every block is the same matrix (one kernel shared by the classes).
local function shared(Ks)
  for c = 2, #Ks do
    if Ks[c] ~= Ks[1] then return false end
  end
  return true
end

--- K·V for the block-diagonal K (blocks Ks) and V n×C: column c is K_c v_c
-- (one matrix product when the blocks are one shared matrix).
function multiclass.block_mul(Ks, V)
  if shared(Ks) then return Ks[1] * V end
  local cols = {}
  for c = 1, #Ks do cols[c] = Ks[c] * column(V, c) end
  return side_by_side(cols)
end

--- The factors at probabilities P (n×C) and the blocks Ks (n×n, dense):
-- per class c the Cholesky factor L_c of I + D_c^½ K_c D_c^½ and E_c
-- (n×n), the Cholesky factor M of Σ_c E_c, and ½ log|I + K W|. Written
-- with lazytensor operations: followed through P and Ks inside lt.grad.
function multiclass.factors(Ks, P)
  local C = P:size(2)
  local L, E, half_logdet, sumE = {}, {}, 0, nil
  for c = 1, C do
    local sD = column(P, c):sqrt()
    local B = lt.diag(sD) * Ks[c] * lt.diag(sD)
    B = (B + B:t()) * 0.5
    L[c] = lt.psd(B:dense():add_diag(1)):cholesky():dense()
    local Linv_sD = lt.triangular(L[c], "lower"):solve(lt.diag(sD):dense())
    E[c] = Linv_sD:t() * Linv_sD -- D^½ B⁻¹ D^½
    half_logdet = half_logdet + L[c]:diagonal():log():sum()
    sumE = sumE and sumE + E[c] or E[c]
  end
  local M = lt.psd((sumE + sumE:t()) * 0.5):cholesky():dense()
  half_logdet = half_logdet + M:diagonal():log():sum()
  return {L = L, E = E, M = M, half_logdet = half_logdet}
end

--- Ẽ V for V n×C (constants): E V − E R (Σ E)⁻¹ Rᵀ E V.
function multiclass.apply_Etilde(fac, V)
  local C = V:size(2)
  local U, total = {}, nil
  for c = 1, C do
    U[c] = fac.E[c] * column(V, c)
    total = total and total + U[c] or U[c]
  end
  local Mt = lt.triangular(fac.M:t():contiguous(), "upper")
  local t = Mt:solve((lt.triangular(fac.M, "lower"):solve(total)))
  local out = {}
  for c = 1, C do out[c] = U[c] - fac.E[c] * t end
  return side_by_side(out)
end

--- Σ_i log softmax(f_i)_{y_i} (Y one-hot n×C): f_{i,y_i} less log Σ_c e^{f_ic}.
function multiclass.log_lik(F, Y)
  local G = shifted(F)
  return G:cmul(Y):sum() - G:exp():sum(2):log():sum()
end

-- Ψ(F) = −½ Σ_c a_cᵀ f_c + Σ_i log softmax(f_i)_{y_i}.
local function psi(A, F, Y)
  return -0.5 * A:cmul(F):sum() + multiclass.log_lik(F, Y)
end

--- Finds the mode (Algorithm 3.3, step halving on Ψ as the binary case),
-- warm-started from a0 (n×C, or nil). Ks: the C blocks of K, n×n dense
-- (jitter added); Y: the labels one-hot (n×C). Returns {F, A, P, psi, fac,
-- iterations, converged}.
--- Newton's step from A to A_new, halved towards A (at most 30 times)
-- until Ψ is no lower than value (to rounding): eval(A) → F, Ψ. Returns
-- the step's A, F and Ψ (gp/laplace_mixing.lua's mode takes it too).
function multiclass.halved_step(A, A_new, value, eval)
  local F_new, v_new = eval(A_new)
  local floor = value - 1e-12 * math.abs(value)
  for _ = 1, 30 do
    if v_new >= floor then break end -- a NaN Ψ halves too
    A_new = (A + A_new) * 0.5
    F_new, v_new = eval(A_new)
  end
  return A_new, F_new, v_new
end

function multiclass.find_mode(Ks, Y, a0, max_newton, tol)
  local A = a0 or lt.zeros(Y:size(1), Y:size(2))
  local F = multiclass.block_mul(Ks, A)
  local value = psi(A, F, Y)
  local converged, it = false, 0
  while it < max_newton do
    it = it + 1
    local P = softmax_rows(F)
    local fac = multiclass.factors(Ks, P)
    -- b = W f + y − π, W f = π∘f − π∘(Σ_c π_c f_c) per point
    local PF = P:cmul(F)
    local Bv = PF - P:cmul(PF:sum(2):reshape(F:size(1), 1)) + Y - P
    local A_new = Bv - multiclass.apply_Etilde(fac, multiclass.block_mul(Ks, Bv))
    local F_new, v_new
    A_new, F_new, v_new = multiclass.halved_step(A, A_new, value, function(Aa)
      local Fa = multiclass.block_mul(Ks, Aa)
      return Fa, psi(Aa, Fa, Y)
    end)
    local change = math.abs(v_new - value)
    A, F, value = A_new, F_new, v_new
    if change <= tol * (1 + math.abs(value)) then
      converged = true
      break
    end
  end
  local P = softmax_rows(F)
  return {F = F, A = A, P = P, psi = value, fac = multiclass.factors(Ks, P), iterations = it,
          converged = converged}
end

--- b = (I + W K)⁻¹ g with g = ∂(−½ log|I + K W(F)|)/∂F at the mode.
function multiclass.implicit_b(md, Ks)
  local g = lt.grad(function(F) return -multiclass.factors(Ks, softmax_rows(F)).half_logdet end)(
    md.F)
  return g - multiclass.apply_Etilde(md.fac, multiclass.block_mul(Ks, g))
end

--- The surrogate's value at the blocks Ks(θ) (followed): ½ Σ_c â_cᵀK_câ_c −
-- ½ log|I + K W| (+ Σ_c b_cᵀK_câ_c).
function multiclass.surrogate(Ks, md, Y, b)
  local Ahat = Y - md.P -- ∇ log p at the mode
  local KA = multiclass.block_mul(Ks, Ahat)
  local value = Ahat:cmul(KA):sum() * 0.5 - multiclass.factors(Ks, md.P).half_logdet
  if b then value = value + b:cmul(KA):sum() end
  return value
end

-- The latent means at the test points (n*×C): column c is K_c(x*, x)(y_c − π̂_c).
local function test_means(md, Y, Kxs)
  if shared(Kxs) then return Kxs[1]:t() * (Y - md.P) end
  local R, cols = Y - md.P, {}
  for c = 1, #Kxs do cols[c] = Kxs[c]:t() * column(R, c) end
  return side_by_side(cols)
end

--- Latent means (n*×C), variances (n*×C) and per test point the C×C
-- covariance (Algorithm 3.4): μ*_c = k_c*ᵀ(y_c − π_c), Σ*_cc' =
-- k_c*ᵀE_c(ΣE)⁻¹E_c'k_c'* + δ_cc'(k_c** − k_c*ᵀE_c k_c*). Kxs: the C blocks
-- K_c(x, x*) (n×n*); kss: per class the n* values k_c(x*, x*).
function multiclass.predict(md, Y, Kxs, kss)
  local C, ns = Y:size(2), Kxs[1]:size(2)
  local mean = test_means(md, Y, Kxs)
  local V, diag = {}, {}
  for c = 1, C do
    local U = md.fac.E[c] * Kxs[c]
    V[c] = lt.triangular(md.fac.M, "lower"):solve(U):totable()
    diag[c] = Kxs[c]:cmul(U):sum(1):totable()
  end
  local covs, var = {}, {}
  for j = 1, ns do
    local S = {}
    for c = 1, C do
      S[c] = {}
      for c2 = 1, C do
        local s = 0
        for i = 1, #V[c] do s = s + V[c][i][j] * V[c2][i][j] end
        S[c][c2] = s
      end
      S[c][c] = S[c][c] + kss[c][j] - diag[c][j]
    end
    covs[j] = S
    var[j] = {}
    for c = 1, C do var[j][c] = S[c][c] end
  end
  return mean, lt.tensor(var), covs
end

-- The lower Cholesky factor of a small C×C matrix (plain Lua; a tiny
-- negative pivot from rounding counts as 0).
local function small_cholesky(S)
  local C, L = #S, {}
  for i = 1, C do
    L[i] = {}
    for j = 1, C do L[i][j] = 0 end
    for j = 1, i do
      local s = S[i][j]
      for k = 1, j - 1 do s = s - L[i][k] * L[j][k] end
      if i == j then
        L[i][i] = math.sqrt(math.max(s, 0))
      else
        L[i][j] = L[j][j] > 0 and s / L[j][j] or 0
      end
    end
  end
  return L
end

-- Monte Carlo under N(μ, S) over the fixed base samples ε_k (f = μ + L ε_k,
-- L Lᵀ = S, the cross-class covariances kept): the C probabilities and the
-- largest standard error.
local function monte_carlo(mu, S, base)
  local L, C = small_cholesky(S), #mu
  local p, p2 = {}, {}
  for c = 1, C do p[c], p2[c] = 0, 0 end
  for _, e in ipairs(base) do
    local f, top = {}, -math.huge
    for c = 1, C do
      local s = mu[c]
      for k = 1, c do s = s + L[c][k] * e[k] end
      f[c] = s
      top = math.max(top, s)
    end
    local z = 0
    for c = 1, C do
      f[c] = math.exp(f[c] - top)
      z = z + f[c]
    end
    for c = 1, C do
      p[c] = p[c] + f[c] / z
      p2[c] = p2[c] + (f[c] / z) ^ 2
    end
  end
  local S_, se = #base, 0
  for c = 1, C do
    p[c] = p[c] / S_
    se = math.max(se, math.sqrt(math.max(p2[c] / S_ - p[c] * p[c], 0) / S_))
  end
  return p, se
end

--- Class probabilities E softmax(f*) (n*×C) under N(μ*, Σ*), the C×C
-- covariance kept, their variances p(1 − p), and per point an error
-- estimate (n*): by default the quadrature of gp/softmax_integral.lua
-- (opts.tol, opts.max_nodes); with opts.base (base samples ε_k) Monte Carlo,
-- the error its largest standard error.
function multiclass.predict_y(mean, covs, opts)
  local P, Var, Err = {}, {}, {}
  for j, mu in ipairs(mean:totable()) do
    local p, err
    if opts.base then
      p, err = monte_carlo(mu, covs[j], opts.base)
    else
      p, err = integral.expected_softmax(mu, covs[j], opts)
    end
    P[j], Var[j], Err[j] = p, {}, err
    for c = 1, #mu do Var[j][c] = p[c] * (1 - p[c]) end
  end
  return lt.tensor(P), lt.tensor(Var), lt.tensor(Err)
end

--- The joint posterior of the latents at the test points, stacked class by
-- class (f^1(x*), …, f^C(x*)): an lt.mvn of n*·C with the blocks
-- Σ_cc' = V_cᵀV_c' + δ_cc'(K_c** − Kxs_cᵀ E_c Kxs_c), V_c = M⁻¹E_c·Kxs_c
-- (Kxs, Kss: per class K_c(x, x*) and K_c(x*, x*)).
function multiclass.posterior(md, Y, Kxs, Kss)
  local C = Y:size(2)
  local mean = test_means(md, Y, Kxs)
  local V, diagblock = {}, {}
  for c = 1, C do
    local U = md.fac.E[c] * Kxs[c]
    V[c] = lt.triangular(md.fac.M, "lower"):solve(U)
    diagblock[c] = Kss[c] - Kxs[c]:t() * U
  end
  local rows, ns = {}, Kxs[1]:size(2)
  for c = 1, C do
    local blocks = {}
    for c2 = 1, C do
      local B = V[c]:t() * V[c2]
      if c == c2 then B = B + diagblock[c] end
      blocks[c2] = B:totable()
    end
    for j = 1, ns do
      local row = {}
      for c2 = 1, C do
        for k = 1, ns do row[#row + 1] = blocks[c2][j][k] end
      end
      rows[#rows + 1] = row
    end
  end
  local S = lt.tensor(rows)
  local stacked = {}
  for c = 1, C do
    for _, x in ipairs(column(mean, c):totable()) do stacked[#stacked + 1] = x end
  end
  return lt.mvn(lt.tensor(stacked), lt.psd((S + S:t()) * 0.5))
end

return multiclass
