"""Inference engines; importing this package registers them with ``ppl_bsvm.fit``."""

from . import vi  # noqa: F401
from . import mcmc  # noqa: F401
