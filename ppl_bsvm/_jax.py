"""JAX plumbing shared by the entry points: seeds (float64 and threads: ``_runtime``)."""

from __future__ import annotations

import jax
import numpy as np

__all__ = ["as_key", "committed", "key_from_seed", "placed_like", "to_device"]


def to_device(x, dtype=None) -> jax.Array:
    """A host array (or scalar) on the default device, as ``dtype`` (default its own).

    ``jax.device_put`` of a numpy array, not ``jnp.asarray``: in a new process JAX compiles
    (or loads from the cache) a small program for every shape ``jnp.asarray`` converts, 5-25
    ms each, where ``device_put`` copies in microseconds.
    """
    return jax.device_put(np.asarray(x, dtype=dtype))


def committed(tree):
    """``tree`` with every JAX array that is not committed to a device committed to the one
    device all its arrays are on (no copy: the same buffer), other leaves as they are; the
    tree itself where its arrays span several devices (a mesh's sharded state) or where
    some are tracers (a call inside another program).

    JAX compiles a program again for arguments that differ only in commitment, and a stored
    program's outputs are committed (:class:`ppl_bsvm._programs.Program`, which commits its
    arguments with this so that its own outputs, eager values and loaded arrays all call the
    one compiled program)."""
    arrays = [leaf for leaf in jax.tree.leaves(tree) if isinstance(leaf, jax.Array)]
    if any(isinstance(leaf, jax.core.Tracer) for leaf in arrays):
        return tree  # a call under an outer jit: nothing is placed yet
    devices = set().union(*(leaf.devices() for leaf in arrays))
    if len(devices) != 1:
        return tree
    device = devices.pop()

    def commit(leaf):
        if isinstance(leaf, jax.Array) and not leaf.committed:
            return jax.device_put(leaf, device)
        return leaf

    return jax.tree.map(commit, tree)


def placed_like(new, old):
    """``new`` (a tree of host or device values) placed as the arrays of ``old`` (the same
    structure) are: on the device each is committed to, or replicated over a mesh as ``old``
    is. For values computed outside the compiled programs (a search on the host) that replace
    a program's outputs: JAX compiles again for arguments that differ in placement or
    commitment alone, and refuses to mix one device's arrays with a mesh's."""
    return jax.tree.map(
        lambda a, b: jax.device_put(a, b.sharding) if isinstance(b, jax.Array) else a, new, old)


def key_from_seed(seed: int) -> jax.Array:
    """``jax.random.key(seed)`` for an int in ``[0, 2**63)``, without a program.

    ``jax.random.key`` runs two small programs (the seed's conversion and threefry's seeding), each
    loaded from the compilation cache in a new process (tens of milliseconds). Threefry's key of
    ``seed`` is the pair of 32-bit words ``(seed >> 32, seed & 0xFFFFFFFF)``, so it is built on the
    host; another default PRNG implementation goes through ``jax.random.key``.
    """
    if jax.config.jax_default_prng_impl != "threefry2x32":
        return jax.random.key(seed)
    words = np.array([seed >> 32, seed & 0xFFFFFFFF], dtype=np.uint32)
    return jax.random.wrap_key_data(jax.device_put(words), impl="threefry2x32")


def as_key(seed):
    """A JAX PRNG key from an int seed (>= 0) or an existing single key: a typed key of shape
    ``()`` or a raw ``uint32`` key of shape ``(2,)`` (what ``jax.random.PRNGKey`` returns)."""
    if isinstance(seed, jax.Array):
        typed = jax.dtypes.issubdtype(seed.dtype, jax.dtypes.prng_key)
        if (typed and seed.shape == ()) or (
                not typed and seed.shape == (2,) and seed.dtype == np.uint32):
            return seed
        raise ValueError(
            f"seed must be one JAX PRNG key, got a {'key' if typed else seed.dtype.name} array "
            f"of shape {seed.shape}" + (" (from jax.random.split? pass one of its keys, "
                                        "keys[0])" if typed and seed.ndim else ""))
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be a non-negative int or a JAX PRNG key, got {seed!r}")
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed}")
    return key_from_seed(int(seed))
