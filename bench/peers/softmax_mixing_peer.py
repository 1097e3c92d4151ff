"""GPyTorch 1.12's side of softmax_mixing_side.lua: the SVGP bound of a
multiclass model with SoftmaxLikelihood(num_features = F, num_classes = C)
(mixing weights W) at given parameters, read from DIR/problem.txt.

The model is what GPyTorch users write for it: an ApproximateGP with an
IndependentMultitaskVariationalStrategy over a VariationalStrategy
(whitened, learn_inducing_locations) with a CholeskyVariationalDistribution
of batch shape [F], ConstantMean and ScaleKernel(RBFKernel) of batch shape
[F] (every batch entry set to the same values: lazytensor shares one kernel),
float64, its 1e-6 jitter. GPyTorch's expected log-likelihood is a Monte
Carlo average over fresh draws; to compare numbers, the draws are the ones
lazytensor uses, g_k = m + sqrt(v) * eps_k on q(g)'s marginals (GPyTorch's
own marginals), fed through SoftmaxLikelihood's forward (logits g W^T).
Prints one JSON line: the bound (ELL sum - KL) and its two parts.
"""
import json
import sys


def read(path):
    with open(path) as f:
        tokens = f.read().split()
    pos = 0
    out = {}
    while pos < len(tokens):
        name, r, c = tokens[pos], int(tokens[pos + 1]), int(tokens[pos + 2])
        pos += 3
        vals = [float(t) for t in tokens[pos:pos + r * c]]
        pos += r * c
        out[name] = [vals[i * c:(i + 1) * c] for i in range(r)]
    return out


def main():
    import torch
    import gpytorch
    torch.set_num_threads(1)
    p = read(sys.argv[1] + "/problem.txt")
    t = lambda k: torch.tensor(p[k], dtype=torch.float64)
    X, y, Z = t("x"), t("y").reshape(-1).long() - 1, t("Z")
    mean, chol, W, eps = t("mean"), t("chol"), t("W"), t("eps")
    ls, var = p["hyper"][0][0], p["hyper"][0][1]
    const = t("constant").reshape(-1)
    m, F = mean.shape
    C = W.shape[0]

    class Model(gpytorch.models.ApproximateGP):
        def __init__(self):
            q = gpytorch.variational.CholeskyVariationalDistribution(m, batch_shape=torch.Size([F]))
            s = gpytorch.variational.IndependentMultitaskVariationalStrategy(
                gpytorch.variational.VariationalStrategy(self, Z, q, learn_inducing_locations=True),
                num_tasks=F)
            super().__init__(s)
            self.mean_module = gpytorch.means.ConstantMean(batch_shape=torch.Size([F]))
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(batch_shape=torch.Size([F])), batch_shape=torch.Size([F]))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = Model().double()
    lik = gpytorch.likelihoods.SoftmaxLikelihood(num_features=F, num_classes=C).double()
    with torch.no_grad():
        model.covar_module.base_kernel.lengthscale = torch.full((F, 1, 1), ls, dtype=torch.float64)
        model.covar_module.outputscale = torch.full((F,), var, dtype=torch.float64)
        model.mean_module.constant.copy_(const)
        q = model.variational_strategy.base_variational_strategy._variational_distribution
        q.variational_mean.copy_(mean.t())
        q.chol_variational_covar.copy_(torch.stack([chol[:, j * m:(j + 1) * m] for j in range(F)]))
        model.variational_strategy.base_variational_strategy.variational_params_initialized.fill_(1)
        lik.mixing_weights.copy_(W)
    model.train()
    lik.train()
    with torch.no_grad(), gpytorch.settings.max_cholesky_size(10 ** 9):
        qf = model(X)  # MultitaskMultivariateNormal, n x F
        mu, v = qf.mean, qf.variance
        total = 0.0
        for k in range(eps.shape[0]):
            g = mu + v.sqrt() * eps[k]
            total = total + lik(g).log_prob(y).sum().item()
        ell = total / eps.shape[0]
        kl = model.variational_strategy.kl_divergence().sum().item()
    print(json.dumps({"system": "gpytorch", "ell": ell, "kl": kl, "elbo": ell - kl,
                      "jitter": model.variational_strategy.base_variational_strategy.jitter_val}))


if __name__ == "__main__":
    main()
