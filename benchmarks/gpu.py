"""S-BSVM at 5 x 10^6 points and the exact GP Gibbs sampler, on whatever JAX runs on.

``python -m benchmarks.gpu --out reports/gpu/<label> [--budget SECONDS]`` measures, each in a
new Python process (the first-call experience: imports, data, compilation and the run):

- **S-BSVM** as :mod:`benchmarks.sbsvm_scaling` fits it (``--sbsvm-sizes``, default 5 x 10^6
  and 10^6; SUSY-sized generated data, d = 18, m = 64, hyperparameters by the ELBO, every other
  option at its default, 100,000 held-out points): a first process with an empty compilation
  cache, then ``--repeats`` processes with this size's programs in the cache.
- **GP Gibbs** (``fit(model="gp", method="gibbs")`` at its defaults: 4 chains, 1,000 warmup
  and 1,000 kept draws, the half-overrelaxed sweep with line moves) on ``--gibbs-sizes`` points
  of the same generator (default 1,000 to 10,000), RBF kernel at the median-heuristic
  lengthscale: wall time of the whole call, its compilation and sampling parts
  (``Fit.timings``), milliseconds per sweep of the 4 chains, the smallest bulk and tail ESS and
  the largest R-hat over ``f``, and predictions at 500 held-out points.

Each process reports its peak host memory (``ru_maxrss``) and, on a GPU, the device's peak
bytes in use (``Device.memory_stats``). The script stops starting new measurements once
``--budget`` seconds are spent (a device lease is short), and writes ``results.json`` after
every measurement so a run cut short keeps what it measured.

``python -m benchmarks.gpu --report reports/gpu`` writes ``reports/gpu/README.md`` from every
``reports/gpu/*/results.json`` (one column of machines per label).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ._common import markdown_table, peak_rss_mb

SBSVM_SIZES = (5_000_000, 1_000_000)
GIBBS_SIZES = (1_000, 2_000, 5_000, 10_000)
N_TEST_GIBBS = 500


def _device_peak_mb() -> float | None:
    """Peak bytes the default device has held, in MiB (``None`` where JAX keeps no count)."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**20


def environment() -> dict:
    """The JAX backend and devices, versions, cores and the load average."""
    import jax
    import numpyro

    return {
        "backend": jax.default_backend(),
        "devices": [d.device_kind for d in jax.devices()],
        "jax": jax.__version__,
        "numpyro": numpyro.__version__,
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "load": list(os.getloadavg()),
    }


def run_sbsvm(n: int) -> dict:
    """One S-BSVM measurement of :mod:`benchmarks.sbsvm_scaling`, plus the device's peak."""
    from .sbsvm_scaling import run_sbsvm as measure

    out = measure(n, {})
    out["device_peak_mb"] = _device_peak_mb()
    return out


def run_gibbs(n: int, options: dict | None = None) -> dict:
    """GP Gibbs at the engine's defaults on ``n`` generated points, timed as a user waits."""
    import ppl_bsvm
    from ppl_bsvm import datasets

    X, y = datasets.susy(n + N_TEST_GIBBS, seed=3)
    mean, sd = X[:n].mean(axis=0), X[:n].std(axis=0)
    X = (X - mean) / sd
    X_train, y_train, X_test = X[:n], y[:n], X[n:]
    t0 = time.perf_counter()
    fit = ppl_bsvm.fit(X_train, y_train, model="gp", method="gibbs", seed=0,
                       progress_bar=False, **(options or {}))
    wall = time.perf_counter() - t0
    t_pred = time.perf_counter()
    fit.predict_proba(X_test)
    t_pred = time.perf_counter() - t_pred
    attrs = fit.idata.attrs
    options = fit.options
    sweeps = options["num_warmup"] + options["num_samples"]
    stats = fit.idata["sample_stats"]
    cg = float(stats["cg_iters"].mean()) if "cg_iters" in stats else float("nan")
    return {
        "n": n,
        "chains": options["num_chains"],
        "warmup": options["num_warmup"],
        "draws": options["num_samples"],
        "time_fit_s": wall,
        "time_mcmc_s": fit.timings.get("mcmc", float("nan")),
        "time_compile_s": fit.timings.get("compile", float("nan")),
        "ms_per_sweep": 1e3 * fit.timings.get("mcmc", float("nan")) / sweeps,
        "ess_bulk_min": float(attrs.get("ess_bulk_min", float("nan"))),
        "ess_tail_min": float(attrs.get("ess_tail_min", float("nan"))),
        "rhat_max": float(attrs.get("rhat_max", float("nan"))),
        "cg_iters_mean": cg,
        "time_predict_s": t_pred,
        "peak_rss_mb": peak_rss_mb(),
        "device_peak_mb": _device_peak_mb(),
    }


