r"""Mean-field VI for the linear Bayesian SVM (Wenzel et al. 2017, section 4.5, eq. 14).

Model: ``f_i = x_i^T beta`` (``x_i`` with a trailing 1 when ``intercept``), ``beta ~ N(0, s^2 I)``,
pseudo-likelihood ``exp(-2 gamma max(0, 1 - y_i f_i))``. Family: ``q(beta) = N(mu, zeta)``,
``q(lam_i) = GIG(1/2, gamma, gamma alpha_i)`` (``specs/bsvm_inference.md`` section 3).

Coordinate ascent (``method="vi"``), paper eq. 14 with ``z_i = y_i x_i``:

.. math::

    \zeta = (\gamma Z^\top A^{-1/2} Z + I / s^2)^{-1}, \qquad
    \mu = \gamma\,\zeta Z^\top (1 + \alpha^{-1/2}), \qquad
    \alpha_i = (1 - z_i^\top \mu)^2 + z_i^\top \zeta z_i .

Each sweep is exact maximisation of the ELBO in one block, so the ELBO (recorded after every
sweep, in its collapsed form, ``elbo.py``) never decreases. With ``p > n`` (``form="auto"``)
the sweep runs in the dual form of ``inference.dual`` (:func:`vi_dual_step`): ``q(beta)`` is
the Gaussian of that module with noise ``nu = sqrt(alpha) / gamma`` and targets
``t = 1 + sqrt(alpha)``, and every quantity of the sweep (the margins' moments, the KL, the
prior scale's maximiser) comes from an ``n x n`` factorisation: ``O(n^3)`` per sweep instead of
``O(n p^2 + p^3)``, the same iterates to rounding. ``learn_hyperparameters=True``
adds the exact maximiser of the ELBO over the prior scale for fixed ``q``,
``s^2 = (tr zeta + mu^T mu) / p`` (the linear case of paper eq. 12 in closed form: only the KL
depends on ``s``), so the ELBO still never decreases.

Stochastic VI (``method="svi"``): the same model with minibatches of ``alpha`` (Hoffman et al.
2013): natural-gradient steps on ``q(beta)``'s natural parameters with the data terms scaled by
``n / |S|`` (``_svi.py``), learning rate from ``schedules.py``; cost ``O(|S| p^2 + p^3)`` per
step. It stops in epochs (``_svi.ElboEstimate``): the batches' data terms, summed over
``check_every`` epochs, estimate the ELBO per period without a pass over the data, and the run
stops when two consecutive estimates differ by less than ``tol`` (relative, beyond their
sampling error). ``elbo_every=k`` also records the exact full-data ELBO every ``k`` steps
(``O(n p^2)`` each; trace ``elbo_exact``). That rule stops where the decayed rate makes progress
slow, not where ``q`` is near the optimum: test latents a median 1.0-1.4 Gibbs sds from Gibbs
on breast cancer, digits 3 vs 8 and ``wdbc``, means shrunk (slope 0.67-0.78), where batch VI is
0.12-0.16 away. So the run ends with the polish (by default up to 10^6 points): the batch
coordinate ascent of eq. 14 from SVI's ``q``, Anderson-accelerated (``fixed_point``), until the
certified distance to its fixed point is at most ``polish_tol`` posterior sds (10-45 sweeps of
``O(n p^2)`` measured there); then SVI's answer is batch VI's (0.002 VI sds from it).

Linear response (``linear_response=True``, both methods): the covariance of ``q(beta)`` is
replaced by ``d mu*(t) / dt`` at ``t = 0``, the response of the batch fixed point of eq. 14 to
the tilt ``log p + t^T beta`` (Giordano et al. 2018, eq. 5), by implicit differentiation in
:mod:`~ppl_bsvm.inference.vi.lrvb`: ``Cov_LR = [(I - dG/dtheta)^{-1} dG/dt]_mu`` with
``theta = (mu, vech zeta)``, computed in closed form (``lrvb.sites_linear_response``: an
``n x n`` solve or the data's fourth moments, whichever is cheaper, ``O(min(n^2 p + n^3,
n p^4 + p^6))``, rather than ``p (p + 3) / 2`` Jacobian passes).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

from ... import _programs
from ..._cost import linear_flops
from ..._memory import linear_bytes
from ...api import register
from ...data import Problem
from ...engine import (Approximation, Draws, Iteration, LinearForm, LinearPrior, Link,
                       Temperature)
from ...predictive import GaussianPredictor
from ...result import Fit
from .. import dual
from .._common import LinearData, beta_idata, linear_setup, mvn_draws
from ..gaussian import NoisyFactor
from ..latent import Latent, LinearGaussian, linear_dual, linear_gaussian
from ..loop import relative_change, run
from ..mvn import cov_factor, gaussian_from_precision, kl_precision
from . import elbo as elbo_mod
from . import fixed_point, schedules
from ._svi import (
    Batches,
    batch_order,
    ElboEstimate,
    SVIModel,
    batches_init,
    check_batch_size,
    estimate_init,
    latent_marginals,
    natural_target,
    period_points,
    rate_init,
    recorded,
    stream_keys,
    svi_step,
)
from ._options import HyperEvery, Learn, LinearResponse, Polish, Stochastic
from .lrvb import Sites, accept, sites_linear_response
from .psis import linear_log_ratios, psis

__all__ = [
    "LinearVIState",
    "LinearVIDualState",
    "LinearSVIState",
    "LinearInfo",
    "vi_init",
    "vi_step",
    "vi_dual_init",
    "vi_dual_step",
    "svi_init",
    "linear_svi_step",
    "collapsed_elbo",
]


class LinearVIState(NamedTuple):
    """State of batch coordinate ascent.

    Attributes
    ----------
    mu : (p,)
        Mean of ``q(beta)``.
    chol : (p, p)
        Lower Cholesky factor of the precision ``zeta^{-1}``.
    alpha : (n,)
        Parameters of ``q(lam_i)``, optimal for the current ``q(beta)``.
    log_prior_scale : ()
        ``log s``.
    elbo : ()
        Collapsed ELBO at the current state.
    """

    mu: jnp.ndarray
    chol: jnp.ndarray
    alpha: jnp.ndarray
    log_prior_scale: jnp.ndarray
    elbo: jnp.ndarray


class LinearVIDualState(NamedTuple):
    """State of batch coordinate ascent in dual form (``inference.dual``).

    Attributes
    ----------
    a, chol, s : (n,), (n, n), (n,)
        ``q(beta)``: the weights and the factor of ``K + N`` (``dual.DualQ``), ``K`` at the
        prior scale ``log_scale_q``.
    log_scale_q : ()
        ``log s`` at which ``q(beta)`` was formed.
    alpha : (n,)
        Parameters of ``q(lam_i)``, optimal for the current ``q(beta)``.
    log_prior_scale : ()
        ``log s`` after the sweep (differs from ``log_scale_q`` when it is learned).
    elbo : ()
        Collapsed ELBO at the current state.
    """

    a: jnp.ndarray
    chol: jnp.ndarray
    s: jnp.ndarray
    log_scale_q: jnp.ndarray
    alpha: jnp.ndarray
    log_prior_scale: jnp.ndarray
    elbo: jnp.ndarray


class LinearSVIState(NamedTuple):
    """State of stochastic VI.

    Attributes
    ----------
    eta1 : (p,)
        ``zeta^{-1} mu``.
    prec : (p, p)
        ``zeta^{-1} = -2 eta2``.
    log_prior_scale : ()
    rate : learning-rate state (``schedules``)
    batches : Batches
    count : () int32
        Steps taken.
    estimate : ElboEstimate
        The stopping rule's running estimate of the ELBO.
    """

    eta1: jnp.ndarray
    prec: jnp.ndarray
    log_prior_scale: jnp.ndarray
    rate: object
    batches: Batches
    count: jnp.ndarray
    estimate: ElboEstimate


class LinearInfo(NamedTuple):
    """Per-step record: ``elbo`` (batch VI: the ELBO after the sweep; SVI: the estimate of the
    period the step closes, NaN elsewhere), ``delta`` (the stopping statistic: batch VI, the
    relative change of the ELBO; SVI, ``_svi.estimate_push``'s, ``inf`` where no period
    closes), ``prior_scale``, ``rho`` (the learning rate; 1 for batch VI) and ``elbo_exact``
    (SVI: the full-data ELBO every ``elbo_every`` steps, NaN elsewhere; batch VI: the ELBO)."""

    elbo: jnp.ndarray
    delta: jnp.ndarray
    prior_scale: jnp.ndarray
    rho: jnp.ndarray
    elbo_exact: jnp.ndarray


# --- shared pieces ------------------------------------------------------------------------


def _optimal_q(data: LinearData, alpha, log_s):
    """Paper eq. 14: ``q(beta)`` given ``alpha`` (mean and Cholesky factor of the precision)."""
    p = data.Z.shape[1]
    w = data.gamma / jnp.sqrt(alpha)
    prec = (data.Z.T * w) @ data.Z + jnp.eye(p, dtype=data.Z.dtype) * jnp.exp(-2.0 * log_s)
    chol = jnp.linalg.cholesky(prec)
    mu = cho_solve((chol, True), data.Z.T @ (data.gamma * (1.0 + 1.0 / jnp.sqrt(alpha))))
    return mu, chol


def _second_moment(mu, chol):
    """``tr(zeta) + mu^T mu = E_q[beta^T beta]``."""
    return jnp.sum(cov_factor(chol) ** 2) + jnp.sum(mu**2)


def _optimal_log_scale(mu, chol):
    """``log s`` maximising the ELBO for fixed ``q``: ``s^2 = E_q[beta^T beta] / p``."""
    return 0.5 * jnp.log(_second_moment(mu, chol) / mu.shape[0])


MARGIN_LABEL = 1.0
"""The label of every margin ``z_i^T beta = y_i f_i``: the rows ``z_i = y_i x_i`` carry the
labels, so the formulas in ``(f_i, y_i)`` (``elbo.py``, ``_svi``) take ``(y_i f_i, 1)``."""


# jitted: the engine calls it outside its loop too, where each operation would compile alone
@jax.jit
def collapsed_elbo(data: LinearData, mu, chol, log_s):
    """Collapsed ELBO at ``q(beta) = N(mu, (L L^T)^{-1})`` and the optimal ``alpha``."""
    m, s = latent_marginals(data.Z, 0.0, mu, chol)
    alpha = elbo_mod.optimal_alpha(m, s, MARGIN_LABEL)
    value = (jnp.sum(elbo_mod.collapsed_data_term(m, s, MARGIN_LABEL, data.gamma))
             - kl_precision(mu, chol, log_s))
    return value, alpha


# --- batch coordinate ascent --------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=(0,))
def vi_init(_static, _key, data: LinearData, start=None) -> LinearVIState:
    """Start from ``q(beta)`` = the prior."""
    p = data.Z.shape[1]
    log_s = jnp.log(data.prior_scale)
    mu = jnp.zeros(p, data.Z.dtype)
    chol = jnp.eye(p, dtype=data.Z.dtype) * jnp.exp(-log_s)
    value, alpha = collapsed_elbo(data, mu, chol, log_s)
    return LinearVIState(mu, chol, alpha, log_s, value)


def vi_step(_static, _key, state: LinearVIState, data: LinearData):
    """One sweep of eq. 14: ``q(beta)`` given ``alpha``, then (optionally) ``s``, then ``alpha``."""
    mu, chol = _optimal_q(data, state.alpha, state.log_prior_scale)
    log_s = jnp.where(data.learn, _optimal_log_scale(mu, chol), state.log_prior_scale)
    value, alpha = collapsed_elbo(data, mu, chol, log_s)
    info = LinearInfo(
        value, relative_change(value, state.elbo), jnp.exp(log_s), jnp.ones((), value.dtype), value
    )
    return LinearVIState(mu, chol, alpha, log_s, value), info



def _dual_q(data: LinearData, alpha, log_s) -> dual.DualQ:
    """Paper eq. 14 in dual form: ``q(beta)`` given ``alpha`` (``inference.dual``)."""
    root = jnp.sqrt(alpha)
    return dual.dual_q(data.gram, jnp.exp(2.0 * log_s), root / data.gamma, 1.0 + root)


def vi_dual_init(_static, _key, data: LinearData, start=None) -> LinearVIDualState:
    """Start from ``q(beta)`` = the prior (:func:`vi_init` in dual form: ``a = 0``, the
    factor of ``K + N`` with ``N^{-1} = 0``)."""
    n = data.Z.shape[0]
    dtype = data.Z.dtype
    log_s = jnp.log(data.prior_scale)
    m, v = jnp.zeros(n, dtype), jnp.exp(2.0 * log_s) * jnp.diagonal(data.gram)
    alpha = elbo_mod.optimal_alpha(m, v, MARGIN_LABEL)
    value = jnp.sum(elbo_mod.collapsed_data_term(m, v, MARGIN_LABEL, data.gamma))
    zeros = jnp.zeros(n, dtype)
    return LinearVIDualState(zeros, jnp.eye(n, dtype=dtype), zeros, log_s, alpha, log_s, value)


def vi_dual_step(_static, _key, state: LinearVIDualState, data: LinearData):
    """One sweep of eq. 14 in dual form (:func:`vi_step`'s iterates to rounding)."""
    p = data.Z.shape[1]
    log_q = state.log_prior_scale
    q = _dual_q(data, state.alpha, log_q)
    log_s = jnp.where(data.learn, log_q + 0.5 * jnp.log(dual.second_moment(q, p) / p), log_q)
    m, v = dual.margins(q)
    alpha = elbo_mod.optimal_alpha(m, v, MARGIN_LABEL)
    value = (jnp.sum(elbo_mod.collapsed_data_term(m, v, MARGIN_LABEL, data.gamma))
             - dual.kl(q, p, log_q, log_s))
    info = LinearInfo(
        value, relative_change(value, state.elbo), jnp.exp(log_s), jnp.ones((), value.dtype), value
    )
    return LinearVIDualState(q.a, q.fac.chol, q.fac.s, log_q, alpha, log_s, value), info


# --- stochastic VI ------------------------------------------------------------------------


def _svi_target(state: LinearSVIState, data: LinearData, idx):
    """The batch's natural-gradient target (``_svi``), prior precision ``I / s^2``."""
    Zb = data.Z[idx]
    prior_prec = jnp.eye(Zb.shape[1], dtype=Zb.dtype) * jnp.exp(-2.0 * state.log_prior_scale)
    return natural_target(Zb, jnp.zeros(Zb.shape[0], Zb.dtype), MARGIN_LABEL, prior_prec,
                          state.eta1, state.prec, data.scale, data.gamma)


def _svi_kl(state: LinearSVIState):
    mu, chol = gaussian_from_precision(state.eta1, state.prec)
    return kl_precision(mu, chol, state.log_prior_scale)


def _svi_elbo(state: LinearSVIState, data: LinearData):
    mu, chol = gaussian_from_precision(state.eta1, state.prec)
    return collapsed_elbo(data, mu, chol, state.log_prior_scale)[0]


def _svi_model(hyper_every: int) -> SVIModel:
    """Linear SVI's pieces of the shared step; every ``hyper_every`` steps (with
    ``data.learn``) the prior scale moves to its optimum for the current ``q``."""

    def hyper(state: LinearSVIState, data: LinearData, idx):
        mu, chol = gaussian_from_precision(state.eta1, state.prec)
        do_hyper = jnp.logical_and(data.learn, state.count % hyper_every == 0)
        log_s = jnp.where(do_hyper, _optimal_log_scale(mu, chol), state.log_prior_scale)
        return state._replace(log_prior_scale=log_s)

    return SVIModel(_svi_target, hyper, _svi_kl, _svi_elbo)


_batch_order = jax.jit(batch_order, static_argnums=1)


class SVIStatic(NamedTuple):
    """Linear SVI's static settings (hashable: the loop compiles one program per value)."""

    rate: object
    batch_size: int
    elbo_every: int | None
    hyper_every: int


@functools.partial(jax.jit, static_argnames=("static",))
def svi_init(static: SVIStatic, key, data: LinearData, start=None) -> LinearSVIState:
    """``q(beta)`` = the prior; the adaptive rate is seeded with ``rate.num_init`` batch
    gradients drawn with ``key`` (:func:`~ppl_bsvm.inference.vi._svi.stream_keys`)."""
    n, p = data.Z.shape
    dtype = data.Z.dtype
    keys = stream_keys(key, static.rate.num_init)
    log_s = jnp.log(data.prior_scale)
    prec = jnp.eye(p, dtype=dtype) * jnp.exp(-2.0 * log_s)
    state = LinearSVIState(jnp.zeros(p, dtype), prec, log_s, None,
                           batches_init(keys, data.order, n), jnp.zeros((), jnp.int32),
                           estimate_init(dtype))
    return rate_init(keys, static.rate, _svi_target, static.batch_size, n, state, data)


POLISH_MAX_N = 10**6
"""Points up to which linear SVI polishes by default (:func:`default_polish`)."""

POLISH_SWEEPS = 30
"""Sweeps of the polish the time estimate counts (10-43 measured, :func:`default_polish`)."""


def default_polish(n: int) -> bool:
    """Whether linear SVI polishes by default: up to :data:`POLISH_MAX_N` points.

    A sweep costs ``n p^2`` like ``n / |S|`` minibatch steps. Measured (one run each, cache
    warm, 2 cores): 10-43 sweeps on breast cancer, digits 3 vs 8, wdbc and Heart (2-24 ms);
    on the ``susy`` generator (p = 19) 13 sweeps at 10^5 points (1.03 s against 0.75 s without),
    22 at 10^6 (10.4 s against 2.8 s, where the 20,000 steps without it stopped at max_iter,
    20 nats of ELBO lower). Beyond 10^6 points the sweeps dominate the run; ``polish=True``
    still certifies.
    """
    return n <= POLISH_MAX_N


@_programs.Program
def _polish(data: LinearData, eta1, prec, log_s, tol, max_sweeps):
    """SVI's ``q(beta)`` moved towards the batch fixed point of eq. 14 (with the prior scale at
    its maximiser for each sweep's ``q`` when it is learned, as in :func:`vi_step`) by
    ``fixed_point.certify``: ``(eta1, prec, log_s, Certificate)``."""
    p = eta1.shape[0]

    def scale(theta):
        mu, chol = gaussian_from_precision(*fixed_point.unpack(theta, p))
        return jnp.where(data.learn, _optimal_log_scale(mu, chol), log_s)

    def sweep(theta):
        return fixed_point.dense_sweep(data.Z, 0.0, MARGIN_LABEL, scale(theta), data.gamma,
                                       theta)

    theta, cert = fixed_point.certify(sweep, fixed_point.pack(eta1, 0.5 * (prec + prec.T)),
                                      data.Z.shape[0], tol, max_sweeps)
    eta1, prec = fixed_point.unpack(theta, p)
    return eta1, prec, scale(theta), cert


def linear_svi_step(static: SVIStatic, key, state: LinearSVIState, data: LinearData):
    """One stochastic natural-gradient step (:func:`ppl_bsvm.inference.vi._svi.svi_step`)."""
    state, rec = svi_step(_svi_model(static.hyper_every), static.rate, static.batch_size,
                          static.elbo_every, data.Z.shape[0], key, state, data)
    return state, LinearInfo(rec.value, rec.delta, jnp.exp(state.log_prior_scale), rec.rho,
                             rec.exact)


# --- engines ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearVIOptions(LinearPrior, LinearForm, Temperature, Learn, LinearResponse, Iteration,
                      Draws, Link):
    """Options of ``fit(model="linear", method="vi")`` (see :func:`linear_vi`)."""

    max_iter: int = 1000
    tol: float = 1e-10


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearSVIOptions(LinearPrior, Temperature, Stochastic, Polish, Learn, HyperEvery,
                       LinearResponse, Iteration, Draws, Link):
    """Options of ``fit(model="linear", method="svi")`` (see :func:`linear_svi`)."""

    max_iter: int = 20000
    tol: float = 1e-5


