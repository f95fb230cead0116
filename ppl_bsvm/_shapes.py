"""Shape buckets: array sizes rounded up so that compiled programs are shared across sizes.

JAX compiles a program per input shape. Padding to a few sizes keeps that to a handful of
programs: test sets of any size (:func:`padded_size`, powers of two), and training sets of
nearby sizes such as the folds of a cross-validation (:func:`bucket_size`, at most an eighth
more rows). The padded rows are zeros; every user of these functions drops or masks them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CHUNK", "BUCKET_MAX_ROWS", "padded_size", "bucket_size", "pad_rows", "padded_call"]

CHUNK = 2048
"""Rows of test inputs per call of a compiled predictive function."""


def padded_size(n: int) -> int:
    """Length ``n`` is padded to: the next power of two (at least 8) up to :data:`CHUNK`, a
    multiple of :data:`CHUNK` beyond."""
    if n > CHUNK:
        return -(-n // CHUNK) * CHUNK
    return max(8, 1 << max(n - 1, 0).bit_length())


BUCKET_MAX_ROWS = 1 << 20
"""Beyond this many rows training data are not padded: the padded copy would cost more memory
than a compilation costs time."""


def bucket_size(n: int) -> int:
    """Rows an engine pads ``n`` training rows to, so that data sets of nearby sizes (the folds
    of a cross-validation, say) share compiled programs: ``n`` rounded up to a multiple of
    ``2^(floor(log2 n) - 3)``, i.e. at most an eighth more rows (``n`` itself up to 16 and
    beyond :data:`BUCKET_MAX_ROWS`).

    >>> [bucket_size(n) for n in (10, 242, 243, 256, 257, 5000, 5_000_000)]
    [10, 256, 256, 256, 288, 5120, 5000000]
    """
    if n <= 16 or n > BUCKET_MAX_ROWS:
        return n
    step = 1 << (n.bit_length() - 4)
    return -(-n // step) * step


def pad_rows(a, size: int, axis: int = 0):
    """Numpy or JAX array ``a`` with zeros appended along ``axis`` up to ``size`` (no copy when
    it is long enough); the result is of ``a``'s kind."""
    extra = size - a.shape[axis]
    if extra <= 0:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    if isinstance(a, np.ndarray):
        return np.pad(a, widths)
    import jax.numpy as jnp

    return jnp.pad(a, widths)


def padded_call(fn, *arrays, **kwargs):
    """``fn(*arrays, **kwargs)`` on the arrays zero-padded along their last axis to
    :func:`padded_size` (``kwargs`` as they are), the outputs (a tuple or one array) trimmed
    back, as numpy float64."""
    arrays = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in arrays))
    shape = arrays[0].shape
    arrays = [a.reshape(-1) if a.ndim == 0 else a for a in arrays]
    n = arrays[0].shape[-1]
    size = padded_size(n)
    out = fn(*(pad_rows(a, size, axis=-1) for a in arrays), **kwargs)

    def trim(o):
        return np.asarray(o, dtype=np.float64)[..., :n].reshape(shape)

    return tuple(trim(o) for o in out) if isinstance(out, tuple) else trim(out)
