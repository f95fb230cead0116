"""Linear-response VI (``inference/vi/lrvb.py``): finite differences of the tilted coordinate
ascent (an independent numpy implementation), exactness for a Gaussian target, the linear
and GP implementations against each other, and the fallback to mean-field."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm._memory import DENSE_HINT
from ppl_bsvm.exceptions import ConvergenceWarning
from ppl_bsvm.inference.vi import lrvb


RBF = ppl_bsvm.kernels.RBF(lengthscale=1.5, variance=2.0)


def _problem(n=40, seed=5):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, 2))
    y = np.where(X @ np.array([1.0, -0.7]) + 0.2 + 0.8 * r.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def _cavi_mean(Z, prior_prec, gamma, t, iters=20000, tol=1e-14, prior_cov=None):
    """numpy coordinate ascent of eq. 14 tilted by ``t^T x`` (alpha-space), its mean; with
    ``prior_cov`` (the GP, ``Z = diag(y)``) ``Sigma = K - K (K + W^{-1})^{-1} K`` instead."""
    alpha = np.ones(Z.shape[0])
    mu = np.zeros(Z.shape[1])
    for _ in range(iters):
        w = gamma / np.sqrt(alpha)
        if prior_cov is None:
            Sigma = np.linalg.inv(Z.T @ (w[:, None] * Z) + prior_prec)
        else:
            K = prior_cov
            Sigma = K - K @ np.linalg.solve(K + np.diag(1 / w), K)
        new_mu = Sigma @ (Z.T @ (gamma + w) + t)
        alpha = (1 - Z @ new_mu) ** 2 + np.einsum("ij,jk,ik->i", Z, Sigma, Z)
        if np.max(np.abs(new_mu - mu)) < tol * np.max(np.abs(new_mu)):
            return new_mu
        mu = new_mu
    raise AssertionError("the numpy CAVI did not converge")


def _tilt_fd(Z, prior_prec, gamma, h=1e-4):
    """``d mu*(t) / dt`` by central differences of the converged tilted CAVI."""
    p = Z.shape[1]
    cols = [(_cavi_mean(Z, prior_prec, gamma, h * e) - _cavi_mean(Z, prior_prec, gamma, -h * e))
            / (2 * h) for e in np.eye(p)]
    return np.array(cols).T


@pytest.mark.parametrize("gamma", [1.0, 1.7])
def test_linear_response_is_the_derivative_of_the_tilted_fixed_point(gamma):
    X, y = _problem()
    fit = ppl_bsvm.fit(X, y, model="linear", method="vi", linear_response=True, gamma=gamma,
                       prior_scale=1.5)
    a = fit.idata["approximation"]
    assert fit.idata.attrs["covariance"] == "linear response"
    Z = y[:, None] * np.c_[X, np.ones(len(y))]
    fd = _tilt_fd(Z, np.eye(3) / 1.5**2, gamma)
    # central differences: O(h^2) ~ 1e-8 relative; the numpy CAVI converged to 1e-15
    np.testing.assert_allclose(a["beta_cov"].values, fd, rtol=1e-6, atol=1e-9)
    # the correction is large here: mean-field sds are well below the linear-response ones
    ratio = np.sqrt(np.diag(a["beta_cov_mean_field"].values) / np.diag(a["beta_cov"].values))
    assert np.all(ratio < 0.8)


@pytest.mark.parametrize("n,p,floats", [(30, 8, None), (60, 5, None), (60, 5, 15 * 7)])
def test_closed_forms_equal_the_jacobian_route(monkeypatch, n, p, floats):
    """``sites_linear_response`` (the engines' route: the ``n x n`` form at n = 30, p = 8; the
    fourth moments at n = 60, p = 5, in one chunk and in chunks of 7 rows with a padded last
    one) against ``sites_response``'s implicit differentiation by ``jvp`` columns."""
    r = np.random.default_rng(n + p)
    X = r.standard_normal((n, p))
    y = np.where(X[:, 0] + r.standard_normal(n) > 0, 1.0, -1.0)
    assert lrvb.uses_dense(n, p) == (n == 30)
    if floats is not None:
        monkeypatch.setattr(lrvb, "MOMENT_FLOATS", floats)  # chunks of 7 rows
    with jax.enable_x64(True):
        sites = lrvb.Sites(jnp.asarray(y[:, None] * X), jnp.eye(p) / 2.0, jnp.asarray(1.3),
                           jnp.zeros(()))
        mu, Sigma = jnp.zeros(p), jnp.eye(p)
        closed, res_closed, mf_closed = lrvb.sites_linear_response(sites, mu, Sigma)
        jacobian, res_jac, mf_jac = lrvb.sites_response(sites, mu, Sigma)
    assert closed.dtype == jnp.float64
    np.testing.assert_allclose(closed, jacobian, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(mf_closed, mf_jac, rtol=1e-12)
    assert float(res_closed) < lrvb.RESIDUAL_TOL
    assert np.all(np.diag(closed) > np.diag(mf_closed))  # wider than mean-field


def test_single_precision_moments_are_the_double_ones_to_single_rounding():
    """``moments_add_single`` (a subsample's moments): every entry of ``G`` within the bound
    of a chunk's sum in single precision, ``(rows + 8) u |U|^T D |U|`` (``u = 2^-24``,
    Higham 3.5; the 8 for rounding the rows and forming their products), accumulated in
    double; the response's block of ``(I - G)^{-1}`` within it times ``||(I - G)^{-1}||^2``."""
    rows, p = 300, 6
    r = np.random.default_rng(11)
    W = r.standard_normal((rows, p)) / np.sqrt(p)
    res, g = r.standard_normal(rows), r.uniform(0.0, 1.0, rows) * 0.9 / rows
    with jax.enable_x64(True):
        args = (jnp.asarray(W), jnp.asarray(res), jnp.asarray(g))
        init = lrvb.moments_init(p, jnp.float64)
        double = lrvb.moments_gram(lrvb.moments_add(init, *args))
        single = lrvb.moments_add_single(init, *args)
        assert all(a.dtype == jnp.float64 for a in jax.tree.leaves(single))
        single = lrvb.moments_gram(single)
        # |U|^T D |U|: the same sums of g_i |u_i| |u_i|^T, from the rows' absolute values
        absolute = lrvb.moments_gram(lrvb.moments_add(init, jnp.abs(args[0]),
                                                      jnp.abs(args[1]), args[2]))
    bound = (rows + 8) * 2.0**-24 * np.asarray(absolute)
    error = np.abs(np.asarray(single) - np.asarray(double))
    assert np.all(error <= bound) and error.max() > 0
    P = double.shape[0]
    inverse = np.linalg.inv(np.eye(P) - np.asarray(double))
    block = np.linalg.inv(np.eye(P) - np.asarray(single))[P - p:, P - p:]
    assert np.abs(block - inverse[P - p:, P - p:]).max() <= (
        np.linalg.norm(inverse, 2) ** 2 * np.linalg.norm(bound, 2))


@pytest.mark.parametrize("aligned", [False, True])
def test_schur_route_pieces_against_the_gram_matrix(aligned):
    """The Schur route's pieces (``schur_add``, ``quad_apply_add``, ``quad_norm_bound``,
    ``series_error``) against ``G`` formed by the moments: the blocks ``G_qx``, ``G_xx`` and
    the product ``G_qq B`` to rounding; the bound at or above ``G_qq``'s largest eigenvalue
    (equal when every row points the same way, ``aligned``); and for 0-4 products the
    certified bound on the relative error of ``C^{-1}`` at or above the error measured against
    the exact Schur complement, and falling as ``lam^2`` a product (``lam`` about 0.4 here,
    far above the 0.004-0.06 of S-BSVM on data, so that every term matters)."""
    rows, p = 300, 6
    r = np.random.default_rng(12)
    W = r.standard_normal((rows, p)) / np.sqrt(p)
    if aligned:
        W = np.outer(r.standard_normal(rows), r.standard_normal(p)) / np.sqrt(p)
    res, g = r.standard_normal(rows), r.uniform(0.0, 1.0, rows)
    with jax.enable_x64(True):
        H = (W * (g * (W**2).sum(1))[:, None]).T @ W
        g = g * 0.4 / np.linalg.eigvalsh(H)[-1]
        args = (jnp.asarray(W), jnp.asarray(res), jnp.asarray(g))
        G = np.asarray(lrvb.moments_gram(lrvb.moments_add(lrvb.moments_init(p, jnp.float64),
                                                          *args)))
        sums = lrvb.schur_add(lrvb.schur_init(p, jnp.float64), *args)
        B0 = np.asarray(sums.quad_lin)
        Bs = [B0]
        for _ in range(4):
            operand = lrvb.quad_operand(jnp.asarray(Bs[-1]))
            Bs.append(np.asarray(lrvb.quad_apply_add(jnp.zeros_like(B0), args[0], args[2],
                                                     operand)))
        lam = float(lrvb.quad_norm_bound(sums))
        Pq = G.shape[0] - p
        G_qq = G[:Pq, :Pq]
        exact = (np.eye(p) - G[Pq:, Pq:]
                 - B0.T @ np.linalg.solve(np.eye(Pq) - G_qq, B0))
        series = B0.T @ B0
        for k in range(5):
            if k:
                series = series + Bs[k - 1].T @ Bs[k] + Bs[k].T @ Bs[k]
            C = np.eye(p) - np.asarray(sums.lin) - series
            bound = float(lrvb.series_error(lam, k, jnp.asarray(C), jnp.asarray(B0.T @ B0)))
            L = np.linalg.cholesky(C)
            error = np.abs(np.linalg.eigvalsh(
                L.T @ (np.linalg.inv(exact) - np.linalg.inv(C)) @ L)).max()
            # attained, to rounding, where the rows are aligned (every matrix of rank one)
            assert error <= bound * (1 + 1e-9) and bound < 1.0, (k, error, bound)
            if k:
                # lam^2 a product, with kappa = |C^-1 B0^T B0| moving as C does
                assert bound == pytest.approx(previous * lam**2, rel=0.1)
            previous = bound
    scale = np.abs(G).max()
    np.testing.assert_allclose(B0, G[:Pq, Pq:], atol=1e-14 * scale)
    np.testing.assert_allclose(np.asarray(sums.lin), G[Pq:, Pq:], atol=1e-14 * scale)
    np.testing.assert_allclose(Bs[1], G_qq @ B0, atol=1e-13 * np.abs(Bs[1]).max())
    top = np.linalg.eigvalsh(G_qq)[-1]
    assert top <= lam * (1 + 1e-12)
    # equal for aligned rows; 1.21 times the eigenvalue here (0.0038 against 0.0030 for
    # S-BSVM on the susy generator, 10^5 points, m = 64)
    assert lam == pytest.approx(top, rel=1e-10) if aligned else lam > 1.1 * top
    # a series that cannot be bounded: the norm bound at or above 1
    assert np.isinf(float(lrvb.series_error(1.0, 3, jnp.eye(p), jnp.eye(p))))


def test_sums_of_single_precision_rows_stay_single():
    """``moments_add``, ``schur_add`` and ``quad_apply_add`` on float32 rows form every product
    in float32 (a float64 constant among them would promote the chunk's products to double and
    lose ``in_single``'s speed without a sign); ``in_single`` adds them to a double total."""
    with jax.enable_x64(True):
        W, r, g = jnp.ones((5, 4), jnp.float32), jnp.ones(5, jnp.float32), jnp.ones(5, jnp.float32)
        sums = [lrvb.moments_add(lrvb.moments_init(4, jnp.float32), W, r, g),
                lrvb.schur_add(lrvb.schur_init(4, jnp.float32), W, r, g),
                lrvb.quad_apply_add(jnp.zeros((10, 4), jnp.float32), W, g,
                                    lrvb.quad_operand(jnp.ones((10, 4), jnp.float32)))]
        assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(sums))
        total = lrvb.in_single(lrvb.schur_add, lrvb.schur_init(4, jnp.float64), W, r, g)
        assert all(a.dtype == jnp.float64 for a in jax.tree.leaves(total))


