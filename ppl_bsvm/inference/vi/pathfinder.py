r"""Pathfinder (Zhang, Carpenter, Gelman & Vehtari 2022; BlackJAX's) on the marginal Bayesian
SVM: the registered engines ``fit(..., method="pathfinder")``, :func:`pathfinder_linear` and
:func:`pathfinder_gp`.

The target is the model's exact marginal posterior (``lam`` integrated out) in whitened
coordinates :math:`v`, with :math:`x = s\,v` (``beta``, prior :math:`N(0, s^2 I)`) or
:math:`x = L v` (``f``, :math:`L L^\top = K`):

.. math::

    \log p(v \mid y) = -\tfrac12 \lVert v\rVert^2
                       - 2\gamma \sum_i \max(0, 1 - m_i(x(v))) + \text{const},

the parametrisation in which the prior is isotropic (as for NUTS, ``models.gp_bsvm``'s
``whiten=True``). Each of ``num_paths`` paths runs L-BFGS from a draw of the prior and, at
every iterate, forms the Gaussian whose covariance is L-BFGS's inverse-Hessian estimate
(Algorithm 1 of the paper); the iterate of largest ELBO, estimated from
``num_elbo_draws`` draws, is the path's approximation. Multi-path Pathfinder (Algorithm 2)
pools ``num_elbo_draws`` draws of each path's approximation and resamples ``num_draws`` of
them with Pareto-smoothed importance weights against the exact posterior; the Pareto shape
``k-hat`` of those weights is the fit's own diagnostic (``idata.approximation.psis_khat``,
:func:`ppl_bsvm.inference.vi.psis.khat_verdict`). BlackJAX does the paths (its single-path
``blackjax.vi.pathfinder.approximate`` and ``sample``, vmapped over the paths as its
``multi_approximate`` does, so that each path's ELBO trace is kept); the weights are the
library's PSIS (:func:`~ppl_bsvm.inference.vi.psis.psis`, as for linear VI and ADVI, so that
the engines' ``k-hat`` come from one implementation).

The hinge makes the log density piecewise quadratic, with kinks where L-BFGS's curvature
pairs mislead it: the paths stop early (``ftol``) and their Gaussians are narrower than the
posterior, more so as ``n`` grows; ``k-hat`` says so (``reports/ppl_comparison``).
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from blackjax.vi.pathfinder import approximate, sample

from ..._checks import positive_int
from ..._memory import FLOAT, linear_bytes
from ...api import register
from ...data import Problem
from ...engine import Approximation, Draws, Jitter, LinearPrior, Link, Temperature
from ...kernels import Kernel
from .._common import gaussian_idata, linear_setup
from .psis import MIN_DRAWS, psis
from ..mcmc._common import (
    all_draws,
    factored_gp_setup,
    gp_predictor,
    linear_predictor,
)
from ..marginal import gp_inputs, linear_inputs, log_likelihood, marginal_prior, unwhiten

__all__ = ["PathfinderOptions", "PathfinderLinearOptions", "PathfinderGPOptions",
           "pathfinder_linear", "pathfinder_gp"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PathfinderOptions(Temperature, Draws, Link):
    """What both Pathfinder engines take.

    Parameters
    ----------
    num_paths : int
        Independent L-BFGS paths, each from a draw of the prior.
    max_iter : int
        L-BFGS iterations per path at most.
    maxcor : int
        L-BFGS's history (the rank of the inverse-Hessian update).
    num_elbo_draws : int
        Draws per iterate for its ELBO, and per path for the importance-resampling pool
        (``num_paths * num_elbo_draws`` at least 100).
    """

    num_paths: int = 4
    max_iter: int = 100
    maxcor: int = 10
    num_elbo_draws: int = 200
    _validators = {"num_paths": positive_int, "max_iter": positive_int, "maxcor": positive_int,
                   "num_elbo_draws": positive_int}

    def _check(self):
        if self.num_paths * self.num_elbo_draws < MIN_DRAWS:
            raise ValueError(
                f"num_paths * num_elbo_draws = {self.num_paths * self.num_elbo_draws} pooled "
                f"draws are too few for Pareto-smoothed importance weights (at least "
                f"{MIN_DRAWS}): raise num_elbo_draws")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PathfinderLinearOptions(PathfinderOptions, LinearPrior):
    """Options of :func:`pathfinder_linear`."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PathfinderGPOptions(PathfinderOptions, Jitter):
    """Options of :func:`pathfinder_gp`."""


@partial(jax.jit, static_argnames=("kernel", "dim", "num_paths", "max_iter", "maxcor",
                                   "num_elbo_draws"))
