"""ppl_bsvm.BayesianSVC: the scikit-learn API over ppl_bsvm.fit."""

import inspect
import pickle
import subprocess
import sys

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_param_validation, parametrize_with_checks

import ppl_bsvm
from ppl_bsvm import BayesianSVC


@pytest.fixture(scope="module")
def heart():
    X, y = ppl_bsvm.datasets.load("heart", standardize=True)
    return X[:100], y[:100], X[100:160], y[100:160]


def test_lazy_export_does_not_import_scikit_learn():
    code = "import sys, ppl_bsvm; assert 'sklearn' not in sys.modules; ppl_bsvm.BayesianSVC"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert "BayesianSVC" in ppl_bsvm.__all__


def test_fit_exposes_the_posterior_and_scikit_learn_attributes(heart):
    X, y, Xt, yt = heart
    clf = BayesianSVC(method="vi").fit(X, y)
    assert isinstance(clf.posterior_, ppl_bsvm.Fit)
    assert (clf.posterior_.model, clf.posterior_.method) == ("gp", "vi")
    assert clf.n_features_in_ == X.shape[1]
    np.testing.assert_array_equal(clf.classes_, [-1.0, 1.0])
    proba = clf.predict_proba(Xt)
    assert proba.shape == (len(Xt), 2) and isinstance(proba, np.ndarray)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(proba[:, 1], clf.posterior_.predict_proba(Xt))
    decision = clf.decision_function(Xt)
    # probit link: Phi^{-1}(Phi(m / sqrt(1 + v))) is the variance-moderated latent mean
    mean, var = clf.posterior_.predict_latent(Xt)
    np.testing.assert_allclose(decision, mean / np.sqrt(1.0 + var), rtol=1e-9, atol=1e-9)
    pred = clf.predict(Xt)
    np.testing.assert_array_equal(pred, np.where(decision >= 0, 1.0, -1.0))
    np.testing.assert_array_equal(pred, clf.classes_[np.argmax(proba, axis=1)])
    assert clf.score(Xt, yt) > 0.75


def test_default_svi_with_a_short_run(heart):
    X, y, Xt, yt = heart
    clf = BayesianSVC(options={"max_iter": 30}).fit(X, y)
    assert clf.posterior_.method == "svi" and clf.posterior_.n_iter <= 30
    assert clf.score(Xt, yt) > 0.75


def test_proba_columns_follow_classes_whatever_the_labels(heart):
    """Relabelling so that the sorted order flips the classes flips the columns.

    The GP Bayesian SVM is symmetric under y -> -y (f -> -f), so with the labels "b" for +1 and
    "a" for -1, classes_ = ["a", "b"] and P("b") must be the numeric fit's P(-1).
    """
    X, y, Xt, _ = heart
    numeric = BayesianSVC(method="vi").fit(X, y).predict_proba(Xt)
    same = BayesianSVC(method="vi").fit(X, np.where(y > 0, "yes", "no"))
    flipped = BayesianSVC(method="vi").fit(X, np.where(y > 0, "a", "b"))
    np.testing.assert_array_equal(same.classes_, ["no", "yes"])
    np.testing.assert_array_equal(flipped.classes_, ["a", "b"])
    np.testing.assert_allclose(same.predict_proba(Xt), numeric, rtol=0, atol=1e-10)
    np.testing.assert_allclose(flipped.predict_proba(Xt), numeric[:, ::-1], rtol=0, atol=1e-8)
    np.testing.assert_array_equal(
        flipped.predict(Xt), np.where(numeric[:, 1] > 0.5, "a", "b")
    )


@pytest.mark.parametrize(
    "labels",
    [
        lambda y: y > 0,
        lambda y: np.where(y > 0, "spam", "ham"),
        lambda y: np.where(y > 0, "spam", "ham").astype(object),
        lambda y: np.where(y > 0, 7, 3),
    ],
    ids=["bool", "str", "object", "int"],
)
def test_labels_round_trip(heart, labels):
    X, y, Xt, yt = heart
    y_user = labels(y)
    clf = BayesianSVC(model="linear", method="vi").fit(X, y_user)
    np.testing.assert_array_equal(clf.classes_, np.unique(y_user))
    pred = clf.predict(Xt)
    assert set(pred.tolist()) <= set(np.unique(y_user).tolist())
    # the positive class of the Fit is classes_[1]
    assert clf.posterior_.labels.positive == clf.classes_[1]
    np.testing.assert_array_equal(pred == clf.classes_[1], clf.predict_proba(Xt)[:, 1] > 0.5)


