"""BC-SVM: one module is the 2-norm SVM (checked with libsvm); the BCM combination is eqs. 4-5."""

import jax
import numpy as np
import pytest
from sklearn.svm import SVC

import ppl_bsvm
from ppl_bsvm import kernels
from ppl_bsvm.baselines.bcsvm import partition

KERNEL = kernels.RBF(lengthscale=0.8)
C = 3.0


@pytest.fixture(scope="module")
def problem():
    r = np.random.default_rng(3)
    X = r.standard_normal((120, 2))
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] + 0.4 * r.standard_normal(120) > 0, 1.0, -1.0)
    with jax.enable_x64(True):
        params = KERNEL.init_params(X)
        K = np.asarray(kernels.gram(KERNEL, params, X))
    return X, y, r.standard_normal((50, 2)), K, params


def cross(X1, X2, params):
    with jax.enable_x64(True):
        return np.asarray(KERNEL.K(params, X1, X2))


def test_one_module_is_the_two_norm_svm(problem):
    X, y, Xt, K, params = problem
    fit = ppl_bsvm.fit(X, y, method="bcsvm", kernel=KERNEL, C=C, module_size=500, query_size=25)
    assert fit.converged and fit.idata.attrs["n_modules"] == 1
    # the 2-norm soft-margin SVM is the hard-margin SVM of the kernel K + I/C: libsvm with a
    # huge box constraint solves it (to its KKT tolerance)
    svc = SVC(kernel="precomputed", C=1e8, tol=1e-10).fit(K + np.eye(len(y)) / C, y)
    a = np.zeros(len(y))
    a[svc.support_] = svc.dual_coef_[0]
    modules = fit.idata["modules"]
    np.testing.assert_allclose(modules["dual_coef"].values, a, atol=1e-5)
    assert modules["intercept"].values[0] == pytest.approx(svc.intercept_[0], abs=1e-6)
    assert np.array_equal(modules["support"].values.astype(bool), a != 0)
    mean, var = fit.predict_latent(Xt)
    np.testing.assert_allclose(mean, cross(Xt, X, params) @ a + svc.intercept_[0], atol=1e-5)
    # its Laplace variance: GP regression on the support vectors with noise 1/C
    S = a != 0
    Ks = cross(Xt, X[S], params)
    expected = KERNEL.variance - np.sum(Ks * np.linalg.solve(K[np.ix_(S, S)] + np.eye(S.sum()) / C, Ks.T).T, 1)
    np.testing.assert_allclose(var, expected, atol=1e-5)
    assert np.all(np.diff(fit.trace["objective"]) <= 1e-12)


def test_bcm_combination_is_eqs_4_and_5(problem):
    X, y, Xt, K, params = problem
    fit = ppl_bsvm.fit(X, y, method="bcsvm", kernel=KERNEL, C=C, module_size=40, query_size=25)
    modules = fit.idata["modules"]
    module, support = modules["module"].values, modules["support"].values.astype(bool)
    a, b = modules["dual_coef"].values, modules["intercept"].values
    M = len(b)
    assert M == 3
    mean, var = fit.predict_latent(Xt)
    for block in (slice(0, 25), slice(25, 50)):  # two query sets
        Xq = Xt[block]
        Kqq = cross(Xq, Xq, params)
        prior = Kqq + 1e-6 * np.mean(np.diag(Kqq)) * np.eye(len(Xq))
        precision = -(M - 1) * np.linalg.inv(prior)
        rhs = 0.0
        for i in range(M):
            rows = np.flatnonzero(module == i)
            sv = rows[support[rows]]
            E = cross(Xq, X[rows], params) @ a[rows] + b[i]
            Kqs = cross(Xq, X[sv], params)
            cov = prior - Kqs @ np.linalg.solve(K[np.ix_(sv, sv)] + np.eye(len(sv)) / C, Kqs.T)
            precision += np.linalg.inv(cov)
            rhs = rhs + np.linalg.solve(cov, E)
        np.testing.assert_allclose(mean[block], np.linalg.solve(precision, rhs), atol=1e-8)
        np.testing.assert_allclose(var[block], np.diag(np.linalg.inv(precision)), atol=1e-8)
    # the plain average of the module outputs (paper Fig. 1, dashed)
    avg = ppl_bsvm.fit(X, y, method="bcsvm", kernel=KERNEL, C=C, module_size=40, combine="average")
    outputs = [cross(Xt, X[module == i], params) @ a[module == i] + b[i] for i in range(M)]
    np.testing.assert_allclose(avg.predict_latent(Xt)[0], np.mean(outputs, axis=0), atol=1e-10)


def test_partition_is_stratified_and_balanced():
    y = np.r_[np.ones(70), -np.ones(31)]
    index, valid = partition(y, 20, seed=0)
    assert index.shape[0] == 6
    sizes = valid.sum(1)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 101
    used = index[valid]
    assert np.array_equal(np.sort(used), np.arange(101))
    positives = np.array([np.sum(y[index[i][valid[i]]] > 0) for i in range(6)])
    assert positives.max() - positives.min() <= 1


def test_a_module_with_one_class_is_refused(problem):
    X, y, *_ = problem
    y = np.where(np.arange(len(y)) < 3, 1.0, -1.0)
    with pytest.raises(ValueError, match="module_size"):
        ppl_bsvm.fit(X, y, method="bcsvm", kernel=KERNEL, module_size=20)
