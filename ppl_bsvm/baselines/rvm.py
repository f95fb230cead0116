"""The relevance vector machine classifier as an engine: ``ppl_bsvm.fit(X, y, method="rvm")``.

The evidence maximisers are in :mod:`.rvm_algorithms`; this module puts the kernel basis on them
(``_fit_basis``: the median-heuristic hyperparameters and the design matrix ``[K, 1]``), draws the
weights of the Laplace posterior, and returns a :class:`~ppl_bsvm.Fit` whose predictor is the
logistic-Gaussian integral over ``f(x) = phi(x)^T w`` (``rvm_latent`` on an
:class:`RVMPredictive`). The estimators ``ppl_bsvm.RVMRegressor`` and ``ppl_bsvm.RVMClassifier``
(:mod:`ppl_bsvm.estimators`) share the option check, the basis and the split of the active
columns.

Saved fits name ``rvm_latent``, ``RVMPredictive`` and ``_Basis`` as ``ppl_bsvm.baselines.rvm:...``
and must keep finding them here; fits saved before the algorithms had a module of their own name
their state ``ppl_bsvm.baselines.rvm:RVMResult``, which the import below still resolves.
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import jax
import numpy as np

from .._checks import boolean, one_of, positive_float
from .._idata import make_idata
from .._memory import dense_bytes
from .._runtime import blas_threads
from .._serial import latent_family
from .._shapes import padded_size
from ..api import register
from ..data import Problem
from ..inference._common import APPROX_GROUP
from ..inference.latent import Latent
from ..engine import Approximation, Draws, Iteration
from ..kernels import Kernel
from ._common import BaselineLink, LinkPredictor, kernel_matrix
from .rvm_algorithms import ALGORITHMS, RVMResult, design_matrix, rvm_classification

__all__ = ["rvm", "RVMPredictive", "rvm_latent", "maximise_evidence"]


class _Basis(NamedTuple):
    """The fitted basis: kernel, hyperparameters, relevance vectors and whether a bias is in."""

    kernel: Kernel
    params: dict
    vectors: np.ndarray  # (R, d)
    has_bias: bool

    def features(self, X):
        with jax.enable_x64(True):
            Phi = kernel_matrix(self.kernel, self.params, X, self.vectors) if len(self.vectors) else np.zeros((X.shape[0], 0))
        return np.hstack([Phi, np.ones((X.shape[0], 1))]) if self.has_bias else Phi


class RVMPredictive(NamedTuple):
    """``q(w) = N(mean, cov)`` over the fitted basis."""

    basis: _Basis
    mean: np.ndarray
    cov: np.ndarray


@latent_family
def rvm_latent(_, arrays: RVMPredictive, Xs):
    """``f* = phi(x*)^T w``: mean ``phi^T mean`` and variance ``phi^T cov phi``."""
    F = arrays.basis.features(np.asarray(Xs))
    return F @ arrays.mean, np.maximum(np.sum((F @ arrays.cov) * F, axis=1), 0.0)


def _fit_basis(kernel, X, bias, params=None):
    with jax.enable_x64(True):
        if params is None:
            # NumPy leaves: a pickled JAX array comes back float32 in a float32 session
            params = jax.tree.map(lambda v: np.asarray(v, dtype=np.float64), kernel.init_params(X))
        K = kernel_matrix(kernel, params, X)
    return params, design_matrix(K, bias)


#: The search of :func:`maximise_evidence` over ``log lengthscale``: the interval
#: ``[start / 30, 3 start]`` around the starting lengthscale, a grid of 12 points on it, then
#: Brent's bounded search to ``LENGTHSCALE_XATOL`` between the best grid point's neighbours.
LENGTHSCALE_SPAN = (1.0 / 30.0, 3.0)
LENGTHSCALE_GRID = 12
LENGTHSCALE_XATOL = 0.01
#: The search's evaluations stop at this ``tol`` and ``max_iter`` at most (the user's if
#: tighter): near a maximum over ``alpha`` the fast algorithm's last re-estimations change the
#: evidence by far less than the search resolves; the chosen width is then fitted as asked.
SEARCH_TOL, SEARCH_MAX_ITER = 1e-3, 300


def learns_lengthscale(kernel: Kernel, params) -> bool:
    """Whether :func:`maximise_evidence` can search ``kernel``'s width: a stationary kernel
    (``log_lengthscale`` among its top-level hyperparameters; every ARD lengthscale moves by
    one common factor)."""
    return isinstance(params, dict) and "log_lengthscale" in params


def maximise_evidence(kernel: Kernel, X, t, solver, *, bias: bool, learn: bool, **settings):
    r"""Type-II maximum likelihood over the weights' precisions and, with ``learn``, the width.

    ``solver`` (:func:`~.rvm_algorithms.rvm_regression` or ``rvm_classification``) maximises
    the evidence over ``alpha`` (and ``beta``) on the basis of ``kernel`` at ``X``; ``settings``
    are its keywords. Returns ``(params, Phi, result)``: the hyperparameters used, the design
    matrix and the solver's :class:`~.rvm_algorithms.RVMResult`.

    **Learning the width** (Tipping 2001 suggests adapting the basis functions' input scales by
    the evidence, as a GP adapts its kernel). With ``c = log ell`` the *profile evidence*

    .. math:: L^*(c) = \max_{lpha, eta} \log p(t \mid lpha, eta, c)

    is maximised over ``c``; by the envelope theorem ``dL^*/dc`` is the partial derivative at
    the inner optimum, so a maximum of ``L^*`` is a joint stationary point of ``(alpha, beta,
    c)``. Only the lengthscale is searched: the kernel's variance ``s`` scales every basis
    function ``phi_j -> sqrt(s) phi_j`` (``s phi_j`` for the kernel itself), which ``alpha_j ->
    s alpha_j`` (resp. ``s^2 alpha_j``) absorbs exactly: ``C = beta^{-1} I + sum_j
    alpha_j^{-1} phi_j phi_j^T`` and so the evidence do not depend on it. The profile is only
    piecewise smooth: where the active set changes, the fast algorithm lands in another local
    maximum over ``alpha`` and ``L^*`` jumps, so gradient ascent on ``c`` (with the gradient at
    fixed ``alpha``) would stop at the first jump. We therefore search in one dimension without
    derivatives: ``L^*`` on a grid of ``LENGTHSCALE_GRID`` points of ``log ell`` spanning
    ``LENGTHSCALE_SPAN`` times the starting lengthscale (the kernel's, or the median
    heuristic), then Brent's bounded search between the neighbours of the best grid point, to
    ``LENGTHSCALE_XATOL`` in ``log ell``; the best point evaluated wins. Each evaluation is one
    run of ``solver`` (``O(N M^2)`` per step for the fast regression algorithm; the kernel
    matrix is one compiled program for every width) stopped at ``SEARCH_TOL``; a width whose
    run has not converged within ``SEARCH_MAX_ITER`` steps counts as ``-inf``: there the
    algorithm is still adding basis functions, typically interpolating targets that a short
    width can fit without noise (``beta`` at its cap), where the evidence grows without bound
    and is computed from a near-singular ``Sigma``. The best width is then fitted with
    ``settings`` (the starting width if none converged). For an ARD kernel all lengthscales move
    by the common factor ``e^c`` (their ratios are kept); kernels without a lengthscale
    (linear, polynomial, sums and products) keep their hyperparameters.
    """
    with blas_threads(X.shape[0]):  # one thread below PARALLEL_MIN_SIZE (ppl_bsvm._runtime)
        return _maximise_evidence(kernel, X, t, solver, bias, learn, settings)


def _maximise_evidence(kernel, X, t, solver, bias, learn, settings):
    params, Phi = _fit_basis(kernel, X, bias)
    if not (learn and learns_lengthscale(kernel, params)):
        return params, Phi, solver(Phi, t, **settings)
    from scipy.optimize import minimize_scalar

    start = params["log_lengthscale"]
    search = {**settings, "tol": max(settings["tol"], SEARCH_TOL),
              "max_iter": min(settings["max_iter"], SEARCH_MAX_ITER)}
    evidence = {}

    def basis(c):
        return _fit_basis(kernel, X, bias, {**params, "log_lengthscale": start + c})

    def profile(c):
        if c not in evidence:
            result = solver(basis(c)[1], t, **search)
            evidence[c] = result.log_evidence if result.converged else -np.inf
        return evidence[c]

    grid = np.linspace(*np.log(LENGTHSCALE_SPAN), LENGTHSCALE_GRID)
    k = int(np.argmax([profile(float(c)) for c in grid]))
    if not np.isfinite(evidence[float(grid[k])]):  # no width converged: keep the start
        return params, Phi, solver(Phi, t, **settings)
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    minimize_scalar(lambda c: min(-profile(float(c)), 1e300), bounds=(lo, hi), method="bounded",
                    options={"xatol": LENGTHSCALE_XATOL})
    params, Phi = basis(max(evidence, key=evidence.get))
    return params, Phi, solver(Phi, t, **settings)


def _split_active(result: RVMResult, N: int):
    rel = result.active[result.active < N]
    has_bias = bool(np.any(result.active == N))
    return rel, has_bias


@dataclasses.dataclass(frozen=True, kw_only=True)
class RVMOptions(Iteration, Draws, BaselineLink):
    """The options of :func:`rvm` (documented there)."""

    algorithm: str = "fast"
    bias: bool = True
    max_iter: int = 5000
    tol: float = 1e-6
    alpha_max: float = 1e9
    link: str = "logit"

    def _check(self):
        one_of("algorithm", self.algorithm, ALGORITHMS)
        self._set("alpha_max", positive_float("alpha_max", self.alpha_max))
        self._set("bias", boolean("bias", self.bias))


RVM_ITERATIONS = 60
"""Iterations of the fast algorithm the time estimate assumes (at most ``max_iter``): 95, 64,
41 and 35 measured on Banana at ``n = 1500, 2000, 3000, 4000`` and 54 on the breast-cancer
data at ``n = 400`` (``reports/slow_fit/samplers.txt``); a run that does not converge takes
``max_iter`` (5000 on Banana at ``n = 1000``: 15-23 s)."""

SQUARE_OPS = 150.0
"""Operations per ``N^2`` of one iteration of the fast algorithm: ``Phi^T B Phi_M`` (``2 N^2
M``), ``S`` and ``Q`` (passes over the ``N x (N + 1)`` design, memory-bound): 16-97 ms an
iteration at ``n = 2000-4000`` on Banana, 83-121 ``N^2`` at ``RATE`` (load average 3), up to
220 under a load of 7."""

REESTIMATE_OPS = 55.0
"""Operations per ``N^2`` of one re-estimation iteration once the basis is pruned (0.7 and
2.6 ms an iteration at ``n = 500`` and 1000), besides ``10 N^3 / 3`` for the first ones on the
full basis. Neither run converged within ``max_iter = 5000``: the estimate counts
``max_iter`` iterations."""


def _rvm_flops(n: int, d: int, options: dict) -> float:
    """The RVM's time estimate (``_cost``): ``min(max_iter, RVM_ITERATIONS)`` iterations of
    ``SQUARE_OPS N^2`` for the fast algorithm, ``max_iter`` of ``REESTIMATE_OPS N^2`` and
    ``10 N^3 / 3`` for the re-estimation (``N = n + 1`` basis functions with the bias)."""
    N = n + 1
    max_iter = int(options.get("max_iter", 5000))
    if options.get("algorithm", "fast") == "reestimate":
        return max_iter * REESTIMATE_OPS * N * N + 10.0 * N**3 / 3.0
    return min(max_iter, RVM_ITERATIONS) * SQUARE_OPS * N * N


def _rvm_hint(n: int, d: int, options: dict) -> str:
    if options.get("algorithm", "fast") == "reestimate":
        runs = f"max_iter={int(options.get('max_iter', 5000))} iterations (it rarely converges)"
    else:
        runs = (f"{min(int(options.get('max_iter', 5000)), RVM_ITERATIONS)} iterations "
                "(typical; up to max_iter when it does not converge)")
    return (f"an estimate: {runs}, each a few passes over the n x n kernel design (O(n^2) "
            "and more, in NumPy); faster: method='gpc' or 'vi' on the GP model, or "
            "model='sparse_gp' with method='svi' or 'svgp'")


_rvm_flops.hint = _rvm_hint


@register("rvm", ("gp",), options=RVMOptions, memory=dense_bytes(3), flops=_rvm_flops)
def rvm(problem: Problem, options: RVMOptions, *, key, kernel: Kernel) -> Approximation:
    """Relevance vector machine classifier (Tipping 2001): sparse Bayesian logistic kernel model.

    Parameters
    ----------
    algorithm : {"fast", "reestimate"}, default="fast"
        Tipping & Faul's (2003) sequential evidence maximisation, or the re-estimation
        ``alpha = gamma / w^2`` with pruning.
    bias : bool, default=True
        Include a constant basis function (subject to pruning like the others).
    max_iter : int, default=5000
    tol : float, default=1e-6
        Convergence threshold on changes of ``log alpha``.
    alpha_max : float, default=1e9
        Pruning threshold of ``"reestimate"``.
    num_draws : int, default=1000
        Draws of the weights (and of ``f`` at the training inputs) stored in ``idata``.
    link : str, default="logit"
        Default link of ``predict_proba``: the logistic-Gaussian integral over the Laplace
        posterior of ``f(x) = phi(x)^T w``.

    Notes
    -----
    ``idata.posterior`` holds ``w`` (dim ``relevance``: the training index of each relevance
    vector, ``-1`` for the bias) and ``f`` (obs); the ``approximation`` group holds
    ``w_mean``, ``w_cov``, ``alpha`` and ``log_evidence``.
    """
    algorithm, num_draws = options.algorithm, options.num_draws
    t0 = time.perf_counter()
    params, Phi, result = maximise_evidence(  # the kernel kept (RVMClassifier's docstring says why)
        kernel, problem.X, problem.y, rvm_classification, bias=options.bias, learn=False,
        algorithm=algorithm, max_iter=options.max_iter, tol=options.tol, alpha_max=options.alpha_max)
    rel, has_bias = _split_active(result, problem.n)
    basis = _Basis(kernel, params, problem.X[rel], has_bias)
    mean, cov = result.mean, result.cov
    chol = np.linalg.cholesky(cov + 1e-14 * np.trace(cov) / len(mean) * np.eye(len(mean)))
    with jax.enable_x64(True):  # drawn at a padded width: one program for every basis size
        z = np.asarray(jax.random.normal(key, (num_draws, padded_size(len(mean)))))[:, :len(mean)]
    w_draws = mean + z @ chol.T
    Phi_M = Phi[:, result.active]
    elapsed = time.perf_counter() - t0

    latent = Latent(rvm_latent, None, RVMPredictive(basis, mean, cov), chunked=False)

    labels = np.where(result.active < problem.n, result.active, -1)
    idata = make_idata(
        {"w": w_draws[None], "f": (w_draws @ Phi_M.T)[None]},
        coords={"relevance": labels, "relevance_bis": labels},
        dims={"w": ["relevance"], "w_mean": ["relevance"], "alpha": ["relevance"],
              "w_cov": ["relevance", "relevance_bis"]},
        observed_y=problem.y,
        groups={APPROX_GROUP: {"w_mean": mean, "w_cov": cov, "alpha": result.alpha,
                               "log_evidence": result.log_evidence}},
        attrs={"method": "rvm", "model": "gp", "algorithm": algorithm,
               "n_relevance": int(rel.size), "converged": int(result.converged)},
    )
    return Approximation(
        idata=idata,
        predictor=LinkPredictor(latent, link=options.link),
        timings={"engine": elapsed},
        trace={"log_evidence": result.trace},
        stop_reason="tol" if result.converged else "max_iter",
        n_iter=result.n_iter,
        kernel_params=params,
        jitter=0.0,
        state=result,
    )
