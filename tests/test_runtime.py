"""What every call does around the numerics: threads, compiled programs, progress, warnings."""

import contextlib
import io
import json
import os
import subprocess
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import ppl_bsvm
from ppl_bsvm import _progress, _runtime, kernels
from ppl_bsvm.exceptions import ConvergenceWarning
from tests._shared import compilations, small_problem


def _blas_threads():
    return {lib["filepath"]: lib["num_threads"] for lib in threadpool_info()
            if lib["user_api"] == "blas"}


@_runtime.entry_point
def _threads_inside():
    return _blas_threads()


def test_entry_points_use_one_blas_thread_and_restore_the_callers():
    import scipy.linalg  # noqa: F401  (scipy's OpenBLAS is the one JAX's LAPACK calls use)

    with threadpool_limits(2, user_api="blas"):
        assert set(_threads_inside().values()) == {1}
        assert set(_blas_threads().values()) == {2}
        previous = ppl_bsvm.set_num_threads(2)
        try:
            assert set(_threads_inside().values()) == {2}
        finally:
            ppl_bsvm.set_num_threads(previous)
        assert set(_blas_threads().values()) == {2}


def test_a_fit_leaves_the_callers_thread_counts_alone():
    X, y = small_problem()
    with threadpool_limits(2, user_api="blas"):
        ppl_bsvm.fit(X, y, model="gp", method="ecm", num_draws=10)
        assert set(_blas_threads().values()) == {2}


def test_the_automatic_rule_and_set_num_threads():
    assert ppl_bsvm.get_num_threads() == 1
    assert ppl_bsvm.get_num_threads(size=100) == 1
    assert ppl_bsvm.get_num_threads(size=_runtime.PARALLEL_MIN_SIZE) == _runtime.available_cores()
    previous = ppl_bsvm.set_num_threads(3)
    try:
        assert ppl_bsvm.get_num_threads() == 3 == ppl_bsvm.get_num_threads(size=10**5)
    finally:
        assert ppl_bsvm.set_num_threads(previous) == 3
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="n must be a positive integer or None"):
            ppl_bsvm.set_num_threads(bad)


def _python(code: str, **env) -> str:
    """Run ``code`` in a fresh interpreter (its last printed line is JSON) and return it."""
    environment = {**os.environ, **env}
    environment.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


_CACHE_PROBE = """
import json, os, jax
{before}
import ppl_bsvm
ppl_bsvm.fit  # the first use makes the cache available (import ppl_bsvm loads no JAX)
from ppl_bsvm import _runtime
root = _runtime.enable_compilation_cache()
print(json.dumps([None if root is None else str(root), jax.config.jax_compilation_cache_dir,
                  jax.config.jax_compilation_cache_max_size]))
"""


def test_compilation_cache_directory_settings(tmp_path):
    """What a new process sets up (JAX's global options are per process, so each case is a
    fresh interpreter): ppl_bsvm's directory, a bound the user set, a directory the user
    configured in JAX."""
    path = str(tmp_path / "cache")
    root, global_dir, size = _python(_CACHE_PROBE.format(before=""), PPL_BSVM_CACHE_DIR=path)
    # ppl_bsvm's directory serves its own programs without becoming JAX's global setting;
    # JAX's own bound stays off (it scans the directory at every write); ppl_bsvm prunes at
    # the process's exit instead, and stamps the directory
    assert root == path and global_dir is None and size == -1 and os.path.isdir(path)
    assert os.path.exists(os.path.join(path, ".ppl_bsvm-pruned"))
    bound = "jax.config.update('jax_compilation_cache_max_size', 12345)"  # the user's, kept
    assert _python(_CACHE_PROBE.format(before=bound), PPL_BSVM_CACHE_DIR=path)[2] == 12345
    mine = str(tmp_path / "mine")  # a directory the user configured in JAX is used as it is
    before = f"jax.config.update('jax_compilation_cache_dir', {mine!r})"
    assert _python(_CACHE_PROBE.format(before=before), PPL_BSVM_CACHE_DIR=path)[:2] == [mine,
                                                                                        mine]


