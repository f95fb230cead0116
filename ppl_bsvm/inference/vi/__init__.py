"""Closed-form engines: ECM, and the variational engines of Wenzel et al. (2017)."""

from . import ecm  # noqa: F401
