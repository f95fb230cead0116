"""Chains compiled once: the sampling loop of the MCMC engines.

``numpyro.infer.MCMC`` builds and compiles its loop anew on every ``run`` (its
``fori_collect`` wraps a fresh ``jit`` each time), which cost the engines 5-10 s per fit. This
module runs the same kernels (NumPyro's ``NUTS``, this package's Gibbs sweep) through two
programs that are compiled once per sampler configuration and data shapes and kept for later
calls (and, through JAX's persistent cache, for later processes):

* ``init(key, inputs) -> (state, data)``: everything computed once per run from the model's
  inputs (the Gibbs sampler's kernel factor, NUTS's initial point) and the chains' first state;
* ``segment(state, data, limit) -> (state, fields, n)``: at most :data:`SEGMENT` iterations
  of every chain, collecting the draws and the extra fields of each.

The model's inputs are traced arguments, never constants of the program, so a fit on other
data of the same shapes, or with another ``gamma`` or ``prior_scale``, reuses the programs.
Python runs the segments one after another (updating the progress bar between them), keeps
the iterations after warmup and thins them; the chains' state stays on the device, so where
the segments end does not change the draws.

Chain methods: ``"vectorized"`` (all chains in one program, the default), ``"sequential"`` (one
chain after another, each with a one-chain program) and ``"parallel"`` (one chain per device
with ``jax.pmap``; with fewer devices than chains it runs sequentially and warns, as NumPyro
does).
"""

from __future__ import annotations

import collections
import contextlib
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np

from ... import _progress

__all__ = ["SEGMENT", "ChainKernel", "Draws", "sample_chains", "split_static"]

SEGMENT = 250
"""Most iterations one call of the compiled segment runs. While a progress bar is shown the
first segment is one iteration and later ones are sized by
:func:`ppl_bsvm._progress.segment_length` to last about half a second (growing at most
twofold from one to the next: NUTS's first warmup iterations go from 1 to 1023 leapfrog steps,
and a segment of 250 of them sized on the cheap ones ran for minutes without a word)."""

_CACHE_SIZE = 16


class ChainKernel(NamedTuple):
    """A sampler as pure functions over a batch of chains (leading axis: chain).

    Attributes
    ----------
    prepare : callable
        ``inputs -> data``: the per-run constants the steps read (the Gibbs sampler's kernel
        factor; NUTS's model arguments as they are).
    init : callable
        ``(keys (C,), data) -> state``: the chains' first state.
    step : callable
        ``(state, data) -> state``: one iteration of every chain.
    collect : callable
        ``(state, data) -> dict``: what is kept of an iteration, arrays ``(C, ...)``: the draws
        under their site names and the extra fields.
    check : callable, optional
        ``(state, data) -> None``, run on the chains' first state (host side); raises when the
        sampler cannot start (NUTS without a finite starting point, a kernel matrix that is not
        positive definite).
    init_status : str
        What the progress bar says while ``init`` compiles and runs ("compiling"; adjusted
        MCLMC tunes its chains there).
    """

    prepare: Callable
    init: Callable
    step: Callable
    collect: Callable
    check: Callable | None = None
    init_status: str = "compiling"


class Draws(NamedTuple):
    """Outcome of :func:`sample_chains`.

    Attributes
    ----------
    fields : pytree of ndarray (chain, draw, ...)
        The kept (thinned, post-warmup) iterations of what the kernel collects.
    state : pytree
        The chains' last state (leading axis: chain).
    n_iter : int
        Post-warmup iterations run so far (resumed ones included).
    timings : dict
        ``mcmc``: seconds of all iterations of all chains, compilation taken out; ``compile``:
        seconds of lowering and compilation (``jax.monitoring``).
    """

    fields: dict
    state: Any
    n_iter: int
    timings: dict


# --- static / traced split of model arguments ------------------------------------------------


def _is_dynamic(leaf) -> bool:
    if isinstance(leaf, (bool, np.bool_)):
        return False
    return isinstance(leaf, (jax.Array, np.ndarray, np.number, float, int))


def split_static(tree):
    """Split a pytree of model arguments into a hashable static part and its array leaves.

    Arrays and numbers become traced arguments of the compiled programs; everything else
    (kernels, flags, ``None``) is static. Returns ``(static, leaves)`` with
    ``rebuild(static, leaves)`` giving the tree back.
    """
    leaves, treedef = jax.tree.flatten(tree)
    dynamic = tuple(_is_dynamic(leaf) for leaf in leaves)
    static = tuple(None if d else leaf for d, leaf in zip(dynamic, leaves, strict=True))
    arrays = [jnp.asarray(leaf) for d, leaf in zip(dynamic, leaves, strict=True) if d]
    return (treedef, dynamic, static), arrays


