from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm._jax import committed
from ppl_bsvm.inference.loop import SEGMENT, relative_change, run


class S(NamedTuple):
    x: jnp.ndarray


class Info(NamedTuple):
    x: jnp.ndarray
    delta: jnp.ndarray


def halve(_static, _key, state, data):
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


class Blowup(NamedTuple):
    x: jnp.ndarray
    scratch: jnp.ndarray  # NaN by design: not checked

    nonfinite_ok = ("scratch",)


def blow_up_at_3(_static, _key, state, data):
    i = state.x + 1.0
    x = jnp.where(i >= 3.0, jnp.nan, i)
    return Blowup(x, state.scratch), Info(x, jnp.asarray(1.0))


def test_a_non_finite_state_stops_the_loop_naming_the_step_iteration_and_field():
    start = Blowup(jnp.asarray(0.0), jnp.asarray(jnp.nan))
    with pytest.raises(FloatingPointError, match=r"blow_up_at_3 .*iteration 3 in state\.x;"):
        run(blow_up_at_3, start, None, max_iter=10, tol=0.0, converged=small)
    # declared nonfinite_ok fields alone never stop it
    ok = run(blow_up_at_3, start, None, max_iter=2, tol=0.0, converged=small)
    assert ok.n_iter == 2 and ok.stop_reason == "max_iter"


def test_resume_continues_to_the_uninterrupted_result():
    one = run(halve, S(jnp.asarray(1.0)), jnp.asarray(0.5), max_iter=8, tol=0.0, converged=small)
    part = run(halve, S(jnp.asarray(1.0)), jnp.asarray(0.5), max_iter=3, tol=0.0, converged=small)
    rest = run(halve, None, jnp.asarray(0.5), max_iter=8, tol=0.0, converged=small, resume=part)
    assert rest.n_iter == 8 and rest.stop_reason == "max_iter"
    np.testing.assert_array_equal(rest.infos.x, one.infos.x)
    np.testing.assert_array_equal(rest.state.x, one.state.x)
    # min_iter counts the earlier iterations; a run stopped on tol is returned as it is
    tol = run(halve, S(jnp.asarray(1.0)), jnp.asarray(0.5), max_iter=100, tol=1e-3,
              converged=small, min_iter=5)
    again = run(halve, None, jnp.asarray(0.5), max_iter=200, tol=1e-3, converged=small,
                resume=tol)
    assert again is tol
    resumed = run(halve, None, jnp.asarray(0.5), max_iter=100, tol=0.3, converged=small,
                  min_iter=5, resume=part)
    assert resumed.n_iter == 5  # deltas are below 0.3 from step 2, min_iter holds until 5


def noisy_walk(scale, key, state, data):
    x = state.x + scale * data * jax.random.normal(key)
    return S(x), Info(x, jnp.asarray(1.0))


def test_the_loop_passes_keys_in_and_a_resumed_run_continues_their_stream():
    key = jax.random.key(7)
    one = run(noisy_walk, S(jnp.asarray(0.0)), jnp.asarray(1.0), static=2.0, key=key,
              max_iter=9, tol=0.0, converged=small)
    part = run(noisy_walk, S(jnp.asarray(0.0)), jnp.asarray(1.0), static=2.0, key=key,
               max_iter=4, tol=0.0, converged=small)
    rest = run(noisy_walk, None, jnp.asarray(1.0), static=2.0, max_iter=9, tol=0.0,
               converged=small, resume=part)
    np.testing.assert_array_equal(rest.infos.x, one.infos.x)
    # step t is given sub_t of key_t, sub_t = split(key_{t-1}): an independent normal each time
    keys, expected, x = key, [], 0.0
    for _ in range(9):
        keys, sub = jax.random.split(keys)
        x = x + 2.0 * float(jax.random.normal(sub))
        expected.append(x)
    np.testing.assert_allclose(one.infos.x, expected, rtol=1e-5)  # float32 here
    assert len(set(np.round(np.diff(one.infos.x), 12))) == 8  # a fresh draw at every step


def test_committed_commits_in_place_and_leaves_the_rest():
    loose = jnp.asarray(2.0) * 3  # eager: weak-typed and not committed
    placed = jax.device_put(np.ones(3), jax.devices()[0])
    out = committed((loose, placed, np.zeros(2), 1.5))
    assert not loose.committed and out[0].committed and out[0].aval.weak_type
    assert out[0].unsafe_buffer_pointer() == loose.unsafe_buffer_pointer()  # no copy
    assert out[1] is placed and isinstance(out[2], np.ndarray) and out[3] == 1.5
    host = (np.zeros(2), 1.5)  # no device: as it is (so is a state sharded over a mesh's
    assert committed(host) is host  # devices: test_sbsvm_scale's distributed runs)
    # under an outer jit (a stored program called from another program's trace): as it is
    assert float(jax.jit(lambda x: committed((x, loose))[0])(1.0)) == 1.0


def test_a_run_compiles_its_loop_once_whatever_the_commitment_of_its_start():
    """The segments return their state and key committed to the device (the outputs of a
    stored program, ``ppl_bsvm._programs``), while a first state or key need not be (eager
    JAX, ``key_from_seed``) and a loaded checkpoint's never is; JAX compiles a program again
    for arguments that differ in commitment alone. B-BSVM (a library step, so a stored
    program) in three segments from an uncommitted start, then resumed from its state as a
    loaded fit holds it: one compilation (two segments compiled two before a stored program
    committed its arguments, and the resumed run a third). ``min_iter`` above ``max_iter``
    keeps both runs from stopping at ``tol``: on 7 points B-BSVM reaches a fixed point whose
    step changes nothing (``delta == 0 <= tol``), and a run that stopped at ``tol`` is not
    resumed (a fresh clone with JAX 0.12.1 got there at the first run's last step)."""
    from ppl_bsvm.inference.vi import bbsvm
    from ppl_bsvm.kernels import RBF
    from tests._shared import compilations

    r = np.random.default_rng(3)
    X, y = r.normal(size=(7, 2)), np.tile([1.0, -1.0], 4)[:7]  # a shape no other test fits
    with jax.enable_x64(True):
        static = bbsvm.Static(RBF())
        data = bbsvm.BBSVMData(jnp.asarray(X), jnp.asarray(y), jnp.asarray(1.0),
                               jnp.asarray(1e-6))
        start = bbsvm.init(static, None, data, RBF().init_params(X))
        with compilations() as count:
            part = run(bbsvm.step, start, data, static=static, max_iter=2 * SEGMENT + 5, tol=0.0,
                       min_iter=2 * SEGMENT + 6)
        assert part.n_iter == 2 * SEGMENT + 5 and part.stop_reason == "max_iter"
        assert count[0] == 1
        loaded = part._replace(state=jax.tree.map(lambda a: jax.device_put(np.asarray(a)),
                                                  part.state))
        with compilations() as count:
            rest = run(bbsvm.step, None, data, static=static, max_iter=3 * SEGMENT, tol=0.0,
                       min_iter=3 * SEGMENT + 1, resume=loaded)
        assert rest.n_iter == 3 * SEGMENT and count[0] == 0
