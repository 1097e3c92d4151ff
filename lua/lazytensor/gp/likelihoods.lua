--- Likelihoods p(y | f) for non-Gaussian GP models (gp.variational, gp.laplace).
--
--   local lik = gp.likelihoods.bernoulli{link = "probit"}
--   local ell = lik:expected_log_prob(y, m, v)  -- E_{N(f; m, v)} log p(y | f), per point
--   local mean, var = lik:predict_y(m, v)       -- the predictive distribution of y
--
-- Everything a model differentiates is written with lazytensor tensor
-- operations, so that lt.grad follows it: m and v (dense 1-d tensors of the
-- latent means and variances) and the likelihood's own hyperparameters
-- (theta, a table name → number or 0-d tensor; the model passes tensors
-- built from its log parameters) may all be followed values.
--
-- Expected log-likelihoods are closed forms where there is one (gaussian,
-- poisson) and Gauss–Hermite quadrature otherwise (bernoulli, student_t):
--   E_{N(f; m, v)} g(f) ≈ Σ_k w_k/√π · g(m + √(2v)·x_k)
-- with the physicists' nodes x_k and weights w_k (20 of them by default, as
-- GPyTorch's GaussHermiteQuadrature1D). lik:quadrature_log_prob is the
-- quadrature for every likelihood (the specs compare it with the closed forms).
--
-- Hyperparameters: gaussian noise (σ²) and student_t scale are learnt (in
-- log space) by the models unless fixed; student_t's df is a setting.
-- Labels are checked when a model is built (lik:check_labels): bernoulli
-- labels in {0, 1}, poisson counts non-negative integers, no NaN anywhere.
local lt = require "lazytensor"

local likelihoods = {}

local log, sqrt, pi, abs = math.log, math.sqrt, math.pi, math.abs
local unpack = table.unpack or unpack -- luacheck: ignore 143 (Lua 5.1)

local function fail(fmt, ...)
  error("lazytensor: gp.likelihoods: " .. string.format(fmt, ...), 0)
end

local Likelihood = {}
Likelihood.__index = Likelihood
likelihoods.Likelihood = Likelihood

------------------------------------------------------------ quadrature --

--- Gauss–Hermite nodes and weights (∫ e^{−x²} g(x) dx ≈ Σ w_k g(x_k)), by
-- Newton's method on the orthonormal Hermite recurrence (Numerical Recipes'
-- gauher), as two Lua arrays in increasing order of x.
function likelihoods.gauss_hermite(k)
  if type(k) ~= "number" or k < 1 or k % 1 ~= 0 or k > 200 then
    fail("gauss_hermite needs a whole number of nodes from 1 to 200, got %s", tostring(k))
  end
  local x, w = {}, {}
  local pim4 = pi ^ -0.25
  local z = 0
  for i = 1, math.floor((k + 1) / 2) do
    -- initial guesses for the i-th largest root
    if i == 1 then
      z = sqrt(2 * k + 1) - 1.85575 * (2 * k + 1) ^ (-1 / 6)
    elseif i == 2 then
      z = z - 1.14 * k ^ 0.426 / z
    elseif i == 3 then
      z = 1.86 * z - 0.86 * x[1]
    elseif i == 4 then
      z = 1.91 * z - 0.91 * x[2]
    else
      z = 2 * z - x[i - 2]
    end
    local pp
    for _ = 1, 100 do
      local p1, p2 = pim4, 0
      for j = 1, k do
        local p3 = p2
        p2 = p1
        p1 = z * sqrt(2 / j) * p2 - sqrt((j - 1) / j) * p3
      end
      pp = sqrt(2 * k) * p2
      local z1 = z
      z = z1 - p1 / pp
      if abs(z - z1) <= 1e-15 * math.max(1, abs(z)) then break end
    end
    x[i], w[i] = z, 2 / (pp * pp)
    x[k + 1 - i], w[k + 1 - i] = -z, w[i]
  end
  local xs, ws = {}, {}
  for i = 1, k do xs[i], ws[i] = x[k + 1 - i], w[k + 1 - i] end
  return xs, ws
end

local NODES = 20

-- Nodes and weights per count, computed once.
local rules = {}
local function rule(k)
  if not rules[k] then
    local x, w = likelihoods.gauss_hermite(k)
    rules[k] = {x = x, w = w}
  end
  return rules[k]
end

