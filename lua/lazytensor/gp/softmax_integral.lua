--- E softmax(f) for f ~ N(μ, Σ) (μ ∈ R^C, Σ a full C×C covariance), by a
-- deterministic quadrature with an error estimate: gp.laplace's multiclass
-- predict_y.
--
-- 1. Reduction. softmax(f) = softmax(f + t·1) for every t, so only f's
--    part orthogonal to 1 matters: with Q the C×(C−1) Helmert basis of 1^⊥,
--    softmax(μ + e) = softmax(μ + Q·h), h = Qᵀe ~ N(0, QᵀΣQ). QᵀΣQ = UΛUᵀ
--    (Jacobi) and h = U·Λ^½·z with z ~ N(0, I): a (C−1)-dimensional
--    integral over standard normal z along the principal axes, the axes of
--    (relative) variance below 10⁻¹⁴ dropped (the integrand does not vary
--    along them). f(z) = μ + B·z, B = Q·U·Λ^½.
-- 2. The rule. In each direction j the trapezoid rule in z_j with step
--    h_j = ρ/s_j, s_j = max(1, max_k B_kj − min_k B_kj), on the lattice
--    {k·h_j} truncated to ‖z‖ ≤ R (R = 8 + d/5: the normal mass outside is
--    below 10⁻¹⁵), weights φ(z) normalised to sum to 1 (so that each row
--    of probabilities sums to 1: Σ_c softmax_c = 1 at every node). For an
--    integrand analytic in the strip |Im z_j| < a the trapezoid rule's error
--    falls like e^{−2πa/h}. Σ_k e^{f_k} cannot vanish while the phases
--    Im f_k = y·B_kj span less than π, so softmax(μ + Bz) is analytic for
--    |Im z_j| < π/s_j, and ρ = 0.5 gives e^{−4π²} ≈ 7·10⁻¹⁸ a direction (and
--    the Gaussian factor alone e^{−2π²/ρ²}): the rule is far more accurate
--    than the estimate below says.
--    Error estimate: the same sum over the sub-lattice of even k (step 2h,
--    the nodes already evaluated: ρ = 1, e^{−2π²} ≈ 3·10⁻⁹) — |P_h − P_2h|
--    is about P_2h's error and, the convergence being geometric, far
--    exceeds P_h's. While it is above tol the step is halved.
-- 3. Product, sparse, quasi-random. The product lattice has about
--    Π_j (2R/h_j) nodes (times the ball's share of the cube): used while
--    that is at most max_nodes (2·10⁵; ρ stretched up to 1 to fit it, the
--    estimate saying how well) — C ≤ 4 at latent variances up to about 10,
--    C = 3 to 100s, C = 2 always. Above it, a Smolyak sparse grid of the same
--    nested trapezoid rules (level 1: the node 0; level l ≥ 2: step
--    2.8·2^{2−l}/s_j), the combination technique
--    A(q) = Σ_{q−d+1 ≤ |l| ≤ q} (−1)^{q−|l|} binom(d−1, q−|l|) ⊗_j U_{l_j},
--    q raised while the next level's nodes fit max_nodes, stopping once
--    |A(q) − A(q−1)| ≤ tol. Sparse grids resolve features along their
--    axes, and the softmax's ridges f_k = f_c are not, so at larger
--    variances they stall; then randomised quasi-Monte Carlo takes over on
--    max_nodes points (8 Cranley–Patterson shifts, fixed, of a Halton
--    sequence mapped by Φ⁻¹), its estimate 3 standard errors over the
--    shifts (about 10⁻⁴ at C = 5–8, measured), if that is the smaller.
-- Returns the C probabilities, the error estimate and how it was computed.
local integral = {}

local exp, sqrt, abs, max, floor = math.exp, math.sqrt, math.abs, math.max, math.floor

local RHO = 0.5
local DROP = 1e-14

-- The C×(C−1) Helmert basis of the complement of 1 (orthonormal columns).
local function helmert(C)
  local Q = {}
  for i = 1, C do
    Q[i] = {}
    for j = 1, C - 1 do
      local norm = sqrt(j * (j + 1))
      Q[i][j] = i <= j and 1 / norm or (i == j + 1 and -j / norm or 0)
    end
  end
  return Q
end

-- Eigenvalues and eigenvectors (columns of V) of a small symmetric matrix,
-- by cyclic Jacobi rotations.
local function jacobi(S)
  local d = #S
  local A, V = {}, {}
  for i = 1, d do
    A[i], V[i] = {}, {}
    for j = 1, d do
      A[i][j] = S[i][j]
      V[i][j] = i == j and 1 or 0
    end
  end
  for _ = 1, 100 do
    local off, scale = 0, 0
    for i = 1, d do
      scale = scale + A[i][i] * A[i][i]
      for j = i + 1, d do off = off + A[i][j] * A[i][j] end
    end
    if off <= 1e-32 * scale or off == 0 then break end
    for p = 1, d - 1 do
      for q = p + 1, d do
        if A[p][q] ~= 0 then
          local theta = (A[q][q] - A[p][p]) / (2 * A[p][q])
          local t = (theta >= 0 and 1 or -1) / (abs(theta) + sqrt(theta * theta + 1))
          local c = 1 / sqrt(t * t + 1)
          local s = t * c
          for k = 1, d do -- A ← A·J
            local akp, akq = A[k][p], A[k][q]
            A[k][p], A[k][q] = c * akp - s * akq, s * akp + c * akq
          end
          for k = 1, d do -- A ← Jᵀ·A
            local apk, aqk = A[p][k], A[q][k]
            A[p][k], A[q][k] = c * apk - s * aqk, s * apk + c * aqk
          end
          for k = 1, d do
            local vkp, vkq = V[k][p], V[k][q]
            V[k][p], V[k][q] = c * vkp - s * vkq, s * vkp + c * vkq
          end
        end
      end
    end
  end
  local values = {}
  for i = 1, d do values[i] = A[i][i] end
  return values, V
end

--- The integral's directions: B's columns (each a C-vector) and their
-- scales s_j, for the covariance S (C×C, a Lua array of rows).
function integral.directions(S)
  local C = #S
  local Q = helmert(C)
  local R = {} -- QᵀSQ
  for a = 1, C - 1 do
    R[a] = {}
    for b = 1, C - 1 do
      local t = 0
      for i = 1, C do
        for k = 1, C do t = t + Q[i][a] * S[i][k] * Q[k][b] end
      end
      R[a][b] = t
    end
  end
  for a = 1, C - 1 do -- exactly symmetric
    for b = a + 1, C - 1 do
      local m = 0.5 * (R[a][b] + R[b][a])
      R[a][b], R[b][a] = m, m
    end
  end
  local lambda, U = jacobi(R)
  local top = 0
  for _, l in ipairs(lambda) do top = max(top, l) end
  local cols, scales = {}, {}
  for j, l in ipairs(lambda) do
    if l > DROP * top and l > 0 then
      local col, r = {}, sqrt(l)
      for i = 1, C do
        local t = 0
        for a = 1, C - 1 do t = t + Q[i][a] * U[a][j] end
        col[i] = t * r
      end
      local lo, hi = math.huge, -math.huge
      for i = 1, C do lo, hi = math.min(lo, col[i]), max(hi, col[i]) end
      cols[#cols + 1], scales[#scales + 1] = col, max(1, hi - lo)
    end
  end
  return cols, scales
end

-- f ← softmax(μ + B·z) (C entries).
local function softmax_at(mu, cols, z, f)
  local C, top = #mu, -math.huge
  for c = 1, C do
    local s = mu[c]
    for j = 1, #cols do s = s + cols[j][c] * z[j] end
    f[c] = s
    if s > top then top = s end
  end
  local total = 0
  for c = 1, C do
    f[c] = exp(f[c] - top)
    total = total + f[c]
  end
  for c = 1, C do f[c] = f[c] / total end
end

-- acc ← acc + w·softmax(μ + B·z).
local function add_softmax(acc, mu, cols, z, w, f)
  softmax_at(mu, cols, z, f)
  for c = 1, #mu do acc[c] = acc[c] + w * f[c] end
end

local function radius(d) return 8 + d / 5 end

-- The product lattice's node count for the steps h (an estimate: the
-- cube's, times the ball's share).
local function product_count(h, d)
  local n, R = 1, radius(d)
  for j = 1, d do n = n * (2 * floor(R / h[j]) + 1) end
  local share = ({1, math.pi / 4, math.pi / 6, math.pi ^ 2 / 32})[d] or 0.3
  return n * share
end

-- The product trapezoid rule on the lattice {k·h} ∩ ‖z‖ ≤ R: the
-- probabilities at steps h and 2h (the even-k sub-lattice), and the nodes.
local function product_rule(mu, cols, h)
  local d, C, R = #cols, #mu, radius(#cols)
  local K, k, z, f = {}, {}, {}, {}
  for j = 1, d do
    K[j] = floor(R / h[j])
    k[j] = -K[j]
  end
  local fine, coarse = {}, {}
  for c = 1, C do fine[c], coarse[c] = 0, 0 end
  local wf, wc, nodes = 0, 0, 0
  while true do
    local r2, even = 0, true
    for j = 1, d do
      z[j] = k[j] * h[j]
      r2 = r2 + z[j] * z[j]
      if k[j] % 2 ~= 0 then even = false end
    end
    if r2 <= R * R then
      local w = exp(-0.5 * r2)
      softmax_at(mu, cols, z, f)
      for c = 1, C do fine[c] = fine[c] + w * f[c] end
      nodes = nodes + 1
      wf = wf + w
      if even then
        for c = 1, C do coarse[c] = coarse[c] + w * f[c] end
        wc = wc + w
      end
    end
    local j = 1 -- the next lattice point (an odometer)
    while j <= d and k[j] == K[j] do
      k[j] = -K[j]
      j = j + 1
    end
    if j > d then break end
    k[j] = k[j] + 1
  end
  for c = 1, C do fine[c], coarse[c] = fine[c] / wf, coarse[c] / wc end
  return fine, coarse, nodes
end

-- The Smolyak sparse grid's 1-d rules: level 1 the node 0; level l ≥ 2 the
-- trapezoid rule of step 2.8·2^{2−l}/s on |z| ≤ R, weights normalised.
local function rule_1d(l, s, R)
  if l == 1 then return {0}, {1} end
  local h = 2.8 * 2 ^ (2 - l) / s
  local K = floor(R / h)
  local x, w, total = {}, {}, 0
  for k = -K, K do
    x[#x + 1] = k * h
    w[#w + 1] = exp(-0.5 * (k * h) ^ 2)
    total = total + w[#w]
  end
  for i = 1, #w do w[i] = w[i] / total end
  return x, w
end

local function binomial(n, k)
  local b = 1
  for i = 1, k do b = b * (n - k + i) / i end
  return b
end

-- Calls fn(levels) for every multi-index of d levels ≥ 1 summing to total.
local function each_index(d, total, fn, prefix)
  prefix = prefix or {}
  local j = #prefix + 1
  if j == d then
    prefix[j] = total
    fn(prefix)
    prefix[j] = nil
    return
  end
  for l = 1, total - (d - j) do
    prefix[j] = l
    each_index(d, total - l, fn, prefix)
  end
  prefix[j] = nil
end

-- Direction j's 1-d rule of level l (cached in rules).
local function cached_rule(rules, l, j, s)
  local key = l .. ":" .. j
  if not rules[key] then
    local x, w = rule_1d(l, s, radius(1) + 0.3)
    rules[key] = {x = x, w = w}
  end
  return rules[key]
end

-- The nodes Smolyak's A(q) evaluates.
local function smolyak_count(d, scales, q, rules)
  local count = 0
  for total = math.max(d, q - d + 1), q do
    each_index(d, total, function(levels)
      local n = 1
      for j = 1, d do n = n * #cached_rule(rules, levels[j], j, scales[j]).x end
      count = count + n
    end)
  end
  return count
end

-- Smolyak's A(q) (q ≥ d) into a table of C probabilities; the nodes used.
local function smolyak(mu, cols, scales, q, rules)
  local d, C = #cols, #mu
  local acc, nodes, z, f = {}, 0, {}, {}
  for c = 1, C do acc[c] = 0 end
  for total = math.max(d, q - d + 1), q do
    local coef = ((q - total) % 2 == 0 and 1 or -1) * binomial(d - 1, q - total)
    each_index(d, total, function(levels)
      local xs, ws, k = {}, {}, {}
      for j = 1, d do
        local r = cached_rule(rules, levels[j], j, scales[j])
        xs[j], ws[j], k[j] = r.x, r.w, 1
      end
      while true do
        local w = coef
        for j = 1, d do
          z[j] = xs[j][k[j]]
          w = w * ws[j][k[j]]
        end
        add_softmax(acc, mu, cols, z, w, f)
        nodes = nodes + 1
        local j = 1
        while j <= d and k[j] == #xs[j] do
          k[j] = 1
          j = j + 1
        end
        if j > d then break end
        k[j] = k[j] + 1
      end
    end)
  end
  return acc, nodes
end

-- Φ⁻¹(p) (Acklam's rational approximation, relative error below 1.2·10⁻⁹).
local IA = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
            1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00}
local IB = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
            6.680131188771972e+01, -1.328068155288572e+01}
local IC = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
            -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00}
local ID = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
            3.754408661907416e+00}
local function normal_quantile(p)
  local function tail(q)
    return (((((IC[1] * q + IC[2]) * q + IC[3]) * q + IC[4]) * q + IC[5]) * q + IC[6])
           / ((((ID[1] * q + ID[2]) * q + ID[3]) * q + ID[4]) * q + 1)
  end
  if p < 0.02425 then return tail(sqrt(-2 * math.log(p))) end
  if p > 1 - 0.02425 then return -tail(sqrt(-2 * math.log(1 - p))) end
  local q = p - 0.5
  local r = q * q
  return (((((IA[1] * r + IA[2]) * r + IA[3]) * r + IA[4]) * r + IA[5]) * r + IA[6]) * q
         / (((((IB[1] * r + IB[2]) * r + IB[3]) * r + IB[4]) * r + IB[5]) * r + 1)
end

local PRIMES = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71}

