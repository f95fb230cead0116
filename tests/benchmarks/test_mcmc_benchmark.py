"""The mcmc_benchmark's default rows (the run itself is a benchmark)."""

from benchmarks import mcmc_benchmark as B
from ppl_bsvm.inference.mcmc.gibbs_kernel import GP_OVERRELAX, GP_STRONG_OVERRELAX


def test_the_default_row_is_the_overrelaxation_the_engine_chooses():
    """The GP rows' default follows ``K``'s spectrum as ``fit`` does (strong overrelaxation on
    Banana at its median-heuristic kernel, half on a short lengthscale); the linear model's
    is the collapsed sweep."""
    assert B.SAMPLERS[B.DEFAULT_ROWS[GP_STRONG_OVERRELAX]]["overrelax"] == GP_STRONG_OVERRELAX
    assert B.SAMPLERS[B.DEFAULT_ROWS[GP_OVERRELAX]]["overrelax"] == GP_OVERRELAX
    problem = B.gp_problem(300)
    assert B.default_row(problem) == "gibbs (overrelaxed)"
    assert B.is_default("gibbs (overrelaxed)", problem)
    label, data, kwargs, model = problem
    short = B.RBF(lengthscale=0.05)
    weak = (label, data, {**kwargs, "kernel": short, "params": short.init_params(data[0])},
            model)
    assert B.default_row(weak) == "gibbs (half overrelaxed)"
    assert B.default_row(B.linear_problem(50, 3)) == "gibbs (collapsed)"
