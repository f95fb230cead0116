r"""Sparse variational GP classification (SVGP) of Hensman, Matthews & Ghahramani (2015).

Model: ``f ~ GP(0, k)``, ``p(y_i | f_i) = Phi(y_i f_i)`` (probit; logit also offered), with
``m`` inducing values ``u = f(Z)`` and ``q(u) = N(mu, Sigma)``. Under ``q`` each latent value
has the marginal ``q(f_i) = N(kappa_i mu, kappa_i Sigma kappa_i^T + Ktilde_ii)``
(:mod:`ppl_bsvm.inference.inducing`, shared with S-BSVM), and the bound is

.. math::

    \mathcal L(q) = \sum_{i=1}^n E_{q(f_i)}[\log p(y_i \mid f_i)] - KL(q(u) \,\|\, p(u))
    \qquad \text{(Hensman et al. 2015, eq. 4)}

with each expectation by Gauss-Hermite quadrature. A minibatch ``b`` of size ``|b|`` (drawn
uniformly with replacement) estimates the sum with weight ``n / |b|``.

**q(u) by natural gradients.** With ``g1_i = dE_i/dm_i`` and ``g2_i = dE_i/ds_i`` (Bonnet's
and Price's theorems: ``E[d log p]`` and ``E[d^2 log p]/2``), the natural gradient step of
size ``rho`` on the natural parameters ``eta = (Sigma^{-1} mu, -Sigma^{-1}/2)`` is

.. math::

    \eta_2 \leftarrow (1 - \rho)\eta_2 + \rho\left(-\tfrac12 K_{mm}^{-1}
        + \tfrac{n}{|b|} \sum_{i \in b} g_{2,i} \kappa_i^\top \kappa_i\right), \quad
    \eta_1 \leftarrow (1 - \rho)\eta_1 + \rho\, \tfrac{n}{|b|} \sum_{i \in b}
        \kappa_i^\top (g_{1,i} - 2 g_{2,i} m_i)

(Hensman et al. 2013, section 3; Salimbeni et al. 2018); ``rho = 1`` with a Gaussian
likelihood is the exact optimum in one step. ``rho_t = step_size (1 + t / delay)^-decay``.

**Hyperparameters and inducing locations** (optional) follow the gradient of the same
minibatch bound with Adam (Kingma & Ba 2015; ``optax``'s, through ``inference.vi.hyper`` as
for S-BSVM), holding ``q(u)`` fixed during the step, as in Salimbeni et al. (2018). By default
they stay at the kernel's values, like the other engines, so all methods share one prior.

Stopping: the relative change of ``(eta, theta)`` per step,
``|delta| / (1 + |value|)``, below ``tol`` (the minibatch bound is too noisy to test). The
recorded trace is the (minibatch-estimated) bound at each step; the bound on the full data at
the end is stored as ``elbo`` in the ``approximation`` group.

References: J. Hensman, A. Matthews and Z. Ghahramani. Scalable variational Gaussian process
classification. AISTATS 2015. J. Hensman, N. Fusi and N. Lawrence. Gaussian processes for big
data. UAI 2013. H. Salimbeni, S. Eleftheriadis and J. Hensman. Natural gradients in practice.
AISTATS 2018.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.scipy.linalg import cho_solve

from .._checks import boolean, nonnegative_float, one_of, positive_float, positive_int
from .._idata import make_idata
from .._memory import FLOAT
from .._serial import latent_family
from ..api import register
from ..data import Problem, check_X
from ..engine import Approximation, Draws, Iteration, Jitter
from ..inference._common import APPROX_GROUP
from ..inference.inducing import (
    INDUCING_METHODS,
    choose_inducing,
    inducing_prior,
    kl_to_prior,
    marginals,
    project,
)
from ..inference.mvn import Natural, from_natural
from ..inference.vi.hyper import AdamState, adam_ascent, adam_init
from .._shapes import padded_call
from ..inference.latent import Latent
from ..inference.loop import run
from ..kernels import Kernel
from ._common import Likelihood, LinkPredictor, sklearn_seed
from ._likelihoods import gauss_hermite, gauss_hermite_expectations

__all__ = ["SVGPOptions", "SVGPState", "SVGPInfo", "SVGPData", "svgp_init", "SVGPStatic", "step",
           "elbo"]


class SVGPState(NamedTuple):
    """State of the SVGP iteration.

    Attributes
    ----------
    eta1 : (m,)
        ``Sigma^{-1} mu``.
    eta2 : (m, m)
        ``-Sigma^{-1} / 2``.
    params : dict
        Kernel hyperparameters (unconstrained).
    Z : (m, d)
        Inducing locations.
    adam : AdamState
    t : () int
        Steps taken.
    """

    eta1: jnp.ndarray
    eta2: jnp.ndarray
    params: Any
    Z: jnp.ndarray
    adam: AdamState
    t: jnp.ndarray


class SVGPInfo(NamedTuple):
    """Per-step record: ``elbo``, the bound estimated on the step's minibatch (at the state
    entering the step; higher is better), and ``delta``, the relative change of the
    parameters made by the step."""

    elbo: jnp.ndarray
    delta: jnp.ndarray


class SVGPData(NamedTuple):
    """Training data and the step-size schedule (traced, so changing them does not recompile)."""

    X: jnp.ndarray  # (n, d)
    y: jnp.ndarray  # (n,)
    step_size: jnp.ndarray  # () rho_0
    delay: jnp.ndarray  # ()
    decay: jnp.ndarray  # ()
    adam_lr: jnp.ndarray  # ()


@functools.partial(jax.jit, static_argnums=0)
def svgp_init(static: SVGPStatic, _key, data: SVGPData, start) -> SVGPState:
    """``q(u) = p(u)`` at the hyperparameters and inducing locations ``start = (params, Z)``:
    ``eta1 = 0``, ``eta2 = -Kmm^{-1}/2``."""
    params, Z = start
    prior = inducing_prior(static.kernel, params, Z, static.jitter)
    m = Z.shape[0]
    Kinv = cho_solve((prior.chol, True), jnp.eye(m, dtype=Z.dtype))
    return SVGPState(jnp.zeros(m, Z.dtype), -0.5 * Kinv, params, Z, adam_init((params, Z)),
                     jnp.asarray(0))


def elbo(kernel, likelihood, params, Z, mu, Sigma, X, y, scale, nodes, weights, jitter):
    """``scale * sum_i E_q[log p(y_i | f_i)] - KL(q(u) || p(u))`` on the rows ``X``."""
    prior = inducing_prior(kernel, params, Z, jitter)
    mean, var = marginals(project(kernel, params, prior, X), mu, Sigma)
    expected, _, _ = gauss_hermite_expectations(likelihood, y, mean, var, nodes, weights)
    return scale * jnp.sum(expected) - kl_to_prior(mu, Sigma, prior)


def _relative(new, old):
    new_flat, _ = ravel_pytree(new)
    old_flat, _ = ravel_pytree(old)
    return jnp.linalg.norm(new_flat - old_flat) / (1.0 + jnp.linalg.norm(old_flat))


class SVGPStatic(NamedTuple):
    """The step's static configuration (hashable: one compiled loop per value)."""

    kernel: Kernel
    likelihood: str
    n: int
    batch_size: int
    learn_hyperparameters: bool
    learn_inducing: bool
    num_quadrature: int
    jitter: float