def test_a_run_of_several_processes_compiles_afresh(monkeypatch, tmp_path):
    """``library_cache`` points JAX's cache at ppl_bsvm's directory in a one-process run and
    not in a ``jax.distributed`` run: with JAX 0.12.1, two processes that loaded an S-BSVM
    step from the cache hung in gloo's all-reduce (``test_sbsvm_scale``'s distributed test,
    in a warm run)."""
    from jax._src import config as jax_config

    monkeypatch.setattr(_runtime, "_cache_root", tmp_path)
    configured = jax.config.jax_compilation_cache_dir  # this test process's (conftest)
    jax.config.update("jax_compilation_cache_dir", None)
    try:
        with _runtime.library_cache():
            assert jax_config.compilation_cache_dir.value == str(tmp_path)
        monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
        with _runtime.library_cache():
            assert jax_config.compilation_cache_dir.value is None
    finally:
        jax.config.update("jax_compilation_cache_dir", configured)


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    """``PPL_BSVM_CACHE_DIR`` moves the cache or turns it off (``off``, an empty value, ...),
    and then ``enable_compilation_cache`` sets nothing up; unset, the cache is under
    ``XDG_CACHE_HOME``. (Three more processes of the test above did this, about 5 s: the
    directory is a function of the environment, and an enabling that returns at once leaves
    no process-wide state.)"""
    home = tmp_path / "home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setattr(_runtime, "_cache_enabled", False)
    monkeypatch.setattr(_runtime, "_cache_root", None)
    configured = jax.config.jax_compilation_cache_dir  # this test process's (conftest)
    jax.config.update("jax_compilation_cache_dir", None)
    try:
        for off in ("off", "", " OFF ", "0", "none"):
            monkeypatch.setenv("PPL_BSVM_CACHE_DIR", off)
            assert _runtime.compilation_cache_dir() is None, off
            assert _runtime.enable_compilation_cache() is None, off
            assert not _runtime._cache_enabled and jax.config.jax_compilation_cache_dir is None
    finally:
        jax.config.update("jax_compilation_cache_dir", configured)
    monkeypatch.setenv("PPL_BSVM_CACHE_DIR", str(tmp_path / "mine"))
    assert _runtime.compilation_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("PPL_BSVM_CACHE_DIR")
    if sys.platform not in ("darwin", "win32"):
        assert _runtime.compilation_cache_dir() == home / "ppl_bsvm" / "jax"
    assert not home.exists()  # resolving creates nothing


_SCOPE_PROBE = """
import json, os, warnings, jax, jax.numpy as jnp, numpy as np
{before}
options = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
           "jax_compilation_cache_max_size", "jax_enable_compilation_cache")
before = [getattr(jax.config, name) for name in options]
import ppl_bsvm
X, y = ppl_bsvm.datasets.load("heart", standardize=True)
compiled = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kw: compiled.append(1)
    if event == "/jax/compilation_cache/compile_time_saved_sec" else None)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fit = ppl_bsvm.fit(X[:40], y[:40], model="gp", method="vi", seed=0)
    p = fit.predict_proba(X[40:45])
after = [getattr(jax.config, name) for name in options]
library = set(os.listdir(os.environ["PPL_BSVM_CACHE_DIR"]))
# the user's own program, compiled after the fit: not in ppl_bsvm's directory
jax.jit(lambda a: jnp.sin(a) * 3.0 + jnp.cos(a) ** 2 - 17.25)(jnp.arange(11.0)).block_until_ready()
user = set(os.listdir(os.environ["PPL_BSVM_CACHE_DIR"])) - library
print(json.dumps({{"unchanged": before == after, "library": len(library), "user": sorted(user),
                  "loaded": len(compiled), "p": p.tolist(),
                  "warnings": [str(w.message) for w in caught if "cache" in str(w.message)]}}))
"""


def test_the_library_cache_serves_new_processes_alone_and_survives_unreadable_entries(tmp_path):
    """One sequence of four processes on one cache directory (each process costs seconds of
    imports, so the checks share them):

    1. the first fit, on an empty cache, compiles everything, changes none of JAX's global
       options, and its programs go to ppl_bsvm's directory; a program the user compiles
       afterwards does not (even with the user's minimum compile time at 0);
    2. a new process loads the library's programs and computes the same numbers;
    3. after the entries were cut short (a disk that filled up), the next process warns once,
       removes them and stores them again, with the same numbers;
    4. the process after it neither warns nor compiles them.
    """
    cache = tmp_path / "cache"
    user_zero = "jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)"
    first = _python(_SCOPE_PROBE.format(before=user_zero), PPL_BSVM_CACHE_DIR=str(cache))
    assert first["unchanged"] and first["library"] > 5 and first["user"] == []
    assert first["warnings"] == [] and first["loaded"] == 0  # empty cache: compiled
    second = _python(_SCOPE_PROBE.format(before=""), PPL_BSVM_CACHE_DIR=str(cache))
    assert second["unchanged"] and second["user"] == [] and second["p"] == first["p"]
    entries = sorted(cache.glob("*-cache"))
    # every program the first process stored is read from the cache (10 for the fit and its
    # prediction: its engine compiles one program per piece of work, not one per operation)
    assert second["warnings"] == [] and second["loaded"] == len(entries) >= 5
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    third = _python(_SCOPE_PROBE.format(before=""), PPL_BSVM_CACHE_DIR=str(cache))
    assert len(third["warnings"]) == 1, third["warnings"]
    assert "ppl_bsvm removed an unreadable entry of its compilation cache" in third["warnings"][0]
    assert third["p"] == first["p"]
    fourth = _python(_SCOPE_PROBE.format(before=""), PPL_BSVM_CACHE_DIR=str(cache))
    assert fourth["warnings"] == [] and fourth["p"] == first["p"]
    assert fourth["loaded"] >= len(entries)


