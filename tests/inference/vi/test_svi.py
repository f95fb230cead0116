"""Stochastic VI in epochs: the minibatch stream, the ELBO estimate and the stopping rule."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm import kernels
from ppl_bsvm.inference.vi._svi import (
    batch_order,
    batches_init,
    estimate_init,
    estimate_push,
    next_batch,
    stream_keys,
    period_points,
)


@pytest.mark.parametrize("size, n, batch", [(10, 10, 3), (16, 11, 4), (16, 11, 11), (9, 9, 9)])
def test_every_epoch_visits_every_point_once_and_never_the_padding(size, n, batch):
    with jax.enable_x64(True):
        order = batch_order(jax.random.key(4), size, n)
        keys = stream_keys(jax.random.key(3), 0)
        state, key = batches_init(keys, order, n), keys.loop
        stream = []
        for _ in range(40):
            key, sub = jax.random.split(key)
            idx, state = next_batch(sub, state, order, batch, n)
            stream.append(np.asarray(idx))
    stream = np.concatenate(stream)
    epochs = stream[: (len(stream) // n) * n].reshape(-1, n)
    assert len(epochs) >= 3
    for epoch in epochs:  # consecutive blocks of n stream positions are permutations
        np.testing.assert_array_equal(np.sort(epoch), np.arange(n))
    assert not all(np.array_equal(epochs[0], e) for e in epochs[1:])  # reshuffled


def test_epoch_multipliers_are_coprime_to_n():
    """Every epoch's map i -> (a i + c) mod n is a bijection: a is drawn among the candidates
    coprime to n only (n = 2^3 3^2 5 7 has many that are not)."""
    n = 2520
    with jax.enable_x64(True):
        order = batch_order(jax.random.key(0), n)
        k = int(order.coprime)
        a = np.asarray(order.multipliers)
    assert 1 <= k < len(a)
    assert np.all(np.gcd(a[:k], n) == 1) and not np.any(np.gcd(a[k:], n) == 1)


def test_estimate_of_whole_epochs_is_the_sum_of_the_terms():
    r = np.random.default_rng(0)
    n, batch = 23, 5
    terms = r.normal(-1.0, 0.5, size=(10 * n,))
    with jax.enable_x64(True):
        est = estimate_init(jnp.float64)
        closed = []
        for start in range(0, len(terms) - batch + 1, batch):
            est, value, delta = estimate_push(est, jnp.asarray(terms[start:start + batch]),
                                              lambda: 2.5, n, n)
            if np.isfinite(float(value)):
                closed.append((float(value), float(delta), start + batch))
    # a period closes at every multiple of n stream positions; its value is the sum of exactly
    # the terms of those positions, minus the KL
    for k, (value, delta, end) in enumerate(closed):
        assert end - batch < (k + 1) * n <= end
        assert value == pytest.approx(terms[k * n:(k + 1) * n].sum() - 2.5, rel=1e-12)
        if k == 0:
            assert delta == np.inf
        else:  # whole epochs have no sampling error: delta is the plain relative change
            previous = closed[k - 1][0]
            assert delta == pytest.approx(abs(value - previous) / (1 + abs(value)), rel=1e-10)


def test_estimate_of_part_epochs_has_the_sampling_error_of_sampling_without_replacement():
    """Periods of P < n points drawn without replacement: the scaled sum's variance is
    n^2 s^2 / P (1 - P / n); the estimate's own variance term matches a simulation."""
    r = np.random.default_rng(1)
    n, period = 400, 100
    population = r.gamma(2.0, 1.0, size=n)
    samples = np.stack([r.choice(population, period, replace=False) for _ in range(400)])

    def one_period(sample):
        est, value, _ = estimate_push(estimate_init(jnp.float64), sample, lambda: 0.0, n, period)
        return value, est.last_var

    with jax.enable_x64(True):  # one program for the 400 periods (not 400 compilations)
        sums, claimed = map(np.asarray, jax.jit(jax.vmap(one_period))(jnp.asarray(samples)))
    exact = n**2 * population.var(ddof=1) / period * (1 - period / n)
    assert np.var(sums, ddof=1) == pytest.approx(exact, rel=0.2)  # 400 draws: sd of 7 %
    assert np.mean(claimed) == pytest.approx(exact, rel=0.05)
    assert np.mean(sums) == pytest.approx(population.sum(), rel=0.01)


def test_period_points():
    assert period_points(270, 100, 1.0) == 270
    assert period_points(270, 100, 0.1) == 100  # at least a batch
    assert period_points(10**6, 10**4, 0.25) == 250_000


def _toy(n=120, seed=5):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, 2))
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * r.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def test_sbsvm_stops_after_a_few_epochs_at_the_full_batch_answer():
    """The old rule could not stop before 1000 steps (100 epochs here); the epoch estimate stops
    after a few dozen epochs, with the latent marginals of the full-batch fixed point."""
    X, y = _toy()
    kernel = kernels.RBF(lengthscale=1.0)
    Z = X[::6]
    full = ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=kernel, inducing=Z,
                        batch_size=len(y), learning_rate=1.0, tol=1e-12, max_iter=500,
                        num_draws=10)
    fit = ppl_bsvm.fit(X, y, model="gp", method="svi", kernel=kernel, inducing=Z,
                       batch_size=12, num_draws=10, seed=1)
    epochs = fit.n_iter * 12 / len(y)
    assert fit.stop_reason == "tol" and 2 <= epochs <= 60
    a, b = full.idata["approximation"], fit.idata["approximation"]
    sd = np.sqrt(a["f_var"].values)
    assert np.max(np.abs(b["f_mean"].values - a["f_mean"].values) / sd) < 0.15
    # the trace holds one estimate per epoch, close to the exact ELBO at the end
    assert len(fit.trace["elbo"]) == int(epochs)
    assert fit.trace["elbo"][-1] == pytest.approx(float(a["elbo"]), abs=0.05 * abs(float(a["elbo"])))


def test_linear_svi_stops_in_epochs_near_batch_vi(heart):
    X, y = heart
    vi = ppl_bsvm.fit(X, y, model="linear", method="vi")
    svi = ppl_bsvm.fit(X, y, model="linear", method="svi", batch_size=27, seed=2)
    assert svi.stop_reason == "tol" and svi.n_iter * 27 / len(y) < 100
    a, b = vi.idata["approximation"], svi.idata["approximation"]
    sd = np.sqrt(np.diag(a["beta_cov"].values))
    assert np.max(np.abs(b["beta_mean"].values - a["beta_mean"].values) / sd) < 0.1
