r"""S-BSVM: stochastic natural-gradient VI with inducing points (Wenzel et al. 2017, 4.2, Alg. 1).

Sparse model (``specs/bsvm_inference.md`` section 4): inducing values ``u`` at locations ``Z``
(``m`` of them), ``u ~ N(0, Kmm)``, ``p(f_i | u) = N(kappa_i u, Ktilde_ii)``; family
``q(u) = N(mu, zeta)``, ``q(lam_i) = GIG(1/2, gamma, gamma alpha_i)``. For a minibatch ``S``
(scale ``c = n / |S|``, which Alg. 1 omits) the local step sets
``alpha_i = (1 - y_i kappa_i mu)^2 + kappa_i zeta kappa_i^T + Ktilde_ii`` (eq. 11) and the global
step moves the natural parameters along the natural gradient (eqs. 9-10):

.. math::

    \hat\eta_1 = c\gamma\,\kappa_S^\top Y_S (1 + \alpha_S^{-1/2}), \quad
    \hat\eta_2 = -\tfrac12 (K_{mm}^{-1} + c\gamma\,\kappa_S^\top A_S^{-1/2} \kappa_S), \quad
    \eta \leftarrow (1 - \rho_t)\,\eta + \rho_t \hat\eta .

Implementation notes:

- **Whitened coordinates.** The state is ``q(v)``, ``v = L^{-1} u`` with ``L L^T = Kmm``, so
  ``kappa_i`` becomes ``psi_i = L^{-1} K_{m i}`` and ``Kmm^{-1}`` becomes ``I``. For fixed
  hyperparameters this is *exactly* Alg. 1 (natural parameters transform linearly under
  ``u = L v``, so convex combinations commute with the map), but the precision
  ``I + c gamma Psi^T A^{-1/2} Psi`` is well conditioned where ``Kmm^{-1}`` is not. Hyperparameter
  steps hold ``q(v)`` fixed (the usual choice for SVGP); in these coordinates the KL term does
  not depend on the hyperparameters.
- **Memory** ``O(n d + m^2 + |S| m)``: ``kappa`` is computed per minibatch, never for all points,
  and the full-data ELBO is accumulated over chunks of :data:`CHUNK` rows; no ``n x n`` or
  ``n x m`` matrix exists at any time.
- **Learning rate** (``schedules.py``): Robbins-Monro ``(t + tau)^-kappa`` (default
  ``(t + 1)^-0.6``), the adaptive rate of Ranganath et al. 2013 (the paper's choice, which
  converges more slowly here, see ``schedules``), a constant or any schedule.
- **Hyperparameters** (paper eq. 12): every ``hyper_every`` steps, one Adam step on the kernel's
  log-parameters (and the inducing locations with ``learn_inducing=True``) along ``jax.grad`` of
  the minibatch estimate of the collapsed ELBO.
- **Stopping in epochs** (``_svi.ElboEstimate``): the data terms of each minibatch, which the
  step computes anyway, summed over a period of ``check_every`` epochs and minus the KL give an
  estimate of the ELBO per period (the trace ``elbo``) without a pass over the data; the run
  stops when two consecutive estimates differ by less than ``tol`` (relative), beyond twice
  their sampling error: after three periods at the earliest, the first holding the steps from
  the prior (:func:`default_check_every`: one epoch each up to 300,000 points, then shorter
  periods of at least 300,000 points and a third of an epoch). ``elbo_every=k`` also records the
  exact full-data ELBO every ``k`` steps (trace ``elbo_exact``; ``O(n m^2)`` each).
- **The polish** (``polish``, by default up to 5000 points, :func:`default_polish`): a relative
  change of the ELBO is small where the decayed rate makes progress slow, not where ``q`` is
  near the optimum (breast cancer at the kernel batch VI learns: "tol" with test latents 23
  B-BSVM sds off). After the steps, Anderson-accelerated full-data sweeps move ``q`` to the
  batch fixed point until its certified distance (``fixed_point``: posterior sds, root mean
  square over the training latents) is at most ``polish_tol``, and with learned
  hyperparameters a quasi-Newton search of the profile ELBO moves them to its maximum
  (``sbsvm_batch``); a budget that runs out gives ``stop_reason="max_iter"`` and a
  ``ConvergenceWarning`` saying how far.
- **Padding**: the training arrays are padded with zero rows to :func:`bucket_size` rows, never
  drawn into a batch and masked out of every sum, so that data sets of nearby sizes (the
  folds of a cross-validation) share the compiled programs.

With ``Z`` = the training inputs, full batches and ``rho = 1`` the iteration is B-BSVM's
coordinate ascent (``bbsvm.py``), which the tests check.

Linear response (``linear_response=True``): the covariance of ``u`` is replaced by the
response of the batch fixed point's mean to the tilt ``log p + t^T u`` (Giordano et al. 2018),
computed in ``sbsvm_response`` in passes of ``O(n m^3)`` (the Schur complement of its
``P x P`` system by a certified series) or, for few inducing points, ``O(n m^4 + m^6)``.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ... import _programs
from ..._jax import to_device
from ..._checks import boolean
from ..._memory import FLOAT
from ...api import register
from ...data import Problem, check_X
from ...engine import Approximation, Draws, Iteration, Jitter, Link, Temperature
from ...kernels import Kernel
from ...predictive import GaussianPredictor
from ...result import Fit
from ..._shapes import CHUNK, bucket_size, pad_rows
from .._common import gaussian_idata
from ..inducing import choose_inducing, inducing_prior
from ..latent import Latent
from ..loop import run
from ..mvn import gaussian_from_precision, kl_precision
from . import schedules
from ._svi import (
    BatchOrder,
    BatchStatistics,
    Batches,
    batch_order,
    batch_statistics,
    ElboEstimate,
    SVIModel,
    batches_init,
    check_batch_size,
    estimate_init,
    period_points,
    rate_init,
    stream_keys,
    recorded,
    svi_step,
    target_from_statistics,
)
from ._options import HyperEvery, HyperRate, Inducing, Learn, LinearResponse, Polish, Stochastic
from .sbsvm_batch import batch_phase
from .hyper import AdamState, adam_ascent, adam_init
from .sbsvm_defaults import (
    MIN_ROWS_PER_DEVICE,  # noqa: F401  (documented with the devices option)
    default_batch_size,
    default_check_every,
    default_polish,
    default_tol,
    inducing_count,
    mesh_and_batch,
)
from .sbsvm_marginals import (
    _f_draws,
    _final_q,
    _latent_chunk,
    _Posterior,
    _psi_form,
    _training_marginals,
    full_elbo,
)
from .sbsvm_response import engine_flops, respond, response_bytes

__all__ = [
    "STORE_F_MAX_N",
    "MIN_ROWS_PER_DEVICE",
    "default_batch_size",
    "default_tol",
    "SBSVMData",
    "SBSVMState",
    "SBSVMInfo",
    "Config",
    "init",
    "step",
    "full_elbo",
]

STORE_F_MAX_N = 5000
"""``store_f=None`` stores draws of ``f`` at the training inputs when ``n`` is at most this."""


class SBSVMData(NamedTuple):
    """Traced inputs of a step.

    Attributes
    ----------
    X : (N, d)
        The ``n`` training inputs, then ``N - n`` zero rows of padding.
    y : (N,)
        Their labels (0 on the padding).
    n : () int32
        Number of training points.
    gamma : ()
    jitter : ()
        Relative jitter of ``Kmm``.
    scale : ()
        ``n / |S|``.
    period : () int32
        Stream positions per period of the stopping rule (``check_every`` epochs).
    order : BatchOrder, optional
        The minibatch stream's fixed random order (``_svi``); only the step reads it.
    """

    X: jnp.ndarray
    y: jnp.ndarray
    n: jnp.ndarray
    gamma: jnp.ndarray
    jitter: jnp.ndarray
    scale: jnp.ndarray
    period: jnp.ndarray
    order: BatchOrder | None = None


class SBSVMState(NamedTuple):
    """State of S-BSVM.

    Attributes
    ----------
    eta1 : (m,)
        First natural parameter of ``q(v)``.
    prec : (m, m)
        Precision of ``q(v)`` (``-2 eta2``).
    params : dict
        Kernel hyperparameters (unconstrained).
    Z : (m, d)
        Inducing locations.
    chol_Kmm : (m, m)
        Cholesky factor of the jittered ``Kmm`` (refreshed after hyperparameter steps).
    opt : AdamState
        Over ``params`` (and ``Z`` when it is learned).
    rate : learning-rate state
    batches : Batches
    count : () int32
    estimate : ElboEstimate
        The stopping rule's running estimate of the ELBO.
    """

    eta1: jnp.ndarray
    prec: jnp.ndarray
    params: dict
    Z: jnp.ndarray
    chol_Kmm: jnp.ndarray
    opt: AdamState
    rate: object
    batches: Batches
    count: jnp.ndarray
    estimate: ElboEstimate


class SBSVMInfo(NamedTuple):
    """Per-step record: ``elbo`` (the ELBO estimate of the period a step closes, NaN
    elsewhere), ``delta`` (the stopping statistic, ``_svi.estimate_push``; ``inf`` where no
    period closes), ``rho`` (learning rate), ``hyper`` (constrained kernel hyperparameters) and
    ``elbo_exact`` (the full-data ELBO every ``elbo_every`` steps, NaN elsewhere)."""

    elbo: jnp.ndarray
    delta: jnp.ndarray
    rho: jnp.ndarray
    hyper: dict
    elbo_exact: jnp.ndarray


class Config(NamedTuple):
    """Static settings (hashable): they select the compiled step.

    ``rate`` is the natural-gradient learning rate, ``hyper_lr`` the schedule of Adam's step
    size (a function of the number of hyperparameter steps taken), ``mesh`` the devices the
    rows of a minibatch are split over (None: one device).
    """

    kernel: Kernel
    rate: object
    batch_size: int
    elbo_every: int | None = None
    learn: bool = False
    hyper_lr: object = None
    hyper_every: int = 10
    learn_inducing: bool = False
    mesh: Mesh | None = None


@functools.partial(jax.jit, static_argnums=0)
def _chol_Kmm(kernel, params, Z, jitter):
    """Cholesky factor of the jittered ``Kmm`` (``inducing.inducing_prior``)."""
    return inducing_prior(kernel, params, Z, jitter).chol


def _check_Kmm(kernel, chol, Z, jitter) -> None:
    """``ValueError`` naming kernel, jitter and inducing points when ``chol``, the factor of
    ``K_mm`` in the initial state, is not finite (``K_mm`` has no Cholesky factor).

    Every q(u) update whitens with ``chol(K_mm)``, so an indefinite kernel (``Sigmoid``) or
    coinciding inducing points with ``jitter=0`` would otherwise give NaN probabilities.
    """
    if not np.all(np.isfinite(np.asarray(chol))):
        raise ValueError(
            f"the inducing-point kernel matrix K_mm of {kernel!r} (m={Z.shape[0]} inducing "
            f"points, jitter={jitter:g}, relative) is not positive definite; use a "
            "positive-definite kernel (the sigmoid kernel is not one), increase jitter, or "
            "use fewer / distinct inducing points"
        )


def _local_statistics(kernel, params, Z, chol_Kmm, mean, chol_P, Xb, yb, gamma):
    PsiT, m_f, s_f = _psi_form(kernel, params, Z, chol_Kmm, mean, chol_P, Xb)
    return batch_statistics(PsiT.T, m_f, s_f, yb, gamma)


def _statistics(config: Config, params, Z, chol_Kmm, mean, chol_P, Xb, yb, gamma):
    """:class:`_svi.BatchStatistics` of the batch, its rows split over ``config.mesh``'s
    devices when there is one: each device sums its share, one ``psum`` adds them."""
    kernel = config.kernel
    if config.mesh is None:
        return _local_statistics(kernel, params, Z, chol_Kmm, mean, chol_P, Xb, yb, gamma)
    axis = config.mesh.axis_names[0]

    def shard(params, Z, chol_Kmm, mean, chol_P, Xb, yb, gamma):
        st = _local_statistics(kernel, params, Z, chol_Kmm, mean, chol_P, Xb, yb, gamma)
        return st._replace(g1=jax.lax.psum(st.g1, axis), G2=jax.lax.psum(st.G2, axis))

    rep, rows = PartitionSpec(), PartitionSpec(axis)
    return jax.shard_map(
        shard, mesh=config.mesh,
        in_specs=(rep, rep, rep, rep, rep, rows, rows, rep),
        out_specs=BatchStatistics(rep, rep, rows, rows),
    )(params, Z, chol_Kmm, mean, chol_P, Xb, yb, gamma)


HYPER_MAX_ROWS = 1024
"""Rows of the minibatch a hyperparameter gradient uses at most (:func:`_hyper_rows`)."""


def _hyper_rows(config: Config) -> int:
    """The first ``min(|S|, HYPER_MAX_ROWS)`` rows of the (random) minibatch, a multiple of the
    devices: an unbiased estimate of the ELBO's gradient that stays precise for a few
    hyperparameters, at a fraction of a large batch's cost (on 5 x 10^6 points in batches of
    10,000 the full-batch gradient added 3 ms to an 11 ms step). On 10^6 points (batches of
    2000, three epochs, one run on 2 cores) 2048 rows took 6.9 s, 1024 rows 5.1 s and 512
    rows 4.5 s; the test error was 0.191 with each and the ELBO -918,968, -918,869 and
    -919,920."""
    k = 1 if config.mesh is None else config.mesh.size
    return min(config.batch_size, max(k, HYPER_MAX_ROWS // k * k))


def _hyper_objective(hp, config: Config, Z_fixed, data: SBSVMData, idx, mean, chol_P):
    """Minibatch estimate of the collapsed ELBO's data part as a function of the
    hyperparameters (KL to ``N(0, I)`` does not depend on them for fixed ``q(v)``), from the
    first :func:`_hyper_rows` rows of the batch ``idx``."""
    params, Z = hp if config.learn_inducing else (hp, Z_fixed)
    rows = _hyper_rows(config)
    idx = idx[:rows]
    chol = _chol_Kmm(config.kernel, params, Z, data.jitter)
    st = _statistics(config, params, Z, chol, mean, chol_P, data.X[idx], data.y[idx],
                     data.gamma)
    return data.scale * (config.batch_size / rows) * jnp.sum(st.terms)


def _target(config: Config, state: SBSVMState, data: SBSVMData, idx):
    mean, chol_P = gaussian_from_precision(state.eta1, state.prec)
    st = _statistics(config, state.params, state.Z, state.chol_Kmm, mean, chol_P,
                     data.X[idx], data.y[idx], data.gamma)
    m = state.eta1.shape[0]
    return target_from_statistics(st, jnp.eye(m, dtype=state.eta1.dtype), data.scale,
                                  data.gamma)


@functools.partial(_programs.Program, static_argnames=("config",))
def init(config: Config, key, data: SBSVMData, start) -> SBSVMState:
    """``q(v) = N(0, I)`` (the prior) at the hyperparameters and inducing locations ``start =
    (params, Z)``, with the sampler, learning-rate and stopping-rule state, drawn with ``key``
    (:func:`~ppl_bsvm.inference.vi._svi.stream_keys`)."""
    params, Z = start
    Z = jnp.asarray(Z, data.X.dtype)
    m = Z.shape[0]
    dtype = data.X.dtype
    keys = stream_keys(key, config.rate.num_init)
    chol = _chol_Kmm(config.kernel, params, Z, data.jitter)
    eta1, prec = jnp.zeros(m, dtype), jnp.eye(m, dtype=dtype)
    opt = adam_init((params, Z) if config.learn_inducing else params)
    state = SBSVMState(eta1, prec, params, Z, chol, opt, None,
                       batches_init(keys, data.order, data.n), jnp.zeros((), jnp.int32),
                       estimate_init(dtype))
    return rate_init(keys, config.rate, functools.partial(_target, config), config.batch_size,
                     data.n, state, data)


def _hyper_step(config: Config, state: SBSVMState, data: SBSVMData, idx):
    """One Adam step of the hyperparameters (and ``Z``) on the batch's ELBO (paper eq. 12)."""
    mean, chol_P = gaussian_from_precision(state.eta1, state.prec)
    hp = (state.params, state.Z) if config.learn_inducing else state.params
    grads = jax.grad(lambda h: _hyper_objective(h, config, state.Z, data, idx, mean, chol_P))(hp)
    hp, opt = adam_ascent(grads, hp, state.opt, config.hyper_lr(state.opt.count))
    params, Z = hp if config.learn_inducing else (hp, state.Z)
    chol = _chol_Kmm(config.kernel, params, Z, data.jitter)
    return state._replace(params=params, Z=Z, chol_Kmm=chol, opt=opt)


