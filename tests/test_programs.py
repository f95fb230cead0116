"""Programs kept across processes (ppl_bsvm._programs): same numbers, safe keys, safe files."""

import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm import _programs, _runtime
from ppl_bsvm.inference.vi import schedules
from tests._xla import USER_XLA_FLAGS, user_environment

# A fit of each kind whose programs are stored: the shared optimisation loop (linear VI) and
# every program of S-BSVM (run keys, k-means, init, loop, final q, training marginals).
_PROBE = """
import json, os, sys
import numpy as np
import ppl_bsvm
from ppl_bsvm import _programs
r = np.random.default_rng(3)
X = r.standard_normal((300, 3))
y = np.where(X[:, 0] - X[:, 1] + 0.5 * r.standard_normal(300) > 0, 1, -1)
vi = ppl_bsvm.fit(X, y, model="linear", method="vi", num_draws=20, seed=1)
svi = ppl_bsvm.fit(X, y, model="gp", method="svi", num_inducing=8, max_iter=300,
                   learn_hyperparameters=True, num_draws=20, seed=2)
out = {"vi": vi.predict_proba(X[:20]).tolist(), "beta": vi.idata.posterior["beta"].values.tolist(),
       "svi": svi.predict_proba(X[:20]).tolist(), "u": svi.idata.posterior["u"].values.tolist(),
       "n_iter": [vi.n_iter, svi.n_iter], "stats": _programs.stats,
       "xla_flags": os.environ.get("XLA_FLAGS")}
print(json.dumps(out))
"""


def _probe(cache, **env):
    # at the user's XLA flags, not the tests' level 0: the suite's end-to-end check of XLA's
    # default code generation (tests/_xla.py)
    environment = user_environment(PPL_BSVM_CACHE_DIR=str(cache), **env)
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=environment, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_new_process_loads_the_stored_programs_and_computes_the_same_numbers(tmp_path):
    first = _probe(tmp_path)
    assert first["xla_flags"] == USER_XLA_FLAGS  # XLA's code generation as the user has it
    assert first["stats"]["saved"] >= 7 and first["stats"]["loaded"] == 0
    assert first["stats"]["fallback"] == 0
    files = sorted((tmp_path / "programs").glob("*.program"))
    assert len(files) == first["stats"]["saved"]

    # The second process loads them, bit for bit the same numbers; one damaged file among them
    # (a bit flipped) is detected, removed and written anew. (One damaged file, in the same
    # process as the loads: each process and each damaged file cost a compilation of seconds.)
    blob = bytearray(files[0].read_bytes())
    blob[-10] ^= 0x01
    files[0].write_bytes(bytes(blob))
    second = _probe(tmp_path)
    assert second["stats"] == {"loaded": first["stats"]["saved"] - 1, "saved": 1, "fallback": 0}
    assert files[0].read_bytes() != bytes(blob)
    for name in ("vi", "beta", "svi", "u", "n_iter"):
        assert second[name] == first[name], name  # bit for bit


def test_with_the_store_off_a_program_is_exported_and_run_and_nothing_is_written(monkeypatch):
    """``PPL_BSVM_CACHE_DIR=off`` leaves no directory (``test_runtime``'s cache processes):
    the program then runs as exported, in this process only. (Was a third process of the test
    above, about 12 s: the same fits compiled once more.)"""
    monkeypatch.setattr(_programs, "programs_dir", lambda: None)
    program = _programs.Program(_double, static_argnums=1)
    before = dict(_programs.stats)
    with jax.enable_x64(True):
        assert float(program(np.float64(2.0), 3)) == 6.0
        assert float(program(np.float64(4.0), 3)) == 12.0  # the same program, kept
    assert _programs.stats == before
    assert len(program._calls) == 1


@dataclasses.dataclass(frozen=True)
class _Foreign:  # a frozen dataclass, but of the tests, not of ppl_bsvm
    a: int = 1


def test_stable_repr_accepts_only_values_whose_text_determines_them():
    assert _programs.stable_repr((1, 2.5, "a", None, True)) is not None
    # 1, 1.0 and True are equal in Python but compile differently.
    assert len({_programs.stable_repr(v) for v in (1, 1.0, True)}) == 3
    rate = schedules.inverse_time(0.05, 50.0, 0.5)
    assert _programs.stable_repr(rate) == _programs.stable_repr(schedules.inverse_time(0.05, 50.0, 0.5))
    assert _programs.stable_repr(rate) != _programs.stable_repr(schedules.inverse_time(0.05, 50.0, 0.6))
    assert _programs.stable_repr(schedules.as_rate) is not None  # a module-level function
    for value in (lambda x: x, _Foreign(), {"a": 1}, np.zeros(3), jnp.zeros(3), object(),
                  functools.partial(lambda x: x, 1), (1, lambda x: x)):
        assert _programs.stable_repr(value) is None, value


def _double(x, n):
    return x * n


def test_calls_that_cannot_be_keyed_are_ordinary_jit_calls(monkeypatch, tmp_path):
    monkeypatch.setenv("PPL_BSVM_CACHE_DIR", str(tmp_path))
    program = _programs.Program(_double, static_argnums=1)
    before = dict(_programs.stats)
    # A tracer among the arguments (a call under an outer jit) and an unkeyable static value.
    assert float(jax.jit(lambda x: program(x, 3))(2.0)) == 6.0
    assert float(_programs.Program(_double, static_argnums=1, identity=lambda: 0)(2.0, 3)) == 6.0
    assert _programs.stats["fallback"] == before["fallback"] + 2
    assert _programs.stats["saved"] == before["saved"]


def test_the_key_follows_the_source_the_static_arguments_and_the_shapes(monkeypatch):
    program = _programs.Program(_double, static_argnums=1)
    x = np.ones(3)
    with jax.enable_x64(True):
        key = program._split((x, 2), {})[0]
        assert program._split((x, 2), {})[0] == key
        assert program._split((x, 3), {})[0] != key
        assert program._split((np.ones(4), 2), {})[0] != key
        assert program._split((np.ones(3, np.float32), 2), {})[0] != key
    with jax.enable_x64(False):  # the trace-time configuration is part of the key
        assert program._split((np.ones(3, np.float32), 2), {})[0] != key
    monkeypatch.setattr(_programs, "_source_digest", lambda: "edited")
    with jax.enable_x64(True):
        assert program._split((x, 2), {})[0] != key


def test_only_the_librarys_and_optaxs_namedtuples_are_imported_by_name():
    from ppl_bsvm.inference.loop import RunResult

    assert _programs._import_class("ppl_bsvm.inference.loop.RunResult") is RunResult
    for name in ("os.path", "builtins.tuple", "collections.OrderedDict",
                 "ppl_bsvm.inference.loop.run", "ppl_bsvmx.mod.Class"):
        with pytest.raises(ValueError):
            _programs._import_class(name)


def test_the_directory_is_bounded_least_recently_used_first(tmp_path):
    for i in range(5):
        path = tmp_path / f"{i}.program"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))
    _runtime.prune_directory(tmp_path, ".program", max_bytes=250)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3.program", "4.program"]