--- E_{N(f; m, v)} log p(y | f) by Gauss–Hermite quadrature (a 1-d tensor,
-- per point). opts.nodes: the number of nodes (default 20).
function Likelihood:quadrature_log_prob(y, m, v, theta, opts)
  local r = rule(opts and opts.nodes or self.nodes or NODES)
  local s = (v * 2):sqrt()
  local total
  for k = 1, #r.x do
    local term = self:log_prob(y, m + s * r.x[k], theta) * (r.w[k] / sqrt(pi))
    total = total and total + term or term
  end
  return total
end

--- E g(f) for f ~ N(m, v) by quadrature, g a function of a tensor of f's.
local function quadrature(g, m, v, k)
  local r = rule(k or NODES)
  local s = (v * 2):sqrt()
  local total
  for i = 1, #r.x do
    local term = g(m + s * r.x[i]) * (r.w[i] / sqrt(pi))
    total = total and total + term or term
  end
  return total
end

------------------------------------------------------------ helpers --

-- log Γ(x) for x > 0 (Lanczos, g = 7, 9 terms: 15 digits), in plain Lua:
-- student_t's normalising constant, a function of its (fixed) df only.
local LANCZOS = {0.99999999999980993, 676.5203681218851, -1259.1392167224028,
                 771.32342877765313, -176.61502916214059, 12.507343278686905,
                 -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7}
local function lgamma(x)
  if x < 0.5 then return log(pi / abs(math.sin(pi * x))) - lgamma(1 - x) end
  x = x - 1
  local a = LANCZOS[1]
  local t = x + 7.5
  for i = 1, 8 do a = a + LANCZOS[i + 1] / (x + i) end
  return 0.5 * log(2 * pi) + (x + 0.5) * log(t) - t + log(a)
end
likelihoods.lgamma = lgamma

