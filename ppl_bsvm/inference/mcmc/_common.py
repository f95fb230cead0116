"""What the MCMC engines share: the timed chains, checks, convergence diagnostics, the
:class:`~ppl_bsvm.engine.Approximation` and predictions.

The options every sampler takes are the :class:`ppl_bsvm.engine.Sampler` piece of the engines'
options classes, which validates them.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

from ..._runtime import blas_threads
from ...engine import Approximation, Sampler
from ...exceptions import ConvergenceWarning, DivergenceWarning
from ..._idata import make_idata
from ...data import Problem
from ...predictive import MixturePredictor
from .._common import GPSetup, check_kernel_matrix, gp_setup
from ..latent import GPDraws, Latent, draws_padded, gp_draws, linear_draws
from .driver import Draws, sample_chains

__all__ = [
    "ConvergenceWarning",
    "DivergenceWarning",
    "RHAT_LIMIT",
    "convergence_summary",
    "MCMCCheckpoint",
    "MCMCRun",
    "check_finite",
    "factored_gp_setup",
    "kernel_factor",
    "run_mcmc",
    "mcmc_approximation",
    "thin_draws",
    "all_draws",
    "linear_predictor",
    "gp_predictor",
]

RHAT_LIMIT = 1.01
"""Largest acceptable R-hat (Vehtari et al. 2021); above it :func:`mcmc_approximation` warns."""


class MCMCCheckpoint(NamedTuple):
    """What a sampler needs to go on (``Fit.checkpoint`` of the MCMC engines).

    Attributes
    ----------
    last_state : NamedTuple
        The chains' last state (``MCMC.last_state``), PRNG keys included.
    samples, extra : dict name -> ndarray (chain, draw, ...)
        The kept draws and extra fields so far, as ``MCMC`` returned them.
    n_iter : int
        Sampling iterations run after warmup (kept draws times ``thinning``).
    """

    last_state: Any
    samples: dict
    extra: dict
    n_iter: int


class MCMCRun(NamedTuple):
    """Outcome of :func:`run_mcmc`.

    Attributes
    ----------
    samples : dict site -> ndarray (chain, draw, ...)
    extra : dict field -> ndarray (chain, draw, ...)
        The extra fields collected after warmup.
    timings : dict
        ``mcmc``: seconds of all warmup and sampling iterations of all chains, compilation
        taken out; ``compile``: seconds of XLA lowering and compilation (measured with
        ``jax.monitoring``; Python tracing stays in ``mcmc``).
    checkpoint : MCMCCheckpoint
        The sampler's final state (``checkpoint.last_state``, batched over chains) and the
        draws so far.
    """

    samples: dict
    extra: dict
    timings: dict
    checkpoint: MCMCCheckpoint


def run_mcmc(config_key, build, key, inputs, config: Sampler, *,
             resume: MCMCCheckpoint | None = None, sampler: str = "the sampler",
             warmup_static: bool = True) -> MCMCRun:
    """Run the chains of a sampler through :func:`driver.sample_chains` and time them.

    ``config`` holds the engine's sampler options (:class:`ppl_bsvm.engine.Sampler`).
    ``build() -> ChainKernel`` makes the sampler (compiled once per ``config_key``, the
    sampler's static settings, and the shapes of ``inputs``); its ``collect`` returns
    ``{"z": {site: ...}, "extra": {field: ...}}``. Draws come back as numpy arrays
    ``(chain, draw, ...)``, checked to be finite.

    ``warmup_static``: whether ``num_warmup`` selects the compiled programs (NUTS's
    adaptation schedule is built from it in Python); False where the sampler reads it from
    ``inputs`` (the Gibbs sampler), so that every warmup length shares them.

    With ``resume``, the chains go on from its last state (no warmup) for
    ``num_samples - resume.n_iter`` more iterations, and the draws are appended to the earlier
    ones: the result is the one a single run of ``num_samples`` would have given.
    """
    done = 0 if resume is None else resume.n_iter
    if done > config.num_samples:
        raise ValueError(
            f"num_samples={config.num_samples} is below the {done} sampling iterations the "
            "resumed fit has already run"
        )
    if done % config.thinning:
        raise ValueError(
            f"the resumed fit ran {done} sampling iterations, not a multiple of "
            f"thinning={config.thinning}; checkpoint_every must be a multiple of thinning"
        )
    if resume is not None and done == config.num_samples:
        return MCMCRun(dict(resume.samples), dict(resume.extra), {"mcmc": 0.0, "compile": 0.0},
                       resume)
    previous = None
    if resume is not None:
        previous = Draws({"z": resume.samples, "extra": resume.extra}, resume.last_state, done, {})
    draws = sample_chains(
        (config_key, config.num_warmup if warmup_static else None), build, key, inputs,
        num_warmup=config.num_warmup, num_samples=config.num_samples,
        num_chains=config.num_chains, chain_method=config.chain_method,
        thinning=config.thinning, resume=previous,
    )
    samples = dict(draws.fields["z"])
    extra = dict(draws.fields["extra"])
    check_finite(samples, sampler=sampler)
    checkpoint = MCMCCheckpoint(draws.state, dict(samples), dict(extra), config.num_samples)
    return MCMCRun(samples, extra, draws.timings, checkpoint)


def check_finite(samples: dict, sampler: str = "the sampler") -> None:
    """Raise ``FloatingPointError`` naming the first site with a NaN or inf draw."""
    for name, value in samples.items():
        value = np.asarray(value)
        bad = ~np.isfinite(value)
        if bad.any():
            chain, draw = np.argwhere(bad.reshape(value.shape[0], value.shape[1], -1).any(-1))[0]
            raise FloatingPointError(
                f"{sampler} produced {int(bad.sum())} non-finite value(s) in site {name!r} "
                f"(first at chain {chain}, draw {draw}); the draws are unusable. Check the data "
                "scale, the prior scale and the kernel jitter."
            )


def _average_ranks(flat):
    """Each value's rank among its column's values, 1-based, ties given the average of their
    ranks (``scipy.stats.rankdata``'s): ``(N, K)`` for ``flat (N, K)``.

    A value's rank is its position in its sorted column: one argsort of every column (laid out
    as rows, so that each sort reads contiguous memory) gives them all. Where two neighbours in
    a sorted column are equal, both get the average of their two positions. Draws of continuous
    variables do not tie, but nearly every column of the folded draws ``|x - median|`` of
    R-hat's tail part ties once, in a pair: the median of an even number of draws is the
    midpoint of the two middle ones (8,850 of 10^4 coordinates at 4 x 600 draws). A run of
    three or more (NUTS repeats states; rounded draws) goes to ``rankdata``. At 4 x 600 draws
    of 10^4 coordinates the folded draws' rank normalisation took 7.5 s through ``rankdata``,
    3.1 s so.
    """
    cols = np.ascontiguousarray(flat.T)
    order = np.argsort(cols, axis=1)
    ordered = np.take_along_axis(cols, order, axis=1)
    tied = ordered[:, 1:] == ordered[:, :-1]  # sorted neighbours j and j + 1 equal
    positions = np.broadcast_to(np.arange(1.0, cols.shape[1] + 1.0), cols.shape)
    if tied.any():
        if (tied[:, 1:] & tied[:, :-1]).any():  # a run of three or more equal values
            from scipy.stats import rankdata

            return rankdata(cols, axis=1).T
        positions = positions.copy()
        np.add(positions[:, :-1], 0.5, out=positions[:, :-1], where=tied)
        np.subtract(positions[:, 1:], 0.5, out=positions[:, 1:], where=tied)
    ranks = np.empty_like(cols)
    np.put_along_axis(ranks, order, positions, axis=1)
    return ranks.T


def _z_scale(x):
    """Rank-normalised draws (Vehtari et al. 2021): the average rank of each value among all
    ``C * D`` draws of its coordinate (:func:`_average_ranks`: NUTS repeats states),
    back-transformed with Blom's offset, ``Phi^-1((r - 3/8) / (C D + 1/4))``. ``x``: (C, D, K)."""
    from scipy.special import ndtri

    C, D, K = x.shape
    ranks = _average_ranks(x.reshape(C * D, K))
    return ndtri((ranks - 0.375) / (C * D + 0.25)).reshape(C, D, K)


def _split(x):
    """Each chain's first and second half as chains of their own. ``x``: (C, D, K)."""
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, -half:]], axis=0)


