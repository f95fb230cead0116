"""The flagship comparison run by ``ppl-bsvm demo`` (and ``make demo``).

On the embedded Heart data (stratified 70/30 split, features standardised with training
statistics):

1. the GP Bayesian SVM's kernel hyperparameters are learned once by B-BSVM's ELBO and then held
   fixed, so that every method below targets the same posterior;
2. GP model: the exact Gibbs sampler (ground truth) against B-BSVM (batch VI), B-BSVM with
   linear response (the covariance correction that repairs mean-field VI's too-narrow sds),
   S-BSVM (inducing-point SVI, with and without linear response), ECM, and the black-box VI
   a NumPyro user runs first: ADVI
   with the full-rank guide (``AutoMultivariateNormal``, the best of NumPyro's autoguides on
   this model in ``reports/ppl_comparison``);
3. linear model: Gibbs against coordinate-ascent VI, VI with linear response and ADVI;

and writes a report for each model plus an index to ``reports/demo/`` (``out`` to change),
headed by the figure of every coordinate's posterior sd under the candidates against Gibbs'
(``sd_scatter.png``).

It is library code, not a benchmark, so that ``ppl-bsvm demo`` works from an installed package;
``python -m benchmarks.demo`` (what ``make demo`` runs) calls :func:`run_demo` too.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .. import datasets, kernels
from ..api import fit
from ..datasets.splits import split_data
from .report import markdown_table, write_report
from .runner import fit_methods
from .table import compare

__all__ = ["GP_METHODS", "LINEAR_METHODS", "VARIANTS", "variant_fits", "run_demo", "settings",
           "learned_kernel", "summary_rows", "index_markdown", "candidate_specs",
           "compiled_seconds"]

GP_METHODS = ("gibbs", "vi", "svi", "ecm")
LINEAR_METHODS = ("gibbs", "vi")


def settings(quick: bool) -> dict:
    """Engine options per (model, method); ``quick`` shortens the samplers for smoke tests."""
    draws, warmup = (300, 150) if quick else (2000, 500)
    gibbs = {"num_samples": draws, "num_warmup": warmup, "num_chains": 4}
    return {
        "gp": {"gibbs": gibbs, "svi": {"num_inducing": 64}},
        "linear": {"gibbs": gibbs},
    }


VARIANTS = {
    "gp": {"vi + LR": ("vi", {"linear_response": True}),
           "svi + LR": ("svi", {"num_inducing": 64, "linear_response": True}),
           "advi (mvn)": ("advi", {"guide": "mvn"})},
    "linear": {"vi + LR": ("vi", {"linear_response": True}),
               "advi (mvn)": ("advi", {"guide": "mvn"})},
}
"""Per model, candidates fitted beside ``GP_METHODS`` / ``LINEAR_METHODS`` under their own
names: (method, options)."""

SD_SCATTER = ("vi", "vi + LR", "svi + LR", "advi (mvn)")
"""The candidates of the demo's headline figure (``sd_scatter.png``)."""

HYPER_MAX_ITER = 2000
"""Sweeps for learning the kernel: on the demo's split B-BSVM's ELBO rule stops at 796 (the
default 500 stopped it 0.003 nats short, with a ConvergenceWarning the demo's user could not
act on)."""


def _fit_specs(split, specs: dict, *, model: str, kernel=None, seed: int = 0) -> dict:
    """``{name: Fit}`` of ``specs`` (``{name: (method, options)}``) on the training data."""
    return {name: fit(split.X_train, split.y_train, model=model, method=method, kernel=kernel,
                      seed=seed, progress_bar=False, **options)
            for name, (method, options) in specs.items()}


def variant_fits(split, *, model: str, kernel=None, seed: int = 0) -> dict:
    """``{name: Fit}`` of :data:`VARIANTS` of ``model``."""
    return _fit_specs(split, VARIANTS[model], model=model, kernel=kernel, seed=seed)


def candidate_specs(model: str, methods, options: dict) -> dict:
    """``{name: (method, options)}`` of every candidate of ``model``: ``methods`` but the
    reference with their ``options``, then :data:`VARIANTS`."""
    return {**{m: (m, options.get(m, {})) for m in methods if m != "gibbs"},
            **VARIANTS[model]}


def compiled_seconds(split, specs: dict, *, model: str, kernel=None, seed: int = 0) -> dict:
    """Each candidate's seconds in a second fit of the same data and options, its programs
    compiled by the first: what a user pays from the second fit of a shape on (the first
    fit's ``timings["total"]`` adds JAX's compilation)."""
    again = _fit_specs(split, specs, model=model, kernel=kernel, seed=seed)
    return {name: float(f.timings["total"]) for name, f in again.items()}


