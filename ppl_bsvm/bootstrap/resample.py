r"""The Monte-Carlo bootstrap: retrain on resamples, the ground truth for :func:`replica_tap`.

For each mean sample size ``S`` and each of ``n_resamples`` resamples ``D`` (occupation numbers
``s_i``: independent ``Poisson(S/N)``, as in the theory, or ``Multinomial(S, 1/N)``, the usual
bootstrap), the machine is retrained on ``D`` and evaluated at all training inputs and at the
test inputs. The out-of-bag estimator of the bootstrapped error (Eq. 6) is

.. math:: \hat\varepsilon(S) = \frac1N \sum_i \frac{\sum_b \delta_{s_{ib},0}\, g_{ib}}
                                              {\sum_b \delta_{s_{ib},0}},

and its standard error comes from the delta method for this ratio estimator: with
``B_i = mean_b delta_ib`` and ``eps_i`` the per-point ratio, the per-resample contributions
``z_b = (1/N) sum_i delta_ib (g_ib - eps_i) / B_i`` have mean ~0 and
``se = sd(z) / sqrt(n_resamples)``, which accounts for the correlation of the points within a
resample.

Machines: the SVM without bias (hard or soft margin), solved exactly by the active-set method of
:mod:`ppl_bsvm.bootstrap.svm` warm-started from the support vectors of the SVM on all data; the
SVM with bias by scikit-learn's ``SVC(kernel="precomputed", C=1e6)`` (hard) or ``C`` (soft); GP
regression by a Cholesky solve with noise ``sigma^2 / s_i``. Resamples run in chunks of fixed
size with their own seeds (``numpy.random.SeedSequence.spawn``), in parallel with ``n_jobs``
(joblib), and the result does not depend on ``n_jobs``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from .._checks import one_of, positive_int
from .._runtime import entry_point
from ..data import BinaryLabels
from ..kernels import DEFAULT_JITTER
from ._setup import Variant, check_ratios, make_setup, resolve_variant
from .estimates import efron632, efron632_plus, fit_on_all
from .svm import SVMSolution, svm_with_bias, svm_without_bias

__all__ = ["MonteCarloResult", "monte_carlo", "draw_counts"]

RESAMPLING = ("poisson", "multinomial")
_MACHINES = {"hard": "hard-margin SVM", "soft": "soft-margin SVM", "regression": "GP regression"}
CHUNK = 100
"""Resamples per task; each chunk has its own seed, so results do not depend on ``n_jobs``."""


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class MonteCarloResult:
    r"""Monte-Carlo bootstrap averages with standard errors, one row per ``S/N``.

    Attributes
    ----------
    sample_ratio : ndarray (R,)
    n_resamples : int
    resampling : {"poisson", "multinomial"}
    error, error_se : ndarray (R,)
        Out-of-bag estimate of :math:`\varepsilon(S)` (Eq. 6) and its standard error.
    error_per_point, error_per_point_se : ndarray (R, N)
        Fraction of the resamples leaving ``x_i`` out that misclassify it (regression: mean
        squared error), NaN for a point never left out.
    oob_count : ndarray (R, N) of int
        Number of resamples leaving each point out.
    oob_mean, oob_mean_se, oob_var, oob_var_se : ndarray (R, N)
        Mean and variance of the output at ``x_i`` over the resamples leaving it out, with
        standard errors (the variance's from the sample fourth moment).
    field_mean, field_var : ndarray (R, N)
        Mean and variance of the output at ``x_i`` over all resamples.
    test_fields : ndarray (R, n_resamples, n*) or None
        The output of every bootstrap machine at every test input (for histograms).
    test_mean, test_var : ndarray (R, n*) or None
    test_prob_negative, test_prob_negative_se : ndarray (R, n*) or None
        Fraction of bootstrap machines with output < 0 at each test input (classifiers).
    test_error, test_error_se : ndarray (R,) or None
        Bootstrapped error on the labelled test inputs.
    fields, counts : ndarray (R, n_resamples, N) or None
        Every machine's output at the training inputs and every resample's occupation
        numbers (only with ``keep_fields=True``).
    error_train, no_information : float
        Training error and no-information rate of the machine fitted to all data.
    efron632, efron632_se, efron632_plus : float
        From ``error`` at ``S/N = 1`` (NaN when 1 is not among ``sample_ratio``).
    kkt_violation : ndarray (R,)
        Largest KKT violation of any retrained SVM without bias (NaN for scikit-learn and
        regression); a check that the solver was exact.
    machine : SVMSolution or None
        The SVM fitted to all data.
    bias : bool
        Whether the retrained SVMs had a bias term (scikit-learn ``SVC``).
    model, C, noise, kernel, kernel_params, jitter, labels, seed
        As in :class:`~ppl_bsvm.bootstrap.BootstrapResult`.
    timings : dict
        Seconds: ``"resample"`` (R,) wall time per ratio, ``"per_resample"`` (R,),
        ``"total"``.
    """

    sample_ratio: np.ndarray
    n_resamples: int
    resampling: str
    error: np.ndarray
    error_se: np.ndarray
    error_per_point: np.ndarray
    error_per_point_se: np.ndarray
    oob_count: np.ndarray
    oob_mean: np.ndarray
    oob_mean_se: np.ndarray
    oob_var: np.ndarray
    oob_var_se: np.ndarray
    field_mean: np.ndarray
    field_var: np.ndarray
    test_fields: np.ndarray | None
    test_mean: np.ndarray | None
    test_var: np.ndarray | None
    test_prob_negative: np.ndarray | None
    test_prob_negative_se: np.ndarray | None
    test_error: np.ndarray | None
    test_error_se: np.ndarray | None
    fields: np.ndarray | None
    counts: np.ndarray | None
    error_train: float
    no_information: float
    efron632: float
    efron632_se: float
    efron632_plus: float
    kkt_violation: np.ndarray
    machine: SVMSolution | None
    model: str
    C: float
    noise: float
    bias: bool
    kernel: Any
    kernel_params: Any
    jitter: float
    labels: BinaryLabels | None
    seed: int
    timings: dict

    def to_frame(self):
        """One row per ``S/N``: error, standard error and wall time (a pandas DataFrame)."""
        import pandas as pd

        return pd.DataFrame(
            {
                "sample_ratio": self.sample_ratio,
                "error": self.error,
                "error_se": self.error_se,
                "seconds": self.timings["resample"],
            }
        )

    def summary(self) -> str:
        lines = [
            f"MonteCarloResult: {self.n_resamples} {self.resampling} resamples of the "
            f"{self.model} machine" + (" with bias (scikit-learn SVC)" if self.bias else "")
        ]
        for r, e, se in zip(self.sample_ratio, self.error, self.error_se):
            lines.append(f"  S/N={r:<6g} error={e:.5f} +- {se:.5f}")
        if np.isfinite(self.efron632):
            lines.append(f"  .632: {self.efron632:.5f} +- {self.efron632_se:.5f}   "
                         f".632+: {self.efron632_plus:.5f}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


def draw_counts(rng: np.random.Generator, n: int, ratio: float, resampling: str, size: int):
    """Occupation numbers ``(size, n)``: Poisson(ratio) each, or Multinomial(round(ratio n))."""
    if resampling == "poisson":
        return rng.poisson(ratio, size=(size, n))
    total = int(round(ratio * n))
    return rng.multinomial(total, np.full(n, 1.0 / n), size=size)


def _retrain(K, y, counts, variant: Variant, bias: bool, warm):
    """One machine on the resample ``counts``: (field at all inputs, weights, intercept, kkt)."""
    n = y.shape[0]
    idx = np.flatnonzero(counts > 0)
    if idx.size == 0:  # nothing to learn from: the zero function
        return np.zeros(n), np.zeros(n), 0.0, 0.0
    if variant.kind == "regression":
        A = K[np.ix_(idx, idx)] + np.diag(variant.noise / counts[idx])
        coef = np.zeros(n)
        coef[idx] = np.linalg.solve(A, y[idx])
        return K @ coef, coef, 0.0, np.nan
    C = variant.C if variant.kind == "soft" else None
    if bias:
        if np.unique(y[idx]).size < 2:  # one class present: that class everywhere
            label = float(y[idx[0]])
            return np.full(n, label), np.zeros(n), label, np.nan
        present = counts if C is not None else (counts > 0).astype(np.int64)
        sol = svm_with_bias(K, y, C=1e6 if C is None else C, counts=present)
    else:
        sol = svm_without_bias(K, y, C=C, counts=counts, warm_support=warm[0], warm_bound=warm[1])
    return sol.field, y * sol.alpha, sol.bias, sol.kkt_violation


def _chunk(seed, size, ratio, resampling, K, y, variant, bias, K_test, warm):
    rng = np.random.default_rng(seed)
    n = y.shape[0]
    counts = draw_counts(rng, n, ratio, resampling, size)
    fields = np.empty((size, n))
    tfields = None if K_test is None else np.empty((size, K_test.shape[1]))
    kkt = 0.0
    for b in range(size):
        field, coef, intercept, viol = _retrain(K, y, counts[b], variant, bias, warm)
        fields[b] = field
        if tfields is not None:
            tfields[b] = K_test.T @ coef + intercept
        kkt = max(kkt, viol) if np.isfinite(viol) else np.nan
    return fields, tfields, counts.astype(np.int32), kkt


def _loss(kind, y, f):
    if kind == "regression":
        return (y - f) ** 2
    return (y * f < 0).astype(np.float64)


def _oob_stats(kind, y, fields, counts):
    """Out-of-bag error with its delta-method standard error, and per-point moments."""
    n_b = fields.shape[0]
    oob = counts == 0
    cnt = oob.sum(axis=0)
    has = cnt > 0
    safe = np.maximum(cnt, 1)
    loss = _loss(kind, y[None, :], fields)
    eps_i = np.where(has, (oob * loss).sum(axis=0) / safe, np.nan)
    error = float(np.mean(eps_i[has]))
    frac = cnt / n_b
    z = np.where(oob[:, has], (loss[:, has] - eps_i[has]) / frac[has], 0.0).sum(axis=1) / has.sum()
    error_se = float(np.std(z, ddof=1) / np.sqrt(n_b)) if n_b > 1 else np.nan
    loss_var = np.where(has, (oob * (loss - np.nan_to_num(eps_i)) ** 2).sum(axis=0) / safe, np.nan)
    eps_se = np.sqrt(loss_var / safe)
    mean = np.where(has, (oob * fields).sum(axis=0) / safe, np.nan)
    dev = np.where(oob, fields - np.nan_to_num(mean), 0.0)
    denom = np.maximum(cnt - 1, 1)
    var = np.where(cnt > 1, (dev**2).sum(axis=0) / denom, np.nan)
    m4 = np.where(has, (dev**4).sum(axis=0) / safe, np.nan)
    mean_se = np.sqrt(var / safe)
    var_se = np.sqrt(np.maximum(m4 - var**2, 0.0) / safe)
    return {
        "error": error,
        "error_se": error_se,
        "error_per_point": eps_i,
        "error_per_point_se": eps_se,
        "oob_count": cnt,
        "oob_mean": mean,
        "oob_mean_se": mean_se,
        "oob_var": var,
        "oob_var_se": var_se,
        "field_mean": fields.mean(axis=0),
        "field_var": fields.var(axis=0, ddof=1) if n_b > 1 else np.full(fields.shape[1], np.nan),
    }


def _test_stats(kind, tfields, y_test):
    n_b = tfields.shape[0]
    out = {
        "test_fields": tfields,
        "test_mean": tfields.mean(axis=0),
        "test_var": tfields.var(axis=0, ddof=1) if n_b > 1 else np.full(tfields.shape[1], np.nan),
    }
    if kind != "regression":
        pneg = (tfields < 0).mean(axis=0)
        out["test_prob_negative"] = pneg
        out["test_prob_negative_se"] = np.sqrt(pneg * (1 - pneg) / n_b)
    if y_test is not None:
        per_b = _loss(kind, y_test[None, :], tfields).mean(axis=1)
        out["test_error"] = float(per_b.mean())
        out["test_error_se"] = float(per_b.std(ddof=1) / np.sqrt(n_b)) if n_b > 1 else np.nan
    return out


@entry_point
def monte_carlo(
    X,
    y,
    kernel="rbf",
    sample_ratio=1.0,
    X_test=None,
    *,
    y_test=None,
    n_resamples: int = 1000,
    resampling: str = "poisson",
    params=None,
    model: str = "svm",
    margin: str = "hard",
    C: float | None = None,
    noise: float = 0.1,
    bias: bool = False,
    jitter: float = DEFAULT_JITTER,
    seed: int = 0,
    n_jobs: int | None = 1,
    keep_fields: bool = False,
    positive=None,
) -> MonteCarloResult:
    """Bootstrap by retraining the machine on ``n_resamples`` resamples per ``S/N``.

    Parameters
    ----------
    X, y, kernel, sample_ratio, X_test, y_test, params, model, margin, C, noise, jitter, positive
        As in :func:`~ppl_bsvm.bootstrap.replica_tap`, so that both describe the same machine.
    n_resamples : int, default=1000
        Resamples per ``S/N``.
    resampling : {"poisson", "multinomial"}, default="poisson"
        Independent ``Poisson(S/N)`` occupation numbers (what the theory assumes) or the
        classical bootstrap of exactly ``round(S)`` draws with replacement.
    bias : bool, default=False
        Retrain the SVM *with* an unregularised bias (scikit-learn ``SVC``, ``C = 1e6`` for the
        hard margin); the theory's counterpart is ``replica_tap(..., bias=True)``.
    seed : int, default=0
    n_jobs : int or None, default=1
        Parallel workers over chunks of resamples (joblib; -1 = all cores).
    keep_fields : bool, default=False
        Also return every machine's output at the training inputs and every resample's
        occupation numbers (``R x n_resamples x N`` each).

    Returns
    -------
    MonteCarloResult

    Examples
    --------
    >>> from ppl_bsvm import bootstrap, datasets, kernels
    >>> X, y = datasets.load("crabs", standardize=True)
    >>> mc = bootstrap.monte_carlo(X, y, kernels.RBF(lengthscale=3.0), 1.0, n_resamples=200)
    >>> bool(mc.error_se[0] < 0.005), float(mc.kkt_violation[0]) < 1e-8
    (True, True)
    """
    from joblib import Parallel, delayed

    start = time.perf_counter()
    ratios = check_ratios(sample_ratio, low=1e-3, high=1e3)
    variant = resolve_variant(model, margin, C, noise)
    n_resamples = positive_int("n_resamples", n_resamples, minimum=2)
    one_of("resampling", resampling, RESAMPLING)
    if not isinstance(bias, (bool, np.bool_)):
        raise ValueError(f"bias must be True or False for the Monte Carlo, got {bias!r}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if n_jobs is not None and (not isinstance(n_jobs, (int, np.integer)) or n_jobs == 0):
        raise ValueError(f"n_jobs must be a non-zero int or None, got {n_jobs!r}")
    setup = make_setup(
        X, y, kernel, model=model, params=params, X_test=X_test, y_test=y_test,
        jitter=jitter, bias=False, positive=positive,
    )
    machine, err_train, no_info = fit_on_all(setup.K, setup.y, variant, bias=bool(bias))
    warm = (None, None)
    if machine is not None and not bias:
        on_bound = machine.support & (machine.alpha >= (variant.C if variant.kind == "soft" else np.inf))
        warm = (machine.support & ~on_bound, on_bound)
    sizes = [CHUNK] * (n_resamples // CHUNK) + ([n_resamples % CHUNK] if n_resamples % CHUNK else [])
    root = np.random.SeedSequence(seed)
    ratio_seeds = root.spawn(ratios.size)
    rows, seconds, kkts = [], [], []
    pool = Parallel(n_jobs=n_jobs)
    for ratio, rseed in zip(ratios, ratio_seeds):
        t0 = time.perf_counter()
        chunks = pool(
            delayed(_chunk)(
                s, size, float(ratio), resampling, setup.K, setup.y, variant, bool(bias),
                setup.K_test, warm,
            )
            for s, size in zip(rseed.spawn(len(sizes)), sizes)
        )
        fields = np.concatenate([c[0] for c in chunks])
        counts = np.concatenate([c[2] for c in chunks])
        row = _oob_stats(variant.kind, setup.y, fields, counts)
        if setup.K_test is not None:
            row.update(_test_stats(variant.kind, np.concatenate([c[1] for c in chunks]), setup.y_test))
        if keep_fields:
            row["fields"], row["counts"] = fields, counts
        kkts.append(max(c[3] for c in chunks) if all(np.isfinite(c[3]) for c in chunks) else np.nan)
        rows.append(row)
        seconds.append(time.perf_counter() - t0)

    def stack(key):
        if key not in rows[0]:
            return None
        return np.stack([np.asarray(r[key]) for r in rows])

    error = stack("error")
    at_n = np.flatnonzero(ratios == 1.0)
    e632 = e632se = e632p = np.nan
    if at_n.size:
        eps_n = float(error[at_n[0]])
        e632 = efron632(eps_n, err_train)
        e632se = 0.632 * float(rows[at_n[0]]["error_se"])
        e632p = efron632_plus(eps_n, err_train, no_info)
    seconds = np.array(seconds)
    return MonteCarloResult(
        sample_ratio=ratios,
        n_resamples=n_resamples,
        resampling=resampling,
        error=error,
        error_se=stack("error_se"),
        error_per_point=stack("error_per_point"),
        error_per_point_se=stack("error_per_point_se"),
        oob_count=stack("oob_count"),
        oob_mean=stack("oob_mean"),
        oob_mean_se=stack("oob_mean_se"),
        oob_var=stack("oob_var"),
        oob_var_se=stack("oob_var_se"),
        field_mean=stack("field_mean"),
        field_var=stack("field_var"),
        test_fields=stack("test_fields"),
        test_mean=stack("test_mean"),
        test_var=stack("test_var"),
        test_prob_negative=stack("test_prob_negative"),
        test_prob_negative_se=stack("test_prob_negative_se"),
        test_error=stack("test_error"),
        test_error_se=stack("test_error_se"),
        fields=stack("fields"),
        counts=stack("counts"),
        error_train=err_train,
        no_information=no_info,
        efron632=e632,
        efron632_se=e632se,
        efron632_plus=e632p,
        kkt_violation=np.array(kkts),
        machine=machine,
        model=variant.kind,
        C=variant.C,
        noise=variant.noise,
        bias=bool(bias),
        kernel=setup.kernel,
        kernel_params=setup.params,
        jitter=setup.jitter,
        labels=setup.labels,
        seed=seed,
        timings={"resample": seconds, "per_resample": seconds / n_resamples,
                 "total": time.perf_counter() - start},
    )
