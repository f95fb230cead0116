r"""Latent predictive functions of the fitted approximations, compiled once per family.

A fit's predictor maps test inputs to the latent predictive (a Gaussian's mean and variance,
or one per posterior draw). Each family below is one module-level ``jit``-ed function of
``(static settings, arrays of the fit, X*)``; a fit binds its arrays with
:class:`Latent` (a picklable ``functools.partial``-like object), so every fit of a family
shares one compiled program instead of compiling a closure with its arrays baked in.
:class:`Latent` also cuts ``X*`` into chunks of :data:`CHUNK` rows and pads the last one to a
power of two (at least 8 rows): test sets of any size reuse a handful of programs, and
memory stays ``O(CHUNK n)`` for a GP predictor trained on ``n`` points.

Families (``X*`` rows ``x_*``, ``k_*`` the kernel column ``k(X, x_*)``):

``gp_noisy``
    GP regression with per-point noise (B-BSVM, ECM, GPC's Laplace and EP):
    :math:`m = k_*^\top a`, :math:`v = k_{**} - |L^{-1} S k_*|^2`
    (``ppl_bsvm.inference.gaussian.predict``).
``gp_dense``
    ``q(f) = N(K a, K - K D K)`` with a dense ``D`` (B-BSVM's linear response):
    :math:`m = k_*^\top a`, :math:`v = k_{**} - k_*^\top D k_*`.
``linear_gaussian``
    ``q(beta) = N(mu, P^{-1})`` with ``P = L L^T``: :math:`m = x_*^\top \mu`,
    :math:`v = |L^{-1} x_*|^2` (linear VI, SVI, ECM).
``linear_dual``
    The same ``q(beta)`` in dual form (``inference.dual``, for ``p >> n``): GP regression with
    the linear kernel ``s^2 z_i^T x_*`` on the training rows, :math:`m = k_*^\top a`,
    :math:`v = s^2 |x_*|^2 - |L^{-1} S k_*|^2`.
``linear_draws``
    One latent value per posterior draw of ``beta``: :math:`m_s = x_*^\top \beta_s`, ``v = 0``.
``gp_draws``
    Per posterior draw ``f_s`` of the GP at the training inputs:
    :math:`m_s = k_*^\top K^{-1} f_s`, :math:`v = k_{**} - |L_K^{-1} k_*|^2`.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from .._jax import to_device
from .._serial import data_object, family, family_name, latent_family
from .._shapes import CHUNK, pad_rows, padded_size
from . import gaussian

__all__ = [
    "CHUNK",
    "Latent",
    "padded_size",
    "GPNoisy",
    "gp_noisy",
    "GPDense",
    "gp_dense",
    "LinearGaussian",
    "linear_gaussian",
    "LinearDual",
    "linear_dual",
    "linear_draws",
    "GPDraws",
    "gp_draws",
]



@data_object
class Latent:
    """``X* -> latent predictive`` for one fit: ``fn(static, arrays, X*)`` in padded chunks.

    Parameters
    ----------
    fn : callable
        A module-level, ``jit``-ed family function (this module's).
    static : hashable
        Its static settings (a kernel, the intercept flag).
    arrays : pytree of arrays
        The fit's arrays it reads.
    axis : int, default=-1
        Axis of the outputs that runs over the rows of ``X*`` (concatenated over chunks).
    chunked : bool, default=True
        False for predictives whose rows are not independent (the Bayesian committee machine
        combines over a query set): ``X*`` is passed whole.
    draws : int, optional
        For arrays of posterior draws padded to a bucket size (:func:`draws_padded`): the
        number of real draws, to which the outputs' first axis is cut.

    ``fn`` must be registered with :func:`ppl_bsvm._serial.latent_family`, so that a saved fit
    names it instead of storing code.
    """

    def __init__(self, fn, static, arrays, axis: int = -1, chunked: bool = True,
                 draws: int | None = None):
        self.fn = fn
        self.static = static
        self.arrays = jax.tree.map(_as_loaded, arrays)
        self.axis = axis
        self.chunked = chunked
        self.draws = draws

    def __reduce__(self):
        """Pickled with its function by registered name, as a saved fit stores it: unpickled,
        the fit calls the same jitted function and its compiled programs (``cloudpickle``
        copied a jitted function, which starts with none, and the copy compiled its
        predictive again)."""
        state = {k: v for k, v in vars(self).items() if k != "fn"}
        return _unpickle_latent, (family_name(self.fn) or self.fn, state)

    def __call__(self, X):
        out = self._evaluate(np.asarray(X, dtype=np.float64))
        draws = getattr(self, "draws", None)  # absent from fits saved before it existed
        if draws is None:
            return out
        return jax.tree.map(lambda a: np.asarray(a)[:draws], out)

    def _evaluate(self, X):
        if not getattr(self, "chunked", True):
            return self.fn(self.static, self.arrays, X)
        n = X.shape[0]
        parts = []
        for start in range(0, max(n, 1), CHUNK):
            chunk = X[start:start + CHUNK]
            rows = chunk.shape[0]
            out = self.fn(self.static, self.arrays, pad_rows(chunk, padded_size(rows)))
            parts.append(jax.tree.map(
                lambda a, rows=rows: np.take(np.asarray(a), np.arange(rows), axis=self.axis), out
            ))
        return jax.tree.map(lambda *p: np.concatenate(p, axis=self.axis), *parts)


def _unpickle_latent(fn, state: dict) -> Latent:
    latent = Latent.__new__(Latent)
    vars(latent).update(state, fn=family(fn) if isinstance(fn, str) else fn)
    return latent


def _as_loaded(a):
    """``a``, or a JAX array as a saved or pickled fit loads it: of an ordinary (not weak) type
    and not committed to a device. JAX keys a program by its arguments' types and commitment;
    the fit's own arrays can be weak-typed (the type of a Python scalar's result, such as
    ``jnp.where(mask, 1.0 / C, jnp.inf)``: BC-SVM's ``s``, SVGP's scalar) or committed (the
    outputs of a program from ``ppl_bsvm._programs``' store), and a loaded fit's are neither:
    it compiled its predictive again."""
    if isinstance(a, jax.Array) and (a.aval.weak_type or getattr(a, "committed", False)):
        return to_device(a)
    return a


def draws_padded(draws) -> tuple[np.ndarray, int]:
    """Posterior draws ``(S, ...)`` padded with zero rows to :func:`~ppl_bsvm._shapes.padded_size`
    of ``S``, and ``S``: the programs that read them (the predictive's, the solve of
    :func:`~ppl_bsvm.inference.mcmc._common.gp_predictor`) then depend on the bucket, not on
    ``num_samples`` and ``num_chains``, so another run length compiles nothing. Pass ``S`` as
    :class:`Latent`'s ``draws``."""
    draws = np.asarray(draws)
    return pad_rows(draws, padded_size(draws.shape[0])), draws.shape[0]


class GPNoisy(NamedTuple):
    """Arrays of a GP-regression predictive: training inputs ``X (n, d)``, unconstrained kernel
    ``params``, the factor ``chol (n, n)`` of ``I + S K S`` with ``s (n,)`` and the weights
    ``a = (K + N)^{-1} t (n,)``."""

    X: jnp.ndarray
    params: dict
    chol: jnp.ndarray
    s: jnp.ndarray
    a: jnp.ndarray


@latent_family
@partial(jax.jit, static_argnums=0)
def gp_noisy(kernel, arrays: GPNoisy, Xs):
    """Mean and variance ``(n*,)`` of the GP-regression predictive (module doc)."""
    fac = gaussian.NoisyFactor(arrays.chol, arrays.s)
    K_cross = kernel.K(arrays.params, arrays.X, Xs)
    return gaussian.predict(fac, arrays.a, K_cross, kernel.diag(arrays.params, Xs))


class GPDense(NamedTuple):
    """A Gaussian ``q(f) = N(K a, K - K D K)`` at the training inputs ``X (n, d)`` with a dense
    ``D (n, n)`` (B-BSVM's linear-response covariance, ``inference.vi.lrvb``), kernel
    ``params`` and the weights ``a (n,)``."""

    X: jnp.ndarray
    params: dict
    D: jnp.ndarray
    a: jnp.ndarray


@latent_family
@partial(jax.jit, static_argnums=0)
def gp_dense(kernel, arrays: GPDense, Xs):
    r"""Mean and variance ``(n*,)`` of ``f_*`` given ``q(f) = N(K a, K - K D K)``:
    :math:`m = k_*^\top a`, :math:`v = k_{**} - k_*^\top D k_*` (``K^{-1}`` cancels)."""
    K_cross = kernel.K(arrays.params, arrays.X, Xs)
    var = kernel.diag(arrays.params, Xs) - jnp.sum(K_cross * (arrays.D @ K_cross), axis=0)
    return K_cross.T @ arrays.a, jnp.maximum(var, 0.0)


def _design(X, intercept: bool):
    if not intercept:
        return X
    return jnp.concatenate([X, jnp.ones((X.shape[0], 1), X.dtype)], axis=1)


class LinearGaussian(NamedTuple):
    """``q(beta) = N(mean, (L L^T)^{-1})``: ``mean (p,)``, ``chol (p, p)`` of the precision."""

    mean: jnp.ndarray
    chol: jnp.ndarray


@latent_family
@partial(jax.jit, static_argnums=0)
def linear_gaussian(intercept: bool, arrays: LinearGaussian, X):
    """Mean and variance ``(n*,)`` of ``x_*^T beta`` (module doc)."""
    Xd = _design(X, intercept)
    V = solve_triangular(arrays.chol, Xd.T, lower=True)
    return Xd @ arrays.mean, jnp.sum(V**2, axis=0)


class LinearDual(NamedTuple):
    """``q(beta)`` in dual form (:mod:`ppl_bsvm.inference.dual`): training rows ``Z (n, p)``,
    prior variance ``s2``, the factor ``chol (n, n)`` of ``I + S K S`` with ``s (n,)``
    (``K = s2 Z Z^T``) and the weights ``a (n,)``, ``mean = s2 Z^T a``."""

    Z: jnp.ndarray
    s2: jnp.ndarray
    chol: jnp.ndarray
    s: jnp.ndarray
    a: jnp.ndarray


@latent_family
@partial(jax.jit, static_argnums=0)
def linear_dual(intercept: bool, arrays: LinearDual, X):
    """Mean and variance ``(n*,)`` of ``x_*^T beta`` from the dual form (module doc)."""
    Xd = _design(X, intercept)
    fac = gaussian.NoisyFactor(arrays.chol, arrays.s)
    return gaussian.predict(fac, arrays.a, arrays.s2 * (arrays.Z @ Xd.T),
                            arrays.s2 * jnp.sum(Xd**2, axis=1))


@latent_family
@partial(jax.jit, static_argnums=0)
def linear_draws(intercept: bool, betas, X):
    """Means ``(S, n*)`` of ``x_*^T beta_s`` for draws ``betas (S, p)`` and zero variances."""
    means = betas @ _design(X, intercept).T
    return means, jnp.zeros_like(means)


class GPDraws(NamedTuple):
    """Draws of the GP at the training inputs: ``X (n, d)``, ``params``, the Cholesky factor
    ``chol (n, n)`` of the (jittered) ``K`` and ``A = K^{-1} F^T (n, S)``."""

    X: jnp.ndarray
    params: dict
    chol: jnp.ndarray
    A: jnp.ndarray


@latent_family
@partial(jax.jit, static_argnums=0)
def gp_draws(kernel, arrays: GPDraws, Xs):
    """Means ``(S, n*)`` of ``f_* | f_s`` and the common conditional variance (module doc)."""
    Ks = kernel.K(arrays.params, arrays.X, Xs)
    V = solve_triangular(arrays.chol, Ks, lower=True)
    var = jnp.maximum(kernel.diag(arrays.params, Xs) - jnp.sum(V**2, axis=0), 0.0)
    means = arrays.A.T @ Ks
    return means, jnp.broadcast_to(var, means.shape)


class SparseDraws(NamedTuple):
    """Draws ``U (S, m)`` of the inducing values at ``prior.Z`` under kernel ``params``."""

    params: dict
    prior: object  # ppl_bsvm.inference.inducing.InducingPrior
    U: jnp.ndarray


@latent_family
@partial(jax.jit, static_argnums=0)
def sparse_draws(kernel, arrays: SparseDraws, Xs):
    """``f_* | u_s ~ N(kappa_* u_s, k_** - kappa_* K_m*)``: means ``(S, n*)``, variances."""
    from .inducing import project

    proj = project(kernel, arrays.params, arrays.prior, Xs)
    means = arrays.U @ proj.kappa.T
    return means, jnp.broadcast_to(proj.ktilde, means.shape)


class GPHyperDraws(NamedTuple):
    """Draws of ``f`` at the training inputs ``F (S, n)`` with their own hyperparameters
    ``thetas`` (name -> ``(S, ...)``, natural scale) over the base ``params``."""

    X: jnp.ndarray
    jitter: jnp.ndarray
    params: dict
    F: jnp.ndarray
    thetas: dict


@latent_family
@partial(jax.jit, static_argnums=0)
def gp_hyper_draws(kernel, arrays: GPHyperDraws, Xs):
    """Like :func:`gp_draws`, each draw with its own kernel (one ``n x n`` factor per draw)."""
    from jax.scipy.linalg import cho_solve

    from ..kernels import gram
    from ..models import kernel_params_with

    def one(args):
        f, theta = args
        params = kernel_params_with(kernel, arrays.params, theta)
        chol = jnp.linalg.cholesky(gram(kernel, params, arrays.X, arrays.jitter))
        Ks = kernel.K(params, arrays.X, Xs)
        V = solve_triangular(chol, Ks, lower=True)
        mean = Ks.T @ cho_solve((chol, True), f)
        return mean, jnp.maximum(kernel.diag(params, Xs) - jnp.sum(V**2, axis=0), 0.0)

    return jax.lax.map(one, (arrays.F, arrays.thetas))