def _hyper(config: Config, state: SBSVMState, data: SBSVMData, idx):
    if not config.learn:
        return state
    return jax.lax.cond(state.count % config.hyper_every == 0,
                        functools.partial(_hyper_step, config), lambda s, d, i: s,
                        state, data, idx)


def _svi_model(config: Config) -> SVIModel:
    kernel = config.kernel
    return SVIModel(
        target=functools.partial(_target, config),
        hyper=functools.partial(_hyper, config),
        kl=lambda s: kl_precision(*gaussian_from_precision(s.eta1, s.prec)),
        exact_elbo=lambda s, data: full_elbo(kernel, s.params, s.Z, s.chol_Kmm, s.eta1, s.prec,
                                             data),
    )


def step(config: Config, key, state: SBSVMState, data: SBSVMData):
    """One step of Alg. 1 (:func:`ppl_bsvm.inference.vi._svi.svi_step`), then every
    ``hyper_every`` steps one hyperparameter step."""
    state, rec = svi_step(_svi_model(config), config.rate, config.batch_size, config.elbo_every,
                          data.n, key, state, data)
    return state, SBSVMInfo(rec.value, rec.delta, rec.rho, config.kernel.constrain(state.params),
                            rec.exact)



class _RunKeys(NamedTuple):
    """The keys of an S-BSVM run and what is drawn from them before it starts."""

    seed: jnp.ndarray  # of k-means
    init: jnp.ndarray
    u: jnp.ndarray  # draws of u
    f: jnp.ndarray  # draws of f
    loop: jnp.ndarray  # the loop's (_svi.stream_keys)
    order: BatchOrder  # the minibatch stream's order


