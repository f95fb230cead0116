"""Implicit gradients of the bootstrap error against finite differences, and model selection."""

import jax
import numpy as np
import pytest

from ppl_bsvm import bootstrap, datasets, kernels


@pytest.fixture(scope="module")
def crabs():
    """Every other row of crabs (100 of 200, 50 of each class): the gradient identities hold at
    any size, and each objective evaluation solves a TAP fixed point to 1e-9 on half the points
    (the module alone, cold: 18.7 s -> 16.2 s)."""
    X, y = datasets.load("crabs", standardize=True)
    return X[::2], y[::2]


def _central_differences(obj, params, h=1e-4):
    out = {}
    with jax.enable_x64(True):
        for name in params:
            up, down = dict(params), dict(params)
            up[name] = params[name] + h
            down[name] = params[name] - h
            out[name] = (float(obj(up)) - float(obj(down))) / (2 * h)
    return out


@pytest.mark.parametrize(
    "estimator, options",
    [
        ("632", {}),  # hard margin, Efron's .632 = 0.632 eps(N)
        ("error", {"margin": "soft", "C": 2.0}),  # sites with Lambda = 0 (linear tilts)
        ("632+", {"model": "regression", "noise": 0.3}),
    ],
)
def test_implicit_gradient_matches_finite_differences(crabs, estimator, options):
    X, y = crabs
    if options.get("model") == "regression":
        X, y = X[:, 1:], X[:, 0] + 0.3 * np.sin(3 * X[:, 1])
    obj = bootstrap.make_objective(
        X, y, kernels.RBF(lengthscale=3.0, variance=1.3), estimator=estimator, **options
    )
    value, grad, (_, _, converged) = obj.value_and_grad(obj.params0)
    assert bool(converged) and 0 < value < 1
    fd = _central_differences(obj, obj.params0)
    for name in grad:
        # finite differences of a value converged to 1e-9 carry ~1e-6 absolute noise
        assert float(grad[name]) == pytest.approx(fd[name], rel=1e-4, abs=2e-6), name
    with jax.enable_x64(True):
        assert float(obj(obj.params0)) == pytest.approx(value, abs=1e-12)
    if options.get("model") is None and options.get("margin") is None:
        # the hard-margin SVM does not change when K is scaled: no gradient in the variance
        assert abs(float(grad["log_variance"])) < 1e-8


def test_objective_refuses_float32(crabs):
    X, y = crabs
    obj = bootstrap.make_objective(X, y, kernels.RBF(lengthscale=3.0))
    with jax.enable_x64(False), pytest.raises(ValueError, match="64-bit"):
        obj(obj.params0)


def test_objective_options_are_checked(crabs):
    X, y = crabs
    with pytest.raises(ValueError, match="estimator must be one of"):
        bootstrap.make_objective(X, y, estimator="loo")
    with pytest.raises(ValueError, match="uses S = N"):
        bootstrap.make_objective(X, y, estimator="632", sample_ratio=2.0)
    with pytest.raises(ValueError, match="soft-margin"):
        bootstrap.make_objective(X, y, estimator="632", margin="soft", C=1.0)


@pytest.mark.slow
def test_select_hyperparameters_lowers_the_632_estimate(crabs):
    X, y = crabs
    start = kernels.RBF(lengthscale=1.0)
    sel = bootstrap.select_hyperparameters(X, y, start, estimator="632", maxiter=6)
    assert sel.value < sel.initial_value
    assert sel.trace["value"].shape == (sel.n_evaluations,)
    assert sel.trace["params"].shape == (sel.n_evaluations, 2)
    assert sel.value == pytest.approx(sel.trace["value"].min())
    # the chosen hyperparameters reproduce the value through the public theory
    check = bootstrap.replica_tap(X, y, start, 1.0, params=sel.params, tol=1e-9)
    assert check.efron632 == pytest.approx(sel.value, abs=1e-7)
    assert sel.hyperparameters["lengthscale"] != pytest.approx(1.0)
    # the box keeps every log-parameter within log(100) of its start
    assert np.all(np.abs(sel.trace["params"] - sel.trace["params"][0]) <= np.log(100) + 1e-12)
