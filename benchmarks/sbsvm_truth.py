"""S-BSVM's uncertainty against the exact GP Gibbs sampler at 2,000 to 20,000 points (issue 35).

For each ``n``: the ``susy`` generator (18 features, standardised with the training rows'
statistics), ``n`` training points and 500 held out. The RBF kernel's hyperparameters are
the ones S-BSVM learns on the training rows (``m = 64``, ``learn_hyperparameters=True``),
then fixed for every engine. The reference is ``fit(model="gp", method="gibbs")`` with 4
chains; its latent predictive at the test points is the mixture of the draws' kriging
conditionals ``N(m_s(x*), v_s(x*))``, and its convergence is judged on the draws' means
``m_s(x*)`` (the smallest bulk ESS and largest R-hat over the 500 test points; the
conditional noise ``v_s`` only adds independent variation, so these are the conservative
numbers). The chains are extended (``ppl_bsvm.resume``) until that smallest bulk ESS reaches
:data:`ESS_TARGET` or the draws ``--draws-max`` per chain (:data:`DRAWS_MAX`); the reference's
draws are kept in ``cache/`` (git-ignored), so that ``--reuse`` adds candidates without
sampling again.

Candidates: S-BSVM with ``m`` inducing points (k-means), mean-field and with linear response
(where the library's memory estimate allows it, :func:`candidates`); and at the same
hyperparameters (:data:`OTHERS`) B-BSVM
(full ``q(f)``, mean-field and with linear response) and ECM up to :data:`EXACT_MAX` points,
and with 128 inducing points SVGP (Hensman et al.: a probit GP classifier, another likelihood,
so its ``f`` is on another scale: its sd ratio says how its uncertainty compares, not how
right it is) and NumPyro's ADVI (its default full-covariance normal guide on the inducing
values of the sparse GP BSVM). For each: the ratio of its sd of
``f(x*)`` to the reference's (median and 5 %-95 % range), the error of its mean in
reference sds (median), the reference's probability mass inside its central 90 % interval
(averaged over the test points: 0.90 for an exact posterior), ``|p - p_ref|`` (mean), its
test error and NLPD, and its time. ``--nuts`` checks the reference against NUTS on the same
problem (:func:`nuts_check`).

Each ``n`` runs in a process of its own, so that its peak memory is its own::

    python -m benchmarks.sbsvm_truth --sizes 2000 5000 10000 --nuts 2000
    python -m benchmarks.sbsvm_truth --sizes 10000 --reuse     # new candidates, same reference
    python -m benchmarks.sbsvm_truth --sizes 20000 --draws 1000 --draws-max 1000  # 1.5 hours
    python -m benchmarks.sbsvm_truth --sizes --scale 20000 --warmup 50 --draws 50

``--report`` rebuilds ``README.md`` and the figure from the ``n*.json`` files.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ._common import machine_note, markdown_table, peak_rss_mb

N_TEST = 500
M_VALUES = (16, 32, 64, 128, 256, 512)
CHAINS = 4
ESS_TARGET = 1000
"""The reference runs until the smallest bulk ESS of ``f`` at the test points is this large."""
DRAWS_MAX = 4000
"""... or until each chain has this many draws."""
EXACT_MAX = 5000
"""Largest ``n`` for the ``O(n^3)``-per-iteration engines (B-BSVM: 15 s at 2,000 points, 222 s
at 5,000, about 30 minutes at 10^4 by the cube law)."""
OTHERS = (
    ("B-BSVM", "gp", "vi", {}, EXACT_MAX, "q(f), mean-field in (f, lambda)"),
    ("B-BSVM", "gp", "vi", {"linear_response": True}, EXACT_MAX, "linear response"),
    ("ECM", "gp", "ecm", {}, EXACT_MAX, "f given the MAP's lambda"),
    ("SVGP", "sparse_gp", "svgp", {"num_inducing": 128}, None, "q(u), probit likelihood"),
    ("ADVI", "sparse_gp", "advi", {"num_inducing": 128}, None, "NumPyro's mvn guide on u"),
)
"""The other candidates: ``(engine, model, method, options, largest n or None, what its
covariance of f is)``."""


def problem(n: int, seed: int = 3):
    """``susy`` rows: training ``(X, y)`` and the held-out ``(X_test, y_test)``,
    standardised by the training rows."""
    from ppl_bsvm import datasets

    X, y = datasets.susy(n + N_TEST, seed=seed)
    mean, sd = X[:n].mean(axis=0), X[:n].std(axis=0)
    X = (X - mean) / sd
    return X[:n], y[:n], X[n:], y[n:]


def learned_kernel(X, y):
    """The RBF kernel with the hyperparameters S-BSVM learns (``m = 64``)."""
    import ppl_bsvm
    from ppl_bsvm import kernels

    fit = ppl_bsvm.fit(X, y, model="gp", method="svi", num_inducing=64,
                       learn_hyperparameters=True, seed=0)
    h = fit.hyperparameters
    return kernels.RBF(lengthscale=float(h["lengthscale"]), variance=float(h["variance"]))


def reference(X, y, X_test, kernel, warmup: int, draws: int,
              ess_target: float = ESS_TARGET, draws_max: int = DRAWS_MAX) -> dict:
    """The Gibbs reference: its predictive moments and probabilities at the test points, the
    draws' kriging means and variances, and its diagnostics and costs. The chains are extended
    until the smallest bulk ESS of the means at the test points reaches ``ess_target`` or
    ``draws_max`` draws per chain (:func:`more_draws`)."""
    import ppl_bsvm

    t0 = time.perf_counter()
    fit = ppl_bsvm.fit(X, y, model="gp", method="gibbs", kernel=kernel, seed=0,
                       num_chains=CHAINS, num_warmup=warmup, num_samples=draws,
                       max_predictive_draws=CHAINS * draws_max, progress_bar=False)
    sampled = [draws]
    while True:
        means, variances = _predictive(fit, X_test)
        ess, rhat = _convergence(means)
        longer = more_draws(draws, float(ess.min()), ess_target, draws_max)
        if longer is None:
            break
        draws = longer
        fit = ppl_bsvm.resume(fit, X, y, num_samples=draws, progress_bar=False)
        sampled.append(draws)
    wall = time.perf_counter() - t0
    stats = fit.idata["sample_stats"]
    return {
        "means": means.reshape(CHAINS * draws, -1),
        "variances": variances.reshape(CHAINS * draws, -1),
        "p": np.asarray(fit.predict_proba(X_test)),
        "time_s": wall, "timings": dict(fit.timings),
        "ms_per_sweep": 1e3 * fit.timings["mcmc"] / (warmup + draws),
        "ess_bulk_min_f_test": float(ess.min()), "rhat_max_f_test": float(rhat.max()),
        "ess_bulk_min_f": float(fit.idata.attrs.get("ess_bulk_min", np.nan)),
        "rhat_max_f": float(fit.idata.attrs.get("rhat_max", np.nan)),
        "cg_iters_mean": float(stats["cg_iters"].mean()),
        "cg_fallback": int(stats["cg_fallback"].sum()),
        "warmup": warmup, "draws": draws, "chains": CHAINS, "draws_per_run": sampled,
    }


def more_draws(draws: int, ess_min: float, ess_target: float, draws_max: int) -> int | None:
    """Draws per chain for the next extension: 15 % more than ``draws`` times the ESS still
    wanted (``ess_target / ess_min``), rounded up to hundreds, at most ``draws_max``; None when
    the target is met or the draws are at the cap. (ESS grows about linearly with the draws of
    chains past their warmup.)"""
    if ess_min >= ess_target or draws >= draws_max:
        return None
    wanted = 1.15 * draws * ess_target / max(ess_min, 1.0)
    return int(min(draws_max, max(draws + 100, 100 * np.ceil(wanted / 100))))


def _convergence(means):
    """Bulk ESS and R-hat of ``means (chains, draws, n*)``, per test point."""
    import arviz as az

    by_chain = az.convert_to_dataset({"f_test": means})
    return (np.asarray(az.ess(by_chain, method="bulk")["f_test"]),
            np.asarray(az.rhat(by_chain)["f_test"]))


def _predictive(fit, X_test):
    """The draws' kriging means ``(chains, draws, n*)`` and variances at the test points (in
    float64: the predictor's function is the library's inside, not an entry point)."""
    import jax

    with jax.enable_x64(True):
        means, variances = fit.predictor.draws_latent_fn(X_test)
    chains, draws = fit.posterior.sizes["chain"], fit.posterior.sizes["draw"]
    return (np.asarray(means).reshape(chains, draws, -1),
            np.asarray(variances).reshape(chains, draws, -1))


REFERENCE_ARRAYS = ("means", "variances", "p")


def save_reference(ref: dict, kernel, path: Path) -> None:
    """The reference's draws and numbers, with the hyperparameters they were sampled at."""
    path.parent.mkdir(parents=True, exist_ok=True)
    numbers = {k: v for k, v in ref.items() if k not in REFERENCE_ARRAYS}
    np.savez(path, **{k: ref[k] for k in REFERENCE_ARRAYS},
             numbers=json.dumps(numbers), kernel=np.array([float(np.ravel(kernel.lengthscale)[0]),
                                                           float(kernel.variance)]))


