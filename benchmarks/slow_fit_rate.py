"""Float64 rate of the operations that dominate the slow linear fits, on this machine.

1. Cholesky of a p x p SPD matrix (p^3/3 flops) through JAX (jitted, what the engines run)
   and numpy under one BLAS thread; 2. linear Gibbs at d >> n: seconds per sweep against its
   leading-term flop count (ppl_bsvm._cost). Medians of 3 runs. ``python -m
benchmarks.slow_fit_rate`` writes ``reports/slow_fit/rate.txt`` (the committed file keeps an
earlier run below the last).
"""

import os
import subprocess
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)
out = []


def median_time(fn, reps=3):
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return float(np.median(ts))


rng = np.random.default_rng(0)
for p in (1000, 2000):
    A = rng.standard_normal((p, p)); S = A @ A.T + p * np.eye(p)
    chol = jax.jit(jnp.linalg.cholesky); Sj = jnp.asarray(S); chol(Sj).block_until_ready()
    t_jax = median_time(lambda: chol(Sj).block_until_ready())
    try:
        from threadpoolctl import threadpool_limits
        with threadpool_limits(1):
            t_np = median_time(lambda: np.linalg.cholesky(S))
    except ImportError:
        t_np = float("nan")
    out.append(f"cholesky p={p}: jax {p**3/3/t_jax/1e9:.2f} GFLOP/s, numpy 1 thread "
               f"{p**3/3/t_np/1e9:.2f} GFLOP/s")

import ppl_bsvm  # noqa: E402
from ppl_bsvm import _cost  # noqa: E402
from ppl_bsvm.api import get_engine  # noqa: E402

n = 50
for d in (1000, 2000):
    X = rng.standard_normal((n, d)); y = np.where(X[:, 0] > 0, 1, -1)
    for method, opts in [("gibbs", {"num_warmup": 10, "num_samples": 10, "num_chains": 1}),
                         ("svi", {"max_iter": 20, "tol": 0.0})]:
        run = lambda: ppl_bsvm.fit(X, y, model="linear", method=method, seed=0, **opts)  # noqa
        run()  # compile
        t = median_time(run)
        engine = get_engine("linear", method)
        flops = engine.flops(n, d, {**engine.options().as_dict(), **opts})
        out.append(f"linear {method} n={n} d={d} {opts}: {t:.2f} s, leading terms "
                   f"{flops:.3g} flop -> {flops/t/1e9:.2f} GFLOP/s effective; "
                   f"estimate at {_cost.RATE/1e9:g} GFLOP/s: {flops/_cost.RATE:.2f} s")
out.append("uptime: " + subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
text = "\n".join(out)
print(text)
os.makedirs("reports/slow_fit", exist_ok=True)
with open(os.path.join("reports/slow_fit", "rate.txt"), "w") as fh:
    fh.write(text + "\n")