def test_draws_and_predictive_use_the_linear_response_covariance():
    X, y = _problem()
    fit = ppl_bsvm.fit(X, y, model="linear", method="vi", linear_response=True, num_draws=4000)
    a = fit.idata["approximation"]
    C = a["beta_cov"].values
    beta = fit.posterior["beta"].values[0]
    # the sample covariance of 4000 Gaussian draws: sd of each variance about sqrt(2/4000)
    np.testing.assert_allclose(np.var(beta, axis=0), np.diag(C), rtol=6 * np.sqrt(2 / 4000))
    Xs = np.r_[X[:5], [[0.3, -2.0]]]
    Xd = np.c_[Xs, np.ones(len(Xs))]
    mean, var = fit.predict_latent(Xs)
    np.testing.assert_allclose(var, np.einsum("ij,jk,ik->i", Xd, C, Xd), rtol=1e-9)
    np.testing.assert_allclose(mean, Xd @ a["beta_mean"].values, rtol=1e-9)


@pytest.mark.filterwarnings("ignore:method='svi'")  # stopped at max_iter, as meant
def test_svi_linear_response_is_that_of_the_batch_fixed_point():
    X, y = _problem()
    vi = ppl_bsvm.fit(X, y, model="linear", method="vi", linear_response=True, num_draws=10)
    svi = ppl_bsvm.fit(X, y, model="linear", method="svi", linear_response=True, num_draws=10,
                       batch_size=10, max_iter=300, tol=0)
    assert svi.idata.attrs["covariance"] == "linear response"
    np.testing.assert_allclose(svi.idata["approximation"]["beta_cov"].values,
                               vi.idata["approximation"]["beta_cov"].values, rtol=1e-5)