def load_reference(path: Path, kernel) -> dict | None:
    """The reference saved at ``path`` for these hyperparameters, else None."""
    if not path.exists():
        return None
    with np.load(path) as saved:
        wanted = [float(np.ravel(kernel.lengthscale)[0]), float(kernel.variance)]
        if not np.allclose(saved["kernel"], wanted, rtol=1e-12, atol=0):
            return None
        return {**json.loads(str(saved["numbers"])),
                **{k: np.asarray(saved[k]) for k in REFERENCE_ARRAYS}}


def nuts_check(X, y, X_test, kernel, warmup: int, draws: int) -> dict:
    """NUTS (``fit(method="nuts")``, 4 chains) against Gibbs on the same problem: for the
    latent mean and the second moment of ``f(x*)`` at every test point, the difference in
    units of the two runs' combined Monte-Carlo standard error (``az.mcse`` of the draws'
    ``m_s`` and ``m_s^2 + v_s``): the largest, and the fraction above 3 (0.27 % for exact
    samplers)."""
    import arviz as az

    import ppl_bsvm

    out = {}
    stats = {}
    for method, seed in (("gibbs", 0), ("nuts", 1)):
        t0 = time.perf_counter()
        fit = ppl_bsvm.fit(X, y, model="gp", method=method, kernel=kernel, seed=seed,
                           num_chains=CHAINS, num_warmup=warmup, num_samples=draws,
                           max_predictive_draws=CHAINS * draws, progress_bar=False)
        out[f"{method}_time_s"] = time.perf_counter() - t0
        m, v = _predictive(fit, X_test)
        ds = az.convert_to_dataset({"mean": m, "second": m**2 + v})
        est = {k: np.asarray(ds[k].mean(("chain", "draw"))) for k in ("mean", "second")}
        se = {k: np.asarray(az.mcse(ds, method="mean")[k]) for k in ("mean", "second")}
        out[f"{method}_ess_bulk_min"] = float(np.asarray(az.ess(ds, method="bulk")["mean"]).min())
        stats[method] = (est, se)
    for k in ("mean", "second"):
        z = (stats["gibbs"][0][k] - stats["nuts"][0][k]) / np.hypot(stats["gibbs"][1][k],
                                                                     stats["nuts"][1][k])
        out[f"z_{k}_max"] = float(np.abs(z).max())
        out[f"z_{k}_above_3"] = float(np.mean(np.abs(z) > 3.0))
    return out


