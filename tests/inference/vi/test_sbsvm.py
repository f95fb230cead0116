"""S-BSVM (paper Alg. 1): the batch limit, Alg. 1's own update, predictions, options."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm import kernels
from ppl_bsvm.inference.inducing import inducing_prior, project

KERNEL = kernels.RBF(lengthscale=1.3, variance=1.5)


def _compilations_per_call(monkeypatch, module, name: str) -> list[int]:
    """Patch ``module.name`` to record how many programs each of its calls compiles (or
    loads from the persistent cache); calls inside another program's trace pass uncounted."""
    from tests._shared import compilations

    real, counts = getattr(module, name), []

    def counted(*args, **kwargs):
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs))):
            return real(*args, **kwargs)
        with compilations() as count:
            out = jax.block_until_ready(real(*args, **kwargs))
        counts.append(count[0])
        return out

    monkeypatch.setattr(module, name, counted)
    return counts


def _toy(n=60, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, 2))
    y = np.where(np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * r.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


@pytest.fixture(scope="module")
def toy():
    return _toy()


@pytest.fixture(scope="module")
def batch_limit(toy):
    """S-BSVM with Z = X, full batches and rho = 1, and B-BSVM on the same problem."""
    X, y = toy
    sparse = ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=KERNEL, inducing=X,
                          batch_size=len(y), learning_rate=1.0, elbo_every=1, tol=1e-13,
                          max_iter=300, num_draws=2000)
    batch = ppl_bsvm.fit(X, y, model="gp", method="vi", kernel=KERNEL, tol=1e-13, max_iter=300,
                         num_draws=10)
    return sparse, batch


def test_inducing_at_training_points_with_full_batches_is_bbsvm(batch_limit):
    sparse, batch = batch_limit
    a, b = sparse.idata["approximation"], batch.idata["approximation"]
    # measured: f means agree to 3e-6, variances to 2e-4 relative (Kmm's jitter), ELBO 1e-7
    np.testing.assert_allclose(a["f_mean"].values, b["f_mean"].values, atol=1e-4)
    np.testing.assert_allclose(a["f_var"].values, b["f_var"].values, rtol=2e-3)
    assert float(a["elbo"]) == pytest.approx(float(b["elbo"]), rel=1e-6)
    # and q(u) is q(f): u sits at the training inputs
    np.testing.assert_allclose(a["u_mean"].values, b["f_mean"].values, atol=1e-4)
    # every sweep of both is the same coordinate ascent: the traces agree from the start
    n = min(len(sparse.trace["elbo_exact"]), len(batch.trace["elbo"]), 20)
    np.testing.assert_allclose(sparse.trace["elbo_exact"][:n], batch.trace["elbo"][:n], rtol=1e-6)
    Xs = np.array([[0.1, 0.2], [-1.0, 2.0]])
    for s, t in zip(sparse.predict_latent(Xs), batch.predict_latent(Xs)):
        np.testing.assert_allclose(s, t, rtol=2e-3, atol=1e-5)


def test_one_step_is_algorithm_1_in_the_unwhitened_parameters(toy):
    """The whitened natural-gradient step equals Alg. 1's update of (eta1, eta2) for q(u), with
    kappa = K_nm Kmm^{-1} and the n / |S| scale, computed here with dense inverses."""
    X, y = toy
    Z = X[:8]
    rho = 0.37
    with jax.enable_x64(True):
        params = KERNEL.init_params(X)
        prior = inducing_prior(KERNEL, params, jnp.asarray(Z))
        proj = project(KERNEL, params, prior, jnp.asarray(X))
    kappa, ktilde = np.asarray(proj.kappa), np.asarray(proj.ktilde)
    Kmm = np.asarray(prior.Kmm)
    Kinv = np.linalg.inv(Kmm)
    # two steps with full batches: the first from the prior q(u) = N(0, Kmm)
    fit = ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=KERNEL, inducing=Z,
                       batch_size=len(y), learning_rate=rho, max_iter=2, tol=1e-300,
                       elbo_every=1, num_draws=10, polish=False)  # the steps themselves
    eta1, eta2 = np.zeros(8), -0.5 * Kinv
    for _ in range(2):
        zeta = np.linalg.inv(-2 * eta2)
        mu = zeta @ eta1
        m = kappa @ mu
        s = np.einsum("ij,jk,ik->i", kappa, zeta, kappa) + ktilde
        alpha = (1 - y * m) ** 2 + s
        eta1_hat = kappa.T @ (y * (1 + alpha**-0.5))
        eta2_hat = -0.5 * (Kinv + (kappa.T * alpha**-0.5) @ kappa)
        eta1 = (1 - rho) * eta1 + rho * eta1_hat
        eta2 = (1 - rho) * eta2 + rho * eta2_hat
    zeta = np.linalg.inv(-2 * eta2)
    a = fit.idata["approximation"]
    np.testing.assert_allclose(a["u_mean"].values, zeta @ eta1, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(a["u_cov"].values, zeta, rtol=1e-6, atol=1e-9)


def test_minibatch_svi_approaches_the_full_batch_fixed_point(toy):
    X, y = toy
    Z = X[::4]
    full = ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=KERNEL, inducing=Z,
                        batch_size=len(y), learning_rate=1.0, tol=1e-12, max_iter=300,
                        elbo_every=1, num_draws=10)
    mini = ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=KERNEL, inducing=Z,
                        batch_size=12, tol=1e-300, max_iter=4000, elbo_every=100, seed=2,
                        num_draws=10, polish=False)  # the minibatch iterates themselves
    a, b = full.idata["approximation"], mini.idata["approximation"]
    sd = np.sqrt(a["f_var"].values)
    # measured: means within 0.02 posterior sd, ELBO within 0.01 after 4000 steps
    assert np.max(np.abs(b["f_mean"].values - a["f_mean"].values) / sd) < 0.1
    np.testing.assert_allclose(b["f_var"].values, a["f_var"].values, rtol=0.05)
    assert mini.trace["elbo_exact"][-1] == pytest.approx(float(a["elbo"]), abs=0.05)
    assert mini.stop_reason == "max_iter"


