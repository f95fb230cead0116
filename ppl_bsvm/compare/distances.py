r"""Distances between a candidate posterior and a reference posterior, from draws.

Every function takes draws as arrays of shape ``(num_draws, dim)`` (pool chains first) and
returns unrounded floats. Gaussian fits are moment matched to the draws.

- :func:`standardized_mean_error`: ``|mean_c - mean_r| / sd_r`` per coordinate.
- :func:`sd_ratio`: ``sd_c / sd_r`` per coordinate (< 1: the candidate is too narrow).
- :func:`gaussian_kl`, :func:`gaussian_w2`: KL divergence and 2-Wasserstein distance between
  two Gaussians, in closed form.
- :func:`marginal_kl`, :func:`marginal_w2`: the same between the products of the Gaussians
  moment-matched to each coordinate's draws (``compare``'s ``kl_forward``, ``kl_reverse`` and
  ``w2_gauss``): their estimation bias grows as ``dim / draws``, not ``dim^2 / draws``.
- :func:`principal_basis`, :func:`projected_kl`: KL between Gaussians fitted to the draws
  projected on the reference's leading principal axes (``compare``'s ``kl_joint``), a joint
  measure whose bias stays small in any dimension.
- :func:`energy_distance`: the energy distance of Szekely and Rizzo on the draws themselves;
  :func:`marginal_energy_distance` its mean over coordinates (exact, from sorted draws).
- :func:`interval_coverage`: fraction of the reference draws inside the candidate's central
  interval, per coordinate (a calibrated candidate gives the interval's probability).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..inference import mvn

__all__ = [
    "standardized_mean_error",
    "sd_ratio",
    "gaussian_fit",
    "gaussian_kl",
    "gaussian_w2",
    "marginal_kl",
    "marginal_w2",
    "principal_basis",
    "projected_kl",
    "energy_distance",
    "marginal_energy_distance",
    "interval_coverage",
]


def _draws(x, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"{name} must be draws of shape (num_draws >= 2, dim), got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or inf")
    return x


def _pair(candidate, reference):
    c, r = _draws(candidate, "candidate"), _draws(reference, "reference")
    if c.shape[1] != r.shape[1]:
        raise ValueError(f"candidate has dim {c.shape[1]} but reference has dim {r.shape[1]}")
    return c, r


def standardized_mean_error(candidate, reference) -> np.ndarray:
    """``|mean_c - mean_r| / sd_r`` for each coordinate (reference sd, ``ddof=1``)."""
    c, r = _pair(candidate, reference)
    return np.abs(c.mean(0) - r.mean(0)) / r.std(0, ddof=1)


def sd_ratio(candidate, reference) -> np.ndarray:
    """``sd_c / sd_r`` for each coordinate."""
    c, r = _pair(candidate, reference)
    return c.std(0, ddof=1) / r.std(0, ddof=1)


def gaussian_fit(draws, diagonal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance (``ddof=1``) of the draws; diagonal covariance if asked."""
    x = _draws(draws, "draws")
    mean = x.mean(0)
    if diagonal:
        return mean, np.diag(x.var(0, ddof=1))
    return mean, np.atleast_2d(np.cov(x, rowvar=False))


def gaussian_kl(mean0, cov0, mean1, cov1) -> float:
    r"""``KL(N(mean0, cov0) || N(mean1, cov1))``.

    .. math:: \tfrac12\left[\mathrm{tr}(\Sigma_1^{-1}\Sigma_0) + (\mu_1-\mu_0)^\top
              \Sigma_1^{-1}(\mu_1-\mu_0) - k + \log\frac{|\Sigma_1|}{|\Sigma_0|}\right]

    Computed with Cholesky factors (``ppl_bsvm.inference.mvn.kl``, in float64); raises
    ``ValueError`` if a covariance is not positive definite (too few draws for the dimension,
    or a point mass).
    """
    mean0, mean1 = np.atleast_1d(mean0), np.atleast_1d(mean1)
    cov0, cov1 = np.atleast_2d(cov0), np.atleast_2d(cov1)
    try:  # NumPy's Cholesky raises where JAX's returns NaN
        L0 = np.linalg.cholesky(cov0)
        L1 = np.linalg.cholesky(cov1)
    except np.linalg.LinAlgError:
        raise ValueError("a covariance is not positive definite; use a diagonal fit") from None
    with jax.enable_x64(True):
        return float(mvn.kl(*(jnp.asarray(a, jnp.float64) for a in (mean0, L0, mean1, L1))))


