"""ppl_bsvm: Bayesian support vector machines, and approximate inference checked against MCMC."""

import numpyro as _numpyro  # noqa: F401  (numpyro before arviz: stack notes 3.1)

from . import bootstrap, data, datasets, kernels, metrics, models, predictive
from .api import fit, list_methods
from .compare import compare, report
from .result import Fit

__version__ = "0.1.0"

__all__ = [
    "Fit",
    "compare",
    "fit",
    "list_methods",
    "report",
    "bootstrap",
    "data",
    "datasets",
    "kernels",
    "metrics",
    "models",
    "predictive",
]
