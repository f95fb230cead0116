r"""A symmetric matrix kept as its lower triangle of square blocks, for the GP Gibbs sweep's
products with ``K``.

At ``n = 10^4`` a sweep's conjugate-gradient solve multiplies the chains' vectors by ``K``
about a dozen times (:mod:`~ppl_bsvm.inference.mcmc.pcg`), and each product is bound by
reading ``K``'s ``8 n^2`` bytes from memory (about 11 GB/s on the 2-core development machine),
not by its ``2 c n^2`` flops for ``c`` chains. ``K`` is symmetric: with its ``nb = ceil(n /
BLOCK)`` block rows cut into blocks ``K_ij`` of order ``b``, the blocks ``i >= j`` hold all of
it, and

.. math:: (K v)_i = \sum_{j \le i} K_{ij} v_j + \sum_{j > i} K_{ji}^\top v_j

reads each stored block once, for both of its terms, while it is in cache: about half the
bytes. Measured for 4 chains (10 products in one program, 2 cores): 70 -> 38 ms a product at
``n = 10^4``, 265 -> 148 ms at 2 x 10^4, 16.3 -> 10.7 ms at 5000 and 2.2 -> 1.5 ms at 2000
with ``b = 500``; blocks of 250 took longer than the dense product (the loop's steps cost
more than they save) and blocks of 1000 (8 MB, beyond the cache) 20 % longer than 500. The
blocks hold the same float64 numbers as ``K`` and the sums differ from the dense product's
only by their order, so products, solves and draws agree with the dense ones to rounding
(``tests/inference/mcmc/test_packed.py``). Beyond the CPU the dense product is left to the
accelerator's own library (:func:`worth_packing`).

In the sampler (``susy``, ``n = 10^4``, 4 chains; six alternating pairs of fresh processes
on the 2-core machine, five of 10 + 30 sweeps and one of ``benchmarks.sbsvm_truth --scale``'s
20 + 40): 952-1,115 ms a sweep, median 1,020, against 1,065-1,228 ms dense, median 1,096:
about 7 %. The solve alone gains 13 % (750 against 863 ms, medians of eight alternations in
one process) and the draw 8 % (1,005 against 1,091 ms): the factor's two products, the
preconditioner's set-up and the line moves do not change. The fit's peak memory: 4.60 GiB
against 5.08 GiB at 10^4; at 2 x 10^4, 16.05 GiB against 17.26 GiB (another day's dense
run), and a same-day pair of short runs took 4.4 against 5.6 s a sweep. The fallback, which
rarely runs, unpacks ``K`` already scaled (:func:`unpack`).

**The gain is the machine's.** On the 2-core machine of 2 December 2026 (480 MiB of L3, a
dense product at about 23 GB/s) the same measurement gave 34 ms for the dense ``(n, n) x (n,
chains)`` product, 67 ms for ``(chains, n) x (n, n)`` (the form :mod:`pcg` uses) and 53-63 ms
packed, 49-94 ms over block orders 128 to 3336: there the packed scan's small products, one
core's work each, are the bound, not memory. Neither form is fastest on both machines, and
choosing one by timing at run time would make a seed's draws depend on the load (the sums'
order changes the last bits), so the choice stays fixed.

Storage: ``nb (nb + 1) / 2`` blocks, ``4 n^2 + 4 n b`` bytes against ``8 n^2``; the last
block row and column are padded with zeros to ``nb b``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["BLOCK", "PACK_MIN", "Packed", "block_size", "worth_packing", "pack", "times",
           "unpack", "diagonal"]

BLOCK = 512
"""Largest block order: the blocks' order is the multiple of 4 nearest above ``n / nb`` with
``nb = ceil(n / BLOCK)`` (500 at ``n`` = 5000, 10^4 and 2 x 10^4; module doc)."""

PACK_MIN = 2000
"""Fewest points at which the sweep keeps ``K`` packed: measured faster from 2000 points (1.5
against 2.2 ms a product of 4 chains); below, ``K`` fits in the cache and the dense product is
as fast."""


class Packed(NamedTuple):
    """``K``'s blocks ``K_ij``, ``i >= j``, in row-major order of ``(i, j)``.

    Attributes
    ----------
    blocks : (nb (nb + 1) / 2, b, b)
    rows, cols : (nb (nb + 1) / 2,) int32
        Each block's ``i`` and ``j``.
    """

    blocks: jnp.ndarray
    rows: jnp.ndarray
    cols: jnp.ndarray

    @property
    def dtype(self):
        return self.blocks.dtype


def block_size(n: int) -> tuple[int, int]:
    """``(nb, b)``: block rows and the blocks' order for ``n`` points (:data:`BLOCK`)."""
    nb = -(-int(n) // BLOCK)
    return nb, 4 * -(-int(n) // (4 * nb))


def worth_packing(n: int) -> bool:
    """Whether the sweep keeps an ``n x n`` ``K`` packed: from :data:`PACK_MIN` points, on the
    CPU (an accelerator's dense product is not bound the same way, and a loop of small
    products would be slower there)."""
    return int(n) >= PACK_MIN and jax.default_backend() == "cpu"


def _layout(n: int):
    nb, b = block_size(n)
    rows, cols = np.tril_indices(nb)
    return nb, b, rows.astype(np.int32), cols.astype(np.int32)


def pack(K) -> Packed:
    """The :class:`Packed` form of a symmetric ``(n, n)`` ``K`` (only its lower blocks are
    read); traceable."""
    n = K.shape[0]
    nb, b, rows, cols = _layout(n)
    local = np.arange(b)
    r = jnp.asarray(rows[:, None] * b + local[None, :])  # (T, b) global row of each entry
    c = jnp.asarray(cols[:, None] * b + local[None, :])
    blocks = K.at[r[:, :, None], c[:, None, :]].get(mode="fill", fill_value=0)
    return Packed(blocks, jnp.asarray(rows), jnp.asarray(cols))


def _order(A: Packed) -> tuple[int, int]:
    """``(nb, b)`` from the blocks' shape (static)."""
    count, b = A.blocks.shape[0], A.blocks.shape[1]
    return int(round((np.sqrt(8 * count + 1) - 1) / 2)), b


def times(A, v):
    """``v @ A`` (``= A v``, ``A`` symmetric) for ``v`` of shape ``(n,)`` or ``(c, n)``;
    ``A`` dense or :class:`Packed`."""
    if not isinstance(A, Packed):
        return v @ A
    nb, b = _order(A)
    n = v.shape[-1]
    lead = v.shape[:-1]
    V = jnp.pad(v, [(0, 0)] * len(lead) + [(0, nb * b - n)]).reshape(lead + (nb, b))

    def body(out, block):
        B, i, j = block
        vi = jax.lax.dynamic_index_in_dim(V, i, len(lead), keepdims=False)
        vj = jax.lax.dynamic_index_in_dim(V, j, len(lead), keepdims=False)
        out = out.at[..., i, :].add(vj @ B.T)
        # a diagonal block's transpose is itself, already counted
        return out.at[..., j, :].add(jnp.where(i != j, vi @ B, 0.0)), None

    out, _ = jax.lax.scan(body, jnp.zeros_like(V), (A.blocks, A.rows, A.cols))
    return out.reshape(lead + (nb * b,))[..., :n]


def unpack(A: Packed, n: int, scale=None):
    """The dense ``(n, n)`` matrix, or ``diag(scale) A diag(scale)``. Scale here rather than
    after: inside a loop, XLA would hoist the unpacking of an invariant ``A`` out of it (the
    sweep's fallback, which rarely runs) and do it always."""
    nb, b = _order(A)
    blocks = A.blocks
    if scale is not None:
        S = jnp.pad(scale, (0, nb * b - n)).reshape(nb, b)
        blocks = S[A.rows][:, :, None] * blocks * S[A.cols][:, None, :]
    # laid out as (block row, row, block column, column), so that the reshape is free; the
    # upper blocks are the lower ones transposed, and the diagonal ones are set again after
    grid = jnp.zeros((nb, b, nb, b), blocks.dtype)
    grid = grid.at[A.cols, :, A.rows, :].set(jnp.swapaxes(blocks, 1, 2))
    grid = grid.at[A.rows, :, A.cols, :].set(blocks)
    return grid.reshape(nb * b, nb * b)[:n, :n]


def diagonal(A, n: int):
    """``diag(A)`` of length ``n``."""
    if not isinstance(A, Packed):
        return jnp.diagonal(A)
    nb, _ = _order(A)
    first = np.cumsum(np.arange(1, nb + 1)) - 1  # the diagonal block ends each block row
    return jnp.diagonal(A.blocks[first], axis1=1, axis2=2).reshape(-1)[:n]
