"""ppl_bsvm: Bayesian support vector machines, and approximate inference checked against MCMC."""

import numpyro as _numpyro  # noqa: F401  (numpyro before arviz: stack notes 3.1)

from . import data, datasets, kernels, metrics, predictive
from .api import fit, list_methods
from .result import Fit

__version__ = "0.1.0"

__all__ = ["Fit", "fit", "list_methods", "data", "datasets", "kernels", "metrics", "predictive"]
__all__ += ["RVMRegressor", "RVMClassifier"]

_LAZY = {"RVMRegressor": "ppl_bsvm.baselines.rvm", "RVMClassifier": "ppl_bsvm.baselines.rvm"}


def __getattr__(name):
    # The baselines pull in ArviZ and scikit-learn; import them on first use only.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ppl_bsvm' has no attribute {name!r}")
