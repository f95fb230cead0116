"""Pure JAX covariance functions.

A kernel is a small frozen (hashable) object holding only *static* settings and the starting
values of its hyperparameters; the hyperparameters themselves travel separately as a pytree
(a ``dict`` of arrays) with positive quantities stored as logs, so that

- ``kernel.K(params, X1, X2)`` is the ``(n1, n2)`` covariance matrix,
- ``kernel.diag(params, X)`` is its diagonal ``k(x_i, x_i)`` (never ``K(X, X)`` for that),
- ``kernel.init_params(X)`` builds the pytree from the starting values,
- ``kernel.constrain(params)`` gives the natural, positive values by name (``lengthscale``,
  ``variance``, ...), which is what results and ArviZ objects report.

All functions are safe under ``jit``, ``vmap`` and ``grad`` (including at zero distance for the
Matern kernels). Kernels compose with ``+`` and ``*``.

Jitter: :func:`gram` adds ``jitter * mean(diag K)`` to the diagonal of a training covariance
matrix (relative jitter, :data:`DEFAULT_JITTER` = 1e-6 by default) so that Cholesky factorisations
of nearly singular matrices (broad RBF kernels) succeed; engines record the value they used.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "DEFAULT_JITTER",
    "Kernel",
    "RBF",
    "Matern32",
    "Matern52",
    "Linear",
    "Polynomial",
    "Sigmoid",
    "Constant",
    "Sum",
    "Product",
    "get_kernel",
    "program_kernel",
    "gram",
    "median_distance",
    "KERNELS",
]

DEFAULT_JITTER = 1e-6
"""Relative jitter added by :func:`gram`: ``K + DEFAULT_JITTER * mean(diag K) * I``."""

Params = dict[str, Any]


def median_distance(X, max_points: int = 1000) -> float:
    """Median pairwise Euclidean distance of the rows of ``X`` (the 'median heuristic').

    Uses at most ``max_points`` rows, chosen with a fixed seed so the value is reproducible.
    Returns 1.0 when all rows coincide.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] > max_points:
        idx = np.random.default_rng(0).choice(X.shape[0], max_points, replace=False)
        X = X[idx]
    X = X - X.mean(0)  # a shared offset would cancel in the expansion below (_sq_dist)
    sq = np.sum(X**2, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * X @ X.T, 0.0)
    iu = np.triu_indices(X.shape[0], k=1)
    if iu[0].size == 0:
        return 1.0
    med = float(np.sqrt(np.median(d2[iu])))
    return med if med > 0 else 1.0


def _sq_dist(X1, X2):
    """Squared Euclidean distances, clipped at 0 against round-off.

    Computed as ``|x|^2 + |x'|^2 - 2 x.x'`` (one matrix product) after subtracting the first
    row of ``X2`` from both arguments: the distances do not change, while an offset shared by
    the inputs (a Unix time, ``X + 1e8``) would otherwise leave the three terms equal to the
    last digit and their difference all round-off. The first row, not a mean: callers pad
    chunks of rows with zeros at the end, which would drag a mean away from the data. No
    gradient flows through the shift, as the distances do not depend on it. ``K(X, X)`` (the
    same array twice) gets an exact zero diagonal, which the expansion leaves at round-off
    (``eps |x|^2``, enough to make a tiny lengthscale's ``k(x, x)`` less than its variance).
    """
    same = X1 is X2
    if X2.shape[0]:
        shift = jax.lax.stop_gradient(X2[0])
        X1, X2 = X1 - shift, X2 - shift
    # Divided by a power of two near the largest coordinate, exactly, so that no square
    # overflows: inputs of 1e148 over a lengthscale of 1e-8 squared to inf, and inf - inf made
    # the distance NaN; now it is the true distance times the power's square (inf only where
    # the distance itself overflows, and then k = 0, as it should be).
    top = jax.lax.stop_gradient(jnp.maximum(jnp.max(jnp.abs(X1), initial=0.0),
                                            jnp.max(jnp.abs(X2), initial=0.0)))
    unit = jnp.ldexp(jnp.ones_like(top), jnp.frexp(top)[1])  # 2^e >= top (1 for top = 0)
    X1, X2 = X1 / unit, X2 / unit
    s1 = jnp.sum(X1**2, axis=-1)
    s2 = jnp.sum(X2**2, axis=-1)
    d2 = jnp.maximum(s1[:, None] + s2[None, :] - 2.0 * X1 @ X2.T, 0.0)
    d2 = jnp.where(d2 > 0, d2 * unit**2, 0.0)
    if same:
        d2 = jnp.where(jnp.eye(d2.shape[0], dtype=bool), 0.0, d2)
    return d2


