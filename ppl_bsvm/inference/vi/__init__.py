"""Closed-form engines: ECM, and the variational engines of Wenzel et al. (2017)."""

from . import ecm  # noqa: F401
from . import linear  # noqa: F401
from . import bbsvm  # noqa: F401
from . import sbsvm  # noqa: F401
from . import pathfinder  # noqa: F401
from . import advi  # noqa: F401