def _child(kind: str, n: int, timeout: float, options: str = "{}") -> dict:
    cmd = [sys.executable, "-m", "benchmarks.gpu", f"--{kind}-child", str(n),
           "--gibbs-options", options]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"n": n, "error": f"stopped after {timeout:.0f} s (the budget)"}
    if proc.returncode != 0:
        return {"n": n, "error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(args) -> dict:
    start = time.perf_counter()
    result = {"environment": environment(), "sbsvm": [], "gibbs": [],
              "budget_s": args.budget, "gibbs_options": json.loads(args.gibbs_options)}
    args.out.mkdir(parents=True, exist_ok=True)

    def left() -> float:
        return args.budget - (time.perf_counter() - start)

    def save() -> None:
        result["elapsed_s"] = time.perf_counter() - start
        (args.out / "results.json").write_text(json.dumps(result, indent=1, default=float))

    def sbsvm(sizes):
        return [("sbsvm", n, label) for n in sizes
                for label in ("first", *["warm"] * args.repeats)]

    # the first S-BSVM size, then the samplers, then the other sizes: what matters most first
    plan = sbsvm(args.sbsvm_sizes[:1]) + [("gibbs", n, "first") for n in args.gibbs_sizes]
    plan += sbsvm(args.sbsvm_sizes[1:])
    for kind, n, label in plan:
        if left() < 20:
            print(f"budget spent: {kind} n = {n:,} not run", flush=True)
            continue
        r = _child(kind, n, left(), args.gibbs_options)
        r["run"] = label
        result[kind].append(r)
        save()
        shown = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                 if k in ("time_fit_s", "time_mcmc_s", "time_compile_s", "ms_per_sweep",
                          "test_error", "ess_bulk_min", "rhat_max", "peak_rss_mb",
                          "device_peak_mb", "stop_reason", "error")}
        print(f"{kind} n = {n:>9,} {label:5s}: {shown}", flush=True)
    return result


def _fmt(value, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and not np.isfinite(value)) \
        else format(value, spec)


