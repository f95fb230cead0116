"""``compare``: how far each candidate fit is from a reference fit, as one tidy table."""

from __future__ import annotations

import textwrap
import warnings

import numpy as np
import pandas as pd

from .._checks import positive_int
from ..metrics import classification_report
from ..result import Fit
from . import distances

__all__ = [
    "ComparisonTable",
    "COMPACT_COLUMNS",
    "POSTERIOR_METRICS",
    "PREDICTIVE_METRICS",
    "COLUMNS",
    "COMPARED_VARIABLES",
    "NOTES",
    "compare",
    "diagnostics",
    "has_draws",
    "posterior_draws",
]

COMPARED_VARIABLES = ("beta", "f")
"""Posterior variables compared when both fits have them (``u`` is not: inducing values of
different fits live at different locations). ``f_test`` (the latent function at ``X_test``) is
added when ``X_test`` is given."""

POSTERIOR_METRICS = (
    "mean_error_sd",
    "max_mean_error_sd",
    "sd_ratio",
    "kl_forward",
    "kl_reverse",
    "kl_joint",
    "w2_gauss",
    "energy",
    "coverage_50",
    "coverage_90",
    "psis_khat",
)
"""Per (candidate, variable), each computed the same way for every row of a variable:

- ``mean_error_sd``, ``max_mean_error_sd``: mean and max over coordinates of
  ``|mean_c - mean_r| / sd_r``.
- ``sd_ratio``: mean over coordinates of ``sd_c / sd_r`` (below 1: too narrow).
- ``kl_forward`` = KL(reference || candidate) and ``kl_reverse`` = KL(candidate || reference),
  in nats, between the products of the Gaussians moment-matched to each coordinate's draws
  (:func:`~ppl_bsvm.compare.distances.marginal_kl`): the sum over coordinates of their 1-d
  KLs. Its Monte-Carlo bias is about ``dim (1/ESS_c + 1/ESS_r)``; a full-covariance fit's is
  about ``dim^2 / (4 ESS)`` (10 nats in 398 dimensions from 4,000 draws, enough to rank exact
  MCMC below VI), hence per coordinate.
- ``kl_joint``: KL(reference || candidate) between full-covariance Gaussians fitted to the
  draws projected on the reference's :data:`JOINT_DIMENSIONS` leading principal axes (of the
  draws standardised by the reference sd; the same axes for every row): the correlations the
  marginal measures cannot see, where they matter most, at a bias of about
  ``k^2 / (4 ESS)``. NaN for ``f_test``, whose Gaussian predictors give marginals only.
- ``w2_gauss``: 2-Wasserstein distance between the same products of marginal Gaussians, in
  reference sds (``sqrt(sum_j (dm_j^2 + ds_j^2) / sd_rj^2)``).
- ``energy``: energy distance (``2 E|X-Y| - E|X-X'| - E|Y-Y'|``) on the draws, coordinates
  in reference sds; for ``beta`` and ``f`` on the joint draws, for ``f_test`` the mean of the
  coordinates' 1-d energy distances (marginals only, as above).
- ``coverage_50``, ``coverage_90``: mean over coordinates of the fraction of reference draws
  inside the candidate's central 50% / 90% interval (ideal: 0.5 / 0.9).
- ``psis_khat``: the candidate's own PSIS diagnostic against the exact posterior
  (``ppl_bsvm.inference.vi.psis``; linear VI and SVI), which needs no reference (see
  :data:`ppl_bsvm.inference.vi.psis` on what it means in many dimensions).

Every number is an estimate from draws, so the table holds its own noise floor: a row of the
reference sampler against itself (``compare``'s ``replicate``: a second run of it, or by
default half of its chains against the other half), whose values are what an exact answer
scores (:data:`FLOOR_NOTES`).

A candidate fitted with ``linear_response=True`` adds a row ``"<name> (mean-field)"`` beside
its own (draws of the mean-field ``q`` it also stores: jointly where its covariance is stored,
``beta`` and B-BSVM's ``f``; else from the marginals, with no ``kl_joint``), and one whose
``k-hat`` is below 0.7 a row ``"<name> (PSIS)"`` (its draws resampled with the importance
weights)."""

