"""The BC-SVM tables' statistics and bookkeeping (the run itself is a benchmark, not a test)."""

import numpy as np
import pytest

from benchmarks import bcsvm_tables as T


@pytest.mark.parametrize("n", [3, 7])
def test_intervals_cover_at_their_level(n):
    """Over 5000 normal samples of size n, the 95% interval of the mean covers the mean, and
    the prediction interval covers one more draw, 95% of the time (within 4 binomial SE)."""
    rng = np.random.default_rng(0)
    reps = 5000
    draws = rng.normal(1.0, 2.0, (reps, n + 1))
    mean_hit = draw_hit = 0
    for row in draws:
        mean, half = T.ci95(row[:n])
        mean_hit += abs(mean - 1.0) <= half
        draw_hit += abs(row[n] - mean) <= T.pi95(row[:n])
    se = np.sqrt(0.95 * 0.05 / reps)
    assert abs(mean_hit / reps - 0.95) < 4 * se
    assert abs(draw_hit / reps - 0.95) < 4 * se


def test_one_value_has_no_interval():
    assert np.isnan(T.ci95([1.0])[1]) and np.isnan(T.pi95([1.0]))


def test_parts_cover_every_data_set_once():
    config = T.make_config(quick=False, repeats=None)
    parts = T.parts(config)
    assert parts == ([("table1", d[0]) for d in config["datasets1"]]
                     + [("table2", d[0]) for d in config["datasets2"]]
                     + [("figure1", "ART sigma=0.1")])
    assert len(set(parts)) == len(parts)


def test_bad_jobs_and_repeats_are_refused(capsys):
    for argv in (["--jobs", "0"], ["--repeats", "0"]):
        with pytest.raises(SystemExit):
            T.main(argv)
        assert "must be >= 1" in capsys.readouterr().err