def _data(setup, prior_scale, gamma, learn, scale=1.0, period=0, order=None,
          with_gram=False) -> LinearData:
    return LinearData(
        setup.Z, jnp.asarray(prior_scale), jnp.asarray(gamma), learn=jnp.asarray(learn),
        scale=jnp.asarray(float(scale)), period=jnp.asarray(period, jnp.int32), order=order,
        gram=dual.gram(setup.Z) if with_gram else None,
    )


def _linear_response(data: LinearData, mu, chol, log_s, method: str):
    """The linear-response covariance of ``q(beta)`` at the fixed point of eq. 14 over all
    data reached from ``(mu, chol)`` (``lrvb.sites_linear_response``; the prior scale held at its
    value), checked by ``lrvb.accept``: ``(cov, status)``."""
    p = mu.shape[0]
    factor = cov_factor(chol)
    Sigma = factor @ factor.T
    sites = Sites(data.Z, jnp.eye(p, dtype=mu.dtype) * jnp.exp(-2.0 * log_s), data.gamma,
                  jnp.zeros((), mu.dtype))
    cov, residual, _ = sites_linear_response(sites, mu, Sigma)
    return accept(cov, Sigma, residual, f'fit(model="linear", method="{method}")', stacklevel=5)


def _psis(data: LinearData, log_s, mu, cov, draws) -> dict:
    """PSIS of the draws of ``q(beta)`` against the exact posterior (``psis.py``): the
    ``approximation`` entries ``psis_khat``, ``psis_ess``, ``psis_log_weights`` and, when
    ``k-hat < 0.7``, the corrected ``beta_mean_psis`` and ``beta_sd_psis``."""
    chol = jnp.linalg.cholesky(jnp.asarray(cov))
    result = psis(linear_log_ratios(data.Z, jnp.exp(log_s), data.gamma, mu, chol, draws), draws)
    if result is None:
        return {}
    out = {"psis_khat": result.khat, "psis_ess": result.ess,
           "psis_log_weights": result.log_weights}
    if result.mean is not None:
        out.update(beta_mean_psis=result.mean, beta_sd_psis=result.sd)
    return out


