import dataclasses

import jax
import numpy as np
import pytest
import xarray as xr

import ppl_bsvm
from ppl_bsvm.api import get_engine, list_methods
from tests._shared import N, small_problem


def test_unknown_model_and_method_list_valid_names(toy2d):
    X, y = toy2d
    with pytest.raises(ValueError, match=r"valid models are \['linear', 'gp', 'sparse_gp'\]"):
        ppl_bsvm.fit(X, y, model="svm", method="ecm")
    with pytest.raises(ValueError, match="valid methods for model 'gp' are .*'ecm'"):
        ppl_bsvm.fit(X, y, model="gp", method="magic")


def test_unknown_option_is_an_error_not_ignored(toy2d):
    X, y = toy2d
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['max_iters'\].*valid options"):
        ppl_bsvm.fit(X, y, model="gp", method="ecm", max_iters=10)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_iter": 0}, "max_iter"),
        ({"tol": -1.0}, "tol"),
        ({"gamma": 0.0}, "gamma"),
        ({"link": "logit"}, "valid links"),
        ({"jitter": -1e-6}, "jitter"),
    ],
)
def test_bad_option_values(toy2d, options, message):
    X, y = toy2d
    with pytest.raises(ValueError, match=message):
        ppl_bsvm.fit(X, y, model="gp", method="ecm", **options)


def test_linear_model_takes_no_kernel(toy2d):
    X, y = toy2d
    with pytest.raises(ValueError, match="kernel is not used"):
        ppl_bsvm.fit(X, y, model="linear", method="ecm", kernel="rbf")


def test_bad_seed(toy2d):
    X, y = toy2d
    with pytest.raises(ValueError, match="seed"):
        ppl_bsvm.fit(X, y, model="gp", method="ecm", seed=-3)


def test_bad_data_reaches_the_user_as_value_error(toy2d):
    X, y = toy2d
    X = X.copy()
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ppl_bsvm.fit(X, y, model="gp", method="ecm")


@pytest.fixture(scope="module")
def string_fit():
    X, y = small_problem(seed=3)  # tests/_shared.py: the ECM's programs are other modules'
    y = np.where(y == 1, "spam", "ham")
    return X, y, ppl_bsvm.fit(X, y, model="gp", method="ecm", seed=1)


def test_fit_face(string_fit):
    X, y, fit = string_fit
    assert fit.method == "ecm" and fit.model == "gp"
    assert fit.labels.positive == "spam" and fit.n_features_in == 2
    assert fit.stop_reason in ("tol", "max_iter") and fit.n_iter >= 1
    assert fit.timings["total"] > 0
    assert fit.trace["objective"].shape == (fit.n_iter,)
    assert isinstance(fit.idata, xr.DataTree)
    assert fit.idata.posterior["f"].dims == ("chain", "draw", "obs")
    assert "approximation" in fit.idata.children and "observed_data" in fit.idata.children
    assert set(fit.hyperparameters) == {"lengthscale", "variance"}
    assert "ecm" in fit.summary()


def test_predictions_in_user_labels_agree_with_proba(string_fit):
    X, y, fit = string_fit
    p = fit.predict_proba(X)
    labels = fit.predict(X)
    assert p.dtype == np.float64 and p.shape == (N,)
    np.testing.assert_array_equal(labels, np.where(p >= 0.5, "spam", "ham"))
    assert np.mean(labels == y) > 0.8
    mean, var = fit.predict_latent(X)
    assert mean.shape == var.shape == (N,) and np.all(var >= 0)
    for link in ("paper", "probit", "sign", "normalized"):
        q = fit.predict_proba(X, link=link)
        np.testing.assert_array_equal(q >= 0.5, mean >= 0)  # every link is a monotone rule


