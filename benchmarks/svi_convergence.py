"""Do the stochastic engines' defaults end at the optimum they report? (issue 30, items 3-4)

``python -m benchmarks.svi_convergence [--datasets bc digits wdbc heart]``

Data: scikit-learn's breast cancer (``bc``), digits 3 against 8 (``digits``), and the bundled
``wdbc`` and ``heart``, each split by ``datasets.splits.split_data(X, y, 0.3, 0)`` (features
standardised by the training split). For every data set:

- **S-BSVM at batch VI's kernel.** B-BSVM learns an RBF kernel (``method="vi",
  learn_hyperparameters=True``, defaults); at that fixed kernel B-BSVM run to convergence
  (``tol=1e-14``, up to 20,000 sweeps) is the yardstick, and ``method="svi"`` with its defaults
  (and with ``polish=False``: the ELBO-change rule alone, the behaviour before the polish) is
  measured by the median over the test points of ``|mean - yardstick mean| / yardstick sd``
  (``fit.predict_latent``), the NLPD and the exact final ELBO.
- **Linear SVI.** Against Gibbs (``method="gibbs"``, defaults: the exact sampler) in Gibbs sds
  and against linear VI in VI sds; the slope of the test latent means on Gibbs's; the Gibbs mass
  (its marginal as a normal) inside the 90 % intervals, mean-field and ``linear_response=True``.
- **Learned hyperparameters.** S-BSVM's (defaults, ``learn_hyperparameters=True``) against
  B-BSVM's: both kernels and both exact ELBOs.

Times are the second of two identical fits in this process (the first compiles; one run each).
Writes ``reports/svi_convergence/``: ``README.md``, ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from ._common import machine_note, markdown_table

OUT = Path("reports/svi_convergence")
DATASETS = ("bc", "digits", "wdbc", "heart")


def load(name: str):
    """The split of data set ``name`` (module docstring)."""
    from ppl_bsvm import datasets
    from ppl_bsvm.datasets.splits import split_data

    if name == "bc":
        from sklearn.datasets import load_breast_cancer

        X, y = load_breast_cancer(return_X_y=True)
    elif name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        keep = (y == 3) | (y == 8)
        X, y = X[keep], (y[keep] == 8).astype(int)
    else:
        X, y = datasets.load(name)
    return split_data(X, y, 0.3, 0)


def sd_distance(mean, ref_mean, ref_sd) -> float:
    """Median over the points of ``|mean - ref_mean| / ref_sd``."""
    return float(np.median(np.abs(np.asarray(mean) - ref_mean) / ref_sd))


def coverage90(mean, sd, ref_mean, ref_sd) -> float:
    """Mean over the points of the mass of ``N(ref_mean, ref_sd^2)`` inside ``mean +- 1.645
    sd``."""
    from scipy.stats import norm

    hi = norm.cdf((mean + 1.645 * sd - ref_mean) / ref_sd)
    return float(np.mean(hi - norm.cdf((mean - 1.645 * sd - ref_mean) / ref_sd)))


def _nlpd(fit, X, y) -> float:
    p = np.clip(fit.predict_proba(X), 1e-12, 1 - 1e-12)
    return float(-np.mean(np.where(y == np.unique(y)[-1], np.log(p), np.log(1 - p))))


def _fit(split, **options):
    """The second of two identical fits (the first compiles), its time and its warnings."""
    import ppl_bsvm

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ppl_bsvm.fit(split.X_train, split.y_train, seed=0, progress_bar=False, **options)
        caught.clear()
        t = time.perf_counter()
        fit = ppl_bsvm.fit(split.X_train, split.y_train, seed=0, progress_bar=False, **options)
        seconds = time.perf_counter() - t
    names = [w.category.__name__ for w in caught if w.category.__name__ == "ConvergenceWarning"]
    return fit, seconds, names


def _row(fit, seconds, warned, split, ref_mean, ref_sd) -> dict:
    m, v = fit.predict_latent(split.X_test)
    batch = fit.options.get("batch_size") or 100
    return {"distance": sd_distance(m, ref_mean, ref_sd), "nlpd": _nlpd(fit, split.X_test,
                                                                         split.y_test),
            "elbo": float(fit.idata["approximation"]["elbo"]), "seconds": seconds,
            "epochs": fit.n_iter * batch / split.X_train.shape[0],
            "sweeps": int(fit.idata.attrs.get("fixed_point_sweeps", 0)),
            "stop": fit.stop_reason, "warned": bool(warned), "mean": np.asarray(m),
            "sd": np.sqrt(np.asarray(v))}


def run(name: str) -> dict:
    import ppl_bsvm
    from ppl_bsvm import kernels

    split = load(name)
    learned, t_learn, _ = _fit(split, model="gp", method="vi", learn_hyperparameters=True)
    hp = {k: float(np.asarray(v)) for k, v in learned.hyperparameters.items()}
    kernel = kernels.RBF(lengthscale=hp["lengthscale"], variance=hp["variance"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yard = ppl_bsvm.fit(split.X_train, split.y_train, model="gp", method="vi", kernel=kernel,
                            tol=1e-14, max_iter=20000, seed=0, progress_bar=False)
    ym, yv = yard.predict_latent(split.X_test)
    ysd = np.sqrt(yv)
    out = {"n": int(split.X_train.shape[0]), "kernel": hp,
           "bbsvm": {"elbo": float(yard.idata["approximation"]["elbo"]),
                     "sweeps": yard.n_iter, "stop": yard.stop_reason,
                     "nlpd": _nlpd(yard, split.X_test, split.y_test)}}
    for label, extra in (("sbsvm", {}), ("sbsvm_elbo_rule", {"polish": False})):
        out[label] = _row(*_fit(split, model="gp", method="svi", kernel=kernel, **extra), split,
                          ym, ysd)
    gibbs, t_gibbs, _ = _fit(split, model="linear", method="gibbs")
    gm, gv = gibbs.predict_latent(split.X_test)
    gsd = np.sqrt(gv)
    vi = _row(*_fit(split, model="linear", method="vi"), split, gm, gsd)
    out["gibbs"] = {"seconds": t_gibbs, "nlpd": _nlpd(gibbs, split.X_test, split.y_test)}
    out["linear_vi"] = vi
    for label, extra in (("linear_svi", {}), ("linear_svi_elbo_rule", {"polish": False}),
                         ("linear_svi_lr", {"linear_response": True})):
        row = _row(*_fit(split, model="linear", method="svi", **extra), split, gm, gsd)
        row["distance_vi"] = sd_distance(row["mean"], vi["mean"], vi["sd"])
        row["slope"] = float(np.polyfit(gm, row["mean"], 1)[0])
        row["cover90"] = coverage90(row["mean"], row["sd"], gm, gsd)
        out[label] = row
    sparse, t_sparse, warned = _fit(split, model="gp", method="svi", learn_hyperparameters=True)
    out["learned"] = {
        "bbsvm": {**hp, "elbo": float(learned.idata["approximation"]["elbo"]),
                  "stop": learned.stop_reason, "seconds": t_learn},
        "sbsvm": {**{k: float(np.asarray(v)) for k, v in sparse.hyperparameters.items()},
                  "elbo": float(sparse.idata["approximation"]["elbo"]),
                  "stop": sparse.stop_reason, "seconds": t_sparse, "warned": bool(warned),
                  "gain": float(sparse.idata.attrs.get("hyper_gain", np.nan))}}
    for row in out.values():
        if isinstance(row, dict):
            row.pop("mean", None), row.pop("sd", None)
    return out


def _f(x, fmt=".3f"):
    return format(x, fmt)


def write(results: dict, seconds: float, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    gp_rows, lin_rows, hyp_rows = [], [], []
    for name, r in results.items():
        for label, what in (("sbsvm_elbo_rule", "ELBO rule alone"), ("sbsvm", "default")):
            s = r[label]
            gp_rows.append([name, what, _f(s["distance"]), f"{_f(s['nlpd'])} ({_f(r['bbsvm']['nlpd'])})",
                            f"{s['elbo']:.2f} ({r['bbsvm']['elbo']:.2f})", _f(s["seconds"], ".2f"),
                            f"{s['epochs']:.0f} + {s['sweeps']}", s["stop"] + (", warned" if s["warned"] else "")])
        for label, what in (("linear_svi_elbo_rule", "ELBO rule alone"), ("linear_svi", "default"),
                            ("linear_svi_lr", "linear_response")):
            s = r[label]
            lin_rows.append([name, what, _f(s["distance"]), _f(r["linear_vi"]["distance"]),
                             _f(s["distance_vi"]), _f(s["slope"], ".2f"), _f(s["cover90"], ".2f"),
                             f"{_f(s['nlpd'])} ({_f(r['gibbs']['nlpd'])})", _f(s["seconds"], ".2f"),
                             f"{s['epochs']:.0f} + {s['sweeps']}", s["stop"] + (", warned" if s["warned"] else "")])
        b, s = r["learned"]["bbsvm"], r["learned"]["sbsvm"]
        hyp_rows.append([name, f"{b['lengthscale']:.1f} / {b['variance']:.1f}", f"{b['elbo']:.2f}",
                         b["stop"], f"{s['lengthscale']:.1f} / {s['variance']:.1f}",
                         f"{s['elbo']:.2f}", s["stop"] + (", warned" if s["warned"] else ""),
                         _f(s["seconds"], ".2f")])
    text = f"""# Stochastic VI's defaults against the optimum they report

