r"""The exact Gibbs sampler as a NumPyro ``MCMCKernel``: :class:`BSVMGibbs`.

``numpyro.infer.MCMC(BSVMGibbs(linear_bsvm), ...)`` gives chains (``vectorized``,
``sequential``, ``parallel``), progress bars, ``get_samples(group_by_chain=True)`` and
``arviz.from_numpyro``. The module also holds what the kernel and the registered engines
(:mod:`ppl_bsvm.inference.mcmc.gibbs`) share: the checks of the model's arguments, which build
:class:`~ppl_bsvm.inference._common.LinearData` / :class:`~ppl_bsvm.inference.mcmc.sweep.GPData`
from them; the ``directions`` option of the line moves; the static :class:`GibbsSettings`; and
the transition, :func:`gibbs_init` and :func:`gibbs_sample` (one sweep of every chain, then in
warmup the schedule that learns the line moves' directions).
"""

from __future__ import annotations

import inspect
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from ... import models
from ..._checks import boolean, open_interval, positive_float
from ...kernels import Kernel, gram
from .._common import LinearData
from . import packed
from .conditionals import GRAM_ROWS_MAX_SIZE, gram_rows
from .pcg import chosen_rank, from_spectrum, spectrum, weak_share
from .sweep import (
    GibbsState,
    GPData,
    _accumulate,
    _learn_directions,
    _learn_pooled,
    gibbs_step,
    init_state,
)

__all__ = ["BSVMGibbs"]


