"""The lengthscale learned by the ELBO against a cross-validated grid (Wenzel et al. 2017, Fig. 2).

``python -m benchmarks.wenzel_fig2 [--quick]``

Data: the Waveform generator (``ppl_bsvm.datasets.waveform``), 1000 points, standardised;
10 stratified folds (shuffled, seed 0). Model: S-BSVM (``method="svi"``, 100 k-means inducing
points, every other option at its default).

- **Grid search**: for each lengthscale of a log-spaced grid, S-BSVM with the RBF kernel fixed
  at that lengthscale (variance 1) is fitted on the nine training folds and scored on the
  held-out fold; the validation loss is the mean over folds of the negative log predictive
  density (NLPD; the test error is reported too). Its time is the sum of all those fits.
- **ELBO**: on each training fold, one fit with ``learn_hyperparameters=True`` from the median
  heuristic (the paper's scheme, eq. 12: 10 natural-gradient steps, then one Adam step on the
  log-lengthscale and log-variance), scored on the same held-out fold. The learned lengthscale
  is also refitted at variance 1 and scored, so that it can be read against the grid's curve
  (the grid keeps the variance at 1; the ELBO learns it too).

Times are those of the whole ``fit`` calls, compiled programs reused (one warm-up fit first).

Writes ``reports/wenzel_fig2/``: ``README.md``, ``results.json``, ``wenzel_fig2.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ._common import machine_note, markdown_table

OUT = Path("reports/wenzel_fig2")
N = 1000
FOLDS = 10
M = 100
HYPER_EVERY = 10
"""The engine's default ``hyper_every``: natural-gradient steps per hyperparameter step."""
GRID = tuple(np.round(np.geomspace(0.5, 50.0, 25), 4))


def _data(n: int = N):
    from ppl_bsvm import datasets

    X, y = datasets.waveform(n, seed=1)
    return datasets.standardize_columns(X), y


def _folds(y, folds: int):
    from sklearn.model_selection import StratifiedKFold

    return list(StratifiedKFold(folds, shuffle=True, random_state=0).split(np.zeros(len(y)), y))


def _score(fit, X_val, y_val) -> dict:
    from ppl_bsvm import metrics

    report = metrics.classification_report(y_val, fit.predict_proba(X_val))
    return {"nlpd": report["nlpd"], "error": report["error"], "time_s": fit.timings["total"]}


def _fit(X, y, kernel, **options):
    import ppl_bsvm

    return ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=kernel, num_inducing=M, seed=0,
                        progress_bar=False, **options)


def grid_search(X, y, folds, grid) -> list[dict]:
    """Mean validation NLPD and error over the folds for each fixed lengthscale."""
    from ppl_bsvm.kernels import RBF

    rows = []
    for ell in grid:
        scores = [_score(_fit(X[tr], y[tr], RBF(lengthscale=float(ell))), X[va], y[va])
                  for tr, va in folds]
        rows.append({"lengthscale": float(ell), **_summary(scores)})
        print(f"lengthscale {ell:8.3f}: NLPD {rows[-1]['nlpd']:.4f}, error "
              f"{rows[-1]['error']:.4f}, {rows[-1]['time_s']:.2f} s", file=sys.stderr, flush=True)
    return rows


def elbo_learning(X, y, folds) -> list[dict]:
    """One ELBO-tuned fit per training fold; its lengthscale, scores and path."""
    from ppl_bsvm.kernels import RBF

    rows = []
    for k, (tr, va) in enumerate(folds):
        fit = _fit(X[tr], y[tr], RBF(), learn_hyperparameters=True)
        ell = float(fit.hyperparameters["lengthscale"])
        refit = _fit(X[tr], y[tr], RBF(lengthscale=ell))
        rows.append({
            "fold": k,
            "lengthscale": ell,
            "variance": float(fit.hyperparameters["variance"]),
            "start": float(np.exp(RBF().init_params(X[tr])["log_lengthscale"])),
            "hyper_steps": fit.n_iter // HYPER_EVERY,
            # the trace holds the lengthscale after every step; it changes every HYPER_EVERY
            "path": [float(v) for v in np.ravel(fit.trace["lengthscale"])[HYPER_EVERY - 1::
                                                                          HYPER_EVERY]],
            **_score(fit, X[va], y[va]),
            "at_variance_1": _score(refit, X[va], y[va]),
        })
        print(f"fold {k}: learned lengthscale {ell:.3f} (variance {rows[-1]['variance']:.3f}) "
              f"in {rows[-1]['time_s']:.2f} s, NLPD {rows[-1]['nlpd']:.4f}", file=sys.stderr,
              flush=True)
    return rows


def _summary(scores) -> dict:
    return {
        "nlpd": float(np.mean([s["nlpd"] for s in scores])),
        "nlpd_sd": float(np.std([s["nlpd"] for s in scores], ddof=1)),
        "error": float(np.mean([s["error"] for s in scores])),
        "error_sd": float(np.std([s["error"] for s in scores], ddof=1)),
        "time_s": float(np.sum([s["time_s"] for s in scores])),
    }


