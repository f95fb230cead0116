r"""Black-box VI as a NumPyro user runs it: ``numpyro.infer.SVI`` with an autoguide on the
library's own marginal models (:mod:`ppl_bsvm.models`), the registered engines
``fit(..., method="advi")`` for ``linear``, ``gp`` and ``sparse_gp``.

Kucukelbir et al. (2017): maximise the ELBO
:math:`\mathcal L(\phi) = E_{q_\phi}[\log p(y, z) - \log q_\phi(z)]` by stochastic gradients
of its reparameterised Monte-Carlo estimate (``num_particles`` draws per step, NumPyro's
``Trace_ELBO``) with Adam (optax). ``z`` is the model's latent vector: ``beta``, or ``f``
(``whiten=False``) / ``f_whitened`` with ``f = L f_whitened`` (``whiten=True``), or
``u_whitened`` for the sparse model; ``lam`` is integrated out (the marginal models). The
guides are NumPyro's: ``"normal"`` (``AutoNormal``, mean-field), ``"mvn"``
(``AutoMultivariateNormal``, full covariance), ``"lowrank"`` (``AutoLowRankMultivariateNormal``
with ``rank``), ``"flow"`` (``AutoIAFNormal``, an inverse autoregressive flow).

**Stopping.** The loss is noisy, so the rule compares means of the last two windows of
``window`` steps, :math:`\bar L_1` and :math:`\bar L_0`, with their standard errors
:math:`s_1, s_0`: the run stops once
:math:`\max(0, |\bar L_1 - \bar L_0| - 2\sqrt{s_0^2 + s_1^2}) \le \mathrm{tol}\,(1 + |\bar L_1|)`,
i.e. when the change of the smoothed ELBO is within its noise and below ``tol``; else at
``max_iter`` with a ``ConvergenceWarning``. A run whose smoothed ELBO settled well below its
best (the optimiser diverged; :func:`elbo_fell`) stops as ``"diverged"`` with a
``ConvergenceWarning`` rather than as converged. Steps run in the library's compiled loop
(:mod:`ppl_bsvm.inference.loop`: no Python loop per step, progress bar, resumable).

**What the fit carries.** ``num_draws`` draws of ``q`` in ``idata.posterior`` (``f`` as the
deterministic site where whitened), the loss trace (``trace["elbo"]`` = minus the loss), and
Pareto-smoothed importance sampling of the draws against the model's exact marginal log
density (``idata.approximation.psis_khat``, ``psis_ess``: the library's
:func:`~ppl_bsvm.inference.vi.psis.psis`, as for the closed-form engines).
"""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import optax
from numpyro import handlers
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.autoguide import (
    AutoIAFNormal,
    AutoLowRankMultivariateNormal,
    AutoMultivariateNormal,
    AutoNormal,
)
from numpyro.infer.util import log_density

from ... import models
from ..._checks import boolean, one_of, positive_float, positive_int
from ..._memory import FLOAT, linear_bytes
from ...api import register
from ...data import Problem
from ...engine import (
    Approximation,
    Draws,
    Iteration,
    Jitter,
    LinearPrior,
    Link,
    Options,
    Temperature,
    optional,
)
from ...exceptions import ConvergenceWarning
from ...kernels import Kernel
from ...result import Fit
from .._common import gaussian_idata, gp_setup, linear_setup
from ..inducing import INDUCING_METHODS, inducing_prior
from ..loop import run
from ..marginal import gp_inputs
from ..mcmc._common import (
    all_draws,
    factored_gp_setup,
    gp_predictor,
    linear_predictor,
)
from ..mcmc.nuts import _inducing_locations, _sparse_predictor
from .psis import MIN_DRAWS, psis

__all__ = ["GUIDES", "ADVIOptions", "ADVILinearOptions", "ADVIGPOptions",
           "ADVISparseGPOptions", "advi_linear", "advi_gp", "advi_sparse_gp"]

