"""The loop that drives every iterative engine (ECM, VI, SVI, the bootstrap fixed point).

Engines are pure ``step(state, data) -> (state, info)`` functions over ``NamedTuple`` states
(BlackJAX style). :func:`run` compiles one ``jax.lax.while_loop`` that calls ``step`` until
``converged(info, tol)`` holds or ``max_iter`` steps ran, and keeps every step's ``info`` in a
preallocated buffer: the stacked infos are the objective trace. ``data`` is passed as a traced
argument (not closed over), so large arrays are never baked into the compiled program, and the
compiled loop is cached per ``(step, converged, max_iter)``.

Two guarantees for the user:

* **No silent NaN.** After every step the loop checks that the new state is finite; a step that
  produces a NaN or inf stops the loop and :func:`run` raises ``FloatingPointError`` naming the
  step function, the iteration and the state fields affected. Fields that hold non-finite
  values by design (an empty slot marked NaN, an objective starting at ``-inf``) are listed in
  the state class's ``nonfinite_ok`` attribute and are not checked.
* **Resumable.** ``run(..., resume=previous)`` continues an earlier :class:`RunResult` from its
  final state; ``max_iter`` counts the earlier iterations too, and the returned result (state,
  stacked infos, ``n_iter``, ``stop_reason``) is the one a single uninterrupted run would have
  given, because ``step`` is a pure function of the state (PRNG keys included).
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


def _watched(tree, path: str = "state") -> list:
    """``(path, leaf)`` for the floating-point leaves of ``tree`` that must stay finite.

    ``path`` names the leaf as the error message shows it (``state.window.values``); fields a
    NamedTuple class lists in ``nonfinite_ok`` are skipped (see module doc).
    """
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # NamedTuple
        skip = getattr(type(tree), "nonfinite_ok", ())
        return [
            pair
            for name, value in zip(tree._fields, tree, strict=True)
            if name not in skip
            for pair in _watched(value, f"{path}.{name}")
        ]
    if isinstance(tree, dict):
        return [pair for key in sorted(tree) for pair in _watched(tree[key], f"{path}[{key!r}]")]
    if isinstance(tree, (list, tuple)):
        return [pair for i, value in enumerate(tree) for pair in _watched(value, f"{path}[{i}]")]
    if hasattr(tree, "dtype") and jnp.issubdtype(tree.dtype, jnp.inexact):
        return [(path, tree)]
    return []


def _all_finite(state):
    leaves = [leaf for _, leaf in _watched(state)]
    if not leaves:
        return jnp.asarray(True)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]))


def _nonfinite_fields(state) -> list[str]:
    """Paths of the watched leaves holding a NaN or inf (host side, for the error message)."""
    return [path for path, leaf in _watched(state) if not np.all(np.isfinite(np.asarray(leaf)))]


def _step_name(step: Callable) -> str:
    fn = step.func if isinstance(step, functools.partial) else step
    module = getattr(fn, "__module__", "") or ""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    name = name.replace(".<locals>", "")  # steps built by factories (make_step.step)
    return f"{module}.{name}" if module else name


@functools.lru_cache(maxsize=64)
def _compiled_loop(step: Callable, converged: Callable, max_iter: int, min_iter: int):
    def loop(state, data, tol, start):
        info_shape = jax.eval_shape(step, state, data)[1]
        buffer = jax.tree.map(lambda s: _empty_like(s, max_iter), info_shape)

        def cond(carry):
            i, _, _, done, finite = carry
            return jnp.logical_and(i < max_iter, jnp.logical_not(done) & finite)

        def body(carry):
            i, state, buffer, _, _ = carry
            state, info = step(state, data)
            buffer = jax.tree.map(lambda b, x: b.at[i].set(x), buffer, info)
            # ``start`` earlier iterations ran in a previous call (resume).
            done = jnp.logical_and(start + i + 1 >= min_iter, converged(info, tol))
            return i + 1, state, buffer, done, _all_finite(state)

        init = (jnp.asarray(0), state, buffer, jnp.asarray(False), jnp.asarray(True))
        n, state, buffer, done, finite = jax.lax.while_loop(cond, body, init)
        return state, buffer, n, done, finite

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
    state, infos, n, done, finite = loop(state, data, jnp.asarray(tol, dtype=float), 0)
    return state, infos, n, jnp.logical_and(done, finite)


def run(
    step: Callable,
    state,
    data,
    *,
    max_iter: int,
    tol: float,
    converged: Callable,
    min_iter: int = 1,
    resume: RunResult | None = None,
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
    resume : RunResult, optional
        Continue this earlier result (its ``state`` replaces ``state``): run at most
        ``max_iter - resume.n_iter`` more steps and return the infos of both calls stacked.
        A result that stopped at ``tol`` is returned as it is.

    Raises
    ------
    FloatingPointError
        When a step makes the state non-finite (the message names the step, the iteration and
        the fields).
    """
    if int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    if not np.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be finite and >= 0, got {tol!r}")
    start = 0
    if resume is not None:
        if resume.stop_reason == "tol" or resume.n_iter >= max_iter:
            return resume
        state, start = resume.state, resume.n_iter
    loop = _compiled_loop(step, converged, int(max_iter) - start, int(min_iter))
    state, buffer, n, done, finite = loop(state, data, jnp.asarray(tol, dtype=float), start)
    n = int(n)
    if not bool(finite):
        fields = _nonfinite_fields(state)
        raise FloatingPointError(
            f"{_step_name(step)} produced non-finite values at iteration {start + n} in "
            f"{', '.join(fields) or 'the state'}; the iterates diverged. Check the data scale, "
            "the kernel hyperparameters and jitter, and the learning rate."
        )
    infos = jax.tree.map(lambda b: np.asarray(b[:n]), buffer)
    if resume is not None:
        infos = jax.tree.map(lambda old, new: np.concatenate([old, new]), resume.infos, infos)
    return RunResult(state, infos, start + n, "tol" if bool(done) else "max_iter")