def _approximation(problem, setup, data, mu, chol, log_s, key, options, result, method,
                   elapsed, extra_trace, resolved, stop=None, timings=None) -> Approximation:
    """The Fit's pieces from ``q(beta) = N(mu, (L L^T)^{-1})`` (primal form). The engine's
    time (``elapsed``) grows by this function's: the linear response, draws and PSIS are the
    engine's work, as in B-BSVM and S-BSVM (``Fit.summary`` shows them as parts of it)."""
    start = time.perf_counter()
    value, alpha = collapsed_elbo(data, mu, chol, log_s)
    factor = cov_factor(chol)
    cov = mean_field = factor @ factor.T
    status = None
    timings = dict(timings or {})
    if options.linear_response:
        t0 = time.perf_counter()
        cov, status = _linear_response(data, mu, chol, log_s, method)
        if status == "linear response":
            factor = jnp.linalg.cholesky(jnp.asarray(cov))
            chol = jnp.linalg.cholesky(jnp.linalg.inv(jnp.asarray(cov)))
        timings["linear_response"] = time.perf_counter() - t0
    draws = mvn_draws(key, mu, factor, options.num_draws)
    latent = Latent(linear_gaussian, options.intercept, LinearGaussian(mu, chol))
    extra = {"beta_cov_mean_field": mean_field} if options.linear_response else {}
    extra.update(_psis(data, log_s, mu, cov, draws[0]))
    elapsed += time.perf_counter() - start
    return _finish(problem, setup, options, result, method, elapsed, extra_trace, resolved,
                   draws, mu, cov, latent, alpha, log_s, value, timings=timings,
                   covariance=status, stop=stop, **extra)


