r"""Error estimates built from bootstrap averages: Efron's .632 and .632+, and the approximate
leave-one-out of the SVM (Opper & Winther 2000; Malzahn & Opper 2003 Eq. 20).

With ``err`` the training (apparent) error, ``Err1 = eps(S = N)`` the leave-one-out bootstrap
(out-of-bag) error and ``gamma_hat`` the no-information error rate (Efron & Tibshirani 1997):

.. math::

    \mathrm{Err}_{.632} = 0.368\,\mathrm{err} + 0.632\,\mathrm{Err1}, \qquad
    \mathrm{Err}_{.632+} = \mathrm{Err}_{.632} + (\mathrm{Err1}' - \mathrm{err})
        \frac{0.368 \cdot 0.632\, R'}{1 - 0.368 R'},

with ``Err1' = min(Err1, gamma_hat)`` and the relative overfitting rate
``R' = (Err1' - err) / (gamma_hat - err)`` (0 unless ``Err1 > err`` and ``gamma_hat > err``).
For the hard-margin SVM ``err = 0``, so ``Err.632 = 0.632 eps(N)`` (spec section 6.5).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from .svm import svm_with_bias, svm_without_bias

__all__ = [
    "efron632",
    "efron632_plus",
    "no_information_rate",
    "approximate_loo",
    "fit_on_all",
]


def efron632(err1: float, err_train: float) -> float:
    """Efron's .632 estimate ``0.368 err_train + 0.632 err1``."""
    return 0.368 * float(err_train) + 0.632 * float(err1)


def efron632_plus(err1: float, err_train: float, no_info: float) -> float:
    """Efron & Tibshirani's (1997) .632+ estimate (module docstring)."""
    err1, err, g = float(err1), float(err_train), float(no_info)
    err1c = min(err1, g)
    if err1 > err and g > err:
        R = (err1c - err) / (g - err)
    else:
        R = 0.0
    R = min(max(R, 0.0), 1.0)
    return efron632(err1, err) + (err1c - err) * (0.368 * 0.632 * R) / (1.0 - 0.368 * R)


def no_information_rate(y, prediction, *, loss: str = "01") -> float:
    r"""Error rate if inputs and labels were independent.

    ``loss="01"``: :math:`\hat\gamma = p_1 (1 - q_1) + (1 - p_1) q_1` with ``p_1`` the
    fraction of labels +1 and ``q_1`` the fraction of predictions > 0.
    ``loss="squared"``: :math:`\frac{1}{N^2} \sum_{i, j} (y_i - f_j)^2`.
    """
    y = np.asarray(y, dtype=np.float64)
    f = np.asarray(prediction, dtype=np.float64)
    if loss == "01":
        p1 = np.mean(y > 0)
        q1 = np.mean(f > 0)
        return float(p1 * (1 - q1) + (1 - p1) * q1)
    if loss == "squared":
        return float(np.mean(y**2) - 2 * np.mean(y) * np.mean(f) + np.mean(f**2))
    raise ValueError(f"loss must be '01' or 'squared', got {loss!r}")


def approximate_loo(K, y, alpha):
    r"""Approximate leave-one-out of the hard-margin SVM without bias (Eq. 20).

    The ``S -> inf`` limit of the bootstrap: the cavity field of a support vector is
    ``y_i m^c_i = 1 - alpha_i / [K_SV^{-1}]_ii`` and that of any other point its output
    ``y_i f(x_i) > 1``; the estimate is the fraction with ``y_i m^c_i < 0``.

    Parameters
    ----------
    K : ndarray (n, n)
    y : ndarray (n,)
    alpha : ndarray (n,)
        Dual coefficients of the SVM on all ``n`` points.

    Returns
    -------
    error : float
    cavity_margin : ndarray (n,)
        ``y_i m^c_i`` for every training point.
    """
    K = np.asarray(K, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.float64)
    sv = alpha > 0
    margin = y * (K @ (y * alpha))
    if sv.any():
        Ksv = K[np.ix_(sv, sv)]
        inv_diag = np.diag(cho_solve(cho_factor(Ksv, lower=True), np.eye(int(sv.sum()))))
        margin[sv] = 1.0 - alpha[sv] / inv_diag
    return float(np.mean(margin < 0)), margin


def fit_on_all(K, y, variant, *, bias: bool = False, warm_support=None):
    """The machine trained on all data, its training error and the no-information rate.

    Parameters
    ----------
    K : ndarray (n, n)
    y : ndarray (n,)
    variant : Variant
        ``kind`` in {"hard", "soft", "regression"}, ``C``, ``noise``.
    bias : bool, default=False
        SVM with a bias term (scikit-learn ``SVC``, ``C = 1e6`` for the hard margin).
    warm_support : ndarray (n,) of bool, optional
        Guessed support vectors for the active-set solver of the SVM without bias (the
        solution does not depend on it, only the number of active-set changes).

    Returns
    -------
    machine : SVMSolution or None
        None for regression.
    err_train : float
        0/1 training error (``y f <= 0`` counts as an error) or mean squared error.
    no_info : float
    """
    if variant.kind == "regression":
        f = K @ np.linalg.solve(K + variant.noise * np.eye(len(y)), y)
        return None, float(np.mean((y - f) ** 2)), no_information_rate(y, f, loss="squared")
    C = variant.C if variant.kind == "soft" else None
    if bias:
        sol = svm_with_bias(K, y, C=1e6 if C is None else C)
    else:
        sol = svm_without_bias(K, y, C=C, warm_support=warm_support)
    return sol, float(np.mean(y * sol.field <= 0)), no_information_rate(y, sol.field)