def _run(key, inputs, *, kernel, dim, num_paths, max_iter, maxcor, num_elbo_draws):
    """Multi-path Pathfinder (module doc), compiled once per shape and static setting. Returns
    the pooled draws of ``x`` (``num_paths * num_elbo_draws``), their log density ratios
    ``log p - log q``, each path's ELBO trace (``-inf`` after it stopped) and the iterations
    it ran."""
    prior = marginal_prior(inputs, kernel)
    gamma = prior.gamma

    def logdensity(v):
        return -0.5 * jnp.sum(v * v) + log_likelihood(prior, unwhiten(prior, v))

    # BlackJAX's multi-path Pathfinder (``vi.multipathfinder.multi_approximate``) from its
    # single-path pieces, so that each path's ELBO trace is kept: its iterations are the fit's
    k_start, k_paths, k_draw = jax.random.split(key, 3)
    start = jax.random.normal(k_start, (num_paths, dim), gamma.dtype)
    best, info = jax.vmap(lambda k, x0: approximate(
        k, logdensity, x0, num_elbo_draws, maxiter=max_iter, maxcor=maxcor,
    ))(jax.random.split(k_paths, num_paths), start)
    pool, logq = jax.vmap(lambda k, s: sample(k, s, num_elbo_draws))(
        jax.random.split(k_draw, num_paths), best)
    logp = jax.vmap(jax.vmap(logdensity))(pool)
    elbo = info.path.elbo  # (num_paths, max_iter + 1), -inf after a path stopped
    iterations = jnp.sum(jnp.isfinite(elbo), axis=1)  # ELBOs at iterates 0 .. iter_num - 1
    return unwhiten(prior, pool.reshape(-1, dim)), (logp - logq).ravel(), elbo, iterations


def _resample(key, pool, log_ratios, num_draws):
    """PSIS of the pooled draws against the exact posterior (the library's
    :func:`~ppl_bsvm.inference.vi.psis.psis`, as for linear VI, so that the engines' ``k-hat``
    are comparable) and ``num_draws`` of them resampled with its weights. A draw whose density
    ratio is not finite (a path's Gaussian degenerate in some direction) gets weight 0."""
    finite = np.isfinite(log_ratios)
    if finite.sum() < MIN_DRAWS:
        raise FloatingPointError(
            f"Pathfinder's approximations have a finite density ratio at {int(finite.sum())} "
            f"of {finite.size} pooled draws (at least {MIN_DRAWS} are needed): the paths' "
            "Gaussians are degenerate. Check the data scale, prior_scale, gamma and the "
            "kernel hyperparameters, or raise num_elbo_draws.")
    result = psis(log_ratios[finite], pool[finite])
    if not np.isfinite(result.khat):
        raise FloatingPointError(
            "Pathfinder's importance weights cannot be Pareto-smoothed (k-hat undefined: the "
            "largest density ratios of the pooled draws tie), so its paths' Gaussians are "
            "degenerate. Check the data scale (constant or duplicated inputs), prior_scale, "
            "gamma and the kernel hyperparameters.")
    weights = np.exp(result.log_weights - np.max(result.log_weights))
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel())
    pick = rng.choice(weights.size, size=num_draws, p=weights / weights.sum())
    return pool[finite][pick], result.khat, result.ess, int(finite.sum())


def _pathfinder(problem, options, key, kernel, inputs, dim):
    start = time.perf_counter()
    k_run, k_pick = jax.random.split(key)
    pool, log_ratios, elbo, iterations = _run(
        k_run, inputs, kernel=kernel, dim=dim, num_paths=options.num_paths,
        max_iter=options.max_iter, maxcor=options.maxcor,
        num_elbo_draws=options.num_elbo_draws)
    x, khat, ess, pooled = _resample(k_pick, np.asarray(pool), np.asarray(log_ratios),
                                     options.num_draws)
    iterations = np.asarray(iterations)
    stop = "max_iter" if np.any(iterations >= options.max_iter) else "tol"
    return x, float(khat), (ess, pooled), np.asarray(elbo), iterations, stop, \
        time.perf_counter() - start


def _stop_detail(options, iterations) -> str | None:
    """What the ``ConvergenceWarning`` says when a path ran out of iterations."""
    capped = int(np.sum(iterations >= options.max_iter))
    if not capped:
        return None
    return (f"stopped with {capped} of {options.num_paths} paths at max_iter="
            f"{options.max_iter} L-BFGS iterations, before L-BFGS's tolerance was met; raise "
            "max_iter")


