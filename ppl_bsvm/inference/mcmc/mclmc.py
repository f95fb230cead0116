r"""Adjusted microcanonical Hamiltonian Monte Carlo (Robnik, Cohn-Gordon & Seljak 2025;
BlackJAX's ``adjusted_mclmc_dynamic``) on the marginal Bayesian SVM: the registered engines
``fit(..., method="mclmc")``, :func:`mclmc_linear` and :func:`mclmc_gp`.

The target is the marginal posterior in whitened coordinates, :math:`x = \Sigma^{1/2} v`
(``beta = s v``; ``f = L v`` with :math:`L L^\top = K`, as ``nuts`` samples it):

.. math::

    \log p(v \mid y) = -\tfrac12 \lVert v\rVert^2 - 2\gamma \sum_i \max(0, 1 - m_i(x(v)))
    + \text{const}.

One transition draws a unit momentum :math:`u` (the microcanonical dynamics keep
:math:`\lVert u\rVert = 1`), integrates the isokinetic dynamics for :math:`N` steps of size
:math:`\epsilon` with the McLachlan integrator and a diagonal preconditioner, :math:`N` drawn
uniformly around :math:`L/\epsilon` (a random trajectory length: no U-turn criterion, no tree),
and accepts the end point with the Metropolis-Hastings probability
:math:`\min(1, e^{-\Delta E})`, so the chain is exact for any step size.
Its claim over NUTS is fewer gradients per effective draw: no doubling trees, no wasted
half-trajectories.

Tuning (BlackJAX's ``adjusted_mclmc_find_L_and_step_size``) replaces warmup: the first
:math:`2/3` of the ``num_warmup`` transitions adapt the step size by dual averaging to the
target acceptance rate while estimating the posterior variances (the preconditioner), the last
third re-adapts the step size with the preconditioner in place; :math:`L` is kept at
``num_integration_steps`` steps (16 by default, :data:`TRAJECTORY_STEPS`). Each chain tunes
its own :math:`(\epsilon, L, M)`; they travel with the chain's state, so a resumed fit goes
on with them. The chains run through the driver of the other samplers
(:mod:`ppl_bsvm.inference.mcmc.driver`: compiled once per shape and ``num_warmup``).

Cost of a transition: ``n_steps`` steps of McLachlan's two-stage integrator, two gradient
evaluations of the log density each (a product with ``L`` and its transpose for the GP,
``O(n^2)``; ``O(n p)`` linear). The hinge's gradient is
piecewise constant, so the energy error does not shrink smoothly with the step size when a
trajectory crosses a hinge; the Metropolis correction keeps the chain exact regardless.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from blackjax.adaptation.adjusted_mclmc_adaptation import adjusted_mclmc_find_L_and_step_size
from blackjax.adaptation.mclmc_adaptation import MCLMCAdaptationState
from blackjax.mcmc import adjusted_mclmc_dynamic
from blackjax.mcmc.dynamic_hmc import DynamicHMCState
from jax import random

from ..._checks import positive_float
from ..._memory import FLOAT, kept_draws, linear_bytes
from ...api import register
from ...data import Problem
from ...engine import Approximation, Jitter, LinearPrior
from ...exceptions import ConvergenceWarning
from ...kernels import Kernel
from ...result import Fit
from ..marginal import MarginalPrior, log_likelihood, marginal_prior, unwhiten
from ._common import run_mcmc, warn_divergences
from ._marginal import (
    MarginalSamplerOptions,
    gp_memory_hint,
    marginal_gp_fit,
    marginal_linear_fit,
)
from .driver import ChainKernel

__all__ = ["MCLMCOptions", "MCLMCLinearOptions", "MCLMCGPOptions", "mclmc_linear",
           "mclmc_gp"]

TRAJECTORY_STEPS = 16.0
"""Average integration steps per transition, :math:`L / \\epsilon`. BlackJAX's default is 2
(MALA-like moves). On Heart (4 x 1,000 draws after 1,000 tuning transitions, second calls):
GP with 4, 8, 16, 32 steps: R-hat 1.034, 1.012, 1.007, 1.005, smallest ESS per second 62,
114, 265, 226; linear with 2, 4, 8, 16 steps: R-hat 1.028, 1.008, 1.005, 1.004, smallest ESS
per second 719, 1,246, 3,005, 2,441. 16 is the shortest with R-hat below 1.01 on both."""


MIN_TUNING = 30
"""Fewest warmup transitions the tuner runs on: its variance estimate averages the middle
third of them (at ``num_warmup = 4`` one draw, a zero variance and a NaN step size, with which
the chain never moved). Below it, and wherever the tuner returns a step size, ``L`` or
preconditioner that is not finite and positive, a chain keeps its starting settings
(:func:`_starting_params`) and the fit warns."""


class MCLMCChain(NamedTuple):
    """One chain: BlackJAX's state (whitened position ``v``, log density, gradient, the
    trajectory-length key), the chain's key, its step size, trajectory length ``L`` and
    diagonal preconditioner, whether they came from the tuner (``tuned``), and what its last
    transition did."""

    hmc: DynamicHMCState
    rng_key: jnp.ndarray
    step_size: jnp.ndarray
    L: jnp.ndarray
    inverse_mass_matrix: jnp.ndarray
    tuned: jnp.ndarray
    acceptance_rate: jnp.ndarray
    diverging: jnp.ndarray
    n_steps: jnp.ndarray


def _steps_fn(key, average):
    """BlackJAX's random trajectory length: uniform around ``average`` steps, at least one."""
    return adjusted_mclmc_dynamic.make_random_trajectory_length_fn(True)(key, average)