def test_the_cache_is_pruned_least_recently_used_first_and_at_most_hourly(tmp_path, monkeypatch):
    from ppl_bsvm import _programs

    cache = tmp_path / "cache"
    (cache / "programs").mkdir(parents=True)
    for i in range(5):  # JAX's entries (with the -atime files of its own eviction)
        for suffix in ("-cache", "-atime"):
            path = cache / f"k{i}{suffix}"
            path.write_bytes(b"x" * (100 if suffix == "-cache" else 8))
            os.utime(path, (1000 + i, 1000 + i))
    for i in range(3):
        path = cache / "programs" / f"p{i}.program"
        path.write_bytes(b"y" * 100)
        os.utime(path, (2000 + i, 2000 + i))
    monkeypatch.setattr(_runtime, "CACHE_MAX_BYTES", 300)
    monkeypatch.setattr(_programs, "MAX_BYTES", 150)
    assert _runtime._prune_due(cache)
    # 500 bytes of programs over a bound of 300: down to 90 %, the oldest first
    assert _runtime.prune_compilation_cache(cache) == 3 + 2
    assert sorted(p.name for p in cache.iterdir() if p.is_file()) == [
        ".ppl_bsvm-pruned", "k3-atime", "k3-cache", "k4-atime", "k4-cache"]
    assert [p.name for p in (cache / "programs").iterdir()] == ["p2.program"]
    assert not _runtime._prune_due(cache)  # stamped: not again within the hour
    assert _runtime.prune_compilation_cache(cache) == 0  # under the bound: nothing to do
    assert _runtime.prune_compilation_cache(tmp_path / "absent") == 0


def _problem(n, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, 3))
    return X, np.where(X[:, 0] - X[:, 1] + 0.5 * r.standard_normal(n) > 0, 1.0, -1.0)


