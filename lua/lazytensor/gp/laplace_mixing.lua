--- gp.laplace with softmax's mixing weights (gp.likelihoods.softmax{classes
-- = C, features = F}): F independent latent GPs g_j ~ GP(0, k_j) (one
-- kernel shared, or kernels = {k_1, ..., k_F}), class logits f_i = W g_i
-- with W (C×F) learnt, p(y_i = c | g_i) = softmax(W g_i)_c.
--
-- The latents are an n×F matrix G (column j: g_j at the n points), K =
-- blockdiag(K_1, ..., K_F). With π_i = softmax(W g_i), the likelihood's
-- negative Hessian at point i is H_i = Wᵀ(D_i − π_iπ_iᵀ)W (F×F), and since
-- D − ππᵀ = QᵀQ with Q = D^½(I − 1πᵀ), H_i = U_iᵀU_i with U_i = Q_i W
-- (C×F): (U_i)_cj = √π_ic (W_cj − (π_iᵀW)_j). U = blockdiag_i(U_i) is
-- nC × nF (rows point-major, (i − 1)C + c), H = UᵀU, and everything is
-- carried by the nC × nC matrix
--   B = I + U K Uᵀ = I + Σ_j (u_j u_jᵀ) ⊙ (K_j ⊗ 1 1ᵀ)   (u_j: U's column-j
--   entries as an nC vector),  B = L Lᵀ,
-- with (K⁻¹ + H)⁻¹ = K − K Uᵀ B⁻¹ U K, (I + H K)⁻¹ = I − Uᵀ B⁻¹ U K and
-- |I + K H| = |B|. Newton's step (R&W Algorithm 3.3 for this H) is
-- g ← K a, a = b − Uᵀ B⁻¹ U K b, b = H g + ∇ log p, with ∇ log p =
-- (Y − Π) W and H g = (Π ⊙ Gf − Π ⊙ rowsum(Π ⊙ Gf)) W (Gf = G Wᵀ: the
-- inner optimisation's own derivatives, as gp.laplace's Newton steps);
--   log q(y | θ, W) = −½ Σ_j â_jᵀ ĝ_j + Σ_i log softmax(W ĝ_i)_{y_i} − Σ log L_ii.
--
-- Its gradient in the kernels' hyperparameters θ and in W, by one lt.grad
-- of a surrogate (â = K⁻¹ĝ, ĝ and the constants below fixed): the mode ĝ
-- solves r(g) = ∇_g log p(g; W) − K⁻¹g = 0, so dĝ = (K⁻¹ + H)⁻¹ ∂r, and
-- log q depends on ĝ only through −½ log|B| (Ψ is stationary). With s =
-- ∂(−½ log|B|)/∂ĝ (lt.grad through Π(G)), b = (I + HK)⁻¹ s and c = K b:
--   S(θ, W) = ½ Σ_j â_jᵀK_j(θ)â_j + Σ_i log softmax(W ĝ_i)_{y_i} − ½ log|B(ĝ; θ, W)|
--           + Σ_j b_jᵀK_j(θ)â_j + Σ ⟨c, (Y − Π(ĝ Wᵀ)) W⟩,
-- the last two the implicit parts (for θ: ∂r = K⁻¹K'â, cᵀK⁻¹K'â = bᵀK'â;
-- for W: ∂r = ∂_W ∇_g log p). Predictions: g* per test point has mean
-- μ*_j = k_j*ᵀ â_j and the F×F covariance δ_jj' k_j** − (U k*_j)ᵀ B⁻¹ (U k*_j'),
-- so f* = W g* ~ N(W μ*, W Σ* Wᵀ), whose class probabilities are
-- gp/softmax_integral.lua's quadrature (a C×C covariance of rank ≤ F).
local lt = require "lazytensor"
local multiclass = require "lazytensor.gp.laplace_softmax"

local mixing = {}

local softmax_rows = multiclass.softmax_rows
local block_mul = multiclass.block_mul

local function lower_solve(L, b) return lt.triangular(L, "lower"):solve(b) end
local function upper_solve(L, b) return lt.triangular(L:t():contiguous(), "upper"):solve(b) end

--- The constant matrices for n points, C classes and F latents: E (nC × n,
-- E[(i, c), i] = 1: copies a point's value to its C rows), Rc (C × CF,
-- repeats each class F times) and Rj (F × CF, repeats the latents C times).
function mixing.constants(n, C, F)
  local E = lt.zeros(n * C, n)
  for i = 1, n do
    for c = 1, C do E:set((i - 1) * C + c, i, 1) end
  end
  local Rc, Rj = lt.zeros(C, C * F), lt.zeros(F, C * F)
  for c = 1, C do
    for j = 1, F do
      Rc:set(c, (c - 1) * F + j, 1)
      Rj:set(j, (c - 1) * F + j, 1)
    end
  end
  return {E = E, Et = E:t():contiguous(), Rc = Rc, Rj = Rj, n = n, C = C, F = F}
