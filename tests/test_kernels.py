import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm import kernels



@pytest.fixture(autouse=True)
def float64():
    """Kernels are pure functions: the caller picks the precision (finite differences need 64)."""
    with jax.enable_x64(True):
        yield

PSD_KERNELS = [
    kernels.RBF(lengthscale=0.7, variance=1.3),
    kernels.RBF(lengthscale=(0.5, 1.0, 2.0), ard=True),
    kernels.Matern32(lengthscale=0.8),
    kernels.Matern52(lengthscale=(0.6, 1.2, 0.9), ard=True, variance=0.5),
    kernels.Linear(variance=2.0),
    kernels.Polynomial(degree=3, scale=0.5, offset=1.5),
    kernels.RBF(lengthscale=1.0) + kernels.Constant(2.0),
    kernels.Matern52(lengthscale=1.0) * kernels.Linear(),
]
ALL_KERNELS = PSD_KERNELS + [kernels.Sigmoid(scale=0.3, offset=-0.5)]


@pytest.fixture
def X(rng):
    return rng.standard_normal((25, 3))


@pytest.mark.parametrize("kernel", ALL_KERNELS, ids=repr)
def test_symmetric_with_matching_diag(kernel, X):
    params = kernel.init_params(X)
    K = np.asarray(kernel.K(params, X, X))
    assert K.shape == (25, 25) and K.dtype == np.float64
    np.testing.assert_allclose(K, K.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.diag(K), kernel.diag(params, X), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kernel", PSD_KERNELS, ids=repr)
def test_positive_semidefinite(kernel, X):
    params = kernel.init_params(X)
    K = np.asarray(kernel.K(params, X, X))
    eig = np.linalg.eigvalsh(K)
    assert eig.min() > -1e-10 * max(1.0, eig.max())
    # the jittered Gram matrix factorises
    np.linalg.cholesky(np.asarray(kernels.gram(kernel, params, X)))


def test_sigmoid_kernel_is_not_psd_in_general(X):
    k = kernels.Sigmoid(scale=1.0, offset=-2.0)
    K = np.asarray(k.K(k.init_params(X), X, X))
    assert np.linalg.eigvalsh(K).min() < 0  # the documented caveat


@pytest.mark.parametrize("cls", [kernels.RBF, kernels.Matern32, kernels.Matern52])
def test_ard_with_equal_lengthscales_is_isotropic(cls, X):
    iso, ard = cls(lengthscale=0.9), cls(lengthscale=(0.9, 0.9, 0.9), ard=True)
    np.testing.assert_allclose(
        ard.K(ard.init_params(X), X, X[:7]), iso.K(iso.init_params(X), X, X[:7]), rtol=1e-12
    )


def _fd_check(f, x, eps=1e-6):
    """Central differences of scalar f at the flat vector x."""
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


@pytest.mark.parametrize("kernel", ALL_KERNELS, ids=repr)
def test_gradient_wrt_hyperparameters_matches_finite_differences(kernel, X):
    params = kernel.init_params(X)
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    W = jnp.asarray(np.random.default_rng(1).standard_normal((25, 25)))

    def scalar(v):
        return jnp.sum(W * kernel.K(unravel(v), X, X)) + jnp.sum(kernel.diag(unravel(v), X))

    auto = np.asarray(jax.grad(scalar)(flat))
    fd = _fd_check(lambda v: float(scalar(jnp.asarray(v))), np.asarray(flat))
    np.testing.assert_allclose(auto, fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kernel", PSD_KERNELS[:4], ids=repr)
def test_gradient_wrt_inputs_is_finite_at_zero_distance(kernel, X):
    params = kernel.init_params(X)
    g = jax.grad(lambda Z: jnp.sum(kernel.K(params, Z, Z)))(jnp.asarray(X))
    assert np.all(np.isfinite(np.asarray(g)))
    fd = _fd_check(lambda v: float(jnp.sum(kernel.K(params, v.reshape(X.shape), v.reshape(X.shape)))), X.ravel().copy())
    np.testing.assert_allclose(np.asarray(g).ravel(), fd, rtol=1e-5, atol=1e-5)


def test_params_are_a_jittable_pytree(X):
    k = kernels.RBF(lengthscale=(1.0, 2.0, 3.0), ard=True)
    params = k.init_params(X)
    leaves, treedef = jax.tree.flatten(params)
    assert jax.tree.unflatten(treedef, leaves).keys() == params.keys()
    K = jax.jit(k.K)(params, X, X)
    np.testing.assert_allclose(K, k.K(params, X, X))
    assert set(k.constrain(params)) == {"lengthscale", "variance"}
    np.testing.assert_allclose(k.constrain(params)["lengthscale"], [1.0, 2.0, 3.0])
    assert hash(k) == hash(kernels.RBF(lengthscale=(1.0, 2.0, 3.0), ard=True))


def test_rbf_formula_and_median_heuristic(X):
    k = kernels.RBF()
    params = k.init_params(X)
    ell = float(np.exp(params["log_lengthscale"]))
    d = np.sqrt(((X[:, None, :] - X[None]) ** 2).sum(-1))
    assert ell == pytest.approx(np.median(d[np.triu_indices(25, 1)]))
    np.testing.assert_allclose(k.K(params, X, X), np.exp(-0.5 * d**2 / ell**2), atol=1e-12)


def test_gram_adds_relative_jitter(X):
    k = kernels.RBF(lengthscale=1.0, variance=4.0)
    params = k.init_params(X)
    diff = np.asarray(kernels.gram(k, params, X, jitter=1e-3) - k.K(params, X, X))
    np.testing.assert_allclose(diff, 4e-3 * np.eye(25), atol=1e-12)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: kernels.RBF(lengthscale=-1.0), "lengthscale"),
        (lambda: kernels.RBF(variance=0.0), "variance"),
        (lambda: kernels.RBF(lengthscale=(1.0, 2.0)), "ard=True"),
        (lambda: kernels.Polynomial(degree=1.5), "degree"),
        (lambda: kernels.get_kernel("gaussian"), "valid names"),
        (lambda: kernels.RBF(lengthscale="x"), "lengthscale must be a positive number"),
        (lambda: kernels.Matern52(variance=[1.0, "a"]), "variance must be a positive number"),
        (lambda: kernels.Sigmoid(offset="a"), "offset must be a finite number, got 'a'"),
        (lambda: kernels.Linear(variance="x"), "variance must be a positive number"),
        (lambda: kernels.RBF() + "a", r"combined with \+ only with another kernel or a "
                                      "positive number, got str 'a'"),
        (lambda: kernels.RBF() * -2.0, "value must be finite and > 0"),
    ],
)
def test_bad_kernel_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_number_combined_with_a_kernel_is_a_constant_kernel(X):
    """As in scikit-learn: ``RBF() + 1.0`` adds a bias, ``2.0 * RBF()`` scales the variance."""
    rbf = kernels.RBF(lengthscale=0.7)
    params = rbf.init_params(X)
    K = np.asarray(rbf.K(params, X, X))
    for combined, expected in ((rbf + 1.0, K + 1.0), (1.0 + rbf, K + 1.0),
                               (2.0 * rbf, 2.0 * K), (rbf * 2, 2.0 * K)):
        np.testing.assert_allclose(combined.K(combined.init_params(X), X, X), expected,
                                   rtol=1e-12)


