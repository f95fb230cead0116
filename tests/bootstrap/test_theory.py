"""replica_tap and monte_carlo: the theory against the Monte-Carlo bootstrap, and the public API."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm import bootstrap, datasets, kernels


@pytest.fixture(scope="module")
def crabs():
    return datasets.load("crabs", standardize=True)


@pytest.fixture(scope="module")
def sine():
    """1-d regression data: y = sin(x) + noise, n = 80."""
    r = np.random.default_rng(3)
    X = r.uniform(-3, 3, (80, 1))
    return X, np.sin(X[:, 0]) + 0.3 * r.standard_normal(80)


@pytest.mark.slow
def test_crabs_theory_matches_monte_carlo_within_five_percent(crabs):
    """Done-when: crabs (sex, standardised, RBF width 3), S = N and S = 2N, Poisson resampling.

    The spec's 10,000-resample run gives 0.0426 and 0.0385 (theory 0.0421, 0.0394). Here 2500
    resamples leave a standard error of about 1.4 % of eps, added to the 5 % band twice (the
    delta-method standard error is calibrated: it matches the spread of independent runs).
    """
    X, y = crabs
    k = kernels.RBF(lengthscale=3.0)
    X_new = X[:12] + 0.3 * np.random.default_rng(0).standard_normal((12, X.shape[1]))
    th = bootstrap.replica_tap(X, y, k, [1.0, 2.0], X_test=X_new)
    mc = bootstrap.monte_carlo(X, y, k, [1.0, 2.0], X_test=X_new, n_resamples=2500, seed=11)
    assert th.converged.all()
    assert np.all(mc.kkt_violation < 1e-8)  # every retrained SVM is exact
    assert np.all(mc.error_se < 0.02 * mc.error)
    np.testing.assert_array_less(np.abs(th.error - mc.error), 0.05 * mc.error + 2 * mc.error_se)
    assert abs(th.efron632 - mc.efron632) < 0.05 * mc.efron632 + 2 * mc.efron632_se
    # p(-1|x) at new inputs: the fraction of bootstrap SVMs voting -1
    assert np.mean(np.abs(th.test_prob_negative - mc.test_prob_negative)) < 0.05
    # Eq. 20 is the S -> inf limit: at S/N = 4 the theory is already close to it (spec 11)
    assert th.loo == pytest.approx(0.05)


def test_gp_regression_variant_matches_its_monte_carlo(sine):
    """Spec 8.3 (validated there within 1-3 %): squared-error bootstrap of GP regression."""
    X, y = sine
    k = kernels.RBF(lengthscale=1.0)
    ratios = [0.5, 1.0, 2.0]
    th = bootstrap.replica_tap(X, y, k, ratios, model="regression", noise=0.09)
    mc = bootstrap.monte_carlo(
        X, y, k, ratios, model="regression", noise=0.09, n_resamples=1000, seed=5
    )
    assert th.converged.all()
    np.testing.assert_array_less(np.abs(th.error - mc.error), 0.02 * mc.error + 3 * mc.error_se)
    # the out-of-bag field distributions are close to Gaussian here: means and spreads agree
    ok = mc.oob_count[1] > 100
    np.testing.assert_allclose(th.oob_mean[1][ok], mc.oob_mean[1][ok], atol=0.05)
    np.testing.assert_allclose(np.sqrt(th.oob_var[1][ok]), np.sqrt(mc.oob_var[1][ok]), rtol=0.2)
    assert th.loo != th.loo and th.test_prob_negative is None  # NaN: no classifier quantities


def test_soft_margin_variant(crabs):
    """Spec 8.2: C -> inf recovers the hard margin; near-hard C agrees with its Monte Carlo."""
    X, y = crabs
    k = kernels.RBF(lengthscale=3.0)
    hard = bootstrap.replica_tap(X, y, k, 1.0)
    huge_c = bootstrap.replica_tap(X, y, k, 1.0, margin="soft", C=1e6)
    assert huge_c.error[0] == pytest.approx(hard.error[0], abs=1e-6)
    th = bootstrap.replica_tap(X, y, k, 1.0, margin="soft", C=10.0)
    mc = bootstrap.monte_carlo(X, y, k, 1.0, margin="soft", C=10.0, n_resamples=600, seed=2)
    assert abs(th.error[0] - mc.error[0]) < 0.05 * mc.error[0] + 2 * mc.error_se[0]


def test_bsvm_bootstrap_uses_the_ecm_fit(crabs):
    """The BSVM's MAP is the SVM without bias at C = 2 gamma: the soft-margin bootstrap's
    machine on all data is the ECM fixed point."""
    X, y = crabs
    fit = ppl_bsvm.fit(X, y, model="gp", method="ecm", kernel=kernels.RBF(lengthscale=2.0),
                       gamma=0.5, tol=1e-13, max_iter=20000)
    res = bootstrap.bsvm_bootstrap(X, y, 1.0, fit=fit)
    assert res.model == "soft" and res.C == 1.0
    np.testing.assert_allclose(res.machine.field, fit.idata["approximation"]["f_mean"].values,
                               atol=1e-3)
    direct = bootstrap.replica_tap(X, y, kernels.RBF(lengthscale=2.0), 1.0, margin="soft", C=1.0)
    np.testing.assert_allclose(res.error, direct.error, rtol=1e-10)
    with pytest.raises(ValueError, match="sets C itself"):
        bootstrap.bsvm_bootstrap(X, y, fit=fit, C=3.0)


def test_result_contents_and_user_labels(crabs):
    X, y = crabs
    labels = np.where(y > 0, "male", "female")
    X_te, y_te = X[:7] + 0.1, labels[:7]
    res = bootstrap.replica_tap(X, labels, "rbf", [0.5, 1.5], X_te, y_test=y_te)
    assert res.labels.negative == "female" and res.labels.positive == "male"
    R, N = 2, len(y)
    for name in ("error_per_point", "oob_mean", "oob_var", "field_mean", "field_var"):
        assert getattr(res, name).shape == (R, N), name
    for name in ("test_mean", "test_var", "test_prob_negative"):
        assert getattr(res, name).shape == (R, 7), name
    assert res.test_error.shape == (R,) and res.error.shape == (R,)
    np.testing.assert_allclose(res.error, res.error_per_point.mean(axis=1))
    assert np.all(res.oob_var > 0) and np.all(res.field_var > 0)
    assert res.sites["Lambda"].min() >= 0 and res.sites["lam"].max() <= 0
    # 1 is not among the ratios: eps(N) was solved for the .632 estimates anyway
    assert 0 < res.error_at_n < 0.5 and res.efron632 == pytest.approx(0.632 * res.error_at_n)
    assert res.error_train == 0.0 and res.converged.all()
    assert len(res.trace) == R and res.trace[0].shape == (res.n_iter[0],)
    assert "S/N=0.5" in res.summary() and len(res.to_frame()) == R
    assert res.hyperparameters["lengthscale"] > 0
    assert res.n_iter_coarse.shape == (R,)
    # the SVM on all data (warm-started from the theory) is the exact one
    with jax.enable_x64(True):
        K = np.asarray(kernels.gram(res.kernel, res.kernel_params, jnp.asarray(X), res.jitter))
    cold = bootstrap.svm.svm_without_bias(K, np.where(y > 0, 1.0, -1.0))
    np.testing.assert_allclose(res.machine.alpha, cold.alpha, atol=1e-9)
    assert res.machine.kkt_violation < 1e-9


def test_computes_in_float64_without_changing_the_global_setting(crabs):
    X, y = crabs
    before = jnp.asarray(1.0).dtype
    res = bootstrap.replica_tap(X, y, kernels.RBF(lengthscale=2.0), 1.0)
    assert jnp.asarray(1.0).dtype == before
    assert res.oob_mean.dtype == np.float64


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(sample_ratio=0.0), "sample_ratio values must lie in"),
        (dict(sample_ratio=[1.0, np.nan]), "finite"),
        (dict(sample_ratio="1"), "finite numbers"),
        (dict(C=2.0), "only used with margin='soft'"),
        (dict(margin="soft"), "needs the penalty C"),
        (dict(margin="soft", C=-1.0), "C must be"),
        (dict(model="svr"), "model must be one of"),
        (dict(margin="medium"), "margin must be one of"),
        (dict(X_test=np.zeros((3, 2))), "X_test has 2 features"),
        (dict(y_test=[1, -1]), "y_test given without X_test"),
        (dict(tol=0.0), "tol must be"),
        (dict(max_damping=1.5), "max_damping"),
        (dict(kernel="spline"), "unknown kernel"),
        (dict(progress_bar="yes"), "progress_bar"),
    ],
)
def test_replica_tap_rejects_bad_input(crabs, kwargs, match):
    X, y = crabs
    kwargs = dict(kwargs)
    kernel = kwargs.pop("kernel", "rbf")
    ratio = kwargs.pop("sample_ratio", 1.0)
    with pytest.raises(ValueError, match=match):
        bootstrap.replica_tap(X, y, kernel, ratio, **kwargs)


def test_bad_data_and_monte_carlo_options_are_rejected(crabs):
    X, y = crabs
    with pytest.raises(ValueError, match="only one class"):
        bootstrap.replica_tap(X, np.ones(len(y)))
    with pytest.raises(ValueError, match="NaN"):
        bootstrap.replica_tap(np.where(np.eye(len(y), X.shape[1]) > 0, np.nan, X), y)
    with pytest.raises(ValueError, match="numeric"):
        bootstrap.replica_tap(X, np.array(["a"] * len(y)), model="regression")
    with pytest.raises(ValueError, match="resampling must be one of"):
        bootstrap.monte_carlo(X, y, resampling="jackknife")
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap.monte_carlo(X, y, n_resamples=1)
    with pytest.raises(ValueError, match="bias must be True or False"):
        bootstrap.monte_carlo(X, y, bias=3.0)


def test_monte_carlo_bookkeeping(sine):
    """Out-of-bag counts follow the resampling scheme; seeds make runs reproducible."""
    X, y = sine
    k = kernels.RBF(lengthscale=1.0)
    a = bootstrap.monte_carlo(X, y, k, 1.0, model="regression", n_resamples=150, seed=1,
                              keep_fields=True)
    b = bootstrap.monte_carlo(X, y, k, 1.0, model="regression", n_resamples=150, seed=1)
    np.testing.assert_array_equal(a.error, b.error)
    assert a.fields.shape == (1, 150, len(y)) and a.counts.shape == (1, 150, len(y))
    np.testing.assert_array_equal(a.oob_count[0], (a.counts[0] == 0).sum(axis=0))
    # Poisson(1): each point is out of bag with probability exp(-1)
    assert a.oob_count.mean() / 150 == pytest.approx(np.exp(-1), abs=0.02)
    m = bootstrap.monte_carlo(X, y, k, 1.0, model="regression", n_resamples=50,
                              resampling="multinomial", keep_fields=True)
    assert np.all(m.counts.sum(axis=2) == len(y))


@pytest.mark.slow
def test_monte_carlo_does_not_depend_on_the_number_of_workers(sine):
    X, y = sine
    k = kernels.RBF(lengthscale=1.0)
    one = bootstrap.monte_carlo(X, y, k, 1.0, model="regression", n_resamples=250, n_jobs=1)
    two = bootstrap.monte_carlo(X, y, k, 1.0, model="regression", n_resamples=250, n_jobs=2)
    np.testing.assert_allclose(one.error, two.error, rtol=1e-12)
    np.testing.assert_allclose(one.oob_var, two.oob_var, rtol=1e-12)


def test_bias_variant_against_scikit_learn_monte_carlo(crabs):
    """Spec 8.1: theory on K + b0 against resampled scikit-learn SVMs with a bias."""
    X, y = crabs
    k = kernels.RBF(lengthscale=3.0)
    th = bootstrap.replica_tap(X, y, k, 1.0, bias=True)
    mc = bootstrap.monte_carlo(X, y, k, 1.0, bias=True, n_resamples=200, seed=4)
    assert th.bias == pytest.approx(100.0 * (1 + 1e-6))
    assert abs(th.error[0] - mc.error[0]) < 0.05 * mc.error[0] + 3 * mc.error_se[0]
    with jax.enable_x64(True):
        assert np.isfinite(th.loo)


def test_replica_tap_passes_its_progress_bar_to_the_fixed_point_iterations(crabs, monkeypatch):
    """``progress_bar`` reaches the loop that shows the bar (``inference.loop`` reads it from
    ``_progress.current()``), labelled with the ratio being solved."""
    from ppl_bsvm import _progress
    from ppl_bsvm.bootstrap import tap_solve

    seen = []

    def record(*args, **kwargs):
        seen.append(_progress.current())
        raise KeyboardInterrupt  # stop before any solving: only the wiring is under test

    monkeypatch.setattr(tap_solve, "solve_ratio", record)
    X, y = crabs
    for flag in (False, True):
        with pytest.raises(KeyboardInterrupt):
            bootstrap.replica_tap(X, y, "rbf", 2.0, progress_bar=flag)
    assert seen == [(False, "replica_tap S/N=1"), (True, "replica_tap S/N=1")]


def test_a_large_ratio_alone_is_reached_through_doubling_ratios(crabs):
    """``S/N = 30`` asked alone (after ``S/N = 1``, always solved): from a cold start the
    solver took 1,456 factorisations here; from the fixed point at 1 through 2, 4, 8 and 16
    (``tap_solve.warm_ladder``) 51, counted in ``n_iter``, and the fixed point is the one the
    explicit learning curve reaches."""
    X, y = crabs
    k = kernels.RBF(lengthscale=3.0)
    alone = bootstrap.replica_tap(X, y, k, [30.0])
    curve = bootstrap.replica_tap(X, y, k, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0])
    assert alone.converged.all() and alone.n_iter[0] < 150
    assert alone.n_iter[0] == curve.n_iter[1:].sum()  # the ladder's ratios are the curve's
    np.testing.assert_allclose(alone.oob_mean[0], curve.oob_mean[-1], atol=1e-8)
    np.testing.assert_allclose(alone.oob_var[0], curve.oob_var[-1], rtol=1e-8)
    assert alone.error[0] == pytest.approx(curve.error[-1], abs=1e-10)
