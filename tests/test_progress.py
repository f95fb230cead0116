"""Progress bars (``ppl_bsvm._progress``): the sizing of compiled segments while a bar is shown,
and a bar drawn before the first segment has returned. No timing: the sizing rule is a pure
function, the bar's background redraw is called by hand (``tick``) at a given clock."""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm import _progress
# the shared problem: the samplers' programs are test_runtime's and test_persistence's
from tests._shared import small_problem


def test_segments_grow_at_most_twofold_and_aim_at_half_a_second():
    cap = 250
    # the first segment (one iteration) compiled: its pace says one iteration again
    assert _progress.segment_length(1, 8.0, cap) == 1
    # a cheap iteration does not license 250 of them: twice as many as ran
    assert _progress.segment_length(1, 0.001, cap) == 2
    assert _progress.segment_length(2, 0.004, cap) == 4
    # steady state: about SEGMENT_SECONDS at the last pace, within [1, cap]
    assert _progress.segment_length(100, 1.0, cap) == 50
    assert _progress.segment_length(200, 0.01, cap) == cap
    assert _progress.segment_length(4, 60.0, cap) == 1
    assert _progress.segment_length(3, 0.0, cap) == 6


def test_a_deepening_nuts_warmup_never_runs_long_between_updates():
    """The issue's n = 100 case (GP NUTS with hyperpriors, 2 ms a leapfrog step): warmup trees
    of 3, 1, 15, 63, ... 1023 steps. Sized on the one-step iteration, the former rule ran the
    next 250 iterations (minutes) in one segment; now no segment lasts longer than two of its
    dearest iterations or twice the target."""
    steps = [3, 1, 15, 63, 127, 255, 511, 1023, 1023, 511] + [255] * 40 + [63] * 200
    seconds = 0.002 * np.asarray(steps, dtype=float)
    ran, limit, longest = 0, 1, 0.0
    while ran < len(seconds):
        part = seconds[ran:ran + limit]
        longest = max(longest, part.sum() / max(2 * part.max(), 2 * _progress.SEGMENT_SECONDS))
        ran += len(part)
        limit = _progress.segment_length(len(part), part.sum(), 250)
    assert longest <= 1.0
    old = int(np.clip(_progress.SEGMENT_SECONDS / seconds[1], 1, 250))  # the former rule
    assert seconds[2:2 + old].sum() > 30


@pytest.fixture
def quiet_thread(monkeypatch):
    """The background redraw never fires by itself: the tests call ``tick``."""
    monkeypatch.setattr(_progress, "HEARTBEAT", 1e6)


def test_bar_appears_with_its_status_before_the_first_update(quiet_thread):
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        bar = _progress.progress_bar(100, "gp/nuts", True, initial=5)
        bar.set_status("compiling")
        bar.tick(now=bar._created + 0.5 * _progress.DELAY)
        assert bar._bar is None and stderr.getvalue() == ""  # a quick fit prints nothing
        bar.tick(now=bar._created + _progress.DELAY)
        inner = bar._bar
        assert inner is not None and inner.n == 5
        assert "gp/nuts" in stderr.getvalue() and "compiling" in stderr.getvalue()
        bar.set_status("first iteration")
        assert "first iteration" in stderr.getvalue()
        before = inner._time()
        bar.update(1)  # the first segment: the count moves, the clock restarts
        assert bar._bar is inner and inner.n == 6 and inner.initial == 6
        assert inner.start_t >= before and "first iteration" not in inner.postfix
        bar.update(10)
        assert inner.n == 16
        bar.tick(now=bar._created + 10 * _progress.DELAY)  # redrawn during a long segment
        bar.close()
    bar.tick(now=bar._created + 20 * _progress.DELAY)  # closed: nothing more
    assert bar._bar is None


def test_bar_first_drawn_by_an_update_starts_from_it(quiet_thread):
    with contextlib.redirect_stderr(io.StringIO()):
        bar = _progress.progress_bar(100, "x", True)
        bar.set_status("compiling")
        bar.update(3)
        inner = bar._bar
        assert inner.n == 3 and inner.initial == 3 and not inner.postfix
        bar.tick(now=bar._created + _progress.DELAY)
        assert bar._bar is inner
        bar.close()


def test_no_bar_does_nothing():
    bar = _progress.progress_bar(100, "x", False)
    assert not _progress.shown(bar)
    bar.set_status("compiling")
    bar.update(3)
    bar.close()


def _record_statuses(monkeypatch) -> list[str]:
    """The statuses every bar is given from now on, in order."""
    statuses = []
    status = _progress._Bar.set_status
    monkeypatch.setattr(_progress._Bar, "set_status",
                        lambda self, s: statuses.append(s) or status(self, s))
    return statuses


def test_shown_sampler_starts_with_one_iteration_and_grows_segments(monkeypatch):
    """With a bar shown the driver compiles ahead, says so, runs one iteration first and
    sizes every later segment by ``segment_length`` (at most twice the one before)."""
    X, y = small_problem()
    lengths = []
    size = _progress.segment_length
    monkeypatch.setattr(_progress, "segment_length",
                        lambda last, seconds, cap: lengths.append(last) or size(last, seconds, cap))
    statuses = _record_statuses(monkeypatch)
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ppl_bsvm.fit(X, y, model="linear", method="gibbs", num_warmup=30, num_samples=30,
                     num_chains=2, progress_bar=True)
    assert lengths[0] == 1 and sum(lengths) == 60
    assert all(b <= 2 * a for a, b in zip(lengths, lengths[1:]))
    assert statuses == ["compiling", "first iteration"]


def test_the_bar_says_when_a_sampler_tunes_before_its_first_iteration(monkeypatch):
    """Adjusted MCLMC tunes inside its first program (``num_warmup`` transitions, no
    iterations on the bar): the status says so until the first kept iteration."""
    X, y = small_problem()
    statuses = _record_statuses(monkeypatch)
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ppl_bsvm.fit(X, y, model="linear", method="mclmc", num_warmup=30, num_samples=30,
                     num_chains=2, progress_bar=True)
    assert statuses == ["compiling, tuning (30 transitions)", "first iteration"]
