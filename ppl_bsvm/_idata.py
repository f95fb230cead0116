"""Building the ArviZ ``DataTree`` that every ``Fit`` carries.

Site names and dims are shared by all engines so that ArviZ objects line up:
``beta`` (feature), ``f`` (obs), ``u`` (inducing), ``lam`` (obs), ``f_test`` (test).
Draws always have the sample dims ``(chain, draw)``; variational fits store i.i.d. draws from q
with a single chain, and their q parameters in a group of their own (``variational``).

The tree is built with xarray alone, in the layout ``arviz.from_dict`` gives (``chain`` and
``draw`` coordinates, a ``sample_dims`` attribute per group), so that a fit neither imports
ArviZ (a second of start-up) nor pays its conversions; ArviZ reads it as its own.
"""

from __future__ import annotations

import datetime

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


def _creation_attrs(sample_dims) -> dict:
    from . import __version__

    return {
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "creation_library": "ppl_bsvm",
        "creation_library_version": __version__,
        "creation_library_language": "Python",
        "sample_dims": list(sample_dims),
    }


def _sampled_dataset(values: dict, dims: dict, coords: dict, keep: set, sample: bool):
    """A group of draws ``(chain, draw, *event)`` (or, ``sample=False``, of plain arrays) with
    ArviZ's coordinates and attributes."""
    lead = ("chain", "draw") if sample else ()
    data_vars, used = {}, set(lead)
    for name, value in values.items():
        var_dims = (*lead, *dims.get(name, []))
        data_vars[name] = (var_dims, value)
        used.update(var_dims)
    first = next(iter(values.values()), None)
    base = {}
    if sample and first is not None:
        base = {"chain": np.arange(first.shape[0]), "draw": np.arange(first.shape[1])}
    extra = {k: np.asarray(v) for k, v in coords.items() if k in used and k in keep}
    return xr.Dataset(data_vars, coords={**base, **extra}, attrs=_creation_attrs(lead))


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
    keep = used_dims | {"obs"}
    dt = xr.DataTree()
    for group, values in tree.items():
        sample = group != "observed_data"
        dt[group] = xr.DataTree(_sampled_dataset(values, all_dims, coords, keep, sample))
    for group, values in (groups or {}).items():
        dt[group] = xr.DataTree(_dataset(values, all_dims, coords))
    if attrs:
        dt.attrs.update({k: v for k, v in attrs.items() if v is not None})
    return dt
