"""scikit-learn estimators: :class:`BayesianSVC` over :func:`ppl_bsvm.fit`, and the baselines'.

:class:`BayesianSVC` wraps any registered ``(model, method)`` pair in the scikit-learn
classifier API, so that a Bayesian SVM drops into ``Pipeline``, ``GridSearchCV`` and
``cross_val_score``. The estimator does no inference of its own: ``fit`` validates the input the
scikit-learn way (``validate_data``, the exact binary-only message the checks look for), then
calls :func:`ppl_bsvm.fit` with ``positive=classes_[1]`` and keeps the returned
:class:`ppl_bsvm.Fit` in ``posterior_``. :class:`BCSVMClassifier` does the same for the BC-SVM
engine with its options as parameters; :class:`RVMRegressor` and :class:`RVMClassifier` run the
relevance vector machine's evidence maximisers (:mod:`ppl_bsvm.baselines.rvm_algorithms`)
directly.

All four take their parameters by keyword only, store them unchanged in ``__init__`` and check
them at ``fit`` against their ``_parameter_constraints`` (scikit-learn's
``InvalidParameterError``, a ``ValueError`` naming the parameter). What depends on an engine is
checked by the library with its own message: the ``(model, method)`` pair against the engine
registry (before the declared constraints), ``options`` against the engine's signature, kernel
names by :func:`ppl_bsvm.kernels.get_kernel`.

Importing this module imports scikit-learn; ``import ppl_bsvm`` does not (``ppl_bsvm.BayesianSVC``
is resolved on first use).
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral, Real

import jax
import numpy as np
from scipy.special import ndtri
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from .api import MODELS, get_engine
from .api import fit as _fit
from .baselines._common import BASELINE_LINKS, kernel_matrix
from .baselines._likelihoods import logistic_gaussian
from .baselines.bcsvm import COMBINES
from .baselines.rvm import RVMOptions, _Basis, _split_active, maximise_evidence
from .baselines.rvm_algorithms import ALGORITHMS, RVMResult, rvm_classification, rvm_regression
from .data import MAX_ABS, check_X, refuse_mixed_label_types
from .kernels import DEFAULT_JITTER, Kernel, get_kernel
from .predictive import DEFAULT_LINK

__all__ = ["BayesianSVC", "BCSVMClassifier", "RVMRegressor", "RVMClassifier"]

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

# Constraints the estimators share. Kernel names are resolved case-insensitively by
# kernels.get_kernel, whose ValueError lists the valid ones, so a name is only checked to be a str.
_POSITIVE_INT = Interval(Integral, 1, None, closed="left")
_POSITIVE = Interval(Real, 0, None, closed="neither")  # finite: inf is outside the interval
_NONNEGATIVE = Interval(Real, 0, None, closed="left")
_SEED = [Interval(Integral, 0, None, closed="left"), jax.Array]  # an int, or a JAX key


def _two_columns(p):
    """``[P(classes_[0]), P(classes_[1])]`` from ``P(classes_[1])``."""
    return np.stack([1.0 - p, p], axis=1)


class _BinaryClassifier(ClassifierMixin, BaseEstimator):
    """What the binary classifiers share: the binary-only tag (scikit-learn's checks then fit
    only two-class problems and expect ``"Only binary classification is supported."`` for more
    classes), the target check, and ``predict`` as the sign of ``decision_function``."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _validate_training(self, X, y):
        """``X`` as float64 and ``y`` (scikit-learn's ``validate_data``), after refusing a list
        of labels of mixed types, which it would turn into strings (``[0, "a"]``)."""
        refuse_mixed_label_types(y)
        return validate_data(self, X, y, dtype=np.float64)

    def _binary_targets(self, y, *, need_two: bool):
        """The sorted classes and each label's index in them; ``ValueError`` naming ``y`` for
        targets that are not binary (or, with ``need_two``, of a single class)."""
        check_classification_targets(y)
        classes, index = np.unique(y, return_inverse=True)
        if need_two and classes.size < 2:
            raise ValueError(
                f"y has only one class ({classes[0]!r}); binary classification needs two"
            )
        y_type = type_of_target(y, input_name="y", raise_unknown=True)
        if y_type != "binary":
            shown = classes[:6].tolist()
            raise ValueError(
                "Only binary classification is supported. The type of the target y is "
                f"{y_type!r} with {classes.size} class(es) {shown}"
                f"{' ...' if classes.size > 6 else ''}; {type(self).__name__} needs exactly two "
                "classes: wrap it in sklearn.multiclass.OneVsRestClassifier for more (README: "
                "More than two classes)"
            )
        return classes, index

    def predict(self, X):
        """``classes_[1]`` where :meth:`decision_function` is >= 0 (``predict_proba >= 1/2``),
        else ``classes_[0]``."""
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) >= 0).astype(int)]


