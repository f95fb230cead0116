"""The loop that drives every iterative engine (ECM, VI, SVI, GPC, the bootstrap fixed point).

Engines are pure ``step(static, key, state, data) -> (state, info)`` functions over
``NamedTuple`` states (BlackJAX style, the engine contract of :mod:`ppl_bsvm.engine`):
``static`` is the engine's hashable configuration (shapes, schedules, flags; ``None`` when it
has none), ``key`` a PRNG key the loop passes in (a deterministic step ignores it), ``data``
everything else the step reads. :func:`run` calls ``step`` until ``converged(info, tol)``
holds or ``max_iter`` steps ran, and keeps every step's ``info``: the stacked infos are the
objective trace. The loop carries the key: before each step it splits ``key, sub =
split(key)`` and passes ``sub``; the last ``key`` is kept with the result, so a resumed run
continues the same stream.

**Compiled once.** The work is one ``jax.lax.while_loop`` program per ``(step, static,
converged)``,
run in segments of at most :data:`SEGMENT` steps: the segment's length, the tolerance, the
iteration budget and ``min_iter`` are traced arguments, and ``data`` is traced too (never baked
into the program), so fits with other budgets, tolerances or data of the same shapes reuse the
compiled program, and so do later calls. Between segments the loop returns to Python, which
updates the progress bar (:mod:`ppl_bsvm._progress`) and stops once converged; the state stays
on the device, so the iterates do not depend on where the segments end. With a bar shown the
first segment is one step and later ones are sized by :func:`ppl_bsvm._progress.segment_length`
to last about half a second.

Two guarantees for the user:

* **No silent NaN.** After every step the loop checks that the new state is finite; a step that
  produces a NaN or inf stops the loop and :func:`run` raises ``FloatingPointError`` naming the
  step function, the iteration and the state fields affected. Fields that hold non-finite
  values by design (an empty slot marked NaN, an objective starting at ``-inf``) are listed in
  the state class's ``nonfinite_ok`` attribute and are not checked.
* **Resumable.** ``run(..., resume=previous)`` continues an earlier :class:`RunResult` from its
  final state; ``max_iter`` counts the earlier iterations too, and the returned result (state,
  stacked infos, ``n_iter``, ``stop_reason``) is the one a single uninterrupted run would have
  given, because ``step`` is a pure function of its key and the state, and the loop's key is
  kept with the result.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import _programs, _progress
from .._jax import key_from_seed, to_device

__all__ = ["SEGMENT", "RunResult", "run", "iterate", "relative_change", "delta_below"]

SEGMENT = 256
"""Most steps one call of the compiled loop runs before returning to Python."""


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
    key : PRNG key
        The loop's key after the last step, from which a resumed run goes on.
    """

    state: Any
    infos: Any
    n_iter: int
    stop_reason: str
    key: Any = None


def delta_below(info, tol):
    """The usual stopping rule: the step's ``info.delta`` (a relative change, or the stopping
    statistic of a stochastic engine) is at most ``tol``; :func:`run`'s default."""
    return info.delta <= tol


def relative_change(new, old):
    """``|new - old| / (1 + |new|)``: the usual stopping statistic for an objective."""
    return jnp.abs(new - old) / (1.0 + jnp.abs(new))


def _empty_like(leaf, length):
    fill = jnp.nan if jnp.issubdtype(leaf.dtype, jnp.floating) else 0
    return jnp.full((length, *leaf.shape), fill, dtype=leaf.dtype)


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


def all_finite(state):
    """``True`` (traced) when every watched leaf of ``state`` is finite (see :func:`_watched`)."""
    leaves = [leaf for _, leaf in _watched(state)]
    if not leaves:
        return jnp.asarray(True)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]))


def _nonfinite_fields(state) -> list[str]:
    """Paths of the watched leaves holding a NaN or inf (host side, for the error message)."""
    return [path for path, leaf in _watched(state) if not np.all(np.isfinite(np.asarray(leaf)))]


def step_name(step: Callable) -> str:
    """``module.function`` of a step, for messages."""
    module = getattr(step, "__module__", "") or ""
    name = getattr(step, "__qualname__", None) or type(step).__name__
    return f"{module}.{name}" if module else name


def _default_key():
    """The key of a deterministic engine's loop (its steps ignore it)."""
    return key_from_seed(0)


@functools.lru_cache(maxsize=128)
def _jitted(step: Callable):
    """``step`` under ``jit`` with ``static`` compiled in: the segment traces it once for the
    shape of its info and reuses that trace in the loop body (tracing a large step, S-BSVM's
    with its hyperparameter gradient, costs a few tenths of a second in a new process)."""
    return jax.jit(step, static_argnums=0)


def _segment_loop(step: Callable, static, converged: Callable, length: int):
    """The traceable segment: at most ``min(length, limit)`` steps (see :func:`_compiled_loop`)."""
    step = _jitted(step)

    def loop(key, state, data, tol, start, limit, min_iter):
        info_shape = jax.eval_shape(step, static, key, state, data)[1]
        buffer = jax.tree.map(lambda s: _empty_like(s, length), info_shape)
        limit = jnp.minimum(limit, length)

        def cond(carry):
            i, _, _, _, done, finite = carry
            return jnp.logical_and(i < limit, jnp.logical_not(done) & finite)

        def body(carry):
            i, key, state, buffer, _, _ = carry
            key, sub = jax.random.split(key)
            state, info = step(static, sub, state, data)
            buffer = jax.tree.map(lambda b, x: b.at[i].set(x), buffer, info)
            # ``start`` earlier iterations ran in previous segments or calls.
            done = jnp.logical_and(start + i + 1 >= min_iter, converged(info, tol))
            return i + 1, key, state, buffer, done, all_finite(state)

        init = (jnp.zeros((), jnp.int32), key, state, buffer, jnp.asarray(False),
                jnp.asarray(True))
        n, key, state, buffer, done, finite = jax.lax.while_loop(cond, body, init)
        return key, state, buffer, n, done, finite

    return loop


