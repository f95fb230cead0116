"""The svi_convergence benchmark's measures and data (the run itself is a benchmark)."""

import numpy as np
import pytest

from benchmarks import svi_convergence as B


def test_distance_is_the_median_in_reference_sds():
    assert B.sd_distance([1.0, 2.0, 10.0], np.zeros(3), np.array([1.0, 4.0, 1.0])) == 1.0


def test_coverage_is_the_reference_mass_inside_the_interval():
    # the same normal: the 90 % interval holds 90 % of it; a far interval holds nothing
    assert B.coverage90(np.zeros(2), np.ones(2), np.zeros(2), np.ones(2)) == pytest.approx(
        0.9, abs=1e-3)
    assert B.coverage90(np.array([50.0]), np.ones(1), np.zeros(1), np.ones(1)) < 1e-12


def test_digits_three_against_eight():
    split = B.load("digits")
    n = split.X_train.shape[0] + split.X_test.shape[0]
    assert n == 357 and split.X_train.shape == (249, 64)
    assert set(np.unique(split.y_train)) == {0, 1}
