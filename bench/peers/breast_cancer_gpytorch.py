#!/usr/bin/python3
"""GPyTorch 1.12's ApproximateGP classifier on the split of
examples/breast_cancer.lua: the same LCG shuffle seeded with 2026, 80/20
(455/114), inputs standardised by the training rows. The model as the
gp.variational classifier of that example and as GPyTorch's users write it:
VariationalStrategy(learn_inducing_locations=True) over a
CholeskyVariationalDistribution with m = 40 inducing points (training rows
floor((j - 1/2) n / m), j = 1..m: gp.variational's spread of the rows),
ConstantMean, ScaleKernel(RBFKernel) from lengthscale sqrt(30) and
outputscale 1, BernoulliLikelihood (probit), VariationalELBO(num_data = 455),
float64; Adam lr 0.03, 60 epochs of shuffled minibatches of 64 (torch seed 1).
Prints the final ELBO (times n, lazytensor's scale) on all training rows,
the fitted lengthscale and outputscale, held-out accuracy and NLPD (the mean
of -log p(y* | x*), p from likelihood(model(x*)).mean) and the CPU time.
Run: /usr/bin/python3 bench/peers/breast_cancer_gpytorch.py (GPYT_SRC and LO_SRC as
bench/peers/svgp_peer.py)."""
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.abspath(os.environ.get("GPYT_SRC", os.path.join(HERE, "../../../gpytorch_src"))),
                os.path.abspath(os.environ.get("LO_SRC", os.path.join(HERE, "../../../linear_operator_src"))),
                os.path.join(HERE, "shims"), HERE]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from breast_cancer_split import split  # noqa: E402
import gpytorch  # noqa: E402

torch.set_num_threads(1)
Xtr, ytr, Xte, ys = split()
nt = len(ytr)
Xt, Xs = torch.as_tensor(Xtr), torch.as_tensor(Xte)
yt = torch.as_tensor(ytr, dtype=torch.float64)
M, LR, EPOCHS, BATCH = 40, 0.03, 60, 64
Z = Xt[[int(math.floor((j - 0.5) * nt / M)) for j in range(1, M + 1)]].clone()


class Classifier(gpytorch.models.ApproximateGP):
    def __init__(self, inducing):
        q = gpytorch.variational.CholeskyVariationalDistribution(inducing.size(0))
        strategy = gpytorch.variational.VariationalStrategy(self, inducing, q, learn_inducing_locations=True)
        super().__init__(strategy)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


torch.manual_seed(1)
model = Classifier(Z).double()
likelihood = gpytorch.likelihoods.BernoulliLikelihood().double()
model.covar_module.base_kernel.lengthscale = math.sqrt(Xt.shape[1])
model.covar_module.outputscale = 1.0
mll = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=nt)
opt = torch.optim.Adam(list(model.parameters()) + list(likelihood.parameters()), lr=LR)
model.train()
likelihood.train()
t0 = time.process_time()
steps = 0
for _ in range(EPOCHS):
    perm = torch.randperm(nt)
    for first in range(0, nt, BATCH):
        idx = perm[first:first + BATCH]
        opt.zero_grad()
        loss = -mll(model(Xt[idx]), yt[idx])
        loss.backward()
        opt.step()
        steps += 1
cpu = time.process_time() - t0
with torch.no_grad():
    elbo = mll(model(Xt), yt).item() * nt
model.eval()
likelihood.eval()
with torch.no_grad():
    p = likelihood(model(Xs)).mean.numpy()
p = np.clip(p, 1e-12, 1 - 1e-12)
acc = np.mean((p > 0.5) == (ys == 1))
nlpd = -np.mean(np.where(ys == 1, np.log(p), np.log(1 - p)))
print("gpytorch %s ApproximateGP (probit, m = %d): ELBO %.4f after %d Adam steps, lengthscale %.4f, "
      "outputscale %.4f (%.1f s CPU)" % (gpytorch.__version__, M, elbo, steps,
                                         model.covar_module.base_kernel.lengthscale.item(),
                                         model.covar_module.outputscale.item(), cpu))
print("held-out: accuracy %.4f, NLPD %.4f" % (acc, nlpd))
