"""Can the comparison mislead? Issue 30's targets, checked on data no test is tuned to.

    python -m benchmarks.instrument [--quick] [--datasets breast_cancer,digits38,wdbc,heart]
                                    [--out reports/instrument]

Four data sets: scikit-learn's breast cancer (569 x 30) and digits 3 against 8 (357 x 64),
and the bundled ``wdbc`` and ``heart``; each split 70/30 (``split_data``, seed 0, standardised
with training statistics). For each, two models with default options:

- **linear**: the exact Gibbs sampler (the reference), Gibbs again with another seed (the
  noise floor), NUTS, VI and SVI, each mean-field and with linear response, and ECM;
- **gp**: the RBF kernel learned by batch VI's ELBO (B-BSVM, ``learn_hyperparameters=True``),
  then held fixed for Gibbs (reference), Gibbs again, B-BSVM mean-field and with linear
  response, S-BSVM (``method="svi"``) and ECM.

Checked, per data set and model (``checks`` in ``results.json``, a table in the report):

1. the rerun of the reference sampler scores a smaller ``kl_forward``, ``kl_reverse``,
   ``kl_joint`` and ``w2_gauss`` than every variational row (``vi``, ``svi`` and their
   mean-field and PSIS rows) on every variable (``beta`` or ``f``, and ``f_test``);
2. mean-field VI scores larger than VI with linear response on the same measures;
3. ``az.loo`` of every fit with a ``log_likelihood`` group counts every training point, with
   a finite Pareto k for each;
4. ``idata.attrs``' R-hat and bulk ESS of the samplers equal ArviZ's on the sites the user sees
   (to 1 %) and are positive;
5. the stochastic engines converge: default linear SVI's test latents within 0.25 Gibbs sds of
   Gibbs (median over test points), and S-BSVM's within 0.5 batch-VI sds of B-BSVM at the
   learned kernel, or a ``ConvergenceWarning``.

Writes ``README.md``, ``results.json`` and one ``compare`` table per case (CSV).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

import ppl_bsvm
from ppl_bsvm import datasets
from ppl_bsvm.datasets.splits import split_data

from ._common import machine_note, markdown_table

DATASETS = ("breast_cancer", "digits38", "wdbc", "heart")
"""The data sets, in the order of the report."""

MEASURES = ("kl_forward", "kl_reverse", "kl_joint", "w2_gauss")
"""The distances the noise floor must beat (target 1)."""

VARIATIONAL = ("vi", "vi_lr", "svi", "svi_lr")
"""Candidates that are variational approximations of the reference's posterior."""


def load(name: str):
    """``X, y`` of a data set by name (module doc)."""
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        return load_breast_cancer(return_X_y=True)
    if name == "digits38":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        keep = (y == 3) | (y == 8)
        return X[keep], np.where(y[keep] == 8, 1, -1)
    return datasets.load(name, standardize=False)


def _fit(split, record, name, **options):
    """``ppl_bsvm.fit`` on the training split, its wall time and its warnings in ``record``."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = ppl_bsvm.fit(split.X_train, split.y_train, **options)
    record[name] = {
        "seconds": time.perf_counter() - start,
        "stop_reason": fit.stop_reason,
        "n_iter": fit.n_iter,
        "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught
                            if issubclass(w.category, (ppl_bsvm.ConvergenceWarning,
                                                       ppl_bsvm.SlowFitWarning))}),
    }
    return fit


def sampler_options(quick: bool) -> dict:
    """The samplers' draws: the defaults, or short chains for a smoke run."""
    return {"num_samples": 200, "num_warmup": 200} if quick else {}


def fit_case(split, model: str, quick: bool):
    """``(reference, rerun, candidates, record, kernel)`` of one data set and model."""
    record = {}
    draws = sampler_options(quick)
    kernel = None
    common = {"model": model}
    if model == "gp":
        learned = _fit(split, record, "kernel (vi, learned)", model="gp", method="vi",
                       learn_hyperparameters=True)
        hyper = learned.hyperparameters
        kernel = ppl_bsvm.kernels.RBF(lengthscale=float(hyper["lengthscale"]),
                                      variance=float(hyper["variance"]))
        common["kernel"] = kernel
    reference = _fit(split, record, "gibbs", method="gibbs", seed=0, **common, **draws)
    rerun = _fit(split, record, "gibbs (rerun)", method="gibbs", seed=1, **common, **draws)
    candidates = {}
    if model == "linear":
        candidates["nuts"] = _fit(split, record, "nuts", method="nuts", seed=0, **common,
                                  **draws)
    candidates["vi"] = _fit(split, record, "vi", method="vi", **common)
    candidates["vi_lr"] = _fit(split, record, "vi_lr", method="vi", linear_response=True,
                               **common)
    candidates["svi"] = _fit(split, record, "svi", method="svi", seed=0, **common)
    if model == "linear":
        candidates["svi_lr"] = _fit(split, record, "svi_lr", method="svi", seed=0,
                                    linear_response=True, **common)
    candidates["ecm"] = _fit(split, record, "ecm", method="ecm", **common)
    return reference, rerun, candidates, record, kernel


