"""Validation and kernel set-up shared by the replica-TAP theory and the Monte-Carlo bootstrap.

Both must see exactly the same kernel matrix (same hyperparameters, jitter and bias constant),
so that they describe the same classifier.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import nonnegative_float, one_of, positive_float
from ..data import BinaryLabels, check_X, check_X_y
from ..kernels import DEFAULT_JITTER, Kernel, get_kernel, gram

__all__ = ["Setup", "make_setup", "check_ratios", "resolve_variant", "Variant"]

MODELS = ("svm", "regression")
MARGINS = ("hard", "soft")
BIAS_FACTOR = 100.0
"""``bias=True`` adds ``b0 = 100 * mean(diag K)`` to the kernel (spec 8.1)."""


class Variant(NamedTuple):
    """Which machine is bootstrapped: ``kind`` in {"hard", "soft", "regression"}, the
    soft-margin penalty ``C`` (NaN otherwise) and the regression noise variance (NaN
    otherwise)."""

    kind: str
    C: float
    noise: float


class Setup(NamedTuple):
    """A validated bootstrap problem.

    Attributes
    ----------
    X : ndarray (n, d)
    y : ndarray (n,)
        {-1, +1} labels (classification) or float targets (regression).
    labels : BinaryLabels or None
    kernel : Kernel
    params : dict
        Unconstrained kernel hyperparameters.
    K : ndarray (n, n)
        ``gram(kernel, params, X, jitter) + b0`` (float64, numpy).
    jitter : float
    bias : float
        The constant ``b0`` added to the kernel (0 without the bias variant).
    X_test : ndarray (n*, d) or None
    K_test : ndarray (n, n*) or None
        ``k(X, X_test) + b0``.
    k_test_diag : ndarray (n*,) or None
    y_test : ndarray (n*,) or None
    """

    X: np.ndarray
    y: np.ndarray
    labels: BinaryLabels | None
    kernel: Kernel
    params: Any
    K: np.ndarray
    jitter: float
    bias: float
    X_test: np.ndarray | None
    K_test: np.ndarray | None
    k_test_diag: np.ndarray | None
    y_test: np.ndarray | None


def check_ratios(sample_ratio, *, name: str = "sample_ratio", low=0.05, high=40.0) -> np.ndarray:
    """``S/N`` values as a 1-D float array, each in ``[low, high]``.

    Below 0.05 the sites vanish and the error is 0/0 (spec 7); above 40 the clamped sites
    exceed 1e17 and the ``S -> inf`` limit (``loo``) is the better tool.
    """
    arr = np.atleast_1d(np.asarray(sample_ratio, dtype=object))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a number or a 1-D sequence of numbers, got {sample_ratio!r}")
    out = []
    for v in arr:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or not np.isfinite(v):
            raise ValueError(f"{name} must contain finite numbers, got {v!r}")
        if not low <= float(v) <= high:
            raise ValueError(f"{name} values must lie in [{low}, {high}], got {v!r}")
        out.append(float(v))
    return np.asarray(out)


def resolve_variant(model: str, margin: str, C, noise) -> Variant:
    """Check the model/margin options: ``C`` only for ``margin="soft"``, ``noise`` only for
    ``model="regression"``."""
    one_of("model", model, MODELS)
    if model == "regression":
        if C is not None:
            raise ValueError("C applies to the soft-margin SVM, not to model='regression'")
        return Variant("regression", np.nan, positive_float("noise", noise))
    one_of("margin", margin, MARGINS)
    if margin == "soft":
        if C is None:
            raise ValueError("margin='soft' needs the penalty C (e.g. C=2.0, the BSVM's MAP)")
        return Variant("soft", positive_float("C", C), np.nan)
    if C is not None:
        raise ValueError("C is only used with margin='soft'; the hard margin has no penalty")
    return Variant("hard", np.nan, np.nan)


def _check_regression_y(y, n, name="y"):
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)):
        raise ValueError(f"{name} must be numeric for model='regression', got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    if arr.shape[0] != n:
        raise ValueError(f"X and {name} have different lengths: {n} rows against {arr.shape[0]}")
    return arr


def _bias_constant(bias, K) -> float:
    if isinstance(bias, (bool, np.bool_)):
        return BIAS_FACTOR * float(np.mean(np.diag(K))) if bias else 0.0
    return positive_float("bias", bias)


def make_setup(
    X,
    y,
    kernel,
    *,
    model: str,
    params=None,
    X_test=None,
    y_test=None,
    jitter: float = DEFAULT_JITTER,
    bias=False,
    positive=None,
) -> Setup:
    """Validate the data, resolve the kernel and build the (jittered, biased) kernel matrices.

    Must run with float64 enabled (public entry points are wrapped in ``ppl_bsvm._runtime.entry_point``).
    """
    if model == "regression":
        Xc = check_X(X)
        yc = _check_regression_y(y, Xc.shape[0])
        labels = None
        if bias is not False:
            raise ValueError("bias applies to the SVM; for regression centre y instead")
    else:
        problem = check_X_y(X, y, positive=positive)
        Xc, yc, labels = problem.X, problem.y, problem.labels
    if Xc.shape[0] < 3:
        raise ValueError(f"the bootstrap needs at least 3 training points, got {Xc.shape[0]}")
    kernel = get_kernel("rbf" if kernel is None else kernel)
    jitter = nonnegative_float("jitter", jitter)
    if params is None:
        params = kernel.init_params(Xc)
    params = jax.tree.map(lambda p: jnp.asarray(p, dtype=jnp.float64), params)
    Xj = jnp.asarray(Xc)
    K = np.asarray(gram(kernel, params, Xj, jitter))
    if not np.all(np.isfinite(K)):
        raise ValueError("the kernel matrix has non-finite entries; check the hyperparameters")
    b0 = _bias_constant(bias, K)
    K = K + b0
    K_test = k_diag = yt = Xt = None
    if X_test is not None:
        Xt = check_X(X_test, name="X_test", n_features=Xc.shape[1])
        K_test = np.asarray(kernel.K(params, Xj, jnp.asarray(Xt))) + b0
        k_diag = np.asarray(kernel.diag(params, jnp.asarray(Xt))) + b0
        if y_test is not None:
            if model == "regression":
                yt = _check_regression_y(y_test, Xt.shape[0], name="y_test")
            else:
                yt = labels.encode(np.asarray(y_test))
                if yt.shape[0] != Xt.shape[0]:
                    raise ValueError("X_test and y_test have different lengths")
    elif y_test is not None:
        raise ValueError("y_test given without X_test")
    return Setup(Xc, yc, labels, kernel, params, K, jitter, b0, Xt, K_test, k_diag, yt)
