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


def test_the_reference_grows_by_the_ess_it_lacks_and_stops_at_the_target_or_the_cap():
    # 224 of 1,000 after 500 draws: 1.15 x 500 x 1000 / 224 = 2567, in hundreds
    assert sbsvm_truth.more_draws(500, 224.0, 1000, 4000) == 2600
    assert sbsvm_truth.more_draws(500, 1000.0, 1000, 4000) is None
    assert sbsvm_truth.more_draws(4000, 10.0, 1000, 4000) is None
    assert sbsvm_truth.more_draws(500, 10.0, 1000, 4000) == 4000
    # close to the target: still at least 100 more draws, never as many as before
    assert sbsvm_truth.more_draws(500, 999.0, 1000, 4000) == 600


def test_a_saved_reference_is_reused_only_at_its_hyperparameters(tmp_path):
    from ppl_bsvm import kernels

    rng = np.random.default_rng(1)
    ref = {"means": rng.normal(size=(8, 3)), "variances": rng.gamma(2.0, 1.0, (8, 3)),
           "p": rng.uniform(size=3), "time_s": 12.5, "draws_per_run": [100, 200],
           "peak_rss_mb": 1024.0}
    kernel = kernels.RBF(lengthscale=20.529, variance=34.2)
    path = tmp_path / "cache" / "reference2000.npz"
    sbsvm_truth.save_reference(ref, kernel, path)
    back = sbsvm_truth.load_reference(path, kernel)
    assert set(back) == set(ref)
    for k in ("means", "variances", "p"):
        np.testing.assert_array_equal(back[k], ref[k])
    assert back["time_s"] == 12.5 and back["draws_per_run"] == [100, 200]
    other = kernels.RBF(lengthscale=20.53, variance=34.2)
    assert sbsvm_truth.load_reference(path, other) is None
    assert sbsvm_truth.load_reference(tmp_path / "none.npz", kernel) is None


def test_the_response_scale_report_keeps_the_runs_machine(tmp_path):
    from benchmarks import sbsvm_response_scale

    row = {"n": 100000, "m": 64, "status": "linear response", "rows": 20160,
           "mc_error": 0.0026, "polish_sweeps": 23, "mean_field_s": 1.47,
           "linear_response_s": 5.48, "correction_s": 3.93, "full_correction_s": 7.67,
           "sd_difference_median": 0.0005, "sd_difference_max": 0.0237,
           "sd_ratio_mean_field_median": 0.989, "machine": "the run's machine, load 1.75"}
    text = sbsvm_response_scale.write_report([row], tmp_path)
    # a row written before the Schur route (no form, no moments' comparison, no difference
    # of the fits)
    assert ("| 100000 | 64 | 1.47 | 5.48 | 3.93 | - | moments | 20160 | 0.26 % | 23 | 7.67 | "
            "0.05 % / 2.37 % | - | - | 0.989 | linear response |") in text
    assert "Machine: the run's machine, load 1.75." in text
    row.update(form="Schur complement (1 product by G_qq)", moments_correction_s=4.51,
               moments_sd_difference_max=3.0e-11, added_s=3.87)
    text = sbsvm_response_scale.write_report([row], tmp_path)
    assert ("| 3.93 | 3.87 | Schur complement (1 product by G_qq) | 20160 | 0.26 % | 23 | 7.67 | "
            "0.05 % / 2.37 % | 4.51 | 3.0e-11 | 0.989 |") in text


