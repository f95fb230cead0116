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


def headline(table: pd.DataFrame) -> list[str]:
    """Plain-language sentences: how wide each candidate is and how close its predictions are."""
    ref = table.attrs.get("reference", "reference")
    lines = []
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
                    + _khat_note(row.get("psis_khat", np.nan))
                )
            elif row["variable"] == "predictive":
                lines.append(
                    f"{name}: predictive probabilities differ from the {ref}'s by "
                    f"{row['prob_mad']:.3f} on average{note}."
                )
    return lines


def _khat_note(khat) -> str:
    """The headline's note on a candidate's own PSIS k-hat (none when it has none)."""
    if khat is None or not np.isfinite(khat):
        return ""
    verdict = "its uncertainty can be trusted without a reference" if khat < 0.7 else (
        "it is far from the exact posterior by its own diagnostic")
    return f" PSIS k-hat {khat:.2f}: {verdict}."


def _save(obj, path: Path) -> None:
    """Save a Figure or PlotCollection and close it, so a long report does not leak figures."""
    import matplotlib.pyplot as plt

    obj.savefig(path, dpi=80)
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
) -> Path:
    """Compare fits and write ``report.md``, CSV tables and PNG figures to ``folder``.

    Parameters
    ----------
    reference, candidates, X_test, y_test, reference_name, num_draws, seed
        As for :func:`ppl_bsvm.compare.compare`.
    folder : str or Path
        Created if needed; existing files of the same names are overwritten.
    title : str
    description : str
        A paragraph placed under the title (data set, split, settings).

    Returns
    -------
    Path of ``report.md``.
    """
    table = compare(reference, candidates, X_test, y_test, reference_name=reference_name,
                    num_draws=num_draws, seed=seed)
    return write_report(table, reference, candidates, X_test, y_test, folder=folder,
                        title=title, description=description, num_draws=num_draws, seed=seed)


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
) -> Path:
    """Write the report of an existing :func:`compare` table (see :func:`report`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    reference_name = table.attrs.get("reference", "reference")
    table.to_csv(folder / "comparison.csv", index=False)
    diag = table.attrs["diagnostics"]
    diag.to_csv(folder / "reference_diagnostics.csv")
    fits = {reference_name: reference, **candidates}

    lines = [f"# {title}", ""]
    if description:
        lines += [description, ""]
    lines += [f"Generated by `ppl_bsvm.report` on {_dt.date.today().isoformat()}.", ""]
    lines += ["## Fits", "", markdown_table(fits_table(fits)), ""]
    lines += ["## Summary", ""] + [f"- {s}" for s in headline(table)] + [""]

    post = table[table["variable"] != "predictive"]
    if len(post):
        lines += ["## Posterior distances to the reference", "",
                  markdown_table(post[["candidate", "variable", "dim", *POSTERIOR_METRICS,
                                       *_notes(post)]]), "",
                  "`mean_error_sd`: |mean difference| in reference sds (mean, max over "
                  "coordinates); `sd_ratio`: candidate sd / reference sd; `kl_forward` = "
                  "KL(reference || candidate), `kl_reverse` = KL(candidate || reference) and "
                  "`w2_gauss` between Gaussian fits; `energy`: energy distance in reference-sd "
                  "units; `coverage_50/90`: share of reference draws inside the candidate's "
                  "central 50/90% intervals.", ""]
    pred = table[table["variable"] == "predictive"]
    if len(pred):
        lines += ["## Predictions on the test data", "",
                  markdown_table(pred[["candidate", *PREDICTIVE_METRICS, *_notes(pred)]]), "",
                  "`prob_mad`: mean |P(y=+1) - reference P(y=+1)|; `nlpd`: negative log "
                  "predictive probability; `ece`: expected calibration error (10 bins).", ""]
    if len(diag):
        lines += [f"## Diagnostics of the reference ({reference.method})", "",
                  markdown_table(diag, index=True), ""]

    figures = _figures(fits, reference_name, table, X_test, y_test, folder, num_draws, seed)
    if figures:
        lines += ["## Figures", ""]
        for caption, file in figures:
            lines += [f"### {caption}", "", f"![{caption}]({file})", ""]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path


def _notes(rows: pd.DataFrame) -> list[str]:
    """``["note"]`` when some of ``rows`` carry a note (a pseudo-posterior, no draws)."""
    return ["note"] if (rows["note"] != "").any() else []


def _figures(fits, reference_name, table, X_test, y_test, folder, num_draws, seed):
    out = []
    reference = fits[reference_name]
    shared = [v for v in ("beta", "f") if v in set(table["variable"])]
    drawn = {k: f for k, f in fits.items() if has_draws(f)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # plotting libraries' own deprecation chatter
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
                out.append(("Reliability diagram", "reliability.png"))
        traced = {k: f for k, f in fits.items() if {"elbo", "objective"} & set(f.trace)}
        if traced:
            fig = plots.plot_objective_traces(traced)
            _save(fig, folder / "objective_traces.png")
            out.append(("Objective traces (ELBO, MAP objective)", "objective_traces.png"))
        if reference.idata.posterior.sizes.get("chain", 1) > 1 and shared:
            pc = plots.plot_mcmc_trace(reference, shared[0], name=reference_name)
            _save(pc, folder / "reference_trace.png")
            out.append((f"Reference sampler traces ({shared[0]})", "reference_trace.png"))
    return out