def _mixture_mass(means, variances, lo, hi):
    """``P(lo <= f <= hi)`` under the mixture of ``N(means_s, variances_s)``, per column."""
    from scipy.special import ndtr

    sd = np.sqrt(np.maximum(variances, 1e-300))
    return np.mean(ndtr((hi - means) / sd) - ndtr((lo - means) / sd), axis=0)


def compare(ref: dict, mean, var, p, y_test) -> dict:
    """The candidate's numbers against the reference (module doc)."""
    from ppl_bsvm import metrics

    ref_mean = ref["means"].mean(axis=0)
    ref_sd = np.sqrt(ref["variances"].mean(axis=0) + ref["means"].var(axis=0))
    sd = np.sqrt(np.maximum(var, 0.0))
    ratio = sd / ref_sd
    half = 1.6448536269514722 * sd
    coverage = _mixture_mass(ref["means"], ref["variances"], mean - half, mean + half)
    report = metrics.classification_report(y_test, p)
    return {
        "sd_ratio_median": float(np.median(ratio)),
        "sd_ratio_5": float(np.quantile(ratio, 0.05)),
        "sd_ratio_95": float(np.quantile(ratio, 0.95)),
        "mean_error_sds": float(np.median(np.abs(mean - ref_mean) / ref_sd)),
        "coverage_90": float(np.mean(coverage)),
        "p_error": float(np.mean(np.abs(p - ref["p"]))),
        "test_error": report["error"], "test_nlpd": report["nlpd"],
    }


