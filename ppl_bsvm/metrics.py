"""Classification metrics on labels in {-1, +1} (or {0, 1}, or bools) and P(y = +1).

All functions validate their inputs and return Python floats.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "error_rate",
    "brier_score",
    "nlpd",
    "auc",
    "expected_calibration_error",
    "calibration_bins",
    "classification_report",
]

_EPS = 1e-15


def _as_pm(y_true) -> np.ndarray:
    """Labels as float -1/+1; accepts {-1, +1}, {0, 1} and bools."""
    y = np.asarray(y_true)
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"y_true must be a non-empty 1-D array, got shape {y.shape}")
    if y.dtype == np.bool_:
        return np.where(y, 1.0, -1.0)
    try:
        yf = y.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"y_true holds labels {np.unique(y).tolist()[:5]}, not -1/+1, 0/1 or bools: name "
            "the positive class with pos_label=... (classification_report), or map them "
            "first with fit.labels.encode"
        ) from None
    values = set(np.unique(yf).tolist())
    if values <= {-1.0, 1.0}:
        return yf
    if values <= {0.0, 1.0}:
        return 2.0 * yf - 1.0
    raise ValueError(
        f"y_true must hold -1/+1, 0/1 or bools, got values {sorted(values)[:5]}: name the "
        "positive class with pos_label=... (classification_report), or map the labels first "
        "with fit.labels.encode")


def _check_prob(p, n: int, name: str = "p") -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) to match y_true, got {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise ValueError(f"{name} must hold probabilities in [0, 1]")
    return p


def _check_score(score, n: int) -> np.ndarray:
    s = np.asarray(score, dtype=np.float64)
    if s.shape != (n,):
        raise ValueError(f"score must have shape ({n},) to match y_true, got {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("score contains NaN or inf")
    return s


def error_rate(y_true, p) -> float:
    """Fraction misclassified when predicting +1 iff the probability ``p >= 0.5``."""
    y = _as_pm(y_true)
    p = _check_prob(p, y.size)
    return float(np.mean(np.where(p >= 0.5, 1.0, -1.0) != y))


def brier_score(y_true, p) -> float:
    r"""Mean squared error of the probability, :math:`\frac1n \sum_i (p_i - 1[y_i = +1])^2`."""
    y = _as_pm(y_true)
    p = _check_prob(p, y.size)
    return float(np.mean((p - (y > 0)) ** 2))


def nlpd(y_true, p) -> float:
    r"""Negative log predictive probability, :math:`-\frac1n \sum_i \log p(y_i)` (natural log).

    Probabilities are clipped to ``[1e-15, 1 - 1e-15]`` so a confident mistake costs about 34.5
    instead of infinity.
    """
    y = _as_pm(y_true)
    p = np.clip(_check_prob(p, y.size), _EPS, 1.0 - _EPS)
    return float(-np.mean(np.where(y > 0, np.log(p), np.log1p(-p))))


def auc(y_true, score) -> float:
    """Area under the ROC curve: P(score of a random positive > score of a random negative).

    Ties count one half (Mann-Whitney U via mid-ranks). ``score`` may be a probability or any
    real score. Raises if only one class is present.
    """
    from scipy.stats import rankdata

    y = _as_pm(y_true)
    s = _check_score(score, y.size)
    n_pos, n_neg = int(np.sum(y > 0)), int(np.sum(y < 0))
    if n_pos == 0 or n_neg == 0:
        raise ValueError("AUC needs both classes in y_true")
    ranks = rankdata(s)
    u = np.sum(ranks[y > 0]) - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def calibration_bins(y_true, p, n_bins: int = 10):
    """Equal-width reliability bins on [0, 1].

    Returns
    -------
    dict with arrays of length ``n_bins``: ``count``, ``mean_prob`` (mean predicted probability
    in the bin, NaN if empty), ``frac_pos`` (observed frequency of +1, NaN if empty), ``edges``
    (length ``n_bins + 1``).
    """
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    y = _as_pm(y_true)
    p = _check_prob(p, y.size)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.clip(np.digitize(p, edges[1:-1], right=False), 0, n_bins - 1)
    count = np.bincount(idx, minlength=n_bins).astype(float)
    sum_p = np.bincount(idx, weights=p, minlength=n_bins)
    sum_y = np.bincount(idx, weights=(y > 0).astype(float), minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_prob = np.where(count > 0, sum_p / np.maximum(count, 1), np.nan)
        frac_pos = np.where(count > 0, sum_y / np.maximum(count, 1), np.nan)
    return {"count": count, "mean_prob": mean_prob, "frac_pos": frac_pos, "edges": edges}


def expected_calibration_error(y_true, p, n_bins: int = 10) -> float:
    r"""Expected calibration error with equal-width bins on P(y = +1).

    .. math:: \mathrm{ECE} = \sum_b \frac{n_b}{n} \left| \bar y_b - \bar p_b \right|

    where :math:`\bar y_b` is the observed frequency of +1 and :math:`\bar p_b` the mean
    predicted probability in bin ``b``.
    """
    bins = calibration_bins(y_true, p, n_bins)
    count = bins["count"]
    ok = count > 0
    gap = np.abs(bins["frac_pos"][ok] - bins["mean_prob"][ok])
    return float(np.sum(count[ok] * gap) / np.sum(count))


def _user_labels(y_true, pos_label) -> np.ndarray:
    """``y_true`` in the user's labels as -1/+1: ``+1`` where it equals ``pos_label``, or as a
    fit's :class:`~ppl_bsvm.data.BinaryLabels` maps them."""
    from .data import BinaryLabels

    if isinstance(pos_label, BinaryLabels):
        return pos_label.encode(y_true)
    y = np.asarray(y_true)
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"y_true must be a non-empty 1-D array, got shape {y.shape}")
    positive = np.asarray(y == pos_label, dtype=bool)
    others = sorted(set(y[~positive].tolist()), key=repr)
    if len(others) > 1:
        raise ValueError(
            f"y_true has {len(others)} labels besides pos_label={pos_label!r} "
            f"({others[:5]}); a binary report needs exactly one other label"
        )
    return np.where(positive, 1.0, -1.0)


def classification_report(y_true, p, *, pos_label=None) -> dict[str, float]:
    """All metrics at once: ``error``, ``brier``, ``nlpd``, ``auc`` (NaN with one class), ``ece``.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        The true labels: -1/+1, 0/1 or bools, or the user's own labels (strings, ...) with
        ``pos_label``.
    p : array-like of shape (n,)
        P(y = positive class), e.g. ``Fit.predict_proba``.
    pos_label : label or BinaryLabels, optional
        The label ``p`` is the probability of (the other label is the negative class), or a
        fit's ``labels`` (``fit.labels``: both labels checked, as the fit mapped them). Needed
        for labels other than -1/+1, 0/1 and bools, as scikit-learn's ``pos_label``.

    Examples
    --------
    >>> classification_report(["yes", "no", "yes"], [0.9, 0.2, 0.4], pos_label="yes")["error"]
    0.3333333333333333
    """
    if pos_label is not None:
        y_true = _user_labels(y_true, pos_label)
    y = _as_pm(y_true)
    one_class = np.all(y > 0) or np.all(y < 0)
    return {
        "error": error_rate(y, p),
        "brier": brier_score(y, p),
        "nlpd": nlpd(y, p),
        "auc": float("nan") if one_class else auc(y, p),
        "ece": expected_calibration_error(y, p),
    }