def plot(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid, learned = result["grid"], result["learned"]
    ell = [g["lengthscale"] for g in grid]
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for ax, key, name in [(axes[0], "nlpd", "validation NLPD"), (axes[1], "error",
                                                                  "validation error")]:
        mean = np.array([g[key] for g in grid])
        se = np.array([g[f"{key}_sd"] for g in grid]) / np.sqrt(result["folds"])
        ax.semilogx(ell, mean, "k.-", label=f"grid, {result['folds']}-fold CV (variance 1)")
        ax.fill_between(ell, mean - se, mean + se, color="0.85")
        ls = [r["lengthscale"] for r in learned]
        ax.semilogx(ls, [r["at_variance_1"][key] for r in learned], "o", color="C3", mfc="none",
                    label="ELBO's lengthscale per fold, refitted at variance 1")
        ax.semilogx([np.exp(np.mean(np.log(ls)))], [np.mean([r[key] for r in learned])], "o",
                    color="C3", ms=10, label="ELBO (lengthscale and variance), fold mean")
        ax.set(xlabel="RBF lengthscale", ylabel=name)
        ax.legend(fontsize=7)
    for r in learned:
        axes[2].semilogy(np.arange(1, len(r["path"]) + 1), r["path"], color="C3", lw=0.8)
    best = min(grid, key=lambda g: g["nlpd"])["lengthscale"]
    axes[2].axhline(best, color="k", ls="--", label="grid's best NLPD")
    axes[2].set(xlabel="hyperparameter steps", ylabel="lengthscale",
                title="ELBO's lengthscale path, one line per fold")
    axes[2].legend(fontsize=7)
    fig.suptitle(f"S-BSVM on Waveform (n = {result['n']}): ELBO-learned lengthscale against "
                 "the cross-validated grid")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: Path, result, quick: bool, elapsed: float) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    plot(result, out / "wenzel_fig2.png")
    grid, learned = result["grid"], result["learned"]
    best = min(grid, key=lambda g: g["nlpd"])
    best_err = min(grid, key=lambda g: g["error"])
    ls = np.array([r["lengthscale"] for r in learned])
    elbo = _summary(learned)
    refit = _summary([r["at_variance_1"] for r in learned])
    grid_time = sum(g["time_s"] for g in grid)
    rows = [
        ["grid search, best NLPD", f"{best['lengthscale']:.3g}", "1",
         f"{best['nlpd']:.4f} ± {best['nlpd_sd'] / np.sqrt(result['folds']):.4f}",
         f"{best['error']:.4f}", f"{grid_time:.1f} (all {len(grid)} x {result['folds']} fits)"],
        ["grid search, best error", f"{best_err['lengthscale']:.3g}", "1",
         f"{best_err['nlpd']:.4f}", f"{best_err['error']:.4f}", "(the same fits)"],
        ["ELBO (per fold)", f"{np.exp(np.mean(np.log(ls))):.3g} "
         f"({ls.min():.3g} to {ls.max():.3g})",
         f"{np.mean([r['variance'] for r in learned]):.3g}",
         f"{elbo['nlpd']:.4f} ± {elbo['nlpd_sd'] / np.sqrt(len(learned)):.4f}",
         f"{elbo['error']:.4f}", f"{elbo['time_s'] / len(learned):.2f} per fold"],
        ["ELBO's lengthscale at variance 1", "(as above)", "1",
         f"{refit['nlpd']:.4f} ± {refit['nlpd_sd'] / np.sqrt(len(learned)):.4f}",
         f"{refit['error']:.4f}", "-"],
    ]
    text = [
        "# The ELBO's lengthscale against a cross-validated grid (Wenzel et al. 2017, Fig. 2)",
        "",
        "Written by `python -m benchmarks.wenzel_fig2" + (" --quick" if quick else "")
        + f"`. S-BSVM (`svi`, {M} k-means inducing points, defaults otherwise) on the Waveform "
        f"generator, n = {result['n']}, standardised, {result['folds']} stratified folds. "
        "Grid: the RBF kernel fixed at each lengthscale (variance 1). ELBO: "
        "`learn_hyperparameters=True` from the median heuristic (10 natural-gradient steps, "
        "then one Adam step on log-lengthscale and log-variance, paper eq. 12), one fit per "
        "training fold. Losses are means over the held-out folds (± standard error over folds).",
        "",
        f"Machine: {machine_note()}. Total {elapsed / 60:.1f} min.",
        "",
        markdown_table(["", "lengthscale", "variance", "validation NLPD", "validation error",
                        "time [s]"], rows),
        "",
        f"Grid search costs {grid_time / (elbo['time_s'] / len(learned)):.0f} ELBO-tuned fits. "
        f"The ELBO's lengthscale started at the median heuristic "
        f"({np.mean([r['start'] for r in learned]):.3g}) and took "
        f"{int(np.mean([r['hyper_steps'] for r in learned]))} hyperparameter steps on average.",
        "",
        "![validation loss against lengthscale](wenzel_fig2.png)",
        "",
    ]
    (out / "README.md").write_text("\n".join(text))
    return "\n".join(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 folds, 6 grid points, n = 300")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    n, folds, grid = (300, 3, GRID[::5]) if args.quick else (N, FOLDS, GRID)
    out = args.out or (OUT / "quick" if args.quick else OUT)
    start = time.perf_counter()
    X, y = _data(n)
    split = _folds(y, folds)
    _fit(X[split[0][0]], y[split[0][0]], _warm_kernel(), learn_hyperparameters=True)
    _fit(X[split[0][0]], y[split[0][0]], _warm_kernel())
    result = {"n": n, "folds": folds, "learned": elbo_learning(X, y, split),
              "grid": grid_search(X, y, split, grid)}
    print(write_report(out, result, args.quick, time.perf_counter() - start))
    return 0


def _warm_kernel():
    from ppl_bsvm.kernels import RBF

    return RBF(lengthscale=5.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
