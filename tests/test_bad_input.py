"""Bad and awkward input through the public API (``ppl_bsvm.fit`` and ``BayesianSVC``).

Each case either raises a ``ValueError`` whose message names the problem, or returns a usable
result with finite probabilities; NaN must never reach the user and no case may end in a deep
JAX traceback. Settings are cheap (few iterations / draws): these tests check the contract, not
the accuracy.
"""

from __future__ import annotations

import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm.estimators import BayesianSVC
from ppl_bsvm.kernels import RBF, Sigmoid
from tests._shared import D, N, small_problem

CHEAP = {
    "ecm": {"max_iter": 50},
    "vi": {"max_iter": 30},
    "svi": {"max_iter": 200, "num_inducing": 10},  # the shared problem's (tests/_shared.py)
    # no line moves: these tests are about the input, and each fit compiles its sampler
    "gibbs": {"num_samples": 20, "num_warmup": 20, "num_chains": 1, "directions": 0},
}


@pytest.fixture(scope="module")
def data():
    return small_problem()


@pytest.fixture(scope="module")
def ecm_fit(data):
    X, y = data
    return ppl_bsvm.fit(X, y, model="gp", method="ecm", max_iter=20)


@pytest.mark.parametrize("method", ["vi", "svi", "platt"])
def test_an_offset_shared_by_the_inputs_changes_no_probability(data, method):
    """Stationary kernels see x - x' only: a Unix-time feature (X + 1.7e9) gives the fit of X,
    median-heuristic lengthscale and k-means inducing points included (issue 34: platt's
    probabilities moved by up to 0.71 at X + 1e8, vi and ecm failed from 1e6)."""
    X, y = data
    a = ppl_bsvm.fit(X, y, model="gp", method=method, **CHEAP.get(method, {}))
    b = ppl_bsvm.fit(X + 1.7e9, y, model="gp", method=method, **CHEAP.get(method, {}))
    # X + 1.7e9 rounds the inputs by 2e-7; libsvm's dual solver (platt) stops at a gradient
    # tolerance of 1e-3, within which that perturbation moves its solution (5e-5 here)
    atol = 1e-3 if method == "platt" else 1e-5
    np.testing.assert_allclose(b.predict_proba(X + 1.7e9), a.predict_proba(X), atol=atol)


@pytest.mark.parametrize("method", ["ecm", "vi", "svi", "gibbs"])
def test_strict_jax_settings_of_the_caller_do_not_reach_the_library(data, method):
    """A user's strict JAX settings for their own code (rank promotion "raise", strict dtype
    promotion, NaN checks) made every engine fail inside its own programs (issue 34, item 7):
    the entry points run under JAX's defaults and leave the caller's settings as they were."""
    import jax

    X, y = data
    with (jax.numpy_rank_promotion("raise"), jax.numpy_dtype_promotion("strict"),
          jax.debug_nans(True)):
        fit = ppl_bsvm.fit(X, y, model="gp", method=method, **CHEAP.get(method, {}))
        p = fit.predict_proba(X)
        assert jax.config.jax_numpy_rank_promotion == "raise"
        assert jax.config.jax_numpy_dtype_promotion == "strict" and jax.config.jax_debug_nans
    assert np.all(np.isfinite(p))


# --- NaN / inf in X --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_fit_rejects_non_finite_X(data, bad):
    X, y = data
    X = X.copy()
    X[3, 1] = bad
    kind = "NaN" if np.isnan(bad) else "inf"
    with pytest.raises(ValueError, match=rf"X contains 1 non-finite.*{kind} first at row 3"):
        ppl_bsvm.fit(X, y, model="gp", method="ecm")
    # The estimator validates as scikit-learn estimators do (check_estimator expects it).
    with pytest.raises(ValueError, match=r"Input X contains (NaN|infinity)"):
        BayesianSVC(method="ecm", options={"max_iter": 20}).fit(X, y)


