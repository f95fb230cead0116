r"""Solving the replica-TAP fixed point for one ``S/N`` or a learning curve: where the solver
starts and the compiled run.

Each fixed point is found by the safeguarded Newton-Krylov solver of :mod:`tap_newton` (one
compiled program per problem size, reused by every ratio and later call). Its cost is the
number of factorisations, and most of them are spent far from the fixed point when it starts
from the uniform sites of spec 5.3: on Wisconsin (N = 683, 62 support vectors) 17 of them,
12 before the first Newton step succeeds, because the sites of the points far from the margin
must shrink by three orders of magnitude while those of the support vectors grow. So a cold
start is built on a smaller problem first (:func:`cold_start`):

1. rank the points by their margin ``y_i f_i`` under kernel ridge regression,
   ``f = K (K + 0.1 mean(diag K) I)^{-1} y``: the smallest are the points near the decision
   boundary, where the support vectors and the large sites lie (regression: every k-th point);
2. solve the fixed point at the same ``S/N`` on the ``m`` points with the smallest margins (the
   bootstrap of that subset), ``m`` the largest of :data:`SIZES` up to
   :data:`COARSE_FRACTION` of ``N`` (itself started the same way where it is large enough),
   to the loose tolerance :data:`COARSE_TOL`;
3. extend it to the other points (:func:`extend`): their cavity is the coarse Gaussian
   model's marginal at their inputs (Eq. 19), and T3/T4 give their sites.

The full problem then needs 4-5 factorisations at S = N on the benchmark's Wisconsin and Pima
(from 17 and 13), for 7-14 factorisations of the 256-point problem (each about 5 % of a full
one at N = 683). Sizes come from a fixed ladder so that the coarse programs are shared by all
data sets (and kept on disk by the compilation cache). Below ``2 * SIZES[0]`` points the start
is that of spec 5.3 (a few tens of factorisations of a small problem); so it is where the
coarse iteration has not converged within :data:`COARSE_BUDGET`. A learning curve is solved in
increasing ``S/N``, each ratio started from the fixed point of the ratio below when that is at
least half as large (:data:`WARM_RATIO`), else from ratios that double on the way
(:func:`warm_ladder`), through :func:`tap_newton.restart`: its first step is then the Newton
step from the old fixed point, which is the predictor along the curve.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import numpy as np
from scipy.linalg import cho_factor, cho_solve

from .._jax import to_device
from ..inference.loop import RunResult, run
from . import tap, tap_newton

__all__ = [
    "Solution",
    "SIZES",
    "COARSE_FRACTION",
    "COARSE_TOL",
    "WARM_RATIO",
    "warm_ladder",
    "tap_data",
    "n_copies_for",
    "coarse_size",
    "boundary_order",
    "extend",
    "cold_start",
    "solve_ratio",
]

SIZES = tuple(2**k for k in range(8, 16))
"""Sizes of the coarse problems: 256, 512, 1024, ... (one compiled program each, shared by
every data set)."""
COARSE_FRACTION = 0.5
"""A coarse problem has at most this fraction of the points of the level above."""
COARSE_TOL = 1e-3
"""Moment mismatch to which the coarse problems are solved (the full solve takes over)."""
COARSE_BUDGET = 20.0
"""Most factorisations of a coarse problem, in units of the full problem's cost
``(N / m)^3``: where the coarse iteration crawls (Wisconsin's 256 points at S/N = 3 take 260,
the cost of 14 full ones, and the full problem then 11), it is given up for the start of spec
5.3 (a coarse start that has not converged is a worse start than that)."""
RIDGE = 0.1
"""Ridge of the regression that ranks the points, relative to the mean of ``diag K``."""
WARM_RATIO = 2.0
"""A fixed point at ``S/N = r`` starts the solve at ``r'`` when ``r < r' <= 2 r``; further
ratios are reached through doubling ones (:func:`warm_ladder`)."""


def warm_ladder(previous: float, ratio: float) -> list[float]:
    """The ratios to solve, in order, from a fixed point at ``S/N = previous`` to ``ratio``:
    each at most :data:`WARM_RATIO` times the one before, ``ratio`` last. From a cold start at
    a large ratio the solver needs hundreds of factorisations more than along such a ladder
    (``S/N = 30`` on Pima, N = 768, RBF width 3: 1,578 factorisations of the full problem and
    540 of the coarse one, 52.7 s, against 77 from the fixed point at ``S/N = 1`` through 2, 4,
    8 and 16, 3.9 s with ``S/N = 1`` itself, the same fixed point to 3e-9; on Crabs 1,456
    against 51)."""
    steps, r = [], previous
    while ratio > WARM_RATIO * r:
        r *= WARM_RATIO
        steps.append(r)
    return steps + [ratio]


class Solution(NamedTuple):
    """A solve at one ``S/N``: the run of :func:`loop.run` on the full problem and the
    factorisations spent on coarse problems for its start (0 without one)."""

    run: RunResult
    coarse_iter: int = 0


def n_copies_for(ratio_max: float, kind: str) -> int:
    """Poisson truncation for the soft-margin and regression sums: tail below ~1e-12."""
    if kind == "hard":
        return 0
    return int(np.ceil(ratio_max + 8.0 * np.sqrt(ratio_max) + 12.0))


def tap_data(K, y, kind: str, C: float, noise: float, ratio: float) -> tap.TAPData:
    """The traced inputs of the solver (``C`` and ``noise`` are ignored by the models that do
    not use them)."""
    return tap.TAPData(
        to_device(K, np.float64),
        to_device(y, np.float64),
        to_device(ratio, np.float64),
        to_device(C if kind == "soft" else 1.0, np.float64),
        to_device(noise if kind == "regression" else 1.0, np.float64),
    )


def coarse_size(n: int) -> int | None:
    """The largest of :data:`SIZES` up to ``COARSE_FRACTION * n``, or None if there is none
    (then the problem starts from spec 5.3, whose cost is small at that size)."""
    fit = [m for m in SIZES if m <= COARSE_FRACTION * n]
    return fit[-1] if fit else None


def boundary_order(K, y, kind: str) -> np.ndarray:
    """Indices of the points, nearest to the decision boundary first: increasing margin
    ``y_i f_i`` of kernel ridge regression (module doc); for regression, every k-th point
    first (no point is special)."""
    n = len(y)
    if kind == "regression":
        stride = max(1, n // (coarse_size(n) or n))
        return np.argsort(np.arange(n) % stride, kind="stable")
    ridge = RIDGE * float(np.mean(np.diag(K)))
    factor = cho_factor(K + ridge * np.eye(n), lower=True, check_finite=False)
    f = K @ cho_solve(factor, y, check_finite=False)
    return np.argsort(y * f, kind="stable")


def _spec_start(data: tap.TAPData) -> tap.TAPState:
    return tap.init(None, None, data)


@functools.partial(jax.jit, static_argnums=0)
def extend(config: tap.TAPConfig, coarse: tap.TAPData, sites, K_cross, k_diag, rest: tap.TAPData):
    """Sites for the points left out of a coarse problem: their cavity is the coarse Gaussian
    model's marginal at their inputs (Eq. 19; they carry no site there), and T3/T4 turn it
    into a site. ``rest`` holds their labels and the scalars (its ``K`` is not read)."""
    fac = tap.factor(coarse.K, *sites)
    field = tap.fields_at(fac, coarse.K, K_cross, k_diag)
    cav = tap.Cavity(field.chi, field.mean, field.var, 1.0 / field.chi)
    return tap.tilted_and_sites(config, cav, rest)[1]


def cold_start(K, y, config: tap.TAPConfig, C: float, noise: float, ratio: float, *,
               max_iter: int, order=None) -> tuple[tap.TAPState, int]:
    """Sites from which the solve at ``ratio`` starts without a nearby fixed point: the
    fixed point of the coarse problem on the points nearest the boundary, extended to the
    others by :func:`extend` (module doc); the start of spec 5.3 for small problems or if the
    coarse solve fails. Returns the sites and the factorisations the coarse solves took."""
    n = len(y)
    m = coarse_size(n)

    def spec(spent=0):
        return _spec_start(tap_data(K, y, config.model, C, noise, ratio)), spent

    if m is None:
        return spec()
    order = boundary_order(K, y, config.model) if order is None else order
    subset, rest = np.sort(order[:m]), np.sort(order[m:])
    K_sub = K[np.ix_(subset, subset)]
    try:
        budget = int(COARSE_BUDGET * (n / m) ** 3)
        coarse = solve_ratio(K_sub, y[subset], config, C, noise, ratio, tol=COARSE_TOL,
                             max_iter=min(max_iter, budget))
    except FloatingPointError:
        return spec()
    spent = coarse.run.n_iter + coarse.coarse_iter
    if coarse.run.stop_reason != "tol":
        return spec(spent)
    state = coarse.run.state
    inner = (state.Lambda, state.gamma, state.lam)
    outer = extend(
        config, tap_data(K_sub, y[subset], config.model, C, noise, ratio), inner,
        to_device(K[np.ix_(subset, rest)]), to_device(np.diag(K)[rest]),
        tap_data(np.zeros((0, 0)), y[rest], config.model, C, noise, ratio),
    )
    sites = []
    for a, b in zip(inner, outer):
        full = np.empty(n)
        full[subset], full[rest] = np.asarray(a), np.asarray(b)
        sites.append(full)
    if not all(np.all(np.isfinite(v)) for v in sites):
        return spec(spent)
    return tap.TAPState(*map(to_device, sites), to_device(0.5), to_device(np.inf)), spent


def solve_ratio(K, y, config: tap.TAPConfig, C: float, noise: float, ratio: float, *,
                tol: float, max_iter: int, start=None, order=None) -> Solution:
    """The fixed point at one ``S/N`` by the safeguarded Newton-Krylov solver, from
    ``start``: sites (a :class:`tap.TAPState`), the final :class:`tap_newton.NewtonState` of
    a nearby ratio (:func:`tap_newton.restart`: the first step is the predictor), or None for
    :func:`cold_start`; raises ``FloatingPointError`` if the iterates become non-finite
    (:func:`loop.run`)."""
    data = tap_data(K, y, config.model, C, noise, ratio)
    newton = tap_newton.NewtonConfig(config)
    spent = 0
    if isinstance(start, tap_newton.NewtonState):
        state = tap_newton.restart(newton, start, data)
    else:
        if start is None:
            start, spent = cold_start(K, y, config, C, noise, ratio, max_iter=max_iter,
                                      order=order)
        state = tap_newton.init(newton, None, data, start)
    result = run(tap_newton.step, state, data, static=newton, max_iter=max_iter, tol=tol,
                 converged=tap.converged)
    return Solution(result, spent)
