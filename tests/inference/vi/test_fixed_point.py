"""The batch fixed point of the stochastic engines (``fixed_point.py``, ``sbsvm_batch.py``):
Anderson's iteration, the certificate, and linear SVI and S-BSVM against batch VI where the
ELBO-change rule alone stopped far from it."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm import datasets, kernels
from ppl_bsvm.exceptions import ConvergenceWarning
from ppl_bsvm.inference.vi import fixed_point, sbsvm_batch

# a strongly coupled problem: the kernel batch VI learns on breast cancer is nearly linear with
# a large variance (lengthscale 82, variance 2163); its coordinate ascent contracts by about
# 0.97 per sweep
STRONG = kernels.RBF(lengthscale=80.0, variance=2000.0)


@pytest.fixture(scope="module")
def wdbc():
    return datasets.load("wdbc", standardize=True)


@pytest.fixture(scope="module")
def small(wdbc):
    X, y = wdbc
    return X[:80], y[:80]


def _affine(P=40, seed=0):
    """A symmetric contraction with a few slow modes (like coordinate ascent's: most of the
    spectrum below 0.5, four eigenvalues up to 0.99) and an offset."""
    r = np.random.default_rng(seed)
    Q = np.linalg.qr(r.standard_normal((P, P)))[0]
    spectrum = np.r_[np.linspace(0.0, 0.5, P - 4), 0.9, 0.95, 0.98, 0.99]
    return (Q * spectrum) @ Q.T, r.standard_normal(P)


@pytest.mark.parametrize("ascent", [False, True])
def test_anderson_solves_an_affine_contraction(ascent):
    """``G(x) = A x + b``, ``A`` symmetric with eigenvalues in [0, 0.99]: the fixed point solves
    ``(I - A) x = b``; plain sweeps would take log(1e-12) / log(0.99) = 2750, Anderson's took
    230 (depth 5; 65 at depth 10). With ``ascent``
    the safeguard is the objective ``b^T x - x^T (I - A) x / 2`` that each plain sweep (a
    gradient step of length 1) increases."""
    A, b = _affine()
    with jax.enable_x64(True):
        A_, b_ = jnp.asarray(A), jnp.asarray(b)
        objective = (lambda aux: aux) if ascent else None

        def fixed_map(x):
            return A_ @ x + b_, b_ @ x - 0.5 * x @ (x - A_ @ x)

        out = fixed_point.anderson(fixed_map, jnp.zeros(40), 500,
                                   lambda x, gx, _: jnp.linalg.norm(gx - x),
                                   lambda s: s.res <= 1e-12, plain=3, objective=objective)
    x_star = np.linalg.solve(np.eye(40) - A, b)
    np.testing.assert_allclose(np.asarray(out.x), x_star, atol=1e-9 * np.max(np.abs(x_star)))
    assert int(out.k) < 275
    # a plain sweep maps the residual f to A f: the measured ratios never exceed A's norm
    assert 0.0 < float(out.rate) <= 0.99


def _linear_fixed_point(X, y):
    """Linear VI's fixed point by its own sweeps (``vi_step``), to rounding (the ELBO stops
    changing at all)."""
    fit = ppl_bsvm.fit(X, y, model="linear", method="vi", tol=1e-300, max_iter=4000,
                       num_draws=10)
    assert fit.stop_reason == "tol"
    a = fit.idata["approximation"]
    return a["beta_mean"].values, a["beta_cov"].values


def _rms_distance(Z, mu, mu_star, cov_star):
    """Root mean square over the rows of ``Z`` of the shift of ``z_i^T mu`` in units of the sd
    of ``z_i^T beta`` at the fixed point."""
    sd = np.sqrt(np.einsum("ij,jk,ik->i", Z, cov_star, Z))
    return float(np.sqrt(np.mean((Z @ (mu - mu_star) / sd) ** 2)))


def test_certified_distance_bounds_the_distance_to_linear_vis_fixed_point(wdbc):
    """From the prior, the linear model's sweep (``dense_sweep``): the certified distance
    bounds the true distance to linear VI's own fixed point (reached by its own sweeps)."""
    X, y = wdbc
    mu_star, cov_star = _linear_fixed_point(X, y)
    Z = np.c_[X, np.ones(len(X))] * np.where(y > 0, 1.0, -1.0)[:, None]
    n, p = Z.shape
    with jax.enable_x64(True):
        Zj = jnp.asarray(Z)

        def sweep(theta):
            return fixed_point.dense_sweep(Zj, 0.0, 1.0, 0.0, 1.0, theta)

        for tol in (0.5, 0.05):
            theta, cert = jax.jit(fixed_point.certify, static_argnums=0)(
                sweep, fixed_point.pack(jnp.zeros(p), jnp.eye(p)), n, tol, 500)
            eta1, prec = (np.asarray(a) for a in fixed_point.unpack(theta, p))
            true = _rms_distance(Z, np.linalg.solve(prec, eta1), mu_star, cov_star)
            assert float(cert.distance) <= tol and true <= float(cert.distance)