def test_predictive_variance_has_the_plus_sign(batch_limit, toy):
    """Latent predictive against Monte Carlo: u ~ q(u) (the stored draws), f* | u ~ p(f* | u)."""
    sparse, _ = batch_limit
    X, _ = toy
    Xs = np.array([[0.3, -0.2], [1.0, 1.5], [-2.0, 0.4]])
    a = sparse.idata["approximation"]
    Z = a["Z"].values
    with jax.enable_x64(True):
        params = sparse.kernel_params
        prior = inducing_prior(KERNEL, params, jnp.asarray(Z))
        proj = project(KERNEL, params, prior, jnp.asarray(Xs))
    kappa, ktilde = np.asarray(proj.kappa), np.asarray(proj.ktilde)
    u = sparse.posterior["u"].values[0]
    mc_var = (u @ kappa.T).var(0) + ktilde
    spread = np.einsum("ij,jk,ik->i", kappa, a["u_cov"].values, kappa)
    m, v = sparse.predict_latent(Xs)
    np.testing.assert_allclose(v, ktilde + spread, rtol=1e-6)
    np.testing.assert_allclose(v, mc_var, rtol=5 * np.sqrt(2 / 2000))
    np.testing.assert_allclose(m, kappa @ a["u_mean"].values, rtol=1e-7)
    assert np.all(ktilde - spread < 0.8 * v)  # the published '-' would be far off


def test_fit_contents(batch_limit, toy):
    sparse, _ = batch_limit
    X, y = toy
    post, a = sparse.posterior, sparse.idata["approximation"]
    assert post["u"].dims == ("chain", "draw", "inducing") and post["u"].shape == (1, 2000, 60)
    assert post["f"].shape == (1, 2000, 60)  # n <= STORE_F_MAX_N: f is stored
    assert a["Z"].dims == ("inducing", "input_dim") and a["u_cov"].shape == (60, 60)
    # the f draws are draws of q(f): their moments match f_mean, f_var
    f = post["f"].values[0]
    assert np.all(np.abs(f.mean(0) - a["f_mean"].values) < 5 * np.sqrt(a["f_var"].values / 2000))
    np.testing.assert_allclose(f.var(0), a["f_var"].values, rtol=5 * np.sqrt(2 / 2000))
    assert sparse.model == "gp" and sparse.idata.attrs["f_stored"] == 1
    assert sparse.options["num_inducing"] == 60 and sparse.timings["inducing"] >= 0


def test_sparse_model_name_store_f_and_kmeans(toy):
    X, y = toy
    fit = ppl_bsvm.fit(X, y, model="sparse_gp", method="svi", kernel=KERNEL, num_inducing=10,
                       max_iter=300, store_f=False, num_draws=10)
    assert fit.model == "sparse_gp" and fit.idata.attrs["model"] == "sparse_gp"
    assert "f" not in fit.posterior and fit.posterior["u"].shape == (1, 10, 10)
    assert fit.idata["approximation"]["f_mean"].shape == (60,)
    assert fit.idata.attrs["f_stored"] == 0
    # k-means++ centres are not training points; "random" picks training points
    Z = fit.idata["approximation"]["Z"].values
    assert not any(np.allclose(z, x) for z in Z for x in X)
    rnd = ppl_bsvm.fit(X, y, model="sparse_gp", method="svi", kernel=KERNEL, num_inducing=10,
                       inducing="random", max_iter=300, num_draws=10)
    Zr = rnd.idata["approximation"]["Z"].values
    assert all(any(np.allclose(z, x) for x in X) for z in Zr)


