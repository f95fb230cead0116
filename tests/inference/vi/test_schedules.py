"""Learning rates: Robbins-Monro, constant, inverse time, the adaptive rate; option parsing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm.inference.vi import schedules


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def test_robbins_monro_values_and_conditions():
    s = schedules.robbins_monro(tau=4.0, kappa=0.7)
    t = np.arange(10)
    np.testing.assert_allclose([float(s(i)) for i in t], (t + 4.0) ** -0.7, rtol=1e-12)
    assert float(s(0)) <= 1.0
    assert float(schedules.robbins_monro(1.0, 0.0)(123)) == 1.0  # kappa 0: constant 1
    with pytest.raises(ValueError, match="tau must be >= 1"):
        schedules.robbins_monro(tau=0.5)
    with pytest.raises(ValueError, match="kappa"):
        schedules.robbins_monro(kappa=1.5)


def test_schedules_are_jittable_and_hashable():
    s = schedules.robbins_monro()
    assert float(jax.jit(s)(jnp.asarray(3))) == pytest.approx(4.0**-0.6)
    assert hash(s) == hash(schedules.robbins_monro()) and s == schedules.RobbinsMonro(1.0, 0.6)
    assert float(schedules.inverse_time(0.1, 10.0, 1.0)(10)) == pytest.approx(0.05)
    assert float(schedules.constant(0.3)(7)) == 0.3


def test_a_users_schedule_function_is_one_static_value_however_often_it_is_passed():
    """The engines compile the schedule in: two wrappers of one function are equal (one
    program for every fit that passes it), of two functions not."""
    def rate(t):
        return 0.5 / (1.0 + t)

    def other(t):
        return 0.5 / (1.0 + t)

    a, b = schedules.as_rate(rate), schedules.as_rate(rate)
    assert a == b and hash(a) == hash(b)
    assert a != schedules.as_rate(other) and a != rate
    assert schedules.as_step_size(rate, "hyper_lr") == schedules.as_step_size(rate, "hyper_lr")


def test_adaptive_rate_is_one_for_a_deterministic_gradient_and_small_for_noise():
    rate = schedules.adaptive(tau0=10.0, num_init=5)
    g = jnp.asarray([1.0, -2.0, 0.5])
    state = rate.init(jnp.stack([g] * 5))
    for t in range(20):
        rho, state = rate.update(g, state, t)
        assert float(rho) == pytest.approx(1.0)
    # pure noise around zero: the rate falls towards |mean|^2 / E|g|^2 ~ 1 / window
    r = np.random.default_rng(0)
    noise = jnp.asarray(r.standard_normal((400, 3)))
    state = rate.init(noise[:5])
    rhos = []
    for t in range(5, 400):
        rho, state = rate.update(noise[t], state, t)
        rhos.append(float(rho))
    assert 0 < min(rhos) and max(rhos[-100:]) < 0.1
    assert float(state.tau) > 50  # the memory grew


def test_as_rate_and_as_step_size():
    assert isinstance(schedules.as_rate("robbins_monro"), schedules.RobbinsMonro)
    assert isinstance(schedules.as_rate("adaptive"), schedules.Adaptive)
    assert float(schedules.as_rate(0.25)(3)) == 0.25
    assert float(schedules.as_rate(lambda t: 0.5)(1)) == 0.5
    for bad in ("fast", 0.0, 1.5, None, True):
        with pytest.raises(ValueError, match="learning_rate"):
            schedules.as_rate(bad)
    assert float(schedules.as_step_size(2.0, "hyper_lr")(5)) == 2.0
    with pytest.raises(ValueError, match="hyper_lr"):
        schedules.as_step_size(-1.0, "hyper_lr")
    with pytest.raises(ValueError, match="hyper_lr"):
        schedules.as_step_size(schedules.adaptive(), "hyper_lr")
