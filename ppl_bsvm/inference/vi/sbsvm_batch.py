r"""S-BSVM's batch phase (the polish, small data): ``q`` at the batch fixed point
(``fixed_point``) and, with ``learn_hyperparameters=True``, the hyperparameters at the ELBO's
maximum by quasi-Newton ascent of the profile ELBO.

The minibatch run moves the kernel's log-parameters ``h`` (and the inducing locations with
``learn_inducing``) by Adam along noisy gradients with a decaying step (``hyper_lr``, paper
eq. 12), which bounds how far they can travel: on breast cancer it stopped at lengthscale 6.7,
variance 1.65, ELBO -110, where batch VI (B-BSVM) learns 82-90 and 2160-2715, ELBO -75.2.
Where the polish runs (``fixed_point``, small data) the engine goes on to the optimum of

.. math:: F(h) = \max_q \mathcal L(q, h), \qquad
          \nabla F(h) = \partial_h \mathcal L(q^*(h), h)

(the envelope theorem: ``q*`` maximises ``L``, so its response to ``h`` does not enter the
gradient, in any parametrisation of ``q`` that does not depend on ``h``, the whitened one
included). Each evaluation polishes ``q`` to the batch fixed point at ``h``, from the last one
(``fixed_point.certify`` to :data:`INNER_TOL` sds, a few sweeps), and differentiates the exact
ELBO (``sbsvm_marginals.full_elbo``, chunked) with ``q(v)`` held; L-BFGS-B (SciPy) proposes the
steps, at most :data:`MAX_EVALUATIONS` evaluations: a short Python loop of compiled
evaluations, like the hyperparameter search of ``bootstrap.selection``. On breast cancer it
took 16 evaluations to lengthscale 101, variance 3468, ELBO -75.21 (the sparse model's; the
ridge ``variance / lengthscale^2 = 0.33`` along which the ELBO is flat is B-BSVM's too).

**The certificate.** The ELBO still to be gained by moving ``h``, in nats: with the final
gradient ``g`` and L-BFGS's inverse-Hessian estimate ``B``, ``Delta = g^T B g / 2`` (a Newton
step's gain); the hyperparameters are converged when ``Delta <= HYPER_GAIN_TOL``. Differences
of a few hundredths of a nat (lengthscale 82 against 101 along the ridge) do not matter for the
posterior; the Adam run's 34 nats do.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from ... import _programs
from ..._jax import placed_like
from ..inducing import inducing_prior
from . import fixed_point, lrvb
from .sbsvm_marginals import full_elbo
from .sbsvm_response import _sweep, polish

__all__ = ["INNER_TOL", "MAX_EVALUATIONS", "HYPER_GAIN_TOL", "profile", "optimise", "batch_phase"]

INNER_TOL = 1e-3
"""Certified distance (sds) of each evaluation's ``q`` to the fixed point at its ``h``."""

MAX_EVALUATIONS = 200
"""Evaluations of the profile ELBO at most."""

HYPER_GAIN_TOL = 0.01
"""Nats of ELBO a Newton step of the hyperparameters may still promise at convergence."""


def _chol(kernel, params, Z, jitter):
    return inducing_prior(kernel, params, Z, jitter).chol


@functools.partial(_programs.Program, static_argnames=("kernel", "learn_inducing"))
def profile(kernel, learn_inducing: bool, hp, Z, eta1, prec, data, tol, max_sweeps):
    """``F(h)``, its gradient (module doc) and the polished ``q(v)`` at ``hp`` (``params`` or
    ``(params, Z)``), starting the polish from ``(eta1, prec)``: ``(F, grad, eta1, prec,
    Certificate)``."""
    params, Z = hp if learn_inducing else (hp, Z)
    chol = _chol(kernel, params, Z, data.jitter)
    sweep = functools.partial(_sweep, kernel, params, Z, chol, data, metric=True)
    theta, cert = fixed_point.certify(sweep, lrvb.pack(eta1, 0.5 * (prec + prec.T)), data.n,
                                      tol, max_sweeps)
    eta1, prec = lrvb.unpack(theta, Z.shape[0])

    def elbo(hp):
        params, Zh = hp if learn_inducing else (hp, Z)
        return full_elbo(kernel, params, Zh, _chol(kernel, params, Zh, data.jitter), eta1, prec,
                         data)

    value, grad = jax.value_and_grad(elbo)(hp)
    return value, grad, eta1, prec, cert


