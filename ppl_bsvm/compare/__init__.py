"""Comparing fits: distances to a reference posterior, diagnostics, plots and reports."""

from . import distances, plots
from .report import report
from .table import COLUMNS, POSTERIOR_METRICS, PREDICTIVE_METRICS, compare, diagnostics, posterior_draws

__all__ = [
    "COLUMNS",
    "POSTERIOR_METRICS",
    "PREDICTIVE_METRICS",
    "compare",
    "diagnostics",
    "distances",
    "plots",
    "posterior_draws",
    "report",
]
