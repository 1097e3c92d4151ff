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
  run    the GPyTorch rows (ROW: exact iterative predict love sgpr bo ski1d
         ski2d multitask multitask_shared spread, the default; also
         exact4000 iterative4000 bo60), one JSON line each (spread: one per
         probe count): wall and CPU medians and the errors against DIR's
         exact answers. `data ROW...` writes the exact answers of the rows
         named (ski1d, ski2d, multitask* take minutes, the others always).

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
  ski1d, ski2d     KISS-GP (issue 25): ScaleKernel(GridInterpolationKernel(
                   RBFKernel(), grid_size, num_dims)) in an ExactGP (the form of
                   GPyTorch's KISSGP_Regression tutorial), ZeroMean,
                   GaussianLikelihood; lengthscale 1, outputscale 1, noise
                   0.01; y = sum_k sin(x_k) + 0.1 N(0,1) at uniform points of
                   [0,10]^d: ski1d n = 100,000, grid 2000; ski2d n = 20,000,
                   grid 100x100. One MLL + backward under the defaults (n > 800:
                   mBCG + SLQ, 10 probes). The exact answer is each system's
                   own SKI model, W K_grid W^T + s2 I with W the cubic (Keys,
                   a = -1/2) weights on that system's grid (GPyTorch: spacing
                   (max-min)/(m-4.02) padded 2.01 steps, then create_grid's
                   extension; lazytensor: step (max-min)/(m-3) from min-step),
                   its MLL by Woodbury on the grid (G = S S, S = G^(1/2) by
                   eigh, M = I + S W^T W S / s2, one Cholesky of M) and its
                   gradient by central differences of that (h = 1e-4 in the
                   log parameters).
  multitask,       ICM, 3 tasks x 1000 points of [0,1]: MultitaskKernel(RBFKernel(),
  multitask_shared num_tasks=3, rank=1), MultitaskMean(ZeroMean()),
                   MultitaskGaussianLikelihood(num_tasks=3) (its users'
                   tutorial form; per-task noises added to a global one);
                   multitask_shared: has_task_noise=False (one noise, lazytensor's
                   eigen rule). Lengthscale 0.2, W = (1, 0.5, -0.8), v = 0.1,
                   noise 0.01, task noises (0.01, 0.02, 0.03). One MLL (times n*t)
                   + backward, defaults. Exact answer: the dense 3000x3000
                   B (x) K + noise by Cholesky, gradient 1/2 tr((aa^T - Ky^-1) dKy).
  spread           the stochastic estimator's spread: the "iterative" problem
                   (n = 2000) under the defaults with num_trace_samples(P),
                   P = 10 and 64, torch.manual_seed(s) for s = 1..20: per P the
                   standard deviation over the 20 seeds of the MLL and of the
                   gradient's relative error, their medians and the median time.
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


# --------------------------------------------- KISS-GP and ICM references --

SKI_ROWS = {"ski1d": (100000, 1, 2000, 2026120401), "ski2d": (20000, 2, 100, 2026120402)}
SKI_LS, SKI_V, SKI_NOISE = 1.0, 1.0, 0.01
MT_N, MT_T, MT_SEED = 1000, 3, 2026120403
MT_LS, MT_W, MT_V = 0.2, [1.0, 0.5, -0.8], [0.1, 0.1, 0.1]
MT_NOISE, MT_TASK_NOISES = 0.01, [0.01, 0.02, 0.03]
SPREAD_SEEDS, SPREAD_PROBES = 20, (10, 64)
FD_STEP = 1e-4  # central differences of the exact SKI MLL, in the log parameters


def keys_cubic(t):
    """Keys' cubic convolution weight (a = -1/2) at distance |t| in grid steps."""
    t = np.abs(t)
    return np.where(t <= 1, (1.5 * t - 2.5) * t * t + 1,
                    np.where(t < 2, ((-0.5 * t + 2.5) * t - 4) * t + 2, 0.0))


def grid_lazytensor(xk, m):
    """gp/ski.lua's axis: m points from min - h, h = (max - min)/(m - 3)."""
    lo, hi = float(xk.min()), float(xk.max())
    h = (hi - lo) / (m - 3)
    return lo - h, h


