-- lt.mvn with a batched mean and covariance (API.md "Batches"): every
-- result against the members' own distributions, made one at a time.
local lt = require "lazytensor"
local bc = require "support.batch_conformance"

local close = bc.close
local LOG_2PI = math.log(2 * math.pi)

describe("batched mvn", function()
  local b, k = 3, 5
  local X, V, mean, cov
  before_each(function()
    lt.manual_seed(11)
    X = lt.randn(b, k, 2)
    V = lt.rand(b, k) + 0.1
    mean = lt.randn(b, k)
    -- a batch of kernel + diagonal covariances
    cov = lt.kernel(X, {kind = "rbf", lengthscale = 0.8}) + lt.diag(V)
  end)
  local function member(i)
    return lt.mvn(mean[i], lt.kernel(X[i], {kind = "rbf", lengthscale = 0.8}) + lt.diag(V[i]))
  end

  it("log_prob is a tensor of the batch shape, each the member's", function()
    local d = lt.mvn(mean, cov)
    local x = lt.randn(b, k)
    local lp = d:log_prob(x)
    assert.same({b}, lp:shape())
    for i = 1, b do close(lp[i], member(i):log_prob(x[i]), 1e-10, "member " .. i) end
    -- by hand for member 2: -(quad + logdet + k log 2π)/2 from the dense covariance
    local C, r = member(2):covariance():dense(), x[2] - mean[2]
    local want = -0.5 * (r:dot(C:solve(r)) + C:logdet() + k * LOG_2PI)
    close(lp[2], want, 1e-10, "member 2 by hand")
  end)

  it("broadcasts x against the batch", function()
    local d = lt.mvn(mean, cov)
    local one = lt.randn(k) -- one point for every member
    local lp = d:log_prob(one)
    for i = 1, b do close(lp[i], member(i):log_prob(one), 1e-10, "shared x, member " .. i) end
    local many = lt.randn(4, b, k) -- 4 points per member
    local lps = d:log_prob(many)
    assert.same({4, b}, lps:shape())
    for j = 1, 4 do
      for i = 1, b do
        close(lps[j][i], member(i):log_prob(many[j][i]), 1e-10, ("point %d, member %d"):format(j, i))
      end
    end
  end)

  it("takes an unbatched mean beside a batched covariance", function()
    local m = lt.randn(k)
    local d = lt.mvn(m, cov)
    local x = lt.randn(b, k)
    local lp = d:log_prob(x)
    for i = 1, b do
      local di = lt.mvn(m, lt.kernel(X[i], {kind = "rbf", lengthscale = 0.8}) + lt.diag(V[i]))
      close(lp[i], di:log_prob(x[i]), 1e-10, "member " .. i)
    end
  end)

  it("entropy, variance and kl are per member", function()
    local d = lt.mvn(mean, cov)
    local e = d:entropy()
    for i = 1, b do close(e[i], member(i):entropy(), 1e-10, "entropy " .. i) end
    close(d:variance()[2], member(2):variance(), 1e-12, "variance")
    local q = lt.mvn(lt.zeros(b, k), lt.diag(lt.rand(b, k) + 1))
    local kl = lt.kl(d, q)
    for i = 1, b do
      local qi = lt.mvn(lt.zeros(k), q:covariance()[i])
      close(kl[i], lt.kl(member(i), qi), 1e-9, "kl " .. i)
    end
  end)

  it("samples have the batch's shape and each member's mean and covariance", function()
    local d = lt.mvn(mean, cov)
    assert.same({b, k}, d:rsample():shape())
    local n = 20000
    local s = d:rsample(n)
    assert.same({n, b, k}, s:shape())
    for i = 1, b do
      local si = s:narrow(2, i, 1):contiguous():reshape(n, k) -- member i's samples
      local mu = si:mean(1)
      local centred = si - lt.ones(n, 1) * mu:reshape(1, k)
      local C = centred:t() * centred / (n - 1)
      local Ci = member(i):covariance():dense()
      -- sampling error: a few standard errors (σ/√n; the variances are below 2)
      close(mu, mean[i], 0.05, "sample mean " .. i)
      close(C, Ci, 0.08, "sample covariance " .. i)
    end
  end)

  it("refuses batch shapes that do not broadcast, and points of another size", function()
    local ok, err = pcall(lt.mvn, lt.randn(2, k), cov)
    assert.is_false(ok)
    assert.matches("lazytensor: mvn: batch shapes {2} and {3} do not broadcast", err, 1, true)
    local d = lt.mvn(mean, cov)
    ok, err = pcall(d.log_prob, d, lt.randn(b, k + 1))
    assert.is_false(ok)
    assert.matches("lazytensor: mvn:log_prob: x must end in 5 entries", err, 1, true)
    ok, err = pcall(d.log_prob, d, lt.randn(2, k))
    assert.is_false(ok)
    assert.matches("batch shapes {3} and {2} do not broadcast", err, 1, true)
  end)
end)
