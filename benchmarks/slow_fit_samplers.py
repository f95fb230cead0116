"""The GP samplers' and the RVM's time estimates against measured runs, on this machine.

``python -m benchmarks.slow_fit_samplers`` (about 8 minutes on 2 cores; ``--long`` adds the
default run of GP NUTS with hyperpriors at n = 100, 10 more) writes
``reports/slow_fit/samplers.txt``: for every configuration the measured seconds (sampling
only, compilation excluded: ``Fit.timings["mcmc"]``; the RVM's whole engine), the estimate
(``engine.flops / RATE``, ``ppl_bsvm._cost``), and for NUTS the leapfrog steps of the slowest
of the 4 vectorized chains per iteration, in warmup and after it, and the seconds per step.

Data: scikit-learn's breast-cancer set (d = 30), standardised, the first n points of a fixed
permutation; Banana (d = 2), likewise. NUTS's per-step cost is measured with trees capped at
depth 5 (``max_tree_depth=5``: short runs at n up to 400 with hyperpriors) on the second of
two fits (the programs compiled by the first); its tree sizes on runs of the default length.
To see the warmup's trees the benchmark keeps every iteration (it runs the driver with
``num_warmup=0`` and ``num_samples = num_warmup + num_samples`` while the kernel adapts over
the first ``num_warmup``), which leaves the sampler's work unchanged.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import jax
import numpy as np

import ppl_bsvm
from ppl_bsvm import _cost, kernels
from ppl_bsvm.api import get_engine
from ppl_bsvm.inference.mcmc import _common, driver
from ppl_bsvm.inference.mcmc.pcg import preconditioner

warnings.simplefilter("ignore")
_sample_chains = driver.sample_chains


def _keep_warmup(*args, num_warmup, num_samples, **kwargs):
    return _sample_chains(*args, num_warmup=0, num_samples=num_warmup + num_samples, **kwargs)


_common.sample_chains = _keep_warmup


def data(name: str, n: int):
    if name == "breast":
        from sklearn.datasets import load_breast_cancer

        X, y = load_breast_cancer(return_X_y=True)
        y = np.where(y == 1, 1.0, -1.0)
    else:
        X, y = ppl_bsvm.datasets.load(name)
    X = (X - X.mean(0)) / X.std(0)
    idx = np.random.default_rng(0).permutation(len(y))[:n]
    return X[idx], y[idx]


def estimate(model, method, n, d, options) -> float:
    engine = get_engine(model, method)
    return engine.flops(n, d, {**engine.options().as_dict(), **options}) / _cost.RATE


def fit(X, y, model, method, seed=0, **options):
    start = time.perf_counter()
    result = ppl_bsvm.fit(X, y, model=model, method=method, seed=seed, progress_bar=False,
                          **options)
    return result, time.perf_counter() - start


out = []


def line(text):
    print(text, flush=True)
    out.append(text)


def nuts_step(model, name, n, iterations, **options):
    """Seconds per leapfrog step of 4 chains, trees capped at depth 5 (second of two fits)."""
    X, y = data(name, n)
    opts = dict(num_warmup=iterations, num_samples=iterations, num_chains=4, max_tree_depth=5,
                **options)
    fit(X, y, model, "nuts", seed=0, **opts)
    result, _ = fit(X, y, model, "nuts", seed=1, **opts)
    steps = int(np.asarray(result.idata.sample_stats["n_steps"]).max(0).sum())
    seconds = result.timings["mcmc"]
    line(f"nuts {model} {name} n={n} {options or ''} depth 5: {seconds:.2f} s for {steps} "
         f"steps = {1e3 * seconds / steps:.3f} ms per step of 4 chains")


def nuts_run(model, name, n, **options):
    """A run of the default length: seconds, trees, estimate."""
    X, y = data(name, n)
    result, _ = fit(X, y, model, "nuts", **options)
    steps = np.asarray(result.idata.sample_stats["n_steps"]).max(0)  # slowest chain
    warmup = int(options.get("num_warmup", 1000))
    seconds = result.timings["mcmc"]
    line(f"nuts {model} {name} n={n} {options or ''}: {seconds:.1f} s measured, "
         f"{estimate(model, 'nuts', n, X.shape[1], options):.1f} s estimated; steps per "
         f"iteration {steps[:warmup].mean():.0f} in warmup ({steps[:100].mean():.0f} in its "
         f"first 100), {steps[warmup:].mean():.0f} after, {steps.mean():.1f} overall; "
         f"{1e3 * seconds / steps.sum():.3f} ms per step of 4 chains")


def gibbs_run(name, n, iterations):
    X, y = data(name, n)
    opts = dict(num_warmup=iterations, num_samples=iterations, num_chains=4)
    fit(X, y, "gp", "gibbs", seed=0, **opts)
    result, _ = fit(X, y, "gp", "gibbs", seed=1, **opts)
    cg = float(np.asarray(result.idata.sample_stats["cg_iters"]).mean())
    with jax.enable_x64(True):  # the engine's K and its rule for the path
        K = kernels.gram(kernels.RBF(), kernels.RBF().init_params(X), X, 1e-6)
        pre = preconditioner(np.asarray(K), jitter=1e-6)
    rank = 0 if pre is None else pre.W.shape[1]
    engine = get_engine("gp", "gibbs")
    refined = engine.flops(n, X.shape[1], {**engine.options().as_dict(), **opts}, rank=rank)
    line(f"gibbs gp {name} n={n} {opts}: {result.timings['mcmc']:.2f} s measured "
         f"(conjugate-gradient iterations per sweep {cg:.1f}, rank {rank}; 0: Cholesky path), "
         f"{estimate('gp', 'gibbs', n, X.shape[1], opts):.2f} s estimated before the fit, "
         f"{refined / _cost.RATE:.2f} s once the path is known")


def rvm_run(name, n, **options):
    X, y = data(name, n)
    result, seconds = fit(X, y, "gp", "rvm", **options)
    line(f"rvm {name} n={n} {options or ''}: {result.timings['engine']:.2f} s measured "
         f"({result.n_iter} iterations, {result.idata.attrs['n_relevance']} relevance vectors, "
         f"stop {result.stop_reason}), "
         f"{estimate('gp', 'rvm', n, X.shape[1], options):.2f} s estimated")


line(f"# python -m benchmarks.slow_fit_samplers {' '.join(sys.argv[1:])}")
for n, iterations in ((100, 30), (200, 30), (400, 8)):
    nuts_step("gp", "breast", n, iterations, hyperpriors="default")
for n in (100, 400):
    nuts_step("gp", "breast", n, 30)
for name, n in (("breast", 400), ("banana", 5000)):
    nuts_step("sparse_gp", name, n, 30)
nuts_run("gp", "breast", 100)
nuts_run("gp", "breast", 400)
nuts_run("gp", "breast", 50, hyperpriors="default")
nuts_run("gp", "breast", 100, hyperpriors="default", num_warmup=100, num_samples=100)
if "--long" in sys.argv:
    nuts_run("gp", "breast", 100, hyperpriors="default")
nuts_run("sparse_gp", "banana", 2000)
gibbs_run("breast", 400, 100)
gibbs_run("banana", 1000, 100)
gibbs_run("banana", 2000, 50)
rvm_run("breast", 400)
for n in (1000, 1500, 2000, 3000, 4000):
    rvm_run("banana", n)
for n in (500, 1000):
    rvm_run("banana", n, algorithm="reestimate")
line("uptime: " + subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
os.makedirs("reports/slow_fit", exist_ok=True)
with open(os.path.join("reports/slow_fit", "samplers.txt"), "w") as fh:
    fh.write("\n".join(out) + "\n")