def _measured(engine: str, m, covariance: str, response: bool, fit, wall, ref, X_test,
              y_test) -> dict:
    mean, var = fit.predict_latent(X_test)
    return {"engine": engine, "m": m, "covariance": covariance, "linear_response": response,
            "time_s": wall, "stop_reason": fit.stop_reason,
            **compare(ref, mean, var, fit.predict_proba(X_test), y_test)}


def candidates(X, y, X_test, y_test, kernel, ref: dict, m_values) -> list[dict]:
    """S-BSVM at each ``m``, mean-field and with linear response, then :data:`OTHERS`. A
    linear response the library's memory estimate refuses (``InsufficientMemoryError``: its
    ``P x P`` moments, ``P = m (m + 3) / 2``, 3 x 8.8 GB at ``m = 256``, where the ``n x n`` form
    is not the cheaper) is left out; up to 10^4 points the ``n x n`` form (3.2 GB) serves
    ``m = 256`` and 512."""
    import ppl_bsvm

    rows = []
    for m in m_values:
        if m >= X.shape[0]:
            continue
        for response in (False, True):
            t0 = time.perf_counter()
            try:
                fit = ppl_bsvm.fit(X, y, model="gp", method="svi", num_inducing=m,
                                   kernel=kernel, linear_response=response, seed=0)
            except ppl_bsvm.InsufficientMemoryError as err:
                if not response:  # the mean-field fit's memory is the engine's own: a failure
                    raise
                print(f"n = {X.shape[0]}, m = {m}: linear response left out ({err})",
                      flush=True)
                continue
            wall = time.perf_counter() - t0
            covariance = fit.idata.attrs.get("covariance",
                                             "linear response" if response else "mean-field")
            rows.append(_measured("S-BSVM", m, covariance, response, fit, wall, ref, X_test,
                                  y_test))
    for engine, model, method, options, n_max, covariance in OTHERS:
        if n_max is not None and X.shape[0] > n_max:
            continue
        t0 = time.perf_counter()
        fit = ppl_bsvm.fit(X, y, model=model, method=method, kernel=kernel, seed=0, **options)
        wall = time.perf_counter() - t0
        response = bool(options.get("linear_response", False))
        covariance = fit.idata.attrs.get("covariance", covariance)
        rows.append(_measured(engine, options.get("num_inducing"), covariance, response, fit,
                              wall, ref, X_test, y_test))
    return rows


def run(n: int, warmup: int, draws: int, m_values, nuts: bool = False,
        cache: Path | None = None, reuse: bool = False, draws_max: int = DRAWS_MAX) -> dict:
    X, y, X_test, y_test = problem(n)
    t0 = time.perf_counter()
    kernel = learned_kernel(X, y)
    t_kernel = time.perf_counter() - t0
    if nuts:
        return {"n": n, "lengthscale": float(np.ravel(kernel.lengthscale)[0]),
                "nuts_check": nuts_check(X, y, X_test, kernel, warmup, draws),
                "warmup": warmup, "draws": draws, "machine": machine_note()}
    ref = load_reference(cache, kernel) if reuse and cache is not None else None
    if ref is None:
        ref = reference(X, y, X_test, kernel, warmup, draws, draws_max=draws_max)
        ref["peak_rss_mb"] = peak_rss_mb()  # before the candidates: the reference run's
        if cache is not None:
            save_reference(ref, kernel, cache)
    rows = candidates(X, y, X_test, y_test, kernel, ref, m_values)
    ref_report = compare(ref, ref["means"].mean(axis=0),
                         ref["variances"].mean(axis=0) + ref["means"].var(axis=0), ref["p"],
                         y_test)
    return {
        "n": n, "lengthscale": float(np.ravel(kernel.lengthscale)[0]),
        "variance": float(kernel.variance), "time_kernel_s": t_kernel,
        "reference": {k: v for k, v in ref.items() if k not in REFERENCE_ARRAYS},
        "reference_test_error": ref_report["test_error"],
        "reference_test_nlpd": ref_report["test_nlpd"],
        "candidates": rows, "machine": machine_note(),
    }