GUIDES = ("normal", "mvn", "lowrank", "flow")
LEARNING_RATES = {"normal": 0.01, "mvn": 0.01, "lowrank": 0.01, "flow": 0.001}
"""Adam's default step size per guide: the inverse autoregressive flow's ELBO fell from -4,400
to -270,000 at 0.01 on the GP model of Heart (203 points), and rose to -188 at 0.001."""
SCHEDULES = ("constant", "cosine")
FULL_BATCH = 10_000
"""Up to this many points the default ``batch_size`` is the whole data set; beyond it
:data:`DEFAULT_BATCH` points per step."""
DEFAULT_BATCH = 1000
DRAW_CHUNK = 2_000_000
"""About this many margins (draws x points) at once when the stored draws' exact log
densities are computed."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ADVIOptions(Iteration, Temperature, Draws, Link):
    """What every ADVI engine takes.

    Parameters
    ----------
    guide : {"normal", "mvn", "lowrank", "flow"}
        NumPyro's ``AutoNormal``, ``AutoMultivariateNormal``,
        ``AutoLowRankMultivariateNormal`` or ``AutoIAFNormal``.
    rank : int or None
        The low-rank guide's rank (None: NumPyro's default, about sqrt of the dimension).
    learning_rate : float or None
        Adam's step size; None: :data:`LEARNING_RATES` of the guide (0.01, and 0.001 for the
        flow, which diverged at 0.01 on the GP model of Heart).
    schedule : {"constant", "cosine"}
        The step size over the run: constant, or cosine decay to zero at ``max_iter`` (a
        resumed run with another ``max_iter`` then follows another schedule).
    num_particles : int
        Draws of ``q`` per step for the ELBO's gradient.
    window : int
        Steps per window of the stopping rule (module doc).
    """

    max_iter: int = 20000
    tol: float | None = 1e-4
    guide: str = "mvn"
    rank: Any = None
    learning_rate: float | None = None
    schedule: str = "constant"
    num_particles: int = 1
    window: int = 500

    _validators = {
        "guide": lambda name, value: one_of(name, value, GUIDES),
        "schedule": lambda name, value: one_of(name, value, SCHEDULES),
        "num_particles": positive_int,
        "window": positive_int,
    }

    def _check(self):
        if self.rank is not None:
            self._set("rank", positive_int("rank", self.rank))
        rate = LEARNING_RATES[self.guide] if self.learning_rate is None else self.learning_rate
        self._set("learning_rate", positive_float("learning_rate", rate))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Minibatch(Options):
    """``batch_size``: points per step for the ELBO's estimate (NumPyro's ``subsample_size``
    plate, the likelihood scaled by ``n / batch_size``); None: all of them up to
    :data:`FULL_BATCH` points, else :data:`DEFAULT_BATCH`. At or above ``n``: all of them."""

    batch_size: int | None = None
    _validators = {"batch_size": optional(positive_int)}


def _subsample_size(size: int | None, n: int) -> int | None:
    """The plate's ``subsample_size`` for ``n`` points and the option ``batch_size``
    (``size``), None for the whole data set."""
    if size is None:
        size = None if n <= FULL_BATCH else DEFAULT_BATCH
    return None if size is None or size >= n else int(size)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ADVILinearOptions(ADVIOptions, LinearPrior, Minibatch):
    """Options of :func:`advi_linear`."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ADVIGPOptions(ADVIOptions, Jitter):
    """Options of :func:`advi_gp`: ``whiten`` too."""

    whiten: bool = True
    _validators = {"whiten": boolean}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ADVISparseGPOptions(ADVIGPOptions, Minibatch):
    """Options of :func:`advi_sparse_gp`: the inducing points too."""

    num_inducing: int = 64
    inducing: Any = "kmeans"

    def _check(self):
        self._set("num_inducing", positive_int("num_inducing", self.num_inducing))
        if isinstance(self.inducing, str) and self.inducing not in INDUCING_METHODS:
            raise ValueError(
                f"inducing must be one of {list(INDUCING_METHODS)} or an array (m, d), "
                f"got {self.inducing!r}"
            )


class Static(NamedTuple):
    """The compiled step's configuration (hashable): the model (``"linear"``, ``"gp"``,
    ``"sparse_gp"``), the shapes of its data (the guide's parameters are set up for them),
    its static arguments, the guide and the optimiser."""

    model: str
    shapes: tuple
    kernel: Any
    whiten: bool
    guide: str
    rank: Any
    learning_rate: float
    schedule: str
    max_iter: int
    num_particles: int
    window: int
    batch_size: int | None = None