class _FitClassifier(_BinaryClassifier):
    """A binary classifier over :func:`ppl_bsvm.fit`; ``_fit_arguments`` names the engine and its
    options."""

    def _fit_arguments(self) -> dict:
        raise NotImplementedError

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit to binary data; returns ``self``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Finite inputs (converted to float64).
        y : array-like of shape (n_samples,)
            Exactly two distinct labels of any type (ints, bools, strings, ...).
        """
        kwargs = self._fit_arguments()
        X, y = self._validate_training(X, y)
        self.classes_, _ = self._binary_targets(y, need_two=True)
        self.posterior_ = _fit(self._named(X), y, positive=self.classes_[1], **kwargs)
        return self

    def _named(self, X):
        """``X`` (checked by ``validate_data``) under the fitted column names, when there are
        some, so that ``posterior_`` names its coordinates and checks them as the fit does."""
        names = getattr(self, "feature_names_in_", None)
        if names is None:
            return X
        import pandas as pd

        return pd.DataFrame(X, columns=list(names), copy=False)

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
        p = np.asarray(self.posterior_.predict_proba(self._named(X)), dtype=np.float64)
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
        return _two_columns(np.asarray(self.posterior_.predict_proba(self._named(X)),
                                       dtype=np.float64))


class BayesianSVC(_FitClassifier):
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
    kernel : str, Kernel or None, default="rbf"
        Covariance of the GP models (a string uses the median-heuristic lengthscale; ``None`` is
        ``"rbf"``). Not used by the linear model: there ``"rbf"`` (the default) and ``None`` are
        accepted and ignored, any other value raises ``ValueError``.
    seed : int >= 0 or JAX key, default=0
        Seed of the engine's random numbers; the same seed gives the same fit.
    fit_intercept : bool, default=True
        Whether the linear model gets an intercept (a trailing column of ones, the engines'
        ``intercept`` option). Engines without an ``intercept`` option (the GP models, which have
        no bias term) ignore it.
    options : dict or None, default=None
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
    more classes; ``sklearn.multiclass.OneVsRestClassifier(BayesianSVC())`` (or
    ``OneVsOneClassifier``) fits one per class (or pair) for more than two (tested on iris).
    scikit-learn itself skips ``check_array_api_input`` unless
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

    _parameter_constraints: dict = {
        "model": [StrOptions(set(MODELS))],
        "method": [str],  # the pair (model, method) is looked up in the engine registry
        "kernel": [str, Kernel, None],
        "seed": _SEED,
        "fit_intercept": ["boolean"],
        "options": [Mapping, None],  # the keys are checked against the engine's options
    }

    def __init__(
        self,
        *,
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

    def _validate_params(self):
        # The registry first: its ValueError names the model or method that is wrong and lists
        # the methods there are; then the declared constraints.
        if isinstance(self.model, str) and self.model in MODELS and isinstance(self.method, str):
            get_engine(self.model, self.method)
        super()._validate_params()

    def _fit_arguments(self) -> dict:
        """``fit``'s keyword arguments from the (validated) parameters; ``ValueError`` naming an
        engine option that does not fit."""
        engine = get_engine(self.model, self.method)
        options = dict(self.options or {})
        for key in options:
            if key in _RESERVED:
                raise ValueError(
                    f"options[{key!r}] is not allowed: use the estimator parameter "
                    f"{_RESERVED[key]} instead"
                )
        if "intercept" in engine.options.names():
            options["intercept"] = bool(self.fit_intercept)
        kwargs = {"model": self.model, "method": self.method, "seed": self.seed, **options}
        if engine.uses_kernel:
            kwargs["kernel"] = self.kernel
        elif not (self.kernel is None or (isinstance(self.kernel, str) and self.kernel == "rbf")):
            raise ValueError(
                f"kernel={self.kernel!r} is not used by model={self.model!r} with "
                f"method={self.method!r}; leave it at its default or use model='gp'"
            )
        return kwargs


class BCSVMClassifier(_FitClassifier):
    """Bayesian committee SVM (Schwaighofer & Tresp 2001), binary, scikit-learn API.

    The estimator form of ``ppl_bsvm.fit(X, y, method="bcsvm", ...)`` (:func:`bcsvm`): 2-norm
    soft-margin SVM modules of ``module_size`` points, their Laplace Gaussians combined by the
    BCM (paper eqs. 4-5) over query sets of ``query_size`` test rows. It shares
    :class:`ppl_bsvm.BayesianSVC`'s ``fit`` over :func:`ppl_bsvm.fit` (validation, labels,
    ``posterior_``, pickling), with the engine's options as parameters, so that
    ``GridSearchCV`` can tune them.

    Parameters
    ----------
    kernel : str, Kernel or None, default="rbf"
        Covariance function (a string uses the median-heuristic lengthscale; ``None`` is
        ``"rbf"``).
    C : float, default=1.0
        2-norm soft-margin constant (paper eq. 6); the Laplace noise is ``I / C``.
    module_size : int >= 2, default=200
        Target points per module (``ceil(n / module_size)`` modules; ``>= n`` is the 2-norm SVM).
    query_size : int, default=200
        Test rows combined jointly by the BCM.
    combine : {"bcm", "average"}, default="bcm"
        BCM weights or the plain average of the module outputs (paper Fig. 1).
    seed : int >= 0 or JAX key, default=0
        Seed of the random partition into modules.
    max_iter : int, default=100
        Newton iterations of the module SVMs.
    tol : float, default=1e-12
        Relative objective change (with unchanged active sets) that stops the Newton iteration.
    jitter : float, default=1e-6
        Relative jitter of the module kernels and nugget of the query-set prior.
    link : str, default="probit"
        Link from the combined latent Gaussian to ``predict_proba`` (``"probit"``,
        ``"logit"``, ...; see :data:`ppl_bsvm.baselines._common.BASELINE_LINKS`).

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        The two labels, sorted; ``predict_proba[:, 1]`` is the probability of ``classes_[1]``.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` had string column names (a DataFrame).
    posterior_ : ppl_bsvm.Fit
        The fit: module assignment, support vectors, dual weights and biases in
        ``posterior_.idata["modules"]``, Newton trace, timings.
    n_iter_ : int
        Newton iterations taken (all modules together).

    Notes
    -----
    ``decision_function`` is ``Phi^{-1}(predict_proba[:, 1])`` as for
    :class:`ppl_bsvm.BayesianSVC` (with the probit link, the BCM's combined latent mean of
    ``f(x) + b`` moderated by its variance), ``predict`` its sign and ``predict_proba`` the link
    averaged over the combined latent Gaussian; the combined mean and variance are
    ``posterior_.predict_latent(X)``.

    The BCM combines the rows of ``X`` in consecutive blocks of ``query_size`` (paper eqs.
    4-5): the prediction at a row depends on the other rows of its block; use
    ``query_size >= len(X)`` for predictions that do not depend on the batching.

    scikit-learn's ``check_estimator`` passes (run in the test suite with ``module_size=20``,
    ``query_size=10``) with the binary-only tag ``classifier_tags.multi_class = False``, as for
    :class:`ppl_bsvm.BayesianSVC`.

    Pickling round-trips predictions exactly (as :class:`ppl_bsvm.BayesianSVC`).

    Examples
    --------
    >>> import ppl_bsvm
    >>> X, y = ppl_bsvm.datasets.load("pima", standardize=True)
    >>> clf = ppl_bsvm.BCSVMClassifier(module_size=100, query_size=100).fit(X, y)
    >>> proba = clf.predict_proba(X[:5])
    """

    _parameter_constraints: dict = {
        "kernel": [str, Kernel, None],
        "C": [_POSITIVE],
        "module_size": [Interval(Integral, 2, None, closed="left")],
        "query_size": [_POSITIVE_INT],
        "combine": [StrOptions(set(COMBINES))],
        "seed": _SEED,
        "max_iter": [_POSITIVE_INT],
        "tol": [_NONNEGATIVE],
        "jitter": [_NONNEGATIVE],
        "link": [StrOptions(set(BASELINE_LINKS))],
    }

    def __init__(
        self,
        *,
        kernel="rbf",
        C=1.0,
        module_size=200,
        query_size=200,
        combine="bcm",
        seed=0,
        max_iter=100,
        tol=1e-12,
        jitter=DEFAULT_JITTER,
        link=DEFAULT_LINK,
    ):
        self.kernel = kernel
        self.C = C
        self.module_size = module_size
        self.query_size = query_size
        self.combine = combine
        self.seed = seed
        self.max_iter = max_iter
        self.tol = tol
        self.jitter = jitter
        self.link = link

    def fit(self, X, y):
        """Train the module SVMs on binary data; returns ``self``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Exactly two distinct labels of any type.
        """
        super().fit(X, y)  # validates the parameters (_fit_context)
        self.n_iter_ = self.posterior_.n_iter
        return self

    def _fit_arguments(self) -> dict:
        # values are checked by the engine's options (a ValueError naming the option)
        return {"model": "gp", "method": "bcsvm", "kernel": self.kernel, "seed": self.seed,
                **{name: getattr(self, name) for name in _ESTIMATOR_OPTIONS}}


_ESTIMATOR_OPTIONS = ("C", "module_size", "query_size", "combine", "max_iter", "tol", "jitter",
                      "link")


_RVM_DOC_PARAMS = """
    kernel : str or ppl_bsvm.kernels.Kernel, default="rbf"
        Basis functions ``k(., x_j)``; ``"rbf"`` starts from the median-heuristic
        lengthscale.
    algorithm : {"fast", "reestimate"}, default="fast"
        Tipping & Faul's (2003) sequential evidence maximisation, or the re-estimation
        ``alpha = gamma / m^2`` with pruning (Tipping 2001).
    bias : bool, default=True
        Include a constant basis function (pruned like the others if irrelevant).
    max_iter : int, default=5000
    tol : float, default=1e-6
        Convergence threshold on changes of ``log alpha`` (and ``log beta``).
    alpha_max : float, default=1e9
        Pruning threshold of ``algorithm="reestimate"``."""


class _RVMBase(BaseEstimator):
    """What the RVM estimators share: the parameters of the evidence maximisation, the kernel
    basis and the fitted attributes."""

    _parameter_constraints: dict = {
        "kernel": [str, Kernel],
        "algorithm": [StrOptions(set(ALGORITHMS))],
        "bias": ["boolean"],
        "max_iter": [_POSITIVE_INT],
        "tol": [_NONNEGATIVE],
        "alpha_max": [_POSITIVE],
    }

    def __init__(self, *, kernel="rbf", algorithm="fast", bias=True, max_iter=5000, tol=1e-6,
                 alpha_max=1e9):
        self.kernel = kernel
        self.algorithm = algorithm
        self.bias = bias
        self.max_iter = max_iter
        self.tol = tol
        self.alpha_max = alpha_max

    def _validate_options(self):
        """The engine's option check (which also refuses a bool for a number) and the kernel."""
        RVMOptions(algorithm=self.algorithm, max_iter=self.max_iter, tol=self.tol,
                   alpha_max=self.alpha_max, bias=self.bias)
        return get_kernel(self.kernel)

    def _maximise_evidence(self, solver, kernel, X, t, *, learn=False) -> RVMResult:
        """Run ``solver`` (:func:`rvm_regression` or :func:`rvm_classification`) on the basis at
        ``X`` (its width learned too with ``learn``: :func:`~ppl_bsvm.baselines.rvm.maximise_evidence`)
        and store the fitted attributes."""
        params, _, result = maximise_evidence(
            kernel, X, t, solver, bias=self.bias, learn=learn, algorithm=self.algorithm,
            max_iter=self.max_iter, tol=self.tol, alpha_max=self.alpha_max)
        self._store(X, result, kernel, params)
        return result

    def _store(self, X, result: RVMResult, kernel, params):
        N = X.shape[0]
        rel, has_bias = _split_active(result, N)
        on_rel = result.active < N
        self.kernel_ = kernel
        self.kernel_params_ = params
        self.relevance_ = rel
        self.relevance_vectors_ = X[rel]
        self.coef_ = result.mean[on_rel]
        self.alpha_ = result.alpha[on_rel]
        self.intercept_ = float(result.mean[~on_rel][0]) if has_bias else 0.0
        self.sigma_ = result.cov
        self.log_marginal_likelihood_ = result.log_evidence
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.result_ = result
        self._basis = _Basis(kernel, params, X[rel], has_bias)
        self._mean = result.mean

    def _latent(self, X):
        F = self._basis.features(X)
        return F, F @ self._mean, np.maximum(np.sum((F @ self.sigma_) * F, axis=1), 0.0)


def _regression_targets(y) -> np.ndarray:
    """Numeric targets within the inputs' scale limit, or a ``ValueError`` naming ``y``."""
    arr = np.asarray(y)
    if arr.dtype.kind == "c":
        raise ValueError("Complex data not supported: y must hold real numbers")
    try:
        if arr.dtype.kind not in "biufO":
            raise TypeError
        arr = arr.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"y must hold numbers (regression targets), got dtype {arr.dtype}"
        ) from None
    finite = arr[np.isfinite(arr)]
    if finite.size and np.max(np.abs(finite)) > MAX_ABS:
        raise ValueError(
            f"y has values up to {np.max(np.abs(finite)):.3g} in absolute value, beyond "
            f"{MAX_ABS:g}: their squares overflow float64; rescale the targets"
        )
    return arr


class RVMRegressor(RegressorMixin, _RVMBase):
    __doc__ = f"""Relevance vector machine regression (Tipping 2001; Tipping & Faul 2003).

    Sparse Bayesian kernel regression: ``t = sum_j w_j k(x, x_j) + b + noise``, each weight
    with its own prior precision ``alpha_j`` set by maximising the evidence; most ``alpha_j``
    diverge and the remaining training points are the relevance vectors. See
    :mod:`ppl_bsvm.baselines.rvm_algorithms` for the algorithms.

    Parameters
    ----------{_RVM_DOC_PARAMS}
    learn_lengthscale : bool, default=True
        Maximise the evidence over the kernel's lengthscale too (one common factor for an
        ARD kernel), from the kernel's lengthscale (or the median heuristic) over
        ``[start / 30, 3 start]``: a grid, then Brent's search
        (:func:`ppl_bsvm.baselines.rvm.maximise_evidence`). Kernels without a lengthscale keep
        their hyperparameters; ``kernel_params_`` holds those used.
    augment : bool, default=False
        Predictive variance of the augmented model (RVM*, :mod:`ppl_bsvm.baselines.rvm_algorithms`):
        a basis function at each test point, so the variance grows away from the data instead of
        shrinking. Needs the training data at prediction time.

    Attributes
    ----------
    relevance_ : ndarray of shape (R,)
        Indices of the relevance vectors in the training data.
    relevance_vectors_ : ndarray of shape (R, n_features)
    coef_ : ndarray of shape (R,)
        Posterior mean weights of the relevance vectors.
    intercept_ : float
        Posterior mean of the bias weight (0 if there is none or it was pruned).
    alpha_ : ndarray of shape (R,)
        Prior precisions of the relevance weights.
    beta_ : float
        Noise precision (``1 / sigma^2``).
    sigma_ : ndarray of shape (R + has_bias, R + has_bias)
        Posterior covariance of the weights, bias last.
    log_marginal_likelihood_ : float
    n_iter_ : int
    converged_ : bool
    kernel_ : Kernel
    kernel_params_ : dict
    result_ : RVMResult
        The evidence maximiser's output over the basis columns (training points, then the
        bias): ``active``, ``alpha``, ``mean``, ``cov``, ``trace``.

    Examples
    --------
    >>> import numpy as np
    >>> from ppl_bsvm import RVMRegressor, kernels
    >>> x = np.linspace(-10, 10, 100)[:, None]
    >>> t = np.sinc(x[:, 0] / np.pi) + 0.1 * np.random.default_rng(0).standard_normal(100)
    >>> rvm = RVMRegressor().fit(x, t)  # the width is learned from the median heuristic on
    >>> len(rvm.relevance_) < 15
    True
    >>> mean, std = rvm.predict(x[:3], return_std=True)
    """

    _parameter_constraints: dict = {**_RVMBase._parameter_constraints, "augment": ["boolean"],
                                    "learn_lengthscale": ["boolean"]}

    def __init__(self, *, kernel="rbf", algorithm="fast", bias=True, max_iter=5000, tol=1e-6,
                 alpha_max=1e9, learn_lengthscale=True, augment=False):
        super().__init__(kernel=kernel, algorithm=algorithm, bias=bias, max_iter=max_iter,
                         tol=tol, alpha_max=alpha_max)
        self.learn_lengthscale = learn_lengthscale
        self.augment = augment

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Maximise the evidence over ``alpha``, ``beta`` (and the width); returns ``self``."""
        kernel = self._validate_options()
        y = _regression_targets(y)
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        if X.shape[0] < 2:
            raise ValueError(f"RVMRegressor needs at least 2 samples, got n_samples = {X.shape[0]}")
        check_X(X)  # the scale limit of every fit (ppl_bsvm.data.MAX_ABS)
        self.beta_ = self._maximise_evidence(rvm_regression, kernel, X, y,
                                             learn=self.learn_lengthscale).beta
        if self.augment:
            self._train = (X, y)
        return self

    def predict(self, X, return_std=False):
        """Predictive mean (and standard deviation of the noisy target) at the rows of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False

        Returns
        -------
        mean : ndarray of shape (n_samples,)
        std : ndarray of shape (n_samples,), only with ``return_std=True``
            ``sqrt(1/beta_ + phi(x)^T sigma_ phi(x))``, or the augmented model's (``augment``).
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        F, mean, var = self._latent(X)
        if self.augment:
            mean, var = self._augmented(X, F, mean, var)
        if not return_std:
            return mean
        return mean, np.sqrt(var + 1.0 / self.beta_)

    def _augmented(self, X, F, mean, var):
        """Rank-one update for a basis function ``k(., x*)`` with prior precision ``k(x*, x*)``."""
        X_train, t = self._train
        beta = self.beta_
        with jax.enable_x64(True):
            Psi = kernel_matrix(self.kernel_, self.kernel_params_, X_train, X)  # (N, n*)
            kappa = np.asarray(self.kernel_.diag(self.kernel_params_, jax.numpy.asarray(X)))
        Phi_M = self._basis.features(X_train)
        U = beta * self.sigma_ @ (Phi_M.T @ Psi)  # (M, n*)
        c = kappa + beta * np.sum(Psi * (Psi - Phi_M @ U), axis=0)
        resid = t - Phi_M @ self._mean
        w_star = beta * (Psi.T @ resid) / c
        e = kappa - np.sum(F.T * U, axis=0)
        return mean + e * w_star, var + e**2 / c


class RVMClassifier(_BinaryClassifier, _RVMBase):
    __doc__ = f"""Relevance vector machine classification (Tipping 2001), binary.

    ``p(y = classes_[1] | x) = sigmoid(sum_j w_j k(x, x_j) + b)`` with a sparse prior as in
    :class:`RVMRegressor`, fitted by the Laplace approximation with IRLS inside the evidence
    maximisation. ``predict_proba`` integrates the sigmoid over the Laplace posterior.
    It keeps the kernel's hyperparameters: at the short widths a width search visits, the fast
    algorithm on the Laplace evidence can cycle for thousands of ``O(N^2 M)`` steps.

    Parameters
    ----------{_RVM_DOC_PARAMS}

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
    relevance_, relevance_vectors_, coef_, intercept_, alpha_, sigma_ :
        As in :class:`RVMRegressor` (weights of the logistic model).
    log_marginal_likelihood_ : float
        Laplace approximation of the evidence.
    n_iter_ : int
    converged_ : bool
    kernel_, kernel_params_, result_ :
        As in :class:`RVMRegressor`.
    """

    _parameter_constraints: dict = {**_RVMBase._parameter_constraints}

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the sparse Bayesian logistic model; returns ``self``."""
        kernel = self._validate_options()
        X, y = self._validate_training(X, y)
        # one class is fitted (and predicted), as scikit-learn's checks prefer
        self.classes_, index = self._binary_targets(y, need_two=False)
        self._maximise_evidence(rvm_classification, kernel, X, np.where(index == 1, 1.0, -1.0))
        return self

    def decision_function(self, X):
        """Posterior mean of the latent ``f(x)`` (positive: ``classes_[1]``)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return self._latent(X)[1]

    def predict_proba(self, X):
        """``[P(classes_[0]), P(classes_[1])]``, the sigmoid averaged over the Laplace posterior."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        _, mean, var = self._latent(X)
        with jax.enable_x64(True):
            p = np.asarray(logistic_gaussian(mean, var), dtype=np.float64)
        return _two_columns(p)
