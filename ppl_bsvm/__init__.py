"""ppl_bsvm: Bayesian support vector machines, and approximate inference checked against MCMC."""

import numpyro as _numpyro  # noqa: F401  (numpyro before arviz: stack notes 3.1)

from . import bootstrap, data, datasets, exceptions, kernels, metrics, models, predictive
from ._runtime import enable_compilation_cache as _enable_compilation_cache
from ._runtime import get_num_threads, set_num_threads
from .api import fit, list_methods, resume
from .compare import compare, report
from .exceptions import ConvergenceWarning, DivergenceWarning, InsufficientMemoryError
from .result import Fit, load

_enable_compilation_cache()

__version__ = "0.1.0"

__all__ = [
    "ConvergenceWarning",
    "DivergenceWarning",
    "InsufficientMemoryError",
    "Fit",
    "compare",
    "fit",
    "list_methods",
    "load",
    "report",
    "resume",
    "get_num_threads",
    "set_num_threads",
    "bootstrap",
    "data",
    "datasets",
    "exceptions",
    "kernels",
    "metrics",
    "models",
    "predictive",
]
__all__ += ["BayesianSVC", "RVMRegressor", "RVMClassifier", "BCSVMClassifier"]

_LAZY = {
    "BayesianSVC": "ppl_bsvm.estimators",
    "RVMRegressor": "ppl_bsvm.estimators",
    "RVMClassifier": "ppl_bsvm.estimators",
    "BCSVMClassifier": "ppl_bsvm.estimators",
}


def __getattr__(name):
    # The estimators pull in scikit-learn; import them on first use only.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ppl_bsvm' has no attribute {name!r}")
