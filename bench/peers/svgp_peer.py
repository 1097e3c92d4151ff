#!/usr/bin/python3
"""bench/peers/svgp_peer.py DIR data | elbo M | step M | big: workload SVGP
of bench/peers/run.sh, GPyTorch 1.12's SVGP as its users write it, side by
side with lazytensor's gp.variational (bench/peers/svgp_side.lua).

The model: ApproximateGP with VariationalStrategy(learn_inducing_locations=
True) over a CholeskyVariationalDistribution (VariationalStrategy whitens),
ConstantMean, ScaleKernel(RBFKernel), a GaussianLikelihood,
VariationalELBO(num_data = n), float64. GPyTorch adds its float64 jitter
1e-6 (settings.variational_cholesky_jitter) to Kzz and to
k(x, x) in q(f); lazytensor's side passes jitter = 1e-6, data_jitter = 1e-6.

  data    writes DIR/svgp_x.txt, svgp_y.txt (n = 20000 points in [0, 10]^2,
          y = sin x1 cos 0.7x2 + N(0, 0.1^2)), svgp_xs.txt, svgp_fs.txt
          (2000 test points and f there) and, for m = 100 and 500, the given
          parameters svgp_m<M>_{Z,mu,L,hyper}.txt (Z: m rows of x moved by
          N(0, 0.1^2); mu ~ N(0, 0.3^2); L lower triangular, diagonal
          U(0.3, 0.8), below it N(0, 0.02^2); hyper = lengthscale 1.3,
          outputscale 0.8, noise 0.05, constant 0.1), plain text "%.17g".
  elbo M  GPyTorch's ELBO at those parameters, multiplied by n (lazytensor's
          scale: n/|B| sum E log p - KL), on all rows and on rows 1..1024,
          and the batch bound's gradient with respect to mu, L's lower
          triangle, Z, the lengthscale, outputscale, noise and constant (the
          raw parameters' gradients divided by softplus' slope), written to
          svgp_m<M>_gpytorch_grad.txt (and both bounds to
          svgp_m<M>_gpytorch_elbo.txt); one JSON line.
  step M  CPU time a minibatch step (batch 1024, Adam lr 0.01: the bound, its
          backward and the update) from the given parameters, 3 epochs of
          a fresh permutation each; the median over epochs of the epoch's
          CPU / its steps. One thread.
  big     10^6 points of the same function (written to svgp_big_*.txt for
          lazytensor's side when absent), m = 500 (the first 500 rows), q at
          the prior, lengthscale 1, outputscale 1, noise 0.1, constant 0,
          one epoch of batch 1024, Adam lr 0.01: the epoch's CPU time and
          the RMSE of the predictive mean against f at 2000 test points.
"""
import json
import os
import sys
import time

THREADS = int(os.environ.get("BENCH_THREADS", "1"))
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = str(THREADS)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.abspath(os.environ.get("GPYT_SRC", os.path.join(HERE, "../../../gpytorch_src"))),
                os.path.abspath(os.environ.get("LO_SRC", os.path.join(HERE, "../../../linear_operator_src"))),
                os.path.join(HERE, "shims")]

import numpy as np  # noqa: E402

N, NTEST, BATCH, LR = 20000, 2000, 1024, 0.01
N_BIG, M_BIG = 10 ** 6, 500
HYPER = {"lengthscale": 1.3, "outputscale": 0.8, "noise": 0.05, "constant": 0.1}
JITTER = 1e-6


def emit(rec):
    rec.setdefault("system", "gpytorch")
    rec["workload"] = "SVGP"
    rec["threads"] = THREADS
    print(json.dumps(rec, ensure_ascii=False), flush=True)


def write_matrix(path, a):
    a = np.asarray(a, dtype=np.float64)
    if a.ndim < 2:
        a = a.reshape(-1, 1)
    with open(path, "w") as f:
        f.write("%d %d\n" % a.shape)
        for row in a:
            f.write(" ".join("%.17g" % v for v in row) + "\n")


def read_matrix(path):
    with open(path) as f:
        r, c = (int(t) for t in f.readline().split())
        a = np.array(f.read().split(), dtype=np.float64).reshape(r, c)
    return a[:, 0] if c == 1 else a


def truth(x):
    return np.sin(x[:, 0]) * np.cos(0.7 * x[:, 1])


def points(rng, n):
    x = rng.uniform(0, 10, size=(n, 2))
    return x, truth(x) + 0.1 * rng.standard_normal(n)


