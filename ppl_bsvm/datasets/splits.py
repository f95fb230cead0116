"""``split_data``: the stratified train/test split behind ``ppl-bsvm fit``, ``compare`` and the demo.

It lives with the data sets, not with the benchmarks, because the command line and
:func:`ppl_bsvm.compare.run_comparison` need it in an installed package.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Split", "split_data"]


class Split(NamedTuple):
    """Training and test data of one split (features standardised with training statistics)."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def split_data(X, y, test_fraction: float = 0.3, seed: int = 0, standardize: bool = True) -> Split:
    """Stratified train/test split; features standardised with the training statistics."""
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    X_tr, X_te, y_tr, y_te = train_test_split(
        np.asarray(X, dtype=float), np.asarray(y), test_size=test_fraction, random_state=seed,
        stratify=np.asarray(y),
    )
    if standardize:
        mean, sd = X_tr.mean(0), X_tr.std(0)
        sd = np.where(sd > 0, sd, 1.0)
        X_tr, X_te = (X_tr - mean) / sd, (X_te - mean) / sd
    return Split(X_tr, y_tr, X_te, y_te)
