import itertools

import numpy as np
import pytest

from ppl_bsvm import metrics


@pytest.fixture
def yp(rng):
    y = np.where(rng.random(200) < 0.4, 1.0, -1.0)
    p = np.clip(0.5 + 0.3 * y + 0.3 * rng.standard_normal(200), 0, 1)
    p[:10] = 0.5  # ties
    return y, p


def test_auc_matches_pairwise_count(yp):
    y, p = yp
    pos, neg = p[y > 0], p[y < 0]
    brute = np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(pos, neg)])
    assert metrics.auc(y, p) == pytest.approx(brute, abs=1e-12)


def test_simple_metrics_by_hand(yp):
    y, p = yp
    t = (y > 0).astype(float)
    assert metrics.brier_score(y, p) == pytest.approx(np.mean((p - t) ** 2))
    assert metrics.error_rate(y, p) == pytest.approx(np.mean((p >= 0.5) != (y > 0)))
    pc = np.clip(p, 1e-15, 1 - 1e-15)
    assert metrics.nlpd(y, p) == pytest.approx(-np.mean(t * np.log(pc) + (1 - t) * np.log(1 - pc)))
    # {0, 1} and bools mean the same as {-1, +1}.
    assert metrics.brier_score(t, p) == metrics.brier_score(y > 0, p) == metrics.brier_score(y, p)


def test_ece_by_hand(yp):
    y, p = yp
    total = 0.0
    for b in range(10):
        lo, hi = b / 10, (b + 1) / 10
        idx = (p >= lo) & ((p < hi) if b < 9 else (p <= hi))
        if idx.any():
            total += idx.sum() * abs(np.mean(y[idx] > 0) - p[idx].mean())
    assert metrics.expected_calibration_error(y, p) == pytest.approx(total / len(y))


def test_perfect_and_constant_predictions():
    y = np.array([1, -1, 1, -1.0])
    assert metrics.error_rate(y, (y > 0).astype(float)) == 0.0
    assert metrics.auc(y, y) == 1.0
    assert metrics.auc(y, np.zeros(4)) == 0.5
    assert metrics.brier_score(y, np.full(4, 0.5)) == 0.25


@pytest.mark.parametrize(
    "y, p, message",
    [
        ([1, -1], [0.5], "shape"),
        ([1, -1], [0.5, 1.2], r"\[0, 1\]"),
        ([1, -1], [0.5, np.nan], r"\[0, 1\]"),
        ([1, 2], [0.5, 0.5], "-1/\\+1"),
        ([], [], "non-empty"),
    ],
)
def test_bad_metric_input(y, p, message):
    with pytest.raises(ValueError, match=message):
        metrics.brier_score(y, p)


def test_auc_needs_two_classes():
    with pytest.raises(ValueError, match="both classes"):
        metrics.auc([1, 1], [0.2, 0.3])
    assert np.isnan(metrics.classification_report([1, 1], [0.2, 0.3])["auc"])


def test_labels_other_than_0_1_name_pos_label():
    """Labels 3 and 8 are not -1/+1 or 0/1: the error says how to name the positive class."""
    from ppl_bsvm import metrics

    with pytest.raises(ValueError, match=r"got values \[3.0, 8.0\]: name the positive class "
                                         r"with pos_label"):
        metrics.classification_report(np.array([3, 8, 8, 3]), np.array([0.2, 0.9, 0.6, 0.1]))
