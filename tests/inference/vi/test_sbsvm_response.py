"""S-BSVM's linear response (``inference/vi/sbsvm_response.py``): finite differences of the
tilted batch fixed point (an independent numpy coordinate ascent in ``u``), the batch limit
``Z = X`` against B-BSVM's closed form, the draws, predictive and saved fit, the fallback, the
``compare`` rows and the cost estimates."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm.compare import compare
from ppl_bsvm.exceptions import ConvergenceWarning, SlowFitWarning
from ppl_bsvm.inference.inducing import inducing_prior, project
from ppl_bsvm.inference.vi import lrvb, sbsvm_response

from .test_sbsvm import KERNEL, _toy

JITTER = 1e-6


def _projection(X, Z):
    """``kappa = K_nm Kmm^{-1}``, ``ktilde`` and ``Kmm`` (jittered as the engine does)."""
    with jax.enable_x64(True):
        params = KERNEL.init_params(X)
        prior = inducing_prior(KERNEL, params, jnp.asarray(Z), JITTER)
        proj = project(KERNEL, params, prior, jnp.asarray(X))
        return np.asarray(proj.kappa), np.asarray(proj.ktilde), np.asarray(prior.Kmm)


def _cavi_u(kappa, ktilde, Kmm, y, t, gamma=1.0, iters=20000, tol=1e-14):
    """Batch coordinate ascent of S-BSVM in the unwhitened ``q(u) = N(mu, Sigma)`` (paper eqs.
    9-11 with ``rho = 1``, dense inverses) tilted by ``t^T u``: the converged mean."""
    Kinv = np.linalg.inv(Kmm)
    alpha = np.ones(len(y))
    mu = np.zeros(Kmm.shape[0])
    for _ in range(iters):
        w = gamma / np.sqrt(alpha)
        Sigma = np.linalg.inv(Kinv + kappa.T @ (w[:, None] * kappa))
        new_mu = Sigma @ (kappa.T @ (y * (gamma + w)) + t)
        s = np.einsum("ij,jk,ik->i", kappa, Sigma, kappa) + ktilde
        alpha = (1 - y * (kappa @ new_mu)) ** 2 + s
        if np.max(np.abs(new_mu - mu)) < tol * np.max(np.abs(new_mu)):
            return new_mu, Sigma
        mu = new_mu
    raise AssertionError("the numpy CAVI did not converge")


@pytest.fixture(scope="module")
def toy():
    return _toy(n=40, seed=3)


@pytest.fixture(scope="module")
def lr_fit(toy):
    """Minibatch SVI (stopped by its own rule) with the linear response."""
    X, y = toy
    return ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=KERNEL, inducing=X[::5],
                        batch_size=10, linear_response=True, num_draws=4000, seed=1)


@pytest.mark.parametrize("gamma", [1.0, 1.6])
def test_covariance_of_u_is_the_derivative_of_the_tilted_batch_fixed_point(toy, gamma):
    X, y = toy
    Z = X[::5]
    fit = ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=KERNEL, inducing=Z,
                       batch_size=10, linear_response=True, gamma=gamma, num_draws=10)
    assert fit.idata.attrs["covariance"] == "linear response"
    a = fit.idata["approximation"]
    kappa, ktilde, Kmm = _projection(X, Z)
    m, h = Z.shape[0], 1e-4
    cols = [(_cavi_u(kappa, ktilde, Kmm, y, h * e, gamma)[0]
             - _cavi_u(kappa, ktilde, Kmm, y, -h * e, gamma)[0]) / (2 * h) for e in np.eye(m)]
    fd = np.array(cols).T
    # central differences: O(h^2) ~ 1e-8 relative; both fixed points converged to ~1e-12
    np.testing.assert_allclose(a["u_cov"].values, fd, rtol=1e-6, atol=1e-8 * np.abs(fd).max())
    # mean-field q(u) is SVI's (near, not at, the fixed point); LR widens every sd here
    Sigma = _cavi_u(kappa, ktilde, Kmm, y, np.zeros(m), gamma)[1]
    np.testing.assert_allclose(a["u_cov_mean_field"].values, Sigma, rtol=0.05, atol=0.01)
    ratio = np.sqrt(np.diag(a["u_cov_mean_field"].values) / np.diag(a["u_cov"].values))
    assert np.all(ratio < 0.95)


def test_inducing_points_at_the_data_give_bbsvms_covariance_of_f(toy):
    """With ``Z = X`` (``Ktilde = 0`` up to the jitter) S-BSVM's model is B-BSVM's, ``u = f``:
    the linear response of ``u`` must equal B-BSVM's closed form for ``f`` (``lrvb.gp_response``,
    tested against its own finite differences), to the order of the jitter."""
    X, y = _toy(n=30, seed=0)
    common = dict(kernel=KERNEL, linear_response=True, num_draws=10, jitter=1e-8)
    sparse = ppl_bsvm.fit(X, y, model="gp", method="svi", inducing=X, batch_size=len(y),
                          learning_rate=1.0, tol=1e-12, max_iter=300, **common)
    batch = ppl_bsvm.fit(X, y, model="gp", method="vi", tol=1e-12, **common)
    assert sparse.idata.attrs["covariance"] == batch.idata.attrs["covariance"] == "linear response"
    U = sparse.idata["approximation"]["u_cov"].values
    F = batch.idata["approximation"]["f_cov"].values
    # measured: 2e-8 absolute (jitter 1e-8; 2e-6 with the default 1e-6)
    np.testing.assert_allclose(U, F, atol=1e-6 * np.abs(F).max())
    np.testing.assert_allclose(sparse.idata["approximation"]["f_var"].values, np.diag(F),
                               rtol=1e-5)
    Xs = np.array([[0.1, 0.2], [-1.0, 2.0]])
    np.testing.assert_allclose(sparse.predict_latent(Xs)[1], batch.predict_latent(Xs)[1],
                               rtol=1e-5)


def test_a_response_fits_mean_field_marginals_are_the_mean_field_fits(lr_fit, toy):
    """With the response, the training rows' mean-field marginals (and the ELBO, ``alpha``)
    come from the polish's first sweep instead of a pass of their own: the same numbers as
    the fit without it, from the same SVI run, to rounding (the sweep's form of the variance
    differs from the pass's, ``sbsvm_marginals._kernel_form``, by ``cond(K_mm) eps``)."""
    X, y = toy
    mf = ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=KERNEL, inducing=X[::5],
                      batch_size=10, num_draws=10, seed=1)
    a, b = lr_fit.idata["approximation"], mf.idata["approximation"]
    np.testing.assert_array_equal(a["u_cov_mean_field"].values, b["u_cov"].values)
    np.testing.assert_allclose(a["f_mean"].values, b["f_mean"].values, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a["f_var_mean_field"].values, b["f_var"].values, rtol=1e-8)
    np.testing.assert_allclose(a["alpha"].values, b["alpha"].values, rtol=1e-8)
    assert float(a["elbo"]) == pytest.approx(float(b["elbo"]), rel=1e-10)


