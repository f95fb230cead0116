"""The one result type every engine returns."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ._checks import positive_int
from ._jax import x64
from .data import BinaryLabels, check_X

__all__ = ["Fit", "STOP_REASONS"]

STOP_REASONS = ("tol", "max_iter", "draws")
"""``tol``: converged; ``max_iter``: hit the iteration cap; ``draws``: a sampler's fixed budget."""


@dataclasses.dataclass(eq=False, repr=False)
class Fit:
    """A fitted Bayesian SVM (or baseline): posterior, predictions and how it was obtained.

    Attributes
    ----------
    idata : xarray.DataTree
        ArviZ 1.x tree. ``posterior`` holds draws with dims ``(chain, draw, ...)`` under the
        shared site names (``beta`` on ``feature``, ``f`` on ``obs``, ``u`` on ``inducing``);
        variational fits keep q's parameters in a group of their own.
    method, model : str
        The engine (``"gibbs"``, ``"vi"``, ``"ecm"``, ...) and model (``"linear"``, ``"gp"``,
        ``"sparse_gp"``) that produced the fit.
    predictor : GaussianPredictor or MixturePredictor
        Maps new inputs to the latent predictive and class probabilities.
    labels : BinaryLabels
        The user's labels; ``predict`` returns them.
    n_features_in : int
    timings : dict str -> float
        Seconds: ``"total"`` (the whole ``fit`` call, compilation included) and whatever
        parts the engine times itself (``"engine"``, ``"warmup"``, ``"sampling"``, ...).
    trace : dict str -> ndarray
        The objective or sampler trace (``"elbo"``, ``"objective"``, ``"diverging"``, ...),
        one entry per recorded iteration.
    stop_reason : {"tol", "max_iter", "draws"}
        Why the engine stopped.
    n_iter : int
        Iterations run (draws per chain, warmup included, for samplers).
    kernel : Kernel or None
    kernel_params : dict or None
        Final kernel hyperparameters, unconstrained pytree (``kernel.constrain`` maps it).
    jitter : float or None
        Relative jitter added to kernel matrices (see ``ppl_bsvm.kernels.gram``).
    options : dict
        The engine options that were used, defaults included.
    state : object
        The engine's final state (a ``NamedTuple``), for inspection or warm starts.
    """

    idata: Any
    method: str
    model: str
    predictor: Any
    labels: BinaryLabels | None = None
    n_features_in: int | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    trace: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    stop_reason: str | None = None
    n_iter: int | None = None
    kernel: Any = None
    kernel_params: Any = None
    jitter: float | None = None
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    state: Any = None

    @property
    def converged(self) -> bool:
        """True when an iterative engine met its tolerance (samplers: True)."""
        return self.stop_reason in ("tol", "draws")

    @property
    def posterior(self):
        """Shortcut for ``idata.posterior``."""
        return self.idata.posterior

    @property
    def hyperparameters(self) -> dict[str, Any]:
        """Kernel hyperparameters on their natural scale (empty for kernel-free models)."""
        if self.kernel is None or self.kernel_params is None:
            return {}
        constrained = self.kernel.constrain(self.kernel_params)
        return {k: np.asarray(v, dtype=np.float64) for k, v in constrained.items()}

    def _check_X(self, X) -> np.ndarray:
        return check_X(X, n_features=self.n_features_in)

    @x64
    def predict_latent(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Latent predictive mean and variance of ``f(x*)`` at the rows of ``X``.

        Returns
        -------
        mean, var : ndarray of shape (n*,)
        """
        return self.predictor.latent(self._check_X(X))

    @x64
    def predict_proba(self, X, link: str | None = None) -> np.ndarray:
        """P(y = positive class | x*) at the rows of ``X``.

        Parameters
        ----------
        X : array-like of shape (n*, d)
        link : {"paper", "probit", "sign", "normalized"}, optional
            Overrides the fit's default link (see ``ppl_bsvm.predictive``).

        Returns
        -------
        ndarray of shape (n*,)
        """
        return self.predictor.proba(self._check_X(X), link)

    @x64
    def sample_latent(self, X, num_draws: int = 1000, seed: int = 0) -> np.ndarray:
        """Draws ``(num_draws, n*)`` of the latent ``f(x*)`` from the fit's predictive.

        Each column has the right marginal; a Gaussian approximation's draws are independent
        across test points (its predictor exposes marginals only), an MCMC fit's draws share
        the posterior draw of ``f`` they condition on.
        """
        positive_int("num_draws", num_draws)
        if not hasattr(self.predictor, "sample_latent"):
            raise ValueError(f"method {self.method!r} has no latent predictive to sample")
        return self.predictor.sample_latent(self._check_X(X), num_draws, seed)

    def predict(self, X) -> np.ndarray:
        """Predicted labels, in the user's labels: positive iff ``predict_proba >= 0.5``."""
        p = self.predict_proba(X)
        return self.labels.decode(np.where(p >= 0.5, 1.0, -1.0))

    def summary(self) -> str:
        """A few lines: method, model, stop reason, time, hyperparameters, final objective."""
        lines = [f"Fit(method={self.method!r}, model={self.model!r})"]
        if self.stop_reason is not None:
            lines.append(f"  stopped: {self.stop_reason} after {self.n_iter} iterations")
        if self.timings:
            lines.append(
                "  time: " + ", ".join(f"{k} {v:.3g} s" for k, v in self.timings.items())
            )
        for key, value in self.trace.items():
            arr = np.asarray(value)
            if arr.size and np.issubdtype(arr.dtype, np.number):
                finite = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr
                if finite.size:
                    lines.append(f"  {key}: last {finite.reshape(-1)[-1]:.6g}")
        for key, value in self.hyperparameters.items():
            lines.append(f"  {key}: {np.array2string(np.atleast_1d(value), precision=4)}")
        if self.jitter is not None:
            lines.append(f"  jitter (relative): {self.jitter:g}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()
