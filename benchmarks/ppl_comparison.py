"""The closed-form engines against the inference a NumPyro user runs: accuracy and time.

``python -m benchmarks.ppl_comparison [--quick] [--problems linear_heart gp_heart ...]``

For each problem every engine runs with its defaults (a second call in the same process is
the time reported; the first call, compilation included, and the call in a new process
beside it) and is measured against
the reference, the longest run of the Gibbs sampler (4 x 10,000 draws; 4 x 500 with
``--quick``): sd ratio per coordinate (median and range), the largest mean error in reference
sds, the 90 % interval's coverage of the reference draws, the 2-Wasserstein distance of the
marginal Gaussians (``compare``'s ``w2_gauss``), the predictive ``|p - p_ref|``, test error
and NLPD on held-out points, PSIS k-hat for the approximations and the smallest (bulk, tail)
ESS per second for the samplers. Problems: linear Heart, a generated linear problem
(1,000 points, 100 features), GP Heart (270 points), GP Banana (400 points) and the sparse GP
on 10^5 points of the ``susy`` generator (m = 64; the samplers are skipped there). Test points:
a random quarter of each problem's points, left out of the fit (Heart: 203 + 67).

Writes ``reports/ppl_comparison/``: ``README.md`` (the tables and the machine), ``results.csv``
and ``accuracy_vs_time.png`` (sd-ratio error against time on a log axis, one panel per
problem).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import ppl_bsvm
from ppl_bsvm import datasets

from ._common import machine_note, markdown_table

OUT = Path("reports/ppl_comparison")

SAMPLERS = ("gibbs", "nuts", "ess", "mclmc")

ENGINES = {
    # name: (method, options)
    "gibbs": ("gibbs", {}),
    "nuts": ("nuts", {}),
    "ess": ("ess", {}),
    "mclmc": ("mclmc", {}),
    "vi": ("vi", {}),
    "vi + LR": ("vi", {"linear_response": True}),
    "svi": ("svi", {}),
    "svi + LR": ("svi", {"linear_response": True}),
    "ecm": ("ecm", {}),
    "advi normal": ("advi", {"guide": "normal"}),
    "advi lowrank": ("advi", {"guide": "lowrank"}),
    "advi mvn": ("advi", {"guide": "mvn"}),
    "advi flow": ("advi", {"guide": "flow"}),
    # the GP's parametrisation: the guide over f itself rather than the whitened f
    "advi normal (f)": ("advi", {"guide": "normal", "whiten": False}),
    "advi mvn (f)": ("advi", {"guide": "mvn", "whiten": False}),
    "pathfinder": ("pathfinder", {}),
}


def _problem(name: str, quick: bool):
    """``(model, X_train, y_train, X_test, y_test, engines)`` of a problem."""
    rng = np.random.default_rng(0)
    if name in ("linear_heart", "gp_heart"):
        X, y = datasets.load("heart", standardize=True)
    elif name == "linear_generated":
        X = rng.normal(size=(250 if quick else 1000, 100))
        w = rng.normal(size=100) / 10
        y = np.where(X @ w + 0.5 * rng.normal(size=len(X)) > 0, 1, -1)
    elif name == "gp_banana":
        X, y = datasets.load("banana", standardize=True)
        keep = rng.choice(len(X), 150 if quick else 533, replace=False)  # 400 + 133 test
        X, y = X[keep], y[keep]
    elif name == "sparse_susy":
        X, y = datasets.load("susy", n=(10**4 if quick else 133_334), seed=0, standardize=True)
    else:
        raise ValueError(f"unknown problem {name!r}")
    test = rng.permutation(len(X))[: len(X) // 4]
    train = np.setdiff1d(np.arange(len(X)), test)
    model = name.split("_")[0].replace("sparse", "sparse_gp")
    names = [e for e in ENGINES if not (model == "sparse_gp" and (ENGINES[e][0] in SAMPLERS
                                                                   or ENGINES[e][0] in
                                                                   ("vi", "ecm", "pathfinder")))]
    if model == "linear":  # no kernel, nothing to whiten
        names = [e for e in names if not e.endswith("(f)")
                 and (e not in ("advi flow",) or not quick)]
    return model, X[train], y[train], X[test], y[test], names


def _fit(X, y, model, method, options, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        fit = ppl_bsvm.fit(X, y, model=model, method=method, seed=seed, progress_bar=False,
                           **options)
        return fit, time.perf_counter() - t0


def _engine(engine: str, quick: bool) -> tuple[str, dict]:
    """``(method, options)`` of an engine; with ``quick`` the samplers' chains shortened."""
    method, options = ENGINES[engine]
    if quick and method in SAMPLERS:
        options = {**options, "num_samples": 200, "num_warmup": 200}
    return method, options