def test_draws_predictive_and_saved_fit_use_the_linear_response(lr_fit, toy, tmp_path):
    X, y = toy
    a = lr_fit.idata["approximation"]
    C, C_mf = a["u_cov"].values, a["u_cov_mean_field"].values
    u = lr_fit.posterior["u"].values[0]
    # 4000 Gaussian draws: sd of each sample variance about sqrt(2 / 4000) relative
    np.testing.assert_allclose(np.var(u, axis=0), np.diag(C), rtol=6 * np.sqrt(2 / 4000))
    np.testing.assert_allclose(np.mean(u, axis=0), a["u_mean"].values,
                               atol=6 * np.sqrt(np.diag(C).max() / 4000))
    Xs = np.r_[X[:4], [[0.3, -2.0], [2.5, 2.5]]]
    kappa, ktilde, _ = _projection(Xs, X[::5])
    mean, var = lr_fit.predict_latent(Xs)
    np.testing.assert_allclose(var, np.einsum("ij,jk,ik->i", kappa, C, kappa) + ktilde,
                               rtol=1e-8)
    np.testing.assert_allclose(mean, kappa @ a["u_mean"].values, rtol=1e-8, atol=1e-10)
    assert np.all(var > np.einsum("ij,jk,ik->i", kappa, C_mf, kappa) + ktilde)
    kappa_n, ktilde_n, _ = _projection(X, X[::5])
    np.testing.assert_allclose(a["f_var"].values,
                               np.einsum("ij,jk,ik->i", kappa_n, C, kappa_n) + ktilde_n,
                               rtol=1e-8)
    np.testing.assert_allclose(a["f_var_mean_field"].values,
                               np.einsum("ij,jk,ik->i", kappa_n, C_mf, kappa_n) + ktilde_n,
                               rtol=1e-8)
    f = lr_fit.posterior["f"].values[0]
    np.testing.assert_allclose(np.var(f, axis=0), a["f_var"].values, rtol=6 * np.sqrt(2 / 4000))
    lr_fit.save(tmp_path / "fit")
    loaded = ppl_bsvm.load(tmp_path / "fit")
    np.testing.assert_array_equal(loaded.predict_latent(Xs)[1], var)
    assert loaded.idata.attrs["covariance"] == "linear response"


def test_compare_adds_the_mean_field_row(lr_fit):
    table = compare(lr_fit, {"lr": lr_fit})
    f = table[table["variable"] == "f"].set_index("candidate")
    assert list(f.index) == ["lr", "lr (mean-field)"]
    a = lr_fit.idata["approximation"]
    expected = np.mean(np.sqrt(a["f_var_mean_field"].values / a["f_var"].values))
    # 4000 draws each: relative error of an sd ratio about sqrt(1 / 4000) per coordinate
    assert f.loc["lr (mean-field)", "sd_ratio"] == pytest.approx(expected, rel=0.03)
    assert f.loc["lr", "sd_ratio"] == pytest.approx(1.0, abs=1e-12)


@pytest.mark.filterwarnings("ignore:method='svi'")  # stopped at max_iter, as meant
def test_not_converged_warns_and_keeps_mean_field(toy, monkeypatch):
    X, y = toy
    monkeypatch.setattr(lrvb, "POLISH_ITER", 0)
    with pytest.warns(ConvergenceWarning, match="not converged") as record:
        fit = ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=KERNEL, inducing=X[::5],
                           batch_size=10, max_iter=3, linear_response=True, num_draws=10)
    assert any(w.filename == __file__ for w in record)  # points at the user's call
    a = fit.idata["approximation"]
    assert fit.idata.attrs["covariance"].startswith("mean-field (the fixed point")
    np.testing.assert_array_equal(a["u_cov"].values, a["u_cov_mean_field"].values)
    np.testing.assert_array_equal(a["f_var"].values, a["f_var_mean_field"].values)
    assert np.all(np.isfinite(fit.predict_proba(X)))


def _sites_problem(n, p, seed=0):
    """A converged Gaussian-sites problem with offsets: ``(sites, mu, Sigma)``."""
    r = np.random.default_rng(seed)
    Z = jnp.asarray(0.7 * r.standard_normal((n, p)) / np.sqrt(p / 5))
    sites = lrvb.Sites(Z, jnp.eye(p), jnp.asarray(1.3),
                       jnp.asarray(np.abs(0.3 * r.standard_normal(n))))
    theta, _ = lrvb.polish(lambda th: lrvb.sites_map(sites, th, jnp.zeros(p)),
                           lrvb.pack(jnp.zeros(p), jnp.eye(p)), 5000)
    return sites, *lrvb.unpack(theta, p)


