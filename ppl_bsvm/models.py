r"""The Bayesian SVM as NumPyro models: linear, GP and sparse GP, marginal or augmented.

All three share the pseudo-likelihood of Polson & Scott (2011) with a temperature
:math:`\gamma` (``specs/bsvm_inference.md`` sections 1 and 6),

.. math::

    L(y_i \mid f_i) = \exp(-2\gamma \max(0, 1 - y_i f_i))
                    = \int_0^\infty N\!\left(y_i(1 + \lambda_i);\; f_i,\; \lambda_i/\gamma\right)
                      d\lambda_i ,

which is not normalised over ``y``; the posterior over ``beta``/``f``/``u`` is proper. Each
model function takes ``augmented``:

``augmented=False`` (marginal)
    a factor ``-2 gamma sum_i max(0, 1 - y_i f_i)``: the target for NUTS (smooth except at the
    hinge, no extra latent variables; ``specs/stack_notes.md`` section 1).
``augmented=True``
    latent ``lam`` (one per observation, plate ``obs``, improper flat prior on ``(0, inf)``
    via ``ImproperUniform``) and the Gaussian factor ``N(y_i (1 + lam_i); f_i, lam_i/gamma)``:
    the model whose full conditionals the Gibbs sampler draws from
    (:mod:`ppl_bsvm.inference.mcmc.conditionals`).

Integrating ``lam`` out of the augmented model gives the marginal one exactly (tested by
quadrature). Site names are fixed and shared with every engine: ``beta`` (linear weights),
``f`` (latent function at the training inputs), ``u`` (inducing values), ``lam``, and kernel
hyperparameters by their natural names (``lengthscale``, ``variance``, ...) when they get a prior.

Models are plain functions of data. The linear model adds no intercept (pass
``ppl_bsvm.data.design_matrix(X, True)`` for one), and ``y`` must already be in {-1, +1}.

Examples
--------
>>> import jax, numpy as np
>>> from numpyro.infer import MCMC, NUTS
>>> from ppl_bsvm.models import linear_bsvm
>>> X = np.random.default_rng(0).normal(size=(50, 2)); y = np.sign(X[:, 0])
>>> mcmc = MCMC(NUTS(linear_bsvm), num_warmup=200, num_samples=200, progress_bar=False)
>>> mcmc.run(jax.random.key(0), X, y)
>>> mcmc.get_samples()["beta"].shape
(200, 2)
"""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import log_ndtr
from numpyro.distributions import constraints

from .kernels import DEFAULT_JITTER, Kernel, gram

__all__ = [
    "linear_bsvm",
    "gp_bsvm",
    "sparse_gp_bsvm",
    "pseudo_likelihood",
    "hinge_log_likelihood",
    "log_expected_pseudo_likelihood",
    "kernel_params_with",
    "hyperparameter_names",
]


def _hinge(margins):
    return jnp.maximum(0.0, 1.0 - margins)


def hinge_log_likelihood(margins, gamma=1.0):
    r"""The marginal pseudo-likelihood :math:`-2\gamma\sum_i \max(0, 1 - m_i)` of the margins
    :math:`m_i = y_i f_i` (summed over the last axis)."""
    return -2.0 * gamma * jnp.sum(_hinge(margins), axis=-1)


def pseudo_likelihood(f, y, *, augmented: bool, gamma=1.0) -> None:
    r"""Add the BSVM pseudo-likelihood of the latent values ``f`` (n,) to the current model.

    ``augmented=False``: factor ``hinge`` = :math:`-2\gamma\sum_i\max(0, 1 - y_i f_i)`.
    ``augmented=True``: site ``lam`` (plate ``obs``, flat on ``(0, inf)``) and factor
    ``augmented_likelihood`` = :math:`\sum_i \log N(y_i(1+\lambda_i); f_i, \lambda_i/\gamma)`.
    """
    if augmented:
        with numpyro.plate("obs", f.shape[-1]):
            lam = numpyro.sample("lam", dist.ImproperUniform(constraints.positive, (), ()))
        log_f = dist.Normal(f, jnp.sqrt(lam / gamma)).log_prob(y * (1.0 + lam))
        numpyro.factor("augmented_likelihood", jnp.sum(log_f, axis=-1))
    else:
        numpyro.factor("hinge", hinge_log_likelihood(y * f, gamma))


