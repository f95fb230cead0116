"""Where the suite's time goes: a pytest plugin (loaded by ``conftest.py``).

Always: a summary line at the end of the run with its wall time and the five slowest tests
(setup, call and teardown together), the number the project watches (``tests/README.md``).

With ``PPL_BSVM_TEST_PROFILE=<folder>``: every test's wall time, the seconds JAX spent tracing,
lowering and compiling in it (``jax.monitoring`` duration events, summed per test) and the
programs XLA compiled or loaded from the persistent cache, each with its seconds, signature and
call site (JAX's ``jax_log_compiles`` log lines) go to ``<folder>/<worker>.jsonl``, one line
per test; ``python -m tests.profile_report <folder>`` summarises them by module, program,
entry point and call site.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from pathlib import Path

import pytest

PROFILE_ENV = "PPL_BSVM_TEST_PROFILE"
"""The environment variable naming the profile's folder."""

COMPILE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
"""``jax.monitoring`` duration events and the column each is summed in."""

_COMPILING = re.compile(r"Compiling (.+?) with global shapes and types (.*?)\. Argument mapping")
_COMPILED = re.compile(r"Finished XLA compilation of (.+?) in ([0-9.]+) sec")
_PACKAGE_DIR = os.sep + "ppl_bsvm" + os.sep
_TESTS_DIR = os.sep + "tests" + os.sep
_PLUMBING = ("_programs.py", "_runtime.py")
"""Library modules that only pass programs on: the site is their caller."""


def call_site(frame) -> str:
    """Where the program was asked for: ``path:line`` of the innermost frame in ppl_bsvm (its
    plumbing left out), followed by `` < `` and the outermost ppl_bsvm frame when they differ
    (the entry point the test called); else the innermost frame of the tests; else "other"."""
    inner = outer = test_site = None
    while frame is not None:
        name = frame.f_code.co_filename
        if _PACKAGE_DIR in name and not name.endswith(_PLUMBING) and _TESTS_DIR not in name:
            outer = f"ppl_bsvm/{name.rsplit(_PACKAGE_DIR, 1)[1]}:{frame.f_lineno}"
            inner = inner or outer
        elif test_site is None and _TESTS_DIR in name and not name.endswith("_profile.py"):
            test_site = f"tests/{name.rsplit(_TESTS_DIR, 1)[1]}:{frame.f_lineno}"
        frame = frame.f_back
    if inner is None:
        return test_site or "other"
    return inner if outer == inner else f"{inner} < {outer}"


SLOWEST = 5
"""Tests named in the summary line."""


class _Recorder(logging.Handler):
    """Collects ``[name, seconds, signature, site]`` of the programs XLA compiles or loads from
    the persistent cache (``jax_log_compiles`` messages: "Compiling ... with global shapes and
    types", then "Finished XLA compilation", which JAX logs for both)."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.names: list[list] = []
        self._pending = ("", "")

    def emit(self, record):
        message = record.getMessage()
        match = _COMPILING.search(message)
        if match:
            self._pending = (match.group(2), call_site(sys._getframe()))
            return
        match = _COMPILED.search(message)
        if match:
            self.names.append([match.group(1), float(match.group(2)), *self._pending])
            self._pending = ("", "")


class Profile:
    """Per-test wall time, compile seconds and compiled programs, written as JSON lines."""

    def __init__(self, folder: Path, worker: str):
        import jax
        import jax.monitoring

        folder.mkdir(parents=True, exist_ok=True)
        self.out = open(folder / f"{worker}.jsonl", "a")
        self.seconds = dict.fromkeys(COMPILE_EVENTS.values(), 0.0)
        self.recorder = _Recorder()
        jax.config.update("jax_log_compiles", True)
        # JAX's loggers (jax._src.dispatch, jax._src.interpreters.pxla) propagate to "jax":
        # one handler there sees each message once
        logging.getLogger("jax").addHandler(self.recorder)

        def listen(event, duration, **_):
            column = COMPILE_EVENTS.get(event)
            if column is not None:
                self.seconds[column] += duration

        jax.monitoring.register_event_duration_secs_listener(listen)

    def start(self):
        """Mark the start of a test: the accumulators now and the clock."""
        self.recorder.names = []
        return dict(self.seconds), time.perf_counter()

    def close(self) -> None:
        self.out.close()

    def finish(self, item, token) -> None:
        """Write the test's line: the differences since :meth:`start`."""
        before, start = token
        line = {"test": item.nodeid, "wall": time.perf_counter() - start,
                **{k: self.seconds[k] - before[k] for k in self.seconds},
                "programs": self.recorder.names}
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()


_PROFILE: list[Profile | None] = [None]


def pytest_configure(config):
    folder = os.environ.get(PROFILE_ENV)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    # pytest-xdist's controller runs no test: only its workers, or a run without xdist, record
    controller = worker is None and bool(getattr(config.option, "numprocesses", None))
    if folder and not controller:
        _PROFILE[0] = Profile(Path(folder), worker or "main")
    config._ppl_bsvm_started = time.time()


def pytest_unconfigure(config):
    if _PROFILE[0] is not None:
        _PROFILE[0].close()
        _PROFILE[0] = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    profile = _PROFILE[0]
    if profile is None:
        yield
        return
    token = profile.start()
    yield
    profile.finish(item, token)


def slowest(reports, count: int = SLOWEST) -> list[tuple[str, float]]:
    """``(nodeid, seconds)`` of the ``count`` tests whose setup, call and teardown took the
    longest together, from pytest's reports."""
    total: dict[str, float] = {}
    for report in reports:
        total[report.nodeid] = total.get(report.nodeid, 0.0) + float(report.duration)
    return sorted(total.items(), key=lambda kv: -kv[1])[:count]


def format_minutes(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    started = getattr(config, "_ppl_bsvm_started", None)
    if started is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    reports = [r for key in ("passed", "failed", "error", "skipped")
               for r in terminalreporter.stats.get(key, []) if hasattr(r, "duration")]
    if not reports:
        return
    names = ", ".join(f"{nodeid} ({seconds:.0f} s)" for nodeid, seconds in slowest(reports))
    terminalreporter.write_line(
        f"ppl_bsvm test suite: {format_minutes(time.time() - started)} wall; the {SLOWEST} "
        f"slowest tests: {names}", bold=True)
