#!/usr/bin/python3
"""bench/peers/bo_peer.py DIR run|random PROBLEM SEED... : workload BO of
bench/peers/run.sh, the peer of lazytensor.bo.minimize (bench/bo_regret.lua):
a BoTorch-style Bayesian-optimisation loop written with GPyTorch 1.12 on the
same initial designs, and random search from the same designs.

BoTorch has no Debian package and PyPI is out of reach here, so the loop is
written out the way BoTorch 0.11 (the release paired with GPyTorch 1.12)
does it by default, a step being what `SingleTaskGP` + `fit_gpytorch_mll` +
`LogExpectedImprovement` + `optimize_acqf(q=1, num_restarts=10,
raw_samples=512)` run:
  model     ExactGP, ConstantMean, ScaleKernel(MaternKernel(nu=2.5, ARD,
            lengthscale_prior=Gamma(3, 6)), outputscale_prior=Gamma(2,
            0.15)), GaussianLikelihood(noise_prior=Gamma(1.1, 0.05), noise
            >= 1e-4 untransformed, starting at the prior's mode) -- BoTorch's
            get_matern_kernel_with_gamma_prior and
            get_gaussian_likelihood_with_gamma_prior; float64.
  data      inputs mapped to the unit cube by the known bounds (Normalize),
            outcomes standardised (Standardize: mean, unbiased std); the
            objective is minimised, so the model sees -f (BoTorch maximises).
  fit       a new model every step from GPyTorch's initial values; the
            negative ExactMarginalLogLikelihood (priors included, / n) and
            its autograd gradient minimised over the raw parameters by
            scipy.optimize.minimize(method="L-BFGS-B", jac=True) with
            scipy's default options and the bound raw_noise >= 1e-4
            (botorch.optim.fit_gpytorch_mll_scipy); when L-BFGS-B ends
            abnormally or the Cholesky fails, up to 5 attempts, each after
            drawing all hyperparameters from their priors
            (botorch.fit._fit_fallback).
  acquire   LogEI (Ament et al. 2023; botorch's _log_ei_helper written out:
            log(phi(u) + u Phi(u)) with the erfcx branch below u = -1) of the
            posterior in eval mode under fast_pred_var (BoTorch's
            gpt_posterior_settings), best_f = the best standardised value;
            512 scrambled-Sobol raw samples in [0,1]^d as (512, 1, d), 10
            starting points drawn by initialize_q_batch (Boltzmann weights
            exp(eta z), eta = 1, the best raw sample always kept), the 10
            optimised jointly by one L-BFGS-B on the sum of their -LogEI
            (torch autograd gradient, bounds [0,1], maxiter 2000:
            gen_candidates_scipy), retried once from new starting points
            after an abnormal end (optimize_acqf's
            retry_on_optimization_warning); the best of the 10 is the next
            point.
A step's time (wall: perf_counter, CPU: process_time) is model building +
fit + acquisition optimisation; the objective's evaluation is outside it.
torch.set_num_threads(BENCH_THREADS) (default 1), BLAS threads the same.

Initial designs: DESIGN_DIR/bo_init_<problem>_<seed>.txt, written by
bench/bo_regret.lua --write-designs (lazytensor's scrambled Sobol, 2d+1
points; the format is in that file's header: "n d", then n points in the
problem's own coordinates); every seed DESIGN_DIR holds runs unless SEEDs
are named. Random search ("random") evaluates the same design,
then uniform points (numpy, seeded by the seed) up to the budget.
Problems and budgets as bench/bo_regret.lua's: branin 30, hartmann6 60,
levy4 60; "name:budget" overrides.

One JSON line per (problem, seed): the simple regret (best f - f*), the
regret after every evaluation ("trace"), step-time medians and totals.
"""
import json
import math
import os
import statistics
import sys
import time

THREADS = int(os.environ.get("BENCH_THREADS", "1"))
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = str(THREADS)

