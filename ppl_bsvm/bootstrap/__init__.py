"""Bootstrap averages of kernel machines: replica-TAP theory and the Monte-Carlo bootstrap.

- :func:`replica_tap`: Malzahn & Opper's (2003) analytical bootstrap of the SVM without bias
  (hard or soft margin, optional emulated bias) and of GP regression, for one or several mean
  sample sizes ``S/N``; returns a :class:`BootstrapResult`.
- :func:`bsvm_bootstrap`: the same for the Bayesian SVM's MAP (soft margin, ``C = 2 gamma``).
- :func:`monte_carlo`: the honest baseline, retraining on Poisson or multinomial resamples.
- :func:`make_objective`, :func:`select_hyperparameters`: the bootstrap error (or Efron's .632
  estimate) as a differentiable function of kernel hyperparameters, and its minimiser.
- :mod:`~ppl_bsvm.bootstrap.svm`: the exact active-set SVM solver used by the Monte Carlo;
  :mod:`~ppl_bsvm.bootstrap.tap`: the fixed-point equations themselves.
"""

from . import estimates, svm, tap
from .estimates import approximate_loo, efron632, efron632_plus, no_information_rate
from .resample import MonteCarloResult, monte_carlo
from .theory import BootstrapResult, ConvergenceWarning, bsvm_bootstrap, replica_tap
from .selection import Objective, SelectionResult, make_objective, select_hyperparameters

__all__ = [
    "BootstrapResult",
    "ConvergenceWarning",
    "MonteCarloResult",
    "Objective",
    "SelectionResult",
    "approximate_loo",
    "bsvm_bootstrap",
    "efron632",
    "efron632_plus",
    "estimates",
    "make_objective",
    "monte_carlo",
    "no_information_rate",
    "replica_tap",
    "select_hyperparameters",
    "svm",
    "tap",
]
