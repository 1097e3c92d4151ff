"""The split of examples/breast_cancer.lua, shared by the peer scripts
(breast_cancer_sklearn.py, breast_cancer_gpytorch.py): the example's LCG
shuffle seeded with 2026, 80/20 (455/114), inputs standardised by the
training rows' mean and (population) standard deviation."""
import csv
import math
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def split():
    """Xt, yt, Xs, ys: standardised training and held-out inputs, 0/1 labels."""
    rows = list(csv.reader(open(os.path.join(HERE, "../../examples/data/breast_cancer.csv"))))
    data = np.array(rows[1:], dtype=float)
    X, y = data[:, :-1], data[:, -1].astype(int)
    n = len(y)
    state = [2026]

    def rnd():
        state[0] = (state[0] * 1103515245 + 12345) % 2147483648
        return state[0] / 2147483648

    order = list(range(n))
    for i in range(n, 1, -1):
        j = int(math.floor(rnd() * i))
        order[i - 1], order[j] = order[j], order[i - 1]
    nt = int(math.floor(0.8 * n + 0.5))
    tr, te = order[:nt], order[nt:]
    mu, sd = X[tr].mean(0), X[tr].std(0)
    return (X[tr] - mu) / sd, y[tr], (X[te] - mu) / sd, y[te]
