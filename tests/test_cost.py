"""Time estimates of the slow engines (``ppl_bsvm._cost``; the samplers' in
``ppl_bsvm.inference.mcmc.estimates``, the RVM's in ``ppl_bsvm.baselines.rvm``): the
``SlowFitWarning`` comes, before any work, for the issue's slow configurations (GP NUTS with
hyperpriors on the 398 training points of the breast-cancer data) and not for quick ones; the
counts are checked against their formulas written out independently."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm import _cost, _memory
from ppl_bsvm.api import get_engine
from ppl_bsvm.inference.mcmc import estimates

from .test_memory import Huge  # only its shape is read: converting it means work started

pytestmark = pytest.mark.filterwarnings("ignore::ppl_bsvm.ConvergenceWarning")


@pytest.fixture(autouse=True)
def _no_memory_limit(monkeypatch):
    monkeypatch.setattr(_memory, "available_bytes", lambda: None)


def _estimate(model, method, n, d, **options):
    engine = get_engine(model, method)
    return engine.flops(n, d, {**engine.options().as_dict(), **options}) / _cost.RATE


def _warns(model, method, n, d, **options) -> list:
    """The SlowFitWarnings of a fit on an ``n x d`` X, stopped where X is first converted."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="X was converted"):
            ppl_bsvm.fit(Huge((n, d)), np.ones(n), model=model, method=method, **options)
    return [w for w in record if issubclass(w.category, ppl_bsvm.SlowFitWarning)]


def test_gp_nuts_with_hyperpriors_on_breast_cancer_warns_of_hours_before_any_work():
    """The issue's fit: 398 x 30, hyperpriors="default", default draws. The warning gives
    hours, says it is an estimate with its assumed tree size, and names the faster
    choices; it points at the caller's line."""
    with pytest.warns(ppl_bsvm.SlowFitWarning,
                      match=r"\(398, 30\) may take about [0-9.]+ hours.*an estimate: "
                            r"num_chains=4 x \(num_warmup=1000 \+ num_samples=1000\) iterations "
                            r"of about [0-9]+ leapfrog steps.*O\(n\^3\).*hyperpriors=None.*"
                            r"method='gibbs'.*fewer iterations or chains.*model='sparse_gp'"
                      ) as record:
        with pytest.raises(ValueError, match="X was converted"):
            ppl_bsvm.fit(Huge((398, 30)), np.ones(398), model="gp", method="nuts",
                         hyperpriors="default")
    assert [w.filename for w in record] == [__file__]


def test_gp_nuts_with_hyperpriors_at_n_100_warns_of_minutes():
    """Measured: 595 s (10 minutes) for the default run at n = 100."""
    [w] = _warns("gp", "nuts", 100, 30, hyperpriors="default")
    assert "may take about 10 minutes" in str(w.message)


def test_error_filter_stops_a_slow_sampler_before_any_work():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ppl_bsvm.SlowFitWarning)
        with pytest.raises(ppl_bsvm.SlowFitWarning, match="hours"):
            ppl_bsvm.fit(Huge((398, 30)), np.ones(398), model="gp", method="nuts",
                         hyperpriors="default")


@pytest.mark.parametrize("model, method, n, d, options", [
    ("gp", "nuts", 100, 30, {}),  # 2.8 s measured
    ("gp", "nuts", 400, 30, {"num_warmup": 500, "num_samples": 500}),
    ("gp", "nuts", 30, 5, {"hyperpriors": "default", "num_warmup": 100, "num_samples": 100,
                           "num_chains": 2}),
    ("gp", "nuts", 398, 30, {"hyperpriors": "default", "num_warmup": 20, "num_samples": 20,
                             "num_chains": 1, "max_tree_depth": 4}),
    ("gp", "gibbs", 400, 30, {}),
    ("sparse_gp", "nuts", 1000, 30, {}),
    ("gp", "rvm", 2000, 2, {}),
])
def test_quick_fits_do_not_warn(model, method, n, d, options):
    assert _warns(model, method, n, d, **options) == []