def test_the_truth_report_names_each_engine_and_its_covariance(tmp_path):
    import json

    measures = {"sd_ratio_median": 1.0, "sd_ratio_5": 0.9, "sd_ratio_95": 1.1,
                "mean_error_sds": 0.1, "coverage_90": 0.9, "p_error": 0.01, "test_error": 0.2,
                "test_nlpd": 0.45, "time_s": 2.0, "stop_reason": "tol"}
    rows = [{"engine": "S-BSVM", "m": 64, "covariance": "mean-field", "linear_response": False},
            {"engine": "S-BSVM", "m": 64, "covariance": "linear response",
             "linear_response": True},
            {"engine": "ECM", "m": None, "covariance": "f given the MAP's lambda",
             "linear_response": False},
            {"engine": "ADVI", "m": 128, "covariance": "NumPyro's mvn guide on u",
             "linear_response": False}]
    reference = {"chains": 4, "warmup": 500, "draws": 1300, "time_s": 80.0,
                 "ms_per_sweep": 40.0, "cg_iters_mean": 6.0, "ess_bulk_min_f_test": 1012.0,
                 "rhat_max_f_test": 1.004, "ess_bulk_min_f": 990.0, "peak_rss_mb": 1200.0}
    (tmp_path / "n2000.json").write_text(json.dumps({
        "n": 2000, "lengthscale": 20.5, "variance": 34.2, "reference": reference,
        "reference_test_error": 0.204,
        "candidates": [{**r, **measures} for r in rows], "machine": "the run's machine"}))
    scale = {"n": 20000, "lengthscale": 8.0, "warmup": 50, "draws": 50, "chains": 4,
             "time_s": 400.0, "set_up_s": 100.0, "ms_per_sweep": 3000.0, "cg_iters_mean": 11.0,
             "cg_fallback": 0, "peak_rss_mb": 14336.0, "peak_rss_mb_before": 512.0,
             "estimate_mb": 13312.0}
    (tmp_path / "scale20000_50_50.json").write_text(json.dumps(scale))  # before ESS was kept
    (tmp_path / "scale10000_200_600.json").write_text(json.dumps({
        **scale, "n": 10000, "warmup": 200, "draws": 600, "directions": 32, "packed": True,
        "ess_bulk_min_f_test": 864.0, "rhat_max_f_test": 1.01016,
        "machine": "m, load average 1.36 / 1.77 / 1.80 (1 / 5 / 15 min) at the end"}))
    # a run at another coefficient than the default: its own file and row
    (tmp_path / "scale10000_200_600_900.json").write_text(json.dumps({
        **scale, "n": 10000, "warmup": 200, "draws": 600, "directions": 32, "packed": True,
        "overrelax": -0.9, "ess_bulk_min_f_test": 1200.0, "rhat_max_f_test": 1.0071,
        "machine": "m, load average 1.36 / 1.77 / 1.80 (1 / 5 / 15 min) at the end"}))
    # a run's file is named by the coefficient it used (the default's, where none was given)
    assert sbsvm_truth.scale_name(10000, 200, 600, -0.9) == "scale10000_200_600_900.json"
    assert sbsvm_truth.scale_name(10000, 200, 600, -0.5) == "scale10000_200_600.json"
    sbsvm_truth.write_report(tmp_path)
    text = (tmp_path / "README.md").read_text()
    # runs from before the coefficient was recorded ran at the default, -0.5
    assert ("| 10000 | 4 x (200 + 600) | 32 | -0.50 | lower blocks | 400 | 100 | 3000 | 11.0 | "
            "864 | 0.36 | 1.0102 | 14.00 | 13.50 | 13.00 | 8.000 | 1.36 / 1.77 / 1.80 |" in text)
    assert ("| 10000 | 4 x (200 + 600) | 32 | -0.90 | lower blocks | 400 | 100 | 3000 | 11.0 | "
            "1200 | 0.50 | 1.0071 |" in text)
    # R-hat to four decimals: three would show 1.010, the target's value, for 1.01016
    # a run from before K's storage was kept had it dense
    assert ("| 20000 | 4 x (50 + 50) | 10 | -0.50 | dense | 400 | 100 | 3000 | 11.0 | - | - | - "
            "| 14.00 | 13.50 | 13.00 | 8.000 | - |" in text)
    assert text.index("| 10000 | 4 x (200 + 600)") < text.index("| 20000 | 4 x (50 + 50)")
    assert "| 2000 | 4 x (500 + 1300) | 80 | 40 | 6.0 | 1012 | 1.004 | 990 |" in text
    assert "| 2000 | S-BSVM | 64 | LR | linear response | 1.000 |" in text
    assert "| 2000 | ECM | - | - | f given the MAP's lambda | 1.000 |" in text
    assert "| 2000 | ADVI | 128 | - | NumPyro's mvn guide on u | 1.000 |" in text
    assert (tmp_path / "sd_ratio_coverage.png").exists()


def test_the_report_names_a_reference_that_stopped_short_of_the_ess_target():
    def result(n, draws, ess):
        return {"n": n, "reference": {"draws": draws, "ess_bulk_min_f_test": ess}}

    assert sbsvm_truth._short([result(2000, 800, 1177.0)]) == ""
    clause = sbsvm_truth._short([result(2000, 800, 1177.0), result(20000, 1000, 870.4)])
    assert clause == (" or its draws per chain reach `--draws-max`, as at n = 20000 (1000 draws "
                      "per chain, smallest bulk ESS 870)")
