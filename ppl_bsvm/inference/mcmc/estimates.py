r"""What the GP samplers' runs cost, estimated before any work (:mod:`ppl_bsvm._cost`).

NUTS on the GP and sparse GP models and the GP Gibbs sampler declare these estimates
(``api.register(..., flops=)``); the linear Gibbs sampler's is in
:mod:`~ppl_bsvm.inference.mcmc.gibbs`. Every count is per chain and iteration, times
``num_chains (num_warmup + num_samples)`` iterations (thinning saves no work). The constants
are *calibrated*: measured seconds times :data:`~ppl_bsvm._cost.RATE` over the counted terms,
on the reference machine of ``RATE`` (2 cores shared with other work; the breast-cancer data
of scikit-learn, standardised, the first ``n`` points of a fixed permutation, ``d = 30``, and
the Banana data, ``d = 2``; ``python -m benchmarks.slow_fit_samplers`` writes
``reports/slow_fit/samplers.txt``), so that an estimate is the *expected* time there. The
same runs took 1.5-1.8 times as long under a load average of 4-8 as under 2-3; the constants
sit between the two, so an estimate may be off by a factor of 1.5 either way from the load
alone, and by more from the assumed tree sizes and iteration counts.

**NUTS.** An iteration is a tree of leapfrog steps, each one gradient of the log density. The
chains run vectorized (the default), so every iteration lasts as long as the slowest chain's
tree; the steps counted are those of the slowest of four chains, averaged over a default run
(1000 warmup and 1000 kept iterations: the first warmup iterations, before the step size
adapts, build trees of up to ``2^max_tree_depth - 1 = 1023`` steps). Measured:

============================  ===  ==================================  =======================
model                         n    slowest-chain steps (warmup, kept)  ms per step (4 chains)
============================  ===  ==================================  =======================
GP, fixed hyperparameters     100  43, 31 (mean 37)                    0.022-0.037
GP, fixed hyperparameters     400  65, 31 (mean 48)                    0.34-0.51
GP, ``hyperpriors="default"``  50  108, 63 (mean 85)                   0.36-0.62
GP, ``hyperpriors="default"`` 100  191, 127 (mean 159)                 1.7-2.0
sparse GP, ``m = 64``         2000 65, 22 (mean 43)                    1.09
============================  ===  ==================================  =======================

The first hundred warmup iterations, before the step size and the mass matrix adapt, build
trees about three times as large as the run's average (2.5-3.6x measured): the estimate
counts :data:`EARLY` warmup iterations at :data:`EARLY_FACTOR` times the steps of the others.
With fixed hyperparameters the trees grow slowly with the dimension (from 37 to 48 for four
times the points; HMC's step size scales as ``dim^{-1/4}``, Beskos et al. 2013), so the
estimate assumes :data:`TREE_STEPS` ``(dim / 100)^{1/4}`` steps an iteration after the early
ones. With hyperpriors the kernel's lengthscale and variance are sampled jointly with the
whitened ``f``, and the trees grew with ``n`` almost in proportion (85 to 159 from 50 to 100
points, kept trees of depth 6 then 7): the estimate assumes :data:`HYPER_TREE_STEPS` ``n /
100``, unmeasured beyond ``n = 100`` (a run of the default length at ``n = 200`` would take
hours here). Every iteration's steps are capped at ``2^max_tree_depth - 1``. A shorter warmup
adapts less and its trees stay larger: with 100 warmup and 100 kept iterations at ``n = 100``
(hyperpriors) the trees averaged 355 steps, the estimate assumes 290. A gradient costs, per chain:

* fixed hyperparameters: products with the factor ``L`` of ``K`` (``f = L v``; the factor is
  computed once, outside the steps): :data:`SQUARE_OPS` ``n^2``;
* with hyperpriors: besides, ``K`` is built, factorised (``n^3 / 3``) and both differentiated
  (the derivative of the factor takes triangular solves with ``n x n`` right-hand sides,
  about ``3 n^3``): :data:`CUBIC_OPS` ``n^3 +`` :data:`GRAM_OPS` ``n^2 d``; measured per step
  of 4 chains (trees capped at depth 5): 1.7-2.0, 8.2-15.5, 38.6 and 47-72 ms at ``n = 100,
  200, 300, 400``, i.e. 2.1-2.7 ``n^3`` besides the ``n^2 d`` terms at a load of 2-3 and about
  5 at 4-8;
* the sparse GP model (``m`` inducing points, ``f`` integrated out): the projection ``kappa
  u`` and its transpose (``4 n m``) and the expected pseudo-likelihood of every point (two
  ``log_ndtr`` and a ``logaddexp``, with their derivatives): :data:`POINT_OPS` ``n``, from
  2.0-2.9 ms per step of 4 chains at ``n = 5000``, ``m = 64``.

Whole default runs against the estimate (``reports/slow_fit/samplers.txt``): GP with fixed
hyperparameters, ``n = 100``: 1.9-2.8 s measured, 1.8 s estimated; ``n = 400``: 32-49 s and
41 s; with hyperpriors, ``n = 50``: 60-105 s and 62 s; ``n = 100``: 595 s (load 3-5) and 603 s;
sparse GP at ``n = 2000``: 71-94 s and 78 s.

**GP Gibbs.** A sweep solves one system with ``K + diag(lam) / gamma``: by a Cholesky factor
(``n^3 / 3``) or, when ``K``'s spectrum makes it cheaper, by conjugate gradients with a
rank-``r`` preconditioner (``n r^2 + r^3 / 3`` plus ``ITER_GUESS (n^2 + 4 n r)``: the counts of
the rule that chooses, :func:`~ppl_bsvm.inference.mcmc.pcg.pcg_rank`); then ``k`` line moves
(``LINE_OPS n k``) and a few products with ``n x n`` matrices (the prior draw by the fixed
factor, the final ``x K``: :data:`SWEEP_SQUARE_OPS` of them). The products of the chains'
vectors with an ``n x n`` matrix, the iterations' included, run at a fraction of the rate of
the factorisations and are counted :data:`PRODUCT_OPS` times. The ``k`` directions are
learned twice, by vectorised chains together (:func:`_learn_flops`): an eigendecomposition
of the window's covariance (:data:`EIGH_OPS` ``n^3``; beyond 512 points an SVD of the kept
draws), on the conjugate-gradient path within the span of the preconditioner's ``r``
eigenvectors (a projection and an ``r``-dimensional one). Measured (200 sweeps of 4 chains, 100 at
``n = 2000``): 0.86 s at ``n = 400`` on the breast-cancer data (conjugate gradients, ``r =
48``), estimated 0.25 s once the path is known (a sweep's fixed costs, not counted, dominate
there); 1.61 s at ``n = 1000`` on Banana (``r = 32``), 1.4 s; 2.8 s at ``n = 2000`` (``r =
48``), 4.1 s (the estimate counts the set-up, the measurement only the sweeps); 863-890 s for
800 sweeps at ``n = 10^4`` on ``susy`` (``r = 192``, 32 directions, 9.6 iterations;
``reports/sbsvm_truth``), 655 s once the path is known and 449 s before (335 s and 215 s
before :data:`PRODUCT_OPS` and the pooled learning's count). Which
path a fit takes depends on ``K``'s spectrum, known only once ``K`` is computed: the estimate
before any work assumes the cheaper of the two at rank :data:`RANK_GUESS`, and the engine looks
again once it has chosen (:func:`gibbs_gp_flops` with the rank, ``_cost.check_refined``).
"""