@pytest.mark.parametrize("y", [np.zeros(6), np.array([0, 1, 2, 0, 1, 2])], ids=["1", "3"])
def test_not_two_classes_is_a_value_error_naming_y(y):
    X = np.random.default_rng(0).normal(size=(6, 2))
    with pytest.raises(ValueError, match=r"\by\b.*class|class.*\by\b"):
        BayesianSVC(method="vi").fit(X, y)


def test_feature_count_mismatch_at_predict(heart):
    X, y, Xt, _ = heart
    clf = BayesianSVC(method="vi").fit(X, y)
    for method in (clf.predict, clf.predict_proba, clf.decision_function):
        with pytest.raises(ValueError, match="features"):
            method(Xt[:, :5])


def test_parameters_are_checked_at_fit_not_in_init(heart):
    X, y, _, _ = heart
    bad = BayesianSVC(method="no-such-method", options="fast", fit_intercept="yes")
    assert bad.get_params()["method"] == "no-such-method"  # __init__ stores, does not validate
    with pytest.raises(ValueError, match="method"):
        bad.fit(X, y)
    with pytest.raises(ValueError, match="options"):
        BayesianSVC(method="vi", options="fast").fit(X, y)
    with pytest.raises(ValueError, match="fit_intercept"):
        BayesianSVC(model="linear", method="vi", fit_intercept="yes").fit(X, y)
    with pytest.raises(ValueError, match="fit_intercept"):
        BayesianSVC(model="linear", method="vi", options={"intercept": False}).fit(X, y)
    with pytest.raises(ValueError, match="seed"):
        BayesianSVC(method="vi", options={"seed": 1}).fit(X, y)
    with pytest.raises(ValueError, match="kernel"):
        BayesianSVC(model="linear", method="vi", kernel="matern52").fit(X, y)
    with pytest.raises(ValueError, match="no_such_option"):
        BayesianSVC(method="vi", options={"no_such_option": 1}).fit(X, y)


def test_fit_intercept_controls_the_linear_models_intercept(heart):
    X, y, _, _ = heart
    with_b = BayesianSVC(model="linear", method="vi").fit(X, y).posterior_
    without = BayesianSVC(model="linear", method="vi", fit_intercept=False).fit(X, y).posterior_
    assert with_b.options["intercept"] is True and without.options["intercept"] is False
    assert with_b.posterior["beta"].shape[-1] == X.shape[1] + 1
    assert without.posterior["beta"].shape[-1] == X.shape[1]


def test_options_reach_the_engine(heart):
    X, y, _, _ = heart
    clf = BayesianSVC(method="ecm", options={"gamma": 0.5, "max_iter": 7, "tol": 1e-30})
    fitted = clf.fit(X, y).posterior_
    assert fitted.options["gamma"] == 0.5
    assert (fitted.n_iter, fitted.stop_reason) == (7, "max_iter")


def test_pipeline_grid_search_and_cross_val_score(heart):
    X, y, Xt, yt = heart
    pipe = make_pipeline(StandardScaler(), BayesianSVC(method="ecm"))
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.shape == (3,) and scores.mean() > 0.7
    grid = GridSearchCV(
        pipe,
        {"bayesiansvc__options": [{"gamma": 0.5}, {"gamma": 2.0}]},
        cv=3,
        scoring="neg_log_loss",
    ).fit(X, y)
    assert grid.best_params_["bayesiansvc__options"] in ({"gamma": 0.5}, {"gamma": 2.0})
    best = grid.best_estimator_[-1]
    assert best.posterior_.options["gamma"] == grid.best_params_["bayesiansvc__options"]["gamma"]
    assert grid.score(Xt, yt) < 0  # neg_log_loss of the refitted pipeline


def test_one_vs_rest_handles_more_than_two_classes():
    from sklearn.datasets import load_iris
    from sklearn.multiclass import OneVsRestClassifier

    X, y = load_iris(return_X_y=True)
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[:100], order[100:]
    ovr = make_pipeline(StandardScaler(), OneVsRestClassifier(BayesianSVC(model="linear",
                                                                          method="vi")))
    ovr.fit(X[train], names[train])
    proba = ovr.predict_proba(X[test])
    assert list(ovr.classes_) == ["setosa", "versicolor", "virginica"]
    assert proba.shape == (50, 3) and np.allclose(proba.sum(axis=1), 1.0)
    # each binary model sees its class against the rest; measured accuracy 0.88, as scikit-
    # learn's one-vs-rest logistic regression on this split (versicolor is not linearly
    # separable from the rest)
    assert np.mean(ovr.predict(X[test]) == names[test]) > 0.8
    assert len(ovr[-1].estimators_) == 3
    assert all(list(est.classes_) == [0, 1] for est in ovr[-1].estimators_)


