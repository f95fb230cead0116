r"""The Bayesian committee support vector machine (BC-SVM) of Schwaighofer & Tresp (2001).

The training data are split into ``M`` modules of about ``module_size`` points (a stratified
random partition, so every module sees both classes). On each module a **2-norm soft-margin
SVM with bias** is trained (paper eq. 6 with ``alpha = 2``):

.. math:: \min_{a, b}\; \tfrac12 a^\top K a + \tfrac C2 \sum_i (1 - y_i (f_i + b))_+^2,
          \qquad f = K a,

by Newton's method in the primal (Chapelle 2007; Keerthi & DeCoste 2005): with the active set
``A = {i : y_i (f_i + b) < 1}`` fixed, the optimum solves
``(K_AA + I/C) a_A + b 1 = y_A``, ``1^T a_A = 0`` (``a = 0`` off ``A``), i.e.
``a_A = p - b q``, ``b = 1^T p / 1^T q`` with ``p, q = (K_AA + I/C)^{-1} (y_A, 1)``; the step
towards it is taken with a line search on the objective, and the iteration stops when the
active set no longer changes (then the step is exact). ``(K_AA + I/C)^{-1}`` is applied in the
symmetric form ``S B^{-1} S`` of :mod:`ppl_bsvm.inference.gaussian` with noise ``1/C`` on
``A`` and infinite noise (``S = 0``) elsewhere. All modules are solved at once (``vmap``).

**Laplace covariance** (paper section 5): the Hessian of eq. 6 in ``f`` is ``K^{-1} + C D``,
``D`` the indicator of the support vectors ``A``, so module ``i`` is GP regression of the
labels ``y_A`` on its support vectors with noise ``Psi = I / C`` (paper eq. 2; on ``A`` the
squared hinge is ``(y - f - b)^2``).

**The bias as a basis function.** The classifier is ``sign(f(x) + b)``: the latent function
is ``h = f + b`` with ``f ~ GP(0, k)`` and, as in GPML section 2.7, ``b ~ N(0, s^2)`` with
``s -> infinity`` (a flat prior on the bias). With ``K_C = K_AA + I/C`` and
``c = 1^T K_C^{-1} 1``, GPML eq. 2.42 gives module ``i``'s posterior of ``h^q`` at a query set:

.. math:: E(h^q \mid D^i) = K_{qA} K_C^{-1} (y_A - \hat b\, 1) + \hat b\, 1, \qquad
          \hat b = 1^\top K_C^{-1} y_A / c,

.. math:: \mathrm{cov}(h^q \mid D^i) = \Sigma^{qq} - K_{qA} K_C^{-1} K_{Aq} + R^\top R / c,
          \qquad R = 1_q^\top - 1_A^\top K_C^{-1} K_{Aq}.

The mean is the module's SVM output ``K_qA a_A + b_i``: at the optimum ``b_i = 1^T p / 1^T q``
with ``p, q = K_C^{-1}(y_A, 1)``, which is the GLS estimate ``b-hat``, and
``a_A = K_C^{-1}(y_A - b_i 1)`` (paper step 2). The last term is the uncertainty of the bias.

**BCM** (paper eqs. 4-5, Tresp 2000) over ``h^q``, whose prior is ``N(0, Sigma^qq + s^2 1 1^T)``:

.. math:: C_{BCM} = -(M-1) P + \sum_i \mathrm{cov}(h^q \mid D^i)^{-1}, \qquad
          \hat E = C_{BCM}^{-1} \sum_i \mathrm{cov}(h^q \mid D^i)^{-1} E(h^q \mid D^i),

where ``P`` is the limit of the prior precision (Sherman-Morrison, ``s -> infinity``):

.. math:: (\Sigma + s^2 1 1^\top)^{-1} = \Sigma^{-1}
          - \frac{\Sigma^{-1} 1 1^\top \Sigma^{-1}}{s^{-2} + 1^\top \Sigma^{-1} 1}
          \;\to\; P = \Sigma^{-1} - \frac{\Sigma^{-1} 1 1^\top \Sigma^{-1}}{1^\top \Sigma^{-1} 1},

the precision of the improper prior of ``h^q`` (zero along the constant direction: the bias is
learnt from the modules only, and their bias information adds up instead of being divided
out). Dividing out
``(Sigma^qq)^{-1}`` instead, with ``b_i`` inside ``E_i`` but not in the prior, counts the
bias ``M`` times where the modules know little. With ``M = 1``, ``C_BCM = cov_1^{-1}`` and the
BC-SVM is the 2-norm SVM. (Along the constant direction the prior of ``f`` itself is then not
divided out either, so where no module knows anything the BCM weighs the biases ``b_i`` by
``1 / (sigma^2 + N_Q / c_i)`` and shrinks the variance of the query-set mean of ``f`` by ``M``:
an ``O(1 / N_Q)`` effect, tested in ``tests/baselines/test_bcsvm.py``. A BCM over the joint
``(f^q, b)``, with ``b`` as an extra query variable, would avoid it.)

Computation, in coordinates whitened by the prior, ``g = L^{-1} h^q`` with ``L L^T = Sigma^qq``
(plus a relative nugget ``jitter``), ``u = L^{-1} 1``: ``P`` becomes ``I - u u^T / |u|^2``;
module ``i``'s covariance is ``H_i = H_0 + r r^T / c`` with ``H_0 = I - W_i^T W_i``,
``W_i = L_i^{-1} S_i K_{Aq} L^{-T}`` and ``r = u - W_i^T z``, ``z = L_i^{-1} S_i 1``
(``K_C^{-1} = S_i B_i^{-1} S_i = S_i L_i^{-T} L_i^{-1} S_i``, so ``c = |z|^2``). A rank-one
(Sherman-Morrison) update of ``H_0^{-1}`` gives ``T_i = H_i^{-1} - P``, positive semi-definite
(the limit of posterior minus prior precision), in a form without cancelling terms
(:func:`_module_information`), and ``C_BCM = P + sum_i T_i``. ``H_0^{-1} - I =
W^T (I - W W^T)^{-1} W`` is applied through an ``s x s`` factor when modules are smaller than
query sets. The cost is ``O(M N_Q^2 min(s, N_Q))`` per query set, linear in ``n`` as in the
paper. ``combine="average"`` instead averages the module outputs (the dashed line of the
paper's Fig. 1; its variance is the mean of the module variances).

Query sets: the rows passed to ``predict_*`` are processed in consecutive blocks of
``query_size`` rows, each block combined jointly (the BCM's predictions at a point depend on
the other points of its query set, as in the paper).

References: A. Schwaighofer and V. Tresp. The Bayesian committee support vector machine.
ICANN 2001. V. Tresp. A Bayesian committee machine. Neural Computation 12, 2000.
O. Chapelle. Training a support vector machine in the primal. Neural Computation 19, 2007.
C. E. Rasmussen and C. K. I. Williams. Gaussian Processes for Machine Learning (GPML),
MIT Press 2006, section 2.7.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve, solve_triangular

from .._checks import one_of, positive_float, positive_int
from .._memory import FLOAT
from ..api import register
from .._serial import latent_family
from ..data import Problem
from ..engine import Approximation, Iteration, Jitter
from ..inference import gaussian
from ..inference.latent import Latent
from ..inference.loop import relative_change, run
from ..kernels import Kernel, gram
from ._common import BaselineLink, LinkPredictor, fit_idata, sklearn_seed

__all__ = [
    "COMBINES",
    "BCSVMOptions",
    "SVM2State",
    "SVM2Info",
    "SVM2Data",
    "partition",
    "svm2_init",
    "svm2_step",
    "svm2_objective",
    "svm2_converged",
    "BCMModel",
    "ModuleQuery",
    "bcm_combine",
    "bcm_latent",
]

COMBINES = ("bcm", "average")
_LINE_SEARCH = 2.0 ** -np.arange(12)  # step lengths tried, 1 down to 1/2048


class SVM2Data(NamedTuple):
    """Modules stacked along a leading axis (``M`` modules of ``s`` slots each).

    ``K (M, s, s)`` jittered module kernels, ``y (M, s)`` labels, ``valid (M, s)`` whether a
    slot holds a point (modules are padded to equal size), ``C ()`` the 2-norm constant.
    """

    K: jnp.ndarray
    y: jnp.ndarray
    valid: jnp.ndarray
    C: jnp.ndarray


class SVM2State(NamedTuple):
    """Newton iterate of every module's 2-norm SVM.

    Attributes
    ----------
    a : (M, s)
        Kernel weights (``f = K a``; ``y_i a_i >= 0``, 0 off the support vectors).
    b : (M,)
        Biases.
    active : (M, s) bool
        Support vectors at the iterate: ``y_i (f_i + b) < 1``.
    objective : (M,)
        Paper eq. 6 per module.
    """

    a: jnp.ndarray
    b: jnp.ndarray
    active: jnp.ndarray
    objective: jnp.ndarray


class SVM2Info(NamedTuple):
    """Per-iteration record: ``objective`` (eq. 6 summed over modules; lower is better),
    ``delta`` (largest relative change of a module's objective) and ``changed`` (how many
    points entered or left an active set)."""

    objective: jnp.ndarray
    delta: jnp.ndarray
    changed: jnp.ndarray


def partition(y: np.ndarray, module_size: int, seed: int):
    """Stratified random partition into ``M = ceil(n / module_size)`` modules.

    Points are shuffled within each class, the classes concatenated, and dealt round-robin,
    so module sizes differ by at most one and each class is spread evenly.

    Returns
    -------
    index : ndarray (M, s) int
        Training indices per module (padding slots repeat index 0).
    valid : ndarray (M, s) bool
    """
    n = y.shape[0]
    M = max(1, math.ceil(n / module_size))
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(np.flatnonzero(y == c)) for c in (-1.0, 1.0)])
    s = math.ceil(n / M)
    index = np.zeros((M, s), dtype=np.int64)
    valid = np.zeros((M, s), dtype=bool)
    for j, i in enumerate(order):
        index[j % M, j // M] = i
        valid[j % M, j // M] = True
    return index, valid


def svm2_objective(K, a, b, y, valid, C):
    """Paper eq. 6 (``alpha = 2``) for one module: ``a^T K a / 2 + C/2 sum (1 - y(f+b))_+^2``."""
    slack = jnp.where(valid, jnp.maximum(0.0, 1.0 - y * (K @ a + b)), 0.0)
    return 0.5 * jnp.dot(a, K @ a) + 0.5 * C * jnp.sum(slack**2)


def _active(K, a, b, y, valid):
    return valid & (y * (K @ a + b) < 1.0)


def _support_factor(K, active, C):
    """Factor of ``K + N`` with ``N = I/C`` on the support vectors and ``inf`` elsewhere."""
    return gaussian.factor(K, jnp.where(active, 1.0 / C, jnp.inf))


def _newton_target(K, b, y, active, C):
    """The optimum for a fixed active set: ``a = p - b q``, ``b = 1^T p / 1^T q``."""
    fac = _support_factor(K, active, C)
    on = active.astype(K.dtype)
    p = gaussian.solve(fac, on * y)
    q = gaussian.solve(fac, on)
    total = jnp.sum(q)
    b_new = jnp.where(total > 0, jnp.sum(p) / jnp.where(total > 0, total, 1.0), b)
    return p - b_new * q, b_new


def _module_step(K, y, valid, C, a, b, active, objective):
    a_t, b_t = _newton_target(K, b, y, active, C)
    da, db = a_t - a, b_t - b
    Ka, Kda = K @ a, K @ da
    # objective along the segment, at every trial step length at once
    t = jnp.asarray(_LINE_SEARCH, dtype=K.dtype)[:, None]
    margins = y * (Ka + b + t * (Kda + db))
    slack = jnp.where(valid, jnp.maximum(0.0, 1.0 - margins), 0.0)
    quad = jnp.dot(a, Ka) + 2.0 * t[:, 0] * jnp.dot(a, Kda) + t[:, 0] ** 2 * jnp.dot(da, Kda)
    trial = 0.5 * quad + 0.5 * C * jnp.sum(slack**2, axis=1)
    best = jnp.argmin(trial)
    improves = trial[best] < objective
    step = jnp.where(improves, t[best, 0], 0.0)
    a_new, b_new = a + step * da, b + step * db
    new_objective = jnp.where(improves, trial[best], objective)
    active_new = _active(K, a_new, b_new, y, valid)
    return a_new, b_new, active_new, new_objective


def svm2_init(_static, _key, data: SVM2Data, start=None) -> SVM2State:
    """``a = 0``, ``b = 0``: every point is on the wrong side of its margin (all active)."""
    a = jnp.zeros_like(data.y)
    b = jnp.zeros(data.y.shape[0], dtype=data.y.dtype)
    objective = 0.5 * data.C * jnp.sum(data.valid, axis=1).astype(data.y.dtype)
    return SVM2State(a, b, data.valid, objective)


def svm2_step(_static, _key, state: SVM2State, data: SVM2Data):
    """One damped Newton step for every module."""
    step = jax.vmap(_module_step, in_axes=(0, 0, 0, None, 0, 0, 0, 0))
    a, b, active, objective = step(data.K, data.y, data.valid, data.C, state.a, state.b,
                                   state.active, state.objective)
    info = SVM2Info(
        jnp.sum(objective),
        jnp.max(relative_change(objective, state.objective)),
        jnp.sum(active != state.active),
    )
    return SVM2State(a, b, active, objective), info


def svm2_converged(info: SVM2Info, tol):
    """Stop when no active set changed and the objective moved by at most ``tol`` (relative)."""
    return (info.changed == 0) & (info.delta <= tol)


class BCMModel(NamedTuple):
    """What predictions need: module inputs ``X (M, s, d)``, weights ``a (M, s)``, biases
    ``b (M,)``, the support-vector factors ``chol (M, s, s)``, ``s (M, s)`` and the kernel
    hyperparameters ``params``."""

    X: jnp.ndarray
    a: jnp.ndarray
    b: jnp.ndarray
    chol: jnp.ndarray
    s: jnp.ndarray
    params: dict


class ModuleQuery(NamedTuple):
    """One module at one query set (whitened by the prior factor ``L``, ``u = L^{-1} 1``).

    Attributes
    ----------
    mean : (N_Q,)
        ``E_i = K_qA a_A + b_i``, the SVM output (= the GLS posterior mean, GPML eq. 2.42).
    var : (N_Q,)
        Its Laplace variance, ``diag(Sigma^qq - V^T V) + R^2 / c`` (bias term included).
    W : (s, N_Q)
        ``L_i^{-1} S_i K_Aq L^{-T}``: ``I - W^T W`` is the whitened covariance without bias.
    w : (s,)
        ``W u - z`` with ``z = L_i^{-1} S_i 1``: the bias direction seen by the module.
    """

    mean: jnp.ndarray
    var: jnp.ndarray
    W: jnp.ndarray
    w: jnp.ndarray


def _module_query(Kmq, a_i, b_i, chol_i, s_i, L_prior, u, prior_var) -> ModuleQuery:
    """Module ``i`` at the query set: ``V = L_i^{-1} S_i K_Aq`` and ``z = L_i^{-1} S_i 1`` give
    ``K_C^{-1} = S_i B_i^{-1} S_i`` products, ``c = 1^T K_C^{-1} 1 = |z|^2`` and
    ``R = 1^T - z^T V``."""
    mean = Kmq.T @ a_i + b_i
    V = solve_triangular(chol_i, s_i[:, None] * Kmq, lower=True)
    z = solve_triangular(chol_i, s_i, lower=True)
    c = jnp.dot(z, z)
    R = 1.0 - z @ V
    bias_var = jnp.where(c > 0, R**2 / jnp.where(c > 0, c, 1.0), 0.0)
    var = prior_var - jnp.sum(V**2, axis=0) + bias_var
    W = solve_triangular(L_prior, V.T, lower=True).T
    return ModuleQuery(mean, var, W, W @ u - z)


def _module_information(W, w, g, u):
    r"""``(T_i, H_i^{-1} g_i)``: module ``i``'s information ``T_i = H_i^{-1} - P`` beyond the
    improper prior ``P = I - u u^T / |u|^2`` and its precision-weighted whitened mean.

    ``H_i = H_0 + r r^T / c`` with ``H_0 = I - W^T W``; by Sherman-Morrison
    ``H_i^{-1} = H_0^{-1} - v v^T / d`` with ``v = H_0^{-1} r = u + t``, ``t = W^T G^{-1} w``,
    ``d = c + r^T v = |u|^2 + delta``, ``delta = w^T G^{-1} w`` and ``G = I - W W^T``, so

    .. math:: T_i = (H_0^{-1} - I) + \frac{\delta\, u u^\top}{|u|^2 d}
              - \frac{u t^\top + t u^\top + t t^\top}{d},

    written without the cancelling ``u u^T`` terms (``T_i`` is positive semi-definite). The
    ``s x s`` factor of ``G`` (Woodbury) is used when modules are smaller than query sets, the
    ``N_Q x N_Q`` factor of ``H_0`` (push-through ``W^T G^{-1} = H_0^{-1} W^T``) otherwise.
    """
    size, nq = W.shape
    if size < nq:
        G = jnp.eye(size, dtype=W.dtype) - W @ W.T
        chol = (jnp.linalg.cholesky(0.5 * (G + G.T)), True)
        info0 = W.T @ cho_solve(chol, W)  # H_0^{-1} - I
        e = cho_solve(chol, w)
        t, delta = W.T @ e, jnp.dot(w, e)
        h0_g = g + W.T @ cho_solve(chol, W @ g)
    else:
        eye_q = jnp.eye(nq, dtype=W.dtype)
        H0 = eye_q - W.T @ W
        chol = (jnp.linalg.cholesky(0.5 * (H0 + H0.T)), True)
        info0 = cho_solve(chol, eye_q) - eye_q
        Wtw = W.T @ w
        t = cho_solve(chol, Wtw)
        delta = jnp.dot(w, w) + jnp.dot(Wtw, t)
        h0_g = cho_solve(chol, g)
    uu = jnp.dot(u, u)
    d = uu + delta
    cross = jnp.outer(u, t) + jnp.outer(t, u) + jnp.outer(t, t)
    T = info0 + (delta / (uu * d)) * jnp.outer(u, u) - cross / d
    v = u + t
    return T, h0_g - v * (jnp.dot(v, g) / d)


@functools.partial(jax.jit, static_argnums=(6, 7))
def bcm_combine(Kqq, Kmq, a, b, chol, s, combine: str, jitter: float):
    """Combined latent mean and variance of ``f^q + b`` at one query set (module docstring).

    Parameters
    ----------
    Kqq : (N_Q, N_Q)
        Prior covariance of the query set.
    Kmq : (M, s, N_Q)
        Each module's kernel between its points and the queries.
    a, b, chol, s
        As in :class:`BCMModel`.
    combine : {"bcm", "average"}
    jitter : float
        Relative nugget of the query-set prior.

    Returns
    -------
    mean, var : (N_Q,)
    """
    nq = Kqq.shape[0]
    eye_q = jnp.eye(nq, dtype=Kqq.dtype)
    P = Kqq + jitter * jnp.mean(jnp.diag(Kqq)) * eye_q
    L_prior = jnp.linalg.cholesky(P)
    u = solve_triangular(L_prior, jnp.ones(nq, dtype=Kqq.dtype), lower=True)
    query = jax.vmap(_module_query, in_axes=(0, 0, 0, 0, 0, None, None, None))(
        Kmq, a, b, chol, s, L_prior, u, jnp.diag(P))
    if combine == "average":
        return jnp.mean(query.mean, axis=0), jnp.mean(query.var, axis=0)
    g = solve_triangular(L_prior, query.mean.T, lower=True).T  # (M, N_Q) whitened module means
    infos, rhs = jax.vmap(_module_information, in_axes=(0, 0, 0, None))(query.W, query.w, g, u)
    precision = eye_q - jnp.outer(u, u) / jnp.dot(u, u) + jnp.sum(infos, axis=0)
    R = jnp.linalg.cholesky(0.5 * (precision + precision.T))
    g_hat = cho_solve((R, True), jnp.sum(rhs, axis=0))
    Y = solve_triangular(R, L_prior.T, lower=True)  # cov_f = Y^T Y
    return L_prior @ g_hat, jnp.sum(Y**2, axis=0)


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def bcm_latent(kernel: Kernel, model: BCMModel, Xq, combine: str, jitter: float):
    """Combined latent mean and variance at the query set ``Xq (N_Q, d)``, one compiled
    program per kernel and shape (hyperparameter values do not trigger recompilation)."""
    Kqq = kernel.K(model.params, Xq, Xq)
    Kmq = jax.vmap(lambda Xi: kernel.K(model.params, Xi, Xq))(model.X)
    return bcm_combine(Kqq, Kmq, model.a, model.b, model.chol, model.s, combine, jitter)


@latent_family
def bcm_predict(static, model: BCMModel, X):
    """:func:`_predict_blocks` with ``static = (kernel, query_size, combine, jitter)``."""
    kernel, query_size, combine, jitter = static
    return _predict_blocks(kernel, model, X, query_size, combine, jitter)


def _predict_blocks(kernel, model, X, query_size, combine, jitter):
    """Latent mean and variance at the rows of ``X``, one query set of ``query_size`` rows at a
    time (the last one smaller)."""
    X = jnp.asarray(X, dtype=jnp.float64)
    parts = [
        bcm_latent(kernel, model, X[start:start + query_size], combine, jitter)
        for start in range(0, X.shape[0], query_size)
    ]
    mean = jnp.concatenate([m for m, _ in parts])
    var = jnp.concatenate([v for _, v in parts])
    return mean, jnp.maximum(var, 0.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BCSVMOptions(Iteration, Jitter, BaselineLink):
    """The options of :func:`bcsvm` (documented there)."""

    C: float = 1.0
    module_size: int = 200
    query_size: int = 200
    combine: str = "bcm"
    max_iter: int = 100
    tol: float = 1e-12

    def _check(self):
        self._set("C", positive_float("C", self.C))
        self._set("module_size", positive_int("module_size", self.module_size, minimum=2))
        self._set("query_size", positive_int("query_size", self.query_size))
        one_of("combine", self.combine, COMBINES)


def _memory(n: int, d: int, options: dict) -> int:
    """Working bytes (``_memory``): ``M = ceil(n / module_size)`` modules of ``s = ceil(n / M)``
    points, each with about five ``s x s`` matrices (its kernel matrix, the Newton step's
    system and factor, the support vectors' factor kept for prediction, a product), and the
    modules' copy of the inputs (``n x d``): ``O(n module_size)``, linear in ``n``."""
    modules = max(1, math.ceil(n / int(options.get("module_size", 200))))
    size = math.ceil(n / modules)
    return FLOAT * (5 * modules * size * size + modules * size * (d + 4))


_memory.hint = "the memory of method={method!r} grows as n x module_size: pass a smaller module_size"


@register("bcsvm", ("gp",), options=BCSVMOptions, memory=_memory)
def bcsvm(problem: Problem, options: BCSVMOptions, *, key, kernel: Kernel) -> Approximation:
    """Bayesian committee SVM (Schwaighofer & Tresp 2001): 2-norm SVM modules + BCM.

    Parameters
    ----------
    C : float, default=1.0
        2-norm soft-margin constant of paper eq. 6; the Laplace noise is ``Psi = I / C``.
    module_size : int, default=200
        Target points per module (``M = ceil(n / module_size)`` modules; ``module_size >= n``
        gives the single 2-norm SVM).
    query_size : int, default=200
        Test points combined jointly (``N_Q`` of the paper).
    combine : {"bcm", "average"}, default="bcm"
        BCM weights (paper eqs. 4-5) or the plain average of the modules (paper Fig. 1).
    max_iter : int, default=100
        Newton iterations (all modules together).
    tol : float, default=1e-12
        Stop when no active set changes and the objective's relative change is below this.
    jitter : float, default=1e-6
        Relative jitter of the module kernels and nugget of the query-set prior.
    link : str, default="probit"
        Default link from the combined latent Gaussian to ``predict_proba``.

    Notes
    -----
    No posterior draws: the Laplace Gaussians exist only at query sets. ``idata`` holds the
    labels and, in the ``modules`` group, ``module`` (module of each training point),
    ``support`` (1 for support vectors), ``dual_coef`` (``a_i``) on ``obs`` and ``intercept``
    and ``objective`` per module.
    """
    module_size, query_size, combine = options.module_size, options.query_size, options.combine
    jitter = options.jitter
    index, valid = partition(problem.y, module_size, sklearn_seed(key))
    M = index.shape[0]
    smaller = int(min(np.sum(problem.y == -1.0), np.sum(problem.y == 1.0)))
    if smaller < M:
        raise ValueError(
            f"module_size={module_size} gives {M} modules but the smaller class has only "
            f"{smaller} points, so some module would see one class only; use a larger "
            "module_size"
        )
    t0 = time.perf_counter()
    params = kernel.init_params(problem.X)
    X_mod = jnp.asarray(problem.X[index], dtype=jnp.float64)
    K = jax.vmap(lambda Xi: gram(kernel, params, Xi, jitter))(X_mod)
    data = SVM2Data(K, jnp.asarray(problem.y[index]), jnp.asarray(valid), jnp.asarray(options.C))
    result = run(svm2_step, svm2_init(None, None, data), data, max_iter=options.max_iter, tol=options.tol,
                 converged=svm2_converged)
    state = result.state
    facs = jax.vmap(_support_factor, in_axes=(0, 0, None))(K, state.active, data.C)
    model = BCMModel(X_mod, state.a, state.b, facs.chol, facs.s, params)
    elapsed = time.perf_counter() - t0

    latent = Latent(bcm_predict, (kernel, query_size, combine, jitter), model, chunked=False)

    module_of = np.empty(problem.n, dtype=np.int64)
    dual = np.zeros(problem.n)
    support = np.zeros(problem.n, dtype=np.int64)
    a_np, act_np = np.asarray(state.a), np.asarray(state.active)
    for i in range(M):
        rows = index[i][valid[i]]
        module_of[rows] = i
        dual[rows] = a_np[i][valid[i]]
        support[rows] = act_np[i][valid[i]]
    idata = fit_idata(
        problem,
        {
            "modules": {
                "module": module_of,
                "support": support,
                "dual_coef": dual,
                "intercept": np.asarray(state.b),
                "objective": np.asarray(state.objective),
            }
        },
        dims={"module": ["obs"], "support": ["obs"], "dual_coef": ["obs"],
              "intercept": ["module_index"], "objective": ["module_index"]},
        coords={"module_index": np.arange(M)},
        attrs={"method": "bcsvm", "model": "gp", "n_modules": M, "combine": combine,
               "query_size": query_size, "stop_reason": result.stop_reason},
    )
    return Approximation.from_run(
        result, idata=idata, predictor=LinkPredictor(latent, link=options.link), seconds=elapsed,
        trace={"objective": result.infos.objective, "changed": result.infos.changed},
        kernel_params=params, jitter=jitter, state=state,
    )
