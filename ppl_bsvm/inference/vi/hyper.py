r"""Hyperparameter learning by the ELBO (Wenzel et al. 2017, section 4.3, eq. 12).

Type-II maximum likelihood on the variational bound: alternate variational updates with
gradient steps

.. math:: h^{(t)} = h^{(t-1)} + \tilde\rho_t \nabla_h \mathcal L(\alpha^{(t-1)}, q^{(t-1)}, h)

on the unconstrained (log) kernel parameters ``h`` and, optionally, the inducing locations.
Gradients come from ``jax.grad`` of the closed-form ELBO (``elbo.py``); the step is Adam
(Kingma and Ba 2015) in ascent form, because the scales of log-lengthscales, log-variances and
inducing coordinates differ and a plain step size would need tuning per data set. Adam's
per-coordinate step is about ``lr`` in the unconstrained space. Adam's moments and direction
are ``optax.scale_by_adam``'s; the step size stays the engines' own (a schedule of the number
of hyperparameter steps, ``schedules.as_step_size``, or SVGP's traced ``adam_lr``), applied
with a plus sign.
"""

from __future__ import annotations

import jax
import optax


__all__ = ["AdamState", "adam_init", "adam_ascent"]

_ADAM = optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8)  # Kingma and Ba's (and optax's) defaults

AdamState = optax.ScaleByAdamState
"""Adam's state (optax's): ``count`` () int32, steps taken; ``mu``, ``nu``, the first and second
moment estimates, pytrees like the parameters."""


def adam_init(params) -> AdamState:
    """Adam's state for a parameter pytree: no steps taken, zero moments."""
    return _ADAM.init(params)


def adam_ascent(grads, params, state: AdamState, lr):
    r"""One Adam step *up* the gradient ``g``: returns ``(new_params, new_state)``.

    .. math:: m \leftarrow \beta_1 m + (1 - \beta_1) g, \quad
              v \leftarrow \beta_2 v + (1 - \beta_2) g^2, \quad
              h \leftarrow h + \mathrm{lr}\,\frac{m / (1 - \beta_1^t)}
                                     {\sqrt{v / (1 - \beta_2^t)} + \epsilon}

    with ``t`` the steps taken including this one (``optax.scale_by_adam``).
    """
    direction, state = _ADAM.update(grads, state)
    return jax.tree.map(lambda h, d: h + lr * d, params, direction), state
