"""The S-BSVM-against-Gibbs benchmark's measures (the runs themselves are benchmarks,
``reports/sbsvm_truth``)."""

import numpy as np
import pytest
from scipy import stats

from benchmarks import sbsvm_truth


def _reference(means, variances, p):
    return {"means": means, "variances": variances, "p": p}


def test_a_candidate_equal_to_the_reference_scores_as_exact():
    """Draws with one conditional each (the mixture is that Gaussian): the candidate with the
    same mean and variance has sd ratio 1, no mean error, 90 % coverage and no |p - p_ref|;
    doubling its sd doubles the ratio and covers the Gaussian's P(|z| < 2 x 1.645)."""
    rng = np.random.default_rng(0)
    mean, var = rng.normal(size=7), rng.gamma(2.0, 1.0, 7)
    draws = 10
    ref = _reference(np.tile(mean, (draws, 1)), np.tile(var, (draws, 1)),
                     stats.norm.cdf(mean / np.sqrt(1 + var)))
    y = np.where(mean > 0, 1.0, -1.0)
    same = sbsvm_truth.compare(ref, mean, var, ref["p"], y)
    assert same["sd_ratio_median"] == pytest.approx(1.0)
    assert same["mean_error_sds"] < 1e-15 and same["p_error"] == 0.0
    assert same["coverage_90"] == pytest.approx(0.9, abs=1e-12)
    wide = sbsvm_truth.compare(ref, mean, 4 * var, ref["p"], y)
    assert wide["sd_ratio_median"] == pytest.approx(2.0)
    assert wide["coverage_90"] == pytest.approx(1 - 2 * stats.norm.sf(2 * 1.6448536269514722))


def test_the_reference_moments_are_the_mixtures():
    """Two draws of conditionals N(-1, 1) and N(1, 1): the mixture has mean 0 and variance
    2 (law of total variance), so a candidate N(0, 2) has sd ratio 1 and mean error 0."""
    ref = _reference(np.array([[-1.0], [1.0]]), np.ones((2, 1)), np.array([0.5]))
    out = sbsvm_truth.compare(ref, np.zeros(1), np.full(1, 2.0), np.array([0.5]), np.ones(1))
    assert out["sd_ratio_median"] == pytest.approx(1.0)
    assert out["mean_error_sds"] == 0.0
    mass = 0.5 * (stats.norm.cdf(1.6448536269514722 * np.sqrt(2) + 1)
                  - stats.norm.cdf(-1.6448536269514722 * np.sqrt(2) + 1)) * 2
    assert out["coverage_90"] == pytest.approx(mass)


def test_the_response_scale_report_keeps_the_runs_machine(tmp_path):
    from benchmarks import sbsvm_response_scale

    row = {"n": 100000, "m": 64, "status": "linear response", "rows": 20160,
           "mc_error": 0.0026, "polish_sweeps": 23, "mean_field_s": 1.47,
           "linear_response_s": 5.48, "correction_s": 3.93, "full_correction_s": 7.67,
           "sd_difference_median": 0.0005, "sd_difference_max": 0.0237,
           "sd_ratio_mean_field_median": 0.989, "machine": "the run's machine, load 1.75"}
    text = sbsvm_response_scale.write_report([row], tmp_path)
    assert ("| 100000 | 64 | 1.47 | 5.48 | 3.93 | 20160 | 0.26 % | 23 | 7.67 | 0.05 % / 2.37 % "
            "| 0.989 | linear response |") in text
    assert "Machine: the run's machine, load 1.75." in text
