"""Shared test set-up: headless plotting, fixed seeds, small data sets."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(20261121)


@pytest.fixture(scope="session")
def heart():
    from ppl_bsvm import datasets

    return datasets.load("heart", standardize=True)


@pytest.fixture(scope="session")
def toy2d():
    """A small, noisy 2-d problem (n = 60) with labels -1/+1."""
    r = np.random.default_rng(7)
    X = r.standard_normal((60, 2))
    y = np.where(X @ np.array([1.5, -1.0]) + 0.7 * r.standard_normal(60) > 0, 1.0, -1.0)
    return X, y
