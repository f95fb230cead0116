"""Linear-response VI (``linear_response=True``) against exact posteriors: sd ratios, interval
coverage and cost.

    python -m benchmarks.lrvb [--quick] [--out reports/lrvb]

**(a) Generated linear problems** (:data:`PROBLEMS`, ``d`` from 2 to 10 features, ``n`` from 40
to 1000, no intercept, prior ``N(0, I)``, ``gamma = 1``): inputs with correlated columns
(``corr(x_j, x_k) = 0.3^|j - k|``), labels ``sign(x^T b + 0.5 eps)`` with ``b ~ N(0, I)``.
The truth is grid quadrature for ``d = 2`` (:func:`grid_moments`: the unnormalised posterior on
a 241 x 241 grid over the mean +- 8 linear-response sd) and otherwise a long run of the
library's exact Gibbs sampler (:data:`GIBBS` draws; its Monte-Carlo error on an sd is about
``1 / sqrt(2 ESS)``, reported). Each problem gives ``d`` ratios of the posterior sd (mean-field
and linear-response VI over the truth) and the error of the VI mean in true sds, and each fit's PSIS k-hat (``inference/vi/psis.py``).

**(b) The GP model on Heart** (270 x 13, standardised, the default RBF kernel with the
median-heuristic lengthscale, ``gamma = 1``) against Gibbs (:data:`GP_GIBBS`): the ratio of the sd of
each ``f_i`` and the fraction of the Gibbs draws inside each VI's central 90% interval of
``f_i``, averaged over ``i``, for B-BSVM (``method="vi"``) and S-BSVM (``method="svi"``, default
options): with the inducing points at the training inputs (``m = n``, the sparse model is the
GP model, so the rows measure the linear response alone; it runs in ``n x n`` form) and with
the default ``m = 100`` k-means points (the rows then also carry the sparse model's own
difference from the GP); plus the linear model on Heart, 14 coefficients.

**(c) Cost**: wall time of the fits with and without ``linear_response`` on Heart (B-BSVM, the
linear model's VI, S-BSVM with its default ``m = 100``), compiled programs reused (one
warm-up fit first), median of :data:`REPEATS` alternating runs and the median of the per-run
ratios.

**(d) S-BSVM's correction at scale** (:data:`SCALE`: ``n`` = 10^4 and 10^5 points of the
``susy`` generator, standardised, ``m`` = 16 and 64 k-means inducing points, default options
otherwise): wall time of the mean-field fit and of the linear-response part of the
linear-response fit (``Fit.timings["linear_response"]``: the polish to the batch fixed point and
the pass that forms the fourth moments, ``sbsvm_response``), the polish's sweeps, the leading-
term estimate the library warns with (``sbsvm_response.response_flops``) and the median ratio
of the mean-field to the linear-response sd of ``f`` at the training inputs. Compiled programs
reused, medians of :data:`SCALE_REPEATS` runs. The correction is ``O(n m^4 + m^6)``, not the
issue's ``O(m^3)`` (``sbsvm_response`` module doc says why).

Writes ``README.md`` (tables and the machine), ``results.json`` and ``sd_ratios.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm

import ppl_bsvm
from ppl_bsvm import datasets
from ppl_bsvm._cost import RATE
from ppl_bsvm.compare import diagnostics

from ._common import machine_note, markdown_table

PROBLEMS = [  # (d, n, seed)
    (2, 40, 1), (2, 100, 2), (2, 300, 3), (2, 1000, 4),
    (4, 60, 5), (4, 200, 6), (4, 600, 7),
    (6, 80, 8), (6, 400, 9),
    (8, 150, 10), (8, 1000, 11),
    (10, 100, 12), (10, 500, 13),
]
QUICK_PROBLEMS = [(2, 40, 1), (3, 50, 5)]
GIBBS = {"num_samples": 5000, "num_warmup": 1000, "num_chains": 4}
GP_GIBBS = {"num_samples": 2500, "num_warmup": 500, "num_chains": 4}
QUICK_GIBBS = {"num_samples": 300, "num_warmup": 200, "num_chains": 2}
GRID = 241
SPAN = 8.0
REPEATS = 15
SCALE = [(10_000, 16), (10_000, 64), (100_000, 16), (100_000, 64)]
QUICK_SCALE = [(2_000, 8), (2_000, 16)]
SCALE_REPEATS = 3
TARGETS = {"linear_median": (0.9, 1.1), "linear_range": (0.7, 1.35), "gp_sd": (0.85, 1.15),
           "gp_coverage": 0.85, "cost": 3.0}


def generate(d: int, n: int, seed: int):
    """The generated problem ``(X, y)`` (module doc)."""
    r = np.random.default_rng(seed)
    C = 0.3 ** np.abs(np.subtract.outer(np.arange(d), np.arange(d)))
    X = r.standard_normal((n, d)) @ np.linalg.cholesky(C).T
    b = r.standard_normal(d)
    y = np.where(X @ b + 0.5 * r.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def log_posterior(beta, Z, prior_scale=1.0, gamma=1.0):
    """Unnormalised log posterior of the linear model at ``beta (..., d)``: the Gaussian prior
    plus the pseudo-likelihood ``-2 gamma sum_i max(0, 1 - z_i^T beta)``."""
    margins = beta @ Z.T
    return (-0.5 * np.sum(beta**2, axis=-1) / prior_scale**2
            - 2.0 * gamma * np.sum(np.maximum(0.0, 1.0 - margins), axis=-1))


def grid_moments(logp, centre, half_width, size: int = GRID):
    """Means and sds of a 2-d density ``exp(logp(points (..., 2)))`` by the midpoint rule on a
    ``size x size`` grid over ``centre +- half_width``."""
    axes = [np.linspace(c - h, c + h, size) for c, h in zip(centre, half_width)]
    B1, B2 = np.meshgrid(*axes, indexing="ij")
    pts = np.stack([B1, B2], axis=-1)
    lp = logp(pts)
    w = np.exp(lp - logsumexp(lp))
    mean = np.array([np.sum(w * B1), np.sum(w * B2)])
    var = np.array([np.sum(w * (B1 - mean[0]) ** 2), np.sum(w * (B2 - mean[1]) ** 2)])
    return mean, np.sqrt(var)


def _vi(X, y, model, method="vi", **kw):
    common = dict(model=model, method=method, num_draws=1000, **kw)
    mf = ppl_bsvm.fit(X, y, **common)
    lr = ppl_bsvm.fit(X, y, linear_response=True, **common)
    return mf, lr


def linear_problem(d, n, seed, gibbs):
    X, y = generate(d, n, seed)
    mf, lr = _vi(X, y, "linear", intercept=False)
    a = lr.idata["approximation"]
    mean = a["beta_mean"].values
    sd_lr = np.sqrt(np.diag(a["beta_cov"].values))
    sd_mf = np.sqrt(np.diag(a["beta_cov_mean_field"].values))
    if d == 2:
        Z = y[:, None] * X
        t_mean, t_sd = grid_moments(lambda b: log_posterior(b, Z), mean, SPAN * sd_lr)
        truth, mc_err = "grid", 0.0
    else:
        g = ppl_bsvm.fit(X, y, model="linear", method="gibbs", intercept=False, **gibbs)
        draws = g.posterior["beta"].values.reshape(-1, d)
        t_mean, t_sd = draws.mean(0), draws.std(0)
        ess = float(diagnostics(g, ["beta"])["ess_bulk_min"].iloc[0])
        truth, mc_err = "gibbs", float(1 / np.sqrt(2 * ess))
    return {"d": d, "n": n, "seed": seed, "truth": truth, "mc_sd_error": mc_err,
            "status": lr.idata.attrs.get("covariance"),
            "khat_mf": float(mf.idata["approximation"]["psis_khat"]),
            "khat_lr": float(a["psis_khat"]),
            "ratio_lr": (sd_lr / t_sd).tolist(), "ratio_mf": (sd_mf / t_sd).tolist(),
            "mean_error": ((mean - t_mean) / t_sd).tolist()}


def _coverage(draws, mean, sd, level=0.9):
    z = norm.ppf(0.5 + level / 2)
    return float(np.mean((draws > mean - z * sd) & (draws < mean + z * sd)))


def heart(gibbs, quick: bool):
    X, y = datasets.load("heart", standardize=True)
    if quick:
        X, y = X[:60], y[:60]
    out = {}
    g = ppl_bsvm.fit(X, y, model="gp", method="gibbs", **(gibbs if quick else GP_GIBBS))
    F = g.posterior["f"].values.reshape(-1, len(y))
    for name, kw in (("gp", {}), ("gp, S-BSVM m = n", {"method": "svi", "inducing": X}),
                     ("gp, S-BSVM m = 100", {"method": "svi"})):
        _, lr = _vi(X, y, "gp", seed=0, **kw)
        a = lr.idata["approximation"]
        sd = {"lr": np.sqrt(a["f_var"].values), "mf": np.sqrt(a["f_var_mean_field"].values)}
        out[name] = {"status": lr.idata.attrs.get("covariance"), **{
            k: {"sd_ratio": (s / F.std(0)).tolist(),
                "coverage90": _coverage(F, a["f_mean"].values, s)} for k, s in sd.items()}}
    mf, lr = _vi(X, y, "linear")
    g = ppl_bsvm.fit(X, y, model="linear", method="gibbs", **gibbs)
    B = g.posterior["beta"].values.reshape(-1, X.shape[1] + 1)
    a = lr.idata["approximation"]
    sd = {"lr": np.sqrt(np.diag(a["beta_cov"].values)),
          "mf": np.sqrt(np.diag(a["beta_cov_mean_field"].values))}
    out["linear"] = {"status": lr.idata.attrs.get("covariance"), **{
        k: {"sd_ratio": (s / B.std(0)).tolist(),
            "coverage90": _coverage(B, a["beta_mean"].values, s)} for k, s in sd.items()}}
    return out


COST_FITS = {"gp": {"model": "gp", "method": "vi"},
             "linear": {"model": "linear", "method": "vi"},
             "gp, S-BSVM m = 100": {"model": "gp", "method": "svi", "seed": 0}}


def cost(repeats: int, quick: bool):
    X, y = datasets.load("heart", standardize=True)
    if quick:
        X, y = X[:60], y[:60]
    out = {}
    for name, kw in COST_FITS.items():
        times = {False: [], True: []}
        for lr in (False, True):  # warm-up: compile
            ppl_bsvm.fit(X, y, linear_response=lr, num_draws=1000, **kw)
        for _ in range(repeats):
            for lr in (False, True):
                t0 = time.perf_counter()
                ppl_bsvm.fit(X, y, linear_response=lr, num_draws=1000, **kw)
                times[lr].append(time.perf_counter() - t0)
        mf, lr = np.array(times[False]), np.array(times[True])
        out[name] = {"mean_field_s": float(np.median(mf)), "linear_response_s":
                      float(np.median(lr)), "ratio": float(np.median(lr / mf)),
                      "runs": {"mean_field": mf.tolist(), "linear_response": lr.tolist()}}
    return out


def scale(sizes, repeats: int):
    """Section (d): S-BSVM's correction on the ``susy`` generator (module doc)."""
    import warnings

    from ppl_bsvm.inference.vi import sbsvm_response

    out = []
    for n, m in sizes:
        X, y = datasets.generators.susy(n, seed=0)
        X = (X - X.mean(0)) / X.std(0)
        kw = dict(model="gp", method="svi", num_inducing=m, store_f=False, num_draws=100,
                  seed=0)
        runs = {"mean_field": [], "fit": [], "linear_response": []}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ppl_bsvm.SlowFitWarning)
            for rep in range(repeats + 1):  # the first compiles
                t0 = time.perf_counter()
                ppl_bsvm.fit(X, y, **kw)
                t1 = time.perf_counter()
                lr = ppl_bsvm.fit(X, y, linear_response=True, **kw)
                if rep:
                    runs["mean_field"].append(t1 - t0)
                    runs["fit"].append(time.perf_counter() - t1)
                    runs["linear_response"].append(lr.timings["linear_response"])
        a = lr.idata["approximation"]
        out.append({
            "n": n, "m": m, "status": lr.idata.attrs.get("covariance"),
            "sweeps": int(lr.idata.attrs.get("polish_sweeps", -1)),
            "form": lr.idata.attrs.get("response_form", "-"),
            "estimate_s": sbsvm_response.response_flops(n, m, X.shape[1]) / RATE,
            "sd_ratio": float(np.median(np.sqrt(a["f_var_mean_field"].values
                                                / a["f_var"].values))),
            **{f"{k}_s": float(np.median(v)) for k, v in runs.items()}, "runs": runs,
        })
    return out