@functools.partial(_programs.Program, static_argnums=(1, 3))
def _run_keys(key, rows: int, n, num_init: int) -> _RunKeys:
    """One program for the run's keys (each eager key operation of a new process loads a
    program of its own from the compilation cache)."""
    k_z, k_init, k_u, k_f = jax.random.split(key, 4)
    return _RunKeys(jax.random.randint(k_z, (), 0, 2**31 - 1), k_init, k_u, k_f,
                    stream_keys(k_init, num_init).loop,
                    batch_order(jax.random.fold_in(k_init, 1), rows, n))


def _check_Z(Z, d):
    Z = check_X(Z, name="inducing")
    if Z.shape[1] != d:
        raise ValueError(f"inducing locations have {Z.shape[1]} columns but X has {d} features")
    return Z


@dataclasses.dataclass(frozen=True, kw_only=True)
class SBSVMOptions(Inducing, Stochastic, Polish, Temperature, Learn, HyperRate, HyperEvery,
                   LinearResponse, Iteration, Jitter, Draws, Link):
    """Options of ``fit(model="gp" or "sparse_gp", method="svi")`` (see :func:`sbsvm_gp`);
    ``tol=None`` is :func:`default_tol` of the data, ``devices`` and the inducing array are
    checked against the machine and the data when the fit starts."""

    devices: object = None
    hyper_lr: object = schedules.inverse_time(0.05, 50.0, 0.5)
    max_iter: int = 20000
    tol: float | None = None
    store_f: bool | None = None

    _tol_from_data = True

    def _check(self):
        if self.learn_inducing and not self.learn_hyperparameters:
            raise ValueError("learn_inducing=True needs learn_hyperparameters=True")
        if self.store_f is not None:
            self._set("store_f", boolean("store_f", self.store_f))