def _dual_approximation(problem, setup, data, st: LinearVIDualState, key, options, result,
                        elapsed, extra_trace) -> Approximation:
    """The Fit's pieces from the dual state: ``q(beta)``'s mean, covariance and draws from
    ``n x n`` factors (``inference.dual``); the ELBO and ``alpha`` are the state's. No PSIS
    diagnostic: importance sampling in more dimensions than points has no useful k-hat."""
    q = dual.DualQ(NoisyFactor(st.chol, st.s), st.a, None, jnp.exp(2.0 * st.log_scale_q))
    mu = dual.beta_mean(setup.Z, q)
    draws = np.asarray(dual.beta_draws(key, setup.Z, q, mu, options.num_draws))[None]
    latent = Latent(linear_dual, options.intercept, dual.latent_arrays(setup.Z, q))
    return _finish(problem, setup, options, result, "vi", elapsed, extra_trace, {}, draws, mu,
                   dual.beta_cov(setup.Z, q), latent, st.alpha, st.log_prior_scale, st.elbo)


def _finish(problem, setup, options, result, method, elapsed, extra_trace, resolved, draws,
            mu, cov, latent, alpha, log_s, value, timings=None, stop=None,
            **extra) -> Approximation:
    """``stop``: ``(stop_reason, attrs)`` of a polish (``fixed_point.outcome``), replacing the
    run's stop reason."""
    stop_reason, attrs = (result.stop_reason, {}) if stop is None else stop
    idata = beta_idata(problem, setup.features, draws, mu, cov, method=method,
                       stop_reason=stop_reason, alpha=alpha, prior_scale=jnp.exp(log_s),
                       elbo=value, attrs=attrs, **extra)
    return Approximation.from_run(
        result, idata=idata,
        predictor=GaussianPredictor(latent, link=options.link, gamma=options.gamma),
        seconds=elapsed, trace=extra_trace, options=resolved, timings=timings or {},
        checkpoint=result if method == "svi" else None,
    )._replace(stop_reason=stop_reason)


