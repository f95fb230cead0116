"""Shared test set-up: headless plotting, fixed seeds, small data sets."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

# The tests run what users run: the library sets its own thread counts (ppl_bsvm._runtime) and
# keeps compiled programs in JAX's persistent cache. The cache goes to the repository's
# .pytest_cache rather than the user's cache directory; the pytest-xdist workers share it (a
# program one compiles, the other loads).
os.environ.setdefault(
    "PPL_BSVM_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "jax")
)

# XLA's flags for the in-process tests (compiled at optimisation level 0: tests/_xla.py),
# set before anything imports JAX
from tests import _xla  # noqa: E402,F401

# The test process is a user who configured JAX's cache in that same directory: the tests that
# call the library's internals (outside its entry points, which alone use ppl_bsvm's own cache
# directory: ppl_bsvm._runtime.library_cache) share their programs across the workers too.
# Subprocesses do not inherit this; tests/test_runtime.py checks the library's own set-up there.
import jax  # noqa: E402

_cache = os.environ["PPL_BSVM_CACHE_DIR"]
if _cache.strip().lower() not in ("", "0", "off", "false", "no", "none"):
    jax.config.update("jax_compilation_cache_dir", os.path.abspath(_cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

import gc  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# Python's cyclic garbage collector runs a young collection every 700 allocations of container
# objects; tracing JAX programs allocates millions, so a test process spends about 3 % of its
# time there (test_persistence, test_properties, test_bad_input in one cold process, two pairs
# run side by side: 173.9 -> 168.6 s and 184.3 -> 179.7 s; peak memory 2.11 GB either way).
# With a collection every 50,000 allocations cyclic garbage waits longer to be freed, and there
# is little of it: JAX's arrays and programs are freed by reference counts, and the library
# releases programs near the limit on memory mappings with an explicit gc.collect(). Test
# processes only: the library leaves the user's collector as it is.
gc.set_threshold(50_000, 20, 20)

# the suite's wall time and slowest tests at the end of every run; a profile on request
pytest_plugins = ["tests._profile"]


@pytest.fixture
def rng():
    return np.random.default_rng(20261121)


@pytest.fixture(scope="session")
def heart():
    from ppl_bsvm import datasets

    return datasets.load("heart", standardize=True)


@pytest.fixture(scope="session")
def toy2d():
    """A small, noisy 2-d problem (n = 60) with labels -1/+1."""
    r = np.random.default_rng(7)
    X = r.standard_normal((60, 2))
    y = np.where(X @ np.array([1.5, -1.0]) + 0.7 * r.standard_normal(60) > 0, 1.0, -1.0)
    return X, y


LONGEST_FIRST = (
    "tests/test_readme.py::test_readme_python_blocks_run_in_order",
    # the notebooks longest first, on the README's worker after it (all at level 0,
    # tests/_xla.py, with one compilation cache); the quickstart after validating_vi, whose
    # programs it loads (test_notebooks.QUICK)
    "tests/test_notebooks.py::test_notebook_executes[validating_vi]",
    "tests/test_notebooks.py::test_notebook_executes[quickstart]",
    "tests/test_notebooks.py::test_notebook_executes[hyperparameters_and_inducing_points]",
    "tests/test_notebooks.py::test_notebook_executes",
    "tests/test_programs.py::test_a_new_process_loads",
    "tests/inference/vi/test_sbsvm_scale.py::test_two_processes",
    "tests/inference/vi/test_sbsvm_scale.py::test_data_parallel",
)
"""Tests of 15 s to 2 minutes each (new processes that compile from scratch): started first,
in this order."""


def pytest_collection_modifyitems(config, items):
    """Start the longest tests first.

    pytest-xdist hands tests out in collection order; left for last, a notebook kept one
    worker busy for minutes after the other had finished.
    """
    def rank(item):
        starts = [i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)]
        return starts[0] if starts else len(LONGEST_FIRST)

    items.sort(key=rank)


_tests_started = [0]


@pytest.fixture(autouse=True)
def _release_programs_between_tests():
    """A pytest worker compiles thousands of XLA programs, each holding memory mappings; at
    the kernel's limit XLA crashes (ppl_bsvm._runtime, "memory mappings"). The library
    releases JAX's programs at 75 % of the limit before a call; releasing here, between
    tests, at half of it keeps that from happening inside a test that counts compilations."""
    _tests_started[0] += 1
    if _tests_started[0] % 10 == 0:
        from ppl_bsvm import _runtime

        _runtime.release_programs_near_map_limit(0.5, warn=False)
    yield
