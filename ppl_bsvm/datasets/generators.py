"""Seeded generators of the synthetic benchmarks (any n).

Each returns ``(X, y)`` with ``X`` float64 ``(n, d)`` and ``y`` float64 in {-1, +1}. Rows are
produced in fixed chunks of :data:`CHUNK` rows, each chunk drawn whole from its own stream
``numpy.random.default_rng([seed, chunk_index])``, so the first ``m`` rows of a sample of size
``n > m`` equal a sample of size ``m`` with the same seed, and a large sample needs no memory
beyond its own arrays and one chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy import special

from .._checks import nonnegative_float, positive_int

__all__ = [
    "GENERATORS", "CHUNK", "waveform", "twonorm", "ringnorm", "art", "art_bayes_error", "checker",
    "susy",
]

CHUNK = 16384


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return int(seed)


def _chunked(n: int, d: int, seed: int, fill: Callable, dtype=np.float64):
    """Allocate ``X (n, d)``, ``y (n,)`` and fill them chunk by chunk.

    ``fill(rng, X_c, y_c)`` always draws a whole chunk of :data:`CHUNK` rows (into a buffer
    when the last chunk is partial), so row ``i`` does not depend on ``n``.
    """
    n = positive_int("n", n)
    seed = _check_seed(seed)
    X = np.empty((n, d), dtype=dtype)
    y = np.empty(n, dtype=np.float64)
    for c, start in enumerate(range(0, n, CHUNK)):
        stop = min(start + CHUNK, n)
        rng = np.random.default_rng([seed, c])
        if stop - start == CHUNK:
            fill(rng, X[start:stop], y[start:stop])
        else:
            X_buf, y_buf = np.empty((CHUNK, d), dtype=dtype), np.empty(CHUNK)
            fill(rng, X_buf, y_buf)
            X[start:stop], y[start:stop] = X_buf[: stop - start], y_buf[: stop - start]
    return X, y


def _labels(rng, size: int, p_positive: float = 0.5):
    return np.where(rng.random(size) < p_positive, 1.0, -1.0)


# --- Breiman's waveform ---------------------------------------------------------------------

_I = np.arange(1, 22)
_H1 = np.maximum(6.0 - np.abs(_I - 11), 0.0)
_H2 = np.maximum(6.0 - np.abs(_I - 15), 0.0)  # h1 shifted by 4
_H3 = np.maximum(6.0 - np.abs(_I - 7), 0.0)  # h1 shifted by -4
_WAVE_PAIRS = np.array([[_H1, _H2], [_H1, _H3], [_H2, _H3]])


def waveform(n: int = 5000, *, seed: int = 0):
    r"""Breiman's waveform data (21 features), task class 1 vs classes 2 and 3.

    Three equiprobable classes; class ``c`` is ``u h_a + (1 - u) h_b + N(0, I)`` with
    ``u ~ U(0, 1)`` and the pairs ``(h_a, h_b)`` = (h1, h2), (h1, h3), (h2, h3) of triangular
    waves ``h1(i) = max(6 - |i - 11|, 0)``, ``h2(i) = h1(i - 4)``, ``h3(i) = h1(i + 4)``,
    ``i = 1..21``. Positive class: class 1 (about 1/3 of the points), as in Raetsch's benchmark.

    Reference: Breiman, Friedman, Olshen and Stone (1984). Classification and Regression Trees.
    """

    def fill(rng, X, y):
        m = X.shape[0]
        cls = rng.integers(0, 3, m)
        u = rng.random(m)[:, None]
        pair = _WAVE_PAIRS[cls]
        X[:] = u * pair[:, 0] + (1.0 - u) * pair[:, 1] + rng.standard_normal((m, 21))
        y[:] = np.where(cls == 0, 1.0, -1.0)

    return _chunked(n, 21, seed, fill)


def twonorm(n: int = 7400, *, seed: int = 0, d: int = 20):
    r"""Breiman's twonorm: ``N(+a 1, I)`` (positive) vs ``N(-a 1, I)``, ``a = 2 / sqrt(20)``.

    Classes equiprobable; the Bayes rule is linear. Reference: Breiman (1996), TR 460.
    """
    d = positive_int("d", d)
    a = 2.0 / np.sqrt(20.0)

    def fill(rng, X, y):
        y[:] = _labels(rng, X.shape[0])
        X[:] = a * y[:, None] + rng.standard_normal(X.shape)

    return _chunked(n, d, seed, fill)


def ringnorm(n: int = 7400, *, seed: int = 0, d: int = 20):
    r"""Breiman's ringnorm: ``N(0, 4 I)`` (positive) vs ``N(a 1, I)``, ``a = 1 / sqrt(20)``.

    Classes equiprobable; the Bayes rule is quadratic. Reference: Breiman (1996), TR 460.
    """
    d = positive_int("d", d)
    a = 1.0 / np.sqrt(20.0)

    def fill(rng, X, y):
        y[:] = _labels(rng, X.shape[0])
        z = rng.standard_normal(X.shape)
        X[:] = np.where(y[:, None] > 0, 2.0 * z, a + z)

    return _chunked(n, d, seed, fill)


# --- ART (Schwaighofer & Tresp, section 6) ----------------------------------------------------

_ART_WIDTH = 0.5
_ART_AMPLITUDE = 1.575
_ART_FUNCTION_SEED = 1
"""The map the BC-SVM tables use. The paper (after Tresp 2000) fixes neither the map nor its
scale relative to the noise, and the scale is invisible without noise: it only sets the Bayes
error under noise, ``E[Phi(-|g(x)| / sigma_psi)]`` (:func:`art_bayes_error`). We kept the
width 0.5 and took map 1 of 4 random ones, whose Bayes errors at sigma_psi = 0.1 and 0.5 can
sit about a point below the paper's SVM errors (7.25% and 19.32%); then fitted the amplitude
so that floor plus the SVM's learning gap on this map (1.7 and 0.9 points, measured at
amplitude 1.5) matches those two errors in least squares: 1.575, floors 6.5% and 18.3%. So the
SVM cells with noise match by construction; the noise-free column and the BC-SVM rows were not
looked at. Unit weights on map 0 (our first guess) had floors of 10.1% and 34.8%, above the
paper's SVM errors: no classifier could have reached them."""


