"""``report``: a Markdown report (tables and figures) comparing fits, written to a folder."""

from __future__ import annotations

import datetime as _dt
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..result import Fit
from . import plots
from .table import POSTERIOR_METRICS, PREDICTIVE_METRICS, compare, has_draws

__all__ = ["report", "write_report", "markdown_table", "fits_table", "headline"]


def _fmt(value) -> str:
    if isinstance(value, str):
        return value
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    if math.isinf(value):
        return "inf"
    if value != 0 and (abs(value) >= 1e4 or abs(value) < 1e-3):
        return f"{value:.2e}"
    return f"{value:.3f}"


def markdown_table(df: pd.DataFrame, index: bool = False) -> str:
    """A GitHub-flavoured Markdown table of ``df`` (numbers to 3 decimals, NaN blank)."""
    if index:
        df = df.reset_index()
    header = "| " + " | ".join(str(c) for c in df.columns) + " |"
    rule = "|" + "|".join(" --- " for _ in df.columns) + "|"
    rows = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def fits_table(fits: dict[str, Fit]) -> pd.DataFrame:
    """Method, model, wall time, stop reason and iterations of each fit."""
    rows = []
    for name, fit in fits.items():
        rows.append({
            "fit": name,
            "method": fit.method,
            "model": fit.model,
            "time_s": fit.timings.get("total", np.nan),
            "stop_reason": fit.stop_reason or "",
            "iterations": fit.n_iter if fit.n_iter is not None else np.nan,
        })
    return pd.DataFrame(rows)


def headline(table: pd.DataFrame, fits: dict | None = None) -> list[str]:
    """Plain-language sentences: how wide each candidate is and how close its predictions are;
    the noise floor's row first, said to be one. ``fits`` (name -> Fit), when given, tells the
    k-hat verdict whether a fit used linear response."""
    ref = table.attrs.get("reference", "reference")
    floor = table.attrs.get("floor")
    lines = []
    if floor is not None and (table["candidate"] == floor).any():
        lines.append(f"{floor} is the noise floor: the reference sampler against itself. Its "
                     "numbers are what an exact answer scores here; a candidate's distances "
                     "mean something only beyond them.")
    for name, rows in table.groupby("candidate", sort=False):
        if name == ref:
            continue
        for _, row in rows.iterrows():
            note = f" ({row['note']})" if row.get("note") else ""
            if row["variable"] in ("beta", "f", "f_test") and np.isfinite(row["sd_ratio"]):
                what = {"beta": "beta", "f": "f at the training inputs",
                        "f_test": "f at the test inputs"}[row["variable"]]
                lines.append(
                    f"{name}: posterior sd of {what} is {row['sd_ratio']:.2f} x the {ref} sd "
                    f"on average; means are {row['mean_error_sd']:.2f} {ref} sd away "
                    f"(max {row['max_mean_error_sd']:.2f}); its 90% intervals hold "
                    f"{100 * row['coverage_90']:.0f}% of the {ref} draws{note}."
                    + _khat_note(row.get("psis_khat", np.nan), row.get("dim"),
                                 _asked_linear_response((fits or {}).get(name)))
                )
            elif row["variable"] == "predictive":
                lines.append(
                    f"{name}: predictive probabilities differ from the {ref}'s by "
                    f"{row['prob_mad']:.3f} on average{note}."
                )
    return lines


def _asked_linear_response(fit) -> bool | None:
    """Whether ``fit`` asked for the linear-response covariance (None: no fit given)."""
    if fit is None:
        return None
    status = fit.idata.attrs.get("covariance") or ""
    return status == "linear response" or status.startswith("mean-field (")


def _khat_note(khat, dim=None, linear_response=None) -> str:
    """The headline's note on a candidate's own PSIS k-hat (none when it has none): what it
    says depends on the dimension and on what the fit used
    (:func:`ppl_bsvm.inference.vi.psis.khat_verdict`)."""
    if khat is None or not np.isfinite(khat):
        return ""
    from ..inference.vi.psis import khat_verdict

    dim = None if dim is None or dim is pd.NA else int(dim)
    return f" PSIS k-hat {khat:.2f}: {khat_verdict(khat, dim, linear_response)}."


def _save(obj, path: Path) -> None:
    """Save a Figure or PlotCollection and close it, so a long report does not leak figures."""
    import matplotlib.pyplot as plt

    obj.savefig(path, dpi=100, bbox_inches="tight")  # legends placed outside the axes included
    plt.close("all")