def _bind(model, model_args, model_kwargs) -> dict:
    try:
        bound = inspect.signature(model).bind(*model_args, **(model_kwargs or {}))
    except TypeError as err:
        raise ValueError(f"arguments do not match {model.__name__}: {err}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def _concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_labels(y):
    y = jnp.asarray(y)
    if y.ndim != 1 or (_concrete(y) and not bool(jnp.all(jnp.abs(y) == 1))):
        raise ValueError("y must be a 1-D array of labels in {-1, +1}")
    return y


def _positive(name, value, dtype):
    """A positive scalar option as an array (checked when it is a concrete value)."""
    if _concrete(value):
        value = positive_float(name, value)
    return jnp.asarray(value, dtype)


def _linear_data(args: dict) -> LinearData:
    X = jnp.asarray(args["X"])
    X = X.astype(jnp.result_type(X, float))
    y = _check_labels(args["y"]).astype(X.dtype)
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise ValueError(f"X must be 2-D with one row per label, got shape {X.shape}")
    Z = y[:, None] * X
    n, p = Z.shape
    return LinearData(
        Z,
        _positive("prior_scale", args["prior_scale"], X.dtype),
        _positive("gamma", args["gamma"], X.dtype),
        rows=gram_rows(Z) if n * p * (p + 3) // 2 <= GRAM_ROWS_MAX_SIZE else None,
    )


def _gp_data(args: dict) -> GPData:
    return _gp_inputs(args)[0]


def _gp_inputs(args: dict) -> tuple[GPData, float | None]:
    """:class:`GPData` and, where this computes ``K``'s spectrum (the NumPyro kernel's
    concrete data), its ``pcg.weak_share`` (else None)."""
    if args.get("hyperpriors"):
        raise ValueError(
            "the Gibbs sampler keeps kernel hyperparameters fixed; use NUTS to sample them "
            "(hyperpriors must be None)"
        )
    kernel = args["kernel"]
    if not isinstance(kernel, Kernel):
        raise ValueError(f"kernel must be a ppl_bsvm.kernels.Kernel, got {type(kernel)}")
    X = jnp.asarray(args["X"])
    X = X.astype(jnp.result_type(X, float))
    y = _check_labels(args["y"]).astype(X.dtype)
    params = kernel.init_params(np.asarray(X)) if args["params"] is None else args["params"]
    K = gram(kernel, params, X, args["jitter"])
    # the engine's factor of the same K (mcmc._common.kernel_factor, already checked)
    chol_K = args["chol_K"] if "chol_K" in args else jnp.linalg.cholesky(K)
    if _concrete(chol_K) and not bool(jnp.all(jnp.isfinite(chol_K))):
        raise ValueError(
            f"the kernel matrix K + jitter (jitter={args['jitter']:g}, relative) is not "
            "positive definite or not finite; increase jitter or check the kernel parameters"
        )
    gamma = _positive("gamma", args["gamma"], X.dtype)
    pre, share = None, None
    if "pcg" in args:  # the engines' inputs: computed beforehand (the programs trace this)
        pre = args["pcg"]
    elif _concrete(K) and _concrete(gamma):  # the NumPyro kernel: the choices made here
        spec = spectrum(K, float(args["jitter"]))
        pre = from_spectrum(spec, chosen_rank(spec, float(gamma)))
        share = weak_share(spec, float(gamma))
    if pre is not None and packed.worth_packing(K.shape[0]):
        # the sweep's solves read K a dozen times: its lower blocks are half the bytes (the
        # dense K, built above, is not used past here and XLA frees it)
        K = packed.pack(K)
    return GPData(K, y, gamma, chol_K=chol_K, pcg=pre), share


_SUPPORTED = {models.linear_bsvm: _linear_data, models.gp_bsvm: _gp_data}

_MIN_ADAPT_WARMUP = 8
"""Fewest warmup sweeps with which learned directions are used (two windows of 2)."""


def _check_directions(directions):
    """``directions`` as given to :class:`BSVMGibbs`: an int >= 0, ``"all"`` or a 2-D array."""
    if isinstance(directions, str):
        if directions != "all":
            raise ValueError(f"directions must be a number, 'all' or an array; got {directions!r}")
        return directions
    if isinstance(directions, (bool, np.bool_)):
        raise ValueError(f"directions must be a number, 'all' or an array; got {directions!r}")
    if isinstance(directions, (int, np.integer)):
        if directions < 0:
            raise ValueError(f"directions must be >= 0, got {directions}")
        return int(directions)
    V = np.asarray(directions, dtype=float)
    zero_row = V.ndim == 2 and np.any(np.all(V == 0, axis=1))
    if V.ndim != 2 or V.shape[0] == 0 or not np.all(np.isfinite(V)) or zero_row:
        raise ValueError(
            "directions given as an array must be 2-D (one direction per row), finite, with no "
            f"zero row; got shape {V.shape}"
        )
    return V


GP_DIRECTIONS = 10
"""Fewest learned directions of the GP sampler by default (fewer only if ``n`` is smaller;
:func:`gp_directions`)."""

GP_POINTS_PER_DIRECTION = 160
"""Beyond ``160 GP_DIRECTIONS`` points the GP sampler learns one direction per this many
points, up to :data:`GP_DIRECTIONS_MAX` (:func:`gp_directions`)."""

GP_DIRECTIONS_MAX = 32
"""Most learned directions of the GP sampler by default."""


def gp_directions(n: int) -> int:
    """Learned directions of the GP sampler by default: ``n // 160``, at least
    :data:`GP_DIRECTIONS` (at most ``n``) and at most :data:`GP_DIRECTIONS_MAX`.

    A line move costs ``O(n)`` and a sweep ``O(n^2)`` (conjugate gradients) or ``O(n^3)``, so
    the moves' share of a sweep stays small when their number grows with ``n``, and large
    problems have more slow directions: on ``susy`` at n = 5,000 (the kernel learned at 10^4
    points, 4 x (200 + 600) sweeps, each chain learning alone), 10, 30 and 60 directions
    gave a smallest bulk ESS of ``f`` at 500 test points of 559, 788 and 733 and a largest
    R-hat of 1.010, 1.011 and 1.007, at 304, 314 and 268 ms per sweep (the machine's noise is
    larger than the moves' cost); at 10^4 points 62 directions cost 11 % more per sweep than
    10 (1,090 against 983 ms), so the default stops at 32. Measured again once the chains
    learned their directions together (``susy`` at n = 5,000, its own learned kernel, 4 x
    (200 + 300) sweeps, three seeds): 31 (the default) and 64 directions gave a smallest bulk
    ESS of 505 / 503 / 481 and 691 / 560 / 574, a median ESS of 793-837 and 952-961, a
    largest R-hat of 1.011-1.012 and 1.012-1.014, at 204-216 and 214-221 ms per sweep; but at
    10^4 points (seed 0, the same sweeps) 64 directions gave a smallest ESS of 253 and a
    largest R-hat of 1.025 against 397 and 1.018 with 32 (1,034 and 1,061 ms per sweep): no
    consistent gain, so the cap stays."""
    return min(n, max(GP_DIRECTIONS, min(GP_DIRECTIONS_MAX, n // GP_POINTS_PER_DIRECTION)))


GP_OVERRELAX = -0.5
"""Adler's coefficient of the GP sampler's ``f`` draw by default where the kernel couples the
points weakly (:func:`default_overrelax`).

Strong overrelaxation (-0.9) keeps ``|f - m|`` nearly (``f - m -> -0.9 (f - m) + noise``), so
where the conditional of ``f`` given ``lam`` is about as wide as its posterior the spread
mixes slowly: sd ESS of a few hundred, R-hat up to 1.016. Plain Gibbs crawls where the
conditional is much narrower (bulk ESS 774-912 of 4,000 draws, R-hat up to 1.011, at the
kernels batch VI learns on breast cancer, digits and wdbc, in an earlier study), and -0.5
falls between. What decides is how much of the prior's variance lies in directions the
data's noise (``lam / gamma``, ``lam`` of order 1) does not pin down: the share of ``K``'s
trace in eigenvalues at most ``1 / gamma`` (``pcg.weak_share``). Smallest ESS of
``f`` at the training points (the least of ArviZ's bulk, tail and sd ESS, over two seeds) and
largest R-hat, 4 x (1,000 + 1,000) sweeps, ``gamma = 1``, on 70 % of scikit-learn's and
Heart's data, random subsets of Banana and the ``susy`` generator's points (standardised),
RBF kernels at the median-heuristic lengthscale with the variance shown ("learned": the
hyperparameters batch VI, resp. S-BSVM, learns), 4 December 2026:

======================================  ==========  ===============  ===============
data, kernel                            weak share  -0.5             -0.9
======================================  ==========  ===============  ===============
digits 3 vs 8 (249 points), variance 1  11.5 %      1,729 (1.0032)   384 (1.0160)
wine 0 vs 1 (91), variance 1            10.1 %      2,850 (1.0018)   958 (1.0035)
Heart (189), variance 1                 7.8 %       2,521 (1.0026)   924 (1.0041)
breast cancer (398), variance 1         6.4 %       1,956 (1.0035)   255 (1.0073)
breast cancer, variance 3               2.8 %       2,272 (1.0031)   910 (1.0042)
digits 3 vs 8, variance 10              2.2 %       1,645 (1.0037)   1,307 (1.0043)
breast cancer, variance 10              1.1 %       1,424 (1.0062)   1,688 (1.0038)
Banana (300 of 5,300), variance 1       1.0 %       2,974 (1.0023)   3,151 (1.0022)
``susy`` (2,000), 8.8 / 1.6 (*)         0.98 %      1,405 (1.0070)   1,961 (1.0039)
digits 3 vs 8, variance 30              0.63 %      908 (1.0066)     1,174 (1.0066)
Banana (1,000), variance 1              0.16 %      2,521 (1.0024)   2,832 (1.0024)
breast cancer, variance 100             0.13 %      410 (1.0201)     624 (1.0132)
``susy`` (2,000), learned               0.04 %      1,543 (1.0069)   2,072 (1.0052)
breast cancer, learned                  0.001 %     1,510 (1.0031)   2,046 (1.0030)
======================================  ==========  ===============  ===============

(*) The lengthscale and variance S-BSVM learns at 10^4 points. The smallest ESS is the sd's
at -0.9 where the share is large, the bulk's at -0.5 where it is small. The two cross between
1.1 % and 2.2 % (:data:`WEAK_SHARE_MAX` 1.5 %); near there the wrong choice loses at most a
quarter of the ESS, far from it up to seven times. On ``susy`` at the kernels S-BSVM learns
at 5,000 and 10^4 points (weak shares 0.02 % and 0.28 %; ``reports/sbsvm_truth``), -0.9 did
better on every measure: at 5,000 points (4 x (100 + 400), the smallest over the kriging
means at 500 test points and over f) bulk 735-840 against 606-676, tail 990 against 740, sd
1,035 (f) and 1,090 (means) against 945 and 1,015; at 10^4 points (4 x (100 + 500)) a bulk
ESS of 815 and R-hat 1.0079 against 636 and 1.0102. Until 4 December 2026 the default was
-0.5 everywhere (the best worst case over a few of these kernels). The linear sampler does
not overrelax: with its line moves along all ``p`` directions overrelaxation no longer pays
there."""

GP_STRONG_OVERRELAX = -0.9
"""Adler's coefficient by default where the kernel couples the points strongly
(:func:`default_overrelax`, :data:`GP_OVERRELAX` has the measurements)."""

WEAK_SHARE_MAX = 0.015
"""The largest share of ``K``'s trace in eigenvalues at most ``1 / gamma``
(``pcg.weak_share``) at which the GP sampler overrelaxes strongly by default
(:data:`GP_OVERRELAX` has the measurements). The threshold ``1 / gamma`` follows the noise
``lam / gamma`` for ``lam`` of order 1; at other temperatures the rule chose the better
coefficient in the four cases measured (breast cancer as in the table, the same protocol):
variance 1 at ``gamma = 3`` (share 2.8 %): -0.5 1,695, -0.9 1,369; variance 10 at ``gamma =
0.3`` (2.8 %): 1,970 and 353; variance 1 at ``gamma = 10`` (1.1 %): 634 and 839 (R-hat
1.0111 and 1.0091); variance 10 at ``gamma = 3`` (0.44 %): 595 and 748 (1.0133 and 1.0105)."""


def default_overrelax(linear: bool, weak_share: float | None = None) -> float:
    """The overrelaxation a sampler gets when none is given: 0 for the linear model; for the
    GP :data:`GP_STRONG_OVERRELAX` where at most :data:`WEAK_SHARE_MAX` of ``K``'s trace lies
    in eigenvalues at most ``1 / gamma`` (``weak_share``, ``pcg.weak_share``), else (or with
    the share unknown) :data:`GP_OVERRELAX`."""
    if linear:
        return 0.0
    if weak_share is not None and weak_share <= WEAK_SHARE_MAX:
        return GP_STRONG_OVERRELAX
    return GP_OVERRELAX


def _dimension(data) -> int:
    """Dimension of the sampled vector: ``p`` (linear) or ``n`` (GP)."""
    return data.Z.shape[1] if isinstance(data, LinearData) else data.y.shape[0]


def _resolve_directions(directions, data):
    """Number of learned directions, or the fixed array, checked against the dimension."""
    return _resolve_for(directions, isinstance(data, LinearData), _dimension(data))


def direction_count(directions, linear: bool, d: int) -> tuple[int, bool]:
    """``(k, learned)`` for a ``directions`` option as the user gave it (None, ``"all"``, a
    number or an array; not checked here): the number of line-move directions of the linear
    (``d = p``) or GP (``d = n``) sampler, and whether they are learned in warmup (None,
    ``"all"`` or a number > 0) or fixed (an array). The cost and memory estimates count with
    it, and :func:`_resolve_for` takes the defaults (None, ``"all"``) from it before checking
    a number or an array against ``d``."""
    if directions is None:
        return (d if linear else gp_directions(d)), True
    if isinstance(directions, str):
        return d, True
    if isinstance(directions, (int, np.integer)):
        return int(directions), directions > 0
    return len(directions), False


def _resolve_for(directions, linear: bool, d: int):
    """:func:`_resolve_directions` for the linear (``d = p``) or GP (``d = n``) sampler."""
    if directions is None or isinstance(directions, str):
        return direction_count(directions, linear, d)[0]
    if isinstance(directions, int):
        if directions > d:
            raise ValueError(
                f"directions={directions} exceeds the dimension {d} of the sampled vector"
            )
        return directions
    if directions.shape[1] != d:
        raise ValueError(
            f"directions has {directions.shape[1]} columns; the sampled vector has {d} coordinates"
        )
    return directions


class GibbsSettings(NamedTuple):
    """Static settings of the sweep (hashable: they select the compiled program).

    ``moving``: line moves on; ``learned``: their directions are learned in warmup (over
    ``num_warmup`` sweeps, see :class:`BSVMGibbs`); ``collapsed``: the sweeps after warmup
    stop after the line moves (:func:`gibbs_step`), drawing ``lam | z`` only if ``draw_lam``.
    """

    scale_step: bool
    overrelax: float
    moving: bool
    learned: bool
    num_warmup: int
    collapsed: bool = False
    draw_lam: bool = True


def gibbs_settings(scale_step, overrelax, directions, num_warmup: int, *, dim: int,
                   collapse: bool = False, draw_lam: bool = True) -> GibbsSettings:
    """Settings for resolved ``directions`` (a number to learn, or a fixed array) of a
    sampled vector of dimension ``dim``. ``collapse`` takes effect only where the collapsed
    sweep is ergodic: directions learned along every one of the ``dim`` axes."""
    moving = not isinstance(directions, int) or directions > 0
    learned = moving and isinstance(directions, int) and num_warmup >= _MIN_ADAPT_WARMUP
    collapsed = bool(collapse) and learned and directions == dim
    return GibbsSettings(bool(scale_step), float(overrelax), moving, learned, int(num_warmup),
                         collapsed, bool(draw_lam) or not collapsed)


def gibbs_init(keys, data, directions, z=None) -> GibbsState:
    """First state of one chain (a single key) or of a batch of chains (keys ``(C,)``);
    ``z``, if given, has the same leading axis as ``keys``."""

    def init_one(key, z):
        key, sub = random.split(key)
        return init_state(sub, data, z, directions)._replace(rng_key=key)

    if is_prng_key(keys):
        return init_one(keys, z)
    return jax.vmap(init_one, in_axes=(0, None if z is None else 0))(keys, z)


def gibbs_sample(state: GibbsState, data, settings: GibbsSettings, batched: bool,
                 num_warmup=None) -> GibbsState:
    """One sweep of every chain (:func:`gibbs_step`), then, in warmup, the directions' schedule.

    With ``batched`` the state holds a batch of chains: the sweep is ``vmap``-ed, while the
    schedule stays outside the ``vmap`` (the chains share the sweep counter), so that the
    directions are recomputed only when a window closes, not at every sweep.

    ``num_warmup``: the warmup length as a traced integer, so that one compiled sweep serves
    every warmup length (the engines pass it; ``settings.num_warmup`` is then not read);
    None: ``settings.num_warmup``.
    """
    if num_warmup is None:
        num_warmup = settings.num_warmup
    each = jax.vmap if batched else (lambda fn: fn)
    lead = (lambda x: x[0]) if batched else (lambda x: x)

    def sweep(state, collapsed=False):
        key, sub = random.split(state.rng_key)
        new = gibbs_step(sub, state, data, settings.scale_step, settings.overrelax,
                         settings.moving, collapsed, settings.draw_lam)
        return new._replace(rng_key=key)

    if settings.collapsed:  # full sweeps in warmup, while the directions are learned
        # the chains share the counter: an unbatched predicate, a cond inside the vmap
        state = each(partial(sweep, collapsed=lead(state.it) >= num_warmup))(state)
    else:
        state = each(sweep)(state)
    if settings.learned:
        warmup = num_warmup
        ends = (warmup // 2 - 1, warmup - 1)  # last sweeps of the two windows

        def adapt(state):
            it = lead(state.it)
            moves = jax.lax.cond(
                it >= warmup // 4, each(_accumulate), lambda m, v: m, state.moves,
                *state.z.values(),
            )
            # vectorised chains learn from all their windows together (sweep._learn_pooled)
            learn = partial(_learn_pooled if batched else _learn_directions, data=data)
            moves = jax.lax.cond((it == ends[0]) | (it == ends[1]), learn, lambda m: m, moves)
            return state._replace(moves=moves)

        state = jax.lax.cond(lead(state.it) < warmup, adapt, lambda s: s, state)
    return state._replace(it=state.it + 1)


class BSVMGibbs(MCMCKernel):
    r"""Exact Gibbs sampler for :func:`~ppl_bsvm.models.linear_bsvm` and
    :func:`~ppl_bsvm.models.gp_bsvm`, as a ``numpyro.infer.mcmc.MCMCKernel``.

    The model's arguments are given to ``MCMC.run`` exactly as for NUTS; the kernel reads
    them from the model's signature (``X, y, prior_scale, gamma`` or
    ``X, y, kernel, params, gamma, jitter``). ``augmented`` and ``whiten`` are irrelevant
    here: the sampler always works on the augmented model, and ``z`` holds ``beta`` or ``f``
    itself. Kernel hyperparameters stay fixed.

    Parameters
    ----------
    model : callable, default=linear_bsvm
        :func:`ppl_bsvm.models.linear_bsvm` or :func:`ppl_bsvm.models.gp_bsvm`.
    scale_step : bool, default=True
        Start each sweep with the exact draw of the scale of ``beta`` / ``f``
        (:func:`sample_scale`); ``False`` with ``directions=0`` is the textbook two-block
        sampler.
    overrelax : float in (-1, 1) or None, default=None
        Draw ``beta`` / ``f`` by Adler's overrelaxed move (:func:`overrelaxed`) with this
        coefficient instead of independently from its conditional; 0 is the plain Gibbs
        sampler. ``None`` is 0 for the linear model and for the GP chosen from ``K``'s
        spectrum in :meth:`init` (:func:`default_overrelax`: -0.9 where the kernel couples
        the points strongly, else -0.5); :attr:`overrelax` tells which.
    directions : int, "all", array of shape (k, d) or None, default=None
        Line moves (:func:`sample_line`): after the scale step, one exact draw from the
        marginal posterior along each of ``k`` directions. A number ``k`` (or ``"all"``,
        ``k = d``) learns them in warmup: the ``k`` principal directions of largest variance
        of the draws of the window ``[num_warmup / 4, num_warmup / 2)``, then of
        ``[num_warmup / 2, num_warmup)``, fixed from then on (before the first window ends,
        and throughout with fewer than 8 warmup sweeps, the first ``k`` coordinate axes).
        Vectorised chains learn them from all their windows together (``sweep._learn_pooled``:
        a direction one chain crosses slowly shows in how the chains differ), each chain
        alone otherwise; the GP's, where conjugate gradients solve the sweep, within the span
        of ``K``'s top eigenvectors (``sweep._principal_axes``). An array gives fixed
        directions, one per row; one unit along a row should be about one posterior sd.
        ``None`` is ``"all"`` for the linear model and :func:`gp_directions` for the GP
        (``d = n`` there: 10 up to 1,600 points, one per 160 beyond, at most 32; a few
        directions catch the slow ones, and each move costs ``O(n)``).
    collapse : bool, default=True
        Where the learned directions span the space of the sampled vector (``k = d``: the
        linear model by default), the sweeps after warmup stop after the line moves: exact
        draws from the marginal posterior along every principal axis, i.e. a Gibbs sampler
        of ``beta`` (``lam`` integrated out) in the basis of those axes. On the benchmark
        (``p = 21``) they keep the full sweep's smallest ESS per draw (0.68 against 0.69)
        at 60-65 % of its cost. The warmup sweeps are always full (the directions are
        learned from them). Ignored where the directions do not span the space (the GP,
        ``k < d``, fixed directions), whose collapsed sweeps would not be ergodic.
    draw_lam : bool, default=True
        In collapsed sweeps, still draw ``lam | beta``, so that the ``lam`` extra field is
        a draw of the joint posterior with ``beta`` (about 20 % of a collapsed sweep's cost);
        ``False`` leaves ``lam`` at its value at the end of warmup.

    Notes
    -----
    ``sample_field = "z"``; ``lam``, ``lp``, ``scale``, ``scale_trials``, ``n_floored``,
    ``line_trials``, ``line_failed``, ``cg_iters`` and ``cg_fallback`` can be collected with
    ``extra_fields`` (see :class:`GibbsState`). ``num_warmup`` sweeps are burn-in, during
    which only the line moves' directions adapt (where the one-dimensional samplers start
    their search adapts in every sweep, which changes their cost, never the law of a draw).
    With ``chain_method="vectorized"`` ``MCMC`` hands :meth:`init` a batch of keys and
    :meth:`sample` a batched state; the kernel ``vmap``\ s itself (the stack notes, section
    2.b), and keeps the warmup schedule outside the ``vmap`` so that the
    directions are computed only when a window closes. Data-dependent constants (``Z``, or the
    factor of ``K`` and, when the conjugate-gradient path pays, its preconditioner) are
    computed once in :meth:`init`; :meth:`sample` ignores ``model_args``, as NumPyro's HMC
    does.

    Examples
    --------
    >>> import jax, numpy as np
    >>> from numpyro.infer import MCMC
    >>> from ppl_bsvm.models import linear_bsvm
    >>> from ppl_bsvm.inference.mcmc import BSVMGibbs
    >>> X = np.random.default_rng(0).normal(size=(50, 2)); y = np.sign(X[:, 0])
    >>> mcmc = MCMC(BSVMGibbs(linear_bsvm), num_warmup=100, num_samples=200, num_chains=2,
    ...             chain_method="vectorized", progress_bar=False)
    >>> mcmc.run(jax.random.key(0), X, y, prior_scale=2.0)
    >>> mcmc.get_samples(group_by_chain=True)["beta"].shape
    (2, 200, 2)
    """

    sample_field = "z"

    def __init__(
        self, model=models.linear_bsvm, *, scale_step: bool = True, overrelax=None,
        directions=None, collapse: bool = True, draw_lam: bool = True,
    ):
        if model not in _SUPPORTED:
            raise ValueError(
                "BSVMGibbs samples ppl_bsvm.models.linear_bsvm and ppl_bsvm.models.gp_bsvm; "
                f"got {getattr(model, '__name__', model)!r}"
            )
        self._model = model
        self._scale_step = boolean("scale_step", scale_step)
        if overrelax is None and model is models.linear_bsvm:
            overrelax = default_overrelax(True)
        # the GP's default is chosen from K's spectrum in init
        self._overrelax = (None if overrelax is None
                           else open_interval("overrelax", overrelax, -1.0, 1.0))
        self._overrelax_used = self._overrelax
        self._directions = None if directions is None else _check_directions(directions)
        self._collapse = boolean("collapse", collapse)
        self._draw_lam = boolean("draw_lam", draw_lam)
        self._data = None
        self._sample_fn = None

    @property
    def model(self):
        """The NumPyro model (``arviz.from_numpyro`` reads it for dims)."""
        return self._model

    @property
    def overrelax(self) -> float | None:
        """Adler's coefficient of the draws: the one given, or the default the last
        :meth:`init` chose (:func:`default_overrelax`; None for the GP before it)."""
        return self._overrelax_used

    @property
    def data(self):
        """The :class:`LinearData` / :class:`GPData` built by the last :meth:`init`."""
        return self._data

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        # Constants of the data, computed once and eagerly even when MCMC traces init
        # (chain_method="parallel"), so that no tracer is stored on the kernel.
        with jax.ensure_compile_time_eval():
            args = _bind(self._model, model_args, model_kwargs)
            data, share = (_gp_inputs(args) if self._model is models.gp_bsvm
                           else (_linear_data(args), None))
        self._data = data
        self._overrelax_used = (default_overrelax(self._model is models.linear_bsvm, share)
                                if self._overrelax is None else self._overrelax)
        directions = _resolve_directions(self._directions, data)
        settings = gibbs_settings(self._scale_step, self._overrelax_used, directions, num_warmup,
                                  dim=_dimension(data), collapse=self._collapse,
                                  draw_lam=self._draw_lam)
        batched = not is_prng_key(rng_key)  # 'vectorized': a batch of keys and states
        self._sample_fn = partial(gibbs_sample, data=data, settings=settings, batched=batched)
        return gibbs_init(rng_key, data, directions, init_params)

    def sample(self, state, model_args, model_kwargs):
        return self._sample_fn(state)

    def postprocess_fn(self, model_args, model_kwargs):
        return lambda z: z  # beta and f are unconstrained

    def get_diagnostics_str(self, state):
        return f"lp {float(state.lp):.4g}"
