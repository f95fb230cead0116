"""Plots comparing fits. Each returns an object that Jupyter shows inline (an arviz-plots
``PlotCollection`` or a matplotlib ``Figure``) and that saves with ``.savefig(path)``."""

from __future__ import annotations

import textwrap

import numpy as np

from .._checks import positive_int
from ..metrics import calibration_bins
from ..result import Fit
from .table import posterior_draws

__all__ = [
    "comparable_idata",
    "gaussian_marginals",
    "plot_sd_scatter",
    "plot_marginals",
    "plot_forest",
    "plot_predictive_scatter",
    "plot_reliability",
    "plot_objective_traces",
    "plot_mcmc_trace",
    "plot_rank",
    "plot_ess",
    "plot_accuracy_time",
    "worst_ess_coords",
]


def _select_coords(fits: dict[str, Fit], var: str, max_panels: int) -> np.ndarray:
    """Coordinates of ``var`` to show: all if few, else those the first fit is least sure of."""
    first = next(iter(fits.values()))
    draws = posterior_draws(first, var)
    if draws.shape[1] <= max_panels:
        return np.arange(draws.shape[1])
    return np.sort(np.argsort(draws.std(0))[-max_panels:])


def comparable_idata(fits: dict[str, Fit], var: str, *, num_draws: int = 2000, seed: int = 0,
                     index=None) -> dict:
    """Each fit's draws of ``var`` as a DataTree of identical shape ``(1, num_draws, k)``.

    ArviZ overlays several models only when their shapes agree (otherwise the outer join pads
    with NaN and intervals silently vanish, stack notes 3.4), so chains are pooled and each fit
    is resampled to ``num_draws`` draws with a fixed ``seed``.
    """
    from .._idata import SITE_DIMS, make_idata

    num_draws = positive_int("num_draws", num_draws)
    rng = np.random.default_rng(seed)
    dim = SITE_DIMS.get(var, [f"{var}_dim_0"])[0]
    out = {}
    for name, fit in fits.items():
        if var not in fit.idata.posterior:
            continue
        draws = posterior_draws(fit, var)
        coord = fit.idata.posterior[var].coords[dim].values if dim in fit.idata.posterior[var].coords else np.arange(draws.shape[1])
        if index is not None:
            draws, coord = draws[:, index], coord[index]
        pick = rng.choice(draws.shape[0], num_draws, replace=draws.shape[0] < num_draws)
        out[name] = make_idata({var: draws[pick][None]}, coords={dim: coord}, dims={var: [dim]})
    if not out:
        raise ValueError(f"no fit has the posterior variable {var!r}")
    return out


def _label(fit: Fit, var: str, index) -> list[str]:
    """``var[coordinate]`` for the selected coordinates (training indices for ``f``)."""
    da = fit.idata.posterior[var]
    dim = da.dims[2] if da.ndim > 2 else None
    coords = da.coords[dim].values[index] if dim in da.coords else np.asarray(index)
    return [f"{var}[{c}]" for c in coords]


