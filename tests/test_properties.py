"""Property-based test (hypothesis) of ``fit`` and ``predict_proba`` across every engine.

For every ``(model, method)`` of ``ppl_bsvm.list_methods()``, hypothesis draws training and
test inputs: shapes (valid, empty, 1-D, 3-D, mismatched lengths, wrong feature counts), dtypes
(floats of every width, integers, booleans, complex, strings, objects), scales (from 0, all
inputs equal, to beyond the 1e150 refused up front), non-finite entries, and label sets (ints,
floats, booleans, strings, one class, three classes, NaN, None). The contract: either a
``ValueError`` whose message names the argument at fault, or a result with no NaN, draws
included, and probabilities in [0, 1] of the right shape. (The one other outcome allowed is
the issue's rule for arithmetic that breaks down: a ``FloatingPointError`` that names the data
scale as the cause. Hypothesis found it for identical rows of magnitude 1e9 and more, e.g. an
integer cast of huge floats: the precision ``Z^T W Z + I / s^2`` of the linear engines is then
singular to float64 in either form, and the loop stops with that error.)

The budget is small and derandomised (the same examples on every run): each engine compiles
its programs once, for the one valid training shape and test sizes up to one padding bucket
(``_shapes.padded_size``), so the examples after the first cost milliseconds. Set
``PPL_BSVM_HYPOTHESIS_EXAMPLES`` to explore with more.
"""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import ppl_bsvm
from tests._shared import D, N  # the one valid training shape, shared (tests/_shared.py)

# Where another module fits an engine on the shared problem, the options below are its options
# where they are static (ADVI's window, inducing points, BCSVM's modules, chains, draws):
# those engines compile once for all of them.

CHEAP = {
    ("gp", "advi"): {"max_iter": 5, "window": 10},
    ("gp", "bcsvm"): {"max_iter": 5, "module_size": 20, "query_size": 20},
    ("gp", "ecm"): {"max_iter": 5},
    ("gp", "ess"): {"num_samples": 10, "num_warmup": 10, "num_chains": 2},
    ("gp", "gibbs"): {"num_samples": 5, "num_warmup": 5, "num_chains": 1, "directions": 0},
    ("gp", "gpc"): {"max_iter": 5},
    ("gp", "gpc_sklearn"): {"max_iter_predict": 5},
    ("gp", "mclmc"): {"num_samples": 10, "num_warmup": 10, "num_chains": 2},
    ("gp", "nuts"): {"num_samples": 5, "num_warmup": 5, "num_chains": 1, "max_tree_depth": 2},
    # 25 draws for each of the 4 paths' ELBOs (the least allowed), as the other modules fit it
    ("gp", "pathfinder"): {"num_elbo_draws": 25},
    ("gp", "platt"): {"cv": 2},
    ("gp", "rvm"): {"max_iter": 5},
    ("gp", "svgp"): {"max_iter": 5, "num_inducing": 3},
    ("gp", "svi"): {"max_iter": 5, "num_inducing": 10},
    ("gp", "vi"): {"max_iter": 5},
    ("linear", "advi"): {"max_iter": 5, "window": 10},
    ("linear", "ecm"): {"max_iter": 5},
    ("linear", "ess"): {"num_samples": 5, "num_warmup": 5, "num_chains": 1},
    # two chains and the line moves learned (10 warmup sweeps): test_persistence's program
    ("linear", "gibbs"): {"num_samples": 5, "num_warmup": 10, "num_chains": 2},
    # MCLMC tunes inside its first program for num_warmup transitions: test_persistence's
    ("linear", "mclmc"): {"num_samples": 5, "num_warmup": 30, "num_chains": 2},
    ("linear", "nuts"): {"num_samples": 5, "num_warmup": 5, "num_chains": 1,
                         "max_tree_depth": 2},
    ("linear", "pathfinder"): {"num_elbo_draws": 25},
    ("linear", "svi"): {"max_iter": 5},
    ("linear", "vi"): {"max_iter": 5},
    ("sparse_gp", "advi"): {"max_iter": 5, "window": 2, "num_inducing": 3},
    ("sparse_gp", "nuts"): {"num_samples": 5, "num_warmup": 5, "num_chains": 1,
                            "max_tree_depth": 2, "num_inducing": 3},
    ("sparse_gp", "svgp"): {"max_iter": 5, "num_inducing": 3},
    ("sparse_gp", "svi"): {"max_iter": 5, "num_inducing": 3},
}
DRAWS = {"num_draws": 50}  # where an engine takes it (the other modules' number)

EXAMPLES = int(os.environ.get("PPL_BSVM_HYPOTHESIS_EXAMPLES", "6"))

NUMERIC = ["float64", "float32", "float16", "int64", "int8", "uint8", "bool"]
SCALES = [0.0, 1e-300, 1e-8, 1.0, 1e8, 1e149]  # normal draws x 1e149 stay below 1e150
X_FAULTS = ["1-D", "3-D", "empty", "nan", "inf", "complex128", "object", "str", "1e200",
            "sparse", "pandas NA"]
OFFSETS = [0.0, 0.0, 0.0, 1e3, 1e8]
"""Shifts of valid float inputs (a Unix time is 1.7e9): stationary kernels see differences."""
FORMS = ["array"] * 6 + ["Float64 frame", "Int64 frame"]
"""Containers of valid training inputs: arrays, and pandas' nullable dtypes."""
LABELS = {
    "0/1": (0, 1), "-1/+1": (-1, 1), "floats": (0.5, 2.5), "bools": (False, True),
    "strings": ("no", "yes"), "nullable Int64": (0, 1),
}
Y_FAULTS = ["mixed types", "mixed list", "one class", "three classes", "nan", "none", "2-D",
            "length"]


