r"""The replica-TAP (ADATAP) fixed point of Malzahn & Opper (2003): pure JAX, float64.

Bootstrap averages of a kernel machine trained on resampled data ``D`` (Poisson occupation
numbers ``s_i ~ Poisson(S/N)``) become, after the replica trick and the ``beta -> inf`` limit,
moments of an effective model with one Gaussian *site* per training point (``specs/replica_tap.md``
sections 4-5). Each site ``i`` has three numbers: ``Lambda(i) >= 0``, ``gamma(i)`` and
``lam(i)`` (the paper's Eq. 15; ``lam <= 0`` for the hard margin); a replicated Gaussian with these parameters has
thermal variance ``chi = 1/Lambda``, bootstrap mean ``m = gamma/Lambda`` and bootstrap variance
``V = -lam/Lambda^2``. One sweep of the parallel iteration (spec section 5.2) is

.. math::

    \text{(T1)}\quad & G = (K^{-1} + \mathrm{diag}\,\Lambda)^{-1},\quad
        \chi_i = G_{ii},\quad m = G\gamma,\quad V_i = \textstyle\sum_j G_{ij}^2(-\lambda_j)
        \qquad\text{(Eq. 22)}\\
    \text{(T2)}\quad & \text{cavity } (\chi^c_i, m^c_i, V^c_i) \text{ of each point}
        \qquad\text{(Eq. 23 solved for the cavity)}\\
    \text{(T3)}\quad & \text{moments of the tilted distribution } L_i(f_i)\,
        \hat P_{\setminus i}(f_i) \qquad\text{(Eq. 21)}\\
    \text{(T4)}\quad & \text{new sites matching T3 (Eq. 23 solved for the site), damped.}

Numerics (spec section 7): ``K`` is never inverted. With ``S = diag(sqrt(Lambda))`` and
``B = I + S K S = L L^T``, each entry of ``G`` is formed as ``K - (L^{-1} S K)^T (L^{-1} S K)``
where its sites are small and as ``S^{-1} (I - B^{-1}) S^{-1}`` where they clamp (the first
form loses six digits once sites are clamped), both from a single triangular solve and matrix
product (:func:`model_moments`); the cavity comes from the cancellation-free identities
``chi^c_i = G_ii / [B^{-1}]_ii``, ``m^c_i = m_i - chi^c_i w_i`` and
``V^c_i = sum_{j != i} G_ij^2 (-lam_j) / [B^{-1}]_ii^2``; the hard-margin T3/T4 use
``1 - p Phi = Phi(-Delta) + p0 Phi(Delta)`` so that ``p = 1 - e^{-S/N}`` never cancels. With
these forms the iteration converges up to ``S/N = 30`` (``Lambda ~ 1e14``).

Three models share T1, T2 and the loop; only T3/T4 differ (``TAPConfig.model``):

``"hard"``
    hard-margin SVM without bias (the paper; spec 5.1), multiplicities irrelevant;
``"soft"``
    soft-margin SVM without bias, penalty ``C s_i`` for ``s_i`` copies (spec 8.2);
``"regression"``
    GP regression with noise variance ``sigma^2 / s_i`` (spec 8.3; Malzahn & Opper 2003, JMLR).

:func:`solve` runs the damped iteration of spec 5.2 (the reference);
:mod:`ppl_bsvm.bootstrap.tap_newton` reaches the same fixed point with far fewer sweeps
(safeguarded Newton-Krylov steps near it), and :func:`ppl_bsvm.bootstrap.replica_tap` uses it.

The fixed point is differentiable in ``K`` (and hence in kernel hyperparameters) by implicit
differentiation (``tap_gradient.fixed_point``): the adjoint system ``(I - J^T) u = g`` of the undamped
sweep's Jacobian ``J`` is solved by a damped iteration on vector-Jacobian products, so no
``3N x 3N`` matrix is ever formed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular
from jax.scipy.special import gammaln, ndtr

from ..inference.loop import iterate
from . import _linalg

__all__ = [
    "MODELS",
    "TAPConfig",
    "TAPData",
    "TAPState",
    "TAPInfo",
    "Moments",
    "Cavity",
    "Factor",
    "factor",
    "model_moments",
    "model_marginals",
    "cavity",
    "cavity_from",
    "off_diagonal_var",
    "tilted_and_sites",
    "sweep",
    "step",
    "damping",
    "converged",
    "solve",
    "init",
    "start_precision",
    "mismatch",
    "fields_at",
    "poisson_copies",
]

MODELS = ("hard", "soft", "regression")

_INV_SQRT_2PI = 0.3989422804014327

_SPLIT = 1.0
"""``Lambda_j K_jj`` from which a site counts as clamping (see :class:`Factor`)."""

class TAPConfig(NamedTuple):
    """Static (hashable) settings of one compiled solver.

    Attributes
    ----------
    model : {"hard", "soft", "regression"}
    n_copies : int
        Largest multiplicity ``s`` kept in the Poisson sums of the soft-margin and regression
        tilted moments (the tail beyond it is below 1e-12); 0 for the hard margin, where
        multiplicities do not matter.
    max_damping : float
        Upper limit of the adaptive damping ``eta``. The spec (5.2) caps it at 0.5; letting it
        regrow to 1 (undamped sweeps while the mismatch keeps falling) reaches the same fixed
        point in about half the sweeps for ``S <= 4N`` on the data of the benchmark.
    """

    model: str
    n_copies: int = 0
    max_damping: float = 1.0


class TAPData(NamedTuple):
    """Everything a sweep reads besides the state (traced, never baked into the program).

    Attributes
    ----------
    K : (n, n)
        Kernel matrix of the training inputs.
    y : (n,)
        Labels in {-1, +1} (classification) or real targets (regression).
    ratio : ()
        ``S / N``, the mean bootstrap sample size over ``N``.
    C : ()
        Soft-margin penalty per copy (ignored by the other models).
    noise : ()
        Regression noise variance ``sigma^2`` (ignored by the classifiers).
    """

    K: jnp.ndarray
    y: jnp.ndarray
    ratio: jnp.ndarray
    C: jnp.ndarray
    noise: jnp.ndarray


class TAPState(NamedTuple):
    """State of the damped parallel iteration.

    Attributes
    ----------
    Lambda : (n,)
        Site precisions ``Lambda(i) >= 0`` (the paper's ``beta(lambda_0 - lambda)``).
    gamma : (n,)
        Site shifts ``gamma(i)``; the site mean is ``gamma / Lambda``.
    lam : (n,)
        Site replica couplings ``lambda(i)`` (``<= 0`` for the hard margin, spec 5.1); the
        site's bootstrap variance is ``-lam / Lambda^2``.
    eta : ()
        Damping of the next update (adaptive, see :func:`step`; starts at 0.5).
    mismatch : ()
        Moment mismatch of the previous sweep (``inf`` at the start).
    """

    Lambda: jnp.ndarray
    gamma: jnp.ndarray
    lam: jnp.ndarray
    eta: jnp.ndarray
    mismatch: jnp.ndarray


class TAPInfo(NamedTuple):
    """Per-sweep record (the trace): ``mismatch`` between the Gaussian model's moments (T1)
    and the tilted moments (T3) before the update, ``max_i max(|dm_i|, |d sqrt(V_i)|,
    |d chi_i| / chi_i)``, and the damping ``eta`` used for the update."""

    mismatch: jnp.ndarray
    eta: jnp.ndarray


class Factor(NamedTuple):
    """Factorisation of the Gaussian model at given sites.

    Attributes
    ----------
    chol : (n, n)
        Lower Cholesky factor of ``B = I + S K S``.
    s : (n,)
        ``sqrt(Lambda)``.
    w : (n,)
        ``(I + diag(Lambda) K)^{-1} gamma``, so that the mean field is ``m = K w``.
    big : (n,) bool
        Sites with ``Lambda_j K_jj >= 1``, whose contributions are formed from the site mean
        ``gamma/Lambda`` and variance ``-lam/Lambda^2`` (finite as the site clamps); the
        others use ``gamma`` and ``lam`` themselves (a soft-margin site can have
        ``Lambda = 0`` and ``gamma != 0``: a linear tilt).
    lam : (n,)
        The sites' ``lam``.
    """

    chol: jnp.ndarray
    s: jnp.ndarray
    w: jnp.ndarray
    big: jnp.ndarray
    lam: jnp.ndarray


class Moments(NamedTuple):
    """Marginal moments per training point: thermal variance ``chi`` (times beta), bootstrap
    mean ``mean`` and bootstrap variance ``var``."""

    chi: jnp.ndarray
    mean: jnp.ndarray
    var: jnp.ndarray


class Cavity(NamedTuple):
    """Cavity moments of each point (its own site removed), and its precision ``Lambda_c``."""

    chi: jnp.ndarray
    mean: jnp.ndarray
    var: jnp.ndarray
    Lambda: jnp.ndarray


def _phi(x):
    return _INV_SQRT_2PI * jnp.exp(-0.5 * x * x)


def _psi1(x):
    """``E[(x - Z)_+] = x Phi(x) + phi(x)`` for ``Z ~ N(0, 1)``."""
    return x * ndtr(x) + _phi(x)


def factor(K, Lambda, gamma, lam) -> Factor:
    """Cholesky of ``B = I + S K S`` and the weights ``w`` (spec 7; never inverts ``K``).

    ``w = (I + Lambda K)^{-1} gamma`` is ``S B^{-1} S (gamma / Lambda)`` on clamping sites
    (no cancellation as ``Lambda -> inf``) and ``gamma - S B^{-1} S K gamma`` on the others
    (defined at ``Lambda = 0``).
    """
    pos = Lambda > 0
    s = jnp.where(pos, jnp.sqrt(jnp.where(pos, Lambda, 1.0)), 0.0)
    n = K.shape[0]
    B = jnp.eye(n, dtype=K.dtype) + s[:, None] * K * s[None, :]
    chol = _linalg.cholesky(B)
    big = Lambda * jnp.diag(K) >= _SPLIT
    site_mean = jnp.where(big, gamma / jnp.where(big, Lambda, 1.0), 0.0)
    gamma_small = jnp.where(big, 0.0, gamma)
    rhs = s * site_mean - s * (K @ gamma_small)
    w = s * cho_solve((chol, True), rhs) + gamma_small
    return Factor(chol, s, w, big, lam)


def model_moments(K, Lambda, gamma, lam):
    """T1 (Eq. 22) and the pieces T2 needs: the first four outputs of
    :func:`model_marginals`."""
    return model_marginals(K, Lambda, gamma, lam)[:4]


def model_marginals(K, Lambda, gamma, lam):
    r"""T1 (Eq. 22) and the pieces T2 needs, from one Cholesky factorisation, one triangular
    solve and one matrix product (about ``3.3 N^3`` flops).

    With ``W = L^{-1}`` (``B = L L^T``) and ``U = W S K``, every entry of ``G`` is an inner
    product of columns of ``W`` and ``U``: ``U_i . U_j = K_ij - G_ij`` (the form for small
    sites), ``W_i . W_j = delta_ij - s_i s_j G_ij`` (for clamping sites, ``s = sqrt(Lambda)``)
    and ``U_i . W_j = s_j G_ij`` (mixed pairs). So each site contributes one column
    ``Z_i = L^{-1} R_i`` of a single solve, ``R_i = e_i / s_i`` on clamping sites
    (``Lambda_i K_ii >= 1``, :class:`Factor`) and ``R_i = s K_{:, i}`` on the others, and

    .. math:: G_{ij} = c_i c_j \bigl(a_i^2 \delta_{ij} + b_i b_j K_{ij} - Z_i \cdot Z_j\bigr)

    with ``(a_i, b_i, c_i) = (1/s_i, 0, 1)`` on clamping sites and ``(0, 1, -1)`` on the
    others: each entry comes from the form of spec 7 that suits its sites, without the
    cancellation of ``K - (...)`` where sites clamp or of ``(I - B^{-1}) / s s^T`` where they
    vanish. ``[B^{-1}]_ii`` is ``Lambda_i |Z_i|^2`` on clamping sites and ``1 - Lambda_i G_ii``
    (at least about 1/2) on the others.

    Returns
    -------
    moments : Moments
        ``chi = diag G``, ``mean = K w``, ``var = diag(G diag(-lam) G)``.
    fac : Factor
    G : (n, n)
        ``(K^{-1} + diag Lambda)^{-1}``.
    binv_diag : (n,)
        ``diag(B^{-1})``.
    offvar : (n,)
        :func:`off_diagonal_var` (the cavity variance times ``[B^{-1}]_ii^2``).
    """
    fac = factor(K, Lambda, gamma, lam)
    s, big = fac.s, fac.big
    a = jnp.where(big, 1.0 / jnp.where(big, s, 1.0), 0.0)
    b = jnp.where(big, 0.0, 1.0)
    c = jnp.where(big, 1.0, -1.0)
    # Z^T = R^T L^{-T}, so that Z^T Z is a product of the form A A^T (twice as fast on CPU
    # as A^T A)
    Zt = _linalg.solve_transposed(fac.chol, jnp.diag(a) + b[:, None] * K * s[None, :])
    ZZ = Zt @ Zt.T
    G = (c[:, None] * c[None, :]) * ((b[:, None] * b[None, :]) * K - ZZ + jnp.diag(a * a))
    chi = jnp.diag(G)
    binv_diag = jnp.where(big, Lambda * jnp.diag(ZZ), 1.0 - Lambda * chi)
    mean = K @ fac.w
    offvar = off_diagonal_var(G, lam)
    return Moments(chi, mean, offvar + chi**2 * (-lam)), fac, G, binv_diag, offvar


def cavity(moments: Moments, fac: Factor, G, binv_diag, lam) -> Cavity:
    """T2 in its cancellation-free form (spec 5.1): the site of each point removed."""
    return cavity_from(moments.chi, moments.mean, off_diagonal_var(G, lam), binv_diag, fac.w)


def off_diagonal_var(G, lam):
    """``sum_{j != i} G_ij^2 (-lam_j)``: the cavity variance times ``[B^{-1}]_ii^2``."""
    n = G.shape[0]
    return ((G * G) * (1.0 - jnp.eye(n, dtype=G.dtype))) @ (-lam)


def cavity_from(chi, mean, offvar, binv_diag, w) -> Cavity:
    """T2 from the model's ``chi``, ``mean``, :func:`off_diagonal_var`, ``diag(B^{-1})`` and
    ``w``: ``chi^c = chi / [B^{-1}]_ii``, ``m^c = m - chi^c w``,
    ``V^c = offvar / [B^{-1}]_ii^2``, ``Lambda_c = 1 / chi^c``."""
    chi_c = chi / binv_diag
    return Cavity(chi_c, mean - chi_c * w, offvar / binv_diag**2, binv_diag / chi)


def poisson_copies(ratio, n_copies: int):
    """``P(s)`` of ``s ~ Poisson(ratio)`` for ``s = 1..n_copies`` (shape ``(n_copies,)``)."""
    s = jnp.arange(1, n_copies + 1, dtype=jnp.result_type(float))
    return s, jnp.exp(s * jnp.log(ratio) - ratio - gammaln(s + 1.0))


def _hard(cav: Cavity, data: TAPData):
    """Hard margin: T3 (Eq. 21) and the closed T4 of spec 5.1, with ``q = 1 - p Phi`` formed
    as ``Phi(-Delta) + p0 Phi(Delta)``."""
    y = data.y
    p0 = jnp.exp(-data.ratio)
    p = -jnp.expm1(-data.ratio)
    sd = jnp.sqrt(cav.var)
    delta = (1.0 - y * cav.mean) / sd
    Phi, Phim, phi = ndtr(delta), ndtr(-delta), _phi(delta)
    a = delta * Phi + phi  # psi1(Delta) = E[(Delta - Z)_+]
    am = phi - delta * Phim  # psi1(-Delta) = a - Delta
    q = Phim + p0 * Phi
    var_max = jnp.maximum(Phim - a * am, 0.0)  # Var(max(Z, Delta))
    tilted = Moments(
        chi=cav.chi * q,
        mean=cav.mean + y * p * sd * a,
        var=cav.var * (var_max + p0 * (a * am + Phi + p * a * a)),
    )
    bracket = jnp.maximum(Phi * Phim - a * am, 0.0) + p0 * (Phi * Phi + a * a)
    Lambda = cav.Lambda * p * Phi / q
    gamma = cav.Lambda * p * y * (Phi + sd * phi) / q
    lam = -(cav.Lambda**2) * cav.var * p * bracket / q**2
    return tilted, (Lambda, gamma, lam)


def _general_sites(cav: Cavity, rho, one_minus_rho, dmean, var_new):
    """T4 for tilted moments ``chi = rho chi_c``, ``m = m_c + dmean``, ``V = var_new``:
    ``Lambda = 1/chi - Lambda_c``, ``gamma = m/chi - gamma_c``, ``lam = -V/chi^2 - lam_c``,
    written without the first two subtractions."""
    Lambda = cav.Lambda * one_minus_rho / rho
    gamma = cav.Lambda * (cav.mean * one_minus_rho + dmean) / rho
    lam = -(cav.Lambda**2) * (var_new / rho**2 - cav.var)
    return Lambda, gamma, lam


def _soft(cav: Cavity, data: TAPData, n_copies: int):
    """Soft margin (spec 8.2): ``s`` copies shift the cavity field by ``c_s = C s chi_c``.

    With ``t = y x field ~ N(mu, sigma^2)`` the ``beta -> inf`` field is ``t`` (``t >= 1``),
    ``1`` (``1 - c_s <= t < 1``) or ``t + c_s``; moments are summed over ``s ~ Poisson(S/N)``.
    """
    y = data.y
    s, P = poisson_copies(data.ratio, n_copies)
    p0 = jnp.exp(-data.ratio)
    sd = jnp.sqrt(cav.var)
    delta = (1.0 - y * cav.mean) / sd
    kappa = data.C * s[:, None] * cav.chi[None, :] / sd[None, :]  # (copies, n)
    delta_s = delta[None, :] - kappa
    Phi, phi = ndtr(delta), _phi(delta)
    Phi_s, phi_s = ndtr(delta_s), _phi(delta_s)
    Pc = P[:, None]
    margin = jnp.sum(Pc * (Phi[None, :] - Phi_s), axis=0)  # P(on the margin)
    shift = jnp.sum(Pc * (_psi1(delta)[None, :] - _psi1(delta_s)), axis=0)  # E[z - mu] / sd
    second = p0 + jnp.sum(
        Pc
        * (
            (1.0 - Phi + delta * phi)[None, :]
            + delta[None, :] ** 2 * (Phi[None, :] - Phi_s)
            + Phi_s
            - delta_s * phi_s
            - 2.0 * kappa * phi_s
            + kappa**2 * Phi_s
        ),
        axis=0,
    )  # E[(z - mu)^2] / sd^2
    var_new = cav.var * jnp.maximum(second - shift**2, 0.0)
    rho = 1.0 - margin
    dmean = y * sd * shift
    tilted = Moments(cav.chi * rho, cav.mean + dmean, var_new)
    return tilted, _general_sites(cav, rho, margin, dmean, var_new)


def _regression(cav: Cavity, data: TAPData, n_copies: int):
    """GP regression (spec 8.3): ``s`` copies of ``(x_i, y_i)`` act as noise ``sigma^2 / s``,
    pulling the cavity field towards ``y_i`` with weight ``w_s = s chi_c / (sigma^2 + s chi_c)``.
    """
    s, P = poisson_copies(data.ratio, n_copies)
    p0 = jnp.exp(-data.ratio)
    ws = s[:, None] * cav.chi[None, :] / (data.noise + s[:, None] * cav.chi[None, :])
    Pc = P[:, None]
    resid = data.y - cav.mean
    one_minus_rho = jnp.sum(Pc * ws, axis=0) + (1.0 - p0 - jnp.sum(P))  # truncation tail
    rho = 1.0 - one_minus_rho
    dmean = jnp.sum(Pc * ws, axis=0) * resid
    second = p0 * cav.var + jnp.sum(Pc * ((ws * resid) ** 2 + (1.0 - ws) ** 2 * cav.var), axis=0)
    var_new = jnp.maximum(second - dmean**2, 0.0)
    tilted = Moments(cav.chi * rho, cav.mean + dmean, var_new)
    return tilted, _general_sites(cav, rho, one_minus_rho, dmean, var_new)


def tilted_and_sites(config: TAPConfig, cav: Cavity, data: TAPData):
    """T3 and T4 of the chosen model: ``(tilted Moments, (Lambda, gamma, lam))``."""
    if config.model == "hard":
        return _hard(cav, data)
    if config.model == "soft":
        return _soft(cav, data, config.n_copies)
    if config.model == "regression":
        return _regression(cav, data, config.n_copies)
    raise ValueError(f"unknown model {config.model!r}; valid: {MODELS}")


def mismatch(model: Moments, tilted: Moments):
    """``max_i max(|dm_i|, |d sqrt V_i|, |d chi_i| / chi_i)`` between T1 and T3 (spec 5.2)."""
    dm = jnp.abs(tilted.mean - model.mean)
    dv = jnp.abs(jnp.sqrt(jnp.maximum(tilted.var, 0.0)) - jnp.sqrt(jnp.maximum(model.var, 0.0)))
    dchi = jnp.abs(tilted.chi - model.chi) / tilted.chi
    return jnp.max(jnp.maximum(jnp.maximum(dm, dv), dchi))


def sweep(config: TAPConfig, Lambda, gamma, lam, data: TAPData):
    """One undamped parallel sweep T1 -> T4.

    Returns
    -------
    sites : tuple of (n,)
        The new ``(Lambda, gamma, lam)``.
    err : ()
        Moment mismatch at the input sites.
    """
    moments, fac, G, binv_diag = model_moments(data.K, Lambda, gamma, lam)
    cav = cavity(moments, fac, G, binv_diag, lam)
    tilted, sites = tilted_and_sites(config, cav, data)
    return sites, mismatch(moments, tilted)


def damping(config: TAPConfig, eta, err, prev):
    """The adaptive damping of spec 5.2: ``eta`` halved (not below 0.05) when the mismatch
    ``err`` grew by more than 50 % over ``prev``, regrown by 5 % up to ``config.max_damping``
    while it falls."""
    return jnp.where(
        err > 1.5 * prev,
        jnp.maximum(0.5 * eta, 0.05),
        jnp.where(err < prev, jnp.minimum(1.05 * eta, config.max_damping), eta),
    )


def step(config: TAPConfig, _key, state: TAPState, data: TAPData):
    """One damped sweep with the adaptive damping of spec 5.2: ``eta`` is halved (not below
    0.05) when the mismatch grows by more than 50 % and regrown by 5 % up to
    ``config.max_damping`` while it falls."""
    (Lambda, gamma, lam), err = sweep(config, state.Lambda, state.gamma, state.lam, data)
    eta = damping(config, state.eta, err, state.mismatch)

    def damp(old, new):
        return (1.0 - eta) * old + eta * new

    new_state = TAPState(
        damp(state.Lambda, Lambda), damp(state.gamma, gamma), damp(state.lam, lam), eta, err
    )
    return new_state, TAPInfo(err, eta)


def start_precision(omega, target):
    r"""Uniform start ``Lambda_0`` of spec 5.3: the root of
    :math:`\frac1N \sum_k \Lambda_0 \omega_k / (1 + \Lambda_0 \omega_k) = \text{target}`
    for the eigenvalues ``omega`` of ``K``, by bisection in ``log Lambda_0`` on
    ``[1e-12, 1e12]`` (the end point if the root lies outside)."""
    omega = jnp.maximum(omega, 0.0)

    def frac(log_l):
        lo = jnp.exp(log_l)
        return jnp.mean(lo * omega / (1.0 + lo * omega))

    def body(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        below = frac(mid) < target
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    lo, hi = jax.lax.fori_loop(0, 100, body, (jnp.log(1e-12), jnp.log(1e12)))
    return jnp.exp(0.5 * (lo + hi))


class TAPStart(NamedTuple):
    """Where :func:`init` starts: a given ``Lambda0``, or ``omega``, the eigenvalues of ``K``
    (passed to save their computation when several ratios share ``K``)."""

    Lambda0: Any = None
    omega: Any = None


@jax.jit
def init(_config, _key, data: TAPData, start: TAPStart = TAPStart()) -> TAPState:
    """Start values of spec 5.3: ``Lambda = Lambda_0``, ``gamma = y Lambda_0``,
    ``lam = -Lambda_0^2`` with ``Lambda_0`` from :func:`start_precision` at
    ``target = p Phi(-0.5)`` (or ``start.Lambda0``). The engine-contract signature
    (``init(static, key, data, start)``); the fixed point needs neither config nor key."""
    Lambda0, omega = start
    n = data.y.shape[0]
    if Lambda0 is None:
        if omega is None:
            omega = jnp.linalg.eigvalsh(data.K)
        p = -jnp.expm1(-data.ratio)
        Lambda0 = start_precision(omega, p * ndtr(-0.5))
    ones = jnp.ones(n, dtype=data.K.dtype)
    return TAPState(
        Lambda0 * ones,
        data.y * Lambda0,
        -(Lambda0**2) * ones,
        jnp.asarray(0.5, dtype=data.K.dtype),
        jnp.asarray(jnp.inf, dtype=data.K.dtype),
    )


def converged(info: TAPInfo, tol):
    """Stopping rule for the loop driver: mismatch below ``tol``, or non-finite (which the
    caller reports as not converged)."""
    return jnp.logical_or(info.mismatch < tol, ~jnp.isfinite(info.mismatch))


def solve(config: TAPConfig, state: TAPState, data: TAPData, *, tol: float, max_iter: int):
    """Iterate to the fixed point inside a compiled while loop (traceable).

    Returns ``(state, infos, n_iter, stopped_on_tol)`` as JAX values (see ``loop.iterate``).
    """
    return iterate(step, state, data, static=config, max_iter=max_iter, tol=tol,
                   converged=converged)


def fields_at(fac: Factor, K, K_cross, k_diag):
    r"""Eq. 19: Gaussian-model moments at inputs that carry no site (new inputs).

    With ``T(x) = (I + K Lambda)^{-1} k(x)`` and ``t(x) = Lambda T(x) = S B^{-1} S k(x)``,

    .. math:: m(x) = k(x)^T w,\quad V(x) = \sum_i T_i(x)^2 (-\lambda_i),\quad
              \chi(x) = K(x, x) - \| L^{-1} S k(x) \|^2,

    with ``T_i^2 (-lam_i) = t_i^2 (-lam_i / Lambda_i^2)`` on clamping sites and
    ``T = k - K t`` on the others.

    Parameters
    ----------
    fac : Factor
    K : (n, n)
        Kernel matrix of the training inputs.
    K_cross : (n, n*)
        ``k(X_train, X_new)``.
    k_diag : (n*,)
        ``k(x, x)``.

    Returns
    -------
    Moments
        Each of shape ``(n*,)``: ``N(mean, var)`` is the bootstrap distribution of the
        trained machine's output at ``x``.
    """
    v = solve_triangular(fac.chol, fac.s[:, None] * K_cross, lower=True)
    t = fac.s[:, None] * solve_triangular(fac.chol.T, v, lower=False)  # S B^-1 S k
    mean = K_cross.T @ fac.w
    # T_i = t_i / Lambda_i on clamping sites; T = k - K t on the others
    Lambda = fac.s**2
    site_var = jnp.where(fac.big, -fac.lam / jnp.where(fac.big, Lambda * Lambda, 1.0), 0.0)
    T_small = jnp.where(fac.big[:, None], 0.0, K_cross - K @ t)
    var = (t * t).T @ site_var + (T_small * T_small).T @ jnp.where(fac.big, 0.0, -fac.lam)
    chi = k_diag - jnp.sum(v * v, axis=0)
    return Moments(chi, mean, var)
