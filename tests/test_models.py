"""The NumPyro models against quadrature: the augmented and marginal forms are one model."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer.util import log_density
from scipy import integrate, stats

from ppl_bsvm import kernels, models


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _quad_positive(fn):
    """``int_0^inf fn(lam) dlam`` with ``lam = t^2`` (smooth at 0 where fn ~ lam^-1/2)."""
    value, err = integrate.quad(lambda t: 2.0 * t * fn(t * t), 0.0, np.inf, limit=400,
                                epsabs=0.0, epsrel=1e-11)
    return value


@pytest.mark.parametrize("gamma", [1.0, 0.4, 2.5])
@pytest.mark.parametrize("r", [-2.0, -0.3, 0.0, 0.2, 1.7])
def test_augmentation_identity_by_quadrature(r, gamma):
    # y = 1, f = 1 - r:  int N(1 + lam; f, lam / gamma) dlam = exp(-2 gamma max(0, r))
    f = 1.0 - r
    value = _quad_positive(lambda lam: stats.norm.pdf(1.0 + lam, f, np.sqrt(lam / gamma)))
    assert value == pytest.approx(np.exp(-2.0 * gamma * max(0.0, r)), rel=1e-9)


@pytest.mark.parametrize(
    "mean, var, y, gamma",
    [(0.3, 0.5, 1.0, 1.0), (-1.2, 2.0, 1.0, 0.5), (2.5, 1e-4, -1.0, 1.0), (0.9, 1e-10, 1.0, 2.0),
     (1.0, 1e-12, 1.0, 1.0), (-0.4, 30.0, -1.0, 1.3), (4.0, 0.2, -1.0, 3.0)],
)
def test_log_expected_pseudo_likelihood_by_quadrature(mean, var, y, gamma):
    sd = np.sqrt(var)
    lik = lambda f: np.exp(-2.0 * gamma * max(0.0, 1.0 - y * f)) * stats.norm.pdf(f, mean, sd)  # noqa: E731
    lo, hi = mean - 40 * sd, mean + 40 * sd
    pts = [p for p in (1.0, -1.0) if lo < p < hi]
    expected = integrate.quad(lik, lo, hi, points=pts, limit=400, epsabs=0.0, epsrel=1e-12)[0]
    got = float(models.log_expected_pseudo_likelihood(mean, var, y, gamma))
    assert got == pytest.approx(np.log(expected), abs=1e-9, rel=1e-9)


def test_log_expected_pseudo_likelihood_tends_to_the_hinge():
    m = jnp.linspace(-3, 3, 13)
    got = models.log_expected_pseudo_likelihood(m, 1e-14, 1.0, 0.7)
    np.testing.assert_allclose(got, -1.4 * np.maximum(0, 1 - np.asarray(m)), atol=1e-6)


# --- the NumPyro models: integrating lam out of the augmented model gives the marginal one ----

def _two_point_problem():
    X = np.array([[0.8, -0.3], [-0.5, 1.1]])
    y = np.array([1.0, -1.0])
    return X, y


def _model_case(name):
    """(model, args, kwargs, latent values) with margins on both sides of 1."""
    X, y = _two_point_problem()
    kernel = kernels.RBF(lengthscale=0.9, variance=1.3)
    if name == "linear":
        return models.linear_bsvm, (X, y), {"prior_scale": 1.5}, {"beta": jnp.array([2.0, 0.5])}
    if name == "gp":
        kw = {"kernel": kernel, "whiten": False}
        return models.gp_bsvm, (X, y), kw, {"f": jnp.array([1.3, 0.2])}
    Z = np.array([[0.1, 0.2], [1.0, -1.0], [-1.0, 0.5]])
    kw = {"kernel": kernel, "inducing": Z, "whiten": False}
    return models.sparse_gp_bsvm, (X, y), kw, {"u": jnp.array([0.7, -0.4, 1.2])}


@pytest.mark.parametrize("name", ["linear", "gp", "sparse_gp"])
@pytest.mark.parametrize("gamma", [1.0, 0.6])
def test_augmented_model_integrates_to_the_marginal_model(name, gamma):
    model, args, kwargs, latent = _model_case(name)

    @jax.jit
    def joint(lam):
        return log_density(model, args, {**kwargs, "augmented": True, "gamma": gamma},
                           {**latent, "lam": lam})[0]

    marginal = float(log_density(model, args, {**kwargs, "augmented": False, "gamma": gamma},
                                 latent)[0])
    c = 1.0  # the other point's lam is held at c; log I1 + log I2 - A(c, c) = marginal
    ref = float(joint(jnp.array([c, c])))
    logs = []
    for i in range(2):
        def integrand(lam, i=i):
            lam_vec = jnp.array([lam, c]) if i == 0 else jnp.array([c, lam])
            return np.exp(float(joint(lam_vec)) - ref)

        logs.append(np.log(_quad_positive(integrand)) + ref)
    assert logs[0] + logs[1] - ref == pytest.approx(marginal, abs=1e-8)


def test_sparse_model_at_the_training_inputs_is_the_gp_model():
    X, y = _two_point_problem()
    X = np.vstack([X, [[0.3, 0.4]]])
    y = np.append(y, 1.0)
    kernel = kernels.RBF(lengthscale=1.1)
    f1, f2 = jnp.array([0.5, -1.2, 2.0]), jnp.array([1.5, 0.1, -0.3])

    def diff(model, site, **kw):
        lp = lambda v: float(log_density(model, (X, y), {"kernel": kernel, "whiten": False, **kw},  # noqa: E731
                                         {site: v})[0])
        return lp(f1) - lp(f2)

    gp = diff(models.gp_bsvm, "f", jitter=1e-10)
    sparse = diff(models.sparse_gp_bsvm, "u", inducing=X, jitter=1e-10)
    assert sparse == pytest.approx(gp, abs=1e-6)


def test_whitened_gp_model_is_the_same_model():
    X, y = _two_point_problem()
    kernel = kernels.RBF(lengthscale=0.7)
    K = kernels.gram(kernel, kernel.init_params(), jnp.asarray(X))
    L = jnp.linalg.cholesky(K)
    v1, v2 = jnp.array([0.3, -1.0]), jnp.array([-0.8, 0.4])
    tr = handlers.trace(handlers.substitute(models.gp_bsvm, {"f_whitened": v1})).get_trace(
        X, y, kernel
    )
    np.testing.assert_allclose(tr["f"]["value"], L @ v1, rtol=1e-12)

    def lp(whiten, v):
        params = {"f_whitened": v} if whiten else {"f": L @ v}
        return float(log_density(models.gp_bsvm, (X, y), {"kernel": kernel, "whiten": whiten}, params)[0])

    # same density up to the constant Jacobian log|L|
    assert lp(True, v1) - lp(True, v2) == pytest.approx(lp(False, v1) - lp(False, v2), abs=1e-10)
    assert lp(True, v1) - lp(False, v1) == pytest.approx(float(jnp.sum(jnp.log(jnp.diag(L)))), abs=1e-10)


def test_linear_model_log_density_by_hand():
    X, y = _two_point_problem()
    beta = jnp.array([0.4, -0.9])
    got = float(log_density(models.linear_bsvm, (X, y), {"prior_scale": 2.0, "gamma": 0.5},
                            {"beta": beta})[0])
    margins = y * (X @ np.asarray(beta))
    expected = stats.norm.logpdf(np.asarray(beta), 0, 2.0).sum() - np.maximum(0, 1 - margins).sum()
    assert got == pytest.approx(expected, abs=1e-12)


# --- hyperparameter priors ------------------------------------------------------------------

def test_hyperpriors_become_sites_and_change_the_kernel():
    X, y = _two_point_problem()
    kernel = kernels.RBF(ard=True)
    priors = {"lengthscale": dist.LogNormal(0.0, 1.0), "variance": dist.LogNormal(0.0, 0.5)}
    tr = handlers.trace(handlers.seed(models.gp_bsvm, 0)).get_trace(X, y, kernel, hyperpriors=priors)
    assert tr["lengthscale"]["value"].shape == (2,)  # scalar prior expanded over ARD dims
    assert tr["variance"]["value"].shape == ()
    f = jnp.array([0.4, 0.2])

    def lp(ell):
        params = {"f": f, "lengthscale": jnp.array([ell, 1.0]), "variance": jnp.array(1.0)}
        return float(log_density(models.gp_bsvm, (X, y),
                                 {"kernel": kernel, "hyperpriors": priors, "whiten": False}, params)[0])

    # log density = hyperprior + GP prior of f under that kernel + hinge: check by hand
    for ell in (0.5, 2.0):
        K = kernels.gram(kernel, {"log_lengthscale": jnp.log(jnp.array([ell, 1.0])),
                                  "log_variance": jnp.array(0.0)}, jnp.asarray(X))
        expected = (stats.lognorm.logpdf([ell, 1.0], 1.0).sum() + stats.lognorm.logpdf(1.0, 0.5)
                    + stats.multivariate_normal.logpdf(np.asarray(f), cov=np.asarray(K))
                    - 2 * np.maximum(0, 1 - y * np.asarray(f)).sum())
        assert lp(ell) == pytest.approx(expected, abs=1e-9)


def test_unknown_hyperprior_is_an_error():
    X, y = _two_point_problem()
    with pytest.raises(ValueError, match="no positive hyperparameter 'period'.*lengthscale"):
        handlers.seed(models.gp_bsvm, 0)(X, y, kernels.RBF(), hyperpriors={"period": dist.LogNormal(0, 1)})


def test_kernel_params_with_nested_kernels():
    kernel = kernels.RBF(lengthscale=2.0) + kernels.Linear(variance=0.5)
    params = kernel.init_params()
    assert models.hyperparameter_names(kernel, params) == ["k1_lengthscale", "k1_variance", "k2_variance"]
    new = models.kernel_params_with(kernel, params, {"k1_lengthscale": 3.0, "k2_variance": 0.25})
    natural = kernel.constrain(new)
    assert float(natural["k1_lengthscale"]) == pytest.approx(3.0)
    assert float(natural["k2_variance"]) == pytest.approx(0.25)
    assert float(natural["k1_variance"]) == pytest.approx(1.0)