end

--- K_j ⊗ 1 1ᵀ (nC × nC, E K_j Eᵀ) per latent (one matrix when shared).
function mixing.expanded(k, Ks)
  local out = {}
  for j = 1, #Ks do
    out[j] = (j > 1 and Ks[j] == Ks[1]) and out[1] or k.E * Ks[j] * k.Et
  end
  return out
end

--- U's entries as an nC × F matrix Um (row (i − 1)C + c, column j:
-- √π_ic (W_cj − (π_iᵀW)_j)), P n×C, W C×F; lazytensor operations, followed
-- through P and W.
function mixing.u_matrix(k, P, W)
  local n, C, F = k.n, k.C, k.F
  local T = (P:sqrt() * k.Rc):cmul(lt.ones(n, 1) * W:reshape(1, C * F) - P * W * k.Rj)
  return T:reshape(n * C, F)
end

--- B's Cholesky factor L and ½ log|B| at P, W and the expanded blocks KE.
function mixing.factors(k, KE, P, W)
  local Um = mixing.u_matrix(k, P, W)
  local spread
  if KE[2] == nil or KE[2] == KE[1] then
    spread = (Um * Um:t()):cmul(KE[1])
  else
    for j = 1, k.F do
      local u = Um:narrow(2, j, 1)
      local term = (u * u:t()):cmul(KE[j])
      spread = spread and spread + term or term
    end
  end
  local B = (spread + spread:t()) * 0.5
  local L = lt.psd(B:add_diag(1)):cholesky():dense()
  return {Um = Um, L = L, half_logdet = L:diagonal():log():sum()}
end

--- Uᵀ B⁻¹ U K V for V n×F (constants): the correction of (I + HK)⁻¹.
function mixing.correction(k, fac, Ks, V)
  local UKv = fac.Um:cmul(k.E * block_mul(Ks, V)):sum(2) -- nC
  local t = upper_solve(fac.L, lower_solve(fac.L, UKv))
  return k.Et * fac.Um:cmul(t:reshape(k.n * k.C, 1) * lt.ones(1, k.F))
end

-- Ψ(A, G) = −½ Σ A ⊙ G + Σ_i log softmax(W g_i)_{y_i}.
local function psi(A, G, W, Y)
  return -0.5 * A:cmul(G):sum() + multiclass.log_lik(G * W:t(), Y)
end

--- Finds the mode (Newton with step halving on Ψ), warm-started from a0
-- (n×F or nil). Ks: the F blocks K_j (n×n, dense, jitter added); W: C×F;
-- Y: one-hot n×C. Returns {G, A, Ahat, P, psi, fac, KE, iterations,
-- converged}.
function mixing.find_mode(k, Ks, W, Y, a0, max_newton, tol)
  local KE = mixing.expanded(k, Ks)
  local A = a0 or lt.zeros(k.n, k.F)
  local G = block_mul(Ks, A)
  local value = psi(A, G, W, Y)
  local converged, it = false, 0
  while it < max_newton do
    it = it + 1
    local Gf = G * W:t()
    local P = softmax_rows(Gf)
    local fac = mixing.factors(k, KE, P, W)
    local PG = P:cmul(Gf)
    local Bv = (PG - P:cmul(PG:sum(2):reshape(k.n, 1)) + Y - P) * W -- H g + ∇ log p
    local A_new = Bv - mixing.correction(k, fac, Ks, Bv)
    local G_new, v_new
    A_new, G_new, v_new = multiclass.halved_step(A, A_new, value, function(Aa)
      local Ga = block_mul(Ks, Aa)
      return Ga, psi(Aa, Ga, W, Y)
    end)
    local change = math.abs(v_new - value)
    A, G, value = A_new, G_new, v_new
    if change <= tol * (1 + math.abs(value)) then
      converged = true
      break
    end
  end
  local P = softmax_rows(G * W:t())
  return {G = G, A = A, Ahat = (Y - P) * W, P = P, psi = value, KE = KE,
          fac = mixing.factors(k, KE, P, W), iterations = it, converged = converged}
end

--- c = K b, b = (I + H K)⁻¹ s, s = ∂(−½ log|B|)/∂G at the mode (lt.grad
-- through Π(G); K and W held).
function mixing.implicit(k, md, Ks, W)
  local s = lt.grad(function(G)
    return -mixing.factors(k, md.KE, softmax_rows(G * W:t()), W).half_logdet
  end)(md.G)
  local b = s - mixing.correction(k, md.fac, Ks, s)
  return b, block_mul(Ks, b)
