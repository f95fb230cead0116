"""``K`` kept as its lower blocks (``mcmc.packed``) against the dense ``K``.

The packed form holds the same numbers, so unpacking gives ``K`` back exactly and a product
differs from the dense one only by the order of its sums (within the rounding bound
``2 n eps |K| |v|``); the GP sweep's draw, its conjugate-gradient solve and its Cholesky
fallback with a packed ``K`` are the dense ones' to working precision, and so are the draws of
a whole run. Blocks of order 52 (``BLOCK`` = 64 at 200 points) give several block rows and a
padded last one.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC

from ppl_bsvm import datasets, kernels, models
from ppl_bsvm.inference.mcmc import BSVMGibbs, conditionals, packed, pcg

from .test_pcg import ACCURACY, _banana_K, _noise, _reference_draw

N = 200


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(packed, "BLOCK", 64)


@pytest.fixture(scope="module")
def K():
    with jax.enable_x64(True):  # before the function-scoped fixture turns it on
        return _banana_K(N)


def test_layout_pads_the_last_block_row():
    assert packed.block_size(N) == (4, 52)  # 4 x 52 = 208: 8 rows of zeros
    assert packed.block_size(256) == (4, 64)
    if jax.default_backend() == "cpu":  # the sweep packs from PACK_MIN points, on the CPU
        assert packed.worth_packing(packed.PACK_MIN) and not packed.worth_packing(N)


def test_unpacking_gives_k_back_exactly(K):
    A = packed.pack(jnp.asarray(K))
    assert A.blocks.shape == (10, 52, 52)
    np.testing.assert_array_equal(packed.unpack(A, N), K)
    np.testing.assert_array_equal(packed.diagonal(A, N), np.diagonal(K))
    s = np.random.default_rng(0).uniform(0.5, 2.0, N)
    # the upper triangle is the lower one's s_i K_ij s_j transposed: the products' order
    # differs there, by at most an ulp each
    np.testing.assert_allclose(packed.unpack(A, N, jnp.asarray(s)), s[:, None] * K * s[None, :],
                               rtol=2 * np.finfo(float).eps, atol=0)
    # a dense K passes through
    np.testing.assert_array_equal(packed.diagonal(jnp.asarray(K), N), np.diagonal(K))


def test_products_are_the_dense_products_to_rounding(K):
    A = packed.pack(jnp.asarray(K))
    V = np.random.default_rng(1).normal(size=(3, N))
    bound = 2 * N * np.finfo(float).eps * (np.abs(V) @ np.abs(K))
    dense = V @ K
    for got in (packed.times(A, jnp.asarray(V)),
                jax.vmap(lambda v: packed.times(A, v))(jnp.asarray(V)),
                jax.jit(packed.times)(A, jnp.asarray(V))):
        assert np.all(np.abs(np.asarray(got) - dense) <= bound)
    one = np.asarray(packed.times(A, jnp.asarray(V[0])))
    assert one.shape == (N,) and np.all(np.abs(one - dense[0]) <= bound[0])


@pytest.mark.parametrize("case", ["typical", "tiny"])
def test_the_draw_with_packed_k_is_the_dense_draw(K, case, monkeypatch):
    """Same normals: the dense draw to working precision (both within test_pcg's accuracy of
    a refined dense solve), by conjugate gradients and, where they miss the tolerance, by the
    fallback's Cholesky factor (chain by chain)."""
    gamma = 1.3
    r = np.random.default_rng(5)
    lam = jnp.asarray(np.stack([_noise(N, case, seed) for seed in (1, 2)]) * gamma)
    y = jnp.asarray(np.sign(r.normal(size=N)))
    pre = pcg.preconditioner(K, gamma)
    assert pre is not None
    Kd = jnp.asarray(K)
    L = jnp.linalg.cholesky(Kd)
    A = packed.pack(Kd)
    keys = jax.random.split(jax.random.key(3), 2)

    def draws(K_):
        return jax.jit(jax.vmap(lambda k, l: conditionals.draw_f(k, l, K_, L, y, gamma, None,
                                                                 0.0, pre)))(keys, lam)

    for capped in (False, True):
        if capped:  # every solve misses: both chains take the fallback
            monkeypatch.setattr(pcg, "MAX_ITER", 1)
        dense, by_blocks = draws(Kd), draws(A)
        np.testing.assert_array_equal(by_blocks.cg_fallback, [int(capped)] * 2)
        # The tolerance is 4 units of roundoff: the products' rounding (the blocks sum in
        # another order) moves the iteration at which the backward error gets under it, by
        # one on the well-conditioned system and by a few where cond ~ 1e8 slows the last
        # iterations (34 against 36 of 64 on one machine): an eighth of the count allowed.
        iters, ref = np.asarray(by_blocks.cg_iters), np.asarray(dense.cg_iters)
        assert np.all(np.abs(iters - ref) <= np.maximum(1, ref // 8))
        for c in range(2):  # both within test_pcg's accuracy of a refined dense solve
            reference, scale = _reference_draw(keys[c], np.asarray(lam[c]), K, L,
                                               np.asarray(y), gamma, np.zeros(N), 0.0)
            for draw in (dense, by_blocks):
                assert np.linalg.norm(np.asarray(draw.f[c]) - reference) <= ACCURACY * scale


def test_a_run_with_packed_k_draws_what_the_dense_run_draws(monkeypatch):
    """The whole sampler, K packed (from any size here) or dense: the same three sweeps of
    two vectorised chains, to rounding (1e-12 of the draws' scale where measured), through
    ``lam | f``, the conjugate-gradient draw of ``f | lam`` and the whitened coordinates it
    carries from sweep to sweep. The scale step and the line moves are off: their tangent
    grids adapt to the draws (``line_moves.sample_line``), so that a rounding difference can
    change a grid and give another, equally exact draw (measured: from states 1.8e-14 apart,
    the second sweep's line moves drew two coordinates of one chain 6.5e-4 apart, and its
    draws of ``f`` differed by up to 5.4e-4, with JAX 0.12.0.1 in a script and 0.12.1 in the
    suite), and neither touches ``K``."""
    X, y = datasets.load("banana", standardize=True)
    X, y = X[:N], y[:N].astype(float)
    kern = kernels.RBF()

    def run(pack: bool):
        monkeypatch.setattr(packed, "PACK_MIN", 0 if pack else 10**9)
        kernel = BSVMGibbs(models.gp_bsvm, scale_step=False, directions=0)
        mcmc = MCMC(kernel, num_warmup=0, num_samples=3, num_chains=2,
                    chain_method="vectorized", progress_bar=False)
        mcmc.run(jax.random.key(0), X, y, kernel=kern)
        assert isinstance(kernel.data.K, packed.Packed) == pack and kernel.data.pcg is not None
        return np.asarray(mcmc.get_samples(group_by_chain=True)["f"])

    dense, by_blocks = run(False), run(True)
    assert np.abs(by_blocks - dense).max() <= 1e-9 * np.abs(dense).max()