def rebuild(static, arrays):
    """Inverse of :func:`split_static`."""
    treedef, dynamic, fixed = static
    it = iter(arrays)
    return jax.tree.unflatten(treedef, [next(it) if d else s for d, s in zip(dynamic, fixed)])


def _signature(arrays) -> tuple:
    return tuple((tuple(np.shape(a)), str(jnp.result_type(a))) for a in jax.tree.leaves(arrays))


# --- the two programs ---------------------------------------------------------------------------


class _Programs(NamedTuple):
    prepare: Callable
    init: Callable
    segment: Callable
    check: Callable | None
    init_status: str = "compiling"


def _segment_program(kernel: ChainKernel, length: int):
    def segment(state, data, limit):
        shapes = jax.eval_shape(kernel.collect, state, data)
        buffer = jax.tree.map(lambda s: jnp.zeros((length, *s.shape), s.dtype), shapes)

        def body(carry):
            i, state, buffer = carry
            state = kernel.step(state, data)
            values = kernel.collect(state, data)
            buffer = jax.tree.map(lambda b, v: b.at[i].set(v), buffer, values)
            return i + 1, state, buffer

        n, state, buffer = jax.lax.while_loop(
            lambda c: c[0] < jnp.minimum(limit, length), body,
            (jnp.zeros((), jnp.int32), state, buffer),
        )
        return state, buffer, n

    return segment


_PROGRAMS: collections.OrderedDict = collections.OrderedDict()


def _programs(key, build: Callable[[], ChainKernel], pmapped: bool) -> _Programs:
    """The compiled programs of a sampler configuration (LRU cache of :data:`_CACHE_SIZE`).

    ``build`` makes the kernel; it is called once per cache entry, because a kernel may keep
    Python-side settings from its first ``init`` trace (NumPyro's HMC does).
    """
    programs = _PROGRAMS.get(key)
    if programs is None:
        kernel = build()
        segment = _segment_program(kernel, SEGMENT)
        if pmapped:
            programs = _Programs(jax.jit(kernel.prepare), jax.pmap(kernel.init),
                                 jax.pmap(segment, in_axes=(0, 0, None)), kernel.check,
                                 kernel.init_status)
        else:
            programs = _Programs(jax.jit(kernel.prepare), jax.jit(kernel.init), jax.jit(segment),
                                 kernel.check, kernel.init_status)
        _PROGRAMS[key] = programs
        while len(_PROGRAMS) > _CACHE_SIZE:
            _PROGRAMS.popitem(last=False)
    else:
        _PROGRAMS.move_to_end(key)
    return programs


# --- running -------------------------------------------------------------------------------------


_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


@contextlib.contextmanager
def compile_seconds():
    """Seconds JAX spends lowering and compiling inside the block (``jax.monitoring``)."""
    total = [0.0]

    def listen(event, duration, **_):
        if event in _COMPILE_EVENTS:
            total[0] += duration

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield total
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def _kept(total_samples: int, done: int, j, thinning: int) -> np.ndarray:
    """Which post-warmup iterations ``j`` (numbered from 0 in this run, after ``done`` earlier
    ones) are kept: every ``thinning``-th, aligned as NumPyro aligns them (the last of a run of
    ``total_samples`` is kept)."""
    j = done + np.asarray(j)
    offset = total_samples % thinning
    return (j >= offset) & ((j - offset) % thinning == 0)