def report(
    reference: Fit,
    candidates: dict[str, Fit],
    X_test=None,
    y_test=None,
    *,
    folder,
    title: str = "Posterior comparison",
    description: str = "",
    reference_name: str = "reference",
    num_draws: int = 2000,
    seed: int = 0,
    replicate=None,
    run_seconds: dict | None = None,
) -> Path:
    """Compare fits and write ``report.md``, CSV tables and PNG figures to ``folder``.

    Parameters
    ----------
    reference, candidates, X_test, y_test, reference_name, num_draws, seed, replicate
        As for :func:`ppl_bsvm.compare.compare`.
    folder : str or Path
        Created if needed; existing files of the same names are overwritten.
    title : str
    description : str
        A paragraph placed under the title (data set, split, settings).
    run_seconds : dict, optional
        Each candidate's time once its programs are compiled (a second fit of the same
        shapes), by name: the accuracy-against-time figure then shows it beside the first
        call's time (``Fit.timings["total"]``, compilation included). Without it, the figure
        shows the first call's time only and says so.

    Returns
    -------
    Path of ``report.md``.
    """
    table = compare(reference, candidates, X_test, y_test, reference_name=reference_name,
                    num_draws=num_draws, seed=seed, replicate=replicate)
    return write_report(table, reference, candidates, X_test, y_test, folder=folder,
                        title=title, description=description, num_draws=num_draws, seed=seed,
                        replicate=replicate, run_seconds=run_seconds)


def write_report(
    table: pd.DataFrame,
    reference: Fit,
    candidates: dict[str, Fit],
    X_test=None,
    y_test=None,
    *,
    folder,
    title: str = "Posterior comparison",
    description: str = "",
    num_draws: int = 2000,
    seed: int = 0,
    replicate=None,
    run_seconds: dict | None = None,
) -> Path:
    """Write the report of an existing :func:`compare` table (see :func:`report`;
    ``replicate``, the reference's rerun if the table has one, is listed with the fits)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    reference_name = table.attrs.get("reference", "reference")
    table.to_csv(folder / "comparison.csv", index=False)
    diag = table.attrs["diagnostics"]
    diag.to_csv(folder / "reference_diagnostics.csv")
    fits = {reference_name: reference, **candidates}
    listed = dict(fits)
    if isinstance(replicate, Fit):
        listed[table.attrs.get("floor") or f"{reference_name} (rerun)"] = replicate

    lines = [f"# {title}", ""]
    if description:
        lines += [description, ""]
    lines += [f"Generated by `ppl_bsvm.report` on {_dt.date.today().isoformat()}.", ""]
    lines += ["## Fits", "", markdown_table(fits_table(listed)), ""]
    lines += ["## Summary", ""] + [f"- {s}" for s in headline(table, fits)] + [""]

    post = table[table["variable"] != "predictive"]
    if len(post):
        lines += ["## Posterior distances to the reference", "",
                  markdown_table(post[["candidate", "variable", "dim", *POSTERIOR_METRICS,
                                       *_notes(post)]]), "",
                  *POSTERIOR_LEGEND, ""]
    pred = table[table["variable"] == "predictive"]
    if len(pred):
        lines += ["## Predictions on the test data", "",
                  markdown_table(pred[["candidate", *PREDICTIVE_METRICS, *_notes(pred)]]), "",
                  "`prob_mad`: mean |P(y=+1) - reference P(y=+1)|; `error`: test error rate at "
                  "P = 0.5; `brier`: Brier score; `nlpd`: negative log predictive probability "
                  "(mean over test points); `auc`: area under the ROC curve; `ece`: expected "
                  "calibration error (10 bins).", ""]
    if len(diag):
        lines += [f"## Diagnostics of the reference ({reference.method})", "",
                  markdown_table(diag, index=True), ""]

    figures = _figures(fits, reference_name, table, X_test, y_test, folder, num_draws, seed,
                       run_seconds)
    if figures:
        lines += ["## Figures", ""]
        for caption, file in figures:
            lines += [f"### {caption}", "", f"![{caption}]({file})", ""]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path


POSTERIOR_LEGEND = (
    "Every column is computed the same way for every row of a variable "
    "(`ppl_bsvm.compare.POSTERIOR_METRICS`):",
    "",
    "- `dim`: coordinates of the variable (`beta`: coefficients, `f`: training points, "
    "`f_test`: test points).",
    "- `mean_error_sd`, `max_mean_error_sd`: |candidate mean - reference mean| in reference "
    "sds, mean and max over coordinates.",
    "- `sd_ratio`: candidate sd / reference sd, mean over coordinates (below 1: too narrow).",
    "- `kl_forward` = KL(reference || candidate), `kl_reverse` = KL(candidate || reference), "
    "in nats: the sums over coordinates of the KLs of Gaussians matched to each coordinate's "
    "draws (a full-covariance fit in hundreds of dimensions would be mostly estimation bias).",
    "- `kl_joint`: KL(reference || candidate) of full-covariance Gaussians on the reference's "
    "10 leading principal axes (the correlations the marginal columns cannot see); blank for "
    "`f_test`, where Gaussian approximations give marginals only.",
    "- `w2_gauss`: 2-Wasserstein distance between the same per-coordinate Gaussians, in "
    "reference sds.",
    "- `energy`: energy distance of the draws in reference sds (for `f_test` the mean of the "
    "coordinates' 1-d energy distances).",
    "- `coverage_50`, `coverage_90`: share of reference draws inside the candidate's central "
    "50% / 90% intervals (ideal 0.5 / 0.9).",
    "- `psis_khat`: the candidate's own PSIS diagnostic against the exact posterior, which "
    "needs no reference (linear VI and SVI).",
    "- `note`: what a row is when it is not an approximation of the reference's posterior: "
    "the noise floor, ECM's pseudo-posterior, a fit with another kernel.",
    "",
    "Each number is estimated from draws: the noise-floor row (the reference sampler against "
    "itself) shows what an exact answer scores; differences below it are noise.",
)
"""The report's explanation of the posterior table, one line per column."""


