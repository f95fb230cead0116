r"""Exact Gibbs sampler of the Bayesian SVM (Polson & Scott 2011; Henao et al. 2014): the
registered engines ``fit(..., method="gibbs")``, :func:`gibbs_linear` and :func:`gibbs_gp`.

Each sweep draws the scale of ``beta`` (or ``f``), moves exactly along ``k`` directions of the
marginal posterior learned in warmup, then ``lam | z`` and ``z | lam`` (optionally
overrelaxed); every step is an exact draw from a conditional, so no step size or accept/reject
tuning is involved. Where the ``k`` directions span the space (the linear model's default,
all ``p``) the sweeps after warmup stop after the moves (``collapse``): a Gibbs sampler of
the marginal posterior of ``beta`` in the basis of its principal axes. The sampler is split
by concern (BlackJAX style layers):

- :mod:`ppl_bsvm.inference.mcmc.variates`: the random variates, :func:`chi2_1`,
  :func:`standard_normal`, :func:`sample_gig_half` and :class:`InverseGaussian`;
- :mod:`ppl_bsvm.inference.mcmc.conditionals`: the augmented model and its pure
  conditionals :func:`sample_lam`, :func:`sample_beta`, :func:`sample_f` and Adler's
  overrelaxation;
- :mod:`ppl_bsvm.inference.mcmc.pcg`: the GP conditional's solve by conjugate gradients,
  preconditioned with ``K``'s spectrum, where it is cheaper than a Cholesky factor;
- :mod:`ppl_bsvm.inference.mcmc.packed`: ``K`` as its lower blocks, whose products with the
  chains' vectors read half the bytes (on the CPU from 2000 points);
- :mod:`ppl_bsvm.inference.mcmc.line_moves`: the exact one-dimensional draws of the scale
  step (:func:`sample_scale`) and the line moves (:func:`sample_line`);
- :mod:`ppl_bsvm.inference.mcmc.sweep`: one sweep :func:`gibbs_step` over a
  :class:`GibbsState`;
- :mod:`ppl_bsvm.inference.mcmc.gibbs_kernel`: the thin :class:`BSVMGibbs` shell, a
  ``numpyro.infer.mcmc.MCMCKernel``, so that ``numpyro.infer.MCMC(BSVMGibbs(linear_bsvm),
  ...)`` gives chains (``vectorized``, ``sequential``, ``parallel``), progress bars,
  ``get_samples(group_by_chain=True)`` and ``arviz.from_numpyro``;
- this module: the registered engines, built on it.

Efficiency (``reports/mcmc_benchmark`` has the effective samples per second against NUTS).
Linear model: the precision ``Z^T W Z`` and ``Z^T W (1 + lam)`` come from one
product ``w^T R`` with the packed outer products ``z_i z_i^T`` (:class:`GramRows`; a
(chains, n) x (n, p(p+3)/2) GEMM when the chains are vectorized, 4x cheaper than the batched
``Z^T W Z`` on XLA's CPU backend), the GIG draws take their :math:`\chi^2_1` from both halves
of Box-Muller pairs (:func:`chi2_1`, half the cost of float64 ``erf_inv`` normals), and a line
move or the scale step costs a few passes over the margins. GP model: the sweep's one solve
with ``K + diag(lam) / gamma`` takes two to four products with ``K`` by conjugate gradients
(:mod:`ppl_bsvm.inference.mcmc.pcg`) instead of a Cholesky factor, and the prior quadratic
form of the plain draw comes without a triangular solve; on the Banana benchmark a sweep
costs 0.29 ms per chain at ``n = 300`` (1.70 ms with a Cholesky factor per sweep) and
0.93 ms at ``n = 1000``, where a NUTS draw costs 16 ms, seventeen sweeps (2026-11-27).
Smallest ESS per second against NUTS's, ESS the smaller of the bulk and tail ESS
(``reports/mcmc_benchmark``, 2026-12-04, another machine): linear 3.7x with the collapsed
sweeps (full sweeps 2.1x); GP at its default (strongly overrelaxed on Banana's kernel,
:func:`~ppl_bsvm.inference.mcmc.gibbs_kernel.default_overrelax`) 5.5x at ``n = 300``,
8.6x at ``n = 1000`` (half overrelaxed 5.2x and 7.8x). The sampler's value is as an
independent, tuning-free reference: no step size, no divergences, no gradients, and exact
conditional draws that the tests check one by one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from ... import models
from ..._checks import boolean, open_interval
from ..._cost import LINEAR_HINT, check_refined, cholesky, fit_name
from ..._memory import FLOAT, SAMPLER_HINT, coefficients, kept_draws, linear_bytes
from ...api import register
from ...data import Problem
from ...engine import Approximation, Jitter, LinearPrior, Sampler, Temperature
from ...kernels import Kernel
from ...result import Fit
from .._common import linear_setup
from ._common import (
    factored_gp_setup,
    gp_predictor,
    linear_predictor,
    mcmc_approximation,
    run_mcmc,
)
from .driver import ChainKernel
from .estimates import _gp_directions, gibbs_gp_flops
from . import pcg as _pcg
from .gibbs_kernel import (
    _SUPPORTED,
    GibbsSettings,
    _check_directions,
    _resolve_for,
    default_overrelax,
    direction_count,
    gibbs_init,
    gibbs_sample,
    gibbs_settings,
)
from .sweep import WINDOW_DRAWS, _keeps_draws

# A saved fit pickles its chains' last state by reference to these classes' module; they were
# defined here before the sampler was split, so the names stay for fits saved then.
from .sweep import GibbsState, LineMoves  # noqa: F401  isort: skip

__all__ = [
    "GibbsOptions",
    "GibbsLinearOptions",
    "GibbsGPOptions",
    "gibbs_linear",
    "gibbs_gp",
]

_GIBBS_FIELDS = ("lp", "scale", "scale_trials", "n_floored", "line_trials", "line_failed")
_GP_FIELDS = ("cg_iters", "cg_fallback")  # the f | lam solve (mcmc.pcg)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GibbsOptions(Sampler, Temperature):
    """What both Gibbs engines take besides the sampler's and the likelihood's options: the
    scale step, Adler's overrelaxation and the line moves' ``directions``, checked as
    :class:`~ppl_bsvm.inference.mcmc.BSVMGibbs` checks them (``directions`` against the
    dimension of the sampled vector is checked by the engine, which knows it)."""

    scale_step: bool = True
    overrelax: float = 0.0
    directions: Any = None
    collapse: bool = True

    def _check(self):
        self._set("scale_step", boolean("scale_step", self.scale_step))
        self._set("collapse", boolean("collapse", self.collapse))
        if self.overrelax is not None:  # None: the GP's default, from K's spectrum
            self._set("overrelax", open_interval("overrelax", self.overrelax, -1.0, 1.0))
        if self.directions is not None:
            self._set("directions", _check_directions(self.directions))


@dataclasses.dataclass(frozen=True, kw_only=True)
class GibbsLinearOptions(GibbsOptions, LinearPrior):
    """Options of :func:`gibbs_linear`."""

    directions: Any = "all"

    def _check(self):
        # after GibbsOptions._check, which lets None through for the GP's spectral default
        if self.overrelax is None:
            self._set("overrelax", default_overrelax(True))


@dataclasses.dataclass(frozen=True, kw_only=True)
class GibbsGPOptions(GibbsOptions, Jitter):
    """Options of :func:`gibbs_gp`."""

    overrelax: float | None = None


def _gibbs_stats(extra: dict) -> dict:
    return {name: extra[name] for name in _GIBBS_FIELDS + _GP_FIELDS if name in extra}


def _chain_kernel(model, kernel, settings: GibbsSettings, directions, fields) -> ChainKernel:
    """The engines' sampler for the driver: the model's inputs are traced arrays (``X``,
    ``y``, the scalars, ``params`` for the GP, and ``V``, fixed directions or None); ``kernel``
    (the GP's covariance function) and ``directions`` (a number to learn) are static."""

    def prepare(inputs):
        args = {k: v for k, v in inputs.items() if k not in ("V", "num_warmup")}
        if model is models.gp_bsvm:
            args.update(kernel=kernel, hyperpriors=None)
        return _SUPPORTED[model](args), inputs["V"], inputs["num_warmup"]

    def init(keys, prepared):
        data, V, _ = prepared
        return gibbs_init(keys, data, directions if V is None else V)

    def step(state, prepared):
        data, _, num_warmup = prepared
        return gibbs_sample(state, data, settings, batched=True, num_warmup=num_warmup)

    def collect(state, prepared):
        return {"z": state.z, "extra": {name: getattr(state, name) for name in fields}}

    return ChainKernel(prepare, init, step, collect)


def _run_gibbs(model, inputs, kernel, *, key, options: GibbsOptions, resume, dim):
    """Run the chains (``directions`` checked against the dimension ``dim`` of the sampled
    vector), return the ``MCMCRun``."""
    directions = _resolve_for(options.directions, model is models.linear_bsvm, dim)
    # lam | z in collapsed sweeps only when it is kept: nothing else reads it
    settings = gibbs_settings(options.scale_step, options.overrelax, directions,
                              options.num_warmup, dim=dim, collapse=options.collapse,
                              draw_lam=options.store_lam)
    fields = _GIBBS_FIELDS + (_GP_FIELDS if model is models.gp_bsvm else ()) + (
        ("lam",) if options.store_lam else ())
    fixed = not isinstance(directions, int)
    # the warmup length is a traced input: one compiled sweep for every num_warmup (its
    # static part is only whether the directions are learned, in settings.learned)
    settings = settings._replace(num_warmup=0)
    inputs = {**inputs, "V": jnp.asarray(directions) if fixed else None,
              "num_warmup": jnp.asarray(options.num_warmup, jnp.int32)}
    static = ("gibbs", model, kernel, settings, None if fixed else directions, fields)
    run = run_mcmc(
        static, lambda: _chain_kernel(model, kernel, settings, directions, fields), key, inputs,
        options, resume=None if resume is None else resume.checkpoint, sampler="gibbs",
        warmup_static=False,
    )
    if options.store_lam:
        run.samples["lam"] = run.extra["lam"]
    return run


def _resolved(options: GibbsOptions, linear: bool, dim: int) -> dict:
    """What ``Fit.options`` records beyond the user's options: the overrelaxation the run used
    and the number of line-move directions the default (``directions=None``) chose for a
    vector of ``dim`` coordinates."""
    out = {"overrelax": options.overrelax}
    if options.directions is None:
        out["directions"] = int(_resolve_for(None, linear, dim))
    return out


def _linear_chain_bytes(n: int, p: int, options: dict) -> int:
    """What each chain keeps: the precision of ``beta | lam`` and its factor (``p x p``
    each), and for ``k`` line-move directions (``"all"``: ``p``) the directions, their
    prior products (``k x p`` each), their margins (``k x n``) and, when they are learned,
    the warmup window's ``p x p`` sum of squares."""
    k, learned = _line_directions(options, p)
    return 2 * p * p + (p * p if learned else 0) + 2 * k * p + k * n


def _gibbs_gp_bytes(n: int, d: int, options: dict) -> int:
    """GP Gibbs's ``memory`` estimate: six ``n x n`` matrices (three held while the chains
    run: their ``K`` (from 2000 points on the CPU its lower blocks, half of it: ``mcmc.packed``,
    which the estimate leaves as an upper bound), their copy of its factor and the factor the
    predictor keeps; and the temporaries of the chains' initialisation and of the sweep's
    Cholesky fallback, about two each, whose pages the allocator keeps), the kept draws, and
    each chain's warmup window where it has directions (``sweep._fresh_moves``) with the
    directions' five ``k x n`` arrays, twice (the sweeps' program reads the chains' state and
    writes the next): the ``n x n`` sum of squares, or beyond ``WINDOW_DRAWS`` dimensions its
    last draws. Measured above the process's own memory (``reports/sbsvm_truth``, 4 chains of
    100 or 200 draws, 10 directions): 4.86 GiB at ``n = 10^4`` (estimate 4.81 GiB), 17.3 GiB
    at 2 x 10^4 (estimate 18.5 GiB); with ``K`` packed and 32 directions, 4.60 GiB at 10^4
    (4 chains of 20 + 40 sweeps; 5.08 GiB dense in the same session; estimate 4.88 GiB) and
    16.05 GiB at 2 x 10^4 (estimate 18.71 GiB)."""
    k, _ = _gp_directions(n, options)
    window = 0 if k == 0 else (WINDOW_DRAWS if _keeps_draws(k, n) else n) * n
    chains = int(options.get("num_chains", 4))
    return (6 * n * n + kept_draws(n, options) + 2 * chains * (window + 5 * k * n)) * FLOAT


_gibbs_gp_bytes.hint = SAMPLER_HINT


def _line_directions(options: dict, p: int) -> tuple[int, bool]:
    """``(k, learned)`` for the linear sampler's ``directions`` option (default ``"all"``:
    ``p``; ``gibbs_kernel.direction_count``)."""
    return direction_count(options.get("directions", "all"), True, p)


LINE_OPS = 100.0
"""Operations per point and direction of a line move in the time estimate: about 2.3 passes
over the margins at three points each, calibrated so that the benchmark's 21 moves at
``n = 1000`` (0.11 ms a sweep) take their measured time at :data:`ppl_bsvm._cost.RATE`."""


def _linear_gibbs_flops(n: int, d: int, options: dict) -> float:
    """Leading terms of a linear Gibbs run: every warmup sweep (and every sweep that does not
    collapse) factorises the ``p x p`` precision after an ``n p^2`` product and makes ``k``
    line moves; a collapsed sweep makes the ``p`` line moves and one product ``Z beta``."""
    p = coefficients(d, options)
    k, learned = _line_directions(options, p)
    warmup, kept = int(options.get("num_warmup", 1000)), int(options.get("num_samples", 1000))
    full = cholesky(p) + n * p * p + LINE_OPS * n * k
    # the sampler's own rule; fixed directions never collapse
    collapsed = learned and gibbs_settings(True, 0.0, k, warmup, dim=p,
                                           collapse=options.get("collapse", True)).collapsed
    kept_cost = LINE_OPS * n * p + n * p if collapsed else full
    return float(int(options.get("num_chains", 4)) * (warmup * full + kept * kept_cost))


_linear_gibbs_flops.hint = LINEAR_HINT.replace("{unit}", "each warmup sweep of each chain")


@register("gibbs", ("linear",), options=GibbsLinearOptions, uses_kernel=False,
          budget="num_samples", memory=linear_bytes(0, _linear_chain_bytes),
          flops=_linear_gibbs_flops)
def gibbs_linear(problem: Problem, options: GibbsLinearOptions, *, key,
                 resume: Fit | None = None) -> Approximation:
    """Exact Gibbs sampler (Polson & Scott 2011) for the linear Bayesian SVM.

    The options are a :class:`GibbsLinearOptions`, which validates them (``directions``
    against the number of coefficients is checked here).

    Parameters
    ----------
    prior_scale : float, default=1.0
        ``beta ~ N(0, prior_scale^2 I)``, the intercept included.
    intercept : bool, default=True
        Append a column of ones (coefficient ``beta[intercept]``), as every linear engine does.
    gamma : float, default=1.0
        Pseudo-likelihood temperature.
    scale_step : bool, default=True
        Start each sweep with the exact draw of the scale of ``beta`` (see
        ``ppl_bsvm.inference.mcmc.conditionals`` and ``line_moves``); it removes the sampler's
        slowest direction.
    overrelax : float in (-1, 1) or None, default=0.0
        Adler's overrelaxation of the ``beta`` draw (``BSVMGibbs``); 0 (and None, the
        kernel's default) is plain Gibbs.
    directions : int, "all" or array of shape (k, p), default="all"
        Exact moves along ``k`` directions of the marginal posterior in every sweep, learned
        in warmup as its principal directions (``BSVMGibbs``); 0 turns them off. They lift
        the smallest ESS per draw from 0.04 (0.1 overrelaxed) to 0.7 on the benchmark.
    collapse : bool, default=True
        With all ``p`` directions learned, the kept draws come from collapsed sweeps: the
        scale step and the line moves only, a Gibbs sampler of the marginal posterior of
        ``beta`` in the basis of its principal axes (``BSVMGibbs``); the warmup sweeps stay
        full. On the benchmark the smallest ESS per draw is 0.68 (0.69 with full sweeps) at
        60-65 % of the cost. ``False`` keeps the ``lam | beta``, ``beta | lam`` draws in every
        sweep; ``lam`` is drawn in collapsed sweeps only for ``store_lam``.
    num_samples, num_warmup : int, default=1000, 1000
        Kept draws and burn-in sweeps per chain (equal values compile one loop, not two).
    num_chains : int, default=4
    chain_method : {"vectorized", "sequential", "parallel"}, default="vectorized"
    thinning : int, default=1
    store_lam : bool, default=False
        Also keep the draws of ``lam`` (chain, draw, obs) in ``idata.posterior``.
    max_predictive_draws : int, default=1000
        Predictions average over at most this many draws, evenly spaced over all chains.
    link : str, default="probit"
        Default link of ``predict_proba`` (see ``ppl_bsvm.predictive``).
    resume : Fit, optional
        Continue this fit's chains (``ppl_bsvm.resume``); ``num_samples`` counts its draws too.
    """
    setup = linear_setup(problem, options.intercept)
    inputs = {"X": setup.Xd, "y": setup.y, "prior_scale": options.prior_scale,
              "gamma": options.gamma}
    run = _run_gibbs(models.linear_bsvm, inputs, None, key=key, options=options, resume=resume,
                     dim=setup.Xd.shape[1])
    return mcmc_approximation(
        run, options, method="gibbs", model="linear", problem=problem,
        sample_stats=_gibbs_stats(run.extra), coords={"feature": setup.features},
        predictor=linear_predictor(run.samples["beta"], options.intercept, options,
                                   options.gamma),
        options=_resolved(options, True, setup.Xd.shape[1]),
    )


@register("gibbs", ("gp",), options=GibbsGPOptions, budget="num_samples",
          memory=_gibbs_gp_bytes, flops=gibbs_gp_flops)
def gibbs_gp(problem: Problem, options: GibbsGPOptions, *, key, kernel: Kernel,
             resume: Fit | None = None) -> Approximation:
    """Exact Gibbs sampler (Henao et al. 2014) for the GP Bayesian SVM, fixed hyperparameters.

    The options are a :class:`GibbsGPOptions`, which validates them (``directions`` against
    ``n`` is checked here). Each sweep solves one system with ``K + diag(lam) / gamma``: by a
    Cholesky factor, or, when ``K``'s spectrum makes it cheaper (a smooth kernel, ``n`` in the
    hundreds or more), by conjugate gradients to working precision
    (``ppl_bsvm.inference.mcmc.pcg``: the top of ``K``'s spectrum here, before the chains
    start, by an eigendecomposition up to 2048 points and a randomized range finder beyond);
    ``sample_stats`` records the iterations (``cg_iters``, 0 on the Cholesky path) and any
    solve that fell back to the factor (``cg_fallback``). At ``n = 10^4`` (``susy``, 18
    features) a sweep of 4 chains takes 0.7-1.1 s on 2 cores (the shared machine's speed
    varies by that much from day to day) and the chains hold about 5 GB: with 32 directions
    learned together, 4 x (200 + 600) sweeps gave a smallest bulk ESS of 867 on ``f`` at 500
    test points (0.36 per kept draw) and R-hat at most 1.008 in 15 minutes, where 10
    directions learned by each chain alone had given 0.15 per kept draw (500 + 2,600 sweeps,
    39 minutes, ESS 1,556); at 2 x 10^4 points a sweep takes 3.0-3.4 s in 17 GB
    (``reports/sbsvm_truth``). On the CPU from 2000 points the chains keep ``K`` as its lower
    blocks (``mcmc.packed``): half of its bytes, and a sweep about 7 % faster at ``n = 10^4``.

    Parameters
    ----------
    gamma : float, default=1.0
    jitter : float, default=1e-6
        Relative jitter of ``K``; the predictions use the same ``K``.
    scale_step : bool, default=True
        Exact draw of the scale of ``f`` at the start of each sweep.
    overrelax : float in (-1, 1) or None, default=None
        Adler's overrelaxation of the ``f`` draw (``BSVMGibbs``); 0 is plain Gibbs. Strong
        overrelaxation (-0.9) mixes the means fastest but the spread of ``f`` slowly where the
        kernel couples the points weakly, plain Gibbs the reverse. ``None`` chooses from
        ``K``'s spectrum (``gibbs_kernel.default_overrelax``): -0.9 where at most 1.5 % of its
        trace lies in eigenvalues at most ``1 / gamma``, else -0.5
        (:data:`~ppl_bsvm.inference.mcmc.gibbs_kernel.GP_OVERRELAX` has the measurements);
        ``Fit.options["overrelax"]`` is the one used.
    collapse : bool, default=True
        Ignored unless ``directions="all"`` (``BSVMGibbs``): the default directions do not
        span the space of ``f``, and the sweeps stay full.
    directions : int, "all", array of shape (k, n) or None, default=None
        Exact moves along ``k`` learned directions of the marginal posterior of ``f`` in every
        sweep (``BSVMGibbs``); ``None`` is 10 up to 1,600 points (or ``n`` if smaller), one per
        160 points beyond, at most 32 (``gibbs_kernel.gp_directions``; the number chosen is
        ``Fit.options["directions"]``); 0 turns them off. On
        the benchmark (n = 300) ten directions lift the smallest ESS per draw from 0.25 to
        0.77 (0.13 to 0.51 with ``overrelax=0``). Learning them keeps, per chain, an ``n x n``
        covariance up to n = 512 and beyond it the warmup window's last 512 draws of ``f``
        (``8 x 512 n`` bytes; ``sweep.WINDOW_DRAWS``), whose SVD gives the same directions.
        Where conjugate gradients solve the sweep, the directions are the principal axes
        within the span of ``K``'s top eigenvectors (the preconditioner's): the axes of a few
        hundred draws are otherwise mostly noise the prior rules out, and a line along them is
        narrow (``sweep._principal_axes``).
    num_samples, num_warmup, num_chains, chain_method, thinning, store_lam,
    max_predictive_draws, link, resume
        As for the linear model.
    """
    # K checked by its factor, which the draws and the predictor share
    setup, chol = factored_gp_setup(problem, kernel, options.jitter)
    spec = _pcg.spectrum(setup.K, setup.jitter)
    rank = _pcg.chosen_rank(spec, options.gamma)
    pcg = _pcg.from_spectrum(spec, rank)
    if options.overrelax is None:
        options = dataclasses.replace(options, overrelax=default_overrelax(
            False, _pcg.weak_share(spec, options.gamma)))
    # the estimate before any work guessed the solve's path; K's spectrum has now chosen it
    settings = options.as_dict()
    check_refined(fit_name("gp", "gibbs", problem.n, problem.d),
                  gibbs_gp_flops(problem.n, problem.d, settings),
                  gibbs_gp_flops(problem.n, problem.d, settings, rank=rank,
                                 iterations=_pcg.spectrum_iterations(spec, rank, options.gamma)),
                  gibbs_gp_flops.hint(problem.n, problem.d, settings))
    del spec  # its n x s eigenvectors, beyond the preconditioner's n x r
    inputs = {"X": setup.X, "y": setup.y, "params": setup.params, "gamma": options.gamma,
              "jitter": setup.jitter, "pcg": pcg, "chol_K": chol}
    # the chains build their own K (an n^2 d product, against the n^3 / 3 of a factor): this
    # one would otherwise stay alive beside theirs
    setup = setup._replace(K=None)
    run = _run_gibbs(models.gp_bsvm, inputs, kernel, key=key, options=options, resume=resume,
                     dim=problem.n)
    return mcmc_approximation(
        run, options, method="gibbs", model="gp", problem=problem,
        sample_stats=_gibbs_stats(run.extra),
        predictor=gp_predictor(kernel, setup, run.samples["f"], options, options.gamma, chol),
        kernel_params=setup.params, jitter=setup.jitter,
        options=_resolved(options, False, problem.n),
    )
