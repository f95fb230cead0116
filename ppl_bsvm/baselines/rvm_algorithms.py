r"""The relevance vector machine's algorithms (Tipping 2001; Tipping & Faul 2003).

Sparse Bayesian kernel regression and classification on a given design matrix: the two evidence
maximisers below, used by the engine ``ppl_bsvm.fit(..., method="rvm")`` (:mod:`.rvm`) and by the
estimators ``ppl_bsvm.RVMRegressor`` and ``ppl_bsvm.RVMClassifier``. Plain NumPy and SciPy: no
kernels, no JAX, no registration here.

Model: ``y(x) = sum_j w_j phi_j(x)`` over the basis ``phi_j(x) = k(x, x_j)`` (one per training
point) plus, with ``bias=True``, a constant ``phi_0(x) = 1``; each weight has its own prior
precision, ``w_j ~ N(0, 1/alpha_j)``, chosen by type-II maximum likelihood (the evidence).
Basis functions whose ``alpha_j`` diverges are pruned; the training points whose basis
functions remain are the *relevance vectors*.

**Regression** (Gaussian noise of precision ``beta``): given ``alpha``, ``beta`` the posterior of
the active weights is ``N(m, Sigma)`` with ``Sigma = (A + beta Phi^T Phi)^{-1}``,
``m = beta Sigma Phi^T t`` (Nikolenko's slides; Tipping 2001 eqs. 12-13), and the log evidence

.. math:: \log p(t \mid \alpha, \beta) = -\tfrac12 \left[N \log 2\pi - N \log\beta
          - \textstyle\sum_j \log\alpha_j + \log|\Sigma^{-1}| + \beta t^\top t
          - \beta\, t^\top \Phi m\right].

**Classification** (``p(y=1 | w) = sigmoid(phi(x)^T w)``): the posterior mode ``w*`` by
Newton / IRLS (gradient ``Phi^T (t - pi) - A w``, Hessian ``-(Phi^T B Phi + A)``,
``B = diag(pi (1 - pi))``, with a backtracking line search) and the Laplace approximation
``Sigma = (Phi^T B Phi + A)^{-1}`` (slides: 'RVM for classification'), whose evidence
``log p(t | w*) - w*^T A w* / 2 + sum log(alpha)/2 - log|Sigma^{-1}|/2`` is maximised over
``alpha`` as in regression, with the Gaussian of the Laplace step in the role of the noise.

Two evidence maximisers:

``algorithm="reestimate"`` (Tipping 2001; the slides): start with every basis function and
iterate ``alpha_j <- gamma_j / m_j^2``, ``gamma_j = 1 - alpha_j Sigma_jj``, and
``1/beta <- |t - Phi m|^2 / (N - sum_j gamma_j)``, pruning ``alpha_j > alpha_max``; stop when
the largest change of ``log alpha`` (and ``log beta``) is below ``tol``.

``algorithm="fast"`` (Tipping & Faul 2003; default): start from the single basis function best
aligned with the targets and, at each step, take the one action (add, re-estimate or delete a
basis function) that raises the evidence most. With ``S_i = phi_i^T C^{-1} phi_i`` and
``Q_i = phi_i^T C^{-1} t`` (``C`` the marginal covariance of ``t``; ``s_i = alpha_i S_i /
(alpha_i - S_i)``, ``q_i = alpha_i Q_i / (alpha_i - S_i)`` for basis functions in the model),
the evidence as a function of ``alpha_i`` alone is maximal at ``alpha_i = s_i^2 / (q_i^2 -
s_i)`` if ``q_i^2 > s_i`` and at ``alpha_i = inf`` (absent) otherwise (their eqs. 20-21), and
each action's gain is closed-form (their section 4 / appendix). ``beta`` is re-estimated after
every action. It stops when no basis function should be added or deleted and every
re-estimation would change ``log alpha`` by less than ``tol``. Work per step is
``O(N M^2)`` for regression (``M`` relevance vectors; ``Phi^T Phi_M`` is kept up to date) and
``O(N^2 M)`` for classification.

Numerics: ``Sigma`` is factorised in the scaled form ``A^{-1/2} (I + A^{-1/2} Phi^T W Phi
A^{-1/2})^{-1} A^{-1/2}`` (eigenvalues of the middle matrix >= 1) however widely the
``alpha`` spread. This is plain NumPy: the model changes size at every step, which a
fixed-shape compiled loop cannot exploit.

**Predictive variance.** ``1/beta + phi(x)^T Sigma phi(x)`` *shrinks* away from the data for
localised basis functions (to ``1/beta`` plus the bias weight's variance): the RVM's prior is
degenerate (Rasmussen & Quinonero-Candela 2005). ``RVMRegressor(augment=True)`` adds, at each
test point ``x*``, a basis function ``k(., x*)`` with weight prior ``N(0, 1/alpha*)``
(their RVM* idea) and integrates it out exactly (a rank-one update of the posterior,
``RVMRegressor._augmented``); we set ``alpha* = k(x*, x*)``, so that far from the data the
latent variance returns to the kernel's prior variance ``k(x*, x*)``.

References: M. E. Tipping. Sparse Bayesian learning and the relevance vector machine. JMLR 1,
2001. M. E. Tipping and A. C. Faul. Fast marginal likelihood maximisation for sparse Bayesian
models. AISTATS 2003. C. E. Rasmussen and J. Quinonero-Candela. Healing the relevance vector
machine through augmentation. ICML 2005. S. Nikolenko. Kernel trick and RVMs (slides), 2017.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.special import expit, log_expit

__all__ = [
    "ALGORITHMS",
    "RVMResult",
    "design_matrix",
    "rvm_regression",
    "rvm_classification",
]

ALGORITHMS = ("fast", "reestimate")
_LOG_2PI = np.log(2.0 * np.pi)


class RVMResult(NamedTuple):
    """What either evidence maximiser returns.

    Attributes
    ----------
    active : ndarray (M,) int
        Columns of the design matrix kept (``N`` is the bias column when present).
    alpha : ndarray (M,)
        Their prior precisions.
    mean : ndarray (M,)
        Posterior mean (regression) or mode (classification) of their weights.
    cov : ndarray (M, M)
        Posterior (Laplace) covariance of the weights.
    beta : float or None
        Noise precision (regression).
    log_evidence : float
        Log marginal likelihood at the end (Laplace approximation for classification).
    trace : ndarray (n_iter,)
        Log evidence after each iteration.
    n_iter : int
    converged : bool
    """

    active: np.ndarray
    alpha: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    beta: float | None
    log_evidence: float
    trace: np.ndarray
    n_iter: int
    converged: bool


def design_matrix(K: np.ndarray, bias: bool) -> np.ndarray:
    """``[K, 1]`` (or ``K``): one basis function per training point, then the bias."""
    return np.hstack([K, np.ones((K.shape[0], 1))]) if bias else K


def _scaled_posterior(alpha, PtWP, rhs):
    """``Sigma = (A + PtWP)^{-1}``, ``Sigma rhs`` and ``log|A + PtWP|`` by the scaled factor."""
    d = 1.0 / np.sqrt(alpha)
    M = alpha.shape[0]
    inner = np.eye(M) + d[:, None] * PtWP * d[None, :]
    chol = cho_factor(inner, lower=True)
    Sigma = d[:, None] * cho_solve(chol, np.diag(d))
    logdet = 2.0 * np.sum(np.log(np.diag(chol[0]))) + np.sum(np.log(alpha))
    return 0.5 * (Sigma + Sigma.T), Sigma @ rhs, logdet


def _regression_evidence(N, beta, alpha, logdet_prec, tt, Pt_m):
    return -0.5 * (N * _LOG_2PI - N * np.log(beta) - np.sum(np.log(alpha)) + logdet_prec
                   + beta * tt - beta * Pt_m)


def _check_targets(t):
    var = float(np.var(t))
    return var if var > 0 else max(float(np.mean(t**2)), 1.0)


def _beta_update(N, M_gamma, resid2, beta_max):
    return float(min(max(N - M_gamma, 1e-12) / max(resid2, 1e-300), beta_max))


def _action_gains(S, Q, alpha, in_model, allow_delete):
    """Tipping & Faul (2003) section 4: new ``alpha`` and evidence gain of each candidate."""
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = np.where(in_model, alpha - S, 1.0)
        s = np.where(in_model, alpha * S / denom, S)
        q = np.where(in_model, alpha * Q / denom, Q)
        theta = q**2 - s
        new_alpha = np.where(theta > 0, s**2 / np.where(theta > 0, theta, 1.0), np.inf)
        gain = np.full(S.shape, -np.inf)
        # re-estimate an active basis function
        re = in_model & (theta > 0)
        delta_inv = 1.0 / new_alpha[re] - 1.0 / alpha[re]
        gain[re] = 0.5 * (Q[re] ** 2 / (S[re] + 1.0 / delta_inv) - np.log1p(S[re] * delta_inv))
        gain[re & ~np.isfinite(gain)] = 0.0
        # delete an active one
        de = in_model & (theta <= 0)
        if allow_delete:
            gain[de] = 0.5 * (Q[de] ** 2 / (S[de] - alpha[de]) - np.log1p(-S[de] / alpha[de]))
        # add an inactive one
        ad = ~in_model & (theta > 0)
        gain[ad] = 0.5 * ((Q[ad] ** 2 - S[ad]) / S[ad] + np.log(S[ad] / Q[ad] ** 2))
    return new_alpha, gain, theta


def _candidates(S, Q, active, alpha, P: int):
    """Which of the ``P`` basis functions are in the model, their ``alpha`` (inf outside),
    and each candidate action's new ``alpha``, gain and ``theta`` (:func:`_action_gains`)."""
    in_model = np.zeros(P, dtype=bool)
    in_model[active] = True
    alpha_full = np.full(P, np.inf)
    alpha_full[active] = alpha
    return (in_model, alpha_full) + _action_gains(S, Q, alpha_full, in_model, active.size > 1)


