r"""Closed-form evidence lower bounds of the mean-field Bayesian SVM (Wenzel et al. 2017).

Model (``specs/bsvm_inference.md`` sections 1, 3, 6): pseudo-likelihood
``L(y_i | f_i) = exp(-2 gamma max(0, 1 - y_i f_i))`` written as the scale mixture
``p(y_i, lam_i | f_i) = N(1 + lam_i; y_i f_i, lam_i / gamma)`` over ``lam_i > 0`` (flat prior).
Variational family: ``q(f)`` (or ``q(beta)``, ``q(u)``) Gaussian, with marginals ``m_i``,
``s_i`` of the latent function at the training inputs (for the sparse model ``s_i`` includes
``Ktilde_ii``), and ``q(lam_i) = GIG(1/2, gamma, gamma alpha_i)``, for which
``E[1/lam_i] = alpha_i^{-1/2}`` and ``E[lam_i] = alpha_i^{1/2} + 1/gamma`` whatever ``gamma``.

All normalising constants and the ``E[log lam]`` terms cancel exactly (``K_{1/2}(z) =
sqrt(pi / (2 z)) e^{-z}``), leaving

.. math::

    \mathcal L = \gamma \sum_i \Big[y_i m_i - 1 - \frac{\tilde\alpha_i}{2\sqrt{\alpha_i}}
                 - \frac{\sqrt{\alpha_i}}{2}\Big] - \mathrm{KL}(q \,\|\, p),
    \qquad \tilde\alpha_i = (1 - y_i m_i)^2 + s_i .

The optimal ``alpha_i = alphatilde_i`` (paper eq. 11) gives the *collapsed* bound

.. math:: \mathcal L^* = \gamma \sum_i \Big[y_i m_i - 1 - \sqrt{(1 - y_i m_i)^2 + s_i}\Big]
          - \mathrm{KL}(q \,\|\, p),

a smoothed hinge loss that tends to ``-2 gamma max(0, 1 - y m)`` as ``s -> 0`` and, by Jensen,
never exceeds ``E_q[log L(y | f)] - KL``. There is no additive constant: every term of a valid
bound is <= 0 per data point (some published code gets a positive value, which no bound on a
pseudo-likelihood <= 1 can be).

A further identity makes the batch engines cheap: for fixed ``alpha`` the best Gaussian ``q(f)``
is the posterior of a GP regression with targets ``t_i = y_i (1 + sqrt(alpha_i))`` and noise
variances ``N_i = sqrt(alpha_i) / gamma``, and at that ``q``

.. math:: \max_q \mathcal L(q, \alpha) = \log N(t; 0, K + N) + \tfrac12 \sum_i \log(2\pi N_i),

(complete the square in ``f``: the data term of point ``i`` is ``log N(t_i; f_i, N_i)
+ log(2 pi N_i) / 2``). :func:`regression_bound` evaluates it; its gradient with respect to the
kernel hyperparameters is the hyperparameter gradient of paper eq. 12 at the optimal ``q``
(envelope theorem).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.linalg import cho_solve

from .. import gaussian, mvn

__all__ = [
    "optimal_alpha",
    "data_term",
    "collapsed_data_term",
    "linear_elbo",
    "gp_elbo",
    "sparse_elbo",
    "regression_bound",
    "linear_regression_bound",
]


def optimal_alpha(m, s, y):
    r"""Paper eq. 11: ``alpha_i = E_q[(1 - y_i f_i)^2] = (1 - y_i m_i)^2 + s_i``."""
    return (1.0 - y * m) ** 2 + s


def data_term(m, s, y, alpha, gamma=1.0):
    r"""Per-point ``E_q[log p(y_i, lam_i | f_i) - log q(lam_i)]`` in closed form, shape ``(n,)``.

    ``gamma (y m - 1 - alphatilde / (2 sqrt(alpha)) - sqrt(alpha) / 2)`` with
    ``alphatilde = (1 - y m)^2 + s`` (spec section 3, with temperature ``gamma``).
    """
    root = jnp.sqrt(alpha)
    return gamma * (y * m - 1.0 - optimal_alpha(m, s, y) / (2.0 * root) - 0.5 * root)


def collapsed_data_term(m, s, y, gamma=1.0):
    r""":func:`data_term` at the optimal ``alpha``: ``gamma (y m - 1 - sqrt((1 - y m)^2 + s))``.

    Examples
    --------
    >>> float(collapsed_data_term(1.0, 1.0, 1.0))
    -1.0
    >>> round(float(collapsed_data_term(0.3, 0.5, 1.0)), 4)
    -1.695
    """
    return gamma * (y * m - 1.0 - jnp.sqrt(optimal_alpha(m, s, y)))


def _sum_terms(m, s, y, alpha, gamma):
    if alpha is None:
        return jnp.sum(collapsed_data_term(m, s, y, gamma))
    return jnp.sum(data_term(m, s, y, alpha, gamma))


def linear_elbo(mu, Sigma, Xd, y, prior_scale, gamma=1.0, alpha=None):
    r"""ELBO of the linear model ``f = Xd beta``, ``beta ~ N(0, prior_scale^2 I)``, ``q(beta) = N(mu, Sigma)``.

    ``alpha=None`` gives the collapsed bound (optimal ``alpha``). Dense and differentiable in
    every argument: the reference the engines and ``jax.grad`` tests use.
    """
    m = Xd @ mu
    s = jnp.sum((Xd @ Sigma) * Xd, axis=1)
    p = mu.shape[0]
    chol_prior = prior_scale * jnp.eye(p, dtype=mu.dtype)
    return _sum_terms(m, s, y, alpha, gamma) - mvn.kl(mu, jnp.linalg.cholesky(Sigma),
                                                      chol1=chol_prior)


def gp_elbo(mu, Sigma, K, y, gamma=1.0, alpha=None):
    r"""ELBO of the GP model with ``q(f) = N(mu, Sigma)`` at the training inputs, prior ``N(0, K)``.

    Dense (``O(n^3)``) and differentiable; ``alpha=None`` gives the collapsed bound.
    """
    chol_K = jnp.linalg.cholesky(K)
    return (_sum_terms(mu, jnp.diag(Sigma), y, alpha, gamma)
            - mvn.kl(mu, jnp.linalg.cholesky(Sigma), chol1=chol_K))


def sparse_elbo(m_v, chol_S, Psi, ktilde, y, gamma=1.0, alpha=None, scale=1.0):
    r"""ELBO of the sparse model in whitened coordinates ``v = L^{-1} u`` (``L L^T = Kmm``).

    ``q(v) = N(m_v, S)`` with ``S = chol_S chol_S^T``; ``Psi = K_nm L^{-T}`` and ``ktilde`` are
    the whitened projection of the rows (``ppl_bsvm.inference.inducing.project_whitened``), so
    ``m_i = Psi_i m_v`` and ``s_i = Psi_i S Psi_i^T + ktilde_i``. The KL to ``p(v) = N(0, I)``
    equals ``KL(q(u) || p(u))`` (KL is invariant under the map ``u = L v``). ``scale`` multiplies
    the data terms: ``n / |S|`` for an unbiased minibatch estimate.
    """
    m = Psi @ m_v
    s = jnp.sum((Psi @ chol_S) ** 2, axis=1) + ktilde
    return scale * _sum_terms(m, s, y, alpha, gamma) - mvn.kl(m_v, chol_S)


def regression_bound(K, y, alpha, gamma=1.0):
    r"""``max_q L(q, alpha)``: the GP-regression evidence identity of the module docstring.

    ``log N(t; 0, K + N) + sum_i log(2 pi N_i) / 2`` with ``t = y (1 + sqrt(alpha))`` and
    ``N = sqrt(alpha) / gamma``; ``|K + N| = |N| |B|`` with ``B = I + N^{-1/2} K N^{-1/2}``, so

    .. math:: -\tfrac12 t^\top (K + N)^{-1} t - \tfrac12 \log|B|.

    Differentiable in ``K`` (hence in the kernel hyperparameters) through one Cholesky of ``B``.
    """
    noise = jnp.sqrt(alpha) / gamma
    fac = gaussian.factor(K, noise)
    t = y * (1.0 + jnp.sqrt(alpha))
    quad = jnp.dot(t, gaussian.solve(fac, t))
    return -0.5 * quad - jnp.sum(jnp.log(jnp.diag(fac.chol)))


def linear_regression_bound(Xd, y, alpha, prior_scale, gamma=1.0):
    r"""``max_q L(q, alpha)`` for the linear model, in the primal (``O(n p^2)``).

    With ``P = gamma Xd^T A^{-1/2} Xd + I / s^2``, ``b = gamma Xd^T y (1 + alpha^{-1/2})``:
    ``-p log s - log|P| / 2 - gamma sum_i (1 + sqrt(alpha_i))^2 / (2 sqrt(alpha_i)) + b^T P^{-1} b / 2``.
    """
    p = Xd.shape[1]
    w = gamma / jnp.sqrt(alpha)
    prec = (Xd.T * w) @ Xd + jnp.eye(p, dtype=Xd.dtype) / prior_scale**2
    chol = jnp.linalg.cholesky(prec)
    b = Xd.T @ (gamma * y * (1.0 + 1.0 / jnp.sqrt(alpha)))
    mu = cho_solve((chol, True), b)
    root = jnp.sqrt(alpha)
    return (
        -p * jnp.log(prior_scale)
        - jnp.sum(jnp.log(jnp.diag(chol)))
        - 0.5 * gamma * jnp.sum((1.0 + root) ** 2 / root)
        + 0.5 * jnp.dot(b, mu)
    )