def _notes(rows: pd.DataFrame) -> list[str]:
    """``["note"]`` when some of ``rows`` carry a note (a pseudo-posterior, no draws)."""
    return ["note"] if (rows["note"] != "").any() else []


def _figures(fits, reference_name, table, X_test, y_test, folder, num_draws, seed,
             run_seconds=None):
    """The report's figures, headline first: ``[(caption, file name)]``."""
    out = []
    reference = fits[reference_name]
    shared = [v for v in ("beta", "f") if v in set(table["variable"])]
    drawn = {k: f for k, f in fits.items() if has_draws(f)}
    candidates = {k: f for k, f in drawn.items() if k != reference_name}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # plotting libraries' own deprecation chatter
        for var in shared:
            if candidates and var in reference.idata.posterior:
                fig = plots.plot_sd_scatter(reference, candidates, var,
                                            reference_name=reference_name)
                _save(fig, folder / f"sd_scatter_{var}.png")
                out.append((f"Posterior sd of each {var} coordinate against {reference_name}",
                            f"sd_scatter_{var}.png"))
        if shared:
            figure = _accuracy_time(fits, reference_name, table, shared[-1], run_seconds)
            if figure is not None:
                _save(figure[0], folder / "accuracy_time.png")
                out.append((figure[1], "accuracy_time.png"))
        for var in shared:
            having = {k: f for k, f in drawn.items() if var in f.idata.posterior}
            pc = plots.plot_marginals(having, var, num_draws=num_draws, seed=seed)
            _save(pc, folder / f"marginals_{var}.png")
            out.append((f"Marginal posteriors of {var}", f"marginals_{var}.png"))
            pc = plots.plot_forest(having, var, num_draws=num_draws, seed=seed)
            _save(pc, folder / f"forest_{var}.png")
            out.append((f"Credible intervals of {var}", f"forest_{var}.png"))
        if X_test is not None:
            p_ref = reference.predict_proba(X_test)
            probas = {k: f.predict_proba(X_test) for k, f in fits.items() if k != reference_name}
            fig = plots.plot_predictive_scatter(p_ref, probas, reference_name=reference_name)
            _save(fig, folder / "predictive_scatter.png")
            out.append(("Predictive probabilities against the reference", "predictive_scatter.png"))
            if y_test is not None:
                y_pm = reference.labels.encode(y_test)
                fig = plots.plot_reliability(y_pm, {reference_name: p_ref, **probas})
                _save(fig, folder / "reliability.png")
                out.append(("Calibration: reliability diagram on the test data",
                            "reliability.png"))
        traced = {k: f for k, f in fits.items() if {"elbo", "objective"} & set(f.trace)}
        if traced:
            fig = plots.plot_objective_traces(traced)
            _save(fig, folder / "objective_traces.png")
            out.append(("Objective traces (ELBO, MAP objective)", "objective_traces.png"))
        if reference.idata.posterior.sizes.get("chain", 1) > 1 and shared:
            pc = plots.plot_mcmc_trace(reference, shared[0], name=reference_name)
            _save(pc, folder / "reference_trace.png")
            out.append((f"Reference sampler traces ({shared[0]})", "reference_trace.png"))
            fig = plots.plot_rank(reference, shared[0], name=reference_name)
            _save(fig, folder / "reference_rank.png")
            out.append((f"Reference sampler rank plots ({shared[0]})", "reference_rank.png"))
    return out


def _accuracy_time(fits, reference_name, table, var, run_seconds):
    """The accuracy-against-time figure of the candidates with a row of ``var`` and its
    caption, or None when there are none. Times: ``run_seconds`` with the first call's
    beside them, else the first call's alone (the caption says which); the reference's is its
    sampling time without compilation where it has one (``timings["mcmc"]``)."""
    rows = set(table.loc[table["variable"] == var, "candidate"])
    names = [k for k in fits if k != reference_name and k in rows and "total" in fits[k].timings]
    if run_seconds:
        names = [k for k in names if k in run_seconds]
    if not names:
        return None
    first = {k: float(fits[k].timings["total"]) for k in names}
    seconds = {k: float(run_seconds[k]) for k in names} if run_seconds else first
    ref = fits[reference_name].timings
    ref_seconds = ref.get("mcmc", ref.get("total"))
    fig = plots.plot_accuracy_time(table, seconds, variable=var,
                                   cold_seconds=first if run_seconds else None,
                                   reference_seconds=None if ref_seconds is None
                                   else float(ref_seconds), reference_name=reference_name)
    caption = (f"Accuracy of {var} against time (filled: a fit whose programs are compiled; "
               "hollow: the first call, compilation included)" if run_seconds else
               f"Accuracy of {var} against time (the first call, compilation included)")
    return fig, caption
