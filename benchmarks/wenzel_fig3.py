"""Error and time against the number of inducing points, k-means against random selection
(Wenzel et al. 2017, Fig. 3).

``python -m benchmarks.wenzel_fig3 [--quick]``

Data: optdigits "3 vs 5" (``ppl_bsvm.datasets.load("optdigits")``: 1130 points, 64 features,
standardised), the offline stand-in for the paper's USPS 3 vs 5 (1350 points, 256 features).
Model: S-BSVM (``method="svi"``) with the RBF kernel fixed at the median heuristic of the whole
data set (so that every fit uses the same kernel) and every other option at its default, for
``num_inducing`` in a doubling series and ``inducing`` = ``"kmeans"`` (k-means++ seeding) or
``"random"`` (a random subset of the training inputs). 10 stratified folds (shuffled, seed
0): the mean and standard deviation over folds of the held-out error and of the time of the
whole ``fit`` call (inducing points included; compiled programs reused, one warm-up fit per
size first).

Writes ``reports/wenzel_fig3/``: ``README.md``, ``results.json``, ``wenzel_fig3.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ._common import machine_note, markdown_table

OUT = Path("reports/wenzel_fig3")
FOLDS = 10
SIZES = (2, 4, 8, 16, 32, 64, 128, 256)
SELECTIONS = ("kmeans", "random")


def _data():
    from ppl_bsvm import datasets

    return datasets.load("optdigits", standardize=True)


def run(sizes, folds: int) -> list[dict]:
    """One row per (selection, m): fold means and standard deviations."""
    import ppl_bsvm
    from ppl_bsvm import metrics
    from ppl_bsvm.kernels import RBF, median_distance
    from sklearn.model_selection import StratifiedKFold

    X, y = _data()
    kernel = RBF(lengthscale=float(median_distance(X)))
    split = list(StratifiedKFold(folds, shuffle=True, random_state=0).split(X, y))
    rows = []
    for m in sizes:
        tr = split[0][0]
        ppl_bsvm.fit(X[tr], y[tr], model="gp", method="svi", kernel=kernel, num_inducing=m,
                     seed=0, progress_bar=False)  # compile this size's programs
        for selection in SELECTIONS:
            errors, times, nlpds = [], [], []
            for k, (tr, va) in enumerate(split):
                fit = ppl_bsvm.fit(X[tr], y[tr], model="gp", method="svi", kernel=kernel,
                                   num_inducing=m, inducing=selection, seed=k,
                                   progress_bar=False)
                report = metrics.classification_report(y[va], fit.predict_proba(X[va]))
                errors.append(report["error"])
                nlpds.append(report["nlpd"])
                times.append(fit.timings["total"])
            rows.append({
                "m": m, "selection": selection,
                "error": float(np.mean(errors)), "error_sd": float(np.std(errors, ddof=1)),
                "nlpd": float(np.mean(nlpds)), "nlpd_sd": float(np.std(nlpds, ddof=1)),
                "time_s": float(np.mean(times)), "time_sd": float(np.std(times, ddof=1)),
                "errors": errors, "times": times,
            })
            print(f"m = {m:4d} {selection:7s}: error {rows[-1]['error']:.4f} ± "
                  f"{rows[-1]['error_sd']:.4f}, {rows[-1]['time_s']:.3f} s", file=sys.stderr,
                  flush=True)
    return rows


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, selection in enumerate(SELECTIONS):
        sel = [r for r in rows if r["selection"] == selection]
        m = np.array([r["m"] for r in sel])
        for ax, key in [(axes[0], "error"), (axes[1], "time_s")]:
            mean = np.array([r[key] for r in sel])
            sd = np.array([r["error_sd" if key == "error" else "time_sd"] for r in sel])
            ax.errorbar(m * (1.0 + 0.04 * i), mean, yerr=sd, fmt="o-", capsize=3,
                        color=f"C{i}", label="k-means" if selection == "kmeans" else selection)
    axes[0].set(xscale="log", xlabel="inducing points m", ylabel="held-out error")
    axes[1].set(xscale="log", yscale="log", xlabel="inducing points m",
                ylabel="training time [s]")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle("S-BSVM on optdigits 3 vs 5: mean ± sd over 10 folds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: Path, rows, folds: int, quick: bool, elapsed: float) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1, default=float) + "\n")
    plot(rows, out / "wenzel_fig3.png")
    by = {(r["m"], r["selection"]): r for r in rows}
    sizes = sorted({r["m"] for r in rows})
    table = []
    for m in sizes:
        k, r = by[(m, "kmeans")], by[(m, "random")]
        table.append([m, f"{k['error']:.4f} ± {k['error_sd']:.4f}",
                      f"{r['error']:.4f} ± {r['error_sd']:.4f}",
                      f"{k['time_s']:.3f} ± {k['time_sd']:.3f}",
                      f"{r['time_s']:.3f} ± {r['time_sd']:.3f}"])
    text = [
        "# Inducing points: number and selection (Wenzel et al. 2017, Fig. 3)",
        "",
        "Written by `python -m benchmarks.wenzel_fig3" + (" --quick" if quick else "")
        + "`. S-BSVM (`svi`, defaults otherwise) on optdigits 3 vs 5 (1130 points, 64 "
        "features, standardised; the stand-in for the paper's USPS 3 vs 5), RBF kernel fixed "
        f"at the median heuristic, {folds} stratified folds; mean ± sd over folds. Time is the "
        "whole `fit` call, inducing points included.",
        "",
        f"Machine: {machine_note()}. Total {elapsed / 60:.1f} min.",
        "",
        markdown_table(["m", "error, k-means", "error, random", "time, k-means [s]",
                        "time, random [s]"], table),
        "",
        "![error and time against the number of inducing points](wenzel_fig3.png)",
        "",
    ]
    (out / "README.md").write_text("\n".join(text))
    return "\n".join(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 folds, m = 4, 16, 64")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes, folds = ((4, 16, 64), 3) if args.quick else (SIZES, FOLDS)
    out = args.out or (OUT / "quick" if args.quick else OUT)
    start = time.perf_counter()
    rows = run(sizes, folds)
    print(write_report(out, rows, folds, args.quick, time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
