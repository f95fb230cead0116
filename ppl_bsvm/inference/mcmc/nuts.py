r"""NUTS (Hoffman & Gelman 2014, NumPyro's implementation) on the Bayesian SVM models.

The target is :mod:`ppl_bsvm.models` with ``augmented=False`` by default: the marginal
posterior :math:`p(\beta \mid y) \propto N(\beta; 0, \Sigma)\, e^{-2\gamma\sum_i
\max(0, 1 - y_i x_i^\top\beta)}` (or its GP / sparse GP version, non-centred ``f = L v``).
The augmented model is available for comparison, but NUTS diverges on it: ``log lam_i`` sits
between two double-exponential walls when ``y_i f_i`` is near 1 (``specs/stack_notes.md``
section 1). Divergent transitions are always counted, stored in
``idata.sample_stats.diverging`` and reported with a :class:`DivergenceWarning`.

Unlike the Gibbs sampler, NUTS can also sample kernel hyperparameters (``hyperpriors``).
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.infer import NUTS

from ... import models
from ..._checks import boolean, positive_float, positive_int
from ..._memory import FLOAT, gp_sampler_bytes, linear_bytes
from ...api import register
from ...data import Problem
from ...engine import Approximation, Jitter, LinearPrior, Sampler, Temperature
from ...kernels import Kernel
from ...predictive import MixturePredictor
from ...result import Fit
from .._common import check_kernel_matrix, gp_setup, linear_setup
from ..inducing import INDUCING_METHODS, choose_inducing, inducing_prior
from ..latent import GPHyperDraws, Latent, SparseDraws, gp_hyper_draws, sparse_draws
from ._common import (
    gp_predictor,
    kernel_factor,
    linear_predictor,
    mcmc_approximation,
    run_mcmc,
    thin_draws,
    warn_divergences,
)
from .driver import ChainKernel, rebuild, split_static
from .estimates import gp_nuts_flops, sparse_nuts_flops

__all__ = [
    "NUTS_FIELDS",
    "NUTSOptions",
    "NUTSLinearOptions",
    "NUTSGPOptions",
    "NUTSSparseGPOptions",
    "nuts_kernel",
    "nuts_sample_stats",
    "default_hyperpriors",
]

NUTS_FIELDS = (
    "diverging",
    "accept_prob",
    "num_steps",
    "energy",
    "potential_energy",
    "adapt_state.step_size",
)
"""Sampler fields collected after warmup (NumPyro names)."""


def _check_nuts_settings(target_accept_prob, max_tree_depth, dense_mass) -> dict:
    """NUTS's own settings, validated (``ValueError`` naming the option) and normalised."""
    target = positive_float("target_accept_prob", target_accept_prob)
    if not 0.0 < target < 1.0:
        raise ValueError(f"target_accept_prob must be in (0, 1), got {target_accept_prob!r}")
    return {
        "target_accept_prob": target,
        "max_tree_depth": positive_int("max_tree_depth", max_tree_depth),
        "dense_mass": boolean("dense_mass", dense_mass),
    }


def nuts_kernel(model, *, target_accept_prob=0.8, max_tree_depth=10, dense_mass=False) -> NUTS:
    """A NumPyro ``NUTS`` kernel for one of the :mod:`ppl_bsvm.models`, options validated."""
    return NUTS(model, **_check_nuts_settings(target_accept_prob, max_tree_depth, dense_mass))


def nuts_sample_stats(extra: dict, max_tree_depth: int) -> dict:
    """NumPyro's fields under ArviZ's names (``diverging``, ``acceptance_rate``, ``lp``, ...)."""
    n_steps = np.asarray(extra["num_steps"])
    tree_depth = np.floor(np.log2(np.maximum(n_steps, 1))).astype(int) + 1
    return {
        "diverging": np.asarray(extra["diverging"]),
        "acceptance_rate": np.asarray(extra["accept_prob"]),
        "n_steps": n_steps,
        "tree_depth": tree_depth,
        "reached_max_tree_depth": tree_depth >= max_tree_depth,
        "energy": np.asarray(extra["energy"]),
        "lp": -np.asarray(extra["potential_energy"]),
        "step_size": np.asarray(extra["adapt_state.step_size"]),
    }


def default_hyperpriors(kernel: Kernel, params) -> dict:
    """``LogNormal(log(start), 1)`` on every positive kernel hyperparameter.

    A weakly informative prior centred on the starting value (for the RBF kernel the median
    heuristic lengthscale and unit variance): one ``e``-fold either way is a 1-sd move.
    """
    natural = kernel.constrain(params)
    out = {}
    for name in models.hyperparameter_names(kernel, params):
        start = jnp.asarray(natural[name])
        out[name] = dist.LogNormal(jnp.log(start), 1.0)
        if start.ndim:
            out[name] = out[name].to_event(start.ndim)
    return out