def _fast_converged(new_alpha, alpha, theta, in_model, tol):
    """Nothing to add or delete, and no re-estimation moves ``log alpha`` by ``tol`` or more.

    The last basis function is never deleted (the model needs one), so its ``theta <= 0``
    does not block convergence.
    """
    if np.any(~in_model & (theta > 0)):
        return False
    deletable = in_model & (theta <= 0)
    if np.any(deletable) and np.sum(in_model) > 1:
        return False
    keep = in_model & (theta > 0)
    with np.errstate(divide="ignore"):  # alpha 0 (s_i = 0 at a degenerate width): not converged
        change = np.abs(np.log(new_alpha[keep]) - np.log(alpha[keep]))
    return bool(np.all(change < tol))


def _initial_basis(Phi, t, beta):
    """The basis function best aligned with the targets, and its optimal ``alpha``."""
    norms = np.sum(Phi**2, axis=0)
    proj = Phi.T @ t
    score = np.where(norms > 0, proj**2 / np.where(norms > 0, norms, 1.0), -np.inf)
    j = int(np.argmax(score))
    excess = score[j] - 1.0 / beta
    alpha = norms[j] / excess if excess > 0 else norms[j] * beta * 1e3
    return j, alpha


def rvm_regression(Phi, t, *, algorithm="fast", max_iter=5000, tol=1e-6, alpha_max=1e9) -> RVMResult:
    """Type-II maximum likelihood for sparse Bayesian regression (module docstring).

    Parameters
    ----------
    Phi : ndarray (N, P)
        Design matrix (``design_matrix``).
    t : ndarray (N,)
    algorithm : {"fast", "reestimate"}
    max_iter : int
    tol : float
        On the change of ``log alpha`` and ``log beta``.
    alpha_max : float
        Pruning threshold of ``"reestimate"``.
    """
    N, P = Phi.shape
    tt = float(t @ t)
    scale = _check_targets(t)
    beta = 100.0 / scale  # noise sd 10% of the targets' sd
    beta_max = 1e12 / scale
    Pt = Phi.T @ t
    trace = []
    converged = False
    if algorithm == "reestimate":
        active = np.arange(P)
        alpha = np.ones(P)
        for it in range(1, max_iter + 1):
            Phi_M = Phi[:, active]
            Sigma, m, logdet = _scaled_posterior(alpha, beta * (Phi_M.T @ Phi_M), beta * Pt[active])
            gamma = 1.0 - alpha * np.diag(Sigma)
            new_alpha = gamma / np.maximum(m**2, 1e-300)
            resid2 = float(np.sum((t - Phi_M @ m) ** 2))
            new_beta = _beta_update(N, np.sum(gamma), resid2, beta_max)
            trace.append(_regression_evidence(N, beta, alpha, logdet, tt, Pt[active] @ m))
            keep = new_alpha < alpha_max
            if not np.any(keep):
                keep[np.argmin(new_alpha)] = True
            change = np.max(np.abs(np.log(new_alpha[keep]) - np.log(alpha[keep])))
            change = max(change, abs(np.log(new_beta) - np.log(beta)))
            pruned = not np.all(keep)
            active, alpha, beta = active[keep], new_alpha[keep], new_beta
            if not pruned and change < tol:
                converged = True
                break
    else:
        j, a0 = _initial_basis(Phi, t, beta)
        active, alpha = np.array([j]), np.array([a0])
        PtPM = Phi.T @ Phi[:, [j]]  # (P, M): Phi^T Phi_M, kept up to date
        diag_PtP = np.sum(Phi**2, axis=0)
        for it in range(1, max_iter + 1):
            PtWP = beta * PtPM[active]
            Sigma, m, logdet = _scaled_posterior(alpha, PtWP, beta * Pt[active])
            resid2 = float(np.sum((t - Phi[:, active] @ m) ** 2))
            gamma = 1.0 - alpha * np.diag(Sigma)
            new_beta = _beta_update(N, np.sum(gamma), resid2, beta_max)
            beta_change = abs(np.log(new_beta) - np.log(beta))
            beta = new_beta
            Sigma, m, logdet = _scaled_posterior(alpha, beta * PtPM[active], beta * Pt[active])
            trace.append(_regression_evidence(N, beta, alpha, logdet, tt, Pt[active] @ m))
            B = PtPM @ Sigma
            S = beta * diag_PtP - beta**2 * np.sum(B * PtPM, axis=1)
            Q = beta * Pt - beta**2 * PtPM @ (Sigma @ Pt[active])
            in_model, alpha_full, new_alpha, gain, theta = _candidates(S, Q, active, alpha, P)
            if beta_change < tol and _fast_converged(new_alpha, alpha_full, theta, in_model, tol):
                converged = True
                break
            i = int(np.argmax(gain))
            if not np.isfinite(gain[i]):
                converged = beta_change < tol
                break
            pos = np.flatnonzero(active == i)
            if in_model[i] and theta[i] > 0:
                alpha[pos[0]] = new_alpha[i]
            elif in_model[i]:
                keep = active != i
                active, alpha, PtPM = active[keep], alpha[keep], PtPM[:, keep]
            else:
                active = np.append(active, i)
                alpha = np.append(alpha, new_alpha[i])
                PtPM = np.hstack([PtPM, Phi.T @ Phi[:, [i]]])
    Phi_M = Phi[:, active]
    Sigma, m, logdet = _scaled_posterior(alpha, beta * (Phi_M.T @ Phi_M), beta * Pt[active])
    evidence = _regression_evidence(N, beta, alpha, logdet, tt, Pt[active] @ m)
    order = np.argsort(active)
    return RVMResult(active[order], alpha[order], m[order], Sigma[np.ix_(order, order)], float(beta),
                     float(evidence), np.asarray(trace), it, converged)


