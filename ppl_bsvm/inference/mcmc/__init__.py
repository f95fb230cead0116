"""MCMC engines: the exact Gibbs sampler (a NumPyro ``MCMCKernel``), NUTS, and BlackJAX's
elliptical slice sampler and adjusted MCLMC.

Importing this package registers ``method="gibbs"``, ``method="ess"`` and ``method="mclmc"``
(models ``linear``, ``gp``) and ``method="nuts"`` (models ``linear``, ``gp``, ``sparse_gp``) with
``ppl_bsvm.fit``.
"""

from .._common import LinearData
from ._common import RHAT_LIMIT, ConvergenceWarning, DivergenceWarning, check_finite
from . import gibbs  # noqa: F401  registers method="gibbs"
from . import ess  # noqa: F401  registers method="ess"
from . import mclmc  # noqa: F401  registers method="mclmc"
from .conditionals import (
    GramRows,
    gram_rows,
    sample_beta,
    sample_f,
    sample_lam,
)
from .gibbs_kernel import BSVMGibbs
from .line_moves import sample_line, sample_scale
from .sweep import GibbsState, GPData, gibbs_step
from .variates import InverseGaussian, chi2_1, sample_gig_half
from .nuts import default_hyperpriors, nuts_kernel, nuts_sample_stats

__all__ = [
    "BSVMGibbs",
    "ConvergenceWarning",
    "DivergenceWarning",
    "RHAT_LIMIT",
    "GibbsState",
    "GPData",
    "InverseGaussian",
    "GramRows",
    "LinearData",
    "check_finite",
    "default_hyperpriors",
    "chi2_1",
    "gibbs_step",
    "gram_rows",
    "nuts_kernel",
    "nuts_sample_stats",
    "sample_beta",
    "sample_f",
    "sample_gig_half",
    "sample_lam",
    "sample_line",
    "sample_scale",
]
