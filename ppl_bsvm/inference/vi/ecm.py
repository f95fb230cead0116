r"""Expectation conditional maximisation (ECM) of Henao et al. (2014): the MAP of the BSVM.

The augmented model (``specs/bsvm_inference.md`` sections 1, 6) with temperature ``gamma``:
``1/lam_i | f ~ IG(1/|1 - y_i f_i|, gamma)`` and, given ``lam``, ``f`` is the posterior of a GP
regression with targets ``y_i (1 + lam_i)`` and noise variances ``lam_i / gamma``. ECM alternates

.. math::

    \hat\lambda_i = \max(|1 - y_i f_i|, \epsilon) \quad (\text{E-step: } E[1/\lambda_i] = 1/\hat\lambda_i)

    f = K (K + \hat\Lambda/\gamma)^{-1} Y (1 + \hat\lambda) \quad (\text{CM-step})

and (linear model, ``f = Z beta`` with ``Sigma = s^2 I``)
``beta = (Z^T W Z + I/s^2)^{-1} Z^T W (1 + lamhat)``, ``W = gamma / Lamhat``.

Each sweep increases the MAP objective ``-f^T K^{-1} f / 2 - 2 gamma sum_i max(0, 1 - y_i f_i)``
(recorded as the trace); its fixed point is the kernel SVM **without bias** at ``C = 2 gamma``.
Near margin points (``lamhat -> 0``) convergence is slow, so the stopping rule is the relative
change of the objective, not of ``f``.

**Accelerated** (SQUAREM, Varadhan & Roland 2008, scheme S3). The sweep ``F`` converges
linearly and slowly (on Heart the distance to the fixed point shrinks by about 3 % per sweep:
338 sweeps to ``tol = 1e-10``). Each iteration of :func:`gp_step` / :func:`linear_step` is one
SQUAREM cycle: with ``x1 = F(x)``, ``x2 = F(x1)``, ``r = x1 - x``, ``v = x2 - 2 x1 + x`` and
the step ``a = -|r| / |v|`` (clipped to ``[-ALPHA_MAX, -1]``; ``a = -1`` gives ``x2``), it
extrapolates ``x' = x - 2 a r + a^2 v`` and takes ``F(x')`` if its objective is at least that of
``x2``, else ``x2``. Three sweeps per cycle, the objective never decreases (``F`` is monotone
and the fallback is two plain sweeps), the fixed points are ``F``'s, and on Heart 28 cycles (84
sweeps, a quarter of the plain iteration's) reach ``tol = 1e-10``, at a higher objective.

**Dual form** (linear model with ``p > n``, ``form="auto"``; ``inference.dual``). Every
iterate ``beta`` lies in the row space of ``Z`` (it starts at 0, the CM-step's
``beta = s^2 Z^T (K + N)^{-1} (1 + lamhat)``, ``K = s^2 Z Z^T``, ``N = Lamhat / gamma``, is
there and SQUAREM combines iterates linearly), so the iteration runs on ``c`` with
``beta = Z^T c``: the margins are ``Z Z^T c``, ``beta^T beta = c^T Z Z^T c``, and SQUAREM's
step lengths use that inner product, so the iterates are the primal ones to rounding at
``O(n^3)`` per sweep instead of ``O(n p^2 + p^3)``.

The ``Fit`` is Gaussian: the conditional posterior of ``f`` (or ``beta``) given
``lam = lamhat`` at convergence (the Gibbs conditional at the ECM point), whose mean is the
MAP; predictions are that GP regression's predictive (Henao et al. 2014, section 3.2).
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

from ..._checks import positive_float
from ..._memory import dense_bytes, linear_bytes
from ...api import register
from ...data import Problem
from ...engine import (Approximation, Draws, Iteration, Jitter, LinearForm, LinearPrior, Link,
                       Temperature)
from ...kernels import Kernel
from ...predictive import GaussianPredictor
from .. import dual, gaussian
from ..latent import GPNoisy, Latent, LinearGaussian, gp_noisy, linear_dual, linear_gaussian
from .._common import (
    GPData,
    LinearData,
    beta_idata,
    gaussian_idata,
    gp_setup,
    linear_setup,
    mvn_draws,
)
from ..loop import relative_change, run

__all__ = [
    "ECMState",
    "ECMInfo",
    "GPData",
    "gp_init",
    "gp_step",
    "linear_init",
    "linear_dual_init",
    "linear_dual_step",
    "linear_step",
    "map_objective",
    "squarem_cycle",
]


class ECMState(NamedTuple):
    """State of the ECM iteration.

    Attributes
    ----------
    f : (n,) or (p,)
        Current MAP estimate of the latent function at the training inputs (GP) or of
        ``beta`` (linear).
    a : (n,) or (p,)
        GP: weights with ``f = K a``; linear: equal to ``beta``.
    lam : (n,)
        ``lamhat`` used by the last CM-step.
    objective : ()
        MAP objective at ``f``.
    """

    f: jnp.ndarray
    a: jnp.ndarray
    lam: jnp.ndarray
    objective: jnp.ndarray


class ECMInfo(NamedTuple):
    """Per-sweep record: ``objective`` (the log posterior up to a constant, higher is better)
    and ``delta``, its relative change ``|new - old| / (1 + |new|)``."""

    objective: jnp.ndarray
    delta: jnp.ndarray


def _hinge_sum(margins):
    return jnp.sum(jnp.maximum(0.0, 1.0 - margins))


def map_objective(quad, margins, gamma):
    """``-quad / 2 - 2 gamma sum max(0, 1 - margins)`` with ``quad = f^T K^-1 f``."""
    return -0.5 * quad - 2.0 * gamma * _hinge_sum(margins)


# jitted: the engine calls it outside its loop too, where each operation would compile alone
@jax.jit
def _gp_cm_step(data: GPData, lam):
    fac = gaussian.factor(data.K, lam / data.gamma)
    f, a = gaussian.posterior_mean(data.K, fac, data.y * (1.0 + lam))
    return f, a, fac


@partial(jax.jit, static_argnums=0)
def gp_init(_static, _key, data: GPData, start=None) -> ECMState:
    """Start from ``f = 0`` (every ``lamhat = 1``)."""
    n = data.y.shape[0]
    zeros = jnp.zeros(n, data.K.dtype)
    return ECMState(zeros, zeros, jnp.ones(n, data.K.dtype), map_objective(0.0, zeros, data.gamma))


def _gp_sweep(data: GPData, f) -> ECMState:
    """``F``: E-step at ``f``, then the CM-step, and the objective at the result."""
    lam = jnp.maximum(jnp.abs(1.0 - data.y * f), data.eps)
    f, a, _ = _gp_cm_step(data, lam)
    return ECMState(f, a, lam, map_objective(jnp.dot(f, a), data.y * f, data.gamma))


ALPHA_MAX = 64.0
"""Largest SQUAREM extrapolation step (module docstring)."""


def squarem_cycle(sweep, x, state: ECMState, inner=jnp.dot) -> ECMState:
    """One SQUAREM cycle of the monotone map ``sweep: x -> ECMState`` from ``state`` (module
    docstring); ``x`` is the point ``sweep`` maps (``state.f``), ``inner`` the inner product
    whose norms set the step length."""
    s1 = sweep(x)
    s2 = sweep(s1.f)
    r = s1.f - x
    v = s2.f - 2.0 * s1.f + x
    rr, vv = inner(r, r), inner(v, v)
    alpha = jnp.where(vv > 0, -jnp.sqrt(rr / jnp.where(vv > 0, vv, 1.0)), -1.0)
    alpha = jnp.clip(alpha, -ALPHA_MAX, -1.0)
    s3 = sweep(x - 2.0 * alpha * r + alpha**2 * v)
    better = jnp.isfinite(s3.objective) & (s3.objective >= s2.objective)
    return jax.tree.map(lambda a, b: jnp.where(better, a, b), s3, s2)


def gp_step(_static, _key, state: ECMState, data: GPData):
    """One SQUAREM cycle (three E- and CM-steps) of the GP model."""
    new = squarem_cycle(partial(_gp_sweep, data), state.f, state)
    return new, ECMInfo(new.objective, relative_change(new.objective, state.objective))


@jax.jit
def _linear_cm_step(data: LinearData, lam):
    p = data.Z.shape[1]
    w = data.gamma / lam
    prec = (data.Z.T * w) @ data.Z + jnp.eye(p, dtype=data.Z.dtype) / data.prior_scale**2
    chol = jnp.linalg.cholesky(prec)
    beta = cho_solve((chol, True), data.Z.T @ (w * (1.0 + lam)))
    return beta, chol


@partial(jax.jit, static_argnums=0)
def linear_init(_static, _key, data: LinearData, start=None) -> ECMState:
    n, p = data.Z.shape
    zeros = jnp.zeros(p, data.Z.dtype)
    obj = map_objective(0.0, jnp.zeros(n, data.Z.dtype), data.gamma)
    return ECMState(zeros, zeros, jnp.ones(n, data.Z.dtype), obj)


def _linear_sweep(data: LinearData, beta) -> ECMState:
    lam = jnp.maximum(jnp.abs(1.0 - data.Z @ beta), data.eps)
    beta, _ = _linear_cm_step(data, lam)
    objective = map_objective(jnp.sum(beta**2) / data.prior_scale**2, data.Z @ beta, data.gamma)
    return ECMState(beta, beta, lam, objective)


def linear_step(_static, _key, state: ECMState, data: LinearData):
    """One SQUAREM cycle (three E- and CM-steps) of the linear model."""
    new = squarem_cycle(partial(_linear_sweep, data), state.f, state)
    return new, ECMInfo(new.objective, relative_change(new.objective, state.objective))


def _dual_cm_step(data: LinearData, lam) -> dual.DualQ:
    """The CM-step's Gaussian in dual form: ``beta = s^2 Z^T a``, ``a = (K + N)^{-1} (1 + lam)``."""
    return dual.dual_q(data.gram, data.prior_scale**2, lam / data.gamma, 1.0 + lam)


