"""Memory estimates before a fit (``ppl_bsvm._memory``): every linear engine refuses, before
any work, a fit whose ``p x p`` matrices cannot fit, naming the estimate and what scales;
``check_memory=False`` lets a user go ahead."""

from __future__ import annotations

import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm import _memory
from ppl_bsvm.api import get_engine
from tests._shared import small_problem

LINEAR = ["vi", "ecm", "svi", "gibbs", "nuts"]

pytestmark = pytest.mark.filterwarnings("ignore::ppl_bsvm.ConvergenceWarning")


class Huge:
    """Only its shape is read before the memory check."""

    def __init__(self, shape):
        self.shape = shape

    def __array__(self, *args, **kwargs):
        raise AssertionError("X was converted before the memory check")


@pytest.mark.parametrize("method", LINEAR)
def test_linear_engines_refuse_before_any_work_what_cannot_fit(monkeypatch, method):
    """50 points with 10^6 features: at least one 10^6 x 10^6 matrix (8 TB)."""
    monkeypatch.setattr(_memory, "available_bytes", lambda: 4 * 10**9)
    with pytest.raises(ppl_bsvm.InsufficientMemoryError,
                       match=r"\(50, 1000000\) needs about .* [GT]B .*p = d \+ 1 coeff.*"
                             r"method='svgp' \(SVGP\).*'bcsvm'.*check_memory=False"):
        ppl_bsvm.fit(Huge((50, 1_000_000)), np.ones(50), model="linear", method=method)


def test_every_engine_estimates_its_memory():
    """Every registered engine declares an estimate. The linear model's grow with p^2, the GP
    engines forming n x n matrices with n^2; the scalable ones (S-BSVM, SVGP, BC-SVM, sparse
    NUTS) at most linearly in n, and with the option that bounds them."""
    scalable = {("gp", "svi"), ("sparse_gp", "svi"), ("gp", "svgp"), ("sparse_gp", "svgp"),
                ("gp", "bcsvm"), ("sparse_gp", "nuts"), ("sparse_gp", "advi")}
    # Pathfinder keeps no p x p matrix (L-BFGS), and below n = 10^4 its history, linear in
    # n or p, outweighs the GP's n x n factor: it grows at least linearly
    history = {("gp", "pathfinder"), ("linear", "pathfinder")}
    # adjusted MCLMC's tuner keeps the positions of its first pass (2/3 of the warmup, linear
    # in n or p), which outweigh the GP's n x n matrices below n = 2,700 with 4 chains
    history |= {("gp", "mclmc"), ("linear", "mclmc")}
    for model, method, _ in ppl_bsvm.list_methods().itertuples(index=False):
        engine = get_engine(model, method)
        assert engine.memory is not None, (model, method)
        options = {**engine.options().as_dict(), "dense_mass": True, "num_draws": 1,
                   "num_samples": 1}
        if (model, method) in scalable:
            small, large = engine.memory(10**4, 10, options), engine.memory(10**5, 10, options)
            assert large <= 15 * small, (model, method)
            # S-BSVM's memory does not grow with n at all; ADVI's steps take minibatches of
            # 1,000 beyond 10^4 points, and only its draws' final pass reads all n
            if method not in ("svi", "advi"):
                assert large >= 5 * small, (model, method)
        elif (model, method) in history:
            small, large = engine.memory(10**4, 10, options), engine.memory(10**5, 10, options)
            assert large >= 5 * small, (model, method)
        else:
            small, large = engine.memory(100, 100, options), engine.memory(1000, 1000, options)
            assert large > 50 * small, (model, method)
    n = 10**5
    svgp, bcsvm = get_engine("gp", "svgp").memory, get_engine("gp", "bcsvm").memory
    assert svgp(n, 10, {"batch_size": 1000}) < svgp(n, 10, {}) / 20
    assert bcsvm(n, 10, {"module_size": 100}) < bcsvm(n, 10, {"module_size": 1000}) / 5


def test_scalable_engines_name_the_option_that_bounds_them(monkeypatch):
    monkeypatch.setattr(_memory, "available_bytes", lambda: 10**9)
    for method, option in [("svgp", "batch_size"), ("bcsvm", "module_size")]:
        with pytest.raises(ppl_bsvm.InsufficientMemoryError, match=f"pass .*{option}"):
            ppl_bsvm.fit(Huge((10**7, 3)), np.ones(3), model="gp", method=method)
    with pytest.raises(ppl_bsvm.InsufficientMemoryError, match="smaller num_inducing"):
        ppl_bsvm.fit(Huge((10**7, 3)), np.ones(3), model="sparse_gp", method="nuts")


