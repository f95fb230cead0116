"""The PPL comparison's bookkeeping (its runs are a benchmark, not a test)."""

import numpy as np
import pandas as pd

from benchmarks import ppl_comparison as P


def test_problems_hold_out_a_quarter_and_skip_what_cannot_run():
    for name in ("linear_heart", "gp_heart", "gp_banana", "sparse_susy", "linear_generated"):
        model, X, y, Xt, yt, engines = P._problem(name, quick=True)
        assert len(Xt) == (len(X) + len(Xt)) // 4 and len(X) == len(y) and len(Xt) == len(yt)
        assert set(np.unique(y)) <= {-1, 1} and set(engines) <= set(P.ENGINES)
        methods = {P.ENGINES[e][0] for e in engines}
        if model == "sparse_gp":  # no sampler and no n x n engine at 10^4-10^5 points
            assert not methods & {"gibbs", "nuts", "ess", "mclmc", "vi", "ecm", "pathfinder"}
        else:
            assert {"gibbs", "nuts", "ess", "mclmc", "advi", "pathfinder", "vi"} <= methods


def test_report_and_figure_from_results(tmp_path):
    rows = [
        {"problem": "gp_heart", "engine": "gibbs", "second_call_s": 5.0, "first_call_s": 9.0,
         "sd_ratio_median": 1.0, "sd_ratio_error": 0.01, "min_ess_per_s": 400.0},
        {"problem": "gp_heart", "engine": "vi + LR", "second_call_s": 0.1, "first_call_s": 2.0,
         "sd_ratio_median": 0.99, "sd_ratio_error": 0.03, "psis_khat": 1.2},
        {"problem": "gp_heart", "engine": "ess", "error": "ValueError('x')"},
    ]

    class Args:
        quick, problems = True, ["gp_heart"]

    df = pd.DataFrame(rows)
    text = P.write_report(df, tmp_path, Args, 60.0)
    assert "## gp_heart" in text and "error: ValueError('x')" in text and "| vi + LR | 0.1 |" in text
    P._figure(df, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000