@pytest.mark.parametrize("call", ["predict_proba", "predict_latent", "predict"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_predict_rejects_non_finite_X(ecm_fit, data, call, bad):
    Xs = data[0][:5].copy()
    Xs[2, 0] = bad
    with pytest.raises(ValueError, match="X contains 1 non-finite value"):
        getattr(ecm_fit, call)(Xs)


# --- number of classes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "message", "est_message"),
    [
        (lambda n: np.ones(n, dtype=int), r"y has only one class \(1\)", "only one class"),
        (lambda n: np.arange(n) % 3, r"y has 3 classes \(\[0, 1, 2\]\).*exactly two",
         r"3 class\(es\) \[0, 1, 2\]; BayesianSVC needs exactly two"),
        (lambda n: np.array(["a", "b", "c"] * n)[:n], "y has 3 classes", "3 class"),
    ],
    ids=["one-class", "three-classes", "three-string-classes"],
)
def test_fit_rejects_wrong_number_of_classes(data, labels, message, est_message):
    X, _ = data
    y = labels(X.shape[0])
    with pytest.raises(ValueError, match=message):
        ppl_bsvm.fit(X, y, model="gp", method="ecm")
    with pytest.raises(ValueError, match=est_message):
        BayesianSVC(method="ecm", options={"max_iter": 20}).fit(X, y)


def test_fit_rejects_a_list_of_labels_of_mixed_types(data):
    """NumPy makes ``["0", "a"]`` of ``[0, "a"]``, which would predict the string ``"0"``."""
    X, _ = data
    y = [(0, "a")[i % 2] for i in range(X.shape[0])]
    with pytest.raises(ValueError, match=r"y mixes labels of types int, str; give labels of one"):
        ppl_bsvm.fit(X, y, model="gp", method="ecm")
    with pytest.raises(ValueError, match=r"y mixes labels of types int, str"):
        BayesianSVC(method="ecm", options={"max_iter": 20}).fit(X, y)


# --- more inducing points than data ----------------------------------------------------------


@pytest.mark.parametrize("model", ["gp", "sparse_gp"])
def test_more_inducing_points_than_data(data, model):
    X, y = data
    with pytest.raises(ValueError, match=r"num_inducing=100 exceeds the number of training "
                                         r"points n=40"):
        ppl_bsvm.fit(X, y, model=model, method="svi", num_inducing=100, max_iter=10)


# --- feature count at predict time -----------------------------------------------------------


@pytest.mark.parametrize("d_test", [1, 3])
@pytest.mark.parametrize("call", ["predict_proba", "predict_latent", "predict"])
def test_predict_rejects_wrong_feature_count(ecm_fit, call, d_test):
    Xs = np.zeros((4, d_test))
    with pytest.raises(ValueError, match=rf"X has {d_test} features, but the model was fitted "
                                         r"with 2"):
        getattr(ecm_fit, call)(Xs)


def test_estimator_rejects_wrong_feature_count(data):
    X, y = data
    clf = BayesianSVC(method="ecm", options={"max_iter": 20}).fit(X, y)
    with pytest.raises(ValueError, match="X has 3 features"):
        clf.predict_proba(np.zeros((4, 3)))


# --- kernel matrices that are not positive definite ------------------------------------------


@pytest.mark.parametrize("method", ["ecm", "vi", "gibbs"])
def test_indefinite_kernel_is_a_clear_error(data, method):
    X, y = data
    kernel = Sigmoid(scale=1.0, offset=-1.0)  # indefinite on these inputs
    with pytest.raises(ValueError, match=r"kernel matrix of Sigmoid.*jitter=1e-06.*not "
                                         r"positive definite, not even semi-definite"):
        ppl_bsvm.fit(X, y, model="gp", method=method, kernel=kernel, **CHEAP[method])


@pytest.mark.parametrize("model", ["gp", "sparse_gp"])
def test_indefinite_kernel_is_a_clear_error_svi(data, model):
    X, y = data
    with pytest.raises(ValueError, match=r"K_mm of Sigmoid.*not positive definite"):
        ppl_bsvm.fit(X, y, model=model, method="svi", kernel=Sigmoid(offset=-1.0), max_iter=10)


@pytest.mark.parametrize("method", ["ecm", "vi", "gibbs", "svi"])
def test_duplicated_rows_without_jitter(data, method):
    """A singular PSD ``K`` (duplicated rows, ``jitter=0``): engines solving in the I + S K S
    form handle it and must give finite probabilities; engines that need chol(K) must say
    that the jitter is the problem."""
    X, y = data
    Xd, yd = np.vstack([X, X]), np.concatenate([y, y])
    if method in ("ecm", "vi"):
        p = ppl_bsvm.fit(Xd, yd, model="gp", method=method, jitter=0.0,
                         **CHEAP[method]).predict_proba(X)
        assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    else:
        # S-BSVM at its default number of inducing points, min(n, 100) = 80, twice the distinct
        # rows: k-means puts some on the same row, and K_mm is singular (10 centres stay apart)
        options = {k: v for k, v in CHEAP[method].items() if k != "num_inducing"}
        with pytest.raises(ValueError, match=r"jitter=0.*not positive definite"):
            ppl_bsvm.fit(Xd, yd, model="gp", method=method, jitter=0.0, **options)


# --- extreme lengthscales --------------------------------------------------------------------


@pytest.mark.parametrize("lengthscale", [1e-8, 1e8])
@pytest.mark.parametrize("method", ["ecm", "vi", "svi", "gibbs"])
def test_extreme_lengthscale_gives_finite_probabilities(data, method, lengthscale):
    X, y = data
    fit = ppl_bsvm.fit(X, y, model="gp", method=method, kernel=RBF(lengthscale=lengthscale),
                       **CHEAP[method])
    Xs = np.vstack([X[:5], X[:5] + 0.5])  # training points and new points
    p = fit.predict_proba(Xs)
    mean, var = fit.predict_latent(Xs)
    assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(var)) and np.all(var >= 0)
    if lengthscale == 1e8:
        # K is (numerically) constant: one shared latent value, so one probability everywhere.
        np.testing.assert_allclose(p, p[0], atol=1e-6)


