"""What the BlackJAX samplers of the marginal model (``ess``, ``mclmc``) share: their options'
common piece and the engines' bodies around the chains (the model's traced inputs, the
:class:`~ppl_bsvm.engine.Approximation` with its predictor). Each sampler supplies ``run``,
its chains through :func:`~ppl_bsvm.inference.mcmc._common.run_mcmc`, and ``stats``, its
``sample_stats``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

from ...data import Problem
from ...engine import Approximation, Sampler, Temperature
from ...kernels import Kernel
from .._common import linear_setup
from ..marginal import gp_inputs, linear_inputs
from ._common import factored_gp_setup, gp_predictor, linear_predictor, mcmc_approximation

__all__ = ["MarginalSamplerOptions", "marginal_linear_fit", "marginal_gp_fit", "gp_memory_hint"]


def gp_memory_hint(method: str) -> str:
    """What a refused GP fit of the sampler is told (its memory estimate's ``hint``)."""
    return (f"method={method!r} keeps the n x n kernel matrix and its factor and "
            "num_chains x num_samples / thinning draws of n values (f): keep fewer draws "
            "(num_samples, thinning) or, for large n, use model='sparse_gp' with method='svi'")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MarginalSamplerOptions(Sampler, Temperature):
    """The sampler's and the likelihood's options; ``store_lam`` must stay False: the sampler
    works on the marginal model and never draws ``lam`` (``_method`` names it in the error)."""

    _method: ClassVar[str] = ""

    def _check(self):
        if self.store_lam:
            raise ValueError(f"store_lam=True is not available with method={self._method!r}: "
                             "the sampler works on the marginal model and draws no lam")


def marginal_linear_fit(problem: Problem, options, key, resume, *, method: str,
                        run: Callable, stats: Callable) -> Approximation:
    """The linear engine: ``run(site, dim, kernel, inputs, options, key, resume) -> MCMCRun``
    on ``beta`` (no kernel), ``stats(run) -> dict``."""
    setup = linear_setup(problem, options.intercept)
    inputs = linear_inputs(setup, options.prior_scale, options.gamma)
    result = run("beta", setup.Z.shape[1], None, inputs, options, key, resume)
    return mcmc_approximation(
        result, options, method=method, model="linear", problem=problem,
        sample_stats=stats(result), coords={"feature": setup.features},
        predictor=linear_predictor(result.samples["beta"], options.intercept, options,
                                   options.gamma),
    )


def marginal_gp_fit(problem: Problem, options, key, kernel: Kernel, resume, *, method: str,
                    run: Callable, stats: Callable) -> Approximation:
    """The GP engine (``K`` checked positive definite by its factor, which the predictor
    shares), as :func:`marginal_linear_fit` on ``f``."""
    setup, chol = factored_gp_setup(problem, kernel, options.jitter)
    inputs = gp_inputs(setup, options.gamma)
    result = run("f", problem.n, kernel, inputs, options, key, resume)
    return mcmc_approximation(
        result, options, method=method, model="gp", problem=problem,
        sample_stats=stats(result),
        predictor=gp_predictor(kernel, setup, result.samples["f"], options, options.gamma,
                               chol),
        kernel_params=setup.params, jitter=setup.jitter,
    )
