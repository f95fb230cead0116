"""The ArviZ groups per observation (``ppl_bsvm._pointwise``): log_likelihood, posterior
predictive, observed data, checked against the draws they come from; az.loo / az.compare /
a PPC on them; the size rule; saving."""

import dataclasses
import warnings

import numpy as np
import pytest
from scipy.special import expit

import ppl_bsvm
from ppl_bsvm import _pointwise
from ppl_bsvm.data import design_matrix
from tests._shared import small_problem


@pytest.fixture(scope="module")
def data():
    return small_problem()  # tests/_shared.py: programs shared with the other modules


@pytest.fixture(scope="module")
def fits(data):
    X, y = data
    return {
        "linear": ppl_bsvm.fit(X, y, model="linear", method="vi", num_draws=400, gamma=0.5),
        "gp": ppl_bsvm.fit(X, y, model="gp", method="vi", num_draws=400),
        "gibbs": _quiet_gibbs(X, y),
        "svgp": ppl_bsvm.fit(X, y, model="sparse_gp", method="svgp", num_inducing=10,
                             num_draws=300, likelihood="logit"),
    }


def _quiet_gibbs(X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ppl_bsvm.ConvergenceWarning)  # short chains
        # two chains, as test_persistence's sampler on this problem: one program for both
        return ppl_bsvm.fit(X, y, model="linear", method="gibbs", num_samples=300,
                            num_warmup=100, num_chains=2)


def _hinge(y, f, gamma):
    return -2.0 * gamma * np.maximum(0.0, 1.0 - y * f)


def test_log_likelihood_is_the_pseudo_likelihood_of_the_draws(fits, data):
    X, y = data
    y_pm = np.where(y == fits["gp"].labels.positive, 1.0, -1.0)
    # GP: from the posterior draws of f; linear: f = [X, 1] beta, at the fit's gamma = 0.5
    f_gp = fits["gp"].idata.posterior["f"].values
    beta = fits["linear"].idata.posterior["beta"].values
    f_lin = beta @ design_matrix(X, True).T
    for name, f, gamma in (("gp", f_gp, 1.0), ("linear", f_lin, 0.5)):
        idata = fits[name].idata
        ll = idata.log_likelihood["y"]
        assert ll.dims == ("chain", "draw", "obs") and ll.shape == f.shape
        # exact, but for the noise below TIE_BREAK on the hinge's zeros
        np.testing.assert_allclose(ll.values, _hinge(y_pm, f, gamma), rtol=0,
                                   atol=_pointwise.TIE_BREAK)
        np.testing.assert_array_equal(idata.observed_data["y"].values, y_pm)
    assert np.any(np.all(f_lin * y_pm >= 1, axis=(0, 1)))  # the tie-break case occurs


def test_baseline_log_likelihood_is_its_own(fits, data):
    X, y = data
    fit = fits["svgp"]
    ll = fit.idata.log_likelihood["y"].values
    assert ll.shape == (1, 300, len(y)) and np.all(ll < 0)
    # logistic likelihood: exp(ll) is sigmoid(y f), f drawn from q(f_i): its mean over the
    # draws approaches E[sigmoid(y f)] under q(f_i) (the "logit" link of the fit)
    y_pm = fit.idata.observed_data["y"].values
    p_pos = fit.predict_proba(X, link="logit")
    expected = np.where(y_pm > 0, p_pos, 1 - p_pos)
    mc = np.exp(ll[0])
    se = mc.std(0) / np.sqrt(mc.shape[0])
    assert np.all(np.abs(mc.mean(0) - expected) < 5 * se + 1e-12)


def test_posterior_predictive_draws_the_normalised_pseudo_likelihood(fits):
    fit = fits["gp"]
    f = fit.idata.posterior["f"].values
    y_rep = fit.idata.posterior_predictive["y"].values
    assert y_rep.dtype == np.int8 and set(np.unique(y_rep)) <= {-1, 1}
    # P(y = +1 | f) = L(+1|f) / (L(+1|f) + L(-1|f)) = sigmoid(log L(+1|f) - log L(-1|f))
    p = expit(_hinge(1.0, f, 1.0) - _hinge(-1.0, f, 1.0))
    share = (y_rep == 1).mean(axis=(0, 1))
    se = np.sqrt(p.mean(axis=(0, 1)) * (1 - p.mean(axis=(0, 1))) / f.shape[1]) + 1e-3
    assert np.all(np.abs(share - p.mean(axis=(0, 1))) < 5 * se)