def _new_process_seconds(problem: str, engine: str, quick: bool) -> float:
    """The fit's seconds in a fresh Python process (imports and data loading excluded; JAX's
    persistent compilation cache as the library leaves it, so warm from the runs before):
    what a user pays on re-running a notebook. NaN if the process fails."""
    command = [sys.executable, "-m", "benchmarks.ppl_comparison", "--one", problem, engine]
    if quick:
        command.append("--quick")
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("seconds ")]
    return float(lines[-1].split()[1]) if done.returncode == 0 and lines else float("nan")


def _one(problem: str, engine: str, quick: bool) -> int:
    """``--one``: the fit of ``_new_process_seconds``, its seconds on stdout."""
    model, X, y, *_ = _problem(problem, quick)
    method, options = _engine(engine, quick)
    print(f"seconds {_fit(X, y, model, method, options, seed=1)[1]:.6g}")
    return 0


def _site(fit) -> str:
    return next(s for s in ("beta", "f", "u") if s in fit.posterior)


def _measures(fit, ref, seconds, X_test, y_test) -> dict:
    out = {}
    site = _site(fit)
    p = fit.predict_proba(X_test)
    eps = 1e-12
    out["test_error"] = float(np.mean((p > 0.5) != (y_test > 0)))
    out["nlpd"] = float(-np.mean(np.log(np.where(y_test > 0, p, 1 - p) + eps)))
    if ref is not None:
        out["prob_mad"] = float(np.mean(np.abs(p - ref.predict_proba(X_test))))
        if site in ref.posterior:
            draws = fit.posterior[site].values.reshape(-1, fit.posterior[site].shape[-1])
            truth = ref.posterior[site].values.reshape(-1, ref.posterior[site].shape[-1])
            sd_ref = truth.std(0)
            ratio = draws.std(0) / sd_ref
            lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
            out.update(
                sd_ratio_median=float(np.median(ratio)), sd_ratio_min=float(ratio.min()),
                sd_ratio_max=float(ratio.max()),
                sd_ratio_error=float(np.median(np.abs(np.log(ratio)))),
                max_mean_error_sd=float(np.max(np.abs(draws.mean(0) - truth.mean(0)) / sd_ref)),
                coverage_90=float(np.mean((truth >= lo) & (truth <= hi))),
                w2=float(np.sqrt(np.sum(((draws.mean(0) - truth.mean(0)) ** 2
                                         + (draws.std(0) - sd_ref) ** 2) / sd_ref**2))),
            )
    if "approximation" in fit.idata.children and "psis_khat" in fit.idata["approximation"]:
        out["psis_khat"] = float(fit.idata["approximation"]["psis_khat"])
    attrs = fit.idata.attrs
    if "ess_bulk_min" in attrs:
        ess = min(attrs["ess_bulk_min"], attrs["ess_tail_min"])
        out.update(min_ess=float(ess), min_ess_per_s=float(ess / seconds),
                   rhat_max=float(attrs["rhat_max"]))
    return out


def run_problem(name: str, quick: bool) -> list[dict]:
    model, X, y, Xt, yt, names = _problem(name, quick)
    long = {"num_samples": 500 if quick else 10_000, "num_warmup": 500 if quick else 1000}
    ref = None
    if model != "sparse_gp":
        ref, _ = _fit(X, y, model, "gibbs", long, seed=100)
    rows = []
    for engine in names:
        method, options = _engine(engine, quick)
        try:
            _, first = _fit(X, y, model, method, options, seed=1)
            fit, second = _fit(X, y, model, method, options, seed=2)
        except Exception as error:  # noqa: BLE001 - reported, never hidden
            rows.append({"problem": name, "engine": engine, "error": repr(error)[:200]})
            print(f"{name:18s} {engine:14s} FAILED {error!r}"[:200], flush=True)
            continue
        row = {"problem": name, "engine": engine, "n": len(X), "d": X.shape[1],
               "first_call_s": first, "second_call_s": second,
               "new_process_s": _new_process_seconds(name, engine, quick),
               **_measures(fit, ref, second, Xt, yt)}
        rows.append(row)
        print(f"{name:18s} {engine:14s} {second:8.2f} s  sd ratio "
              f"{row.get('sd_ratio_median', np.nan):.3f} ({row.get('sd_ratio_min', np.nan):.2f}"
              f"-{row.get('sd_ratio_max', np.nan):.2f})  k-hat {row.get('psis_khat', np.nan):.2f}"
              f"  ESS/s {row.get('min_ess_per_s', np.nan):.0f}", flush=True)
    return rows


