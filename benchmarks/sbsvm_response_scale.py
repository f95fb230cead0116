"""S-BSVM's linear response at 10^5 and 10^6 points: the subsampled moments against the full sum.

``fit(X, y, model="gp", method="svi", num_inducing=64, linear_response=True)`` on the ``susy``
generator (standardised), defaults otherwise. For each ``n``: the mean-field fit's time, the
linear-response fit's time and the correction's (``timings["linear_response"]``, which also
holds the training rows' mean-field marginals: the polish's first sweep forms them), what the
response adds to the fit (the two fits' difference, run by run), the rows
the moments came from and their estimated Monte-Carlo error (``response_rows``,
``response_mc_error``); where the full sum is affordable (``--full``), the same fit with the
moments summed over every row (``sbsvm_response.sample_rows`` returning 0) and the relative
difference of the sds of ``f`` at 500 held-out points; with ``--moments``, the same fit on
the moments' route instead of the Schur complement's (``sbsvm_response.uses_series``
returning False: the response's ``P x P`` system formed and factorised), alternating in the
same process. Medians of ``--repeats`` runs after one that compiles::

    python -m benchmarks.sbsvm_response_scale --sizes 100000 1000000 --full 100000 \
        --moments 100000 1000000
    python -m benchmarks.sbsvm_response_scale --m 128 --sizes 20000 --full --moments 20000
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from ._common import machine_note, markdown_table, peak_rss_mb

M = 64
N_TEST = 500


def _data(n: int):
    from ppl_bsvm import datasets

    X, y = datasets.susy(n + N_TEST, seed=0)
    mean, sd = X[:n].mean(axis=0), X[:n].std(axis=0)
    X = (X - mean) / sd
    return X[:n], y[:n], X[n:]


def _fit(X, y, m, **kw):
    import ppl_bsvm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ppl_bsvm.SlowFitWarning)
        t0 = time.perf_counter()
        fit = ppl_bsvm.fit(X, y, model="gp", method="svi", num_inducing=m, store_f=False,
                           num_draws=100, seed=0, **kw)
        return fit, time.perf_counter() - t0


def _patched(module, name, value, X, y, m):
    """A linear-response fit with ``module.name`` replaced by ``value``."""
    kept = getattr(module, name)
    setattr(module, name, value)
    try:
        return _fit(X, y, m, linear_response=True)
    finally:
        setattr(module, name, kept)


def measure(n: int, repeats: int, full: bool, m: int = M, moments: bool = False) -> dict:
    from ppl_bsvm.inference.vi import sbsvm_response

    X, y, X_test = _data(n)
    runs = {"mean_field": [], "linear_response": [], "correction": [], "added": []}
    if full:
        runs.update({"full_linear_response": [], "full_correction": []})
    if moments:
        runs["moments_correction"] = []
    for rep in range(repeats + 1):  # the first compiles
        _, t_mf = _fit(X, y, m)
        lr, t_lr = _fit(X, y, m, linear_response=True)
        if full:
            whole, t_whole = _patched(sbsvm_response, "sample_rows", lambda n, m, chunk: 0,
                                      X, y, m)
        if moments:
            square = _patched(sbsvm_response, "uses_series", lambda rows, m: False, X, y, m)[0]
        if rep:
            runs["mean_field"].append(t_mf)
            runs["linear_response"].append(t_lr)
            runs["correction"].append(lr.timings["linear_response"])
            # what the response adds to the fit: its timing also holds the mean-field
            # marginals the fit needs anyway (from the polish's first sweep)
            runs["added"].append(t_lr - t_mf)
            if full:
                runs["full_linear_response"].append(t_whole)
                runs["full_correction"].append(whole.timings["linear_response"])
            if moments:
                runs["moments_correction"].append(square.timings["linear_response"])
    out = {"n": n, "m": m, "status": lr.idata.attrs.get("covariance"),
           "form": lr.idata.attrs.get("response_form"),
           "rows": int(lr.idata.attrs["response_rows"]),
           "mc_error": float(lr.idata.attrs["response_mc_error"]),
           "polish_sweeps": int(lr.idata.attrs["polish_sweeps"]),
           **{f"{k}_s": float(np.median(v)) for k, v in runs.items()}, "runs": runs}
    sd = np.sqrt(lr.predict_latent(X_test)[1])
    sd_mf = np.sqrt(_fit(X, y, m)[0].predict_latent(X_test)[1])
    out["sd_ratio_mean_field_median"] = float(np.median(sd_mf / sd))
    if full:
        sd_full = np.sqrt(whole.predict_latent(X_test)[1])
        diff = np.abs(sd / sd_full - 1.0)
        out.update({"full_status": whole.idata.attrs.get("covariance"),
                    "sd_difference_median": float(np.median(diff)),
                    "sd_difference_max": float(diff.max())})
    if moments:
        sd_moments = np.sqrt(square.predict_latent(X_test)[1])
        out["moments_sd_difference_max"] = float(np.abs(sd / sd_moments - 1.0).max())
    out["peak_rss_mb"] = peak_rss_mb()
    out["machine"] = machine_note()
    return out


def write_report(results: list[dict], out: Path) -> str:
    def fmt(r, key, spec=".2f"):
        return format(r[key], spec) if key in r else "-"

    rows = [[r["n"], r["m"], fmt(r, "mean_field_s"), fmt(r, "linear_response_s"),
             fmt(r, "correction_s"), fmt(r, "added_s"), r.get("form", "moments"), r["rows"],
             f"{100 * r['mc_error']:.2f} %", r["polish_sweeps"], fmt(r, "full_correction_s"),
             (f"{100 * r['sd_difference_median']:.2f} % / {100 * r['sd_difference_max']:.2f} %"
              if "sd_difference_max" in r else "-"),
             fmt(r, "moments_correction_s"), fmt(r, "moments_sd_difference_max", ".1e"),
             fmt(r, "sd_ratio_mean_field_median", ".3f"), r["status"]] for r in results]
    text = "\n".join([
        "# S-BSVM's linear response at scale (`susy`)", "",
        "`python -m benchmarks.sbsvm_response_scale` (module doc).", "",
        markdown_table(["n", "m", "mean-field fit s", "linear-response fit s",
                        "of which the correction s",
                        "linear-response less mean-field fit s (median of the pairs)", "form",
                        "rows in the sums",
                        "estimated MC error of the sds of f", "polish sweeps",
                        "correction with the full sum s",
                        "sd of f*: subsample vs full sum, median / max difference",
                        "correction on the moments' route s",
                        "sd of f*: Schur vs moments, max difference",
                        "sd of f*: mean-field / linear response (median)", "covariance"],
                       rows), "",
        f"Machine: {results[-1].get('machine') or machine_note()}.", ""])
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text(text)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--full", type=int, nargs="*", default=[100_000],
                        help="sizes at which the full sum is measured too")
    parser.add_argument("--moments", type=int, nargs="*", default=[],
                        help="sizes at which the moments' route is measured too")
    parser.add_argument("--m", type=int, default=M, help="inducing points")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("reports/sbsvm_response"))
    args = parser.parse_args(argv)
    results = [measure(n, args.repeats, n in args.full, args.m, n in args.moments)
               for n in args.sizes]
    print(write_report(results, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
