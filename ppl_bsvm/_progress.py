"""Progress bars for long runs (samplers, iterative engines), tqdm in a terminal or a notebook.

``progress_bar=None`` (every engine's default) shows a bar only where someone can see it: an
interactive terminal (standard error is a TTY) or a Jupyter kernel, and never when the ``CI``
environment variable is set. Even then the bar appears only once the run has lasted
:data:`DELAY` seconds, so quick fits print nothing. ``True`` and ``False`` force it on or off.

**A bar that appears while the work runs.** The engines run compiled segments of iterations,
and Python (so the bar) only hears from them between segments: a fit whose compilation, or
whose first iterations, take minutes (GP NUTS with hyperpriors at a few hundred points) showed
nothing for that long. So a bar is drawn by a background thread as well (:data:`HEARTBEAT`):
:data:`DELAY` seconds after the run starts it appears whatever the segments do, with a status
(``compiling``, ``first iteration``) until the first segment has returned, and its clock keeps
running during a long segment. (JAX releases the interpreter while it compiles and runs a
program, so the thread runs meanwhile.) Between segments :func:`segment_length` sizes the next
one to last about :data:`SEGMENT_SECONDS`, from one iteration up, growing at most
:data:`GROWTH`-fold from one segment to the next, so that iterations that get dearer as the run
goes (a NUTS tree that deepens in early warmup) cannot make one segment last minutes.

In a notebook the bar is tqdm's widget when ``ipywidgets`` is installed and tqdm's text bar
otherwise (never tqdm's ``IProgress not found`` warning).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time

from ._checks import boolean

__all__ = ["DELAY", "HEARTBEAT", "SEGMENT_SECONDS", "GROWTH", "check_progress_bar",
           "progress_bar", "segment_length", "shown", "settings", "current"]

DELAY = 2.0
"""Seconds a run must last before its bar appears."""

HEARTBEAT = 1.0
"""Seconds between redraws of a shown bar by its background thread (module doc)."""

SEGMENT_SECONDS = 0.5
"""With a bar shown, compiled segments are sized to last about this long."""

GROWTH = 2
"""A segment runs at most this many times the iterations of the one before (module doc)."""


def segment_length(last: int, seconds: float, cap: int, target: float = SEGMENT_SECONDS) -> int:
    """Iterations of the next compiled segment while a bar is shown.

    The last segment ran ``last`` iterations in ``seconds``; the next one runs ``target /
    (seconds / last)`` of them (about ``target`` seconds at that pace), but at most
    ``GROWTH * last`` and between 1 and ``cap``. The loops start with a segment of one
    iteration (whose time includes compiling, hence an overestimate of the pace: the second
    segment is short too) and grow geometrically, so a run whose iterations get dearer (NUTS's
    trees go from 1 to ``2^10`` leapfrog steps in the first ten iterations of warmup) overruns
    the target by at most the factor by which the cost of an iteration grew within one
    segment, not by ``cap`` iterations of the dearer kind.
    """
    last = max(int(last), 1)
    pace = max(float(seconds), 0.0) / last
    by_time = target / pace if pace > 0 else float(cap)
    return int(max(1, min(cap, GROWTH * last, by_time)))


def check_progress_bar(value) -> bool | None:
    """The ``progress_bar`` option: ``None`` (automatic), ``True`` or ``False``."""
    return None if value is None else boolean("progress_bar", value)


_CURRENT: contextvars.ContextVar = contextvars.ContextVar("ppl_bsvm_progress", default=(None, ""))


@contextlib.contextmanager
def settings(enabled: bool | None, label: str = ""):
    """Within the block, loops and samplers show bars per ``enabled`` (None: automatic), each
    labelled with ``label`` (``ppl_bsvm.fit`` sets ``"model/method"``)."""
    token = _CURRENT.set((check_progress_bar(enabled), label))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> tuple[bool | None, str]:
    """``(enabled, label)`` set by the innermost :func:`settings` block."""
    return _CURRENT.get()


def _in_notebook() -> bool:
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def _interactive() -> bool:
    if os.environ.get("CI"):
        return False
    if _in_notebook():
        return True
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _tqdm_class():
    if _in_notebook():
        try:
            import ipywidgets  # noqa: F401
        except ImportError:
            from tqdm.std import tqdm
        else:
            from tqdm.notebook import tqdm
        return tqdm
    from tqdm.std import tqdm

    return tqdm


class _NoBar:
    """The interface of a tqdm bar, doing nothing."""

    def update(self, n=1):
        pass

    def set_postfix_str(self, s="", refresh=True):
        pass

    def set_description_str(self, desc=None, refresh=True):
        pass

    def set_status(self, status: str):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Bar(_NoBar):
    """A tqdm bar whose count and clock start at the end of the first update, drawn from
    :data:`DELAY` seconds after it was created by a background thread.

    The first update of a run follows its first segment, which includes compiling the
    program (seconds, against milliseconds per later segment): counted, it made tqdm show
    an ETA of an hour for a run of seconds. So that segment only advances the starting
    count; the bar's rate and clock begin after it. Until then the bar, once :data:`DELAY`
    seconds have passed, shows the count it starts from and its ``status`` (``set_status``;
    default ``starting``). Every :data:`HEARTBEAT` seconds the thread redraws it, so the
    elapsed time moves while a long segment runs (module doc)."""

    def __init__(self, **kwargs):
        self._kwargs = kwargs
        self._bar = None
        self._counting = False  # the first update has come
        self._status = "starting"
        self._created = time.monotonic()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="ppl_bsvm-progress",
                                        daemon=True)
        self._thread.start()

    def _beat(self):
        while not self._closed.wait(HEARTBEAT):
            self.tick()

    def tick(self, now: float | None = None):
        """Draw the bar if :data:`DELAY` seconds have passed since it was created (what the
        background thread does every :data:`HEARTBEAT` seconds)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._closed.is_set() or now - self._created < DELAY:
                return
            if self._bar is None:  # nothing counted yet: the starting count and the status
                self._bar = self._new(self._kwargs["initial"], delay=0.0, postfix=self._status)
            else:
                self._bar.refresh()

    def _new(self, initial, delay, postfix=None):
        kwargs = {**self._kwargs, "initial": initial, "delay": delay, "postfix": postfix}
        return _tqdm_class()(**kwargs)

    def set_status(self, status: str):
        """What the bar says until its first update (``compiling``, ``first iteration``)."""
        with self._lock:
            self._status = status
            if self._bar is not None and not self._counting:
                self._bar.set_postfix_str(status)

    def update(self, n=1):
        with self._lock:
            if self._counting:
                self._bar.update(n)
                return
            self._counting = True
            start = self._kwargs["initial"] + n
            if self._bar is None:
                waited = time.monotonic() - self._created
                self._bar = self._new(start, delay=max(DELAY - waited, 0.0))
                return
            # shown already: the count moves on, and the rate and clock start now
            bar = self._bar
            bar.n = bar.last_print_n = bar.initial = start
            bar.last_print_t = bar.start_t = bar._time()
            bar.set_postfix_str("", refresh=False)
            bar.refresh()

    def set_postfix_str(self, s="", refresh=True):
        with self._lock:
            if self._counting:
                self._bar.set_postfix_str(s, refresh)

    def set_description_str(self, desc=None, refresh=True):
        with self._lock:
            if self._bar is not None:
                self._bar.set_description_str(desc, refresh)

    def close(self):
        with self._lock:
            self._closed.set()
            if self._bar is not None:
                self._bar.close()
                self._bar = None


def progress_bar(total: int, desc: str, enabled: bool | None = None, *, unit: str = "it",
                 initial: int = 0):
    """A tqdm bar (a context manager with ``update``, ``set_postfix_str``, ``set_status``), or
    one that does nothing when ``enabled`` is False, or None and nobody is watching (module
    doc). The bar counts from its first update and is drawn from :data:`DELAY` seconds on
    (:class:`_Bar`)."""
    if enabled is None:
        enabled = _interactive()
    if not enabled:
        return _NoBar()
    return _Bar(total=total, desc=desc, unit=unit, initial=initial, dynamic_ncols=True,
                leave=False)


def shown(bar) -> bool:
    """Whether ``bar`` (from :func:`progress_bar`) may display anything.

    (A :class:`_Bar` is a :class:`_NoBar` too, for the interface: asking ``not
    isinstance(bar, _NoBar)`` said False for every bar, so the loops never shortened their
    segments for one.)"""
    return isinstance(bar, _Bar)