HERE = os.path.dirname(os.path.abspath(__file__))
# the source trees of bench/peers/setup.sh (default: beside the repository)
BESIDE = os.path.join(HERE, "..", "..", "..")
sys.path[:0] = [os.path.abspath(os.environ.get("GPYT_SRC", os.path.join(BESIDE, "gpytorch_src"))),
                os.path.abspath(os.environ.get("LO_SRC", os.path.join(BESIDE, "linear_operator_src"))),
                os.path.join(HERE, "shims")]

import numpy as np  # noqa: E402

RAW_SAMPLES, RESTARTS, ACQ_MAXITER, FIT_ATTEMPTS = 512, 10, 2000, 5


# --------------------------------------------------------------- problems --
# The standard test functions in their own coordinates, with their known
# minima (the same definitions as lua/lazytensor/bo/problems.lua).

def branin(x):
    x1, x2 = x[0], x[1]
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


H6_ALPHA = [1.0, 1.2, 3.0, 3.2]
H6_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
        [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
H6_P = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]


def hartmann6(x):
    s = 0.0
    for i in range(4):
        inner = sum(H6_A[i][j] * (x[j] - 1e-4 * H6_P[i][j]) ** 2 for j in range(6))
        s += H6_ALPHA[i] * math.exp(-inner)
    return -s


def levy(x):
    w = [1 + (xi - 1) / 4 for xi in x]
    s = math.sin(math.pi * w[0]) ** 2
    for wi in w[:-1]:
        s += (wi - 1) ** 2 * (1 + 10 * math.sin(math.pi * wi + 1) ** 2)
    s += (w[-1] - 1) ** 2 * (1 + math.sin(2 * math.pi * w[-1]) ** 2)
    return s


def ackley(x):
    d = len(x)
    a = -20 * math.exp(-0.2 * math.sqrt(sum(xi * xi for xi in x) / d))
    return a - math.exp(sum(math.cos(2 * math.pi * xi) for xi in x) / d) + 20 + math.e


PROBLEMS = {  # name: (f, lower bounds, upper bounds, f*, budget)
    "branin": (branin, [-5.0, 0.0], [10.0, 15.0], 0.397887357729738, 30),
    "hartmann6": (hartmann6, [0.0] * 6, [1.0] * 6, -3.32236801141551, 60),
    "levy4": (levy, [-10.0] * 4, [10.0] * 4, 0.0, 60),
    "ackley2": (ackley, [-32.768] * 2, [32.768] * 2, 0.0, 40),
}


def problem(spec):
    """"name" or "name:budget" (bench/bo_regret.lua's --problems syntax)."""
    name, _, budget = spec.partition(":")
    if name not in PROBLEMS:
        raise SystemExit("bo_peer.py: unknown problem %s (%s)" % (name, " ".join(PROBLEMS)))
    f, lo, hi, fstar, default = PROBLEMS[name]
    return name, f, np.array(lo), np.array(hi), fstar, int(budget) if budget else default


def design_path(d, name, seed):
    return os.path.join(d, "bo_init_%s_%d.txt" % (name, seed))


def design_seeds(d, name):
    """The seeds of the designs DIR holds for this problem, in order."""
    pre, seeds = "bo_init_%s_" % name, []
    for f in os.listdir(d):
        if f.startswith(pre) and f.endswith(".txt") and f[len(pre):-4].isdigit():
            seeds.append(int(f[len(pre):-4]))
    return sorted(seeds)


def read_design(d, name, seed, dim):
    """DIR/bo_init_<problem>_<seed>.txt, bench/bo_regret.lua's format: "n d",
    then n points of d numbers in the problem's own coordinates."""
    path = design_path(d, name, seed)
    with open(path) as fh:
        nums = fh.read().split()
    n, k = int(nums[0]), int(nums[1])
    if k != dim or len(nums) != 2 + n * k:
        raise SystemExit("bo_peer.py: %s: expected 'n %d' and n x %d numbers" % (path, dim, dim))
    return np.array([float(t) for t in nums[2:]], dtype=np.float64).reshape(n, k)


