#!/usr/bin/python3
"""bench/peers/peers.py DIR W5 | W8 n d kind path: the peer's side of the
side-by-side benchmark (bench/peers/run.sh runs it after lt_side.lua, which
wrote the problem and its exact answers into DIR).

  W5  linear_operator's CG solve and SLQ log det of
      AddedDiagLinearOperator(DenseLinearOperator(K), DiagLinearOperator(σ²))
      with its defaults (rank-15 pivoted-Cholesky preconditioner), and
      SciPy's dense Cholesky solve of K + σ²I.
  W8  one GP marginal log-likelihood and its gradient the way GPyTorch
      computes them: the kernel matrix from log-parameters in torch
      (GPyTorch's centred squared distances), Ky = K + σ²I as an
      AddedDiagLinearOperator, inv_quad_logdet, torch autograd. path
      "exact" sets max_cholesky_size above n, "iterative" to 0 (mBCG + SLQ
      with linear_operator's defaults).

Prints one JSON line per measurement (wall-clock median over repeats after
one warm-up call) with the accuracy against DIR's exact answers. Runs single
threaded unless BENCH_THREADS says otherwise (torch and OpenBLAS alike).
LO_SRC names the linear_operator source tree (see setup.sh).
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
LO_SRC = os.path.abspath(os.environ.get("LO_SRC", os.path.join(HERE, "linear_operator_src")))
sys.path[:0] = [os.path.join(HERE, "shims"), LO_SRC]

import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(THREADS)
torch.set_default_dtype(torch.float64)

from linear_operator import settings  # noqa: E402
from linear_operator.operators import (  # noqa: E402
    AddedDiagLinearOperator,
    DenseLinearOperator,
    DiagLinearOperator,
)
from linear_operator.operators import dense_linear_operator as _dense_module  # noqa: E402

SYSTEM = "linear_operator"
# Peer runs estimated to need more than this are reported "infeasible".
MEMORY_LIMIT = float(os.environ.get("BENCH_PEER_MEMORY_GB", "8")) * 2**30
# The problems' fixed values (problems.lua).
W5 = {"n": 4000, "lengthscale": 0.1, "variance": 1.0, "noise": 1e-2}
W8 = {"lengthscale": 1.0, "variance": 1.0, "noise": 0.1}


def emit(rec):
    rec.setdefault("system", SYSTEM)
    rec["threads"] = THREADS
    print(json.dumps(rec, ensure_ascii=False), flush=True)


def measure(fn, repeats):
    """Median and minimum wall time of repeats calls after one warm-up call."""
    out = fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(ts), "min_s": min(ts), "repeats": len(ts)}, out


def relerr(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def count_products(fn):
    """Products with the dense matrix during one call of fn (≈ CG steps)."""
    original = _dense_module.DenseLinearOperator._matmul
    count = [0]

    def counted(self, rhs):
        count[0] += 1
        return original(self, rhs)

    _dense_module.DenseLinearOperator._matmul = counted
    try:
        fn()
    finally:
        _dense_module.DenseLinearOperator._matmul = original
    return count[0]


# ----------------------------------------------------------------------- W5
def w5(directory):
    n = W5["n"]
    raw = np.fromfile(os.path.join(directory, "w5.bin"), dtype="<f8")
    x, b = raw[:n], raw[n:]
    ref = np.fromfile(os.path.join(directory, "w5_ref.bin"), dtype="<f8")
    xref, ldref = ref[:n], ref[n]
    K = W5["variance"] * np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / W5["lengthscale"] ** 2)
    Kn = K + W5["noise"] * np.eye(n)
    Kt, bt = torch.from_numpy(K), torch.from_numpy(b)
    noise = torch.full((n,), W5["noise"])

    def op():
        return AddedDiagLinearOperator(DenseLinearOperator(Kt), DiagLinearOperator(noise))

    common = {"workload": "W5", "n": n, "cg_tolerance": settings.cg_tolerance.value(),
              "preconditioner_size": settings.max_preconditioner_size.value()}
    with settings.max_cholesky_size(0):
        def solve():
            torch.manual_seed(0)
            return op().solve(bt)

        steps = count_products(solve)
        rec, out = measure(solve, 5)
        rec.update(common, op="solve_cg", relerr_vs_exact=relerr(out.numpy(), xref),
                   rel_residual=relerr(Kn @ out.numpy(), b) * 1.0, dense_products=steps)
        emit(rec)
        seeds, errs = iter(range(100, 200)), []

        def logdet():
            torch.manual_seed(next(seeds))
            v = float(op().logdet())
            errs.append(abs(v - ldref) / abs(ldref))
            return v

        steps = count_products(logdet)
        errs.clear()
        rec, out = measure(logdet, 15)  # 15 calls, new probes each: the median error
        rec.update(common, op="logdet_slq", value=out, exact_value=float(ldref),
                   relerr_vs_exact=statistics.median(errs), relerr_vs_exact_max=max(errs),
                   dense_products=steps, num_trace_samples=settings.num_trace_samples.value())
        emit(rec)

    def exact():
        factor = scipy.linalg.cho_factor(Kn, lower=True, check_finite=False)
        return scipy.linalg.cho_solve(factor, b, check_finite=False)

    rec, out = measure(exact, 3)
    rec.update(workload="W5", n=n, op="solve_exact", system="scipy",
               method="cho_factor + cho_solve", relerr_vs_exact=relerr(out, xref))
    emit(rec)


# ----------------------------------------------------------------------- W8
def sq_dist(x):
    """GPyTorch's sq_dist(x, x): centred, ‖x_i‖² + ‖x_j‖² − 2 x_iᵀx_j, ≥ 0."""
    x = x - x.mean(-2, keepdim=True)
    norm = x.pow(2).sum(-1, keepdim=True)
    return (norm - 2.0 * x @ x.transpose(-2, -1) + norm.transpose(-2, -1)).clamp_min(0.0)


