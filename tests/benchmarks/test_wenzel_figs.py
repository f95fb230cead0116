"""The Wenzel et al. Fig. 1-3 benchmarks' own logic (the fits are checked elsewhere)."""

import math

import pytest

from benchmarks import wenzel_fig1


def _points(*pairs):
    return [{"time_s": t, "test_error": e} for t, e in pairs]


def test_time_to_final_is_the_first_budget_from_which_errors_stay_in_the_band():
    n_test = 5000  # band = sqrt(0.1 * 0.9 / 5000) = 0.00424
    pts = _points((0.1, 0.30), (0.2, 0.103), (0.4, 0.120), (0.8, 0.104), (1.6, 0.100))
    assert wenzel_fig1.time_to_final(pts, n_test) == 0.8  # 0.120 leaves the band
    pts = _points((0.1, 0.1041), (0.2, 0.0962), (0.4, 0.100))
    assert wenzel_fig1.time_to_final(pts, n_test) == 0.1
    pts = _points((0.1, 0.1043), (0.2, 0.100))
    assert wenzel_fig1.time_to_final(pts, n_test) == 0.2
    assert math.isnan(wenzel_fig1.time_to_final([], n_test))


@pytest.mark.parametrize("t_ecm,verdict", [(3.0, "met"), (1.0, "**missed**")])
def test_the_target_line_compares_time_to_final_against_ten_times(t_ecm, verdict):
    results = [{"label": "S-BSVM", "time_to_final_s": 0.2},
               {"label": "ECM", "time_to_final_s": t_ecm}]
    (line,) = wenzel_fig1._targets(results)
    assert line.startswith(f"- S-BSVM reaches its final error {t_ecm / 0.2:.1f}x sooner than ECM")
    assert line.endswith(verdict)
