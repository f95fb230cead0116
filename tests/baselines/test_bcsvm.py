"""BC-SVM: one module is the 2-norm SVM (checked with libsvm); the BCM combination is eqs. 4-5."""

import pickle

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
    """The RBF kernel's ``k(X1, X2)`` written out in numpy (the checks call it for many
    shapes, each of which would compile the library's kernel anew)."""
    d2 = np.sum((X1[:, None, :] - X2[None, :, :]) ** 2, axis=-1)
    scale = np.exp(2.0 * float(params["log_lengthscale"]))
    return np.exp(float(params["log_variance"])) * np.exp(-0.5 * d2 / scale)


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
    # the SVM's bias is the GLS bias of GP regression on the support vectors with noise 1/C
    S = a != 0
    Kc = K[np.ix_(S, S)] + np.eye(S.sum()) / C
    ones = np.ones(S.sum())
    gls = ones @ np.linalg.solve(Kc, y[S]) / (ones @ np.linalg.solve(Kc, ones))
    assert modules["intercept"].values[0] == pytest.approx(gls, abs=1e-8)
    # its Laplace variance: GPML eq. 2.42, GP regression on the support vectors with noise 1/C
    # and a flat prior on the bias
    Ks = cross(Xt, X[S], params)
    R = 1.0 - Ks @ np.linalg.solve(Kc, ones)
    expected = (KERNEL.variance - np.sum(Ks * np.linalg.solve(Kc, Ks.T).T, 1)
                + R**2 / (ones @ np.linalg.solve(Kc, ones)))
    np.testing.assert_allclose(var, expected, atol=1e-5)
    assert np.all(np.diff(fit.trace["objective"]) <= 1e-12)


def bcm_brute_force(Xq, X, y, K, params, module, support, s2, jitter=1e-6):
    """Paper eqs. 4-5 over ``h = f + b`` with the bias prior ``N(0, s2)``, by explicit inverses
    of the dense finite-``s2`` covariances: prior ``Sigma + s2 1 1^T``, module posteriors of GP
    regression on the support vectors with noise ``1/C``."""
    Kqq = cross(Xq, Xq, params)
    prior = Kqq + jitter * np.mean(np.diag(Kqq)) * np.eye(len(Xq)) + s2
    M = module.max() + 1
    precision = -(M - 1) * np.linalg.inv(prior)
    rhs = 0.0
    for i in range(M):
        sv = np.flatnonzero((module == i) & support)
        Kqs = cross(Xq, X[sv], params) + s2
        inv = np.linalg.inv(K[np.ix_(sv, sv)] + np.eye(len(sv)) / C + s2)
        cov_inv = np.linalg.inv(prior - Kqs @ inv @ Kqs.T)
        precision += cov_inv
        rhs = rhs + cov_inv @ (Kqs @ inv @ y[sv])
    cov = np.linalg.inv(precision)
    return cov @ rhs, np.diag(cov)


@pytest.mark.parametrize("module_size", [40, 10])  # modules larger / smaller than query sets
def test_bcm_combination_is_eqs_4_and_5(problem, module_size):
    X, y, Xt, K, params = problem
    fit = ppl_bsvm.fit(X, y, method="bcsvm", kernel=KERNEL, C=C, module_size=module_size,
                       query_size=25)
    modules = fit.idata["modules"]
    module, support = modules["module"].values, modules["support"].values.astype(bool)
    a, b = modules["dual_coef"].values, modules["intercept"].values
    M = len(b)
    assert M == 120 // module_size
    mean, var = fit.predict_latent(Xt)
    for block in (slice(0, 25), slice(25, 50)):  # two query sets
        Xq = Xt[block]
        # the flat bias prior is the limit s2 -> inf; the brute force converges as 1/s2 (until
        # the round-off of the explicit inverses, which grows with s2, takes over near 1e4), so
        # two values and Richardson extrapolation reach the limit to ~1e-7
        m2, v2 = bcm_brute_force(Xq, X, y, K, params, module, support, 1e2)
        m3, v3 = bcm_brute_force(Xq, X, y, K, params, module, support, 1e3)
        assert np.max(np.abs(m3 - mean[block])) < 0.2 * np.max(np.abs(m2 - mean[block]))
        np.testing.assert_allclose(mean[block], (10 * m3 - m2) / 9, atol=1e-6)
        np.testing.assert_allclose(var[block], (10 * v3 - v2) / 9, atol=1e-6)
        # the module outputs are the SVMs with bias (the s2 -> inf GP means)
        for i in range(M):
            rows = np.flatnonzero(module == i)
            sv = rows[support[rows]]
            Kc = K[np.ix_(sv, sv)] + np.eye(len(sv)) / C + 1e8
            np.testing.assert_allclose(
                cross(Xq, X[rows], params) @ a[rows] + b[i],
                (cross(Xq, X[sv], params) + 1e8) @ np.linalg.solve(Kc, y[sv]), atol=1e-5)
    # the plain average of the module outputs (paper Fig. 1, dashed)
    avg = ppl_bsvm.fit(X, y, method="bcsvm", kernel=KERNEL, C=C, module_size=module_size,
                       combine="average")
    outputs = [cross(Xt, X[module == i], params) @ a[module == i] + b[i] for i in range(M)]
    np.testing.assert_allclose(avg.predict_latent(Xt)[0], np.mean(outputs, axis=0), atol=1e-10)


