"""``ppl_bsvm.fit``: one entry point, a registry of inference engines behind it.

An engine is registered for one method name and one or more models with :func:`register`,
with its options class (:mod:`ppl_bsvm.engine`: the contract). ``fit`` validates the data,
resolves the kernel and seed, builds the options (an unknown option or a bad value is a
``ValueError`` naming it, never silently dropped), runs the engine with float64 enabled and
builds the ``Fit`` from the engine's :class:`~ppl_bsvm.engine.Approximation`: here, and
nowhere else.

Long runs of the engines that support it (the samplers, stochastic VI) can be checkpointed
(``fit(..., checkpoint=path, checkpoint_every=k)`` saves the fit every ``k`` iterations) and
continued with :func:`resume`; a resumed run gives the same result as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from . import _cost, _memory, _pointwise, _progress, _store
from ._checks import positive_int
from ._jax import as_key
from ._runtime import entry_point
from ._serial import Unsaved
from .engine import Approximation, Options
from .data import Problem, check_X_y
from .exceptions import warn_max_iter
from .kernels import get_kernel, program_kernel
from .result import Fit, breakdown_hint, load

__all__ = ["MODELS", "fit", "resume", "register", "list_methods", "describe", "get_engine"]

MODELS = ("linear", "gp", "sparse_gp")

# Modules whose import registers engines; imported on first use so that `import ppl_bsvm`
# stays light and there are no import cycles.
_ENGINE_MODULES = (
    "ppl_bsvm.inference",
    "ppl_bsvm.baselines",
)


class Engine(NamedTuple):
    """A registered engine: ``fn(problem, options, *, key[, kernel][, resume]) ->
    Approximation`` and its ``options`` class (:mod:`ppl_bsvm.engine`)."""

    fn: Callable
    method: str
    model: str
    uses_kernel: bool
    summary: str
    budget: str | None  # the option that counts iterations, for engines that can resume
    options: type[Options]
    memory: Callable | None = None  # (n, d, options) -> working bytes, see _memory
    flops: Callable | None = None  # (n, d, options) -> leading-term flops, see _cost

    @property
    def where(self) -> str:
        return f"method={self.method!r}, model={self.model!r}"


_REGISTRY: dict[tuple[str, str], Engine] = {}
_loaded = False


def register(method: str, models, *, options: type[Options], uses_kernel: bool = True,
             budget: str | None = None, memory: Callable | None = None,
             flops: Callable | None = None):
    """Decorator registering an engine for ``method`` under each of ``models``.

    ``options`` is the engine's options class (:class:`ppl_bsvm.engine.Options`). The
    engine's docstring's first line is its one-line description in ``list_methods``.
    ``budget`` names the option counting the engine's iterations (``"max_iter"``,
    ``"num_samples"``) when the engine can resume: it then takes a keyword ``resume`` (an
    earlier ``Fit`` of the same engine, or None) and continues that fit's ``checkpoint``.
    ``memory(n, d, options)`` estimates the engine's working memory in bytes beyond the
    inputs (``_memory``), so that a fit that cannot fit fails before it starts;
    ``flops(n, d, options)`` its leading-term operation count (``_cost``), so that a fit
    estimated to take minutes warns before it starts; its ``hint`` (a string, or a function
    ``(n, d, options) -> str`` quoting the estimate's assumptions at that size) names what
    dominates and the faster choices.
    """
    models = (models,) if isinstance(models, str) else tuple(models)
    if budget is not None and budget not in options.names():
        raise ValueError(f"budget {budget!r} is not an option of {options.__name__}")

    def decorate(fn):
        summary = (fn.__doc__ or "").strip().split("\n")[0]
        for model in models:
            if model not in MODELS:
                raise ValueError(f"unknown model {model!r} in register; valid: {MODELS}")
            _REGISTRY[(model, method)] = Engine(fn, method, model, uses_kernel, summary, budget,
                                                options, memory, flops)
        return fn

    return decorate


def _load_engines() -> None:
    global _loaded
    if _loaded:
        return
    for name in _ENGINE_MODULES:
        importlib.import_module(name)
    _loaded = True


def list_methods():
    """Every registered engine: a pandas DataFrame with columns ``model``, ``method`` and
    ``description`` (the first line of the engine's docstring), sorted by model and method.
    ``ppl_bsvm.describe(model, method)`` lists an engine's options."""
    import pandas as pd

    _load_engines()
    rows = sorted((m, meth, e.summary) for (m, meth), e in _REGISTRY.items())
    return pd.DataFrame(rows, columns=["model", "method", "description"])


def describe(model: str, method: str):
    """The options of ``fit(..., model=model, method=method)``: a pandas DataFrame indexed by
    option, with its ``default`` and ``meaning``.

    Read from the engine's own definition: the fields of its options class (names and
    defaults, :mod:`ppl_bsvm.engine`) and, for the meaning, the option's entry in the
    *Parameters* section of the engine's docstring or else the docstring of the option piece
    that declares the field (``Iteration``, ``Sampler``, ...), whose docstring says what its
    fields mean.

    Examples
    --------
    >>> import ppl_bsvm
    >>> ppl_bsvm.describe("gp", "rvm").loc["algorithm", "default"]
    'fast'
    """
    import dataclasses

    import pandas as pd

    engine = get_engine(model, method)
    documented = _documented_parameters(engine.fn.__doc__)
    rows = []
    for field in dataclasses.fields(engine.options):
        default = (field.default if field.default is not dataclasses.MISSING
                   else field.default_factory())
        meaning = documented.get(field.name) or _declaring_doc(engine.options, field.name)
        rows.append((field.name, default, meaning))
    return pd.DataFrame(rows, columns=["option", "default", "meaning"]).set_index("option")


def _documented_parameters(doc: str | None) -> dict[str, str]:
    """``{name: text}`` from a numpydoc *Parameters* (or *Options*) section (``a, b : type``
    lines name several; the text is the type line's tail and the indented lines below,
    joined)."""
    import inspect
    import re

    text = inspect.cleandoc(doc or "")
    # "Parameters", or "Options (:class:`XOptions`)" where an engine lists its options class
    found = re.search(r"^(?:Parameters|Options \([^\n]*\))\n-+\n(.*?)(?=^\S[^\n]*\n-{3,}\n|\Z)",
                      text, re.S | re.M)
    out: dict[str, str] = {}
    names: list[str] = []
    for line in (found.group(1).splitlines() if found else []):
        head = re.match(r"^(\w+(?:\s*,\s*\w+)*)\s*:\s*(.*)$", line)
        if head:
            names = [n.strip() for n in head.group(1).split(",")]
            for name in names:
                out[name] = head.group(2).strip()
        elif line.startswith((" ", "\t")) and names:
            for name in names:
                out[name] = f"{out[name]}; {line.strip()}" if out[name] else line.strip()
    return {name: re.sub(r";\s*(?=[a-z(])", " ", value) for name, value in out.items()}


def _declaring_doc(options: type, name: str) -> str:
    """What the class in ``options``' hierarchy that first declares field ``name`` says of it:
    its entry in the class's *Parameters* section, or else the docstring's first paragraph."""
    for cls in reversed(options.__mro__):
        if name in vars(cls).get("__annotations__", {}):
            return (_documented_parameters(cls.__doc__).get(name)
                    or " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split()))
    return ""


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


def _check_options(engine: Engine, options: dict) -> Options:
    return engine.options.parse(options, engine.where)


@entry_point
def fit(
    X,
    y,
    model: str = "gp",
    method: str = "vi",
    kernel=None,
    seed=0,
    *,
    positive=None,
    checkpoint=None,
    checkpoint_every: int | None = None,
    progress_bar: bool | None = None,
    check_memory: bool = True,
    **options,
) -> Fit:
    """Fit a Bayesian SVM (or a baseline) to binary data with the chosen inference method.

    Parameters
    ----------
    X : array-like of shape (n, d)
        Finite inputs. A pandas DataFrame's column names (strings) name ``beta``'s
        coordinates and the inducing locations' ``input_dim``, become
        ``Fit.feature_names_in`` and are checked at prediction, as in scikit-learn.
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
    checkpoint : str or path-like, optional
        Save the fit to this directory (``Fit.save``) every ``checkpoint_every`` iterations
        and at the end; continue an interrupted run with :func:`resume`. Only for engines
        that can resume (samplers: iterations are kept draws, warmup is not checkpointed;
        stochastic VI: minibatch steps).
    checkpoint_every : int, optional
        Iterations between checkpoints (default: only at the end).
    progress_bar : bool, optional
        Show a progress bar for the samplers and iterative engines. Default: in an interactive
        terminal or a notebook (not under ``CI``), and only once a run has lasted two seconds.
    check_memory : bool, default=True
        Estimate the fit's memory before any work and refuse it (``InsufficientMemoryError``)
        when it exceeds the memory available; False skips the check, for a user who knows
        better (the estimate counts leading terms: ``ppl_bsvm._memory``).
    **options
        Engine options (``max_iter``, ``tol``, ``num_samples``, ...); an unknown option raises.

    Returns
    -------
    Fit

    Raises
    ------
    ValueError
        For invalid data or options (the message names the argument).
    InsufficientMemoryError
        Before any work, when the inputs' copies and the engine's working memory exceed the
        memory available (``ppl_bsvm._memory``); a subclass of ``MemoryError`` and of
        ``ValueError``. The message gives the estimate and the engines that scale.

    Warns
    -----
    ConvergenceWarning
        When an iterative engine stopped at ``max_iter`` before meeting its tolerance, or a
        sampler's chains disagree (R-hat).
    SlowFitWarning
        Before any work, when the engine's leading-term operation count predicts more than
        about a minute (``ppl_bsvm._cost``; the linear engines at thousands of features); the
        message names the faster choices. The fit goes ahead; silence it with
        ``warnings.simplefilter("ignore", ppl_bsvm.SlowFitWarning)``.

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
    config = _check_options(engine, options)
    if not isinstance(check_memory, (bool, np.bool_)):
        raise ValueError(f"check_memory must be True or False, got {check_memory!r}")
    if check_memory:
        _check_memory(engine, X, config)
    _check_time(engine, X, config)
    problem = check_X_y(X, y, positive=positive)
    key = as_key(seed)
    progress_bar = _progress.check_progress_bar(progress_bar)
    every = _check_checkpoint(engine, checkpoint, checkpoint_every, config)
    fingerprint = _fingerprint(problem)
    _check_checkpoint_path(engine, checkpoint, fingerprint)
    if engine.uses_kernel:
        kernel = get_kernel("rbf" if kernel is None else kernel)
    elif kernel is not None:
        raise ValueError(
            f"kernel is not used by model={model!r} with method={method!r}; "
            "for a kernelised model use model='gp' (kernel='linear' gives the linear model as a GP)"
        )
    shared = {
        "labels": problem.labels,
        "n_features_in": problem.d,
        "feature_names_in": problem.feature_names,
        "seed": _key_data(key),
        "fingerprint": fingerprint,
    }
    return _run_engine(engine, problem, key, kernel, config, shared, None, checkpoint, every,
                       start, progress_bar)


def resume(previous, X, y, *, checkpoint=None, checkpoint_every: int | None = None,
           progress_bar: bool | None = None, **options) -> Fit:
    """Continue a fit of a resumable engine (samplers, stochastic VI) from its checkpoint.

    The run goes on from ``previous``'s final state with its seed, kernel and options, up to
    the iteration budget (``num_samples`` kept draws, or ``max_iter`` steps; raise it to extend
    a finished run). The result is the one the uninterrupted run would have given: the same
    draws, the same ``q``, the trace of both parts.

    Parameters
    ----------
    previous : Fit or str or path-like
        A fit, or a directory written by ``Fit.save`` (e.g. by ``fit(..., checkpoint=path)``).
    X, y : array-like
        The training data of ``previous`` (checked against its fingerprint).
    checkpoint, checkpoint_every, progress_bar
        As for :func:`fit`.
    **options
        Only the budget (``num_samples`` or ``max_iter``) may change.

    Examples
    --------
    >>> import ppl_bsvm
    >>> X, y = ppl_bsvm.datasets.load("heart", standardize=True)
    >>> short = ppl_bsvm.fit(X, y, model="linear", method="gibbs", num_samples=200,
    ...                      progress_bar=False)
    >>> longer = ppl_bsvm.resume(short, X, y, num_samples=400)
    >>> longer.posterior.sizes["draw"]
    400
    """
    return _resume(previous, X, y, checkpoint, checkpoint_every, progress_bar, options)


@entry_point
def _resume(previous, X, y, checkpoint, checkpoint_every, progress_bar, options) -> Fit:
    start = time.perf_counter()
    if not isinstance(previous, Fit):
        previous = load(previous)
    engine = get_engine(previous.model, previous.method)
    if engine.budget is not None and previous.checkpoint is None:
        raise ValueError(
            f"this {previous.model}/{previous.method} fit has no checkpoint to resume from (its "
            "engine state was saved by another version of ppl_bsvm and not loaded); run fit "
            "again with this version"
        )
    if engine.budget is None:
        raise ValueError(
            f"method={previous.method!r} (model={previous.model!r}) cannot be resumed; "
            f"resumable (model, method) pairs: {_resumable()}"
        )
    problem = check_X_y(X, y, positive=previous.labels.positive)
    if _fingerprint(problem) != previous.fingerprint:
        raise ValueError(
            "X and y are not the data the fit was trained on (their fingerprint differs); "
            "resume needs the same rows in the same order"
        )
    progress_bar = _progress.check_progress_bar(progress_bar)
    engine.options.parse(options, engine.where)  # names an unknown option before the rest
    unsaved = {k for k, v in previous.options.items() if isinstance(v, Unsaved)}
    missing = sorted(unsaved - set(options))
    if missing:
        raise ValueError(
            f"option(s) {missing} of the saved fit were not data (a Python callable, saved as "
            f"its repr {previous.options[missing[0]]!r}) and were not saved; pass them again, "
            f"e.g. resume(..., {missing[0]}=...)"
        )
    free = {engine.budget} | unsaved
    for name, value in options.items():
        if name not in free and not _same(value, previous.options.get(name)):
            raise ValueError(
                f"option {name!r} cannot change when resuming (it was "
                f"{previous.options.get(name)!r}); only {sorted(free)} can"
            )
    saved = {k: v for k, v in previous.options.items() if k in engine.options.names()}
    config = engine.options.parse({**saved, **options}, engine.where)
    every = _check_checkpoint(engine, checkpoint, checkpoint_every, config)
    _check_checkpoint_path(engine, checkpoint, previous.fingerprint)
    key = jax.random.wrap_key_data(jax.numpy.asarray(previous.seed))
    shared = {k: getattr(previous, k) for k in ("labels", "n_features_in", "feature_names_in",
                                                "seed", "fingerprint")}
    problem = problem._replace(feature_names=previous.feature_names_in)  # the fit's names
    return _run_engine(engine, problem, key, previous.kernel, config, shared, previous,
                       checkpoint, every, start, progress_bar)


def _same(a, b) -> bool:
    try:
        return bool(np.all(a == b))
    except Exception:  # noqa: BLE001  (incomparable values are different)
        return False


def _resumable() -> list[tuple[str, str]]:
    return sorted((m, meth) for (m, meth), e in _REGISTRY.items() if e.budget)


def _check_checkpoint(engine: Engine, checkpoint, checkpoint_every, config: Options):
    if checkpoint is None:
        if checkpoint_every is not None:
            raise ValueError("checkpoint_every needs checkpoint=<directory>")
        return None
    if engine.budget is None:
        raise ValueError(
            f"checkpoint is not supported by method={engine.method!r} (model={engine.model!r}), "
            f"which cannot resume; checkpointing (model, method) pairs: {_resumable()}"
        )
    if not isinstance(checkpoint, (str, Path)):
        raise ValueError(f"checkpoint must be a directory path, got {checkpoint!r}")
    if checkpoint_every is None:
        return None
    every = positive_int("checkpoint_every", checkpoint_every)
    thinning = getattr(config, "thinning", 1)
    if isinstance(thinning, int) and thinning > 0 and every % thinning:
        raise ValueError(
            f"checkpoint_every={every} must be a multiple of thinning={thinning}, so that the "
            "segments keep the draws an uninterrupted run keeps"
        )
    return every


def _check_checkpoint_path(engine: Engine, checkpoint, fingerprint: str) -> None:
    """Before any work: a ``checkpoint`` path must be new, or hold a fit of this engine on
    these data (an earlier run of the same fit, which the run replaces); anything else is
    refused, so that a finished fit is never overwritten by another."""
    if checkpoint is None or not Path(checkpoint).exists():
        return
    meta = _store.read_meta(Path(checkpoint))
    if meta is None:
        raise ValueError(
            f"checkpoint={str(checkpoint)!r} exists and is not a saved ppl_bsvm Fit; choose a "
            "new directory"
        )
    same = (meta.get("model"), meta.get("method"), meta.get("fingerprint")) == (
        engine.model, engine.method, fingerprint)
    if not same:
        raise ValueError(
            f"checkpoint={str(checkpoint)!r} holds another fit (model={meta.get('model')!r}, "
            f"method={meta.get('method')!r}"
            + ("" if meta.get("fingerprint") == fingerprint else ", other data")
            + "); it is not replaced. Choose a new directory, or continue that fit with "
            "ppl_bsvm.resume"
        )


def _check_memory(engine, X, config: Options) -> None:
    """Fail before any work (and before ``check_X`` copies ``X``) when the fit cannot fit in
    memory (``_memory.check_fit``)."""
    shape = getattr(X, "shape", None)
    if shape is None or len(shape) != 2:
        return  # lists and malformed input: check_X converts and reports them
    n, d = int(shape[0]), int(shape[1])
    try:
        working = 0 if engine.memory is None else int(engine.memory(n, d, config.as_dict()))
    except (TypeError, ValueError):
        return  # invalid options: the engine's own checks name them
    hint = getattr(engine.memory, "hint", "").format(
        method=engine.method, where=_memory_where(engine, n, d, config))
    _memory.check_fit(f"fit(model={engine.model!r}, method={engine.method!r})", n, d, working,
                      hint)


def _check_time(engine, X, config: Options) -> None:
    """Warn before any work when the fit is estimated to take minutes (``_cost.check_time``)."""
    shape = getattr(X, "shape", None)
    if engine.flops is None or shape is None or len(shape) != 2:
        return
    n, d = int(shape[0]), int(shape[1])
    options = config.as_dict()
    try:
        flops = float(engine.flops(n, d, options))
    except (TypeError, ValueError):
        return  # invalid options: the engine's own checks name them
    hint = getattr(engine.flops, "hint", "")
    if callable(hint):  # a hint that quotes the assumptions at this size
        hint = hint(n, d, options)
    _cost.check_time(_cost.fit_name(engine.model, engine.method, n, d), flops,
                     hint.format(method=engine.method), stacklevel=4)


def _memory_where(engine, n: int, d: int, config: Options) -> str:
    """For a linear engine's hint: the form it would run in, where it has two."""
    form = getattr(config, "form", None)
    if form is None:
        return ""
    p = _memory.coefficients(d, config.as_dict())
    if form == "primal" and p > n:
        return ", and form='primal' was asked for: form='auto' solves in n x n form"
    return ""


def _run_engine(engine, problem, key, kernel, config, shared, previous, checkpoint, every,
                start, progress_bar=None) -> Fit:
    """Run the engine (in segments of ``every`` iterations when checkpointing) and finish the
    Fit; warn when it stopped at its iteration cap."""
    lock = contextlib.nullcontext() if checkpoint is None else _store.writer_lock(checkpoint)
    with lock, _progress.settings(progress_bar, f"{engine.model}/{engine.method}"):
        result = _run_segments(engine, problem, key, kernel, config, shared, previous,
                               checkpoint, every, start)
    if result.stop_reason == "max_iter":
        warn_max_iter(f"method={engine.method!r} (model={engine.model!r})",
                      getattr(config, "max_iter", None), getattr(config, "tol", None),
                      stacklevel=4, detail=result.idata.attrs.get("stop_detail"))
    return result


def _run_segments(engine, problem, key, kernel, config, shared, previous, checkpoint, every,
                  start) -> Fit:
    """The engine's run, in segments of ``every`` iterations when checkpointing."""
    kwargs = {"key": key}
    if engine.uses_kernel:  # programs keyed by the kernel's structure, not its starting values
        kwargs["kernel"] = program_kernel(kernel)
    total = getattr(config, engine.budget) if engine.budget is not None else None
    done = 0 if previous is None else previous.checkpoint.n_iter
    while True:
        segment = config
        if every is not None:
            segment = config.replace(**{engine.budget: min(total, (done // every + 1) * every)})
        if engine.budget is not None:
            kwargs["resume"] = previous
        approx = engine.fn(problem, segment, **kwargs)
        result = _make_fit(engine, approx, kernel, config, shared, previous, start)
        # the loop's own stop, not the fit's: an engine that polishes after its loop (linear
        # SVI, S-BSVM: ``inference.vi.fixed_point``) may converge at every checkpoint, and the
        # segments run the loop an uninterrupted run runs
        looped = getattr(result.checkpoint, "stop_reason", result.stop_reason)
        last = every is None or looped == "tol" or result.checkpoint.n_iter >= total
        if last:  # the groups per observation: not in the intermediate checkpoints' saves
            t0 = time.perf_counter()
            _pointwise.attach(result, problem.X, problem.y)
            seconds = time.perf_counter() - t0
            result.timings["pointwise"] = seconds
            result.timings["total"] += seconds
        if checkpoint is not None:
            _save_checkpoint(result, checkpoint)
        if last:
            return result
        previous = result
        done = result.checkpoint.n_iter
        start = time.perf_counter()


def _save_checkpoint(result: Fit, checkpoint) -> None:
    """Save a checkpoint; one that cannot be written (a full disk) warns and the run goes on:
    its work is worth more than the copy, and the folder keeps the last checkpoint written."""
    try:
        result.save(checkpoint, overwrite=True)
    except OSError as error:
        warnings.warn(f"checkpoint {str(checkpoint)!r} not written after iteration "
                      f"{result.checkpoint.n_iter} ({error.strerror or error}); the run goes "
                      "on, and the folder keeps the last checkpoint written", UserWarning,
                      stacklevel=4)


def _make_fit(engine: Engine, approx: Approximation, kernel, config: Options, shared: dict,
              previous: Fit | None, start: float) -> Fit:
    """The ``Fit`` of an engine's run: the one place a ``Fit`` is built (``previous``: the
    fit a resumed run continues, whose timings add up). The run's last ``Fit`` gets the ArviZ
    groups per observation (``ppl_bsvm._pointwise``) in :func:`_run_segments`."""
    if not isinstance(approx, Approximation):
        raise TypeError(f"engine {engine.fn.__name__} returned {type(approx).__name__}, "
                        "not an Approximation")
    _check_finite(approx.idata, engine)
    timings = dict(approx.timings)
    total = time.perf_counter() - start
    if previous is not None:
        timings = _add_timings(previous.timings, timings)
        total += previous.timings.get("total", 0.0)
    return Fit(
        idata=approx.idata,
        method=engine.method,
        model=approx.model or engine.model,
        predictor=approx.predictor,
        trace=dict(approx.trace),
        stop_reason=approx.stop_reason,
        n_iter=approx.n_iter,
        kernel=kernel if engine.uses_kernel else None,
        kernel_params=approx.kernel_params,
        jitter=approx.jitter,
        options={**config.as_dict(), **approx.options},
        state=approx.state,
        checkpoint=approx.checkpoint,
        timings={**timings, "total": total},
        **shared,
    )


_CHECKED_GROUPS = ("posterior", "approximation")


def _check_finite(idata, engine: Engine) -> None:
    """``FloatingPointError`` when a draw or a parameter of the approximation is NaN or inf:
    a fit never returns them (a breakdown of the arithmetic, not a result)."""
    for group in _CHECKED_GROUPS:
        if group not in idata.children:
            continue
        for name, var in idata[group].data_vars.items():
            values = np.asarray(var.values)
            if values.dtype.kind in "fc" and not np.all(np.isfinite(values)):
                bad = int(np.sum(~np.isfinite(values)))
                raise FloatingPointError(
                    f"method={engine.method!r} (model={engine.model!r}) produced {bad} "
                    f"non-finite value(s) of {values.size} in {group}.{name}: the arithmetic "
                    f"broke down. {breakdown_hint(engine.model)}"
                )


def _add_timings(old: dict, new: dict) -> dict:
    return {k: old.get(k, 0.0) + new.get(k, 0.0) for k in {**old, **new} if k != "total"}


def _key_data(key) -> np.ndarray:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(key))
    return np.asarray(key)


def _fingerprint(problem: Problem) -> str:
    """SHA-256 of the data's shapes and bytes (hashed in place: 0.37 s for 5 x 10^6 x 18,
    where a copy with ``tobytes`` took 0.71 s)."""
    digest = hashlib.sha256()
    for arr in (problem.X, problem.y):
        arr = np.ascontiguousarray(arr, dtype=np.float64)
        digest.update(str(arr.shape).encode())
        digest.update(memoryview(arr).cast("B"))
    return digest.hexdigest()