def _sbsvm(problem: Problem, model: str, options: SBSVMOptions, *, key, kernel: Kernel,
           resume: Fit | None = None) -> Approximation:
    """S-BSVM: stochastic natural-gradient VI with inducing points (Wenzel et al. 2017, Alg. 1).

    Options (:class:`SBSVMOptions`)
    -------------------------------
    num_inducing : int, optional
        ``m``, at most ``n``; default ``min(100, n)``. Ignored (must be None or match) when
        ``inducing`` is an array.
    inducing : {"kmeans", "random"} or array of shape (m, d), default="kmeans"
        Inducing locations: k-means centres with k-means++ seeding, a random subset of the
        inputs, or given.
    learn_inducing : bool, default=False
        Optimise the locations with the hyperparameters (needs ``learn_hyperparameters``).
    batch_size : int, optional
        Minibatch size ``|S|`` (at most ``n``); default :func:`default_batch_size`: the paper's
        100 up to 50,000 points, then ``n / 500`` (at most 20,000), so that an epoch is 500
        steps of minibatches large enough for the matrix products to run at full speed.
    devices : int or sequence of jax.Device, optional
        Split every minibatch over these devices (data-parallel steps: each device computes
        its rows' share of the natural-gradient sums, one ``psum`` per step adds them; the
        iterates equal the one-device run's up to rounding). An int takes that many of
        ``jax.local_devices()``; a sequence may hold other processes' devices of a
        ``jax.distributed`` run (``jax.devices()``). Default: in a distributed run every
        process's devices (each process calls ``fit`` with the same data and options and ends
        with the same fit); otherwise every local device when the minibatch has at least
        :data:`MIN_ROWS_PER_DEVICE` rows per device, else one. The minibatch size must be a
        multiple of the number of devices (the default is rounded up to one).
    learning_rate : str, float, schedule or callable, default="robbins_monro"
        ``"robbins_monro"`` (``(t + 1)^-0.6``), ``"adaptive"`` (Ranganath et al. 2013, the
        paper's choice; slower to converge, see ``schedules``), a constant in ``(0, 1]``, an
        object of ``ppl_bsvm.inference.vi.schedules`` or a callable ``count -> rho``.
    gamma : float, default=1.0
        Pseudo-likelihood temperature.
    learn_hyperparameters : bool, default=False
        Adam steps on the kernel's log-parameters along the ELBO gradient (paper eq. 12); with
        the polish, then L-BFGS on the profile ELBO to its maximum (``sbsvm_batch``).
    hyper_lr : float or schedule, default=schedules.inverse_time(0.05, 50, 0.5)
        Adam's step size (about the change of a log-parameter per step), or a schedule of the
        number of hyperparameter steps. The default decays as ``0.05 (1 + k / 50)^-1/2`` so that
        the minibatch noise of the hyperparameter gradient does not keep them wandering.
    hyper_every : int, default=10
        Natural-gradient steps per hyperparameter step (the paper alternates 10 and 1). Each
        hyperparameter step uses at most the first 1024 rows of the minibatch
        (``HYPER_MAX_ROWS``).
    max_iter : int, default=20000
        Minibatch steps at most.
    tol : float, optional
        Stop the minibatch steps when two consecutive periods' ELBO estimates differ by less
        than this (relative, beyond twice their sampling error; see the module docstring).
        Default :func:`default_tol`: 1e-4, and 5e-3 beyond 100,000 points.
    polish : bool, optional
        Then polish ``q`` (and learned hyperparameters) to the batch optimum (module doc);
        each sweep costs about an epoch's arithmetic. Default: up to 5000 points.
    polish_tol : float, default=0.05
        The polish stops at this certified distance, in posterior sds (``fixed_point``).
    check_every : float, optional
        Length of a period of the stopping rule, in epochs (at least one minibatch); one epoch
        gives estimates free of sampling noise. Default :func:`default_check_every`: one epoch
        up to 300,000 points, then ``max(1/3, 300,000 / n)``.
    elbo_every : int, optional
        Also evaluate the exact full-data ELBO every this many steps (``O(n m^2)``, in
        chunks), recorded as ``trace["elbo_exact"]``: a diagnostic, not used for stopping.
    jitter : float, default=1e-6
        Relative jitter of ``Kmm``.
    num_draws : int, default=1000
        Draws from ``q(u)`` stored in ``idata.posterior.u`` (and of ``f``, see ``store_f``).
    store_f : bool, optional
        Also store draws of ``f`` at the training inputs (``num_draws x n`` numbers). Default:
        when ``n <= STORE_F_MAX_N`` (5000). The marginals ``f_mean``, ``f_var`` are always kept
        in the ``approximation`` group.
    link : str, default=DEFAULT_LINK
        Default link of ``predict_proba``.
    linear_response : bool, default=False
        Use the linear-response covariance of ``u`` (Giordano et al. 2018) at the fixed point
        of the batch iteration over all data (``rho = 1``), reached from SVI's ``q`` by at
        most lrvb.POLISH_ITER (Anderson-accelerated, preconditioned) sweeps, the mean
        staying SVI's (see sbsvm_response, with hyperparameters and inducing locations held
        at their final values), in the draws of ``u`` and ``f``, the predictive variances and
        idata.approximation: ``u_cov`` and ``f_var`` (the mean-field ones stay as
        u_cov_mean_field and f_var_mean_field, and the attributes ``covariance`` and
        polish_sweeps say which is used and how the polish went). Cost: the sweeps
        (``O(n m^2)`` each, to a relative change of 1e-8: 6-9 measured), then the Schur
        complement of the response's ``P x P`` system, ``P = m (m + 3) / 2``, by a series
        whose error is certified (``m^3 / 2`` operations per row, and ``3 m^3 / 2`` per row
        for each of its terms: one or two measured; memory ``O(m^3)``), or with fewer points
        than about ``3 m^1.5`` an ``n x n`` system instead (sbsvm_response says why, and
        when the ``P x P`` system itself, ``m^4 / 18`` per row and ``3 P^2`` floats, takes
        over; attribute ``response_form``). Beyond ``32 P`` points these sums come from a
        random subsample of ``16 P`` rows, grown fourfold until the estimated Monte-Carlo
        error of the sds of ``f`` is at most 0.5 % (attributes ``response_rows`` and
        ``response_mc_error``). Where the fixed point is not converged or the covariance not
        positive definite, a ``ConvergenceWarning`` and the mean-field answer.
    resume : Fit, optional
        Continue this fit's run (``ppl_bsvm.resume``); ``max_iter`` counts its steps too.
    """
    n, d = problem.n, problem.d
    gamma, jitter, learn = options.gamma, options.jitter, options.learn_hyperparameters
    hyper_lr = schedules.as_step_size(options.hyper_lr, "hyper_lr")
    rate = schedules.as_rate(options.learning_rate)
    mesh, batch_size = mesh_and_batch(options.devices, options.batch_size, n)
    batch_size = check_batch_size(batch_size, n)
    elbo_every, num_draws = options.elbo_every, options.num_draws
    tol = default_tol(n) if options.tol is None else options.tol
    check_every = default_check_every(n) if options.check_every is None else options.check_every
    store_f = n <= STORE_F_MAX_N if options.store_f is None else options.store_f
    inducing, num_inducing = options.inducing, options.num_inducing
    if isinstance(inducing, str):
        m = inducing_count(n, {"num_inducing": num_inducing})
        if m > n:
            raise ValueError(f"num_inducing={m} exceeds the number of training points n={n}")
    else:
        inducing = _check_Z(inducing, d)
        m = inducing.shape[0]
        if num_inducing is not None and num_inducing != m:
            raise ValueError(
                f"num_inducing={num_inducing!r} does not match the {m} given inducing locations"
            )

    t0 = time.perf_counter()
    rows = bucket_size(n)
    keys = _run_keys(key, rows, n, rate.num_init)
    previous = None if resume is None else resume.checkpoint
    seed = int(keys.seed)  # waits for the keys' program (the stream order: argsort of n)
    t_z = time.perf_counter()
    if previous is not None:
        Z = None  # in the state being resumed
    elif isinstance(inducing, str):
        Z = choose_inducing(problem.X, m, method=inducing, seed=seed)
    else:
        Z = inducing
    t_inducing = time.perf_counter() - t_z
    X = problem.X
    data = SBSVMData(
        to_device(pad_rows(X, rows)), to_device(pad_rows(problem.y, rows)),
        to_device(n, np.int32), to_device(gamma, np.float64), to_device(jitter, np.float64),
        to_device(n / batch_size, np.float64),
        to_device(period_points(n, batch_size, check_every), np.int32),
        keys.order,
    )
    config = Config(kernel, rate, batch_size, elbo_every, learn, hyper_lr, options.hyper_every,
                    options.learn_inducing, mesh)
    if mesh is not None:  # every device holds the data; each computes its rows of a batch
        data = jax.device_put(data, NamedSharding(mesh, PartitionSpec()))
    state = None
    if previous is None:
        state = init(config, keys.init, data, (kernel.init_params(problem.X), Z))
        _check_Kmm(kernel, state.chol_Kmm, Z, jitter)
    result = run(step, state, data, static=config, key=keys.loop, max_iter=options.max_iter,
                 tol=tol, resume=previous)
    st, what = result.state, f'fit(model="{model}", method="svi")'
    stop_reason, timings = result.stop_reason, {"inducing": t_inducing}
    fp_attrs = {"fixed_point_distance": np.nan}  # not checked (Fit.summary says so)
    if default_polish(n) if options.polish is None else options.polish:
        t_p = time.perf_counter()
        st, stop_reason, fp_attrs = batch_phase(kernel, st, data._replace(order=None), options,
                                                what)
        timings["polish"] = time.perf_counter() - t_p
    q = mean_field = _final_q(st, keys.u, num_draws)

    def trimmed(marg):
        return jax.tree.map(lambda a: np.asarray(a)[:n], marg)

    def marginals(q):
        return trimmed(_training_marginals(kernel, st.params, st.Z, st.chol_Kmm, q.mean_v,
                                           q.chol_P, data))

    status, lr_extra, lr_attrs = None, {}, {}
    if options.linear_response:
        t_lr = time.perf_counter()
        # the mean-field marginals at the training rows come from the polish's first sweep
        q, status, sweeps, sampled, mc_error, form, marg, lr_var = respond(
            kernel, st, data, keys.u, num_draws, mean_field, what, marginals=True)
        marg = trimmed(marg)
        lr_extra = {"u_cov_mean_field": np.asarray(mean_field.u_cov),
                    "f_var_mean_field": marg.f_var}
        if q is mean_field:
            f_var = marg.f_var
        elif lr_var is not None:  # from the projections the polish stored
            f_var = np.asarray(lr_var)[:n]
        else:
            f_var = marginals(q).f_var
        timings["linear_response"] = time.perf_counter() - t_lr
        lr_attrs = {"polish_sweeps": sweeps, "response_rows": sampled,
                    "response_mc_error": mc_error, "response_form": form}
    else:
        marg = marginals(q)
        f_var = marg.f_var
    f_mean, alpha = marg.f_mean, marg.alpha
    value = float(np.sum(marg.terms)) - float(mean_field.kl)
    post = _Posterior(st.params, st.Z, st.chol_Kmm, q.mean_v, q.chol_P)
    posterior = {"u": np.asarray(q.u_draws)[None]}
    if store_f:
        posterior["f"] = _f_draws(kernel, post, X, q.v_draws, keys.f)[None]
    elapsed = time.perf_counter() - t0

    idata = gaussian_idata(
        posterior,
        problem=problem,
        coords={"inducing": np.arange(m), "input_dim": np.arange(d)},
        approximation={
            "u_mean": np.asarray(q.u_mean),
            "u_cov": np.asarray(q.u_cov),
            "Z": np.asarray(st.Z),
            "f_mean": f_mean,
            "f_var": f_var,
            "alpha": alpha,
            "elbo": np.asarray(value),
            **lr_extra,
        },
        attrs={"method": "svi", "model": model, "stop_reason": stop_reason,
               "f_stored": int(store_f), "covariance": status, **lr_attrs, **fp_attrs},
    )
    trace = {
        **recorded(result.infos.elbo),
        **(recorded(result.infos.elbo_exact, "elbo_exact") if elbo_every else {}),
        "rho": result.infos.rho,
        **{k: np.asarray(v) for k, v in result.infos.hyper.items()},
    }
    return Approximation.from_run(
        result, idata=idata,
        predictor=GaussianPredictor(Latent(_latent_chunk, kernel, post), link=options.link,
                                    gamma=gamma),
        seconds=elapsed, trace=trace, timings=timings,
        kernel_params=st.params, jitter=jitter, checkpoint=result,
        options={"num_inducing": m, "batch_size": batch_size, "store_f": store_f,
                 "check_every": check_every,
                 "devices": 1 if mesh is None else mesh.size},
    )._replace(stop_reason=stop_reason)


