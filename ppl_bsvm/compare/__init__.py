"""Comparing fits: distances to a reference posterior, diagnostics, plots and reports, and
:func:`run_comparison`, which splits the data, fits every method and compares them."""

from . import distances, plots
from .report import report
from .runner import fit_methods, run_comparison
from .table import (COLUMNS, POSTERIOR_METRICS, PREDICTIVE_METRICS, ComparisonTable, compare,
                    diagnostics, posterior_draws)

__all__ = [
    "COLUMNS",
    "POSTERIOR_METRICS",
    "PREDICTIVE_METRICS",
    "ComparisonTable",
    "compare",
    "diagnostics",
    "distances",
    "fit_methods",
    "plots",
    "posterior_draws",
    "report",
    "run_comparison",
]