def _rhat(x):
    """Potential scale reduction of chains ``x (C, D, K)``, per coordinate."""
    D = x.shape[1]
    between = D * np.var(x.mean(axis=1), axis=0, ddof=1)
    within = np.mean(np.var(x, axis=1, ddof=1), axis=0)
    return np.sqrt((between / within + D - 1) / D)


def rank_rhat(x, z=None):
    """Rank-normalised split R-hat, the larger of the bulk and the folded (tail) one
    (Vehtari et al. 2021; ArviZ's ``rhat``), per coordinate of ``x (chain, draw, K)``; ``z``:
    the split chains' rank-normalised draws where the caller has them (:func:`bulk_ess`'s)."""
    x = _split(np.asarray(x, dtype=float))
    z = _z_scale(x) if z is None else z
    folded = np.abs(x - np.median(x.reshape(-1, x.shape[-1]), axis=0))
    return np.maximum(_rhat(z), _rhat(_z_scale(folded)))


def _autocov(x):
    """Autocovariance of each chain at every lag, ``(C, D, K)`` for ``x (C, D, K)``: FFT of the
    centred chains padded to twice their length, divided by ``D`` (ArviZ's ``autocov``)."""
    from scipy.fft import irfft, next_fast_len, rfft

    D = x.shape[1]
    size = next_fast_len(2 * D)
    spectrum = rfft(x - x.mean(axis=1, keepdims=True), n=size, axis=1)
    return irfft(spectrum * np.conjugate(spectrum), n=size, axis=1)[:, :D] / D


