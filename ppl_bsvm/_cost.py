"""Time a fit will take, estimated before any work: a :class:`SlowFitWarning` for the slow ones.

A linear engine at ``d = 5,000`` features factorises a ``p x p`` matrix (``p = d + 1``) at
every sweep or step: the linear Gibbs sampler took 318 s, SVI over 15 minutes, without a
word; GP NUTS with hyperpriors on 398 points ran for half an hour without finishing. Engines
whose cost can be counted declare it (``api.register(..., flops=)``): a function ``(n, d,
options) -> float`` giving the leading-term floating-point operations of the whole run (for
iterative engines with a tolerance, of ``max_iter`` iterations: an upper bound), with a
``hint`` naming what dominates and the faster choices. :func:`check_time` divides it by
:data:`RATE` and warns when the result exceeds :data:`WARN_SECONDS`.

Where the count depends on what only the run reveals, the engine's estimate says what it
assumes, in its docstring and in the warning's hint: the samplers' counts are of
``num_chains (num_warmup + num_samples)`` iterations, and NUTS's of an assumed number of
leapfrog steps per iteration measured at small ``n`` (:mod:`ppl_bsvm.inference.mcmc.estimates`);
the RVM's of an assumed number of iterations (:mod:`ppl_bsvm.baselines.rvm`). Their
constants are calibrated so that the estimate is the expected time on the reference machine
of :data:`RATE`, and the warning goes by that expected value. An engine that learns what it
will cost only after some set-up (the GP Gibbs sampler: whether its solves take conjugate
gradients) checks again then (:func:`check_refined`).

The warning is a warning, never an error (the estimate counts leading terms only, and a slow
fit may be what the user wants). ``warnings.simplefilter("ignore", ppl_bsvm.SlowFitWarning)``
silences it (``warnings.catch_warnings()`` around one call); ``"error"`` turns it into an
error that stops the fit before any work.
"""

from __future__ import annotations

import os
import warnings

from .exceptions import SlowFitWarning

__all__ = ["RATE", "WARN_SECONDS", "SlowFitWarning", "cholesky", "check_time", "check_refined",
           "fit_name", "format_seconds", "linear_flops", "sweeps"]

RATE = 2e10
"""Float64 operations per second assumed for the estimate: 20 GFLOP/s, chosen from
``reports/slow_fit`` (``python -m benchmarks.slow_fit_rate``; a shared 2-core development
machine, load average 4-6, fits with a few sweeps or steps at ``n = 50``, ``d = 1000-2000``):
one-thread numpy Cholesky reached 3.5-30 GFLOP/s, XLA's 1.1-4.5; the linear Gibbs sampler ran
at 5-12 GFLOP/s effective on the
leading terms counted here, linear SVI at 5-8 (SVI's step time, from two ``max_iter``
values, is 3.2 GFLOP/s on one ``p^3/3``, hence its ``4 p^3/3``). So on that machine the
estimate is a half to a quarter of the real time: it errs towards not warning. On a large
workstation or a GPU a fit is faster than there, and the estimate closer."""

WARN_SECONDS = 60.0
"""Warn when the estimate exceeds this many seconds."""


def cholesky(p: int) -> float:
    """Flops of a ``p x p`` Cholesky factorisation (``p^3 / 3``)."""
    return p**3 / 3.0


LINEAR_HINT = (
    "{unit} of method={method!r} factorises the p x p precision of the p = d + 1 coefficients "
    "(p^3/3 operations, with an n p^2 product); with many features and few points use "
    "method='vi' or 'ecm' (they solve in n x n dual form when p > n, in seconds), or "
    "model='gp' with kernel=Linear(s**2) + Constant(s**2) and jitter=0 (the same model as a "
    "GP on f = X beta + b, s the prior_scale: O(n^3))"
)


def linear_flops(iterations, batch, unit: str, cubic: float = 1.0):
    """A linear engine's ``flops`` estimate: ``iterations(options)`` iterations, each a product
    with ``batch(n, options)`` rows of the design and ``cubic`` times a factorisation of the
    ``p x p`` precision (``cubic p^3 / 3 + rows p^2``); ``unit`` names one iteration in the
    hint."""

    def flops(n: int, d: int, options: dict) -> float:
        from ._memory import coefficients

        p = coefficients(d, options)
        return float(iterations(options)) * (cubic * cholesky(p) + batch(n, options) * p * p)

    flops.hint = LINEAR_HINT.replace("{unit}", unit)
    return flops


def sweeps(options: dict) -> int:
    """A sampler's iterations: ``num_chains (num_warmup + num_samples)``."""
    return int(options.get("num_chains", 4)) * (
        int(options.get("num_warmup", 1000)) + int(options.get("num_samples", 1000)))


def format_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} minutes"
    return f"{s / 3600:.1f} hours"


def fit_name(model: str, method: str, n: int, d: int) -> str:
    """How a warning names the fit: ``fit(model='gp', method='nuts') on X of shape (n, d)``."""
    return f"fit(model={model!r}, method={method!r}) on X of shape ({n}, {d})"


_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def check_time(what: str, flops: float, hint: str = "", *, stacklevel: int | None = 2) -> None:
    """``SlowFitWarning`` when ``flops`` at :data:`RATE` exceeds :data:`WARN_SECONDS`.

    ``stacklevel`` as for ``warnings.warn`` (counted from the caller of this function); None
    points the warning at the first caller outside the package (for checks made deep inside
    an engine)."""
    seconds = flops / RATE
    if seconds <= WARN_SECONDS:
        return
    where = ({"skip_file_prefixes": (_PACKAGE,)} if stacklevel is None
             else {"stacklevel": stacklevel + 1})
    warnings.warn(
        f"{what} may take about {format_seconds(seconds)} (leading terms: {flops:.2g} "
        f"floating-point operations at {RATE / 1e9:g} GFLOP/s){'; ' + hint if hint else ''}. "
        "The fit goes ahead; silence this with "
        "warnings.simplefilter('ignore', ppl_bsvm.SlowFitWarning)",
        SlowFitWarning,
        **where,
    )


def check_refined(what: str, guessed: float, flops: float, hint: str = "") -> None:
    """An engine's second look, once its set-up has shown what the estimate before any work
    had to guess: warns (at the user's line) when ``flops`` is slow and ``guessed``, the
    count :func:`check_time` went by before the fit, was not (so never twice)."""
    if guessed / RATE <= WARN_SECONDS:
        check_time(what, flops, hint, stacklevel=None)
