#!/usr/bin/python3
"""bench/peers/w9_peer.py: W9's peer side, torch + linear_operator's batched
operators (the engine under GPyTorch's batch GPs): 64 covariances of n = 200,
K_i = RBF(X_i) (lengthscale 0.3, X_i 200 uniform points of [0, 1]^2, the
centred squared distances of GPyTorch) + 0.01 I as one batched
AddedDiagLinearOperator(DenseLinearOperator(K {64, 200, 200}),
DiagLinearOperator(0.01 {64, 200})), built inside every timed call as
bench/w9_batch.lua builds lazytensor's: solve(Y {64, 200, 1}) and
inv_quad_logdet(Y, logdet = True) (exact: max_cholesky_size above n), against
the same work member by member in a Python loop. Same sizes and
distributions as bench/w9_batch.lua, not the same numbers (each side draws
its own); each side's answer is checked against its own dense Cholesky.

Prints one JSON line per measurement: the wall clock's median and the
process's CPU seconds per call (time.process_time), as w9_batch.lua does.
Single threaded (BENCH_THREADS). LO_SRC names the linear_operator tree (see
bench/peers/setup.sh).
"""
import json
import os
import statistics
import sys
import time

THREADS = int(os.environ.get("BENCH_THREADS", "1"))
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = str(THREADS)
HERE = os.path.dirname(os.path.abspath(__file__))
LO_SRC = os.path.abspath(os.environ.get("LO_SRC", os.path.join(HERE, "..", "..", "..",
                                                                 "linear_operator_src")))
sys.path[:0] = [os.path.join(HERE, "shims"), LO_SRC]

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(THREADS)
torch.set_default_dtype(torch.float64)

from linear_operator import settings  # noqa: E402
from linear_operator.operators import (  # noqa: E402
    AddedDiagLinearOperator,
    DenseLinearOperator,
    DiagLinearOperator,
)

BATCH, N, LENGTHSCALE, NOISE = 64, 200, 0.3, 0.01


def emit(rec):
    rec.update({"workload": "W9", "n": N, "batch": BATCH, "threads": THREADS})
    print(json.dumps(rec), flush=True)


def measure(fn, repeats=8):
    """Wall-clock median and CPU seconds per call, after one warm-up call."""
    out = fn()
    ts = []
    c0 = time.process_time()
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    cpu = (time.process_time() - c0) / repeats
    return {"median_s": statistics.median(ts), "min_s": min(ts), "cpu_s": cpu,
            "repeats": repeats}, out


def covariance(X):
    """GPyTorch's RBF: centred squared distances, then exp; + σ² I, lazily."""
    x = X / LENGTHSCALE
    x = x - x.mean(-2, keepdim=True)
    norm = x.pow(2).sum(-1, keepdim=True)
    d2 = (norm - 2.0 * x @ x.transpose(-2, -1) + norm.transpose(-2, -1)).clamp_min(0.0)
    K = torch.exp(-0.5 * d2)
    return AddedDiagLinearOperator(DenseLinearOperator(K),
                                   DiagLinearOperator(torch.full(K.shape[:-1], NOISE)))


def main():
    rng = np.random.default_rng(9)
    X = torch.tensor(rng.random((BATCH, N, 2)))
    Y = torch.tensor(rng.uniform(-1.0, 1.0, (BATCH, N, 1)))
    with settings.max_cholesky_size(10 * N):
        def batched_solve():
            return covariance(X).solve(Y)

        def loop_solve():
            return torch.stack([covariance(X[i]).solve(Y[i]) for i in range(BATCH)])

        def batched_iql():
            return covariance(X).inv_quad_logdet(Y, logdet=True)

        def loop_iql():
            out = [covariance(X[i]).inv_quad_logdet(Y[i], logdet=True) for i in range(BATCH)]
            return torch.stack([q for q, _ in out]), torch.stack([ld for _, ld in out])

        dense = covariance(X).to_dense()
        chol = torch.linalg.cholesky(dense)
        x_ref = torch.cholesky_solve(Y, chol)
        q_ref = (Y * x_ref).sum((-2, -1))
        ld_ref = 2 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
        for op, system, fn in (("solve", "linear_operator", batched_solve),
                               ("solve", "linear_operator-loop", loop_solve),
                               ("inv_quad_logdet", "linear_operator", batched_iql),
                               ("inv_quad_logdet", "linear_operator-loop", loop_iql)):
            rec, out = measure(fn)
            if op == "solve":
                err = float((out - x_ref).norm() / x_ref.norm())
            else:
                q, ld = out
                err = float(max((q - q_ref).abs().max() / q_ref.abs().max(),
                                (ld - ld_ref).abs().max() / ld_ref.abs().max()))
            rec.update({"op": op, "system": system, "relerr_vs_cholesky": err})
            emit(rec)


if __name__ == "__main__":
    main()
