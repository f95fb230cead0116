"""S-BSVM's defaults that follow the data and the machine: the minibatch size, the stopping
tolerance and period, and the devices a minibatch is split over (``sbsvm.py`` uses them; the
measurements behind each are in its docstring and ``reports/sbsvm_scaling``)."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

__all__ = [
    "MIN_ROWS_PER_DEVICE",
    "PERIOD_MIN_POINTS",
    "default_batch_size",
    "default_tol",
    "default_check_every",
    "POLISH_MAX_N",
    "default_polish",
    "inducing_count",
    "mesh_and_batch",
]


MIN_ROWS_PER_DEVICE = 1024
"""Rows of a minibatch per device below which the default ``devices`` is one device (smaller
shares do not pay for the communication of a step)."""


def inducing_count(n: int, options: dict) -> int:
    """``m`` for the options (a dict, as the memory and cost estimates get them): the rows of
    a given ``inducing`` array, else ``num_inducing``, else ``min(100, n)``."""
    inducing = options.get("inducing")
    if inducing is not None and not isinstance(inducing, str):
        return int(np.shape(inducing)[0])
    return int(options.get("num_inducing") or min(100, n))


def default_batch_size(n: int) -> int:
    """The paper's 100 (or ``n``) up to 50,000 points, then ``n // 500`` up to 20,000.

    Measured on 2 cores (m = 64, d = 18, a bare scan of the step's matrix products): an
    epoch of 10^6 points took 1.8 s in minibatches of 1000 and 1.0-1.3 s in minibatches of
    10,000-20,000; with 500 steps per epoch the test error of ``reports/sbsvm_scaling``
    settles within a few epochs (0.195 at 10^6 points).
    """
    return min(n, max(100, min(n // 500, 20_000)))


def default_tol(n: int) -> float:
    """1e-4, and 5e-3 beyond 100,000 points.

    With learned hyperparameters the ELBO of a large data set keeps creeping up by a few
    parts in 10^4 per epoch long after the predictions have settled: on 10^6 points of the
    ``susy`` generator (m = 64) a tolerance of 1e-4 ran 22 epochs to a test error of 0.1965,
    1e-3 stopped after 4 epochs at 0.1952 (``reports/sbsvm_scaling``). The first epoch's
    estimate includes the steps taken from the prior, so the first change is large (1.0-1.1 %
    at 10^6 and 5 x 10^6 points) and the rule cannot stop before three epochs; the next
    changes were 0.29 %, 0.16 %, 0.07 % (10^6) and 0.19 %, 0.12 %, 0.08 % (5 x 10^6), while
    the test error after 1, 2, 3 and 5 epochs was 0.1916, 0.1913, 0.1911, 0.1909 (10^6) and
    0.1944, 0.1949, 0.1949, 0.1946 (5 x 10^6; the test sets' standard error is 0.0012): 5e-3
    stops after three epochs.
    """
    return 1e-4 if n <= 100_000 else 5e-3


PERIOD_MIN_POINTS = 300_000
"""Points per period of the stopping rule below which :func:`default_check_every` keeps whole
epochs."""


def default_check_every(n: int) -> float:
    """The stopping rule's period in epochs: one epoch up to :data:`PERIOD_MIN_POINTS`
    points, then ``max(1/3, PERIOD_MIN_POINTS / n)``.

    The rule stops after three periods at the earliest, the first of which holds the steps
    taken from the prior (its estimate is 1-2 % below the next), so whole epochs cost three
    epochs at every size, while the test error has settled after one (``default_tol``). A
    period of ``P < n`` points estimates the ELBO with sampling error, which the rule
    subtracts twice from the change it compares with ``tol``: periods of at least 300,000
    points keep it small against ``tol = 5e-3`` (with learned hyperparameters on the ``susy``
    generator, m = 64, a fourth period of 333,333 points after the stop moved the estimate by
    0.21 %, against 0.71 % for the change that stopped the run). On 10^6 points (periods of a third of an
    epoch) the run stopped after 1.02 epochs at a test error of 0.1966 in 2.4 s, against 3
    epochs, 0.1966 and 6.0 s with whole epochs; on 5 x 10^6 points 1.02 epochs, 0.1967, 6.7 s
    against 3 epochs, 0.1963, 12.1 s (one run each, 2 cores). On 2 x 10^5 points periods of a
    third of an epoch stopped after two periods while the estimate still moved by 1.8 %: the
    sampling error was too large to tell.
    """
    if n <= PERIOD_MIN_POINTS:
        return 1.0
    return max(1.0 / 3.0, PERIOD_MIN_POINTS / n)


POLISH_MAX_N = 5000
"""Points up to which S-BSVM polishes by default (:func:`default_polish`)."""


def default_polish(n: int) -> bool:
    """Whether S-BSVM's polish (``sbsvm_batch``: ``q`` to the batch fixed point, learned
    hyperparameters to the ELBO's maximum) runs by default: up to :data:`POLISH_MAX_N` points.

    Its sweeps cost ``O(n m^2)`` each, its hyperparameter search 15-20 evaluations of a few
    sweeps and a gradient. On the ``susy`` generator (m = 64, one run each, cache warm, 2 cores):
    at a fixed kernel and 10^4 points the opening sweeps certified the minibatch run's ``q``
    within 0.015 sds (0.30 s against 0.29 s); with learned hyperparameters the search raised
    the ELBO by 58 nats at 5000 points (lengthscale 18.6, variance 24 where Adam stopped at 6.9,
    1.4; test error 0.2003 against 0.2005) in 1.56 s against 0.41 s, by 108 nats at 10^4 in
    2.96 s against 0.42 s. Beyond 5000 points the default keeps the large-data timings of
    ``reports/sbsvm_scaling`` and stops by the ELBO-change rule alone; ``polish=True``
    certifies (and says so in ``Fit.summary``).
    """
    return n <= POLISH_MAX_N


def mesh_and_batch(devices, batch_size, n: int):
    """The device mesh of the data-parallel steps (None for one device) and the batch size."""
    if devices is None and jax.process_count() > 1:
        use = jax.devices()  # a distributed run: every batch over all processes' devices
    elif devices is None:
        local = jax.local_devices()
        size = default_batch_size(n) if batch_size is None else batch_size
        use = local if len(local) > 1 and size >= MIN_ROWS_PER_DEVICE * len(local) else local[:1]
    elif isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        local = jax.local_devices()
        if not 1 <= devices <= len(local):
            raise ValueError(f"devices={devices} but JAX has {len(local)} local device(s); "
                             "pass jax.devices() to use every process's")
        use = local[:devices]
    else:
        try:
            use = list(devices)
        except TypeError:
            raise ValueError(
                f"devices must be an int or a sequence of jax devices, got {devices!r}"
            ) from None
        if not use or not all(isinstance(dev, jax.Device) for dev in use):
            raise ValueError(f"devices must be a non-empty sequence of jax devices, got {devices!r}")
        if any(dev not in jax.devices(dev.platform) for dev in use):
            raise ValueError("devices must be among jax.devices()")
        if not any(dev in jax.local_devices(backend=dev.platform) for dev in use):
            raise ValueError("devices must include one of this process's (jax.local_devices())")
    k = len(use)
    if batch_size is None:
        batch_size = default_batch_size(n)
        batch_size = min(-(-batch_size // k) * k, n - n % k)
    elif isinstance(batch_size, (int, np.integer)) and batch_size % k:
        raise ValueError(f"batch_size={batch_size} is not a multiple of the {k} devices")
    return (Mesh(np.array(use), ("data",)) if k > 1 else None), batch_size