def learned_kernel(split) -> kernels.RBF:
    """RBF hyperparameters maximising B-BSVM's ELBO on the training data (paper eq. 12)."""
    vi = fit(split.X_train, split.y_train, model="gp", method="vi", learn_hyperparameters=True,
             max_iter=HYPER_MAX_ITER)
    hyper = vi.hyperparameters
    return kernels.RBF(lengthscale=float(hyper["lengthscale"]), variance=float(hyper["variance"]))


def _row(table, candidate, variable, metric):
    rows = table[(table["candidate"] == candidate) & (table["variable"] == variable)]
    return float(rows[metric].iloc[0]) if len(rows) else float("nan")


def summary_rows(table, model: str, fits: dict | None = None,
                 run_seconds: dict | None = None) -> list[dict]:
    """One line per candidate: sd ratio and mean error of the posterior, predictive agreement,
    with ``fits`` (name -> Fit) the first fit's seconds (the whole call, compilation
    included) and with ``run_seconds`` a second fit's (:func:`compiled_seconds`)."""
    var = "beta" if model == "linear" else "f"
    out = []
    for name in dict.fromkeys(table["candidate"]):
        # the mean-field row of a linear-response fit repeats the plain fit's, fitted beside
        if name == table.attrs["reference"] or name.endswith(" (mean-field)"):
            continue
        out.append({
            "model": model,
            "candidate": name,
            "variable": var,
            "sd_ratio": _row(table, name, var, "sd_ratio"),
            "mean_error_sd": _row(table, name, var, "mean_error_sd"),
            "coverage_90": _row(table, name, var, "coverage_90"),
            "f_test_sd_ratio": _row(table, name, "f_test", "sd_ratio"),
            "prob_mad": _row(table, name, "predictive", "prob_mad"),
            "brier": _row(table, name, "predictive", "brier"),
            # the noise-floor row (the reference's split chains) is no fit of its own
            **({"seconds": float(fits[name].timings["total"]) if name in fits
                else float("nan")} if fits else {}),
            **({"run_seconds": run_seconds.get(name, float("nan"))} if run_seconds else {}),
        })
    return out


def summary_line(row: dict) -> str:
    """A candidate's printed line: the posterior measures, then the predictive ones and the
    seconds where they apply (the noise-floor row has neither)."""
    text = (f"{row['candidate']:20s} sd ratio {row['sd_ratio']:.2f}, mean error "
            f"{row['mean_error_sd']:.2f} sd, 90% coverage {row['coverage_90']:.2f}")
    if np.isfinite(row["prob_mad"]):
        text += f", |p - p_gibbs| {row['prob_mad']:.3f}, Brier {row['brier']:.3f}"
    if np.isfinite(row.get("run_seconds", np.nan)):
        text += f", {row['run_seconds']:.2f} s ({row['seconds']:.2f} s with compilation)"
    elif np.isfinite(row.get("seconds", np.nan)):
        text += f", {row['seconds']:.2f} s"
    return text


def _sd_scatter_figure(scatter: dict):
    """One panel per model: :func:`ppl_bsvm.compare.plots.plot_sd_scatter` of ``f`` (GP) and
    ``beta`` (linear) against the Gibbs sampler."""
    import matplotlib.pyplot as plt

    from .plots import plot_sd_scatter

    fig, axes = plt.subplots(1, len(scatter), figsize=(5.2 * len(scatter), 5.0), dpi=100)
    for ax, (model, (reference, fits)) in zip(np.atleast_1d(axes), scatter.items()):
        plot_sd_scatter(reference, fits, "f" if model == "gp" else "beta",
                        reference_name="gibbs", ax=ax)
        ax.set_title(f"{model} model: posterior sd of each "
                     f"{'f' if model == 'gp' else 'beta'} coordinate", fontsize=11)
    fig.tight_layout()
    return fig


def _description(model: str, split, kernel) -> str:
    """The paragraph under a model's report title: data, split, kernel and reference."""
    return (
        f"Heart data, {model} model; {len(split.y_train)} training / {len(split.y_test)} "
        "test points (stratified split, seed 0, standardised with training statistics). "
        + (f"RBF kernel (lengthscale {kernel.lengthscale:.3f}, variance "
           f"{kernel.variance:.3f}) learned by B-BSVM's ELBO, then fixed for all methods. "
           if model == "gp" else "beta ~ N(0, I) with an intercept. ")
        + "Reference: the exact Gibbs sampler (4 chains)."
    )