def test_arviz_loo_compare_and_ppc_work(fits):
    import arviz as az
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pareto-k warnings of small fits
        loos = {name: az.loo(fit.idata, pointwise=True) for name, fit in fits.items()}
        table = az.compare({k: fits[k].idata for k in ("linear", "gp", "gibbs")})
    for name, result in loos.items():
        assert np.isfinite(result.elpd) and np.all(np.isfinite(result.elpd_i.values)), name
    # the pseudo-elpd is at most 0 (the hinge pseudo-likelihood is at most 1)
    assert loos["gp"].elpd < 0 and np.all(loos["gp"].elpd_i.values <= 0)
    assert list(table.index) and np.all(np.isfinite(table["elpd"]))
    # every observation has a Pareto k, so az.loo's table of k counts all of them (ties in
    # a tail of importance ratios gave NaN, and ArviZ left those points out)
    for name, result in loos.items():
        assert np.all(np.isfinite(result.pareto_k.values)), name
        assert result.n_data_points == fits[name].idata.observed_data["y"].size
    pc = az.plot_ppc_tstat(fits["gp"].idata, t_stat="mean")
    assert pc is not None
    plt.close("all")


def test_large_fits_get_the_groups_on_request(data, monkeypatch):
    X, y = data
    monkeypatch.setattr(_pointwise, "POINTWISE_LIMIT", 100)
    fit = ppl_bsvm.fit(X, y, model="linear", method="vi", num_draws=50)
    assert "log_likelihood" not in fit.idata.children
    assert "POINTWISE_LIMIT = 100" in fit.idata.attrs[_pointwise.ATTR]
    monkeypatch.setattr(_pointwise, "POINTWISE_LIMIT", 10**7)
    same = ppl_bsvm.fit(X, y, model="linear", method="vi", num_draws=50)
    assert fit.add_log_likelihood(X, y) is fit
    assert _pointwise.ATTR not in fit.idata.attrs
    for group in ("log_likelihood", "posterior_predictive"):
        np.testing.assert_array_equal(fit.idata[group]["y"].values, same.idata[group]["y"].values)
    with pytest.raises(ValueError, match="not the data this fit was fitted to"):
        fit.add_log_likelihood(X[::-1], y[::-1])
    platt = ppl_bsvm.fit(X, y, method="platt")
    assert "log_likelihood" not in platt.idata.children
    with pytest.raises(ValueError, match="no posterior draws"):
        platt.add_log_likelihood(X, y)


def test_saved_fit_keeps_the_groups(fits, data, tmp_path):
    fit = fits["gp"]
    loaded = ppl_bsvm.load(fit.save(tmp_path / "gp"))
    for group in ("log_likelihood", "posterior_predictive", "observed_data"):
        np.testing.assert_array_equal(loaded.idata[group]["y"].values,
                                      fit.idata[group]["y"].values)
    # a checkpointed run: the final fit and its last checkpoint have them
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ppl_bsvm.ConvergenceWarning)
        run = ppl_bsvm.fit(X, y, model="linear", method="svi", max_iter=40, num_draws=100,
                           checkpoint=tmp_path / "ckpt", checkpoint_every=20)
    assert "log_likelihood" in run.idata.children
    assert "log_likelihood" in ppl_bsvm.load(tmp_path / "ckpt").idata.children


def test_every_method_with_draws_has_a_likelihood():
    from ppl_bsvm.api import _REGISTRY, _load_engines

    _load_engines()
    without_draws = {"platt", "bcsvm"}
    for (model, method), engine in _REGISTRY.items():
        defaults = {f.name: f.default for f in dataclasses.fields(engine.options)}
        found = _pointwise.likelihood_of(method, defaults)
        assert (found is None) == (method in without_draws), (model, method)
