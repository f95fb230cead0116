"""S-BSVM from 10^4 to 5 x 10^6 points: time, memory and accuracy (Wenzel et al. 2017, 5.2).

``python -m benchmarks.sbsvm_scaling [--quick] [--sizes 10000 ... 5000000]``

Data: the SUSY-sized generator ``ppl_bsvm.datasets.susy`` (18 features; the paper used the real
SUSY data, 5 million points), training sizes ``--sizes`` and 100,000 held-out points, features
standardised with training statistics. Model: S-BSVM as a user calls it,
``fit(X, y, model="gp", method="svi", num_inducing=64, learn_hyperparameters=True)`` with every
other setting at its default (the large-data path: minibatch size, learning rate, stopping
period and k-means subsample all follow from ``n``).

Each fit runs in a new Python process, twice: first with the persistent compilation cache as
the earlier sizes left it (the programs for this size compiled: the time a user waits the first
time), then again in another new process (the programs loaded from the cache). Time is the
whole ``fit`` call as the caller waits for it (wall clock around the call): inducing points, the
SVI run with its hyperparameter steps, the final pass for the marginals of q(f), the ``Fit``'s
assembly. Peak memory is the process's ``ru_maxrss``.

References on the same split, each in its own process: scikit-learn's
``HistGradientBoostingClassifier`` (default settings) and ``LogisticRegression`` (lbfgs), and
X-GPC's published figures on the real SUSY data (Wenzel et al. 2019: 14 s on one core, error
0.21) beside the 5 x 10^6 row.

Writes ``reports/sbsvm_scaling/``: ``README.md``, ``results.json``, ``sbsvm_scaling.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ._common import machine_note, markdown_table, peak_rss_mb

OUT = Path("reports/sbsvm_scaling")
N_TEST = 100_000
M = 64
SIZES = (10_000, 100_000, 1_000_000, 5_000_000)
XGPC = {"n": 5_000_000, "seconds": 14.0, "error": 0.21}
"""X-GPC on the real SUSY data, one core (Wenzel et al. 2019, AAAI, Table 2)."""
TARGETS = {10_000: 1.0, 1_000_000: 4.0, 5_000_000: 14.0}
"""Seconds per fit the issue asks for (5 x 10^6: error at most 0.21 too)."""


def _data(n: int):
    from ppl_bsvm import datasets

    X, y = datasets.susy(n, seed=1)
    X_test, y_test = datasets.susy(N_TEST, seed=2)
    mean, sd = X.mean(axis=0), X.std(axis=0)
    X -= mean
    X /= sd
    X_test -= mean
    X_test /= sd
    return X, y, X_test, y_test


def _first_use(ppl_bsvm) -> None:
    """What a process does once, before its first fit, timed apart from the fit: ``import
    ppl_bsvm`` loads nothing, and the first use of ``fit`` imports JAX, NumPyro, ArviZ and the
    engines; xarray's first array probes the optional array libraries (dask, if installed:
    0.35 s)."""
    import xarray as xr

    from ppl_bsvm import api

    api._load_engines()
    xr.Variable(("x",), np.zeros(1))


def _cpu_seconds() -> float:
    """User and system CPU seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_sbsvm(n: int, options: dict) -> dict:
    """Fit S-BSVM on ``n`` generated points in this process; the measurements."""
    import ppl_bsvm
    from ppl_bsvm import metrics

    t0 = time.perf_counter()
    X, y, X_test, y_test = _data(n)
    t_data = time.perf_counter() - t0
    t_import = time.perf_counter()
    _first_use(ppl_bsvm)
    t_import = time.perf_counter() - t_import
    fit_fn = ppl_bsvm.fit
    cpu_fit = _cpu_seconds()
    t_fit = time.perf_counter()
    fit = fit_fn(X, y, model="gp", method="svi", num_inducing=M, learn_hyperparameters=True,
                 seed=0, **options)
    t_fit = time.perf_counter() - t_fit
    cpu_fit = _cpu_seconds() - cpu_fit
    t_pred = time.perf_counter()
    p = fit.predict_proba(X_test)
    t_pred = time.perf_counter() - t_pred
    report = metrics.classification_report(y_test, p)
    batch = fit.options["batch_size"]
    return {
        "n": n,
        "batch_size": batch,
        "steps": fit.n_iter,
        "epochs": fit.n_iter * batch / n,
        "stop_reason": fit.stop_reason,
        "time_fit_s": t_fit,  # the whole call, as the user waits for it
        "cpu_fit_s": cpu_fit,  # the process's CPU seconds (all threads) during the call
        "time_fit_timings_s": fit.timings["total"],
        "time_first_use_s": t_import,
        "time_inducing_s": fit.timings.get("inducing", float("nan")),
        "time_data_s": t_data,
        "time_predict_s": t_pred,
        "lengthscale": float(fit.hyperparameters["lengthscale"]),
        "variance": float(fit.hyperparameters["variance"]),
        "elbo_per_point": float(fit.idata["approximation"]["elbo"]) / n,
        **{f"test_{k}": v for k, v in report.items()},
        "data_mb": (X.nbytes + y.nbytes) / 2**20,
        "peak_rss_mb": peak_rss_mb(),
    }