def test_ard_lengthscale_count_must_match(X):
    with pytest.raises(ValueError, match="3 features"):
        kernels.RBF(lengthscale=(1.0, 2.0), ard=True).init_params(X)


@pytest.mark.parametrize("offset", [1e6, 1e8, 1.7e9])  # 1.7e9: a Unix time in seconds
@pytest.mark.parametrize("kernel", PSD_KERNELS[:4], ids=repr)
def test_a_stationary_kernel_ignores_an_offset_shared_by_its_inputs(kernel, X, rng, offset):
    """A stationary kernel depends on x - x' only (issue 34: computed as |x|^2 + |x'|^2 -
    2 x.x' on X + 1e8 it was round-off, and fits changed their probabilities by up to 0.7).
    The inputs themselves carry a rounding of offset * eps; the kernel adds nothing to it,
    also where the second argument is a chunk padded with zeros after its rows."""
    Z = rng.standard_normal((7, 3))
    params = kernel.init_params(X)
    exact = np.asarray(kernel.K(params, X, Z))
    tol = 20 * offset * np.finfo(np.float64).eps
    np.testing.assert_allclose(kernel.K(params, X + offset, Z + offset), exact, rtol=0, atol=tol)
    padded = np.vstack([Z + offset, np.zeros((5, 3))])
    np.testing.assert_allclose(np.asarray(kernel.K(params, X + offset, padded))[:, :7], exact,
                               rtol=0, atol=tol)
    assert kernels.median_distance(X + offset) == pytest.approx(kernels.median_distance(X),
                                                                rel=1e-6)


