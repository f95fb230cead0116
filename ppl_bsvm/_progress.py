"""Progress bars for long runs (samplers, iterative engines), tqdm in a terminal or a notebook.

``progress_bar=None`` (every engine's default) shows a bar only where someone can see it: an
interactive terminal (standard error is a TTY) or a Jupyter kernel, and never when the ``CI``
environment variable is set. Even then the bar appears only once the run has lasted
:data:`DELAY` seconds, so quick fits print nothing. ``True`` and ``False`` force it on or off.

In a notebook the bar is tqdm's widget when ``ipywidgets`` is installed and tqdm's text bar
otherwise (never tqdm's ``IProgress not found`` warning).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys

from ._checks import boolean

__all__ = ["DELAY", "check_progress_bar", "progress_bar", "shown", "settings", "current"]

DELAY = 2.0
"""Seconds a run must last before its bar appears."""


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

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Bar(_NoBar):
    """A tqdm bar that starts at the end of the first update.

    The first update of a run follows its first segment, which includes compiling the
    program (seconds, against milliseconds per later segment): counted, it made tqdm show
    an ETA of an hour for a run of seconds. So that segment only advances the starting
    count; the bar and its clock begin after it."""

    def __init__(self, **kwargs):
        self._kwargs = kwargs
        self._bar = None

    def update(self, n=1):
        if self._bar is None:
            kwargs = self._kwargs
            self._bar = _tqdm_class()(**{**kwargs, "initial": kwargs["initial"] + n})
        else:
            self._bar.update(n)

    def set_postfix_str(self, s="", refresh=True):
        if self._bar is not None:
            self._bar.set_postfix_str(s, refresh)

    def set_description_str(self, desc=None, refresh=True):
        if self._bar is not None:
            self._bar.set_description_str(desc, refresh)

    def close(self):
        if self._bar is not None:
            self._bar.close()


def progress_bar(total: int, desc: str, enabled: bool | None = None, *, unit: str = "it",
                 initial: int = 0):
    """A tqdm bar (a context manager with ``update``, ``set_postfix_str``), or one that does
    nothing when ``enabled`` is False, or None and nobody is watching (module doc). The bar
    starts after its first update (:class:`_Bar`)."""
    if enabled is None:
        enabled = _interactive()
    if not enabled:
        return _NoBar()
    return _Bar(total=total, desc=desc, unit=unit, initial=initial, delay=DELAY,
                dynamic_ncols=True, leave=False)


def shown(bar) -> bool:
    """Whether ``bar`` (from :func:`progress_bar`) may display anything."""
    return not isinstance(bar, _NoBar)