def _check_hyperpriors(hyperpriors) -> None:
    """``hyperpriors`` is None, ``"default"`` or a dict name -> numpyro ``Distribution`` (its
    names are checked against the kernel's by :func:`_resolve_hyperpriors`)."""
    if hyperpriors is None:
        return
    if isinstance(hyperpriors, str):
        if hyperpriors != "default":
            raise ValueError(
                f"hyperpriors must be None, 'default' or a dict name -> Distribution, "
                f"got {hyperpriors!r}"
            )
        return
    if not isinstance(hyperpriors, dict) or not all(
        isinstance(v, dist.Distribution) for v in hyperpriors.values()
    ):
        raise ValueError("hyperpriors must be None, 'default' or a dict name -> numpyro Distribution")


def _resolve_hyperpriors(hyperpriors, kernel, params):
    """The priors of checked ``hyperpriors`` (:func:`_check_hyperpriors`) for ``kernel``."""
    if hyperpriors is None:
        return None
    if isinstance(hyperpriors, str):
        return default_hyperpriors(kernel, params)
    valid = models.hyperparameter_names(kernel, params)
    unknown = sorted(set(hyperpriors) - set(valid))
    if unknown:
        raise ValueError(f"hyperpriors for unknown hyperparameter(s) {unknown}; valid: {valid}")
    return dict(hyperpriors)


def _chain_kernel(model, static, nuts_options: dict, num_warmup: int) -> ChainKernel:
    """NumPyro's NUTS for the driver: ``sample`` and ``postprocess_fn`` read the model's
    arguments as traced inputs (``dynamic_args``).

    NumPyro's HMC keeps Python-side settings from its ``init``: its sample function, wrapped
    in ``vmap`` over the chains there. A second ``init`` of the same kernel wraps it again, so
    every ``init`` trace gets a fresh kernel, and the steps use the last one; a step traced
    without any ``init`` in this process (a run resumed from a saved fit) first traces an
    ``init`` abstractly for the chains it is given. Both happened to users: a NUTS fit after
    ``jax.clear_caches()`` (which :mod:`ppl_bsvm._runtime` calls near the limit on memory
    mappings) failed inside ``vmap``, and resuming a saved NUTS fit in a new session failed
    with NumPyro's "``init`` must be called before ``sample``"."""
    getters = {name: attrgetter(name) for name in NUTS_FIELDS}
    last = []  # the kernel of the last init trace

    def arguments(inputs):
        args, kwargs = rebuild(static, inputs)
        return args, kwargs

    def init(keys, inputs):
        kernel = nuts_kernel(model, **nuts_options)
        args, kwargs = arguments(inputs)
        state = kernel.init(keys, num_warmup, None, args, kwargs)
        last[:] = [kernel]
        return state

    def initialised(state, inputs):
        if not last:
            chains = state.potential_energy.shape[0]
            keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), chains))
            jax.eval_shape(init, keys, jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), inputs))
        return last[0]

    def step(state, inputs):
        args, kwargs = arguments(inputs)
        return initialised(state, inputs).sample(state, args, kwargs)

    def collect(state, inputs):
        args, kwargs = arguments(inputs)
        z = jax.vmap(initialised(state, inputs).postprocess_fn(args, kwargs))(state.z)
        return {"z": z, "extra": {name: get(state) for name, get in getters.items()}}

    return ChainKernel(lambda inputs: inputs, init, step, collect, _check_start)


