"""The small problem that the tests which fit engine after engine share.

A cold run of the suite is mostly compilation, one set of programs per (engine, static
options, shape) (``tests/README.md``). ``test_bad_input``, ``test_properties``,
``test_persistence``, ``test_pointwise``, ``test_runtime``, ``test_progress``, ``test_api``,
``test_feature_names``, ``test_memory``'s sparse NUTS and ``compare/test_compare``'s fits
without draws fit their engines on this shape with the same static options (ADVI's
``window=10``, S-BSVM's ``num_inducing=10``, BCSVM's modules of 20, 50 stored draws), so each
engine compiles once for all of them and the others load its programs from the persistent
cache. :func:`compilations` counts what a block compiles.
"""

import contextlib

import numpy as np

N, D = 40, 2
"""Training rows and features of the shared problem."""


def small_problem(n_test: int = 0, seed: int = 0):
    """``(X, y)``, ``N x D`` standard normal inputs and 0/1 labels from the sign of
    ``x_1 + 0.3 noise``; with ``n_test > 0`` also ``X_test``, ``n_test`` more rows."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N + n_test, D))
    y = np.where(X[:N, 0] + 0.3 * rng.normal(size=N) > 0, 1, 0)
    return (X[:N], y) if n_test == 0 else (X[:N], y, X[N:])


@contextlib.contextmanager
def compilations():
    """Count the programs JAX compiles, or loads from its persistent cache, inside the block
    (``backend_compile_duration`` is reported for both): a program found in JAX's in-memory
    cache counts nothing."""
    import jax

    count = [0]

    def listen(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield count
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