# --- labels of other types -------------------------------------------------------------------


@pytest.mark.parametrize(
    "to_labels",
    [
        lambda y: np.where(y == 1, "spam", "ham"),
        lambda y: y == 1,
        lambda y: np.where(y == 1, "spam", "ham").astype(object),
        lambda y: np.where(y == 1, 7, -3),
    ],
    ids=["str", "bool", "object-str", "int-7-minus-3"],
)
def test_predictions_come_back_in_user_labels(data, to_labels):
    X, y = data
    user = to_labels(y)
    fit = ppl_bsvm.fit(X, user, model="gp", method="ecm", max_iter=50)
    pred = fit.predict(X)
    assert set(np.unique(pred).tolist()) <= set(np.unique(user).tolist())
    assert np.mean(pred == user) > 0.8  # well separated data: labels line up, not swapped
    clf = BayesianSVC(method="ecm", options={"max_iter": 50}).fit(X, user)
    assert set(clf.classes_.tolist()) == set(np.unique(user).tolist())
    np.testing.assert_array_equal(clf.predict(X), pred)


# --- imbalance -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["ecm", "vi", "svi", "gibbs"])
def test_very_imbalanced_classes(method):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, D))  # the data fixture's shape: the programs compile once
    y = np.zeros(N, dtype=int)
    y[:2] = 1  # 2 positives out of 40
    fit = ppl_bsvm.fit(X, y, model="gp", method=method, **CHEAP[method])
    p = fit.predict_proba(np.vstack([X, rng.normal(size=(20, D))]))
    assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    assert np.mean(p[:N]) < 0.5  # the majority class dominates


