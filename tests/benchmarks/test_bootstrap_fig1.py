"""The bootstrap_fig1 benchmark's bookkeeping: the speed table's arithmetic and the timing of
the theory at S = N (the runs themselves are benchmarks, not tests)."""

import numpy as np
import pytest

from benchmarks import bootstrap_fig1 as B
from ppl_bsvm import datasets, kernels


def test_speed_rows_scale_the_monte_carlo_to_one_percent_standard_error():
    curve = {
        "name": "crabs", "n": 200, "mc_ratios": [0.5, 1.0], "mc_error": [0.06, 0.04],
        "mc_error_se": [0.001, 0.002], "mc_n_resamples": 400, "mc_seconds": [1.0, 2.0],
        "theory_at_n_seconds": [0.05, 0.01, 0.02], "theory_at_mc": [0.061, 0.041],
        "theory_seconds_at_mc": [0.3, 0.4], "theory_total_seconds": 1.5, "compile_seconds": 3.0,
    }
    row = B.speed_rows([curve])[0]
    sigma = 0.002 * np.sqrt(400)  # per-resample spread of the estimator
    b_1pc = (sigma / 0.0004) ** 2  # resamples for a standard error of 1 % of 0.04
    assert row["B_1pc"] == pytest.approx(b_1pc)
    assert row["theory_s"] == pytest.approx(0.02)  # the median of the calls
    assert row["mc_ms_per_resample"] == pytest.approx(5.0)
    assert row["speedup_1pc"] == pytest.approx(b_1pc * 0.005 / 0.02)
    assert row["B_equal_error"] == pytest.approx((sigma / 0.001) ** 2)


def test_theory_at_n_times_calls_after_the_first():
    X, y = datasets.load("crabs", standardize=True)
    out = B.theory_at_n(X[:60], y[:60], kernels.RBF(lengthscale=3.0))
    assert len(out["seconds"]) == B.N_TIMINGS and min(out["seconds"]) > 0
    assert out["compile_seconds"] > 0 and out["converged"]
    assert out["factorisations"] >= 2 and out["coarse_factorisations"] == 0  # 60 < 512
    assert out["coarse_size"] is None and 0 <= out["error"] <= 1