def _art_function(function_seed: int):
    rng = np.random.default_rng([function_seed, 2001])
    centers = rng.uniform(-1.0, 1.0, (5, 5))
    weights = _ART_AMPLITUDE * rng.standard_normal(5)
    # Shift so the noise-free classes are balanced (median over a fixed reference sample).
    ref = np.random.default_rng([function_seed, 2002]).uniform(-1.0, 1.0, (20000, 5))
    offset = np.median(_art_map(ref, centers, weights, 0.0))
    return centers, weights, offset


def _art_map(X, centers, weights, offset):
    d2 = np.sum((X[:, None, :] - centers[None]) ** 2, axis=-1)
    act = np.exp(-0.5 * d2 / _ART_WIDTH**2)
    return act @ weights / np.sum(act, axis=1) - offset


def art(n: int = 10000, *, seed: int = 0, noise: float = 0.1,
        function_seed: int = _ART_FUNCTION_SEED):
    r"""The ART data of the BC-SVM paper: the sign of a noisy normalised-RBF map on [-1, 1]^5.

    ``x ~ U([-1, 1]^5)``; ``g(x) = sum_j w_j phi_j(x) / sum_j phi_j(x) - c`` with 5 Gaussian
    basis functions ``phi_j(x) = exp(-|x - c_j|^2 / (2 * 0.5^2))``; ``y = sign(g(x) + noise e)``,
    ``e ~ N(0, 1)``. The paper (after Tresp 2000) gives only this outline, so the centres
    (uniform in the cube), weights (normal, sd 1.575) and width 0.5 are our reconstruction, drawn
    once from ``function_seed``; ``c`` is the median of ``g`` so the noise-free classes are
    balanced. ``noise`` is the paper's sigma_psi (0, 0.1, 0.5 in its Table 1). The default map
    and the weights' scale were chosen by their Bayes error under noise (see
    :data:`_ART_FUNCTION_SEED`); :func:`art_bayes_error` gives that error.
    """
    noise = nonnegative_float("noise", noise)
    centers, weights, offset = _art_function(_check_seed(function_seed))

    def fill(rng, X, y):
        X[:] = rng.uniform(-1.0, 1.0, X.shape)
        out = _art_map(X, centers, weights, offset) + noise * rng.standard_normal(X.shape[0])
        y[:] = np.where(out >= 0, 1.0, -1.0)

    return _chunked(n, 5, seed, fill)