def summarise(problems):
    """Median and range of the sd ratios over every coefficient of every problem."""
    out = {}
    for key in ("ratio_lr", "ratio_mf"):
        r = np.concatenate([p[key] for p in problems])
        out[key] = {"median": float(np.median(r)), "min": float(r.min()), "max": float(r.max())}
    lo, hi = TARGETS["linear_median"]
    rlo, rhi = TARGETS["linear_range"]
    s = out["ratio_lr"]
    out["meets_target"] = bool(lo <= s["median"] <= hi and rlo <= s["min"] and s["max"] <= rhi)
    return out


def _fmt(r):
    r = np.asarray(r)
    return f"{np.median(r):.3f} ({r.min():.3f}-{r.max():.3f})"


def write_report(results, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    probs = results["problems"]
    rows = [[p["d"], p["n"], p["truth"], f"{p['mc_sd_error']:.3f}", _fmt(p["ratio_mf"]),
             _fmt(p["ratio_lr"]), f"{np.max(np.abs(p['mean_error'])):.3f}",
             f"{p['khat_mf']:.2f} / {p['khat_lr']:.2f}", p["status"]]
            for p in probs]
    s = results["summary"]
    h = results["heart"]
    c = results["cost"]
    lines = [
        "# Linear-response VI against exact posteriors",
        "",
        "Written by `python -m benchmarks.lrvb" + (" --quick" if results["quick"] else "")
        + "` (module docstring: the problems, the truth, the measures).",
        "",
        "## (a) Generated linear problems: sd / true sd",
        "",
        "Median (range) over the coefficients of each problem; `mc sd error` is the relative "
        "Monte-Carlo error of the Gibbs sd (1 / sqrt(2 ESS), 0 for the grid).",
        "",
        markdown_table(["d", "n", "truth", "mc sd error", "mean-field", "linear response",
                        "max mean error (true sd)", "PSIS k-hat mf / lr", "covariance"], rows),
        "",
        "PSIS k-hat (1000 draws of each q against the exact posterior, no reference needed): "
        "below 0.7 the fit's uncertainty is trustworthy after importance weighting.",
        "",
        f"All {sum(len(p['ratio_lr']) for p in probs)} coefficients: mean-field "
        f"{s['ratio_mf']['median']:.3f} ({s['ratio_mf']['min']:.3f}-{s['ratio_mf']['max']:.3f}),"
        f" linear response {s['ratio_lr']['median']:.3f} ({s['ratio_lr']['min']:.3f}-"
        f"{s['ratio_lr']['max']:.3f}). Target: median in {TARGETS['linear_median']}, every "
        f"ratio in {TARGETS['linear_range']}: **{'met' if s['meets_target'] else 'missed'}**.",
        "",
        "## (b) Heart against Gibbs",
        "",
        markdown_table(
            ["model", "VI", "sd / Gibbs sd: median (5%-95%)", "90% interval coverage of the "
             "Gibbs draws"],
            [[m, k, f"{np.median(h[m][k]['sd_ratio']):.3f} ("
              f"{np.percentile(h[m][k]['sd_ratio'], 5):.3f}-"
              f"{np.percentile(h[m][k]['sd_ratio'], 95):.3f})", f"{h[m][k]['coverage90']:.3f}"]
             for m in h for k in ("mf", "lr")]),
        "",
        f"Targets (GP): sd ratio in {TARGETS['gp_sd']}, coverage >= {TARGETS['gp_coverage']}.",
        "",
        "## (c) Cost on Heart (seconds, compiled programs reused)",
        "",
        markdown_table(["model", "mean-field fit", "linear-response fit", "ratio (median of "
                        "per-run ratios)"],
                       [[m, f"{c[m]['mean_field_s']:.3f}", f"{c[m]['linear_response_s']:.3f}",
                         f"{c[m]['ratio']:.2f}"] for m in c]),
        "",
        f"Target: at most {TARGETS['cost']}x. Medians of {results['repeats']} alternating "
        "runs; the machine was shared with other jobs.",
        "",
        "## (d) S-BSVM's correction at scale (`susy` generator, seconds)",
        "",
        markdown_table(
            ["n", "m", "mean-field fit", "linear-response fit", "of which the correction",
             "polish sweeps", "form", "estimate (leading terms at _cost.RATE)",
             "sd of f: mean-field / linear response (median)", "covariance"],
            [[r["n"], r["m"], f"{r['mean_field_s']:.2f}", f"{r['fit_s']:.2f}",
              f"{r['linear_response_s']:.2f}", r["sweeps"], r["form"],
              f"{r['estimate_s']:.2f}", f"{r['sd_ratio']:.3f}", r["status"]]
             for r in results["scale"]]),
        "",
        f"Medians of {results['scale_repeats']} runs after one that compiles. The correction "
        "takes passes of O(m^3) a row over the data or a subsample of them (the Schur "
        "complement of the P x P system, P = m (m + 3) / 2, by a certified series; for few "
        "inducing points the P x P system itself, O(n m^4 + m^6); for few rows the n x n one) "
        "plus the polish's sweeps of O(n m^2) (`ppl_bsvm/inference/vi/sbsvm_response.py`).",
        "",
        f"Machine: {results['machine']}. Total run time {results['seconds']:.0f} s.",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines))
    _figure(results, out / "sd_ratios.png")