@register("vi", ("linear",), options=LinearVIOptions, uses_kernel=False,
          memory=linear_bytes(5, dual=dual.in_dual))
def linear_vi(problem: Problem, options: LinearVIOptions, *, key) -> Approximation:
    """Mean-field VI for the linear Bayesian SVM by coordinate ascent (Wenzel et al. eq. 14).

    Options (:class:`LinearVIOptions`)
    ----------------------------------
    prior_scale : float, default=1.0
        ``beta ~ N(0, prior_scale^2 I)`` (the starting value when it is learned).
    intercept : bool, default=True
        Append a column of ones (coefficient ``beta[intercept]``, same prior).
    gamma : float, default=1.0
        Pseudo-likelihood temperature.
    learn_hyperparameters : bool, default=False
        Maximise the ELBO over ``prior_scale`` too (closed form, see the module docstring).
    form : {"auto", "primal", "dual"}, default="auto"
        Solve in ``p x p`` (primal) or ``n x n`` (dual, Woodbury) form; ``"auto"``: dual
        when there are more coefficients ``p`` than points ``n`` (module docstring).
    max_iter : int, default=1000
    tol : float, default=1e-10
        Stop when the relative change of the ELBO between sweeps is below this.
    num_draws : int, default=1000
        Draws from ``q(beta)`` stored in ``idata.posterior.beta``.
    link : str, default=DEFAULT_LINK
        Default link of ``predict_proba`` (``ppl_bsvm.predictive``).
    linear_response : bool, default=False
        Use the linear-response covariance of the converged fixed point (Giordano et al.
        2018; :mod:`~ppl_bsvm.inference.vi.lrvb`: implicit differentiation of eq. 14 tilted
        by ``t^T beta``, with the prior scale held at its final value; the fixed point is
        first tightened by at most ``lrvb.POLISH_ITER`` sweeps until its relative residual
        is at most ``lrvb.POLISH_TOL``, the mean staying the engine's) for the draws, the
        predictive and ``idata.approximation.beta_cov`` (the mean-field one stays as
        ``beta_cov_mean_field``; the attribute ``covariance`` says which is used). A fixed
        point not converged or a covariance not positive definite warns
        (``ConvergenceWarning``) and keeps the mean-field covariance.
    """
    t0 = time.perf_counter()
    setup = linear_setup(problem, options.intercept)
    in_dual = dual.use_dual(options.form, *setup.Z.shape)
    if in_dual and options.linear_response:
        n, p = setup.Z.shape
        raise ValueError(
            f"linear_response=True differentiates the primal (p x p) fixed point, p + p(p+1)/2 "
            f"unknowns; with p={p} coefficients and n={n} points the fit runs in dual form. "
            "Pass form='primal' to have both, or leave linear_response off"
        )
    data = _data(setup, options.prior_scale, options.gamma, options.learn_hyperparameters,
                 with_gram=in_dual)
    init, step = (vi_dual_init, vi_dual_step) if in_dual else (vi_init, vi_step)
    result = run(step, init(None, None, data), data, max_iter=options.max_iter, tol=options.tol)
    st = result.state
    elapsed = time.perf_counter() - t0
    trace = {
        "elbo": result.infos.elbo,
        "elbo_step": np.arange(1, result.n_iter + 1),
        "prior_scale": result.infos.prior_scale,
    }
    if in_dual:
        return _dual_approximation(problem, setup, data, st, key, options, result, elapsed,
                                   trace)
    return _approximation(problem, setup, data, st.mu, st.chol, st.log_prior_scale, key, options,
                          result, "vi", elapsed, trace, {})