class ADVIState(NamedTuple):
    """NumPyro's ``SVIState`` and the last ``2 window`` losses (a ring, NaN until filled)."""

    svi: Any
    losses: jnp.ndarray
    nonfinite_ok = ("losses",)


class ADVIInfo(NamedTuple):
    elbo: jnp.ndarray
    delta: jnp.ndarray


def _model(static: Static):
    """The marginal model with its static arguments bound; data come as keywords."""
    if static.model == "linear":
        return functools.partial(models.linear_bsvm, subsample_size=static.batch_size)
    if static.model == "gp":
        return functools.partial(models.gp_bsvm, kernel=static.kernel, whiten=static.whiten)
    return functools.partial(models.sparse_gp_bsvm, kernel=static.kernel, whiten=static.whiten,
                             subsample_size=static.batch_size)


def _guide(static: Static, model):
    if static.guide == "normal":
        return AutoNormal(model)
    if static.guide == "mvn":
        return AutoMultivariateNormal(model)
    if static.guide == "lowrank":
        return (AutoLowRankMultivariateNormal(model) if static.rank is None
                else AutoLowRankMultivariateNormal(model, rank=static.rank))
    return AutoIAFNormal(model, num_flows=2)


@functools.lru_cache(maxsize=32)
def _svi(static: Static) -> SVI:
    """One ``SVI`` per configuration, so that its guide is set up once (its prototype trace
    is Python-side state) and the compiled loop is reused."""
    model = _model(static)
    if static.schedule == "cosine":
        rate = optax.cosine_decay_schedule(static.learning_rate, static.max_iter)
    else:
        rate = static.learning_rate
    return SVI(model, _guide(static, model), optax.adam(rate),
               Trace_ELBO(num_particles=static.num_particles))


def _smoothed_change(losses, window):
    """The stopping statistic (module doc) of the ring of the last ``2 window`` losses, in
    time order; ``inf`` until both windows are full."""
    old, new = losses[:window], losses[window:]
    m0, m1 = jnp.mean(old), jnp.mean(new)
    se = jnp.sqrt(jnp.var(old) / window + jnp.var(new) / window)
    change = jnp.maximum(jnp.abs(m1 - m0) - 2.0 * se, 0.0) / (1.0 + jnp.abs(m1))
    return jnp.where(jnp.all(jnp.isfinite(losses)), change, jnp.inf)


def advi_step(static: Static, key, state: ADVIState, data):
    """One Adam step of the ELBO's reparameterised estimate; the info holds the step's ELBO
    estimate and the stopping statistic."""
    svi_state, loss = _svi(static).update(state.svi._replace(rng_key=key), **data)
    losses = jnp.roll(state.losses, -1).at[-1].set(loss)
    info = ADVIInfo(-loss, _smoothed_change(losses, static.window))
    return ADVIState(svi_state, losses), info