def art_bayes_error(X, noise: float, *, function_seed: int = _ART_FUNCTION_SEED) -> float:
    r"""Error of the Bayes rule ``sign(g(x))`` on the ART inputs ``X``, averaged over them.

    A label flips with probability ``Phi(-|g(x)| / sigma_psi)``, so the rule's error is the
    mean of that over ``X`` (0 without noise). It is the floor under any classifier's error on
    :func:`art` data with the same ``noise`` and ``function_seed``.
    """
    noise = nonnegative_float("noise", noise)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != 5:
        raise ValueError(f"X must have shape (n, 5) (ART inputs), got {X.shape}")
    if noise == 0:
        return 0.0
    g = _art_map(X, *_art_function(_check_seed(function_seed)))
    return float(np.mean(special.ndtr(-np.abs(g) / noise)))


def checker(n: int = 10000, *, seed: int = 0, grid: int = 4):
    r"""CHECKER: uniform points on [0, 1]^2 labelled by a ``grid x grid`` checkerboard.

    ``y = +1`` where ``floor(grid x1) + floor(grid x2)`` is even. Noise-free (BC-SVM paper,
    section 6).
    """
    grid = positive_int("grid", grid)

    def fill(rng, X, y):
        X[:] = rng.random(X.shape)
        cells = np.floor(grid * X).astype(int).sum(axis=1)
        y[:] = np.where(cells % 2 == 0, 1.0, -1.0)

    return _chunked(n, 2, seed, fill)


# --- SUSY-sized stand-in --------------------------------------------------------------------


def _wrap(phi):
    return (phi + np.pi) % (2.0 * np.pi) - np.pi


def susy(n: int = 100000, *, seed: int = 0, dtype=np.float64):
    r"""A SUSY-sized stand-in: 18 features, 8 'low-level' kinematics and 10 derived ones.

    Modelled on Baldi et al. (2014)'s SUSY data (signal: chargino pairs decaying to two leptons
    and missing energy; background: W pairs). For each event: lepton transverse momenta
    (Gamma, harder for signal), pseudorapidities (Normal, more central for signal), azimuths
    (uniform), missing transverse energy (larger for signal) and its azimuth; then 10
    nonlinear functions of these (relative and axial MET, dilepton mass and pT, transverse
    masses, their minimum, HT, lepton opening angle, MET/HT, a polar-angle proxy). Momenta are
    in units of 100 GeV. Signal fraction 0.46 (as in SUSY). Classes overlap: a well-tuned
    classifier reaches about 19-20% error (gradient boosting 19.3%, logistic regression
    20.2% on 60,000 training rows), close to the real SUSY data.

    Generated in chunks of :data:`CHUNK` rows into preallocated arrays, so 5 million rows need
    only the 720 MB of ``X`` (360 MB with ``dtype=np.float32``) and ``y``, plus one chunk.

    Reference: Baldi, Sadowski and Whiteson (2014). Searching for exotic particles in
    high-energy physics with deep learning. Nature Communications 5, 4308.
    """

    def fill(rng, X, y):
        m = X.shape[0]
        sig = rng.random(m) < 0.46
        y[:] = np.where(sig, 1.0, -1.0)
        scale_pt = np.where(sig, 0.45, 0.32)
        pt1 = 0.2 + rng.gamma(2.0, scale_pt)
        pt2 = 0.2 + rng.gamma(2.0, 0.7 * scale_pt)
        pt1, pt2 = np.maximum(pt1, pt2), np.minimum(pt1, pt2)
        eta_sd = np.where(sig, 0.9, 1.25)
        eta1 = eta_sd * rng.standard_normal(m)
        eta2 = eta_sd * rng.standard_normal(m)
        phi1 = rng.uniform(-np.pi, np.pi, m)
        # Background leptons from W pairs are more back-to-back.
        dphi = np.where(sig, rng.uniform(-np.pi, np.pi, m), np.pi + 0.9 * rng.standard_normal(m))
        phi2 = _wrap(phi1 + dphi)
        met = np.where(sig, rng.gamma(2.5, 0.42, m), rng.gamma(1.6, 0.35, m))
        met_phi = rng.uniform(-np.pi, np.pi, m)
        # Derived features.
        px = pt1 * np.cos(phi1) + pt2 * np.cos(phi2)
        py = pt1 * np.sin(phi1) + pt2 * np.sin(phi2)
        pt_ll = np.hypot(px, py)
        phi_ll = np.arctan2(py, px)
        dphi_min = np.minimum(np.abs(_wrap(met_phi - phi1)), np.abs(_wrap(met_phi - phi2)))
        met_rel = met * np.where(dphi_min < np.pi / 2, np.sin(dphi_min), 1.0)
        axial_met = -met * np.cos(_wrap(met_phi - phi_ll))
        m_ll = np.sqrt(np.maximum(2.0 * pt1 * pt2 * (np.cosh(eta1 - eta2) - np.cos(phi1 - phi2)), 0))
        mt1 = np.sqrt(np.maximum(2.0 * pt1 * met * (1.0 - np.cos(_wrap(met_phi - phi1))), 0.0))
        mt2 = np.sqrt(np.maximum(2.0 * pt2 * met * (1.0 - np.cos(_wrap(met_phi - phi2))), 0.0))
        ht = pt1 + pt2 + met
        X[:] = np.stack(
            [
                pt1, eta1, phi1, pt2, eta2, phi2, met, met_phi,
                met_rel, axial_met, m_ll, pt_ll, mt1, np.minimum(mt1, mt2), ht,
                np.abs(_wrap(phi1 - phi2)), met / ht, np.tanh(0.5 * (eta1 - eta2)),
            ],
            axis=1,
        )

    return _chunked(n, 18, seed, fill, dtype=dtype)