def step(static: SVGPStatic, key, state: SVGPState, data: SVGPData):
    """One step: natural-gradient update of ``q(u)`` on a minibatch drawn with replacement
    with ``key`` (Hensman et al. 2013, eqs. 8-9), then Adam on the hyperparameters and
    inducing locations when learned."""
    (kernel, likelihood, n, batch_size, learn_hyperparameters, learn_inducing, num_quadrature,
     jitter) = static
    nodes, weights = gauss_hermite(num_quadrature)
    scale = n / batch_size
    learn = learn_hyperparameters or learn_inducing
    if batch_size == n:
        Xb, yb = data.X, data.y
    else:
        idx = jax.random.randint(key, (batch_size,), 0, n)
        Xb, yb = data.X[idx], data.y[idx]
    mu, Sigma = from_natural(Natural(state.eta1, state.eta2))
    prior = inducing_prior(kernel, state.params, state.Z, jitter)
    proj = project(kernel, state.params, prior, Xb)
    mean, var = marginals(proj, mu, Sigma)
    expected, g1, g2 = gauss_hermite_expectations(likelihood, yb, mean, var, nodes, weights)
    bound = scale * jnp.sum(expected) - kl_to_prior(mu, Sigma, prior)
    m = state.Z.shape[0]
    Kinv = cho_solve((prior.chol, True), jnp.eye(m, dtype=state.Z.dtype))
    target2 = -0.5 * Kinv + scale * (proj.kappa.T * g2) @ proj.kappa
    target1 = scale * proj.kappa.T @ (g1 - 2.0 * g2 * mean)
    rho = data.step_size * (1.0 + state.t / data.delay) ** (-data.decay)
    eta1 = (1.0 - rho) * state.eta1 + rho * target1
    eta2 = (1.0 - rho) * state.eta2 + rho * target2
    eta2 = 0.5 * (eta2 + eta2.T)
    theta = (state.params, state.Z)
    adam = state.adam
    if learn:

        def objective(th):
            return elbo(kernel, likelihood, th[0], th[1], mu, Sigma, Xb, yb, scale, nodes,
                        weights, jitter)

        grads = jax.grad(objective)(theta)
        grads = (
            grads[0] if learn_hyperparameters else jax.tree.map(jnp.zeros_like, grads[0]),
            grads[1] if learn_inducing else jnp.zeros_like(grads[1]),
        )
        theta, adam = adam_ascent(grads, theta, adam, data.adam_lr)
    delta = jnp.maximum(
        _relative((eta1, eta2), (state.eta1, state.eta2)),
        _relative(theta, (state.params, state.Z)),
    )
    new = SVGPState(eta1, eta2, theta[0], theta[1], adam, state.t + 1)
    return new, SVGPInfo(bound, delta)


