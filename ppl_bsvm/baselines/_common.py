"""Pieces the baselines share: options pieces, predictors, idata without a posterior, kernels
for scikit-learn."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import numpy as np
import xarray as xr

from .._checks import one_of
from ..data import Problem
from ..engine import Options
from ..kernels import (
    RBF,
    Constant,
    Kernel,
    Linear,
    Matern32,
    Matern52,
    Polynomial,
    Product,
    Sum,
)
from .._idata import _dataset
from .._serial import data_object
from .._shapes import pad_rows, padded_call, padded_size
from ..predictive import DEFAULT_LINK, LINKS, GaussianPredictor, class_probability
from ._likelihoods import check_likelihood, logistic_gaussian

_logistic_gaussian = jax.jit(logistic_gaussian)

__all__ = [
    "BASELINE_LINKS",
    "BaselineLink",
    "Likelihood",
    "LinkPredictor",
    "ScorePredictor",
    "sklearn_seed",
    "fit_idata",
    "to_sklearn_kernel",
    "kernel_matrix",
]

BASELINE_LINKS = (*LINKS, "logit")
"""The links of :mod:`ppl_bsvm.predictive` plus ``"logit"``: ``E[sigmoid(f)]`` under the
latent Gaussian, the exact predictive of a logistic-likelihood model."""


def check_baseline_link(link) -> str:
    return one_of("link", link, BASELINE_LINKS)


# --- options pieces (ppl_bsvm.engine) ---------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaselineLink(Options):
    """``link``: the default link of ``predict_proba``, one of :data:`BASELINE_LINKS` (those of
    :mod:`ppl_bsvm.predictive` and ``"logit"``)."""

    link: str = DEFAULT_LINK

    def _check(self):
        check_baseline_link(self.link)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Likelihood(Options):
    """The GP baselines' ``likelihood`` (``"probit"`` or ``"logit"``, ``._likelihoods``) and
    ``link``, the default link of ``predict_proba``: one of :data:`BASELINE_LINKS`, or None
    for the likelihood's own (:attr:`predictive_link`), the exact predictive under it."""

    likelihood: str = "probit"
    link: str | None = None

    def _check(self):
        check_likelihood(self.likelihood)
        if self.link is not None:
            check_baseline_link(self.link)

    @property
    def predictive_link(self) -> str:
        """``link``, or the likelihood's own when it is None (each likelihood, ``"probit"`` or
        ``"logit"``, is also the name of its link)."""
        return self.likelihood if self.link is None else self.link


@data_object
class LinkPredictor(GaussianPredictor):
    """A :class:`~ppl_bsvm.predictive.GaussianPredictor` that also knows the ``"logit"`` link.

    Parameters
    ----------
    latent_fn : callable
        ``X (n*, d) -> (mean (n*,), var (n*,))``.
    link : str, default="probit"
        One of :data:`BASELINE_LINKS`.
    gamma : float, default=1.0
    """

    def __init__(self, latent_fn: Callable, link: str = "probit", gamma: float = 1.0):
        self.latent_fn = latent_fn
        self.link = check_baseline_link(link)
        self.gamma = gamma

    def proba(self, X, link: str | None = None):
        link = check_baseline_link(link or self.link)
        mean, var = self.latent(X)
        if link == "logit":
            return padded_call(_logistic_gaussian, mean, var)
        return np.asarray(class_probability(mean, var, link, self.gamma), dtype=np.float64)


@data_object
class ScorePredictor:
    """Probabilities from a score without a latent Gaussian (SVM + Platt scaling).

    ``latent`` raises: there is no posterior over the latent function, only the SVM's decision
    value. ``decision_function`` gives that value and ``proba`` the calibrated probability,
    scikit-learn's sigmoid ``P(y = +1) = 1 / (1 + exp(a s + b))``.

    Parameters
    ----------
    decision_fn : ppl_bsvm.inference.latent.Latent
        ``X (n*, d) -> score (n*,)``.
    a, b : float
        The fitted sigmoid.
    name : str
        The method, for error messages.
    """

    def __init__(self, decision_fn: Callable, a: float, b: float, name: str):
        self.decision_fn = decision_fn
        self.a = float(a)
        self.b = float(b)
        self.name = name
        self.link = name

    def decision_function(self, X) -> np.ndarray:
        return np.asarray(self.decision_fn(X), dtype=np.float64)

    def latent(self, X):
        raise NotImplementedError(
            f"method {self.name!r} has no latent Gaussian (no posterior over f); use "
            "predict_proba, or fit.predictor.decision_function(X) for the SVM score"
        )

    def proba(self, X, link: str | None = None):
        if link is not None and link != self.name:
            raise ValueError(
                f"link={link!r} needs a latent Gaussian; method {self.name!r} has only its "
                "calibrated score (call predict_proba without link)"
            )
        score = self.decision_function(X)
        return 1.0 / (1.0 + np.exp(np.clip(self.a * score + self.b, -700.0, 700.0)))