@pytest.mark.parametrize("model, method, n, d, options, words", [
    ("gp", "nuts", 1000, 10, {}, r"O\(n\^2\).*method='gibbs'"),
    ("sparse_gp", "nuts", 10_000, 10, {}, r"O\(n m\).*method='svi'"),
    ("gp", "gibbs", 5000, 2, {}, r"conjugate gradients.*directions=0"),
    ("gp", "rvm", 20_000, 2, {}, r"60 iterations.*method='gpc'"),
    ("gp", "rvm", 5000, 2, {"algorithm": "reestimate"}, r"max_iter=5000 iterations"),
])
def test_large_fits_of_every_slow_engine_warn(model, method, n, d, options, words):
    [w] = _warns(model, method, n, d, **options)
    assert w.filename == __file__
    assert re.search(r"may take about .*an estimate: .*" + words, str(w.message))


def test_nuts_count_is_iterations_times_assumed_steps_times_a_gradient():
    """Written out: the first 100 warmup iterations of each chain at three times the steps of
    the others (capped at 2^max_tree_depth - 1), each step 12 n^2 (fixed hyperparameters) or
    besides 10/3 n^3 + 20 n^2 d (hyperpriors); sparse: 39 steps of 2000 n + 4 n m + 2 m^2."""
    n, d = 398, 30
    tree = 145.0 * n / 100
    steps = 4 * 2000 * tree + 4 * 100 * (1023 - tree)  # early trees capped at 1023
    step = 12 * n**2 + 10 / 3 * n**3 + 20 * n**2 * d
    assert _estimate("gp", "nuts", n, d, hyperpriors="default") * _cost.RATE == pytest.approx(
        steps * step)
    tree = 34.0 * (n / 100) ** 0.25
    assert _estimate("gp", "nuts", n, d, num_warmup=50, num_samples=10, num_chains=2) * (
        _cost.RATE) == pytest.approx((2 * 60 * tree + 2 * 50 * 2 * tree) * 12 * n**2)
    # a depth cap of 3: at most 7 steps an iteration, early ones too
    assert _estimate("gp", "nuts", n, d, hyperpriors="default", max_tree_depth=3) * (
        _cost.RATE) == pytest.approx(4 * 2000 * 7 * step)
    m, tree = 64, 39.0
    assert _estimate("sparse_gp", "nuts", 5000, 2) * _cost.RATE == pytest.approx(
        (4 * 2000 * tree + 4 * 100 * 2 * tree) * (2000 * 5000 + 4 * 5000 * m + 2 * m * m))
    # fewer draws, proportionally less (beyond the early warmup)
    full = _estimate("gp", "nuts", n, d, hyperpriors="default")
    half = _estimate("gp", "nuts", n, d, hyperpriors="default", num_samples=500)
    assert half == pytest.approx(full - 4 * 500 * 145.0 * n / 100 * step / _cost.RATE)


