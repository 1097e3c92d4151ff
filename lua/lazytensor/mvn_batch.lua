--- Batches of multivariate normals: `lt.mvn(mean, cov)` with mean `{b..., k}`
-- and cov `{b..., k, k}` (either may have fewer batch dimensions: they
-- broadcast as numpy's do). mvn.lua hands batched distributions here. The
-- methods are the unbatched ones' formulas on the covariance's operations,
-- which give per-member results for batched operands: `log_prob` is one
-- batched `inv_quad_logdet`, whatever the covariance's type.
--
--   d:log_prob(x)   -- x {..., k}, broadcast against the batch: a tensor
--   d:rsample([n])  -- {batch..., k}, or {n, batch..., k}
--   mvn.kl(p, q)    -- a tensor of the batch shape
-- (entropy, variance, stddev and confidence_region need nothing of their own.)

local batch = {}

local LOG_2PI = math.log(2 * math.pi)
local unpack = table.unpack or unpack -- luacheck: ignore 143

local lt_module
local function lib()
  lt_module = lt_module or require "lazytensor"
  return lt_module
end

local function shape_text(shape) return "{" .. table.concat(shape, ", ") .. "}" end

local function leading(t, drop)
  local s = t:shape()
  for _ = 1, drop do s[#s] = nil end
  return s
end

-- numpy's broadcast of two batch shapes, or an error naming both.
local function broadcast(op, a, b)
  local out, na, nb = {}, #a, #b
  local n = math.max(na, nb)
  for d = 1, n do
    local sa, sb = a[d - (n - na)] or 1, b[d - (n - nb)] or 1
    if sa ~= sb and sa ~= 1 and sb ~= 1 then
      error(("lazytensor: %s: batch shapes %s and %s do not broadcast"):format(op,
        shape_text(a), shape_text(b)), 0)
    end
    out[d] = sa == 1 and sb or sa
  end
  return out
end

--- Whether mean and cov make a batch of normals.
function batch.is_batched(mean, cov) return mean:dim() > 1 or cov:dim() > 2 end

--- The fields of a batched distribution (mvn.new sets the metatable).
function batch.new(mean, cov)
  local k = mean:size(mean:dim())
  if cov:dim() < 2 or cov:size(cov:dim()) ~= k or cov:size(cov:dim() - 1) ~= k then
    error(("lazytensor: mvn: mean has %d entries per member but cov is %s"):format(k,
      table.concat(cov:shape(), "x")), 0)
  end
  local shape = broadcast("mvn", leading(mean, 1), cov:batch_shape())
  return {_mean = mean, _cov = cov, k = k, batch_shape = shape}
end

-- Points {..., k} as k×1 matrices {..., k, 1}: every batch dimension of x
-- then broadcasts against the covariance's (a {..., k} right-hand side the
-- shape of the covariance's rows would be read as vectors, any other as
-- matrices).
local function as_columns(d)
  local shape = d:shape()
  shape[#shape + 1] = 1
  return d:contiguous():reshape(unpack(shape))
end

--- log densities of x ({..., k}, broadcast against the batch): a tensor.
function batch.log_prob(self, x)
  if x:dim() < 1 or x:size(x:dim()) ~= self.k then
    error(("lazytensor: mvn:log_prob: x must end in %d entries, got %s"):format(self.k,
      table.concat(x:shape(), "x")), 0)
  end
  broadcast("mvn:log_prob", self.batch_shape, leading(x, 1))
  local quad, logdet = self._cov:inv_quad_logdet(as_columns(x - self._mean))
  return (quad + logdet + self.k * LOG_2PI) * -0.5
end

--- mean + R z per member (R the covariance's root, z standard normal):
-- {batch..., k}, or n samples {n, batch..., k}.
function batch.rsample(self, n)
  local lt = lib()
  local R, info = self:root()
  if info.converged == false then
    error("lazytensor: mvn:rsample: a member's root did not converge; raise "
          .. "lt.settings.max_root_decomposition_size", 0)
  end
  if n ~= nil and (type(n) ~= "number" or n % 1 ~= 0 or n < 1) then
    error("lazytensor: mvn:rsample: n must be a positive integer, got "
          .. (type(n) == "number" and tostring(n) or type(n)), 0)
  end
  local r = R:size(R:dim())
  local zshape = {unpack(self.batch_shape)}
  if n then table.insert(zshape, 1, n) end
  local out = {unpack(zshape)}
  out[#out + 1] = self.k
  zshape[#zshape + 1] = r
  zshape[#zshape + 1] = 1
  return (R * lt.randn(unpack(zshape))):reshape(unpack(out)) + self._mean
end

--- KL(p || q) per member, as the unbatched formula.
function batch.kl(p, q)
  local quad, logdet_q = q._cov:inv_quad_logdet(as_columns(q._mean - p._mean))
  local trace = q._cov:inv_quad(p:root():dense())
  return (trace + quad - p.k + logdet_q - p:logdet()) * 0.5
end

return batch