def _laplace_mode(Phi_M, t01, alpha, w0, max_newton=100):
    """Posterior mode of the weights by Newton's method with backtracking (IRLS)."""
    w = w0.copy()

    def log_post(w):
        f = Phi_M @ w
        return float(np.sum(t01 * log_expit(f) + (1.0 - t01) * log_expit(-f)) - 0.5 * np.sum(alpha * w**2))

    current = log_post(w)
    for _ in range(max_newton):
        pi = expit(Phi_M @ w)
        g = Phi_M.T @ (t01 - pi) - alpha * w
        PtBP = (Phi_M.T * (pi * (1.0 - pi))) @ Phi_M
        Sigma, step, _ = _scaled_posterior(alpha, PtBP, g)
        size = 1.0
        while size > 1e-10:
            trial = w + size * step
            value = log_post(trial)
            if value >= current:
                break
            size *= 0.5
        else:
            break
        w, previous, current = trial, current, value
        if np.max(np.abs(size * step)) < 1e-10 or current - previous < 1e-13 * (1.0 + abs(current)):
            break
    pi = expit(Phi_M @ w)
    b = pi * (1.0 - pi)
    PtBP = (Phi_M.T * b) @ Phi_M
    Sigma, _, logdet = _scaled_posterior(alpha, PtBP, np.zeros_like(w))
    evidence = current + 0.5 * np.sum(np.log(alpha)) - 0.5 * logdet
    return w, Sigma, pi, b, evidence


