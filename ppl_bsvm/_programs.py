"""Traced programs kept across processes: a new process skips tracing and lowering.

JAX's persistent compilation cache (:func:`_runtime.enable_compilation_cache`) keeps the XLA
compilation, but its key is the lowered program, so every new process still traces each
function to a jaxpr and lowers it to StableHLO before it can look the program up. For S-BSVM on
10^4 points that is about 0.4 s of a 1.1 s fit. :class:`Program` keeps the lowered program
itself, in JAX's own portable format (:mod:`jax.export`: versioned StableHLO whose custom calls
JAX guarantees stable), under a key computed *without* tracing; a new process deserialises it,
wraps it in ``jit`` (no tracing of the library's code) and finds its compilation in the
persistent cache. The executable is never serialised: what is stored is what ``jax.jit`` would
have lowered, so a stored program computes exactly what the traced one computes.

The key holds everything the lowered program depends on:

* the library's own source (SHA-256 of every ``.py`` file of the package, once per process),
  the versions of JAX, jaxlib and the packages whose code the library traces (optax, numpyro), the platform and its devices, ``XLA_FLAGS`` and JAX's
  trace-time configuration (``jax._src.config.trace_context()``: x64, matmul precision, PRNG
  implementation...), this module's :data:`FORMAT`;
* the program's name and its static arguments, written by :func:`stable_repr`, which accepts
  only values whose text determines them: Python scalars and strings, tuples and NamedTuples
  of them, and the frozen dataclasses and module-level functions *of ppl_bsvm* (whose source
  is in the key). Anything else (a user's kernel class, a closure, a lambda) makes the call an
  ordinary ``jax.jit`` call;
* the pytree structure, shapes, dtypes and weak types of the dynamic arguments.

A stored program is used only when nothing it depends on can differ: one process with one
device, no tracer among the arguments (a call under an outer ``jit``/``grad`` is an ordinary
traced call) and every part of the key known. Files are written atomically and carry the SHA-256
of their contents, checked before use; a damaged file, or any failure to export or deserialise,
falls back to ``jax.jit`` and never reaches the user. The directory is
``<compilation cache>/programs``, on only while JAX's persistent cache is
(``PPL_BSVM_CACHE_DIR=off`` turns both off), and keeps at most :data:`MAX_BYTES`, least
recently used first out, pruned with the compilation cache
(:func:`ppl_bsvm._runtime.prune_compilation_cache`: one scan at a process's exit, at most
hourly, rather than one at every write).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib
import inspect
import json
import os
import re
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

import jax
import numpy as np

from ._jax import committed

__all__ = ["Program", "stable_repr", "programs_dir", "stats"]

FORMAT = 1
"""Bump when the file layout or the key's composition changes."""
MAX_BYTES = 256 * 1024**2
"""Bound of the directory; the least recently used programs are removed beyond it."""
_MAGIC = b"ppl_bsvm-program\n"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_PACKAGE = __name__.rpartition(".")[0]
_TRACED_PACKAGES = ("optax", "numpyro")
"""Other packages whose code is traced into the library's programs (their versions are in the
key) and whose NamedTuples (optax's optimiser states) may appear in a program's signature."""

stats = {"loaded": 0, "saved": 0, "fallback": 0}
"""Counts of this process (for tests and benchmarks): programs loaded from disk, written, and
calls that went to ``jax.jit`` because the call could not be keyed or the directory is off."""


# --- the key ---------------------------------------------------------------------------------


_ROOT = Path(__file__).resolve().parent
_SOURCES = sorted(_ROOT.rglob("*.py"))


def _source_digest() -> str | None:
    """SHA-256 of the package's Python source (relative paths and contents), recomputed when a
    file's size or modification time changes (an edited module reloaded in a session)."""
    stamp = []
    for path in _SOURCES:
        try:
            st = path.stat()
        except OSError:
            return None  # a module went missing: no key
        stamp.append((st.st_mtime_ns, st.st_size))
    return _hash_sources(tuple(stamp))