def _transition(key, state, logdensity, step_size, inverse_mass_matrix, average):
    kernel = adjusted_mclmc_dynamic.build_kernel(integration_steps_fn=_steps_fn)
    return kernel(key, state, logdensity, step_size, inverse_mass_matrix=inverse_mass_matrix,
                  integration_steps_params=(average,))


def _tuning_kernel(rng_key, state, logdensity_fn, step_size, inverse_mass_matrix,
                   integration_steps_params):
    """The kernel in the signature BlackJAX's tuner calls."""
    return _transition(rng_key, state, logdensity_fn, step_size, inverse_mass_matrix,
                       *integration_steps_params)


def _starting_params(dim: int, steps: float, dtype) -> MCLMCAdaptationState:
    r"""Where the tuner starts: BlackJAX's first trajectory length :math:`0.2\sqrt{d}`, in
    ``steps`` steps. (BlackJAX's own start keeps its first *step* :math:`0.2\sqrt{d}` and
    stretches ``L`` to ``steps`` of them; its first pass then holds ``L`` while the step
    shrinks, and ran about 100 integration steps per transition on linear Heart with
    ``steps=8``: 102,000 in a 1,000-transition tuning, 7,800 from this start, to the same step
    size within 10 %.)"""
    L = 0.2 * jnp.sqrt(jnp.asarray(dim, dtype))
    return MCLMCAdaptationState(L, L / steps, jnp.ones((dim,), dtype))


def _usable(params: MCLMCAdaptationState):
    """Whether the tuner's step size, ``L`` and preconditioner are finite and positive."""
    leaves = (params.step_size, params.L, params.inverse_mass_matrix)
    return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x) & (x > 0)) for x in leaves]))


def _log_density(prior: MarginalPrior):
    return lambda v: -0.5 * jnp.sum(v * v) + log_likelihood(prior, unwhiten(prior, v))


