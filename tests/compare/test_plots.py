"""The comparison figures say what they show: captions, bin counts, steps on the x-axis."""

import types

import matplotlib
import numpy as np
import pytest

from ppl_bsvm._idata import make_idata
from ppl_bsvm.compare import plots
from ppl_bsvm.data import BinaryLabels
from ppl_bsvm.predictive import GaussianPredictor
from ppl_bsvm.result import Fit

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    matplotlib.pyplot.close("all")


def _fit(method, sd, k=12, chains=1, seed=0):
    """A Fit whose ``f`` has k coordinates (training indices 100..), the last ones widest."""
    rng = np.random.default_rng(seed)
    scale = sd * np.linspace(0.5, 2.0, k)
    draws = scale * rng.standard_normal((chains, 400, k))
    idata = make_idata({"f": draws}, coords={"obs": np.arange(100, 100 + k)},
                       dims={"f": ["obs"]})
    return Fit(idata=idata, method=method, model="gp",
               predictor=GaussianPredictor(lambda X: (X[:, 0], np.ones(len(X)))),
               labels=BinaryLabels(-1, 1), n_features_in=1)


def test_marginals_caption_names_the_points_shown_and_titles_do_not_overlap():
    fits = {name: _fit(name, sd, seed=i) for i, (name, sd) in
            enumerate([("gibbs", 1.0), ("vi", 0.9), ("svi", 1.1), ("ecm", 0.5), ("rvm", 1.3)])}
    fig = plots.plot_marginals(fits, "f", max_panels=4, num_draws=300)
    assert fig._suptitle.get_text() == ("Marginal posteriors of f: the 4 coordinates where gibbs "
                                        "is least certain (largest sd)")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["f[108]", "f[109]", "f[110]", "f[111]"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(fits)
    assert all(len(ax.texts) == 0 for ax in shown)  # no annotations inside the panels
    fig.canvas.draw()
    boxes = [ax.title.get_window_extent() for ax in shown] + [fig._suptitle.get_window_extent()]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


@pytest.mark.parametrize("n, bins", [(20, 3), (70, 4), (120, 6), (1000, 10)])
def test_reliability_bins_suit_the_test_size_and_show_their_counts(n, bins):
    assert plots.reliability_bins(n) == bins
    rng = np.random.default_rng(0)
    p = rng.uniform(size=n)
    y = np.where(rng.uniform(size=n) < p, 1, -1)
    fig = plots.plot_reliability(y, {"a": p, "b": np.clip(p + 0.1, 0, 1)})
    counts = fig.axes[1].patches
    assert len(counts) == 2 * bins
    assert sum(bar.get_height() for bar in counts[:bins]) == n  # every test point, once
    assert fig.axes[0].get_title() == f"{n} test points, {bins} bins of equal width"


def test_objective_traces_count_steps():
    svi = types.SimpleNamespace(trace={"elbo": np.array([-5.0, -3.0, -2.5]),
                                       "elbo_step": np.array([40, 80, 120])})
    ecm = types.SimpleNamespace(trace={"objective": np.array([3.0, 2.0, 1.5, 1.4])})
    fig = plots.plot_objective_traces({"svi": svi, "ecm": ecm})
    (line_svi,), (line_ecm,) = (ax.get_lines() for ax in fig.axes)
    np.testing.assert_array_equal(line_svi.get_xdata(), [40, 80, 120])
    np.testing.assert_array_equal(line_ecm.get_xdata(), [1, 2, 3, 4])
    assert {ax.get_xlabel() for ax in fig.axes} == {"step"}


def test_mcmc_trace_shows_the_worst_mixing_coordinates_chain_by_chain():
    """One row per coordinate, the smallest bulk ESS first (as the summary reports it), one
    colour per chain, the ESS in each row's title; a coordinate made sticky (each value held
    for ten draws) is the one shown first."""
    from ppl_bsvm.inference.mcmc._common import bulk_ess

    fit = _fit("gibbs", 1.0, k=5, chains=3)
    f = fit.idata.posterior["f"].values
    f[:, :, 2] = np.repeat(f[:, ::10, 2], 10, axis=1)  # f[102] autocorrelated
    index, ess = plots.worst_ess_coords(fit, "f", 2)
    assert index[0] == 2 and ess[0] == pytest.approx(bulk_ess(f)[2])
    assert ess[0] < ess[1] == pytest.approx(np.sort(bulk_ess(f))[1])
    fig = plots.plot_mcmc_trace(fit, "f", max_panels=2, name="reference")
    assert fig._suptitle.get_text().startswith("reference (gp): 3 chains of 400 draws")
    assert "smallest bulk ESS" in fig._suptitle.get_text()
    (d0, t0), (d1, t1) = np.reshape(fig.axes, (2, 2))
    assert t0.get_title() == f"f[102]: bulk ESS {ess[0]:.0f} of 1200 draws"
    assert [t.get_text() for t in t0.get_legend().get_texts()] == ["chain 0", "chain 1", "chain 2"]
    assert len(t0.get_lines()) == len(d0.get_lines()) == 3


def test_sd_scatter_puts_each_coordinate_against_the_reference():
    """The headline figure: one point per coordinate and candidate at (reference sd,
    candidate sd), the diagonal and the +-10 % band, the median ratio in the legend at a
    readable size, labelled axes; a candidate without draws is left out."""
    ref, narrow, wide = _fit("gibbs", 1.0, seed=0), _fit("vi", 0.6, seed=1), _fit("lr", 1.0, seed=2)
    no_draws = Fit(idata=make_idata({}), method="platt", model="gp", predictor=None,
                   labels=BinaryLabels(-1, 1), n_features_in=1)
    fig = plots.plot_sd_scatter(ref, {"vi": narrow, "vi + LR": wide, "platt": no_draws}, "f",
                                reference_name="gibbs")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "gibbs posterior sd of f"
    assert ax.get_ylabel() == "candidate posterior sd of f" and ax.get_title()
    points = [np.asarray(c.get_offsets()) for c in ax.collections[1:]]  # after the band
    assert [len(p) for p in points] == [12, 12]
    ref_sd = ref.idata.posterior["f"].values.reshape(-1, 12).std(0)
    np.testing.assert_allclose(points[0][:, 0], ref_sd)
    ratio = np.median(narrow.idata.posterior["f"].values.reshape(-1, 12).std(0) / ref_sd)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts == ["within 10%", "equal sd", f"vi (median ratio {ratio:.2f})",
                     f"vi + LR (median ratio {np.median(points[1][:, 1] / ref_sd):.2f})"]
    assert 0.55 < ratio < 0.65
    assert min(t.get_fontsize() for t in ax.get_legend().get_texts()) >= 8
    with pytest.raises(ValueError, match="no candidate has posterior draws of 'f'"):
        plots.plot_sd_scatter(ref, {"platt": no_draws}, "f")


def test_forest_states_its_intervals_and_names_its_axes():
    fits = {name: _fit(name, sd, seed=i) for i, (name, sd) in
            enumerate([("gibbs", 1.0), ("vi", 0.6), ("ecm", 0.3)])}
    fig = plots.plot_forest(fits, "f", max_panels=5, num_draws=300)
    title = fig._suptitle.get_text()
    assert "50 % (thick) and 90 % (thin)" in title and "5 coordinates where gibbs" in title
    assert "ECM: a pseudo-posterior" in title
    labels_ax, forest_ax = fig.axes[:2]
    assert forest_ax.get_xlabel() == "f (posterior value)"
    assert [t.get_text() for t in labels_ax.get_xticklabels()] == ["training point"]
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == list(fits)
    assert min(t.get_fontsize() for t in legend.get_texts()) >= 8
    two = plots.plot_forest({"gibbs": fits["gibbs"], "vi": fits["vi"]}, "f", num_draws=300)
    title = two._suptitle.get_text()
    assert "all 12 coordinates" in title and "ECM" not in title


def _public_figures():
    """Every public plot function of ppl_bsvm.compare.plots, drawn on small fits."""
    fits = {name: _fit(name, sd, k=6, seed=i) for i, (name, sd) in
            enumerate([("gibbs", 1.0), ("vi", 0.6)])}
    sampler = _fit("gibbs", 1.0, k=6, chains=2)
    traced = types.SimpleNamespace(trace={"elbo": np.array([-5.0, -3.0, -2.5])})
    rng = np.random.default_rng(0)
    p_ref = rng.uniform(size=60)
    y = np.where(rng.uniform(size=60) < p_ref, 1, -1)
    return {
        "plot_sd_scatter": plots.plot_sd_scatter(fits["gibbs"], {"vi": fits["vi"]}, "f"),
        "plot_marginals": plots.plot_marginals(fits, "f", num_draws=200),
        "plot_forest": plots.plot_forest(fits, "f", num_draws=200),
        "plot_predictive_scatter": plots.plot_predictive_scatter(
            p_ref, {"vi": np.clip(p_ref + 0.05, 0, 1), "ecm": p_ref ** 1.2}),
        "plot_reliability": plots.plot_reliability(y, {"gibbs": p_ref}),
        "plot_objective_traces": plots.plot_objective_traces({"svi": traced}),
        "plot_mcmc_trace": plots.plot_mcmc_trace(sampler, "f", max_panels=2),
        "plot_rank": plots.plot_rank(sampler, "f", max_panels=2),
        "plot_ess": plots.plot_ess(sampler, "f", max_panels=2),
        "plot_accuracy_time": plots.plot_accuracy_time(
            _accuracy_table(), {"vi": 0.05, "ecm": 0.02}, cold_seconds={"vi": 1.5, "ecm": 1.0},
            reference_seconds=3.0, reference_name="gibbs"),
    }


def _accuracy_table():
    import pandas as pd

    return pd.DataFrame({"candidate": ["vi", "vi", "ecm", "ecm"],
                         "variable": ["f", "predictive", "f", "predictive"],
                         "sd_ratio": [0.6, np.nan, 0.3, np.nan],
                         "coverage_90": [0.7, np.nan, 0.4, np.nan]})


def _labelled(ax, axis: str) -> bool:
    """``ax`` says what its ``axis`` shows: a label, or a sibling (shared axis) with one, or
    no tick labels to explain (densities without a y scale, arviz's label column)."""
    get = ax.get_xlabel if axis == "x" else ax.get_ylabel
    if get():
        return True
    shared = ax.get_shared_x_axes() if axis == "x" else ax.get_shared_y_axes()
    if any((s.get_xlabel() if axis == "x" else s.get_ylabel()) for s in shared.get_siblings(ax)):
        return True
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    values = ax.get_xticks() if axis == "x" else ax.get_yticks()
    visible = [t for t in ticks if t.get_visible() and t.get_text()]
    return len(values) == 0 or (axis == "x" and visible and not any(
        c.isdigit() for t in visible for c in t.get_text()))


def test_every_public_plot_has_a_title_labelled_axes_and_a_readable_legend():
    """Issue 33's standard for every public plot function: a title, every panel's axes
    labelled (or saying nothing that needs a label), legends at 8 pt or more."""
    figures = _public_figures()
    public = {n for n in plots.__all__ if n.startswith("plot_")}
    assert set(figures) == public
    for name, fig in figures.items():
        titles = [fig._suptitle.get_text() if fig._suptitle else ""]
        titles += [ax.get_title() for ax in fig.axes]
        assert any(titles), name
        for ax in [a for a in fig.axes if a.get_visible()]:
            assert _labelled(ax, "x"), (name, ax.get_title(), "x")
            assert _labelled(ax, "y"), (name, ax.get_title(), "y")
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
        for legend in legends:
            assert min(t.get_fontsize() for t in legend.get_texts()) >= 8, name
        matplotlib.pyplot.close(fig)


def test_a_gaussian_approximation_is_drawn_as_its_exact_density():
    """A fit that stores its Gaussian (``approximation``: mean and variance) is drawn as the
    normal density, not as a kernel density estimate of its draws; the caption says which."""
    import xarray as xr

    reference, vi = _fit("gibbs", 1.0, k=3, seed=0), _fit("vi", 0.5, k=3, seed=1)
    mean, sd = np.array([0.1, -0.2, 0.3]), np.array([0.25, 0.5, 0.75])
    vi.idata["approximation"] = xr.DataTree(xr.Dataset({"f_mean": ("obs", mean),
                                                        "f_var": ("obs", sd ** 2)}))
    m, s = plots.gaussian_marginals(vi, "f")
    np.testing.assert_allclose(m, mean) and np.testing.assert_allclose(s, sd)
    assert plots.gaussian_marginals(reference, "f") is None
    fig = plots.plot_marginals({"gibbs": reference, "vi": vi}, "f", num_draws=300)
    assert "vi: the Gaussian approximation's exact density" in fig._suptitle.get_text()
    for j, ax in enumerate(a for a in fig.axes if a.get_visible()):
        _, line = ax.get_lines()  # gibbs (kde), vi (exact)
        x, y = line.get_xdata(), line.get_ydata()
        np.testing.assert_allclose(y, np.exp(-0.5 * ((x - mean[j]) / sd[j]) ** 2)
                                   / (sd[j] * np.sqrt(2 * np.pi)), rtol=1e-12)


def test_rank_and_ess_plots_show_the_worst_mixing_coordinates():
    sampler = _fit("gibbs", 1.0, k=6, chains=3)
    index, ess = plots.worst_ess_coords(sampler, "f", 2)
    for fig in (plots.plot_rank(sampler, "f", max_panels=2),
                plots.plot_ess(sampler, "f", max_panels=2, min_ess=300)):
        titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
        assert titles == [f"f[{100 + i}]: bulk ESS {e:.0f} of 1200" for i, e in zip(index, ess)]
        matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match="one chain"):
        plots.plot_rank(_fit("gibbs", 1.0, k=6, chains=1), "f")
    with pytest.raises(ValueError, match="no posterior draws of 'beta'"):
        plots.plot_ess(sampler, "beta")


def test_accuracy_against_time_puts_each_candidate_at_its_time_and_measure():
    fig = plots.plot_accuracy_time(_accuracy_table(), {"vi": 0.05, "ecm": 0.02},
                                   cold_seconds={"vi": 1.5})
    sd_ax, cov_ax = fig.axes
    points = {tuple(np.round(c.get_offsets()[0], 6)) for c in sd_ax.collections}
    assert {(0.05, 0.6), (0.02, 0.3), (1.5, 0.6)} <= points
    assert {tuple(np.round(c.get_offsets()[0], 6)) for c in cov_ax.collections} >= {(0.05, 0.7)}
    assert sd_ax.get_xscale() == "log"
    matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match="no 'f' row for \\['svi'\\]"):
        plots.plot_accuracy_time(_accuracy_table(), {"svi": 1.0})
    with pytest.raises(ValueError, match="seconds must be positive"):
        plots.plot_accuracy_time(_accuracy_table(), {"vi": 0.0})