def scale(n: int, warmup: int, draws: int, overrelax: float | None = None) -> dict:
    """GP Gibbs alone at ``n`` points, a short run (``--scale``): its set-up, time per sweep
    and peak memory, with the library's memory estimate, where a reference run to
    :data:`ESS_TARGET` would take hours. ``overrelax``: Adler's coefficient, None for the
    library's default."""
    import ppl_bsvm
    from ppl_bsvm.inference.mcmc import packed
    from ppl_bsvm.inference.mcmc.gibbs import _gibbs_gp_bytes

    X, y, X_test, _ = problem(n)
    kernel = learned_kernel(X, y)
    before = peak_rss_mb()
    t0 = time.perf_counter()
    fit = ppl_bsvm.fit(X, y, model="gp", method="gibbs", kernel=kernel, seed=0,
                       num_chains=CHAINS, num_warmup=warmup, num_samples=draws,
                       max_predictive_draws=CHAINS * draws, progress_bar=False,
                       **({} if overrelax is None else {"overrelax": overrelax}))
    wall = time.perf_counter() - t0
    peak = peak_rss_mb()  # the predictor's kriging below holds more than the fit did
    ess, rhat = _convergence(_predictive(fit, X_test)[0])
    stats = fit.idata["sample_stats"]
    options = {"num_chains": CHAINS, "num_warmup": warmup, "num_samples": draws}
    return {
        "n": n, "lengthscale": float(np.ravel(kernel.lengthscale)[0]),
        "warmup": warmup, "draws": draws, "chains": CHAINS, "time_s": wall,
        "set_up_s": wall - fit.timings["mcmc"],
        "ms_per_sweep": 1e3 * fit.timings["mcmc"] / (warmup + draws),
        "cg_iters_mean": float(stats["cg_iters"].mean()),
        "cg_fallback": int(stats["cg_fallback"].sum()),
        "ess_bulk_min_f_test": float(ess.min()), "rhat_max_f_test": float(rhat.max()),
        "directions": fit.options["directions"], "packed": packed.worth_packing(n),
        "overrelax": float(fit.options["overrelax"]),
        "peak_rss_mb_before": before, "peak_rss_mb": peak,
        "estimate_mb": _gibbs_gp_bytes(n, X.shape[1], options) / 2**20,
        "machine": machine_note(),
    }


def scale_name(n: int, warmup: int, draws: int, overrelax: float) -> str:
    """The file of a ``--scale`` run: one per run's length and coefficient (the coefficient
    the run used, whether given or the library's default; runs at -0.5, the default until 4
    December 2026, have none in the name)."""
    tail = "" if overrelax == -0.5 else f"_{round(-1000 * overrelax)}"
    return f"scale{n}_{warmup}_{draws}{tail}.json"


def _child(n: int, warmup: int, draws: int, m_values, out: Path, nuts: bool = False,
           reuse: bool = False, scaling: bool = False, overrelax: float | None = None,
           draws_max: int = DRAWS_MAX):
    cmd = [sys.executable, "-m", "benchmarks.sbsvm_truth", "--child", str(n),
           "--warmup", str(warmup), "--draws", str(draws),
           "--m", *map(str, m_values), "--out", str(out)] + (["--nuts-child"] if nuts else [])
    cmd += ["--reuse"] if reuse else []
    cmd += ["--scale-child"] if scaling else []
    cmd += [] if overrelax is None else ["--overrelax", str(overrelax)]
    cmd += ["--draws-max", str(draws_max)]
    subprocess.run(cmd, check=True)


def _load(machine: str) -> str:
    """The load averages of a ``machine_note``."""
    return machine.split("load average ")[-1].split(" (")[0] if "load average" in machine else "-"


def _fmt(x, spec=".3f"):
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, spec)


