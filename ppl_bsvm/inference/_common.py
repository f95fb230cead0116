"""Pieces every engine shares: problem set-up, draws, the ``Fit`` for Gaussian approximations."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import nonnegative_float, positive_float
from .._idata import make_idata
from .._shapes import bucket_size, pad_rows
from ..data import Problem, design_matrix, feature_names
from ..kernels import Kernel, gram

__all__ = [
    "APPROX_GROUP",
    "bucket_size",
    "pad_rows",
    "GPSetup",
    "LinearSetup",
    "LinearData",
    "check_gamma",
    "check_kernel_matrix",
    "gaussian_idata",
    "gp_setup",
    "linear_setup",
    "mvn_draws",
]

APPROX_GROUP = "approximation"
"""Name of the DataTree group holding an approximation's own parameters (q's mean and
covariance, the ECM's point estimate and lam-hat, ...), apart from the posterior draws."""


class GPSetup(NamedTuple):
    """A GP problem ready for an engine: float64 device arrays and the kernel matrix.

    ``K`` includes the relative ``jitter`` (``ppl_bsvm.kernels.gram``).
    """

    X: jnp.ndarray  # (n, d)
    y: jnp.ndarray  # (n,) in {-1, +1}
    params: dict  # unconstrained kernel hyperparameters
    K: jnp.ndarray | None  # (n, n); None for the sparse engines
    jitter: float


class LinearSetup(NamedTuple):
    """The linear model's design: ``Z`` has rows ``z_i = y_i x_i`` (with the intercept column)."""

    Xd: jnp.ndarray  # (n, p) design matrix
    y: jnp.ndarray  # (n,)
    Z: jnp.ndarray  # (n, p)
    features: list[str]


class LinearData(NamedTuple):
    r"""The linear Bayesian SVM (``f_i = x_i^T beta``, ``beta ~ N(0, s^2 I)``) as each of its
    engines reads it: traced, never baked into a compiled program.

    The pseudo-likelihood sees inputs and labels only through the margins
    ``y_i f_i = z_i^T beta``, so the rows ``z_i = y_i x_i`` stand for both. The first three
    fields are the model's; the rest are engine settings, None where an engine has none.

    Attributes
    ----------
    Z : (n, p)
        Rows ``z_i = y_i x_i`` of the design (intercept column last when used).
    prior_scale : ()
        ``s`` (VI and SVI, which can learn it, start from it and keep ``log s`` in their state).
    gamma : ()
        Pseudo-likelihood temperature.
    rows : GramRows, optional
        Gibbs: the rows' products ``z_i z_i^T`` packed (``mcmc.conditionals.gram_rows``), when
        they fit in memory.
    eps : (), optional
        ECM: floor of ``lamhat``.
    learn : () bool, optional
        VI and SVI: update the prior scale (closed-form maximiser of the ELBO).
    scale : (), optional
        VI and SVI: ``n / |S|`` (1 for batch VI).
    period : () int32, optional
        SVI: stream positions per period of the stopping rule (``check_every`` epochs).
    order : BatchOrder, optional
        SVI: the minibatch stream's fixed random order (``vi._svi``).
    gram : (n, n), optional
        VI and ECM in dual form: ``Z Z^T`` (``inference.dual``).
    """

    Z: jnp.ndarray
    prior_scale: jnp.ndarray
    gamma: jnp.ndarray
    rows: object = None
    eps: jnp.ndarray | None = None
    learn: jnp.ndarray | None = None
    scale: jnp.ndarray | None = None
    period: jnp.ndarray | None = None
    order: object = None
    gram: jnp.ndarray | None = None


class GPData(NamedTuple):
    """The GP Bayesian SVM (``f ~ N(0, K)``) at fixed kernel hyperparameters as its engines
    read it: traced, never baked into a compiled program. The first three fields are the
    model's; the rest are engine settings, None where an engine has none. (The engines that
    learn the hyperparameters, B-BSVM and S-BSVM, read the inputs ``X`` instead of ``K``.)

    Attributes
    ----------
    K : (n, n)
        The jittered prior covariance at the training inputs; Gibbs with ``pcg`` on the CPU
        from 2000 points: its lower blocks (``mcmc.packed.Packed``).
    y : (n,)
        Labels in {-1, +1}.
    gamma : ()
        Pseudo-likelihood temperature.
    chol_K : (n, n), optional
        Gibbs: the lower Cholesky factor of ``K``, computed once outside the loop.
    eps : (), optional
        ECM: floor of ``lamhat``.
    pcg : Preconditioner, optional
        Gibbs: the low-rank spectrum of ``K`` with which ``f | lam`` is solved by conjugate
        gradients (``mcmc.pcg``); None: by a Cholesky factor per sweep.
    """

    K: Any
    y: jnp.ndarray
    gamma: jnp.ndarray
    chol_K: jnp.ndarray | None = None
    eps: jnp.ndarray | None = None
    pcg: Any = None


def gp_setup(problem: Problem, kernel: Kernel, jitter: float, *,
             kernel_matrix: bool = True, check: bool = True) -> GPSetup:
    """The problem as device arrays, the kernel's initial parameters and, unless
    ``kernel_matrix=False`` (the sparse engines, which never form the ``n x n`` matrix: at
    10^5 points it is 80 GB), the kernel matrix (``K`` None otherwise), checked
    (:func:`check_kernel_matrix`) unless ``check=False``: the engines that factorise ``K``
    anyway check it by that factor (``mcmc._common.kernel_factor``), one ``O(n^3)`` step
    fewer."""
    jitter = nonnegative_float("jitter", jitter)
    X = jnp.asarray(problem.X, dtype=jnp.float64)
    y = jnp.asarray(problem.y, dtype=jnp.float64)
    params = kernel.init_params(problem.X)
    if not kernel_matrix:
        return GPSetup(X, y, params, None, jitter)
    K = gram(kernel, params, X, jitter)
    if check:
        check_kernel_matrix(K, kernel, jitter)
    return GPSetup(X, y, params, K, jitter)


