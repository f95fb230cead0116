r"""The ArviZ groups per observation: ``log_likelihood``, ``posterior_predictive`` and
``observed_data``, so that ``az.loo``, ``az.compare`` and ``az.plot_ppc_*`` work on a ``Fit``.

Every group holds the variable ``y`` on the training observations (dim ``obs``); the first two
have the posterior's sample dims ``(chain, draw)``.

**The Bayesian SVM's log-likelihood is its pseudo-likelihood.** The marginal model (``lam``
integrated out; Polson & Scott 2011, eq. 1) conditions on

.. math::

    \log L(y_i \mid f_i) = -2 \gamma \max(0, 1 - y_i f_i),

with the fit's temperature ``gamma`` (``fit.options["gamma"]``, default 1), and that is what
``log_likelihood`` holds, unnormalised. ``L`` is not a probability over ``y``:
``L(+1|f) + L(-1|f)`` runs from ``2 exp(-2 gamma)`` at ``f = 0`` to ``1 + exp(-2 gamma (1 + |f|))``
for ``|f| >= 1``. It is left unnormalised on purpose: PSIS-LOO (``az.loo``) reweights the
posterior draws by ``1 / L(y_i | f_i)``, which gives the leave-one-out posterior exactly when
``L`` is the factor the posterior was conditioned on; dividing by the ``f``-dependent
normaliser would change the weights and describe another model. So ``elpd_loo`` is a
*pseudo*-elpd: the log of the leave-one-out expected pseudo-likelihood, at most 0, 0 for points
predicted beyond the margin in every draw (ArviZ 1.3 needs spread in the tail of each
observation's log-likelihood: :func:`_untie` subtracts noise below 1e-10 from the hinge's
zeros). It is not a log predictive probability: do not compare it with the ``elpd`` of a
model with a proper likelihood.

**What ``az.compare`` measures here.** It ranks models by how well each fit's draws predict
held-out points under the pseudo-likelihood; it is meant for exact posteriors of different
models (kernels, the linear against the GP model, each sampled by ``gibbs`` or ``nuts``). It
does not measure how close an approximation is to the exact posterior of the same model, and
it rewards narrow fits: on breast cancer (linear model) ECM's pseudo-posterior scored
elpd_loo -18.3, mean-field VI -25.8, Gibbs and NUTS -42.6 and VI with linear response -60.1,
because a too-narrow posterior that is right about the margin points pays less for them.
How far an approximation is from the exact posterior is what ``ppl_bsvm.compare`` measures. The baselines that have draws use their own likelihood, which is proper: ``gpc``
and ``svgp`` their ``likelihood`` option (``log Phi(y f)``, ``-log(1 + exp(-y f))``),
``gpc_sklearn`` and ``rvm`` the logistic one.

**Replicated data** (``posterior_predictive``) draw ``y_rep_i = +1`` with probability
``P(y = +1 | f_i)`` at each posterior draw of ``f_i``: the likelihood itself for the baselines,
and for the Bayesian SVM its normalised pseudo-likelihood ``L(+1|f) / (L(+1|f) + L(-1|f))`` (the
``"normalized"`` link of :mod:`ppl_bsvm.predictive`), stored as int8 in {-1, +1}, as
``observed_data``'s ``y`` (float64) holds the training labels.

**Which draws of f.** Fits whose posterior holds ``f`` at the training inputs (the GP samplers,
VI, ECM, the RVM) use those draws, and linear fits ``f = x^T beta`` from the draws of ``beta``.
Fits with inducing values only (S-BSVM, SVGP) draw ``f_i`` from their predictive marginals
``q(f_i)``, one draw per posterior draw, independently across observations: right for
pointwise quantities (``loo``, per-observation checks), not for statistics that pool
observations of one replicate.

**Memory.** The two groups hold ``chain x draw x n`` values (8 + 1 bytes each). They are built
when a fit is made if that count is at most :data:`POINTWISE_LIMIT` (2 x 10^6: 18 MB); a larger
fit (S-BSVM on 10^6 points with 1,000 draws would need 9 GB) gets none, says why in
``idata.attrs["pointwise_groups"]``, and builds them on request with
``fit.add_log_likelihood(X, y)`` (fewer draws, the option ``num_draws``, make them smaller).
A checkpointed run builds them once, for its final fit: its intermediate checkpoints are saved
without them.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy.special import expit, log_ndtr, ndtr

from ._idata import _creation_attrs
from .data import design_matrix

__all__ = ["POINTWISE_LIMIT", "FIXED_LIKELIHOODS", "likelihood_of", "log_likelihood",
           "prob_positive", "add_groups", "attach"]

POINTWISE_LIMIT = 2 * 10**6
"""Most ``chain x draw x n`` values for which a fit gets its pointwise groups when it is made:
18 MB and about 0.2 s (every Gibbs or NUTS fit of 4 x 2,000 draws up to n = 250, 1,000 draws
up to n = 2,000). At 10^7 values (S-BSVM on 10^4 points) they took 1.4 s, longer than the
fit itself (1.1 s)."""

FIXED_LIKELIHOODS = {"gpc_sklearn": "logit", "rvm": "logit"}
"""Baselines whose likelihood is not an option: scikit-learn's Laplace GPC and the RVM."""