def emit(rec):
    rec.update(workload="BO", threads=THREADS)
    print(json.dumps(rec, ensure_ascii=False), flush=True)


def summary(name, seed, ys, fstar, budget, n_init):
    best = np.minimum.accumulate(np.asarray(ys))
    return {"problem": name, "seed": seed, "d": len(PROBLEMS[name][1]), "budget": budget, "init": n_init,
            "best": float(best[-1]), "regret": float(best[-1] - fstar),
            "trace": [float(v - fstar) for v in best]}


# ---------------------------------------------------------- random search --

def random_search(spec, seed, x0):
    name, f, lo, hi, fstar, budget = problem(spec)
    rng = np.random.default_rng(1000003 * seed + 17)
    xs = list(x0) + list(lo + (hi - lo) * rng.random((budget - len(x0), len(lo))))
    rec = summary(name, seed, [f(x) for x in xs], fstar, budget, len(x0))
    rec.update(system="random", op="bo_run")
    emit(rec)


# ------------------------------------------------ the BoTorch-style loop --

def setup_torch():
    import torch
    torch.set_num_threads(THREADS)
    torch.set_default_dtype(torch.float64)
    import gpytorch
    return torch, gpytorch


def make_model(torch, gpytorch, x, y):
    """SingleTaskGP's default model (BoTorch 0.11) on unit-cube x and
    standardised y."""
    from gpytorch.constraints import GreaterThan
    from gpytorch.priors import GammaPrior
    noise_prior = GammaPrior(1.1, 0.05)
    mode = float((noise_prior.concentration - 1) / noise_prior.rate)
    lik = gpytorch.likelihoods.GaussianLikelihood(
        noise_prior=noise_prior,
        noise_constraint=GreaterThan(1e-4, transform=None, initial_value=mode))
    kernel = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=x.shape[-1],
                                      lengthscale_prior=GammaPrior(3.0, 6.0)),
        outputscale_prior=GammaPrior(2.0, 0.15))

    class SingleTask(gpytorch.models.ExactGP):
        def __init__(self):
            super().__init__(x, y, lik)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = kernel

        def forward(self, z):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(z), self.covar_module(z))

    return SingleTask(), lik


def sample_all_priors(torch, model):
    """botorch.optim.utils.sample_all_priors: every prior'd hyperparameter
    drawn from its prior."""
    for _, module, prior, closure, setting_closure in model.named_priors():
        if setting_closure is None:
            continue
        with torch.no_grad():
            setting_closure(module, prior.sample(closure(module).shape))


def fit_mll(torch, gpytorch, model, lik, x, y):
    """fit_gpytorch_mll: scipy L-BFGS-B on the raw parameters, with BoTorch's
    retry policy. Returns (attempts, L-BFGS-B iterations, evaluations)."""
    from scipy.optimize import minimize
    from linear_operator.utils.errors import NotPSDError
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = dict(model.named_parameters())
    bounds = []
    for n in names:
        lo = 1e-4 if n.endswith("raw_noise") else None  # GreaterThan(1e-4, transform=None)
        bounds += [(lo, None)] * params[n].numel()
    shapes = [params[n].shape for n in names]

    def set_state(v):
        with torch.no_grad():
            i = 0
            for n, s in zip(names, shapes):
                k = int(np.prod(s)) if len(s) else 1
                params[n].copy_(torch.as_tensor(v[i:i + k]).reshape(s))
                i += k

    def state():
        return np.concatenate([params[n].detach().reshape(-1).numpy() for n in names])

    evals = [0]

    def closure(v):
        set_state(v)
        model.zero_grad()
        loss = -mll(model(x), y)
        loss.backward()
        evals[0] += 1
        return float(loss), np.concatenate([params[n].grad.reshape(-1).numpy() for n in names])

    start = state()
    iters = 0
    for attempt in range(1, FIT_ATTEMPTS + 1):
        set_state(start)
        if attempt > 1:
            sample_all_priors(torch, model)
        model.train()
        lik.train()
        try:
            res = minimize(closure, state(), jac=True, method="L-BFGS-B", bounds=bounds)
        except NotPSDError:
            continue
        iters += res.nit
        set_state(res.x)
        msg = res.message if isinstance(res.message, str) else res.message.decode("ascii")
        if res.success or "LIMIT" in msg.upper():  # the maxiter/maxfun ends are accepted
            break
    else:
        set_state(start)  # BoTorch warns and keeps the initial state
    model.eval()
    lik.eval()
    return attempt, iters, evals[0]


