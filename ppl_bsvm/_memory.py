"""Memory a fit will need, checked before any work starts.

A fit that cannot fit in memory should fail at once with a message that says why and what to
do, not after minutes of work, in the operating system's out-of-memory killer or in a
traceback from deep inside XLA. Each engine declares its working memory as a function of the
data size and its options (``api.register(..., memory=)``); :func:`check_fit` adds the copies of
the inputs every fit makes (the float64 array ``check_X`` returns, the padded array and its
copy on the device) and compares the total with the memory the operating system reports as
available.

The estimates are deliberately simple (leading terms, in bytes): they are meant to catch
a dense ``n x n`` engine called on 10^5 points (80 GB per matrix), a linear engine whose
``p x p`` matrices (``p = d + 1`` coefficients with the intercept) do not fit, or a data set
larger than the machine, not to predict the resident set to the megabyte. Each estimate
carries a ``hint``: what to use instead, named in the error. ``fit(..., check_memory=False)``
skips the check, for a user who knows better (swap, or an estimate that is too cautious).
"""

from __future__ import annotations

import os

from .exceptions import InsufficientMemoryError

__all__ = ["InsufficientMemoryError", "available_bytes", "dense_bytes", "linear_bytes",
           "coefficients", "input_bytes", "check_fit", "format_bytes"]

FLOAT = 8
"""Bytes per float64."""


def available_bytes() -> int | None:
    """Memory available to a new allocation, in bytes (Linux ``MemAvailable``; elsewhere the
    free physical pages), or None when the platform does not say."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def format_bytes(b: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(b) < 1000 or unit == "TB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1000
    raise AssertionError  # pragma: no cover


def input_bytes(n: int, d: int) -> int:
    """The inputs' copies in a fit: the validated float64 ``X`` and its padded copy on the
    device (two ``n x d`` arrays; labels and per-point vectors are a few ``n``)."""
    return 2 * n * d * FLOAT + 8 * n * FLOAT


SCALABLE = ("method='svi' (S-BSVM, memory linear in n), method='svgp' (SVGP) or "
            "method='bcsvm' (BC-SVM)")
"""The engines whose memory does not grow as ``n^2``, named in the errors."""

DENSE_HINT = f"method={{method!r}} forms n x n matrices; for large n use {SCALABLE}"
LINEAR_HINT = (
    "the memory of method={method!r} for the linear model grows with its p = d + 1 "
    "coefficients (p x p matrices, draws of p values){where}; with many features and few "
    "points use model='linear' with method='vi' or 'ecm', which solve in n x n (dual) form "
    "when p > n, or model='gp' with kernel=Linear(s**2) + Constant(s**2) and jitter=0 (the "
    "same model as a GP, s the prior_scale); for large n " + SCALABLE
)


def dense_bytes(copies: int):
    """An engine's ``memory`` estimate for ``copies`` dense ``n x n`` float64 matrices (kernel
    matrix, its Cholesky factor, covariances)."""

    def memory(n: int, d: int, options: dict) -> int:
        return copies * n * n * FLOAT

    memory.hint = DENSE_HINT
    return memory


def kept_draws(values: int, options: dict) -> int:
    """Floats of a sampler's kept draws: ``num_chains x ceil(num_samples / thinning)`` draws
    of ``values`` numbers (``f``'s n for a GP), twice with ``store_lam`` (``lam``, n more)."""
    chains = int(options.get("num_chains", 4))
    kept = -(-int(options.get("num_samples", 1000)) // int(options.get("thinning", 1)))
    return chains * kept * values * (2 if options.get("store_lam") else 1)


SAMPLER_HINT = (
    "method={method!r} forms n x n matrices and keeps num_chains x num_samples / thinning "
    "draws of n values (f); keep fewer draws (num_samples, thinning) or, for large n, use "
    f"{SCALABLE}"
)


def gp_sampler_bytes(copies: int):
    """A GP sampler's ``memory`` estimate: ``copies`` dense ``n x n`` matrices and the kept
    draws of ``f`` (:func:`kept_draws`): 4 chains of 10^6 draws at n = 2,000 are 64 GB
    whatever the matrices."""

    def memory(n: int, d: int, options: dict) -> int:
        return (copies * n * n + kept_draws(n, options)) * FLOAT

    memory.hint = SAMPLER_HINT
    return memory


def coefficients(d: int, options: dict) -> int:
    """``p``: the linear model's coefficients (``d``, and the intercept unless turned off)."""
    return d + (0 if options.get("intercept", True) is False else 1)


def linear_bytes(square: int, per_chain=None, *, dual=None):
    """A linear engine's ``memory`` estimate: ``square`` ``p x p`` float64 matrices, two
    ``n x p`` copies of the design, the draws (``num_draws`` or the chains' ``num_samples``
    kept draws of ``p`` coefficients, and of ``lam`` with ``store_lam``); ``per_chain(n, p,
    options)``: more ``p x p`` or ``n x p`` matrices each chain keeps (samplers);
    ``dual(n, p, options)``: True where the engine solves in ``n x n`` form (then ``n x n``
    factors and three ``p x p`` matrices: the covariance it returns, a product on the way to
    it and the Fit's copy)."""

    def memory(n: int, d: int, options: dict) -> int:
        p = coefficients(d, options)
        chains = int(options.get("num_chains", 1))
        if "num_samples" in options:
            draws = chains * int(options["num_samples"]) * (
                p + (n if options.get("store_lam") else 0))
        else:
            draws = 3 * int(options.get("num_draws", 1000)) * p  # draws, their noise, a copy
        if dual is not None and dual(n, p, options):
            work = 3 * p * p + 3 * n * p + 4 * n * n
        else:
            work = square * p * p + 2 * n * p
        if per_chain is not None:
            work += chains * per_chain(n, p, options)
        return (work + draws) * FLOAT

    memory.hint = LINEAR_HINT
    return memory


def check_fit(what: str, n: int, d: int, engine_bytes: int, hint: str = "") -> None:
    """``InsufficientMemoryError`` when the inputs' copies and ``engine_bytes`` exceed the
    available memory; the message gives the estimate, ``hint`` and how to skip the check."""
    available = available_bytes()
    if available is None:
        return
    need = input_bytes(n, d) + engine_bytes
    if need > available:
        raise InsufficientMemoryError(
            f"{what} on X of shape ({n}, {d}) needs about {format_bytes(need)} of memory "
            f"({format_bytes(input_bytes(n, d))} for the inputs' copies, "
            f"{format_bytes(engine_bytes)} of working memory), but only "
            f"{format_bytes(available)} is available{'; ' + hint if hint else ''}. To run "
            "anyway (the estimate counts leading terms only), pass check_memory=False"
        )