JOINT_DIMENSIONS = 10
"""Principal axes of the reference on which ``kl_joint`` compares full-covariance Gaussians."""

PREDICTIVE_METRICS = ("prob_mad", "error", "brier", "nlpd", "auc", "ece")
"""Per fit, on the test data (variable ``"predictive"``): ``prob_mad`` = mean absolute
difference of P(y = +1 | x*) from the reference's; error rate, Brier score, negative log
predictive probability, AUC and expected calibration error against ``y_test``."""

NOTES = {
    "ecm": "pseudo-posterior: ECM's Gaussian is the conditional of f (or beta) given lambda "
           "at the MAP, a point estimate with a spread that is not meant to match the "
           "posterior's (near margin points it collapses); sd_ratio, KL, w2, energy and "
           "coverage measure that, not an approximation error",
}
"""The ``note`` of a method's posterior rows: what its draws are when they are not an
approximation of the posterior. Fits without posterior draws (Platt, BC-SVM) get
:data:`NO_DRAWS` on their predictive row."""

NO_DRAWS = "no posterior draws: predictive rows only"

FLOOR_NOTES = {
    "rerun": "noise floor: the reference's sampler run again with another seed, measured "
             "like the candidates; an exact answer scores about this",
    "split": "noise floor: half of the reference's chains against the other half (each with "
             "half the draws, so about twice the KL and 1.4 times the mean error and w2 of a "
             "full-length rerun, which compare(..., replicate=fit) measures)",
}
"""The ``note`` of the noise-floor rows (``compare``'s ``replicate``)."""

KERNEL_TOLERANCE = 0.05
"""Relative difference of a kernel hyperparameter beyond which a candidate's row says that
its kernel is not the reference's (a different posterior, not only an approximation)."""

COLUMNS = ("candidate", "variable", "dim", *POSTERIOR_METRICS, *PREDICTIVE_METRICS, "note")
"""The table's columns; ``note`` is empty unless :data:`NOTES` or :data:`NO_DRAWS` applies."""


COMPACT_COLUMNS = ("candidate", "variable", "sd_ratio", "mean_error_sd", "coverage_90",
                   "kl_forward", "prob_mad", "error", "nlpd", "note")
"""The columns :class:`ComparisonTable` displays: per posterior row how wide and where the
candidate is against the reference (sd ratio, mean error in reference sds, 90 % coverage,
KL), per predictive row how far its probabilities are and how good (error, NLPD), and the
note. The table holds all of :data:`COLUMNS`."""


class ComparisonTable(pd.DataFrame):
    """:func:`compare`'s table: a pandas DataFrame with every column of :data:`COLUMNS`, shown
    compactly. Jupyter and ``print`` show :data:`COMPACT_COLUMNS` (those with a number in
    them), each note once below the table with its number in the ``note`` column, where the
    full table is 21 columns, most of them NaN in any row (posterior rows have no predictive
    metrics and the other way round) and the notes are cut off. Everything else is the
    DataFrame's: ``to_csv``, ``to_markdown`` and arithmetic see every column. A selection of
    rows (``table[table.variable == "f"]``) is a table again, displayed the same way; anything
    with other columns is a plain DataFrame."""

    @property
    def _constructor(self):
        return _table_or_frame

    def compact(self) -> tuple[pd.DataFrame, list[str]]:
        """The displayed view: :data:`COMPACT_COLUMNS` that hold a number (as text, to three
        significant digits, blank where the column does not apply), the note column as ``[k]``
        markers, and the notes (``[1]`` first)."""
        keep = [c for c in COMPACT_COLUMNS if c in self.columns and c != "note"
                and (c in ("candidate", "variable") or self[c].notna().any())]
        frame = pd.DataFrame(self[keep])
        for c in keep[2:]:  # three significant digits; a cell that does not apply is blank
            frame[c] = [f"{v:.3g}" if np.isfinite(v) else "" for v in frame[c].astype(float)]
        notes = list(dict.fromkeys(n for n in self.get("note", []) if n))
        if notes:
            frame["note"] = [f"[{notes.index(n) + 1}]" if n else "" for n in self["note"]]
        return frame, notes

    def _footer(self) -> str:
        return (f"{len(self)} rows; {len(self.columns)} columns in all (table.columns; "
                "pandas.DataFrame(table) shows them)")

    def __repr__(self) -> str:
        frame, notes = self.compact()
        with pd.option_context("display.max_columns", None, "display.width", 200):
            text = repr(frame)
        lines = [text, ""]
        lines += [textwrap.fill(f"[{k}] {note}", 100, subsequent_indent="    ")
                  for k, note in enumerate(notes, 1)]
        return "\n".join(lines + [self._footer()])

    def _repr_html_(self) -> str:
        from html import escape

        frame, notes = self.compact()
        with pd.option_context("display.max_columns", None):
            html = frame._repr_html_()
        html += "".join(f"<p style='text-align:left'>[{k}] {escape(note)}</p>"
                        for k, note in enumerate(notes, 1))
        return html + f"<p style='text-align:left'><i>{escape(self._footer())}</i></p>"