def log_expected_pseudo_likelihood(mean, var, y, gamma=1.0):
    r"""``log E[L(y | f)]`` for ``f ~ N(mean, var)``, elementwise, in closed form.

    With :math:`g = y f \sim N(\mu, s)`, :math:`\mu = y m`:

    .. math::

        E[e^{-2\gamma\max(0, 1 - g)}] = \Phi\!\left(\frac{\mu - 1}{\sqrt s}\right)
            + e^{-2\gamma(1 - \mu) + 2\gamma^2 s}\,
              \Phi\!\left(\frac{1 - \mu - 2\gamma s}{\sqrt s}\right)

    (the second term is the Gaussian tilted by :math:`e^{2\gamma g}`), evaluated with
    ``log_ndtr`` and ``logaddexp`` so that it stays finite for tiny or large ``s``. As
    ``s -> 0`` it tends to ``-2 gamma max(0, 1 - mu)``.
    """
    mu = y * mean
    s = jnp.maximum(var, 1e-300)
    sd = jnp.sqrt(s)
    above = log_ndtr((mu - 1.0) / sd)
    below = -2.0 * gamma * (1.0 - mu) + 2.0 * gamma**2 * s + log_ndtr((1.0 - mu - 2.0 * gamma * s) / sd)
    return jnp.logaddexp(above, below)


def _subsample_check(subsample_size, augmented: bool) -> None:
    if subsample_size is not None and augmented:
        raise ValueError("subsample_size needs augmented=False: the augmented model's lam "
                         "are local latent variables, which a subsampled plate would leave "
                         "without a guide")


def linear_bsvm(X, y, prior_scale=1.0, augmented: bool = False, gamma=1.0,
                subsample_size: int | None = None) -> None:
    r"""Linear Bayesian SVM: ``beta ~ N(0, prior_scale^2 I)``, ``f = X beta``.

    Parameters
    ----------
    X : array of shape (n, p)
        Design matrix (no intercept is added here).
    y : array of shape (n,)
        Labels in {-1, +1}.
    prior_scale : float, default=1.0
    augmented : bool, default=False
        Marginal hinge factor (``False``) or the augmented form with ``lam`` (``True``).
    gamma : float, default=1.0
        Temperature of the pseudo-likelihood.
    subsample_size : int, optional
        Evaluate the hinge factor on this many points drawn without replacement (plate
        ``obs``, scaled by ``n / subsample_size``: an unbiased estimate of the log density for
        stochastic VI); ``augmented=False`` only.
    """
    _subsample_check(subsample_size, augmented)
    X = jnp.asarray(X)
    beta = numpyro.sample(
        "beta", dist.Normal(jnp.zeros((), X.dtype), prior_scale).expand([X.shape[1]]).to_event(1)
    )
    y = jnp.asarray(y, X.dtype)
    if subsample_size is None:
        pseudo_likelihood(X @ beta, y, augmented=augmented, gamma=gamma)
        return
    with numpyro.plate("obs", X.shape[0], subsample_size=subsample_size) as rows:
        numpyro.factor("hinge", -2.0 * gamma * _hinge(y[rows] * (X[rows] @ beta)))


def hyperparameter_names(kernel: Kernel, params) -> list[str]:
    """Names a hyperparameter prior can be put on: the positive parameters ``log_<name>``."""
    return [name for name in kernel.constrain(params) if _locate(params, name) is not None]


def _locate(params, name: str):
    """Path to ``log_<name>`` in the (possibly nested, ``k1_``/``k2_``) parameter pytree."""
    if f"log_{name}" in params:
        return (f"log_{name}",)
    for child in ("k1", "k2"):
        prefix = f"{child}_"
        if child in params and name.startswith(prefix):
            rest = _locate(params[child], name[len(prefix):])
            if rest is not None:
                return (child, *rest)
    return None