from __future__ import annotations

from ..._cost import cholesky, sweeps
from .gibbs_kernel import direction_count
from . import pcg
from .sweep import WINDOW_DRAWS, _keeps_draws

__all__ = ["TREE_STEPS", "HYPER_TREE_STEPS", "SPARSE_TREE_STEPS", "SQUARE_OPS", "CUBIC_OPS",
           "GRAM_OPS", "POINT_OPS", "SWEEP_SQUARE_OPS", "EIGH_OPS", "SVD_OPS", "RANK_GUESS",
           "ITER_GUESS", "EARLY", "EARLY_FACTOR",
           "nuts_tree", "nuts_steps",
           "gp_nuts_flops", "sparse_nuts_flops", "gibbs_gp_flops"]

TREE_STEPS = 34.0
"""NUTS's leapfrog steps per iteration (slowest of 4 chains) at 100 sampled coordinates with
fixed hyperparameters, after the early warmup; ``(dim / 100)^{1/4}`` times it at ``dim``
(module doc: with the early iterations, 37 measured over a default run at ``n = 100``, 48 at
``n = 400``; the estimate's averages are 37 and 53)."""

HYPER_TREE_STEPS = 145.0
"""The same with hyperpriors on the GP, at ``n = 100``; ``n / 100`` times it at ``n`` (the
default run's average: 85 measured at ``n = 50``, 159 at ``n = 100``; estimated 80 and 160)."""

