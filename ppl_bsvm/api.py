"""``ppl_bsvm.fit``: one entry point, a registry of inference engines behind it.

An engine is a function ``engine(problem, *, key, [kernel], **options) -> Fit`` registered for
one method name and one or more models with :func:`register`. ``fit`` validates the data,
resolves the kernel and seed, checks the options against the engine's signature (an unknown
option is an error, never silently dropped), runs the engine with float64 enabled and fills in
the parts of the ``Fit`` that every engine shares.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import time
from collections.abc import Callable
from typing import NamedTuple

from ._jax import as_key, x64
from .data import check_X_y
from .kernels import get_kernel
from .result import Fit

__all__ = ["MODELS", "fit", "register", "list_methods", "get_engine"]

MODELS = ("linear", "gp", "sparse_gp")

# Modules whose import registers engines; imported on first use so that `import ppl_bsvm`
# stays light and there are no import cycles.
_ENGINE_MODULES = (
    "ppl_bsvm.inference",
    "ppl_bsvm.baselines",
)


class Engine(NamedTuple):
    fn: Callable
    method: str
    model: str
    uses_kernel: bool
    summary: str


_REGISTRY: dict[tuple[str, str], Engine] = {}
_loaded = False


def register(method: str, models, *, uses_kernel: bool = True):
    """Decorator registering an engine for ``method`` under each of ``models``.

    The engine's docstring's first line is its one-line description in ``list_methods``.
    """
    models = (models,) if isinstance(models, str) else tuple(models)

    def decorate(fn):
        summary = (inspect.getdoc(fn) or "").split("\n")[0]
        for model in models:
            if model not in MODELS:
                raise ValueError(f"unknown model {model!r} in register; valid: {MODELS}")
            _REGISTRY[(model, method)] = Engine(fn, method, model, uses_kernel, summary)
        return fn

    return decorate


def _load_engines() -> None:
    global _loaded
    if _loaded:
        return
    for name in _ENGINE_MODULES:
        importlib.import_module(name)
    _loaded = True


def list_methods() -> list[tuple[str, str, str]]:
    """All registered ``(model, method, description)`` triples, sorted."""
    _load_engines()
    return sorted((m, meth, e.summary) for (m, meth), e in _REGISTRY.items())


def get_engine(model: str, method: str) -> Engine:
    """The registered engine for ``(model, method)``; ``ValueError`` listing the valid ones."""
    _load_engines()
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; valid models are {list(MODELS)}")
    engine = _REGISTRY.get((model, method))
    if engine is None:
        for_model = sorted(meth for (m, meth) in _REGISTRY if m == model)
        everywhere = sorted({meth for (_, meth) in _REGISTRY})
        if method in everywhere:
            models = sorted(m for (m, meth) in _REGISTRY if meth == method)
            raise ValueError(
                f"method {method!r} is not available for model {model!r}; it is for "
                f"models {models}. Methods for {model!r}: {for_model}"
            )
        raise ValueError(
            f"unknown method {method!r}; valid methods for model {model!r} are {for_model} "
            f"(all methods: {everywhere})"
        )
    return engine


def _engine_options(fn: Callable) -> dict[str, inspect.Parameter]:
    params = inspect.signature(fn).parameters
    return {
        k: p
        for k, p in params.items()
        if k not in ("problem", "key", "kernel") and p.kind is p.KEYWORD_ONLY
    }


def _check_options(engine: Engine, options: dict) -> dict:
    valid = _engine_options(engine.fn)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for method={engine.method!r}, model={engine.model!r}; "
            f"valid options are {sorted(valid)}"
        )
    resolved = {k: p.default for k, p in valid.items() if p.default is not p.empty}
    resolved.update(options)
    return resolved


@x64
def fit(
    X,
    y,
    model: str = "gp",
    method: str = "vi",
    kernel=None,
    seed=0,
    *,
    positive=None,
    **options,
) -> Fit:
    """Fit a Bayesian SVM (or a baseline) to binary data with the chosen inference method.

    Parameters
    ----------
    X : array-like of shape (n, d)
        Finite inputs.
    y : array-like of shape (n,)
        Exactly two distinct labels of any type; predictions come back in them.
    model : {"linear", "gp", "sparse_gp"}, default="gp"
        The linear Bayesian SVM of Polson & Scott (``beta``), its GP version (latent ``f``), or
        the sparse GP version with inducing values ``u``.
    method : str, default="vi"
        The inference engine; see :func:`list_methods` for what each model offers.
    kernel : str or Kernel, optional
        Covariance of the GP models (default ``"rbf"`` with the median-heuristic lengthscale);
        the linear model takes none.
    seed : int or JAX key, default=0
    positive : label, optional
        Which of the two labels is the positive class (default: the larger one).
    **options
        Engine options (``max_iter``, ``tol``, ``num_samples``, ...); an unknown option raises.

    Returns
    -------
    Fit

    Examples
    --------
    >>> import ppl_bsvm
    >>> X, y = ppl_bsvm.datasets.load("heart", standardize=True)
    >>> result = ppl_bsvm.fit(X, y, model="gp", method="ecm")
    >>> result.predict_proba(X[:3]).shape
    (3,)
    """
    start = time.perf_counter()
    engine = get_engine(model, method)
    problem = check_X_y(X, y, positive=positive)
    key = as_key(seed)
    resolved = _check_options(engine, options)
    kwargs = dict(resolved)
    if engine.uses_kernel:
        kwargs["kernel"] = get_kernel("rbf" if kernel is None else kernel)
    elif kernel is not None:
        raise ValueError(
            f"kernel is not used by model={model!r} with method={method!r}; "
            "for a kernelised model use model='gp' (kernel='linear' gives the linear model as a GP)"
        )
    result = engine.fn(problem, key=key, **kwargs)
    return dataclasses.replace(
        result,
        labels=problem.labels,
        n_features_in=problem.d,
        timings={**result.timings, "total": time.perf_counter() - start},
        options={**resolved, **result.options},
    )