def _table_or_frame(*args, **kwargs) -> pd.DataFrame:
    """pandas' constructor for what an operation on a :class:`ComparisonTable` returns: a
    table when it has the table's columns (a selection of rows), else a DataFrame."""
    frame = pd.DataFrame(*args, **kwargs)
    return ComparisonTable(frame) if tuple(frame.columns) == COLUMNS else frame


def has_draws(fit: Fit) -> bool:
    """Whether ``fit.idata`` holds a ``posterior`` group of draws (baselines such as Platt
    scaling and BC-SVM have none: only their predictions can be compared)."""
    return "posterior" in fit.idata.children


def posterior_draws(fit: Fit, var: str) -> np.ndarray:
    """Posterior draws of ``var`` pooled over chains, as ``(num_draws, dim)``."""
    da = fit.idata.posterior[var]
    values = np.asarray(da.values, dtype=np.float64)
    return values.reshape(values.shape[0] * values.shape[1], -1)


def _posterior_row(cand: np.ndarray, ref: np.ndarray, *, basis, marginal: bool,
                   max_draws: int, seed: int) -> dict:
    """The :data:`POSTERIOR_METRICS` of one row; ``basis``: the reference's principal axes
    (None: no ``kl_joint``), ``marginal``: the energy distance of the marginals only."""
    z = distances.standardized_mean_error(cand, ref)
    ref_sd = ref.std(0, ddof=1)
    if marginal:
        energy = distances.marginal_energy_distance(cand, ref, scale=ref_sd)
    else:
        energy = distances.energy_distance(cand, ref, scale=ref_sd, max_draws=max_draws,
                                           seed=seed)
    return {
        "dim": ref.shape[1],
        "mean_error_sd": float(np.mean(z)),
        "max_mean_error_sd": float(np.max(z)),
        "sd_ratio": float(np.mean(distances.sd_ratio(cand, ref))),
        "kl_forward": distances.marginal_kl(ref, cand),
        "kl_reverse": distances.marginal_kl(cand, ref),
        "kl_joint": np.nan if basis is None else distances.projected_kl(ref, cand, basis),
        "w2_gauss": distances.marginal_w2(cand, ref, scale=ref_sd),
        "energy": energy,
        "coverage_50": float(np.mean(distances.interval_coverage(cand, ref, 0.5))),
        "coverage_90": float(np.mean(distances.interval_coverage(cand, ref, 0.9))),
    }


class _Measure:
    """Rows against one reference's draws of a variable, with its principal axes computed
    once (the same estimator for every row)."""

    def __init__(self, ref: np.ndarray, *, joint: bool, max_draws: int, seed: int):
        self.ref = ref
        self.basis = distances.principal_basis(ref, JOINT_DIMENSIONS) if joint else None
        self.marginal, self.max_draws, self.seed = not joint, max_draws, seed

    def __call__(self, cand: np.ndarray, ref: np.ndarray | None = None) -> dict:
        return _posterior_row(cand, self.ref if ref is None else ref, basis=self.basis,
                              marginal=self.marginal, max_draws=self.max_draws, seed=self.seed)