def floor_check(table) -> dict:
    """Target 1 and 2 on a ``compare`` table: per variable, whether the floor row beats every
    variational row on :data:`MEASURES`, and mean-field beats linear response."""
    floor = table.attrs["floor"]
    out = {}
    posterior = table[table["variable"] != "predictive"]
    for var, rows in posterior.groupby("variable", sort=False):
        rows = rows.set_index("candidate")
        variational = [c for c in rows.index
                       if c.split(" ")[0] in VARIATIONAL and c != floor]
        for metric in MEASURES:
            values = rows[metric].astype(float)
            if floor not in rows.index or not np.isfinite(values[floor]):
                continue
            worst = min(variational, key=lambda c: values[c], default=None)
            out[f"{var}.{metric}: floor < every VI"] = bool(
                worst is None or values[floor] < values[worst])
            if "vi" in rows.index and "vi_lr" in rows.index and np.isfinite(values["vi"]):
                out[f"{var}.{metric}: mean-field > linear response"] = bool(
                    values["vi"] > values["vi_lr"])
    return out


def loo_check(fits: dict, n: int) -> dict:
    """Target 3: ``az.loo`` counts every point and gives each a finite Pareto k."""
    import arviz as az

    out = {}
    for name, fit in fits.items():
        if "log_likelihood" not in fit.idata.children:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = az.loo(fit.idata, pointwise=True)
        k = result.pareto_k.values
        out[name] = {"n_data_points": int(result.n_data_points), "nan_k": int(np.isnan(k).sum()),
                     "k_above_0.7": int(np.sum(k > 0.7)), "elpd_loo": float(result.elpd),
                     "ok": bool(result.n_data_points == n and np.all(np.isfinite(k)))}
    return out


def diagnostics_check(fits: dict) -> dict:
    """Target 4: attrs' R-hat and bulk ESS against ArviZ on the posterior the user sees."""
    import arviz as az

    out = {}
    for name, fit in fits.items():
        if "ess_bulk_min" not in fit.idata.attrs:
            continue
        ess = min(float(np.min(np.asarray(az.ess(fit.posterior[v].values))))
                  for v in ("beta", "f") if v in fit.posterior)
        rhat = max(float(np.max(np.asarray(az.rhat(fit.posterior[v].values))))
                   for v in ("beta", "f") if v in fit.posterior)
        attrs = fit.idata.attrs
        out[name] = {"ess_attrs": attrs["ess_bulk_min"], "ess_arviz": ess,
                     "rhat_attrs": attrs["rhat_max"], "rhat_arviz": rhat,
                     "ok": bool(attrs["ess_bulk_min"] > 0
                                and abs(attrs["ess_bulk_min"] / ess - 1) < 0.01
                                and abs(attrs["rhat_max"] / rhat - 1) < 0.01)}
    return out


def latent_distance(fit, yardstick, X_test) -> float:
    """Median over test points of ``|m_fit - m_yardstick| / sd_yardstick`` of the latent."""
    m, _ = fit.predict_latent(X_test)
    m0, v0 = yardstick.predict_latent(X_test)
    return float(np.median(np.abs(m - m0) / np.sqrt(v0)))


def convergence_check(model: str, reference, candidates, record, X_test) -> dict:
    """Target 5 (module doc): the distance and whether the fit warned instead."""
    if model == "linear":
        fit, yardstick, name, limit = candidates["svi"], reference, "gibbs", 0.25
    else:
        fit, yardstick, name, limit = candidates["svi"], candidates["vi"], "vi", 0.5
    distance = latent_distance(fit, yardstick, X_test)
    warned = any("ConvergenceWarning" in w for w in record["svi"]["warnings"])
    return {"svi": {"median_distance_sd": distance, "yardstick": name, "limit": limit,
                    "stop_reason": record["svi"]["stop_reason"], "warned": warned,
                    "ok": bool(distance <= limit or warned)},
            "vi": {"median_distance_sd": latent_distance(candidates["vi"], reference, X_test),
                   "yardstick": "gibbs"}}


def run_case(name: str, model: str, quick: bool, out: Path) -> dict:
    X, y = load(name)
    split = split_data(X, y, 0.3, 0)
    start = time.perf_counter()
    reference, rerun, candidates, record, kernel = fit_case(split, model, quick)
    table = ppl_bsvm.compare(reference, candidates, split.X_test, split.y_test,
                             reference_name="gibbs", replicate=rerun)
    table.to_csv(out / f"compare_{name}_{model}.csv", index=False)
    fits = {"gibbs": reference, "gibbs (rerun)": rerun, **candidates}
    result = {
        "dataset": name, "model": model, "n_train": int(len(split.y_train)),
        "n_test": int(len(split.y_test)), "seconds": time.perf_counter() - start,
        "kernel": None if kernel is None else {"lengthscale": kernel.lengthscale,
                                               "variance": kernel.variance},
        "fits": record,
        "floor": floor_check(table),
        "loo": loo_check(fits, len(split.y_train)),
        "diagnostics": diagnostics_check(fits),
        "convergence": convergence_check(model, reference, candidates, record, split.X_test),
    }
    var = "beta" if model == "linear" else "f"
    keep = table[table["variable"].isin([var, "f_test"])]
    result["table"] = keep[["candidate", "variable", "mean_error_sd", "sd_ratio", "kl_forward",
                            "kl_reverse", "kl_joint", "w2_gauss", "coverage_90",
                            "psis_khat"]].to_dict("records")
    return result


