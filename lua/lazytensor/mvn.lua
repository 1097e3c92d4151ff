--- Multivariate normal distributions over any covariance operator.
--
-- Written once against the function API (`cov:inv_quad_logdet`, `cov:solve`,
-- `cov:root`, `cov:logdet`, `cov:diagonal`, `lt.randn`, products and sums),
-- so a structured covariance (diagonal, Kronecker, low-rank plus diagonal,
-- kernel, ...) is used through its own fast rules; this file never asks what
-- type it has.
--
--   local mvn = require "lazytensor.mvn"
--   local d = mvn.new(mean, cov)   -- mean: 1-d tensor (or Lua array) of k; cov: k x k
--   d:log_prob(x)    -- a number for x of k; a 1-d tensor of n for an n x k x
--   d:rsample([n])   -- a sample of shape {k}, or n samples as an n x k tensor
--   d:entropy(), d:mean(), d:variance(), d:covariance()
--   d:stddev(), d:confidence_region()  -- √variance; mean ∓ 2·stddev
--   mvn.kl(p, q)     -- KL(p || q), a number
--
-- The binding exposes these as `lt.mvn` (= mvn.mvn, an alias of mvn.new) and
-- `lt.kl`, loading this file on first use; `mvn.install(lt)` sets them too.

local mvn = {}
local batch = require "lazytensor.mvn_batch"

local LOG_2PI = math.log(2 * math.pi)

-- The library is looked up on first use, so that the C module may itself
-- require this file while it loads without a circular require.
local lt_module
local function lib()
  lt_module = lt_module or require "lazytensor"
  return lt_module
end

-- A plain Lua array (not a tensor) becomes a 1-d tensor; anything else that
-- is not a tensor is a lazytensor: error naming the operation (op) and the
-- argument (what).
local function as_tensor(x, op, what)
  if type(x) == "table" and getmetatable(x) == nil then return lib().tensor(x) end
  local is_tensor = lib().is_tensor -- (a stand-in library may not have it)
  if is_tensor and not is_tensor(x) or not is_tensor and type(x) ~= "table" then
    error(string.format("lazytensor: %s: %s must be a tensor, got %s", op, what, type(x)), 0)
  end
  return x
end

local MVN = {}
MVN.__index = MVN
MVN.__name = "lazytensor.mvn"

--- A multivariate normal with the given mean (1-d tensor or Lua array of k
-- numbers) and covariance (any k x k positive definite operator); a batch
-- of normals for mean {b..., k} or cov {b..., k, k} (lazytensor.mvn_batch).
function mvn.new(mean, cov)
  mean = as_tensor(mean, "mvn", "mean")
  cov = as_tensor(cov, "mvn", "cov")
  if batch.is_batched(mean, cov) then return setmetatable(batch.new(mean, cov), MVN) end
  if mean:dim() ~= 1 then
    error(string.format("lazytensor: mvn: mean must be 1-d, got %s",
      table.concat(mean:shape(), "x")), 0)
  end
  local k = mean:numel()
  if cov:dim() ~= 2 or cov:size(1) ~= k or cov:size(2) ~= k then
    error(string.format("lazytensor: mvn: mean has %d entries but cov is %s", k,
      table.concat(cov:shape(), "x")), 0)
  end
  return setmetatable({ _mean = mean, _cov = cov, k = k }, MVN)
end

-- log det of the covariance, computed once.
function MVN:logdet()
  if not self._logdet then self._logdet = self._cov:logdet() end
  return self._logdet
end

-- A root of cov + eps·I: eps = 0 first; when the covariance is PSD only up to
-- rounding (a posterior covariance Kss − Ksx·Ky⁻¹·Kxs from CG solves, say)
-- and the root reports it not positive (semi)definite, eps grows as
-- Cholesky's jitter does: cholesky_jitter times the mean variance, ten times
-- larger each of cholesky_max_tries tries. The last error is raised if none
-- succeeds.
local function root_with_jitter(cov)
  local ok, R, info = pcall(cov.root, cov)
  if ok then return R, info, 0 end
  local err = R
  if type(err) ~= "string" or not err:find("positive", 1, true) then error(err, 0) end
  local settings = lib().settings
  local eps = settings.cholesky_jitter * math.abs(cov:diagonal():mean())
  for _ = 1, settings.cholesky_max_tries do
    local jittered = cov:add_jitter(eps)
    ok, R, info = pcall(jittered.root, jittered)
    if ok then return R, info, eps end
    eps = eps * 10
  end
  error(err, 0)