@functools.lru_cache(maxsize=32)
def _draws_program(static: Static, num_draws: int, site: str):
    """``(params, data, key) -> (draws, log_ratios)``: ``num_draws`` draws of ``q`` at the
    model's site (``f``/``u`` through the whitened deterministic) and each draw's log density
    ratio ``log p - log q`` (the exact ``log p``: all the points, whatever the minibatches);
    compiled once per configuration and shape."""
    guide, model = _svi(static).guide, _model(static._replace(batch_size=None))

    def one(params, data, k):
        trace = handlers.trace(handlers.seed(handlers.substitute(guide, data=params), k)) \
            .get_trace(**data)
        sites = [s for s in trace.values() if s["type"] == "sample" and not s["is_observed"]]
        latent = {s["name"]: s["value"] for s in sites}
        log_q = sum(jnp.sum(s["fn"].log_prob(s["value"])) for s in sites)
        log_p, model_trace = log_density(model, (), data, latent)
        return model_trace[site]["value"], log_p - log_q

    # draws in chunks whose margins take about DRAW_CHUNK floats: all 1,000 draws at once on
    # 10^5 points would hold several (n, 1000) arrays, gigabytes
    n = max(dict(static.shapes)["X"][0], 1)
    chunk = int(min(num_draws, max(1, DRAW_CHUNK // n)))

    def draws(params, data, key):
        keys = jax.random.split(key, num_draws)
        return jax.lax.map(lambda k: one(params, data, k), keys, batch_size=chunk)

    return jax.jit(draws)


def _advi(static: Static, data: dict, options: ADVIOptions, key, resume, site: str):
    """The run and its draws: ``(RunResult, draws, log_ratios, seconds)``."""
    t0 = time.perf_counter()
    k_init, k_loop, k_draws = jax.random.split(key, 3)
    previous = None if resume is None else resume.checkpoint
    state = None
    if previous is None:
        with numpyro.validation_enabled(False):
            svi_state = _svi(static).init(k_init, **data)
        state = ADVIState(svi_state, jnp.full(2 * static.window, jnp.nan))
    result = run(advi_step, state, data, static=static, key=k_loop, max_iter=options.max_iter,
                 tol=options.tol, min_iter=2 * static.window, resume=previous)
    fell = elbo_fell(np.asarray(result.infos.elbo), static.window)
    if fell is not None:
        warnings.warn(
            f"method='advi' (guide={options.guide!r}) diverged: its smoothed ELBO fell from "
            f"{fell[0]:.4g} to {fell[1]:.4g}; the draws are not an approximation of the "
            f"posterior. Lower learning_rate (now {options.learning_rate:g}).",
            ConvergenceWarning, stacklevel=4)
        result = result._replace(stop_reason="diverged")
    params = _svi(static).get_params(result.state.svi)
    draws, log_ratios = _draws_program(static, options.num_draws, site)(params, data, k_draws)
    return result, np.asarray(draws), np.asarray(log_ratios), time.perf_counter() - t0


DIVERGED_FACTOR = 100.0
"""A last chunk's median ELBO this many times the start's magnitude below it is divergence
whatever the noise (:func:`elbo_fell`)."""


def elbo_fell(elbo, window: int):
    """``(best, last)`` medians of the ELBO trace over chunks of ``window // 5`` steps when
    the last chunk's is below the best one's by more than 4 of their standard errors and 1 %
    of the best's magnitude: the optimisation diverged and settled lower, which a stopping
    rule on the change alone calls converged; else None. Medians, because a diverging ELBO
    estimate is heavy-tailed (steps of -10^14 among steps of -10^3).

    A run that diverges within its first chunk has no good chunk to compare with, and its
    last chunk's spread is as large as its median (-10^30 +- 10^30 against a start of -197):
    there ``best`` is the first chunk's largest value, the start, and a last median below it
    by :data:`DIVERGED_FACTOR` times its magnitude is divergence (a learning rate of 3 on
    Heart stopped on ``tol`` that way, the ELBO at -6e28)."""
    size = max(window // 5, 1)
    count = elbo.size // size
    if count < 2:
        return None
    chunks = elbo[elbo.size - count * size:].reshape(count, size)
    medians = np.median(chunks, axis=1)
    spread = 1.4826 * np.median(np.abs(chunks - medians[:, None]), axis=1)
    se = 1.2533 * spread / np.sqrt(size)  # the median's standard error, normal steps
    best = int(np.argmax(medians))
    drop = medians[best] - medians[-1]
    if drop > 4 * np.hypot(se[best], se[-1]) and drop > 0.01 * abs(medians[best]):
        return float(medians[best]), float(medians[-1])
    start = float(np.max(elbo[:size]))
    if np.isfinite(start) and medians[-1] < start - DIVERGED_FACTOR * max(abs(start), 1.0):
        return start, float(medians[-1])
    return None


def _static(model: str, options: ADVIOptions, data: dict, kernel=None) -> Static:
    """The step's configuration; ``max_iter`` only where the schedule reads it, so that runs
    of other lengths reuse the compiled loop."""
    shapes = tuple((name, tuple(np.shape(value))) for name, value in sorted(data.items())
                   if name in ("X", "inducing"))
    batch = (_subsample_size(options.batch_size, int(np.shape(data["X"])[0]))
             if isinstance(options, Minibatch) else None)
    return Static(model, shapes, kernel, bool(getattr(options, "whiten", True)), options.guide,
                  options.rank, options.learning_rate, options.schedule,
                  options.max_iter if options.schedule == "cosine" else 0,
                  options.num_particles, options.window, batch)


def _importance(draws, log_ratios) -> dict:
    """PSIS of the draws (``psis_khat``, ``psis_ess``), or nothing with too few draws."""
    flat = draws.reshape(draws.shape[0], -1)
    result = psis(log_ratios, flat) if log_ratios.size >= MIN_DRAWS else None
    if result is None or not np.isfinite(result.khat):
        return {}
    return {"psis_khat": np.asarray(result.khat), "psis_ess": np.asarray(result.ess),
            "psis_log_weights": result.log_weights}


def _approximation(problem, config, result, draws, log_ratios, seconds, site, model,
                   predictor, coords=None, **fields) -> Approximation:
    extra = _importance(draws, log_ratios)
    idata = gaussian_idata(
        {site: draws[None]}, problem=problem, coords=coords, approximation=extra or None,
        attrs={"method": "advi", "model": model, "stop_reason": result.stop_reason,
               "guide": config.guide},
    )
    trace = {"elbo": np.asarray(result.infos.elbo), "delta": np.asarray(result.infos.delta)}
    return Approximation.from_run(result, idata=idata, predictor=predictor, seconds=seconds,
                                  trace=trace, checkpoint=result, **fields)


def _guide_floats(dim: int, options: dict) -> int:
    """The guide's parameters and Adam's two moments of them (``dim^2`` for ``mvn``)."""
    guide = options.get("guide", "mvn")
    size = dim * dim if guide == "mvn" else dim * (2 + int(options.get("rank") or 10))
    return 3 * size


@register("advi", ("linear",), options=ADVILinearOptions, uses_kernel=False,
          budget="max_iter",
          memory=linear_bytes(0, lambda n, p, options: _guide_floats(p, options)))
def advi_linear(problem: Problem, options: ADVILinearOptions, *, key,
                resume: Fit | None = None) -> Approximation:
    """NumPyro's SVI with an autoguide (ADVI) on the linear Bayesian SVM (marginal model).

    The options are an :class:`ADVILinearOptions`, which validates them.

    Parameters
    ----------
    prior_scale, intercept, gamma
        As for ``method="gibbs"``.
    guide : {"normal", "mvn", "lowrank", "flow"}, default="mvn"
        The autoguide (module doc).
    rank : int, optional
        The ``"lowrank"`` guide's rank.
    learning_rate : float, optional
        Adam's step size; default 0.01, and 0.001 for ``guide="flow"`` (``LEARNING_RATES``).
    schedule : {"constant", "cosine"}, default="constant"
    num_particles : int, default=1
        Draws of ``q`` per gradient step.
    max_iter : int, default=20000
    tol : float, default=1e-4
        The smoothed ELBO's relative change, beyond its noise, at which the run stops.
    window : int, default=500
        Steps per window of the stopping rule.
    batch_size : int, optional
        Points per step (NumPyro's ``subsample_size`` plate, the likelihood scaled by
        ``n / batch_size``); default: all of them up to 10,000 points, else 1,000. The
        stopping rule sees the ELBO's change only beyond the minibatches' noise, so a
        minibatch run stops while Adam's iterates still jitter (linear Heart, minibatches of
        50: means 0.7 posterior sds from the full-batch answer at the stop); annealed by
        ``schedule="cosine"`` over a fixed ``max_iter`` (with ``window`` above half of it),
        minibatches of 50 gave the full-batch answer within 0.12 sds.
    num_draws : int, default=1000
        Draws of ``q`` stored in ``idata.posterior`` and used for PSIS (against the exact
        log density over all the points).
    link : str, default="probit"
    resume : Fit, optional
        Continue this fit's run (``ppl_bsvm.resume``); ``max_iter`` counts its steps too.
    """
    setup = linear_setup(problem, options.intercept)
    data = {"X": setup.Xd, "y": setup.y,
            "prior_scale": jnp.asarray(options.prior_scale, jnp.float64),
            "gamma": jnp.asarray(options.gamma, jnp.float64)}
    result, draws, ratios, seconds = _advi(_static("linear", options, data), data, options,
                                           key, resume, "beta")
    predictor = linear_predictor(draws[None], options.intercept, all_draws(options),
                                 options.gamma)
    return _approximation(problem, options, result, draws, ratios, seconds, "beta", "linear",
                          predictor, {"feature": setup.features})


def _gp_bytes(n: int, d: int, options: dict) -> int:
    """``K``, its factor and the model's gradient through them, and the guide."""
    return FLOAT * (4 * n * n + _guide_floats(n, options))


_gp_bytes.hint = ("method='advi' keeps n x n matrices (and n^2 guide parameters with "
                  "guide='mvn'): use model='sparse_gp', or guide='normal' or 'lowrank'")


@register("advi", ("gp",), options=ADVIGPOptions, budget="max_iter", memory=_gp_bytes)
def advi_gp(problem: Problem, options: ADVIGPOptions, *, key, kernel: Kernel,
            resume: Fit | None = None) -> Approximation:
    """NumPyro's SVI with an autoguide (ADVI) on the GP Bayesian SVM (marginal model).

    The options are an :class:`ADVIGPOptions`, which validates them; the kernel's
    hyperparameters stay fixed.

    Parameters
    ----------
    gamma, jitter
        As for ``method="gibbs"``.
    whiten : bool, default=True
        The guide is over ``f_whitened`` (``f = L f_whitened``; a mean-field guide there is
        not mean-field in ``f``) rather than ``f`` itself.
    guide, rank, learning_rate, schedule, num_particles, max_iter, tol, window, num_draws,
    link, resume
        As for the linear model.
    """
    setup, chol = factored_gp_setup(problem, kernel, options.jitter)
    data = gp_inputs(setup, options.gamma)
    result, draws, ratios, seconds = _advi(_static("gp", options, data, kernel), data,
                                           options, key, resume, "f")
    predictor = gp_predictor(kernel, setup, draws[None], all_draws(options), options.gamma,
                             chol)
    return _approximation(problem, options, result, draws, ratios, seconds, "f", "gp",
                          predictor, kernel_params=setup.params, jitter=setup.jitter)


def _sparse_bytes(n: int, d: int, options: dict) -> int:
    """Per step the minibatch's ``b x m`` projection (and its gradient), the draws' exact
    log density over all ``n`` points in the end (in pieces of ``b`` rows at most ``n m``),
    and the guide."""
    m = int(options.get("num_inducing", 64))
    b = _subsample_size(options.get("batch_size"), n) or n
    return FLOAT * (4 * b * m + n * m + 4 * m * m + _guide_floats(m, options))


@register("advi", ("sparse_gp",), options=ADVISparseGPOptions, budget="max_iter",
          memory=_sparse_bytes)
def advi_sparse_gp(problem: Problem, options: ADVISparseGPOptions, *, key, kernel: Kernel,
                   resume: Fit | None = None) -> Approximation:
    """NumPyro's SVI with an autoguide (ADVI) on the sparse GP Bayesian SVM (inducing values
    ``u``, ``f`` integrated out exactly: ``models.sparse_gp_bsvm``).

    The options are an :class:`ADVISparseGPOptions`, which validates them.

    Parameters
    ----------
    num_inducing : int, default=64
    inducing : {"kmeans", "random"} or array of shape (m, d), default="kmeans"
        As for ``method="nuts"``; stored in ``Fit.options["inducing_points"]``.
    batch_size : int, optional
        As for the linear model: the minibatch's projections alone are computed per step,
        ``O(batch_size m)``.
    gamma, jitter, whiten, guide, rank, learning_rate, schedule, num_particles, max_iter, tol,
    window, num_draws, link, resume
        As for ``model="gp"`` (``jitter`` is added to ``Kmm``).
    """
    k_inducing, key = jax.random.split(key)
    if resume is not None:
        Z = np.asarray(resume.options["inducing_points"])
    else:
        Z = _inducing_locations(problem, options.inducing, options.num_inducing, k_inducing)
    setup = gp_setup(problem, kernel, options.jitter, kernel_matrix=False)
    Zj = jnp.asarray(Z)
    data = {**gp_inputs(setup, options.gamma), "inducing": Zj}
    result, draws, ratios, seconds = _advi(_static("sparse_gp", options, data, kernel), data,
                                           options, key, resume, "u")
    prior = inducing_prior(kernel, setup.params, Zj, setup.jitter)
    predictor = _sparse_predictor(kernel, setup.params, prior, draws[None],
                                  all_draws(options), options.gamma)
    return _approximation(problem, options, result, draws, ratios, seconds, "u", "sparse_gp",
                          predictor, options={"inducing_points": Z},
                          kernel_params=setup.params, jitter=setup.jitter)
