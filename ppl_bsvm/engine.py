"""The engine contract: what every inference engine declares and returns.

An engine is registered with :func:`ppl_bsvm.api.register` for one method and one or more
models, together with its **options class**: a frozen dataclass derived from :class:`Options`
whose fields are the engine's options with their defaults. Constructing it validates every
value (a ``ValueError`` naming the option) and normalises it (``1`` to ``1.0`` where a float is
meant); ``fit`` builds it from the user's keywords with :meth:`Options.parse`, which also
rejects an unknown option with the list of valid ones. Options shared by several engines are
declared once, as a piece below (:class:`Iteration`, :class:`Sampler`, :class:`Draws`, ...),
and an engine's class composes the pieces it needs by inheritance; a piece checks its own
fields (declaratively in ``_validators``, or in its own ``_check``), and an engine overrides a
piece's default by declaring the field again with another default. What can only be checked against the data (``batch_size <= n``)
the engine checks itself.

The engine is then ``engine(problem, options, *, key[, kernel][, resume]) -> Approximation``
(``kernel`` when registered with ``uses_kernel``, ``resume`` when it has a ``budget``). It
runs its algorithm (BlackJAX style: pure functions ``init(static, key, data, start) ->
state`` and ``step(static, key, state, data) -> (state, info)`` over ``NamedTuple`` states,
iterated by :mod:`ppl_bsvm.inference.loop`, which passes the keys in) and finishes with an
:class:`Approximation`: the arrays and predictor of the approximation and how the run went. ``ppl_bsvm.api`` turns it into the one ``Fit`` every
engine returns, in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

from ._checks import boolean, nonnegative_float, one_of, positive_float, positive_int
from .kernels import DEFAULT_JITTER
from .predictive import DEFAULT_LINK, check_link

__all__ = [
    "Options",
    "Approximation",
    "Iteration",
    "Temperature",
    "Jitter",
    "Draws",
    "Link",
    "LinearPrior",
    "LinearForm",
    "Sampler",
    "CHAIN_METHODS",
]

CHAIN_METHODS = ("vectorized", "sequential", "parallel")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """Base of every engine's options: frozen, validated on construction (module docstring).

    A class (an engine's or a piece it inherits) validates the fields it declares: those
    with a validator of their own in the class attribute ``_validators`` (field name ->
    ``check(name, value)`` returning the normalised value or raising a ``ValueError`` that
    names the option, as the functions of :mod:`ppl_bsvm._checks` do), the rest and any rule
    between fields in ``_check(self)``, which stores normalised values with :meth:`_set`.
    """

    def __post_init__(self):
        for cls in reversed(type(self).__mro__):
            for name, check in vars(cls).get("_validators", {}).items():
                self._set(name, check(name, getattr(self, name)))
            check = vars(cls).get("_check")
            if check is not None:
                check(self)

    def _set(self, name: str, value) -> None:
        """Store the normalised ``value`` of field ``name`` (inside ``_check`` only)."""
        object.__setattr__(self, name, value)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def parse(cls, options: Mapping[str, Any], where: str) -> Options:
        """The options from a user's keywords; ``ValueError`` for an unknown name (naming the
        valid ones and ``where``, e.g. ``"method='vi', model='gp'"``) or a bad value."""
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for {where}; valid options are "
                f"{sorted(cls.names())}"
            )
        return cls(**options)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}

    def replace(self, **changes) -> Options:
        """A copy with ``changes`` applied and validated."""
        return dataclasses.replace(self, **changes)


def optional(check):
    """A validator (``check(name, value)``) that also accepts None."""
    return lambda name, value: None if value is None else check(name, value)


# --- shared pieces -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Iteration(Options):
    """The iteration budget and the stopping rule.

    Parameters
    ----------
    max_iter : int
        Iterations at most.
    tol : float or None
        Stop when the engine's convergence statistic is at most ``tol`` (``None`` only where
        the engine chooses it from the data). Every engine accepts ``tol=0``: run until the
        statistic vanishes, in practice all ``max_iter``.
    """

    max_iter: int = 1000
    tol: float | None = 1e-8

    _tol_from_data = False  # the engine picks tol=None's value from the data

    def _check(self):
        self._set("max_iter", positive_int("max_iter", self.max_iter))
        if self.tol is None and self._tol_from_data:
            return
        self._set("tol", nonnegative_float("tol", self.tol))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Temperature(Options):
    """``gamma``: the pseudo-likelihood ``exp(-2 gamma max(0, 1 - y f))``'s temperature."""

    gamma: float = 1.0
    _validators = {"gamma": positive_float}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Jitter(Options):
    """``jitter``: relative jitter added to the diagonal of kernel matrices."""

    jitter: float = DEFAULT_JITTER
    _validators = {"jitter": nonnegative_float}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Draws(Options):
    """``num_draws``: draws from the approximation stored in ``idata.posterior``."""

    num_draws: int = 1000
    _validators = {"num_draws": positive_int}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Link(Options):
    """``link``: the default link of ``predict_proba`` (``ppl_bsvm.predictive``)."""

    link: str = DEFAULT_LINK
    _validators = {"link": lambda _, link: check_link(link)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearPrior(Options):
    """The linear model's prior ``beta ~ N(0, prior_scale^2 I)``.

    Parameters
    ----------
    prior_scale : float
        The prior standard deviation of each coefficient.
    intercept : bool
        Append a column of ones (its coefficient has the same prior).
    """

    prior_scale: float = 1.0
    intercept: bool = True
    _validators = {"prior_scale": positive_float, "intercept": boolean}


FORMS = ("auto", "primal", "dual")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearForm(Options):
    """``form``: solve the linear model's ``p x p`` systems as they are (``"primal"``,
    ``O(n p^2 + p^3)`` per update) or through Woodbury's identity as ``n x n`` ones
    (``"dual"``, ``O(n^3)`` per update once ``Z Z^T`` is formed; ``ppl_bsvm.inference.dual``);
    ``"auto"`` takes the dual form when ``p > n``. Both give the same result to rounding."""

    form: str = "auto"
    _validators = {"form": lambda name, form: one_of(name, form, FORMS)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sampler(Link):
    """What every MCMC engine takes.

    Parameters
    ----------
    num_samples : int
        Draws kept per chain (before thinning).
    num_warmup : int
        Burn-in iterations per chain.
    num_chains : int
        Number of chains.
    chain_method : {"vectorized", "sequential", "parallel"}
        How the chains run (NumPyro's ``chain_method``).
    thinning : int
        Keep every ``thinning``-th draw.
    store_lam : bool
        Keep the draws of the augmentation variables ``lam``.
    max_predictive_draws : int
        Predictions average over at most this many draws.
    """

    num_samples: int = 1000
    num_warmup: int = 1000
    num_chains: int = 4
    chain_method: str = "vectorized"
    thinning: int = 1
    store_lam: bool = False
    max_predictive_draws: int = 1000

    _validators = {
        "store_lam": boolean,
        "num_samples": positive_int,
        "num_warmup": lambda name, value: positive_int(name, value, minimum=0),
        "num_chains": positive_int,
        "chain_method": lambda name, value: one_of(name, value, CHAIN_METHODS),
        "thinning": positive_int,
        "max_predictive_draws": positive_int,
    }

    def _check(self):
        if self.num_samples // self.thinning < 1:
            raise ValueError(
                f"thinning={self.thinning} keeps no draw of num_samples={self.num_samples}; "
                "lower thinning"
            )


# --- what an engine returns ----------------------------------------------------------------


class Approximation(NamedTuple):
    """An engine's finished run, from which ``ppl_bsvm.api`` builds the ``Fit``.

    Attributes
    ----------
    idata : xarray.DataTree
        The posterior (or approximation) under the library's names.
    predictor : object
        The predictive object (``GaussianPredictor``, ``MixturePredictor``, ...).
    trace : dict
        The objective or sampler trace.
    stop_reason : str or None
    n_iter : int or None
    timings : dict
        Seconds of the parts the engine times itself (``"engine"``, ``"sampling"``, ...).
    kernel_params, jitter
        The final kernel hyperparameters and the jitter used (GP engines).
    state : object
        The final state, for inspection.
    checkpoint : object or None
        What ``ppl_bsvm.resume`` needs (resumable engines).
    options : dict
        Options resolved from the data (``num_inducing``, ``batch_size``, ...): they replace
        the given values in ``Fit.options``.
    model : str or None
        The model the approximation is of, where an engine fits another than the one asked
        for (SVGP fits the sparse GP under either name); None: the one asked for.
    """

    idata: Any
    predictor: Any
    trace: dict = {}
    stop_reason: str | None = None
    n_iter: int | None = None
    timings: dict = {}
    kernel_params: Any = None
    jitter: float | None = None
    state: Any = None
    checkpoint: Any = None
    options: dict = {}
    model: str | None = None

    @classmethod
    def from_run(cls, run, *, idata, predictor, seconds: float, trace: dict,
                 **fields) -> Approximation:
        """The approximation of an engine iterated by :func:`ppl_bsvm.inference.loop.run`:
        ``stop_reason``, ``n_iter`` and the final ``state`` from the ``RunResult`` ``run``,
        ``seconds`` as the ``"engine"`` timing (more in ``timings=``), ``fields`` the rest (a
        ``state`` given there replaces ``run.state``)."""
        fields.setdefault("state", run.state)
        timings = {"engine": seconds, **fields.pop("timings", {})}
        return cls(idata=idata, predictor=predictor, trace=trace, stop_reason=run.stop_reason,
                   n_iter=run.n_iter, timings=timings, **fields)