def test_linear_response_is_exact_for_a_gaussian_target():
    """Mean-field ``q(x_1) ... q(x_d)`` of ``N(m, L^{-1})``: the CAVI map of the means is
    ``x_i <- m_i - (sum_{j != i} L_ij (x_j - m_j) - t_i) / L_ii``; its fixed point is ``m``, the
    mean-field variances ``1 / L_ii``, and the linear response is ``L^{-1}`` exactly
    (Giordano et al. 2018, section 3.2)."""
    r = np.random.default_rng(0)
    A = r.standard_normal((4, 4))
    L = A @ A.T + 0.5 * np.eye(4)
    m = r.standard_normal(4)
    d = np.diag(L)

    def sweep(x, t):
        return m - ((L - np.diag(d)) @ (x - m) - t) / d

    with jax.enable_x64(True):
        Lj, mj, dj = map(jnp.asarray, (L, m, d))
        cov, residual = lrvb.response(
            lambda x, t: mj - ((Lj - jnp.diag(dj)) @ (x - mj) - t) / dj, mj, 4, 4, chunk=3)
    assert float(residual) == 0.0
    np.testing.assert_allclose(np.asarray(cov), np.linalg.inv(L), rtol=1e-10, atol=1e-12)
    assert np.all(1 / d < np.diag(np.linalg.inv(L)))  # mean-field is too narrow here
    np.testing.assert_allclose(sweep(m, 0.0), m)


