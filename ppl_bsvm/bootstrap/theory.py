r"""Bootstrap without resampling: the replica-TAP theory of Malzahn & Opper (NIPS 2003).

:func:`replica_tap` computes the bootstrap averages of a support vector machine (or of GP
regression) for one or several mean sample sizes ``S`` by solving the ADATAP fixed point of
:mod:`ppl_bsvm.bootstrap.tap` once per ``S/N`` instead of retraining on thousands of resamples
(``specs/replica_tap.md``). The outputs (spec section 6):

- the bootstrapped generalisation error (out-of-bag, Eq. 17)
  :math:`\varepsilon(S) = \frac1N \sum_i \Phi(-y_i m^c_i / \sqrt{V^c_i})` and its per-point terms;
- the bootstrap distribution of the machine's output at each training input over the
  resamples that leave it out, :math:`N(m^c_i, V^c_i)` (Eq. 18), and the mean and variance
  :math:`m_i, V_i` over all resamples;
- at new inputs, the bootstrap distribution :math:`N(m(x), V(x))` (Eq. 19) and the fraction of
  bootstrap machines voting -1, :math:`p(-1 \mid x) = \Phi(-m(x)/\sqrt{V(x)})`;
- the ``S -> inf`` limit, the approximate leave-one-out of Eq. 20, computed directly from the
  SVM on all data;
- Efron's .632 and .632+ estimates from :math:`\varepsilon(N)`.

Resampling is Poisson (each point present with probability ``1 - exp(-S/N)``, independently);
the usual multinomial bootstrap of exactly ``S`` draws differs by O(1/N).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr
from scipy.special import ndtr as scipy_ndtr

from .. import _progress
from .._checks import positive_float, positive_int
from .._runtime import entry_point
from ..data import BinaryLabels
from ..exceptions import ConvergenceWarning
from ..kernels import DEFAULT_JITTER
from . import tap, tap_newton, tap_solve
from ._setup import check_ratios, make_setup, resolve_variant
from .estimates import approximate_loo, efron632, efron632_plus, fit_on_all
from .svm import SVMSolution

__all__ = ["BootstrapResult", "ConvergenceWarning", "replica_tap", "bsvm_bootstrap"]


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class BootstrapResult:
    r"""Bootstrap averages from the replica-TAP theory, one row per requested ``S/N``.

    Arrays with a leading ``R`` axis have one row per entry of ``sample_ratio``; ``N`` is the
    number of training points and ``n*`` that of test inputs.

    Attributes
    ----------
    sample_ratio : ndarray (R,)
        ``S / N``.
    error : ndarray (R,)
        Bootstrapped generalisation error :math:`\varepsilon(S)` (Eq. 17): 0/1 loss for the
        classifiers, squared error for regression. ``S = N`` is Efron's leave-one-out
        bootstrap ``Err(1)``.
    error_per_point : ndarray (R, N)
        Out-of-bag error of each training point: :math:`\Phi(-y_i m^c_i / \sqrt{V^c_i})`
        (regression: :math:`(y_i - m^c_i)^2 + V^c_i`).
    oob_mean, oob_var : ndarray (R, N)
        Mean :math:`m^c_i` and variance :math:`V^c_i` of the machine's output at ``x_i`` over
        the resamples that leave ``x_i`` out (Eq. 18; a Gaussian in the theory).
    field_mean, field_var : ndarray (R, N)
        Mean and variance of the output at ``x_i`` over all resamples (a mixture, not a
        Gaussian: in-bag resamples pull it to the margin).
    test_mean, test_var : ndarray (R, n*) or None
        Bootstrap distribution :math:`N(m(x), V(x))` of the output at each test input (Eq. 19).
    test_prob_negative : ndarray (R, n*) or None
        :math:`p(-1 \mid x) = \Phi(-m(x) / \sqrt{V(x)})`: the fraction of bootstrap machines
        predicting the negative label (classifiers only).
    test_error : ndarray (R,) or None
        Bootstrapped error on the labelled test inputs (when ``y_test`` was given).
    loo : float
        The ``S -> inf`` limit of :math:`\varepsilon(S)`: the approximate leave-one-out of
        Eq. 20, from the SVM on all data (hard margin only; NaN otherwise).
    loo_cavity_margin : ndarray (N,) or None
        :math:`y_i m^c_i` at ``S -> inf`` (hard margin).
    error_at_n : float
        :math:`\varepsilon(S = N)`, solved for even when 1 is not among ``sample_ratio``.
    error_train : float
        Training error of the machine fitted to all data (0 for the hard margin).
    no_information : float
        No-information error rate (Efron & Tibshirani 1997).
    efron632, efron632_plus : float
        Efron's .632 and .632+ estimates of the generalisation error.
    n_iter : ndarray (R,) of int
        Factorisations of the ``N x N`` problem by the fixed-point solver (damped sweeps and
        Newton steps, the start's evaluation included; :mod:`ppl_bsvm.bootstrap.tap_newton`),
        those at the ratios solved on the way from a ratio less than half as large included
        (``tap_solve.warm_ladder``).
    n_iter_coarse : ndarray (R,) of int
        Factorisations of the smaller problems that built a cold start (of size
        :func:`tap_solve.coarse_size`; 0 when the ratio started from a nearby fixed point or
        from spec 5.3; :mod:`ppl_bsvm.bootstrap.tap_solve`).
    mismatch : ndarray (R,)
        Moment mismatch (T1 against T3; spec 5.2) of the returned sites: below ``tol`` when
        converged (the solver stops at a point whose own mismatch is below it).
    converged : ndarray (R,) of bool
        Whether the iteration stopped on ``tol`` (not on ``max_iter`` or a non-finite value).
    trace : tuple of R ndarrays
        Moment mismatch of the point kept after every factorisation.
    sites : dict of ndarray (R, N)
        Fixed-point site parameters ``"Lambda"``, ``"gamma"``, ``"lam"`` (paper's Eq. 15).
    machine : SVMSolution or None
        The SVM trained on all data (``field``, ``alpha``); None for regression.
    model : {"hard", "soft", "regression"}
    C : float
        Soft-margin penalty (NaN otherwise).
    noise : float
        Regression noise variance (NaN otherwise).
    bias : float
        Constant added to the kernel to emulate a bias (0: no bias; spec 8.1).
    kernel, kernel_params, jitter
        The kernel, its unconstrained hyperparameters and the relative jitter used.
    labels : BinaryLabels or None
        The user's labels (``test_prob_negative`` refers to ``labels.negative``).
    tol : float
    timings : dict
        Seconds: ``"solve"`` (R,) per ratio (the first solved, the smallest ratio, includes
        compilation on the first call for this N), ``"total"``.
    """

    sample_ratio: np.ndarray
    error: np.ndarray
    error_per_point: np.ndarray
    oob_mean: np.ndarray
    oob_var: np.ndarray
    field_mean: np.ndarray
    field_var: np.ndarray
    test_mean: np.ndarray | None
    test_var: np.ndarray | None
    test_prob_negative: np.ndarray | None
    test_error: np.ndarray | None
    loo: float
    loo_cavity_margin: np.ndarray | None
    error_at_n: float
    error_train: float
    no_information: float
    efron632: float
    efron632_plus: float
    n_iter: np.ndarray
    n_iter_coarse: np.ndarray
    mismatch: np.ndarray
    converged: np.ndarray
    trace: tuple
    sites: dict
    machine: SVMSolution | None
    model: str
    C: float
    noise: float
    bias: float
    kernel: Any
    kernel_params: Any
    jitter: float
    labels: BinaryLabels | None
    tol: float
    timings: dict

    @property
    def hyperparameters(self) -> dict:
        """Kernel hyperparameters on their natural scale (float64)."""
        with jax.enable_x64(True):
            constrained = self.kernel.constrain(self.kernel_params)
            return {k: np.asarray(v, dtype=np.float64) for k, v in constrained.items()}

    def to_frame(self):
        """One row per ``S/N``: error, iterations, mismatch, convergence (a pandas DataFrame)."""
        import pandas as pd

        return pd.DataFrame(
            {
                "sample_ratio": self.sample_ratio,
                "error": self.error,
                "n_iter": self.n_iter,
                "mismatch": self.mismatch,
                "converged": self.converged,
                "seconds": self.timings["solve"],
            }
        )

    def summary(self) -> str:
        """A few lines: the model, the learning curve and the derived estimates."""
        name = {"hard": "hard-margin SVM", "soft": f"soft-margin SVM (C={self.C:g})",
                "regression": f"GP regression (noise={self.noise:g})"}[self.model]
        lines = [f"BootstrapResult: replica-TAP bootstrap of the {name}"
                 + (f" with bias (b0={self.bias:g})" if self.bias else " without bias")]
        for r, e, n, nc, c in zip(self.sample_ratio, self.error, self.n_iter,
                                  self.n_iter_coarse, self.converged):
            coarse = f" (+{nc} coarse)" if nc else ""
            lines.append(f"  S/N={r:<6g} error={e:.5f}  factorisations={n}{coarse}"
                         f"{'' if c else '  NOT CONVERGED'}")
        if np.isfinite(self.loo):
            lines.append(f"  S/N=inf   error={self.loo:.5f}  (approximate leave-one-out, Eq. 20)")
        lines.append(f"  .632: {self.efron632:.5f}   .632+: {self.efron632_plus:.5f}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


@jax.jit
def _test_fields(K, Lambda, gamma, lam, K_test, k_diag):
    """Eq. 19 at the test inputs (one more factorisation, only when there are test inputs)."""
    return tap.fields_at(tap.factor(K, Lambda, gamma, lam), K, K_test, k_diag)


def _climb(setup, config, variant, previous, ratio: float, tol: float, max_iter: int,
           progress_bar):
    """The start of the solve at ``ratio`` from ``previous = (ratio', state)``, a fixed point at
    a smaller ratio: ``(state, factorisations)``, the fixed point at the last ratio of
    ``tap_solve.warm_ladder`` before ``ratio`` (``previous``'s own when ``ratio`` is at most
    ``WARM_RATIO`` times ``ratio'``) and the factorisations the ratios on the way took; ``(None,
    factorisations)`` when one of them did not converge (the solve then starts cold)."""
    state, spent = previous[1], 0
    for step in tap_solve.warm_ladder(previous[0], ratio)[:-1]:
        with _progress.settings(progress_bar, f"replica_tap S/N={step:g} (towards {ratio:g})"):
            run = tap_solve.solve_ratio(setup.K, setup.y, config, variant.C, variant.noise,
                                        step, tol=tol, max_iter=max_iter, start=state).run
        spent += run.n_iter
        if run.stop_reason != "tol":
            return None, spent
        state = run.state
    return state, spent


def oob_loss(kind: str, y, mean, var, ndtr=ndtr):
    """Out-of-bag loss of a Gaussian output ``N(mean, var)``: ``Phi(-y mean / sqrt(var))``
    (0/1 loss) or ``(y - mean)^2 + var`` (squared loss, regression). ``ndtr`` is JAX's by
    default (traceable); pass scipy's for numpy arrays."""
    if kind == "regression":
        return (y - mean) ** 2 + var
    return ndtr(-y * mean / var**0.5)


@entry_point
def replica_tap(
    X,
    y,
    kernel="rbf",
    sample_ratio=1.0,
    X_test=None,
    *,
    y_test=None,
    params=None,
    model: str = "svm",
    margin: str = "hard",
    C: float | None = None,
    noise: float = 0.1,
    bias=False,
    jitter: float = DEFAULT_JITTER,
    tol: float = 1e-8,
    max_iter: int = 5000,
    max_damping: float = 1.0,
    positive=None,
    progress_bar: bool | None = None,
) -> BootstrapResult:
    r"""Approximate analytical bootstrap averages (replica trick + ADATAP), no resampling.

    Parameters
    ----------
    X : array-like of shape (N, d)
        Training inputs.
    y : array-like of shape (N,)
        Two labels of any type (``model="svm"``) or real targets (``model="regression"``).
    kernel : str or Kernel, default="rbf"
        A name for :func:`ppl_bsvm.kernels.get_kernel` or a Kernel object.
    sample_ratio : float or sequence of float, default=1.0
        Mean bootstrap sample size(s) ``S / N``, each in [0.05, 40].
    X_test : array-like of shape (n*, d), optional
        New inputs at which to predict the bootstrap distribution of the output (Eq. 19).
    y_test : array-like of shape (n*,), optional
        Their labels, for a bootstrapped test error.
    params : dict, optional
        Unconstrained kernel hyperparameters (default ``kernel.init_params(X)``), e.g. from
        :func:`select_hyperparameters`.
    model : {"svm", "regression"}, default="svm"
        The SVM without bias (Malzahn & Opper 2003) or GP regression (spec 8.3).
    margin : {"hard", "soft"}, default="hard"
        Hard margin (the paper) or soft margin with penalty ``C`` per copy (spec 8.2).
    C : float, optional
        Soft-margin penalty; ``C = 2 gamma`` bootstraps the Bayesian SVM's MAP
        (:func:`bsvm_bootstrap`).
    noise : float, default=0.1
        Noise variance of the GP regression.
    bias : bool or float, default=False
        Emulate an SVM bias by adding a constant ``b0`` to the kernel (True:
        ``b0 = 100 mean(diag K)``; a float: that ``b0``). The Monte-Carlo counterpart is
        scikit-learn's ``SVC`` (spec 8.1).
    jitter : float, default=1e-6
        Relative jitter of the kernel matrix (as in ``ppl_bsvm.kernels.gram``).
    tol : float, default=1e-8
        Stop when the moment mismatch falls below this (1e-6 already gives the error to six
        digits; below about 1e-9 rounding can stall the iteration, e.g. with ``bias=True``).
    max_iter : int, default=5000
        Cap on the factorisations per ratio.
    max_damping : float, default=1.0
        Largest damping ``eta`` of the adaptive rule of the damped sweeps that take over where
        Newton steps fail (in (0, 1]; the spec's 0.5 is the conservative choice).
    positive : label, optional
        Which label is the positive class.
    progress_bar : bool, optional
        Show the fixed-point iterations' progress (None, the default: where someone can see
        it, for solves that last more than a moment, as ``ppl_bsvm.fit`` does).

    Returns
    -------
    BootstrapResult

    Notes
    -----
    The fixed point is found by safeguarded Newton-Krylov steps
    (:mod:`ppl_bsvm.bootstrap.tap_newton`, quadratic convergence), with damped sweeps (spec
    5.2) where Newton steps fail; each step costs a Cholesky factorisation and two ``N x N``
    products (``O(N^3)``). Without a nearby fixed point the solve starts from the fixed point
    of a coarse problem (the bootstrap of the points nearest the decision boundary, at most
    half of them) extended to the other points by Eq. 19 (:mod:`ppl_bsvm.bootstrap.tap_solve`):
    4-5 factorisations of the full problem at ``S = N`` on Wisconsin and Pima (N = 683, 532);
    problems under 512 points start from spec 5.3 (Sonar and Crabs: 7 and 24). A
    learning curve is solved in increasing ``S/N``, each ratio started from the fixed point of
    the one below when it is at most twice as large, the first step being the Newton predictor
    from there (typically 4-8 factorisations each; more in regions where Newton steps fail,
    e.g. Wisconsin at ``S/N = 2.5``), and a larger ratio through doubling ones, solved but
    not reported (``tap_solve.warm_ladder``: ``S/N = 30`` alone on Pima took 52.7 s from a
    cold start, 3.9 s this way). One compiled program per ``N`` (and one per coarse size,
    shared by all data sets) serves every ratio and later calls. The approximation assumes
    each output is influenced by many inputs: it degrades for narrow kernels, and with few
    support vectors the out-of-bag variances are off even when the error is accurate (spec
    section 7). The soft margin with
    a broad kernel and a small ``C`` (most points at the bound) came out 10-15 % low against
    the Monte Carlo in our runs (``reports/bootstrap_fig1``); always check a new setting with
    :func:`monte_carlo`.

    References
    ----------
    D. Malzahn and M. Opper. Approximate analytical bootstrap averages for support vector
    classifiers. NIPS 16, 2003 (Eqs. 17-23). ``specs/replica_tap.md``.

    Examples
    --------
    >>> from ppl_bsvm import bootstrap, datasets, kernels
    >>> X, y = datasets.load("crabs", standardize=True)
    >>> res = bootstrap.replica_tap(X, y, kernels.RBF(lengthscale=3.0), [1.0, 2.0])
    >>> res.error.round(3)
    array([0.042, 0.039])
    """
    start = time.perf_counter()
    progress_bar = _progress.check_progress_bar(progress_bar)
    ratios = check_ratios(sample_ratio)
    variant = resolve_variant(model, margin, C, noise)
    tol = positive_float("tol", tol)
    max_iter = positive_int("max_iter", max_iter)
    setup = make_setup(
        X, y, kernel, model=model, params=params, X_test=X_test, y_test=y_test,
        jitter=jitter, bias=bias, positive=positive,
    )
    all_ratios = ratios if np.any(ratios == 1.0) else np.append(ratios, 1.0)
    max_damping = positive_float("max_damping", max_damping)
    if max_damping > 1.0:
        raise ValueError(f"max_damping must be in (0, 1], got {max_damping}")
    config = tap.TAPConfig(
        variant.kind, tap_solve.n_copies_for(float(all_ratios.max()), variant.kind),
        max(max_damping, 0.05),
    )
    n = setup.y.shape[0]
    rows, seconds = [None] * all_ratios.size, [0.0] * all_ratios.size
    previous = None  # (ratio, sites) of the last fixed point reached
    order = None  # the points nearest the decision boundary first, for cold starts
    for index in np.argsort(all_ratios, kind="stable"):
        ratio = float(all_ratios[index])
        t0 = time.perf_counter()
        warm, on_the_way = None, 0  # on_the_way: factorisations at the ladder's ratios
        if previous is not None:
            warm, on_the_way = _climb(setup, config, variant, previous, ratio, tol, max_iter,
                                      progress_bar)
        if warm is None and order is None and tap_solve.coarse_size(n) is not None:
            order = tap_solve.boundary_order(setup.K, setup.y, variant.kind)
        with _progress.settings(progress_bar, f"replica_tap S/N={ratio:g}"):
            solution = tap_solve.solve_ratio(
                setup.K, setup.y, config, variant.C, variant.noise, ratio, tol=tol,
                max_iter=max_iter, start=warm, order=order,
            )
        result = solution.run
        st = result.state
        if result.stop_reason == "tol":
            previous = (ratio, st)
        moments, cav = tap_newton.outputs(jax.device_get(st._replace(G=None)))
        err = float(st.mismatch)
        per_point = oob_loss(variant.kind, setup.y, cav.mean, cav.var, ndtr=scipy_ndtr)
        row = {
            "error": float(np.mean(per_point)),
            "error_per_point": per_point,
            "oob_mean": cav.mean,
            "oob_var": cav.var,
            "field_mean": moments.mean,
            "field_var": moments.var,
            "n_iter": result.n_iter + on_the_way,
            "n_iter_coarse": solution.coarse_iter,
            "mismatch": err,
            "stopped_on_tol": result.stop_reason == "tol" and bool(np.isfinite(err)),
            "trace": result.infos.mismatch,
            "Lambda": np.asarray(st.Lambda),
            "gamma": np.asarray(st.gamma),
            "lam": np.asarray(st.lam),
        }
        if setup.K_test is not None:
            test = jax.device_get(_test_fields(
                jnp.asarray(setup.K), st.Lambda, st.gamma, st.lam, jnp.asarray(setup.K_test),
                jnp.asarray(setup.k_test_diag),
            ))
            row["test_mean"] = test.mean
            row["test_var"] = test.var
            if setup.y_test is not None:
                row["test_error"] = float(np.mean(
                    oob_loss(variant.kind, setup.y_test, test.mean, test.var, ndtr=scipy_ndtr)
                ))
        rows[index] = row
        seconds[index] = time.perf_counter() - t0
    keep = slice(0, ratios.size)
    rows_kept = rows[keep]
    at_n = rows[int(np.flatnonzero(all_ratios == 1.0)[0])]

    def stack(key):
        return np.stack([r[key] for r in rows_kept])

    mismatch = np.array([r["mismatch"] for r in rows_kept])
    converged = np.array([r["stopped_on_tol"] for r in rows_kept])
    if not converged.all():
        bad = ratios[~converged].tolist()
        warnings.warn(
            f"replica_tap: the fixed point was not reached for S/N in {bad} (moment mismatch "
            f"{mismatch[~converged].tolist()}, tol={tol:g}); raise max_iter or tol, or check "
            "the kernel (a hard margin needs a positive definite kernel matrix)",
            ConvergenceWarning,
            stacklevel=3,  # the caller of the x64 wrapper
        )
    # the SVM on all data, warm-started from the points whose out-of-bag field at S = N comes
    # within half a standard deviation of the margin (its active-set solver then needs a few
    # swaps instead of one iteration per support vector: 300 ms -> 15 ms on Pima)
    guess = None
    if variant.kind != "regression":
        guess = setup.y * at_n["oob_mean"] < 1.0 + 0.5 * np.sqrt(at_n["oob_var"])
    machine, err_train, no_info = fit_on_all(setup.K, setup.y, variant, warm_support=guess)
    loo, loo_margin = np.nan, None
    if variant.kind == "hard":
        loo, loo_margin = approximate_loo(setup.K, setup.y, machine.alpha)
    test_mean = test_var = test_neg = test_error = None
    if setup.K_test is not None:
        test_mean, test_var = stack("test_mean"), stack("test_var")
        if variant.kind != "regression":
            test_neg = scipy_ndtr(-test_mean / np.sqrt(test_var))
        if setup.y_test is not None:
            test_error = np.array([r["test_error"] for r in rows_kept])
    eps_n = at_n["error"]
    return BootstrapResult(
        sample_ratio=ratios,
        error=np.array([r["error"] for r in rows_kept]),
        error_per_point=stack("error_per_point"),
        oob_mean=stack("oob_mean"),
        oob_var=stack("oob_var"),
        field_mean=stack("field_mean"),
        field_var=stack("field_var"),
        test_mean=test_mean,
        test_var=test_var,
        test_prob_negative=test_neg,
        test_error=test_error,
        loo=loo,
        loo_cavity_margin=loo_margin,
        error_at_n=eps_n,
        error_train=err_train,
        no_information=no_info,
        efron632=efron632(eps_n, err_train),
        efron632_plus=efron632_plus(eps_n, err_train, no_info),
        n_iter=np.array([r["n_iter"] for r in rows_kept]),
        n_iter_coarse=np.array([r["n_iter_coarse"] for r in rows_kept]),
        mismatch=mismatch,
        converged=converged,
        trace=tuple(r["trace"] for r in rows_kept),
        sites={k: stack(k) for k in ("Lambda", "gamma", "lam")},
        machine=machine,
        model=variant.kind,
        C=variant.C,
        noise=variant.noise,
        bias=setup.bias,
        kernel=setup.kernel,
        kernel_params=setup.params,
        jitter=setup.jitter,
        labels=setup.labels,
        tol=tol,
        timings={"solve": np.array(seconds[keep]), "total": time.perf_counter() - start},
    )


def bsvm_bootstrap(
    X,
    y,
    sample_ratio=1.0,
    X_test=None,
    *,
    fit=None,
    kernel="rbf",
    gamma: float = 1.0,
    **options,
) -> BootstrapResult:
    r"""Bootstrap of the Bayesian SVM's MAP predictor (the ECM fit), by replica-TAP.

    The MAP of the Bayesian SVM with pseudo-likelihood ``exp(-2 gamma max(0, 1 - y f))`` and
    a GP prior is the SVM without bias with penalty ``C = 2 gamma`` (what
    ``ppl_bsvm.fit(..., method="ecm")`` computes), so its bootstrap is the soft-margin
    replica-TAP theory at that ``C`` (spec 8.2): a resample with ``s_i`` copies of a point
    multiplies its pseudo-likelihood, i.e. its penalty, by ``s_i``.

    Parameters
    ----------
    X, y, sample_ratio, X_test
        As in :func:`replica_tap`.
    fit : Fit, optional
        A ``ppl_bsvm.fit(X, y, model="gp", method="ecm", ...)`` result: its kernel,
        hyperparameters, jitter and ``gamma`` are used (``X, y`` must be its training data).
    kernel : str or Kernel, default="rbf"
        Used without ``fit``.
    gamma : float, default=1.0
        Pseudo-likelihood temperature, used without ``fit``.
    **options
        Passed to :func:`replica_tap` (``y_test``, ``tol``, ``max_iter``, ...).

    Returns
    -------
    BootstrapResult
        ``machine.field`` is the MAP (the ECM fixed point) at the training inputs.
    """
    for key in ("margin", "C", "model"):
        if key in options:
            raise ValueError(f"bsvm_bootstrap sets {key} itself; use replica_tap for other machines")
    if fit is not None:
        if fit.method != "ecm" or fit.model != "gp":
            raise ValueError(
                f"fit must come from ppl_bsvm.fit(..., model='gp', method='ecm'), got "
                f"model={fit.model!r}, method={fit.method!r}"
            )
        for key in ("params", "jitter"):
            if key in options:
                raise ValueError(f"{key} is taken from fit; do not pass it too")
        kernel = fit.kernel
        gamma = fit.options.get("gamma", gamma)
        options["params"] = fit.kernel_params
        options["jitter"] = fit.jitter
        options.setdefault("positive", fit.labels.positive if fit.labels else None)
    gamma = positive_float("gamma", gamma)
    return replica_tap(
        X, y, kernel, sample_ratio, X_test, margin="soft", C=2.0 * gamma, **options
    )