@pytest.mark.parametrize("method", ["vi", "ecm"])
def test_the_dual_form_is_what_makes_many_features_fit(monkeypatch, method):
    """p = 10^4 + 1 coefficients, n = 50: the primal form's five p x p matrices (4 GB) do not
    fit in 3 GB; the dual form (three: the covariance returned, a product and the Fit's copy)
    does, and the check passes on to converting X. The error for form='primal' points to
    form='auto'."""
    monkeypatch.setattr(_memory, "available_bytes", lambda: 3 * 10**9)
    X = Huge((50, 10_000))
    with pytest.raises(ppl_bsvm.InsufficientMemoryError, match="form='auto' solves in n x n"):
        ppl_bsvm.fit(X, np.ones(50), model="linear", method=method, form="primal")
    with pytest.raises(ValueError, match="X was converted before the memory check"):
        ppl_bsvm.fit(X, np.ones(50), model="linear", method=method)


def test_gibbs_estimate_counts_its_line_moves(monkeypatch):
    engine = get_engine("linear", "gibbs")
    options = engine.options().as_dict()
    learned = engine.memory(50, 5000, options)
    none = engine.memory(50, 5000, {**options, "directions": 0})
    # "all" learns p directions per chain: a p x p window and two k x p arrays more, 4 chains.
    assert learned - none == pytest.approx(4 * 3 * 5001**2 * 8, rel=0.01)


def test_gp_gibbs_estimate_counts_its_matrices_draws_and_windows():
    """Six n x n matrices (the chains' K and factor, the predictor's factor, and the
    temporaries of initialisation and fallback: 4.9 GiB measured at n = 10^4 with 4 chains,
    reports/sbsvm_truth), the kept draws, and per chain, in and out of the sweeps' program,
    the window the directions are learned from (n x n up to 512 points, 512 kept draws of f
    beyond) and the directions' five k x n arrays (k = 32 at 10^4 points, 10 at 300)."""
    engine = get_engine("gp", "gibbs")
    options = {**engine.options().as_dict(), "num_chains": 4, "num_samples": 500}
    n = 10_000
    assert engine.memory(n, 18, options) == 8 * (6 * n**2 + 4 * 500 * n
                                                 + 2 * 4 * (512 * n + 5 * 32 * n))
    assert engine.memory(n, 18, {**options, "directions": 0}) == 8 * (6 * n**2 + 4 * 500 * n)
    assert engine.memory(300, 18, options) == 8 * (6 * 300**2 + 4 * 500 * 300
                                                   + 2 * 4 * (300**2 + 5 * 10 * 300))


def test_check_memory_false_lets_a_user_go_ahead(monkeypatch, toy2d):
    X, y = toy2d
    monkeypatch.setattr(_memory, "available_bytes", lambda: 1)
    with pytest.raises(ppl_bsvm.InsufficientMemoryError, match="only 1 B is available"):
        ppl_bsvm.fit(X, y, model="linear", method="vi", max_iter=5)
    fit = ppl_bsvm.fit(X, y, model="linear", method="vi", max_iter=5, check_memory=False)
    assert np.all(np.isfinite(fit.predict_proba(X)))
    with pytest.raises(ValueError, match="check_memory must be True or False"):
        ppl_bsvm.fit(X, y, model="linear", method="vi", check_memory="no")


def test_dense_engines_name_every_scalable_alternative(monkeypatch):
    monkeypatch.setattr(_memory, "available_bytes", lambda: 4 * 10**9)
    with pytest.raises(ppl_bsvm.InsufficientMemoryError,
                       match=r"n x n matrices; for large n use method='svi' \(S-BSVM.*"
                             r"method='svgp' \(SVGP\) or method='bcsvm' \(BC-SVM\)"):
        ppl_bsvm.fit(Huge((10**6, 3)), np.ones(3), model="gp", method="gpc")


# --- time: SlowFitWarning (ppl_bsvm._cost) ----------------------------------------------------


@pytest.mark.parametrize("method", ["gibbs", "svi"])
def test_slow_linear_fits_warn_before_any_work(monkeypatch, method):
    """The issue's case, d = 5,000 features and n = 50 points: the warning gives the estimate,
    what dominates and the faster choices, comes before X is converted, points at the caller's
    line, and the fit goes ahead (here: on to converting X)."""
    monkeypatch.setattr(_memory, "available_bytes", lambda: None)
    with pytest.warns(ppl_bsvm.SlowFitWarning,
                      match=r"\(50, 5000\) may take about [0-9.]+ (minutes|hours).*"
                            r"p x p precision.*method='vi' or 'ecm'.*kernel=Linear.*Constant.*"
                            r"simplefilter\('ignore', ppl_bsvm.SlowFitWarning\)") as record:
        with pytest.raises(ValueError, match="X was converted before the memory check"):
            ppl_bsvm.fit(Huge((50, 5000)), np.ones(50), model="linear", method=method)
    assert [w.filename for w in record] == [__file__]