class _Posterior(NamedTuple):
    """``q(u) = N(mu, Sigma)`` at ``Z`` under kernel ``params`` (relative ``jitter`` of ``Kmm``)."""

    params: dict
    Z: jnp.ndarray
    mu: jnp.ndarray
    Sigma: jnp.ndarray
    jitter: jnp.ndarray


@latent_family
@functools.partial(jax.jit, static_argnums=(0,))
def _marginals_chunk(kernel, post: _Posterior, X):
    prior = inducing_prior(kernel, post.params, post.Z, post.jitter)
    return marginals(project(kernel, post.params, prior, X), post.mu, post.Sigma)


@functools.partial(jax.jit, static_argnums=0, static_argnames=("num_draws",))
def _final_q(kernel, eta1, eta2, params, Z, jitter, key, num_draws: int):
    """``q(u)``'s mean and covariance, its KL to the prior and ``num_draws`` draws of ``u``."""
    mu, Sigma = from_natural(Natural(eta1, eta2))
    kl = kl_to_prior(mu, Sigma, inducing_prior(kernel, params, Z, jitter))
    z = jax.random.normal(key, (num_draws, mu.shape[0]), dtype=mu.dtype)
    return mu, Sigma, kl, mu + z @ jnp.linalg.cholesky(Sigma).T