def sklearn_seed(key) -> int:
    """A 31-bit integer seed for scikit-learn, drawn from a JAX key."""
    return int(jax.random.randint(key, (), 0, 2**31 - 1))


def fit_idata(problem: Problem, groups: dict[str, dict], *, dims=None, coords=None, attrs=None):
    """A DataTree for a fit without posterior draws: ``observed_data`` plus named groups.

    Used by the point-estimate baselines (SVM + Platt, BC-SVM): they have no posterior over
    ``f`` to draw from, so the tree holds the training labels and the fitted quantities only.
    """
    coords = {"obs": np.arange(problem.n), **(coords or {})}
    dims = {"y": ["obs"], **(dims or {})}
    tree = {"observed_data": xr.DataTree(_dataset({"y": problem.y}, dims, coords))}
    for group, values in groups.items():
        tree[group] = xr.DataTree(_dataset(values, dims, coords))
    dt = xr.DataTree(children=tree)
    if attrs:
        dt.attrs.update({k: v for k, v in attrs.items() if v is not None})
    return dt


def kernel_matrix(kernel: Kernel, params, X1, X2=None) -> np.ndarray:
    """``k(X1, X2)`` as a float64 NumPy array (for scikit-learn's precomputed kernels).

    One compiled program per kernel and padded shape: the rows of ``X1`` and ``X2`` are padded
    to powers of two (``_shapes.padded_size``), so that test sets and support sets of any size
    share a few programs.
    """
    X1 = np.asarray(X1, dtype=np.float64)
    X2 = X1 if X2 is None else np.asarray(X2, dtype=np.float64)
    n1, n2 = X1.shape[0], X2.shape[0]
    K = _kernel_matrix(kernel, params, pad_rows(X1, padded_size(n1)), pad_rows(X2, padded_size(n2)))
    return np.asarray(K)[:n1, :n2]


@functools.partial(jax.jit, static_argnums=0)
def _kernel_matrix(kernel, params, X1, X2):
    return kernel.K(params, X1, X2)


def to_sklearn_kernel(kernel: Kernel, params):
    """The scikit-learn kernel equal to ``kernel`` at ``params``, hyperparameters fixed.

    RBF (isotropic or ARD) -> ``ConstantKernel(variance) * RBF(lengthscale)``; Matern 3/2, 5/2
    -> ``Matern(nu=1.5 / 2.5)``; Linear -> ``ConstantKernel * DotProduct(sigma_0=0)``;
    Polynomial ``(a x.x' + c)^p`` -> ``(ConstantKernel(a) * DotProduct(sqrt(c/a)))**p``;
    Constant, sums and products recursively. The sigmoid kernel has no scikit-learn
    counterpart (and is not a covariance), so it raises ``ValueError``.
    """
    from sklearn.gaussian_process import kernels as sk

    def const(value):
        return sk.ConstantKernel(float(value), constant_value_bounds="fixed")

    if isinstance(kernel, Sum):
        return to_sklearn_kernel(kernel.k1, params["k1"]) + to_sklearn_kernel(kernel.k2, params["k2"])
    if isinstance(kernel, Product):
        return to_sklearn_kernel(kernel.k1, params["k1"]) * to_sklearn_kernel(kernel.k2, params["k2"])
    with jax.enable_x64(True):  # the natural values in float64 whatever the session's setting
        p = {k: np.asarray(v, dtype=np.float64) for k, v in kernel.constrain(params).items()}
    if isinstance(kernel, (RBF, Matern32, Matern52)):
        ell = p["lengthscale"]
        ell = float(ell) if ell.ndim == 0 else ell
        if isinstance(kernel, RBF):
            base = sk.RBF(length_scale=ell, length_scale_bounds="fixed")
        else:
            nu = 1.5 if isinstance(kernel, Matern32) else 2.5
            base = sk.Matern(length_scale=ell, length_scale_bounds="fixed", nu=nu)
        return const(p["variance"]) * base
    if isinstance(kernel, Linear):
        return const(p["variance"]) * sk.DotProduct(sigma_0=0.0, sigma_0_bounds="fixed")
    if isinstance(kernel, Polynomial):
        a, c = float(p["scale"]), float(p["offset"])
        dot = sk.DotProduct(sigma_0=np.sqrt(c / a), sigma_0_bounds="fixed")
        return sk.Exponentiation(const(a) * dot, kernel.degree)
    if isinstance(kernel, Constant):
        return const(p["value"])
    raise ValueError(
        f"kernel {type(kernel).__name__} has no scikit-learn Gaussian-process counterpart "
        "(the sigmoid kernel is not a covariance function); use method='gpc' or another kernel"
    )