def linear_dual_init(_static, _key, data: LinearData, start=None) -> ECMState:
    """:func:`linear_init` in dual form: ``c = 0`` (``f`` and ``a`` hold ``c``)."""
    n = data.Z.shape[0]
    zeros = jnp.zeros(n, data.Z.dtype)
    return ECMState(zeros, zeros, jnp.ones(n, data.Z.dtype),
                    map_objective(0.0, zeros, data.gamma))


def _linear_dual_sweep(data: LinearData, c) -> ECMState:
    """:func:`_linear_sweep` on ``c`` (``beta = Z^T c``)."""
    lam = jnp.maximum(jnp.abs(1.0 - data.gram @ c), data.eps)
    q = _dual_cm_step(data, lam)
    c = q.s2 * q.a
    margins = q.K @ q.a
    return ECMState(c, c, lam, map_objective(jnp.dot(margins, q.a), margins, data.gamma))


def linear_dual_step(_static, _key, state: ECMState, data: LinearData):
    """One SQUAREM cycle of the linear model in dual form (:func:`linear_step`'s iterates to
    rounding: the step lengths use ``|beta|^2 = c^T Z Z^T c``)."""
    new = squarem_cycle(partial(_linear_dual_sweep, data), state.f, state,
                        inner=lambda u, v: u @ (data.gram @ v))
    return new, ECMInfo(new.objective, relative_change(new.objective, state.objective))