def test_predict_validates_X(string_fit):
    _, _, fit = string_fit
    with pytest.raises(ValueError, match="has 3 features"):
        fit.predict_proba(np.ones((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        fit.predict(np.array([[np.nan, 0.0]]))


def test_float64_inside_without_touching_global_config(string_fit):
    _, _, fit = string_fit
    assert fit.idata.posterior["f"].dtype == np.float64
    assert not jax.config.jax_enable_x64


def test_registry_lists_engines():
    methods = list_methods()
    assert list(methods.columns) == ["model", "method", "description"]
    rows = list(methods.itertuples(index=False, name=None))
    assert ("gp", "ecm", get_engine("gp", "ecm").summary) in rows and rows == sorted(rows)
    assert methods["description"].str.len().min() > 0


def test_describe_reads_each_option_from_the_engine():
    for model, method in [("gp", "rvm"), ("gp", "nuts"), ("sparse_gp", "svi"), ("linear", "vi")]:
        table = ppl_bsvm.describe(model, method)
        options = get_engine(model, method).options
        fields = {f.name: f.default for f in dataclasses.fields(options)}
        assert list(table.index) == list(fields)  # every option, in declaration order
        assert table["default"].to_dict() == fields
        assert (table["meaning"].str.len() > 10).all()  # each has a meaning
    for model, method in ppl_bsvm.list_methods()[["model", "method"]].itertuples(index=False):
        # no option falls back to the options class's own summary: each has its entry
        summary = " ".join(get_engine(model, method).options.__doc__.split("\n\n")[0].split())
        meanings = ppl_bsvm.describe(model, method)["meaning"]
        assert not (meanings == summary).any(), (model, method)
    svi = ppl_bsvm.describe("sparse_gp", "svi")["meaning"]  # the engine's own Options section
    assert svi["max_iter"] == "int, default=20000; Minibatch steps at most."
    assert "Split every minibatch over these devices" in svi["devices"]
    nuts = ppl_bsvm.describe("gp", "nuts")["meaning"]
    # per-field entries: the piece's (Sampler's) and the engine function's own Parameters
    assert nuts["num_warmup"] == "int; Burn-in iterations per chain."
    assert "hyperparameters fixed" in nuts["hyperpriors"]
    assert nuts["num_warmup"] != nuts["num_chains"]
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        ppl_bsvm.describe("gp", "nope")


def test_summary_is_a_table_with_each_hyperparameter_once(heart):
    X, y = heart
    with pytest.warns(ppl_bsvm.ConvergenceWarning):
        # test_bbsvm's learned fit's shapes and options: its programs serve this one
        fit = ppl_bsvm.fit(X[:120], y[:120], model="gp", method="vi", learn_hyperparameters=True,
                           max_iter=5, num_draws=10)
    text = fit.summary()
    lines = text.splitlines()
    assert lines[0] == "Fit(method='vi', model='gp')"
    names = [line[2:].split("  ")[0] for line in lines[1:]]
    assert names == ["stopped", "time", "elbo (final)", "lengthscale", "variance",
                     "jitter (relative)"]
    assert fit._summary_rows()[2][1] == f"{float(fit.idata['approximation']['elbo']):.6g}"
    assert len({line.index(value) for line, (_, value) in zip(lines[1:], fit._summary_rows())}) == 1
    html = fit._repr_html_()
    assert html.startswith("<table>") and html.count("<tr>") == len(names)
    assert "lengthscale" in html and "method=&#x27;vi&#x27;" in html
    # a sampler's run: its divergences and mean acceptance, not its per-draw statistics
    sampled = dataclasses.replace(fit, trace={"diverging": np.array([0, 1, 1]),
                                              "acceptance_rate": np.array([0.7, 0.8, 0.9]),
                                              "tree_depth": np.array([3, 4, 5]),
                                              "step_size": np.array([0.1, 0.1, 0.1])})
    rows = dict(sampled._summary_rows())
    assert rows["divergences"] == "2" and rows["acceptance rate (mean)"] == "0.8"
    assert not {"tree_depth", "step_size", "elbo (last)"} & set(rows)


def test_summary_time_adds_up_and_a_samplers_rows_say_what_it_kept():
    """The time row: total = its disjoint parts + other, the engine's own parts named as
    included; a sampler's stop counts the kept draws apart from the warmup; R-hat and both
    ESS with the number of draws, and a word where ESS exceeds it (antithetic chains)."""
    from ppl_bsvm.result import _time_row

    row = _time_row({"engine": 2.0, "inducing": 0.5, "polish": 0.25, "pointwise": 0.125,
                     "total": 2.5})
    assert row == ("2.5 s = engine 2 + log-likelihood for az.loo 0.125 + other 0.38 "
                   "(engine includes inducing 0.5, polish 0.25)")
    row = _time_row({"mcmc": 1.5, "compile": 3.0, "pointwise": 0.5, "total": 5.5})
    assert row == "5.5 s = compilation 3 + sampling 1.5 + log-likelihood for az.loo 0.5 + other 0.5"
    X, y = small_problem()
    fit = ppl_bsvm.fit(X, y, model="gp", method="vi", num_draws=50)
    text = dict(fit._summary_rows())["time"]
    total, parts = text.split(" s = ")
    numbers = [float(w) for w in parts.split("(")[0].replace("+", " ").split()
               if w.replace(".", "").replace("e-", "").isdigit()]
    assert sum(numbers) == pytest.approx(float(total), abs=0.01)
    idata = fit.idata.copy()
    idata.attrs.update(rhat_max=1.004, ess_bulk_min=75.2, ess_tail_min=31.0)
    sampled = dataclasses.replace(fit, idata=idata, stop_reason="draws", n_iter=150,
                                  options={**fit.options, "num_warmup": 100})
    rows = dict(sampled._summary_rows())
    assert rows["stopped"] == "all draws: 50 per chain x 1 chain, after 100 warmup iterations"
    assert rows["R-hat (max)"] == "1.004"
    assert rows["ESS bulk (min)"].startswith("75 of 50 draws (more than the draws: ")
    assert rows["ESS tail (min)"] == "31 of 50 draws"
    assert "R-hat (max)" not in dict(fit._summary_rows())
