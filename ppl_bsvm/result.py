"""The one result type every engine returns, and how it is saved and loaded.

:meth:`Fit.save` writes a directory of data, no code::

    path/
        meta.json          format version, library versions, method, model, the data's
                           fingerprint, and the names and SHA-256 checksums of:
        posterior.<g>.nc   the ArviZ tree (posterior, sample_stats, approximation, ...) as
                           netCDF: readable without ppl_bsvm (``xarray.open_datatree``)
        fit.<g>.json       everything else as JSON: predictor (which latent-predictive function
                           of the library, its kernel and settings), kernel and its fitted
                           hyperparameters, labels, options, trace, engine state and resume
                           checkpoint, their arrays named by key
        arrays.<g>.npz     those arrays (``numpy.savez``; read with ``allow_pickle=False``)

(``g`` counts the saves to the directory; ``ppl_bsvm._store`` says how a save replaces the
previous one without losing it, checks integrity and keeps a second writer out), and
:func:`load` reads it back, executing nothing from the files (``ppl_bsvm._serial`` lists what
it rebuilds); predictions of the loaded fit are identical to the original's. What is
not data is not saved: a baseline's scikit-learn estimator in ``Fit.state`` and a user's
callable among the options come back as :class:`ppl_bsvm._serial.Unsaved` placeholders (their
``repr``). A fit with a custom kernel class loads once that class's module is imported.

Directories saved by ppl_bsvm before format 2 held a pickle (``fit.pkl``), which runs code
when loaded: they are refused, with how to re-create them.

In memory, a :class:`Fit` pickles with the standard :mod:`pickle` (and so with joblib,
multiprocessing and scikit-learn's model persistence), fields through ``cloudpickle``, loaded
back in float64.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from . import _store
from ._checks import positive_int
from ._runtime import entry_point
from .data import BinaryLabels, check_feature_names, check_X

__all__ = ["Fit", "STOP_REASONS", "load"]

FORMAT_VERSION = 4
"""4: ``feature_names_in`` (a DataFrame's column names), and the ArviZ groups per
observation in the netCDF tree. 3: ``NamedTuple`` states saved with their field names. Fits of
formats 2 and 3 load too (without feature names, and without the groups: build them with
``Fit.add_log_likelihood``); an engine state whose fields this version's class no longer has
is left out, with a warning (the fit predicts as saved and cannot be resumed)."""
_READABLE = (2, 3, 4)
_ADDED_FIELDS = {"feature_names_in": None}
"""Fields added since format 2, with the value a fit saved before them loads with."""
BREAKDOWN_HINT = (
    "A kernel matrix that is singular or nearly so (a very long lengthscale, repeated inputs, "
    "jitter=0) is the usual cause: increase jitter or shorten the lengthscale; standardise "
    "the inputs"
)
"""What a non-finite result of a fit or a prediction says to do (``api``, :class:`Fit`)."""
LINEAR_BREAKDOWN_HINT = (
    "For the linear model the usual cause is the data scale: inputs of large magnitude (or "
    "many identical rows far from 0) make its precision Z^T W Z + I / prior_scale^2 singular "
    "to float64: standardise the inputs"
)
"""The same for the linear model, which has no kernel matrix."""


def breakdown_hint(model: str) -> str:
    """:data:`BREAKDOWN_HINT`, or :data:`LINEAR_BREAKDOWN_HINT` for the linear model."""
    return LINEAR_BREAKDOWN_HINT if model == "linear" else BREAKDOWN_HINT


_UNSAVED_OK = ("options", "state")
"""Fields whose values that are not data are saved as placeholders instead of refused."""
_NETCDF_ENGINE = "h5netcdf"

STOP_REASONS = ("tol", "max_iter", "draws")
"""``tol``: converged; ``max_iter``: hit the iteration cap; ``draws``: a sampler's fixed budget."""


@dataclasses.dataclass(eq=False, repr=False)
class Fit:
    """A fitted Bayesian SVM (or baseline): posterior, predictions and how it was obtained.

    Attributes
    ----------
    idata : xarray.DataTree
        ArviZ 1.x tree. ``posterior`` holds draws with dims ``(chain, draw, ...)`` under the
        shared site names (``beta`` on ``feature``, ``f`` on ``obs``, ``u`` on ``inducing``);
        variational fits keep q's parameters in a group of their own.
    method, model : str
        The engine (``"gibbs"``, ``"vi"``, ``"ecm"``, ...) and model (``"linear"``, ``"gp"``,
        ``"sparse_gp"``) that produced the fit.
    predictor : GaussianPredictor or MixturePredictor
        Maps new inputs to the latent predictive and class probabilities.
    labels : BinaryLabels
        The user's labels; ``predict`` returns them.
    n_features_in : int
    feature_names_in : tuple of str or None
        The column names of a DataFrame ``X`` given to ``fit`` (as scikit-learn's
        ``feature_names_in_``). Prediction then checks a DataFrame's columns against them
        (other names or another order raise ``ValueError``) and warns for an array.
    timings : dict str -> float
        Seconds: ``"total"`` (the whole ``fit`` call, compilation included) and whatever
        parts the engine times itself (``"engine"``, ``"warmup"``, ``"sampling"``, ...).
    trace : dict str -> ndarray
        The objective or sampler trace (``"elbo"``, ``"objective"``, ``"diverging"``, ...),
        one entry per recorded iteration.
    stop_reason : {"tol", "max_iter", "draws"}
        Why the engine stopped.
    n_iter : int
        Iterations run (draws per chain, warmup included, for samplers).
    kernel : Kernel or None
    kernel_params : dict or None
        Final kernel hyperparameters, unconstrained pytree (``kernel.constrain`` maps it).
    jitter : float or None
        Relative jitter added to kernel matrices (see ``ppl_bsvm.kernels.gram``).
    options : dict
        The engine options that were used, defaults included.
    state : object
        The engine's final state (a ``NamedTuple``), for inspection or warm starts.
    checkpoint : object or None
        What :func:`ppl_bsvm.resume` needs to continue the run (engines that support resuming:
        the samplers and stochastic VI); None otherwise.
    seed : ndarray or None
        The raw PRNG key data the fit was started from (``jax.random.key_data``).
    fingerprint : str or None
        A hash of the training data and labels, so that a resumed run checks it is given the
        same data.
    """

    idata: Any
    method: str
    model: str
    predictor: Any
    labels: BinaryLabels | None = None
    n_features_in: int | None = None
    feature_names_in: tuple[str, ...] | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    trace: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    stop_reason: str | None = None
    n_iter: int | None = None
    kernel: Any = None
    kernel_params: Any = None
    jitter: float | None = None
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    state: Any = None
    checkpoint: Any = None
    seed: Any = None
    fingerprint: str | None = None

    # --- persistence ---------------------------------------------------------------------

    def _fields(self, *, with_idata: bool = True) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if with_idata or f.name != "idata"
        }

    def __reduce__(self):
        import cloudpickle

        return (_unpickle_fit, (cloudpickle.dumps(self._fields()),))

    def save(self, path, *, overwrite: bool = False) -> Path:
        """Write the fit to the directory ``path`` (see the module doc for its layout).

        The data files are written beside the current ones and committed by one atomic
        rename of ``meta.json`` (``ppl_bsvm._store``), so an interrupted save (a checkpoint
        of a long run, say) leaves the previous copy readable, and only files the library
        wrote are ever removed. A second process saving to the same path at the same time is
        refused.

        Parameters
        ----------
        path : str or path-like
        overwrite : bool, default=False
            Replace an existing saved fit at ``path``. A path that exists and is not a saved
            fit is never replaced.

        Returns
        -------
        Path
            ``path``.
        """
        from ._serial import to_bytes

        path = Path(path)
        fields_json, arrays_npz = to_bytes(self._fields(with_idata=False), lenient=_UNSAVED_OK)
        writers = {
            "posterior": lambda file: _write_netcdf(file, self.idata),
            "fields": lambda file: file.write_bytes(fields_json),
            "arrays": lambda file: file.write_bytes(arrays_npz),
        }
        if _store.holds_lock(path):  # a checkpoint of a run that holds the path
            _write(path, writers, _meta(self), overwrite)
        else:
            with _store.writer_lock(path):
                _write(path, writers, _meta(self), overwrite)
        return path

    @property
    def converged(self) -> bool:
        """True when an iterative engine met its tolerance (samplers: True)."""
        return self.stop_reason in ("tol", "draws")

    @property
    def posterior(self):
        """Shortcut for ``idata.posterior``."""
        return self.idata.posterior

    @property
    def hyperparameters(self) -> dict[str, Any]:
        """Kernel hyperparameters on their natural scale (empty for kernel-free models)."""
        if self.kernel is None or self.kernel_params is None:
            return {}
        import jax

        with jax.enable_x64(True):  # float64 whatever the session's setting
            constrained = self.kernel.constrain(self.kernel_params)
            return {k: np.asarray(v, dtype=np.float64) for k, v in constrained.items()}

    def _check_X(self, X) -> np.ndarray:
        check_feature_names(X, self.feature_names_in, what=f"this {self.method} fit")
        return check_X(X, n_features=self.n_features_in)

    @entry_point
    def predict_latent(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Latent predictive mean and variance of ``f(x*)`` at the rows of ``X``.

        Returns
        -------
        mean, var : ndarray of shape (n*,)
        """
        return tuple(self._finite(a, "latent predictive")
                     for a in self.predictor.latent(self._check_X(X)))

    @entry_point
    def predict_proba(self, X, link: str | None = None) -> np.ndarray:
        """P(y = positive class | x*) at the rows of ``X``.

        Parameters
        ----------
        X : array-like of shape (n*, d)
        link : {"paper", "probit", "sign", "normalized"}, optional
            Overrides the fit's default link (see ``ppl_bsvm.predictive``).

        Returns
        -------
        ndarray of shape (n*,)
        """
        return self._finite(self.predictor.proba(self._check_X(X), link), "probabilities")

    def _finite(self, values, what: str) -> np.ndarray:
        """``values``, or ``FloatingPointError`` when any is NaN or inf: predictions that broke
        down are never returned."""
        values = np.asarray(values)
        if not np.all(np.isfinite(values)):
            raise FloatingPointError(
                f"the {what} of method={self.method!r} (model={self.model!r}) are not finite "
                f"at {int(np.sum(~np.isfinite(values)))} of {values.size} points: its "
                f"arithmetic broke down. {breakdown_hint(self.model)}"
            )
        return values

    @entry_point
    def sample_latent(self, X, num_draws: int = 1000, seed: int = 0) -> np.ndarray:
        """Draws ``(num_draws, n*)`` of the latent ``f(x*)`` from the fit's predictive.

        Each column has the right marginal; a Gaussian approximation's draws are independent
        across test points (its predictor exposes marginals only), an MCMC fit's draws share
        the posterior draw of ``f`` they condition on.
        """
        positive_int("num_draws", num_draws)
        if not hasattr(self.predictor, "sample_latent"):
            raise ValueError(f"method {self.method!r} has no latent predictive to sample")
        return self.predictor.sample_latent(self._check_X(X), num_draws, seed)

    @entry_point
    def add_log_likelihood(self, X, y) -> Fit:
        """Add the ArviZ groups per observation (``log_likelihood``, ``posterior_predictive``,
        ``observed_data``) to ``idata``, in place, from the training data ``X, y``.

        A fit gets them when it is made unless they would exceed
        ``ppl_bsvm._pointwise.POINTWISE_LIMIT`` values (``idata.attrs["pointwise_groups"]``
        says so); this builds them on request. The Bayesian SVM's log-likelihood is its
        unnormalised pseudo-likelihood ``-2 gamma max(0, 1 - y_i f_i)`` (see
        ``ppl_bsvm._pointwise`` for what ``az.loo`` then estimates).

        Parameters
        ----------
        X, y : the data the fit was fitted to (checked against its fingerprint).

        Returns
        -------
        Fit
            ``self``.
        """
        from . import _pointwise
        from .api import _fingerprint
        from .data import check_X_y

        if "posterior" not in self.idata.children:
            raise ValueError(f"method {self.method!r} has no posterior draws: no log-likelihood")
        if _pointwise.likelihood_of(self.method, self.options) is None:
            raise ValueError(f"method {self.method!r} has no likelihood of its draws")
        check_feature_names(X, self.feature_names_in, what=f"this {self.method} fit")
        problem = check_X_y(X, y, positive=self.labels.positive)
        check_X(problem.X, n_features=self.n_features_in)
        if self.fingerprint is not None and _fingerprint(problem) != self.fingerprint:
            raise ValueError("X, y are not the data this fit was fitted to (their fingerprint "
                             "differs): give the training data")
        _pointwise.add_groups(self, problem.X, problem.y)
        return self

    def predict(self, X) -> np.ndarray:
        """Predicted labels, in the user's labels: positive iff ``predict_proba >= 0.5``."""
        p = self.predict_proba(X)
        return self.labels.decode(np.where(p >= 0.5, 1.0, -1.0))

    def _summary_rows(self) -> list[tuple[str, str]]:
        """``(quantity, value)`` rows of :meth:`summary` and the notebook display: how the run
        stopped, its time, the final objective (or the samplers' divergences and mean
        acceptance), the hyperparameters once, the jitter. Per-step sampler statistics (tree
        depth, energy, step size, ...) and the traces of the hyperparameters stay in
        ``trace``."""
        rows = []
        if self.stop_reason == "draws":
            rows.append(("stopped", _draws_row(self.idata, self.options)))
        elif self.stop_reason is not None:
            rows.append(("stopped", f"{self.stop_reason} after {self.n_iter} iterations"))
        if self.timings:
            rows.append(("time", _time_row(self.timings)))
        rows.extend(_convergence_rows(self.idata))
        final = _final_elbo(self.idata)
        for key in _OBJECTIVES:
            if key in self.trace:
                last = _last_finite(self.trace[key])
                if key == "elbo" and final is not None:  # exact, where the trace may estimate
                    rows.append(("elbo (final)", f"{final:.6g}"))
                elif last is not None:
                    rows.append((f"{key} (last)", f"{last:.6g}"))
                break
        if "diverging" in self.trace:
            rows.append(("divergences", str(int(np.sum(self.trace["diverging"])))))
        if "acceptance_rate" in self.trace:
            rows.append(("acceptance rate (mean)",
                         f"{float(np.mean(self.trace['acceptance_rate'])):.3g}"))
        for key, value in self.hyperparameters.items():
            value = np.asarray(value)
            rows.append((key, f"{float(value):.5g}" if value.size == 1
                         else np.array2string(value, precision=4)))
        if self.jitter is not None:
            rows.append(("jitter (relative)", f"{self.jitter:g}"))
        rows.extend(_approximation_rows(self.idata))
        return rows

    def summary(self) -> str:
        """A two-column table: method and model, how the run stopped, its time, the final
        objective or the samplers' divergences and acceptance, the hyperparameters, the
        jitter (:meth:`_summary_rows`)."""
        rows = self._summary_rows()
        width = max([len(name) for name, _ in rows], default=0)
        lines = [f"Fit(method={self.method!r}, model={self.model!r})"]
        lines += [f"  {name:<{width}}  {value}" for name, value in rows]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        """The summary as an HTML table (Jupyter's rich display)."""
        from html import escape

        body = "".join(f"<tr><th style='text-align:left'>{escape(name)}</th>"
                       f"<td style='text-align:left'>{escape(value)}</td></tr>"
                       for name, value in self._summary_rows())
        caption = escape(f"ppl_bsvm Fit: method={self.method!r}, model={self.model!r}")
        return f"<table><caption style='text-align:left'><b>{caption}</b></caption>{body}</table>"


# the trace entry summarised as the run's objective, the first present
_OBJECTIVES = ("elbo", "objective", "log_evidence")

_TIME_PARTS = {"compile": "compilation", "mcmc": "sampling", "engine": "engine",
               "pointwise": "log-likelihood for az.loo"}
"""The disjoint parts of a fit's ``"total"`` time, in the order shown, with their labels (an
engine's own ``"engine"`` time includes its compilation); every other entry is a part *of*
the engine's time (``inducing``, ``polish``, ``linear_response``)."""


def _time_row(timings: dict) -> str:
    """``Fit.summary``'s time row, whose parts add up: ``total = parts + other``, where
    "other" is the fit's own set-up (validation, data transfer, building the ArviZ groups);
    the pointwise log-likelihood is what ``az.loo`` and ``az.compare`` read
    (``ppl_bsvm._pointwise``)."""
    parts = [(label, timings[key]) for key, label in _TIME_PARTS.items() if key in timings]
    inner = [(key.replace("_", " "), v) for key, v in timings.items()
             if key not in _TIME_PARTS and key != "total"]
    if "total" not in timings:
        return ", ".join(f"{name} {v:.3g} s" for name, v in parts + inner)
    total = timings["total"]
    other = max(total - sum(v for _, v in parts), 0.0)
    text = f"{total:.3g} s = " + " + ".join(f"{name} {v:.3g}" for name, v in parts)
    text += f" + other {other:.2g}"
    if inner:
        of = "engine" if "engine" in timings else "total"
        text += f" ({of} includes " + ", ".join(f"{name} {v:.3g}" for name, v in inner) + ")"
    return text


def _chains_and_draws(idata) -> tuple[int, int] | None:
    """The posterior's chains and draws per chain (None without a posterior)."""
    if "posterior" not in idata.children:
        return None
    sizes = idata["posterior"].sizes
    return int(sizes.get("chain", 1)), int(sizes.get("draw", 0))


def _draws_row(idata, options: dict) -> str:
    """A sampler's stop: the draws it kept per chain, after how many warmup iterations (which
    ``n_iter`` counts too) and at what thinning."""
    counts = _chains_and_draws(idata)
    if counts is None:
        return "draws"
    chains, draws = counts
    text = f"all draws: {draws} per chain x {chains} chain{'s' if chains > 1 else ''}"
    warmup, thinning = options.get("num_warmup"), options.get("thinning", 1) or 1
    if warmup is not None:
        text += f", after {int(warmup)} warmup iterations"
    if int(thinning) > 1:
        text += f", every {int(thinning)}th kept"
    return text


def _convergence_rows(idata) -> list[tuple[str, str]]:
    """A sampler's convergence diagnostics as the fit stored them (rank-normalised split
    R-hat, bulk and tail ESS: ``ppl_bsvm.inference.mcmc._common``), the worst coordinate of
    each, with a word where ESS exceeds the number of draws."""
    attrs = idata.attrs
    if attrs.get("rhat_max") is None:
        return []
    rows = [("R-hat (max)", f"{float(attrs['rhat_max']):.4g}")]
    counts = _chains_and_draws(idata)
    total = None if counts is None else counts[0] * counts[1]
    for key, name in (("ess_bulk_min", "ESS bulk (min)"), ("ess_tail_min", "ESS tail (min)")):
        if attrs.get(key) is None:
            continue
        ess = float(attrs[key])
        text = f"{ess:.0f}" + (f" of {total} draws" if total else "")
        if total and ess > total:
            text += (" (more than the draws: successive draws are negatively correlated, as "
                     "overrelaxed or antithetic moves make them; the mean is estimated better "
                     "than from independent draws)")
        rows.append((name, text))
    return rows


def _last_finite(values) -> float | None:
    arr = np.asarray(values)
    if not (arr.size and np.issubdtype(arr.dtype, np.number)):
        return None
    finite = arr[np.isfinite(arr)]
    return float(finite.reshape(-1)[-1]) if finite.size else None


def _final_elbo(idata) -> float | None:
    """The exact ELBO at the final approximation, where the engine stores it
    (``idata.approximation.elbo``): comparable across engines, unlike S-BSVM's trace, which
    holds per-period estimates."""
    if "approximation" in idata.children and "elbo" in idata["approximation"]:
        value = float(idata["approximation"]["elbo"])
        return value if np.isfinite(value) else None
    return None


def _batch_rows(attrs) -> list[tuple[str, str]]:
    """``Fit.summary``'s rows on the stochastic engines' batch phase
    (``ppl_bsvm.inference.vi.fixed_point``, ``sbsvm_batch``): how far ``q`` is from the batch
    optimum and how much ELBO the hyperparameters may still gain."""
    rows = []
    distance = attrs.get("fixed_point_distance")
    if distance is not None and not np.isfinite(float(distance)):
        rows.append(("distance to batch optimum",
                     "not checked (polish=False: the ELBO-change rule alone stopped the steps)"))
    elif distance is not None:
        rows.append(("distance to batch optimum",
                     f"{float(distance):.2g} sds (root mean square over "
                     f"the training latents; {int(attrs['fixed_point_sweeps'])} sweeps)"))
    if "hyper_gain" in attrs:
        rows.append(("ELBO left to hyperparameters",
                     f"{float(attrs['hyper_gain']):.2g} nats "
                     f"({int(attrs['hyper_evaluations'])} evaluations)"))
    return rows


def _approximation_rows(idata) -> list[tuple[str, str]]:
    """``Fit.summary``'s rows on a Gaussian approximation's quality: which covariance it uses
    (``linear_response``) and its PSIS diagnostic against the exact posterior
    (``ppl_bsvm.inference.vi.psis``)."""
    rows = _batch_rows(idata.attrs)
    status = idata.attrs.get("covariance")
    if status:
        rows.append(("covariance", status))
    if "approximation" not in idata.children or "psis_khat" not in idata["approximation"]:
        return rows
    from .inference.vi.psis import khat_verdict

    a = idata["approximation"]
    khat, ess = float(a["psis_khat"]), float(a["psis_ess"])
    dim = int(a["beta_mean"].size) if "beta_mean" in a else _event_size(idata)
    asked = bool(status) and (status == "linear response" or status.startswith("mean-field ("))
    verdict = khat_verdict(khat, dim, asked)
    # the importance-weighted draws: q's own, or the pool they were resampled from (Pathfinder)
    draws = int(a["psis_pool"]) if "psis_pool" in a else a["psis_log_weights"].size
    rows.append(("PSIS k-hat", f"{khat:.2f} ({verdict}; importance ESS {ess:.0f} of {draws})"))
    return rows


def _event_size(idata) -> int | None:
    """Coordinates of one posterior draw (all variables), None without a posterior."""
    if "posterior" not in idata.children:
        return None
    post = idata["posterior"]
    return sum(int(v.size // (v.sizes.get("chain", 1) * v.sizes.get("draw", 1)))
               for v in post.data_vars.values()) or None


def _versions() -> dict[str, str]:
    import jax

    from . import __version__

    return {
        "ppl_bsvm": __version__,
        "jax": jax.__version__,
        "python": ".".join(map(str, sys.version_info[:3])),
    }


def _meta(fit: Fit) -> dict[str, Any]:
    return {"format": FORMAT_VERSION, "method": fit.method, "model": fit.model,
            "fingerprint": fit.fingerprint, **_versions()}


def _netcdf_bytes(idata) -> memoryview:
    """The posterior as the bytes of a netCDF-4 file, built in memory.

    The file is then written by Python, whose write raises ``OSError`` on a full disk (or a
    file-size limit). Handed a file, the HDF5 library under ``h5netcdf`` meets the full disk
    itself, and after the ``OSError`` the process dies in HDF5's clean-up (SIGSEGV, 5 of 5
    tries); the price is a copy of the posterior in memory while it is written."""
    return idata.to_netcdf(None, engine=_NETCDF_ENGINE)


def _write_netcdf(file: Path, idata) -> None:
    """Write :func:`_netcdf_bytes` to ``file``, releasing its view of the in-memory file however
    the write ends. The view holds an export of xarray's ``BytesIO``; a failed write's
    traceback keeps it alive (``Path.write_bytes``' frame held another), and once that
    traceback sits in a reference cycle (pytest's or IPython's record of the error) the
    garbage collector finalises the ``BytesIO`` while the view still holds it, and its
    ``close`` fails: "Exception ignored ... BufferError: Existing exports of data", printed at
    a random later moment."""
    view = memoryview(_netcdf_bytes(idata))
    try:
        with open(file, "wb") as out:
            out.write(view)
    finally:
        view.release()


def _write(path: Path, writers: dict, meta: dict, overwrite: bool) -> None:
    old = None
    if path.exists():
        old = _store.read_meta(path) if path.is_dir() else None
        if old is None:
            raise ValueError(
                f"path {str(path)!r} exists and is not a saved ppl_bsvm Fit; choose a new path"
            )
        if not overwrite:
            raise ValueError(
                f"path {str(path)!r} already holds a saved Fit; pass overwrite=True to replace it"
            )
    else:
        path.mkdir(parents=True)
    try:
        _store.write(path, writers, meta, old)
    except Exception:
        if old is None:  # the directory this save created, left empty by the failed write
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    for stale in _store.old_scheme_leftovers(path):  # an interrupted save of format 2
        shutil.rmtree(stale, ignore_errors=True)


def _loads_fields(payload: bytes) -> dict[str, Any]:
    import jax

    # JAX arrays are rebuilt at the precision enabled when they are loaded: load them in
    # float64, as they were fitted, or predictions change in the 8th digit.
    with jax.enable_x64(True):
        return pickle.loads(payload)


def _unpickle_fit(payload: bytes) -> Fit:
    return Fit(**_loads_fields(payload))


def load(path) -> Fit:
    """Read a fit written by :meth:`Fit.save`.

    Nothing in the directory is executed: the fit is rebuilt from JSON and arrays, and only the
    library's own types are (module doc). A fit saved by other versions of ppl_bsvm, JAX or
    Python is loaded with a warning; ``posterior.nc`` always opens with
    ``xarray.open_datatree``. A directory of the old pickle format is refused.

    Parameters
    ----------
    path : str or path-like
        The directory given to ``Fit.save``.

    Returns
    -------
    Fit
    """
    import xarray as xr

    path = Path(path)
    meta = _store.read_meta(path)
    if meta is None and not path.exists() and _store.old_scheme_leftovers(path):
        found = _store.old_scheme_leftovers(path)[0]  # an interrupted format-2 save
        warnings.warn(f"{str(path)!r} is missing: a save was interrupted; loading the copy it "
                      f"left in {str(found)!r}", UserWarning, stacklevel=2)
        path, meta = found, _store.read_meta(found)
    if meta is None:
        raise ValueError(
            f"path {str(path)!r} is not a saved ppl_bsvm Fit (no {_store.META_FILE} with a "
            "format version); save one with Fit.save(path)"
        )
    if meta["format"] == 1:
        raise ValueError(
            f"{str(path)!r} was saved by an earlier ppl_bsvm in format 1, whose fit.pkl is a "
            "pickle that runs code when loaded; this version does not open it. Re-create the "
            "fit with ppl_bsvm.fit on the same data and options and save it again (its "
            "posterior stays readable with xarray.open_datatree('posterior.nc'))"
        )
    if meta["format"] not in _READABLE:
        raise ValueError(
            f"{str(path)!r} was saved in format {meta['format']}; this ppl_bsvm reads formats "
            f"{', '.join(map(str, _READABLE))}"
        )
    _store.check_files(path, meta)
    files = _store.files_of(meta)
    now = _versions()
    changed = {k: (meta.get(k), v) for k, v in now.items() if meta.get(k) != v}
    if changed:
        warnings.warn(
            f"{str(path)!r} was saved with other versions ("
            + ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items())
            + "); if loading fails, read the posterior with xarray.open_datatree",
            UserWarning,
            stacklevel=2,
        )
    from ._serial import from_bytes
    from .api import _load_engines

    _load_engines()  # the engines' modules register the types a fit may hold
    fields, dropped = from_bytes((path / files["fields"]).read_bytes(),
                                 (path / files["arrays"]).read_bytes(),
                                 optional=("state", "checkpoint"))
    if dropped:
        warnings.warn(
            f"{str(path)!r}: the engine's final state was saved by another version of "
            f"ppl_bsvm ({'; '.join(dropped.values())}) and is left out: the fit predicts as "
            "saved, with its posterior and trace, but cannot be resumed",
            UserWarning,
            stacklevel=2,
        )
    names = {f.name for f in dataclasses.fields(Fit)} - {"idata"}
    if meta["format"] < 4:
        fields = {**_ADDED_FIELDS, **fields}
    if set(fields) != names:
        raise ValueError(f"{str(path)!r}: malformed {files['fields']} (fields "
                         f"{sorted(set(fields) ^ names)} missing or unknown)")
    with xr.open_datatree(path / files["posterior"], engine=_NETCDF_ENGINE) as tree:
        idata = tree.load()
    return Fit(idata=idata, **fields)