def kernel_params_with(kernel: Kernel, params, values: Mapping) -> dict:
    """Copy of the unconstrained ``params`` with the natural-scale ``values`` substituted.

    ``values`` maps names of ``kernel.constrain(params)`` (``lengthscale``, ``variance``,
    ``k1_lengthscale``, ...) to positive values of a shape broadcastable to the parameter's.
    """

    def replace(tree, path, value):
        tree = dict(tree)
        if len(path) == 1:
            tree[path[0]] = jnp.broadcast_to(jnp.log(value), jnp.shape(tree[path[0]]))
        else:
            tree[path[0]] = replace(tree[path[0]], path[1:], value)
        return tree

    out = params
    for name, value in values.items():
        path = _locate(params, name)
        if path is None:
            raise ValueError(
                f"kernel {type(kernel).__name__} has no positive hyperparameter {name!r}; "
                f"hyperpriors can be put on {hyperparameter_names(kernel, params)}"
            )
        out = replace(out, path, value)
    return out


def _leaf(params, path):
    for step in path:
        params = params[step]
    return params


def _sample_hyperparameters(kernel, params, hyperpriors):
    values = {}
    for name, prior in hyperpriors.items():
        path = _locate(params, name)
        if path is None:
            raise ValueError(
                f"kernel {type(kernel).__name__} has no positive hyperparameter {name!r}; "
                f"hyperpriors can be put on {hyperparameter_names(kernel, params)}"
            )
        shape = jnp.shape(_leaf(params, path))
        if shape and prior.batch_shape == () and prior.event_shape == ():
            prior = prior.expand(shape).to_event(len(shape))
        values[name] = numpyro.sample(name, prior)
    return kernel_params_with(kernel, params, values)


def _kernel_params(kernel, X, params, hyperpriors):
    if not isinstance(kernel, Kernel):
        raise ValueError(f"kernel must be a ppl_bsvm.kernels.Kernel, got {type(kernel)}")
    params = kernel.init_params(X) if params is None else params
    if hyperpriors:
        params = _sample_hyperparameters(kernel, params, hyperpriors)
    return params


def _latent_gaussian(name: str, chol, whiten: bool):
    """``x ~ N(0, L L^T)``: directly, or non-centred as ``x = L v`` with ``v ~ N(0, I)``."""
    size = chol.shape[-1]
    if whiten:
        v = numpyro.sample(
            f"{name}_whitened", dist.Normal(jnp.zeros((), chol.dtype), 1.0).expand([size]).to_event(1)
        )
        return numpyro.deterministic(name, chol @ v)
    return numpyro.sample(name, dist.MultivariateNormal(jnp.zeros(size, chol.dtype), scale_tril=chol))


def gp_bsvm(
    X,
    y,
    kernel: Kernel,
    params=None,
    augmented: bool = False,
    gamma=1.0,
    jitter: float = DEFAULT_JITTER,
    whiten: bool = True,
    hyperpriors: Mapping | None = None,
) -> None:
    r"""GP Bayesian SVM: ``f ~ N(0, K)``, ``K = k(X, X) + jitter``.

    Parameters
    ----------
    X : array of shape (n, d)
    y : array of shape (n,)
        Labels in {-1, +1}.
    kernel : Kernel
    params : dict, optional
        Unconstrained kernel hyperparameters (default ``kernel.init_params(X)``).
    augmented : bool, default=False
    gamma : float, default=1.0
    jitter : float, default=1e-6
        Relative jitter of ``K`` (``ppl_bsvm.kernels.gram``).
    whiten : bool, default=True
        Non-centred parametrisation for NUTS: site ``f_whitened ~ N(0, I)`` and the
        deterministic ``f = L f_whitened`` with ``L L^T = K``. ``False`` samples ``f`` directly.
    hyperpriors : dict name -> Distribution, optional
        Priors on kernel hyperparameters on their natural scale (``{"lengthscale":
        dist.LogNormal(0, 1), "variance": ...}``); each becomes a site of that name. A scalar
        prior is expanded to the parameter's shape (ARD lengthscales).
    """
    X = jnp.asarray(X)
    params = _kernel_params(kernel, X, params, hyperpriors)
    K = gram(kernel, params, X, jitter)
    f = _latent_gaussian("f", jnp.linalg.cholesky(K), whiten)
    pseudo_likelihood(f, jnp.asarray(y, X.dtype), augmented=augmented, gamma=gamma)


