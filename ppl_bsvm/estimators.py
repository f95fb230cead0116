"""scikit-learn estimators over :func:`ppl_bsvm.fit`.

:class:`BayesianSVC` wraps any registered ``(model, method)`` pair in the scikit-learn
classifier API, so that a Bayesian SVM drops into ``Pipeline``, ``GridSearchCV`` and
``cross_val_score``. The estimator does no inference of its own: ``fit`` validates the input the
scikit-learn way (``validate_data``, the exact binary-only message the checks look for), then
calls :func:`ppl_bsvm.fit` with ``positive=classes_[1]`` and keeps the returned
:class:`ppl_bsvm.Fit` in ``posterior_``.

Importing this module imports scikit-learn; ``import ppl_bsvm`` does not (``ppl_bsvm.BayesianSVC``
is resolved on first use).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy.special import ndtri
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from ._checks import boolean
from .api import _engine_options, get_engine
from .api import fit as _fit

__all__ = ["BayesianSVC"]

# fit() arguments that have a parameter of their own here (or none at all); passing them through
# ``options`` would be ambiguous.
_RESERVED = {
    "X": "X",
    "y": "y",
    "model": "model",
    "method": "method",
    "kernel": "kernel",
    "seed": "seed",
    "positive": "positive (the positive class is always classes_[1])",
    "intercept": "fit_intercept",
}


class BayesianSVC(ClassifierMixin, BaseEstimator):
    """Bayesian support vector machine classifier (binary), scikit-learn API.

    A thin estimator over :func:`ppl_bsvm.fit`: every model and inference method registered there
    (``ppl_bsvm.list_methods()``) is available, with its engine options passed in ``options``.

    Parameters
    ----------
    model : {"gp", "sparse_gp", "linear"}, default="gp"
        The GP Bayesian SVM (latent ``f``), its sparse version, or the linear Bayesian SVM of
        Polson & Scott (weights ``beta``).
    method : str, default="svi"
        The inference engine (``"svi"`` S-BSVM, ``"vi"`` B-BSVM, ``"ecm"`` MAP, ``"gibbs"`` and
        ``"nuts"`` MCMC, or a baseline); see :func:`ppl_bsvm.list_methods`.
    kernel : str or Kernel, default="rbf"
        Covariance of the GP models (a string uses the median-heuristic lengthscale). Not used by
        the linear model: there ``"rbf"`` (the default) and ``None`` are accepted and ignored,
        any other value raises ``ValueError``.
    seed : int, default=0
        Seed of the engine's random numbers; the same seed gives the same fit.
    fit_intercept : bool, default=True
        Whether the linear model gets an intercept (a trailing column of ones, the engines'
        ``intercept`` option). Engines without an ``intercept`` option (the GP models, which have
        no bias term) ignore it.
    options : dict, optional
        Further engine options (``max_iter``, ``tol``, ``num_inducing``, ``num_samples``,
        ``link``, ...); an option the engine does not take raises ``ValueError`` at ``fit``.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        The two labels, sorted; ``predict_proba[:, 1]`` is the probability of ``classes_[1]``.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` had string column names (a DataFrame).
    posterior_ : ppl_bsvm.Fit
        The fit: posterior draws (``posterior_.idata``), trace, timings, hyperparameters.

    Notes
    -----
    ``decision_function`` is the class probability on the probit scale,
    ``Phi^{-1}(predict_proba[:, 1])``: positive exactly where ``predict`` says ``classes_[1]``
    and ranked exactly as the probabilities are (what scikit-learn's scorers and
    ``check_decision_proba_consistency`` expect). With the default ``link="probit"`` and a
    Gaussian approximation it is ``m / sqrt(1 + v)``, the latent posterior mean moderated by
    the predictive variance; the latent mean itself is ``posterior_.predict_latent(X)[0]``.
    Methods without a latent posterior (``"platt"``) return the SVM's decision value, which
    Platt's sigmoid maps monotonically to the probability.

    scikit-learn's ``check_estimator`` (run in the test suite for ``method="ecm"`` on the GP
    model and ``method="vi"`` on the linear model) passes with the tag
    ``classifier_tags.multi_class = False``: a binary-only classifier, so the checks fit only
    two-class problems and expect the error ``"Only binary classification is supported."`` for
    more classes. scikit-learn itself skips ``check_array_api_input`` unless
    ``SCIPY_ARRAY_API=1`` is set.

    Pickling round-trips exactly (``posterior_`` is a :class:`ppl_bsvm.Fit`, which pickles with
    its predictor); ``posterior_.save(path)`` writes the fit with its posterior as netCDF.

    Examples
    --------
    >>> import ppl_bsvm
    >>> from sklearn.model_selection import cross_val_score
    >>> X, y = ppl_bsvm.datasets.load("heart", standardize=True)
    >>> clf = ppl_bsvm.BayesianSVC(method="ecm")
    >>> scores = cross_val_score(clf, X, y, cv=3)
    """

    def __init__(
        self,
        model="gp",
        method="svi",
        kernel="rbf",
        seed=0,
        fit_intercept=True,
        options=None,
    ):
        self.model = model
        self.method = method
        self.kernel = kernel
        self.seed = seed
        self.fit_intercept = fit_intercept
        self.options = options

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _fit_arguments(self) -> dict:
        """``fit``'s keyword arguments from the parameters; ``ValueError`` naming a bad one."""
        engine = get_engine(self.model, self.method)  # names model / method when unknown
        fit_intercept = boolean("fit_intercept", self.fit_intercept)
        if self.options is None:
            options = {}
        elif isinstance(self.options, Mapping):
            options = dict(self.options)
        else:
            raise ValueError(
                f"options must be a dict of engine options or None, got {type(self.options).__name__}"
            )
        for key in options:
            if key in _RESERVED:
                raise ValueError(
                    f"options[{key!r}] is not allowed: use the estimator parameter "
                    f"{_RESERVED[key]} instead"
                )
        if "intercept" in _engine_options(engine.fn):
            options["intercept"] = fit_intercept
        kwargs = {"model": self.model, "method": self.method, "seed": self.seed, **options}
        if engine.uses_kernel:
            kwargs["kernel"] = self.kernel
        elif not (self.kernel is None or (isinstance(self.kernel, str) and self.kernel == "rbf")):
            raise ValueError(
                f"kernel={self.kernel!r} is not used by model={self.model!r} with "
                f"method={self.method!r}; leave it at its default or use model='gp'"
            )
        return kwargs

    def fit(self, X, y):
        """Fit the Bayesian SVM to binary data; returns ``self``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Finite inputs (converted to float64).
        y : array-like of shape (n_samples,)
            Exactly two distinct labels of any type (ints, bools, strings, ...).
        """
        kwargs = self._fit_arguments()
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        classes = np.unique(y)
        if classes.size < 2:
            raise ValueError(
                f"y has only one class ({classes[0]!r}); binary classification needs two"
            )
        y_type = type_of_target(y, input_name="y", raise_unknown=True)
        if y_type != "binary":
            shown = classes[:6].tolist()
            raise ValueError(
                "Only binary classification is supported. The type of the target y is "
                f"{y_type!r} with {classes.size} class(es) {shown}"
                f"{' ...' if classes.size > 6 else ''}; {type(self).__name__} needs exactly two classes"
            )
        self.classes_ = classes
        self.posterior_ = _fit(X, y, positive=self.classes_[1], **kwargs)
        return self

    def decision_function(self, X):
        """Score of ``classes_[1]``: ``Phi^{-1}(predict_proba[:, 1])`` (see Notes); for methods
        without a latent posterior (``"platt"``) the SVM's decision value.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        predictor = self.posterior_.predictor
        if hasattr(predictor, "decision_function"):  # a score without a latent Gaussian (Platt)
            return np.asarray(predictor.decision_function(X), dtype=np.float64)
        p = np.asarray(self.posterior_.predict_proba(X), dtype=np.float64)
        # Keep the score finite where p rounds to 0 or 1 (ties in p stay ties).
        tiny, eps = np.finfo(np.float64).tiny, np.finfo(np.float64).epsneg
        return ndtri(np.clip(p, tiny, 1.0 - eps))

    def predict_proba(self, X):
        """``[P(y = classes_[0] | x), P(y = classes_[1] | x)]`` under the fit's link.

        Returns
        -------
        ndarray of shape (n_samples, 2)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        p = np.asarray(self.posterior_.predict_proba(X), dtype=np.float64)
        return np.stack([1.0 - p, p], axis=1)

    def predict(self, X):
        """``classes_[1]`` where :meth:`decision_function` is >= 0 (``predict_proba >= 1/2``), as
        ``posterior_.predict`` does, else ``classes_[0]``."""
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) >= 0).astype(int)]