def _weights(sites, mu, Sigma):
    """``(P_L, W, r, g)`` of the closed form (``lrvb`` module doc), ``S = P_L^{-T}``."""
    Z = sites.Z
    chol_prec = jnp.linalg.cholesky(jnp.linalg.inv(Sigma))
    alpha = (1 - Z @ mu) ** 2 + jnp.sum((Z @ Sigma) * Z, axis=1) + sites.offset
    return (chol_prec, Z @ jnp.linalg.inv(chol_prec).T, 1 - Z @ mu,
            0.5 * sites.gamma * alpha**-1.5)


@pytest.mark.parametrize("ranges", [1, 3, 8])
def test_moments_gather_the_gram_matrix_of_the_rows(ranges, monkeypatch):
    """``lrvb.SitesMoments`` (distinct fourth moments in ranges of ``b``, two chunks) against
    ``U^T U`` of the rows ``u_i = sqrt(g_i) [vechs(w_i w_i^T), sqrt(2) r_i w_i]`` written
    out here."""
    p = 11
    monkeypatch.setattr(lrvb, "moment_blocks",
                        lambda p: np.linspace(0, p, ranges + 1).astype(int))
    r = np.random.default_rng(ranges)
    W, res, g = r.standard_normal((30, p)), r.standard_normal(30), r.random(30)
    i, j = np.triu_indices(p)
    quad = W[:, i] * W[:, j] * np.where(i == j, 1.0, np.sqrt(2.0))
    U = np.sqrt(g)[:, None] * np.c_[quad, np.sqrt(2.0) * res[:, None] * W]
    with jax.enable_x64(True):
        acc = lrvb.moments_init(p, jnp.float64)
        for rows in (slice(0, 17), slice(17, 30)):
            acc = lrvb.moments_add(acc, jnp.asarray(W[rows]), jnp.asarray(res[rows]),
                                   jnp.asarray(g[rows]))
        G = np.asarray(lrvb.moments_gram(acc))
    np.testing.assert_allclose(G, U.T @ U, rtol=1e-12, atol=1e-12 * np.abs(U.T @ U).max())


def test_closed_forms_equal_the_jvp_response_of_the_sites_map():
    """The moments (``P x P``) and ``n x n`` forms S-BSVM uses against
    ``lrvb.sites_response`` (``jax.jvp`` columns of the sweep's Jacobian, no closed form) on
    the same Gaussian-sites problem with offsets; padding rows drop out of the ``n x n``
    form."""

    @jax.jit  # one program for the two closed forms (eagerly about 140)
    def closed_forms(sites, mu, Sigma):
        chol_prec, W, r, g = _weights(sites, mu, Sigma)
        acc = lrvb.moments_add(lrvb.moments_init(5, jnp.float64), W, r, g)
        factors = [lrvb.sites_precision_factor(chol_prec, lrvb.moments_gram(acc))]
        pad = lambda a, v: jnp.concatenate([a, jnp.full((7,) + a.shape[1:], v)])  # noqa: E731
        own = jnp.arange(207) < 200
        factors.append(lrvb.sites_dense_factor(chol_prec, pad(W, 3.0), pad(r, 2.0),
                                               pad(g, 0.5), own))
        return [jnp.linalg.inv(f @ f.T) for f in factors]

    with jax.enable_x64(True):
        sites, mu, Sigma = _sites_problem(200, 5)
        cov_jvp, residual, _ = lrvb.sites_response(sites, mu, Sigma)
        covs = [np.asarray(c) for c in closed_forms(sites, mu, Sigma)]
    assert float(residual) < 1e-10  # polished to lrvb.POLISH_TOL
    for cov in covs:
        np.testing.assert_allclose(cov, np.asarray(cov_jvp), rtol=1e-9, atol=1e-13)
        assert np.all(np.diag(cov) > np.diag(np.asarray(Sigma)))


