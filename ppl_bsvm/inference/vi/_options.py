"""Option pieces the variational engines share (see :mod:`ppl_bsvm.engine`).

Values that stand for a schedule (``learning_rate``, ``hyper_lr``) are validated here and kept
as the user gave them, so that ``Fit.options`` saves what was asked; the engines resolve them
with :func:`~ppl_bsvm.inference.vi.schedules.as_rate` / ``as_step_size``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..._checks import boolean, positive_float, positive_int
from ...engine import Options
from ..inducing import INDUCING_METHODS
from . import schedules

__all__ = ["Learn", "HyperRate", "HyperEvery", "Stochastic", "Inducing"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Learn(Options):
    """``learn_hyperparameters``: maximise the ELBO over the hyperparameters too."""

    learn_hyperparameters: bool = False

    def _check(self):
        if not isinstance(self.learn_hyperparameters, (bool, np.bool_)):
            raise ValueError(
                f"learn_hyperparameters must be True or False, got {self.learn_hyperparameters!r}"
            )
        self._set("learn_hyperparameters", bool(self.learn_hyperparameters))


@dataclasses.dataclass(frozen=True, kw_only=True)
class HyperRate(Options):
    """``hyper_lr``: Adam's step size for the hyperparameters, a number or a schedule."""

    hyper_lr: object = 0.05

    def _check(self):
        schedules.as_step_size(self.hyper_lr, "hyper_lr")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HyperEvery(Options):
    """``hyper_every``: natural-gradient steps per hyperparameter step."""

    hyper_every: int = 10

    def _check(self):
        self._set("hyper_every", positive_int("hyper_every", self.hyper_every))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stochastic(Options):
    """Minibatch natural-gradient steps: ``batch_size`` (None: the engine's default for the
    data), ``learning_rate`` (``schedules.as_rate``), the stopping rule's period
    ``check_every`` in epochs, and the optional exact-ELBO diagnostic ``elbo_every``."""

    batch_size: int | None = None
    learning_rate: object = "robbins_monro"
    check_every: float = 1.0
    elbo_every: int | None = None

    def _check(self):
        if self.batch_size is not None:
            self._set("batch_size", positive_int("batch_size", self.batch_size))
        schedules.as_rate(self.learning_rate)
        self._set("check_every", positive_float("check_every", self.check_every))
        if self.elbo_every is not None:
            self._set("elbo_every", positive_int("elbo_every", self.elbo_every))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inducing(Options):
    """Inducing points: ``num_inducing`` chosen by ``inducing`` (``"kmeans"``, ``"random"``) or
    given as an ``(m, d)`` array (checked against the data by the engine), optionally learned
    (``learn_inducing``, with the hyperparameters)."""

    num_inducing: int | None = None
    inducing: object = "kmeans"
    learn_inducing: bool = False

    def _check(self):
        self._set("learn_inducing", boolean("learn_inducing", self.learn_inducing))
        if isinstance(self.inducing, str) and self.inducing not in INDUCING_METHODS:
            raise ValueError(
                f"inducing must be one of {list(INDUCING_METHODS)} or an array of shape (m, d), "
                f"got {self.inducing!r}"
            )
        if self.num_inducing is not None:
            self._set("num_inducing", positive_int("num_inducing", self.num_inducing))
