"""The lrvb benchmark's truth and bookkeeping (the run itself is a benchmark, not a test)."""

import numpy as np
import pytest

from benchmarks import lrvb as B


def test_grid_moments_of_a_correlated_gaussian():
    m = np.array([0.3, -1.2])
    S = np.array([[0.5, 0.2], [0.2, 0.3]])
    P = np.linalg.inv(S)

    def logp(x):
        d = x - m
        return -0.5 * np.einsum("...i,ij,...j->...", d, P, d)

    mean, sd = B.grid_moments(logp, m + 0.1, 8 * np.sqrt(np.diag(S)))
    np.testing.assert_allclose(mean, m, atol=1e-10)
    np.testing.assert_allclose(sd, np.sqrt(np.diag(S)), rtol=1e-6)


def test_log_posterior_is_the_prior_plus_the_hinge():
    Z = np.array([[1.0, 2.0], [-0.5, 0.3]])
    beta = np.array([0.2, 0.1])
    expected = -0.5 * 0.05 / 4 - 2 * 1.5 * ((1 - 0.4) + (1 - (-0.1 + 0.03)))
    assert B.log_posterior(beta, Z, prior_scale=2.0, gamma=1.5) == pytest.approx(expected)


def test_problems_span_the_targets_range_and_are_reproducible():
    ds, ns = zip(*[(d, n) for d, n, _ in B.PROBLEMS])
    assert len(B.PROBLEMS) >= 12 and min(ds) == 2 and max(ds) == 10
    assert min(ns) == 40 and max(ns) == 1000
    X1, y1 = B.generate(4, 60, 5)
    X2, y2 = B.generate(4, 60, 5)
    assert X1.shape == (60, 4) and np.array_equal(X1, X2) and np.array_equal(y1, y2)
    assert set(np.unique(y1)) == {-1.0, 1.0}


def test_summary_checks_both_targets():
    ok = [{"ratio_lr": [0.95, 1.05], "ratio_mf": [0.5, 0.4]}]
    assert B.summarise(ok)["meets_target"]
    assert B.summarise(ok)["ratio_mf"]["median"] == pytest.approx(0.45)
    wide = [{"ratio_lr": [0.95, 1.05, 1.4], "ratio_mf": [0.5, 0.4, 0.3]}]
    assert not B.summarise(wide)["meets_target"]  # one ratio out of range
    low = [{"ratio_lr": [0.8, 0.85, 1.2], "ratio_mf": [0.5, 0.4, 0.3]}]
    assert not B.summarise(low)["meets_target"]  # median below 0.9
