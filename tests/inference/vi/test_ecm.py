"""ECM against independent checks: its fixed point is the SVM without bias at C = 2 gamma."""

import jax
import numpy as np
import pytest
from scipy.optimize import minimize

import ppl_bsvm
from ppl_bsvm import kernels


def svm_dual_without_bias(K, y, C):
    """max sum(a) - a^T Y K Y a / 2, 0 <= a <= C (no equality constraint), by L-BFGS-B."""
    Q = y[:, None] * K * y[None, :]
    res = minimize(
        lambda a: (0.5 * a @ Q @ a - a.sum(), Q @ a - 1.0),
        np.zeros(len(y)),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, C)] * len(y),
        options={"maxiter": 100000, "maxfun": 100000, "ftol": 1e-16, "gtol": 1e-12},
    )
    return K @ (y * res.x)


def map_objective(K, y, f, gamma):
    return -0.5 * f @ np.linalg.solve(K, f) - 2 * gamma * np.maximum(0, 1 - y * f).sum()


@pytest.mark.parametrize("gamma", [1.0, 0.3])
def test_gp_ecm_fixed_point_is_svm_without_bias(heart, gamma):
    X, y = heart
    X, y = X[:120], y[:120]
    fit = ppl_bsvm.fit(X, y, model="gp", method="ecm", kernel=kernels.RBF(lengthscale=3.0),
                       gamma=gamma, tol=1e-14, max_iter=20000)
    with jax.enable_x64(True):
        K = np.asarray(kernels.gram(fit.kernel, fit.kernel_params, X))
    f_ecm = fit.idata["approximation"]["f_mean"].values
    f_svm = svm_dual_without_bias(K, y, C=2 * gamma)
    # objectives agree to 1e-7 relative; the fields to 1e-3 (slow approach of margin points)
    assert map_objective(K, y, f_ecm, gamma) == pytest.approx(map_objective(K, y, f_svm, gamma), rel=1e-7)
    np.testing.assert_allclose(f_ecm, f_svm, atol=1e-3)


def test_objective_never_decreases(heart):
    X, y = heart
    fit = ppl_bsvm.fit(X, y, model="gp", method="ecm", max_iter=300)
    assert np.all(np.diff(fit.trace["objective"]) >= -1e-9 * np.abs(fit.trace["objective"][1:]))


def test_linear_ecm_equals_gp_ecm_with_linear_kernel(heart):
    X, y = heart
    lin = ppl_bsvm.fit(X, y, model="linear", method="ecm", intercept=False, prior_scale=0.8, tol=1e-13)
    gp = ppl_bsvm.fit(X, y, model="gp", method="ecm", kernel=kernels.Linear(variance=0.64), jitter=0.0, tol=1e-13)
    np.testing.assert_allclose(gp.idata["approximation"]["f_mean"].values, lin.predict_latent(X)[0], atol=1e-6)
    # the Gaussian at the ECM point agrees too: same latent variance at new inputs
    Xn = X[:5] + 0.1
    np.testing.assert_allclose(gp.predict_latent(Xn)[1], lin.predict_latent(Xn)[1], rtol=1e-5)


def test_linear_ecm_with_intercept_has_named_coefficients(heart):
    X, y = heart
    fit = ppl_bsvm.fit(X, y, model="linear", method="ecm", num_draws=400)
    beta = fit.posterior["beta"]
    assert beta.dims == ("chain", "draw", "feature") and beta.shape == (1, 400, 14)
    assert list(beta.feature.values)[-1] == "intercept"
    # the stored draws come from the stored Gaussian
    approx = fit.idata["approximation"]
    se = np.sqrt(np.diag(approx["beta_cov"].values) / 400)
    assert np.all(np.abs(beta.mean(("chain", "draw")).values - approx["beta_mean"].values) < 5 * se)


def test_iteration_cap_is_reported(heart):
    X, y = heart
    fit = ppl_bsvm.fit(X, y, model="gp", method="ecm", max_iter=3)
    assert fit.stop_reason == "max_iter" and fit.n_iter == 3 and not fit.converged


def test_gp_draws_match_conditional_gaussian(heart):
    X, y = heart
    fit = ppl_bsvm.fit(X[:80], y[:80], model="gp", method="ecm", num_draws=4000, seed=5)
    f = fit.posterior["f"].values[0]
    approx = fit.idata["approximation"]
    se_mean = np.sqrt(approx["f_var"].values / 4000)
    assert np.all(np.abs(f.mean(0) - approx["f_mean"].values) < 5 * se_mean + 1e-9)
    var_ok = np.abs(f.var(0) - approx["f_var"].values) < 5 * approx["f_var"].values * np.sqrt(2 / 4000) + 1e-9
    assert var_ok.all()