def test_hyperparameter_learning_with_inducing_points_at_the_data_matches_bbsvm(toy):
    """With Z = X and full batches S-BSVM's bound is B-BSVM's: the learned kernels agree."""
    X, y = toy
    batch = ppl_bsvm.fit(X, y, model="gp", method="vi", learn_hyperparameters=True,
                         max_iter=1500, tol=1e-12, num_draws=10)
    sparse = ppl_bsvm.fit(X, y, model="gp", method="svi", inducing=X, batch_size=len(y),
                          learning_rate=1.0, learn_hyperparameters=True, hyper_every=1,
                          hyper_lr=0.05, max_iter=1500, tol=1e-12, elbo_every=10, num_draws=10)
    for name in ("lengthscale", "variance"):
        assert sparse.hyperparameters[name] == pytest.approx(batch.hyperparameters[name], rel=0.02)
    assert sparse.trace["elbo_exact"][-1] == pytest.approx(batch.trace["elbo"][-1], abs=0.01)
    assert sparse.trace["lengthscale"].shape == (sparse.n_iter,)


def test_learning_inducing_locations_moves_them_and_raises_the_elbo(toy, monkeypatch):
    """The locations move and the bound rises; and the inducing prior at the search's answer
    compiles once for both fits, although only the second search hands back its own
    locations (host values, placed as the state's before use: JAX compiles again for
    arguments that differ in commitment alone)."""
    from ppl_bsvm.inference.vi import sbsvm_batch

    X, y = toy
    counts = _compilations_per_call(monkeypatch, sbsvm_batch, "_chol")  # not the search's
    common = dict(model="gp", method="svi", kernel=KERNEL, num_inducing=5, batch_size=30,
                  max_iter=2000, elbo_every=100, tol=1e-300, num_draws=10, seed=4)
    fixed = ppl_bsvm.fit(X, y, learn_hyperparameters=True, **common)
    moved = ppl_bsvm.fit(X, y, learn_hyperparameters=True, learn_inducing=True, **common)
    assert counts[-1] == 0 and len(counts) == 2
    Z0 = fixed.idata["approximation"]["Z"].values
    Z1 = moved.idata["approximation"]["Z"].values
    assert np.max(np.abs(Z1 - Z0)) > 0.05
    assert moved.trace["elbo_exact"][-1] > fixed.trace["elbo_exact"][-1]


@pytest.mark.parametrize("options, message", [
    ({"batch_size": 61}, "batch_size=61 exceeds the number of training points n=60"),
    ({"num_inducing": 61}, "num_inducing=61 exceeds the number of training points n=60"),
    ({"num_inducing": 0}, "num_inducing"),
    ({"inducing": "grid"}, "inducing must be one of"),
    ({"inducing": np.zeros((5, 3))}, "inducing locations have 3 columns"),
    ({"inducing": np.full((5, 2), np.nan)}, "inducing contains"),
    ({"inducing": np.zeros((5, 2)), "num_inducing": 4}, "does not match"),
    ({"learn_inducing": True}, "learn_inducing=True needs learn_hyperparameters=True"),
    ({"learning_rate": 0.0}, "learning_rate"),
    ({"hyper_lr": "big"}, "hyper_lr"),
    ({"store_f": "yes"}, "store_f"),
    ({"elbo_every": 0}, "elbo_every"),
    ({"check_every": 0.0}, "check_every"),
    ({"jitter": -1e-3}, "jitter"),
])
def test_bad_options(toy, options, message):
    X, y = toy
    with pytest.raises(ValueError, match=message):
        ppl_bsvm.fit(X, y, model="gp", method="svi", **options)


def test_user_labels_and_float64(toy):
    X, y = toy
    labels = np.where(y > 0, "yes", "no")
    fit = ppl_bsvm.fit(X, labels, model="gp", method="svi", kernel=KERNEL, num_inducing=10,
                       max_iter=300, num_draws=10)
    p = fit.predict_proba(X)
    assert p.dtype == np.float64 and fit.posterior["u"].dtype == np.float64
    np.testing.assert_array_equal(fit.predict(X), np.where(p >= 0.5, "yes", "no"))
    assert np.mean(fit.predict(X) == labels) > 0.8
    assert not jax.config.jax_enable_x64
    assert "svi" in fit.summary() and fit.converged == (fit.stop_reason == "tol")


def test_a_fit_that_learns_its_hyperparameters_reuses_the_programs_after_its_search(
        monkeypatch):
    """The hyperparameter search hands back host values (uncommitted arrays), the loop's state
    is committed, and JAX compiles again for arguments that differ in commitment alone: the
    fit's marginals at the training rows and its draws of f, after the search, are the
    programs of a fit that learns nothing (each compiled a second one before the search's
    values were committed)."""
    from ppl_bsvm.inference.vi import sbsvm, sbsvm_marginals
    from tests._shared import small_problem

    counts = {"_training_marginals": _compilations_per_call(monkeypatch, sbsvm,
                                                            "_training_marginals"),
              "_f_draws_chunk": _compilations_per_call(monkeypatch, sbsvm_marginals,
                                                       "_f_draws_chunk")}
    X, y = small_problem()
    common = dict(model="gp", method="svi", num_inducing=10, max_iter=200, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ppl_bsvm.ConvergenceWarning)  # 200 steps: short
        ppl_bsvm.fit(X, y, **common)
        ppl_bsvm.fit(X, y, learn_hyperparameters=True, **common)
    for name, seen in counts.items():
        assert len(seen) == 2 and seen[1] == 0, name