def _sqrtm_psd(S: np.ndarray) -> np.ndarray:
    w, V = np.linalg.eigh(0.5 * (S + S.T))
    return (V * np.sqrt(np.clip(w, 0.0, None))) @ V.T


def gaussian_w2(mean0, cov0, mean1, cov1) -> float:
    r"""2-Wasserstein distance between two Gaussians.

    .. math:: W_2^2 = \|\mu_0-\mu_1\|^2 + \mathrm{tr}\left(\Sigma_0 + \Sigma_1
              - 2 (\Sigma_1^{1/2}\Sigma_0\Sigma_1^{1/2})^{1/2}\right)
    """
    mean0, mean1 = np.atleast_1d(mean0), np.atleast_1d(mean1)
    cov0, cov1 = np.atleast_2d(cov0), np.atleast_2d(cov1)
    root1 = _sqrtm_psd(cov1)
    cross = _sqrtm_psd(root1 @ cov0 @ root1)
    w2sq = np.sum((mean0 - mean1) ** 2) + np.trace(cov0) + np.trace(cov1) - 2.0 * np.trace(cross)
    return float(np.sqrt(max(w2sq, 0.0)))


def _moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x.mean(0), x.std(0, ddof=1)


def marginal_kl(p_draws, q_draws) -> float:
    r"""``KL(prod_j N(m_pj, s_pj^2) || prod_j N(m_qj, s_qj^2))``, the Gaussians moment-matched to
    each coordinate's draws:

    .. math:: \sum_j \log\frac{s_{qj}}{s_{pj}} + \frac{s_{pj}^2 + (m_{pj} - m_{qj})^2}
              {2 s_{qj}^2} - \frac12 .

    Each coordinate adds an estimation bias of about ``(1/N_p + 1/N_q)`` nats for ``N`` effective
    draws (the squared error of two means and two log-variances), so ``dim`` coordinates add
    ``dim (1/N_p + 1/N_q)``; a full-covariance fit adds about ``dim^2 / (4 N)``, which in 398
    dimensions and 4,000 draws is 10 nats, larger than most approximation errors. ``inf``
    where a coordinate of ``q`` has no spread (a point mass).
    """
    p, q = _pair(p_draws, q_draws)
    (mp, sp), (mq, sq) = _moments(p), _moments(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.log(sq / sp) + (sp**2 + (mp - mq) ** 2) / (2.0 * sq**2) - 0.5
    if np.any(sq == 0) or np.any(sp == 0):
        return np.inf
    return float(np.sum(terms))


def marginal_w2(candidate, reference, *, scale=None) -> float:
    r"""2-Wasserstein distance between the products of the Gaussians moment-matched to each
    coordinate's draws, ``sqrt(sum_j ((m_cj - m_rj)^2 + (s_cj - s_rj)^2) / scale_j^2)``
    (``scale`` 1 unless given; ``compare`` passes the reference sd)."""
    c, r = _pair(candidate, reference)
    (mc, sc), (mr, sr) = _moments(c), _moments(r)
    scale = np.ones(c.shape[1]) if scale is None else np.asarray(scale, dtype=np.float64)
    return float(np.sqrt(np.sum(((mc - mr) ** 2 + (sc - sr) ** 2) / scale**2)))


EXACT_SVD_SIZE = 500
"""Above this many draws and coordinates both, :func:`principal_basis` finds the leading axes
by randomised subspace iteration (scikit-learn's ``randomized_svd``, seeded) instead of a full
SVD (4,000 draws of 5,000 coordinates: about 1 s instead of a minute)."""


def principal_basis(reference, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(center, scale, V)``: the reference's mean and sd, and its ``k`` leading principal
    axes after standardising (eigenvectors of the draws' correlation matrix, ``(dim, k)``),
    so that ``((x - center) / scale) @ V`` projects draws on them (:func:`projected_kl`)."""
    r = _draws(reference, "reference")
    center, scale = _moments(r)
    scale = np.where(scale > 0, scale, 1.0)
    z = (r - center) / scale
    k = int(min(k, r.shape[1]))
    if min(z.shape) <= EXACT_SVD_SIZE:
        _, _, Vt = np.linalg.svd(z, full_matrices=False)
    else:  # thousands of coordinates and draws: the leading axes only, by subspace iteration
        from sklearn.utils.extmath import randomized_svd

        _, _, Vt = randomized_svd(z, n_components=k, n_iter=7, random_state=0)
    V = Vt[:k].T
    return center, scale, V


def projected_kl(p_draws, q_draws, basis) -> float:
    """``KL(N_p || N_q)`` between Gaussians (full covariance) fitted to both sets of draws
    projected by ``basis`` (:func:`principal_basis`); NaN with fewer than ``2 k + 2`` draws
    on either side, ``inf`` when a projected covariance is singular (a point mass)."""
    p, q = _pair(p_draws, q_draws)
    center, scale, V = basis
    k = V.shape[1]
    if min(p.shape[0], q.shape[0]) < 2 * k + 2:
        return float("nan")
    zp, zq = ((p - center) / scale) @ V, ((q - center) / scale) @ V
    try:
        return gaussian_kl(*gaussian_fit(zp), *gaussian_fit(zq))
    except ValueError:
        return float("inf")


def marginal_energy_distance(candidate, reference, *, scale=None) -> float:
    r"""Mean over coordinates of the one-dimensional energy distances (V-statistics), each
    computed exactly as :math:`2 \int (F_c - F_r)^2 dt` from the sorted draws (the two are
    equal for empirical distributions); coordinates divided by ``scale`` first."""
    c, r = _pair(candidate, reference)
    if scale is not None:
        scale = np.asarray(scale, dtype=np.float64)
        c, r = c / scale, r / scale
    both = np.concatenate([c, r])
    order = np.argsort(both, axis=0, kind="stable")
    values = np.take_along_axis(both, order, axis=0)
    from_c = order < c.shape[0]
    F = np.cumsum(from_c, axis=0)[:-1] / c.shape[0]
    G = np.cumsum(~from_c, axis=0)[:-1] / r.shape[0]
    return float(np.mean(2.0 * np.sum((F - G) ** 2 * np.diff(values, axis=0), axis=0)))


def _mean_pairwise_distance(a: np.ndarray, b: np.ndarray, block: int = 1024) -> float:
    total = 0.0
    for i in range(0, a.shape[0], block):
        d2 = (
            np.sum(a[i : i + block] ** 2, 1)[:, None]
            + np.sum(b**2, 1)[None, :]
            - 2.0 * a[i : i + block] @ b.T
        )
        total += np.sum(np.sqrt(np.clip(d2, 0.0, None)))
    return total / (a.shape[0] * b.shape[0])


def energy_distance(candidate, reference, *, scale=None, max_draws: int | None = 2000,
                    seed: int = 0) -> float:
    r"""Energy distance between two samples (V-statistic).

    .. math:: D^2 = 2 E\|X - Y\| - E\|X - X'\| - E\|Y - Y'\|

    returned as :math:`D^2 \ge 0` (zero iff the samples coincide as distributions). Coordinates
    are divided by ``scale`` first (``compare`` passes the reference sd, so variables of
    different scales are comparable). With ``max_draws``, each sample is thinned to at most that
    many draws, chosen with ``seed`` (the cost is quadratic in the number of draws).
    """
    c, r = _pair(candidate, reference)
    if scale is not None:
        scale = np.asarray(scale, dtype=np.float64)
        c, r = c / scale, r / scale
    if max_draws is not None:
        # A fresh stream per sample: equal-sized inputs keep the same positions, so identical
        # inputs are at distance exactly 0.
        if c.shape[0] > max_draws:
            c = c[np.random.default_rng(seed).choice(c.shape[0], max_draws, replace=False)]
        if r.shape[0] > max_draws:
            r = r[np.random.default_rng(seed).choice(r.shape[0], max_draws, replace=False)]
    xy = _mean_pairwise_distance(c, r)
    xx = _mean_pairwise_distance(c, c)
    yy = _mean_pairwise_distance(r, r)
    return float(max(2.0 * xy - xx - yy, 0.0))


def interval_coverage(candidate, reference, prob: float) -> np.ndarray:
    """Per coordinate, the fraction of reference draws in the candidate's central interval.

    The interval is the candidate's equal-tailed ``prob`` interval (quantiles ``(1-prob)/2`` and
    ``(1+prob)/2``). A candidate that matches the reference gives ``prob``; a too-narrow one
    gives less.
    """
    if not 0.0 < prob < 1.0:
        raise ValueError(f"prob must be in (0, 1), got {prob!r}")
    c, r = _pair(candidate, reference)
    lo, hi = np.quantile(c, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
    return np.mean((r >= lo) & (r <= hi), axis=0)