def optimise(kernel, learn_inducing: bool, params, Z, eta1, prec, data):
    """L-BFGS-B on ``-F`` from ``(params, Z)`` and ``q(v) = (eta1, prec)`` (module doc).

    Returns ``(params, Z, eta1, prec, cert, attrs)``: the hyperparameters (and locations), the
    polished ``q(v)`` there with its ``fixed_point.Certificate``, and the attributes
    ``hyper_gain`` (nats), ``hyper_evaluations`` and, when the gain exceeds
    :data:`HYPER_GAIN_TOL`, ``hyper_detail`` (what the warning says).
    """
    from scipy.optimize import minimize

    hp0 = (params, Z) if learn_inducing else params
    flat0, unravel = ravel_pytree(hp0)
    state = {"q": (eta1, prec), "best": None}

    def evaluate(x):
        out = profile(kernel, learn_inducing, unravel(x), Z, *state["q"], data,
                      np.float64(INNER_TOL), np.int32(fixed_point.MAX_SWEEPS))
        value, grad = float(out[0]), np.asarray(ravel_pytree(out[1])[0])
        if not (np.isfinite(value) and np.all(np.isfinite(grad))):
            return np.inf, np.zeros_like(grad)
        state["q"] = (out[2], out[3])
        if state["best"] is None or value >= state["best"][0]:
            state["best"] = (value, np.array(x), out)
        return -value, -grad

    res = minimize(evaluate, np.asarray(flat0, np.float64), jac=True, method="L-BFGS-B",
                   options={"maxfun": MAX_EVALUATIONS, "maxiter": MAX_EVALUATIONS})
    value, x, out = state["best"]
    grad = np.asarray(ravel_pytree(out[1])[0])
    if res.nit:
        gain = 0.5 * float(grad @ res.hess_inv.matvec(grad))
    else:  # converged where it started: no curvature estimate, the gradient is tiny
        gain = 0.0 if res.success else np.inf
    hp = unravel(x)
    params, Z = hp if learn_inducing else (hp, Z)
    attrs = {"hyper_gain": gain, "hyper_evaluations": int(res.nfev)}
    if not gain <= HYPER_GAIN_TOL:
        attrs["hyper_detail"] = (
            f"stopped its hyperparameter search after {res.nfev} evaluations with an estimated "
            f"{gain:.3g} nats of ELBO still to gain (more than {HYPER_GAIN_TOL:g}): the kernel "
            "hyperparameters are not at the ELBO's maximum")
    return params, Z, out[2], out[3], out[4], attrs


def batch_phase(kernel, st, data, options, what: str):
    """The polish of S-BSVM's final state ``st`` (``SBSVMState``; ``data`` without the batch
    order) and with ``learn_hyperparameters`` the hyperparameter search (:func:`optimise`):
    ``(st, stop_reason, attrs)``, the stop reason ``"tol"`` when ``q``'s certified distance is
    at most ``polish_tol`` and the hyperparameters' gain at most :data:`HYPER_GAIN_TOL`, else
    ``"max_iter"`` with the attribute ``stop_detail`` (``fixed_point.outcome``)."""
    tol = options.polish_tol
    attrs = {}
    if options.learn_hyperparameters:
        params, Z, eta1, prec, cert, attrs = optimise(kernel, options.learn_inducing,
                                                      st.params, st.Z, st.eta1, st.prec, data)
        # the search's values are host values, not placed as the loop's state is (committed
        # to its device, or replicated over a mesh), and JAX compiles a program again for
        # arguments that differ in commitment alone: the fit's later jitted steps (the
        # inducing prior, the draws of f) would compile twice, once for a fit that learns
        # nothing and once for one that learns
        params, Z = placed_like((params, Z), (st.params, st.Z))
        st = st._replace(params=params, Z=Z, chol_Kmm=_chol(kernel, params, Z, data.jitter))
    else:
        eta1, prec, cert = polish(kernel, st.params, st.Z, st.chol_Kmm, st.eta1, st.prec, data,
                                  np.float64(tol), np.int32(fixed_point.MAX_SWEEPS))
    stop, q_attrs = fixed_point.outcome(cert, tol, what)
    detail = " and ".join(d for d in (attrs.pop("hyper_detail", None),
                                      q_attrs.pop("stop_detail", None)) if d)
    attrs.update(q_attrs)
    if detail:
        attrs["stop_detail"] = detail
    return st._replace(eta1=eta1, prec=prec), "max_iter" if detail else stop, attrs