def _short(results) -> str:
    """The references that stopped at their ``--draws-max`` below :data:`ESS_TARGET`, as a
    clause of the report's sentence ("" when none did)."""
    short = [r for r in results if r["reference"]["ess_bulk_min_f_test"] < ESS_TARGET]
    if not short:
        return ""
    return " or its draws per chain reach `--draws-max`, as at n = " + ", ".join(
        f"{r['n']} ({r['reference']['draws']} draws per chain, smallest bulk ESS "
        f"{r['reference']['ess_bulk_min_f_test']:.0f})" for r in short)


def write_report(out: Path) -> None:
    def runs(prefix):  # n*.json, nuts*.json, scale<n>_<warmup>_<draws>[_<-1000 alpha>].json
        def key(p):
            return tuple(int(part) for part in p.stem[len(prefix):].split("_"))

        found = [p for p in out.glob(f"{prefix}*.json")
                 if p.stem[len(prefix):].replace("_", "").isdigit()]
        return [json.loads(p.read_text()) for p in sorted(found, key=key)]

    results, checks, scaled = runs("n"), runs("nuts"), runs("scale")
    if not results:
        return
    lines = ["# S-BSVM's uncertainty against the exact GP Gibbs sampler (`susy`)", "",
             "`python -m benchmarks.sbsvm_truth` (module doc: the problem, the reference, "
             "the measures).", "", "## The reference", ""]
    rows = []
    for r in results:
        ref = r["reference"]
        rows.append([r["n"], f"{ref['chains']} x ({ref['warmup']} + {ref['draws']})",
                     _fmt(ref["time_s"], ".0f"), _fmt(ref["ms_per_sweep"], ".0f"),
                     _fmt(ref["cg_iters_mean"], ".1f"), _fmt(ref["ess_bulk_min_f_test"], ".0f"),
                     _fmt(ref["rhat_max_f_test"]), _fmt(ref["ess_bulk_min_f"], ".0f"),
                     _fmt(ref["peak_rss_mb"] / 1024, ".2f"),
                     _fmt(r["lengthscale"]), _fmt(r["reference_test_error"])])
    lines += [markdown_table(["n", "chains x (warmup + draws)", "wall s (all of fit())",
                              "ms per sweep of 4 chains", "CG iterations per solve",
                              "smallest bulk ESS, f at 500 test points", "largest R-hat",
                              "smallest bulk ESS, f at training points", "peak RSS GB",
                              "lengthscale", "test error"], rows), "",
              f"Each reference runs until the smallest bulk ESS at the test points is "
              f"{ESS_TARGET} (its draws extended by `ppl_bsvm.resume`){_short(results)}. Its "
              "wall time and peak RSS are the whole process's through the extensions (a "
              "resumed run holds the earlier fit while it extends it) and the predictor over "
              "every draw; the sampler's own, at a fixed number of draws, are in the last "
              "table.", ""]
    lines += ["## The candidates against it", "",
              "S-BSVM at each number of inducing points m, then the other engines at the same "
              "hyperparameters (B-BSVM and ECM up to "
              f"{EXACT_MAX} points; SVGP and ADVI with 128 inducing points). MF: the "
              "mean-field fit's covariance; LR: its linear-response correction. SVGP's "
              "likelihood is the probit's, not the BSVM's: its f is another model's.", ""]
    rows = []
    for r in results:
        for c in r["candidates"]:
            engine = c.get("engine", "S-BSVM")
            kind = ("LR" if c["linear_response"] else
                    "MF" if engine in ("S-BSVM", "B-BSVM") else "-")
            rows.append([r["n"], engine, _fmt(c["m"], "d"), kind, c["covariance"],
                         _fmt(c["sd_ratio_median"]),
                         f"{_fmt(c['sd_ratio_5'])} - {_fmt(c['sd_ratio_95'])}",
                         _fmt(c["mean_error_sds"]), _fmt(c["coverage_90"]), _fmt(c["p_error"]),
                         _fmt(c["test_error"]), _fmt(c["test_nlpd"]), _fmt(c["time_s"], ".1f")])
    lines += [markdown_table(["n", "engine", "m", "", "covariance used", "sd ratio (median)",
                              "sd ratio 5 %-95 %", "mean error (ref. sds)", "90 % coverage",
                              "mean abs(p - p_ref)", "test error", "NLPD", "time s"], rows), ""]
    if checks:
        lines += ["## Gibbs against NUTS on the same problem", "",
                  "Each run's estimate of the mean and of the second moment of f(x*) at the "
                  "500 test points (from the draws' kriging conditionals), the difference in "
                  "units of the two runs' combined Monte-Carlo standard error.", ""]
        lines += [markdown_table(
            ["n", "chains x (warmup + draws)", "Gibbs s", "NUTS s",
             "smallest bulk ESS (Gibbs / NUTS)", "largest z, mean", "share of z > 3, mean",
             "largest z, second moment", "share of z > 3, second moment"],
            [[c["n"], f"{CHAINS} x ({c['warmup']} + {c['draws']})",
              _fmt(c["nuts_check"]["gibbs_time_s"], ".0f"),
              _fmt(c["nuts_check"]["nuts_time_s"], ".0f"),
              f"{_fmt(c['nuts_check']['gibbs_ess_bulk_min'], '.0f')} / "
              f"{_fmt(c['nuts_check']['nuts_ess_bulk_min'], '.0f')}",
              _fmt(c["nuts_check"]["z_mean_max"], ".2f"),
              _fmt(c["nuts_check"]["z_mean_above_3"], ".3f"),
              _fmt(c["nuts_check"]["z_second_max"], ".2f"),
              _fmt(c["nuts_check"]["z_second_above_3"], ".3f")] for c in checks]), ""]
    if scaled:
        lines += ["## GP Gibbs beyond the reference sizes", "",
                  "A run of the sampler alone (`--scale`) at the default directions: the "
                  "set-up is everything in fit() but the sweeps (the kernel matrix, its "
                  "factor and spectrum, the compilation, the predictor); the ESS and R-hat "
                  "are those of the draws' kriging means at the 500 held-out points, as for "
                  "the reference; the fit's memory is the peak less the process's before "
                  "the fit; the estimate is the library's (`gibbs._gibbs_gp_bytes`), which "
                  "`InsufficientMemoryError` compares with the memory available. K: the "
                  "chains' K dense, or its lower blocks (`mcmc.packed`: on the CPU from 2000 "
                  "points; runs recorded before the library packed it had it dense). Rows with 10 "
                  "directions ran before the chains learned them together within K's top "
                  "eigenvectors (`sweep._learn_pooled`). Overrelax: Adler's coefficient "
                  "of the f draw: the library's default unless `--overrelax` (chosen from K's "
                  "spectrum since 4 December 2026, -0.9 at these kernels; -0.5 before).", ""]
        lines += [markdown_table(
            ["n", "chains x (warmup + draws)", "directions", "overrelax", "K", "wall s",
             "set-up s",
             "ms per sweep of 4 chains", "CG iterations per solve",
             "smallest bulk ESS, f at 500 test points", "per kept draw", "largest R-hat",
             "peak RSS GiB", "of it the fit's GiB", "estimate GiB", "lengthscale",
             "load average (1 / 5 / 15 min) at the end"],
            [[c["n"], f"{c['chains']} x ({c['warmup']} + {c['draws']})",
              c.get("directions", 10), _fmt(c.get("overrelax", -0.5), ".2f"),
              "lower blocks" if c.get("packed") else "dense",
              _fmt(c["time_s"], ".0f"), _fmt(c["set_up_s"], ".0f"),
              _fmt(c["ms_per_sweep"], ".0f"), _fmt(c["cg_iters_mean"], ".1f"),
              _fmt(c.get("ess_bulk_min_f_test"), ".0f"),
              _fmt(c.get("ess_bulk_min_f_test", np.nan) / (c["chains"] * c["draws"]), ".2f"),
              _fmt(c.get("rhat_max_f_test"), ".4f"),  # against a target of 1.01
              _fmt(c["peak_rss_mb"] / 1024, ".2f"),
              _fmt((c["peak_rss_mb"] - c["peak_rss_mb_before"]) / 1024, ".2f"),
              _fmt(c["estimate_mb"] / 1024, ".2f"), _fmt(c["lengthscale"]),
              _load(c.get("machine", ""))] for c in scaled]),
                  ""]
    lines += ["![sd ratio and coverage against m](sd_ratio_coverage.png)", "",
              "Machine: " + results[-1]["machine"], ""]
    (out / "README.md").write_text("\n".join(lines))
    _figure(results, out / "sd_ratio_coverage.png")


