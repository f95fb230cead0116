r"""SVM with Platt scaling: the classical way to get probabilities from an SVM.

A 1-norm soft-margin SVM (scikit-learn's ``SVC``, libsvm) on the same kernel as the Bayesian
models, passed as a precomputed Gram matrix so that every ``ppl_bsvm.kernels`` kernel is used
exactly; then Platt's (1999) sigmoid

.. math:: P(y = +1 \mid x) = \frac{1}{1 + \exp(A\, s(x) + B)}

fitted to out-of-fold decision values :math:`s(x)` by ``CalibratedClassifierCV(SVC(),
ensemble=False)`` (``cv``-fold cross-validated decisions, then the SVM refitted on all the
data). This replaces ``SVC(probability=True)``, deprecated in scikit-learn 1.9. ``A < 0`` on any
sensible problem, so the probability increases with the SVM score.

There is no posterior: the ``Fit`` has no ``posterior`` group and ``predict_latent`` raises.
``fit.idata`` holds the training labels (``observed_data``) and, in the ``svm`` group, what
was fitted: ``dual_coef`` (``alpha_i y_i`` on ``obs``, 0 off the support vectors),
``decision`` (``s(x_i)`` on ``obs``), ``intercept``, ``platt_a`` and ``platt_b``.
``fit.predictor.decision_function(X)`` gives the SVM score (from the support vectors, dual
coefficients and intercept, so that a saved fit predicts without scikit-learn's object) and
``fit.state`` the fitted ``CalibratedClassifierCV`` (not saved by ``Fit.save``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import jax
import numpy as np

from .._checks import positive_float, positive_int
from .._memory import dense_bytes
from ..api import register
from ..data import Problem
from ..engine import Approximation, Options
from ..kernels import Kernel
from .._serial import latent_family
from ..inference.latent import Latent
from ._common import ScorePredictor, fit_idata, kernel_matrix, sklearn_seed

__all__ = ["platt", "PlattOptions", "SVMDecision", "svm_decision"]


class SVMDecision(NamedTuple):
    """A fitted SVM's decision function: kernel ``params``, ``support_vectors (S, d)``,
    ``dual_coef (S,)`` (``alpha_i y_i``) and ``intercept``."""

    params: dict
    support_vectors: np.ndarray
    dual_coef: np.ndarray
    intercept: float


@latent_family
def svm_decision(kernel, arrays: SVMDecision, X):
    """``s(x) = sum_i alpha_i y_i k(x_i, x) + b`` at the rows of ``X``."""
    with jax.enable_x64(True):
        K = kernel_matrix(kernel, arrays.params, X, arrays.support_vectors)
    return K @ arrays.dual_coef + arrays.intercept


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlattOptions(Options):
    """The options of :func:`platt` (documented there)."""

    C: float = 1.0
    cv: int = 5

    def _check(self):
        self._set("C", positive_float("C", self.C))
        self._set("cv", positive_int("cv", self.cv, minimum=2))


@register("platt", ("gp",), options=PlattOptions, memory=dense_bytes(2))
def platt(problem: Problem, options: PlattOptions, *, key, kernel: Kernel) -> Approximation:
    """SVM (libsvm, 1-norm soft margin) with Platt scaling by cross-validated calibration.

    Parameters
    ----------
    C : float, default=1.0
        Soft-margin constant of ``SVC``: ``min ||w||^2 / 2 + C sum_i xi_i``.
    cv : int, default=5
        Folds of the stratified cross-validation producing the decision values the sigmoid
        is fitted to (shuffled with the fit's seed).
    """
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.model_selection import StratifiedKFold
    from sklearn.svm import SVC

    C, cv = options.C, options.cv
    counts = np.unique(problem.y, return_counts=True)[1]
    if counts.min() < cv:
        raise ValueError(
            f"cv={cv} folds need at least {cv} points of each class; the smaller class has "
            f"{counts.min()}"
        )
    t0 = time.perf_counter()
    params = kernel.init_params(problem.X)
    K = kernel_matrix(kernel, params, problem.X)
    folds = StratifiedKFold(cv, shuffle=True, random_state=sklearn_seed(key))
    model = CalibratedClassifierCV(
        SVC(kernel="precomputed", C=C), method="sigmoid", cv=folds, ensemble=False
    )
    model.fit(K, problem.y)
    calibrated = model.calibrated_classifiers_[0]
    svc = calibrated.estimator
    sigmoid = calibrated.calibrators[0]
    a, b = float(sigmoid.a_), float(sigmoid.b_)
    support = svc.support_
    dual = svc.dual_coef_[0]
    intercept = float(svc.intercept_[0])
    X_support = problem.X[support]
    elapsed = time.perf_counter() - t0

    decision = Latent(svm_decision, kernel, SVMDecision(params, X_support, dual, intercept),
                      chunked=False)

    dual_full = np.zeros(problem.n)
    dual_full[support] = dual
    idata = fit_idata(
        problem,
        {
            "svm": {
                "dual_coef": dual_full,
                "decision": K[:, support] @ dual + intercept,
                "intercept": intercept,
                "platt_a": a,
                "platt_b": b,
            }
        },
        dims={"dual_coef": ["obs"], "decision": ["obs"]},
        attrs={"method": "platt", "model": "gp", "n_support": int(support.size)},
    )
    return Approximation(
        idata=idata,
        predictor=ScorePredictor(decision, a, b, "platt"),
        timings={"engine": elapsed},
        kernel_params=params,
        jitter=0.0,
        state=model,
    )