SPARSE_TREE_STEPS = 39.0
"""The same for the sparse GP model (whitened inducing values): 43 measured over a default run
on Banana at ``n = 2000``, ``m = 64`` (22 after warmup, 380 in its first 100 iterations);
estimated 43, whatever ``n`` and ``m``."""

EARLY, EARLY_FACTOR = 100, 3.0
"""The first ``EARLY`` warmup iterations build trees ``EARLY_FACTOR`` times as large."""

SQUARE_OPS = 12.0
"""Operations per ``n^2`` of a GP leapfrog step (per chain): the products with the fixed
factor and the step's own work; 11 measured at ``n = 100`` and 400 under a load of 2-3, 14-19
under 4-8."""

CUBIC_OPS = 10.0 / 3.0
"""Operations per ``n^3`` of a GP leapfrog step with hyperpriors (per chain): the factor of
``K`` (``n^3 / 3``) and its derivative (``3 n^3``), as counted; 2.1-2.7 measured under a load
of 2-3, about 5 under 4-8."""

GRAM_OPS = 20.0
"""Operations per ``n^2 d`` of a GP leapfrog step with hyperpriors: ``K`` from the inputs and
its derivative."""

POINT_OPS = 2000.0
"""Operations per point of a sparse-GP leapfrog step besides ``4 n m`` (the expected
pseudo-likelihood and its derivative)."""

SWEEP_SQUARE_OPS = 4.0
"""Products with ``n x n`` matrices per GP Gibbs sweep besides its solve and line moves."""

PRODUCT_OPS = 2.5
"""Operations per multiply-add of a GP Gibbs sweep's products of the chains' vectors with an
``n x n`` matrix (the conjugate-gradient iterations, the prior draw, the final ``x K``): such a
product streams the whole matrix for four vectors and ran at 5.4-6.2 x 10^9 multiply-adds a
second for ``n`` = 2000-10^4 (XLA's, 2 cores), against :data:`~ppl_bsvm._cost.RATE` for the
factorisations. With 1 (before), the estimate of a sweep of 4 chains at ``n = 10^4`` on
``susy`` (rank 192, 9.6 iterations) was 0.37 s against 0.69-0.74 s measured (1.0 s on slow
days); with 2.5 it is 0.77 s."""

EIGH_OPS = 4.5
"""Operations per ``n^3`` of one eigendecomposition (the learned directions, the
preconditioner): from the GP Gibbs runs at ``n = 1000`` and 2000, where they dominate."""

RANK_GUESS = 64
"""The preconditioner's rank the GP Gibbs estimate assumes before ``K`` is known (16 to 48 on
Banana at ``n = 300`` and 1000, 128 to 256 on ``susy`` at ``n = 2000`` to ``10^4``; a rough
kernel gives the Cholesky path)."""

ITER_GUESS = 6.0
"""Conjugate-gradient iterations per solve the estimate assumes before ``K`` is known (2 to 4
on Banana, 13 to 20 on ``susy`` at ``n = 5000`` and ``10^4``); once the rank is chosen, the
rule's prediction (:func:`~ppl_bsvm.inference.mcmc.pcg.predicted_iterations`)."""

SVD_OPS = 6.0
"""Operations per ``n w^2`` of a singular value decomposition of the ``w x n`` window of kept
draws (learned directions beyond :data:`~ppl_bsvm.inference.mcmc.sweep.WINDOW_DRAWS`
dimensions)."""


def _draws(options: dict) -> str:
    return (f"num_chains={int(options.get('num_chains', 4))} x (num_warmup="
            f"{int(options.get('num_warmup', 1000))} + num_samples="
            f"{int(options.get('num_samples', 1000))}) iterations")