def _working_memory(n: int, d: int, options: dict) -> int:
    """Bytes beyond the inputs: draws of ``f`` at the training inputs when stored, the
    ``O(|S| m + m^2)`` working arrays (``_memory``) and with ``linear_response`` the
    ``O(m^3)`` (or for few inducing points ``O(m^4)``) of ``sbsvm_response``."""
    m = inducing_count(n, options)
    b = options.get("batch_size") or default_batch_size(n)
    store = options.get("store_f")
    store = n <= STORE_F_MAX_N if store is None else bool(store)
    draws = store * int(options.get("num_draws", 1000)) * n
    response = response_bytes(n, m) if options.get("linear_response") else 0
    return FLOAT * (draws + 8 * (b + CHUNK) * m + 16 * m * m) + response


_working_memory.hint = (
    "S-BSVM keeps num_draws draws of f at the training inputs (store_f=False drops them) and, "
    "with linear_response=True, m^3 / 2 floats and a chunk's products for m inducing points "
    "(or, for few inducing points or rows, P x P or n x n matrices, P = m (m + 3) / 2; use "
    "fewer: num_inducing)")


def sbsvm_gp(problem: Problem, options: SBSVMOptions, *, key, kernel: Kernel,
             resume: Fit | None = None) -> Approximation:
    return _sbsvm(problem, "gp", options, key=key, kernel=kernel, resume=resume)


def sbsvm_sparse_gp(problem: Problem, options: SBSVMOptions, *, key, kernel: Kernel,
                    resume: Fit | None = None) -> Approximation:
    return _sbsvm(problem, "sparse_gp", options, key=key, kernel=kernel, resume=resume)


# One algorithm, registered for both models: with model="gp" the posterior is read as one
# over f, with "sparse_gp" over the inducing values u (the arrays are the same).
for _engine in (sbsvm_gp, sbsvm_sparse_gp):
    _engine.__doc__ = _sbsvm.__doc__
    register("svi", (_engine.__name__.removeprefix("sbsvm_"),), options=SBSVMOptions,
             budget="max_iter", memory=_working_memory, flops=engine_flops)(_engine)
