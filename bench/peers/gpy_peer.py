#!/usr/bin/python3
"""bench/peers/gpy_peer.py DIR data | run ROW...: workload GPY of
bench/peers/run.sh, GPyTorch 1.12's own model classes side by side with
lazytensor.gp (bench/peers/gpy_side.lua runs lazytensor's side).

  data   writes the problems into DIR (plain text, "%.17g", read by
         gpy_side.lua) and their exact answers, computed here by a dense
         Cholesky in float64 (numpy/scipy; the Matérn-5/2 formula written
         out, no GPyTorch code): the MLL and its gradient with respect to the
         log hyperparameters, the predictive means and variances, the SGPR
         bound.
  run    the GPyTorch rows (ROW: exact iterative predict love sgpr bo, the
         default; also exact4000 iterative4000 bo60), one JSON line each: wall and CPU medians and the
         errors against DIR's exact answers.

The problems (the same data and starting hyperparameters on both sides):
  exact/iterative  ExactGP, ZeroMean, ScaleKernel(MaternKernel(nu=2.5,
                   ard_num_dims=3)), GaussianLikelihood; n = 2000 scattered
                   points in [0,1]^3; one ExactMarginalLogLikelihood and its
                   backward (the MLL multiplied back by n). "exact" runs under
                   max_cholesky_size(10**9); "iterative" under GPyTorch's
                   defaults (max_cholesky_size 800 < n: mBCG + SLQ, 10 probes,
                   rank-15 preconditioner; fast_computations on).
  predict / love   the latent f's mean and variance at 1000 test points from
                   the same model in eval mode, its caches dropped every call
                   (train() then eval(): the factorisation is in the time);
                   "predict" under max_cholesky_size(10**9), "love" under
                   fast_pred_var() with the defaults.
  sgpr             InducingPointKernel(ScaleKernel(Matérn-5/2 ARD),
                   inducing_points = the first 300 rows of x) in an ExactGP,
                   n = 20000, one MLL (Titsias' bound: GPyTorch adds the
                   trace term as an added loss term) and its backward,
                   gradient with respect to the inducing points included.
  bo, bo60         Branin on [0,1]^2 (rescaled to [-5,10]x[0,15], y =
                   (branin - 54.3)/51), n = 5..30 (bo60: 5..60) points in a fixed order
                   (no acquisition: both sides see the same points); every
                   step builds the model from the fixed starting values, fits
                   20 Adam iterations (lr 0.1) and predicts mean and variance
                   at 1000 candidates. The time of each step; medians.
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
# GPyTorch's and linear_operator's source trees (bench/peers/setup.sh), and
# the annotation-only shims they import
sys.path[:0] = [os.path.abspath(os.environ.get("GPYT_SRC", os.path.join(HERE, "gpytorch_src"))),
                os.path.abspath(os.environ.get("LO_SRC", os.path.join(HERE, "linear_operator_src"))),
                os.path.join(HERE, "shims")]

import numpy as np  # noqa: E402
import scipy.linalg as sla  # noqa: E402

SYSTEM = "gpytorch"
N, D, NTEST = 2000, 3, 1000
N4 = 4000  # rows exact4000, iterative4000: the same problem at n = 4000
SGPR_N, SGPR_M = 20000, 300
BO_START, BO_CAND, BO_ITERS, BO_LR = 5, 1000, 20, 0.1
BO_ENDS = {"bo": 30, "bo60": 60}  # the rows: n = 5..30 and n = 5..60
LENGTHSCALE = [0.3, 0.5, 0.7]
OUTPUTSCALE, NOISE = 1.0, 0.05
BO_LENGTHSCALE, BO_NOISE = [0.2, 0.2], 1e-2


def emit(rec):
    rec.setdefault("system", SYSTEM)
    rec["workload"] = "GPY"
    rec["threads"] = THREADS
    print(json.dumps(rec, ensure_ascii=False), flush=True)


def write_matrix(path, a):
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    with open(path, "w") as f:
        f.write("%d %d\n" % a.shape)
        for row in a:
            f.write(" ".join("%.17g" % v for v in row) + "\n")


def read_matrix(path):
    with open(path) as f:
        r, c = (int(t) for t in f.readline().split())
        a = np.array([float(t) for t in f.read().split()], dtype=np.float64)
    return a.reshape(r, c)


# ------------------------------------------------------------ references --

def matern52(x1, x2, ls, v):
    r = np.sqrt(np.maximum(((x1[:, None, :] - x2[None, :, :]) / ls) ** 2, 0).sum(-1))
    s = math.sqrt(5) * r
    return v * (1 + s + s * s / 3) * np.exp(-s)


def matern52_blocks(x1, x2, ls, v, block=2000):
    return np.vstack([matern52(x1[i:i + block], x2, ls, v) for i in range(0, len(x1), block)])


def exact_mll_grad(x, y, ls, v, noise):
    """MLL and its gradient in (log l_1..l_d, log v, log s2) by a dense
    Cholesky: dL/dt = 1/2 tr((aa^T - Ky^-1) dK/dt)."""
    ls = np.asarray(ls, dtype=np.float64)
    n = len(y)
    diff = (x[:, None, :] - x[None, :, :]) / ls
    r2 = (diff ** 2).sum(-1)
    r = np.sqrt(r2)
    s = math.sqrt(5) * r
    e = np.exp(-s)
    K = v * (1 + s + s * s / 3) * e
    Ky = K + noise * np.eye(n)
    c = sla.cho_factor(Ky, lower=True)
    a = sla.cho_solve(c, y)
    logdet = 2 * np.log(np.diag(c[0])).sum()
    mll = -0.5 * (y @ a) - 0.5 * logdet - 0.5 * n * math.log(2 * math.pi)
    W = np.outer(a, a) - sla.cho_solve(c, np.eye(n))
    # dk/dr2_q... for Matern-5/2: dk/d log l_q = v * (5/3) (1 + s) e * diff_q^2
    common = v * (5.0 / 3.0) * (1 + s) * e
    g = []
    for q in range(x.shape[1]):
        g.append(0.5 * np.sum(W * common * diff[:, :, q] ** 2))
    g.append(0.5 * np.sum(W * K))
    g.append(0.5 * noise * np.trace(W))
    return float(mll), [float(t) for t in g], c, a


def predict_reference(x, xs, c, a, ls, v):
    Ks = matern52(xs, x, np.asarray(ls), v)
    mean = Ks @ a
    V = sla.solve_triangular(c[0], Ks.T, lower=True)
    var = v - (V * V).sum(0)
    return mean, var


def sgpr_bound(x, y, z, ls, v, noise, jitter=0.0):
    """Titsias' bound log N(y | 0, Q + s2 I) - tr(Kxx - Q)/(2 s2), by Woodbury
    (Q from Kzz + jitter I)."""
    n = len(y)
    ls = np.asarray(ls)
    Kzz = matern52(z, z, ls, v) + jitter * np.eye(len(z))
    Kxz = matern52_blocks(x, z, ls, v)
    Lz = np.linalg.cholesky(Kzz)
    A = sla.solve_triangular(Lz, Kxz.T, lower=True)  # m x n
    B = np.eye(len(z)) + (A @ A.T) / noise
    LB = np.linalg.cholesky(B)
    c = sla.solve_triangular(LB, A @ y, lower=True) / noise
    quad = (y @ y) / noise - c @ c
    logdet = 2 * np.log(np.diag(LB)).sum() + n * math.log(noise)
    trace = n * v - (A * A).sum()
    return float(-0.5 * quad - 0.5 * logdet - 0.5 * n * math.log(2 * math.pi) - 0.5 * trace / noise)


def branin01(u):
    x1, x2 = 15 * u[:, 0] - 5, 15 * u[:, 1]
    b, cc, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    f = (x2 - b * x1 ** 2 + cc * x1 - 6) ** 2 + 10 * (1 - t) * np.cos(x1) + 10
    return (f - 54.3) / 51.0


def make_data(d):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(20261203)
    x = rng.random((N, D))
    f = np.sin(2 * math.pi * x[:, 0]) + np.cos(3 * x[:, 1]) * x[:, 2] + 0.5 * x[:, 2] ** 2
    y = f + math.sqrt(NOISE) * rng.standard_normal(N)
    xs = rng.random((NTEST, D))
    write_matrix(os.path.join(d, "gpy_x.txt"), x)
    write_matrix(os.path.join(d, "gpy_y.txt"), y)
    write_matrix(os.path.join(d, "gpy_xs.txt"), xs)
    mll, g, c, a = exact_mll_grad(x, y, LENGTHSCALE, OUTPUTSCALE, NOISE)
    mean, var = predict_reference(x, xs, c, a, LENGTHSCALE, OUTPUTSCALE)
    write_matrix(os.path.join(d, "gpy_ref_mll.txt"), [mll] + g)
    write_matrix(os.path.join(d, "gpy_ref_mean.txt"), mean)
    write_matrix(os.path.join(d, "gpy_ref_var.txt"), var)
    # SGPR
    xl = rng.random((SGPR_N, D))
    fl = np.sin(2 * math.pi * xl[:, 0]) + np.cos(3 * xl[:, 1]) * xl[:, 2] + 0.5 * xl[:, 2] ** 2
    yl = fl + math.sqrt(NOISE) * rng.standard_normal(SGPR_N)
    z = xl[:SGPR_M]
    write_matrix(os.path.join(d, "gpy_sgpr_x.txt"), xl)
    write_matrix(os.path.join(d, "gpy_sgpr_y.txt"), yl)
    write_matrix(os.path.join(d, "gpy_sgpr_z.txt"), z)
    # without jitter (GPyTorch adds none unless the Cholesky fails) and with
    # lazytensor's default 1e-6 * mean k(x, x) on Kzz (part of its model)
    write_matrix(os.path.join(d, "gpy_ref_sgpr.txt"),
                 [sgpr_bound(xl, yl, z, LENGTHSCALE, OUTPUTSCALE, NOISE),
                  sgpr_bound(xl, yl, z, LENGTHSCALE, OUTPUTSCALE, NOISE, 1e-6 * OUTPUTSCALE)])
    # BO loop
    bx = rng.random((max(BO_ENDS.values()), 2))
    write_matrix(os.path.join(d, "gpy_bo_x.txt"), bx)
    write_matrix(os.path.join(d, "gpy_bo_y.txt"), branin01(bx))
    write_matrix(os.path.join(d, "gpy_bo_cand.txt"), rng.random((BO_CAND, 2)))
    # n = 4000 (rows exact4000, iterative4000), drawn last so that the sets
    # above do not depend on it
    x4 = rng.random((N4, D))
    f4 = np.sin(2 * math.pi * x4[:, 0]) + np.cos(3 * x4[:, 1]) * x4[:, 2] + 0.5 * x4[:, 2] ** 2
    y4 = f4 + math.sqrt(NOISE) * rng.standard_normal(N4)
    write_matrix(os.path.join(d, "gpy4000_x.txt"), x4)
    write_matrix(os.path.join(d, "gpy4000_y.txt"), y4)
    mll4, g4, _, _ = exact_mll_grad(x4, y4, LENGTHSCALE, OUTPUTSCALE, NOISE)
    write_matrix(os.path.join(d, "gpy4000_ref_mll.txt"), [mll4] + g4)
    print(json.dumps({"workload": "meta", "op": "gpy_data", "dir": d, "exact_mll": mll}), flush=True)


# --------------------------------------------------------------- GPyTorch --

def measure(fn, repeats, warmup=True):
    """Medians of wall and CPU time over repeats calls (after one warm-up)."""
    out = fn() if warmup else None
    walls, cpus = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    return {"median_s": statistics.median(walls), "cpu_median_s": statistics.median(cpus),
            "min_s": min(walls), "repeats": repeats}, out


def run_rows(d, rows):
    import torch
    torch.set_num_threads(THREADS)
    torch.set_default_dtype(torch.float64)
    import gpytorch

    def T(name):
        return torch.tensor(read_matrix(os.path.join(d, name)))

    class Exact(gpytorch.models.ExactGP):
        def __init__(self, x, y, lik, kernel):
            super().__init__(x, y, lik)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = kernel

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    def matern(ls, v, dims):
        k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=dims))
        k.base_kernel.lengthscale = torch.tensor(ls)
        k.outputscale = v
        return k

    def model_of(x, y, ls, v, noise, inducing=None):
        lik = gpytorch.likelihoods.GaussianLikelihood()
        lik.noise = noise
        k = matern(ls, v, x.shape[1])
        if inducing is not None:
            k = gpytorch.kernels.InducingPointKernel(k, inducing_points=inducing.clone(), likelihood=lik)
        return Exact(x, y.reshape(-1), lik, k), lik

    def log_grads(model, lik, scale_kernel):
        """dL/d(log l_q, log v, log s2) from the raw parameters' gradients
        (softplus: theta = softplus(raw) [+ 1e-4 for the noise])."""
        base = scale_kernel.base_kernel
        out = []
        raw = base.raw_lengthscale
        th = base.lengthscale.detach().reshape(-1)
        out += list((raw.grad.reshape(-1) * th / torch.sigmoid(raw.detach().reshape(-1))).tolist())
        raw = scale_kernel.raw_outputscale
        out.append(float(raw.grad * scale_kernel.outputscale.detach() / torch.sigmoid(raw.detach())))
        raw = lik.noise_covar.raw_noise
        out.append(float(raw.grad.reshape(-1)[0] * lik.noise.detach().reshape(-1)[0]
                         / torch.sigmoid(raw.detach().reshape(-1)[0])))
        return out

    def mll_grad_call(model, lik, x, y):
        n = y.numel()
        model.train()
        lik.train()
        model.zero_grad()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
        v = mll(model(x), y.reshape(-1)) * n  # ExactMarginalLogLikelihood divides by n
        v.backward()
        return float(v)

    def relerr(a, b):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))

    x, y, xs = T("gpy_x.txt"), T("gpy_y.txt").reshape(-1), T("gpy_xs.txt")
    ref = read_matrix(os.path.join(d, "gpy_ref_mll.txt")).reshape(-1)
    mref, gref = ref[0], ref[1:]
    rmean = read_matrix(os.path.join(d, "gpy_ref_mean.txt")).reshape(-1)
    rvar = read_matrix(os.path.join(d, "gpy_ref_var.txt")).reshape(-1)

    for row in rows:
        if row in ("exact", "iterative", "exact4000", "iterative4000"):
            big = row.endswith("4000")
            path = row[:-4] if big else row
            n_row, reps = (N4, 3) if big else (N, 5)
            pre = "gpy4000_" if big else "gpy_"
            x, y = T(pre + "x.txt"), T(pre + "y.txt").reshape(-1)
            ref = read_matrix(os.path.join(d, pre + "ref_mll.txt")).reshape(-1)
            mref, gref = ref[0], ref[1:]
            model, lik = model_of(x, y, LENGTHSCALE, OUTPUTSCALE, NOISE)
            merrs, gerrs, last = [], [], {}

            def call():
                v = mll_grad_call(model, lik, x, y)
                g = log_grads(model, lik, model.covar_module)
                merrs.append(abs(v - mref) / abs(mref))
                gerrs.append(relerr(g, gref))
                last["v"], last["g"] = v, g

            if path == "exact":
                with gpytorch.settings.max_cholesky_size(10 ** 9):
                    rec, _ = measure(call, reps)
                setting = "max_cholesky_size(10**9)"
            else:
                torch.manual_seed(1)
                rec, _ = measure(call, reps)
                setting = "defaults (max_cholesky_size 800: mBCG + SLQ, 10 probes, precond rank 15)"
            rec.update(op="mll_grad", path=path, n=n_row, d=D, kind="matern52", settings=setting,
                       mll=last["v"], exact_mll=mref,
                       mll_relerr=statistics.median(merrs), grad_relerr=statistics.median(gerrs),
                       mll_abserr=statistics.median(merrs) * abs(mref))
            emit(rec)
        elif row in ("predict", "love"):
            model, lik = model_of(x, y, LENGTHSCALE, OUTPUTSCALE, NOISE)
            out = {}

            def call():
                model.train()
                model.eval()  # drops the prediction caches: the factorisation is timed
                with torch.no_grad():
                    post = model(xs)
                    out["mean"], out["var"] = post.mean, post.variance

            if row == "predict":
                with gpytorch.settings.max_cholesky_size(10 ** 9):
                    rec, _ = measure(call, 5)
                setting = "max_cholesky_size(10**9)"
            else:
                with gpytorch.settings.fast_pred_var():
                    rec, _ = measure(call, 5)
                setting = "fast_pred_var(), other settings default"
            var = out["var"].numpy()
            rec.update(op="predict", path=row, n=N, d=D, kind="matern52", m=NTEST, settings=setting,
                       mean_relerr=relerr(out["mean"].numpy(), rmean),
                       var_maxrelerr=float(np.max(np.abs(var - rvar) / rvar)),
                       var_medrelerr=float(np.median(np.abs(var - rvar) / rvar)),
                       var_maxabserr=float(np.max(np.abs(var - rvar))))
            emit(rec)
        elif row == "sgpr":
            xl, yl, z = T("gpy_sgpr_x.txt"), T("gpy_sgpr_y.txt").reshape(-1), T("gpy_sgpr_z.txt")
            sref = float(read_matrix(os.path.join(d, "gpy_ref_sgpr.txt")).reshape(-1)[0])
            model, lik = model_of(xl, yl, LENGTHSCALE, OUTPUTSCALE, NOISE, inducing=z)
            last = {}

            def call():
                last["v"] = mll_grad_call(model, lik, xl, yl)
                last["g"] = log_grads(model, lik, model.covar_module.base_kernel)

            rec, _ = measure(call, 3)
            rec.update(op="sgpr_mll_grad", n=SGPR_N, d=D, kind="matern52", m=SGPR_M,
                       settings="defaults", mll=last["v"], exact_mll=sref,
                       mll_relerr=abs(last["v"] - sref) / abs(sref), mll_abserr=abs(last["v"] - sref),
                       g1=last["g"][0], g2=last["g"][1], g3=last["g"][2], g4=last["g"][3], g5=last["g"][4])
            emit(rec)
        elif row in BO_ENDS:
            bo_end = BO_ENDS[row]
            bx, by, cand = T("gpy_bo_x.txt"), T("gpy_bo_y.txt").reshape(-1), T("gpy_bo_cand.txt")
            walls, cpus, final = [], [], {}
            for n in range(BO_START, bo_end + 1):
                w0, c0 = time.perf_counter(), time.process_time()
                model, lik = model_of(bx[:n], by[:n], BO_LENGTHSCALE, OUTPUTSCALE, BO_NOISE)
                model.train()
                lik.train()
                opt = torch.optim.Adam(model.parameters(), lr=BO_LR)
                mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
                for _ in range(BO_ITERS):
                    opt.zero_grad()
                    loss = -mll(model(bx[:n]), by[:n])
                    loss.backward()
                    opt.step()
                model.eval()
                with torch.no_grad():
                    post = model(cand)
                    mean, var = post.mean, post.variance
                cpus.append(time.process_time() - c0)
                walls.append(time.perf_counter() - w0)
                if n == bo_end:
                    model.train()
                    with torch.no_grad():
                        final["mll"] = float(mll(model(bx[:n]), by[:n]) * n)
                    final["ls"] = model.covar_module.base_kernel.lengthscale.reshape(-1).tolist()
                    final["noise"] = float(lik.noise)
                    final["mean_min"] = float(mean.min())
            emit({"op": "bo_step", "n": bo_end, "d": 2, "kind": "matern52",
                  "median_s": statistics.median(walls), "cpu_median_s": statistics.median(cpus),
                  "total_s": sum(walls), "repeats": len(walls),
                  "settings": "Adam lr %g, %d iterations on the raw (softplus) parameters; defaults"
                  % (BO_LR, BO_ITERS),
                  "final_mll": final["mll"], "final_lengthscale1": final["ls"][0],
                  "final_lengthscale2": final["ls"][1],
                  "final_noise": final["noise"]})
        else:
            raise SystemExit("gpy_peer.py: unknown row %s" % row)


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in ("data", "run"):
        raise SystemExit("usage: gpy_peer.py DIR data | run [exact iterative predict love sgpr bo]")
    d = sys.argv[1]
    if sys.argv[2] == "data":
        make_data(d)
    else:
        run_rows(d, sys.argv[3:] or ["exact", "iterative", "predict", "love", "sgpr", "bo"])


if __name__ == "__main__":
    main()
