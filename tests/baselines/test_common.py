"""Shared pieces of the baselines: registry, links, kernels for scikit-learn, bad options."""

import jax
import numpy as np
import pytest
from scipy import integrate, special, stats

import ppl_bsvm
from ppl_bsvm import kernels
from ppl_bsvm.baselines._common import to_sklearn_kernel
from ppl_bsvm.baselines._likelihoods import logistic_gaussian


def test_every_baseline_is_registered():
    methods = set(zip(ppl_bsvm.list_methods()["model"], ppl_bsvm.list_methods()["method"]))
    for name in ("platt", "gpc", "gpc_sklearn", "svgp", "bcsvm", "rvm"):
        assert ("gp", name) in methods
    assert ("sparse_gp", "svgp") in methods


@pytest.mark.parametrize("var", [0.0, 1e-6, 0.3, 3.9, 4.1, 50.0, 1e4])
def test_logistic_gaussian_against_adaptive_quadrature(var):
    means = np.array([-25.0, -3.0, -0.4, 0.0, 1.0, 7.0])
    with jax.enable_x64(True):
        got = np.asarray(logistic_gaussian(means, np.full(6, var)))
    for m, g in zip(means, got):
        if var == 0:
            ref = special.expit(m)
        else:
            sd = np.sqrt(var)
            ref = integrate.quad(lambda f: special.expit(f) * stats.norm.pdf(f, m, sd),
                                 m - 14 * sd, m + 14 * sd, points=[0.0] if abs(m) < 14 * sd else None,
                                 limit=500, epsabs=1e-14)[0]
        assert g == pytest.approx(ref, abs=1e-9)


@pytest.mark.parametrize(
    "kernel",
    [
        kernels.RBF(lengthscale=1.3, variance=2.0),
        kernels.RBF(lengthscale=(0.5, 2.0, 1.0), ard=True),
        kernels.Matern32(lengthscale=0.7),
        kernels.Matern52(lengthscale=1.1, variance=0.5),
        kernels.Linear(variance=0.3),
        kernels.Polynomial(degree=3, scale=0.5, offset=2.0),
        kernels.RBF(lengthscale=1.0) + kernels.Constant(0.4),
        kernels.RBF(lengthscale=1.0) * kernels.Linear(),
    ],
)
def test_kernels_translate_to_scikit_learn(kernel, rng):
    X, Y = rng.standard_normal((7, 3)), rng.standard_normal((4, 3))
    with jax.enable_x64(True):
        params = kernel.init_params(X)
        ours = np.asarray(kernel.K(params, X, Y))
    np.testing.assert_allclose(to_sklearn_kernel(kernel, params)(X, Y), ours, rtol=1e-12, atol=1e-12)


def test_sigmoid_kernel_has_no_gp_counterpart(toy2d):
    X, y = toy2d
    with pytest.raises(ValueError, match="no scikit-learn Gaussian-process counterpart"):
        ppl_bsvm.fit(X, y, method="gpc_sklearn", kernel="sigmoid")


@pytest.mark.parametrize(
    "method, options, message",
    [
        ("platt", {"C": 0.0}, "C must be"),
        ("platt", {"cv": 1}, "cv must be"),
        ("platt", {"cv": 40}, "cv=40 folds"),
        ("gpc", {"approximation": "vb"}, "approximation must be"),
        ("gpc", {"likelihood": "cauchy"}, "likelihood must be"),
        ("gpc", {"damping": 1.5}, "damping must be"),
        ("gpc", {"link": "cloglog"}, "link must be"),
        ("gpc", {"num_draws": 0}, "num_draws"),
        ("gpc_sklearn", {"max_iter_predict": 0}, "max_iter_predict"),
        ("svgp", {"batch_size": 1000}, "batch_size=1000 exceeds"),
        ("svgp", {"num_inducing": 0}, "num_inducing"),
        ("svgp", {"num_inducing": 100}, "num_inducing=100 exceeds"),
        ("svgp", {"inducing": "grid"}, "inducing must be"),
        ("svgp", {"inducing_points": np.zeros((3, 5))}, "inducing_points has 5 features"),
        ("svgp", {"step_size": 2.0}, "step_size"),
        ("svgp", {"learn_hyperparameters": "yes"}, "learn_hyperparameters"),
        ("bcsvm", {"module_size": 1}, "module_size"),
        ("bcsvm", {"query_size": 0}, "query_size"),
        ("bcsvm", {"combine": "max"}, "combine must be"),
        ("bcsvm", {"C": -1.0}, "C must be"),
        ("rvm", {"algorithm": "em"}, "algorithm must be"),
        ("rvm", {"bias": "no"}, "bias must be"),
        ("rvm", {"tol": -1.0}, "tol must be"),
    ],
)
def test_bad_options_raise_value_errors_naming_them(toy2d, method, options, message):
    X, y = toy2d
    with pytest.raises(ValueError, match=message):
        ppl_bsvm.fit(X, y, method=method, kernel=kernels.RBF(lengthscale=1.0), **options)