end

--- The surrogate S(θ, W) of the header at the blocks Ks(θ) and W (both
-- followed); implicit = {b, c} or nil (the explicit part alone).
function mixing.surrogate(k, Ks, W, md, Y, implicit)
  local KA = block_mul(Ks, md.Ahat)
  local P = softmax_rows(md.G * W:t())
  local value = md.Ahat:cmul(KA):sum() * 0.5 + multiclass.log_lik(md.G * W:t(), Y)
                - mixing.factors(k, mixing.expanded(k, Ks), P, W).half_logdet
  if implicit then
    value = value + implicit.b:cmul(KA):sum() + implicit.c:cmul((Y - P) * W):sum()
  end
  return value
end

-- Per latent j, L⁻¹ U K_j(x, x*) (nC × n*).
local function test_factors(k, md, Kxs)
  local V = {}
  for j = 1, k.F do
    local u = md.fac.Um:narrow(2, j, 1) * lt.ones(1, Kxs[j]:size(2))
    V[j] = lower_solve(md.fac.L, u:cmul(k.E * Kxs[j]))
  end
  return V
end

-- The latent means at the test points (n*×F): column j is K_j(x*, x) â_j.
local function test_means(k, md, Kxs)
  local out
  for j = 1, k.F do
    local unit = lt.zeros(1, k.F)
    unit:set(1, j, 1)
    local term = (Kxs[j]:t() * md.Ahat:narrow(2, j, 1):contiguous()) * unit
    out = out and out + term or term
  end
  return out
end

--- The latents g* at the test points: means (n*×F), variances (n*×F) and
-- per point the F×F covariance (a Lua array of tables). Kxs: per latent
-- K_j(x, x*); kss: per latent the n* values k_j(x*, x*).
function mixing.predict(k, md, Kxs, kss)
  local mean = test_means(k, md, Kxs)
  local V = {}
  for j, Vj in ipairs(test_factors(k, md, Kxs)) do V[j] = Vj:totable() end
  local covs, var = {}, {}
  for s = 1, Kxs[1]:size(2) do
    local S = {}
    for j = 1, k.F do
      S[j] = {}
      for j2 = 1, k.F do
        local total = 0
        for r = 1, #V[j] do total = total + V[j][r][s] * V[j2][r][s] end
        S[j][j2] = -total
      end
      S[j][j] = S[j][j] + kss[j][s]
    end
    covs[s] = S
    var[s] = {}
    for j = 1, k.F do var[s][j] = S[j][j] end
  end
  return mean, lt.tensor(var), covs
end

--- The logits f* = W g*: means (n*×C) and per point the C×C covariance
-- W Σ* Wᵀ, for multiclass.predict_y.
function mixing.logits(mean, covs, W)
  local Wt = W:totable()
  local out = {}
  for s, S in ipairs(covs) do
    local WS = {}
    for c = 1, #Wt do
      WS[c] = {}
      for j2 = 1, #S do
        local total = 0
        for j = 1, #S do total = total + Wt[c][j] * S[j][j2] end
        WS[c][j2] = total
      end
    end
    local cov = {}
    for c = 1, #Wt do
      cov[c] = {}
      for c2 = 1, #Wt do
        local total = 0
        for j = 1, #S do total = total + WS[c][j] * Wt[c2][j] end
        cov[c][c2] = total
      end
    end
    out[s] = cov
  end
  return mean * W:t(), out
end

--- The joint posterior of g* at the test points, stacked latent by latent
-- (g_1(x*), …, g_F(x*)): blocks δ_jj' K_j** − V_jᵀ V_j'. Kss: per latent
-- K_j(x*, x*).
function mixing.posterior(k, md, Kxs, Kss)
  local mean = test_means(k, md, Kxs)
  local V = test_factors(k, md, Kxs)
  local rows, ns = {}, Kxs[1]:size(2)
  for j = 1, k.F do
    local blocks = {}
    for j2 = 1, k.F do
      local Bl = -(V[j]:t() * V[j2])
      if j == j2 then Bl = Bl + Kss[j] end
      blocks[j2] = Bl:totable()
    end
    for s = 1, ns do
      local row = {}
      for j2 = 1, k.F do
        for t = 1, ns do row[#row + 1] = blocks[j2][s][t] end
      end
      rows[#rows + 1] = row
    end
  end
  local S = lt.tensor(rows)
  local stacked = {}
  for j = 1, k.F do
    for _, x in ipairs(mean:narrow(2, j, 1):contiguous():reshape(ns):totable()) do
      stacked[#stacked + 1] = x
    end
  end
  return lt.mvn(lt.tensor(stacked), lt.psd((S + S:t()) * 0.5))
end

return mixing