def _latent_distance(fit, ref):
    """Training latents of ``fit`` against ``ref``'s, in ``ref``'s sds: (median, max)."""
    a, b = fit.idata["approximation"], ref.idata["approximation"]
    z = np.abs(a["f_mean"].values - b["f_mean"].values) / np.sqrt(b["f_var"].values)
    return float(np.median(z)), float(np.max(z))


@pytest.fixture(scope="module")
def strong_bbsvm(small):
    X, y = small
    return ppl_bsvm.fit(X, y, model="gp", method="vi", kernel=STRONG, tol=1e-15,
                        max_iter=20000, num_draws=10)


def test_sbsvm_reaches_bbsvm_where_the_elbo_rule_stopped_far_from_it(small, strong_bbsvm):
    """Inducing points at the data (S-BSVM's fixed point is B-BSVM's), minibatches of 20: the
    ELBO-change rule alone says "tol" several sds from B-BSVM (measured: median 3.4, max 7.6
    sds at the training points); with the polish the run ends at B-BSVM's q."""
    X, y = small
    common = dict(model="gp", method="svi", kernel=STRONG, inducing=X, batch_size=20,
                  num_draws=10)
    old = ppl_bsvm.fit(X, y, polish=False, **common)
    assert old.stop_reason == "tol" and _latent_distance(old, strong_bbsvm)[0] > 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        new = ppl_bsvm.fit(X, y, **common)
    median, worst = _latent_distance(new, strong_bbsvm)
    assert new.stop_reason == "tol" and median < 0.01 and worst < 0.05
    assert new.idata.attrs["fixed_point_distance"] <= 0.05
    rows = dict(new._summary_rows())
    assert rows["elbo (final)"] == f"{float(new.idata['approximation']['elbo']):.6g}"
    assert rows["distance to batch optimum"].endswith("(root mean square over the training "
                                                      "latents; %d sweeps)"
                                                      % new.idata.attrs["fixed_point_sweeps"])
    assert dict(old._summary_rows())["distance to batch optimum"].startswith("not checked")
    # the same bound up to the jitter (1e-6 of a variance of 2000 on K_mm here, on K there):
    # measured 0.0065 apart
    assert float(new.idata["approximation"]["elbo"]) == pytest.approx(
        float(strong_bbsvm.idata["approximation"]["elbo"]), abs=0.02)


def test_linear_svi_reaches_linear_vi(wdbc):
    """Default linear SVI on wdbc: the ELBO-change rule alone stopped with coefficients several
    posterior sds from batch VI's; with the polish, within 0.01."""
    X, y = wdbc
    vi = ppl_bsvm.fit(X, y, model="linear", method="vi", tol=1e-14, max_iter=5000,
                      num_draws=10)
    sd = np.sqrt(np.diag(vi.idata["approximation"]["beta_cov"].values))
    mean = vi.idata["approximation"]["beta_mean"].values
    old = ppl_bsvm.fit(X, y, model="linear", method="svi", polish=False, num_draws=10)
    new = ppl_bsvm.fit(X, y, model="linear", method="svi", num_draws=10)
    far = np.abs(old.idata["approximation"]["beta_mean"].values - mean) / sd
    near = np.abs(new.idata["approximation"]["beta_mean"].values - mean) / sd
    assert old.stop_reason == "tol" and np.max(far) > 1.0
    assert new.stop_reason == "tol" and np.max(near) < 0.01