def test_far_from_the_data_the_biases_are_combined_not_added():
    """Where no module knows anything (k(x, X) = 0), module i predicts N(b_i 1, Sigma + 1 1^T / c_i)
    with c_i = 1^T (K_AA + I/C)^{-1} 1. Along the constant direction the improper prior divides
    nothing out, so the BCM averages the b_i with weights 1 / (sigma^2 + N_Q / c_i) and leaves
    the prior elsewhere; dividing out the bias-free prior would instead add up M biases."""
    r = np.random.default_rng(0)
    X = r.standard_normal((90, 2))
    y = np.where(X[:, 0] + 0.3 * r.standard_normal(90) > 0.8, 1.0, -1.0)  # unbalanced: b < 0
    fit = ppl_bsvm.fit(X, y, method="bcsvm", kernel=KERNEL, C=C, module_size=30, query_size=5)
    modules = fit.idata["modules"]
    module, support = modules["module"].values, modules["support"].values.astype(bool)
    b = modules["intercept"].values
    with jax.enable_x64(True):
        K = np.asarray(kernels.gram(KERNEL, fit.kernel_params, X))
    c = []
    for i in range(len(b)):
        sv = np.flatnonzero((module == i) & support)
        c.append(np.sum(np.linalg.inv(K[np.ix_(sv, sv)] + np.eye(len(sv)) / C)))
    c = np.array(c)
    far = 50.0 + 10.0 * r.standard_normal((5, 2))  # k(far, X) = 0 and k(far, far) = I
    mean, var = fit.predict_latent(far)
    sigma2 = KERNEL.variance * (1 + 1e-6)
    weights = 1.0 / (sigma2 + 5 / c)
    np.testing.assert_allclose(mean, np.sum(weights * b) / np.sum(weights), rtol=1e-8)
    np.testing.assert_allclose(var, sigma2 * (1 - 1 / 5) + 1 / (5 * np.sum(weights)), rtol=1e-8)
    assert np.all(b < -0.1) and np.all(mean > b.min()) and np.all(mean < b.max())


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


def test_estimator_parameters_are_the_engine_options():
    from ppl_bsvm.api import get_engine
    from ppl_bsvm import BCSVMClassifier

    engine = get_engine("gp", "bcsvm").options().as_dict()
    params = BCSVMClassifier().get_params()
    for name, value in params.items():
        if name not in ("kernel", "seed"):
            assert engine[name] == value, name
    assert set(params) - set(engine) == {"kernel", "seed"} and set(engine) <= set(params)


def test_estimator_is_the_engine_and_pickles_exactly(problem):
    X, y, Xt, *_ = problem
    labels = np.where(y > 0, "yes", "no")
    clf = ppl_bsvm.BCSVMClassifier(kernel=KERNEL, C=C, module_size=40, query_size=25,
                                   seed=4)
    clf.fit(X, labels)
    fit = ppl_bsvm.fit(X, y, method="bcsvm", kernel=KERNEL, C=C, module_size=40, query_size=25,
                       seed=4)
    mean, var = fit.predict_latent(Xt)
    np.testing.assert_array_equal(clf.classes_, ["no", "yes"])
    # probit link: the probit-scale probability is the variance-moderated combined mean
    np.testing.assert_allclose(clf.decision_function(Xt), mean / np.sqrt(1.0 + var), atol=1e-9)
    np.testing.assert_allclose(clf.predict_proba(Xt)[:, 1], fit.predict_proba(Xt), atol=1e-12)
    np.testing.assert_array_equal(clf.predict(Xt), np.where(mean > 0, "yes", "no"))
    assert clf.n_iter_ == fit.n_iter and clf.posterior_.idata.attrs["n_modules"] == 3
    assert "BCSVMClassifier" in ppl_bsvm.__all__
    loaded = pickle.loads(pickle.dumps(clf))
    for method in ("predict", "predict_proba", "decision_function"):
        np.testing.assert_array_equal(getattr(loaded, method)(Xt), getattr(clf, method)(Xt))
    with pytest.raises(ValueError, match="combine"):
        ppl_bsvm.BCSVMClassifier(combine="median").fit(X, labels)
    with pytest.raises(ValueError, match="BCSVMClassifier needs exactly two classes"):
        ppl_bsvm.BCSVMClassifier().fit(X, np.arange(len(X)) % 3)
