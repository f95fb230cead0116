"""Plots comparing fits. Each returns an object that Jupyter shows inline (an arviz-plots
``PlotCollection`` or a matplotlib ``Figure``) and that saves with ``.savefig(path)``."""

from __future__ import annotations

import numpy as np

from .._checks import positive_int
from ..metrics import calibration_bins
from ..result import Fit
from .table import posterior_draws

__all__ = [
    "comparable_idata",
    "plot_marginals",
    "plot_forest",
    "plot_predictive_scatter",
    "plot_reliability",
    "plot_objective_traces",
    "plot_mcmc_trace",
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


def plot_marginals(fits: dict[str, Fit], var: str = "beta", *, max_panels: int = 9,
                   num_draws: int = 2000, seed: int = 0, kind: str = "kde"):
    """Overlaid marginal posterior densities of ``var`` across fits (arviz-plots ``plot_dist``).

    For ``f`` (one coordinate per training point) at most ``max_panels`` coordinates are shown:
    those where the first fit (the reference) is least certain.
    """
    import arviz_plots as azp

    index = _select_coords(fits, var, max_panels)
    trees = comparable_idata(fits, var, num_draws=num_draws, seed=seed, index=index)
    rows = -(-len(index) // 4)
    pc = azp.plot_dist(trees, var_names=[var], kind=kind,
                       figure_kwargs={"figsize": (12, 2.6 * rows)})
    pc.add_legend("model")
    return pc


def plot_forest(fits: dict[str, Fit], var: str = "beta", *, max_panels: int = 20,
                num_draws: int = 2000, seed: int = 0):
    """Credible intervals of ``var`` across fits, side by side (arviz-plots ``plot_forest``)."""
    import arviz_plots as azp

    index = _select_coords(fits, var, max_panels)
    trees = comparable_idata(fits, var, num_draws=num_draws, seed=seed, index=index)
    pc = azp.plot_forest(trees, var_names=[var], combined=True)
    pc.add_legend("model")
    return pc


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


def plot_reliability(y_true, probas: dict, *, n_bins: int = 10):
    """Reliability diagram: observed frequency of +1 against mean predicted probability."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.2, 4.2))
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, label="perfect calibration")
    for name, p in probas.items():
        bins = calibration_bins(y_true, p, n_bins)
        ok = bins["count"] > 0
        ax.plot(bins["mean_prob"][ok], bins["frac_pos"][ok], marker="o", ms=4, label=name)
    ax.set_xlabel("mean predicted P(y=+1)")
    ax.set_ylabel("observed frequency of y=+1")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


_OBJECTIVES = ("elbo", "objective")


def plot_objective_traces(fits: dict[str, Fit]):
    """The objective trace (ELBO, MAP objective) of each iterative fit against iteration."""
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
        step = np.flatnonzero(np.isfinite(values))
        ax.plot(step + 1, values[step], lw=1.2)
        ax.set_title(f"{name}: {key}", fontsize=9)
        ax.set_xlabel("iteration")
        if step.size and values[step].min() < 0 < values[step].max():
            ax.set_yscale("symlog")
    fig.tight_layout()
    return fig


def plot_mcmc_trace(fit: Fit, var: str = "beta", *, max_panels: int = 6):
    """Trace and density of a sampler's chains for a few coordinates (``plot_trace_dist``)."""
    import arviz_plots as azp

    index = _select_coords({"fit": fit}, var, max_panels)
    dim = fit.idata.posterior[var].dims[2]
    coords = {dim: fit.idata.posterior[var].coords[dim].values[index]}
    return azp.plot_trace_dist(fit.idata, var_names=[var], coords=coords)