def test_cost_and_memory_estimates_count_the_response():
    from ppl_bsvm.inference.vi import sbsvm

    P = sbsvm_response.size(64)
    assert P == 64 + 64 * 65 // 2
    on = {"num_inducing": 64, "linear_response": True}
    # the Schur route with SERIES_PASSES products by G_qq (3 m^3 / 2 a row each) after a pass
    # of m^3 / 2 a row, over the first subsample (16 P rows rounded up to twice the chunk:
    # 36,288), plus the polish's sweeps over all n rows
    sweeps = sbsvm_response.POLISH_SWEEPS * 1e5 * (64 * 18 + 3 * 64**2)
    flops = sbsvm_response.engine_flops(10**5, 18, on) - sweeps
    rows = sbsvm_response.sample_rows(10**5, 64, sbsvm_response.response_chunk(10**5, 64))
    assert rows == 36288
    passes = sbsvm_response.SERIES_PASSES
    assert (0.5 + 1.5 * passes) * rows * 64**3 < flops < (0.6 + 1.5 * passes) * rows * 64**3
    # two thirds of the moments' at m = 64 (fourth moments, about a quarter of U^T U's P^2 a
    # row, and the factorisation of the P x P matrix), under half at 128
    assert flops < 0.7 * lrvb.moments_flops(rows, 64)
    assert lrvb.series_flops(10**5, 128, passes) < 0.45 * lrvb.moments_flops(10**5, 128)
    assert sbsvm_response.sample_rows(2 * rows - 1, 64,
                                      sbsvm_response.response_chunk(10**5, 64)) == 0
    # the polish's coupling: 4 P rows in whole pairs of chunks, where the data have 32 times
    # as many
    chunk = sbsvm_response.response_chunk(10**6, 64)
    assert sbsvm_response.coupling_rows(10**6, 64, chunk) == 2 * chunk * -(-4 * P // (2 * chunk))
    assert sbsvm_response.coupling_rows(10**5, 64, chunk) == 0
    assert sbsvm_response.coupling_rows(10**6, 64, 0) == 0
    # the most products before the moments are cheaper: 3 at m = 64, 5 at 128; below
    # SERIES_MIN_PASSES (few inducing points) the moments themselves
    assert sbsvm_response.series_passes(rows, 64) == 3
    assert sbsvm_response.series_passes(10**5, 128) == 5
    assert sbsvm_response.uses_series(rows, 64) and not sbsvm_response.uses_series(rows, 16)
    assert sbsvm_response.response_bytes(10**5, 16) == sbsvm_response.moments_bytes(10**5, 16)
    # few rows: the n x n form (below about 3 m^1.5 rows)
    assert sbsvm_response.uses_dense(1000, 64) and not sbsvm_response.uses_dense(2000, 64)
    assert sbsvm_response.uses_dense(10**4, 256) and not sbsvm_response.uses_dense(2 * 10**4,
                                                                                     256)
    assert sbsvm_response.response_bytes(1000, 64) == 4 * 1000**2 * 8
    assert sbsvm_response.engine_flops(10**5, 18, {"num_inducing": 64}) == 0.0
    # the polish where it runs (by default up to 5000 points): sweeps of n (m d + 4 m^2)
    for learn, passes in ((False, sbsvm_response.POLISH_PASSES),
                          (True, sbsvm_response.HYPER_PASSES)):
        options = {"num_inducing": 64, "learn_hyperparameters": learn}
        expected = passes * 5000 * (64 * 18 + 4 * 64**2)
        assert sbsvm_response.engine_flops(5000, 18, options) == expected
        assert sbsvm_response.engine_flops(10**5, 18, {**options, "polish": True}) == 20 * expected
    extra = sbsvm._working_memory(10**5, 18, on) - sbsvm._working_memory(10**5, 18,
                                                                          {"num_inducing": 64})
    # O(m^3) and a chunk's products (210 MB at m = 64, 870 MB at 256), where the moments'
    # P x P matrices and chunk take 240 MB and 26 GB
    assert extra == sbsvm_response.response_bytes(10**5, 64) < 2.2e8
    assert sbsvm_response.moments_bytes(10**5, 64) > 3 * 8 * P**2
    assert sbsvm_response.response_bytes(10**6, 256) < 9e8
    assert sbsvm_response.moments_bytes(10**6, 256) > 2.6e10
    # 4 x 10^6 points, the default m = 100: 1.5 x 10^12 operations (the polish's sweeps 1.2 x
    # 10^12), 75 s at _cost.RATE; as an error the warning stops the fit before any work (and
    # were it not raised, devices=999 would stop the engine at once)
    X, y = _toy(n=4_000_000, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowFitWarning)
        with pytest.raises(SlowFitWarning, match="linear_response=True costs"):
            ppl_bsvm.fit(X, y, model="gp", method="svi", linear_response=True, devices=999)


@pytest.mark.parametrize("model", ["gp", "sparse_gp"])
def test_linear_response_option_is_validated(toy, model):
    X, y = toy
    with pytest.raises(ValueError, match="linear_response"):
        ppl_bsvm.fit(X, y, model=model, method="svi", linear_response="yes")


def _subsampled_fit(X, y, monkeypatch, rows, tol=1.0, **options):
    """S-BSVM's linear response with the moments from ``rows`` rows (0: all, summed), chunks
    of 50 rows, and the subsample accepted at an estimated error up to ``tol``."""
    monkeypatch.setattr(lrvb, "MOMENT_FLOATS", 36 * 50)  # m = 8: tri(8) = 36 floats a row
    monkeypatch.setattr(sbsvm_response, "sample_rows", lambda n, m, chunk: rows)
    monkeypatch.setattr(sbsvm_response, "MC_TOL", tol)
    fit = ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=KERNEL, inducing=X[:8],
                       linear_response=True, num_draws=10, seed=2, **options)
    assert fit.idata.attrs["covariance"] == "linear response"
    return fit