def _chain_kernel(site: str, dim: int, kernel: Kernel | None, num_warmup: int,
                  target: float, steps: float) -> ChainKernel:
    """The sampler for the driver: ``inputs`` traced (as for ``ess``), the kernel, the tuning
    length and the target acceptance static. ``init`` starts each chain at a prior draw and
    tunes it for ``num_warmup`` transitions."""

    def prepare(inputs):
        return marginal_prior(inputs, kernel)

    def init(keys, prior):
        logdensity = _log_density(prior)
        # one trajectory-length sequence for all chains: the vectorised chains integrate in
        # lockstep, so independent lengths would make every transition cost the longest one
        traj = random.fold_in(keys[0], 1)

        def one(key):
            start, tune, key = random.split(key, 3)
            v = random.normal(start, (dim,), prior.gamma.dtype)  # overdispersed: the prior
            state = adjusted_mclmc_dynamic.init(v, logdensity, traj)
            start = _starting_params(dim, steps, v.dtype)
            tuned = jnp.zeros((), bool)
            params = start
            if num_warmup >= MIN_TUNING:
                state, found, _ = adjusted_mclmc_find_L_and_step_size(
                    _tuning_kernel, logdensity, num_warmup, state, tune, target,
                    frac_tune1=1 / 3, frac_tune2=1 / 3, params=start,
                    target_num_integration_steps=steps,
                )
                tuned = _usable(found)
                params = jax.tree.map(lambda a, b: jnp.where(tuned, a, b), found, start)
            zero = jnp.zeros((), v.dtype)
            return MCLMCChain(state, key, params.step_size, params.L,
                              params.inverse_mass_matrix, tuned, zero, jnp.zeros((), bool),
                              jnp.zeros((), jnp.int32))

        return jax.vmap(one)(keys)

    def step_one(chain: MCLMCChain, prior):
        key, sub = random.split(chain.rng_key)
        state, info = _transition(sub, chain.hmc, _log_density(prior), chain.step_size,
                                  chain.inverse_mass_matrix, chain.L / chain.step_size)
        return chain._replace(hmc=state, rng_key=key, acceptance_rate=info.acceptance_rate,
                              diverging=info.is_divergent,
                              n_steps=jnp.asarray(info.num_integration_steps, jnp.int32))

    def step(chains, prior):
        return jax.vmap(lambda c: step_one(c, prior))(chains)

    def collect(chains, prior):
        return {"z": {site: unwhiten(prior, chains.hmc.position)},
                "extra": {"lp": chains.hmc.logdensity, "acceptance_rate": chains.acceptance_rate,
                          "diverging": chains.diverging, "n_steps": chains.n_steps,
                          "step_size": chains.step_size}}

    status = (f"compiling, tuning ({num_warmup} transitions)" if num_warmup >= MIN_TUNING
              else "compiling")
    return ChainKernel(prepare, init, step, collect, init_status=status)


