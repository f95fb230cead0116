"""PSIS of a VI fit (``inference/vi/psis.py``): q equal to the target, q slightly too wide
(corrections recover the target's moments), q much too narrow (k-hat large), and the linear
model's fits against grid quadrature."""

import re

import numpy as np
import pytest
from scipy.special import logsumexp

import ppl_bsvm
from ppl_bsvm.inference.vi import psis as P


def _gaussian_case(q_scale, dim=4, S=4000, seed=0):
    """Draws of ``q = N(0, q_scale^2 I)`` and the log ratios to the target ``N(0, I)``."""
    x = q_scale * np.random.default_rng(seed).standard_normal((S, dim))
    log_p = -0.5 * np.sum(x**2, axis=1)
    log_q = -0.5 * np.sum((x / q_scale) ** 2, axis=1) - dim * np.log(q_scale)
    return x, log_p - log_q


def test_q_equal_to_the_target_gives_uniform_weights():
    x, r = _gaussian_case(1.0)
    out = P.psis(r, x)
    assert out.khat == 0.0 and out.ess == pytest.approx(len(x))
    np.testing.assert_allclose(out.mean, x.mean(0), atol=1e-12)
    np.testing.assert_allclose(out.sd, x.std(0), rtol=1e-10)


def test_a_flat_tail_of_tied_ratios_gives_the_raw_weights():
    """The largest ratios tied (inputs of 1e148 made them so): ArviZ's tail fit raises "All
    tail values are the same"; such a tail is the lightest there is, so the raw ratios are
    the weights, with k-hat 0."""
    rng = np.random.default_rng(0)
    ratios = np.concatenate([np.zeros(150), -rng.uniform(1.0, 5.0, 50)])
    draws = rng.standard_normal((200, 2))
    result = P.psis(ratios, draws)
    w = np.exp(ratios - logsumexp(ratios))
    assert result.khat == 0.0
    np.testing.assert_allclose(result.mean, w @ draws, rtol=1e-12)


def test_q_slightly_wide_is_trusted_and_corrected():
    x, r = _gaussian_case(1.2)
    out = P.psis(r, x)
    assert out.khat < 0.5
    # the weighted sds recover the target's 1 (q's are 1.2); Monte-Carlo error of a
    # weighted sd about 1 / sqrt(2 ESS) (ESS > 2000 here)
    assert out.ess > 2000
    np.testing.assert_allclose(out.sd, 1.0, atol=5 / np.sqrt(2 * out.ess))
    np.testing.assert_allclose(out.mean, 0.0, atol=5 / np.sqrt(out.ess))


def test_q_much_too_narrow_is_flagged_and_not_corrected():
    x, r = _gaussian_case(0.5)
    out = P.psis(r, x)
    assert out.khat > P.KHAT_OK and out.mean is None and out.sd is None
    assert out.ess < 100


def test_too_few_draws_or_non_finite_ratios_give_none():
    x, r = _gaussian_case(1.2, S=50)
    assert P.psis(r, x) is None
    x, r = _gaussian_case(1.2)
    r[3] = np.nan
    assert P.psis(r, x) is None


def test_linear_fits_against_grid_quadrature():
    """d = 2 (no intercept), truth by quadrature: mean-field VI is flagged, linear response
    is trusted and its corrected means and sds agree with the grid's within Monte-Carlo error."""
    r = np.random.default_rng(5)
    X = r.standard_normal((40, 2))
    y = np.where(X @ np.array([1.0, -0.7]) + 0.8 * r.standard_normal(40) > 0, 1.0, -1.0)
    Z = y[:, None] * X
    g = np.linspace(-4, 4, 321)
    B = np.stack(np.meshgrid(g, g, indexing="ij"), -1)
    lp = -0.5 * np.sum(B**2, -1) - 2 * np.sum(np.maximum(0, 1 - B @ Z.T), -1)
    w = np.exp(lp - logsumexp(lp))
    mean = np.einsum("ij,ijk->k", w, B)
    sd = np.sqrt(np.einsum("ij,ijk->k", w, (B - mean) ** 2))
    mf = ppl_bsvm.fit(X, y, model="linear", method="vi", intercept=False, num_draws=4000)
    lr = ppl_bsvm.fit(X, y, model="linear", method="vi", intercept=False, num_draws=4000,
                      linear_response=True)
    a_mf, a_lr = mf.idata["approximation"], lr.idata["approximation"]
    assert float(a_mf["psis_khat"]) > P.KHAT_OK and "beta_sd_psis" not in a_mf
    assert float(a_lr["psis_khat"]) < P.KHAT_OK
    ess = float(a_lr["psis_ess"])
    assert np.all(np.abs(a_lr["beta_mean_psis"].values - mean) < 5 * sd / np.sqrt(ess))
    assert np.all(np.abs(a_lr["beta_sd_psis"].values / sd - 1) < 5 / np.sqrt(2 * ess))
    assert re.search(r"PSIS k-hat\s+\d\.\d\d \(", lr.summary())
    assert re.search(r"covariance\s+linear response", lr.summary())
    assert "far from the exact posterior" in mf.summary()


def test_linear_log_ratios_over_blocks_equal_the_direct_formula():
    import jax

    r = np.random.default_rng(1)
    n, p, S = P.CHUNK + 300, 3, 50  # two blocks, the second padded
    Z = r.standard_normal((n, p))
    mean = r.standard_normal(p)
    F = np.tril(r.standard_normal((p, p))) + 2 * np.eye(p)
    draws = mean + r.standard_normal((S, p)) @ F.T
    with jax.enable_x64(True):
        got = np.asarray(P.linear_log_ratios(Z, 1.5, 0.7, mean, F, draws))
    white = np.linalg.solve(F, (draws - mean).T)
    direct = (-0.5 * np.sum(draws**2, 1) / 1.5**2
              - 1.4 * np.sum(np.maximum(0, 1 - draws @ Z.T), 1)
              + 0.5 * np.sum(white**2, 0) + np.sum(np.log(np.diag(F))))
    np.testing.assert_allclose(got, direct, rtol=1e-12)


def test_the_khat_verdict_depends_on_the_dimension_and_on_what_the_fit_used():
    """Issue 30: a linear-response fit must not be told to try linear response, and above a
    few dozen dimensions a large k-hat is read as a statement about the joint ratio."""
    assert P.khat_verdict(0.3).startswith("good")
    assert P.khat_verdict(0.6, 500, False).startswith("usable")
    small_mf = P.khat_verdict(1.2, 2, False)
    assert "far from the exact posterior" in small_mf and "linear_response=True widens" in small_mf
    big_lr = P.khat_verdict(1.02, 31, True)
    assert "in 31 dimensions" in big_lr and "already asked for" in big_lr
    assert "far from the exact posterior" not in big_lr and "widens" not in big_lr
    assert "linear_response" not in P.khat_verdict(0.9, 3, None)