def test_subsampled_moments_estimate_the_full_sum_and_their_error(monkeypatch):
    """The moments of the response from a random subsample in two halves: with every row (the
    two halves together are the data) they are the full sum's, to single precision's rounding
    (the subsample's products are single); from 400 and 1600
    of 2,000 rows the sds of f at the training rows are within a few estimated Monte-Carlo
    errors of the full sum's, and the estimate falls with the rows (as 1 / sqrt(rows), and
    faster where the subsample nears the data). Measured: 0.18 and 0.041 estimated, 0.023
    and 0.031 the root mean square of the actual relative errors."""
    X, y = _toy(n=2000, seed=3)
    full = _subsampled_fit(X, y, monkeypatch, 0)
    assert full.idata.attrs["response_rows"] == 2000
    assert full.idata.attrs["response_mc_error"] == 0.0
    with monkeypatch.context() as same:  # the full sum's polish: only the summation differs
        same.setattr(sbsvm_response, "SAMPLED_POLISH_TOL", sbsvm_response.POLISH_TOL)
        every = _subsampled_fit(X, y, monkeypatch, 2000)
    C_full = full.idata["approximation"]["u_cov"].values
    # a subsample's moments are summed in single precision (lrvb.moments_add_single): each
    # chunk's 50 rows carry relative errors up to 50 u (u = 2^-24), which (I - G)^-1 amplifies
    # by 1 / (1 - ||G||), below 10 wherever measured (||G|| <= 0.9)
    single = 50 * 2.0**-24 * 10
    np.testing.assert_allclose(every.idata["approximation"]["u_cov"].values, C_full,
                               rtol=single, atol=single * np.abs(C_full).max())
    var_full = full.idata["approximation"]["f_var"].values
    errors = []
    for rows in (400, 1600):
        fit = _subsampled_fit(X, y, monkeypatch, rows)
        assert fit.idata.attrs["response_rows"] == rows
        error = fit.idata.attrs["response_mc_error"]
        sd_ratio = np.sqrt(fit.idata["approximation"]["f_var"].values / var_full)
        assert 0.0 < error < 1.0
        assert np.sqrt(np.mean((sd_ratio - 1.0) ** 2)) <= 4.0 * error
        errors.append(error)
        # polished to SAMPLED_POLISH_TOL, not to the full sum's POLISH_TOL (measured: 1 sweep
        # against 5)
        assert fit.idata.attrs["polish_sweeps"] < full.idata.attrs["polish_sweeps"]
    assert errors[1] < 0.6 * errors[0]
    # the polish coupled to the covariance (sbsvm_response.coupling_rows, here from 200 rows):
    # the same answer within the subsample's error, in no more sweeps than the uncoupled
    # subsamples (whose polish is the same whatever their rows)
    with monkeypatch.context() as coupled:
        coupled.setattr(sbsvm_response, "COUPLING_RATIO", 1)
        assert sbsvm_response.coupling_rows(2000, 8, 50) == 200
        sooner = _subsampled_fit(X, y, monkeypatch, 400)
    sd_ratio = np.sqrt(sooner.idata["approximation"]["f_var"].values / var_full)
    assert np.sqrt(np.mean((sd_ratio - 1.0) ** 2)) <= 4.0 * errors[0]
    assert sooner.idata.attrs["polish_sweeps"] <= fit.idata.attrs["polish_sweeps"]
    # a subsample whose estimated error is above MC_TOL grows until it is within it, here to
    # the full sum (beyond half the rows), whose polish goes on from SAMPLED_POLISH_TOL to
    # POLISH_TOL: the full sum's answer, to what the two polishes leave
    grown = _subsampled_fit(X, y, monkeypatch, 400, tol=0.6 * errors[0])
    assert grown.idata.attrs["response_rows"] == 2000
    assert grown.idata.attrs["polish_sweeps"] > full.idata.attrs["polish_sweeps"]
    np.testing.assert_allclose(grown.idata["approximation"]["u_cov"].values, C_full,
                               rtol=1e-6, atol=1e-6 * np.abs(C_full).max())
    # through a larger subsample first (200 -> 800 -> every row): the middle step starts from
    # the polished state with its residual already measured, so it adds no sweep, and the
    # full sum polishes on from the same state to the same answer
    twice = _subsampled_fit(X, y, monkeypatch, 200, tol=0.0)
    assert twice.idata.attrs["response_rows"] == 2000
    assert twice.idata.attrs["polish_sweeps"] == grown.idata.attrs["polish_sweeps"]
    np.testing.assert_allclose(twice.idata["approximation"]["u_cov"].values,
                               grown.idata["approximation"]["u_cov"].values, rtol=1e-12,
                               atol=1e-12 * np.abs(C_full).max())


def _engine_state(X, y, m, monkeypatch):
    """What S-BSVM hands its linear response: ``(kernel, state, data)`` of a minibatch fit
    stopped by its own rule, unpolished (away from the batch fixed point)."""
    from ppl_bsvm.inference.vi import sbsvm

    seen = {}
    respond = sbsvm.respond

    def spy(kernel, st, data, *args, **kwargs):
        seen.update(kernel=kernel, st=st, data=data._replace(order=None))
        return respond(kernel, st, data, *args, **kwargs)

    monkeypatch.setattr(sbsvm, "respond", spy)
    ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=KERNEL, inducing=X[:m], batch_size=50,
                 polish=False, linear_response=True, num_draws=10, seed=4)
    return seen["kernel"], seen["st"], seen["data"]


def test_the_polish_steps_the_mean_by_newton_with_the_sweeps_own_jacobian(monkeypatch):
    """``sbsvm_response._polish``: in the whitened coordinates about the fixed point, the
    mean's block of the sweep's Jacobian (``jax.jacfwd`` through the whole sweep) is the
    ``G_xx`` the first sweep sums; the polish reaches the fixed point of plain
    Anderson-accelerated sweeps (``lrvb.polish``) to its tolerance in at most half their
    sweeps, reports the residual a further sweep measures, and with ``max_iter=0`` moves
    nothing. Measured: Jacobian equal to 3e-13 (relative), largest eigenvalue of ``G_xx``
    0.87, from a relative change of 1e-2 8 sweeps against 17 + 2."""
    X, y = _toy(n=400, seed=5)
    m = 10
    kernel, st, data = _engine_state(X, y, m, monkeypatch)

    @jax.jit  # one program: eagerly, the steps below compiled about 130
    def check(params, Z, chol_Kmm, data, theta0):
        args = (kernel, params, Z, chol_Kmm, data)
        sweep = lambda th: sbsvm_response._sweep(*args, th)  # noqa: E731
        start = lrvb.relative_change(theta0, sweep(theta0))
        plain = lrvb.polish(sweep, theta0, 500, tol=1e-13)[0]
        plain_steps = lrvb.polish(sweep, theta0, 500, tol=sbsvm_response.POLISH_TOL)[1]
        theta, sweeps, residual = sbsvm_response._polish(*args, theta0, 500)
        ref = jnp.linalg.cholesky(lrvb.unpack(plain, m)[1])
        phi = sbsvm_response._whiten(plain, ref)
        J = jax.jacfwd(lambda x: sbsvm_response._whiten(
            sweep(sbsvm_response._unwhiten(phi.at[:m].set(x), ref)), ref)[:m])(phi[:m])
        G_xx = sbsvm_response._sweep(*args, plain, mean_block=True)[1]
        again = sbsvm_response._polish(*args, theta0, 0)
        measured = lrvb.relative_change(theta, sweep(theta))
        distance = lrvb.relative_change(plain, theta)
        back = sbsvm_response._unwhiten(phi, ref)
        return (start, plain, plain_steps, theta, sweeps, residual, J, G_xx, again, measured,
                distance, back)

    with jax.enable_x64(True):
        theta0 = lrvb.pack(st.eta1, 0.5 * (st.prec + st.prec.T))
        (start, plain, plain_steps, theta, sweeps, residual, J, G_xx, again, measured, distance,
         back) = jax.tree.map(np.asarray, check(st.params, st.Z, st.chol_Kmm, data, theta0))
    start, measured, distance = float(start), float(measured), float(distance)
    np.testing.assert_allclose(back, plain, rtol=1e-12, atol=1e-12 * np.abs(plain).max())
    np.testing.assert_allclose(J, G_xx, atol=1e-10 * np.abs(G_xx).max())
    assert 0.3 < np.linalg.eigvalsh(G_xx).max() < 1.0  # slow modes to precondition
    assert start > 1e-4  # SVI stopped away from the fixed point
    assert float(residual) <= sbsvm_response.POLISH_TOL
    assert float(residual) == pytest.approx(measured, rel=1e-6)
    # distance to the fixed point: about residual / (1 - rate), the rate below 0.9 here
    assert distance < 20 * sbsvm_response.POLISH_TOL
    # lrvb.polish sweeps once before its steps and once more for the residual
    assert int(sweeps) <= (int(plain_steps) + 2) // 2
    np.testing.assert_array_equal(np.asarray(again[0]), np.asarray(theta0))
    assert int(again[1]) == 1 and float(again[2]) == pytest.approx(start)