def test_a_tiny_lengthscale_makes_distinct_points_independent(X):
    """At lengthscale 1e-8 every pair of distinct points is 1e8 lengthscales apart: K = I (the
    expansion of the scaled distances used to cancel to 0 for some pairs, K_ij = 1)."""
    for ell in (1e-6, 1e-8, 1e-9):
        k = kernels.RBF(lengthscale=ell)
        np.testing.assert_array_equal(k.K(k.init_params(X), X, X), np.eye(len(X)))


def test_distances_far_beyond_the_lengthscale_are_infinite_not_nan():
    """Inputs of 1e148 over a lengthscale of 1e-8 are 1e156 lengthscales apart: their squares
    overflowed and ``inf - inf`` made the distance NaN (found by the property test: a fit's
    prediction was NaN). The distances are computed on inputs divided exactly by a power of
    two: the same bits as before where nothing overflows, inf (k = 0) where the distance does."""
    with jax.enable_x64(True):
        X = jnp.zeros((3, 2)).at[0, 0].set(1e-9)
        T = jnp.asarray(np.random.default_rng(0).standard_normal((2, 2)) * 1e149)
        k = kernels.RBF(lengthscale=1.4e-8)
        Kxt = np.asarray(k.K(k.init_params(X), X, T))
        assert np.all(Kxt == 0.0)
        Ktt = np.asarray(k.K(k.init_params(X), T, T))
        np.testing.assert_array_equal(Ktt, np.eye(2))
        A = jnp.asarray(np.random.default_rng(1).standard_normal((6, 3)))
        d2 = np.asarray(kernels._sq_dist(A, A[:4] * 3.0))
        exact = ((np.asarray(A)[:, None] - 3.0 * np.asarray(A)[None, :4]) ** 2).sum(-1)
        np.testing.assert_allclose(d2, exact, rtol=1e-13)


@pytest.mark.parametrize(("given", "other", "distinct"), [
    (kernels.RBF(lengthscale=1.5, variance=2.0), kernels.RBF(lengthscale=0.3),
     kernels.RBF(ard=True)),
    (kernels.Matern32(lengthscale=(1.0, 2.0, 3.0), ard=True), kernels.Matern32(ard=True),
     kernels.Matern32()),
    (kernels.Polynomial(degree=3, scale=0.5, offset=2.0), kernels.Polynomial(degree=3),
     kernels.Polynomial(degree=2)),
    (kernels.RBF(lengthscale=2.0) + 0.5 * kernels.Linear(variance=3.0),
     kernels.RBF() + 2.0 * kernels.Linear(), kernels.RBF() + kernels.Linear()),
])
def test_the_program_kernel_keeps_the_structure_and_forgets_the_starting_values(
        given, other, distinct, X):
    """Programs key on ``program_kernel``: equal (one compiled program) for any starting values,
    distinct for another structure (class, ``ard``, ``degree``, the terms); the same ``K`` and
    ``diag`` at the same hyperparameters, which ``init_params`` still starts at the given
    values."""
    program = kernels.program_kernel(given)
    assert program == kernels.program_kernel(other)
    assert hash(program) == hash(kernels.program_kernel(other))
    assert program != kernels.program_kernel(distinct)
    assert type(program) is type(given) and given != other  # the user's kernels are as they were
    params = given.init_params(X)
    flat = lambda tree: jax.flatten_util.ravel_pytree(tree)[0]  # noqa: E731
    np.testing.assert_array_equal(flat(program.init_params(X)), flat(params))
    np.testing.assert_array_equal(program.K(params, X, X[:3]), given.K(params, X, X[:3]))
    np.testing.assert_array_equal(program.diag(params, X), given.diag(params, X))
    assert program.constrain(params).keys() == given.constrain(params).keys()


def test_a_kernel_class_of_the_users_is_its_own_program_kernel():
    """A subclass outside ppl_bsvm may read its fields in ``K``: it is never rewritten."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Shifted(kernels.RBF):
        shift: float = 0.0

    k = Shifted(lengthscale=2.0, shift=1.0)
    assert kernels.program_kernel(k) is k
    default = kernels.RBF()
    assert kernels.program_kernel(default) is default