@pytest.mark.parametrize("method", ["ecm", "vi"])
def test_very_imbalanced_linear(method):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(N, D))  # the data fixture's shape: the programs compile once
    y = np.zeros(N, dtype=int)
    y[:2] = 1
    p = ppl_bsvm.fit(X, y, model="linear", method=method).predict_proba(X)
    assert np.all(np.isfinite(p)) and np.mean(p) < 0.5


# --- dtypes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["ecm", "vi", "svi"])
def test_float32_input_gives_float64_results(data, method):
    X, y = data
    X32 = X.astype(np.float32)
    fit = ppl_bsvm.fit(X32, y, model="gp", method=method, **CHEAP[method])
    p = fit.predict_proba(X32)
    mean, var = fit.predict_latent(X32)
    assert p.dtype == np.float64 and mean.dtype == np.float64 and var.dtype == np.float64
    for name, arr in fit.posterior.data_vars.items():
        assert arr.dtype == np.float64, name
    ref = ppl_bsvm.fit(X32.astype(np.float64), y, model="gp", method=method, **CHEAP[method])
    np.testing.assert_allclose(p, ref.predict_proba(X32), rtol=1e-10, atol=1e-12)


def test_float32_estimator(data):
    X, y = data
    clf = BayesianSVC(method="ecm", options={"max_iter": 20}).fit(X.astype(np.float32), y)
    assert clf.predict_proba(X.astype(np.float32)).dtype == np.float64


# --- reproducibility -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "options"),
    [
        ("gibbs", {"num_samples": 10, "num_warmup": 10, "num_chains": 2}),
        ("ess", {"num_samples": 10, "num_warmup": 10, "num_chains": 2}),
        ("mclmc", {"num_samples": 10, "num_warmup": 10, "num_chains": 2}),
        ("vi", {"max_iter": 20, "num_draws": 50}),
        ("pathfinder", {"num_draws": 50, "num_elbo_draws": 25}),
        ("advi", {"max_iter": 50, "window": 10, "num_draws": 50}),
        ("svi", {"max_iter": 50, "num_draws": 50, "num_inducing": 10}),
    ],
)
def test_same_seed_same_draws_other_seed_other_draws(data, method, options):
    X, y = data

    def draws(seed):
        fit = ppl_bsvm.fit(X, y, model="gp", method=method, seed=seed, **options)
        return {k: np.asarray(v) for k, v in fit.posterior.data_vars.items()}

    a, b, c = draws(3), draws(3), draws(4)
    assert a.keys() == b.keys() == c.keys() and a
    for name in a:
        assert np.all(np.isfinite(a[name])), name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        assert not np.array_equal(a[name], c[name]), name


@pytest.mark.parametrize("model", ["linear", "gp"])
def test_diverging_iterates_stop_with_an_error_naming_the_step(data, model):
    """A learning rate that turns NaN after five steps: the loop stops at that step."""
    import jax.numpy as jnp

    X, y = data
    with pytest.raises(FloatingPointError, match=r"step produced non-finite values at "
                                                 r"iteration \d+ in state\.eta1, state\.prec"):
        ppl_bsvm.fit(X, y, model=model, method="svi", max_iter=50,
                     learning_rate=lambda count: jnp.where(count > 5, jnp.nan, 0.5))


def test_a_seed_too_large_for_a_key_is_a_value_error(data):
    X, y = data
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*63\)"):
        ppl_bsvm.fit(X, y, model="linear", method="ecm", seed=2**70)


def test_a_seed_that_is_not_one_key_is_a_value_error(data):
    """A split key array was a JAX error from deep inside a sampler (issue 34, item 9)."""
    import jax

    X, y = data
    for seed, message in [(jax.random.split(jax.random.key(0)), r"key array of shape \(2,\) "
                           r"\(from jax.random.split\? pass one of its keys"),
                          (jax.random.split(jax.random.PRNGKey(0)), r"uint32 array of shape "
                           r"\(2, 2\)"),
                          (jax.numpy.zeros(2), "float32 array of shape")]:
        with pytest.raises(ValueError, match="seed must be one JAX PRNG key, got a " + message):
            ppl_bsvm.fit(X, y, model="gp", method="ecm", seed=seed, **CHEAP["ecm"])
    for key in (jax.random.key(3), jax.random.PRNGKey(3)):  # one key of either kind is a seed
        ppl_bsvm.fit(X, y, model="gp", method="ecm", seed=key, **CHEAP["ecm"])


