"""``compare``: how far each candidate fit is from a reference fit, as one tidy table."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from .._checks import positive_int
from ..metrics import classification_report
from ..result import Fit
from . import distances

__all__ = [
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
    "w2_gauss",
    "energy",
    "coverage_50",
    "coverage_90",
    "gauss_fit",
    "psis_khat",
)
"""Per (candidate, variable):

- ``mean_error_sd``, ``max_mean_error_sd``: mean and max over coordinates of
  ``|mean_c - mean_r| / sd_r``.
- ``sd_ratio``: mean over coordinates of ``sd_c / sd_r`` (below 1: too narrow).
- ``kl_forward`` = KL(reference || candidate) and ``kl_reverse`` = KL(candidate || reference)
  between Gaussians moment-matched to the draws; ``w2_gauss``: their 2-Wasserstein distance.
- ``energy``: energy distance on the draws, coordinates scaled by the reference sd.
- ``coverage_50``, ``coverage_90``: mean over coordinates of the fraction of reference draws
  inside the candidate's central 50% / 90% interval (ideal: 0.5 / 0.9).
- ``gauss_fit``: ``"joint"`` (full covariance) or ``"diagonal"`` (product of marginals: used
  when there are fewer than 5 draws per dimension, and always for ``f_test``, whose Gaussian
  predictors expose marginals only).
- ``psis_khat``: the candidate's own PSIS diagnostic against the exact posterior
  (``ppl_bsvm.inference.vi.psis``; linear VI and SVI), which needs no reference: below 0.7
  its uncertainty can be trusted after importance weighting.

A candidate fitted with ``linear_response=True`` adds a row ``"<name> (mean-field)"`` beside
its own (draws of the mean-field ``q`` it also stores), and one whose ``k-hat`` is below 0.7 a
row ``"<name> (PSIS)"`` (its draws resampled with the importance weights)."""

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

COLUMNS = ("candidate", "variable", "dim", *POSTERIOR_METRICS, *PREDICTIVE_METRICS, "note")
"""The table's columns; ``note`` is empty unless :data:`NOTES` or :data:`NO_DRAWS` applies."""


def has_draws(fit: Fit) -> bool:
    """Whether ``fit.idata`` holds a ``posterior`` group of draws (baselines such as Platt
    scaling and BC-SVM have none: only their predictions can be compared)."""
    return "posterior" in fit.idata.children


def posterior_draws(fit: Fit, var: str) -> np.ndarray:
    """Posterior draws of ``var`` pooled over chains, as ``(num_draws, dim)``."""
    da = fit.idata.posterior[var]
    values = np.asarray(da.values, dtype=np.float64)
    return values.reshape(values.shape[0] * values.shape[1], -1)


def _posterior_row(cand: np.ndarray, ref: np.ndarray, *, diagonal: bool, max_draws: int,
                   seed: int) -> dict:
    dim = ref.shape[1]
    z = distances.standardized_mean_error(cand, ref)
    ref_sd = ref.std(0, ddof=1)
    diagonal = diagonal or min(cand.shape[0], ref.shape[0]) < 5 * dim
    mc, Sc = distances.gaussian_fit(cand, diagonal)
    mr, Sr = distances.gaussian_fit(ref, diagonal)
    try:
        kl_f = distances.gaussian_kl(mr, Sr, mc, Sc)
        kl_r = distances.gaussian_kl(mc, Sc, mr, Sr)
    except ValueError:  # a degenerate covariance (point mass): KL is infinite
        kl_f = kl_r = np.inf
    return {
        "dim": dim,
        "mean_error_sd": float(np.mean(z)),
        "max_mean_error_sd": float(np.max(z)),
        "sd_ratio": float(np.mean(distances.sd_ratio(cand, ref))),
        "kl_forward": kl_f,
        "kl_reverse": kl_r,
        "w2_gauss": distances.gaussian_w2(mc, Sc, mr, Sr),
        "energy": distances.energy_distance(cand, ref, scale=ref_sd, max_draws=max_draws,
                                            seed=seed),
        "coverage_50": float(np.mean(distances.interval_coverage(cand, ref, 0.5))),
        "coverage_90": float(np.mean(distances.interval_coverage(cand, ref, 0.9))),
        "gauss_fit": "diagonal" if diagonal else "joint",
    }