@functools.partial(jax.jit, static_argnames=("likelihood", "num_quadrature"))
def _expected_log_likelihood(y, f_mean, f_var, likelihood, num_quadrature):
    """``E_q[log p(y_i | f_i)]`` per point (Gauss-Hermite)."""
    nodes, weights = gauss_hermite(num_quadrature)
    return gauss_hermite_expectations(likelihood, y, f_mean, f_var, nodes, weights)[0]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SVGPOptions(Iteration, Jitter, Draws, Likelihood):
    """The options of :func:`svgp` (documented there). ``batch_size <= n``, ``num_inducing <=
    n`` and the shape of ``inducing_points`` are checked by the engine, against the data."""

    num_inducing: int | None = None
    inducing: str = "kmeans"
    inducing_points: Any = None
    batch_size: int | None = None
    max_iter: int = 2000
    tol: float = 1e-8
    step_size: float = 0.5
    decay: float | None = None
    delay: float = 100.0
    learn_hyperparameters: bool = False
    learn_inducing: bool = False
    adam_lr: float = 0.01
    num_quadrature: int = 20

    def _check(self):
        one_of("inducing", self.inducing, INDUCING_METHODS)
        if self.num_inducing is not None:
            self._set("num_inducing", positive_int("num_inducing", self.num_inducing))
        if self.batch_size is not None:
            self._set("batch_size", positive_int("batch_size", self.batch_size))
        self._set("step_size", positive_float("step_size", self.step_size))
        if self.step_size > 1.0:
            raise ValueError(f"step_size must be in (0, 1], got {self.step_size!r}")
        if self.decay is not None:
            self._set("decay", nonnegative_float("decay", self.decay))
        self._set("delay", positive_float("delay", self.delay))
        for name in ("learn_hyperparameters", "learn_inducing"):
            self._set(name, boolean(name, getattr(self, name)))
        self._set("adam_lr", positive_float("adam_lr", self.adam_lr))
        self._set("num_quadrature", positive_int("num_quadrature", self.num_quadrature))


def _memory(n: int, d: int, options: dict) -> int:
    """Working bytes (``_memory``): per step, for a batch of ``b`` rows (default all ``n``), the
    projection and cross-covariance (``b x m`` each, and as many again for their gradients
    and the products of the step) and the quadrature's ``b x Q`` values; about 16 ``m x m``
    matrices (``Kmm``, its factor, ``eta2``, ``Sigma``, the targets, Adam's moments); the
    ``num_draws`` stored draws of ``u``."""
    m = _num_inducing(n, options)
    b = min(n, int(options.get("batch_size") or n))
    q = int(options.get("num_quadrature", 20))
    return FLOAT * (b * (6 * m + 4 * q) + 16 * m * m + int(options.get("num_draws", 1000)) * m)


_memory.hint = ("method={method!r} forms b x m matrices for a batch of b points (default all "
                "n) and m inducing points: pass batch_size (minibatches) or a smaller "
                "num_inducing")


def _num_inducing(n: int, options: dict) -> int:
    """``m``: the rows of ``inducing_points`` when given, else ``num_inducing`` (default
    ``min(100, n)``)."""
    Z = options.get("inducing_points")
    if Z is not None and hasattr(Z, "__len__"):
        return len(Z)
    return int(options.get("num_inducing") or min(100, n))