def test_the_coupled_step_solves_newtons_system():
    """``sbsvm_response._preconditioned`` against ``(I - G) delta = r`` solved densely, ``G =
    [[0, B_0], [B_0^T, G_xx]]`` in the coordinates ``(vechs Y, -sqrt 2 x)`` (``lrvb``'s
    ``G``), the step mapped back to the packed ``(x, vech Y)``; with ``B_0 = 0`` the mean's
    step is ``(I - G_xx)^{-1} r_x`` and the covariance's plain; a ``C`` that is not positive
    definite falls back to the mean's block (``_newton``)."""
    m, Pq = 4, 10
    r = np.random.default_rng(0)
    A = r.standard_normal((m, m))
    G_xx = 0.3 * A @ A.T / m
    B = 0.1 * r.standard_normal((Pq, m))
    phi, image = r.standard_normal(m + Pq), r.standard_normal(m + Pq)
    i, j = np.triu_indices(m)
    scale = np.where(i == j, 1.0, np.sqrt(2.0))

    def coords(packed):  # (x, vech Y: the lower triangle by rows) -> (vechs Y, -sqrt 2 x)
        Y = np.zeros((m, m))
        Y[np.tril_indices(m)] = packed[m:]
        Y = Y + Y.T - np.diag(np.diag(Y))
        return np.concatenate([Y[i, j] * scale, -np.sqrt(2.0) * packed[:m]])

    G = np.block([[np.zeros((Pq, Pq)), B], [B.T, G_xx]])
    with jax.enable_x64(True):
        step = np.asarray(sbsvm_response._preconditioned(
            jnp.asarray(phi), jnp.asarray(image), sbsvm_response._newton(G_xx, B)))
        plain = np.asarray(sbsvm_response._preconditioned(
            jnp.asarray(phi), jnp.asarray(image),
            sbsvm_response._newton(G_xx, np.zeros((Pq, m)))))
        fallback = sbsvm_response._newton(G_xx, 10.0 * B)
    delta = np.linalg.solve(np.eye(Pq + m) - G, coords(image) - coords(phi))
    np.testing.assert_allclose(coords(step) - coords(phi), delta, rtol=1e-12, atol=1e-12)
    d = image - phi
    np.testing.assert_allclose(plain[:m] - phi[:m], np.linalg.solve(np.eye(m) - G_xx, d[:m]),
                               rtol=1e-12)
    np.testing.assert_allclose(plain[m:], image[m:], rtol=1e-12)
    assert not np.any(np.asarray(fallback.coupling))
    np.testing.assert_allclose(np.asarray(fallback.chol), np.linalg.cholesky(np.eye(m) - G_xx),
                               rtol=1e-12)


def test_the_polish_coupled_to_the_covariance_reaches_the_same_fixed_point_sooner(monkeypatch):
    """``sbsvm_response._polish`` with ``B_0`` (``coupling``) summed over all the rows or over
    a subsample of them: the same fixed point as with the mean's block alone (within what the
    tolerance leaves, ``residual / (1 - rate)``), in fewer sweeps where ``B_0`` is exact.
    Measured (400 points, m = 10): to 1e-4, 3 sweeps against 5 (200 rows: 4); to 1e-8 7 and 8
    (here ``G_qq``, which the step leaves out, is not small: ``lrvb.quad_norm_bound`` is large
    on 400 points); the fixed points 1e-8 apart."""
    X, y = _toy(n=400, seed=5)
    m = 10
    kernel, st, data = _engine_state(X, y, m, monkeypatch)

    @functools.partial(jax.jit, static_argnames="coupled")  # tolerance and rows traced
    def run(theta, order, tol, rows, coupled):
        coupling = (order, rows, 50) if coupled else None
        return sbsvm_response._polish(kernel, st.params, st.Z, st.chol_Kmm, data, theta, 500,
                                      tol, coupling)

    def polish(theta, order, tol, rows):
        return run(theta, order, jnp.asarray(tol), jnp.asarray(rows, jnp.int32), rows > 0)

    with jax.enable_x64(True):
        theta0 = lrvb.pack(st.eta1, 0.5 * (st.prec + st.prec.T))
        order = sbsvm_response._subsample(jax.random.PRNGKey(3), data)
        sweeps = {rows: int(polish(theta0, order, 1e-4, rows)[1]) for rows in (0, 200, 400)}
        fixed = {rows: polish(theta0, order, 1e-8, rows) for rows in (0, 200, 400)}
        apart = [float(lrvb.relative_change(fixed[0][0], fixed[rows][0])) for rows in (200, 400)]
    assert sweeps[400] < sweeps[0] and sweeps[200] <= sweeps[0]
    assert all(float(f[2]) <= 1e-8 for f in fixed.values())
    assert max(apart) < 20 * 1e-8