-- The radical inverse of i in base b (Halton's sequence).
local function radical_inverse(i, b)
  local f, r = 1, 0
  while i > 0 do
    f = f / b
    r = r + f * (i % b)
    i = (i - i % b) / b
  end
  return r
end

-- Randomised quasi-Monte Carlo: `shifts` Cranley–Patterson shifts (from
-- Park–Miller's generator, seed 1: the same numbers every call) of N Halton
-- points mapped by Φ⁻¹; the mean and its standard error over the shifts.
local function quasi_monte_carlo(mu, cols, N, shifts)
  local d, C = #cols, #mu
  if d > #PRIMES then return nil end
  local seed = 1
  local function uniform()
    seed = (16807 * seed) % 2147483647
    return seed / 2147483647
  end
  local est, z, f = {}, {}, {}
  local points = {} -- the Halton points, shared by the shifts
  for i = 1, N do
    local u = {}
    for j = 1, d do u[j] = radical_inverse(i, PRIMES[j]) end
    points[i] = u
  end
  for r = 1, shifts do
    local shift = {}
    for j = 1, d do shift[j] = uniform() end
    local acc = {}
    for c = 1, C do acc[c] = 0 end
    for i = 1, N do
      local u = points[i]
      for j = 1, d do z[j] = normal_quantile((u[j] + shift[j]) % 1) end
      add_softmax(acc, mu, cols, z, 1 / N, f)
    end
    est[r] = acc
  end
  local mean, se = {}, 0
  for c = 1, C do
    local m, v = 0, 0
    for r = 1, shifts do m = m + est[r][c] / shifts end
    for r = 1, shifts do v = v + (est[r][c] - m) ^ 2 end
    mean[c] = m
    se = max(se, sqrt(v / (shifts - 1) / shifts))
  end
  return mean, se
end

local function max_change(a, b)
  local m = 0
  for c = 1, #a do m = max(m, abs(a[c] - b[c])) end
  return m
end

--- E softmax(f), f ~ N(mu, S) (mu: C numbers; S: C×C rows). opts: tol
-- (10⁻⁸), max_nodes (2·10⁵). Returns the C probabilities, the error
-- estimate and {nodes, method = "exact" | "product" | "smolyak"}.
function integral.expected_softmax(mu, S, opts)
  local tol = opts and opts.tol or 1e-8
  local budget = opts and opts.max_nodes or 2e5
  local cols, scales = integral.directions(S)
  local d, C = #cols, #mu
  if d == 0 then -- no variance across classes: softmax(μ)
    local acc, f = {}, {}
    for c = 1, C do acc[c] = 0 end
    add_softmax(acc, mu, cols, {}, 1, f)
    return acc, 0, {nodes = 1, method = "exact"}
  end
  local h = {}
  for j = 1, d do h[j] = RHO / scales[j] end
  -- over the budget at ρ = 0.5 but within it at ρ ≤ 1 (the estimate says how well)
  local over = (product_count(h, d) / budget) ^ (1 / d)
  if over > 1 and over <= 2 and not (opts and opts.no_stretch) then
    for j = 1, d do h[j] = h[j] * over * 1.02 end -- (the lattice rounds)
  end
  if product_count(h, d) <= budget and not (opts and opts.sparse) then
    local nodes = 0
    while true do
      local fine, coarse, used = product_rule(mu, cols, h)
      nodes = nodes + used
      local err = max_change(fine, coarse)
      local finer = {}
      for j = 1, d do finer[j] = h[j] / 2 end
      if err <= tol or product_count(finer, d) > budget then
        return fine, err, {nodes = nodes, method = "product"}
      end
      h = finer
    end
  end
  local rules = {}
  local prev, nodes = smolyak(mu, cols, scales, d + 1, rules)
  local q, err = d + 2, math.huge
  while nodes + smolyak_count(d, scales, q, rules) <= budget do
    local cur, used = smolyak(mu, cols, scales, q, rules)
    nodes = nodes + used
    err = max_change(cur, prev)
    prev = cur
    if err <= tol then break end
    q = q + 1
  end
  -- (err: the change from the level before, the last level's own error unknown)
  if err <= tol or (opts and opts.sparse) then
    return prev, err, {nodes = nodes, method = "smolyak", level = q}
  end
  -- the sparse grid has not converged (ridges across its axes, large
  -- variances): quasi-Monte Carlo on the budget, if its error is smaller
  local shifts = 8
  local qmc, se = quasi_monte_carlo(mu, cols, math.max(1, floor(budget / shifts)), shifts)
  if qmc and 3 * se < err then
    return qmc, 3 * se, {nodes = nodes + budget, method = "qmc"}
  end
  return prev, err, {nodes = nodes, method = "smolyak", level = q}
end

return integral
