"""scikit-learn's GaussianProcessClassifier (Laplace, logit link) on the split
of examples/breast_cancer.lua: the same LCG shuffle seeded with 2026, 80/20,
inputs standardised by the training rows, ConstantKernel(1) * RBF(sqrt(30)),
its default L-BFGS fit. Prints the fitted hyperparameters and log marginal
likelihood, held-out accuracy and NLPD, and the LML and gradient at variance
2, lengthscale 5 (spec/gp_laplace_spec.lua holds those numbers).
Run: /usr/bin/python3 bench/peers/breast_cancer_sklearn.py (Debian python3-sklearn)."""
import math
import os
import sys
import time

import numpy as np
import sklearn
from sklearn.gaussian_process import GaussianProcessClassifier
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from breast_cancer_split import split  # noqa: E402

Xt, yt, Xs, ys = split()
t = time.process_time()
gpc = GaussianProcessClassifier(kernel=ConstantKernel(1.0) * RBF(math.sqrt(30)),
                                random_state=0).fit(Xt, yt)
elapsed = time.process_time() - t
p = np.clip(gpc.predict_proba(Xs)[:, 1], 1e-12, 1 - 1e-12)
acc = np.mean((p > 0.5) == (ys == 1))
nlpd = -np.mean(np.where(ys == 1, np.log(p), np.log(1 - p)))
th = np.exp(gpc.kernel_.theta)
print("sklearn %s: variance %.10g, lengthscale %.10g, LML %.12g (%.1f s CPU)"
      % (sklearn.__version__, th[0], th[1], gpc.log_marginal_likelihood_value_, elapsed))
print("held-out: accuracy %.4f, NLPD %.4f" % (acc, nlpd))
lml, g = gpc.log_marginal_likelihood(np.log([2.0, 5.0]), eval_gradient=True)
print("at variance 2, lengthscale 5: LML %.15g, d/dlog variance %.12g, d/dlog lengthscale %.12g"
      % (lml, g[0], g[1]))
