r"""B-BSVM: batch mean-field VI for the GP Bayesian SVM (Wenzel et al. 2017, section 4.1).

Model: ``f ~ N(0, K)``, pseudo-likelihood ``exp(-2 gamma max(0, 1 - y_i f_i))``; family
``q(f) = N(mu, Sigma)``, ``q(lam_i) = GIG(1/2, gamma, gamma alpha_i)``
(``specs/bsvm_inference.md`` section 3). Coordinate ascent:

.. math::

    \Sigma = (K^{-1} + \gamma A^{-1/2})^{-1}, \qquad
    \mu = \gamma\,\Sigma\,Y (1 + \alpha^{-1/2}), \qquad
    \alpha_i = (1 - y_i \mu_i)^2 + \Sigma_{ii}.

The ``q(f)`` update is the posterior of a GP regression with targets ``y_i (1 + sqrt(alpha_i))``
and noise variances ``sqrt(alpha_i) / gamma`` (ECM's CM-step with ``lamhat = sqrt(alpha)``), so it
is computed by ``ppl_bsvm.inference.gaussian`` in the symmetric form ``I + S K S`` without
inverting ``K``: ``O(n^3)`` time, ``O(n^2)`` memory per sweep, for small ``n``. The ELBO
(recorded after every sweep, collapsed form) never decreases for fixed hyperparameters.

Hyperparameters (``learn_hyperparameters=True``, paper eq. 12): before each sweep, one Adam step
on the kernel's log-parameters along ``jax.grad`` of ``max_q L(q, alpha, h)`` at the current
``alpha``, which by the identity in ``elbo.py`` is the GP-regression evidence
``log N(t; 0, K_h + N) + const`` (its gradient equals that of the ELBO at the optimal ``q``,
by the envelope theorem).

Linear response (``linear_response=True``): the covariance of ``f`` is replaced by the response
of the fixed point's mean to the tilt ``log p + t^T f`` (Giordano et al. 2018, eq. 5), in closed
form by :func:`ppl_bsvm.inference.vi.lrvb.gp_response`.

Predictions: ``q(f*) = N(k_*^T (K + N)^{-1} t, k_** - k_*^T (K + N)^{-1} k_*)`` (spec section 5
with ``kappa_* = k_*^T K^{-1}``: ``k_** - kappa_* k_* + kappa_* Sigma kappa_*^T`` simplifies to
this).
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..._memory import dense_bytes
from ...api import register
from ...data import Problem
from ...engine import Approximation, Draws, Iteration, Jitter, Link, Temperature
from ...kernels import Kernel, gram
from ...predictive import GaussianPredictor
from .. import gaussian
from ..latent import GPDense, GPNoisy, Latent, gp_dense, gp_noisy
from .._common import check_kernel_matrix, gaussian_idata, mvn_draws
from ..loop import relative_change, run
from . import elbo as elbo_mod
from . import lrvb
from ._options import HyperRate, Learn, LinearResponse
from .hyper import AdamState, adam_ascent, adam_init
from .schedules import as_step_size

__all__ = ["BBSVMData", "BBSVMState", "BBSVMInfo", "init", "Static", "step", "optimal_q"]


class BBSVMData(NamedTuple):
    """Traced inputs of a sweep.

    Attributes
    ----------
    X : (n, d)
    y : (n,)
    gamma : ()
    jitter : ()
        Relative jitter of ``K`` (``ppl_bsvm.kernels.gram``).
    """

    X: jnp.ndarray
    y: jnp.ndarray
    gamma: jnp.ndarray
    jitter: jnp.ndarray


class BBSVMState(NamedTuple):
    """State of batch VI.

    Attributes
    ----------
    alpha : (n,)
        Parameters of ``q(lam_i)``; ``q(f)`` is the optimal Gaussian for them (not stored:
        ``optimal_q`` rebuilds it in ``O(n^3)``, which every sweep pays anyway).
    params : dict
        Kernel hyperparameters (unconstrained).
    opt : AdamState
    elbo : ()
        ELBO after the last sweep.
    """

    alpha: jnp.ndarray
    params: dict
    opt: AdamState
    elbo: jnp.ndarray


class BBSVMInfo(NamedTuple):
    """Per-sweep record: ``elbo``, ``delta`` (its relative change) and ``hyper`` (the
    constrained kernel hyperparameters, a dict of arrays)."""

    elbo: jnp.ndarray
    delta: jnp.ndarray
    hyper: dict


class OptimalQ(NamedTuple):
    """``q(f)`` given ``alpha``: mean, marginal variances, and the GP-regression pieces."""

    mean: jnp.ndarray  # (n,)
    var: jnp.ndarray  # (n,)
    K: jnp.ndarray  # (n, n)
    fac: gaussian.NoisyFactor
    weights: jnp.ndarray  # (n,) (K + N)^{-1} t
    bound: jnp.ndarray  # () max_q L(q, alpha)


# jitted: the engine calls it outside its loop too, where each operation would compile alone
@partial(jax.jit, static_argnums=0)
def optimal_q(kernel: Kernel, params, data: BBSVMData, alpha) -> OptimalQ:
    """The best ``q(f)`` for fixed ``alpha`` and the value of the ELBO there."""
    K = gram(kernel, params, data.X, data.jitter)
    noise = jnp.sqrt(alpha) / data.gamma
    target = data.y * (1.0 + jnp.sqrt(alpha))
    fac = gaussian.factor(K, noise)
    mean, a = gaussian.posterior_mean(K, fac, target)
    var = gaussian.posterior_cov_diag(K, fac)
    bound = -0.5 * jnp.dot(target, a) - jnp.sum(jnp.log(jnp.diag(fac.chol)))
    return OptimalQ(mean, var, K, fac, a, bound)


@jax.jit
def _collapse(q: OptimalQ, data: BBSVMData, alpha):
    """``alpha`` optimal for ``q`` and the ELBO there: the bound at ``alpha`` plus the gain of
    re-optimising ``alpha`` (KL unchanged), ``gamma sum(a'/(2 sqrt a) + sqrt(a)/2 - sqrt(a'))``."""
    new = elbo_mod.optimal_alpha(q.mean, q.var, data.y)
    root = jnp.sqrt(alpha)
    gain = data.gamma * jnp.sum(new / (2.0 * root) + 0.5 * root - jnp.sqrt(new))
    return new, q.bound + gain


@partial(jax.jit, static_argnums=0)
def init(static: Static, _key, data: BBSVMData, params) -> BBSVMState:
    """Start from ``q(f)`` = the prior at the hyperparameters ``params``: ``alpha_i = 1 +
    K_ii``."""
    diag = static.kernel.diag(params, data.X)
    var = diag + data.jitter * jnp.mean(diag)  # the diagonal of gram()'s jittered K
    alpha = 1.0 + var
    value = jnp.sum(elbo_mod.collapsed_data_term(0.0, var, data.y, data.gamma))
    return BBSVMState(alpha, params, adam_init(params), value)


class Static(NamedTuple):
    """The sweep's static configuration: the ``kernel`` and ``hyper_lr``, ``None`` for fixed
    hyperparameters, else the schedule of Adam's step size (hashable: one compiled loop)."""

    kernel: Kernel
    hyper_lr: object = None