Written by `python -m benchmarks.svi_convergence` (issue 30, items 3-4; the method is in the
script's docstring). Distances are medians over the test points of |mean - reference mean| /
reference sd of the latent `f(x*)`. Epochs: minibatch epochs + full-data sweeps of the polish.
Times: the second of two identical fits in one process (one run each).

Machine: {machine_note()}. Total {seconds / 60:.1f} min.

## S-BSVM at the kernel batch VI learns (reference: B-BSVM run to convergence at that kernel)

{markdown_table(["data", "S-BSVM", "distance [B-BSVM sds]", "NLPD (B-BSVM)", "ELBO (B-BSVM)", "time [s]", "epochs + sweeps", "stop"], gp_rows)}

## Linear SVI (reference: Gibbs, the exact sampler)

{markdown_table(["data", "linear SVI", "distance [Gibbs sds]", "batch VI's [Gibbs sds]", "distance to batch VI [VI sds]", "slope on Gibbs", "Gibbs mass in 90 %", "NLPD (Gibbs)", "time [s]", "epochs + sweeps", "stop"], lin_rows)}

## Learned hyperparameters (RBF lengthscale / variance, exact final ELBO)

{markdown_table(["data", "B-BSVM", "ELBO", "stop", "S-BSVM", "ELBO", "stop", "S-BSVM time [s]"], hyp_rows)}
"""
    (out / "README.md").write_text(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    results = {}
    for name in args.datasets:
        results[name] = run(name)
        print(name, json.dumps(results[name], default=float)[:300], flush=True)
    write(results, time.perf_counter() - t0, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