@functools.lru_cache(maxsize=4)
def _hash_sources(stamp) -> str:
    digest = hashlib.sha256()
    for path in _SOURCES:
        digest.update(str(path.relative_to(_ROOT)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _installation() -> tuple:
    """The versions of what this process runs (loaded once, so fixed for the process) and its
    devices."""
    import jaxlib
    from importlib.metadata import version

    devices = jax.devices()
    return (jax.__version__, jaxlib.__version__, [version(p) for p in _TRACED_PACKAGES],
            devices[0].platform, [d.device_kind for d in devices], sys.version_info[:2])


def _environment() -> str | None:
    """Everything outside the program's own inputs that changes what JAX lowers."""
    try:
        from jax._src import config as jax_config

        source = _source_digest()
        if source is None:
            return None
        context = _ADDRESS.sub("", repr(jax_config.trace_context()))
        return repr((FORMAT, source, _installation(), os.environ.get("XLA_FLAGS", ""),
                     context))
    except Exception:  # noqa: BLE001 - a private API moved: no key, ordinary jit
        return None


def _owned(obj) -> bool:
    """Defined in ppl_bsvm (so its source is part of the key)."""
    module = getattr(obj, "__module__", None) or ""
    return module == _PACKAGE or module.startswith(_PACKAGE + ".")


def stable_repr(obj) -> str | None:
    """Text that determines ``obj`` as a static argument, or None when there is none (see the
    module docstring for what is accepted)."""
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return f"{type(obj).__name__}:{obj!r}"
    if isinstance(obj, enum.Enum):
        return f"{type(obj).__module__}.{type(obj).__qualname__}.{obj.name}" \
            if _owned(type(obj)) else None
    if isinstance(obj, np.dtype):
        return f"dtype({obj.str})"
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # NamedTuple
        if not _owned(type(obj)):
            return None
        return _joined(f"{type(obj).__module__}.{type(obj).__qualname__}",
                       list(zip(obj._fields, obj)))
    if isinstance(obj, (tuple, list)):
        return _joined(type(obj).__name__, list(enumerate(obj)))
    if isinstance(obj, functools.partial):
        return _joined("partial", [("func", obj.func), ("args", obj.args),
                                   ("kwargs", tuple(sorted(obj.keywords.items())))])
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if not _owned(type(obj)) or not type(obj).__dataclass_params__.frozen:
            return None
        return _joined(f"{type(obj).__module__}.{type(obj).__qualname__}",
                       [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)])
    if callable(obj) and _owned(obj):
        qualname = getattr(obj, "__qualname__", "")
        if not qualname or "<locals>" in qualname or "<lambda>" in qualname:
            return None  # a closure's behaviour is not determined by its name
        return f"{obj.__module__}.{qualname}"
    return None


def _joined(head: str, items: list) -> str | None:
    parts = []
    for name, value in items:
        text = stable_repr(value)
        if text is None:
            return None
        parts.append(f"{name}={text}")
    return f"{head}(" + ", ".join(parts) + ")"


def _leaf_type(x) -> str | None:
    """Shape, dtype and weak type of a dynamic argument's leaf; None for a tracer or an array
    that is not on this process's single device."""
    if isinstance(x, jax.core.Tracer):
        return None
    if isinstance(x, jax.Array):
        if not x.is_fully_addressable or len(x.sharding.device_set) != 1:
            return None
    elif not isinstance(x, (np.ndarray, np.generic, bool, int, float, complex)):
        return None
    try:
        return repr(jax.typeof(x))
    except TypeError:
        return None


# --- the files -------------------------------------------------------------------------------


def programs_dir() -> Path | None:
    """Where programs are kept (None when the persistent compilation cache is off)."""
    from . import _runtime

    if not jax.config.jax_enable_compilation_cache:
        return None
    root = _runtime.enable_compilation_cache()
    return None if root is None else root / "programs"


def _read(path: Path):
    """``(namedtuple classes, serialized program)`` from ``path``, or None when absent or
    damaged (a damaged file is removed)."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    start = len(_MAGIC) + 32
    head, digest, payload = blob[:len(_MAGIC)], blob[len(_MAGIC):start], blob[start:]
    if head != _MAGIC or hashlib.sha256(payload).digest() != digest:
        _remove(path)
        return None
    try:
        os.utime(path)  # least recently *used* leaves first
    except OSError:
        pass
    size = int.from_bytes(payload[:4], "little")
    return json.loads(payload[4:4 + size]), bytearray(payload[4 + size:])


def _write(directory: Path, path: Path, classes: list[str], serialized: bytes) -> None:
    names = json.dumps(classes).encode()
    payload = len(names).to_bytes(4, "little") + names + bytes(serialized)
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, path)
    except BaseException:
        _remove(Path(tmp))
        raise


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


# --- NamedTuples in the programs' signatures ---------------------------------------------------

_registered: set[type] = set()
_register_lock = threading.Lock()


def _namedtuple_classes(treedef) -> list[type]:
    """The NamedTuple classes among the nodes of ``treedef``."""
    found, stack = [], [treedef]
    while stack:
        node = stack.pop()
        node_type = node.node_data()[0] if node.node_data() is not None else None
        if isinstance(node_type, type) and issubclass(node_type, tuple) \
                and hasattr(node_type, "_fields"):
            found.append(node_type)
        stack.extend(node.children())
    return found


def _nameable(module: str) -> bool:
    """A module whose NamedTuples a stored program may name (ppl_bsvm's, optax's)."""
    return any(module == p or module.startswith(p + ".") for p in (_PACKAGE, *_TRACED_PACKAGES))


def _register(cls: type) -> bool:
    """Let :mod:`jax.export` serialise the NamedTuple ``cls`` by its name."""
    if not _nameable(cls.__module__) or "." in cls.__qualname__:
        return False
    with _register_lock:
        if cls not in _registered:
            jax.export.register_namedtuple_serialization(
                cls, serialized_name=f"{cls.__module__}.{cls.__qualname__}")
            _registered.add(cls)
    return True


def _import_class(name: str) -> type:
    """A NamedTuple class by ``module.qualname``, from ppl_bsvm or optax only."""
    module, _, qualname = name.rpartition(".")
    if not _nameable(module) or "." in qualname:
        raise ValueError(f"not a class a stored program may name: {name}")
    cls = getattr(importlib.import_module(module), qualname)
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise ValueError(f"not a NamedTuple: {name}")
    return cls


# --- the program -----------------------------------------------------------------------------


class Program:
    """``jax.jit(fn, static_argnums=, static_argnames=)`` whose lowered program is kept on disk
    across processes (module docstring); called exactly like the jitted function.

    ``name`` identifies the program (default ``module.qualname`` of ``fn``); ``identity``
    holds whatever else ``fn`` closes over (its text by :func:`stable_repr`; a value without
    one makes every call an ordinary ``jit`` call).
    """

    def __init__(self, fn: Callable, *, static_argnums=(), static_argnames=(),
                 name: str | None = None, identity=()):
        nums = {static_argnums} if isinstance(static_argnums, int) else set(static_argnums)
        names = {static_argnames} if isinstance(static_argnames, str) else set(static_argnames)
        # As jit does: a static argument may come by position or by name.
        params = list(inspect.signature(fn).parameters)
        nums |= {params.index(p) for p in names if p in params}
        names |= {params[i] for i in nums if i < len(params)}
        self._static_argnums, self._static_argnames = frozenset(nums), frozenset(names)
        self.jitted = jax.jit(fn, static_argnums=tuple(sorted(nums)),
                              static_argnames=tuple(sorted(names)))
        self._name = name or f"{fn.__module__}.{fn.__qualname__}"
        self._identity = stable_repr(identity)
        self._calls: dict[str, Callable] = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        split = self._split(args, kwargs)
        if split is None:
            stats["fallback"] += 1
            if jax.process_count() == 1 and jax.device_count() == 1:
                # an unkeyable static value (a user's function): committed all the same
                args, kwargs = committed((args, kwargs))
            return self.jitted(*args, **kwargs)
        key, dyn_args, dyn_kwargs = split
        call = self._calls.get(key)
        if call is None:
            call = self._load_or_export(key, args, kwargs)
        # committed as the outputs of this and every stored program are: JAX would compile
        # the program again for uncommitted arguments (an engine's eager start, a loaded
        # checkpoint, a search's host values), e.g. the loop's second segment and a resume
        dyn_args, dyn_kwargs = committed((dyn_args, dyn_kwargs))
        return call(*dyn_args, **dyn_kwargs)

    def _split(self, args, kwargs):
        """``(key, dynamic args, dynamic kwargs)``, or None when the call cannot be keyed."""
        if self._identity is None or jax.process_count() != 1 or jax.device_count() != 1:
            return None
        statics, dyn_args, dyn_kwargs = [], [], {}
        for i, a in enumerate(args):
            if i in self._static_argnums:
                statics.append((i, a))
            else:
                dyn_args.append(a)
        for k, v in kwargs.items():
            if k in self._static_argnames:
                statics.append((k, v))
            else:
                dyn_kwargs[k] = v
        leaves, tree = jax.tree.flatten((tuple(dyn_args), dyn_kwargs))
        types = [_leaf_type(x) for x in leaves]
        if None in types:
            return None
        static_text = stable_repr(tuple(v for _, v in statics))
        env = _environment()
        if static_text is None or env is None:
            return None
        text = "\n".join([env, self._name, self._identity,
                          repr([k for k, _ in statics]), static_text, str(tree), *types])
        return hashlib.sha256(text.encode()).hexdigest(), tuple(dyn_args), dyn_kwargs

    def _load_or_export(self, key, args, kwargs) -> Callable:
        """The program for ``key``: deserialised from disk, else exported (and written); the
        plain jitted function when neither works. Either way ``jit`` of the exported program
        runs, in the process that wrote it too, so that every process compiles the same
        module and the persistent cache serves them all."""
        directory = programs_dir()
        path = None if directory is None else directory / f"{key}.program"
        with self._lock:
            call = self._calls.get(key)
            if call is not None:
                return call
            exported = None if path is None else _safe(self._load, path)
            if exported is not None:
                stats["loaded"] += 1
            else:
                exported = _safe(self._export, args, kwargs, directory, path)
            if exported is None:
                stats["fallback"] += 1
                call = functools.partial(_static_call, self.jitted, args, kwargs,
                                         self._static_argnums, self._static_argnames)
            else:
                call = jax.jit(exported.call)
            self._calls[key] = call
            return call

    @staticmethod
    def _load(path: Path):
        record = _read(path)
        if record is None:
            return None
        classes, serialized = record
        for name in classes:
            _register(_import_class(name))
        return jax.export.deserialize(serialized)

    def _export(self, args, kwargs, directory: Path | None, path: Path | None):
        exported = jax.export.export(self.jitted)(*args, **kwargs)
        classes = _namedtuple_classes(exported.in_tree) + _namedtuple_classes(exported.out_tree)
        if not all(_register(cls) for cls in classes):
            return None  # a NamedTuple of another package: cannot be named on load
        if path is not None:
            names = sorted({f"{c.__module__}.{c.__qualname__}" for c in classes})
            if _safe(_write, directory, path, names, exported.serialize(), ok=True):
                stats["saved"] += 1
        return exported


def _static_call(jitted, args, kwargs, static_argnums, static_argnames, *dyn_args, **dyn_kwargs):
    """``jitted`` with the static arguments of the first call put back (same key, same ones)."""
    dyn = iter(dyn_args)
    full = [a if i in static_argnums else next(dyn) for i, a in enumerate(args)]
    full_kwargs = {k: (v if k in static_argnames else dyn_kwargs[k]) for k, v in kwargs.items()}
    return jitted(*full, **full_kwargs)


def _safe(fn, *args, ok=False):
    """``fn(*args)``, or None (False with ``ok``) when it fails: the store never fails a fit."""
    try:
        result = fn(*args)
    except Exception:  # noqa: BLE001
        return False if ok else None
    return True if ok else result