def nuts_tree(dim: int, options: dict, hyper: bool = False) -> float:
    """Leapfrog steps per iteration after the early warmup the estimate assumes for the GP
    model (module doc), at most ``2^max_tree_depth - 1``; ``dim`` None: the sparse model's."""
    if dim is None:
        steps = SPARSE_TREE_STEPS
    else:
        steps = HYPER_TREE_STEPS * dim / 100.0 if hyper else TREE_STEPS * (dim / 100.0) ** 0.25
    return float(min(steps, _most_steps(options)))


def _most_steps(options: dict) -> int:
    return 2 ** int(options.get("max_tree_depth", 10)) - 1


def nuts_steps(dim: int | None, options: dict, hyper: bool = False) -> float:
    """Leapfrog steps of a whole run, all chains: :func:`nuts_tree` for every iteration and
    ``EARLY_FACTOR`` times it (capped) for the first ``EARLY`` warmup iterations."""
    tree = nuts_tree(dim, options, hyper)
    early = min(int(options.get("num_warmup", 1000)), EARLY)
    extra = min(EARLY_FACTOR * tree, _most_steps(options)) - tree
    return sweeps(options) * tree + int(options.get("num_chains", 4)) * early * extra


def _hyper(options: dict) -> bool:
    return options.get("hyperpriors") is not None


def _gp_step(n: int, d: int, hyper: bool) -> float:
    return SQUARE_OPS * n**2 + ((CUBIC_OPS * n**3 + GRAM_OPS * n**2 * d) if hyper else 0.0)


def gp_nuts_flops(n: int, d: int, options: dict) -> float:
    """GP NUTS: iterations x assumed leapfrog steps x one gradient (module doc)."""
    hyper = _hyper(options)
    return nuts_steps(n, options, hyper) * _gp_step(n, d, hyper)


def _gp_nuts_hint(n: int, d: int, options: dict) -> str:
    hyper = _hyper(options)
    steps = nuts_steps(n, options, hyper) / sweeps(options)
    cost = ("builds, factorises and differentiates the n x n kernel matrix (O(n^3))" if hyper
            else "multiplies by the n x n factor of K (O(n^2))")
    faster = ("hyperpriors=None (fixed hyperparameters, e.g. those method='vi' learns with "
              "learn_hyperparameters=True: O(n^2) a step and trees of tens of steps), "
              if hyper else "")
    measured = ("159 measured at n = 100, 85 at n = 50, taken to grow in proportion to n"
                if hyper else "37 measured at n = 100, 48 at n = 400")
    return (f"an estimate: {_draws(options)} of about {steps:.0f} leapfrog steps each (NUTS's "
            f"trees vary with the data, up to 2^max_tree_depth - 1; {measured}), and each "
            f"step {cost}. Faster: "
            f"{faster}method='gibbs' (exact Gibbs sweeps, no gradients), fewer iterations or "
            "chains, or model='sparse_gp' (m inducing points: O(n m) a step)")


gp_nuts_flops.hint = _gp_nuts_hint


def _inducing(options: dict) -> int:
    inducing = options.get("inducing")
    if inducing is None or isinstance(inducing, str):
        return int(options.get("num_inducing", 64))
    return len(inducing)


def sparse_nuts_flops(n: int, d: int, options: dict) -> float:
    """Sparse-GP NUTS: iterations x assumed leapfrog steps x one gradient."""
    m = _inducing(options)
    step = POINT_OPS * n + 4.0 * n * m + 2.0 * m * m
    return nuts_steps(None, options) * step


def _sparse_nuts_hint(n: int, d: int, options: dict) -> str:
    steps = nuts_steps(None, options) / sweeps(options)
    return (f"an estimate: {_draws(options)} of about {steps:.0f}"
            " leapfrog steps each (43 measured at n = 2000), each step a pass over the n points "
            "(O(n m)); faster: fewer iterations or chains, or method='svi' (S-BSVM, "
            "minibatches) on the same model")


sparse_nuts_flops.hint = _sparse_nuts_hint


def _gp_directions(n: int, options: dict) -> tuple[int, bool]:
    """``(k, learned)`` for the GP sampler's ``directions`` option
    (``gibbs_kernel.direction_count``)."""
    return direction_count(options.get("directions"), False, n)


