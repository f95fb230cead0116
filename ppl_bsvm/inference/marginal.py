r"""The marginal Bayesian SVM (``lam`` integrated out) as the BlackJAX engines read it
(``mcmc.ess``, ``vi.pathfinder``): a Gaussian prior :math:`x \sim N(0, \Sigma)` given by its
factor (``beta``: :math:`\Sigma = s^2 I`; ``f``: :math:`\Sigma = L L^\top = K`), the margins
:math:`m(x)` (:math:`Z\beta` with rows :math:`z_i = y_i x_i`, or :math:`y \circ f`) and the
pseudo-likelihood :func:`ppl_bsvm.models.hinge_log_likelihood` of them.

The engines pass the model's inputs as traced arrays (:func:`linear_inputs`,
:func:`gp_inputs`) and build the prior inside their compiled programs
(:func:`marginal_prior`), so that ``K`` is factored once per run.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from ..kernels import Kernel, gram
from ..models import hinge_log_likelihood

__all__ = ["MarginalPrior", "linear_inputs", "gp_inputs", "marginal_prior", "margins",
           "unwhiten", "log_likelihood", "log_prior"]


class MarginalPrior(NamedTuple):
    """The prior's factor (``scale``: a scalar ``s`` for ``s^2 I``, or the lower Cholesky
    factor of ``K``), the margins' map ``Z`` ((n, p) rows ``y_i x_i``, or (n,) the labels)
    and ``gamma``."""

    scale: jnp.ndarray
    Z: jnp.ndarray
    gamma: jnp.ndarray


def linear_inputs(setup, prior_scale, gamma) -> dict:
    """The linear model's traced inputs from its ``LinearSetup``."""
    return {"Z": setup.Z, "prior_scale": jnp.asarray(prior_scale, jnp.float64),
            "gamma": jnp.asarray(gamma, jnp.float64)}


def gp_inputs(setup, gamma) -> dict:
    """The GP model's traced inputs from its ``GPSetup`` (also the keywords of
    ``models.gp_bsvm`` besides the kernel)."""
    return {"X": setup.X, "y": setup.y, "params": setup.params,
            "jitter": jnp.asarray(setup.jitter, jnp.float64),
            "gamma": jnp.asarray(gamma, jnp.float64)}


def marginal_prior(inputs: dict, kernel: Kernel | None) -> MarginalPrior:
    """The prior of :func:`linear_inputs` (``kernel`` None) or :func:`gp_inputs`."""
    if kernel is None:
        return MarginalPrior(inputs["prior_scale"], inputs["Z"], inputs["gamma"])
    K = gram(kernel, inputs["params"], inputs["X"], inputs["jitter"])
    return MarginalPrior(jnp.linalg.cholesky(K), inputs["y"], inputs["gamma"])


def margins(prior: MarginalPrior, x):
    """``y_i f_i`` of one ``x`` (n,)."""
    return prior.Z @ x if prior.Z.ndim == 2 else prior.Z * x


def unwhiten(prior: MarginalPrior, v):
    """``x = s v`` or ``L v`` for whitened ``v``: one (dim,) or a batch (S, dim)."""
    if prior.scale.ndim == 0:
        return prior.scale * v
    return prior.scale @ v if v.ndim == 1 else v @ prior.scale.T


def log_likelihood(prior: MarginalPrior, x):
    """The pseudo-likelihood of one ``x`` with ``lam`` integrated out."""
    return hinge_log_likelihood(margins(prior, x), prior.gamma)


def log_prior(prior: MarginalPrior, x):
    """``log N(x; 0, Sigma)`` up to its constant."""
    if prior.scale.ndim == 0:
        return -0.5 * jnp.sum(x * x) / prior.scale**2
    w = solve_triangular(prior.scale, x, lower=True)
    return -0.5 * jnp.sum(w * w)
