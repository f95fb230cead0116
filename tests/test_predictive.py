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
