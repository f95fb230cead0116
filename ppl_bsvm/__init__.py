"""ppl_bsvm: Bayesian support vector machines, and approximate inference checked against MCMC.

``import ppl_bsvm`` loads nothing heavy (about 0.1 s): JAX, NumPyro, xarray and pandas (1-3 s)
are imported on first use of a name below (PEP 562 ``__getattr__``), NumPyro before
anything else, because ArviZ must not be imported first (its lazy loader then misses
``numpyro.infer.initialization``). The first use also turns on the compilation cache
(:func:`ppl_bsvm._runtime.enable_compilation_cache`). ``tests/test_import.py`` checks which
modules an import loads.

In a Jupyter kernel without ``ipywidgets``, ``tqdm.auto`` (imported by NumPyro) warns
``TqdmWarning: IProgress not found`` and falls back to its text bar; in a Jupyter kernel we
import it once here with that warning silenced, so the text bar is chosen quietly (ppl_bsvm's own bars make the same
choice, :mod:`ppl_bsvm._progress`).
"""

import importlib
import importlib.util
import sys
import types
import warnings

__version__ = "0.1.0"

# name -> the module (relative to ppl_bsvm) that defines it; a submodule's name imports it
_ATTRIBUTES = {
    "fit": "api", "resume": "api", "list_methods": "api", "describe": "api",
    "compare": "compare", "report": "compare",
    "ConvergenceWarning": "exceptions", "DivergenceWarning": "exceptions",
    "InsufficientMemoryError": "exceptions", "SlowFitWarning": "exceptions",
    "Fit": "result", "load": "result",
    "get_num_threads": "_runtime", "set_num_threads": "_runtime",
    "BayesianSVC": "estimators", "RVMRegressor": "estimators", "RVMClassifier": "estimators",
    "BCSVMClassifier": "estimators",
}

__all__ = [
    "ConvergenceWarning",
    "DivergenceWarning",
    "InsufficientMemoryError",
    "SlowFitWarning",
    "Fit",
    "compare",
    "describe",
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
    "BayesianSVC",
    "RVMRegressor",
    "RVMClassifier",
    "BCSVMClassifier",
]


def _quiet_tqdm_auto():
    """Import ``tqdm.auto`` without its ``IProgress not found`` warning (module docstring)."""
    try:
        from tqdm import TqdmWarning
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        import tqdm.auto  # noqa: F401


_loaded = False


def _load():
    """What the first use of the package needs: NumPyro first, the compilation cache."""
    global _loaded
    if not _loaded:
        _quiet_tqdm_auto()
        importlib.import_module("numpyro")
        importlib.import_module("ppl_bsvm._runtime")  # turns the compilation cache on
        _loaded = True


def __getattr__(name):
    if name in _ATTRIBUTES:
        _load()
        value = getattr(importlib.import_module(f"ppl_bsvm.{_ATTRIBUTES[name]}"), name)
        setattr(sys.modules[__name__], name, value)
        return value
    if not name.startswith("__") and importlib.util.find_spec(f"ppl_bsvm.{name}") is not None:
        _load()
        return importlib.import_module(f"ppl_bsvm.{name}")
    raise AttributeError(f"module 'ppl_bsvm' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package module, whose functions ``compare`` and ``report`` keep their names when the
    import system binds the subpackage ``ppl_bsvm.compare`` on it (the first import of any
    ``ppl_bsvm.compare.*`` does ``setattr(ppl_bsvm, "compare", <module>)``)."""

    def __setattr__(self, name, value):
        if name == "compare" and isinstance(value, types.ModuleType):
            return  # the function is looked up (or already bound) instead
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
if "ipykernel.zmqshell" in sys.modules or "IPython.utils._process_emscripten" in sys.modules:
    _quiet_tqdm_auto()  # where tqdm.auto would warn (tqdm/autonotebook.py)