def test_a_polish_after_the_iteration_cap_converges(wdbc):
    """Five minibatch steps, then the polish: converged ("tol"), no warning."""
    X, y = wdbc
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fit = ppl_bsvm.fit(X, y, model="linear", method="svi", max_iter=5, num_draws=10)
    assert fit.stop_reason == "tol" and fit.converged and fit.n_iter == 5


@pytest.mark.parametrize("model", ["linear", "gp"])
def test_the_polish_warns_when_its_budget_runs_out(small, monkeypatch, model):
    X, y = small
    monkeypatch.setattr(fixed_point, "MAX_SWEEPS", 4)
    options = {"kernel": STRONG, "inducing": X} if model == "gp" else {}
    with pytest.warns(ConvergenceWarning, match="from the batch fixed point after 4 full-data"):
        fit = ppl_bsvm.fit(X, y, model=model, method="svi", max_iter=3, batch_size=20,
                           num_draws=10, **options)
    assert fit.stop_reason == "max_iter" and not fit.converged
    assert fit.idata.attrs["fixed_point_sweeps"] == 4
    assert fit.idata.attrs["fixed_point_distance"] > 0.05


@pytest.fixture(scope="module")
def learned(small):
    X, y = small
    batch = ppl_bsvm.fit(X, y, model="gp", method="vi", learn_hyperparameters=True,
                         max_iter=5000, tol=1e-12, num_draws=10)
    sparse = ppl_bsvm.fit(X, y, model="gp", method="svi", inducing=X, batch_size=20,
                          learn_hyperparameters=True, num_draws=10)
    return batch, sparse


def test_learned_hyperparameters_reach_bbsvms_elbo(learned):
    """Z = X: S-BSVM's bound is B-BSVM's, so its hyperparameter search must end at B-BSVM's
    ELBO; Adam's decaying steps alone ended tens of nats below (breast cancer: 34)."""
    batch, sparse = learned
    assert sparse.stop_reason == "tol"
    assert sparse.idata.attrs["hyper_gain"] <= sbsvm_batch.HYPER_GAIN_TOL
    value = float(sparse.idata["approximation"]["elbo"])
    assert value == pytest.approx(float(batch.idata["approximation"]["elbo"]), abs=0.02)
    rows = dict(sparse._summary_rows())
    assert rows["elbo (final)"] == f"{value:.6g}" and "ELBO left to hyperparameters" in rows


def test_the_hyperparameter_search_warns_when_its_budget_runs_out(small, monkeypatch):
    X, y = small
    monkeypatch.setattr(sbsvm_batch, "MAX_EVALUATIONS", 2)
    with pytest.warns(ConvergenceWarning, match="hyperparameter search after [23] evaluations"):
        fit = ppl_bsvm.fit(X, y, model="gp", method="svi", inducing=X, batch_size=20,
                           learn_hyperparameters=True, max_iter=20, num_draws=10)
    assert fit.stop_reason == "max_iter" and fit.idata.attrs["hyper_gain"] > 0.01


def test_the_time_estimate_counts_the_linear_polish():
    from ppl_bsvm._cost import cholesky
    from ppl_bsvm.inference.vi import linear

    p = 19  # 18 features and the intercept
    off = linear._svi_flops(10**5, 18, {"polish": False})
    on = linear._svi_flops(10**5, 18, {})
    assert on - off == pytest.approx(linear.POLISH_SWEEPS * (4 * cholesky(p) + 3 * 10**5 * p * p),
                                     rel=1e-12)
    # beyond POLISH_MAX_N points there is no polish by default
    big = 2 * linear.POLISH_MAX_N
    assert linear._svi_flops(big, 18, {}) == linear._svi_flops(big, 18, {"polish": False})