def log_ei(torch, gpytorch, model, best_f, z):
    """LogExpectedImprovement (maximisation) at z of shape (b, 1, d): botorch's
    _log_ei_helper(u) + log(sigma), u = (mean - best_f) / sigma."""
    with gpytorch.settings.fast_pred_var(), gpytorch.settings.debug(False):
        post = model(z)
        mean = post.mean.squeeze(-1)
        sigma = post.variance.clamp_min(1e-12).sqrt().view(mean.shape)
    u = (mean - best_f) / sigma
    return log_ei_helper(torch, u) + sigma.log()


def log_ei_helper(torch, u):
    inv_sqrt2, log_sqrt_pi_div_2 = 1 / math.sqrt(2), math.log(math.pi / 2) / 2
    bound = -1.0

    def ei_helper(v):
        return torch.exp(-0.5 * v * v) / math.sqrt(2 * math.pi) + v * 0.5 * torch.erfc(-inv_sqrt2 * v)

    def log1mexp(w):
        return torch.where(w > -math.log(2), torch.log(-torch.expm1(w)), torch.log1p(-torch.exp(w)))

    u_upper = u.masked_fill(u < bound, bound)
    upper = ei_helper(u_upper).log()
    u_lower = u.masked_fill(u > bound, bound)
    u_eps = u_lower.masked_fill(u < -1e6, -1e6)
    w = torch.log(torch.special.erfcx(-inv_sqrt2 * u_eps) * u_eps.abs()) + log_sqrt_pi_div_2
    log_phi = -0.5 * u * u - math.log(math.sqrt(2 * math.pi))
    lower = log_phi + torch.where(u > -1e6, log1mexp(w), -2 * u_lower.abs().log())
    return torch.where(u > bound, upper, lower)


def initialize_q_batch(torch, x, acq, n, eta=1.0):
    """botorch.optim.initializers.initialize_q_batch."""
    std = acq.std()
    if std == 0:
        return x[torch.randperm(len(x))][:n]
    weights = torch.exp(eta * (acq - acq.mean()) / std)
    while torch.isinf(weights).any():
        weights = torch.exp(0.5 * torch.log(weights))
    idx = torch.multinomial(weights, n)
    best = int(torch.argmax(acq))
    if best not in idx:
        idx[-1] = best
    return x[idx]


def optimize_acqf(torch, gpytorch, model, best_f, dim):
    """optimize_acqf(q=1, num_restarts=10, raw_samples=512) on [0,1]^d.
    Returns the best point (d,), its LogEI, and the L-BFGS-B iterations."""
    from scipy.optimize import minimize
    from torch.quasirandom import SobolEngine

    def starts():
        seed = int(torch.randint(1000000, (1,)))
        raw = SobolEngine(dim, scramble=True, seed=seed).draw(RAW_SAMPLES).to(torch.float64)
        raw = raw.unsqueeze(1)
        with torch.no_grad():
            vals = log_ei(torch, gpytorch, model, best_f, raw)
        return initialize_q_batch(torch, raw, vals, RESTARTS)

    def objective(v):
        z = torch.tensor(v).reshape(RESTARTS, 1, dim).requires_grad_(True)
        loss = -log_ei(torch, gpytorch, model, best_f, z).sum()
        g, = torch.autograd.grad(loss, z)
        return float(loss), g.reshape(-1).numpy().copy()

    iters = 0
    for attempt in range(2):
        x0 = starts().reshape(-1).numpy()
        res = minimize(objective, x0, jac=True, method="L-BFGS-B", bounds=[(0.0, 1.0)] * x0.size,
                       options={"maxiter": ACQ_MAXITER})
        iters += res.nit
        msg = res.message if isinstance(res.message, str) else res.message.decode("ascii")
        if res.success or "LIMIT" in msg.upper():
            break
    cand = torch.tensor(res.x).reshape(RESTARTS, 1, dim).clamp(0.0, 1.0)
    with torch.no_grad():
        vals = log_ei(torch, gpytorch, model, best_f, cand)
    i = int(torch.argmax(vals))
    return cand[i, 0], float(vals[i]), iters


