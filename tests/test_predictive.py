import jax
import numpy as np
import pytest
from scipy import integrate, stats

from ppl_bsvm.predictive import LINKS, class_probability, normalized_link



@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


CASES = [(0.3, 0.5), (-1.2, 2.0), (2.5, 0.01), (0.0, 1.0), (0.8, 9.0)]


@pytest.mark.parametrize("m, v", CASES)
def test_links_against_numerical_integration(m, v):
    sd = np.sqrt(v)
    dens = lambda f: stats.norm.pdf(f, m, sd)  # noqa: E731
    lim = (m - 12 * sd, m + 12 * sd)
    probit = integrate.quad(lambda f: stats.norm.cdf(f) * dens(f), *lim)[0]
    norm = integrate.quad(lambda f: float(normalized_link(f)) * dens(f), *lim, points=[-1, 1], limit=200)[0]
    assert float(class_probability(m, v, "probit")) == pytest.approx(probit, abs=1e-9)
    assert float(class_probability(m, v, "normalized")) == pytest.approx(norm, abs=1e-8)
    assert float(class_probability(m, v, "sign")) == pytest.approx(stats.norm.sf(0, m, sd))
    assert float(class_probability(m, v, "paper")) == pytest.approx(stats.norm.cdf(m / (v + 1)))


def test_normalized_link_is_the_ratio_of_pseudo_likelihoods():
    f = np.linspace(-3, 3, 13)
    lp, ln = np.exp(-2 * np.maximum(0, 1 - f)), np.exp(-2 * np.maximum(0, 1 + f))
    np.testing.assert_allclose(normalized_link(f), lp / (lp + ln), rtol=1e-12)


def test_zero_variance_sign_link():
    p = class_probability(np.array([-1.0, 0.0, 2.0]), np.zeros(3), "sign")
    np.testing.assert_array_equal(p, [0.0, 0.5, 1.0])
    m = np.array([-2.0, 0.3, 1.5])
    np.testing.assert_allclose(class_probability(m, np.zeros(3), "normalized"), normalized_link(m))


@pytest.mark.parametrize("link", LINKS)
def test_links_are_monotone_in_the_mean(link):
    p = np.asarray(class_probability(np.linspace(-4, 4, 50), np.full(50, 0.7), link))
    assert np.all(np.diff(p) > 0) and np.all((p > 0) & (p < 1))


def test_unknown_link():
    with pytest.raises(ValueError, match="valid links"):
        class_probability(0.0, 1.0, "logit")


def test_the_normalized_link_in_float32_then_in_float64():
    """A float32 call first, as a user without x64 makes it, then a float64 one: each traces
    its own quadrature nodes (a float32 constant cached by the first call made the second
    fail to lower, issue 34), and float32 stays a probability far out (it returned 1.23 at
    mean 3e4, var 1e-6), within its precision of float64's answer."""
    from ppl_bsvm.predictive import _class_probability

    m = np.array([0.3, -1.2, 2.5, 30.0, 3e2, 3e4, -3e4, 1e6])
    v = np.array([0.5, 2.0, 0.01, 0.01, 4.0, 1e-6, 1e-6, 1.0])
    with jax.enable_x64(False):
        p32 = np.asarray(jax.jit(lambda a, b: _class_probability(a, b, "normalized", 1.0))(
            m.astype(np.float32), v.astype(np.float32)))
    p64 = np.asarray(jax.jit(lambda a, b: _class_probability(a, b, "normalized", 1.0))(m, v))
    assert p32.dtype == np.float32 and p64.dtype == np.float64
    assert np.all((p32 >= 0) & (p32 <= 1)) and np.all((p64 >= 0) & (p64 <= 1))
    np.testing.assert_allclose(p32, p64, atol=1e-5)


@pytest.mark.parametrize("var", [1e-30, 1e-20, 1e-17])
def test_a_vanishing_variance_gives_the_link_at_the_mean(var):
    """Below sqrt(eps) (1 + |mean|) the quadrature nodes are the mean to half the digits (it
    returned 1.02 and 2.81 at var 1e-30): the point mass is used, exact to gamma^2 var."""
    m = np.array([0.3, 2.0, -0.5, 1.0, -1.0])
    np.testing.assert_allclose(class_probability(m, np.full(5, var), "normalized"),
                               normalized_link(m), rtol=0, atol=1e-12)


def test_class_probability_is_float64_in_a_float32_session():
    """Called without x64 (JAX's default), it still computes in float64: it used to return
    float64 arrays holding float32 results (0.60790437 for 0.6079043853)."""
    with jax.enable_x64(False):
        p = class_probability(np.array([0.3, -1.2]), np.array([0.2, 2.0]), "probit")
        draws = class_probability(np.full((3, 2), 0.3), np.full((3, 2), 0.2), "probit")
    np.testing.assert_allclose(p, stats.norm.cdf(np.array([0.3, -1.2]) / np.sqrt([1.2, 3.0])),
                               rtol=1e-14)
    np.testing.assert_allclose(draws, stats.norm.cdf(0.3 / np.sqrt(1.2)), rtol=1e-14)
    assert draws.shape == (3, 2)