def test_the_schur_route_is_the_moments_route(monkeypatch):
    """``sbsvm_response._series_pass`` on a subsample: the same linear-response precision as
    the moments' ``P x P`` system on the same rows (to single precision's rounding: the
    moments' products are single there, ``lrvb.moments_add_single``), with the series' error
    bound met in the products it reports, and the same estimated Monte-Carlo error (both first
    order in the halves' difference; the Schur route takes ``Y^T dG_qq Y`` as
    ``B_0^T dG_qq B_0``, off by ``O(lam^2)``). (The full sum: the next test.) Measured: 5
    products (the bound on ``G_qq``'s norm is large on 400 points), 9e-8 apart, errors 0.1917
    and 0.1917."""
    X, y = _toy(n=400, seed=5)
    m = 10
    monkeypatch.setattr(lrvb, "MOMENT_FLOATS", 55 * 50)  # chunks of 50 rows (tri(10) = 55)
    kernel, st, data = _engine_state(X, y, m, monkeypatch)
    chunk = lrvb.moments_chunk(data.X.shape[0], m)
    assert chunk == 50
    tol = sbsvm_response.POLISH_TOL
    with jax.enable_x64(True):
        # at SVI's state (max_iter=0: no polish), the same for both
        args = (kernel, st.params, st.Z, st.chol_Kmm, st.eta1, st.prec, data, 0, chunk, 200,
                jax.random.PRNGKey(7), tol)
        series = sbsvm_response.linear_response(*args, 8)
        moments = sbsvm_response.linear_response(*args, 0)
    assert 1 <= int(series.series_passes) < 8
    assert float(series.series_error) <= sbsvm_response.SERIES_SHARE * tol
    assert int(moments.series_passes) == 0
    prec = [np.asarray(r.chol_prec) @ np.asarray(r.chol_prec).T for r in (series, moments)]
    np.testing.assert_allclose(prec[0], prec[1], rtol=1e-6, atol=1e-6 * np.abs(prec[1]).max())
    assert float(series.mc_error) == pytest.approx(float(moments.mc_error), rel=1e-3)


def test_a_series_that_misses_its_bound_falls_back(monkeypatch):
    """The full sum: the Schur route's covariance is the moments' to the series' bound and
    rounding. Where the series is not within its tolerance after :func:`series_passes`
    products, the moments' ``P x P`` system answers from the polished state (``response_form``
    says so); where that would not fit in memory, the mean-field covariance with a
    ``ConvergenceWarning`` that says why."""
    X, y = _toy(n=1000, seed=3)
    kwargs = dict(model="gp", method="svi", kernel=KERNEL, inducing=X[:30],
                  linear_response=True, num_draws=10, seed=2)
    plain = ppl_bsvm.fit(X, y, **kwargs)
    assert plain.idata.attrs["response_form"].startswith("Schur complement (")
    monkeypatch.setattr(sbsvm_response, "SERIES_SHARE", 0.0)  # no series is ever within it
    fallback = ppl_bsvm.fit(X, y, **kwargs)
    assert fallback.idata.attrs["response_form"] == "moments"
    assert fallback.idata.attrs["covariance"] == "linear response"
    # from the polished state, whose residual was measured: no sweep more
    assert fallback.idata.attrs["polish_sweeps"] == plain.idata.attrs["polish_sweeps"]
    C = plain.idata["approximation"]["u_cov"].values
    np.testing.assert_allclose(fallback.idata["approximation"]["u_cov"].values, C,
                               rtol=1e-9, atol=1e-9 * np.abs(C).max())
    monkeypatch.setattr(sbsvm_response, "available_bytes", lambda: 10**5)
    with pytest.warns(ConvergenceWarning, match="Schur complement's series was not within 0 "
                                                "after .* need .* of memory"):
        refused = ppl_bsvm.fit(X, y, **kwargs)
    assert refused.idata.attrs["covariance"].startswith("mean-field (the Schur complement")
    np.testing.assert_array_equal(refused.idata["approximation"]["u_cov"].values,
                                  refused.idata["approximation"]["u_cov_mean_field"].values)