def _derived_draws(cand: Fit, var: str, seed: int) -> dict[str, tuple[np.ndarray, bool]]:
    """The rows a fit adds beside its own for ``var`` (:data:`POSTERIOR_METRICS`): suffix ->
    ``(draws (S, dim), joint)``, ``joint`` False where only the marginals are stored (the
    draws are then independent across coordinates, and the row has no ``kl_joint``)."""
    if "approximation" not in cand.idata.children:
        return {}
    a = cand.idata["approximation"]
    rng = np.random.default_rng(seed)
    S = cand.idata.posterior.sizes["draw"] * cand.idata.posterior.sizes["chain"]
    out = {}
    if cand.idata.attrs.get("covariance") == "linear response":
        if var == "beta" and "beta_cov_mean_field" in a:
            out["mean-field"] = (rng.multivariate_normal(
                a["beta_mean"].values, a["beta_cov_mean_field"].values, S), True)
        elif var == "f" and "f_cov_mean_field" in a:
            out["mean-field"] = (rng.multivariate_normal(
                a["f_mean"].values, a["f_cov_mean_field"].values, S, method="eigh"), True)
        elif var == "f" and "f_var_mean_field" in a:
            mean, var_mf = a["f_mean"].values, a["f_var_mean_field"].values
            out["mean-field"] = (mean + np.sqrt(var_mf) * rng.standard_normal((S, mean.size)),
                                 False)
    if var == "beta" and "beta_mean_psis" in a:
        draws = posterior_draws(cand, var)
        w = np.exp(a["psis_log_weights"].values - np.max(a["psis_log_weights"].values))
        out["PSIS"] = (draws[rng.choice(len(draws), size=len(draws), p=w / w.sum())], True)
    return out


def _khat(cand: Fit, var: str) -> float:
    a = cand.idata["approximation"] if "approximation" in cand.idata.children else {}
    return float(a["psis_khat"]) if var == "beta" and "psis_khat" in a else np.nan


def _shared_variables(reference: Fit, cand: Fit, name: str) -> list[str]:
    shared = []
    if not (has_draws(reference) and has_draws(cand)):
        return shared
    for var in COMPARED_VARIABLES:
        if var in reference.idata.posterior and var in cand.idata.posterior:
            r_shape = reference.idata.posterior[var].shape[2:]
            c_shape = cand.idata.posterior[var].shape[2:]
            if r_shape != c_shape:
                raise ValueError(
                    f"candidate {name!r} has {var} of shape {c_shape} but the reference has "
                    f"{r_shape}; were they fitted to the same data (and intercept setting)?"
                )
            shared.append(var)
    return shared


def _predictive_row(p: np.ndarray, p_ref: np.ndarray, y_pm) -> dict:
    row = {"prob_mad": float(np.mean(np.abs(p - p_ref)))}
    if y_pm is not None:
        row.update({k: v for k, v in classification_report(y_pm, p).items()})
    return row