end

--- A root R of the covariance (cov ≈ R R^T), computed once, with the
-- root's info table (method, and for Lanczos iterations, residual and
-- converged; jitter: what was added to the diagonal, 0 normally).
function MVN:root()
  if not self._root then
    local R, info, jitter = root_with_jitter(self._cov)
    info = info or {method = "exact", converged = true}
    info.jitter = jitter
    self._root, self._root_info = R, info
  end
  return self._root, self._root_info
end

-- n copies of the mean as the rows of an n x k matrix: ones(n, 1) * mean^T.
function MVN:mean_rows(n)
  return lib().ones(n, 1) * self._mean:reshape(1, self.k)
end

-- The gradients of Σ log_prob over the points of x (1-d, or n x k: one per
-- row), from one inv_quad_logdet{grad = true} of the covariance with the
-- right-hand side D/√n (D = the points minus the mean, as columns): its
-- value n·(bᵀA⁻¹b + log det A) is Σ quad + n·log det. Returns the log
-- probabilities (a number, or a 1-d tensor of n) and the gradients, keyed
-- by the covariance's leaves, the mean and x.
local function log_prob_grad(self, x, opts)
  local lt = lib()
  local many = x:dim() == 2
  local n = many and x:size(1) or 1
  local d = many and (x - self:mean_rows(n)):t() or x - self._mean
  local b = d / math.sqrt(n)
  local _, ld, grads = self._cov:inv_quad_logdet(b, {grad = true,
                                                    control_variate = opts.control_variate})
  local solved = grads[b].values * (0.5 * math.sqrt(n)) -- A⁻¹d
  grads[b] = nil
  for _, named in pairs(grads) do
    for name, g in pairs(named) do named[name] = g * (-0.5 * n) end
  end
  local quads = many and lt.mul(d, solved):sum(1) or d:dot(solved)
  local mean_grad = many and solved:sum(2):reshape(self.k) or solved
  local x_grad = many and (solved * -1):t():contiguous() or solved * -1
  local function add_to(key, g)
    local entry = grads[key]
    if entry == nil then
      grads[key] = {values = g}
    else
      entry.values = entry.values and entry.values + g or g
    end
  end
  add_to(self._mean, mean_grad)
  add_to(x, x_grad)
  local constant = -0.5 * (ld + self.k * LOG_2PI)
  if many then return quads * -0.5 + constant, grads end
  return -0.5 * quads + constant, grads
end

--- log density at x: a number for x of k entries, a 1-d tensor of n numbers
-- for an n x k tensor of points (one per row). With opts.grad = true, also
-- the gradients of (the sum of) the log densities as a second result: a
-- table keyed by the covariance's leaves (as A:bilinear_derivative keys
-- them), the mean and x, each a table name → gradient ({values = ...} for
-- the mean and x); opts.control_variate is inv_quad_logdet's.
function MVN:log_prob(x, opts)
  x = as_tensor(x, "mvn:log_prob", "x")
  if opts ~= nil and type(opts) ~= "table" then
    error("lazytensor: mvn:log_prob: options must be a table, got " .. type(opts), 0)
  end
  for key in pairs(opts or {}) do
    if key ~= "grad" and key ~= "control_variate" then
      error("lazytensor: mvn:log_prob: unknown option '" .. tostring(key)
            .. "' (expected grad, control_variate)", 0)
    end
  end
  local want_grad = opts and opts.grad
  if self.batch_shape then
    if want_grad then
      error("lazytensor: mvn:log_prob: grad = true takes one distribution, not a batch", 0)
    end
    return batch.log_prob(self, x)
  end
  if (x:dim() == 1 and x:numel() == self.k) or (x:dim() == 2 and x:size(2) == self.k) then
    if want_grad then return log_prob_grad(self, x, opts) end
  end
  if x:dim() == 1 then
    if x:numel() ~= self.k then
      error(string.format("lazytensor: mvn:log_prob: x has %d entries, expected %d",
        x:numel(), self.k), 0)
    end
    local quad, logdet = self._cov:inv_quad_logdet(x - self._mean)
    return -0.5 * (quad + logdet + self.k * LOG_2PI)
  end
  if x:dim() ~= 2 or x:size(2) ~= self.k then
    error(string.format("lazytensor: mvn:log_prob: x must have %d entries or be n x %d",
      self.k, self.k), 0)
  end
  -- One solve for all points: the quadratic form of column i of D^T is the
  -- column sum of D^T .* cov^-1 D^T.
  local dt = (x - self:mean_rows(x:size(1))):t()
  local solved = self._cov:solve(dt)
  local quads = lib().mul(dt, solved):sum(1)
  return quads * -0.5 + (-0.5 * (self:logdet() + self.k * LOG_2PI))