def botorch_loop(spec, seed, x0):
    torch, gpytorch = setup_torch()
    name, f, lo, hi, fstar, budget = problem(spec)
    torch.manual_seed(seed)
    xs = [np.asarray(r) for r in x0]
    ys = [f(r) for r in xs]
    walls, cpus, fits, acqs, attempts = [], [], [], [], 0
    fit_iters, acq_iters = [], []
    while len(ys) < budget:
        w0, c0 = time.perf_counter(), time.process_time()
        x = torch.tensor((np.array(xs) - lo) / (hi - lo))
        yt = -torch.tensor(ys)  # BoTorch maximises
        std = yt.std()
        std = std if std >= 1e-8 else torch.tensor(1.0)
        y = (yt - yt.mean()) / std
        model, lik = make_model(torch, gpytorch, x, y)
        a, it, _ = fit_mll(torch, gpytorch, model, lik, x, y)
        attempts += a
        fit_iters.append(it)
        w1 = time.perf_counter()
        u, _, ait = optimize_acqf(torch, gpytorch, model, y.max(), len(lo))
        acq_iters.append(ait)
        cpus.append(time.process_time() - c0)
        w2 = time.perf_counter()
        walls.append(w2 - w0)
        fits.append(w1 - w0)
        acqs.append(w2 - w1)
        xn = lo + (hi - lo) * u.numpy()
        xs.append(xn)
        ys.append(f(xn))
    rec = summary(name, seed, ys, fstar, budget, len(x0))
    rec.update(system="gpytorch", op="bo_run", steps=len(walls),
               step_wall_median_s=statistics.median(walls), step_cpu_median_s=statistics.median(cpus),
               step_wall_total_s=sum(walls), step_cpu_total_s=sum(cpus),
               fit_wall_median_s=statistics.median(fits), acq_wall_median_s=statistics.median(acqs),
               fit_attempts=attempts, fit_iterations_median=statistics.median(fit_iters),
               acq_iterations_median=statistics.median(acq_iters),
               settings="BoTorch 0.11 SingleTaskGP defaults written with GPyTorch 1.12: Matern-5/2 ARD "
                        "+ Gamma priors, Normalize + Standardize, scipy L-BFGS-B fit, LogEI, "
                        "optimize_acqf(num_restarts=10, raw_samples=512)",
               torch=torch.__version__, gpytorch=gpytorch.__version__)
    emit(rec)


def main():
    if len(sys.argv) < 4 or sys.argv[2] not in ("run", "random"):
        raise SystemExit("usage: bo_peer.py DESIGN_DIR run|random PROBLEM[:BUDGET] [SEED...]")
    d, mode, spec = sys.argv[1], sys.argv[2], sys.argv[3]
    name, _, lo, _, _, budget = problem(spec)
    seeds = [int(s) for s in sys.argv[4:]] or design_seeds(d, name)
    if not seeds:
        raise SystemExit("bo_peer.py: no designs bo_init_%s_<seed>.txt in %s" % (name, d))
    for seed in seeds:
        x0 = read_design(d, name, seed, len(lo))
        if len(x0) >= budget:
            raise SystemExit("bo_peer.py: %s: design %d has %d points, the budget is %d"
                             % (name, seed, len(x0), budget))
        (random_search if mode == "random" else botorch_loop)(spec, seed, x0)


if __name__ == "__main__":
    main()