class Generator(NamedTuple):
    fn: Callable
    d: int
    default_n: int
    positive: str
    description: str
    citation: str
    used_by: str


GENERATORS: dict[str, Generator] = {
    "waveform": Generator(
        waveform, 21, 5000, "class 1",
        "Breiman's waveform, class 1 vs classes 2 and 3.",
        "Breiman, L., Friedman, J., Olshen, R. and Stone, C. (1984). Classification and "
        "Regression Trees. Wadsworth.",
        "Wenzel et al. 2017 Table 1 'Waveform' (n=5000); BC-SVM Table 2 'WAVEFORM'",
    ),
    "twonorm_gen": Generator(
        twonorm, 20, 7400, "mean +a", "Breiman's twonorm (any n).",
        "Breiman, L. (1996). Bias, variance and arcing classifiers. TR 460, UC Berkeley.",
        "IDA benchmarks",
    ),
    "ringnorm": Generator(
        ringnorm, 20, 7400, "N(0, 4I)", "Breiman's ringnorm (any n).",
        "Breiman, L. (1996). Bias, variance and arcing classifiers. TR 460, UC Berkeley.",
        "IDA benchmarks",
    ),
    "art": Generator(
        art, 5, 10000, "g(x) + noise >= 0",
        "ART: sign of a normalised-RBF map on [-1,1]^5 plus noise sigma_psi (default 0.1).",
        "Schwaighofer, A. and Tresp, V. (2001). The Bayesian committee support vector "
        "machine. ICANN, 411-417.",
        "BC-SVM Table 1 'ART'",
    ),
    "checker": Generator(
        checker, 2, 10000, "even cells", "CHECKER: 4x4 checkerboard on the unit square.",
        "Schwaighofer, A. and Tresp, V. (2001). The Bayesian committee support vector "
        "machine. ICANN, 411-417.",
        "BC-SVM Table 1 'CHECKER'",
    ),
    "susy": Generator(
        susy, 18, 100000, "signal",
        "SUSY-sized stand-in: 8 kinematic + 10 derived features, signal fraction 0.46.",
        "Baldi, P., Sadowski, P. and Whiteson, D. (2014). Nature Communications 5, 4308 "
        "(the real data this imitates).",
        "Wenzel et al. 2017 SUSY scaling experiment",
    ),
}