# cubic: each step factorises the precision (p^3/3) and inverts the factor for the KL term
# of the ELBO estimate (a triangular solve with p right-hand sides, p^3)
_steps_flops = linear_flops(lambda options: options.get("max_iter", 20000),
                            lambda n, options: 2 * min(n, options.get("batch_size") or 100),
                            "each of up to max_iter steps", cubic=4.0)
_polish_flops = linear_flops(lambda options: POLISH_SWEEPS, lambda n, options: 3 * n,
                             "each of the polish's sweeps", cubic=4.0)


def _svi_flops(n: int, d: int, options: dict) -> float:
    """Linear SVI's estimate: the steps and, where it runs, the polish's
    :data:`POLISH_SWEEPS` sweeps (a solve with the ``n`` rows, the precision's and the
    certificate's metric's sums, ``3 n p^2``)."""
    polish = options.get("polish")
    polish = default_polish(n) if polish is None else polish
    return _steps_flops(n, d, options) + polish * _polish_flops(n, d, options)


_svi_flops.hint = _steps_flops.hint


@register("svi", ("linear",), options=LinearSVIOptions, uses_kernel=False, budget="max_iter",
          memory=linear_bytes(7), flops=_svi_flops)
def linear_svi(problem: Problem, options: LinearSVIOptions, *, key,
               resume: Fit | None = None) -> Approximation:
    """Stochastic VI for the linear Bayesian SVM: minibatches of alpha, natural-gradient steps.

    Options (:class:`LinearSVIOptions`)
    -----------------------------------
    prior_scale, intercept, gamma, num_draws, link
        As for ``method="vi"``.
    linear_response : bool, default=False
        As for ``method="vi"``, at the fixed point of the batch iteration over all data (the
        natural-gradient step with ``rho = 1``), reached from SVI's ``q(beta)`` by at most
        ``lrvb.POLISH_ITER`` sweeps of ``O(n p^2)``; the mean stays SVI's.
    batch_size : int, optional
        Minibatch size ``|S|`` (at most ``n``); default ``min(100, n)``.
    learning_rate : str, float, schedule or callable, default="robbins_monro"
        ``"robbins_monro"`` (``(t + 1)^-0.6``), ``"adaptive"`` (Ranganath et al. 2013, the
        paper's choice; slower to converge, see ``schedules``), a constant in ``(0, 1]``, an
        object from ``ppl_bsvm.inference.vi.schedules`` or a callable ``count -> rho``.
    learn_hyperparameters : bool, default=False
        Every ``hyper_every`` steps set ``prior_scale`` to the ELBO's maximiser for the current
        ``q(beta)``.
    hyper_every : int, default=10
    max_iter : int, default=20000
        Number of minibatch steps at most.
    tol : float, default=1e-5
        Stop the minibatch steps when two consecutive periods' ELBO estimates differ by less
        than this (relative, beyond twice their sampling error; see ``_svi.ElboEstimate``).
    polish : bool, optional
        Then move ``q(beta)`` to the batch fixed point (module docstring; default: up to
        10^6 points, :func:`default_polish`); where its budget of
        ``fixed_point.MAX_SWEEPS`` sweeps runs out, ``stop_reason="max_iter"`` and a
        ``ConvergenceWarning`` saying how far it is.
    polish_tol : float, default=0.05
        The polish stops at this certified distance, in posterior sds (``fixed_point``).
    check_every : float, optional
        Length of a period of the stopping rule, in epochs (at least one minibatch); default
        one epoch.
    elbo_every : int, optional
        Also evaluate the exact full-data ELBO (``O(n p^2)``) every this many steps, recorded
        as ``trace["elbo_exact"]`` (a diagnostic, not used for stopping).
    resume : Fit, optional
        Continue this fit's run (``ppl_bsvm.resume``); ``max_iter`` counts its steps too.
    """
    rate = schedules.as_rate(options.learning_rate)
    n = problem.n
    batch_size = min(100, n) if options.batch_size is None else options.batch_size
    check_batch_size(batch_size, n)
    elbo_every = options.elbo_every
    t0 = time.perf_counter()
    setup = linear_setup(problem, options.intercept)
    k_init, k_draws = jax.random.split(key)
    data = _data(setup, options.prior_scale, options.gamma, options.learn_hyperparameters,
                 n / batch_size, period_points(n, batch_size, options.check_every or 1.0),
                 _batch_order(jax.random.fold_in(k_init, 1), n))
    previous = None if resume is None else resume.checkpoint
    static = SVIStatic(rate, batch_size, elbo_every, options.hyper_every)
    state = loop_key = None
    if previous is None:
        state = svi_init(static, k_init, data)
        loop_key = stream_keys(k_init, rate.num_init).loop
    result = run(linear_svi_step, state, data, static=static, key=loop_key,
                 max_iter=options.max_iter, tol=options.tol, resume=previous)
    st, timings = result.state, {}
    stop = (result.stop_reason, {"fixed_point_distance": np.nan})  # not checked
    eta1, prec, log_s = st.eta1, st.prec, st.log_prior_scale
    if default_polish(n) if options.polish is None else options.polish:
        t_p = time.perf_counter()
        eta1, prec, log_s, cert = _polish(data, eta1, prec, log_s,
                                          np.float64(options.polish_tol),
                                          np.int32(fixed_point.MAX_SWEEPS))
        stop = fixed_point.outcome(cert, options.polish_tol, 'fit(model="linear", method="svi")')
        timings["polish"] = time.perf_counter() - t_p
    mu, chol = gaussian_from_precision(eta1, prec)
    elapsed = time.perf_counter() - t0
    trace = {**recorded(result.infos.elbo),
             **(recorded(result.infos.elbo_exact, "elbo_exact") if elbo_every else {}),
             "rho": result.infos.rho, "prior_scale": result.infos.prior_scale}
    return _approximation(problem, setup, data, mu, chol, log_s, k_draws, options, result,
                          "svi", elapsed, trace, {"batch_size": batch_size}, stop=stop,
                          timings=timings)