def sample_chains(
    key_of_config,
    build: Callable[[], ChainKernel],
    rng_key,
    inputs,
    *,
    num_warmup: int,
    num_samples: int,
    num_chains: int,
    chain_method: str,
    thinning: int,
    resume: Draws | None = None,
    label: str | None = None,
) -> Draws:
    """Run ``num_warmup + num_samples`` iterations of ``num_chains`` chains (module doc).

    Parameters
    ----------
    key_of_config : hashable
        Everything static about the sampler (its options, the model, ``num_warmup``); the
        programs are cached under it and the shapes of ``inputs``.
    build : callable
        ``() -> ChainKernel`` for that configuration.
    rng_key : PRNG key
        Split into one key per chain.
    inputs : pytree of arrays
        The model's data, traced.
    resume : Draws, optional
        Continue these chains (no warmup) up to ``num_samples`` post-warmup iterations.
    label : str, optional
        The progress bar's label (default: the enclosing fit's ``model/method``).
    """
    parallel = chain_method == "parallel"
    if parallel and jax.local_device_count() < num_chains:
        warnings.warn(
            f"chain_method='parallel' needs {num_chains} devices and there are "
            f"{jax.local_device_count()}; the chains run sequentially",
            UserWarning,
            stacklevel=3,
        )
        parallel, chain_method = False, "sequential"
    groups = 1 if chain_method == "vectorized" else num_chains
    per_group = num_chains // groups
    if parallel:
        groups, per_group = 1, num_chains
    signature = _signature(inputs)
    programs = _programs((key_of_config, per_group, parallel, signature), build, parallel)
    done = 0 if resume is None else resume.n_iter
    todo = num_samples - done + (num_warmup if resume is None else 0)

    enabled, context = _progress.current()
    with compile_seconds() as compiled, _progress.progress_bar(
            todo * groups, label or context or "sampling", enabled) as bar:
        start = time.perf_counter()
        shown = _progress.shown(bar)
        bar.set_status("compiling" if resume is not None else programs.init_status)
        data = programs.prepare(inputs)
        if parallel:
            data = _replicate(data, num_chains)
        if resume is None:
            keys = jax.random.split(rng_key, num_chains)
            if parallel:
                states = [programs.init(keys[:, None], data)]  # one chain per device
            else:
                states = [programs.init(keys[g * per_group:(g + 1) * per_group], data)
                          for g in range(groups)]
            if programs.check is not None:
                for state in states:
                    programs.check(state, data)
        else:
            states = _split_groups(resume.state, groups, per_group, parallel)
        if shown:  # compiled ahead, so that the bar can say when the first iteration runs
            programs.segment.lower(states[0], data, 1).compile()
            bar.set_status("first iteration")
        warmup = num_warmup if resume is None else 0
        pieces: list[list[dict]] = [[] for _ in range(groups)]
        for g in range(groups):
            state, ran, limit = states[g], 0, (1 if shown else SEGMENT)
            while ran < todo:
                t0 = time.perf_counter()
                state, buffer, n = programs.segment(state, data, min(limit, todo - ran))
                n = int(np.max(n))
                # keep only what is kept: warmup dropped and thinned as the chains go
                j = ran + np.arange(n) - warmup  # post-warmup index of each iteration
                keep = (j >= 0) & _kept(num_samples, done, j, thinning)
                if keep.any():
                    pieces[g].append(jax.tree.map(
                        lambda b, n=n, keep=keep: _host(b, n, parallel)[:, keep], buffer))
                ran += n
                bar.update(n)
                if shown:  # segments of about _progress.SEGMENT_SECONDS
                    limit = _progress.segment_length(n, time.perf_counter() - t0, SEGMENT)
            states[g] = state
        last = _join_groups(states, parallel)
        fields = _assemble(pieces)
        elapsed = time.perf_counter() - start
    if resume is not None:
        fields = jax.tree.map(lambda old, new: np.concatenate([old, new], axis=1),
                              resume.fields, fields)
    # C order whatever the history: concatenation keeps its inputs' memory layout, and
    # reductions over another layout differ in the last bit, so a run resumed from a saved
    # checkpoint (stored C-ordered) would not equal the uninterrupted run bit for bit
    fields = jax.tree.map(np.ascontiguousarray, fields)
    timings = {"mcmc": max(elapsed - compiled[0], 0.0), "compile": compiled[0]}
    return Draws(fields, last, num_samples, timings)


def _replicate(inputs, copies: int):
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (copies, *jnp.shape(x))), inputs)


def _host(buffer, n: int, parallel: bool) -> np.ndarray:
    """A segment's buffer ``(SEGMENT, C, ...)`` as numpy ``(C, n, ...)``."""
    if parallel:  # (devices, SEGMENT, 1, ...), one chain per device
        return np.asarray(buffer)[:, :n, 0]
    return np.swapaxes(np.asarray(buffer)[:n], 0, 1)


def _assemble(pieces):
    """Concatenate the kept iterations of each group of chains and stack the groups."""
    groups = [jax.tree.map(lambda *parts: np.concatenate(parts, axis=1), *group)
              for group in pieces]
    return jax.tree.map(lambda *g: np.concatenate(g, axis=0), *groups)


def _split_groups(state, groups: int, per_group: int, parallel: bool) -> list:
    if parallel:
        return [jax.tree.map(lambda x: x[:, None], state)]
    return [jax.tree.map(lambda x, g=g: x[g * per_group:(g + 1) * per_group], state)
            for g in range(groups)]


def _join_groups(states: list, parallel: bool):
    if parallel:
        return jax.tree.map(lambda x: x[:, 0], states[0])
    if len(states) == 1:
        return states[0]
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *states)
