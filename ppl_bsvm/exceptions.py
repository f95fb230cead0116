"""Warnings ppl_bsvm emits when a result may not be what the user asked for, and its errors
beyond ``ValueError``.

The warnings are ``UserWarning`` subclasses, so ``warnings.simplefilter("error", ConvergenceWarning)``
turns them into errors and ``"ignore"`` silences them.
"""

from __future__ import annotations

__all__ = ["ConvergenceWarning", "DivergenceWarning", "InsufficientMemoryError", "SlowFitWarning",
           "warn_max_iter"]


class ConvergenceWarning(UserWarning):
    """An engine stopped before it converged: an iterative engine at its iteration cap
    (``max_iter``) before meeting its tolerance, a sampler whose chains disagree (R-hat), or the
    bootstrap's fixed point before its moments matched. The message names the option to raise."""


class DivergenceWarning(UserWarning):
    """NUTS reported divergent transitions: the draws may be biased."""


class SlowFitWarning(UserWarning):
    """A fit is estimated, before any work, to take more than about a minute
    (``ppl_bsvm._cost``); the message gives the estimate, what dominates it and the faster
    choices. The fit goes ahead."""


class InsufficientMemoryError(MemoryError, ValueError):
    """A fit needs more memory than the machine has available, raised before any work
    (``ppl_bsvm._memory``). A ``MemoryError`` (what it is) and a ``ValueError`` (what the
    library raises for input it cannot handle), so either ``except`` catches it."""


def warn_max_iter(what: str, max_iter: int, tol, *, option: str = "max_iter",
                  stacklevel: int = 2, detail: str | None = None) -> None:
    """Warn that ``what`` stopped at its cap of ``max_iter`` iterations before ``tol`` was met;
    ``detail``, when given, says instead how the engine's budget ran out (``"what" detail``)."""
    import warnings

    rule = "its stopping rule" if tol is None else f"its stopping rule (tol={tol:g})"
    message = (f"{what} stopped at {option}={max_iter} before {rule} was met; "
               f"the result may not have converged. Raise {option} (or loosen tol) to let it "
               "finish.")
    warnings.warn(message if detail is None else f"{what} {detail}", ConvergenceWarning,
                  stacklevel=stacklevel + 1)