def rvm_classification(Phi, y, *, algorithm="fast", max_iter=5000, tol=1e-6, alpha_max=1e9) -> RVMResult:
    """Type-II maximum likelihood for the sparse Bayesian classifier (Laplace approximation).

    Parameters are those of :func:`rvm_regression`; ``y`` in {-1, +1}.
    """
    N, P = Phi.shape
    t01 = 0.5 * (y + 1.0)
    trace = []
    converged = False
    if algorithm == "reestimate":
        active = np.arange(P)
        alpha = np.ones(P)
        w = np.zeros(P)
        for it in range(1, max_iter + 1):
            w, Sigma, _, _, evidence = _laplace_mode(Phi[:, active], t01, alpha, w)
            trace.append(evidence)
            gamma = 1.0 - alpha * np.diag(Sigma)
            new_alpha = gamma / np.maximum(w**2, 1e-300)
            keep = new_alpha < alpha_max
            if not np.any(keep):
                keep[np.argmin(new_alpha)] = True
            change = np.max(np.abs(np.log(new_alpha[keep]) - np.log(alpha[keep])))
            pruned = not np.all(keep)
            active, alpha, w = active[keep], new_alpha[keep], w[keep]
            if not pruned and change < tol:
                converged = True
                break
    else:
        j, a0 = _initial_basis(Phi, y, 1.0)
        active, alpha, w = np.array([j]), np.array([a0]), np.zeros(1)
        for it in range(1, max_iter + 1):
            Phi_M = Phi[:, active]
            w, Sigma, pi, b, evidence = _laplace_mode(Phi_M, t01, alpha, w)
            trace.append(evidence)
            PtBPM = Phi.T @ (b[:, None] * Phi_M)  # (P, M)
            S = (Phi**2).T @ b - np.sum((PtBPM @ Sigma) * PtBPM, axis=1)
            Q = Phi.T @ (t01 - pi)  # = phi^T B (t_hat - Phi_M w) at the mode
            in_model, alpha_full, new_alpha, gain, theta = _candidates(S, Q, active, alpha, P)
            if _fast_converged(new_alpha, alpha_full, theta, in_model, tol):
                converged = True
                break
            i = int(np.argmax(gain))
            if not np.isfinite(gain[i]):
                break
            pos = np.flatnonzero(active == i)
            if in_model[i] and theta[i] > 0:
                alpha[pos[0]] = new_alpha[i]
            elif in_model[i]:
                keep = active != i
                active, alpha, w = active[keep], alpha[keep], w[keep]
            else:
                active, alpha, w = np.append(active, i), np.append(alpha, new_alpha[i]), np.append(w, 0.0)
    w, Sigma, _, _, evidence = _laplace_mode(Phi[:, active], t01, alpha, w)
    order = np.argsort(active)
    return RVMResult(active[order], alpha[order], w[order], Sigma[np.ix_(order, order)], None,
                     float(evidence), np.asarray(trace), it, converged)
