"""Helpers shared by the benchmark scripts: BLAS threads, peak memory, Markdown tables."""

from __future__ import annotations

import os
import platform
import resource
import sys

import numpy as np

__all__ = ["limit_blas_threads", "peak_rss_mb", "machine_note", "markdown_table", "mean_sd"]


def limit_blas_threads(n: int) -> None:
    """Limit scipy's OpenBLAS (which JAX's CPU Cholesky and triangular solves call) to ``n``
    threads. On a loaded or shared machine the default (one thread per core) makes every
    small factorisation wait for descheduled threads, 10-100x slower (see ``tests/conftest.py``).
    """
    import scipy.linalg  # noqa: F401  (load scipy's OpenBLAS before limiting it)
    from threadpoolctl import threadpool_limits

    threadpool_limits(n, user_api="blas")


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (``getrusage`` ``ru_maxrss``)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024.0 if sys.platform != "darwin" else rss / 2**20


def machine_note(blas_threads: int) -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (
        f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min) at the end "
        f"of the run, {blas_threads} BLAS thread(s)"
    )


def mean_sd(values) -> str:
    values = np.asarray(values, dtype=float)
    if values.size == 0 or not np.any(np.isfinite(values)):
        return "-"
    return f"{np.nanmean(values):.3f} ± {np.nanstd(values, ddof=1) if values.size > 1 else 0.0:.3f}"


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