@register("svgp", ("gp", "sparse_gp"), options=SVGPOptions, memory=_memory)
def svgp(problem: Problem, options: SVGPOptions, *, key, kernel: Kernel) -> Approximation:
    """SVGP (Hensman et al. 2015): sparse variational GP classifier, natural gradients on q(u).

    Parameters
    ----------
    num_inducing : int, optional
        ``m``; default ``min(100, n)``. Ignored when ``inducing_points`` is given.
    inducing : {"kmeans", "random"}, default="kmeans"
        How the inducing locations are chosen (``ppl_bsvm.inference.inducing``).
    inducing_points : array of shape (m, d), optional
        Inducing locations given by the user.
    likelihood : {"probit", "logit"}, default="probit"
    batch_size : int, optional
        Minibatch size (drawn with replacement, weight ``n / batch_size``); default all ``n``
        points every step (deterministic).
    max_iter : int, default=2000
    tol : float, default=1e-8
        Stop when the relative change of the parameters in one step is below this.
    step_size, decay, delay : float
        Natural-gradient step ``rho_t = step_size (1 + t / delay)^-decay``; ``decay`` defaults
        to 0 (constant step) with full batches and 0.6 with minibatches.
    learn_hyperparameters, learn_inducing : bool, default=False
        Also fit the kernel hyperparameters / inducing locations by Adam on the bound.
    adam_lr : float, default=0.01
    num_quadrature : int, default=20
        Gauss-Hermite points for the expected log-likelihood.
    jitter : float, default=1e-6
        Relative jitter of ``Kmm``.
    num_draws : int, default=1000
        Draws of ``q(u)`` stored in ``idata.posterior.u``.
    link : str, optional
        Default link of ``predict_proba``: the likelihood's own (``"probit"``/``"logit"``),
        which is the exact predictive under ``q``.

    Notes
    -----
    ``idata.posterior`` holds draws of ``u`` (dim ``inducing``), not of ``f``, whose joint
    ``q(f)`` is ``n x n``; the ``approximation`` group holds ``u_mean``, ``u_cov``,
    ``inducing_points``, the marginals ``f_mean``/``f_var`` at the training inputs and ``elbo``
    (full-data bound at the end).
    """
    likelihood, jitter, num_quadrature = options.likelihood, options.jitter, options.num_quadrature
    n = problem.n
    batch = n if options.batch_size is None else options.batch_size
    if batch > n:
        raise ValueError(f"batch_size={batch} exceeds the number of training points n={n}")
    decay = (0.0 if batch == n else 0.6) if options.decay is None else options.decay
    key_inducing, key_loop, key_draws = jax.random.split(key, 3)
    if options.inducing_points is not None:
        Z0 = check_X(options.inducing_points, name="inducing_points", n_features=problem.d)
    else:
        m = min(100, n) if options.num_inducing is None else options.num_inducing
        Z0 = choose_inducing(problem.X, m, method=options.inducing,
                             seed=sklearn_seed(key_inducing))

    t0 = time.perf_counter()
    X = jnp.asarray(problem.X, dtype=jnp.float64)
    y = jnp.asarray(problem.y, dtype=jnp.float64)
    params0 = kernel.init_params(problem.X)
    Z0 = jnp.asarray(Z0, dtype=jnp.float64)
    data = SVGPData(X, y, *(jnp.asarray(v, dtype=jnp.float64)
                            for v in (options.step_size, options.delay, decay, options.adam_lr)))
    static = SVGPStatic(kernel, likelihood, n, batch, options.learn_hyperparameters,
                        options.learn_inducing, num_quadrature, jitter)
    state = svgp_init(static, None, data, (params0, Z0))
    result = run(step, state, data, static=static, key=key_loop, max_iter=options.max_iter,
                 tol=options.tol)
    state = result.state
    params, Z = state.params, state.Z
    mu, Sigma, kl, draws = _final_q(kernel, state.eta1, state.eta2, params, Z, jitter, key_draws,
                                    num_draws=options.num_draws)
    latent = Latent(_marginals_chunk, kernel, _Posterior(params, Z, mu, Sigma, jnp.asarray(jitter)))
    f_mean, f_var = latent(problem.X)
    expected = padded_call(_expected_log_likelihood, problem.y, f_mean, f_var,
                           likelihood=likelihood, num_quadrature=num_quadrature)
    full_elbo = float(np.sum(expected) - kl)
    draws = np.asarray(draws)[None]
    elapsed = time.perf_counter() - t0

    m = Z.shape[0]
    idata = make_idata(
        {"u": draws},
        coords={"inducing": np.arange(m), "inducing_bis": np.arange(m),
                "input_dim": list(problem.feature_names or range(Z.shape[1]))},
        dims={
            "u_mean": ["inducing"],
            "u_cov": ["inducing", "inducing_bis"],
            "inducing_points": ["inducing", "input_dim"],
            "f_mean": ["obs"],
            "f_var": ["obs"],
        },
        observed_y=problem.y,
        groups={
            APPROX_GROUP: {
                "u_mean": np.asarray(mu),
                "u_cov": np.asarray(Sigma),
                "inducing_points": np.asarray(Z),
                "f_mean": np.asarray(f_mean),
                "f_var": np.asarray(f_var),
                "elbo": float(full_elbo),
            }
        },
        attrs={"method": "svgp", "model": "sparse_gp", "likelihood": likelihood,
               "stop_reason": result.stop_reason},
    )
    return Approximation.from_run(
        result, idata=idata, predictor=LinkPredictor(latent, link=options.predictive_link),
        seconds=elapsed, trace={"elbo": result.infos.elbo, "delta": result.infos.delta},
        model="sparse_gp", kernel_params=params, jitter=jitter, state=state,
    )