def index_markdown(summary: list[dict], links: list[str], elapsed: float, written_by: str,
                   figure: str | None = None) -> str:
    """The demo's ``README.md``: who wrote it, what the columns mean, one row per candidate
    (:func:`summary_rows`) and a link to each model's report."""
    import pandas as pd

    index = [
        "# ppl_bsvm demo: how far is fast inference from the MCMC truth?",
        "",
        f"Written by {written_by} in {elapsed:.0f} s on this machine.",
        "",
        *([f"![Each coordinate's posterior sd under the candidates against the Gibbs "
           f"sampler's]({figure})", "",
           "Each point is one coordinate (`f` at a training point, or a coefficient of "
           "`beta`): its posterior sd under a candidate against its sd under the exact Gibbs "
           "sampler. Mean-field VI lies below the diagonal (too confident); linear response "
           "(`linear_response=True`) puts it on the diagonal at a small extra cost.", ""]
          if figure else []),
        "Heart data (UCI Statlog; positive class: presence of heart disease). Every candidate "
        "is compared with the exact Gibbs sampler on the same training data and, for the GP "
        "model, the same kernel. `sd_ratio` is the candidate's posterior sd over the Gibbs sd, "
        "averaged over coordinates (below 1: the approximation is too confident); "
        "`mean_error_sd` the distance of the means in Gibbs sds; `coverage_90` the share of "
        "Gibbs draws inside the candidate's 90% intervals; `prob_mad` the mean absolute "
        "difference of the predictive probabilities from Gibbs' on the test points; `seconds` "
        "the first fit call in this process, compilation included (the first fit of an "
        "engine compiles its programs, or loads them from ppl_bsvm's disk cache where an "
        "earlier process compiled them), `run_seconds` a second fit of the same shapes, which "
        "reuses them: what every later fit costs.",
        "",
        markdown_table(pd.DataFrame(summary)),
        "",
        *links,
        "",
    ]
    return "\n".join(index)


def run_demo(out="reports/demo", *, quick: bool = False,
             written_by: str = "`ppl-bsvm demo`") -> Path:
    """Run the demo, print a summary per candidate and return the path of the index.

    ``out`` is the report folder (relative to the working directory), ``quick`` shortens the
    samplers (smoke test), and ``written_by`` names the command in the index's first line, so
    that a report says how to run it again.
    """
    start = time.perf_counter()
    out = Path(out)
    X, y = datasets.load("heart", standardize=False)
    split = split_data(X, y, test_fraction=0.3, seed=0)
    opts = settings(quick)
    info = datasets.describe("heart")
    print(f"Heart: n={info['n']}, d={info['d']}, positive class {info['positive']!r} "
          f"(presence of heart disease); {len(split.y_train)} train / {len(split.y_test)} test")

    kernel = learned_kernel(split)
    print(f"RBF kernel learned by B-BSVM's ELBO: lengthscale {kernel.lengthscale:.3f}, "
          f"variance {kernel.variance:.3f} (held fixed for every GP method)")

    lines, summary, scatter = [], [], {}
    for model, methods, kern in (("gp", GP_METHODS, kernel), ("linear", LINEAR_METHODS, None)):
        fits = fit_methods(split, model=model, methods=methods, kernel=kern, seed=0,
                           options=opts[model])
        reference = fits.pop("gibbs")
        fits.update(variant_fits(split, model=model, kernel=kern, seed=0))
        run_seconds = compiled_seconds(split, candidate_specs(model, methods, opts[model]),
                                       model=model, kernel=kern, seed=0)
        table = compare(reference, fits, split.X_test, split.y_test, reference_name="gibbs")
        path = write_report(table, reference, fits, split.X_test, split.y_test,
                            folder=out / model, title=f"Heart, {model} model: Gibbs vs "
                            + ", ".join(fits), description=_description(model, split, kernel),
                            run_seconds=run_seconds)
        fits["gibbs"] = reference
        rows = summary_rows(table, model, fits, run_seconds)
        summary += rows
        print(f"\n{model} model (reference: gibbs, {reference.timings['total']:.1f} s), "
              f"report {path}")
        for row in rows:
            print("  " + summary_line(row))
        lines.append(f"- [{model} model]({model}/report.md)")
        scatter[model] = (reference, {k: fits[k] for k in SD_SCATTER if k in fits})

    figure = _sd_scatter_figure(scatter)
    figure.savefig(out / "sd_scatter.png", dpi=110, bbox_inches="tight")
    elapsed = time.perf_counter() - start
    (out / "README.md").write_text(index_markdown(summary, lines, elapsed, written_by,
                                                  figure="sd_scatter.png"))
    print(f"\ndone in {elapsed:.1f} s; index {out / 'README.md'}")
    return out / "README.md"
