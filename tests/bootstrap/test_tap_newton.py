"""The Newton-Krylov replica-TAP solver (``tap_newton``) against the damped iteration.

Its Jacobian products against central differences of the sweep, and its fixed point against
the one the damped parallel iteration of spec 5.2 (``tap.solve``) reaches, for the three
models, at small, medium and large ``S/N``, from the spec's start and from a warm start.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm import datasets, kernels
from ppl_bsvm.bootstrap import tap, tap_newton


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="module")
def small():
    """60 Crabs points, RBF width 3 (N small enough for a fast damped reference)."""
    X, y = datasets.load("crabs", standardize=True)
    idx = np.random.default_rng(0).permutation(len(y))[:60]
    with jax.enable_x64(True):
        k = kernels.RBF(lengthscale=3.0)
        K = kernels.gram(k, k.init_params(X), jnp.asarray(X[idx], jnp.float64), 1e-6)
    return K, X[idx], y[idx]


def _data(small, model, ratio):
    K, X, y = small
    target = X[:, 0] if model == "regression" else y
    return tap.TAPData(K, jnp.asarray(target, jnp.float64), jnp.asarray(ratio),
                       jnp.asarray(0.5), jnp.asarray(0.3))


def _config(model):
    return tap.TAPConfig(model, 0 if model == "hard" else 40, 1.0)


def _sites(state):
    return np.concatenate([np.asarray(state.Lambda), np.asarray(state.gamma), np.asarray(state.lam)])


@pytest.mark.parametrize("model, ratio", [("hard", 1.0), ("regression", 2.0)])
def test_jacobian_products_match_central_differences(small, model, ratio):
    data = _data(small, model, ratio)
    config = _config(model)
    state, *_ = tap.solve(config, tap.init(None, None, data), data, tol=1e-3, max_iter=500)
    theta = jnp.asarray(_sites(state))
    ncfg = tap_newton.NewtonConfig(config)
    v = jnp.asarray(np.random.default_rng(1).standard_normal(theta.size)) * (jnp.abs(theta) + 1e-3)

    @jax.jit
    def both(theta, v, h):
        def sweep(t):
            return tap_newton.evaluate(ncfg, t, data)[0]

        fd = (sweep(theta + h * v) - sweep(theta - h * v)) / (2 * h)
        _, _, G, marginals = tap_newton.evaluate(ncfg, theta, data)
        return fd, tap_newton.jacobian_product(ncfg, theta, G, marginals, data)(v)

    fd, jv = (np.asarray(a) for a in both(theta, v, 1e-6))
    assert np.max(np.abs(jv - fd)) < 1e-6 * np.max(np.abs(fd))
    wrong, _ = (np.asarray(a) for a in both(theta, v.at[0].add(theta[0]), 1e-6))
    assert np.max(np.abs(wrong - jv)) > 1e-3 * np.max(np.abs(fd))  # the check can fail


@pytest.mark.parametrize(
    "model, ratio", [("hard", 1.0), ("hard", 4.0), ("soft", 1.0), ("regression", 2.0)]
)
def test_newton_reaches_the_fixed_point_of_the_damped_iteration(small, model, ratio):
    data = _data(small, model, ratio)
    config = _config(model)
    start = tap.init(None, None, data)
    old, _, n_old, done_old = tap.solve(config, start, data, tol=1e-11, max_iter=5000)
    ncfg = tap_newton.NewtonConfig(config)
    new, _, n_new, done_new = tap_newton.solve(
        ncfg, tap_newton.init(ncfg, None, data, start), data, tol=1e-11, max_iter=300
    )
    assert bool(done_old) and bool(done_new)
    a, b = _sites(old), _sites(new)
    scale = np.abs(a) + 1e-8 * np.max(np.abs(a))
    assert np.max(np.abs(a - b) / scale) < 1e-7
    assert float(new.mismatch) < 1e-11  # the returned sites themselves meet tol
    assert int(n_new) < int(n_old)  # fewer factorisations than damped sweeps


def test_warm_start_from_a_nearby_ratio_reaches_the_same_fixed_point(small):
    config = _config("hard")
    ncfg = tap_newton.NewtonConfig(config)
    near = _data(small, "hard", 1.5)
    data = _data(small, "hard", 2.0)
    warm, *_ = tap_newton.solve(
        ncfg, tap_newton.init(ncfg, None, near, tap.init(None, None, near)), near,
        tol=1e-11, max_iter=300,
    )
    warm_start = tap.TAPState(warm.Lambda, warm.gamma, warm.lam, jnp.asarray(0.5), warm.mismatch)
    cold, *_ = tap_newton.solve(
        ncfg, tap_newton.init(ncfg, None, data, tap.init(None, None, data)), data,
        tol=1e-11, max_iter=300,
    )
    hot, _, n_hot, done = tap_newton.solve(
        ncfg, tap_newton.init(ncfg, None, data, warm_start), data, tol=1e-11, max_iter=300
    )
    assert bool(done)
    a, b = _sites(cold), _sites(hot)
    assert np.max(np.abs(a - b) / (np.abs(a) + 1e-8 * np.max(np.abs(a)))) < 1e-7


def test_gmres_solves_a_nonsymmetric_system_and_stops_at_its_tolerance(rng):
    n = 40
    A = np.eye(n) + 0.4 * rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)
    x_ref = np.linalg.solve(A, b)
    full = np.asarray(tap_newton.gmres(lambda u: jnp.asarray(A) @ u, jnp.asarray(b), 1e-14, n))
    np.testing.assert_allclose(full, x_ref, rtol=1e-10, atol=1e-12)
    loose = np.asarray(tap_newton.gmres(lambda u: jnp.asarray(A) @ u, jnp.asarray(b), 1e-3, n))
    residual = np.linalg.norm(A @ loose - b) / np.linalg.norm(b)
    assert residual < 1e-3
    assert residual > 1e-12  # it stopped early (else the tolerance is not used)
    # a right-hand side in a 2-dimensional invariant subspace: exact after two products
    D = np.diag(np.arange(1.0, n + 1))
    two = np.zeros(n)
    two[[3, 7]] = 1.0
    out = np.asarray(tap_newton.gmres(lambda u: jnp.asarray(D) @ u, jnp.asarray(two), 1e-14, 2))
    np.testing.assert_allclose(out, two / np.arange(1.0, n + 1), atol=1e-14)
    zero = np.asarray(tap_newton.gmres(lambda u: u, jnp.zeros(n), 1e-10, 5))
    assert np.all(zero == 0.0)


def test_restart_at_another_ratio_equals_a_fresh_evaluation(small):
    """T1 does not depend on S/N: the restarted state's sweep and mismatch at the new ratio
    are those of a full evaluation of the same sites there."""
    config = _config("hard")
    ncfg = tap_newton.NewtonConfig(config)
    near = _data(small, "hard", 1.5)
    solved, *_ = tap_newton.solve(
        ncfg, tap_newton.init(ncfg, None, near, tap.init(None, None, near)), near,
        tol=1e-10, max_iter=300,
    )
    data = _data(small, "hard", 2.0)
    restarted = tap_newton.restart(ncfg, solved, data)
    theta = jnp.concatenate([solved.Lambda, solved.gamma, solved.lam])
    swept, err, G, _ = tap_newton.evaluate(ncfg, theta, data)
    np.testing.assert_allclose(np.asarray(restarted.swept), np.asarray(swept), rtol=1e-9,
                               atol=1e-12 * float(jnp.max(jnp.abs(swept))))
    assert float(restarted.mismatch) == pytest.approx(float(err), rel=1e-8)
    assert float(err) > 1e-3  # the ratio changed the fixed point
    assert not bool(restarted.rejected)  # so the first step is a Newton step