def test_gibbs_gp_count_and_the_engine_looks_again_once_the_path_is_known(monkeypatch,
                                                                          toy2d):
    """Sweeps of (solve + 10 line moves + 4 products with n x n matrices), the directions
    learned twice, and the engine's own factor and eigendecomposition of K; each product of
    the chains' vectors with an n x n matrix counts 2.5 n^2 (``estimates.PRODUCT_OPS``), the
    conjugate gradients' too. Before any work the solve is the cheaper of the Cholesky factor
    and conjugate gradients at rank 64 and 6 iterations; the engine then checks again with
    the rank K's spectrum chose and the iterations the rule predicted. Beyond 512 points the
    4 vectorised chains learn the directions together from their 4 x 512 kept draws: an SVD
    of them (6 max(w, n) min(w, n)^2) on the Cholesky path, else their projection onto the
    preconditioner's r eigenvectors and an SVD in r dimensions (w n r + 6 w r^2); chains run
    one after the other learn alone. Beyond 2048 points the spectrum comes from the range
    finder (6 n^2 s with s = 576, and two QR factors)."""
    from ppl_bsvm.inference.mcmc import gibbs, pcg

    engine = get_engine("gp", "gibbs")
    options = engine.options().as_dict()
    n, w = 1000, 4 * 512
    chol = n**3 / 3
    cg = n * 64**2 + 64**3 / 3 + 6 * (2.5 * n**2 + 4 * n * 64)
    own = 4.5 * n**3 + chol  # the engine's spectrum and factor of K

    def learn(r):
        return 2 * (w * n * r + 6 * w * r * r if r else 6 * w * n**2)

    sweep = 100.0 * n * 10 + 4 * 2.5 * n**2
    assert cg < chol
    assert engine.flops(n, 2, options) == pytest.approx(8000 * (cg + sweep) + learn(64) + own)
    assert engine.flops(n, 2, options, rank=0) == pytest.approx(
        8000 * (chol + sweep) + learn(0) + own)
    alone = 4 * 2 * 6 * n * 512**2
    assert engine.flops(n, 2, {**options, "chain_method": "sequential"}, rank=0) == (
        pytest.approx(8000 * (chol + sweep) + alone + own))
    assert engine.flops(n, 2, {**options, "directions": 0}, rank=0) == pytest.approx(
        8000 * (chol + 10 * n**2) + own)
    cg20 = n * 128**2 + 128**3 / 3 + 20 * (2.5 * n**2 + 4 * n * 128)
    assert engine.flops(n, 2, options, rank=128, iterations=20) == pytest.approx(
        8000 * (cg20 + sweep) + learn(128) + own)
    big, s = 5000, 576
    assert engine.flops(big, 2, {**options, "directions": 0}, rank=0) == pytest.approx(
        8000 * (big**3 / 3 + 10 * big**2) + 6 * big**2 * s + 4 * big * s**2 + big**3 / 3)
    calls, spectra = [], []
    monkeypatch.setattr(gibbs, "check_refined", lambda *args: calls.append(args))
    chosen = pcg.spectrum
    monkeypatch.setattr(pcg, "spectrum", lambda *args: spectra.append(chosen(*args))
                        or spectra[-1])
    X, y = toy2d
    ppl_bsvm.fit(X, y, model="gp", method="gibbs", num_warmup=10, num_samples=10,
                 num_chains=1)
    [(what, guessed, refined, hint)] = calls
    small = {**options, "num_warmup": 10, "num_samples": 10, "num_chains": 1}
    assert what == "fit(model='gp', method='gibbs') on X of shape (60, 2)"
    assert guessed == pytest.approx(engine.flops(60, 2, small))
    rank = pcg.chosen_rank(spectra[0])
    iterations = pcg.spectrum_iterations(spectra[0], rank)
    assert refined == pytest.approx(engine.flops(60, 2, small, rank=rank, iterations=iterations))
    assert "an estimate" in hint


def test_refined_check_warns_once_at_the_callers_line():
    slow, quick = 10 * _cost.WARN_SECONDS * _cost.RATE, 0.1 * _cost.WARN_SECONDS * _cost.RATE
    with pytest.warns(ppl_bsvm.SlowFitWarning, match="the fit may take about 10 minutes") as rec:
        _cost.check_refined("the fit", quick, slow)
    assert rec[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _cost.check_refined("the fit", slow, slow)  # the first check warned already
        _cost.check_refined("the fit", quick, quick)


def test_rvm_count():
    N = 2001
    assert _estimate("gp", "rvm", 2000, 2) * _cost.RATE == pytest.approx(60 * 150 * N * N)
    assert _estimate("gp", "rvm", 2000, 2, max_iter=10) * _cost.RATE == pytest.approx(
        10 * 150 * N * N)
    assert _estimate("gp", "rvm", 2000, 2, algorithm="reestimate") * _cost.RATE == (
        pytest.approx(5000 * 55 * N * N + 10 * N**3 / 3))


def test_every_sampler_and_the_rvm_estimate_their_time():
    for model, method in [("gp", "gibbs"), ("gp", "nuts"), ("sparse_gp", "nuts"),
                          ("gp", "rvm")]:
        engine = get_engine(model, method)
        assert engine.flops is not None and callable(engine.flops.hint)
    assert estimates.nuts_tree(100, {}) == pytest.approx(34.0)