def gaussian_marginals(fit: Fit, var: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(mean, sd)`` of every coordinate of ``var`` where ``fit`` is a Gaussian approximation
    that stores them (``idata.approximation``: ``<var>_mean`` with ``<var>_var`` or
    ``<var>_cov``, one entry per coordinate of its posterior draws, which come from that
    Gaussian), else None (samplers, ADVI)."""
    if "approximation" not in fit.idata.children:
        return None
    approx = fit.idata["approximation"]
    if f"{var}_mean" not in approx:
        return None
    mean = np.asarray(approx[f"{var}_mean"], dtype=float)
    if f"{var}_var" in approx:
        variance = np.asarray(approx[f"{var}_var"], dtype=float)
    elif f"{var}_cov" in approx:
        variance = np.diagonal(np.asarray(approx[f"{var}_cov"], dtype=float))
    else:
        return None
    if mean.ndim != 1 or variance.shape != mean.shape:
        return None
    posterior = fit.idata["posterior"] if "posterior" in fit.idata.children else None
    if posterior is not None and var in posterior:
        if mean.size != int(np.prod(posterior[var].shape[2:])):
            return None
    return mean, np.sqrt(np.maximum(variance, 0.0))


def plot_marginals(fits: dict[str, Fit], var: str = "beta", *, max_panels: int = 9,
                   num_draws: int = 2000, seed: int = 0, kind: str = "kde"):
    """Overlaid marginal posterior densities of ``var`` across fits, one panel per coordinate:
    a Gaussian approximation's exact density (:func:`gaussian_marginals`; a kernel density
    estimate of its draws would be jagged, even two-humped, where the density is a normal),
    a kernel density estimate of the draws for the others (samplers, ADVI).

    For ``f`` (one coordinate per training point) at most ``max_panels`` coordinates are shown:
    those where the first fit (the reference) is least certain (largest posterior sd), as the
    figure's caption says. Each panel is titled with its coordinate; one legend names the fits
    (``kind``: ``"kde"`` densities or ``"hist"`` histograms, over ``num_draws`` draws of each).
    """
    import matplotlib.pyplot as plt
    from scipy.stats import gaussian_kde

    if kind not in ("kde", "hist"):
        raise ValueError(f"kind must be 'kde' or 'hist', got {kind!r}")
    index = _select_coords(fits, var, max_panels)
    trees = comparable_idata(fits, var, num_draws=num_draws, seed=seed, index=index)
    first_name, first = next(iter(fits.items()))
    labels = _label(first, var, index)
    cols = min(4, len(index))
    rows = -(-len(index) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.3 * rows + 0.9), squeeze=False)
    for ax in axes.flat[len(index):]:
        ax.set_visible(False)
    gaussians = {} if kind != "kde" else {
        name: g for name in trees if (g := gaussian_marginals(fits[name], var)) is not None}
    for name, tree in trees.items():
        draws = np.asarray(tree.posterior[var]).reshape(-1, len(index))
        exact = gaussians.get(name)
        for j, ax in enumerate(axes.flat[:len(index)]):
            x = draws[:, j]
            if exact is not None and exact[1][index[j]] > 0:
                m, sd = exact[0][index[j]], exact[1][index[j]]
                grid = np.linspace(m - 4 * sd, m + 4 * sd, 200)
                ax.plot(grid, np.exp(-0.5 * ((grid - m) / sd) ** 2) / (sd * np.sqrt(2 * np.pi)),
                        lw=1.3, label=name)
            elif kind == "hist" or np.ptp(x) == 0:
                ax.hist(x, bins=40, density=True, histtype="step", label=name)
            else:
                grid = np.linspace(x.min(), x.max(), 200)
                ax.plot(grid, gaussian_kde(x)(grid), lw=1.3, label=name)
    for j, (ax, label) in enumerate(zip(axes.flat, labels)):
        ax.set_title(label, fontsize=9)
        ax.set_yticks([])
        ax.tick_params(labelsize=8)
        ax.set_xlabel(f"{var} (posterior value)", fontsize=8)
        if j % cols == 0:
            ax.set_ylabel("density", fontsize=8)
    shown = ("all coordinates" if len(index) == posterior_draws(first, var).shape[1] else
             f"the {len(index)} coordinates where {first_name} is least certain (largest sd)")
    how = ""
    if gaussians:
        how = (f"\n{', '.join(gaussians)}: the Gaussian approximation's exact density; "
               "the others: kernel density estimates of their draws")
    fig.suptitle(f"Marginal posteriors of {var}: {shown}{how}", fontsize=10)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 0.93 if how else 0.95))
    return fig


FOREST_PROBS = (0.5, 0.9)
"""The central intervals of :func:`plot_forest`: thick 50 %, thin 90 %."""


def plot_forest(fits: dict[str, Fit], var: str = "beta", *, max_panels: int = 16,
                num_draws: int = 2000, seed: int = 0):
    """Central credible intervals of ``var`` across fits, side by side (arviz-plots
    ``plot_forest``): per coordinate, each fit's 50 % (thick) and 90 % (thin) interval of
    equal tails and its mean. With more than ``max_panels`` coordinates, those the first fit
    is least certain of. ECM's intervals are those of its pseudo-posterior (the conditional
    of ``f`` given ``lambda`` at the MAP), which collapses near margin points: a zero width
    there is its nature, not a plotting fault; the title says so when ECM is among the fits.

    Returns the matplotlib ``Figure``.
    """
    import arviz_plots as azp

    index = _select_coords(fits, var, max_panels)
    trees = comparable_idata(fits, var, num_draws=num_draws, seed=seed, index=index)
    height = 1.6 + len(index) * (0.16 + 0.11 * len(trees))
    dim = next(d for d in next(iter(trees.values()))["posterior"][var].dims
               if d not in ("chain", "draw"))
    pc = azp.plot_forest(trees, var_names=[var], combined=True, labels=[dim],
                         ci_kind="eti", ci_probs=FOREST_PROBS, point_estimate="mean",
                         figure_kwargs={"figsize": (7.5, height), "width_ratios": [1, 6]})
    fig = pc.viz["figure"].item() if hasattr(pc.viz["figure"], "item") else pc.viz["figure"]
    labels_ax, forest_ax = fig.axes[:2]
    # arviz names the label column by its dimension ("obs"): say what it is
    ticks = [t.get_text() for t in labels_ax.get_xticklabels()]
    labels_ax.set_xticks(labels_ax.get_xticks(),
                         ["training point" if t == "obs" else t for t in ticks], fontsize=9)
    forest_ax.set_xlabel(f"{var} (posterior value)", fontsize=10)
    pc.add_legend("model", loc="center left", bbox_to_anchor=(0.98, 0.5), fontsize=9,
                  title_fontsize=9)
    first = next(iter(trees))
    what = (f"all {len(index)} coordinates" if len(index) < max_panels or
            len(index) == posterior_draws(fits[first], var).shape[1]
            else f"the {len(index)} coordinates where {first} is least certain")
    title = (f"Credible intervals of {var}: 50 % (thick) and 90 % (thin), equal tails, "
             f"and the mean; {what}")
    if any(f.method == "ecm" for f in fits.values()):
        title += "\n(ECM: a pseudo-posterior's intervals, near zero width at margin points)"
    first_line, _, rest = title.partition("\n")
    fig.suptitle("\n".join(filter(None, [textwrap.fill(first_line, 75), rest])), fontsize=10)
    return fig


SD_BAND = 0.1
"""Half-width of the shaded band around the diagonal of :func:`plot_sd_scatter` (+-10 %)."""


def plot_sd_scatter(reference: Fit, candidates: dict[str, Fit], var: str = "f", *,
                    reference_name: str = "reference", ax=None):
    """The headline picture of an approximation's uncertainty: every coordinate's posterior
    sd under each candidate against the reference's, the diagonal and a +-10 % band
    (:data:`SD_BAND`). Mean-field VI lies below the diagonal (too narrow); linear response
    moves it onto it. The legend gives each candidate's median ratio. Candidates without
    draws of ``var`` are left out.

    Returns the matplotlib ``Figure`` (``ax``'s, when given).
    """
    import matplotlib.pyplot as plt

    if var not in reference.idata.get("posterior", {}):
        raise ValueError(f"the reference has no posterior draws of {var!r}")
    ref_sd = posterior_draws(reference, var).std(0)
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.2, 5.0), dpi=100)
    else:
        fig = ax.figure
    top = float(ref_sd.max()) * 1.15
    grid = np.array([0.0, top])
    ax.fill_between(grid, (1 - SD_BAND) * grid, (1 + SD_BAND) * grid, color="0.9",
                    label=f"within {SD_BAND:.0%}")
    ax.plot(grid, grid, color="0.4", lw=1, label="equal sd")
    shown = 0
    for name, fit in candidates.items():
        if "posterior" not in fit.idata.children or var not in fit.idata["posterior"]:
            continue
        sd = posterior_draws(fit, var).std(0)
        if sd.shape != ref_sd.shape:
            continue
        ratio = float(np.median(sd / ref_sd))
        ax.scatter(ref_sd, sd, s=12, alpha=0.75, label=f"{name} (median ratio {ratio:.2f})")
        top = max(top, float(sd.max()) * 1.05)
        shown += 1
    if not shown:
        raise ValueError(f"no candidate has posterior draws of {var!r} of the reference's shape")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_aspect("equal")
    ax.set_xlabel(f"{reference_name} posterior sd of {var}")
    ax.set_ylabel(f"candidate posterior sd of {var}")
    ax.set_title(f"Posterior sd of each {var} coordinate", fontsize=11)
    ax.legend(fontsize=9, loc="upper left", frameon=False)
    return fig


def plot_predictive_scatter(reference_proba, probas: dict, *, reference_name: str = "reference"):
    """Each candidate's P(y = +1 | x*) against the reference's, with the identity line."""
    import matplotlib.pyplot as plt

    ref = np.asarray(reference_proba, dtype=float)
    k = len(probas)
    fig, axes = plt.subplots(1, k, figsize=(3.2 * k, 3.2), squeeze=False, sharey=True)
    for ax, (name, p) in zip(axes[0], probas.items()):
        p = np.asarray(p, dtype=float)
        ax.plot([0, 1], [0, 1], color="0.6", lw=1)
        ax.scatter(ref, p, s=10, alpha=0.7)
        ax.set_title(f"{name}\nmean |diff| = {np.mean(np.abs(p - ref)):.3f}", fontsize=9)
        ax.set_xlabel(f"{reference_name} P(y=+1)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel("candidate P(y=+1)")
    fig.tight_layout()
    return fig


def reliability_bins(n: int) -> int:
    """Bins of a reliability diagram for ``n`` test points: about 20 points per bin on
    average, between 3 and 10 (10 bins of 7-12 points each jag by their binomial noise)."""
    return int(np.clip(round(n / 20), 3, 10))


def plot_reliability(y_true, probas: dict, *, n_bins: int | None = None):
    """Reliability diagram: observed frequency of +1 against mean predicted probability, with
    the number of test points in each bin below (``n_bins=None``: :func:`reliability_bins`)."""
    import matplotlib.pyplot as plt

    n = len(np.asarray(y_true))
    n_bins = reliability_bins(n) if n_bins is None else positive_int("n_bins", n_bins)
    fig, (ax, axc) = plt.subplots(2, 1, figsize=(4.6, 5.6), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1.2]})
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, label="perfect calibration")
    width = 1.0 / n_bins / (len(probas) + 1)
    for k, (name, p) in enumerate(probas.items()):
        bins = calibration_bins(y_true, p, n_bins)
        ok = bins["count"] > 0
        line, = ax.plot(bins["mean_prob"][ok], bins["frac_pos"][ok], marker="o", ms=4,
                        label=name)
        axc.bar(bins["edges"][:-1] + (k + 0.5) * width, bins["count"], width=width,
                color=line.get_color(), align="edge")
    ax.set_ylabel("observed frequency of y=+1")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(f"{n} test points, {n_bins} bins of equal width", fontsize=9)
    ax.legend(fontsize=8)
    axc.set_ylabel("points per bin", fontsize=8)
    axc.set_xlabel("mean predicted P(y=+1)")
    axc.set_xticks(np.linspace(0, 1, n_bins + 1), minor=True)
    axc.grid(axis="x", which="minor", color="0.85")
    fig.tight_layout()
    return fig


_OBJECTIVES = ("elbo", "objective")


def plot_objective_traces(fits: dict[str, Fit]):
    """The objective trace (ELBO, MAP objective) of each iterative fit against its steps.

    A trace recorded only at some steps (S-BSVM's and linear SVI's ELBO, every epoch) is
    plotted at those steps (``trace[key + "_step"]``), so the x-axis counts the algorithm's
    steps for every fit."""
    import matplotlib.pyplot as plt

    traced = {
        name: (key, np.asarray(fit.trace[key], dtype=float))
        for name, fit in fits.items()
        for key in _OBJECTIVES
        if key in fit.trace
    }
    if not traced:
        raise ValueError("none of the fits records an objective trace ('elbo' or 'objective')")
    k = len(traced)
    fig, axes = plt.subplots(1, k, figsize=(3.4 * k, 3.0), squeeze=False)
    for ax, (name, (key, values)) in zip(axes[0], traced.items()):
        steps = fits[name].trace.get(f"{key}_step")
        steps = (np.arange(1, values.size + 1) if steps is None
                 else np.asarray(steps, dtype=float))
        ok = np.isfinite(values)
        ax.plot(steps[ok], values[ok], lw=1.2, marker="." if ok.sum() < 30 else None)
        ax.set_title(f"{name}: {key}", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel(key)
        if ok.any() and values[ok].min() < 0 < values[ok].max():
            ax.set_yscale("symlog")
    fig.tight_layout()
    return fig


def worst_ess_coords(fit: Fit, var: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` coordinates of ``var`` with the smallest bulk ESS (rank-normalised split
    chains, as ``Fit.summary`` reports: ``ppl_bsvm.inference.mcmc._common.bulk_ess``), worst
    first, and their ESS."""
    from ..inference.mcmc._common import bulk_ess

    values = np.asarray(fit.idata.posterior[var], dtype=float)
    values = values.reshape(values.shape[0], values.shape[1], -1)
    ess = np.asarray(bulk_ess(values), dtype=float)
    order = np.argsort(np.where(np.isfinite(ess), ess, np.inf), kind="stable")[:k]
    return order, ess[order]


def plot_mcmc_trace(fit: Fit, var: str = "beta", *, max_panels: int = 3, name: str | None = None):
    """A sampler's chains at the coordinates of ``var`` it mixes worst (smallest bulk ESS:
    :func:`worst_ess_coords`), one row per coordinate: each chain's density (left) and trace
    against the draw (right), one colour per chain, the coordinate's ESS in the row's title.
    Chains that agree overlap on the left and look alike on the right."""
    import matplotlib.pyplot as plt
    from scipy.stats import gaussian_kde

    max_panels = positive_int("max_panels", max_panels)
    index, ess = worst_ess_coords(fit, var, max_panels)
    values = np.asarray(fit.idata.posterior[var], dtype=float)
    values = values.reshape(values.shape[0], values.shape[1], -1)[:, :, index]
    labels = _label(fit, var, index)
    chains, draws = values.shape[:2]
    fig, axes = plt.subplots(len(index), 2, figsize=(11, 2.3 * len(index) + 0.9),
                             squeeze=False, gridspec_kw={"width_ratios": [1, 2.4]})
    for row, (ax_d, ax_t) in enumerate(axes):
        for c in range(chains):
            x = values[c, :, row]
            line, = ax_t.plot(x, lw=0.6, alpha=0.8, label=f"chain {c}")
            if np.ptp(x) > 0:
                grid = np.linspace(x.min(), x.max(), 150)
                ax_d.plot(grid, gaussian_kde(x)(grid), color=line.get_color(), lw=1.2)
        ax_d.set_yticks([])
        ax_d.set_ylabel("density", fontsize=9)
        ax_d.set_xlabel(labels[row], fontsize=9)
        ax_t.set_ylabel(labels[row], fontsize=9)
        ax_t.set_title(f"{labels[row]}: bulk ESS {ess[row]:.0f} of {chains * draws} draws",
                       fontsize=9)
        ax_t.set_xlabel("draw (after warm-up)" if row == len(index) - 1 else "", fontsize=9)
        if row < len(index) - 1:
            ax_t.sharex(axes[-1][1])
    axes[0][1].legend(fontsize=8, ncol=min(chains, 4), loc="lower right",
                      bbox_to_anchor=(1.0, 1.12), frameon=False)
    who = name or fit.method
    fig.suptitle(f"{who} ({fit.model}): {chains} chains of {draws} draws at the {len(index)} "
                 f"coordinates of {var} with the smallest bulk ESS", fontsize=10)
    fig.tight_layout()
    return fig


def _figure_of(pc):
    """The matplotlib ``Figure`` of an arviz-plots ``PlotCollection``."""
    fig = pc.viz["figure"]
    return fig.item() if hasattr(fig, "item") else fig


def _worst_selection(fit: Fit, var: str, max_panels: int):
    """The worst-mixing coordinates of ``var`` as arviz-plots ``coords``, with their labels
    and bulk ESS, worst first."""
    max_panels = positive_int("max_panels", max_panels)
    if "posterior" not in fit.idata.children or var not in fit.idata["posterior"]:
        raise ValueError(f"the fit has no posterior draws of {var!r}")
    da = fit.idata.posterior[var]
    if da.sizes.get("chain", 1) < 2:
        raise ValueError(f"{var!r} has one chain: rank and ESS plots compare chains "
                         "(fit with num_chains >= 2)")
    index, ess = worst_ess_coords(fit, var, max_panels)
    dim = da.dims[2] if da.ndim > 2 else None
    coords = {} if dim is None else {dim: list(da.coords[dim].values[index])}
    return coords, _label(fit, var, index), ess, int(da.sizes["chain"] * da.sizes["draw"])


def _one_row(fig, labels: list[str], ess, total: int, ylabel: str) -> None:
    """Titles each panel of an arviz-plots row with its coordinate and bulk ESS, and labels
    every panel's y-axis (arviz-plots leaves them blank)."""
    axes = [ax for ax in fig.axes if ax.get_visible()]
    for ax, label, e in zip(axes, labels, ess):
        ax.set_title(f"{label}: bulk ESS {e:.0f} of {total}", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.xaxis.label.set_fontsize(9)
    for ax in axes:
        ax.set_ylabel(ylabel, fontsize=9)


def plot_rank(fit: Fit, var: str = "beta", *, max_panels: int = 3, name: str | None = None):
    """Rank plots (arviz-plots ``plot_rank``) of a sampler's chains at the coordinates of
    ``var`` it mixes worst (:func:`worst_ess_coords`): for each chain, the empirical CDF of
    its draws' ranks among all chains' draws, minus the uniform CDF. Chains that sample the
    same distribution stay near zero together; one chain far above or below the others has
    not mixed. Each panel's ``p`` is ArviZ's simultaneous test of uniform ranks (small: the
    chains differ).

    Returns the matplotlib ``Figure``.
    """
    import arviz_plots as azp

    coords, labels, ess, total = _worst_selection(fit, var, max_panels)
    chains = int(fit.idata.posterior[var].sizes["chain"])
    pc = azp.plot_rank(fit.idata, var_names=[var], coords=coords, backend="matplotlib",
                       visuals={"remove_axis": False},
                       figure_kwargs={"figsize": (3.6 * len(labels) + 1.2, 3.4)})
    fig = _figure_of(pc)
    _one_row(fig, labels, ess, total, "rank ECDF - uniform")
    pc.add_legend("chain", loc="center left", bbox_to_anchor=(0.9, 0.5), fontsize=9,
                  title_fontsize=9)
    who = name or fit.method
    fig.suptitle(f"{who} ({fit.model}): rank plots of {chains} chains at the {len(labels)} "
                 f"coordinates of {var} with the smallest bulk ESS", fontsize=10)
    fig.subplots_adjust(top=0.8, wspace=0.35, right=0.89)
    return fig


def plot_ess(fit: Fit, var: str = "beta", *, max_panels: int = 3, min_ess: int = 400,
             name: str | None = None):
    """Local effective sample sizes (arviz-plots ``plot_ess``, ``kind="local"``) at the
    coordinates of ``var`` a sampler mixes worst: the ESS of the indicator of each small
    quantile interval, i.e. how well the chains resolve each part of the distribution (the
    tails are usually worst). The horizontal line is ``min_ess``, the rule-of-thumb floor for
    quoting posterior sds and 90 % intervals to two digits.

    Returns the matplotlib ``Figure``.
    """
    import arviz_plots as azp

    coords, labels, ess, total = _worst_selection(fit, var, max_panels)
    min_ess = positive_int("min_ess", min_ess)
    pc = azp.plot_ess(fit.idata, var_names=[var], coords=coords, backend="matplotlib",
                      kind="local", min_ess=min_ess,
                      figure_kwargs={"figsize": (3.6 * len(labels) + 0.4, 3.4)})
    fig = _figure_of(pc)
    _one_row(fig, labels, ess, total, "local ESS")
    for ax in fig.axes:
        ax.set_xlabel("quantile", fontsize=9)
    who = name or fit.method
    fig.suptitle(f"{who} ({fit.model}): local ESS of {var} at its {len(labels)} worst-mixing "
                 f"coordinates (the line: {min_ess})", fontsize=10)
    fig.subplots_adjust(top=0.8, wspace=0.35)
    return fig


_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")

ACCURACY_MEASURES = {"sd_ratio": ("sd ratio to the reference", 1.0),
                     "coverage_90": ("reference draws inside the 90 % interval", 0.9)}
"""The panels of :func:`plot_accuracy_time`: the table's column, its axis label and the value
of an exact answer (a line across the panel)."""


def plot_accuracy_time(table, seconds: dict, *, variable: str = "f",
                       cold_seconds: dict | None = None, reference_seconds: float | None = None,
                       reference_name: str = "reference"):
    """Accuracy against time, one point per candidate: its ``sd_ratio`` and ``coverage_90``
    for ``variable`` (rows of a :func:`~ppl_bsvm.compare.compare` table) against the seconds
    it took (``seconds``, by candidate name; log scale). Pass the time of a second fit of
    the same shape (its programs compiled) as ``seconds`` and the first fit's as
    ``cold_seconds``: each candidate then shows both, a filled point at run time and a hollow
    one joined to it at first-call time, the difference being JAX's compilation, which a
    user pays once per shape. ``reference_seconds`` draws the reference's time as a vertical
    line. Candidates in ``seconds`` without a row of ``variable`` raise ``ValueError``.

    Returns the matplotlib ``Figure``.
    """
    import matplotlib.pyplot as plt

    if not seconds:
        raise ValueError("seconds is empty: give each candidate's time in seconds")
    rows = table[table["variable"] == variable].set_index("candidate")
    missing = [name for name in seconds if name not in rows.index]
    if missing:
        raise ValueError(f"the table has no {variable!r} row for {missing}; its candidates: "
                         f"{sorted(set(rows.index))}")
    for what, values in (("seconds", seconds), ("cold_seconds", cold_seconds or {})):
        bad = {k: v for k, v in values.items() if not (np.isfinite(v) and v > 0)}
        if bad:
            raise ValueError(f"{what} must be positive and finite, got {bad}")
    fig, axes = plt.subplots(1, len(ACCURACY_MEASURES), figsize=(10, 3.9), sharex=True)
    for ax, (column, (label, exact)) in zip(axes, ACCURACY_MEASURES.items()):
        ax.axhline(exact, color="0.5", lw=1, ls="--", label="an exact answer")
        if reference_seconds is not None:
            ax.axvline(reference_seconds, color="0.3", lw=1, ls=":",
                       label=f"{reference_name} ({reference_seconds:.3g} s)")
        # a colour and a marker per candidate: close points stay apart without labels,
        # which overlap as soon as two candidates agree
        for k, (name, t) in enumerate(seconds.items()):
            y = float(rows.loc[name, column])
            color, marker = f"C{k % 10}", _MARKERS[k % len(_MARKERS)]
            ax.scatter([t], [y], s=45, color=color, marker=marker, zorder=3, label=name)
            cold = (cold_seconds or {}).get(name)
            if cold is not None:
                ax.plot([t, cold], [y, y], color=color, lw=1, alpha=0.6)
                ax.scatter([cold], [y], s=45, marker=marker, facecolors="none",
                           edgecolors=color, zorder=3)
        ax.set_xscale("log")
        ax.set_xlabel("seconds (log scale)")
        ax.set_ylabel(label)
        ax.set_title(column, fontsize=10)
    handles, names = axes[0].get_legend_handles_labels()
    if cold_seconds:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], marker="o", ls="", markerfacecolor="none",
                              markeredgecolor="0.3"))
        names.append("first call (with compilation)")
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(0.84, 0.5), fontsize=8,
               frameon=False)
    fig.suptitle(f"Accuracy of {variable} against time: each candidate against "
                 f"{reference_name}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.84, 1))
    return fig