def _figure(df: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    problems = [p for p in df["problem"].unique() if df.loc[df.problem == p,
                                                            "sd_ratio_error"].notna().any()]
    if not problems:
        return
    cols = min(2, len(problems))
    rows = -(-len(problems) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.8 * rows), dpi=110,
                             squeeze=False)
    for ax in axes.ravel()[len(problems):]:
        ax.set_visible(False)
    for ax, problem in zip(axes.ravel(), problems):
        part = df[(df.problem == problem) & df.sd_ratio_error.notna()]
        for _, row in part.iterrows():
            sampler = ENGINES[row.engine][0] in SAMPLERS
            ax.scatter(row.second_call_s, row.sd_ratio_error, marker="s" if sampler else "o",
                       color="tab:gray" if sampler else "tab:blue")
            ax.annotate(row.engine, (row.second_call_s, row.sd_ratio_error), fontsize=8,
                        xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")  # from a sampler's 0.01 to ECM's point estimate, 7
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("seconds (second call)")
        ax.set_ylabel("median |log(sd / sd_Gibbs)|")
        ax.set_title(problem)
        ax.grid(alpha=0.3)
    fig.suptitle("Accuracy of the posterior sds against time (samplers: squares)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(df: pd.DataFrame, out: Path, args, elapsed: float) -> str:
    columns = ["engine", "second_call_s", "first_call_s", "new_process_s", "sd_ratio_median",
               "sd_ratio_min", "sd_ratio_max", "max_mean_error_sd", "coverage_90", "w2",
               "prob_mad", "test_error", "nlpd", "psis_khat", "min_ess_per_s"]
    parts = [
        "# The closed-form engines against NumPyro's and BlackJAX's inference",
        "",
        f"`python -m benchmarks.ppl_comparison{' --quick' if args.quick else ''} --problems "
        f"{' '.join(args.problems)}` ({elapsed / 60:.1f} min). Reference: the Gibbs sampler, "
        "4 x 10,000 draws (4 x 500 with --quick). Times: a second call in the same process; "
        "the first call in it, with compilation, beside it; and the call in a new Python "
        "process (imports excluded, JAX's persistent compilation cache warm from the runs "
        "before, as on re-running a notebook). sd ratio: candidate sd / reference sd per "
        "coordinate, median (min-max).",
        "",
        f"Machine: {machine_note()}",
        "",
    ]
    for problem, part in df.groupby("problem", sort=False):
        rows = []
        for _, r in part.iterrows():
            if isinstance(r.get("error"), str):
                rows.append([r.engine, "error: " + r.error] + [""] * (len(columns) - 2))
                continue
            rows.append([r.engine] + [("-" if pd.isna(r.get(c)) else f"{r[c]:.3g}")
                                      for c in columns[1:]])
        parts += [f"## {problem}", "", markdown_table(columns, rows), ""]
    text = "\n".join(parts)
    (out / "README.md").write_text(text)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small problems, short chains")
    parser.add_argument("--problems", nargs="+",
                        default=["linear_heart", "linear_generated", "gp_heart", "gp_banana",
                                 "sparse_susy"])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--one", nargs=2, metavar=("PROBLEM", "ENGINE"),
                        help=argparse.SUPPRESS)  # one fit, timed, for _new_process_seconds
    args = parser.parse_args(argv)
    if args.one:
        return _one(*args.one, args.quick)
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for problem in args.problems:
        rows += run_problem(problem, args.quick)
        # after every problem: a crash later (the process, not a fit) keeps what was measured
        pd.DataFrame(rows).to_csv(args.out / "results.csv", index=False)
    df = pd.DataFrame(rows)
    _figure(df, args.out / "accuracy_vs_time.png")
    print(write_report(df, args.out, args, time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