def geyer_ess(x):
    r"""Effective sample size of the chains ``x (C, D, K)`` per coordinate, as ArviZ's ``_ess``
    computes it (Geyer's initial positive, then initial monotone sequence; Vehtari et al.
    2021, eqs. 10-11), vectorised over coordinates.

    With ``\hat\rho_t = 1 - (W - \bar\gamma_t) / \widehat{var}^+`` (``W`` the mean
    within-chain variance, ``\bar\gamma_t`` the mean autocovariance at lag ``t``), the pairs
    ``P_k = \hat\rho_{2k} + \hat\rho_{2k+1}`` are summed up to the first negative one, made
    non-increasing, and ``\hat\tau = -1 + 2 \sum_t \hat\rho_t``, floored at
    ``1 / \log_{10}(C D)``: so the ESS of antithetic chains (overrelaxed Gibbs, NUTS on a
    Gaussian) exceeds ``C D`` by at most the factor ``\log_{10}(C D)``, and is never negative
    (NumPyro's ``effective_sample_size`` has no floor: -155,713 for 4,000 overrelaxed draws).
    Constant coordinates get ``C D``, as in ArviZ.
    """
    x = np.asarray(x, dtype=float)
    C, D, K = x.shape
    acov = _autocov(x)
    mean_var = acov[:, 0].mean(axis=0) * D / (D - 1.0)
    var_plus = mean_var * (D - 1.0) / D
    if C > 1:
        var_plus = var_plus + np.var(x.mean(axis=1), axis=0, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho_all = 1.0 - (mean_var - acov.mean(axis=0)) / var_plus  # (D, K)
    rho = np.zeros((D, K))
    rho[0] = 1.0
    rho[1] = rho_all[1]
    even, odd = np.ones(K), rho_all[1].copy()
    end = np.ones(K, dtype=int)  # the loop's t when it stops, per coordinate
    active = np.ones(K, dtype=bool)
    for t in range(1, D - 3, 2):  # the initial positive sequence
        active &= even + odd > 0.0
        if not active.any():
            break
        end[active] = t + 2
        even = np.where(active, rho_all[t + 1], even)
        odd = np.where(active, rho_all[t + 2], odd)
        keep = active & (even + odd >= 0.0)
        rho[t + 1] = np.where(keep, even, rho[t + 1])
        rho[t + 2] = np.where(keep, odd, rho[t + 2])
    max_t = end - 2
    cols = np.arange(K)
    last = np.minimum(max_t + 1, D - 1)
    rho[last, cols] = np.where(even > 0.0, even, rho[last, cols])
    for t in range(1, int(max_t.max(initial=0)) - 1, 2):  # the initial monotone sequence
        pair, previous = rho[t + 1] + rho[t + 2], rho[t - 1] + rho[t]
        fix = (t <= max_t - 2) & (pair > previous)
        rho[t + 1] = np.where(fix, previous / 2.0, rho[t + 1])
        rho[t + 2] = np.where(fix, previous / 2.0, rho[t + 2])
    lags = np.arange(D)[:, None]
    tau = (-1.0 + 2.0 * np.sum(np.where(lags <= max_t, rho, 0.0), axis=0)
           + np.where(max_t + 1 < D, rho[last, cols], 0.0))
    tau = np.maximum(tau, 1.0 / np.log10(C * D))
    ess = C * D / tau
    ess = np.where(np.isnan(rho).any(axis=0), np.nan, ess)
    constant = np.ptp(x.reshape(C * D, K), axis=0) < np.finfo(float).resolution
    return np.where(constant, float(C * D), ess)


def split_z(x):
    """The rank-normalised split chains of ``x (chain, draw, K)``, which :func:`rank_rhat`
    and :func:`bulk_ess` share."""
    return _z_scale(_split(np.asarray(x, dtype=float)))


def bulk_ess(x, z=None):
    """Bulk effective sample size: :func:`geyer_ess` of the rank-normalised split chains
    (Vehtari et al. 2021; ArviZ's ``ess``, tested against it), per coordinate of
    ``x (chain, draw, K)``; ``z``: :func:`split_z` of ``x`` where the caller has it."""
    return geyer_ess(split_z(x) if z is None else z)


TAIL_PROBS = (0.05, 0.95)
"""The quantiles of :func:`tail_ess` (ArviZ's ``ess(method="tail")`` with ``prob=(0.05, 0.95)``)."""


def tail_ess(x):
    """Tail effective sample size: the smaller of the ESS of the indicators ``x <= q_0.05`` and
    ``x <= q_0.95`` (quantiles of all draws; Vehtari et al. 2021), per coordinate of
    ``x (chain, draw, K)``, as ArviZ's ``ess(method="tail", prob=(0.05, 0.95))``.

    The bulk ESS of antithetic chains can exceed the draws while their spread mixes slowly:
    overrelaxed Gibbs (Adler, -0.9) on the GP model of digits 3 vs 8 (249 points, default
    kernel) had a smallest bulk ESS of 4,103 of 4,000 draws and a smallest tail ESS of 947
    (plain Gibbs: 2,050 and 2,525), since ``f - m -> -0.9 (f - m) + noise`` nearly keeps
    ``|f - m|``. Intervals and sds need the tail.
    """
    x = np.asarray(x, dtype=float)
    flat = x.reshape(-1, x.shape[-1])
    out = []
    for prob in TAIL_PROBS:
        below = (x <= np.quantile(flat, prob, axis=0)).astype(float)
        out.append(geyer_ess(_split(below)))
    return np.minimum(*out)


AUGMENTATION_SITES = ("lam",)
"""Sites left out of :func:`convergence_summary`: the augmentation variables, which the user
does not see as the posterior (``store_lam`` keeps them; ``compare.diagnostics`` lists them)."""


def convergence_summary(samples: dict) -> dict:
    """Largest R-hat and smallest bulk and tail ESS over every coordinate of every site the user
    sees (not :data:`AUGMENTATION_SITES`).

    :func:`rank_rhat`, :func:`bulk_ess` and :func:`tail_ess` give ArviZ's rank-normalised
    diagnostics (tested against it to rounding) without importing ArviZ in a fit (seconds of a
    new process). R-hat needs two chains or more (NaN otherwise); constant coordinates are
    skipped.
    """
    rhat, ess, tail, worst = -np.inf, np.inf, np.inf, None
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # one chain, constant coordinates
        for name, value in samples.items():
            if name in AUGMENTATION_SITES:
                continue
            value = np.asarray(value)
            flat = value.reshape(*value.shape[:2], -1)
            constant = np.ptp(flat.reshape(-1, flat.shape[-1]), axis=0) == 0
            if flat.shape[1] < 4 or constant.all():
                continue
            flat = flat[..., ~constant]
            z = split_z(flat)
            r = rank_rhat(flat, z) if flat.shape[0] > 1 else np.full(flat.shape[-1], np.nan)
            e, t = bulk_ess(flat, z), tail_ess(flat)
            r, e, t = r[np.isfinite(r)], e[np.isfinite(e)], t[np.isfinite(t)]
            if r.size and r.max() > rhat:
                rhat, worst = float(r.max()), name
            if e.size:
                ess = min(ess, float(e.min()))
            if t.size:
                tail = min(tail, float(t.min()))
    return {
        "rhat_max": rhat if np.isfinite(rhat) else float("nan"),
        "ess_bulk_min": ess if np.isfinite(ess) else float("nan"),
        "ess_tail_min": tail if np.isfinite(tail) else float("nan"),
        "rhat_worst_site": worst,
    }


def warn_convergence(summary: dict, config: Sampler) -> None:
    """:class:`ConvergenceWarning` when R-hat exceeds :data:`RHAT_LIMIT`, naming the options to
    raise and by how much: R-hat - 1 falls about as 1 / draws per chain once the chains have
    forgotten their start, so the suggestion scales ``num_samples`` by
    ``(R-hat - 1) / (limit - 1)`` (at least 2x), and ``num_warmup`` with it."""
    if not summary["rhat_max"] > RHAT_LIMIT:  # False for NaN (a single chain)
        return
    factor = max(2, int(np.ceil((summary["rhat_max"] - 1.0) / (RHAT_LIMIT - 1.0))))
    draws = config.num_chains * (config.num_samples // config.thinning)
    warnings.warn(
        f"the chains have not converged: R-hat {summary['rhat_max']:.3f} > {RHAT_LIMIT} "
        f"in site {summary['rhat_worst_site']!r} (smallest bulk ESS "
        f"{summary['ess_bulk_min']:.0f}, tail ESS {summary['ess_tail_min']:.0f} of {draws} "
        "draws); run longer chains before trusting "
        f"the posterior: num_samples={factor * config.num_samples} (now "
        f"{config.num_samples}) and num_warmup={max(factor * config.num_warmup, 500)} (now "
        f"{config.num_warmup}).",
        ConvergenceWarning,
        stacklevel=2,
    )


def kernel_factor(setup: GPSetup, kernel) -> jnp.ndarray:
    """The lower Cholesky factor of the sampler's ``K`` (jitter included), which is also the
    check that ``K`` is positive definite: the GP samplers and the predictor of their draws
    share this one factorisation (at ``n = 10^4`` each is several seconds). Its ``setup`` comes
    from ``gp_setup(..., check=False)`` (:func:`factored_gp_setup` makes both).

    Raises
    ------
    ValueError
        When ``K`` has no factor: :func:`~ppl_bsvm.inference._common.check_kernel_matrix`'s
        error when ``K`` is not finite or not positive semi-definite, else one naming the
        jitter (a singular ``K``, which the engines that solve in the ``I + S K S`` form
        accept, but a sampler's draws from ``N(0, K)`` cannot).
    """
    # n^3 / 3 flops: from PARALLEL_MIN_SIZE rows on every core (the library's thread rule,
    # ppl_bsvm._runtime), waited for inside the block, where the count holds (7.0 -> 4.7 s
    # at n = 10^4 on 2 cores)
    with blas_threads(setup.K.shape[0]):
        chol, ok = _checked_cholesky(setup.K)
        ok = bool(ok)
    if ok:
        return chol
    del chol  # n x n of NaN, before the check's own factor and eigenvalues
    check_kernel_matrix(setup.K, kernel, setup.jitter)
    raise ValueError(
        f"the kernel matrix K + jitter (jitter={setup.jitter:g}, relative) is not "
        "positive definite; increase jitter or check the kernel parameters"
    )


def factored_gp_setup(problem: Problem, kernel, jitter: float) -> tuple[GPSetup, jnp.ndarray]:
    """``(setup, chol)``: :func:`~ppl_bsvm.inference._common.gp_setup` with ``K`` checked by
    its one Cholesky factor (:func:`kernel_factor`), for the engines that need the factor
    anyway (their draws or predictor): a second ``O(n^3)`` check is not possible this way."""
    setup = gp_setup(problem, kernel, jitter, check=False)
    return setup, kernel_factor(setup, kernel)


@jax.jit
def _checked_cholesky(K):
    # K's lower triangle, as LAPACK reads it (and NumPy's check did): jnp.linalg.cholesky
    # would first average K with its transpose, two more n x n arrays (6.4 GB at 2 x 10^4)
    chol = jax.lax.linalg.cholesky(K, symmetrize_input=False)
    return chol, jnp.all(jnp.isfinite(chol))


def thin_draws(draws, max_draws: int):
    """Pool ``(chain, draw, ...)`` into ``(S, ...)`` with at most ``max_draws`` evenly spaced draws."""
    draws = np.asarray(draws)
    pooled = draws.reshape(-1, *draws.shape[2:])
    if pooled.shape[0] <= max_draws:
        return pooled
    idx = np.round(np.linspace(0, pooled.shape[0] - 1, max_draws)).astype(int)
    return pooled[idx]


def all_draws(options):
    """The predictors' settings (``max_predictive_draws``, ``link``) of an approximation
    with ``num_draws`` draws and a ``link`` (ADVI, Pathfinder): every draw is averaged."""
    from types import SimpleNamespace

    return SimpleNamespace(max_predictive_draws=options.num_draws, link=options.link)


def linear_predictor(beta_draws, intercept: bool, config: Sampler, gamma: float):
    """``f* = x*^T beta_s`` for each kept draw ``s`` (no variance given the draw)."""
    betas, draws = draws_padded(thin_draws(beta_draws, config.max_predictive_draws))
    return MixturePredictor(Latent(linear_draws, bool(intercept), betas, draws=draws),
                            link=config.link, gamma=gamma)


def gp_predictor(kernel, setup: GPSetup, f_draws, config: Sampler, gamma: float, chol):
    r"""``f* | f_s ~ N(k*^T K^{-1} f_s, k** - k*^T K^{-1} k*)`` for each kept draw ``f_s``.

    ``K`` is the sampler's (jitter included), ``chol`` its factor (:func:`kernel_factor`);
    ``K^{-1} f_s`` is solved once at fit time.
    """
    F, draws = draws_padded(thin_draws(f_draws, config.max_predictive_draws))  # (S_pad, n)
    # two triangular solves with S_pad right-hand sides, on every core from PARALLEL_MIN_SIZE
    # rows as the factorisation (6.3 -> 3.3 s for 2400 draws at n = 10^4 on 2 cores)
    with blas_threads(chol.shape[0]):
        A = cho_solve((chol, True), jnp.asarray(F.T)).block_until_ready()  # (n, S_pad)
    arrays = GPDraws(setup.X, setup.params, chol, A)
    return MixturePredictor(Latent(gp_draws, kernel, arrays, draws=draws), link=config.link,
                            gamma=gamma)


def mcmc_approximation(
    run: MCMCRun,
    config: Sampler,
    *,
    method: str,
    model: str,
    problem: Problem,
    sample_stats: dict,
    predictor,
    coords: dict | None = None,
    dims: dict | None = None,
    options: dict | None = None,
    kernel_params=None,
    jitter=None,
) -> Approximation:
    """The :class:`~ppl_bsvm.engine.Approximation` of a sampler: posterior draws, sample
    stats, predictor, timings, and the checkpoint a resumed run continues.

    Warns (:class:`ConvergenceWarning`) when the largest R-hat exceeds :data:`RHAT_LIMIT`;
    the largest R-hat and smallest bulk and tail ESS are stored in ``idata.attrs``. ``options``: the
    values resolved from the data that go into ``Fit.options``.
    """
    diagnostics = convergence_summary(run.samples)
    warn_convergence(diagnostics, config)
    coords = dict(coords or {})
    coords.setdefault("obs", np.arange(problem.n))
    idata = make_idata(
        run.samples,
        coords=coords,
        dims=dims,
        sample_stats=sample_stats,
        observed_y=problem.y,
        attrs={
            "method": method,
            "model": model,
            "stop_reason": "draws",
            "num_warmup": config.num_warmup,
            "num_samples": config.num_samples,
            "thinning": config.thinning,
            "chain_method": config.chain_method,
            "rhat_max": diagnostics["rhat_max"],
            "ess_bulk_min": diagnostics["ess_bulk_min"],
            "ess_tail_min": diagnostics["ess_tail_min"],
        },
    )
    return Approximation(
        idata=idata,
        predictor=predictor,
        trace={k: np.asarray(v) for k, v in sample_stats.items()},
        stop_reason="draws",
        n_iter=config.num_warmup + config.num_samples,
        timings=dict(run.timings),
        kernel_params=kernel_params,
        jitter=jitter,
        state=run.checkpoint.last_state,
        checkpoint=run.checkpoint,
        options=dict(options or {}),
    )


def warn_divergences(diverging, target_accept_prob: float, hint: str = "", *,
                     sampler: str = "NUTS") -> int:
    """Count divergent transitions and warn (:class:`DivergenceWarning`) when there are any."""
    diverging = np.asarray(diverging)
    count = int(diverging.sum())
    if count:
        per_chain = diverging.reshape(diverging.shape[0], -1).sum(axis=1).tolist()
        warnings.warn(
            f"{sampler} had {count} divergent transition(s) after warmup "
            f"({100.0 * count / diverging.size:.1f}% of {diverging.size} draws; per chain "
            f"{per_chain}): the draws may be biased. Raise target_accept_prob (now "
            f"{target_accept_prob:g}){hint}.",
            DivergenceWarning,
            stacklevel=2,
        )
    return count
