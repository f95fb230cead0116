"""Fits saved as data: the library's objects to JSON and arrays, and back, running no code.

:meth:`ppl_bsvm.Fit.save` used to write a pickle, and a pickle is a program: a crafted
``fit.pkl`` ran whatever it contained when loaded. A saved fit is now a JSON tree plus numeric
arrays (``numpy.savez``, read back with ``allow_pickle=False``), and the decoder rebuilds only

* JSON values, tuples, lists and dicts, and arrays (JAX arrays back as JAX arrays in float64,
  PRNG keys with their implementation);
* ``NamedTuple`` and frozen-dataclass types defined in ``ppl_bsvm`` (engine states, kernels,
  schedules, labels), NumPyro's sampler states and optax's optimiser states, found in modules
  that are **already imported** (the decoder never imports a module), built from decoded
  fields only;
* a user's own :class:`ppl_bsvm.kernels.Kernel` subclass, under the same rule: its module must
  be imported before :func:`ppl_bsvm.load`;
* the predictors of :mod:`ppl_bsvm.predictive` and the latent-predictive functions registered
  with :func:`latent_family`, looked up by name in that registry (never by import).

Anything else is refused with a ``ValueError`` naming it, on saving and on loading. (In
memory a :class:`~ppl_bsvm.Fit` still pickles with ``cloudpickle``, ``Fit.__reduce__``: a pickle
is only as trustworthy as its source, and in-memory copies come from the user's own process.)
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import sys
from typing import Any

import jax
import numpy as np

__all__ = [
    "latent_family",
    "data_object",
    "encode",
    "decode",
    "to_bytes",
    "from_bytes",
    "Unsaved",
]

_FUNCTIONS: dict[str, Any] = {}
_OBJECTS: dict[str, type] = {}
_STATE_MODULES = ("numpyro.infer.hmc", "numpyro.infer.hmc_util", "numpyro.infer.mcmc",
                  "optax._src.transform", "optax._src.base", "numpyro.infer.svi",
                  "blackjax.mcmc.elliptical_slice", "blackjax.mcmc.dynamic_hmc")
"""Modules outside ppl_bsvm whose ``NamedTuple`` states a saved checkpoint holds: NumPyro's
samplers' and ``SVIState`` (``inference.vi.advi``), optax's optimiser states (the Adam of
hyperparameter learning, ``inference.vi.hyper``, and of ADVI) and BlackJAX's samplers'
(``inference.mcmc.ess``, ``inference.mcmc.mclmc``)."""


def _name(obj) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


def latent_family(fn):
    """Register a module-level latent-predictive function so that saved fits name it."""
    _FUNCTIONS[_name(getattr(fn, "__wrapped__", fn))] = fn
    return fn


def family_name(fn) -> str | None:
    """The name ``fn`` is registered under with :func:`latent_family`, or None."""
    name = _name(fn) if hasattr(fn, "__qualname__") else None
    return name if name is not None and _FUNCTIONS.get(name) is fn else None


def family(name: str):
    """The latent-predictive function registered as ``name`` (:func:`family_name`)."""
    fn = _FUNCTIONS.get(name)
    if fn is None:
        raise ValueError(f"saved fit names the function {name!r}, which is not a registered "
                         "ppl_bsvm latent predictive")
    return fn


def data_object(cls):
    """Register a class whose instances are saved as their attributes (``vars``) and rebuilt
    without calling ``__init__``; each attribute must itself be encodable."""
    _OBJECTS[_name(cls)] = cls
    return cls


class Unsaved(str):
    """Placeholder for an option that could not be saved (a user's Python callable): its
    ``repr`` at save time. :func:`ppl_bsvm.resume` asks for the option again."""


# --- encoding ---------------------------------------------------------------------------------


class _Encoder:
    def __init__(self, lenient: bool):
        self.arrays: dict[str, np.ndarray] = {}
        self._ids: dict[int, tuple[str, Any]] = {}
        self.lenient = lenient

    def array(self, a) -> dict:
        entry = self._ids.get(id(a))
        if entry is not None:  # one copy of an array referenced twice (state and predictor)
            return entry[0]
        if isinstance(a, jax.Array) and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            out = {"t": "key", "impl": str(jax.random.key_impl(a)),
                   "k": self._store(np.asarray(jax.random.key_data(a)))}
        else:
            data = np.asarray(a)
            if data.dtype.kind in "OV":
                raise ValueError(f"cannot save an array of dtype {data.dtype}")
            out = {"t": "jax" if isinstance(a, jax.Array) else "array", "k": self._store(data)}
        self._ids[id(a)] = (out, a)  # keep `a` alive so that its id is not reused
        return out

    def _store(self, data: np.ndarray) -> str:
        key = f"a{len(self.arrays)}"
        self.arrays[key] = data
        return key

    def __call__(self, obj, where: str = "fit"):
        if isinstance(obj, np.generic):  # before float and str: np.float64 and np.str_ are both
            if obj.dtype.kind not in "biufcUS":
                raise ValueError(f"{where}: cannot save a numpy scalar of dtype {obj.dtype}")
            item = obj.item()
            if obj.dtype.kind == "c":
                item = [item.real, item.imag]
            return {"t": "scalar", "dtype": obj.dtype.str, "v": self(item, where)}
        if obj is None or isinstance(obj, (bool, str, int)):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {"t": "float", "v": repr(obj)}
        if isinstance(obj, (np.ndarray, jax.Array)):
            return self.array(obj)
        name = _name(type(obj))
        if name in _OBJECTS:
            return {"t": "object", "cls": name,
                    "v": {k: self(v, f"{where}.{k}") for k, v in vars(obj).items()}}
        if isinstance(obj, tuple) and hasattr(type(obj), "_fields"):
            return {"t": "namedtuple", "cls": name, "f": list(obj._fields),
                    "v": [self(v, f"{where}.{f}") for f, v in zip(obj._fields, obj)]}
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            fields = {f.name: self(getattr(obj, f.name), f"{where}.{f.name}")
                      for f in dataclasses.fields(obj) if f.init}
            return {"t": "dataclass", "cls": name, "v": fields}
        if isinstance(obj, (tuple, list)):
            return {"t": type(obj).__name__,
                    "v": [self(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, dict):
            return {"t": "dict", "v": [[self(k, where), self(v, f"{where}[{k!r}]")]
                                       for k, v in obj.items()]}
        fn_name = family_name(obj)
        if fn_name is not None:
            return {"t": "function", "name": fn_name}
        if self.lenient:
            return {"t": "unsaved", "v": repr(obj)[:200]}
        raise ValueError(f"{where}: cannot save an object of type {name} as data")


def encode(fields: dict[str, Any], *, lenient=()) -> tuple[Any, dict[str, np.ndarray]]:
    """The mapping ``fields`` as a JSON-able tree and the arrays it refers to (by key).

    What cannot be encoded raises a ``ValueError`` naming it, except under the keys in
    ``lenient``, where it is saved as an :class:`Unsaved` placeholder (a user's callable
    schedule among the options, a scikit-learn estimator kept as a baseline's state).
    """
    enc = _Encoder(False)
    tree = {}
    for name, value in fields.items():
        enc.lenient = name in lenient
        tree[name] = enc(value, name)
    return tree, enc.arrays


# --- decoding ---------------------------------------------------------------------------------


def _resolve(name: str, kind: str) -> type:
    """The class ``module:qualname`` if its module is already imported and the class may be
    rebuilt as ``kind``; a ``ValueError`` otherwise. Nothing is imported here."""
    from .kernels import Kernel

    module_name, _, qualname = str(name).partition(":")
    module = sys.modules.get(module_name)
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    if not isinstance(obj, type):
        raise ValueError(f"saved fit names {name!r}, which is not a class this session knows "
                         "(import the module that defines it first)")
    ours = module_name == "ppl_bsvm" or module_name.startswith("ppl_bsvm.")
    if kind == "namedtuple":
        ok = (ours or module_name in _STATE_MODULES) and issubclass(obj, tuple) and hasattr(
            obj, "_fields")
    else:  # dataclass
        ok = dataclasses.is_dataclass(obj) and (ours or issubclass(obj, Kernel))
    if not ok:
        raise ValueError(f"saved fit names {name!r} as a {kind}; only ppl_bsvm's own types "
                         "(and kernels) are loaded")
    return obj


class _Decoder:
    def __init__(self, arrays):
        self.arrays = arrays
        self._cache: dict[str, Any] = {}

    def _array(self, key: str):
        if key not in self.arrays:
            raise ValueError(f"saved fit refers to a missing array {key!r}")
        return self.arrays[key]

    def __call__(self, node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            raise ValueError("malformed saved fit: bare list")
        t = node.get("t")
        v = node.get("v")
        if t in ("jax", "array", "key"):
            key = node["k"]
            if key not in self._cache:
                data = self._array(key)
                if t == "key":
                    value = jax.random.wrap_key_data(jax.numpy.asarray(data), impl=node["impl"])
                elif t == "jax":
                    value = jax.numpy.asarray(data)
                else:
                    value = np.array(data)
                self._cache[key] = value
            return self._cache[key]
        if t == "float":
            return float(v)
        if t == "scalar":
            dtype = np.dtype(node["dtype"])
            if dtype.kind not in "biufcUS":
                raise ValueError(f"malformed saved fit: scalar of dtype {dtype}")
            value = self(v)
            return dtype.type(complex(*value) if dtype.kind == "c" else value)
        if t == "tuple":
            return tuple(self(x) for x in v)
        if t == "list":
            return [self(x) for x in v]
        if t == "dict":
            return {self(k): self(x) for k, x in v}
        if t == "namedtuple":
            cls = _resolve(node["cls"], "namedtuple")
            saved = tuple(node.get("f", ()))
            if len(v) != len(cls._fields) or (saved and saved != cls._fields):
                was = f"the fields {list(saved)}" if saved else f"{len(v)} fields"
                raise StateMismatch(f"the saved {node['cls']} has {was}, this version's "
                                    f"{list(cls._fields)}")
            return cls(*[self(x) for x in v])
        if t == "dataclass":
            cls = _resolve(node["cls"], "dataclass")
            return cls(**{k: self(x) for k, x in v.items()})
        if t == "object":
            cls = _OBJECTS.get(node["cls"])
            if cls is None:
                raise ValueError(f"saved fit names {node['cls']!r}, which is not a ppl_bsvm "
                                 "predictor")
            obj = cls.__new__(cls)
            obj.__dict__.update({k: self(x) for k, x in v.items()})
            return obj
        if t == "function":
            return family(node["name"])
        if t == "unsaved":
            return Unsaved(v)
        raise ValueError(f"malformed saved fit: unknown node type {t!r}")


class StateMismatch(ValueError):
    """A saved ``NamedTuple`` whose fields differ from this version's class (an engine state
    saved by another version)."""


def decode(tree, arrays, optional=()) -> tuple[dict[str, Any], dict[str, str]]:
    """Rebuild the mapping :func:`encode` wrote; JAX arrays come back in float64.

    Returns the mapping and, for the top-level names in ``optional`` whose values hold a
    ``NamedTuple`` of other fields than this version's (:class:`StateMismatch`), the reason:
    those come back as None.
    """
    if not isinstance(tree, dict):
        raise ValueError("malformed saved fit: the top level is not a mapping")
    decoder = _Decoder(arrays)
    out, dropped = {}, {}
    with jax.enable_x64(True):
        for name, node in tree.items():
            try:
                out[name] = decoder(node)
            except StateMismatch as err:
                if name not in optional:
                    raise ValueError(f"malformed saved fit: {err}") from None
                out[name], dropped[name] = None, str(err)
    return out, dropped


def to_bytes(fields: dict[str, Any], *, lenient=()) -> tuple[bytes, bytes]:
    """``(json, npz)`` bytes of the mapping ``fields`` (see :func:`encode`)."""
    tree, arrays = encode(fields, lenient=lenient)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return json.dumps(tree, allow_nan=False).encode(), buffer.getvalue()


def from_bytes(tree_bytes: bytes, npz_bytes: bytes, optional=()):
    """Inverse of :func:`to_bytes`; never unpickles. Returns :func:`decode`'s pair."""
    try:
        tree = json.loads(tree_bytes)
        with np.load(io.BytesIO(npz_bytes), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (ValueError, OSError) as err:
        raise ValueError(f"malformed saved fit: {err}") from None
    return decode(tree, arrays, optional)