end

--- A reparameterised sample mean + R z with z standard normal: shape {k},
-- or {n, k} for n samples (one per row).
-- A root whose info says it did not converge (a Lanczos root of too low a
-- rank for this covariance) would give samples of the wrong covariance:
-- an error, with what to change, rather than wrong samples.
function MVN:rsample(n)
  if self.batch_shape then return batch.rsample(self, n) end
  local lt = lib()
  local root, info = self:root()
  if info.converged == false then
    error(string.format("lazytensor: mvn:rsample: the covariance's %s root did not converge "
      .. "(rank %d, residual %.3g); raise lt.settings.max_root_decomposition_size",
      tostring(info.method), root:size(2), info.residual or 0 / 0), 0)
  end
  local r = root:size(2)
  if n == nil then
    return self._mean + root * lt.randn(r)
  end
  -- a count is a size: any non-negative integer (0 gives a 0 x k tensor)
  if type(n) ~= "number" or n % 1 ~= 0 or n < 0 then
    error("lazytensor: mvn:rsample: n must be a non-negative integer, got "
          .. (type(n) == "number" and tostring(n) or type(n)), 0)
  end
  return self:mean_rows(n) + lt.randn(n, r) * root:t()
end

MVN.sample = MVN.rsample
mvn.mvn = mvn.new

--- Differential entropy: (k (1 + log 2 pi) + log det cov) / 2.
function MVN:entropy()
  return 0.5 * (self.k * (1 + LOG_2PI) + self:logdet())
end

function MVN:mean() return self._mean end
function MVN:covariance() return self._cov end
--- The variances, cov's diagonal (computed once: for a lazy posterior
-- covariance it costs solves).
function MVN:variance()
  if not self._variance then self._variance = self._cov:diagonal() end
  return self._variance
end

--- The standard deviations √variance (a variance below zero by rounding is
-- taken as 0).
function MVN:stddev()
  local v = self:variance()
  return ((v:abs() + v) / 2):sqrt() -- (|v| + v)/2 = max(v, 0)
end

--- The region mean ∓ 2·stddev, about 95% per coordinate: lo, hi.
function MVN:confidence_region()
  local sd = self:stddev()
  return self._mean - sd * 2, self._mean + sd * 2
end

--- KL(p || q) = (tr(Sq^-1 Sp) + (mq - mp)^T Sq^-1 (mq - mp) - k
--               + log det Sq - log det Sp) / 2.
-- The trace is tr(R^T Sq^-1 R) for a root R of Sp: an inverse quadratic form
-- summed over the columns of R, so Sq^-1 Sp is never formed.
function mvn.kl(p, q)
  if getmetatable(p) ~= MVN or getmetatable(q) ~= MVN then
    error("lazytensor: kl: both arguments must be mvn distributions", 0)
  end
  if p.k ~= q.k then
    error(string.format("lazytensor: kl: dimensions differ (%d and %d)", p.k, q.k), 0)
  end
  if p.batch_shape or q.batch_shape then return batch.kl(p, q) end
  local quad, logdet_q = q._cov:inv_quad_logdet(q._mean - p._mean)
  local trace = q._cov:inv_quad(p:root():dense())
  return 0.5 * (trace + quad - p.k + logdet_q - p:logdet())
end

--- Set lt.mvn and lt.kl on the library table.
function mvn.install(lt)
  lt.mvn = mvn.new
  lt.kl = mvn.kl
  return lt
end

mvn.MVN = MVN
return mvn
