"""JAX plumbing shared by the entry points: float64 scope and seeds."""

from __future__ import annotations

import functools

import jax
import numpy as np

__all__ = ["x64", "as_key"]


def x64(fn):
    """Run ``fn`` with 64-bit JAX arrays, without touching the caller's global JAX config.

    Every public entry point of ppl_bsvm (``fit``, ``Fit.predict_*``, the bootstrap) is wrapped
    in this, so the library computes in float64 even when the user's session is float32.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with jax.enable_x64(True):
            return fn(*args, **kwargs)

    return wrapper


def as_key(seed):
    """A JAX PRNG key from an int seed (>= 0) or an existing key."""
    if isinstance(seed, (jax.Array,)) and (
        jax.dtypes.issubdtype(seed.dtype, jax.dtypes.prng_key) or seed.shape == (2,)
    ):
        return seed
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be a non-negative int or a JAX PRNG key, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return jax.random.key(int(seed))