def _check_start(state, inputs) -> None:
    """NumPyro's ``initialize_model`` raises outside ``jit`` when no random start has a finite
    log density and gradient; inside the compiled program it hands back the last try."""
    finite = np.all(np.isfinite(np.asarray(state.potential_energy))) and all(
        np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(state.z_grad)
    )
    if not finite:
        raise ValueError(
            "NUTS found no starting point with a finite log density and gradient: the model "
            "is numerically degenerate for these data (check the scale of X, prior_scale, "
            "gamma and the kernel hyperparameters)"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class NUTSOptions(Sampler, Temperature):
    """What every NUTS engine takes besides the sampler's and the likelihood's options.

    Parameters
    ----------
    augmented : bool
        Sample the augmented model (with ``lam``; ``store_lam`` needs it) instead of the
        marginal one.
    target_accept_prob : float
        NUTS's target acceptance probability during adaptation.
    max_tree_depth : int
        NUTS's maximum tree depth (at most ``2^max_tree_depth`` leapfrog steps per draw).
    dense_mass : bool
        Adapt a dense mass matrix instead of a diagonal one.
    """

    augmented: bool = False
    target_accept_prob: float = 0.8
    max_tree_depth: int = 10
    dense_mass: bool = False

    def _check(self):
        self._set("augmented", boolean("augmented", self.augmented))
        if self.store_lam and not self.augmented:
            raise ValueError("store_lam=True needs augmented=True (the marginal model has no lam)")
        settings = _check_nuts_settings(self.target_accept_prob, self.max_tree_depth,
                                        self.dense_mass)
        for name, value in settings.items():
            self._set(name, value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class NUTSLinearOptions(NUTSOptions, LinearPrior):
    """Options of :func:`nuts_linear`."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class NUTSGPOptions(NUTSOptions, Jitter):
    """Options of :func:`nuts_gp`: ``hyperpriors`` too (its names are checked against the
    kernel's by the engine)."""

    hyperpriors: Any = None

    def _check(self):
        _check_hyperpriors(self.hyperpriors)


@dataclasses.dataclass(frozen=True, kw_only=True)
class NUTSSparseGPOptions(NUTSOptions, Jitter):
    """Options of :func:`nuts_sparse_gp`: the inducing points too (an array of them is checked
    against the data by the engine)."""

    num_inducing: int = 64
    inducing: Any = "kmeans"

    def _check(self):
        self._set("num_inducing", positive_int("num_inducing", self.num_inducing))
        if isinstance(self.inducing, str) and self.inducing not in INDUCING_METHODS:
            raise ValueError(
                f"inducing must be one of {list(INDUCING_METHODS)} or an array (m, d), "
                f"got {self.inducing!r}"
            )


def _nuts_settings(options: NUTSOptions) -> dict:
    return {name: getattr(options, name)
            for name in ("target_accept_prob", "max_tree_depth", "dense_mass")}


def _nuts_run(model, problem_args, model_kwargs, options: NUTSOptions, key, resume=None):
    nuts_options = _nuts_settings(options)
    static, inputs = split_static((tuple(problem_args), dict(model_kwargs)))
    run = run_mcmc(
        ("nuts", model, static, tuple(sorted(nuts_options.items()))),
        lambda: _chain_kernel(model, static, nuts_options, options.num_warmup),
        key, inputs, options, resume=None if resume is None else resume.checkpoint,
        sampler="nuts",
    )
    stats = nuts_sample_stats(run.extra, options.max_tree_depth)
    warn_divergences(stats["diverging"], options.target_accept_prob,
                     _augmented_hint(options.augmented))
    samples = {k: v for k, v in run.samples.items() if not k.endswith("_whitened")}
    if not options.store_lam:
        samples.pop("lam", None)
    return run._replace(samples=samples), stats


def _augmented_hint(augmented):
    return "; the augmented model diverges by construction, use augmented=False" if augmented else ""


def _linear_chain_bytes(n: int, p: int, options: dict) -> int:
    """What each chain keeps beyond its draws: the mass matrix (``p x p`` with
    ``dense_mass``) and the step's vectors, the margins."""
    return (p * p if options.get("dense_mass") else 4 * p) + 2 * n


@register("nuts", ("linear",), options=NUTSLinearOptions, uses_kernel=False,
          budget="num_samples", memory=linear_bytes(0, _linear_chain_bytes))
def nuts_linear(problem: Problem, options: NUTSLinearOptions, *, key,
                resume: Fit | None = None) -> Approximation:
    """NUTS on the linear Bayesian SVM (marginal model by default).

    The options are a :class:`NUTSLinearOptions`, which validates them.

    Parameters
    ----------
    prior_scale, intercept, gamma
        As for ``method="gibbs"``.
    augmented : bool, default=False
        Sample the augmented model (with ``lam``) instead of the marginal one; it diverges.
    num_samples, num_warmup : int, default=1000, 1000
        Kept draws and adaptation steps per chain.
    num_chains : int, default=4
    chain_method : {"vectorized", "sequential", "parallel"}, default="vectorized"
    thinning : int, default=1
    target_accept_prob : float, default=0.8
        Step-size adaptation target; raise it when there are divergences.
    max_tree_depth : int, default=10
    dense_mass : bool, default=False
        Adapt a dense mass matrix instead of a diagonal one.
    store_lam : bool, default=False
        With ``augmented=True``: keep the draws of ``lam``.
    max_predictive_draws : int, default=1000
    link : str, default="probit"
    resume : Fit, optional
        Continue this fit's chains (``ppl_bsvm.resume``); ``num_samples`` counts its draws too.
    """
    setup = linear_setup(problem, options.intercept)
    model_kwargs = {"prior_scale": options.prior_scale, "augmented": options.augmented,
                    "gamma": options.gamma}
    run, stats = _nuts_run(models.linear_bsvm, (setup.Xd, setup.y), model_kwargs, options, key,
                           resume)
    return mcmc_approximation(
        run, options, method="nuts", model="linear", problem=problem, sample_stats=stats,
        coords={"feature": setup.features},
        predictor=linear_predictor(run.samples["beta"], options.intercept, options,
                                   options.gamma),
    )


def _hyper_gp_predictor(kernel, X_train, jitter, params_base, draws, config, gamma):
    """Mixture predictor when each draw ``s`` has its own hyperparameters ``theta_s``."""
    names = [k for k in draws if k not in ("f", "lam")]
    arrays = GPHyperDraws(
        X_train, jnp.asarray(jitter), params_base,
        jnp.asarray(thin_draws(draws["f"], config.max_predictive_draws)),
        {k: jnp.asarray(thin_draws(draws[k], config.max_predictive_draws)) for k in names},
    )
    return MixturePredictor(Latent(gp_hyper_draws, kernel, arrays), link=config.link, gamma=gamma)


def _posterior_kernel_params(kernel, params, samples, names):
    """Posterior medians of sampled hyperparameters, back in the unconstrained pytree."""
    medians = {k: np.median(samples[k].reshape(-1, *samples[k].shape[2:]), axis=0) for k in names}
    return models.kernel_params_with(kernel, params, medians)


@register("nuts", ("gp",), options=NUTSGPOptions, budget="num_samples",
          memory=gp_sampler_bytes(3), flops=gp_nuts_flops)
def nuts_gp(problem: Problem, options: NUTSGPOptions, *, key, kernel: Kernel,
            resume: Fit | None = None) -> Approximation:
    """NUTS on the GP Bayesian SVM (non-centred f = L v), optionally sampling hyperparameters.

    The options are a :class:`NUTSGPOptions`, which validates them (the names in
    ``hyperpriors`` against the kernel's are checked here).

    Parameters
    ----------
    gamma, augmented, jitter
        As for the linear model and ``method="gibbs"``.
    hyperpriors : None, "default" or dict, default=None
        ``None`` keeps the kernel's hyperparameters fixed. A dict ``{"lengthscale":
        numpyro.distributions.LogNormal(0, 1), ...}`` (names of ``Fit.hyperparameters``) samples
        them too; ``"default"`` puts ``LogNormal(log(start), 1)`` on every positive one. Their
        draws are in ``idata.posterior`` under their names, ``Fit.kernel_params`` holds the
        posterior medians, and predictions use each draw's own kernel.
    num_samples, num_warmup, num_chains, chain_method, thinning, target_accept_prob,
    max_tree_depth, dense_mass, store_lam, max_predictive_draws, link, resume
        As for the linear model.

    Notes
    -----
    Every leapfrog step multiplies by the ``n x n`` factor of ``K``; with ``hyperpriors`` it
    builds and factorises ``K`` and differentiates the factor (``O(n^3)``), and the trees
    deepen with ``n``: a default run took 2.8 s at ``n = 100`` with fixed hyperparameters and
    10 minutes with ``hyperpriors="default"``, and the estimate at ``n = 400`` is 20 hours. A
    ``SlowFitWarning`` gives the estimate before any work
    (:mod:`ppl_bsvm.inference.mcmc.estimates`).
    """
    setup = gp_setup(problem, kernel, options.jitter, check=False)
    priors = _resolve_hyperpriors(options.hyperpriors, kernel, setup.params)
    if priors:  # K changes with every draw: this one is only checked
        check_kernel_matrix(setup.K, kernel, setup.jitter)
    else:  # the predictor's factor, and the check that the sampler's K has one
        chol = kernel_factor(setup, kernel)
    model_kwargs = {"kernel": kernel, "params": setup.params, "augmented": options.augmented,
                    "gamma": options.gamma, "jitter": setup.jitter, "hyperpriors": priors}
    run, stats = _nuts_run(models.gp_bsvm, (setup.X, setup.y), model_kwargs, options, key,
                           resume)
    if priors:
        names = list(priors)
        predictor = _hyper_gp_predictor(
            kernel, setup.X, setup.jitter, setup.params,
            {k: run.samples[k] for k in ("f", *names)}, options, options.gamma,
        )
        kernel_params = _posterior_kernel_params(kernel, setup.params, run.samples, names)
    else:
        predictor = gp_predictor(kernel, setup, run.samples["f"], options, options.gamma,
                                 chol)
        kernel_params = setup.params
    return mcmc_approximation(
        run, options, method="nuts", model="gp", problem=problem, sample_stats=stats,
        predictor=predictor, kernel_params=kernel_params, jitter=setup.jitter,
    )


def _sparse_predictor(kernel, params, prior, u_draws, config, gamma):
    """``f* | u_s ~ N(kappa_* u_s, k** - kappa_* K_m*)``: the sparse model's own conditional."""
    U = jnp.asarray(thin_draws(u_draws, config.max_predictive_draws))  # (S, m)
    arrays = SparseDraws(params, prior, U)
    return MixturePredictor(Latent(sparse_draws, kernel, arrays), link=config.link, gamma=gamma)


def _inducing_locations(problem, inducing, num_inducing, key):
    """The inducing points: chosen by the method ``inducing`` names, or the array given."""
    if isinstance(inducing, str):
        seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
        return choose_inducing(problem.X, num_inducing, inducing, seed=seed)
    Z = np.asarray(inducing, dtype=np.float64)
    if Z.ndim != 2 or Z.shape[1] != problem.d or not np.all(np.isfinite(Z)):
        raise ValueError(
            f"inducing must be finite with shape (m, {problem.d}), got shape {Z.shape}"
        )
    return Z


def _sparse_memory(n: int, d: int, options: dict) -> int:
    """Working bytes of :func:`nuts_sparse_gp` (``_memory``): each chain's ``n x m``
    projection and cross-covariance (and as many for the gradient), ``m x m`` factors and
    mass matrix, and the kept draws of ``u`` (and of ``lam`` with ``store_lam``)."""
    inducing = options.get("inducing")
    m = (int(options.get("num_inducing", 64)) if isinstance(inducing, str) or inducing is None
         else len(inducing))
    chains = int(options.get("num_chains", 4))
    draws = chains * int(options.get("num_samples", 1000)) * (
        m + (n if options.get("store_lam") else 0))
    return FLOAT * (chains * (4 * n * m + 4 * m * m) + draws)


_sparse_memory.hint = ("method={method!r} keeps n x m matrices per chain for m inducing "
                       "points: pass a smaller num_inducing, or use method='svi' or 'svgp' "
                       "with batch_size")


@register("nuts", ("sparse_gp",), options=NUTSSparseGPOptions, budget="num_samples",
          memory=_sparse_memory, flops=sparse_nuts_flops)
def nuts_sparse_gp(problem: Problem, options: NUTSSparseGPOptions, *, key, kernel: Kernel,
                   resume: Fit | None = None) -> Approximation:
    """NUTS on the sparse GP Bayesian SVM (inducing values u, f integrated out exactly).

    The ground truth for the sparse model itself (``ppl_bsvm.models.sparse_gp_bsvm``), i.e.
    for S-BSVM at the same inducing points and hyperparameters.

    The options are a :class:`NUTSSparseGPOptions`, which validates them (an ``inducing``
    array against the data's dimension is checked here).

    Parameters
    ----------
    num_inducing : int, default=64
        ``m``, used when ``inducing`` is a method name.
    inducing : {"kmeans", "random"} or array of shape (m, d), default="kmeans"
        Inducing locations, or how to choose them from the training inputs (seeded by the fit's
        seed). Stored in ``Fit.options["inducing_points"]``.
    gamma, augmented, jitter
        As for ``model="gp"`` (``jitter`` is added to ``Kmm``).
    num_samples, num_warmup, num_chains, chain_method, thinning, target_accept_prob,
    max_tree_depth, dense_mass, store_lam, max_predictive_draws, link, resume
        As for the linear model.
    """
    k_inducing, key = jax.random.split(key)
    Z = _inducing_locations(problem, options.inducing, options.num_inducing, k_inducing)
    setup = gp_setup(problem, kernel, options.jitter, kernel_matrix=False)
    Zj = jnp.asarray(Z)
    prior = inducing_prior(kernel, setup.params, Zj, setup.jitter)
    model_kwargs = {"kernel": kernel, "inducing": Zj, "params": setup.params,
                    "augmented": options.augmented, "gamma": options.gamma,
                    "jitter": setup.jitter}
    run, stats = _nuts_run(models.sparse_gp_bsvm, (setup.X, setup.y), model_kwargs, options,
                           key, resume)
    return mcmc_approximation(
        run, options, method="nuts", model="sparse_gp", problem=problem, sample_stats=stats,
        predictor=_sparse_predictor(kernel, setup.params, prior, run.samples["u"], options,
                                    options.gamma),
        options={"inducing_points": Z}, kernel_params=setup.params, jitter=setup.jitter,
    )