def run_references(n: int) -> dict:
    """scikit-learn's gradient boosting and logistic regression on the same split."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    from ppl_bsvm import metrics

    X, y, X_test, y_test = _data(n)
    out = {"n": n}
    for name, model in [("hgb", HistGradientBoostingClassifier(random_state=0)),
                        ("logistic", LogisticRegression(max_iter=1000))]:
        t = time.perf_counter()
        model.fit(X, y)
        out[f"{name}_time_s"] = time.perf_counter() - t
        p = model.predict_proba(X_test)[:, list(model.classes_).index(1.0)]
        report = metrics.classification_report(y_test, p)
        out.update({f"{name}_{k}": v for k, v in report.items()})
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def _child(*args) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.sbsvm_scaling", *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = np.array([r["n"] for r in rows])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].loglog(n, [r["first"]["time_fit_s"] for r in rows], "o-", label="S-BSVM, first run")
    axes[0].loglog(n, [r["warm"]["time_fit_s"] for r in rows], "s-", label="S-BSVM, cache warm")
    if all("reference" in r for r in rows):
        axes[0].loglog(n, [r["reference"]["hgb_time_s"] for r in rows], "^--",
                       label="HistGradientBoosting")
        axes[0].loglog(n, [r["reference"]["logistic_time_s"] for r in rows], "v--",
                       label="logistic regression")
    axes[0].plot([XGPC["n"]], [XGPC["seconds"]], "k*", ms=10, label="X-GPC (published)")
    axes[0].set(xlabel="training points n", ylabel="seconds", title="time")
    axes[0].legend(fontsize=7)
    axes[1].semilogx(n, [r["warm"]["test_error"] for r in rows], "o-", label="S-BSVM")
    if all("reference" in r for r in rows):
        axes[1].semilogx(n, [r["reference"]["hgb_error"] for r in rows], "^--",
                         label="HistGradientBoosting")
        axes[1].semilogx(n, [r["reference"]["logistic_error"] for r in rows], "v--",
                         label="logistic regression")
    axes[1].set(xlabel="training points n", title="test error")
    axes[1].legend(fontsize=7)
    axes[2].loglog(n, [r["warm"]["peak_rss_mb"] for r in rows], "o-", label="peak RSS")
    axes[2].loglog(n, [r["warm"]["data_mb"] for r in rows], "s--", label="X, y (float64)")
    axes[2].set(xlabel="training points n", ylabel="MiB", title="memory")
    axes[2].legend(fontsize=7)
    fig.suptitle(f"S-BSVM on SUSY-sized data (d = 18), m = {M}, default settings")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _targets(rows) -> list[str]:
    lines = []
    for r in rows:
        limit = TARGETS.get(r["n"])
        if limit is None:
            continue
        t = r["warm"]["time_fit_s"]
        ok = t <= limit and (r["n"] != XGPC["n"] or r["warm"]["test_error"] <= XGPC["error"])
        lines.append(f"- n = {r['n']:,}: {t:.2f} s (target {limit:g} s)"
                     + (f", error {r['warm']['test_error']:.3f} (target 0.21)"
                        if r["n"] == XGPC["n"] else "") + (": met" if ok else ": **missed**"))
    return lines


def write_report(out: Path, rows, args, elapsed: float) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1, default=float) + "\n")
    plot(rows, out / "sbsvm_scaling.png")
    header = ["n", "batch", "epochs", "stop", "fit, first run [s]", "fit, cache warm [s]",
              "its CPU [s]", "k-means [s]", "test error", "AUC", "NLPD", "Brier",
              "peak RSS [MiB]", "lengthscale"]
    table = []
    for r in rows:
        w = r["warm"]
        times = sorted(x["time_fit_s"] for x in r.get("warm_runs", [w]))
        spread = f" ({times[0]:.2f}-{times[-1]:.2f})" if len(times) > 1 else ""
        table.append([f"{r['n']:,}", w["batch_size"], f"{w['epochs']:.2f}", w["stop_reason"],
                      f"{r['first']['time_fit_s']:.2f}", f"{w['time_fit_s']:.2f}{spread}",
                      f"{w.get('cpu_fit_s', float('nan')):.2f}",
                      f"{w['time_inducing_s']:.2f}", f"{w['test_error']:.4f}",
                      f"{w['test_auc']:.4f}", f"{w['test_nlpd']:.4f}", f"{w['test_brier']:.4f}",
                      f"{w['peak_rss_mb']:.0f}", f"{w['lengthscale']:.3g}"])
    text = [
        "# S-BSVM scaling: 10^4 to 5 x 10^6 points",
        "",
        "Written by `python -m benchmarks.sbsvm_scaling"
        + (" --quick" if args.quick else "") + "`. SUSY-sized generated data (18 features, "
        f"standardised), {M} inducing points, lengthscale and variance learned by the ELBO, "
        "every other option at its default; test on 100,000 held-out points. Each fit runs in "
        "a new process: first as the earlier sizes left the persistent compilation cache "
        "(this size's programs compiled), then again with them in the cache "
        f"({args.repeats} new process{'es' if args.repeats > 1 else ''}: the median, with "
        "the range). Time is the whole `fit` call as the caller waits for it (inducing points, "
        "SVI, hyperparameters, final marginals); 'its CPU' is the CPU time the process spent in "
        "that call, all threads (on a loaded machine the wall time includes waiting for a "
        "core, the CPU time does not).",
        "",
        f"Machine: {machine_note()}. Total {elapsed / 60:.1f} min.",
        "",
        markdown_table(header, table),
        "",
    ]
    if all("reference" in r for r in rows):
        ref_rows = [[f"{r['n']:,}", f"{r['warm']['time_fit_s']:.2f}",
                     f"{r['warm']['test_error']:.4f}",
                     f"{r['reference']['hgb_time_s']:.2f}", f"{r['reference']['hgb_error']:.4f}",
                     f"{r['reference']['logistic_time_s']:.2f}",
                     f"{r['reference']['logistic_error']:.4f}",
                     f"{XGPC['seconds']:g} s, {XGPC['error']:g} (real SUSY, published)"
                     if r["n"] == XGPC["n"] else ""] for r in rows]
        text += [
            "## Against other classifiers on the same split",
            "",
            markdown_table(["n", "S-BSVM [s]", "S-BSVM error", "HistGradientBoosting [s]",
                            "HGB error", "logistic regression [s]", "LR error", "X-GPC"],
                           ref_rows),
            "",
        ]
    text += ["## Targets", "", *_targets(rows), "",
             "![time, error and memory](sbsvm_scaling.png)", ""]
    (out / "README.md").write_text("\n".join(text))
    return "\n".join(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 10,000 and 100,000")
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--no-references", action="store_true",
                        help="skip scikit-learn's gradient boosting and logistic regression")
    parser.add_argument("--options", default="{}", help="JSON of extra fit options")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=3,
                        help="new processes with the cache warm per size (the median is quoted)")
    parser.add_argument("--single", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--reference", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    if args.single is not None:  # child processes: one measurement, JSON on stdout
        print(json.dumps(run_sbsvm(args.single, options), default=float))
        return 0
    if args.reference is not None:
        print(json.dumps(run_references(args.reference), default=float))
        return 0
    sizes = args.sizes or ([10_000, 100_000] if args.quick else list(SIZES))
    out = args.out or (OUT / "quick" if args.quick else OUT)
    start = time.perf_counter()
    rows = []
    for n in sizes:
        row = {"n": n, "load_before": os.getloadavg()[0]}
        for label in ("first", *["warm"] * args.repeats):
            r = _child("--single", n, "--options", args.options)
            if label == "warm":
                row.setdefault("warm_runs", []).append(r)
            else:
                row[label] = r
            print(f"n = {n:>9,} {label:5s}: fit {r['time_fit_s']:6.2f} s ({r['epochs']:.2f} "
                  f"epochs of batches of {r['batch_size']}, {r['stop_reason']}), k-means "
                  f"{r['time_inducing_s']:.2f} s, error {r['test_error']:.4f}, AUC "
                  f"{r['test_auc']:.4f}, peak RSS {r['peak_rss_mb']:.0f} MiB", flush=True)
        runs = sorted(row["warm_runs"], key=lambda x: x["time_fit_s"])
        row["warm"] = runs[len(runs) // 2]  # the median run
        if not args.no_references:
            row["reference"] = ref = _child("--reference", n)
            print(f"              references: HGB {ref['hgb_time_s']:.1f} s error "
                  f"{ref['hgb_error']:.4f}; logistic {ref['logistic_time_s']:.1f} s error "
                  f"{ref['logistic_error']:.4f}", flush=True)
        row["load_after"] = os.getloadavg()[0]
        rows.append(row)
    print(write_report(out, rows, args, time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