def grid_gpytorch(xk, m):
    """GridInterpolationKernel's dynamic grid: spacing (max - min)/(m - 4.02),
    bounds padded by 2.01 spacings, then create_grid's extension by one
    (bound width)/(m - 2) on each side, m points by linspace."""
    lo, hi = float(xk.min()), float(xk.max())
    sp = (hi - lo) / (m - 4.02)
    b0, b1 = lo - 2.01 * sp, hi + 2.01 * sp
    gd = (b1 - b0) / (m - 2)
    g = np.linspace(b0 - gd, b1 + gd, m)
    return float(g[0]), float(g[1] - g[0])


def interp_matrix(x, axes, m):
    """W (n x m^d, scipy CSR): per axis the 4 cubic weights at grid indices
    floor(u) - 1 .. floor(u) + 2, u = (x - g0)/h; dimension 1 slowest."""
    import scipy.sparse as sp
    n, d = x.shape
    cols = np.zeros((n, 1), dtype=np.int64)
    vals = np.ones((n, 1))
    for k in range(d):
        g0, h = axes[k]
        u = (x[:, k] - g0) / h
        f = np.minimum(np.floor(u), m - 3)  # the largest point at u = m - 2: s = 1
        s = u - f
        idx = f[:, None].astype(np.int64) + np.arange(-1, 3)[None, :]
        w = keys_cubic(np.stack([s + 1, s, 1 - s, 2 - s], axis=1))
        assert idx.min() >= 0 and idx.max() < m, "a point outside the grid's interior"
        cols = (cols[:, :, None] * m + idx[:, None, :]).reshape(n, -1)
        vals = (vals[:, :, None] * w[:, None, :]).reshape(n, -1)
    rows = np.repeat(np.arange(n), cols.shape[1])
    return sp.csr_matrix((vals.ravel(), (rows, cols.ravel())), shape=(n, m ** d))


def kron_apply(factors, X):
    """(F_1 (x) ... (x) F_d) X for square factors, X of m^d rows."""
    ms = [f.shape[0] for f in factors]
    k = X.shape[1]
    Y = X.reshape(*ms, k)
    for ax, f in enumerate(factors):
        Y = np.moveaxis(np.tensordot(f, Y, axes=(1, ax)), 0, ax)
    return Y.reshape(-1, k)


class SkiExact:
    """The exact MLL of K = v W (G_1 (x) ... (x) G_d) W^T + s2 I, G_k the rbf
    on axis k's grid, by Woodbury on the grid: with S_k = G_k^(1/2)
    (eigh, negative rounding eigenvalues set to 0), S = (x) S_k and
    M = I + v S A S / s2 (A = W^T W): y^T Ky^-1 y = (y.y - v |L^-1 S b|^2 / s2)/s2
    (b = W^T y, M = L L^T) and log det Ky = n log s2 + log det M."""

    def __init__(self, x, y, axes, m):
        self.W = interp_matrix(x, axes, m)
        self.y, self.n, self.m, self.h = y, len(y), m, [a[1] for a in axes]
        self.A = (self.W.T @ self.W).tocsr()
        self.b = self.W.T @ y
        self._ls, self._SAS = None, None

    def _roots(self, ls):
        out = []
        for h in self.h:
            lag = np.arange(self.m) * h
            G = np.exp(-0.5 * ((lag[:, None] - lag[None, :]) / ls) ** 2)
            lam, Q = np.linalg.eigh(G)
            out.append((Q * np.sqrt(np.maximum(lam, 0))) @ Q.T)
        return out

    def mll(self, ls, v, noise):
        if self._ls != ls:
            S = self._roots(ls)
            self._Sb = kron_apply(S, self.b[:, None])[:, 0]
            Sfull = S[0] if len(S) == 1 else np.kron(S[0], S[1])
            AS = np.asarray(self.A @ Sfull)
            del Sfull
            self._SAS = kron_apply(S, AS)
            del AS
            self._ls = ls
        M = self._SAS * (v / noise)
        M[np.diag_indices_from(M)] += 1.0
        L = sla.cholesky(M, lower=True, overwrite_a=True, check_finite=False)
        c = sla.solve_triangular(L, math.sqrt(v) * self._Sb, lower=True, check_finite=False)
        logdet = self.n * math.log(noise) + 2 * np.log(np.diag(L)).sum()
        del L, M
        quad = (self.y @ self.y - (c @ c) / noise) / noise
        return float(-0.5 * quad - 0.5 * logdet - 0.5 * self.n * math.log(2 * math.pi))

    def mll_grad(self, ls, v, noise, h=FD_STEP):
        """The MLL and its central-difference gradient in (log l, log v, log s2)."""
        theta = np.log([ls, v, noise])
        f0 = self.mll(ls, v, noise)
        g = [0.0, 0.0, 0.0]
        for q in (2, 1, 0):  # s2 and v at the current l first: they reuse S A S
            vals = []
            for sgn in (1, -1):
                t = theta.copy()
                t[q] += sgn * h
                vals.append(self.mll(*np.exp(t)))
            g[q] = (vals[0] - vals[1]) / (2 * h)
        return f0, g