def data(d):
    rng = np.random.default_rng(27)
    x, y = points(rng, N)
    xs = rng.uniform(0, 10, size=(NTEST, 2))
    write_matrix(os.path.join(d, "svgp_x.txt"), x)
    write_matrix(os.path.join(d, "svgp_y.txt"), y)
    write_matrix(os.path.join(d, "svgp_xs.txt"), xs)
    write_matrix(os.path.join(d, "svgp_fs.txt"), truth(xs))
    for m in (100, 500):
        z = x[rng.choice(N, m, replace=False)] + 0.1 * rng.standard_normal((m, 2))
        mu = 0.3 * rng.standard_normal(m)
        L = np.tril(0.02 * rng.standard_normal((m, m)), -1) + np.diag(rng.uniform(0.3, 0.8, m))
        pre = os.path.join(d, "svgp_m%d_" % m)
        write_matrix(pre + "Z.txt", z)
        write_matrix(pre + "mu.txt", mu)
        write_matrix(pre + "L.txt", L)
        write_matrix(pre + "hyper.txt", [HYPER[k] for k in ("lengthscale", "outputscale", "noise", "constant")])
    emit({"op": "data", "n": N, "dir": d})


def gpytorch_model(z, hyper):
    import torch
    import gpytorch

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, inducing):
            q = gpytorch.variational.CholeskyVariationalDistribution(inducing.size(0))
            strategy = gpytorch.variational.VariationalStrategy(self, inducing, q, learn_inducing_locations=True)
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = SVGP(torch.as_tensor(z, dtype=torch.float64))
    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    model.double()
    likelihood.double()
    model.covar_module.base_kernel.lengthscale = hyper["lengthscale"]
    model.covar_module.outputscale = hyper["outputscale"]
    likelihood.noise = hyper["noise"]
    model.mean_module.constant.data.fill_(hyper["constant"])
    return model, likelihood


def set_q(model, mu, L):
    import torch
    q = model.variational_strategy._variational_distribution
    q.variational_mean.data.copy_(torch.as_tensor(mu))
    q.chol_variational_covar.data.copy_(torch.as_tensor(L))
    # GPyTorch would otherwise overwrite q with the prior at the first call
    model.variational_strategy.variational_params_initialized.fill_(1)


def load_problem(d, m):
    pre = os.path.join(d, "svgp_m%d_" % m)
    h = read_matrix(pre + "hyper.txt")
    hyper = dict(zip(("lengthscale", "outputscale", "noise", "constant"), h))
    return (read_matrix(os.path.join(d, "svgp_x.txt")), read_matrix(os.path.join(d, "svgp_y.txt")),
            read_matrix(pre + "Z.txt"), read_matrix(pre + "mu.txt"), read_matrix(pre + "L.txt"), hyper)


def slope(raw):
    import torch
    return torch.sigmoid(raw.detach()).reshape(-1)[0].item()  # softplus'


def elbo(d, m):
    import torch
    import gpytorch
    torch.set_num_threads(THREADS)
    x, y, z, mu, L, hyper = load_problem(d, m)
    X, Y = torch.as_tensor(x), torch.as_tensor(y)
    model, likelihood = gpytorch_model(z, hyper)
    set_q(model, mu, L)
    model.train()
    likelihood.train()
    mll = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=N)
    with gpytorch.settings.max_cholesky_size(10 ** 9):
        with torch.no_grad():
            full = mll(model(X), Y).item() * N
        batch = mll(model(X[:BATCH]), Y[:BATCH])
        model.zero_grad()
        likelihood.zero_grad()
        batch.backward()
    s = N  # lazytensor's bound is n times GPyTorch's
    q = model.variational_strategy._variational_distribution
    kern = model.covar_module
    g = {
        "mu": q.variational_mean.grad.numpy() * s,
        "L": np.tril(q.chol_variational_covar.grad.numpy()) * s,
        "Z": model.variational_strategy.inducing_points.grad.numpy() * s,
        "hyper": np.array([
            kern.base_kernel.raw_lengthscale.grad.item() / slope(kern.base_kernel.raw_lengthscale),
            kern.raw_outputscale.grad.item() / slope(kern.raw_outputscale),
            likelihood.noise_covar.raw_noise.grad.item() / slope(likelihood.noise_covar.raw_noise),
            model.mean_module.constant.grad.item()]) * s,
    }
    flat = np.concatenate([g["mu"], g["L"].reshape(-1), g["Z"].reshape(-1), g["hyper"]])
    write_matrix(os.path.join(d, "svgp_m%d_gpytorch_grad.txt" % m), flat)
    write_matrix(os.path.join(d, "svgp_m%d_gpytorch_elbo.txt" % m), [full, batch.item() * s])
    emit({"op": "elbo", "m": m, "n": N, "elbo_full": full, "elbo_batch": batch.item() * s,
          "batch": BATCH, "jitter": model.variational_strategy.jitter_val})