@st.composite
def inputs(draw, rows: int, cols: int, test: bool = False):
    """An input array and the fault it has, if any: ``(array, fault)``. About half are valid
    (any numeric dtype, any scale up to 1e150, 0 included, float inputs shifted by up to 1e8,
    training inputs also as pandas frames of nullable Float64 / Int64 columns); faults include
    sparse matrices and pd.NA; test inputs may also have the wrong number of features."""
    fault = draw(st.sampled_from([None] * 8 + X_FAULTS + (["cols"] if test else [])))
    dtype = draw(st.sampled_from(NUMERIC))
    scale = draw(st.sampled_from(SCALES))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dims = {"1-D": (rows,), "3-D": (rows, cols, 1), "empty": (0, cols),
            "cols": (rows, cols + 1)}.get(fault, (rows, cols))
    values = rng.standard_normal(dims) * (1e200 if fault == "1e200" else scale)
    if fault == "sparse":
        import scipy.sparse

        return scipy.sparse.csr_matrix(values), fault
    if fault == "pandas NA":
        import pandas as pd

        frame = pd.DataFrame(values).astype("Float64")
        frame.iloc[rng.integers(rows), rng.integers(cols)] = pd.NA
        return frame, fault
    form = "array" if test else draw(st.sampled_from(FORMS))
    if fault is None and form != "array":
        import pandas as pd

        if form == "Int64 frame":
            return pd.DataFrame(np.round(values * 10).astype(np.int64)).astype("Int64"), None
        return pd.DataFrame(values).astype("Float64"), None
    if fault is None and dtype.startswith("float"):
        values = values + draw(st.sampled_from(OFFSETS))
    if fault in ("complex128", "object", "str"):
        arr = values.astype(fault)
        if fault == "object":
            arr.flat[0] = "a"  # an object array holding a string: not numeric
        return arr, fault
    if fault in ("nan", "inf", "1e200"):
        dtype = "float64"
    if dtype.startswith("float"):
        values = np.clip(values, -float(np.finfo(dtype).max), float(np.finfo(dtype).max))
    with np.errstate(invalid="ignore", over="ignore"):
        arr = values.astype(dtype)
    if fault in ("nan", "inf"):
        arr.flat[rng.integers(arr.size)] = np.nan if fault == "nan" else np.inf
    return arr, fault


@st.composite
def labels(draw, n: int):
    """Labels for ``n`` rows and the fault they have, if any: ``(y, fault)``."""
    kind = draw(st.sampled_from(list(LABELS) * 2 + Y_FAULTS))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    signs = np.resize([0, 1], n)
    rng.shuffle(signs)
    pair = LABELS.get(kind, ("no", 7) if kind == "mixed types" else (0, 1))
    y = np.array([pair[s] for s in signs], dtype=object if kind == "mixed types" else None)
    fault = None if kind in LABELS else kind
    if kind == "one class":
        y = np.zeros(n, int)
    elif kind == "three classes":
        y = np.arange(n) % 3
    elif kind == "nan":
        y = y.astype(float)
        y[0] = np.nan
    elif kind == "none":
        y = y.astype(object)
        y[0] = None
    elif kind == "2-D":
        y = y.reshape(-1, 1)
    elif kind == "length":
        y = y[:-1]
    elif kind == "mixed list":  # NumPy would make ["0", "a"] of [0, "a"]
        y = [(0, "a")[s] for s in signs]
    elif kind == "nullable Int64":
        import pandas as pd

        y = pd.Series(y, dtype="Int64")
    return y, fault


def _methods():
    methods = ppl_bsvm.list_methods()
    return list(zip(methods["model"], methods["method"]))


def test_every_engine_is_covered():
    assert set(_methods()) == set(CHEAP)


def _options(model, method):
    options = dict(CHEAP[(model, method)])
    engine = ppl_bsvm.api.get_engine(model, method)
    if "num_draws" in engine.options.names():
        options.update(DRAWS)
    return options


def _names(message: str, argument: str) -> bool:
    return re.search(rf"\b{argument}\b", message) is not None


@pytest.mark.parametrize(("model", "method"), sorted(CHEAP))
@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fit_and_predict_proba_give_a_clear_error_or_a_finite_answer(model, method, data):
    X, x_fault = data.draw(inputs(N, D), label="X")
    y, y_fault = data.draw(labels(N), label="y")
    options = _options(model, method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings of the tiny budgets
        try:
            fit = ppl_bsvm.fit(X, y, model=model, method=method, progress_bar=False,
                               **options)
        except FloatingPointError as err:
            assert "data scale" in str(err), str(err)
            event("FloatingPointError")
            return
        except ValueError as err:
            at_fault = [a for a, f in (("X", x_fault), ("y", y_fault)) if f]
            assert at_fault, f"valid input refused: {err}"
            assert any(_names(str(err), a) for a in at_fault), (at_fault, str(err))
            return
        assert x_fault is None and y_fault is None, ("accepted", x_fault, y_fault)
        _check_finite_fit(fit)
        event("fitted")
        m = data.draw(st.integers(1, 8), label="test rows")
        Xt, t_fault = data.draw(inputs(m, D, test=True), label="X_test")
        try:
            p = fit.predict_proba(Xt)
        except ValueError as err:
            assert t_fault, f"valid test input refused: {err}"
            assert _names(str(err), "X"), str(err)
            return
    assert t_fault is None, ("accepted", t_fault)
    assert p.shape == (m,) and np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1)), p


def _check_finite_fit(fit):
    for group in ("posterior", "approximation"):
        if group in fit.idata.children:
            for name, var in fit.idata[group].data_vars.items():
                values = np.asarray(var.values)
                if values.dtype.kind in "fc":
                    assert np.all(np.isfinite(values)), f"{group}.{name}"