def _safe_sqrt(d2):
    """sqrt with a finite gradient at 0 (the double-where trick), for Matern kernels."""
    pos = d2 > 0.0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, d2, 1.0)), 0.0)


def _is_real(value) -> bool:
    """A Python or NumPy real number (not a bool, a string or an array)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))


def _as_kernel(other, op: str) -> "Kernel":
    """A kernel combined with ``op``: a kernel as it is, a positive number as
    :class:`Constant` (``RBF() + 1.0`` is a bias, ``2.0 * RBF()`` a variance, as in
    scikit-learn); anything else a ``ValueError`` naming it."""
    if isinstance(other, Kernel):
        return other
    if _is_real(other):
        return Constant(float(other))
    raise ValueError(f"a kernel can be combined with {op} only with another kernel or a "
                     f"positive number, got {type(other).__name__} {other!r}")


def _positive(name: str, value) -> None:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}") from None
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")


def _as_static(value):
    """Tuples keep kernels hashable when a vector (ARD lengthscales) is given."""
    if value is None or np.ndim(value) == 0:
        return None if value is None else float(value)
    return tuple(float(v) for v in np.asarray(value).ravel())


class Kernel:
    """Base class: subclasses define ``K``, ``diag``, ``init_params`` and ``constrain``."""

    name: ClassVar[str] = "kernel"
    starting_values: ClassVar[tuple[str, ...]] = ()
    """The fields holding starting values of hyperparameters, which only ``init_params`` reads
    (:func:`program_kernel`)."""

    def K(self, params: Params, X1, X2):  # pragma: no cover - abstract
        raise NotImplementedError

    def diag(self, params: Params, X):  # pragma: no cover - abstract
        raise NotImplementedError

    def init_params(self, X=None) -> Params:  # pragma: no cover - abstract
        raise NotImplementedError

    def constrain(self, params: Params) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __add__(self, other) -> "Sum":
        return Sum(self, _as_kernel(other, "+"))

    def __radd__(self, other) -> "Sum":
        return Sum(_as_kernel(other, "+"), self)

    def __mul__(self, other) -> "Product":
        return Product(self, _as_kernel(other, "*"))

    def __rmul__(self, other) -> "Product":
        return Product(_as_kernel(other, "*"), self)


@dataclasses.dataclass(frozen=True)
class _Stationary(Kernel):
    """Shared parametrisation of RBF and Matern kernels.

    ``lengthscale=None`` starts from the median pairwise distance of the training inputs.
    ``ard=True`` gives one lengthscale per input dimension.
    """

    lengthscale: float | tuple[float, ...] | None = None
    variance: float = 1.0
    ard: bool = False
    starting_values: ClassVar[tuple[str, ...]] = ("lengthscale", "variance")

    def __post_init__(self):
        # checked as given, before the conversions read them (lengthscale="x" was float()'s
        # error, naming no argument)
        if self.lengthscale is not None:
            _positive("lengthscale", self.lengthscale)
        _positive("variance", self.variance)
        object.__setattr__(self, "lengthscale", _as_static(self.lengthscale))
        object.__setattr__(self, "variance", float(self.variance))
        if isinstance(self.lengthscale, tuple) and not self.ard:
            raise ValueError("a vector lengthscale needs ard=True")

    def init_params(self, X=None) -> Params:
        if self.lengthscale is None:
            if X is None:
                raise ValueError(
                    f"{type(self).__name__}(lengthscale=None) needs the training inputs X "
                    "to set its starting lengthscale (median heuristic)"
                )
            ell = np.asarray(median_distance(X))
        else:
            ell = np.asarray(self.lengthscale)
        if self.ard:
            if X is None and ell.ndim == 0:
                raise ValueError("an ARD kernel with a scalar lengthscale needs X to know d")
            d = np.asarray(X).shape[1] if X is not None else ell.size
            if ell.ndim == 0:
                ell = np.full(d, float(ell))
            elif ell.size != d:
                raise ValueError(f"lengthscale has {ell.size} entries but X has {d} features")
        return {
            "log_lengthscale": np.log(np.asarray(ell, dtype=np.float64)),
            "log_variance": np.log(np.asarray(self.variance, dtype=np.float64)),
        }

    def constrain(self, params: Params) -> dict[str, Any]:
        return {
            "lengthscale": jnp.exp(params["log_lengthscale"]),
            "variance": jnp.exp(params["log_variance"]),
        }

    def _scaled_d2(self, params, X1, X2):
        ell = jnp.exp(params["log_lengthscale"])
        Z1 = X1 / ell
        return _sq_dist(Z1, Z1 if X2 is X1 else X2 / ell)  # K(X, X): _sq_dist sees it

    def diag(self, params, X):
        return jnp.full(X.shape[0], jnp.exp(params["log_variance"]), dtype=X.dtype)


@dataclasses.dataclass(frozen=True)
class RBF(_Stationary):
    r"""Squared-exponential kernel, isotropic or ARD.

    .. math:: k(x, x') = \sigma^2 \exp\left(-\tfrac12 \sum_j (x_j - x'_j)^2 / \ell_j^2\right)

    Parameters
    ----------
    lengthscale : float or sequence of float, optional
        :math:`\ell` (one per dimension with ``ard=True``). Default: median heuristic.
    variance : float, default=1.0
        :math:`\sigma^2`.
    ard : bool, default=False
    """

    name: ClassVar[str] = "rbf"

    def K(self, params, X1, X2):
        return jnp.exp(params["log_variance"]) * jnp.exp(-0.5 * self._scaled_d2(params, X1, X2))


@dataclasses.dataclass(frozen=True)
class Matern32(_Stationary):
    r"""Matern kernel with smoothness 3/2.

    .. math:: k = \sigma^2 (1 + \sqrt3 r) e^{-\sqrt3 r}, \quad r = \|(x - x') / \ell\|
    """

    name: ClassVar[str] = "matern32"

    def K(self, params, X1, X2):
        r = jnp.sqrt(3.0) * _safe_sqrt(self._scaled_d2(params, X1, X2))
        return jnp.exp(params["log_variance"]) * (1.0 + r) * jnp.exp(-r)


@dataclasses.dataclass(frozen=True)
class Matern52(_Stationary):
    r"""Matern kernel with smoothness 5/2.

    .. math:: k = \sigma^2 (1 + \sqrt5 r + \tfrac53 r^2) e^{-\sqrt5 r}
    """

    name: ClassVar[str] = "matern52"

    def K(self, params, X1, X2):
        d2 = self._scaled_d2(params, X1, X2)
        r = jnp.sqrt(5.0) * _safe_sqrt(d2)
        return jnp.exp(params["log_variance"]) * (1.0 + r + 5.0 / 3.0 * d2) * jnp.exp(-r)


@dataclasses.dataclass(frozen=True)
class Linear(Kernel):
    r"""Linear kernel.

    .. math:: k(x, x') = \sigma^2 x^\top x'

    A GP with this kernel is the linear model ``f = x^T beta`` with ``beta ~ N(0, sigma^2 I)``.
    """

    variance: float = 1.0
    name: ClassVar[str] = "linear"
    starting_values: ClassVar[tuple[str, ...]] = ("variance",)

    def __post_init__(self):
        _positive("variance", self.variance)
        object.__setattr__(self, "variance", float(self.variance))

    def init_params(self, X=None) -> Params:
        return {"log_variance": np.log(np.asarray(self.variance, dtype=np.float64))}

    def constrain(self, params):
        return {"variance": jnp.exp(params["log_variance"])}

    def K(self, params, X1, X2):
        return jnp.exp(params["log_variance"]) * (X1 @ X2.T)

    def diag(self, params, X):
        return jnp.exp(params["log_variance"]) * jnp.sum(X**2, axis=-1)


@dataclasses.dataclass(frozen=True)
class Polynomial(Kernel):
    r"""Inhomogeneous polynomial kernel (Nikolenko's slides).

    .. math:: k(x, x') = (a\, x^\top x' + c)^p

    Parameters
    ----------
    degree : int, default=2
        :math:`p`, a positive integer (static).
    scale : float, default=1.0
        :math:`a > 0`.
    offset : float, default=1.0
        :math:`c > 0`.
    """

    degree: int = 2
    scale: float = 1.0
    offset: float = 1.0
    name: ClassVar[str] = "polynomial"
    starting_values: ClassVar[tuple[str, ...]] = ("scale", "offset")

    def __post_init__(self):
        if int(self.degree) != self.degree or self.degree < 1:
            raise ValueError(f"degree must be a positive integer, got {self.degree!r}")
        object.__setattr__(self, "degree", int(self.degree))
        _positive("scale", self.scale)
        _positive("offset", self.offset)

    def init_params(self, X=None) -> Params:
        return {
            "log_scale": np.log(np.asarray(self.scale, dtype=np.float64)),
            "log_offset": np.log(np.asarray(self.offset, dtype=np.float64)),
        }

    def constrain(self, params):
        return {"scale": jnp.exp(params["log_scale"]), "offset": jnp.exp(params["log_offset"])}

    def K(self, params, X1, X2):
        a, c = jnp.exp(params["log_scale"]), jnp.exp(params["log_offset"])
        return (a * (X1 @ X2.T) + c) ** self.degree

    def diag(self, params, X):
        a, c = jnp.exp(params["log_scale"]), jnp.exp(params["log_offset"])
        return (a * jnp.sum(X**2, axis=-1) + c) ** self.degree


@dataclasses.dataclass(frozen=True)
class Sigmoid(Kernel):
    r"""Sigmoid ('neural network') kernel of Nikolenko's slides.

    .. math:: k(x, x') = \tanh(a\, x^\top x' + c)

    Warning: this kernel is **not positive semi-definite** in general (it is for some ``a``,
    ``c`` and inputs only), so Cholesky-based engines can fail with it; it is provided for the
    SVM baselines, which do not need a valid covariance. ``offset`` is unconstrained.
    """

    scale: float = 1.0
    offset: float = 0.0
    name: ClassVar[str] = "sigmoid"
    starting_values: ClassVar[tuple[str, ...]] = ("scale", "offset")

    def __post_init__(self):
        _positive("scale", self.scale)
        if not _is_real(self.offset) or not np.isfinite(self.offset):
            raise ValueError(f"offset must be a finite number, got {self.offset!r}")

    def init_params(self, X=None) -> Params:
        return {
            "log_scale": np.log(np.asarray(self.scale, dtype=np.float64)),
            "offset": np.asarray(self.offset, dtype=np.float64),
        }

    def constrain(self, params):
        return {"scale": jnp.exp(params["log_scale"]), "offset": params["offset"]}

    def K(self, params, X1, X2):
        return jnp.tanh(jnp.exp(params["log_scale"]) * (X1 @ X2.T) + params["offset"])

    def diag(self, params, X):
        return jnp.tanh(jnp.exp(params["log_scale"]) * jnp.sum(X**2, axis=-1) + params["offset"])


@dataclasses.dataclass(frozen=True)
class Constant(Kernel):
    r"""Constant kernel :math:`k(x, x') = c`; added to another kernel it models a bias."""

    value: float = 1.0
    name: ClassVar[str] = "constant"
    starting_values: ClassVar[tuple[str, ...]] = ("value",)

    def __post_init__(self):
        _positive("value", self.value)

    def init_params(self, X=None) -> Params:
        return {"log_value": np.log(np.asarray(self.value, dtype=np.float64))}

    def constrain(self, params):
        return {"value": jnp.exp(params["log_value"])}

    def K(self, params, X1, X2):
        return jnp.full((X1.shape[0], X2.shape[0]), jnp.exp(params["log_value"]), dtype=X1.dtype)

    def diag(self, params, X):
        return jnp.full(X.shape[0], jnp.exp(params["log_value"]), dtype=X.dtype)


@dataclasses.dataclass(frozen=True)
class _Combination(Kernel):
    k1: Kernel
    k2: Kernel

    def init_params(self, X=None) -> Params:
        return {"k1": self.k1.init_params(X), "k2": self.k2.init_params(X)}

    def constrain(self, params):
        out = {f"k1_{k}": v for k, v in self.k1.constrain(params["k1"]).items()}
        out.update({f"k2_{k}": v for k, v in self.k2.constrain(params["k2"]).items()})
        return out


@dataclasses.dataclass(frozen=True)
class Sum(_Combination):
    """``k1 + k2``; parameters ``{"k1": ..., "k2": ...}``."""

    name: ClassVar[str] = "sum"

    def K(self, params, X1, X2):
        return self.k1.K(params["k1"], X1, X2) + self.k2.K(params["k2"], X1, X2)

    def diag(self, params, X):
        return self.k1.diag(params["k1"], X) + self.k2.diag(params["k2"], X)


@dataclasses.dataclass(frozen=True)
class Product(_Combination):
    """``k1 * k2`` (elementwise); parameters ``{"k1": ..., "k2": ...}``."""

    name: ClassVar[str] = "product"

    def K(self, params, X1, X2):
        return self.k1.K(params["k1"], X1, X2) * self.k2.K(params["k2"], X1, X2)

    def diag(self, params, X):
        return self.k1.diag(params["k1"], X) * self.k2.diag(params["k2"], X)


KERNELS: dict[str, type[Kernel]] = {
    "rbf": RBF,
    "matern32": Matern32,
    "matern52": Matern52,
    "linear": Linear,
    "polynomial": Polynomial,
    "sigmoid": Sigmoid,
}


def get_kernel(kernel: str | Kernel) -> Kernel:
    """Resolve a kernel name (``"rbf"``, ``"ard"``, ``"matern32"``, ...) or pass a Kernel through."""
    if isinstance(kernel, Kernel):
        return kernel
    if isinstance(kernel, str):
        key = kernel.lower()
        if key == "ard":
            return RBF(ard=True)
        if key in KERNELS:
            return KERNELS[key]()
        valid = sorted([*KERNELS, "ard"])
        raise ValueError(f"unknown kernel {kernel!r}; valid names are {valid} or a Kernel object")
    raise ValueError(f"kernel must be a name or a ppl_bsvm.kernels.Kernel, got {type(kernel)}")


def program_kernel(kernel: Kernel) -> Kernel:
    """``kernel`` as the compiled programs see it: its starting values at the class's defaults,
    its ``init_params`` still ``kernel``'s.

    Programs take the kernel as a static argument (hashed into their key) and its
    hyperparameters as a traced pytree; ``K``, ``diag`` and ``constrain`` read only that
    pytree, so the programs do not depend on the starting values. Keyed by the kernel as
    given, a fit with ``RBF(lengthscale=1.5)`` after one with ``RBF(lengthscale=1.0)``
    compiled every program again (B-BSVM 4 programs, 1.6 s in a new process; the GP Gibbs
    sampler 3, 6.8 s): a grid of lengthscales paid one compilation per value. Keyed by this,
    it compiles once per kernel structure (the class, ``ard``, ``degree``, the terms of a sum
    or product). Only this module's classes are rewritten: a user's subclass may read its own
    fields in ``K``, and is returned as it is.
    """
    canonical = _canonical(kernel)
    if canonical is not kernel:
        # an instance attribute, outside the dataclass's fields: eq, hash and the program
        # store's key (_programs.stable_repr) see only the canonical values
        object.__setattr__(canonical, "init_params", kernel.init_params)
    return canonical


def _canonical(kernel: Kernel) -> Kernel:
    """``kernel`` with the starting values of this module's classes at their defaults (the
    same object where nothing changes)."""
    if type(kernel).__module__ != __name__ or not dataclasses.is_dataclass(kernel):
        return kernel
    if isinstance(kernel, _Combination):
        k1, k2 = _canonical(kernel.k1), _canonical(kernel.k2)
        if k1 is kernel.k1 and k2 is kernel.k2:
            return kernel
        return dataclasses.replace(kernel, k1=k1, k2=k2)
    defaults = {f.name: f.default for f in dataclasses.fields(kernel)
                if f.name in kernel.starting_values}
    if all(getattr(kernel, name) == value for name, value in defaults.items()):
        return kernel
    return dataclasses.replace(kernel, **defaults)


@functools.partial(jax.jit, static_argnums=0)
def gram(kernel: Kernel, params: Params, X, jitter: float = DEFAULT_JITTER):
    """Training covariance ``K(X, X) + jitter * mean(diag K) * I``.

    The relative jitter keeps Cholesky factorisations of nearly singular matrices (broad RBF
    kernels, duplicated inputs) stable; it is reported by every engine that uses it. Compiled
    once per kernel and shape (``jitter`` is traced).
    """
    K = kernel.K(params, X, X)
    scale = jnp.mean(kernel.diag(params, X))
    return K + (jitter * scale) * jnp.eye(X.shape[0], dtype=K.dtype)
