"""The flagship job run by ``make demo``.

Fits the GP and linear Bayesian SVMs to the embedded Heart data (70/30 split, standardised)
and prints what the fits say and how well they predict.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import ppl_bsvm
from ppl_bsvm import datasets, metrics


def split(X, y, test_fraction=0.3, seed=0):
    """A stratified-free random split with a fixed seed."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = perm[:n_test], perm[n_test:]
    return X[train], y[train], X[test], y[test]


def main(argv=None) -> int:
    start = time.perf_counter()
    X, y = datasets.load("heart", standardize=True)
    info = datasets.describe("heart")
    X_tr, y_tr, X_te, y_te = split(X, y)
    print(f"Heart: n={info['n']}, d={info['d']}, positive class {info['positive']!r}; "
          f"{len(y_tr)} train / {len(y_te)} test")
    rows = []
    for model in ("gp", "linear"):
        fit = ppl_bsvm.fit(X_tr, y_tr, model=model, method="ecm")
        print()
        print(fit.summary())
        report = metrics.classification_report(y_te, fit.predict_proba(X_te))
        rows.append((model, "ecm", report, fit.timings["total"]))
    print()
    print(f"{'model':8s} {'method':8s} {'error':>7s} {'brier':>7s} {'nlpd':>7s} {'auc':>7s} "
          f"{'ece':>7s} {'time s':>7s}")
    for model, method, r, t in rows:
        print(f"{model:8s} {method:8s} {r['error']:7.3f} {r['brier']:7.3f} {r['nlpd']:7.3f} "
              f"{r['auc']:7.3f} {r['ece']:7.3f} {t:7.2f}")
    print(f"\ndone in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