def _figure(results, path: Path) -> None:
    """sd ratio and coverage against m: a colour per n, S-BSVM's mean-field dashed and its
    linear response solid, SVGP and ADVI (128 inducing points) as open markers; the legend
    below the panels, by colour, line and marker rather than one entry per line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = {"SVGP": "s", "ADVI": "^"}
    for r, color in zip(results, colors):
        sbsvm = [c for c in r["candidates"] if c.get("engine", "S-BSVM") == "S-BSVM"]
        for response, style in ((False, "--"), (True, "-")):
            rows = [c for c in sbsvm if c["linear_response"] == response]
            for ax, key in zip(axes, ("sd_ratio_median", "coverage_90")):
                ax.plot([c["m"] for c in rows], [c[key] for c in rows], style, marker="o",
                        ms=4, color=color)
        for engine, marker in markers.items():
            for c in (c for c in r["candidates"] if c.get("engine") == engine):
                for ax, key in zip(axes, ("sd_ratio_median", "coverage_90")):
                    ax.plot([c["m"]], [c[key]], marker, color=color, mfc="none", ms=8)
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[1].axhline(0.9, color="k", lw=0.8)
    for ax, title in zip(axes, ("median sd ratio of f(x*), candidate / exact (Gibbs)",
                                "exact posterior mass in the candidate's 90 % interval")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("inducing points m")
        ax.set_title(title, fontsize=10)
    handles = ([Line2D([], [], color=c, lw=6, label=f"n = {r['n']}")
                for r, c in zip(results, colors)]
               + [Line2D([], [], color="gray", ls="--", marker="o", ms=4,
                         label="S-BSVM mean-field"),
                  Line2D([], [], color="gray", ls="-", marker="o", ms=4,
                         label="S-BSVM linear response")]
               + [Line2D([], [], color="gray", ls="", marker=m, mfc="none", ms=8, label=e)
                  for e, m in markers.items()])
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[2000, 5000, 10000])
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--m", type=int, nargs="*", default=list(M_VALUES))
    parser.add_argument("--out", type=Path, default=Path("reports/sbsvm_truth"))
    parser.add_argument("--report", action="store_true", help="only rebuild the report")
    parser.add_argument("--reuse", action="store_true",
                        help="take the reference from cache/ when it was sampled at the same "
                             "hyperparameters (only the candidates run)")
    parser.add_argument("--nuts", type=int, nargs="*", default=[],
                        help="sizes at which Gibbs is checked against NUTS (no candidates)")
    parser.add_argument("--scale", type=int, nargs="*", default=[],
                        help="sizes at which GP Gibbs alone runs --warmup + --draws sweeps "
                             "(time and memory; no candidates)")
    parser.add_argument("--overrelax", type=float, default=None,
                        help="Adler's coefficient of the --scale runs (default: the library's)")
    parser.add_argument("--draws-max", type=int, default=DRAWS_MAX,
                        help="most draws per chain of the reference's extensions (default "
                             f"{DRAWS_MAX}); equal to --draws for no extension")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--scale-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--nuts-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child is not None and args.scale_child:
        result = scale(args.child, args.warmup, args.draws, args.overrelax)
        name = scale_name(args.child, args.warmup, args.draws, result["overrelax"])
        (args.out / name).write_text(json.dumps(result, indent=1))
        return 0
    if args.child is not None:
        nuts = args.nuts_child
        result = run(args.child, args.warmup, args.draws, args.m, nuts=nuts,
                     cache=args.out / "cache" / f"reference{args.child}.npz", reuse=args.reuse,
                     draws_max=args.draws_max)
        name = f"nuts{args.child}.json" if nuts else f"n{args.child}.json"
        (args.out / name).write_text(json.dumps(result, indent=1))
        return 0
    if not args.report:
        for n in args.sizes:
            _child(n, args.warmup, args.draws, args.m, args.out, reuse=args.reuse,
                   draws_max=args.draws_max)
            write_report(args.out)
        for n in args.nuts:
            _child(n, args.warmup, args.draws, args.m, args.out, nuts=True)
            write_report(args.out)
        for n in args.scale:
            _child(n, args.warmup, args.draws, args.m, args.out, scaling=True,
                   overrelax=args.overrelax)
            write_report(args.out)
    write_report(args.out)
    print((args.out / "README.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