ATTR = "pointwise_groups"
"""``idata.attrs`` key saying why a fit has no pointwise groups."""



def likelihood_of(method: str, options: dict) -> tuple[str, float] | None:
    """``(kind, gamma)`` of a fit: ``("hinge", gamma)`` for the Bayesian SVM engines (those with
    a temperature), ``("probit" | "logit", 1.0)`` for the baselines, None for a method without
    a likelihood of draws (Platt scaling, BC-SVM)."""
    if "gamma" in options:
        return "hinge", float(options["gamma"])
    kind = options.get("likelihood") or FIXED_LIKELIHOODS.get(method)
    return (kind, 1.0) if kind else None


def log_likelihood(kind: str, gamma: float, y, f) -> np.ndarray:
    """``log p(y | f)`` elementwise (``y`` in {-1, +1}); ``"hinge"``: the unnormalised
    pseudo-likelihood ``-2 gamma max(0, 1 - y f)`` (module doc)."""
    margin = np.asarray(y) * np.asarray(f)
    if kind == "hinge":
        return -2.0 * gamma * np.maximum(0.0, 1.0 - margin)
    if kind == "probit":
        return log_ndtr(margin)
    if kind == "logit":
        return -np.logaddexp(0.0, -margin)
    raise ValueError(f"unknown likelihood {kind!r}")


def prob_positive(kind: str, gamma: float, f) -> np.ndarray:
    """``P(y = +1 | f)``: the likelihood, or the Bayesian SVM's normalised pseudo-likelihood."""
    if kind == "hinge":  # predictive.normalized_link in numpy: eager JAX would compile per shape
        f = np.asarray(f, dtype=np.float64)
        return expit(-2.0 * gamma * (np.maximum(0.0, 1.0 - f) - np.maximum(0.0, 1.0 + f)))
    if kind == "probit":
        return ndtr(f)
    if kind == "logit":
        return expit(f)
    raise ValueError(f"unknown likelihood {kind!r}")


def latent_draws(fit, X: np.ndarray) -> np.ndarray:
    """Draws ``(chain, draw, n)`` of ``f`` at the training inputs ``X`` (module doc)."""
    post = fit.idata.posterior
    chains, draws = post.sizes["chain"], post.sizes["draw"]
    n = X.shape[0]
    if "f" in post and post["f"].dims == ("chain", "draw", "obs") and post["f"].shape[2] == n:
        return np.asarray(post["f"].values, dtype=np.float64)
    if "beta" in post:
        beta = np.asarray(post["beta"].values, dtype=np.float64)
        Xd = design_matrix(X, intercept=beta.shape[-1] == X.shape[1] + 1)
        return np.einsum("cdk,nk->cdn", beta, Xd)
    f = fit.predictor.sample_latent(X, chains * draws, _seed(fit))
    return f.reshape(chains, draws, n)


TIE_BREAK = 1e-10
"""Size of the noise that :func:`_untie` subtracts from the hinge's zeros."""


