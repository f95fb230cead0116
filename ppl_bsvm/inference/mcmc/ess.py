r"""Elliptical slice sampling (Murray, Adams & MacKay 2010) on the marginal Bayesian SVM: the
registered engines ``fit(..., method="ess")``, :func:`ess_linear` and :func:`ess_gp`.

The standard sampler for models with a Gaussian prior and a likelihood that is cheap to
evaluate: here :math:`x \sim N(0, \Sigma)` (``beta`` with :math:`\Sigma = s^2 I`, or ``f``
with :math:`\Sigma = K`) and the pseudo-likelihood with ``lam`` integrated out,

.. math::

    \log L(x) = -2\gamma \sum_i \max(0, 1 - m_i(x)), \qquad
    m(\beta) = Z\beta \;\;(z_i = y_i x_i), \qquad m(f) = y \circ f .

One transition draws :math:`\nu \sim N(0, \Sigma)` and a level
:math:`\log u + \log L(x)`, and shrinks a bracket of angles :math:`\theta` on the ellipse
:math:`x \cos\theta + \nu \sin\theta` until :math:`\log L` is above the level (the paper's
Fig. 2). The ellipse passes through ``x``, so the loop ends, and every transition is exact:
no step size, no tuning, no rejection. BlackJAX's kernel
(``blackjax.mcmc.elliptical_slice.elliptical_proposal``) does the transition; this module
gives it the prior draw :math:`\nu = L\,\xi` from the factor :math:`L L^\top = \Sigma`
computed once per fit (BlackJAX's ``build_kernel`` would factor ``K`` at every transition
inside the compiled loop), runs the chains through the driver of the other samplers
(:mod:`ppl_bsvm.inference.mcmc.driver`: compiled once per shape, resumable) and returns the
draws under the same names and diagnostics as ``gibbs`` and ``nuts``.

Cost of a transition: one product with ``L`` (``n^2``, GP) or none (linear), and a pass over
the margins per angle tried (``sample_stats.n_steps``: on Heart a mean of 9.2 for the linear
model and 7.2 for the GP, 5-95 % ranges 4-15 and 2-13). What it does not
do well: the hinge makes the likelihood sharp when ``n`` is large, and the angle brackets
then shrink to small moves; its ESS per draw falls with ``n`` where the Gibbs sampler's does
not (``reports/ppl_comparison``).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from blackjax.mcmc.elliptical_slice import EllipSliceState, elliptical_proposal
from jax import random

from ..._memory import FLOAT, kept_draws, linear_bytes
from ...api import register
from ...data import Problem
from ...engine import Approximation, Jitter, LinearPrior
from ...kernels import Kernel
from ...result import Fit
from ..marginal import MarginalPrior, log_likelihood, log_prior, marginal_prior, unwhiten
from ._common import run_mcmc
from ._marginal import (
    MarginalSamplerOptions,
    gp_memory_hint,
    marginal_gp_fit,
    marginal_linear_fit,
)
from .driver import ChainKernel

__all__ = ["ESSOptions", "ESSLinearOptions", "ESSGPOptions", "ess_linear", "ess_gp"]


class ESSChain(NamedTuple):
    """One chain: BlackJAX's state (position and log-likelihood), the chain's key and the
    number of angles its last transition tried."""

    ess: EllipSliceState
    rng_key: jnp.ndarray
    n_steps: jnp.ndarray


def _prior_draw(prior: MarginalPrior, key, dim: int, dtype):
    return unwhiten(prior, random.normal(key, (dim,), dtype))


def _chain_kernel(site: str, dim: int, kernel: Kernel | None) -> ChainKernel:
    """The sampler for the driver: ``inputs`` are traced (linear: ``Z``, ``prior_scale``,
    ``gamma``; GP: ``X``, ``y``, ``params``, ``jitter``, ``gamma``), the kernel static."""

    def prepare(inputs):
        return marginal_prior(inputs, kernel)

    def init(keys, prior):
        def one(key):
            key, sub = random.split(key)
            x = _prior_draw(prior, sub, dim, prior.gamma.dtype)  # overdispersed: the prior
            return ESSChain(EllipSliceState(x, log_likelihood(prior, x)), key,
                            jnp.zeros((), jnp.int32))
        return jax.vmap(one)(keys)

    def step_one(chain: ESSChain, prior):
        key, sub = random.split(chain.rng_key)
        proposal = elliptical_proposal(
            lambda x: log_likelihood(prior, x), lambda k, x: _prior_draw(prior, k, dim, x.dtype),
            jnp.zeros((), prior.gamma.dtype),
        )
        state, info = proposal(sub, chain.ess)
        return ESSChain(state, key, jnp.asarray(info.subiter, jnp.int32))

    def step(chains, prior):
        return jax.vmap(lambda c: step_one(c, prior))(chains)

    def collect(chains, prior):
        x = chains.ess.position
        lp = chains.ess.logdensity + jax.vmap(lambda v: log_prior(prior, v))(x)
        return {"z": {site: x}, "extra": {"lp": lp, "n_steps": chains.n_steps}}

    return ChainKernel(prepare, init, step, collect)


def _run(site, dim, kernel, inputs, options, key, resume):
    static = ("ess", site, dim, kernel)
    return run_mcmc(static, lambda: _chain_kernel(site, dim, kernel), key, inputs, options,
                    resume=None if resume is None else resume.checkpoint, sampler="ess")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ESSOptions(MarginalSamplerOptions):
    """What both elliptical slice engines take: the sampler's and the likelihood's options
    (there is nothing to tune). ``store_lam`` must stay False: the sampler works on the
    marginal model and never draws ``lam``."""

    _method = "ess"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ESSLinearOptions(ESSOptions, LinearPrior):
    """Options of :func:`ess_linear`."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ESSGPOptions(ESSOptions, Jitter):
    """Options of :func:`ess_gp`."""


