--- bench/peers/softmax_mixing_side.lua DIR: gp.variational with
-- gp.likelihoods.softmax{classes = 3, features = 2} (mixing weights) side
-- by side with GPyTorch 1.12's SoftmaxLikelihood(num_features = 2,
-- num_classes = 3) in an IndependentMultitaskVariationalStrategy
-- (softmax_mixing_peer.py): 60 points in three blobs, m = 8, parameters
-- after 40 Adam epochs here (q, Z, the kernel, the means, W), written to
-- DIR/problem.txt with the 64 base samples; GPyTorch evaluates the bound at
-- them (its q(g) marginals, KL and likelihood forward; the samples ours).
-- One JSON line: both bounds, their parts and the relative differences.
-- Run with PYTHONPATH=$GPYT_SRC:$LO_SRC:bench/peers/shims (setup.sh).
local lt = require "lazytensor"
local gp = require "lazytensor.gp"

local DIR = assert(arg[1], "usage: softmax_mixing_side.lua DIR")
local sqrt, log = math.sqrt, math.log

local function blobs(n, seed)
  local s = seed
  local function u()
    s = (16807 * s) % 2147483647
    return s / 2147483647
  end
  local function normal() return sqrt(-2 * log(u())) * math.cos(2 * math.pi * u()) end
  local centres = {{0, 1.5}, {-1.3, -0.75}, {1.3, -0.75}}
  local x, y = {}, {}
  for i = 1, n do
    local c = (i - 1) % 3 + 1
    x[i] = {centres[c][1] + 0.6 * normal(), centres[c][2] + 0.6 * normal()}
    y[i] = c
  end
  return x, y
end

local x, y = blobs(60, 5)
local lik = gp.likelihoods.softmax{classes = 3, features = 2}
local model = gp.variational{x = x, y = y, kernel = gp.kernels.rbf{}, likelihood = lik,
                             inducing = 8, jitter = 1e-6, data_jitter = 1e-6}
model:fit{lr = 0.05, epochs = 40}

local out = assert(io.open(DIR .. "/problem.txt", "w"))
local function put(name, rows)
  if type(rows[1]) ~= "table" then
    local r = {}
    for i, v in ipairs(rows) do r[i] = {v} end
    rows = r
  end
  out:write(string.format("%s %d %d\n", name, #rows, #rows[1]))
  for _, row in ipairs(rows) do
    local items = {}
    for j, v in ipairs(row) do items[j] = string.format("%.17g", v) end
    out:write(table.concat(items, " "), "\n")
  end
end
local p = model:parameters()
local hyper = {}
for name, v in pairs(p.kernel) do hyper[name] = math.exp(type(v) == "number" and v or v:item()) end
put("x", x)
put("y", y)
put("Z", model:inducing():totable())
put("mean", p.mean:totable())
put("chol", p.chol:totable())
put("W", lik:mixing_weights():totable())
put("eps", lik.base_samples())
put("hyper", {{hyper.log_lengthscale, hyper.log_variance}})
put("constant", model.mean_value)
out:close()

local f = assert(io.popen("/usr/bin/python3 bench/peers/softmax_mixing_peer.py " .. DIR))
local line = f:read("a")
f:close()
local peer = {}
for k, v in line:gmatch('"(%a+)": (%-?[%d%.e%-]+)') do peer[k] = tonumber(v) end
assert(peer.elbo, "the peer printed no bound: " .. line)

-- lazytensor's parts: the KL is the bound less the likelihood term
local mean, var = model:predict(x)
local ell = lik:expected_log_prob(lt.tensor(y), mean, var):sum()
local elbo = model:elbo()
local function rel(a, b) return math.abs(a - b) / math.max(math.abs(b), 1e-300) end
print(string.format('{"workload":"softmax_mixing","n":60,"m":8,"classes":3,"features":2,'
  .. '"elbo_lazytensor":%.17g,"elbo_gpytorch":%.17g,"rel_elbo":%.3g,"rel_ell":%.3g,'
  .. '"rel_kl":%.3g}', elbo, peer.elbo, rel(elbo, peer.elbo), rel(ell, peer.ell),
  rel(elbo - ell, -peer.kl)))
