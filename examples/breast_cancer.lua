--- GP classification on real data: Breast Cancer Wisconsin (Diagnostic),
-- 569 fine-needle aspirates, 30 features, benign (1) or malignant (0)
-- (examples/data/breast_cancer.csv; see examples/data/README.md).
--
-- Classifiers on the same split, each with an RBF kernel over the 30
-- standardised features and a probit likelihood (and the Laplace one again
-- with the logit link, as scikit-learn's), every gradient by lt.grad:
-- - gp.laplace: the exact GP by Laplace's method, its kernel hyperparameters
--   fitted by L-BFGS on the approximate log marginal likelihood;
-- - gp.variational: an SVGP with 40 inducing points (learnt), q(u) and the
--   hyperparameters fitted by minibatch Adam (batch 64) on the ELBO.
--
-- Split: 80/20 (455 training rows, 114 held out) by a Fisher–Yates shuffle
-- of the rows with the LCG s ← (1103515245·s + 12345) mod 2³¹ seeded with
-- 2026 (computed exactly on every Lua: 1103515245 = 16838·2¹⁶ + 20077);
-- inputs standardised by the training rows. Prints held-out accuracy and
-- NLPD (the mean of −log p(y* | x*)), and writes out/breast_cancer.svg: a
-- calibration plot of the probit classifiers (the observed fraction of
-- benign cases against the predicted probability, in 10 bins).
local gp = require "lazytensor.gp"
local data = require "lazytensor.data"
local svg = require "lazytensor.svg"

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local cols, header = data.read_csv(here .. "/data/breast_cancer.csv")
local features = {}
for _, h in ipairs(header) do
  if h ~= "benign" then features[#features + 1] = h end
end
local n = #cols.benign

-- the seeded shuffle
local seed = 2026
local function rnd()
  seed = ((16838 * seed) % 2147483648 * 65536 + 20077 * seed + 12345) % 2147483648
  return seed / 2147483648
end
local order = {}
for i = 1, n do order[i] = i end
for i = n, 2, -1 do
  local j = math.floor(rnd() * i) + 1
  order[i], order[j] = order[j], order[i]
end
local n_train = math.floor(0.8 * n + 0.5)

local xt, yt, xs, ys = {}, {}, {}, {}
for k, i in ipairs(order) do
  local row = {}
  for j, f in ipairs(features) do row[j] = cols[f][i] end
  if k <= n_train then
    xt[#xt + 1], yt[#yt + 1] = row, cols.benign[i]
  else
    xs[#xs + 1], ys[#ys + 1] = row, cols.benign[i]
  end
end
for j = 1, #features do
  local m, s = 0, 0
  for _, r in ipairs(xt) do m = m + r[j] end
  m = m / #xt
  for _, r in ipairs(xt) do s = s + (r[j] - m) ^ 2 end
  local sd = math.sqrt(s / #xt)
  for _, set in ipairs{xt, xs} do
    for _, r in ipairs(set) do r[j] = (r[j] - m) / sd end
  end
end
print(string.format("breast cancer: %d training rows, %d held out, %d features (seed 2026)",
                    #xt, #xs, #features))

-- held-out accuracy and NLPD from P(y = 1)
local function score(p)
  local right, nlpd = 0, 0
  for i, y in ipairs(ys) do
    local q = math.min(math.max(p[i], 1e-12), 1 - 1e-12)
    if (q > 0.5) == (y == 1) then right = right + 1 end
    nlpd = nlpd - math.log(y == 1 and q or 1 - q)
  end
  return right / #ys, nlpd / #ys
end

local function clock() return os.clock() end

-- gp.laplace
local t0 = clock()
local lap = gp.laplace{x = xt, y = yt, kernel = gp.kernels.rbf{lengthscale = math.sqrt(#features)},
                       likelihood = gp.likelihoods.bernoulli{link = "probit"}}
local fit = lap:fit{max_iter = 50}
local p_lap = lap:predict_y(xs):totable()
local acc_lap, nlpd_lap = score(p_lap)
print(string.format("laplace: log q(y) %.4f after %d L-BFGS iterations (%s), %s (%.1f s)", fit.mll,
                    fit.iterations, fit.reason, lap.kernel:describe(), clock() - t0))
print(string.format("laplace held-out: accuracy %.4f, NLPD %.4f", acc_lap, nlpd_lap))

-- gp.laplace with the logit link: the model of scikit-learn's
-- GaussianProcessClassifier (bench/peers/breast_cancer_sklearn.py)
t0 = clock()
local logit = gp.laplace{x = xt, y = yt,
                         kernel = gp.kernels.rbf{lengthscale = math.sqrt(#features)},
                         likelihood = gp.likelihoods.bernoulli{link = "logit"}}
local fit_logit = logit:fit{max_iter = 50}
local acc_logit, nlpd_logit = score(logit:predict_y(xs):totable())
print(string.format("laplace (logit): log q(y) %.4f after %d L-BFGS iterations (%s), %s (%.1f s)",
                    fit_logit.mll, fit_logit.iterations, fit_logit.reason,
                    logit.kernel:describe(), clock() - t0))
print(string.format("laplace (logit) held-out: accuracy %.4f, NLPD %.4f", acc_logit, nlpd_logit))

-- gp.variational
t0 = clock()
local vgp = gp.variational{x = xt, y = yt,
                           kernel = gp.kernels.rbf{lengthscale = math.sqrt(#features)},
                           likelihood = gp.likelihoods.bernoulli{link = "probit"}, inducing = 40}
local res = vgp:fit{lr = 0.03, epochs = 60, batch_size = 64, seed = 1}
local p_vgp = vgp:predict_y(xs):totable()
local acc_vgp, nlpd_vgp = score(p_vgp)
print(string.format("variational: ELBO %.4f after %d Adam steps, %s (%.1f s)", res.elbo, res.steps,
                    vgp.kernel:describe(), clock() - t0))
print(string.format("variational held-out: accuracy %.4f, NLPD %.4f", acc_vgp, nlpd_vgp))

-- calibration: observed benign fraction per predicted-probability bin
local function calibration(p)
  local bins, cx, cy = {}, {}, {}
  for b = 1, 10 do bins[b] = {n = 0, p = 0, y = 0} end
  for i, q in ipairs(p) do
    local b = math.min(10, math.floor(q * 10) + 1)
    bins[b].n, bins[b].p, bins[b].y = bins[b].n + 1, bins[b].p + q, bins[b].y + ys[i]
  end
  for _, b in ipairs(bins) do
    if b.n > 0 then cx[#cx + 1], cy[#cy + 1] = b.p / b.n, b.y / b.n end
  end
  return cx, cy
end
local chart = svg.chart{title = "Breast cancer, 114 held-out aspirates: calibration",
                        xlabel = "predicted probability of benign (bin mean)",
                        ylabel = "observed fraction benign", width = 640, height = 480,
                        xlim = {0, 1}, ylim = {0, 1}, legend = "top-left"}
chart:line({0, 1}, {0, 1}, {label = "perfect calibration", color = "#999999"})
local lx, ly = calibration(p_lap)
chart:line(lx, ly, {label = "gp.laplace", color = "#c44e52"})
chart:scatter(lx, ly, {color = "#c44e52", r = 3})
local vx, vy = calibration(p_vgp)
chart:line(vx, vy, {label = "gp.variational (m = 40)", color = "#4c72b0"})
chart:scatter(vx, vy, {color = "#4c72b0", r = 3})
os.execute("mkdir -p out")
chart:write("out/breast_cancer.svg")
print("wrote out/breast_cancer.svg")