-- log(1 + e^x), stably for any x: max(x, 0) + log(1 + e^−|x|), with
-- max(x, 0) = x·[x > 0] and |x| = x·(2[x > 0] − 1) through a constant mask
-- (x:abs() would do, but lt.grad's derivative of |x| at 0 is 0/0).
local function softplus(x)
  local mask = {}
  for i, xi in ipairs(x:totable()) do mask[i] = xi > 0 and 1 or 0 end
  local pos = lt.tensor(mask)
  local ax = x:cmul(pos * 2 - 1)
  return x:cmul(pos) + ((-ax):exp() + 1):log()
end

-- log of a number or of a 0-d tensor (a followed hyperparameter).
local function lg(x)
  if type(x) == "number" then return log(x) end
  return x:log()
end

local function sigmoid(x)
  return (-softplus(-x)):exp()
end

-- y as a dense 1-d tensor with finite entries (what: for messages).
local function label_tensor(y, what)
  if not lt.is_tensor(y) then
    if type(y) ~= "table" or #y == 0 then
      fail("%s: y must be a non-empty tensor or table", what)
    end
    for i, v in ipairs(y) do
      if type(v) ~= "number" then fail("%s: y[%d] is a %s, expected a number", what, i, type(v)) end
    end
    y = lt.tensor(y)
  end
  if y:dim() ~= 1 then fail("%s: y must be a 1-d vector, got %d dimensions", what, y:dim()) end
  for i, v in ipairs(y:totable()) do
    if v ~= v then fail("%s: y[%d] is NaN", what, i) end
    if v == math.huge or v == -math.huge then fail("%s: y[%d] is not finite", what, i) end
  end
  return y
end

local function check_positive(what, v)
  if type(v) ~= "number" or not (v > 0) or v == math.huge then -- luacheck: ignore 581 (NaN)
    fail("%s must be a positive finite number, got %s", what, tostring(v))
  end
  return v
end

local function check_keys(what, spec, keys)
  if spec == nil then return {} end
  if type(spec) ~= "table" then fail("%s expects a table of options, got %s", what, type(spec)) end
  local set = {}
  for _, k in ipairs(keys) do set[k] = true end
  for k in pairs(spec) do
    if not set[k] and (k == "features" or k == "mixing" or k == "mixing_weights") then
      fail("%s has one latent function: mixing weights ('%s') are softmax's "
           .. "(gp.likelihoods.softmax{classes = C, features = F})", what, k)
    end
    if not set[k] then
      fail("%s: unknown key '%s' (expected one of %s)", what, tostring(k), table.concat(keys, ", "))
    end
  end
  return spec
end

local function new(kind, params, fixed, extra)
  local self = setmetatable({kind = kind, params = params or {}, names = {}, fixed = {}},
                            Likelihood)
  for name in pairs(self.params) do self.names[#self.names + 1] = name end
  table.sort(self.names)
  for name, on in pairs(fixed or {}) do
    if self.params[name] == nil then
      fail("%s has no hyperparameter '%s' (fixed)", kind, tostring(name))
    end
    self.fixed[name] = on and true or nil
  end
  for k, v in pairs(extra or {}) do self[k] = v end
  return self
end

--- The likelihood's hyperparameters as numbers: a table name → value.
function Likelihood:theta()
  local t = {}
  for _, name in ipairs(self.names) do t[name] = self.params[name] end
  return t
end

--- The free hyperparameters' names, in a fixed order.
function Likelihood:free_names()
  local out = {}
  for _, name in ipairs(self.names) do
    if not self.fixed[name] then out[#out + 1] = name end
  end
  return out
end

-- theta given, or the likelihood's own values.
local function th(self, theta)
  return theta or self.params
end

--- E_{N(f; m, v)} log p(y | f) per point (a 1-d tensor): the closed form
-- where the likelihood has one, quadrature otherwise (or with
-- opts.quadrature = true).
function Likelihood:expected_log_prob(y, m, v, theta, opts)
  theta = th(self, theta)
  if self.closed_ell and not (opts and opts.quadrature) then
    return self.closed_ell(y, m, v, theta)
  end
  return self:quadrature_log_prob(y, m, v, theta, opts)
end

--- log p(y | f) per point (a 1-d tensor).
function Likelihood:log_prob(y, f, theta)
  return self.pointwise(y, f, th(self, theta))
end

--- The predictive distribution of y at latent N(m, v): mean and variance
-- (1-d tensors).
function Likelihood:predict_y(m, v, theta)
  return self.predictive(m, v, th(self, theta))
end

--- The labels checked (a dense 1-d tensor): the likelihood's own rules
-- and no NaN.
function Likelihood:check_labels(y, what)
  what = what or self.kind
  y = label_tensor(y, what)
  if self.label_rule then self.label_rule(y, what) end
  return y
end

--- softmax with mixing weights: W (C×F, a copy); nil for every other
-- likelihood.
function Likelihood:mixing_weights()
  return self.weights and self.weights:clone()
end

--- Sets softmax's mixing weights W (C×F, a table of rows or a dense
-- tensor of finite numbers; checked whole first).
function Likelihood:set_mixing_weights(W)
  if not self.mixing then fail("%s has no mixing weights", self.kind) end
  self.weights = likelihoods._weights_tensor(W, self.classes, self.features, "mixing_weights")
end

-- d/df and d²/df² of log p(y | f) per point, for Newton's method in
-- gp.laplace (R&W Table 3.1): the inner optimisation, not a model gradient.
function Likelihood:derivatives(y, f, theta)
  if not self.newton then
    fail("%s has no Newton derivatives (gp.laplace needs bernoulli or poisson)", self.kind)
  end
  return self.newton(y, f, th(self, theta))
end

------------------------------------------------------------ gaussian --

--- gaussian{noise = σ² (default 1), fixed = {noise = true}}.
function likelihoods.gaussian(spec)
  spec = check_keys("gaussian", spec, {"noise", "fixed"})
  local noise = check_positive("gaussian noise", spec.noise or 1)
  local self = new("gaussian", {noise = noise}, spec.fixed)
  self.pointwise = function(y, f, t)
    local r = y - f
    return r:cmul(r) * (-0.5 / t.noise) - 0.5 * lg(t.noise * (2 * pi))
  end
  -- E log N(y | f, σ²) = −½ log 2πσ² − ((y − m)² + v)/(2σ²)
  self.closed_ell = function(y, m, v, t)
    local r = y - m
    return (r:cmul(r) + v) * (-0.5 / t.noise) - 0.5 * lg(t.noise * (2 * pi))
  end
  self.predictive = function(m, v, t) return m:clone(), v + t.noise end
  return self
end

------------------------------------------------------------ bernoulli --

local function check_binary(y, what)
  for i, v in ipairs(y:totable()) do
    if v ~= 0 and v ~= 1 then
      fail("%s: labels must be 0 or 1, y[%d] = %s", what, i, tostring(v))
    end
  end
end

--- bernoulli{link = "probit" (default) | "logit"}: labels y ∈ {0, 1},
-- p(y = 1 | f) = Φ(f) or σ(f). With s = 2y − 1, log p = log Φ(s·f) or
-- −log(1 + e^{−s·f}).
function likelihoods.bernoulli(spec)
  spec = check_keys("bernoulli", spec, {"link", "nodes"})
  local link = spec.link or "probit"
  if link ~= "probit" and link ~= "logit" then
    fail("bernoulli link must be 'probit' or 'logit', got %s", tostring(link))
  end
  local self = new("bernoulli", {}, nil,
                   {link = link, nodes = spec.nodes, label_rule = check_binary})
  if link == "probit" then
    self.pointwise = function(y, f) return lt.normal_log_cdf(f:cmul(y * 2 - 1)) end
    -- P(y = 1) = E Φ(f) = Φ(m/√(1 + v)), exactly
    self.predictive = function(m, v)
      local p = lt.normal_cdf(m:cdiv((v + 1):sqrt()))
      return p, p:cmul(-p + 1)
    end
    -- r = φ(f)/Φ(s f): d1 = s·r, d2 = −r² − s·f·r
    self.newton = function(y, f)
      local s = y * 2 - 1
      local sf = f:cmul(s)
      local r = (lt.normal_log_pdf(f) - lt.normal_log_cdf(sf)):exp()
      return s:cmul(r), -(r:cmul(r) + sf:cmul(r))
    end
  else
    self.pointwise = function(y, f) return -softplus(-f:cmul(y * 2 - 1)) end
    self.predictive = function(m, v)
      local p = quadrature(sigmoid, m, v, self.nodes)
      return p, p:cmul(-p + 1)
    end
    -- π = σ(f): d1 = y − π, d2 = −π(1 − π)
    self.newton = function(y, f)
      local p = sigmoid(f)
      return y - p, -(p:cmul(-p + 1))
    end
  end
  return self
end

------------------------------------------------------------ poisson --

local function check_counts(y, what)
  for i, v in ipairs(y:totable()) do
    if v < 0 or v % 1 ~= 0 then
      fail("%s: counts must be non-negative integers, y[%d] = %s", what, i, tostring(v))
    end
  end
end

-- log y! per point (a constant tensor).
local function log_factorial(y)
  local out = {}
  for i, v in ipairs(y:totable()) do out[i] = lgamma(v + 1) end
  return lt.tensor(out)
end

--- poisson{}: counts y, rate e^f: log p = y·f − e^f − log y!.
function likelihoods.poisson(spec)
  spec = check_keys("poisson", spec, {"nodes"})
  local self = new("poisson", {}, nil, {nodes = spec.nodes, label_rule = check_counts})
  self.pointwise = function(y, f) return y:cmul(f) - f:exp() - log_factorial(y) end
  -- d1 = y − e^f, d2 = −e^f
  self.newton = function(y, f)
    local rate = f:exp()
    return y - rate, -rate
  end
  -- E[y f − e^f] = y·m − e^{m + v/2}
  self.closed_ell = function(y, m, v) return y:cmul(m) - (m + v * 0.5):exp() - log_factorial(y) end
  -- E y = E e^f = e^{m + v/2}; Var y = E e^f + Var e^f = E e^f + (e^v − 1)·e^{2m + v}
  self.predictive = function(m, v)
    local mean = (m + v * 0.5):exp()
    return mean, mean + (v:exp() - 1):cmul(mean:cmul(mean))
  end
  return self
end

------------------------------------------------------------ student_t --

--- student_t{df = ν (default 4, fixed), scale = σ (default 1, learnt unless
-- fixed = {scale = true})}: log p = log Γ((ν+1)/2) − log Γ(ν/2) − ½ log(νπσ²)
-- − (ν+1)/2 · log(1 + (y − f)²/(νσ²)).
function likelihoods.student_t(spec)
  spec = check_keys("student_t", spec, {"df", "scale", "fixed", "nodes"})
  local df = check_positive("student_t df", spec.df or 4)
  local scale = check_positive("student_t scale", spec.scale or 1)
  local self = new("student_t", {scale = scale}, spec.fixed, {df = df, nodes = spec.nodes})
  local const = lgamma((df + 1) / 2) - lgamma(df / 2) - 0.5 * log(df * pi)
  self.pointwise = function(y, f, t)
    local s2 = t.scale * t.scale
    local r = y - f
    return ((r:cmul(r) * (1 / (df * s2)) + 1):log()) * (-(df + 1) / 2)
           - 0.5 * lg(s2) + const
  end
  -- mean m (ν > 1), variance v + σ²ν/(ν − 2) (ν > 2; infinite otherwise)
  self.predictive = function(m, v, t)
    local extra = df > 2 and t.scale * t.scale * (df / (df - 2)) or math.huge
    return m:clone(), v + extra
  end
  return self
end

------------------------------------------------------------ softmax --

-- Labels must be whole class numbers 1..C (Lua's convention).
local function class_rule(C)
  return function(y, what)
    for i, v in ipairs(y:totable()) do
      if v % 1 ~= 0 or v < 1 or v > C then
        fail("%s: labels must be classes 1..%d (whole numbers), y[%d] = %s", what, C, i,
             tostring(v))
      end
    end
  end
end

-- y (labels 1..C) as a constant n×C one-hot matrix.
local function one_hot(y, C)
  local rows = {}
  for i, v in ipairs(y:totable()) do
    local r = {}
    for c = 1, C do r[c] = c == v and 1 or 0 end
    rows[i] = r
  end
  return lt.tensor(rows)
end

-- S standard normal C-vectors, deterministic given the seed on every Lua:
-- S/2 Box–Muller draws from Park–Miller's generator (16807·s mod 2³¹ − 1,
-- exact in doubles) and their negatives (antithetic pairs: the estimate of
-- E lse(f) is exact for the part of lse that is odd about the mean).
local function base_samples(S, C, seed)
  local s = seed % 2147483646 + 1
  local function uniform()
    s = (16807 * s) % 2147483647
    return s / 2147483647
  end
  local half = {}
  for k = 1, S / 2 do
    local e = {}
    for c = 1, C do
      e[c] = sqrt(-2 * log(uniform())) * math.cos(2 * pi * uniform())
    end
    half[k] = e
  end
  local out = {}
  for k = 1, S / 2 do
    local neg = {}
    for c = 1, C do neg[c] = -half[k][c] end
    out[2 * k - 1], out[2 * k] = half[k], neg
  end
  return out
end

-- Constant matrices of the vectorised Monte Carlo: R = [I_C … I_C]
-- (C × SC: repeats the classes once per sample) and E, the base samples
-- laid out as one 1 × SC row.
local function mc_layout(base, C)
  local S = #base
  local R, E = lt.zeros(C, S * C), lt.zeros(1, S * C)
  for k = 1, S do
    for c = 1, C do
      local j = (k - 1) * C + c
      R:set(c, j, 1)
      E:set(1, j, base[k][c])
    end
  end
  return {R = R, E = E, S = S, C = C}
end

-- The latent samples as an nS × C matrix (row (i − 1)S + k: point i's
-- sample k) and, per row, its largest class value (a constant nS × 1
-- shift: log Σ e^f = c + log Σ e^{f − c} for any constant c).
local function latent_samples(lay, M, V)
  local n = M:size(1)
  local F = (M * lay.R + (V:sqrt() * lay.R):cmul(lay.E)):reshape(n * lay.S, lay.C)
  local top = {}
  for i, row in ipairs(F:totable()) do top[i] = math.max(unpack(row)) end
  return F, lt.tensor(top):reshape(n * lay.S, 1)
end

-- M, V as n×C matrices (a 1×C row for one point given as a vector).
local function check_latents(M, V, C)
  if not lt.is_tensor(M) or not lt.is_tensor(V) or M:dim() ~= 2 or V:dim() ~= 2
     or M:size(2) ~= C or V:size(2) ~= C or M:size(1) ~= V:size(1) then
    fail("softmax: latent means and variances must be n×%d matrices (one column per class)", C)
  end
end

-- GPyTorch's default initial mixing weights: randn(C, F)/F. Here the
-- normals are deterministic: Box–Muller draws (cosine branch) from
-- Park–Miller's generator seeded by seed + 7919 (a stream apart from the
-- base samples'), row by row, each divided by F.
local function initial_weights(C, F, seed)
  local s = (seed + 7919) % 2147483646 + 1
  local function uniform()
    s = (16807 * s) % 2147483647
    return s / 2147483647
  end
  local rows = {}
  for c = 1, C do
    rows[c] = {}
    for j = 1, F do
      rows[c][j] = sqrt(-2 * log(uniform())) * math.cos(2 * pi * uniform()) / F
    end
  end
  return lt.tensor(rows)
end

-- W given (a C×F table or dense tensor of finite numbers) as a new tensor.
local function weights_tensor(W, C, F, what)
  local ok, t = pcall(function() return lt.is_tensor(W) and W or lt.tensor(W) end)
  if not ok or lt.is_lazy(t) then
    fail("%s must be a %d×%d matrix (a table of rows or a dense tensor)", what, C, F)
  end
  if t:dim() ~= 2 or t:size(1) ~= C or t:size(2) ~= F then
    local shape = {}
    for i = 1, t:dim() do shape[i] = t:size(i) end
    fail("%s must be %d×%d (classes × features), got %s", what, C, F,
         #shape == 0 and "a scalar" or table.concat(shape, "×"))
  end
  for i, row in ipairs(t:totable()) do
    for j, v in ipairs(row) do
      if v ~= v or v == math.huge or v == -math.huge then
        fail("%s[%d][%d] is not a finite number", what, i, j)
      end
    end
  end
  return t:clone():contiguous()
end
likelihoods._weights_tensor = weights_tensor

-- The features and mixing settings of spec: F (the latent count) and
-- whether W is learnt; without mixing F = C.
local function mixing_settings(spec, C)
  local F, mixing = spec.features, spec.mixing
  if mixing ~= nil and type(mixing) ~= "boolean" then
    fail("softmax mixing must be true or false, got %s", tostring(mixing))
  end
  if F ~= nil and (type(F) ~= "number" or F % 1 ~= 0 or F < 1) then
    fail("softmax features must be a positive whole number, got %s", tostring(F))
  end
  if mixing == nil then mixing = F ~= nil end
  if not mixing then
    if F ~= nil and F ~= C then
      fail("softmax without mixing weights has one latent per class: features = %d must be "
           .. "classes = %d (or mixing = true)", F, C)
    end
    if spec.mixing_weights ~= nil then fail("softmax: mixing_weights given with mixing = false") end
    return C, false
  end
  if F == nil then fail("softmax mixing weights need features = F (the number of latent GPs)") end
  return F, true
end

-- Per row of A (a tensor), its largest entry as a constant column: the
-- shift of a stable log Σ e^a.
local function row_max(A)
  local top = {}
  for i, row in ipairs(A:totable()) do top[i] = {math.max(unpack(row))} end
  return lt.tensor(top)
end

-- The C × SC matrix [I_C … I_C]: sums a sample-major row of SC class
-- values over the S samples, class by class.
local function class_repeat(S, C)
  local R = lt.zeros(C, S * C)
  for k = 1, S do
    for c = 1, C do R:set(c, (k - 1) * C + c, 1) end
  end
  return R
end

-- The softmax likelihood with mixing weights (GPyTorch's
-- SoftmaxLikelihood(num_features = F, num_classes = C)): F independent
-- latents g (n×F means and variances) and class logits f = W·g, W (C×F)
-- a hyperparameter the models learn ("mixing_weights", real-valued; a
-- followed C×F tensor theta.mixing_weights inside lt.grad, self.weights
-- otherwise). E log p(y | g) = (M Wᵀ)_y − E log Σ_c e^{(W g)_c}:
--   C = 2: f₁ − f₂ = dᵀg with d = w₁ − w₂, so N(M d, V (d ⊙ d)) and the
--          1-d Gauss–Hermite rule of the one-latent-per-class case;
--   C ≥ 3: the Monte Carlo average over the S base samples ε_k ∈ R^F,
--          g = m + √v ⊙ ε_k, f = W g (the same rows of samples as without
--          mixing, then one product by Wᵀ).
-- With F = C and W = I every product by W is exact, so the numbers are
-- those of softmax{classes = C} bit for bit.
local function mixed_softmax(self, lay)
  local C, F, S = self.classes, self.features, self.samples
  -- with F = 1 a model's latents are 1-d (one latent function): as n×1
  local function check(M, V)
    if F == 1 and lt.is_tensor(M) and lt.is_tensor(V) and M:dim() == 1 and V:dim() == 1 then
      return M:reshape(M:size(1), 1), V:reshape(V:size(1), 1)
    end
    if not lt.is_tensor(M) or not lt.is_tensor(V) or M:dim() ~= 2 or V:dim() ~= 2
       or M:size(2) ~= F or V:size(2) ~= F or M:size(1) ~= V:size(1) then
      fail("softmax: latent means and variances must be n×%d matrices (one column per "
           .. "feature g_1..g_%d: the mixing weights map them to %d classes)", F, F, C)
    end
    return M, V
  end
  local function weights_of(t) return t and t.mixing_weights or self.weights end
  -- C = 2: s = +1 for class 1, −1 for class 2, and q(dᵀg)
  local function difference(y, M, V, W)
    local d = W:narrow(1, 1, 1) - W:narrow(1, 2, 1) -- 1×F
    local n = M:size(1)
    return -(y * 2 - 3), (M * d:t()):reshape(n), (V * d:cmul(d):t()):reshape(n)
  end
  -- the mixed samples f = W g as an nS × C matrix (row (i − 1)S + k)
  local function mixed_samples(M, V, W)
    local n = M:size(1)
    local G = (M * lay.R + (V:sqrt() * lay.R):cmul(lay.E)):reshape(n * S, F)
    return G * W:t()
  end
  self.pointwise = function(y, G, t)
    if F == 1 and G:dim() == 1 then G = G:reshape(G:size(1), 1) end
    local Fm = G * weights_of(t):t()
    local c = row_max(Fm)
    local lse = (Fm - c):exp():sum(2):log() + c:reshape(Fm:size(1))
    return Fm:cmul(one_hot(y, C)):sum(2) - lse
  end
  local function ell(y, M, V, t)
    M, V = check(M, V)
    local W = weights_of(t)
    if C == 2 then
      local s, g_mean, g_var = difference(y, M, V, W)
      return quadrature(function(g) return -softplus(-g:cmul(s)) end, g_mean, g_var, self.nodes)
    end
    local n = M:size(1)
    local Fm = mixed_samples(M, V, W)
    local shift = row_max(Fm)
    local lse = ((Fm - shift):exp():sum(2):log() + shift:reshape(n * S)):reshape(n, S)
    return (M * W:t()):cmul(one_hot(y, C)):sum(2) - lse:sum(2) * (1 / S)
  end
  self.closed_ell = ell
  self.quadrature_log_prob = function(_, y, M, V, t)
    if C > 2 then
      fail("softmax: no quadrature for %d classes: the expected log-likelihood is a Monte "
        .. "Carlo average over fixed base samples (expected_log_prob without quadrature)", C)
    end
    return ell(y, M, V, t)
  end
  local sum_samples = C > 2 and class_repeat(S, C):t() or nil
  self.predictive = function(M, V, t)
    M, V = check(M, V)
    local W = weights_of(t)
    local n = M:size(1)
    local P
    if C == 2 then
      local _, g_mean, g_var = difference(lt.ones(n), M, V, W)
      local p1 = quadrature(sigmoid, g_mean, g_var, self.nodes):reshape(n, 1)
      P = lt.ones(1, 2):cmul(p1) + lt.tensor{{0, 1}} - lt.tensor{{0, 2}}:cmul(p1)
    else
      local Fm = mixed_samples(M, V, W)
      local Ef = (Fm - row_max(Fm)):exp()
      local softmax = Ef:cdiv(Ef:sum(2):reshape(n * S, 1)) -- nS × C
      P = softmax:reshape(n, S * C) * sum_samples * (1 / S)
    end
    return P, P:cmul(-P + 1)
  end
  return self
end

--- softmax{classes = C (≥ 2), samples = S (even, default 64), seed (1),
-- nodes}: multiclass classification with one latent function per class
-- (GPyTorch's SoftmaxLikelihood without mixing weights); labels y ∈ 1..C;
-- p(y = c | f) = e^{f_c} / Σ_k e^{f_k}. Latent means and variances are
-- n×C matrices (independent latents). E log p(y | f) = m_y − E log Σ_k e^{f_k}:
-- for C = 2 it is E log σ(s·(f₁ − f₂)) (s = ±1 for class 1 or 2), f₁ − f₂ ~
-- N(m₁ − m₂, v₁ + v₂), by Gauss–Hermite quadrature as bernoulli's logit; for
-- C ≥ 3, E log Σ e^f is a Monte Carlo average over S fixed base samples
-- ε_k (f = m + √v ⊙ ε_k, the same ε_k for every point; antithetic pairs),
-- deterministic, differentiable through lt.grad in m and v. predict_y:
-- the class probabilities E softmax(f) (n×C, rows summing to 1) and their
-- variances p(1 − p).
--
-- With features = F (mixing = true, implied): GPyTorch's default
-- SoftmaxLikelihood(num_features = F, num_classes = C), F latents g mixed
-- into the logits f = W g by learnt weights W (C×F, "mixing_weights":
-- mixing_weights = W to start from, otherwise GPyTorch's N(0, 1)/F draws
-- from a fixed generator; fixed = {mixing_weights = true} keeps it); latent
-- means and variances are then n×F and the base samples F-vectors
-- (mixed_softmax above). mixing = false (or no features) is the case
-- above, numbers unchanged.
function likelihoods.softmax(spec)
  spec = check_keys("softmax", spec, {"classes", "samples", "seed", "nodes", "features", "mixing",
                                       "mixing_weights", "fixed"})
  local C = spec.classes
  if type(C) ~= "number" or C % 1 ~= 0 or C < 2 then
    fail("softmax needs classes = a whole number ≥ 2, got %s", tostring(C))
  end
  local nf, mixing = mixing_settings(spec, C)
  local S = spec.samples or 64
  if type(S) ~= "number" or S % 2 ~= 0 or S < 2 then
    fail("softmax samples must be an even whole number ≥ 2, got %s", tostring(S))
  end
  local seed = spec.seed or 1
  if type(seed) ~= "number" or seed % 1 ~= 0 or seed < 0 then
    fail("softmax seed must be a non-negative whole number, got %s", tostring(seed))
  end
  local fixed = check_keys("softmax fixed", spec.fixed, {"mixing_weights"})
  if fixed.mixing_weights ~= nil and not mixing then
    fail("softmax: fixed.mixing_weights needs mixing weights (features = F)")
  end
  local weights
  if mixing then
    weights = spec.mixing_weights ~= nil
              and weights_tensor(spec.mixing_weights, C, nf, "softmax mixing_weights")
              or initial_weights(C, nf, seed)
  end
  local self = new("softmax", {}, nil, {latents = nf, classes = C, samples = S, seed = seed,
                                         nodes = spec.nodes, label_rule = class_rule(C)})
  local base = base_samples(S, nf, seed)
  local lay = mc_layout(base, nf)
  --- The base samples ε_k (a Lua array of S arrays of F numbers, a copy;
  -- F = C without mixing weights).
  function self.base_samples()
    local out = {}
    for k, e in ipairs(base) do out[k] = {unpack(e)} end
    return out
  end
  if mixing then
    self.mixing, self.features, self.weights = true, nf, weights
    self.fixed.mixing_weights = fixed.mixing_weights and true or nil
    return mixed_softmax(self, lay)
  end
  -- log softmax(F)_y per row of F (n×C)
  self.pointwise = function(y, F)
    local shift = {}
    for i, row in ipairs(F:totable()) do shift[i] = {math.max(unpack(row))} end
    local c = lt.tensor(shift)
    local lse = (F - c):exp():sum(2):log() + c:reshape(F:size(1))
    return F:cmul(one_hot(y, C)):sum(2) - lse
  end
  -- C = 2: g = f₁ − f₂ and s = +1 for class 1, −1 for class 2
  local function difference(y, M, V)
    local s = -(y * 2 - 3)
    local g_mean = (M:narrow(2, 1, 1) - M:narrow(2, 2, 1)):reshape(M:size(1))
    local g_var = (V:narrow(2, 1, 1) + V:narrow(2, 2, 1)):reshape(M:size(1))
    return s, g_mean, g_var
  end
  local function ell(y, M, V)
    check_latents(M, V, C)
    if C == 2 then
      local s, g_mean, g_var = difference(y, M, V)
      return quadrature(function(g) return -softplus(-g:cmul(s)) end, g_mean, g_var, self.nodes)
    end
    local n = M:size(1)
    local F, shift = latent_samples(lay, M, V)
    local lse = ((F - shift):exp():sum(2):log() + shift:reshape(n * S)):reshape(n, S)
    return M:cmul(one_hot(y, C)):sum(2) - lse:sum(2) * (1 / S)
  end
  self.closed_ell = ell
  -- C = 2: the rule is a quadrature; C ≥ 3 has none (a C-dimensional
  -- integral), and a Monte Carlo average given for one would mislead.
  self.quadrature_log_prob = function(_, y, M, V)
    if C > 2 then
      fail("softmax: no quadrature for %d classes: the expected log-likelihood is a Monte "
        .. "Carlo average over fixed base samples (expected_log_prob without quadrature)", C)
    end
    return ell(y, M, V)
  end
  self.predictive = function(M, V)
    check_latents(M, V, C)
    local P
    if C == 2 then
      local _, g_mean, g_var = difference(lt.ones(M:size(1)), M, V)
      local p1 = quadrature(sigmoid, g_mean, g_var, self.nodes):reshape(M:size(1), 1)
      P = lt.ones(1, 2):cmul(p1) + lt.tensor{{0, 1}} - lt.tensor{{0, 2}}:cmul(p1)
    else
      local n = M:size(1)
      local F, shift = latent_samples(lay, M, V)
      local Ef = (F - shift):exp()
      local softmax = Ef:cdiv(Ef:sum(2):reshape(n * S, 1)) -- nS × C
      P = softmax:reshape(n, S * C) * lay.R:t() * (1 / S)
    end
    return P, P:cmul(-P + 1)
  end
  return self
end

return likelihoods