@pytest.mark.parametrize("model, method, options", [
    ("gp", "ecm", {}),
    ("gp", "vi", {}),
    ("gp", "svi", {"num_inducing": 10}),
    ("linear", "svi", {}),
    ("linear", "vi", {}),
    ("gp", "gpc", {}),
    ("gp", "gibbs", {"num_samples": 50, "num_warmup": 50, "num_chains": 2}),
    ("linear", "nuts", {"num_samples": 50, "num_warmup": 30, "num_chains": 2}),
])
def test_a_second_fit_on_other_data_of_the_same_shapes_compiles_nothing(model, method, options):
    """Nor does another kernel of the same structure (``kernels.program_kernel``): the GP
    engines' second fit starts from lengthscale 2.5 instead of 1.5, which compiled every
    program again before. The programs shared with the 1.5 fit must not carry its start: the
    fit reports 2.5, and a repeat of it gives the same probabilities."""
    # the shared problem (tests/_shared.py) and its static options: the programs load
    X1, y1 = small_problem(seed=1)
    X2, y2 = small_problem(seed=2)
    first_kernel, kernel = ({}, {}) if model == "linear" else (
        {"kernel": kernels.RBF(lengthscale=1.5)}, {"kernel": kernels.RBF(lengthscale=2.5)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains: R-hat
        first = ppl_bsvm.fit(X1, y1, model=model, method=method, **first_kernel, **options)
        first.predict_proba(X1[:7])
        with compilations() as count:
            again = ppl_bsvm.fit(X2, y2, model=model, method=method, seed=3, **kernel, **options)
            p = again.predict_proba(X2[:5])  # another test size in the same bucket (8 rows)
        if model == "gp":
            assert again.kernel == kernels.RBF(lengthscale=2.5)
            assert float(again.hyperparameters["lengthscale"]) == 2.5  # none of these learns it
            alone = ppl_bsvm.fit(X2, y2, model=model, method=method, seed=3, **kernel, **options)
            np.testing.assert_array_equal(alone.predict_proba(X2[:5]), p)
    assert count[0] == 0


@pytest.mark.parametrize("model", ["linear", "gp"])
def test_samplers_reuse_their_programs_for_other_chain_lengths(model):
    """Another ``num_samples`` compiles nothing, predictions included: the draws the predictor
    keeps are padded to a power of two (here 2 x 70 and 2 x 100 draws: 256), and the GP's
    ``K^{-1} f_s`` solve is done once per bucket. (The shared problem, whose two-chain Gibbs
    samplers ``test_persistence`` and ``test_bad_input`` compile too.)"""
    X, y = small_problem()
    site = "beta" if model == "linear" else "f"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ppl_bsvm.fit(X, y, model=model, method="gibbs", num_samples=70, num_warmup=20,
                     num_chains=2).predict_proba(X[:7])
        with compilations() as count:
            fit = ppl_bsvm.fit(X, y, model=model, method="gibbs", num_samples=100,
                               num_warmup=20, num_chains=2)
            p = fit.predict_proba(X[:7])
    assert count[0] == 0 and fit.posterior[site].shape[:2] == (2, 100)
    # the padded draws take no part: the average of the 200 draws' own predictions
    with jax.enable_x64(True):  # the predictor's internals, outside the library's entry points
        means, variances = fit.predictor.draws_latent_fn(X[:7])
    assert means.shape == (200, 7)
    np.testing.assert_allclose(
        p, np.mean(ppl_bsvm.predictive.class_probability(means, variances), axis=0), rtol=1e-12)


def test_sbsvm_folds_of_nearby_sizes_share_their_programs():
    X, y = _problem(250)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ppl_bsvm.fit(X[:243], y[:243], model="gp", method="svi", num_inducing=20, max_iter=30)
        with compilations() as count:
            ppl_bsvm.fit(X[:244], y[:244], model="gp", method="svi", num_inducing=20,
                         max_iter=30)
    assert count[0] == 0


def test_predictions_do_not_depend_on_the_padding_of_test_sets():
    X, y = small_problem()
    fit = ppl_bsvm.fit(X, y, model="gp", method="vi", num_draws=10)
    whole = fit.predict_latent(X)
    for size in (1, 7, 9, 33):
        for part, full in zip(fit.predict_latent(X[:size]), whole):
            np.testing.assert_allclose(part, full[:size], rtol=1e-12, atol=1e-14)


def test_iteration_cap_warns_and_names_the_option(toy2d):
    X, y = toy2d
    with pytest.warns(ConvergenceWarning, match=r"method='ecm' \(model='gp'\) stopped at "
                                                r"max_iter=3 .*Raise max_iter"):
        fit = ppl_bsvm.fit(X, y, model="gp", method="ecm", max_iter=3, num_draws=10)
    assert fit.stop_reason == "max_iter"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert ppl_bsvm.fit(X, y, model="gp", method="ecm", num_draws=10).stop_reason == "tol"


def _run_with_progress(monkeypatch, progress_bar, **env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    X, y = small_problem()
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        ppl_bsvm.fit(X, y, model="gp", method="ecm", num_draws=10, progress_bar=progress_bar)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ppl_bsvm.fit(X, y, model="linear", method="gibbs", num_samples=20, num_warmup=20,
                         num_chains=2, progress_bar=progress_bar)
    return stderr.getvalue()


def test_progress_bars_are_shown_when_asked(monkeypatch):
    monkeypatch.setenv("CI", "")
    shown = _run_with_progress(monkeypatch, True)
    assert "gp/ecm" in shown and "linear/gibbs" in shown


@pytest.mark.parametrize("progress_bar, env", [(False, {}), (None, {"CI": "true"})])
def test_no_progress_bar_when_turned_off_or_nobody_watches(monkeypatch, progress_bar, env):
    assert _run_with_progress(monkeypatch, progress_bar, **env) == ""


def test_progress_bar_clock_starts_after_the_first_segment():
    """The first update (the segment that compiled) only moves the starting count, so the
    rate and ETA come from the compiled segments."""
    with contextlib.redirect_stderr(io.StringIO()):
        bar = _progress.progress_bar(100, "x", True, initial=5)
        before = time.time()
        bar.update(1)
        inner = bar._bar
        assert inner.n == 6 and inner.start_t >= before
        bar.update(10)
        assert inner.n == 16
        bar.close()


def test_progress_bar_option_is_checked(toy2d):
    X, y = toy2d
    with pytest.raises(ValueError, match="progress_bar must be True or False"):
        ppl_bsvm.fit(X, y, model="gp", method="ecm", progress_bar="yes")


def test_memory_map_usage_reads_the_process_and_the_kernel_limit():
    usage = _runtime.memory_map_usage()
    if usage is None:
        pytest.skip("no /proc/self/maps on this platform")
    used, limit = usage
    assert 0 < used < limit


def test_releasing_programs_unmaps_them():
    if _runtime.memory_map_usage() is None:
        pytest.skip("no /proc/self/maps on this platform")
    _runtime.release_programs_near_map_limit(0.0, warn=False)
    before = _runtime.memory_map_usage()[0]
    for n in range(2, 42):  # forty programs of their own shapes
        jax.jit(lambda a: jnp.cumsum(jnp.sin(a)) * 2.0)(jnp.ones(n)).block_until_ready()
    grown = _runtime.memory_map_usage()[0]
    assert grown - before >= 40  # at least one mapping per program
    assert _runtime.release_programs_near_map_limit(0.0, warn=False)
    assert _runtime.memory_map_usage()[0] < before + (grown - before) / 4


def test_an_entry_point_releases_programs_near_the_limit_and_says_so(monkeypatch, toy2d):
    X, y = toy2d
    f = jax.jit(lambda a: a + 1.0)
    f(1.0)
    assert f._cache_size() == 1
    monkeypatch.setattr(_runtime, "memory_map_usage", lambda: (700, 1000))  # below 75 %
    monkeypatch.setattr(_runtime, "_last_map_check", -float("inf"))
    assert not _runtime.release_programs_near_map_limit()
    assert f._cache_size() == 1

    monkeypatch.setattr(_runtime, "memory_map_usage", lambda: (800, 1000))
    monkeypatch.setattr(_runtime, "_map_warned", False)
    with pytest.warns(RuntimeWarning, match=r"800 memory mappings, 80% of the kernel's limit "
                                            r"\(vm.max_map_count = 1000\)"):
        fit = ppl_bsvm.fit(X, y, model="gp", method="ecm", num_draws=10)
    assert f._cache_size() == 0
    assert np.all(np.isfinite(fit.predict_proba(X)))  # programs come back when used
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # warned once per process
        monkeypatch.setattr(_runtime, "_last_map_check", -float("inf"))
        assert ppl_bsvm.fit(X, y, model="gp", method="ecm", num_draws=10).stop_reason == "tol"


class _ProcessWideCounts:
    """A stand-in for threadpoolctl's controller over one process-wide count, as OpenBLAS's
    pthreads build has: ``limit`` sets it and returns a limiter that restores what it found."""

    def __init__(self, value):
        self.value = value

    def limit(self, limits, user_api=None):
        controller, found = self, self.value
        self.value = limits

        class Limiter:
            def restore_original_limits(self):
                controller.value = found

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.restore_original_limits()

        return Limiter()


def test_overlapping_blocks_in_threads_restore_the_callers_counts(monkeypatch):
    """Blocks of two threads overlapping as A opens, B opens, A closes, B closes (fits in a
    thread pool) leave the user's count as it was (issue 34: each block restored what it
    found: A over the user's 2, B over A's 1, A closed to 2, B to 1); nested blocks in one
    thread still restore their parent's."""
    import threading

    counts = _ProcessWideCounts(2)
    monkeypatch.setattr(_runtime, "_controller", lambda: counts)
    a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with _runtime.blas_threads():
            a_open.set()
            b_open.wait(10)
        a_closed.set()

    def b():
        a_open.wait(10)
        with _runtime.blas_threads():
            b_open.set()
            a_closed.wait(10)
            seen["inside"] = counts.value

    threads = [threading.Thread(target=f) for f in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert a_closed.is_set() and seen == {"inside": 1} and counts.value == 2
    monkeypatch.setattr(_runtime, "_fixed_threads", None)
    with _runtime.blas_threads():
        with _runtime.blas_threads(size=_runtime.PARALLEL_MIN_SIZE):
            assert counts.value == _runtime.available_cores()
        assert counts.value == 1
    assert counts.value == 2
