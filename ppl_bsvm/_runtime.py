"""How ppl_bsvm runs its numerical work: float64, thread counts and the compilation cache.

Every public entry point (``fit``, ``resume``, ``Fit.predict_*``, the bootstrap, ``compare``,
the estimators through ``fit``) is wrapped in :func:`entry_point`, which

* computes in **float64** without touching the caller's global JAX setting, and under JAX's
  default numerics whatever the caller chose for its own code (:func:`library_numerics`:
  ``jax_numpy_rank_promotion="raise"``, ``jax_numpy_dtype_promotion="strict"`` or
  ``jax_debug_nans=True`` made the library's own programs fail);
* sets the **thread counts of the linear-algebra libraries** for the duration of the call and
  restores the caller's afterwards. JAX's CPU Cholesky, triangular solves and eigensolvers call
  scipy's OpenBLAS, which by default starts one thread per core. On the small matrices of most
  fits that buys little on an idle machine and collapses as soon as anything else uses the CPU:
  every call waits for descheduled threads. Measured on 2 cores (Cholesky and triangular
  solve of an n x n matrix, median of repeated calls):

  =====  ===============  ===============  =========================  =========================
  n      1 thread, idle   2 threads, idle  1 thread, 2 busy processes  2 threads, 2 busy processes
  =====  ===============  ===============  =========================  =========================
  300    0.99 ms          0.81 ms          1.35 ms                    168 ms
  1000   33 ms            16 ms            43 ms                      525 ms
  2000   204 ms           173 ms           262 ms                     435 ms
  4000   1.37 s           0.94 s           2.03 s                     1.96 s
  =====  ===============  ===============  =========================  =========================

  Hence the **default rule**: one BLAS (and OpenMP) thread, except inside the few places that
  factorise a matrix of at least :data:`PARALLEL_MIN_SIZE` rows, which use every core the
  process may run on (:func:`blas_threads` with the matrix size). The rule depends only on the
  problem's shape, never on the machine's momentary load, so that results stay reproducible.
  :func:`set_num_threads` (or the environment variable ``PPL_BSVM_NUM_THREADS``) fixes the count
  for every call instead, for users with idle cores and large problems;

* makes JAX's **persistent compilation cache** available (:func:`enable_compilation_cache`,
  called once when this module is imported: on the first use of ``ppl_bsvm``'s names, and by
  every module that runs a computation): compiled programs are kept on disk, in the user's
  cache directory
  (``$XDG_CACHE_HOME/ppl_bsvm/jax`` or ``~/.cache/ppl_bsvm/jax``; ``~/Library/Caches`` on macOS,
  ``%LOCALAPPDATA%`` on Windows), bounded to :data:`CACHE_MAX_BYTES`, least recently used
  programs first out (:func:`prune_compilation_cache`). A new process then loads programs
  instead of compiling them. JAX's own bound is not used: it scans the whole directory, under a
  lock, at every program it writes, which made each compilation 0.13 s slower on a cache of
  6,000 programs and cost the test suite minutes; ppl_bsvm prunes the directory itself instead,
  in one scan at the exit of a process, at most once an hour (:data:`CACHE_PRUNE_SECONDS`).
  ``PPL_BSVM_CACHE_DIR`` moves the cache, and ``PPL_BSVM_CACHE_DIR=off`` turns it off; a cache
  directory the user configured in JAX (``jax_compilation_cache_dir``) is used as it is and
  never changed. ppl_bsvm's own directory is set only inside the library's entry points
  (:func:`library_cache`, thread-local settings, as float64 is): JAX's global options stay as
  the user left them, and programs the user compiles outside the library are neither read
  from nor written to it (JAX keeps one cache object per process, so
  :func:`enable_compilation_cache` wraps its reads and writes to tell them apart); an entry
  that cannot be read (cut short by a full disk) is removed and compiled again, where JAX
  alone would warn about it in every later process and never replace it. Beside the compiled
  programs, :mod:`ppl_bsvm._programs` keeps the library's main programs as traced and lowered
  (its subfolder ``programs``), so that a new process skips tracing and lowering them too;

* keeps the process clear of the kernel's **limit on memory mappings** (Linux
  ``vm.max_map_count``, 65,530 by default). Every XLA program compiled or loaded on the CPU
  holds memory mappings for its code and data for as long as JAX keeps it, and JAX keeps every
  program it compiled: a few for a small function, about 100 for a sampler's segment (a first
  Gibbs fit of the GP model holds 1,100, NUTS 650, S-BSVM 950). A long session (a notebook
  that fits many models, a test suite) reaches the limit, and then XLA's next compilation
  fails inside the JIT linker and the process dies with a segmentation fault while C++
  unwinds the error (observed: 65,287 mappings in the core file of a crashed pytest
  worker). So before a call, at most once a second, :func:`release_programs_near_map_limit`
  counts the mappings; beyond :data:`MAP_FRACTION` of the limit it releases JAX's in-memory
  programs (``jax.clear_caches()``, which unmaps them), warns once, and the programs come back
  from the persistent cache or by compiling again when next used.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import sys
import threading
import time
import warnings
from pathlib import Path

import jax

__all__ = [
    "PARALLEL_MIN_SIZE",
    "CACHE_MAX_BYTES",
    "entry_point",
    "blas_threads",
    "set_num_threads",
    "get_num_threads",
    "available_cores",
    "MAP_FRACTION",
    "memory_map_usage",
    "release_programs_near_map_limit",
    "enable_compilation_cache",
    "library_cache",
    "compilation_cache_dir",
]

PARALLEL_MIN_SIZE = 4096
"""Smallest matrix (rows) whose factorisation uses every core under the default thread rule
(see the table in the module docstring: below it, extra threads gain at most 2x on an idle
2-core machine and lose up to 100x as soon as the machine is loaded)."""

CACHE_MAX_BYTES = 1 << 30
"""Bound of the persistent compilation cache (1 GiB): :func:`prune_compilation_cache` removes
the least recently used programs beyond it. A ``jax_compilation_cache_max_size`` the user set
replaces it (JAX then evicts, and ppl_bsvm does not prune)."""

CACHE_PRUNE_SECONDS = 3600.0
"""Least time between two prunings of the cache directory (by any process; a stamp file in the
directory records the last)."""

CACHE_MIN_COMPILE_SECONDS = 0.0
"""Programs compiling faster than this are not written to the persistent cache (JAX's own
default of 1 s would skip most of this library's programs, which compile in 0.1-1 s each)."""

_ENV_THREADS = "PPL_BSVM_NUM_THREADS"
_ENV_CACHE = "PPL_BSVM_CACHE_DIR"
_OFF = ("", "0", "off", "false", "no", "none")


# --- threads ----------------------------------------------------------------------------------


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _threads_from_env() -> int | None:
    value = os.environ.get(_ENV_THREADS)
    if value is None or value.strip().lower() in ("", "auto"):
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        warnings.warn(
            f"{_ENV_THREADS}={value!r} is not a positive integer or 'auto'; using the "
            "automatic thread rule",
            UserWarning,
            stacklevel=2,
        )
        return None
    return n


_fixed_threads: int | None = _threads_from_env()


def set_num_threads(n: int | None) -> int | None:
    """Fix the number of BLAS / OpenMP threads ppl_bsvm uses inside its calls.

    Parameters
    ----------
    n : int or None
        A positive count applied to every call, or ``None`` for the automatic rule (one thread
        except for factorisations of at least :data:`PARALLEL_MIN_SIZE` rows, which use every
        available core; see the module docstring for the measurements behind it). The
        environment variable ``PPL_BSVM_NUM_THREADS`` sets the same at start-up.

    Returns
    -------
    int or None
        The previous setting.

    Examples
    --------
    >>> import ppl_bsvm
    >>> previous = ppl_bsvm.set_num_threads(2)   # e.g. an idle machine and n = 3000
    >>> _ = ppl_bsvm.set_num_threads(previous)
    """
    global _fixed_threads
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer or None, got {n!r}")
    previous, _fixed_threads = _fixed_threads, n
    return previous


def get_num_threads(size: int | None = None) -> int:
    """Threads a call factorising ``size x size`` matrices uses (``None``: the default for a
    call, one thread under the automatic rule)."""
    if _fixed_threads is not None:
        return _fixed_threads
    if size is not None and size >= PARALLEL_MIN_SIZE:
        return available_cores()
    return 1


_controller_lock = threading.Lock()
_controller_cache: dict = {}

# Modules whose import loads a thread pool threadpoolctl must know about: scipy's OpenBLAS (which
# JAX's LAPACK calls use) and scikit-learn's OpenMP runtime (k-means, SVMs).
_POOL_MODULES = ("scipy.linalg", "sklearn")


def _controller():
    """A ``threadpoolctl.ThreadpoolController`` over the loaded libraries, rebuilt only when one
    of :data:`_POOL_MODULES` has been imported since (a scan costs ~10 ms, a limit 0.05 ms)."""
    import scipy.linalg  # noqa: F401  (load scipy's OpenBLAS, which JAX calls, before scanning)

    key = tuple(name in sys.modules for name in _POOL_MODULES)
    with _controller_lock:
        controller = _controller_cache.get(key)
        if controller is None:
            from threadpoolctl import ThreadpoolController

            controller = ThreadpoolController()
            _controller_cache.clear()
            _controller_cache[key] = controller
        return controller


_blas_lock = threading.Lock()
_blas_blocks = 0  # blocks open in the process, every thread's
_blas_saved = None  # the limiter that restores the counts from before the first block
_blas_stack = threading.local()  # each thread's open blocks' counts


@contextlib.contextmanager
def blas_threads(size: int | None = None):
    """Run the block with :func:`get_num_threads` ``(size)`` BLAS and OpenMP threads, restoring
    the previous counts afterwards (nested blocks restore their parent's).

    The counts are process-wide, and blocks of several threads overlap (fits in a thread
    pool): the first block to open saves the counts from before and the last to close
    restores them. Each block restoring what it found instead left a user at one thread (A
    opens over the user's 2, B over A's 1, A closes to 2, B to 1).
    """
    global _blas_blocks, _blas_saved
    n = get_num_threads(size)
    controller = _controller()
    stack = _blas_stack.__dict__.setdefault("counts", [])
    with _blas_lock:
        limiter = controller.limit(limits=n, user_api=None)
        if _blas_blocks == 0:
            _blas_saved = limiter
        _blas_blocks += 1
    stack.append(n)
    try:
        yield n
    finally:
        stack.pop()
        with _blas_lock:
            _blas_blocks -= 1
            if _blas_blocks == 0:
                _blas_saved.restore_original_limits()
                _blas_saved = None
            elif stack:
                controller.limit(limits=stack[-1], user_api=None)


# --- memory mappings --------------------------------------------------------------------------

MAP_FRACTION = 0.75
"""Share of ``vm.max_map_count`` beyond which :func:`release_programs_near_map_limit` releases
JAX's in-memory programs (a quarter of the default limit, 16,000 mappings, leaves room for
a dozen new samplers before the next check, at most a second later)."""
_MAP_CHECK_SECONDS = 1.0
_last_map_check = -float("inf")
_map_warned = False


def memory_map_usage() -> tuple[int, int] | None:
    """``(mappings this process holds, the kernel's limit)``; None where the platform has no
    such limit to read (anything but Linux)."""
    try:
        with open("/proc/sys/vm/max_map_count", "rb") as f:
            limit = int(f.read())
        with open("/proc/self/maps", "rb") as f:
            used = f.read().count(b"\n")
    except (OSError, ValueError):
        return None
    return used, limit


def release_programs_near_map_limit(fraction: float = MAP_FRACTION, *, warn: bool = True,
                                    stacklevel: int = 2) -> bool:
    """Release JAX's in-memory compiled programs when the process holds more than
    ``fraction`` of the kernel's limit on memory mappings (module doc); True if it did. The
    first release of the process warns (``warn``; ``stacklevel`` as for ``warnings.warn``)."""
    global _map_warned
    usage = memory_map_usage()
    if usage is None or usage[0] < fraction * usage[1]:
        return False
    used, limit = usage
    jax.clear_caches()
    gc.collect()
    if warn and not _map_warned:
        _map_warned = True
        warnings.warn(
            f"this process held {used} memory mappings, {used / limit:.0%} of the kernel's "
            f"limit (vm.max_map_count = {limit}); compiled XLA programs hold them and XLA "
            "crashes when none is left, so ppl_bsvm released JAX's in-memory "
            "compiled programs: they load from the persistent cache or compile again when "
            "next used. Raising the limit (sysctl -w vm.max_map_count=262144) avoids this.",
            RuntimeWarning,
            stacklevel=stacklevel,
        )
    return True


def _check_map_limit() -> None:
    global _last_map_check
    now = time.monotonic()
    if now - _last_map_check >= _MAP_CHECK_SECONDS:
        _last_map_check = now
        release_programs_near_map_limit(stacklevel=4)  # the user's call of the entry point


# --- entry points -------------------------------------------------------------------------------

_depth = threading.local()


@contextlib.contextmanager
def library_numerics():
    """float64 and JAX's default numerics for the block, the caller's settings untouched (JAX's
    context managers are thread-local): implicit rank promotion and standard dtype promotion,
    which the library's code is written for, and no NaN or inf checks, since its programs
    produce NaN on purpose where a ``where`` discards it (non-finite results reach the user
    as errors naming what went wrong, not as NaN). The random keys made from seeds are JAX's
    default threefry keys whatever ``jax_default_prng_impl`` and
    ``jax_threefry_partitionable`` say, so that a seed gives the same draws in every session
    and a checkpoint resumes in a session with other settings."""
    with (jax.enable_x64(True), jax.numpy_rank_promotion("allow"),
          jax.numpy_dtype_promotion("standard"), jax.debug_nans(False),
          jax.debug_infs(False), jax.default_prng_impl("threefry2x32"),
          jax.threefry_partitionable(True)):
        yield


def entry_point(fn):
    """Decorator for public functions: float64, the library's thread counts and the check of
    memory mappings before the outermost call (module doc)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth = getattr(_depth, "value", 0)
        if depth == 0:
            _check_map_limit()
        _depth.value = depth + 1
        try:
            with library_numerics(), library_cache(), blas_threads():
                return fn(*args, **kwargs)
        finally:
            _depth.value = depth

    return wrapper


# --- persistent compilation cache ------------------------------------------------------------


def _default_cache_root() -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg else Path.home() / ".cache"


def compilation_cache_dir() -> Path | None:
    """Where ppl_bsvm keeps compiled programs (``None`` when turned off)."""
    value = os.environ.get(_ENV_CACHE)
    if value is not None:
        return None if value.strip().lower() in _OFF else Path(value).expanduser()
    return _default_cache_root() / "ppl_bsvm" / "jax"


_cache_enabled = False
_cache_root: Path | None = None  # ppl_bsvm's own directory, when it serves the library's programs
_repaired_warned = False


def enable_compilation_cache() -> Path | None:
    """Make the persistent compilation cache available to the library's programs (module doc).

    Returns the directory the library's programs are cached in: the one the user configured
    in JAX (``jax_compilation_cache_dir``), used as it is, or ppl_bsvm's own
    (:func:`compilation_cache_dir`), which serves only the blocks of :func:`library_cache`, so
    that JAX's global options stay as the user left them and the user's own programs never
    land in it. ``None`` when the cache is off (``PPL_BSVM_CACHE_DIR=off``, JAX's cache
    disabled, a directory that cannot be created). Idempotent.
    """
    global _cache_enabled, _cache_root
    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)
    if _cache_enabled:
        return _cache_root
    path = compilation_cache_dir()
    if path is None or not jax.config.jax_enable_compilation_cache:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK):
            return None
    except OSError:
        return None
    try:
        import filelock  # noqa: F401  (JAX's LRU eviction locks the directory with it)
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    if not _install_cache_hooks():
        return None
    # JAX's bound (jax_compilation_cache_max_size) stays as the user left it: at its default,
    # -1, JAX writes without scanning the directory, and ppl_bsvm bounds it (module doc).
    if jax.config.jax_compilation_cache_max_size == -1 and _prune_due(path):
        atexit.register(prune_compilation_cache, path)
    _cache_root = path
    _cache_enabled = True
    return path


@contextlib.contextmanager
def library_cache():
    """The block's compilations use ppl_bsvm's cache directory (thread-local settings, as
    float64 is): JAX's ``jax_compilation_cache_dir`` points at it, and programs are written
    whatever their compile time (:data:`CACHE_MIN_COMPILE_SECONDS`, unless the user changed
    JAX's default). Nothing changes where the user configured a cache of their own, nor in a
    run of several processes (``jax.distributed``), which compiles afresh: with JAX 0.12.1
    two processes that loaded an S-BSVM step (its cross-process all-reduce) from the cache
    waited for each other in gloo's all-reduce for ever, where compiled they agree
    (``tests/inference/vi/test_sbsvm_scale.py``, ``tests/test_runtime.py``)."""
    root = _cache_root
    # (is_initialized, not process_count: the block must not start JAX's backends, which
    # jax.distributed.initialize has to precede)
    if root is None or jax.config.jax_compilation_cache_dir or jax.distributed.is_initialized():
        yield
        return
    from jax._src import config as jax_config

    min_seconds = jax.config.jax_persistent_cache_min_compile_time_secs
    if min_seconds == 1.0:  # JAX's default
        min_seconds = CACHE_MIN_COMPILE_SECONDS
    with (jax_config.compilation_cache_dir(str(root)),
          jax_config.persistent_cache_min_compile_time_secs(min_seconds)):
        yield


def _in_library_block() -> bool:
    from jax._src import config as jax_config

    return jax_config.compilation_cache_dir.value == str(_cache_root)


def _serves_library(cache) -> bool:
    """Whether JAX's cache object is bound to ppl_bsvm's own directory."""
    path = getattr(cache, "path", None)
    return _cache_root is not None and path is not None and str(path) == str(_cache_root)


def _install_cache_hooks() -> bool:
    """Wrap JAX's reads and writes of cached programs (once per process): with ppl_bsvm's
    directory behind JAX's cache, compilations outside the library's blocks neither read nor
    write it; and an entry that cannot be read (cut short by a full disk, corrupted) is
    removed, so that the program is compiled and stored again. JAX itself warns about such an
    entry at every compilation of every later process and never replaces it (its cache skips
    a key whose file exists). False when this JAX has no such functions."""
    from jax._src import compilation_cache as cc

    get, put = (getattr(cc, name, None) for name in
                ("get_executable_and_time", "put_executable_and_time"))
    if get is None or put is None or not callable(getattr(cc, "_get_cache", None)):
        return False
    if getattr(get, "_ppl_bsvm", False):
        return True

    @functools.wraps(get)
    def get_executable_and_time(cache_key, compile_options, backend, *args, **kwargs):
        cache = cc._get_cache(backend)
        if not _serves_library(cache):
            return get(cache_key, compile_options, backend, *args, **kwargs)
        if not _in_library_block():
            return None, None
        try:
            return get(cache_key, compile_options, backend, *args, **kwargs)
        except Exception as error:  # noqa: BLE001 - any unreadable entry is recompiled
            _remove_entry(_cache_root, cache_key, error)
            return None, None

    @functools.wraps(put)
    def put_executable_and_time(cache_key, module_name, executable, backend, *args, **kwargs):
        if _serves_library(cc._get_cache(backend)) and not _in_library_block():
            return None
        return put(cache_key, module_name, executable, backend, *args, **kwargs)

    get_executable_and_time._ppl_bsvm = True
    cc.get_executable_and_time = get_executable_and_time
    cc.put_executable_and_time = put_executable_and_time
    return True


def _remove_entry(root: Path, cache_key: str, error: Exception) -> None:
    """Remove an unreadable cache entry; warn once per process."""
    global _repaired_warned
    for suffix in ("-cache", "-atime"):
        with contextlib.suppress(OSError):
            (root / f"{cache_key}{suffix}").unlink()
    if not _repaired_warned:
        _repaired_warned = True
        warnings.warn(f"ppl_bsvm removed an unreadable entry of its compilation cache in "
                      f"{str(root)!r} ({type(error).__name__}: {str(error)[:200]}; a disk that "
                      "filled up cuts entries short); its programs are compiled and stored "
                      "again", UserWarning, stacklevel=2)


_PRUNE_STAMP = ".ppl_bsvm-pruned"


def _prune_due(path: Path) -> bool:
    """Whether the directory was last pruned more than :data:`CACHE_PRUNE_SECONDS` ago."""
    try:
        return time.time() - (path / _PRUNE_STAMP).stat().st_mtime > CACHE_PRUNE_SECONDS
    except OSError:
        return True


def prune_directory(directory: Path, suffix: str, max_bytes: int, *,
                    keep_fraction: float = 1.0, companion: str | None = None) -> int:
    """Remove the least recently used files of ``directory`` whose names end in ``suffix``
    while their total size exceeds ``max_bytes``, down to ``keep_fraction * max_bytes``.

    Recency is the later of a file's access and modification times (JAX rewrites nothing it
    reads; the file system's access time, where it is kept, says what was used). ``companion``
    is a suffix replacing ``suffix`` for a file removed along with each (JAX's ``-atime``
    files). One scan of the directory; files that vanish meanwhile (another process pruning)
    are skipped. Returns the number of files removed.
    """
    entries, total = [], 0
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if not entry.name.endswith(suffix):
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    continue
                entries.append((max(st.st_atime, st.st_mtime), st.st_size, entry.path))
                total += st.st_size
    except OSError:
        return 0
    if total <= max_bytes:
        return 0
    target, removed = keep_fraction * max_bytes, 0
    for _, size, name in sorted(entries):
        if total <= target:
            break
        for victim in (name, name[:-len(suffix)] + companion if companion else None):
            if victim is not None:
                with contextlib.suppress(OSError):
                    os.unlink(victim)
        total -= size
        removed += 1
    return removed


def prune_compilation_cache(path: Path | None = None) -> int:
    """Bound ppl_bsvm's cache directory: JAX's compiled programs to :data:`CACHE_MAX_BYTES`
    and the library's stored programs (:mod:`ppl_bsvm._programs`) to their own bound, least
    recently used first out, each down to 90 % of its bound so that the next pruning is not
    due at once; then stamp the directory. Runs at the exit of a process that enabled the
    cache, when due (module doc); returns the number of files removed. Never raises."""
    from . import _programs

    path = compilation_cache_dir() if path is None else Path(path)
    if path is None or not path.is_dir():
        return 0
    try:
        removed = prune_directory(path, "-cache", CACHE_MAX_BYTES, keep_fraction=0.9,
                                  companion="-atime")
        removed += prune_directory(path / "programs", ".program", _programs.MAX_BYTES,
                                   keep_fraction=0.9)
        (path / _PRUNE_STAMP).touch()
    except Exception:  # noqa: BLE001 - tidying up at exit must never fail a program
        return 0
    return removed


enable_compilation_cache()
