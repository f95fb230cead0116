"""Memory a fit will need, checked before any work starts.

A fit that cannot fit in memory should fail at once with a message that says why and what to
do, not after minutes of work, in the operating system's out-of-memory killer or in a
traceback from deep inside XLA. Each engine declares its working memory as a function of the
data size and its options (``api.register(..., memory=)``); :func:`check_fit` adds the copies of
the inputs every fit makes (the float64 array ``check_X`` returns, the padded array and its
copy on the device) and compares the total with the memory the operating system reports as
available.

The estimates are deliberately simple (leading terms, in bytes): they are meant to catch
a dense ``n x n`` engine called on 10^5 points (80 GB per matrix) or a data set larger than
the machine, not to predict the resident set to the megabyte.
"""

from __future__ import annotations

import os

from .exceptions import InsufficientMemoryError

__all__ = ["InsufficientMemoryError", "available_bytes", "dense_bytes", "input_bytes",
           "check_fit", "format_bytes"]

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


def dense_bytes(copies: int):
    """An engine's ``memory`` estimate for ``copies`` dense ``n x n`` float64 matrices (kernel
    matrix, its Cholesky factor, covariances)."""

    def memory(n: int, d: int, options: dict) -> int:
        return copies * n * n * FLOAT

    memory.dense = True
    return memory


def check_fit(what: str, n: int, d: int, engine_bytes: int, hint: str = "") -> None:
    """``InsufficientMemoryError`` when the inputs' copies and ``engine_bytes`` exceed the
    available memory."""
    available = available_bytes()
    if available is None:
        return
    need = input_bytes(n, d) + engine_bytes
    if need > available:
        raise InsufficientMemoryError(
            f"{what} on X of shape ({n}, {d}) needs about {format_bytes(need)} of memory "
            f"({format_bytes(input_bytes(n, d))} for the inputs' copies, "
            f"{format_bytes(engine_bytes)} of working memory), but only "
            f"{format_bytes(available)} is available{'; ' + hint if hint else ''}"
        )