def _bound(kernel: Kernel, params, data: BBSVMData, alpha):
    return elbo_mod.regression_bound(gram(kernel, params, data.X, data.jitter), data.y, alpha,
                                     data.gamma)


def _hyper_step(static: Static, state: BBSVMState, data: BBSVMData):
    grads = jax.grad(_bound, argnums=1)(static.kernel, state.params, data, state.alpha)
    return adam_ascent(grads, state.params, state.opt, static.hyper_lr(state.opt.count))


def step(static: Static, _key, state: BBSVMState, data: BBSVMData):
    """One sweep: an Adam step of the hyperparameters on the bound (when learned), then the
    optimal ``q(f)`` given ``alpha`` and ``alpha`` given ``q`` (module docstring)."""
    if static.hyper_lr is None:
        params, opt = state.params, state.opt
    else:
        params, opt = _hyper_step(static, state, data)
    q = optimal_q(static.kernel, params, data, state.alpha)
    alpha, value = _collapse(q, data, state.alpha)
    info = BBSVMInfo(value, relative_change(value, state.elbo), static.kernel.constrain(params))
    return BBSVMState(alpha, params, opt, value), info



@partial(jax.jit, static_argnames=("kernel", "max_iter"))
def _linear_response(kernel: Kernel, params, data: BBSVMData, alpha, max_iter: int):
    """``lrvb.gp_response`` at the fixed point of the sweep (fixed hyperparameters) reached from
    ``alpha`` by ``lrvb.polish``: ``(cov, D, residual, q)``."""
    alpha, _ = lrvb.polish(lambda a: _collapse(optimal_q(kernel, params, data, a), data, a)[0],
                           alpha, max_iter)
    q = optimal_q(kernel, params, data, alpha)
    return (*lrvb.gp_response(q.K, q.fac, q.mean, data.y, alpha, data.gamma), q)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BBSVMOptions(Iteration, Temperature, Learn, HyperRate, LinearResponse, Jitter, Draws, Link):
    """Options of ``fit(model="gp", method="vi")`` (see :func:`bbsvm`)."""

    max_iter: int = 500
    tol: float = 1e-9


LR_COPIES = 14
"""Dense ``n x n`` matrices alive at the peak of ``linear_response=True`` (``lrvb.gp_response``:
``Sigma``, ``H``, the system and its solution, the covariance and its products, ``D`` and its
factors, and the draws' square root), against 4 for the mean-field fit."""


def _memory(n: int, d: int, options: dict) -> int:
    """Working bytes: :data:`LR_COPIES` or 4 dense ``n x n`` matrices (``_memory``)."""
    return dense_bytes(LR_COPIES if options.get("linear_response") else 4)(n, d, options)


_memory.hint = dense_bytes(4).hint  # the dense engines' hint: the scalable alternatives


