"""The loop that drives every iterative engine (ECM, VI, SVI, the bootstrap fixed point).

Engines are pure ``step(state, data) -> (state, info)`` functions over ``NamedTuple`` states
(BlackJAX style). :func:`run` compiles one ``jax.lax.while_loop`` that calls ``step`` until
``converged(info, tol)`` holds or ``max_iter`` steps ran, and keeps every step's ``info`` in a
preallocated buffer: the stacked infos are the objective trace. ``data`` is passed as a traced
argument (not closed over), so large arrays are never baked into the compiled program, and the
compiled loop is cached per ``(step, converged, max_iter)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["RunResult", "run", "iterate", "relative_change"]


class RunResult(NamedTuple):
    """Outcome of :func:`run`.

    Attributes
    ----------
    state : NamedTuple
        The final state.
    infos : NamedTuple of ndarray
        Each info field stacked over the ``n_iter`` steps that ran (numpy, on the host).
    n_iter : int
    stop_reason : {"tol", "max_iter"}
    """

    state: Any
    infos: Any
    n_iter: int
    stop_reason: str


def relative_change(new, old):
    """``|new - old| / (1 + |new|)``: the usual stopping statistic for an objective."""
    return jnp.abs(new - old) / (1.0 + jnp.abs(new))


def _empty_like(leaf, max_iter):
    fill = jnp.nan if jnp.issubdtype(leaf.dtype, jnp.floating) else 0
    return jnp.full((max_iter, *leaf.shape), fill, dtype=leaf.dtype)


@functools.lru_cache(maxsize=64)
def _compiled_loop(step: Callable, converged: Callable, max_iter: int, min_iter: int):
    def loop(state, data, tol):
        info_shape = jax.eval_shape(step, state, data)[1]
        buffer = jax.tree.map(lambda s: _empty_like(s, max_iter), info_shape)

        def cond(carry):
            i, _, _, done = carry
            return jnp.logical_and(i < max_iter, jnp.logical_not(done))

        def body(carry):
            i, state, buffer, _ = carry
            state, info = step(state, data)
            buffer = jax.tree.map(lambda b, x: b.at[i].set(x), buffer, info)
            done = jnp.logical_and(i + 1 >= min_iter, converged(info, tol))
            return i + 1, state, buffer, done

        init = (jnp.asarray(0), state, buffer, jnp.asarray(False))
        n, state, buffer, done = jax.lax.while_loop(cond, body, init)
        return state, buffer, n, done

    return jax.jit(loop)


def iterate(
    step: Callable,
    state,
    data,
    *,
    max_iter: int,
    tol,
    converged: Callable,
    min_iter: int = 1,
):
    """Traceable form of :func:`run` for use inside ``jit``, ``grad`` or ``custom_vjp`` rules.

    Same loop and arguments as :func:`run` (``tol`` may be a traced scalar), but nothing is
    brought to the host: returns ``(state, infos, n_iter, converged)`` as JAX values, ``infos``
    being the full ``max_iter`` buffer (NaN beyond ``n_iter``).
    """
    loop = _compiled_loop(step, converged, int(max_iter), int(min_iter))
    return loop(state, data, jnp.asarray(tol, dtype=float))


def run(
    step: Callable,
    state,
    data,
    *,
    max_iter: int,
    tol: float,
    converged: Callable,
    min_iter: int = 1,
) -> RunResult:
    """Iterate ``step`` from ``state`` until ``converged(info, tol)`` or ``max_iter`` steps.

    Parameters
    ----------
    step : callable
        ``(state, data) -> (state, info)``, pure and jittable. Use a module-level function (or
        a ``functools.partial`` of one with hashable arguments) so the compiled loop is reused.
    state : NamedTuple
    data : pytree of arrays
        Everything ``step`` reads besides the state (traced, never baked into the program).
    max_iter : int
        Iteration cap (>= 1).
    tol : float
        Passed to ``converged``.
    converged : callable
        ``(info, tol) -> bool`` (traced); stopping is checked after every step.
    min_iter : int, default=1
        Do not stop before this many steps.
    """
    if int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    if not np.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be finite and >= 0, got {tol!r}")
    loop = _compiled_loop(step, converged, int(max_iter), int(min_iter))
    state, buffer, n, done = loop(state, data, jnp.asarray(tol, dtype=float))
    n = int(n)
    infos = jax.tree.map(lambda b: np.asarray(b[:n]), buffer)
    return RunResult(state, infos, n, "tol" if bool(done) else "max_iter")
