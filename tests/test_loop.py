from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm.inference.loop import relative_change, run


class S(NamedTuple):
    x: jnp.ndarray


class Info(NamedTuple):
    x: jnp.ndarray
    delta: jnp.ndarray


def halve(state, data):
    x = state.x * data
    return S(x), Info(x, jnp.abs(x - state.x))


def small(info, tol):
    return info.delta < tol


def test_stops_on_tolerance_and_records_trace():
    res = run(halve, S(jnp.asarray(1.0)), jnp.asarray(0.5), max_iter=100, tol=1e-3, converged=small)
    assert res.stop_reason == "tol"
    # deltas are 0.5, 0.25, ...: the first below 1e-3 is 2^-10, at step 10
    assert res.n_iter == 10
    np.testing.assert_allclose(res.infos.x, 0.5 ** np.arange(1, 11))


def test_stops_at_the_cap():
    res = run(halve, S(jnp.asarray(1.0)), jnp.asarray(0.5), max_iter=5, tol=0.0, converged=small)
    assert res.stop_reason == "max_iter" and res.n_iter == 5 and res.infos.x.shape == (5,)


def test_min_iter_and_validation():
    res = run(halve, S(jnp.asarray(1.0)), jnp.asarray(0.5), max_iter=50, tol=1.0, converged=small, min_iter=4)
    assert res.n_iter == 4
    with pytest.raises(ValueError, match="max_iter"):
        run(halve, S(jnp.asarray(1.0)), 0.5, max_iter=0, tol=1e-3, converged=small)
    with pytest.raises(ValueError, match="tol"):
        run(halve, S(jnp.asarray(1.0)), 0.5, max_iter=3, tol=np.nan, converged=small)


def test_relative_change():
    assert float(relative_change(3.0, 1.0)) == pytest.approx(0.5)