def compare(
    reference: Fit,
    candidates: dict[str, Fit],
    X_test=None,
    y_test=None,
    *,
    reference_name: str = "reference",
    num_draws: int = 2000,
    seed: int = 0,
    replicate=None,
) -> "ComparisonTable":
    """Compare candidate fits with a reference fit (usually MCMC ground truth).

    Parameters
    ----------
    reference : Fit
    candidates : dict name -> Fit
        Fitted to the same training data as the reference (any method or model: only the
        variables both have are compared; a fit without posterior draws, such as Platt
        scaling or BC-SVM, gets predictive rows only, and needs ``X_test``).
    X_test : array-like (n*, d), optional
        Adds the variable ``f_test`` (latent function at ``X_test``) and the predictive rows.
    y_test : array-like (n*,), optional
        Labels for the predictive metrics (the user's labels, as given to ``fit``).
    reference_name : str, default="reference"
        The reference's name in the table's predictive row.
    num_draws : int, default=2000
        Draws of ``f_test`` per fit, and the thinning of the energy distance.
    seed : int, default=0
        Seed of those draws and thinnings (the table is reproducible).
    replicate : Fit, False or None, default=None
        The noise floor's row, ``"<reference_name> (rerun)"``: a second fit of the reference's
        method to the same data with another seed, measured against the reference like a
        candidate (``run_comparison`` makes one for a sampler reference). None: when the
        reference has two or more chains, ``"<reference_name> (split chains)"``, half of its
        chains against the other half (``beta`` and ``f`` only; :data:`FLOOR_NOTES`).
        False: no floor row.

    Returns
    -------
    ComparisonTable
        A pandas DataFrame (displayed compactly: :class:`ComparisonTable`), one row per
        (candidate, variable) with the columns :data:`COLUMNS`: posterior rows
        (``beta``, ``f``, ``f_test``) fill :data:`POSTERIOR_METRICS`, predictive rows
        (variable ``"predictive"``, one per fit including the reference) fill
        :data:`PREDICTIVE_METRICS`; the other cells are NaN. ``note`` says what a row's
        numbers are when they are not what the column names promise: ECM's draws are a
        pseudo-posterior (:data:`NOTES`), a fit without draws has predictive rows only
        (:data:`NO_DRAWS`), a floor row what it is (:data:`FLOOR_NOTES`), and a fit whose
        kernel hyperparameters differ from the reference's by more than
        :data:`KERNEL_TOLERANCE` names them. ``table.attrs["reference"]`` is
        ``reference_name`` and ``table.attrs["diagnostics"]`` the reference's MCMC
        diagnostics (:func:`diagnostics`).
    """
    if not isinstance(reference, Fit):
        raise ValueError(f"reference must be a ppl_bsvm Fit, got {type(reference).__name__}")
    if not isinstance(candidates, dict) or not candidates:
        raise ValueError("candidates must be a non-empty dict of name -> Fit")
    for name, cand in candidates.items():
        if not isinstance(cand, Fit):
            raise ValueError(f"candidate {name!r} is not a Fit but {type(cand).__name__}")
        if reference.labels is not None and cand.labels != reference.labels:
            raise ValueError(
                f"candidate {name!r} maps labels {cand.labels} but the reference {reference.labels}"
            )
    if reference_name in candidates:
        raise ValueError(f"reference_name {reference_name!r} is also a candidate name")
    num_draws = positive_int("num_draws", num_draws, minimum=10)
    if y_test is not None and X_test is None:
        raise ValueError("y_test was given without X_test")
    replicate = _check_replicate(replicate, reference)
    floor_name = f"{reference_name} ({'rerun' if isinstance(replicate, Fit) else 'split chains'})"
    if floor_name in candidates:
        raise ValueError(f"{floor_name!r} is a candidate name and the noise floor's row")

    rows = []
    ref_test = p_ref = y_pm = None
    if X_test is not None:
        ref_test = _latent_draws(reference, X_test, num_draws, seed)
        p_ref = reference.predict_proba(X_test)
        if y_test is not None:
            y_pm = reference.labels.encode(y_test)
            if y_pm.shape != p_ref.shape:
                raise ValueError(f"y_test has {y_pm.size} labels but X_test {p_ref.size} rows")
        rows.append({"candidate": reference_name, "variable": "predictive",
                     **_predictive_row(p_ref, p_ref, y_pm), "note": _note(reference, None)})
    measures = {}

    def measure(var):
        if var not in measures:
            measures[var] = _Measure(posterior_draws(reference, var), joint=True,
                                     max_draws=num_draws, seed=seed)
        return measures[var]

    test_measure = None
    if ref_test is not None:
        test_measure = _Measure(ref_test, joint=False, max_draws=num_draws, seed=seed)
    if replicate is not None:
        rows += _floor_rows(reference, replicate, floor_name, measure, test_measure, X_test,
                            p_ref, y_pm, num_draws, seed)
    for name, cand in candidates.items():
        shared = _shared_variables(reference, cand, name)
        kernel_note = _kernel_note(reference, cand, reference_name)
        for var in shared:
            row = measure(var)(posterior_draws(cand, var))
            rows.append({"candidate": name, "variable": var, **row,
                         "psis_khat": _khat(cand, var), "note": _note(cand, var, kernel_note)})
            for suffix, (draws, joint) in _derived_draws(cand, var, seed).items():
                row = measure(var)(draws)
                if not joint:
                    row["kl_joint"] = np.nan
                rows.append({"candidate": f"{name} ({suffix})", "variable": var, **row,
                             "psis_khat": _khat(cand, var) if suffix == "PSIS" else np.nan,
                             "note": _note(cand, var, kernel_note)})
        if X_test is not None:
            cand_test = _latent_draws(cand, X_test, num_draws, seed + 1)
            if cand_test is not None and ref_test is not None:
                rows.append({"candidate": name, "variable": "f_test", **test_measure(cand_test),
                             "note": _note(cand, "f_test", kernel_note)})
            rows.append({"candidate": name, "variable": "predictive",
                         **_predictive_row(cand.predict_proba(X_test), p_ref, y_pm),
                         "note": _note(cand, None, kernel_note)})
        if not shared and X_test is None:
            reason = ("has no posterior draws" if not has_draws(cand) else
                      "shares no posterior variable with the reference")
            warnings.warn(f"candidate {name!r} {reason} and no X_test was given: nothing to "
                          "compare", stacklevel=2)
    table = ComparisonTable(rows, columns=list(COLUMNS))
    table["note"] = table["note"].fillna("")
    table["dim"] = table["dim"].astype("Int64")
    table.attrs["reference"] = reference_name
    table.attrs["floor"] = floor_name if replicate is not None else None
    table.attrs["diagnostics"] = diagnostics(reference)
    return table


