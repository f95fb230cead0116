"""The demo's own logic (its fits are the engines' and its report is tested with the
comparison): the candidates it times twice and the line it prints for each."""

import numpy as np

from ppl_bsvm.compare import demo


def test_every_candidate_but_the_reference_is_timed_with_its_own_options():
    specs = demo.candidate_specs("gp", demo.GP_METHODS, demo.settings(quick=True)["gp"])
    assert "gibbs" not in specs
    assert specs["svi"] == ("svi", {"num_inducing": 64})
    assert specs["vi"] == ("vi", {}) and specs["vi + LR"] == ("vi", {"linear_response": True})
    assert set(demo.VARIANTS["gp"]) <= set(specs)


def test_a_summary_line_gives_run_time_and_first_call_time():
    row = {"candidate": "vi", "sd_ratio": 0.63, "mean_error_sd": 0.08, "coverage_90": 0.7,
           "prob_mad": 0.005, "brier": 0.145, "seconds": 0.15, "run_seconds": 0.07}
    assert demo.summary_line(row).endswith("0.07 s (0.15 s with compilation)")
    floor = {**row, "prob_mad": np.nan, "seconds": np.nan, "run_seconds": np.nan}
    assert demo.summary_line(floor).endswith("90% coverage 0.70")
