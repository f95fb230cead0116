"""pandas in, names out: a DataFrame's columns name the posterior's coordinates, are kept by
the fit (saved too) and checked at prediction as scikit-learn checks them; the metrics take the
user's labels."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest

import ppl_bsvm
from ppl_bsvm import metrics
from ppl_bsvm.data import check_feature_names, feature_names_of
from tests._saved import rewrite, saved_file
from tests._shared import small_problem


@pytest.fixture(scope="module")
def frame():
    X, y = small_problem()  # tests/_shared.py: the engines' programs are other modules'
    df = pd.DataFrame(X, columns=["c0_a", "c1_b"])
    labels = np.where(y > 0, "yes", "no")
    return df, labels


@pytest.fixture(scope="module")
def linear_fit(frame):
    df, labels = frame
    return ppl_bsvm.fit(df, labels, model="linear", method="vi", num_draws=200)


def test_dataframe_columns_name_beta_and_the_fit(frame, linear_fit):
    df, _ = frame
    assert linear_fit.feature_names_in == tuple(df.columns)
    coords = list(linear_fit.idata.posterior["beta"].coords["feature"].values)
    assert coords == [*df.columns, "intercept"]
    assert list(linear_fit.idata["approximation"]["beta_mean"].coords["feature"].values) == coords


def test_inducing_locations_are_named_by_the_columns(frame):
    df, labels = frame
    fit = ppl_bsvm.fit(df, labels, model="sparse_gp", method="svi", num_inducing=10,
                       num_draws=50, max_iter=30)
    assert list(fit.idata["approximation"]["Z"].coords["input_dim"].values) == list(df.columns)


def test_prediction_checks_the_columns_as_scikit_learn(frame, linear_fit):
    df, _ = frame
    p = linear_fit.predict_proba(df)
    with pytest.raises(ValueError, match="same order"):
        linear_fit.predict_proba(df[df.columns[::-1]])
    renamed = df.rename(columns={df.columns[0]: "other"})
    with pytest.raises(ValueError, match=r"unseen at fit time: \['other'\].*missing: \['c0_a'\]"):
        linear_fit.predict_proba(renamed)
    with pytest.raises(ValueError, match="missing"):
        linear_fit.predict_latent(df.drop(columns=df.columns[1]))
    # an array after a DataFrame fit: accepted with scikit-learn's warning, same numbers
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        np.testing.assert_array_equal(linear_fit.predict_proba(df.to_numpy()), p)
    # a DataFrame after an array fit: accepted with a warning
    plain = ppl_bsvm.fit(df.to_numpy(), frame[1], model="linear", method="ecm", tol=1e-6)
    assert plain.feature_names_in is None
    with pytest.warns(UserWarning, match="fitted without feature names"):
        plain.predict(df)


def test_feature_names_of_follows_scikit_learn():
    assert feature_names_of(np.zeros((2, 2))) is None
    assert feature_names_of(pd.DataFrame(np.zeros((2, 2)))) is None  # integer columns
    assert feature_names_of(pd.DataFrame(np.zeros((2, 2)), columns=["a", "b"])) == ("a", "b")
    with pytest.raises(ValueError, match="mixed types"):
        feature_names_of(pd.DataFrame(np.zeros((2, 2)), columns=["a", 1]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_feature_names(np.zeros((2, 2)), None)


def test_a_column_named_intercept(frame):
    df, labels = frame
    named = df.rename(columns={df.columns[0]: "intercept"})
    fit = ppl_bsvm.fit(named, labels, model="linear", method="ecm", tol=1e-6)
    coords = list(fit.idata.posterior["beta"].coords["feature"].values)
    assert coords[0] == "intercept" and coords[-1] == "intercept_"
    plain = ppl_bsvm.fit(named.to_numpy(), labels, model="linear", method="ecm", tol=1e-6)
    np.testing.assert_array_equal(fit.predict_proba(named), plain.predict_proba(named.to_numpy()))


def test_saved_fit_keeps_the_names_and_old_formats_load(linear_fit, frame, tmp_path):
    df, _ = frame
    loaded = ppl_bsvm.load(linear_fit.save(tmp_path / "named"))
    assert loaded.feature_names_in == linear_fit.feature_names_in
    with pytest.raises(ValueError, match="same order"):
        loaded.predict_proba(df[df.columns[::-1]])
    np.testing.assert_array_equal(loaded.predict_proba(df), linear_fit.predict_proba(df))
    # a fit of format 3 (before feature names) loads, without them
    path = tmp_path / "old"
    linear_fit.save(path)
    fields = json.loads(saved_file(path, "fields").read_text())
    del fields["feature_names_in"]
    rewrite(path, "fields", json.dumps(fields).encode())
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "format": 3}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = ppl_bsvm.load(path)
    assert old.feature_names_in is None
    np.testing.assert_array_equal(old.predict_proba(df.to_numpy()), linear_fit.predict_proba(df))


def test_estimator_names_its_posterior_and_checks_columns(frame):
    from ppl_bsvm import BayesianSVC

    df, labels = frame
    clf = BayesianSVC(model="linear", method="ecm", options={"tol": 1e-6}).fit(df, labels)
    assert list(clf.feature_names_in_) == list(df.columns)
    assert clf.posterior_.feature_names_in == tuple(df.columns)
    with pytest.raises(ValueError, match="feature names"):
        clf.predict_proba(df[df.columns[::-1]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.predict_proba(df)
        assert not caught  # the fit inside sees the names again: no second warning
        clf.predict_proba(df.to_numpy())
    assert len(caught) == 1 and "valid feature names" in str(caught[0].message)


def test_classification_report_takes_the_users_labels(frame, linear_fit):
    df, labels = frame
    p = linear_fit.predict_proba(df)
    y_pm = linear_fit.labels.encode(labels)
    expected = metrics.classification_report(y_pm, p)
    assert metrics.classification_report(labels, p, pos_label="yes") == expected
    assert metrics.classification_report(labels, p, pos_label=linear_fit.labels) == expected
    flipped = metrics.classification_report(labels, 1 - p, pos_label="no")
    assert flipped["error"] == expected["error"] and flipped["auc"] == pytest.approx(expected["auc"])
    with pytest.raises(ValueError, match="pos_label"):
        metrics.classification_report(labels, p)
    with pytest.raises(ValueError, match="labels besides pos_label"):
        metrics.classification_report(["yes", "no", "maybe"], [0.5, 0.5, 0.5], pos_label="yes")
    with pytest.raises(ValueError, match="neither"):
        metrics.classification_report(["yes", "maybe"], [0.5, 0.5], pos_label=linear_fit.labels)