def test_clone_refits_to_identical_predictions(heart):
    X, y, Xt, _ = heart
    clf = BayesianSVC(method="vi", seed=3, options={"max_iter": 50}).fit(X, y)
    twin = clone(clf)
    assert not hasattr(twin, "posterior_")
    assert twin.get_params() == clf.get_params()
    twin.fit(X, y)
    np.testing.assert_array_equal(twin.predict_proba(Xt), clf.predict_proba(Xt))
    np.testing.assert_array_equal(twin.decision_function(Xt), clf.decision_function(Xt))


@pytest.mark.parametrize(
    "params",
    [dict(method="ecm"), dict(method="svi", options={"max_iter": 20}), dict(model="linear", method="vi")],
    ids=["gp-ecm", "gp-svi", "linear-vi"],
)
def test_pickle_round_trip_is_exact(heart, params):
    X, y, Xt, _ = heart
    clf = BayesianSVC(**params).fit(X, np.where(y > 0, "pos", "neg"))
    loaded = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(loaded.classes_, clf.classes_)
    for method in ("predict", "predict_proba", "decision_function"):
        np.testing.assert_array_equal(getattr(loaded, method)(Xt), getattr(clf, method)(Xt))
    np.testing.assert_array_equal(
        loaded.posterior_.posterior["f" if clf.model == "gp" else "beta"],
        clf.posterior_.posterior["f" if clf.model == "gp" else "beta"],
    )
    unfitted = pickle.loads(pickle.dumps(BayesianSVC(method="vi")))
    assert unfitted.get_params() == BayesianSVC(method="vi").get_params()


# One configuration per estimator class: scikit-learn's checks exercise the wrapper's own
# input handling, the same code whatever the model and method. BayesianSVC(model="linear",
# method="vi") was checked too until issue 31 (84 s of the suite, each check compiling the linear
# engine for its own shapes); what its checks asked of the linear model is in the next test.
@pytest.mark.slow
@parametrize_with_checks(
    [BayesianSVC(method="ecm"), ppl_bsvm.BCSVMClassifier(module_size=20, query_size=10)],
)
def test_scikit_learn_conformance(estimator, check):
    check(estimator)


def test_linear_model_on_one_feature_predicts_the_same_in_any_batch(heart):
    """What scikit-learn's checks asked of the linear model beyond the wrapper's input
    handling: a fit on one feature (check_fit2d_1feature) and predictions that do not depend
    on the batch or the order they come in (check_methods_subset_invariance,
    check_methods_sample_order_invariance; the test sets are padded to a power of two)."""
    X, y, Xt, _ = heart
    clf = BayesianSVC(model="linear", method="vi").fit(X[:, :1], y)
    assert clf.posterior_.posterior["beta"].shape[-1] == 2  # the feature and the intercept
    whole = clf.predict_proba(Xt[:, :1])
    assert np.all((whole > 0) & (whole < 1))
    for part in (slice(0, 1), slice(3, 10), slice(0, 33)):
        np.testing.assert_allclose(clf.predict_proba(Xt[part, :1]), whole[part], rtol=1e-12,
                                   atol=1e-14)
    order = np.arange(len(Xt))[::-1]
    np.testing.assert_allclose(clf.predict_proba(Xt[order, :1]), whole[order], rtol=1e-12,
                               atol=1e-14)


def test_a_method_without_latent_posterior_uses_its_score():
    """SVM + Platt has no latent Gaussian: decision_function is the SVM score, predict its sign."""
    X, y = ppl_bsvm.datasets.load("heart", standardize=True)
    clf = ppl_bsvm.BayesianSVC(method="platt").fit(X[:150], y[:150])
    score = clf.decision_function(X[150:])
    np.testing.assert_array_equal(score, clf.posterior_.predictor.decision_function(X[150:]))
    np.testing.assert_array_equal(clf.predict(X[150:]), clf.classes_[(score >= 0).astype(int)])
    assert clf.predict_proba(X[150:]).shape == (len(y) - 150, 2)


ESTIMATORS = ["BayesianSVC", "BCSVMClassifier", "RVMRegressor", "RVMClassifier"]


@pytest.mark.parametrize("name", ESTIMATORS)
def test_parameters_are_keyword_only_and_constrained(name):
    """One style for every estimator (as scikit-learn's): keyword-only parameters, each with a
    declared constraint that fit checks with an error naming it (InvalidParameterError)."""
    cls = getattr(ppl_bsvm, name)
    params = inspect.signature(cls).parameters
    assert params and all(p.kind is p.KEYWORD_ONLY for p in params.values())
    assert set(cls._parameter_constraints) == set(params)
    with pytest.raises(TypeError, match="positional"):
        cls("rbf")
    check_param_validation(name, cls())