def kernel_matrix(kind, X, lengthscale, variance):
    d2 = sq_dist(X / lengthscale)
    if kind == "rbf":
        return variance * torch.exp(-0.5 * d2)
    r = d2.clamp_min(1e-30).sqrt()  # GPyTorch's MaternKernel (nu = 5/2)
    a = math.sqrt(5.0) * r
    return variance * (1.0 + a + a.pow(2) / 3.0) * torch.exp(-a)


def mll_and_grad(kind, X, y, p):
    lengthscale, variance, noise = p.exp()
    n = y.shape[0]
    K = kernel_matrix(kind, X, lengthscale, variance)
    Ky = AddedDiagLinearOperator(DenseLinearOperator(K), DiagLinearOperator(noise.expand(n)))
    iq, ld = Ky.inv_quad_logdet(inv_quad_rhs=y[:, None], logdet=True)
    v = -0.5 * (iq + ld + n * math.log(2 * math.pi))
    v.backward()
    g = p.grad.clone()
    p.grad = None
    return float(v), g.tolist()


def read_ref(path):
    with open(path) as f:
        v = [float(w) for w in f.read().split()]
    return v[0], v[1:4]


def numpy_reference(kind, X, y):
    """The exact MLL and gradient by NumPy/SciPy, to check DIR's answers."""
    W = W8
    Xs = X / W["lengthscale"]
    d2 = np.maximum(((Xs[:, None, :] - Xs[None, :, :]) ** 2).sum(-1), 0.0)
    if kind == "rbf":
        K = np.exp(-0.5 * d2)
        dK = K * d2
    else:
        a = np.sqrt(5.0 * d2)
        e = np.exp(-a)
        K, dK = (1 + a + a * a / 3) * e, a * a * (1 + a) / 3 * e
    K, dK = W["variance"] * K, W["variance"] * dK
    n = len(y)
    Ky = K + W["noise"] * np.eye(n)
    c = scipy.linalg.cho_factor(Ky, lower=True)
    alpha = scipy.linalg.cho_solve(c, y)
    logdet = 2 * np.log(np.diag(c[0])).sum()
    mll = -0.5 * (y @ alpha + logdet + n * math.log(2 * math.pi))
    Wm = np.outer(alpha, alpha) - scipy.linalg.cho_solve(c, np.eye(n))
    return mll, [0.5 * (Wm * dK).sum(), 0.5 * (Wm * K).sum(), 0.5 * W["noise"] * np.trace(Wm)]


def w8(directory, n, d, kind, path):
    rec = {"workload": "W8", "op": "mll_grad", "n": n, "d": d, "kind": kind, "path": path}
    # the n×n tensors autograd keeps (distances, kernel, their gradients):
    # about 6 of them, and Cholesky's factor and solves on the exact path
    buffers = 6 if path == "iterative" else 10
    need = buffers * 8.0 * n * n
    if need > MEMORY_LIMIT:
        rec.update(status="infeasible", skipped="needs about %d n×n buffers (%.0f GB) > %.0f GB"
                   % (buffers, need / 2**30, MEMORY_LIMIT / 2**30))
        emit(rec)
        return
    try:
        w8_measure(directory, rec, n, d, kind, path)
    except Exception as e:  # reported with the problem's name
        rec.update(status="error", skipped="%s: %s" % (type(e).__name__, str(e)[:300]))
        emit(rec)


def w8_measure(directory, rec, n, d, kind, path):
    name = "w8_%dd_%d" % (d, n)
    raw = np.fromfile(os.path.join(directory, name + ".bin"), dtype="<f8")
    X, y = raw[: n * d].reshape(n, d), raw[n * d:]
    mref, gref = read_ref(os.path.join(directory, "w8_%s_%dd_%d.ref" % (kind, d, n)))
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    p = torch.tensor([math.log(W8["lengthscale"]), math.log(W8["variance"]),
                      math.log(W8["noise"])], requires_grad=True)
    big = 10**9 if path == "exact" else 0
    seeds = iter(range(1, 1000))
    mll_errs, grad_errs = [], []
    has_grad = all(x == x for x in gref)

    def call():
        torch.manual_seed(next(seeds))
        with settings.max_cholesky_size(big):
            v, g = mll_and_grad(kind, Xt, yt, p)
        mll_errs.append(abs(v - mref) / abs(mref))
        if has_grad:
            grad_errs.append(relerr(g, gref))
        return v, g

    rec_t, (v, g) = measure(call, 5 if n <= 1000 else 3 if n <= 4000 else 1)
    rec.update(rec_t)
    # medians over the calls (new probes each call on the iterative path)
    rec.update(mll=v, g1=g[0], g2=g[1], g3=g[2], exact_mll=mref,
               mll_relerr=statistics.median(mll_errs), cg_tolerance=settings.cg_tolerance.value(),
               preconditioner_size=settings.max_preconditioner_size.value())
    if has_grad:
        rec["grad_relerr"] = statistics.median(grad_errs)
    if n <= 1000:  # the reference itself, by another program
        mnp, gnp = numpy_reference(kind, X, y)
        rec["reference_check"] = max(abs(mnp - mref) / abs(mref), relerr(gnp, gref))
    emit(rec)


def main():
    directory, which = sys.argv[1], sys.argv[2]
    try:
        if which == "W5":
            w5(directory)
        else:
            n, d, kind, path = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
            w8(directory, n, d, kind, path)
    except Exception as e:  # reported, never silently dropped
        emit({"workload": which, "op": "*", "n": 0, "status": "error",
              "skipped": "%s: %s" % (type(e).__name__, str(e)[:300])})


if __name__ == "__main__":
    main()