@dataclasses.dataclass(frozen=True, kw_only=True)
class _ECMOptions(Iteration, Temperature, Draws, Link):
    """ECM's options: ``max_iter`` (2000) and ``tol`` (1e-10) on the relative change of the
    MAP objective, ``eps``, the floor of ``lamhat`` (margin points), and the shared ``gamma``,
    ``num_draws``, ``link``."""

    max_iter: int = 2000
    tol: float = 1e-10
    eps: float = 1e-8

    def _check(self):
        self._set("eps", positive_float("eps", self.eps))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ECMGPOptions(_ECMOptions, Jitter):
    """Options of ``fit(model="gp", method="ecm")`` (see :func:`ecm_gp`)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ECMLinearOptions(_ECMOptions, LinearPrior, LinearForm):
    """Options of ``fit(model="linear", method="ecm")`` (see :func:`ecm_linear`)."""


def _predictor(latent: Latent, options: _ECMOptions) -> GaussianPredictor:
    return GaussianPredictor(latent, link=options.link, gamma=options.gamma)


@register("ecm", ("gp",), options=ECMGPOptions, memory=dense_bytes(4))
def ecm_gp(problem: Problem, options: ECMGPOptions, *, key, kernel: Kernel) -> Approximation:
    """ECM (Henao et al. 2014): MAP of the GP Bayesian SVM = SVM without bias at C = 2 gamma.

    Options (:class:`ECMGPOptions`)
    -------------------------------
    gamma : float, default=1.0
        Pseudo-likelihood temperature.
    max_iter : int, default=2000
    tol : float, default=1e-10
        Stop when the relative change of the MAP objective is below this.
    eps : float, default=1e-8
        Floor of ``lamhat`` (margin points).
    jitter : float, default=1e-6
        Relative jitter of ``K``.
    num_draws : int, default=1000
        Draws of the conditional Gaussian stored in ``idata.posterior.f``.
    link : str, default="probit"
        Default link of ``predict_proba``.
    """
    t0 = time.perf_counter()
    setup = gp_setup(problem, kernel, options.jitter)
    data = GPData(setup.K, setup.y, jnp.asarray(options.gamma), eps=jnp.asarray(options.eps))
    result = run(gp_step, gp_init(None, None, data), data, max_iter=options.max_iter,
                 tol=options.tol)
    lam = result.state.lam
    f_map, a, fac = _gp_cm_step(data, lam)
    f_var = gaussian.posterior_cov_diag(data.K, fac)
    draws = np.asarray(gaussian.sample_posterior(key, data.K, fac, f_map, options.num_draws))[None]
    elapsed = time.perf_counter() - t0

    idata = gaussian_idata(
        {"f": draws},
        problem=problem,
        approximation={
            "f_mean": np.asarray(f_map),
            "f_var": np.asarray(f_var),
            "lam_hat": np.asarray(lam),
        },
        attrs={"method": "ecm", "model": "gp", "stop_reason": result.stop_reason},
    )
    latent = Latent(gp_noisy, kernel, GPNoisy(setup.X, setup.params, fac.chol, fac.s, a))
    return Approximation.from_run(
        result, idata=idata, predictor=_predictor(latent, options), seconds=elapsed,
        trace={"objective": result.infos.objective}, kernel_params=setup.params,
        jitter=setup.jitter,
    )


@register("ecm", ("linear",), options=ECMLinearOptions, uses_kernel=False,
          memory=linear_bytes(5, dual=dual.in_dual))
def ecm_linear(problem: Problem, options: ECMLinearOptions, *, key) -> Approximation:
    """ECM for the linear Bayesian SVM: MAP = linear SVM without bias at C = 2 gamma.

    Options (:class:`ECMLinearOptions`)
    -----------------------------------
    prior_scale : float, default=1.0
        ``beta ~ N(0, prior_scale^2 I)``.
    intercept : bool, default=True
        Append a column of ones (coefficient ``beta[intercept]``, same prior).
    form : {"auto", "primal", "dual"}, default="auto"
        Solve in ``p x p`` (primal) or ``n x n`` (dual) form; ``"auto"``: dual when there
        are more coefficients ``p`` than points ``n`` (module docstring).
    gamma, max_iter, tol, eps, num_draws, link
        As for the GP model.
    """
    t0 = time.perf_counter()
    setup = linear_setup(problem, options.intercept)
    in_dual = dual.use_dual(options.form, *setup.Z.shape)
    data = LinearData(setup.Z, jnp.asarray(options.prior_scale), jnp.asarray(options.gamma),
                      eps=jnp.asarray(options.eps), gram=dual.gram(setup.Z) if in_dual else None)
    init, step = (linear_dual_init, linear_dual_step) if in_dual else (linear_init, linear_step)
    result = run(step, init(None, None, data), data, max_iter=options.max_iter, tol=options.tol)
    if in_dual:
        q = _dual_cm_step(data, result.state.lam)
        beta = dual.beta_mean(setup.Z, q)
        cov = dual.beta_cov(setup.Z, q)
        draws = np.asarray(dual.beta_draws(key, setup.Z, q, beta, options.num_draws))[None]
        latent = Latent(linear_dual, options.intercept, dual.latent_arrays(setup.Z, q))
    else:
        beta, chol_prec = _linear_cm_step(data, result.state.lam)
        p = beta.shape[0]
        # Covariance factor L^{-T} of prec = L L^T: draws beta + L^{-T} z have covariance
        # prec^{-1}.
        cov = cho_solve((chol_prec, True), jnp.eye(p, dtype=beta.dtype))
        draws = mvn_draws(key, beta, jnp.linalg.cholesky(cov), options.num_draws)
        latent = Latent(linear_gaussian, options.intercept, LinearGaussian(beta, chol_prec))
    elapsed = time.perf_counter() - t0

    idata = beta_idata(problem, setup.features, draws, beta, cov, method="ecm",
                       stop_reason=result.stop_reason, lam_hat=result.state.lam)
    return Approximation.from_run(
        result, idata=idata, predictor=_predictor(latent, options), seconds=elapsed,
        trace={"objective": result.infos.objective},
    )
