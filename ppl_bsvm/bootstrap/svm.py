r"""Exact support vector machines for the bootstrap: an active-set dual solver of our own.

The SVM without bias (Malzahn & Opper's classifier, ``specs/replica_tap.md`` section 1) on a
training set with multiplicities ``s_i`` solves the dual

.. math::

    \min_\alpha \tfrac12 \alpha^\top Q \alpha - 1^\top \alpha, \quad
    0 \le \alpha_i \le C s_i, \quad Q = Y K Y,

(hard margin: no upper bound; points with ``s_i = 0`` are left out), and its output is
``f(x) = sum_j y_j alpha_j K(x, x_j)``. The KKT conditions are ``y_i f(x_i) >= 1`` where
``alpha_i = 0``, ``= 1`` where ``0 < alpha_i < C s_i`` and ``<= 1`` where ``alpha_i = C s_i``.

:func:`solve_box_qp` is a Lawson-Hanson-type primal active-set method for this box-constrained
strictly convex QP: the free variables are solved for exactly (Cholesky of ``Q_FF``), the most
violating bound variable is freed, and a step back to the box keeps the iterate feasible, so
the objective decreases monotonically and the method terminates with the exact solution (up to
rounding) on the final active set. A warm start from a guessed free set (e.g. the support
vectors of the SVM on all data, for a bootstrap resample) usually leaves only a few swaps.

The SVM *with* a bias term comes from scikit-learn (``SVC(kernel="precomputed")``); a bias
can also be emulated without one by adding a large constant to the kernel (spec 8.1).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import cho_factor, cho_solve

__all__ = [
    "DualSolution",
    "SVMSolution",
    "solve_box_qp",
    "svm_without_bias",
    "svm_with_bias",
    "kkt_violation",
]

_LOWER, _FREE, _UPPER = 0, 1, 2


class DualSolution(NamedTuple):
    """Solution of the box QP.

    Attributes
    ----------
    alpha : ndarray (m,)
    n_iter : int
        Active-set changes (variables freed plus variables returned to a bound).
    kkt_violation : float
        Largest violation of the KKT conditions at ``alpha`` (0 for an exact solution).
    """

    alpha: np.ndarray
    n_iter: int
    kkt_violation: float


class SVMSolution(NamedTuple):
    """An SVM trained on (a resample of) the data.

    Attributes
    ----------
    alpha : ndarray (n,)
        Dual coefficients, 0 for points outside the training set.
    field : ndarray (n,)
        ``f(x_i)`` at every one of the ``n`` inputs (in-sample and out-of-sample).
    bias : float
        The threshold ``b`` (0 for the SVM without bias).
    support : ndarray (n,) of bool
        Support vectors (``alpha > 0``).
    n_iter : int
    kkt_violation : float
    """

    alpha: np.ndarray
    field: np.ndarray
    bias: float
    support: np.ndarray
    n_iter: int
    kkt_violation: float


def kkt_violation(Q, alpha, upper) -> float:
    """Largest KKT violation of ``alpha`` for ``min a^T Q a / 2 - 1^T a, 0 <= a <= upper``.

    With ``g = Q alpha - 1``: ``-g`` where ``alpha = 0``, ``|g|`` where free, ``g`` where
    ``alpha = upper``, and any bound violation.
    """
    g = Q @ alpha - 1.0
    upper = np.broadcast_to(np.asarray(upper, dtype=float), alpha.shape)
    scale = np.maximum(1.0, np.abs(alpha).max(initial=0.0))
    at_lower = alpha <= 0.0
    at_upper = alpha >= upper
    free = ~at_lower & ~at_upper
    parts = [
        np.max(-g[at_lower], initial=0.0),
        np.max(np.abs(g[free]), initial=0.0),
        np.max(g[at_upper], initial=0.0),
        np.max(-alpha, initial=0.0) / scale,
        np.max(alpha - upper, initial=0.0) / scale,
    ]
    return float(max(parts))


def _solve_free(Q, upper, state):
    """Minimiser over the free variables with the others at their bounds."""
    free = np.flatnonzero(state == _FREE)
    up = np.flatnonzero(state == _UPPER)
    rhs = np.ones(free.size)
    if up.size:
        rhs -= Q[np.ix_(free, up)] @ upper[up]
    if free.size == 0:
        return free, rhs
    Qff = Q[np.ix_(free, free)]
    try:
        z = cho_solve(cho_factor(Qff, lower=True, check_finite=False), rhs, check_finite=False)
    except np.linalg.LinAlgError:
        z = np.linalg.lstsq(Qff, rhs, rcond=None)[0]
    return free, z


def _warm_state(Q, upper, free0, upper0):
    """A feasible start from a guessed free set: drop guesses whose solution leaves the box."""
    m = Q.shape[0]
    state = np.full(m, _LOWER)
    if upper0 is not None:
        state[np.asarray(upper0, dtype=bool) & np.isfinite(upper)] = _UPPER
    state[np.asarray(free0, dtype=bool)] = _FREE
    alpha = np.zeros(m)
    for _ in range(m + 1):
        free, z = _solve_free(Q, upper, state)
        below = z <= 0.0
        above = z >= upper[free]
        if not (below.any() or above.any()):
            alpha[free] = z
            break
        state[free[below]] = _LOWER
        state[free[above]] = _UPPER
    alpha[state == _UPPER] = upper[state == _UPPER]
    return state, alpha


def solve_box_qp(
    Q,
    upper=None,
    *,
    free_init=None,
    upper_init=None,
    tol: float = 1e-10,
    max_iter: int | None = None,
) -> DualSolution:
    r"""Exact minimiser of ``a^T Q a / 2 - 1^T a`` subject to ``0 <= a <= upper``.

    Parameters
    ----------
    Q : ndarray (m, m)
        Symmetric positive definite.
    upper : ndarray (m,) or float, optional
        Upper bounds (``inf`` or None: hard margin, only ``a >= 0``).
    free_init, upper_init : ndarray (m,) of bool, optional
        Warm start: variables guessed free / at their upper bound.
    tol : float, default=1e-10
        KKT tolerance on the gradient ``Q a - 1`` (the margins ``y f - 1``).
    max_iter : int, optional
        Cap on active-set changes (default ``50 m + 100``).

    Returns
    -------
    DualSolution

    Raises
    ------
    RuntimeError
        If the cap is reached (never observed; it would indicate a singular ``Q``).
    """
    Q = np.asarray(Q, dtype=np.float64)
    m = Q.shape[0]
    if upper is None:
        upper = np.full(m, np.inf)
    upper = np.broadcast_to(np.asarray(upper, dtype=np.float64), (m,)).copy()
    if np.any(upper <= 0):
        raise ValueError("upper bounds must be > 0")
    max_iter = 50 * m + 100 if max_iter is None else int(max_iter)
    if free_init is None:
        state, alpha = np.full(m, _LOWER), np.zeros(m)
    else:
        state, alpha = _warm_state(Q, upper, free_init, upper_init)
    blocked = np.zeros(m, dtype=bool)  # entering variables that could not move (rounding)
    n_iter = 0
    while True:
        g = Q @ alpha - 1.0
        viol = np.where(state == _LOWER, -g, np.where(state == _UPPER, g, 0.0))
        viol[blocked] = 0.0
        j = int(np.argmax(viol))
        if viol[j] <= tol:
            break
        if n_iter >= max_iter:
            raise RuntimeError(f"active-set SVM solver did not converge in {max_iter} changes")
        state[j] = _FREE
        n_iter += 1
        while True:
            free, z = _solve_free(Q, upper, state)
            uf = upper[free]
            below = z <= 0.0
            above = z >= uf
            if not (below.any() or above.any()):
                alpha[free] = z
                blocked[:] = False
                break
            a_free = alpha[free]
            ratios = np.full(free.size, np.inf)
            ratios[below] = a_free[below] / (a_free[below] - z[below])
            ratios[above] = (uf[above] - a_free[above]) / (z[above] - a_free[above])
            t = float(np.clip(ratios.min(), 0.0, 1.0))
            a_new = a_free + t * (z - a_free)
            hit_low = below & (ratios <= t)
            hit_up = above & (ratios <= t)
            if t == 0.0 and free[hit_low | hit_up].tolist() == [j]:
                blocked[j] = True  # the entering variable itself cannot move: try another
            alpha[free] = a_new
            alpha[free[hit_low]] = 0.0
            alpha[free[hit_up]] = uf[hit_up]
            state[free[hit_low]] = _LOWER
            state[free[hit_up]] = _UPPER
            n_iter += int(hit_low.sum() + hit_up.sum())
            if n_iter >= max_iter:
                raise RuntimeError(
                    f"active-set SVM solver did not converge in {max_iter} changes"
                )
    return DualSolution(alpha, n_iter, kkt_violation(Q, alpha, upper))


def svm_without_bias(
    K,
    y,
    *,
    C: float | None = None,
    counts=None,
    warm_support=None,
    warm_bound=None,
    tol: float = 1e-10,
) -> SVMSolution:
    """The SVM without bias trained on the points with ``counts > 0`` (all by default).

    Parameters
    ----------
    K : ndarray (n, n)
        Kernel matrix of all ``n`` inputs (positive definite on the training points).
    y : ndarray (n,)
        Labels in {-1, +1}.
    C : float, optional
        Soft-margin penalty per copy (``alpha_i <= C counts_i``); None: hard margin.
    counts : ndarray (n,) of int, optional
        Multiplicities ``s_i`` of a bootstrap resample (default all 1). Only presence matters
        for the hard margin.
    warm_support, warm_bound : ndarray (n,) of bool, optional
        Warm start: guessed free support vectors, and (soft margin) guessed bounded ones.
    tol : float, default=1e-10
        KKT tolerance on the margins.

    Returns
    -------
    SVMSolution
        ``field`` is the output at all ``n`` inputs, so out-of-bag points are included.
    """
    K = np.asarray(K, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = y.shape[0]
    counts = np.ones(n, dtype=np.int64) if counts is None else np.asarray(counts)
    idx = np.flatnonzero(counts > 0)
    Qs = (y[idx, None] * K[np.ix_(idx, idx)]) * y[None, idx]
    upper = None if C is None else C * counts[idx].astype(np.float64)
    free0 = None if warm_support is None else np.asarray(warm_support, dtype=bool)[idx]
    up0 = None if warm_bound is None else np.asarray(warm_bound, dtype=bool)[idx]
    if free0 is not None and up0 is not None:
        free0 = free0 & ~up0
    sol = solve_box_qp(Qs, upper, free_init=free0, upper_init=up0, tol=tol)
    alpha = np.zeros(n)
    alpha[idx] = sol.alpha
    field = K[:, idx] @ (y[idx] * sol.alpha)
    return SVMSolution(alpha, field, 0.0, alpha > 0, sol.n_iter, sol.kkt_violation)


def svm_with_bias(K, y, *, C: float = 1e6, counts=None, tol: float = 1e-6) -> SVMSolution:
    """The SVM with an unregularised bias, by scikit-learn's ``SVC(kernel="precomputed")``.

    ``C = 1e6`` approximates the hard margin (spec 8.1); for a soft margin the multiplicities
    enter as ``sample_weight`` (penalty ``C s_i``).

    Returns
    -------
    SVMSolution
        ``field`` includes the bias; ``kkt_violation`` is NaN (libsvm reports none).
    """
    from sklearn.svm import SVC

    K = np.asarray(K, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = y.shape[0]
    counts = np.ones(n, dtype=np.int64) if counts is None else np.asarray(counts)
    idx = np.flatnonzero(counts > 0)
    weight = counts[idx].astype(np.float64)
    svc = SVC(kernel="precomputed", C=C, tol=tol, shrinking=True)
    svc.fit(K[np.ix_(idx, idx)], y[idx], sample_weight=weight)
    alpha = np.zeros(n)
    sv = idx[svc.support_]
    # dual_coef_ = y_i alpha_i
    alpha[sv] = np.abs(svc.dual_coef_[0])
    field = K[:, sv] @ svc.dual_coef_[0] + svc.intercept_[0]
    return SVMSolution(alpha, field, float(svc.intercept_[0]), alpha > 0, int(svc.n_iter_[0]), np.nan)