def _spectrum_flops(n: int) -> float:
    """The engine's spectrum of ``K`` (``pcg.spectrum``): an eigendecomposition, or beyond
    ``pcg.EXACT_MAX`` points the range finder's ``6 n^2 s`` and two QR factors."""
    if n <= pcg.EXACT_MAX:
        return EIGH_OPS * n**3
    s = pcg.RANK_MAX + pcg.OVERSAMPLE
    return 6.0 * n**2 * s + 4.0 * n * s**2


def _learn_flops(n: int, k: int, chains: int, rank: int, pooled: bool) -> float:
    """Learning ``k`` directions at the end of one warmup window, for all ``chains``:
    ``pooled`` (vectorised chains, ``sweep._learn_pooled``) once from all their windows, else
    each chain from its own: an eigendecomposition of the ``n x n`` covariance, or beyond
    ``WINDOW_DRAWS`` dimensions an SVD of the ``w`` kept draws (``WINDOW_DRAWS`` a chain, all
    the chains' when pooled); where conjugate gradients solve the sweep (``rank >= k``), both
    within the span of the preconditioner's ``r`` eigenvectors (``sweep._smooth_basis``): a
    projection and an ``r``-dimensional decomposition."""
    groups, size = (1, chains) if pooled else (chains, 1)
    r = rank if rank >= k else 0
    if _keeps_draws(k, n):
        w = size * WINDOW_DRAWS
        one = w * n * r + SVD_OPS * w * r * r if r else SVD_OPS * max(w, n) * min(w, n) ** 2
    else:
        one = n * n * r + EIGH_OPS * r**3 if r else EIGH_OPS * n**3
    return groups * one


def _solve_ops(n: int, rank: int, iterations: float) -> float:
    """``pcg.solve_flops`` (the counts the rule that chooses the path compares) with each
    iteration's product counted at :data:`PRODUCT_OPS`: the time the solve takes."""
    if rank <= 0:
        return pcg.solve_flops(n, 0, 0.0)
    return pcg.solve_flops(n, rank, 0.0) + iterations * (PRODUCT_OPS * n**2 + 4.0 * n * rank)


def gibbs_gp_flops(n: int, d: int, options: dict, rank: int | None = None,
                   iterations: float | None = None) -> float:
    """GP Gibbs: sweeps x (solve + line moves + ``n^2`` products), and two learnings of the
    directions (:func:`_learn_flops`) when they are learned, plus the engine's
    own set-up (the factor and the spectrum of ``K``). ``rank``: the preconditioner's (0: the
    Cholesky path) and ``iterations`` its predicted iterations per solve; None before they are
    known: the cheaper path at :data:`RANK_GUESS` and :data:`ITER_GUESS` (module doc)."""
    from .gibbs import LINE_OPS

    iterations = ITER_GUESS if iterations is None else float(iterations)
    if rank is None:  # the cheaper path at the guessed rank
        guess = min(RANK_GUESS, n)
        rank = guess if _solve_ops(n, guess, ITER_GUESS) < _solve_ops(n, 0, 0.0) else 0
        iterations = ITER_GUESS
    solve = _solve_ops(n, rank, iterations)
    k, learned = _gp_directions(n, options)
    sweep = solve + LINE_OPS * n * k + PRODUCT_OPS * SWEEP_SQUARE_OPS * n**2
    chains = int(options.get("num_chains", 4))
    pooled = options.get("chain_method", "vectorized") == "vectorized"
    learn = (2 * _learn_flops(n, k, chains, rank, pooled)
             if learned and int(options.get("num_warmup", 1000)) >= 8 else 0.0)
    return sweeps(options) * sweep + learn + _spectrum_flops(n) + cholesky(n)


def _gibbs_gp_hint(n: int, d: int, options: dict) -> str:
    return (f"an estimate: {_draws(options)}, each solving with K + diag(lam) / gamma by a "
            "Cholesky factor (n^3/3) or, when K's spectrum allows it, by conjugate gradients "
            "(O(n^2)); faster: fewer iterations or chains, directions=0 (no learned "
            "directions: no n x n eigendecompositions), or model='sparse_gp' with "
            "method='nuts' or 'svi'")


gibbs_gp_flops.hint = _gibbs_gp_hint