def ski_data(x, y, m):
    """Exact answers of both systems' SKI models of (x, y): [mll, dlog l, dlog v, dlog s2]."""
    out = {}
    for name, grid in (("lazytensor", grid_lazytensor), ("gpytorch", grid_gpytorch)):
        axes = [grid(x[:, k], m) for k in range(x.shape[1])]
        ex = SkiExact(x, y, axes, m)
        mll, g = ex.mll_grad(SKI_LS, SKI_V, SKI_NOISE)
        out[name] = [mll] + g
        del ex
    return out


def rbf_gram(x, ls):
    r2 = ((x[:, None, :] - x[None, :, :]) / ls) ** 2
    return np.exp(-0.5 * r2.sum(-1)), r2.sum(-1)


def multitask_exact(x, Y, ls, W, v, noise, task_noises):
    """ICM's MLL and gradient by a dense Cholesky of Ky = B (x) K + diag(noise
    + tau_a) (task-major: entry (a, i) at a*n + i), B = W W^T + diag(v);
    gradient order: log l, W (t), log v (t), log noise, log tau (t)."""
    n, t = Y.shape
    K, r2 = rbf_gram(x, ls)
    Wm = np.asarray(W, dtype=np.float64).reshape(t, 1)
    B = Wm @ Wm.T + np.diag(v)
    dvec = np.repeat(noise + np.asarray(task_noises, dtype=np.float64), n)
    Ky = np.kron(B, K) + np.diag(dvec)
    yv = Y.T.reshape(-1)
    c = sla.cho_factor(Ky, lower=True)
    a = sla.cho_solve(c, yv)
    logdet = 2 * np.log(np.diag(c[0])).sum()
    mll = -0.5 * yv @ a - 0.5 * logdet - 0.5 * n * t * math.log(2 * math.pi)
    G = (np.outer(a, a) - sla.cho_solve(c, np.eye(n * t))).reshape(t, n, t, n)
    GK = np.einsum("aibj,ij->ab", G, K)
    GdK = np.einsum("aibj,ij->ab", G, K * r2)  # dK/dlog l = K * r^2/l^2
    g = [0.5 * float((B * GdK).sum())]
    g += list((GK @ Wm).reshape(-1))  # dMLL/dB = GK/2, B symmetric: dW = GK W
    g += [0.5 * GK[q, q] * v[q] for q in range(t)]
    g.append(0.5 * noise * float(np.einsum("aiai->", G)))
    g += [0.5 * task_noises[q] * float(np.einsum("ii->", G[q, :, q, :])) for q in range(t)]
    return float(mll), [float(z) for z in g]


def multitask_problem(d):
    rng = np.random.default_rng(MT_SEED)
    x = rng.random((MT_N, 1))
    s, c = np.sin(2 * math.pi * x[:, 0]), np.cos(4 * math.pi * x[:, 0])
    F = np.stack([s, 0.5 * s + 0.3 * c, -0.8 * s + 0.2 * x[:, 0]], axis=1)
    Y = F + 0.1 * rng.standard_normal(F.shape)
    write_matrix(os.path.join(d, "gpy_mt_x.txt"), x)
    write_matrix(os.path.join(d, "gpy_mt_y.txt"), Y)
    for name, tn in (("task_noise", MT_TASK_NOISES), ("shared_noise", [0.0] * MT_T)):
        mll, g = multitask_exact(x, Y, MT_LS, MT_W, MT_V, MT_NOISE, tn)
        if name == "shared_noise":
            g = g[:-MT_T]  # no task noises in that model
        write_matrix(os.path.join(d, "gpy_mt_ref_%s.txt" % name), [mll] + g)


