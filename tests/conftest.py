"""Shared test set-up: headless plotting, fixed seeds, small data sets."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.linalg  # noqa: E402,F401  (load scipy's OpenBLAS, which JAX calls, before limiting it)
from threadpoolctl import threadpool_limits  # noqa: E402

# JAX's CPU linear algebra (Cholesky, triangular solves) calls scipy's OpenBLAS. With its default
# of one thread per core and pytest-xdist running a worker per core, the BLAS threads are
# oversubscribed and every call waits for descheduled threads: a 40 x 40 triangular solve took
# 12-15 ms instead of 0.1 ms, and an ECM fit on Heart 47-89 s instead of 0.5-1.4 s, on the
# loaded 2-core machine. One BLAS thread per worker avoids it.
threadpool_limits(1, user_api="blas")

# Every fit builds and compiles its own loop, and many tests fit the same program again (a
# resumed run, a same-seed rerun): JAX's persistent compilation cache compiles each once (a
# quarter off the Gibbs persistence and reproducibility tests). One directory per xdist worker,
# because the cache writes without locks when eviction is off.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import jax  # noqa: E402

    _worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    jax.config.update("jax_compilation_cache_dir",
                      os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "jax", _worker))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


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


def pytest_collection_modifyitems(config, items):
    """Start the longest tests (the notebooks, a minute or more each) first.

    pytest-xdist hands tests out in collection order; left for last, the notebooks kept one
    worker busy for minutes after the other had finished.
    """
    items.sort(key=lambda item: 0 if item.nodeid.startswith("tests/test_notebooks.py") else 1)