@register("vi", ("gp",), options=BBSVMOptions, memory=_memory)
def bbsvm(problem: Problem, options: BBSVMOptions, *, key, kernel: Kernel) -> Approximation:
    """B-BSVM: batch mean-field VI for the GP Bayesian SVM (Wenzel et al. 2017, 4.1), O(n^3).

    Options (:class:`BBSVMOptions`)
    -------------------------------
    gamma : float, default=1.0
        Pseudo-likelihood temperature.
    learn_hyperparameters : bool, default=False
        Alternate each sweep with an Adam step on the kernel's log-parameters along the ELBO's
        gradient (paper eq. 12).
    hyper_lr : float or schedule, default=0.05
        Adam's step size (about the change of a log-parameter per step), or a schedule of the
        step count.
    max_iter : int, default=500
        Sweeps at most.
    tol : float, default=1e-9
        Stop when the relative change of the ELBO between sweeps is below this.
    jitter : float, default=1e-6
        Relative jitter of ``K``.
    num_draws : int, default=1000
        Draws from ``q(f)`` stored in ``idata.posterior.f``.
    link : str, default=DEFAULT_LINK
        Default link of ``predict_proba``.
    linear_response : bool, default=False
        Use the linear-response covariance of ``f`` (Giordano et al. 2018;
        :func:`ppl_bsvm.inference.vi.lrvb.gp_response`, one ``n x n`` solve, ``O(n^3)``) at the
        fixed point of the sweep, tightened first by at most ``lrvb.POLISH_ITER`` sweeps, for
        the draws, the predictive variances and ``idata.approximation`` (``f_cov``, ``f_var``;
        the mean-field ones stay as ``f_cov_mean_field`` and ``f_var_mean_field``; the
        attribute ``covariance``
        says which is used; hyperparameters held at their final values). Where it fails its
        check (``lrvb.accept``) a ``ConvergenceWarning`` and the mean-field answer.
    """
    gamma, jitter, learn = options.gamma, options.jitter, options.learn_hyperparameters
    hyper_lr = as_step_size(options.hyper_lr, "hyper_lr")
    t0 = time.perf_counter()
    X = jnp.asarray(problem.X, dtype=jnp.float64)
    data = BBSVMData(
        X,
        jnp.asarray(problem.y, dtype=jnp.float64),
        jnp.asarray(gamma),
        jnp.asarray(jitter),
    )
    params = kernel.init_params(problem.X)
    check_kernel_matrix(gram(kernel, params, X, jitter), kernel, jitter)
    static = Static(kernel, hyper_lr if learn else None)
    result = run(step, init(static, None, data, params), data, static=static, max_iter=options.max_iter,
                 tol=options.tol)
    st = result.state
    q = optimal_q(kernel, st.params, data, st.alpha)
    alpha, value = _collapse(q, data, st.alpha)
    approximation = {"f_mean": np.asarray(q.mean), "f_var": np.asarray(q.var),
                     "alpha": np.asarray(alpha), "elbo": np.asarray(value)}
    latent = Latent(gp_noisy, kernel, GPNoisy(X, st.params, q.fac.chol, q.fac.s, q.weights))
    status, timings = None, {}
    if options.linear_response:
        t1 = time.perf_counter()
        cov, D, residual, q_lr = _linear_response(kernel, st.params, data, st.alpha,
                                                  lrvb.POLISH_ITER)
        cov, status = lrvb.accept(cov, None, residual, 'fit(model="gp", method="vi")',
                                  semidefinite=True, stacklevel=4)
        approximation["f_var_mean_field"] = approximation["f_var"]
        if status == "linear response":
            # the mean-field q(f)'s joint covariance too: compare's "(mean-field)" rows draw
            # from it (its marginals alone would lose the correlations q(f) has)
            approximation.update(f_cov=cov, f_var=np.diag(cov),
                                 f_cov_mean_field=np.asarray(gaussian.posterior_cov(q.K, q.fac)))
            latent = Latent(gp_dense, kernel, GPDense(X, st.params, D, q_lr.weights))
        timings = {"linear_response": time.perf_counter() - t1}
    if status == "linear response":
        draws = mvn_draws(key, q.mean, gaussian.psd_sqrt(jnp.asarray(cov)), options.num_draws)[0]
    else:
        draws = gaussian.sample_posterior(key, q.K, q.fac, q.mean, options.num_draws)
    elapsed = time.perf_counter() - t0

    idata = gaussian_idata(
        {"f": np.asarray(draws)[None]},
        problem=problem,
        approximation=approximation,
        attrs={"method": "vi", "model": "gp", "stop_reason": result.stop_reason,
               "covariance": status},
    )
    trace = {
        "elbo": result.infos.elbo,
        "elbo_step": np.arange(1, result.n_iter + 1),
        **{k: np.asarray(v) for k, v in result.infos.hyper.items()},
    }
    return Approximation.from_run(
        result, idata=idata, predictor=GaussianPredictor(latent, link=options.link, gamma=gamma),
        seconds=elapsed, trace=trace, kernel_params=st.params, jitter=jitter, timings=timings,
    )
