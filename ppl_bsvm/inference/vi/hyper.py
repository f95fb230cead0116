r"""Hyperparameter learning by the ELBO (Wenzel et al. 2017, section 4.3, eq. 12).

Type-II maximum likelihood on the variational bound: alternate variational updates with
gradient steps

.. math:: h^{(t)} = h^{(t-1)} + \tilde\rho_t \nabla_h \mathcal L(\alpha^{(t-1)}, q^{(t-1)}, h)

on the unconstrained (log) kernel parameters ``h`` and, optionally, the inducing locations.
Gradients come from ``jax.grad`` of the closed-form ELBO (``elbo.py``); the step is Adam
(Kingma and Ba 2015) in ascent form, because the scales of log-lengthscales, log-variances and
inducing coordinates differ and a plain step size would need tuning per data set. Adam's
per-coordinate step is about ``lr`` in the unconstrained space.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..._checks import positive_int
from .schedules import as_step_size

__all__ = ["AdamState", "adam_init", "adam_ascent", "check_hyper_options"]

_B1, _B2, _EPS = 0.9, 0.999, 1e-8


class AdamState(NamedTuple):
    """Adam's moments for a parameter pytree.

    Attributes
    ----------
    count : ()
        Steps taken (int32).
    m, v : pytree like the parameters
        First and second moment estimates of the gradient.
    """

    count: jnp.ndarray
    m: object
    v: object


def adam_init(params) -> AdamState:
    zeros = jax.tree.map(jnp.zeros_like, params)
    return AdamState(jnp.zeros((), jnp.int32), zeros, zeros)


def adam_ascent(grads, params, state: AdamState, lr):
    """One Adam step *up* the gradient: returns ``(new_params, new_state)``."""
    count = state.count + 1
    m = jax.tree.map(lambda m, g: _B1 * m + (1 - _B1) * g, state.m, grads)
    v = jax.tree.map(lambda v, g: _B2 * v + (1 - _B2) * g**2, state.v, grads)
    c1 = 1.0 - _B1 ** count.astype(float)
    c2 = 1.0 - _B2 ** count.astype(float)
    new = jax.tree.map(
        lambda p, m, v: p + lr * (m / c1) / (jnp.sqrt(v / c2) + _EPS), params, m, v
    )
    return new, AdamState(count, m, v)


def check_hyper_options(learn_hyperparameters, hyper_lr, hyper_every):
    """Validate the shared hyperparameter options (``ValueError`` naming the option).

    Returns ``(learn, hyper_lr_schedule, hyper_every)``; ``hyper_lr`` may be a positive number
    or a schedule of the hyperparameter step count (``schedules.as_step_size``).
    """
    if not isinstance(learn_hyperparameters, (bool, np.bool_)):
        raise ValueError(
            f"learn_hyperparameters must be True or False, got {learn_hyperparameters!r}"
        )
    return (
        bool(learn_hyperparameters),
        as_step_size(hyper_lr, "hyper_lr"),
        positive_int("hyper_every", hyper_every),
    )