def _approximation(problem, options, site, x, khat, importance, elbo, iterations, stop,
                   seconds, predictor, coords, model, **fields) -> Approximation:
    ess, pooled = importance
    idata = gaussian_idata(
        {site: x[None]}, problem=problem, coords=coords,
        approximation={"psis_khat": np.asarray(khat), "psis_ess": np.asarray(ess),
                       "psis_pool": np.asarray(pooled), "path_iterations": iterations},
        attrs={"method": "pathfinder", "model": model, "stop_reason": stop,
               "psis_khat": khat, "stop_detail": _stop_detail(options, iterations)},
    )
    best = np.where(np.isfinite(elbo), elbo, -np.inf).max(axis=1)
    return Approximation(
        idata=idata, predictor=predictor,
        trace={"elbo": best, "elbo_path": elbo, "iterations": iterations},
        stop_reason=stop, n_iter=int(iterations.max()), timings={"engine": seconds},
        **fields)


@register("pathfinder", ("linear",), options=PathfinderLinearOptions, uses_kernel=False,
          memory=linear_bytes(0, lambda n, p, options: _linear_floats(n, p, options)))
def pathfinder_linear(problem: Problem, options: PathfinderLinearOptions, *,
                      key) -> Approximation:
    """Multi-path Pathfinder (Zhang et al. 2022; BlackJAX) on the linear Bayesian SVM.

    The options are a :class:`PathfinderLinearOptions`, which validates them.

    Parameters
    ----------
    prior_scale, intercept, gamma
        As for ``method="gibbs"``.
    num_paths : int, default=4
        Independent L-BFGS paths, each from a draw of the prior (whitened coordinates).
    max_iter : int, default=100
        L-BFGS iterations per path at most (a path that ran them all did not meet L-BFGS's
        tolerance: ``stop_reason="max_iter"`` and a ``ConvergenceWarning``).
    maxcor : int, default=10
        L-BFGS's history size.
    num_elbo_draws : int, default=200
        Draws per iterate for its ELBO estimate, and per path for the resampling pool.
    num_draws : int, default=1000
        Draws resampled with PSIS weights from the pooled paths into ``idata.posterior``.
    link : str, default="probit"
    """
    setup = linear_setup(problem, options.intercept)
    inputs = linear_inputs(setup, options.prior_scale, options.gamma)
    result = _pathfinder(problem, options, key, None, inputs, setup.Z.shape[1])
    predictor = linear_predictor(result[0][None], options.intercept, all_draws(options),
                                 options.gamma)
    return _approximation(problem, options, "beta", *result, predictor,
                          {"feature": setup.features}, "linear")


def _path_floats(n: int, options: dict) -> int:
    """Floats of the paths: each keeps its L-BFGS history (positions, gradients and the
    inverse-Hessian factors of rank ``2 maxcor`` at every iterate) and its pooled draws."""
    paths, iters = int(options.get("num_paths", 4)), int(options.get("max_iter", 100)) + 1
    history = iters * n * (2 + 2 * int(options.get("maxcor", 10)))
    return paths * (history + 2 * int(options.get("num_elbo_draws", 200)) * n)


def _linear_floats(n: int, p: int, options: dict) -> int:
    """The paths in ``p`` dimensions, and the margins of their pooled draws (``n`` each)."""
    pool = int(options.get("num_paths", 4)) * int(options.get("num_elbo_draws", 200))
    return _path_floats(p, options) + pool * n


def _gp_bytes(n: int, d: int, options: dict) -> int:
    """``K`` and its factor, and the paths' history and draws (:func:`_path_floats`)."""
    return FLOAT * (2 * n * n + _path_floats(n, options))


_gp_bytes.hint = "method='pathfinder' keeps the n x n kernel matrix and its factor"


@register("pathfinder", ("gp",), options=PathfinderGPOptions, memory=_gp_bytes)
def pathfinder_gp(problem: Problem, options: PathfinderGPOptions, *, key,
                  kernel: Kernel) -> Approximation:
    """Multi-path Pathfinder (Zhang et al. 2022; BlackJAX) on the GP Bayesian SVM.

    The options are a :class:`PathfinderGPOptions`, which validates them. The paths run in
    the whitened coordinates ``v = L^{-1} f``; the kernel's hyperparameters stay fixed.

    Parameters
    ----------
    gamma, jitter
        As for ``method="gibbs"``.
    num_paths, max_iter, maxcor, num_elbo_draws, num_draws, link
        As for the linear model.
    """
    setup, chol = factored_gp_setup(problem, kernel, options.jitter)
    inputs = gp_inputs(setup, options.gamma)
    result = _pathfinder(problem, options, key, kernel, inputs, problem.n)
    predictor = gp_predictor(kernel, setup, result[0][None], all_draws(options),
                             options.gamma, chol)
    return _approximation(problem, options, "f", *result, predictor, None, "gp",
                          kernel_params=setup.params, jitter=setup.jitter)