def _figure(results, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probs = results["problems"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [2, 1]})
    ax = axes[0]
    for i, p in enumerate(probs):
        for key, colour, dx in (("ratio_mf", "tab:orange", -0.15), ("ratio_lr", "tab:blue", 0.15)):
            ax.plot(np.full(len(p[key]), i + dx), p[key], "o", ms=3, color=colour, alpha=0.7,
                    label=None if i else {"ratio_mf": "mean-field", "ratio_lr":
                                          "linear response"}[key])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhspan(*TARGETS["linear_range"], color="tab:blue", alpha=0.08)
    ax.set_xticks(range(len(probs)), [f"d={p['d']}\nn={p['n']}" for p in probs], fontsize=7)
    ax.set_ylabel("sd / true sd")
    ax.set_title("(a) generated linear problems")
    ax.legend()
    ax = axes[1]
    h = results["heart"]["gp"]
    ax.hist(h["mf"]["sd_ratio"], bins=30, alpha=0.6, color="tab:orange", label="mean-field")
    ax.hist(h["lr"]["sd_ratio"], bins=30, alpha=0.6, color="tab:blue", label="linear response")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("sd of f_i / Gibbs sd")
    ax.set_title("(b) GP model, Heart")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small problems, short chains")
    parser.add_argument("--out", default="reports/lrvb")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    gibbs = QUICK_GIBBS if args.quick else GIBBS
    problems = [linear_problem(d, n, seed, gibbs)
                for d, n, seed in (QUICK_PROBLEMS if args.quick else PROBLEMS)]
    repeats = 2 if args.quick else REPEATS
    scale_repeats = 1 if args.quick else SCALE_REPEATS
    results = {"quick": args.quick, "problems": problems, "summary": summarise(problems),
               "heart": heart(gibbs, args.quick), "cost": cost(repeats, args.quick),
               "repeats": repeats,
               "scale": scale(QUICK_SCALE if args.quick else SCALE, scale_repeats),
               "scale_repeats": scale_repeats}
    results["seconds"] = time.perf_counter() - t0
    results["machine"] = machine_note()
    write_report(results, Path(args.out))
    return results


if __name__ == "__main__":
    main()