def test_gp_linear_response_matches_the_tilted_fixed_point_and_the_linear_model(tmp_path):
    """B-BSVM with a linear kernel is the linear model (no intercept): its closed-form linear
    response of ``f`` must equal ``X Cov_LR(beta) X^T`` from the jvp-based linear one, and the
    finite differences of the tilted CAVI."""
    X, y = _problem(n=30, seed=2)
    s = 1.3
    lin = ppl_bsvm.fit(X, y, model="linear", method="vi", linear_response=True,
                       intercept=False, prior_scale=s, num_draws=10)
    gp = ppl_bsvm.fit(X, y, model="gp", method="vi", linear_response=True, num_draws=3000,
                      kernel=ppl_bsvm.kernels.Linear(variance=s**2), jitter=0.0, tol=1e-12)
    assert gp.idata.attrs["covariance"] == "linear response"
    C = lin.idata["approximation"]["beta_cov"].values
    F = gp.idata["approximation"]["f_cov"].values
    np.testing.assert_allclose(F, X @ C @ X.T, rtol=1e-6, atol=1e-9)
    Z = y[:, None] * X
    fd = _tilt_fd(Z, np.eye(2) / s**2, 1.0)
    np.testing.assert_allclose(F, X @ fd @ X.T, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(gp.idata["approximation"]["f_var"].values, np.diag(F))
    f = gp.posterior["f"].values[0]
    np.testing.assert_allclose(np.var(f, axis=0), np.diag(F), rtol=6 * np.sqrt(2 / 3000))
    Xs = np.array([[0.5, 1.0], [-1.0, 0.2]])
    np.testing.assert_allclose(gp.predict_latent(Xs)[1], np.einsum("ij,jk,ik->i", Xs, C, Xs),
                               rtol=1e-6)
    gp.save(tmp_path / "gp")  # the dense predictive is data: it saves and loads
    loaded = ppl_bsvm.load(tmp_path / "gp")
    np.testing.assert_array_equal(loaded.predict_latent(Xs)[1], gp.predict_latent(Xs)[1])
    assert loaded.idata.attrs["covariance"] == "linear response"


def test_gp_linear_response_of_an_rbf_fit_against_finite_differences():
    X, y = _problem(n=30, seed=8)
    kern = RBF
    gp = ppl_bsvm.fit(X, y, model="gp", method="vi", linear_response=True, kernel=kern,
                      num_draws=10, tol=1e-12)
    F = gp.idata["approximation"]["f_cov"].values
    with jax.enable_x64(True):
        K = np.asarray(ppl_bsvm.kernels.gram(kern, kern.init_params(X), jnp.asarray(X), 1e-6))
    h = 1e-4
    for j in (0, 7, 19):  # three columns of d mu*(t) / dt
        e = np.eye(len(y))[j]
        col = (_cavi_mean(np.diag(y), None, 1.0, h * e, prior_cov=K)
               - _cavi_mean(np.diag(y), None, 1.0, -h * e, prior_cov=K)) / (2 * h)
        np.testing.assert_allclose(F[:, j], col, rtol=1e-5, atol=1e-7)


def test_not_converged_or_not_positive_definite_warns_and_keeps_mean_field(monkeypatch):
    X, y = _problem(n=30, seed=8)
    monkeypatch.setattr(lrvb, "POLISH_ITER", 0)
    with pytest.warns(ConvergenceWarning, match="not converged"):
        fit = ppl_bsvm.fit(X, y, model="linear", method="vi", linear_response=True,
                           max_iter=2, num_draws=10)
    a = fit.idata["approximation"]
    assert fit.idata.attrs["covariance"].startswith("mean-field (the fixed point")
    np.testing.assert_array_equal(a["beta_cov"].values, a["beta_cov_mean_field"].values)
    assert np.all(np.isfinite(fit.predict_proba(X)))
    with pytest.warns(ConvergenceWarning, match="not converged"):
        gp = ppl_bsvm.fit(X, y, model="gp", method="vi", linear_response=True, max_iter=2,
                          num_draws=10, kernel=RBF)
    assert "f_cov" not in gp.idata["approximation"]
    assert np.all(np.isfinite(gp.predict_proba(X)))
    mf = np.eye(2)
    for bad, match in ((np.array([[1.0, 2.0], [2.0, 1.0]]), "not positive definite"),
                       (np.full((2, 2), np.nan), "singular")):
        with pytest.warns(ConvergenceWarning, match=match):
            cov, status = lrvb.accept(bad, mf, 0.0, "test")
        assert cov is not bad and np.array_equal(cov, mf) and status.startswith("mean-field")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cov, status = lrvb.accept(2 * mf, mf, 1e-9, "test")
    assert status == "linear response" and np.array_equal(cov, 2 * mf)


@pytest.mark.parametrize("model, method", [("linear", "vi"), ("linear", "svi"), ("gp", "vi")])
def test_linear_response_option_is_validated(model, method):
    X, y = _problem()
    with pytest.raises(ValueError, match="linear_response"):
        ppl_bsvm.fit(X, y, model=model, method=method, linear_response="yes")


def test_the_memory_estimate_counts_the_linear_response_matrices():
    from ppl_bsvm.inference.vi import bbsvm

    mf = bbsvm._memory(1000, 5, {"linear_response": False})
    lr = bbsvm._memory(1000, 5, {"linear_response": True})
    assert mf == 4 * 1000**2 * 8 and lr == bbsvm.LR_COPIES * 1000**2 * 8
    # the refusal names the scalable alternatives, as every dense engine's does
    assert bbsvm._memory.hint == DENSE_HINT


@pytest.mark.parametrize("tol", [lrvb.POLISH_TOL, 1e-8])
def test_polish_stops_at_the_first_sweep_within_its_tolerance(tol):
    """Plain sweeps (``depth=0``) of ``x <- x / 2 + 1`` from 0: the k-th sweep, from
    ``x_{k-1} = 2 - 2^{1-k}``, changes it by ``2^-k``, so the polish stops at the first ``k``
    with ``2^-k <= tol x_{k-1}`` and returns ``x_{k-1}`` (the point whose residual met
    ``tol``). S-BSVM's response polishes to a looser tolerance than the default
    (``sbsvm_response.POLISH_TOL``) through this argument."""
    from ppl_bsvm.inference.vi import sbsvm_response

    assert sbsvm_response.POLISH_TOL <= 1e-2 * lrvb.RESIDUAL_TOL
    with jax.enable_x64(True):
        x, sweeps = jax.jit(lambda x0: lrvb.polish(lambda x: 0.5 * x + 1.0, x0, 200, depth=0,
                                                   tol=tol))(jnp.zeros(3))
    k = next(k for k in range(1, 200) if 2.0**-k <= tol * (2.0 - 2.0 ** (1 - k)))
    assert int(sweeps) == k
    np.testing.assert_array_equal(np.asarray(x), 2.0 - 2.0 ** (1 - k))  # exact in binary
