"""Seconds per step of linear SVI at n = 50, d = 1000: the difference of two max_iter values
(medians of 3 fits each), so that compilation and the rate's initial gradients cancel.
``python -m benchmarks.slow_fit_svi_step`` writes ``reports/slow_fit/svi_step.txt``."""

import os
import subprocess
import time
import warnings

import numpy as np

import ppl_bsvm

warnings.simplefilter("ignore")
rng = np.random.default_rng(0)
n, d = 50, 1000
X = rng.standard_normal((n, d)); y = np.where(X[:, 0] > 0, 1, -1)
t = {}
for it in (10, 40):
    ppl_bsvm.fit(X, y, model="linear", method="svi", max_iter=it, tol=0.0)
    ts = []
    for _ in range(3):
        s = time.perf_counter()
        ppl_bsvm.fit(X, y, model="linear", method="svi", max_iter=it, tol=0.0)
        ts.append(time.perf_counter() - s)
    t[it] = float(np.median(ts))
step = (t[40] - t[10]) / 30
p = d + 1
line = (f"linear svi n={n} d={d}: {t[10]:.2f} s at max_iter=10, {t[40]:.2f} s at 40: "
        f"{step:.3f} s per step = {step / (p**3 / 3):.3g} s per p^3/3 "
        f"({p**3 / 3 / step / 1e9:.2f} GFLOP/s on p^3/3)\n"
        + subprocess.run(["uptime"], capture_output=True, text=True).stdout)
print(line)
os.makedirs("reports/slow_fit", exist_ok=True)
open("reports/slow_fit/svi_step.txt", "w").write(line)