def _run(site, dim, kernel, inputs, options, key, resume):
    static = ("mclmc", site, dim, kernel, options.num_warmup, options.target_accept_prob,
              options.num_integration_steps)
    # the tuning is the warmup and runs inside init: the driver has no iterations to drop
    tuned = dataclasses.replace(options, num_warmup=0)
    return run_mcmc(
        static,
        lambda: _chain_kernel(site, dim, kernel, options.num_warmup,
                              options.target_accept_prob, options.num_integration_steps),
        key, inputs, tuned, resume=None if resume is None else resume.checkpoint,
        sampler="mclmc",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class MCLMCOptions(MarginalSamplerOptions):
    """What both adjusted MCLMC engines take: the sampler's and the likelihood's options and
    the tuner's. ``store_lam`` must stay False: the sampler works on the marginal model and
    never draws ``lam``.

    Parameters
    ----------
    target_accept_prob : float
        The acceptance rate the step size is tuned to, in (0, 1).
    num_integration_steps : float
        Integration steps per transition on average (``L / step_size``; BlackJAX's default
        is 2, which left R-hat at 1.07 on GP Heart after 4 x 1,000 draws; 16 gave 1.007).
    """

    target_accept_prob: float = 0.9
    num_integration_steps: float = TRAJECTORY_STEPS

    _method = "mclmc"
    _validators = {"target_accept_prob": positive_float,
                   "num_integration_steps": positive_float}

    def _check(self):
        if not 0.0 < self.target_accept_prob < 1.0:
            raise ValueError("target_accept_prob must be in (0, 1), got "
                             f"{self.target_accept_prob!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MCLMCLinearOptions(MCLMCOptions, LinearPrior):
    """Options of :func:`mclmc_linear`."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class MCLMCGPOptions(MCLMCOptions, Jitter):
    """Options of :func:`mclmc_gp`."""


def _tuning_floats(dim: int, options: dict) -> int:
    """BlackJAX's tuner keeps the positions of its first pass, per chain."""
    return dim * (2 * int(options.get("num_warmup", 1000)) // 3 + 8)


def _linear_chain_bytes(n: int, p: int, options: dict) -> int:
    """Per chain: position, momentum, gradient, preconditioner, margins, and the tuner's
    positions (in floats)."""
    return 6 * p + 2 * n + _tuning_floats(p, options)


def _gp_bytes(n: int, d: int, options: dict) -> int:
    """``K`` and its factor, per chain the state and the tuner's positions, and the kept
    draws."""
    chains = int(options.get("num_chains", 4))
    return FLOAT * (2 * n * n + chains * (8 * n + _tuning_floats(n, options))
                    + kept_draws(n, options))


_gp_bytes.hint = gp_memory_hint("mclmc")


def _stats(run, options: MCLMCOptions) -> dict:
    """ArviZ's names: ``lp`` (the whitened log posterior up to a constant),
    ``acceptance_rate``, ``diverging``, ``n_steps`` (integration steps of the transition, two
    gradient evaluations each) and ``step_size`` (the chain's tuned step)."""
    stats = {k: run.extra[k] for k in ("lp", "acceptance_rate", "diverging", "n_steps",
                                       "step_size")}
    warn_divergences(stats["diverging"], options.target_accept_prob, sampler="adjusted MCLMC")
    untuned = np.flatnonzero(~np.asarray(run.checkpoint.last_state.tuned))
    if untuned.size:
        why = (f"num_warmup={options.num_warmup} is below the {MIN_TUNING} transitions the "
               "tuning needs" if options.num_warmup < MIN_TUNING
               else "the tuner returned a step size or preconditioner that is not finite")
        warnings.warn(
            f"adjusted MCLMC: chain(s) {untuned.tolist()} ran with the untuned step size "
            f"{float(np.asarray(run.extra['step_size'])[untuned[0], 0]):.3g} ({why}): the "
            "draws are exact but may mix slowly; raise num_warmup.",
            ConvergenceWarning, stacklevel=3)
    return stats


@register("mclmc", ("linear",), options=MCLMCLinearOptions, uses_kernel=False,
          budget="num_samples", memory=linear_bytes(0, _linear_chain_bytes))
def mclmc_linear(problem: Problem, options: MCLMCLinearOptions, *, key,
                 resume: Fit | None = None) -> Approximation:
    """Adjusted MCLMC (Robnik et al. 2025; BlackJAX) of the linear Bayesian SVM.

    The options are an :class:`MCLMCLinearOptions`, which validates them.

    Parameters
    ----------
    prior_scale, intercept, gamma
        As for ``method="gibbs"``: ``beta ~ N(0, prior_scale^2 I)``.
    num_samples : int, default=1000
        Kept draws per chain.
    num_warmup : int, default=1000
        Tuning transitions per chain (step size, preconditioner); none are kept.
    target_accept_prob : float, default=0.9
        The acceptance rate the step size is tuned to.
    num_chains : int, default=4
    chain_method : {"vectorized", "sequential", "parallel"}, default="vectorized"
    thinning : int, default=1
    max_predictive_draws : int, default=1000
    link : str, default="probit"
    store_lam : bool, default=False
        Must stay False: the sampler never draws ``lam`` (``ValueError`` otherwise).
    resume : Fit, optional
        Continue this fit's chains with their tuned settings (``ppl_bsvm.resume``).
    """
    return marginal_linear_fit(problem, options, key, resume, method="mclmc", run=_run,
                               stats=lambda run: _stats(run, options))


@register("mclmc", ("gp",), options=MCLMCGPOptions, budget="num_samples", memory=_gp_bytes)
def mclmc_gp(problem: Problem, options: MCLMCGPOptions, *, key, kernel: Kernel,
             resume: Fit | None = None) -> Approximation:
    """Adjusted MCLMC (Robnik et al. 2025; BlackJAX) of the GP Bayesian SVM, ``f = L v``.

    The options are an :class:`MCLMCGPOptions`, which validates them; the kernel's
    hyperparameters are fixed and ``K`` is factored once per fit.

    Parameters
    ----------
    gamma, jitter
        As for ``method="gibbs"``.
    num_samples, num_warmup, target_accept_prob, num_chains, chain_method, thinning,
    max_predictive_draws, link, store_lam, resume
        As for the linear model.
    """
    return marginal_gp_fit(problem, options, key, kernel, resume, method="mclmc", run=_run,
                           stats=lambda run: _stats(run, options))
