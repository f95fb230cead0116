"""Helpers shared by the benchmark scripts: the machine, peak memory, Markdown tables.

The benchmarks run with the library's defaults, its own thread rule included
(``ppl_bsvm._runtime``): they measure what a user gets.
"""

from __future__ import annotations

import os
import platform
import resource
import sys

import numpy as np

__all__ = ["peak_rss_mb", "machine_note", "markdown_table", "mean_sd"]


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (``getrusage`` ``ru_maxrss``)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024.0 if sys.platform != "darwin" else rss / 2**20


def machine_note() -> str:
    """Platform, Python, cores, the load average now, and the library's thread setting."""
    from ppl_bsvm import get_num_threads
    from ppl_bsvm._runtime import PARALLEL_MIN_SIZE

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (
        f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min) at the end "
        f"of the run, ppl_bsvm's default threads ({get_num_threads()} BLAS thread per call, "
        f"{get_num_threads(PARALLEL_MIN_SIZE)} in factorisations of {PARALLEL_MIN_SIZE} rows or "
        "more)"
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