def _check_replicate(replicate, reference: Fit):
    """``compare``'s ``replicate`` resolved: a Fit, ``"split"`` or None (no floor row)."""
    if replicate is False:
        return None
    if replicate is None:
        chains = reference.idata.posterior.sizes.get("chain", 1) if has_draws(reference) else 1
        return "split" if chains >= 2 else None
    if not isinstance(replicate, Fit):
        raise ValueError(f"replicate must be a Fit, None or False, got {type(replicate).__name__}")
    if (replicate.method, replicate.model) != (reference.method, reference.model):
        raise ValueError(
            f"replicate is a {replicate.model}/{replicate.method} fit but the reference a "
            f"{reference.model}/{reference.method} one: the noise floor is the reference's own "
            "method run again with another seed"
        )
    return replicate


def _split_draws(fit: Fit, var: str) -> tuple[np.ndarray, np.ndarray]:
    """Draws of ``var`` of the first half of the chains and of the second (pooled each)."""
    values = np.asarray(fit.idata.posterior[var].values, dtype=np.float64)
    half = values.shape[0] // 2
    first, second = values[:half], values[half:2 * half]
    return (first.reshape(first.shape[0] * first.shape[1], -1),
            second.reshape(second.shape[0] * second.shape[1], -1))


def _floor_rows(reference, replicate, name, measure, test_measure, X_test, p_ref, y_pm,
                num_draws, seed) -> list[dict]:
    """The noise floor's rows (:data:`FLOOR_NOTES`)."""
    rows = []
    kind = "rerun" if isinstance(replicate, Fit) else "split"
    note = FLOOR_NOTES[kind]
    for var in COMPARED_VARIABLES:
        if not (has_draws(reference) and var in reference.idata.posterior):
            continue
        if kind == "split":
            first, second = _split_draws(reference, var)
            row = measure(var)(second, ref=first)
        else:
            if var not in replicate.idata.posterior:
                continue
            _shared_variables(reference, replicate, name)  # the same shapes, or ValueError
            row = measure(var)(posterior_draws(replicate, var))
        rows.append({"candidate": name, "variable": var, **row, "note": note})
    if kind == "rerun" and X_test is not None:
        rerun_test = _latent_draws(replicate, X_test, num_draws, seed + 1)
        if rerun_test is not None and test_measure is not None:
            rows.append({"candidate": name, "variable": "f_test", **test_measure(rerun_test),
                         "note": note})
        rows.append({"candidate": name, "variable": "predictive",
                     **_predictive_row(replicate.predict_proba(X_test), p_ref, y_pm),
                     "note": note})
    return rows


