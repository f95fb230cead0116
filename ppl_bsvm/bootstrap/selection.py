r"""Kernel hyperparameters by minimising the analytical bootstrap error.

Within the replica-TAP theory the bootstrapped error :math:`\varepsilon(S)` (Eq. 17) is a
smooth function of the kernel hyperparameters, unlike the leave-one-out error, which jumps
(Malzahn & Opper 2003, end of section 6: "may be used for kernel hyperparameter estimation").
:func:`make_objective` exposes it, or Efron's .632 / .632+ estimate built from
:math:`\varepsilon(N)`, as a pure JAX function of the unconstrained (log) hyperparameters.
Its gradient comes from implicit differentiation of the fixed point
(:func:`ppl_bsvm.bootstrap.tap_gradient.fixed_point`): one adjoint linear system, solved with
vector-Jacobian products of a single sweep, instead of differentiating through hundreds of
sweeps.
:func:`select_hyperparameters` minimises it with L-BFGS-B.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy.optimize import minimize

from .._checks import one_of, positive_float, positive_int
from .._runtime import entry_point
from ..kernels import DEFAULT_JITTER, Kernel, gram
from . import tap, tap_gradient
from ._setup import BIAS_FACTOR, check_ratios, make_setup, resolve_variant
from .tap_solve import n_copies_for
from .theory import oob_loss

__all__ = ["Objective", "SelectionResult", "make_objective", "select_hyperparameters"]

ESTIMATORS = ("error", "632", "632+")


@functools.partial(jax.jit, static_argnums=(0, 1))
def _estimate(config: tap.TAPConfig, estimator: str, K, y, theta, noise):
    """eps(S) (Eq. 17) at the fixed point ``theta``, or Efron's .632 / .632+ built from it.

    Compiled once per model, estimator and size (shared by all objectives)."""
    n = y.shape[0]
    moments, fac, G, binv = tap.model_moments(K, theta[:n], theta[n : 2 * n], theta[2 * n :])
    cav = tap.cavity(moments, fac, G, binv, theta[2 * n :])
    eps = jnp.mean(oob_loss(config.model, y, cav.mean, cav.var))
    if estimator == "error":
        return eps
    if config.model == "regression":
        f = K @ jnp.linalg.solve(K + noise * jnp.eye(n, dtype=K.dtype), y)
        err = jnp.mean((y - f) ** 2)
        no_info = jnp.mean(y**2) - 2 * jnp.mean(y) * jnp.mean(f) + jnp.mean(f**2)
    else:  # hard margin: the SVM on all data separates them and predicts the labels
        err = jnp.asarray(0.0, K.dtype)
        p1 = jnp.mean(y > 0)
        no_info = 2.0 * p1 * (1.0 - p1)
    e632 = 0.368 * err + 0.632 * eps
    if estimator == "632":
        return e632
    eps_c = jnp.minimum(eps, no_info)
    active = (eps > err) & (no_info > err)
    R = jnp.where(active, (eps_c - err) / jnp.where(active, no_info - err, 1.0), 0.0)
    R = jnp.clip(R, 0.0, 1.0)
    return e632 + (eps_c - err) * (0.368 * 0.632 * R) / (1.0 - 0.368 * R)


def _require_x64():
    if jnp.asarray(1.0).dtype != jnp.float64:
        raise ValueError(
            "the bootstrap objective must be evaluated with 64-bit JAX: wrap the call in "
            "`with jax.enable_x64(True):` (jax.grad included), or use Objective.value_and_grad"
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Objective:
    r"""A bootstrap error estimate as a differentiable function of kernel hyperparameters.

    Call it on an unconstrained parameter pytree (``kernel.init_params(X)`` layout) with
    64-bit JAX enabled; ``jax.grad`` works through it by implicit differentiation. Made by
    :func:`make_objective`.

    Attributes
    ----------
    kernel : Kernel
    params0 : dict
        Starting hyperparameters (``kernel.init_params(X)`` unless given).
    estimator : {"error", "632", "632+"}
    sample_ratio : float
        ``S/N`` of ``"error"`` (the .632 estimates use ``S = N``).
    X, y : jax arrays (N, d), (N,)
        Validated float64 inputs and targets ({-1, +1} labels for the SVM).
    config : TAPConfig
        Model (``"hard"``, ``"soft"``, ``"regression"``) and Poisson truncation.
    C, noise : float
        Soft-margin penalty and regression noise variance (1.0 when unused).
    bias : bool or float
        ``True``: ``b0 = 100 mean(diag K)`` (moves with the hyperparameters); a float: that
        ``b0``; ``False``: no bias.
    jitter, tol, max_iter
        Relative jitter of ``K`` and the fixed point's stopping rule.
    """

    kernel: Kernel
    params0: Any
    estimator: str
    sample_ratio: float
    X: Any
    y: Any
    config: tap.TAPConfig
    C: float
    noise: float
    bias: Any
    jitter: float
    tol: float
    max_iter: int

    def kernel_matrix(self, params):
        """``gram(kernel, params, X, jitter) + b0`` (differentiable)."""
        K = gram(self.kernel, params, self.X, self.jitter)
        if self.bias is True:
            K = K + BIAS_FACTOR * jnp.mean(jnp.diag(K))
        elif self.bias:
            K = K + self.bias
        return K

    def evaluate(self, params, theta0=None):
        """The estimate and ``(theta, n_iter, converged)`` of the fixed point (for warm starts).

        ``theta0`` (3N,) warm-starts the iteration; the value does not depend on it beyond
        ``tol``.
        """
        _require_x64()
        params = jax.tree.map(lambda p: jnp.asarray(p, jnp.float64), params)
        data = self._data(params)
        K = data.K
        theta, n_iter, done = tap_gradient.fixed_point(
            self.config, data, theta0, tol=self.tol, max_iter=self.max_iter
        )
        value = _estimate(self.config, self.estimator, K, self.y, theta, self.noise)
        return value, (theta, n_iter, done)

    def __call__(self, params, theta0=None):
        """The estimate at ``params`` (scalar; differentiable)."""
        return self.evaluate(params, theta0)[0]

    def _data(self, params):
        return tap.TAPData(
            self.kernel_matrix(params),
            self.y,
            jnp.asarray(self.sample_ratio, jnp.float64),
            jnp.asarray(self.C, jnp.float64),
            jnp.asarray(self.noise, jnp.float64),
        )

    def start_sites(self, params):
        """The start values of spec 5.3 at ``params``, concatenated ``(3N,)``."""
        s0 = tap.init(None, None, self._data(params))
        return jnp.concatenate([s0.Lambda, s0.gamma, s0.lam])

    @entry_point
    def value_and_grad(self, params, theta0=None):
        """Value and gradient with respect to ``params``, in a float64 scope.

        Not compiled as a whole: the fixed-point loop and its adjoint are compiled functions
        shared by every objective with the same number of points and model, so a new
        objective (other data of the same size, other starting values) costs no compilation.

        Returns
        -------
        value : float
        grad : pytree like ``params`` of numpy arrays
        aux : tuple
            ``(theta, n_iter, converged)`` of the fixed point (``theta`` can warm-start the
            next call).
        """
        params = jax.tree.map(lambda p: jnp.asarray(p, jnp.float64), params)
        if theta0 is None:
            theta0 = self.start_sites(params)
        fn = jax.value_and_grad(self.evaluate, has_aux=True)
        (value, aux), grad = fn(params, jnp.asarray(theta0, jnp.float64))
        return float(value), jax.tree.map(np.asarray, grad), aux


@entry_point
def make_objective(
    X,
    y,
    kernel="rbf",
    *,
    estimator: str = "error",
    sample_ratio: float = 1.0,
    params=None,
    model: str = "svm",
    margin: str = "hard",
    C: float | None = None,
    noise: float = 0.1,
    bias=False,
    jitter: float = DEFAULT_JITTER,
    tol: float = 1e-9,
    max_iter: int = 5000,
    positive=None,
) -> Objective:
    r"""The replica-TAP bootstrap error as a differentiable function of kernel hyperparameters.

    Parameters
    ----------
    X, y, kernel, params, model, margin, C, noise, jitter, positive
        As in :func:`~ppl_bsvm.bootstrap.replica_tap`.
    estimator : {"error", "632", "632+"}, default="error"
        :math:`\varepsilon(S)` at ``sample_ratio``, or Efron's .632 / .632+ estimate (which use
        ``S = N``). The .632 estimates need the training error, known for the hard margin
        (0) and for regression; the soft margin supports ``"error"`` only.
    sample_ratio : float, default=1.0
        ``S/N`` for ``estimator="error"``.
    bias : bool or float, default=False
        As in :func:`~ppl_bsvm.bootstrap.replica_tap`; ``True`` ties ``b0`` to the kernel scale.
    tol : float, default=1e-9
        Moment-mismatch tolerance of the fixed point (tight, so that finite differences of the
        value are meaningful).
    max_iter : int, default=5000

    Returns
    -------
    Objective
        ``objective(params)`` is a scalar; use ``jax.grad(objective)`` inside
        ``with jax.enable_x64(True):``, or ``objective.value_and_grad(params)``.

    Examples
    --------
    >>> import jax
    >>> from ppl_bsvm import bootstrap, datasets, kernels
    >>> X, y = datasets.load("crabs", standardize=True)
    >>> obj = bootstrap.make_objective(X, y, kernels.RBF(lengthscale=3.0), estimator="632")
    >>> value, grad, _ = obj.value_and_grad(obj.params0)
    >>> round(value, 4), grad["log_lengthscale"].shape
    (0.0265, ())
    """
    one_of("estimator", estimator, ESTIMATORS)
    ratio = float(check_ratios(sample_ratio)[0])
    if estimator != "error" and ratio != 1.0:
        raise ValueError(f"estimator={estimator!r} uses S = N; leave sample_ratio at 1.0")
    variant = resolve_variant(model, margin, C, noise)
    if estimator != "error" and variant.kind == "soft":
        raise ValueError(
            "the .632 estimates of the soft-margin SVM need its training error, which is not "
            "a differentiable function of the hyperparameters; use estimator='error'"
        )
    setup = make_setup(X, y, kernel, model=model, params=params, jitter=jitter, bias=False,
                       positive=positive)
    if not isinstance(bias, (bool, np.bool_)):
        bias = positive_float("bias", bias)
    return Objective(
        kernel=setup.kernel,
        params0=setup.params,
        estimator=estimator,
        sample_ratio=ratio,
        X=jnp.asarray(setup.X),
        y=jnp.asarray(setup.y),
        config=tap.TAPConfig(variant.kind, n_copies_for(ratio, variant.kind)),
        C=variant.C if variant.kind == "soft" else 1.0,
        noise=variant.noise if variant.kind == "regression" else 1.0,
        bias=bool(bias) if isinstance(bias, (bool, np.bool_)) else bias,
        jitter=setup.jitter,
        tol=positive_float("tol", tol),
        max_iter=positive_int("max_iter", max_iter),
    )


class _Failed(Exception):
    def __init__(self, x, converged):
        super().__init__()
        self.x, self.converged = x, converged


@dataclasses.dataclass(frozen=True, eq=False)
class SelectionResult:
    """Outcome of :func:`select_hyperparameters`.

    Attributes
    ----------
    params : dict
        The chosen unconstrained hyperparameters (pass to ``replica_tap(..., params=...)``).
    hyperparameters : dict
        The same on their natural scale (``lengthscale``, ``variance``, ...).
    value, initial_value : float
        The objective at the chosen and at the starting hyperparameters.
    trace : dict of ndarray
        Per objective evaluation: ``"value"``, ``"grad_norm"``, ``"params"`` (the flattened
        log-parameters, ``(n_evaluations, p)``) and ``"ok"`` (fixed point reached and a
        finite gradient).
    n_iter, n_evaluations : int
        L-BFGS-B iterations (-1 if the search was stopped) and objective evaluations.
    success : bool
    message : str
        L-BFGS-B's message, or why the search was stopped (a fixed point not reached within
        ``max_iter`` or a failed implicit gradient; the best point so far is returned).
    estimator : str
    kernel : Kernel
    seconds : float
    """

    params: Any
    hyperparameters: dict
    value: float
    initial_value: float
    trace: dict
    n_iter: int
    n_evaluations: int
    success: bool
    message: str
    estimator: str
    kernel: Kernel
    seconds: float


@entry_point
def select_hyperparameters(
    X,
    y,
    kernel="rbf",
    *,
    estimator: str = "632",
    params0=None,
    max_log_change: float | None = float(np.log(100.0)),
    maxiter: int = 50,
    gtol: float = 1e-6,
    **options,
) -> SelectionResult:
    """Minimise the replica-TAP bootstrap estimate over the kernel's log-hyperparameters.

    Parameters
    ----------
    X, y, kernel
        As in :func:`~ppl_bsvm.bootstrap.replica_tap`.
    estimator : {"632", "632+", "error"}, default="632"
        What to minimise (see :func:`make_objective`).
    params0 : dict, optional
        Starting hyperparameters (default ``kernel.init_params(X)``).
    max_log_change : float or None, default=log(100)
        Box of L-BFGS-B: each log-parameter stays within this of its start (None: no box).
        Keeps the search away from degenerate kernels (all points support vectors, or a
        numerically constant kernel).
    maxiter : int, default=50
        L-BFGS-B iterations.
    gtol : float, default=1e-6
        Projected-gradient tolerance of L-BFGS-B.
    **options
        Passed to :func:`make_objective` (``sample_ratio``, ``margin``, ``C``, ``model``,
        ``noise``, ``bias``, ``jitter``, ``tol``, ``max_iter``, ``positive``).

    Returns
    -------
    SelectionResult

    Notes
    -----
    For the hard-margin SVM the kernel variance does not change the classifier (the SVM is
    invariant to scaling ``K``), so its gradient is 0 and it stays where it starts.
    """
    start = time.perf_counter()
    maxiter = positive_int("maxiter", maxiter)
    gtol = positive_float("gtol", gtol)
    obj = make_objective(X, y, kernel, estimator=estimator, params=params0, **options)
    flat0, unravel = ravel_pytree(obj.params0)
    flat0 = np.asarray(flat0, dtype=np.float64)
    bounds = None
    if max_log_change is not None:
        width = positive_float("max_log_change", max_log_change)
        bounds = [(v - width, v + width) for v in flat0]
    warm = {"theta": None}
    trace = {"value": [], "grad_norm": [], "params": [], "ok": []}

    def fun(x):
        value, grad, (theta, _, done) = obj.value_and_grad(unravel(jnp.asarray(x)), warm["theta"])
        g = np.asarray(ravel_pytree(grad)[0], dtype=np.float64)
        if bool(done):
            warm["theta"] = theta
        trace["value"].append(value)
        trace["grad_norm"].append(float(np.linalg.norm(g)))
        trace["params"].append(np.array(x, dtype=np.float64))
        ok = bool(done) and np.isfinite(value) and np.all(np.isfinite(g))
        trace["ok"].append(ok)
        if not ok:
            raise _Failed(x, bool(done))
        return value, g

    try:
        res = minimize(fun, flat0, jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": maxiter, "gtol": gtol})
        n_iter, n_evals, success, message = int(res.nit), int(res.nfev), bool(res.success), str(res.message)
    except _Failed as err:  # keep the best point reached so far
        n_iter, n_evals, success = -1, len(trace["value"]), False
        what = "fixed point not reached" if not err.converged else "implicit gradient failed"
        message = f"stopped: {what} at log-parameters {np.round(err.x, 4).tolist()}"
    values = np.asarray(trace["value"], dtype=np.float64)
    best = int(np.argmin(np.where(trace["ok"], values, np.inf)))
    params = unravel(jnp.asarray(trace["params"][best]))
    return SelectionResult(
        params=params,
        hyperparameters={k: np.asarray(v) for k, v in obj.kernel.constrain(params).items()},
        value=float(values[best]),
        initial_value=float(values[0]),
        trace={"value": values, "grad_norm": np.asarray(trace["grad_norm"]),
               "params": np.stack(trace["params"]), "ok": np.asarray(trace["ok"])},
        n_iter=n_iter,
        n_evaluations=n_evals,
        success=success,
        message=message,
        estimator=estimator,
        kernel=obj.kernel,
        seconds=time.perf_counter() - start,
    )