def _passed(results: list[dict]) -> list[list]:
    rows = []
    for r in results:
        floor = r["floor"]
        rows.append([
            r["dataset"], r["model"], r["n_train"],
            f"{sum(floor.values())} / {len(floor)}",
            f"{sum(v['ok'] for v in r['loo'].values())} / {len(r['loo'])}",
            f"{sum(v['ok'] for v in r['diagnostics'].values())} / {len(r['diagnostics'])}",
            f"{r['convergence']['svi']['median_distance_sd']:.3f} "
            f"({r['convergence']['svi']['yardstick']} sds; "
            f"{'warned' if r['convergence']['svi']['warned'] else r['convergence']['svi']['stop_reason']})",
            f"{r['seconds']:.0f}",
        ])
    return rows


def _fmt(v) -> str:
    if isinstance(v, str):
        return v
    if v is None or not np.isfinite(v):
        return "" if v is None or np.isnan(v) else "inf"
    return f"{v:.3g}"


def write_report(results: list[dict], out: Path, elapsed: float, quick: bool) -> None:
    lines = ["# Can the comparison mislead? (issue 30)", "",
             f"`python -m benchmarks.instrument{' --quick' if quick else ''}`, {elapsed:.0f} s. "
             + machine_note() + ".", "",
             "Targets: (1, 2) in every table the reference's rerun scores below every "
             "variational row on kl_forward, kl_reverse, kl_joint and w2_gauss, and mean-field "
             "VI above VI with linear response; (3) az.loo counts every point with a finite "
             "Pareto k; (4) idata.attrs' R-hat and ESS equal ArviZ's to 1 %, positive; (5) "
             "default SVI within 0.25 Gibbs sds of Gibbs (linear) and S-BSVM within 0.5 "
             "batch-VI sds of B-BSVM (GP, at the learned kernel), median over test points, or "
             "a ConvergenceWarning.", "",
             markdown_table(["data", "model", "n", "(1, 2) floor checks", "(3) loo", "(4) ESS/R-hat",
                             "(5) SVI distance", "s"], _passed(results)), ""]
    for r in results:
        lines += [f"## {r['dataset']}, {r['model']} model (n = {r['n_train']}, "
                  f"{r['n_test']} test points)", ""]
        if r["kernel"]:
            lines += [f"RBF kernel learned by B-BSVM: lengthscale {r['kernel']['lengthscale']:.4g}, "
                      f"variance {r['kernel']['variance']:.4g}.", ""]
        header = ["candidate", "variable", "mean_error_sd", "sd_ratio", "kl_forward",
                  "kl_reverse", "kl_joint", "w2_gauss", "coverage_90", "psis_khat"]
        lines += [markdown_table(header, [[_fmt(row[h]) for h in header] for row in r["table"]]),
                  ""]
        fits = [[k, f"{v['seconds']:.2f}", str(v["stop_reason"]), str(v["n_iter"]),
                 "; ".join(v["warnings"]) or "-"] for k, v in r["fits"].items()]
        lines += [markdown_table(["fit", "s", "stop", "iterations", "warnings"], fits), ""]
        failed = [k for k, v in r["floor"].items() if not v]
        lines += [f"Floor checks failed: {', '.join(failed) if failed else 'none'}.", ""]
    (out / "README.md").write_text("\n".join(lines))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short chains (smoke run)")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--models", default="linear,gp")
    parser.add_argument("--out", default="reports/instrument")
    args = parser.parse_args(argv)
    names = [d for d in args.datasets.split(",") if d]
    unknown = set(names) - set(DATASETS)
    if unknown:
        parser.error(f"unknown data sets {sorted(unknown)}; choose from {DATASETS}")
    models = [m for m in args.models.split(",") if m]
    if set(models) - {"linear", "gp"}:
        parser.error("--models takes linear and/or gp")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results = []
    for name in names:
        for model in models:
            result = run_case(name, model, args.quick, out)
            results.append(result)
            print(f"{name} {model}: {result['seconds']:.0f} s; "
                  f"floor {sum(result['floor'].values())}/{len(result['floor'])}, "
                  f"svi {result['convergence']['svi']}", flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    write_report(results, out, time.perf_counter() - start, args.quick)
    print(f"wrote {out / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
