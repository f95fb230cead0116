"""Building the ArviZ ``DataTree`` that every ``Fit`` carries.

Site names and dims are shared by all engines so that ArviZ objects line up:
``beta`` (feature), ``f`` (obs), ``u`` (inducing), ``lam`` (obs), ``f_test`` (test).
Draws always have the sample dims ``(chain, draw)``; variational fits store i.i.d. draws from q
with a single chain, and their q parameters in a group of their own (``variational``).
"""

from __future__ import annotations

import numpyro  # noqa: F401  (must be imported before arviz, see stack notes 3.1)
import arviz as az
import numpy as np
import xarray as xr

__all__ = ["SITE_DIMS", "make_idata"]

SITE_DIMS: dict[str, list[str]] = {
    "beta": ["feature"],
    "f": ["obs"],
    "u": ["inducing"],
    "lam": ["obs"],
    "f_test": ["test"],
}


def _dataset(values: dict, dims: dict[str, list[str]], coords: dict) -> xr.Dataset:
    data_vars = {}
    for name, value in values.items():
        arr = np.asarray(value)
        var_dims = dims.get(name)
        if var_dims is None:
            var_dims = [f"{name}_dim_{i}" for i in range(arr.ndim)]
        if len(var_dims) != arr.ndim:
            raise ValueError(f"{name}: dims {var_dims} do not match shape {arr.shape}")
        data_vars[name] = (tuple(var_dims), arr)
    used = {d for _, (ds, _) in data_vars.items() for d in ds}
    return xr.Dataset(data_vars, coords={k: v for k, v in coords.items() if k in used})


def make_idata(
    posterior: dict,
    *,
    coords: dict | None = None,
    dims: dict[str, list[str]] | None = None,
    sample_stats: dict | None = None,
    observed_y=None,
    groups: dict[str, dict] | None = None,
    attrs: dict | None = None,
):
    """Assemble a DataTree from draws shaped ``(chain, draw, ...)``.

    Parameters
    ----------
    posterior : dict name -> array (chain, draw, *event)
    coords : dict dim -> labels
    dims : dict name -> list of event dims; defaults to :data:`SITE_DIMS`
    sample_stats : dict name -> array (chain, draw), optional
    observed_y : array (n,), optional
        Training labels in {-1, +1}, stored in ``observed_data`` on dim ``obs``.
    groups : dict group -> {name: array}, optional
        Extra groups without sample dims (e.g. ``variational`` with q's parameters).
    attrs : dict, optional
        Attributes of the root node (method, model, ...).
    """
    coords = dict(coords or {})
    all_dims = {**SITE_DIMS, **(dims or {})}
    tree = {"posterior": {k: np.asarray(v) for k, v in posterior.items()}}
    if sample_stats:
        tree["sample_stats"] = {k: np.asarray(v) for k, v in sample_stats.items()}
    if observed_y is not None:
        tree["observed_data"] = {"y": np.asarray(observed_y)}
        all_dims.setdefault("y", ["obs"])
        coords.setdefault("obs", np.arange(len(observed_y)))
    for name, value in tree["posterior"].items():
        if value.ndim < 2:
            raise ValueError(f"posterior draws of {name} need (chain, draw) leading dims")
    used_dims = {d for name in tree["posterior"] for d in all_dims.get(name, [])}
    for name, value in tree["posterior"].items():
        for axis, dim in enumerate(all_dims.get(name, []), start=2):
            if dim not in coords:
                coords[dim] = np.arange(value.shape[axis])
    dt = az.from_dict(
        tree,
        coords={k: v for k, v in coords.items() if k in used_dims | {"obs"}},
        dims={k: v for k, v in all_dims.items() if k in tree["posterior"] or k == "y"},
    )
    for group, values in (groups or {}).items():
        dt[group] = xr.DataTree(_dataset(values, all_dims, coords))
    if attrs:
        dt.attrs.update({k: v for k, v in attrs.items() if v is not None})
    return dt