def adam_epochs(model, likelihood, X, Y, epochs, seed):
    """Adam on -ELBO; the CPU time of each epoch and its step count."""
    import torch
    import gpytorch
    mll = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=X.size(0))
    opt = torch.optim.Adam(list(model.parameters()) + list(likelihood.parameters()), lr=LR)
    model.train()
    likelihood.train()
    gen = torch.Generator().manual_seed(seed)
    out = []
    with gpytorch.settings.max_cholesky_size(10 ** 9):
        for _ in range(epochs):
            perm = torch.randperm(X.size(0), generator=gen)
            t0, steps = time.process_time(), 0
            for first in range(0, X.size(0), BATCH):
                idx = perm[first:first + BATCH]
                opt.zero_grad()
                loss = -mll(model(X[idx]), Y[idx])
                loss.backward()
                opt.step()
                steps += 1
            out.append((time.process_time() - t0, steps))
    return out


def step(d, m):
    import torch
    torch.set_num_threads(THREADS)
    x, y, z, mu, L, hyper = load_problem(d, m)
    X, Y = torch.as_tensor(x), torch.as_tensor(y)
    model, likelihood = gpytorch_model(z, hyper)
    set_q(model, mu, L)
    epochs = adam_epochs(model, likelihood, X, Y, 3, 1)
    per = sorted(t / s for t, s in epochs)
    emit({"op": "step", "m": m, "n": N, "batch": BATCH, "steps_per_epoch": epochs[0][1],
          "cpu_step_median": per[len(per) // 2], "cpu_epochs": [t for t, _ in epochs],
          "load": os.getloadavg()[0]})


def big(d):
    import torch
    torch.set_num_threads(THREADS)
    px, py = os.path.join(d, "svgp_big_x.txt"), os.path.join(d, "svgp_big_y.txt")
    pxs, pfs = os.path.join(d, "svgp_big_xs.txt"), os.path.join(d, "svgp_big_fs.txt")
    if not os.path.exists(pfs):
        rng = np.random.default_rng(1000000)
        x, y = points(rng, N_BIG)
        xs = rng.uniform(0, 10, size=(NTEST, 2))
        write_matrix(px, x)
        write_matrix(py, y)
        write_matrix(pxs, xs)
        write_matrix(pfs, truth(xs))
    X, Y = torch.as_tensor(read_matrix(px)), torch.as_tensor(read_matrix(py))
    XS, FS = torch.as_tensor(read_matrix(pxs)), torch.as_tensor(read_matrix(pfs))
    model, likelihood = gpytorch_model(X[:M_BIG].clone().numpy(),
                                       {"lengthscale": 1.0, "outputscale": 1.0, "noise": 0.1, "constant": 0.0})
    set_q(model, np.zeros(M_BIG), np.eye(M_BIG))
    (cpu, steps), = adam_epochs(model, likelihood, X, Y, 1, 1)
    model.eval()
    likelihood.eval()
    with torch.no_grad():
        mean = model(XS).mean
    rmse = torch.sqrt(torch.mean((mean - FS) ** 2)).item()
    emit({"op": "big", "n": N_BIG, "m": M_BIG, "batch": BATCH, "epochs": 1, "steps": steps,
          "cpu_epoch": cpu, "cpu_step": cpu / steps, "rmse_f": rmse,
          "lengthscale": model.covar_module.base_kernel.lengthscale.item(),
          "noise": likelihood.noise.item(), "load": os.getloadavg()[0]})


def main():
    d, what = sys.argv[1], sys.argv[2]
    os.makedirs(d, exist_ok=True)
    if what == "data":
        data(d)
    elif what == "elbo":
        elbo(d, int(sys.argv[3]))
    elif what == "step":
        step(d, int(sys.argv[3]))
    elif what == "big":
        big(d)
    else:
        sys.exit("usage: svgp_peer.py DIR data | elbo M | step M | big")


if __name__ == "__main__":
    main()