def _derived_draws(cand: Fit, var: str, seed: int) -> dict[str, np.ndarray]:
    """The rows a fit adds beside its own for ``var`` (:data:`POSTERIOR_METRICS`): suffix ->
    draws ``(S, dim)``."""
    if "approximation" not in cand.idata.children:
        return {}
    a = cand.idata["approximation"]
    rng = np.random.default_rng(seed)
    S = cand.idata.posterior.sizes["draw"] * cand.idata.posterior.sizes["chain"]
    out = {}
    if cand.idata.attrs.get("covariance") == "linear response":
        if var == "beta" and "beta_cov_mean_field" in a:
            out["mean-field"] = rng.multivariate_normal(
                a["beta_mean"].values, a["beta_cov_mean_field"].values, S)
        elif var == "f" and "f_var_mean_field" in a:
            mean, var_mf = a["f_mean"].values, a["f_var_mean_field"].values
            out["mean-field"] = mean + np.sqrt(var_mf) * rng.standard_normal((S, mean.size))
    if var == "beta" and "beta_mean_psis" in a:
        draws = posterior_draws(cand, var)
        w = np.exp(a["psis_log_weights"].values - np.max(a["psis_log_weights"].values))
        out["PSIS"] = draws[rng.choice(len(draws), size=len(draws), p=w / w.sum())]
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
) -> pd.DataFrame:
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

    Returns
    -------
    pandas.DataFrame
        One row per (candidate, variable) with the columns :data:`COLUMNS`: posterior rows
        (``beta``, ``f``, ``f_test``) fill :data:`POSTERIOR_METRICS`, predictive rows
        (variable ``"predictive"``, one per fit including the reference) fill
        :data:`PREDICTIVE_METRICS`; the other cells are NaN. ``note`` says what a row's
        numbers are when they are not what the column names promise: ECM's draws are a
        pseudo-posterior (:data:`NOTES`), and a fit without draws has predictive rows only
        (:data:`NO_DRAWS`). ``table.attrs["reference"]`` is
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
    for name, cand in candidates.items():
        shared = _shared_variables(reference, cand, name)
        for var in shared:
            ref_draws = posterior_draws(reference, var)
            row = _posterior_row(posterior_draws(cand, var), ref_draws,
                                 diagonal=False, max_draws=num_draws, seed=seed)
            rows.append({"candidate": name, "variable": var, **row,
                         "psis_khat": _khat(cand, var), "note": _note(cand, var)})
            for suffix, draws in _derived_draws(cand, var, seed).items():
                row = _posterior_row(draws, ref_draws, diagonal=False, max_draws=num_draws,
                                     seed=seed)
                rows.append({"candidate": f"{name} ({suffix})", "variable": var, **row,
                             "psis_khat": _khat(cand, var) if suffix == "PSIS" else np.nan,
                             "note": _note(cand, var)})
        if X_test is not None:
            cand_test = _latent_draws(cand, X_test, num_draws, seed + 1)
            if cand_test is not None and ref_test is not None:
                row = _posterior_row(cand_test, ref_test, diagonal=True, max_draws=num_draws,
                                     seed=seed)
                rows.append({"candidate": name, "variable": "f_test", **row,
                             "note": _note(cand, "f_test")})
            rows.append({"candidate": name, "variable": "predictive",
                         **_predictive_row(cand.predict_proba(X_test), p_ref, y_pm),
                         "note": _note(cand, None)})
        if not shared and X_test is None:
            reason = ("has no posterior draws" if not has_draws(cand) else
                      "shares no posterior variable with the reference")
            warnings.warn(f"candidate {name!r} {reason} and no X_test was given: nothing to "
                          "compare", stacklevel=2)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table["note"] = table["note"].fillna("")
    table["dim"] = table["dim"].astype("Int64")
    table.attrs["reference"] = reference_name
    table.attrs["diagnostics"] = diagnostics(reference)
    return table


def _latent_draws(fit: Fit, X_test, num_draws: int, seed: int):
    """Draws of the latent function at ``X_test``, or None for a method without a latent
    predictive (Platt scaling)."""
    if not hasattr(fit.predictor, "sample_latent"):
        return None
    return fit.sample_latent(X_test, num_draws, seed)


def _note(fit: Fit, var: str | None) -> str:
    """The ``note`` of ``fit``'s row of ``var`` (None: its predictive row)."""
    if var is None:
        return "" if has_draws(fit) else NO_DRAWS
    return NOTES.get(fit.method, "")


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
