"""Option pieces the variational engines share (see :mod:`ppl_bsvm.engine`).

Values that stand for a schedule (``learning_rate``, ``hyper_lr``) are validated here and kept
as the user gave them, so that ``Fit.options`` saves what was asked; the engines resolve them
with :func:`~ppl_bsvm.inference.vi.schedules.as_rate` / ``as_step_size``.
"""

from __future__ import annotations

import dataclasses

from ..._checks import boolean, positive_float, positive_int
from ...engine import Options, optional
from ..inducing import INDUCING_METHODS
from . import schedules

__all__ = ["Learn", "HyperRate", "HyperEvery", "Stochastic", "Polish", "Inducing", "LinearResponse"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Learn(Options):
    """``learn_hyperparameters``: maximise the ELBO over the hyperparameters too."""

    learn_hyperparameters: bool = False
    _validators = {"learn_hyperparameters": boolean}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearResponse(Options):
    """``linear_response``: replace q's mean-field covariance by the linear-response covariance
    of the converged fixed point (Giordano et al. 2018; :mod:`~ppl_bsvm.inference.vi.lrvb`) in
    the draws and the predictive."""

    linear_response: bool = False
    _validators = {"linear_response": boolean}


@dataclasses.dataclass(frozen=True, kw_only=True)
class HyperRate(Options):
    """``hyper_lr``: Adam's step size for the hyperparameters, a number or a schedule."""

    hyper_lr: object = 0.05

    def _check(self):  # validated, kept as given (module docstring)
        schedules.as_step_size(self.hyper_lr, "hyper_lr")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HyperEvery(Options):
    """``hyper_every``: natural-gradient steps per hyperparameter step."""

    hyper_every: int = 10
    _validators = {"hyper_every": positive_int}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stochastic(Options):
    """Minibatch natural-gradient steps.

    Parameters
    ----------
    batch_size : int or None
        Minibatch size (None: the engine's default for the data).
    learning_rate : float, str or schedule
        The natural-gradient step size (``schedules.as_rate``).
    check_every : float or None
        The stopping rule's period in epochs (None: the engine's default for the data).
    elbo_every : int or None
        Compute the exact ELBO every this many steps (a diagnostic, not used for stopping).
    """

    batch_size: int | None = None
    learning_rate: object = "robbins_monro"
    check_every: float | None = None
    elbo_every: int | None = None

    _validators = {"batch_size": optional(positive_int), "check_every": optional(positive_float),
                   "elbo_every": optional(positive_int)}

    def _check(self):  # validated, kept as given (module docstring)
        schedules.as_rate(self.learning_rate)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Polish(Options):
    """The batch phase after the minibatch steps (:mod:`~ppl_bsvm.inference.vi.fixed_point`).

    Parameters
    ----------
    polish : bool or None
        Move ``q`` to the batch fixed point by Anderson-accelerated sweeps over all the data,
        until its certified distance is at most ``polish_tol`` (None: the engine's default for
        the data).
    polish_tol : float
        Posterior sds: the root mean square over the training points of the estimated distance
        of their latent means to the fixed point's, in units of their sds.
    """

    polish: bool | None = None
    polish_tol: float = 0.05

    _validators = {"polish": optional(boolean), "polish_tol": positive_float}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inducing(Options):
    """Inducing points.

    Parameters
    ----------
    num_inducing : int or None
        How many (None: the engine's default for the data).
    inducing : {"kmeans", "random"} or array of shape (m, d)
        How they are chosen, or the locations themselves (checked against the data by the
        engine).
    learn_inducing : bool
        Learn the locations too (with the hyperparameters).
    """

    num_inducing: int | None = None
    inducing: object = "kmeans"
    learn_inducing: bool = False

    _validators = {"learn_inducing": boolean, "num_inducing": optional(positive_int)}

    def _check(self):
        if isinstance(self.inducing, str) and self.inducing not in INDUCING_METHODS:
            raise ValueError(
                f"inducing must be one of {list(INDUCING_METHODS)} or an array of shape (m, d), "
                f"got {self.inducing!r}"
            )
