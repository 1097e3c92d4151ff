#!/usr/bin/python3
"""Held-out comparison of lazytensor.gp with scikit-learn's
GaussianProcessRegressor: the same model (kernel, starting values, fixed
mean), the same data and split, fitted by each; prints both log marginal
likelihoods and held-out errors as a Markdown table (doc/gp.md keeps them).

    /usr/bin/python3 tools/gp_compare.py [co2] [diabetes] [--ard]

Needs Debian's python3-sklearn (not needed by `make test`) and a built
lazytensor.so in the repository root (`make`). The lazytensor side runs
tools/gp_compare.lua, which defines the same data sets, splits, kernels and
starting values (see its header); keep the two in step. --ard gives the
diabetes kernel one lengthscale per input on both sides.
"""
import csv
import math
import os
import subprocess
import sys
import time

import numpy as np
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel as C
from sklearn.gaussian_process.kernels import ExpSineSquared, RationalQuadratic, WhiteKernel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "examples", "data")


def read_csv(name):
    with open(os.path.join(DATA, name)) as f:
        rows = list(csv.DictReader(f))
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}


def sklearn_fit(kernel, X, y):
    """Fits on y − mean(y) (the mean fixed, as on the lazytensor side)."""
    ym = y.mean()
    start = time.process_time()
    g = GaussianProcessRegressor(kernel=kernel, alpha=0, normalize_y=False)
    g.fit(X, y - ym)
    return g, ym, time.process_time() - start


def held_out(g, ym, Xs, ys):
    """RMSE of the mean and mean NLPD (the WhiteKernel is in the predictive std)."""
    mean, sd = g.predict(Xs, return_std=True)
    mean = mean + ym
    r = ys - mean
    nlpd = np.mean(0.5 * np.log(2 * math.pi * sd**2) + r**2 / (2 * sd**2))
    return math.sqrt(np.mean(r**2)), nlpd


def co2_kernel():
    return (C(66**2) * RBF(67)
            + C(2.4**2) * RBF(90) * ExpSineSquared(1.3, 1.0, periodicity_bounds="fixed")
            + C(0.66**2) * RationalQuadratic(alpha=0.78, length_scale=1.2)
            + C(0.18**2) * RBF(0.134) + WhiteKernel(0.19**2))


def sklearn_co2():
    d = read_csv("co2.csv")
    X, y = d["time"].reshape(-1, 1), d["ppm"]
    g, _, seconds_full = sklearn_fit(co2_kernel(), X, y)
    out = {"lml_full": g.log_marginal_likelihood_value_, "fit_seconds_full": seconds_full,
           "hyper_full": str(g.kernel_)}
    train = X[:, 0] < 1991
    g, ym, seconds = sklearn_fit(co2_kernel(), X[train], y[train])
    rmse, nlpd = held_out(g, ym, X[~train], y[~train])
    out.update(n_train=int(train.sum()), n_test=int((~train).sum()),
               lml_train=g.log_marginal_likelihood_value_, fit_seconds=seconds, rmse=rmse,
               nlpd=nlpd, hyper=str(g.kernel_))
    return out


def sklearn_diabetes(ard):
    d = read_csv("diabetes.csv")
    names = [k for k in d if k != "y"]
    X, y = np.column_stack([d[k] for k in names]), d["y"]
    test = (np.arange(1, len(y) + 1) % 5) == 0
    Xt, Xs = X[~test], X[test]
    mu, sd = Xt.mean(axis=0), Xt.std(axis=0)  # population sd, as the Lua side
    Xt, Xs = (Xt - mu) / sd, (Xs - mu) / sd
    yt, ys = y[~test], y[test]
    vy = yt.var()
    lengthscale = [3.0] * len(names) if ard else 3.0
    kernel = C(vy) * RBF(lengthscale) + WhiteKernel(vy / 2)
    g, ym, seconds = sklearn_fit(kernel, Xt, yt)
    rmse, nlpd = held_out(g, ym, Xs, ys)
    return {"n_train": len(yt), "n_test": len(ys), "lml_train": g.log_marginal_likelihood_value_,
            "fit_seconds": seconds, "rmse": rmse, "nlpd": nlpd, "hyper": str(g.kernel_)}


def lazytensor(name, ard):
    env = dict(os.environ, LUA_CPATH="./?.so;;", LUA_PATH="./lua/?.lua;./lua/?/init.lua;;")
    cmd = ["lua5.4", "tools/gp_compare.lua", name] + (["--ard"] if ard else [])
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    out = {}
    for line in run.stdout.splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            out[key] = value
    if run.returncode != 0:
        out.setdefault("error", run.stderr.strip() or "exit %d" % run.returncode)
    return out


def row(what, a, b, fmt):
    def cell(v):
        return fmt % v if isinstance(v, float) else str(v)
    return "| %s | %s | %s |" % (what, cell(a), cell(b))


def table(title, lt, sk, keys):
    print("\n### %s\n" % title)
    print("| | lazytensor | scikit-learn |")
    print("|---|---|---|")
    for key, what, fmt in keys:
        print(row(what, lt.get(key, "—"), sk.get(key, "—"), fmt))
    for key in ("hyper_full", "hyper"):
        if key in lt or key in sk:
            print("\n%s, lazytensor: `%s`  \n%s, scikit-learn: `%s`"
                  % (key, lt.get(key, "—"), key, sk.get(key, "—")))
    if "error" in lt:
        print("\nlazytensor: %s" % lt["error"])


def main():
    args = sys.argv[1:]
    ard = "--ard" in args
    names = [a for a in args if not a.startswith("--")] or ["co2", "diabetes"]
    held = [("n_train", "training points", "%d"), ("n_test", "held-out points", "%d"),
            ("lml_train", "LML (training fit)", "%.3f"), ("rmse", "held-out RMSE", "%.4f"),
            ("nlpd", "held-out mean NLPD", "%.4f"), ("fit_seconds", "fit, CPU s", "%.1f")]
    for name in names:
        if name == "co2":
            table("co2 (Mauna Loa, R&W §5.4.3 kernel; test: 1991–1997)", lazytensor("co2", False),
                  sklearn_co2(), [("lml_full", "LML (fit on all 468 months)", "%.3f"),
                                  ("fit_seconds_full", "full fit, CPU s", "%.1f")] + held)
        elif name == "diabetes":
            table("diabetes (10 inputs, %s rbf; test: every 5th row)"
                  % ("ARD" if ard else "isotropic"), lazytensor("diabetes", ard),
                  sklearn_diabetes(ard), held)
        else:
            sys.exit("unknown data set %r (co2, diabetes)" % name)


if __name__ == "__main__":
    main()