def test_slow_fit_warning_filters(monkeypatch):
    """"error" stops the fit before any work; "ignore" lets it go ahead silently."""
    import warnings

    monkeypatch.setattr(_memory, "available_bytes", lambda: None)
    X = Huge((50, 5000))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ppl_bsvm.SlowFitWarning)
        with pytest.raises(ppl_bsvm.SlowFitWarning):
            ppl_bsvm.fit(X, np.ones(50), model="linear", method="gibbs")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ppl_bsvm.SlowFitWarning)
        with pytest.raises(ValueError, match="X was converted before the memory check"):
            ppl_bsvm.fit(X, np.ones(50), model="linear", method="gibbs")


def test_time_estimates_count_leading_terms_and_spare_ordinary_fits():
    """Linear Gibbs: chains x warmup full sweeps of p^3/3 + n p^2 and p line moves, and
    chains x samples collapsed sweeps of p line moves (full ones when they do not collapse).
    No engine warns on Heart (270 x 13) with its defaults (GP NUTS is the slowest there, about
    20 s: ``tests/test_cost.py`` has the samplers' estimates)."""
    from ppl_bsvm import _cost
    from ppl_bsvm.inference.mcmc.gibbs import LINE_OPS

    gibbs = get_engine("linear", "gibbs")
    p, n = 5001, 50
    full, lines = p**3 / 3 + n * p**2, LINE_OPS * n * p
    options = gibbs.options().as_dict()
    assert gibbs.flops(n, 5000, options) == pytest.approx(
        4 * 1000 * (full + lines) + 4 * 1000 * (lines + n * p))
    assert gibbs.flops(n, 5000, {**options, "collapse": False}) == pytest.approx(
        4 * 2000 * (full + lines))
    assert gibbs.flops(n, 5000, {**options, "directions": 0}) == pytest.approx(4 * 2000 * full)
    q = 5000  # no warmup: nothing learned, no collapse
    assert gibbs.flops(n, 5000, {"num_chains": 1, "num_warmup": 0, "num_samples": 1,
                                 "intercept": False}) == pytest.approx(
        q**3 / 3 + n * q**2 + LINE_OPS * n * q)
    X, _ = ppl_bsvm.datasets.load("heart")
    n, d = X.shape
    estimated = []
    for model, method, _ in ppl_bsvm.list_methods().itertuples(index=False):
        engine = get_engine(model, method)
        if engine.flops is not None:
            estimated.append((model, method))
            assert engine.flops(n, d, engine.options().as_dict()) / _cost.RATE < (
                _cost.WARN_SECONDS)
    assert {("linear", "gibbs"), ("linear", "svi"), ("gp", "nuts"), ("gp", "gibbs")} <= set(
        estimated)


@pytest.mark.parametrize("method,options", [
    # the data and settings of test_advi's resume test, whose compiled programs this reuses
    ("advi", {"max_iter": 4, "window": 1000, "num_draws": 100, "num_inducing": 8}),
    # the shared problem with test_properties' settings (tests/_shared.py), likewise
    ("nuts", {"num_samples": 5, "num_warmup": 5, "num_chains": 1, "max_tree_depth": 2,
              "num_inducing": 3}),
])
def test_sparse_engines_never_form_the_n_by_n_kernel_matrix(monkeypatch, method, options):
    """At 10^5 points the n x n matrix is 80 GB: forming it (once, to check it) ended the
    process of a sparse ADVI fit with an XLA allocation failure."""
    from ppl_bsvm.inference import _common

    def refuse(kernel, params, X, *args, **kwargs):
        raise AssertionError(f"the {len(X)} x {len(X)} kernel matrix was formed")

    monkeypatch.setattr(_common, "gram", refuse)
    if method == "advi":
        X, y = ppl_bsvm.datasets.load("heart", standardize=True)
        X, y = X[:50], y[:50]
    else:
        X, y = small_problem()
    fit = ppl_bsvm.fit(X, y, model="sparse_gp", method=method, seed=3, progress_bar=False,
                       **options)
    assert fit.posterior["u"].shape[-1] == options["num_inducing"]


@pytest.mark.parametrize("method", ["gibbs", "nuts", "ess", "mclmc"])
def test_gp_samplers_count_the_draws_they_keep(monkeypatch, method):
    """n = 2,000 and 4 chains of 10^6 draws: 64 GB of draws of f, whatever the n x n matrices
    (issue 34: the GP samplers counted only the matrices and ran). Thinning keeps fewer."""
    engine = get_engine("gp", method)
    options = {**engine.options().as_dict(), "num_chains": 4, "num_samples": 10**6}
    draws = 4 * 10**6 * 2000 * 8
    assert engine.memory(2000, 5, options) >= draws
    thinned = engine.memory(2000, 5, {**options, "thinning": 100})
    assert engine.memory(2000, 5, options) - thinned == pytest.approx(0.99 * draws, rel=1e-6)
    monkeypatch.setattr(_memory, "available_bytes", lambda: 24 * 10**9)
    with pytest.raises(ppl_bsvm.InsufficientMemoryError,
                       match="num_chains x num_samples / thinning draws"):
        ppl_bsvm.fit(Huge((2000, 5)), np.ones(2000), model="gp", method=method, num_chains=4,
                     num_samples=10**6)
