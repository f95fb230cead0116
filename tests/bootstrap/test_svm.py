"""The exact SVM solver of the Monte-Carlo bootstrap, and the approximate leave-one-out (Eq. 20)."""

import jax
import numpy as np
import pytest
from scipy.optimize import minimize, nnls

from ppl_bsvm import bootstrap, kernels
from ppl_bsvm.bootstrap import svm


def _problem(rng, n=60, lengthscale=1.0, noise=0.6):
    X = rng.standard_normal((n, 2))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + noise * rng.standard_normal(n) > 0, 1.0, -1.0)
    with jax.enable_x64(True):
        k = kernels.RBF(lengthscale=lengthscale)
        K = np.asarray(kernels.gram(k, k.init_params(X), X, 1e-6))
    return K, y


def _box_qp_lbfgs(Q, upper):
    res = minimize(
        lambda a: (0.5 * a @ Q @ a - a.sum(), Q @ a - 1.0),
        np.zeros(len(Q)),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, u) for u in upper],
        options={"maxiter": 100000, "maxfun": 100000, "ftol": 1e-16, "gtol": 1e-12},
    )
    return res.x


def _objective(Q, a):
    return 0.5 * a @ Q @ a - a.sum()


def test_hard_margin_solution_meets_kkt_and_equals_nnls(rng):
    K, y = _problem(rng)
    sol = svm.svm_without_bias(K, y)
    assert sol.kkt_violation < 1e-9
    margins = y * sol.field
    assert np.all(margins >= 1 - 1e-9)
    np.testing.assert_allclose(margins[sol.support], 1.0, atol=1e-9)
    # independent solver: NNLS on the Cholesky factor (a^T Q a - 2 a^T 1 = |R a - b|^2 + c)
    Q = y[:, None] * K * y[None, :]
    R = np.linalg.cholesky(Q).T
    alpha, _ = nnls(R, np.linalg.solve(R.T, np.ones(len(y))), maxiter=100 * len(y))
    np.testing.assert_allclose(K @ (y * alpha), sol.field, atol=1e-6)
    # As good as NNLS's up to the duality gap the KKT bound above allows (violation x sum alpha);
    # an absolute 1e-10 was below the rounding of an objective of 4e4 (missed by 2e-8).
    assert _objective(Q, sol.alpha) <= _objective(Q, alpha) + 1e-9 * np.sum(sol.alpha)


def test_soft_margin_with_multiplicities_meets_kkt_and_equals_lbfgs(rng):
    K, y = _problem(rng)
    counts = rng.poisson(1.0, len(y))
    C = 0.7
    sol = svm.svm_without_bias(K, y, C=C, counts=counts)
    assert sol.kkt_violation < 1e-9
    idx = np.flatnonzero(counts > 0)
    assert np.all(sol.alpha[counts == 0] == 0)
    assert np.all(sol.alpha[idx] <= C * counts[idx] + 1e-12)
    Q = y[idx, None] * K[np.ix_(idx, idx)] * y[None, idx]
    alpha = _box_qp_lbfgs(Q, C * counts[idx])
    assert _objective(Q, sol.alpha[idx]) <= _objective(Q, alpha) + 1e-12
    np.testing.assert_allclose(sol.alpha[idx], alpha, atol=1e-4)


def test_warm_start_reaches_the_same_solution(rng):
    K, y = _problem(rng, n=80, lengthscale=0.7)
    full = svm.svm_without_bias(K, y)
    for _ in range(5):
        counts = rng.poisson(1.0, len(y))
        cold = svm.svm_without_bias(K, y, counts=counts)
        warm = svm.svm_without_bias(K, y, counts=counts, warm_support=full.support)
        assert warm.kkt_violation < 1e-9
        np.testing.assert_allclose(warm.field, cold.field, atol=1e-9)
    soft = svm.svm_without_bias(K, y, C=1.0)
    bound = soft.alpha >= 1.0
    counts = rng.poisson(2.0, len(y))
    cold = svm.svm_without_bias(K, y, C=1.0, counts=counts)
    warm = svm.svm_without_bias(
        K, y, C=1.0, counts=counts, warm_support=soft.support & ~bound, warm_bound=bound
    )
    np.testing.assert_allclose(warm.field, cold.field, atol=1e-9)


def test_bias_variant_matches_scikit_learn_and_the_large_constant_kernel(rng):
    """Spec 8.1: the SVM without bias on K + b0 tends to scikit-learn's SVM with bias."""
    from sklearn.svm import SVC

    K, y = _problem(rng, n=50, lengthscale=1.5)
    sol = svm.svm_with_bias(K, y, C=1e6)
    svc = SVC(kernel="precomputed", C=1e6, tol=1e-6).fit(K, y)
    np.testing.assert_allclose(sol.field, svc.decision_function(K), atol=1e-8)
    emulated = svm.svm_without_bias(K + 1e4, y)
    np.testing.assert_allclose(emulated.field, sol.field, atol=2e-2 * np.abs(sol.field).max())
    assert np.all(np.sign(emulated.field) == np.sign(sol.field))


def test_solver_rejects_bad_bounds_and_reports_its_kkt_residual():
    Q = np.array([[2.0, 0.5], [0.5, 1.0]])
    with pytest.raises(ValueError, match="upper bounds"):
        svm.solve_box_qp(Q, upper=np.array([1.0, 0.0]))
    sol = svm.solve_box_qp(Q)
    np.testing.assert_allclose(Q @ sol.alpha, 1.0, atol=1e-12)  # both free: Q a = 1
    assert svm.kkt_violation(Q, np.zeros(2), np.inf) == pytest.approx(1.0)


def test_approximate_loo_is_exact_when_the_support_set_is_stable(rng):
    """Eq. 20: y_i m^c_i = 1 - alpha_i / [K_SV^-1]_ii is the exact leave-one-out margin of a
    support vector whose removal leaves the other support vectors unchanged."""
    K, y = _problem(rng, n=100, lengthscale=1.2, noise=0.3)
    sol = svm.svm_without_bias(K, y)
    error, margin = bootstrap.approximate_loo(K, y, sol.alpha)
    checked = 0
    for i in np.flatnonzero(sol.support):
        counts = np.ones(len(y), dtype=int)
        counts[i] = 0
        loo = svm.svm_without_bias(K, y, counts=counts)
        if np.array_equal(loo.support, sol.support & (np.arange(len(y)) != i)):
            assert y[i] * loo.field[i] == pytest.approx(margin[i], abs=1e-7)
            checked += 1
    assert checked >= 3
    non_sv = ~sol.support
    np.testing.assert_allclose(margin[non_sv], (y * sol.field)[non_sv])
    assert error == np.mean(margin < 0)