def _linear_chain_bytes(n: int, p: int, options: dict) -> int:
    """Each chain's position, prior draw and margins at two angles."""
    return 2 * p + 2 * n


def _gp_bytes(n: int, d: int, options: dict) -> int:
    """``K`` and its factor, per chain the position, the prior draw and the margins, and the
    kept draws."""
    return FLOAT * (2 * n * n + 4 * n * int(options.get("num_chains", 4))
                    + kept_draws(n, options))


_gp_bytes.hint = gp_memory_hint("ess")


def _stats(run) -> dict:
    """ArviZ's names: ``lp`` (the log posterior up to a constant) and ``n_steps`` (the angles
    a transition tried, each one evaluation of the likelihood)."""
    return {"lp": run.extra["lp"], "n_steps": run.extra["n_steps"]}


@register("ess", ("linear",), options=ESSLinearOptions, uses_kernel=False,
          budget="num_samples", memory=linear_bytes(0, _linear_chain_bytes))
def ess_linear(problem: Problem, options: ESSLinearOptions, *, key,
               resume: Fit | None = None) -> Approximation:
    """Elliptical slice sampling (Murray et al. 2010; BlackJAX) of the linear Bayesian SVM.

    The options are an :class:`ESSLinearOptions`, which validates them.

    Parameters
    ----------
    prior_scale, intercept, gamma
        As for ``method="gibbs"``: ``beta ~ N(0, prior_scale^2 I)``.
    num_samples, num_warmup : int, default=1000, 1000
        Kept draws and burn-in transitions per chain (no tuning: warmup only forgets the
        start, a draw from the prior).
    num_chains : int, default=4
    chain_method : {"vectorized", "sequential", "parallel"}, default="vectorized"
    thinning : int, default=1
    max_predictive_draws : int, default=1000
    link : str, default="probit"
    store_lam : bool, default=False
        Must stay False: the sampler never draws ``lam`` (``ValueError`` otherwise).
    resume : Fit, optional
        Continue this fit's chains (``ppl_bsvm.resume``); ``num_samples`` counts its draws too.
    """
    return marginal_linear_fit(problem, options, key, resume, method="ess", run=_run,
                               stats=_stats)


@register("ess", ("gp",), options=ESSGPOptions, budget="num_samples", memory=_gp_bytes)
def ess_gp(problem: Problem, options: ESSGPOptions, *, key, kernel: Kernel,
           resume: Fit | None = None) -> Approximation:
    """Elliptical slice sampling (Murray et al. 2010; BlackJAX) of the GP Bayesian SVM.

    The options are an :class:`ESSGPOptions`, which validates them. ``f ~ N(0, K)`` with the
    kernel's hyperparameters fixed; ``K`` is factored once per fit.

    Parameters
    ----------
    gamma, jitter
        As for ``method="gibbs"``.
    num_samples, num_warmup, num_chains, chain_method, thinning, max_predictive_draws, link,
    resume
        As for the linear model.
    store_lam : bool, default=False
        Must stay False: the sampler never draws ``lam`` (``ValueError`` otherwise).
    """
    return marginal_gp_fit(problem, options, key, kernel, resume, method="ess", run=_run,
                           stats=_stats)