@functools.lru_cache(maxsize=128)
def _compiled_loop(step: Callable, static, converged: Callable, length: int):
    """``jit`` of a segment of at most ``length`` steps; cached per ``(step, static,
    converged, length)`` (``static`` must be hashable: a NamedTuple of Python values).

    Arguments ``(key, state, data, tol, start, limit, min_iter)``: ``start`` steps ran before,
    ``limit`` caps this call's steps, and stopping at ``tol`` needs ``start + i >= min_iter``.
    """
    return _programs.Program(_segment_loop(step, static, converged, length),
                             name=f"{__name__}.segment", identity=(step, static, converged, length))


def iterate(
    step: Callable,
    state,
    data,
    *,
    max_iter: int,
    tol,
    converged: Callable = delta_below,
    static=None,
    key=None,
    min_iter: int = 1,
):
    """Traceable form of :func:`run` for use inside ``jit``, ``grad`` or ``custom_vjp`` rules.

    Same loop and arguments as :func:`run` (``tol`` may be a traced scalar), in one segment of
    ``max_iter`` steps, and nothing is brought to the host: returns
    ``(state, infos, n_iter, converged)`` as JAX values, ``infos`` being the full ``max_iter``
    buffer (NaN beyond ``n_iter``).
    """
    loop = _compiled_loop(step, static, converged, int(max_iter))
    key = _default_key() if key is None else key
    _, state, infos, n, done, finite = loop(
        key, state, data, jnp.asarray(tol, dtype=float), 0, int(max_iter), int(min_iter)
    )
    return state, infos, n, jnp.logical_and(done, finite)


def run(
    step: Callable,
    state,
    data,
    *,
    max_iter: int,
    tol: float,
    converged: Callable = delta_below,
    static=None,
    key=None,
    min_iter: int = 1,
    resume: RunResult | None = None,
    progress_bar: bool | None = None,
    desc: str | None = None,
) -> RunResult:
    """Iterate ``step`` from ``state`` until ``converged(info, tol)`` or ``max_iter`` steps.

    Parameters
    ----------
    step : callable
        ``(static, key, state, data) -> (state, info)``, pure and jittable: a module-level
        function, so that the compiled loop is reused across calls.
    state : NamedTuple
    data : pytree of arrays
        Everything ``step`` reads besides the state (traced, never baked into the program).
    max_iter : int
        Iteration cap (>= 1).
    tol : float
        Passed to ``converged``.
    converged : callable, default=:func:`delta_below`
        ``(info, tol) -> bool`` (traced); stopping is checked after every step.
    static : hashable, optional
        ``step``'s first argument: the engine's static configuration (compiled in).
    key : PRNG key, optional
        The loop's key (module docstring); default a fixed key, for deterministic steps.
    min_iter : int, default=1
        Do not stop before this many steps.
    resume : RunResult, optional
        Continue this earlier result (its ``state`` and ``key`` replace ``state`` and
        ``key``): run at most
        ``max_iter - resume.n_iter`` more steps and return the infos of both calls stacked.
        A result that stopped at ``tol`` is returned as it is.
    progress_bar : bool or None, optional
        Show a progress bar; default: as the enclosing ``ppl_bsvm.fit`` says (its
        ``progress_bar``), else when someone can see it (:mod:`ppl_bsvm._progress`).
    desc : str, optional
        The bar's label (default: the enclosing fit's ``model/method``, else the step's name).

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
    max_iter = int(max_iter)
    start = 0
    if resume is not None:
        if resume.stop_reason == "tol" or resume.n_iter >= max_iter:
            return resume
        state, start, key = resume.state, resume.n_iter, resume.key
    key = _default_key() if key is None else key
    loop = _compiled_loop(step, static, converged, SEGMENT)
    tol_arr = to_device(tol, np.float64)
    done_iter, converged_now, pieces = start, False, []
    enabled, label = _progress.current()
    enabled = enabled if progress_bar is None else progress_bar
    desc = desc or label or step_name(step).rsplit(".", 1)[-1]
    with _progress.progress_bar(max_iter, desc, enabled, initial=start) as bar:
        shown = _progress.shown(bar)
        bar.set_status("compiling, first step")
        limit = 1 if shown else SEGMENT  # time the first step
        while done_iter < max_iter and not converged_now:
            t0 = time.perf_counter()
            key, state, buffer, n, done, finite = loop(
                key, state, data, tol_arr, done_iter, min(limit, max_iter - done_iter), min_iter
            )
            n = int(n)
            if not bool(finite):
                fields = _nonfinite_fields(state)
                raise FloatingPointError(
                    f"{step_name(step)} produced non-finite values at iteration {done_iter + n} "
                    f"in {', '.join(fields) or 'the state'}; the iterates diverged. Check the "
                    "data scale, the kernel hyperparameters and jitter, and the learning rate."
                )
            pieces.append(jax.tree.map(lambda b, n=n: np.asarray(b)[:n], buffer))
            done_iter += n
            converged_now = bool(done)
            bar.update(n)
            if shown:  # segments of about _progress.SEGMENT_SECONDS
                limit = _progress.segment_length(n, time.perf_counter() - t0, SEGMENT)
    infos = jax.tree.map(lambda *parts: np.concatenate(parts), *pieces)
    if resume is not None:
        infos = jax.tree.map(lambda old, new: np.concatenate([old, new]), resume.infos, infos)
    return RunResult(state, infos, done_iter, "tol" if converged_now else "max_iter", key)