def _kernel_note(reference: Fit, cand: Fit, reference_name: str) -> str:
    """Says which kernel hyperparameters of ``cand`` differ from the reference's by more than
    :data:`KERNEL_TOLERANCE` (learned separately, say): then the two fit different posteriors,
    and the distances measure that too. Empty when they agree or either has none."""
    ours, theirs = cand.hyperparameters, reference.hyperparameters
    if not ours or not theirs or set(ours) != set(theirs):
        return ""
    differ = []
    for key in ours:
        a, b = np.asarray(ours[key], float), np.asarray(theirs[key], float)
        if a.shape != b.shape:
            continue
        if np.any(np.abs(a - b) > KERNEL_TOLERANCE * np.maximum(np.abs(b), 1e-12)):
            fmt = (lambda v: f"{float(v):.3g}") if a.size == 1 else (
                lambda v: np.array2string(v, precision=3))
            differ.append(f"{key} {fmt(a)} vs {fmt(b)}")
    if not differ:
        return ""
    return (f"kernel differs from the {reference_name}'s ({'; '.join(differ)}): another "
            "posterior, not only an approximation error")


def _latent_draws(fit: Fit, X_test, num_draws: int, seed: int):
    """Draws of the latent function at ``X_test``, or None for a method without a latent
    predictive (Platt scaling)."""
    if not hasattr(fit.predictor, "sample_latent"):
        return None
    return fit.sample_latent(X_test, num_draws, seed)


def _note(fit: Fit, var: str | None, extra: str = "") -> str:
    """The ``note`` of ``fit``'s row of ``var`` (None: its predictive row), with ``extra`` (the
    kernel's, :func:`_kernel_note`) appended."""
    if var is None:
        base = "" if has_draws(fit) else NO_DRAWS
    else:
        base = NOTES.get(fit.method, "")
    return "; ".join(part for part in (base, extra) if part)


def diagnostics(fit: Fit, var_names=None) -> pd.DataFrame:
    """MCMC diagnostics per posterior variable, from ArviZ.

    Columns: ``chains``, ``draws`` (per chain), ``rhat_max`` (rank-normalised split R-hat,
    NaN with one chain), ``ess_bulk_min``, ``ess_tail_min``, ``divergences`` (total, NaN when
    the sampler records none). Empty for a fit without posterior draws.
    """
    import arviz as az

    if not has_draws(fit):
        return pd.DataFrame()
    post = fit.idata.posterior
    names = [v for v in (var_names or post.data_vars) if v in post.data_vars]
    chains, draws = post.sizes["chain"], post.sizes["draw"]
    divergences = np.nan
    if "sample_stats" in fit.idata.children and "diverging" in fit.idata.sample_stats:
        divergences = int(np.sum(fit.idata.sample_stats["diverging"].values))
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ArviZ warns about R-hat with one chain
        for var in names:
            rhat = np.asarray(az.rhat(fit.idata, var_names=[var])[var].values) if chains > 1 else np.nan
            ess_b = np.asarray(az.ess(fit.idata, var_names=[var])[var].values)
            ess_t = np.asarray(az.ess(fit.idata, var_names=[var], method="tail")[var].values)
            rows.append({
                "variable": var,
                "chains": chains,
                "draws": draws,
                "rhat_max": float(np.nanmax(rhat)) if chains > 1 else np.nan,
                "ess_bulk_min": float(np.nanmin(ess_b)),
                "ess_tail_min": float(np.nanmin(ess_t)),
                "divergences": divergences,
            })
    return pd.DataFrame(rows).set_index("variable") if rows else pd.DataFrame()
