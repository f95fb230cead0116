"""The classical systems the Bayesian SVM is compared with, behind the same ``fit`` face.

Importing this package registers, for the GP model (``ppl_bsvm.fit(X, y, method=NAME)``):

- ``platt``: SVM (libsvm) + Platt scaling (:mod:`.platt`);
- ``gpc``: GP classification in JAX, Laplace or EP, probit or logit (:mod:`.gpc`);
- ``gpc_sklearn``: scikit-learn's Laplace ``GaussianProcessClassifier`` (:mod:`.gpc`);
- ``svgp``: sparse variational GP classification of Hensman et al. 2015 (:mod:`.svgp`; also
  under ``model="sparse_gp"``);
- ``bcsvm``: the Bayesian committee SVM of Schwaighofer & Tresp (:mod:`.bcsvm`), whose
  estimator is ``ppl_bsvm.BCSVMClassifier``;
- ``rvm``: the relevance vector machine classifier (:mod:`.rvm`; its evidence maximisers in
  :mod:`.rvm_algorithms`), whose regression and classification estimators are
  ``ppl_bsvm.RVMRegressor`` and ``ppl_bsvm.RVMClassifier``.

The scikit-learn estimators live in :mod:`ppl_bsvm.estimators`, so that registering the engines
imports neither scikit-learn nor SciPy's statistics (a second and a half of start-up).
"""

from . import bcsvm, gpc, platt, rvm, svgp  # noqa: F401