def sparse_gp_bsvm(
    X,
    y,
    kernel: Kernel,
    inducing,
    params=None,
    augmented: bool = False,
    gamma=1.0,
    jitter: float = DEFAULT_JITTER,
    whiten: bool = True,
    hyperpriors: Mapping | None = None,
    subsample_size: int | None = None,
) -> None:
    r"""Sparse GP Bayesian SVM with inducing values ``u = f(Z)`` (FITC-style conditional).

    ``u ~ N(0, Kmm)``, and given ``u`` the latent values are independent,
    ``f_i | u ~ N(kappa_i u, ktilde_i)`` with ``kappa = Knm Kmm^{-1}`` and
    ``ktilde_i = K_ii - kappa_i K_mi`` (``specs/bsvm_inference.md`` section 4; the conditional
    variances are those of the S-BSVM bound). ``f`` is integrated out in closed form:

    ``augmented=False``
        factor ``sum_i log E[L(y_i | f_i) | u]`` (:func:`log_expected_pseudo_likelihood`);
    ``augmented=True``
        site ``lam`` and factor ``sum_i log N(y_i (1 + lam_i); kappa_i u, lam_i/gamma + ktilde_i)``.

    With the inducing points at the training inputs ``ktilde = 0`` (up to jitter) and this is
    :func:`gp_bsvm`.

    Parameters
    ----------
    X : array of shape (n, d)
    y : array of shape (n,)
    kernel : Kernel
    inducing : array of shape (m, d)
        Inducing locations ``Z`` (``ppl_bsvm.inference.inducing.choose_inducing``).
    params, augmented, gamma, jitter, hyperpriors
        As for :func:`gp_bsvm` (``jitter`` is added to ``Kmm``).
    whiten : bool, default=True
        Site ``u_whitened ~ N(0, I)`` and the deterministic ``u = L u_whitened``.
    subsample_size : int, optional
        As for :func:`linear_bsvm`: the factor on a subsample of the points (plate ``obs``),
        whose projections alone are computed (``O(subsample_size m)``).
    """
    from .inference.inducing import inducing_prior, project  # not at the top: import cycle

    _subsample_check(subsample_size, augmented)
    X = jnp.asarray(X)
    Z = jnp.asarray(inducing, X.dtype)
    params = _kernel_params(kernel, X, params, hyperpriors)
    prior = inducing_prior(kernel, params, Z, jitter)
    u = _latent_gaussian("u", prior.chol, whiten)
    y = jnp.asarray(y, X.dtype)
    if subsample_size is not None:
        with numpyro.plate("obs", X.shape[0], subsample_size=subsample_size) as rows:
            proj = project(kernel, params, prior, X[rows])
            numpyro.factor("expected_pseudo_likelihood", log_expected_pseudo_likelihood(
                proj.kappa @ u, proj.ktilde, y[rows], gamma))
        return
    proj = project(kernel, params, prior, X)
    mean = proj.kappa @ u
    if augmented:
        with numpyro.plate("obs", X.shape[0]):
            lam = numpyro.sample("lam", dist.ImproperUniform(constraints.positive, (), ()))
        log_f = dist.Normal(mean, jnp.sqrt(lam / gamma + proj.ktilde)).log_prob(y * (1.0 + lam))
        numpyro.factor("augmented_likelihood", jnp.sum(log_f, axis=-1))
    else:
        numpyro.factor(
            "expected_pseudo_likelihood",
            jnp.sum(log_expected_pseudo_likelihood(mean, proj.ktilde, y, gamma), axis=-1),
        )