def check_kernel_matrix(K, kernel: Kernel, jitter: float) -> None:
    """Raise ``ValueError`` naming the kernel and jitter if ``K`` is not a valid covariance.

    ``K`` must be finite and positive semi-definite: a Cholesky factorisation that succeeds
    proves it; when it fails, the smallest eigenvalue decides, so that a singular but PSD
    ``K`` (duplicated inputs with ``jitter=0``) passes, since the engines that solve in the
    ``I + S K S`` form handle it, while an indefinite one (e.g. a ``Sigmoid`` kernel) stops
    here instead of turning into NaN probabilities. Skipped under tracing.
    """
    if isinstance(K, jax.core.Tracer):
        return
    K = np.asarray(K, dtype=np.float64)
    if not np.all(np.isfinite(K)):
        raise ValueError(
            f"the kernel matrix of {kernel!r} has non-finite entries; check the kernel "
            "parameters (overflow from an extreme lengthscale or scale?)"
        )
    try:
        np.linalg.cholesky(K)
        return
    except np.linalg.LinAlgError:
        pass
    eig = np.linalg.eigvalsh(K)
    scale = max(float(np.max(np.abs(eig))), np.finfo(np.float64).tiny)
    if eig[0] < -1e-8 * scale * K.shape[0]:
        raise ValueError(
            f"the kernel matrix of {kernel!r} (jitter={jitter:g}, relative) is not positive "
            f"definite, not even semi-definite (smallest eigenvalue {eig[0]:.3g}, largest "
            f"{eig[-1]:.3g}); use a "
            "positive-definite kernel (the sigmoid kernel is not one) or other kernel parameters"
        )


def linear_setup(problem: Problem, intercept: bool) -> LinearSetup:
    Xd = jnp.asarray(design_matrix(problem.X, intercept), dtype=jnp.float64)
    y = jnp.asarray(problem.y, dtype=jnp.float64)
    return LinearSetup(Xd, y, y[:, None] * Xd,
                       feature_names(problem.d, intercept, problem.feature_names))


def check_gamma(gamma) -> float:
    """The pseudo-likelihood temperature: ``L(y|f) = exp(-2 gamma max(0, 1 - y f))``."""
    return positive_float("gamma", gamma)


def mvn_draws(key, mean, chol_cov, num_draws: int):
    """``num_draws`` draws of ``N(mean, L L^T)`` as an array ``(1, num_draws, dim)``."""
    return np.asarray(_mvn_draws(key, mean, chol_cov, num_draws))[None]


@functools.partial(jax.jit, static_argnums=3)
def _mvn_draws(key, mean, chol_cov, num_draws: int):
    z = jax.random.normal(key, (num_draws, mean.shape[0]), dtype=mean.dtype)
    return mean + z @ chol_cov.T


def gaussian_idata(
    draws: dict,
    *,
    problem: Problem,
    coords: dict | None = None,
    approximation: dict | None = None,
    attrs: dict | None = None,
):
    """DataTree for a Gaussian approximation: i.i.d. draws (one chain) plus its parameters."""
    dims = {
        "f_mean": ["obs"],
        "f_var": ["obs"],
        "lam_hat": ["obs"],
        "alpha": ["obs"],
        "beta_mean": ["feature"],
        "beta_cov": ["feature", "feature_bis"],
        "beta_cov_mean_field": ["feature", "feature_bis"],
        "beta_mean_psis": ["feature"],
        "beta_sd_psis": ["feature"],
        "psis_log_weights": ["draw"],
        "u_mean": ["inducing"],
        "u_cov": ["inducing", "inducing_bis"],
        "f_cov": ["obs", "obs_bis"],
        "f_cov_mean_field": ["obs", "obs_bis"],
        "Z": ["inducing", "input_dim"],
    }
    coords = dict(coords or {})
    coords.setdefault("obs", np.arange(problem.n))
    if problem.feature_names is not None:  # the columns of inducing locations Z
        coords["input_dim"] = list(problem.feature_names)
    coords.setdefault("obs_bis", coords["obs"])
    if "feature" in coords:
        coords.setdefault("feature_bis", coords["feature"])
    if "inducing" in coords:
        coords.setdefault("inducing_bis", coords["inducing"])
    groups = {APPROX_GROUP: approximation} if approximation else None
    return make_idata(
        draws,
        coords=coords,
        dims=dims,
        observed_y=problem.y,
        groups=groups,
        attrs=attrs,
    )


def beta_idata(problem: Problem, features, draws, mean, cov, *, method: str, stop_reason: str,
               covariance: str | None = None, attrs: dict | None = None, **approximation):
    """:func:`gaussian_idata` of a Gaussian ``q(beta)`` of the linear model: the draws, its
    mean and covariance, and the engine's other ``approximation`` arrays (``covariance``: the
    attribute saying which covariance ``beta_cov`` is, where an engine offers a choice;
    ``attrs``, more attributes)."""
    return gaussian_idata(
        {"beta": draws},
        problem=problem,
        coords={"feature": features},
        approximation={"beta_mean": np.asarray(mean), "beta_cov": np.asarray(cov),
                       **{k: np.asarray(v) for k, v in approximation.items()}},
        attrs={"method": method, "model": "linear", "stop_reason": stop_reason,
               "covariance": covariance, **(attrs or {})},
    )
