import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from ppl_bsvm import kernels
from ppl_bsvm.inference import gaussian
from ppl_bsvm.inference.inducing import (
    INDUCING_KMEANS_TOL,
    choose_inducing,
    kmeans,
    inducing_prior,
    kl_to_prior,
    marginals,
    project,
)


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


@pytest.fixture
def setup(rng):
    X = rng.standard_normal((40, 2))
    k = kernels.RBF(lengthscale=1.2, variance=0.8)
    return X, k, k.init_params(X)


def test_kl_against_scipy_entropy_formula(rng):
    m = 4
    A = rng.standard_normal((m, m))
    Kmm = A @ A.T + m * np.eye(m)
    B = rng.standard_normal((m, m))
    S = 0.3 * B @ B.T + 0.5 * np.eye(m)
    mu = rng.standard_normal(m)
    from ppl_bsvm.inference.inducing import InducingPrior

    prior = InducingPrior(jnp.zeros((m, 1)), jnp.asarray(Kmm), jnp.linalg.cholesky(Kmm))
    # KL = E_q[log q - log p] by Monte Carlo would be noisy; use the textbook closed form
    Ki = np.linalg.inv(Kmm)
    ref = 0.5 * (np.trace(Ki @ S) + mu @ Ki @ mu - m + np.linalg.slogdet(Kmm)[1] - np.linalg.slogdet(S)[1])
    assert float(kl_to_prior(jnp.asarray(mu), jnp.asarray(S), prior)) == pytest.approx(ref, rel=1e-10)
    # and it equals -entropy - cross entropy computed by scipy
    cross = -stats.multivariate_normal(np.zeros(m), Kmm).logpdf(mu) + 0.5 * np.trace(Ki @ S)
    assert ref == pytest.approx(cross - stats.multivariate_normal(mu, S).entropy(), rel=1e-10)


def test_inducing_at_training_points_reproduces_the_full_gp(setup):
    X, k, params = setup
    K = kernels.gram(k, params, jnp.asarray(X))
    prior = inducing_prior(k, params, jnp.asarray(X))
    proj = project(k, params, prior, jnp.asarray(X))
    # kappa is only the identity up to the jitter of Kmm (K is ill-conditioned), but it
    # satisfies its definition kappa Kmm = Knm, and Ktilde is of the order of the jitter
    np.testing.assert_allclose(proj.kappa @ prior.Kmm, k.K(params, X, X), atol=1e-10)
    assert float(jnp.max(proj.ktilde)) < 1e-5
    # a GP posterior N(mu, Sigma) over u = f(X) has the same marginals at X
    fac = gaussian.factor(K, jnp.full(40, 0.3))
    mu, _ = gaussian.posterior_mean(K, fac, jnp.asarray(np.sign(X[:, 0])))
    Sigma = gaussian.posterior_cov(K, fac)
    mean, var = marginals(proj, mu, Sigma)
    np.testing.assert_allclose(mean, mu, atol=1e-5)
    np.testing.assert_allclose(var, jnp.diag(Sigma), atol=1e-5)


def test_projection_against_dense_formula(setup):
    X, k, params = setup
    Z = jnp.asarray(X[:7])
    prior = inducing_prior(k, params, Z)
    proj = project(k, params, prior, jnp.asarray(X))
    Knm = np.asarray(k.K(params, X, Z))
    kappa = Knm @ np.linalg.inv(np.asarray(prior.Kmm))
    np.testing.assert_allclose(proj.kappa, kappa, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(proj.ktilde, 0.8 - np.sum(kappa * Knm, axis=1), atol=1e-10)


@pytest.mark.parametrize("method", ["kmeans", "random"])
def test_choose_inducing(rng, method):
    X = np.concatenate([rng.normal(-3, 0.1, (50, 2)), rng.normal(3, 0.1, (50, 2))])
    Z = choose_inducing(X, 2, method=method, seed=0)
    assert Z.shape == (2, 2)
    np.testing.assert_array_equal(Z, choose_inducing(X, 2, method=method, seed=0))
    if method == "kmeans":  # one centre per cluster
        np.testing.assert_allclose(np.sort(Z[:, 0]), [-3, 3], atol=0.1)
    with pytest.raises(ValueError, match="exceeds"):
        choose_inducing(X, 101)
    with pytest.raises(ValueError, match="inducing must be one of"):
        choose_inducing(X, 2, method="grid")


def _inertia(X, C):
    return float(np.sum(np.min(((X[:, None, :] - C[None]) ** 2).sum(-1), axis=1)))


@pytest.mark.parametrize("m", [5, 40])
def test_kmeans_is_as_good_as_scikit_learns(rng, m):
    """Same objective as scikit-learn's KMeans (k-means++, one initialisation) within 3 %,
    median over seeds; the fixed point is one: every centre is the mean of its points."""
    from sklearn.cluster import KMeans

    centres = rng.normal(0, 4, (8, 3))
    X = centres[rng.integers(0, 8, 600)] + rng.normal(0, 1.0, (600, 3))
    ours = [_inertia(X, kmeans(X, m, seed)) for seed in range(5)]
    theirs = [_inertia(X, KMeans(m, n_init=1, random_state=seed, max_iter=100).fit(X)
                       .cluster_centers_) for seed in range(5)]
    assert np.median(ours) <= 1.03 * np.median(theirs)
    Z = kmeans(X, m, 0)
    labels = np.argmin(((X[:, None, :] - Z[None]) ** 2).sum(-1), axis=1)
    for j in np.unique(labels):
        np.testing.assert_allclose(Z[j], X[labels == j].mean(axis=0), atol=1e-10)
    # padded rows (weight 0; zeros of the centred data, i.e. at its mean) never become
    # centres or move them
    assert not np.any(np.all(Z == X.mean(0), axis=1))


def test_kmeans_moves_with_an_offset_shared_by_its_inputs(rng):
    """k-means is translation-equivariant; its distances' expansion is not, on raw inputs
    (issue 34: inducing points of X + 1e8 were round-off). It centres its data."""
    X = rng.standard_normal((300, 3))
    np.testing.assert_allclose(kmeans(X + 1e8, 12, 0) - 1e8, kmeans(X, 12, 0), atol=1e-6)


def test_inducing_kmeans_stops_once_the_potential_settles(rng):
    """choose_inducing stops Lloyd's iterations at a relative decrease of the potential of
    INDUCING_KMEANS_TOL: the potential is then within a few per cent of the fixed point's
    (each further iteration would have gained less than 0.1 %), and it is what choose_inducing
    returns."""
    X = rng.standard_normal((3000, 6)) * np.linspace(0.5, 2.0, 6)
    full = _inertia(X, kmeans(X, 30, 0))
    early = kmeans(X, 30, 0, tol=INDUCING_KMEANS_TOL)
    assert full <= _inertia(X, early) <= 1.03 * full
    np.testing.assert_array_equal(choose_inducing(X, 30, seed=0), early)
    # a looser tolerance stops no later: its potential is no lower
    assert _inertia(X, kmeans(X, 30, 0, tol=0.05)) >= _inertia(X, early)
