"""Fit one model several ways on a train/test split and compare the fits.

The engine behind ``ppl-bsvm compare`` and the demo (:mod:`ppl_bsvm.compare.demo`): it is
library code, so that the command line works from an installed package.
"""

from __future__ import annotations

import time

from ..api import fit, get_engine
from ..datasets.splits import Split, split_data
from .report import write_report
from .table import compare

__all__ = ["fit_methods", "run_comparison"]


def fit_methods(split: Split, *, model: str, methods, kernel=None, seed: int = 0,
                options: dict | None = None, progress: bool = True) -> dict:
    """``{method: Fit}`` for each method, with a progress bar over the fits.

    ``options`` maps a method name to its keyword options.
    """
    from .._progress import _tqdm_class

    tqdm = _tqdm_class()  # tqdm.auto's choice, without its warning where ipywidgets is missing

    options = options or {}
    unknown = set(options) - set(methods)
    if unknown:
        raise ValueError(f"options given for methods {sorted(unknown)} that are not being fitted")
    fits = {}
    bar = tqdm(list(methods), desc=f"fitting {model}", disable=not progress, unit="fit")
    for method in bar:
        bar.set_postfix_str(method)
        fits[method] = fit(split.X_train, split.y_train, model=model, method=method,
                           kernel=kernel, seed=seed, **options.get(method, {}))
    return fits


def run_comparison(
    X,
    y,
    *,
    model: str,
    methods,
    reference: str | None = None,
    kernel=None,
    seed: int = 0,
    test_fraction: float = 0.3,
    options: dict | None = None,
    folder=None,
    title: str = "Posterior comparison",
    description: str = "",
    progress: bool = True,
    replicate: bool = True,
):
    """Split, fit every method, compare with the reference method and (optionally) report.

    With ``replicate`` (default) and a sampler as the reference, the reference is fitted a
    second time with seed ``seed + 1``: the table's noise-floor row (``compare``'s
    ``replicate``), what an exact answer scores on each measure.

    Returns
    -------
    table : pandas.DataFrame
        :func:`ppl_bsvm.compare` output.
    fits : dict method -> Fit
        With the reference's rerun under the name of its row, ``"<reference> (rerun)"``.
    report_path : Path or None
    """
    methods = list(methods)
    if len(methods) < 2:
        raise ValueError("methods needs at least two methods: a reference and a candidate")
    if len(set(methods)) != len(methods):
        raise ValueError(f"methods has duplicates: {methods}")
    reference = reference or methods[0]
    if reference not in methods:
        raise ValueError(f"reference {reference!r} is not among methods {methods}")
    for method in methods:  # fail before any fitting if a name is wrong
        get_engine(model, method)
    split = split_data(X, y, test_fraction, seed)
    start = time.perf_counter()
    fits = fit_methods(split, model=model, methods=methods, kernel=kernel, seed=seed,
                       options=options, progress=progress)
    candidates = {m: f for m, f in fits.items() if m != reference}
    rerun = None
    if replicate and fits[reference].stop_reason == "draws":
        rerun = fit(split.X_train, split.y_train, model=model, method=reference, kernel=kernel,
                    seed=seed + 1, **(options or {}).get(reference, {}))
    table = compare(fits[reference], candidates, split.X_test, split.y_test,
                    reference_name=reference, seed=seed, replicate=rerun)
    if rerun is not None:
        fits[table.attrs["floor"]] = rerun
    if folder is None:
        return table, fits, None
    desc = (description + "\n\n" if description else "") + (
        f"Model `{model}`; reference `{reference}`; {len(split.y_train)} training and "
        f"{len(split.y_test)} test points (stratified split, seed {seed}, features "
        f"standardised with training statistics)"
        + (f"; the reference was fitted twice (seeds {seed} and {seed + 1}) for the noise "
           "floor" if rerun is not None else "")
        + "; fitting took "
        f"{time.perf_counter() - start:.1f} s."
    )
    path = write_report(table, fits[reference], candidates, split.X_test, split.y_test,
                        folder=folder, title=title, description=desc, seed=seed, replicate=rerun)
    return table, fits, path