def write_report(folder: Path) -> str:
    """``folder/README.md`` from every ``folder/*/results.json``."""
    runs = {p.parent.name: json.loads(p.read_text())
            for p in sorted(folder.glob("*/results.json"))}
    env_rows = [[label, r["environment"]["backend"], ", ".join(sorted(set(
        r["environment"]["devices"]))), r["environment"]["cores"], r["environment"]["jax"],
        " / ".join(f"{x:.2f}" for x in r["environment"]["load"])] for label, r in runs.items()]
    sbsvm_rows, gibbs_rows = [], []
    for label, r in runs.items():
        by_n: dict[int, list] = {}
        for m in r["sbsvm"]:
            by_n.setdefault(m["n"], []).append(m)
        for n, ms in sorted(by_n.items()):
            ok = [m for m in ms if "error" not in m]
            first = [m for m in ok if m["run"] == "first"]
            warm = sorted(m["time_fit_s"] for m in ok if m["run"] == "warm")
            last = ok[-1] if ok else {}
            sbsvm_rows.append([label, f"{n:,}",
                               _fmt(first[0]["time_fit_s"] if first else None, ".2f"),
                               _fmt(float(np.median(warm)) if warm else None, ".2f")
                               + (f" ({warm[0]:.2f}-{warm[-1]:.2f})" if len(warm) > 1 else ""),
                               _fmt(last.get("steps"), "d"), last.get("stop_reason", "-"),
                               _fmt(last.get("test_error"), ".4f"),
                               _fmt(last.get("peak_rss_mb"), ".0f"),
                               _fmt(last.get("device_peak_mb"), ".0f")])
        for m in r["gibbs"]:
            if "error" in m:
                gibbs_rows.append([label, f"{m['n']:,}", "-", "failed: "
                                   + m["error"].strip().splitlines()[-1][:120]] + ["-"] * 8)
                continue
            gibbs_rows.append([label, f"{m['n']:,}", f"{m['warmup']:,} + {m['draws']:,}",
                               f"{m['time_fit_s']:.1f}",
                               f"{m['time_compile_s']:.1f}", f"{m['time_mcmc_s']:.1f}",
                               f"{m['ms_per_sweep']:.2f}", f"{m['ess_bulk_min']:.0f}",
                               f"{m['ess_tail_min']:.0f}", f"{m['rhat_max']:.4f}",
                               f"{m['cg_iters_mean']:.1f}",
                               f"{m['peak_rss_mb']:.0f} / {_fmt(m['device_peak_mb'], '.0f')}"])
    text = [
        "# S-BSVM and the GP Gibbs sampler on a GPU and on this project's CPUs",
        "",
        "Written by `python -m benchmarks.gpu --report reports/gpu` from the runs below, each "
        "made by `python -m benchmarks.gpu --out reports/gpu/<label>` (module docstring: every "
        "figure is one new process, as a user's first call in a session; S-BSVM as "
        "`benchmarks.sbsvm_scaling` fits it; GP Gibbs at `fit(model=\"gp\", "
        "method=\"gibbs\")`'s defaults, 4 chains of 1,000 warmup and 1,000 kept sweeps unless "
        "the table says fewer, on the SUSY-sized generator, d = 18).",
        "",
        markdown_table(["run", "JAX backend", "devices", "cores", "JAX", "load average"],
                       env_rows),
        "",
        "## S-BSVM (m = 64, hyperparameters by the ELBO, 100,000 test points)",
        "",
        markdown_table(["run", "n", "fit, first process [s]", "fit, cache warm [s]", "steps",
                        "stop", "test error", "peak host RSS [MiB]", "peak device [MiB]"],
                       sbsvm_rows),
        "",
        "## GP Gibbs (exact, 4 chains)",
        "",
        markdown_table(["run", "n", "sweeps (warmup + draws)", "fit [s]", "compile [s]",
                        "sampling [s]",
                        "ms per sweep (4 chains)", "bulk ESS min (f)", "tail ESS min (f)",
                        "R-hat max", "CG iterations", "peak host / device [MiB]"],
                       gibbs_rows),
        "",
    ]
    notes = folder / "NOTES.md"
    if notes.exists():
        text += [notes.read_text().strip(), ""]
    (folder / "README.md").write_text("\n".join(text))
    return "\n".join(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--budget", type=float, default=3600.0,
                        help="seconds after which no new measurement starts")
    parser.add_argument("--sbsvm-sizes", type=int, nargs="*", default=list(SBSVM_SIZES))
    parser.add_argument("--gibbs-sizes", type=int, nargs="*", default=list(GIBBS_SIZES))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--gibbs-options", default="{}",
                        help="JSON of fit options for the sampler (num_warmup, num_samples)")
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--sbsvm-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--gibbs-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sbsvm_child is not None:
        print(json.dumps(run_sbsvm(args.sbsvm_child), default=float))
        return 0
    if args.gibbs_child is not None:
        print(json.dumps(run_gibbs(args.gibbs_child, json.loads(args.gibbs_options)),
                         default=float))
        return 0
    if args.report is not None:
        print(write_report(args.report))
        return 0
    if args.out is None:
        parser.error("--out is required (reports/gpu/<label>)")
    measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