def ski_problem(d, row):
    """The data of row ski1d or ski2d and both systems' exact answers; kept
    when already in d (the same seed makes the same data: delete the files
    gpy_ROW_* to recompute)."""
    n, dim, m, seed = SKI_ROWS[row]
    refs = [os.path.join(d, "gpy_%s_ref_%s.txt" % (row, name)) for name in ("lazytensor", "gpytorch")]
    if all(os.path.exists(p) for p in refs):
        return
    rng = np.random.default_rng(seed)
    x = rng.random((n, dim)) * 10
    y = np.sin(x).sum(1) + 0.1 * rng.standard_normal(n)
    write_matrix(os.path.join(d, "gpy_%s_x.txt" % row), x)
    write_matrix(os.path.join(d, "gpy_%s_y.txt" % row), y)
    for name, ref in ski_data(x, y, m).items():
        write_matrix(os.path.join(d, "gpy_%s_ref_%s.txt" % (row, name)), ref)


def branin01(u):
    x1, x2 = 15 * u[:, 0] - 5, 15 * u[:, 1]
    b, cc, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    f = (x2 - b * x1 ** 2 + cc * x1 - 6) ** 2 + 10 * (1 - t) * np.cos(x1) + 10
    return (f - 54.3) / 51.0


def make_data(d, rows=()):
    """The base problems always; ski1d, ski2d and multitask* (each its own
    random stream) when named in rows."""
    os.makedirs(d, exist_ok=True)
    for row in rows:
        if row in SKI_ROWS:
            ski_problem(d, row)
    if any(r.startswith("multitask") for r in rows):
        multitask_problem(d)
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

    def raw_to_log(module, name):
        """dL/dlog theta of the positive parameter `name` of module, from its raw
        parameter's gradient (softplus, plus a lower bound: dtheta/draw = sigmoid(raw))."""
        raw = getattr(module, "raw_" + name)
        th = getattr(module, name).detach().reshape(-1)
        return (raw.grad.reshape(-1) * th / torch.sigmoid(raw.detach().reshape(-1))).tolist()

    def spread_record(probes, vals, gerrs, walls, cpus, mref, settings):
        return {"op": "spread", "path": "probes%d" % probes, "n": N, "d": D, "kind": "matern52",
                "probes": probes, "seeds": len(vals), "settings": settings,
                "median_s": statistics.median(walls), "cpu_median_s": statistics.median(cpus),
                "repeats": len(vals), "mll_mean": statistics.mean(vals), "exact_mll": mref,
                "mll_sd": statistics.stdev(vals),
                "mll_abserr": statistics.median([abs(v - mref) for v in vals]),
                "mll_bias": statistics.mean(vals) - mref,
                "grad_relerr": statistics.median(gerrs), "grad_relerr_sd": statistics.stdev(gerrs),
                "grad_relerr_max": max(gerrs)}

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
        elif row in SKI_ROWS:
            n_row, dim, m, _ = SKI_ROWS[row]
            xs_, ys_ = T("gpy_%s_x.txt" % row), T("gpy_%s_y.txt" % row).reshape(-1)
            ref = read_matrix(os.path.join(d, "gpy_%s_ref_gpytorch.txt" % row)).reshape(-1)
            lik = gpytorch.likelihoods.GaussianLikelihood()
            lik.noise = SKI_NOISE
            kernel = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.GridInterpolationKernel(gpytorch.kernels.RBFKernel(), grid_size=m,
                                                         num_dims=dim))
            kernel.base_kernel.base_kernel.lengthscale = SKI_LS
            kernel.outputscale = SKI_V
            model = Exact(xs_, ys_, lik, kernel)
            vals, merrs, gerrs = [], [], []

            def call():
                v = mll_grad_call(model, lik, xs_, ys_)
                g = [raw_to_log(kernel.base_kernel.base_kernel, "lengthscale")[0],
                     raw_to_log(kernel, "outputscale")[0], raw_to_log(lik.noise_covar, "noise")[0]]
                vals.append(v)
                merrs.append(abs(v - ref[0]))
                gerrs.append(relerr(g, ref[1:]))

            torch.manual_seed(1)
            rec, _ = measure(call, 3)
            rec.update(op="ski_mll_grad", path="ski", n=n_row, d=dim, kind="rbf", grid=m,
                       settings="defaults (max_cholesky_size 800: mBCG + SLQ, 10 probes, precond rank 15)",
                       mll=vals[-1], exact_mll=float(ref[0]), mll_abserr=statistics.median(merrs),
                       mll_relerr=statistics.median(merrs) / abs(ref[0]),
                       grad_relerr=statistics.median(gerrs), mll_sd_calls=statistics.stdev(vals),
                       calls=len(vals))
            emit(rec)
        elif row in ("multitask", "multitask_shared"):
            shared = row == "multitask_shared"
            xm, Ym = T("gpy_mt_x.txt"), T("gpy_mt_y.txt")
            ref = read_matrix(os.path.join(d, "gpy_mt_ref_%s.txt"
                                           % ("shared_noise" if shared else "task_noise"))).reshape(-1)

            class MT(gpytorch.models.ExactGP):
                def __init__(self, x, y, lik):
                    super().__init__(x, y, lik)
                    self.mean_module = gpytorch.means.MultitaskMean(gpytorch.means.ZeroMean(), num_tasks=MT_T)
                    self.covar_module = gpytorch.kernels.MultitaskKernel(gpytorch.kernels.RBFKernel(),
                                                                         num_tasks=MT_T, rank=1)

                def forward(self, x):
                    return gpytorch.distributions.MultitaskMultivariateNormal(self.mean_module(x),
                                                                              self.covar_module(x))

            lik = gpytorch.likelihoods.MultitaskGaussianLikelihood(num_tasks=MT_T, has_task_noise=not shared)
            lik.noise = MT_NOISE
            if not shared:
                lik.task_noises = torch.tensor(MT_TASK_NOISES)
            model = MT(xm, Ym, lik)
            task = model.covar_module.task_covar_module
            model.covar_module.data_covar_module.lengthscale = MT_LS
            task.covar_factor.data = torch.tensor(MT_W).reshape(MT_T, 1)
            task.var = torch.tensor(MT_V)
            last, merrs, gerrs = {}, [], []

            def call():
                model.train()
                lik.train()
                model.zero_grad()
                mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
                v = mll(model(xm), Ym) * Ym.numel()  # divided by n*t
                v.backward()
                g = raw_to_log(model.covar_module.data_covar_module, "lengthscale")
                g += task.covar_factor.grad.reshape(-1).tolist()
                g += raw_to_log(task, "var") + raw_to_log(lik, "noise")
                if not shared:
                    g += raw_to_log(lik, "task_noises")
                last["v"] = float(v)
                merrs.append(abs(float(v) - ref[0]))
                gerrs.append(relerr(g, ref[1:]))

            rec, _ = measure(call, 5)
            rec.update(op="multitask_mll_grad", path="shared_noise" if shared else "task_noise", n=MT_N, d=1,
                       kind="rbf", tasks=MT_T, rank=1,
                       settings="defaults; MultitaskGaussianLikelihood(num_tasks=3%s)"
                       % (", has_task_noise=False" if shared else ""),
                       mll=last["v"], exact_mll=float(ref[0]), mll_abserr=statistics.median(merrs),
                       mll_relerr=statistics.median(merrs) / abs(ref[0]), grad_relerr=statistics.median(gerrs))
            emit(rec)
        elif row == "spread":
            model, lik = model_of(x, y, LENGTHSCALE, OUTPUTSCALE, NOISE)
            for probes in SPREAD_PROBES:
                vals, gerrs, walls, cpus = [], [], [], []
                with gpytorch.settings.num_trace_samples(probes):
                    torch.manual_seed(1000)
                    mll_grad_call(model, lik, x, y)  # warm-up
                    for seed in range(1, SPREAD_SEEDS + 1):
                        torch.manual_seed(seed)
                        w0, c0 = time.perf_counter(), time.process_time()
                        v = mll_grad_call(model, lik, x, y)
                        cpus.append(time.process_time() - c0)
                        walls.append(time.perf_counter() - w0)
                        vals.append(v)
                        gerrs.append(relerr(log_grads(model, lik, model.covar_module), gref))
                emit(spread_record(probes, vals, gerrs, walls, cpus, mref,
                                   "defaults, num_trace_samples(%d), torch.manual_seed(1..%d)"
                                   % (probes, SPREAD_SEEDS)))
        else:
            raise SystemExit("gpy_peer.py: unknown row %s" % row)


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in ("data", "run"):
        raise SystemExit("usage: gpy_peer.py DIR data [ROW...] | run [ROW...] (see the docstring)")
    d = sys.argv[1]
    if sys.argv[2] == "data":
        make_data(d, sys.argv[3:])
    else:
        run_rows(d, sys.argv[3:] or ["exact", "iterative", "predict", "love", "sgpr", "bo", "ski1d",
                                     "ski2d", "multitask", "multitask_shared", "spread"])


if __name__ == "__main__":
    main()