def test_stored_projections_give_the_sweep_in_single_precision(monkeypatch):
    """``sbsvm_response._sweep`` with ``store`` and with the projections it stored
    (``stored``), in chunks of 300 rows (the last overlapping its predecessor): the
    marginals at the training rows are the double sweep's exactly; the images, ``G_xx`` and
    the variances under another precision (``_stored_variances``) are within a
    single-precision sum's worst case of the double's, ``(terms + 2) 2^-24`` relative (the
    terms' absolute sums are at most twice the largest entries here: ``psi_a psi_b / r <=
    (psi_a^2 + psi_b^2) / 2 r``) and ``(m + 2) 2^-24`` for the variances' ``m``-term sums.
    Measured (the 400 points of the polish's test, whose programs this test's fit shares;
    m = 10, two chunks): images 7.8e-8 and 1.3e-7, ``G_xx`` 1.8e-7, variances 2.7e-7 apart
    (at 2,000 points: 5.7e-8, 9.5e-8, 3.7e-7 and 3.0e-7)."""
    X, y = _toy(n=400, seed=5)
    m = 10
    kernel, st, data = _engine_state(X, y, m, monkeypatch)
    monkeypatch.setattr(sbsvm_response, "PASS_CHUNK", 300)
    N = data.X.shape[0]

    @jax.jit
    def check(params, Z, chol_Kmm, data, theta):
        args = (kernel, params, Z, chol_Kmm, data)
        sweep = functools.partial(sbsvm_response._sweep, *args)
        image, G_xx, rows = sweep(theta, mean_block=True, marginals=True)
        image_s, G_xx_s, rows_s, stored = sweep(theta, mean_block=True, marginals=True,
                                                store=True)
        again, again_s = sweep(image), sweep(image, stored=stored)
        mean, chol = sbsvm_response.gaussian_from_precision(*lrvb.unpack(image, m))
        variances = sbsvm_response._stored_variances(stored, chol, N)
        _, _, s_f = sbsvm_response._psi_form(kernel, params, Z, chol_Kmm, mean, chol, data.X)
        return image, G_xx, rows, image_s, G_xx_s, rows_s, again, again_s, variances, s_f

    with jax.enable_x64(True):
        theta = lrvb.pack(st.eta1, 0.5 * (st.prec + st.prec.T))
        (image, G_xx, rows, image_s, G_xx_s, rows_s, again, again_s, variances,
         s_f) = jax.tree.map(np.asarray, check(st.params, st.Z, st.chol_Kmm, data, theta))
        changes = [float(lrvb.relative_change(a, b)) for a, b in
                   ((image, image_s), (again, again_s))]
    jax.tree.map(np.testing.assert_array_equal, rows, rows_s)
    G_change = float(np.abs(G_xx_s - G_xx).max() / np.abs(G_xx).max())
    var_change = float(np.max(np.abs(variances / s_f - 1.0)))
    bound = 2 * (300 + 2) * 2.0**-24
    assert max(changes) <= bound and G_change <= bound
    assert var_change <= 2 * (m + 2) * 2.0**-24


def test_a_polish_with_stored_projections_reaches_the_same_response(monkeypatch):
    """A subsample's linear response (400 of 2,000 rows, from SVI's unpolished state) with
    the polish's projections stored (the default where they fit in memory) and formed again
    at every sweep (``stores_projections`` False): the same response within what the polish's
    tolerance leaves (both residuals at most ``tol``, each within ``tol / (1 - rate)`` of its
    fixed point, the rate below 0.9 here), and the fit's variances of ``f`` at the training
    rows (from the stored projections) are its predictive variances there to single
    precision (:func:`test_stored_projections_give_the_sweep_in_single_precision`'s bound).
    Measured: 6 sweeps each, variances of f 3.0e-5 and sds of u 1.5e-5 apart, the stored
    variances 2.2e-7 from the predictive ones."""
    X, y = _toy(n=2000, seed=3)
    stored = _subsampled_fit(X, y, monkeypatch, 400, polish=False)
    monkeypatch.setattr(sbsvm_response, "stores_projections", lambda rows, m: False)
    formed = _subsampled_fit(X, y, monkeypatch, 400, polish=False)
    assert stored.idata.attrs["polish_sweeps"] > 2  # the stored projections were swept
    approx = [f.idata["approximation"] for f in (stored, formed)]
    f_var = [a["f_var"].values for a in approx]
    u_sd = [np.sqrt(np.diag(a["u_cov"].values)) for a in approx]
    apart = 2 * 10 * sbsvm_response.SAMPLED_POLISH_TOL
    assert np.abs(f_var[0] / f_var[1] - 1).max() <= apart
    assert np.abs(u_sd[0] / u_sd[1] - 1).max() <= apart
    m = 8
    assert np.abs(stored.predict_latent(X)[1] / f_var[0] - 1).max() <= 2 * (m + 2) * 2.0**-24
    np.testing.assert_allclose(formed.predict_latent(X)[1], f_var[1], rtol=1e-12)


def test_the_polish_stores_projections_where_memory_allows(monkeypatch):
    """``stores_projections``: ``4 rows m`` bytes of ``Psi^T`` and ``8 rows`` of ``ktilde``,
    stored where they take at most ``STORE_SHARE`` of the memory available or where that is
    unknown."""
    need = sbsvm_response.projection_bytes(10**6, 64)
    assert need == 4 * 10**6 * 64 + 8 * 10**6
    for available, stores in ((None, True), (4 * need, True), (4 * need - 1, False)):
        monkeypatch.setattr(sbsvm_response, "available_bytes", lambda: available)
        assert sbsvm_response.stores_projections(10**6, 64) is stores


def test_the_subsample_is_a_random_order_of_the_rows_with_padding_last():
    """``sbsvm_response._subsample``: a permutation of the padded rows whose first ``n`` are
    the training rows, in an order that differs by key; over 4,000 keys each of 37 rows comes
    first about equally often (chi-square with 36 degrees of freedom below its 0.999 quantile,
    67.99)."""
    with jax.enable_x64(True):
        X = jnp.zeros((48, 2))
        data = type("Data", (), {"X": X, "n": jnp.asarray(37, jnp.int32)})
        order = jax.jit(jax.vmap(lambda k: sbsvm_response._subsample(k, data)))(
            jax.random.split(jax.random.PRNGKey(0), 4000))
        order = np.asarray(order)
    assert all(sorted(o) == list(range(48)) for o in order[:50])
    assert (np.sort(order[:, :37], axis=1) == np.arange(37)).all()
    assert len({tuple(o) for o in order[:50]}) == 50
    counts = np.bincount(order[:, 0], minlength=37)
    expected = 4000 / 37
    assert np.sum((counts - expected) ** 2 / expected) < 67.99