def _untie(loglik: np.ndarray, rng) -> np.ndarray:
    """``loglik`` with uniform noise in ``(-TIE_BREAK, 0]`` subtracted from every value that is
    exactly 0 (a draw beyond the margin: the hinge's flat part), in place.

    PSIS fits a generalised Pareto to the largest importance ratios ``1 / L`` of each
    observation, its tail (``3 sqrt(S)`` of ``S`` draws). A point inside the margin in fewer
    draws than that has a tail of tied ratios 1, and ArviZ 1.3 then returns no Pareto k (NaN:
    its first quartile equals its minimum), and ``az.loo`` leaves the point out of its table
    of k values (48 of 398 points of a linear Gibbs fit on breast cancer); where the ratios
    are all tied it refuses them (``ValueError: All tail values are the same``). Noise below
    1e-10 on the tied values breaks the ties and changes ``elpd_loo`` by less than
    ``TIE_BREAK`` per point, so every observation gets a finite k. Those k are large for the
    points inside the margin in a handful of draws only (the fit sees those few ratios far
    above thousands of ties): a small tail that PSIS cannot resolve, although such a point's
    ``elpd_loo`` is within ``(r / S) max(1 / L)`` of 0 for ``r`` draws inside the margin.
    Noise of 1e-14 is too fine: its ratios ``exp(noise)`` take a few dozen float64 values, and
    ArviZ's Pareto fit then gave NaN for 71 of 1,000 constant columns of 500 draws; from
    1e-12 up none did.
    """
    tied = loglik == 0.0
    if tied.any():
        loglik[tied] -= TIE_BREAK * rng.random(int(tied.sum()))
    return loglik


def _seed(fit) -> int:
    """A NumPy seed from the fit's key data (the same fit gives the same replicates)."""
    return 0 if fit.seed is None else int(np.sum(np.asarray(fit.seed, dtype=np.uint64)) % 2**32)


def _group(values: dict, chain, draw, n: int) -> xr.Dataset:
    coords = {"chain": chain, "draw": draw, "obs": np.arange(n)}
    return xr.Dataset({k: (("chain", "draw", "obs"), v) for k, v in values.items()},
                      coords=coords, attrs=_creation_attrs(("chain", "draw")))


def add_groups(fit, X: np.ndarray, y_pm: np.ndarray) -> None:
    """Add ``log_likelihood``, ``posterior_predictive`` and (if missing) ``observed_data`` to
    ``fit.idata``, in place, from the training data (``y_pm`` in {-1, +1})."""
    kind, gamma = likelihood_of(fit.method, fit.options)
    f = latent_draws(fit, X)
    post = fit.idata.posterior
    rng = np.random.default_rng([_seed(fit), 20])
    loglik = _untie(log_likelihood(kind, gamma, y_pm, f), rng)
    y_rep = np.where(rng.random(f.shape) < prob_positive(kind, gamma, f), 1, -1).astype(np.int8)
    del f
    n = X.shape[0]
    fit.idata["log_likelihood"] = xr.DataTree(_group({"y": loglik}, post["chain"].values,
                                                     post["draw"].values, n))
    fit.idata["posterior_predictive"] = xr.DataTree(_group({"y": y_rep}, post["chain"].values,
                                                           post["draw"].values, n))
    if "observed_data" not in fit.idata.children:
        obs = xr.Dataset({"y": (("obs",), np.asarray(y_pm))}, coords={"obs": np.arange(n)},
                         attrs=_creation_attrs(()))
        fit.idata["observed_data"] = xr.DataTree(obs)
    fit.idata.attrs.pop(ATTR, None)


def attach(fit, X: np.ndarray, y_pm: np.ndarray) -> None:
    """:func:`add_groups` when ``fit`` has draws, a likelihood and at most
    :data:`POINTWISE_LIMIT` values to store; otherwise note in ``idata.attrs`` why not."""
    if "posterior" not in fit.idata.children or likelihood_of(fit.method, fit.options) is None:
        return
    post = fit.idata.posterior
    size = post.sizes["chain"] * post.sizes["draw"] * X.shape[0]
    if size > POINTWISE_LIMIT:
        fit.idata.attrs[ATTR] = (
            f"omitted: chain x draw x n = {size} values exceed POINTWISE_LIMIT = "
            f"{POINTWISE_LIMIT}; build them with fit.add_log_likelihood(X, y)"
        )
        return
    add_groups(fit, X, y_pm)