def test_a_single_row_to_predict_is_told_how_to_reshape(data):
    X, y = data
    fit = ppl_bsvm.fit(X, y, model="linear", method="ecm")
    with pytest.raises(ValueError, match=r"single row with X.reshape\(1, -1\)"):
        fit.predict_proba(X[0])


# --- numerical faults (issue "Nothing silent": the reproductions) -----------------------------


@pytest.mark.parametrize("model,method", [("linear", "svi"), ("linear", "ecm"), ("gp", "rvm")])
def test_inputs_whose_squares_overflow_are_refused_up_front(data, model, method):
    X, y = data
    X = X.copy()
    X[-1, 0] = 1e300
    with pytest.raises(ValueError, match=r"X has values up to 1e\+300.*Standardise the features"):
        ppl_bsvm.fit(X, y, model=model, method=method)


def test_prediction_rows_whose_squares_overflow_are_refused(data):
    X, y = data
    fit = ppl_bsvm.fit(X, y, method="bcsvm", module_size=20, query_size=20)
    with pytest.raises(ValueError, match="Standardise the features"):
        fit.predict_proba(np.full((2, 2), 1e300))


@pytest.mark.parametrize("method", ["ecm", "vi", "gpc"])
def test_a_singular_kernel_matrix_gives_finite_draws_not_nan(data, method):
    """K = k(X, X) with a lengthscale of 10^6 and no jitter is all ones (rank one): the draws
    of f come from the degenerate posterior (gaussian.psd_sqrt), never NaN."""
    X, y = data
    fit = ppl_bsvm.fit(X, y, method=method, kernel=RBF(lengthscale=1e6), jitter=0.0,
                       **CHEAP.get(method, {}))
    draws = fit.posterior["f"].values
    assert np.all(np.isfinite(draws)) and np.all(np.isfinite(fit.predict_proba(X)))


def test_non_finite_draws_are_an_error_never_returned(data, monkeypatch):
    """The last line of defence: an engine whose draws broke down raises, naming them."""
    from ppl_bsvm.inference import gaussian

    X, y = data
    monkeypatch.setattr(gaussian, "sample_posterior",
                        lambda key, K, fac, mean, num_draws: np.full((num_draws, len(mean)), np.nan))
    with pytest.raises(FloatingPointError, match=r"non-finite value.*posterior\.f.*jitter"):
        ppl_bsvm.fit(X, y, method="ecm", **CHEAP["ecm"])


def test_predictions_that_break_down_are_an_error_not_nan(data):
    X, y = data
    fit = ppl_bsvm.fit(X, y, method="bcsvm", kernel=RBF(lengthscale=1e6), jitter=0.0,
                       module_size=20, query_size=20)
    for predict in (fit.predict_proba, fit.predict):
        with pytest.raises(FloatingPointError, match="not finite.*increase jitter"):
            predict(X)


@pytest.mark.parametrize("model,method", [("gp", "ecm"), ("linear", "vi"), ("linear", "svi"),
                                          ("gp", "gpc"), ("gp", "bcsvm"), ("gp", "rvm")])
def test_tol_zero_means_the_same_for_every_engine(data, model, method):
    """tol=0 runs until the statistic vanishes (in practice max_iter), for every engine; a
    negative tol is a ValueError naming tol for every engine."""
    X, y = data
    fit = ppl_bsvm.fit(X, y, model=model, method=method, tol=0.0, max_iter=5)
    assert fit.n_iter <= 5 and np.all(np.isfinite(fit.predict_proba(X)))
    with pytest.raises(ValueError, match="tol"):
        ppl_bsvm.fit(X, y, model=model, method=method, tol=-1.0, max_iter=5)
