r"""A Newton-Krylov solver of the replica-TAP fixed point (``tap.py``), safeguarded by the
damped sweep.

The damped parallel iteration of spec 5.2 (:func:`tap.step`) converges linearly, at a rate of
about 0.65 per sweep on the benchmark's data, and every sweep factorises ``B = I + S K S``
(``O(N^3)``). Newton's method on ``F(theta) = T(theta) - theta`` (``T`` the undamped sweep,
``theta = (Lambda, gamma, lam)``) converges quadratically once near the fixed point, and its
Jacobian needs no further factorisation. ``T`` is the point-wise map ``P`` (T2-T4) applied
to the Gaussian model's marginals ``x = (chi, m, V_offdiag, [B^{-1}]_ii, w)`` (T1).
Differentiating T1 (Eq. 22) with ``dG = -G diag(dLambda) G``:

.. math::

    d\chi = -(G\circ G)\,d\Lambda,\qquad
    dm = G\,(d\gamma - m\circ d\Lambda),\qquad
    dV = -2\,(G\circ M)\,d\Lambda - (G\circ G)\,d\lambda,\quad M = G\,\mathrm{diag}(-\lambda)\,G,

and, from ``[B^{-1}]_{ii} = 1 - \Lambda_i G_{ii}`` and ``w = \gamma - \Lambda m``,
``d[B^{-1}]_{ii} = -(d\Lambda_i \chi_i + \Lambda_i d\chi_i)``, ``dw = d\gamma - m\,d\Lambda -
\Lambda\,dm``; the off-diagonal part of ``V`` drops ``G_ii^2 (-lam_i)``. ``P`` acts point by
point, so its derivative is a ``3 x 5`` matrix per point, formed once per Newton step by
``jax.jvp``. With ``G o G`` and ``G o M`` formed once (``M`` costs one matrix product), a
Jacobian product ``J v = P'(x) (dx/dtheta) v`` costs three ``N x N`` matrix-vector products,
and the Newton system ``(I - J) delta = T(theta) - theta`` is solved by GMRES (:func:`gmres`)
in the variables scaled by ``|theta|``, to the relative residual ``forcing * mismatch``
(inexact Newton: the steps stay quadratic).

Each step of :func:`step` evaluates the sweep at one trial point (one factorisation, kept in
the state with ``G``, so that the Newton direction from an accepted point costs no second
factorisation and none is computed at the point where the iteration stops):

* while the moment mismatch is above :attr:`NewtonConfig.switch`, or after a rejected Newton
  step, the trial point is the damped sweep of spec 5.2 (the adaptive damping of
  :func:`tap.step`), always accepted;
* below it, the trial point is the Newton point (``Lambda`` projected onto ``>= 0``, and
  ``lam`` onto ``<= 0`` for the hard margin), accepted only if its mismatch is smaller than
  the current one; otherwise damped sweeps follow from the current point until the mismatch
  has halved or ``2^k`` of them have run after the ``k``-th rejection in a row (Wisconsin at
  S/N = 2.5-3.5 has a region where Newton points fail many times in a row and the damped
  sweeps crawl).

The iteration therefore never ends at a worse point than the damped one would, and it stops
at a point whose own mismatch is below ``tol``, i.e. at the same fixed point as
:func:`tap.solve` (tested against it to 1e-8 on Crabs for the three models).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from ..inference.loop import iterate
from .tap import (
    Moments,
    TAPConfig,
    TAPData,
    TAPInfo,
    TAPState,
    cavity_from,
    converged,
    damping,
    mismatch,
    model_marginals,
    tilted_and_sites,
)

__all__ = [
    "NewtonConfig",
    "Marginals",
    "NewtonState",
    "evaluate",
    "jacobian_product",
    "gmres",
    "init",
    "restart",
    "step",
    "solve",
    "outputs",
    "converged",
]


class NewtonConfig(NamedTuple):
    """Static settings of the Newton-Krylov solver (compiled in).

    Attributes
    ----------
    tap : TAPConfig
        The model and the damping cap of the safeguarding sweeps.
    switch : float
        Moment mismatch below which Newton steps are tried (0.5: on Crabs, Wisconsin and Pima
        the fewest factorisations among 0.1, 0.5 and always).
    forcing : float
        Relative residual of the GMRES solve per unit of moment mismatch (inexact Newton: the
        solve's tolerance is ``forcing * mismatch``, clipped to ``[1e-13, forcing]``, so the
        steps stay quadratic; with ``forcing * 1`` instead of ``forcing * mismatch`` the last
        steps lose a factor ``mismatch`` each, one more factorisation on Wisconsin).
    krylov : int
        Most GMRES iterations (Jacobian products) per Newton step.
    """

    tap: TAPConfig
    switch: float = 0.5
    forcing: float = 1e-2
    krylov: int = 40


class Marginals(NamedTuple):
    """T1's outputs that the point-wise T2-T4 read (the ``x`` of the module doc).

    Attributes
    ----------
    chi, mean : (n,)
        ``diag G`` and ``m = K w``.
    offvar : (n,)
        ``sum_{j != i} G_ij^2 (-lam_j)`` (:func:`tap.off_diagonal_var`).
    binv_diag : (n,)
        ``diag(B^{-1})``.
    w : (n,)
        ``(I + Lambda K)^{-1} gamma``.
    """

    chi: jnp.ndarray
    mean: jnp.ndarray
    offvar: jnp.ndarray
    binv_diag: jnp.ndarray
    w: jnp.ndarray


class NewtonState(NamedTuple):
    """State of the safeguarded Newton iteration.

    Attributes
    ----------
    Lambda, gamma, lam : (n,)
        The current (accepted) sites.
    swept : (3n,)
        The undamped sweep ``T(theta)`` of the current sites.
    G : (n, n)
        ``(K^{-1} + diag Lambda)^{-1}`` at the current sites (zeros before the first
        evaluation).
    marginals : Marginals
        T1 at the current sites.
    mismatch : ()
        Moment mismatch of the current sites (``inf`` before the first evaluation).
    prev : ()
        Mismatch of the point before (``inf`` at the start), for the adaptive damping.
    eta : ()
        Damping of the last damped sweep.
    rejected : () bool
        Whether the last Newton point was rejected (the next step is then a damped sweep).
    threshold : ()
        Mismatch below which the next Newton point is tried: ``switch``, or half the mismatch
        at the last rejection (damped sweeps until the mismatch has halved, so that a region
        where Newton steps fail costs at most one extra factorisation per halving).
    failures : () int
        Newton points rejected in a row.
    patience : () int
        Damped sweeps left until a Newton point is tried again even if the mismatch has not
        halved: ``2^failures`` after a rejection (where the damped sweeps stall, as on
        Wisconsin at S/N = 2.5, Newton is retried at exponentially growing intervals).
    """

    Lambda: jnp.ndarray
    gamma: jnp.ndarray
    lam: jnp.ndarray
    swept: jnp.ndarray
    G: jnp.ndarray
    marginals: Marginals
    mismatch: jnp.ndarray
    prev: jnp.ndarray
    eta: jnp.ndarray
    rejected: jnp.ndarray
    threshold: jnp.ndarray
    failures: jnp.ndarray
    patience: jnp.ndarray

    nonfinite_ok = ("mismatch", "prev", "threshold")  # inf until evaluated / first rejection


def _sites(config: NewtonConfig, marginals: Marginals, data: TAPData):
    """T2-T4 (point-wise): the swept sites ``(3n,)`` and the tilted moments."""
    tilted, sites = tilted_and_sites(config.tap, cavity_from(*marginals), data)
    return jnp.concatenate(sites), tilted


def evaluate(config: NewtonConfig, theta, data: TAPData):
    """One factorisation at ``theta``: ``(T(theta), mismatch, G, marginals)``."""
    n = data.y.shape[0]
    Lambda, gamma, lam = theta[:n], theta[n : 2 * n], theta[2 * n :]
    moments, fac, G, binv_diag, offvar = model_marginals(data.K, Lambda, gamma, lam)
    marginals = Marginals(moments.chi, moments.mean, offvar, binv_diag, fac.w)
    swept, tilted = _sites(config, marginals, data)
    return swept, mismatch(moments, tilted), G, marginals


def outputs(state: NewtonState):
    """The Gaussian model's moments and the cavities at the current sites (T1, T2)."""
    mg = state.marginals
    var = mg.offvar + mg.chi**2 * (-state.lam)
    return Moments(mg.chi, mg.mean, var), cavity_from(*mg)


def jacobian_product(config: NewtonConfig, theta, G, marginals: Marginals, data: TAPData):
    """``v -> (dT/dtheta) v`` at ``theta`` (module doc), from ``G`` and T1's marginals: forms
    ``G o G``, ``G o M`` (one ``O(N^3)`` product) and the point-wise derivative of T2-T4, then
    each product costs ``O(N^2)``."""
    n = theta.shape[0] // 3
    Lambda, lam = theta[:n], theta[2 * n :]
    chi, m = marginals.chi, marginals.mean
    H = G * G
    GM = G * (G @ ((-lam)[:, None] * G))

    def sites_of(mg):
        return _sites(config, Marginals(*mg), data)[0]

    # T2-T4 act point by point: one jvp per input with all-ones tangents gives every point's
    # 3 x 5 derivative at once (row k of ``deriv`` is d sites / d marginals[k], (3n,))
    unit = jnp.broadcast_to(jnp.eye(5, dtype=chi.dtype)[:, :, None], (5, 5, chi.shape[0]))
    deriv = jax.vmap(lambda t: jax.jvp(sites_of, (tuple(marginals),), (tuple(t),))[1])(unit)

    def product(v):
        dL, dg, dl = v[:n], v[n : 2 * n], v[2 * n :]
        h = H @ jnp.stack([dL, dl], axis=1)  # one pass over H for both
        dchi = -h[:, 0]
        dm = G @ (dg - m * dL)
        dV = -2.0 * (GM @ dL) - h[:, 1]
        tangent = jnp.stack([
            dchi,
            dm,
            dV - 2.0 * chi * dchi * (-lam) + chi**2 * dl,  # d of V_i - G_ii^2 (-lam_i)
            -(dL * chi + Lambda * dchi),  # d of [B^-1]_ii = 1 - Lambda_i G_ii
            dg - m * dL - Lambda * dm,  # d of w = gamma - Lambda m
        ])
        return jnp.sum(deriv * jnp.tile(tangent, (1, 3)), axis=0)

    return product


def gmres(matvec, b, tol, size: int):
    """GMRES without restarts: at most ``size`` products, stopping when the residual is below
    ``tol * |b|``; Arnoldi with two passes of classical Gram-Schmidt, the least-squares
    problem updated by Givens rotations. Returns the minimiser over the Krylov space built."""
    beta = jnp.linalg.norm(b)
    safe = jnp.where(beta > 0, beta, 1.0)
    V = jnp.zeros((size + 1, b.shape[0]), b.dtype).at[0].set(b / safe)
    R = jnp.zeros((size + 1, size), b.dtype)
    rot = jnp.zeros((2, size), b.dtype)
    g = jnp.zeros(size + 1, b.dtype).at[0].set(beta)

    def cond(carry):
        k, _, _, _, g, _ = carry
        return (k < size) & (jnp.abs(g[k]) > tol * beta)

    def body(carry):
        k, V, R, rot, g, _ = carry
        w = matvec(V[k])
        h = V @ w
        w = w - h @ V
        h2 = V @ w  # second pass: orthogonal to working precision
        w = w - h2 @ V
        h = h + h2
        norm = jnp.linalg.norm(w)
        V = V.at[k + 1].set(w / jnp.where(norm > 0, norm, 1.0))
        col = h.at[k + 1].set(norm)

        def apply(i, col):
            c, s = rot[0, i], rot[1, i]
            a, b_ = col[i], col[i + 1]
            return col.at[i].set(c * a + s * b_).at[i + 1].set(-s * a + c * b_)

        col = jax.lax.fori_loop(0, k, apply, col)
        r = jnp.hypot(col[k], col[k + 1])
        c = jnp.where(r > 0, col[k] / jnp.where(r > 0, r, 1.0), 1.0)
        s = jnp.where(r > 0, col[k + 1] / jnp.where(r > 0, r, 1.0), 0.0)
        col = col.at[k].set(r).at[k + 1].set(0.0)
        g = g.at[k + 1].set(-s * g[k]).at[k].set(c * g[k])
        rot = rot.at[0, k].set(c).at[1, k].set(s)
        return k + 1, V, R.at[:, k].set(col), rot, g, norm

    k, V, R, _, g, _ = jax.lax.while_loop(
        cond, body, (jnp.asarray(0), V, R, rot, g, jnp.asarray(0.0, b.dtype))
    )
    used = jnp.arange(size) < k
    Rk = jnp.where(used[:, None] & used[None, :], R[:size], 0.0)
    Rk = Rk + jnp.diag(jnp.where(used & (jnp.diag(Rk) != 0), 0.0, 1.0))
    y = solve_triangular(Rk, jnp.where(used, g[:size], 0.0), lower=False)
    return y @ V[:size]


def _project(config: NewtonConfig, theta, n):
    Lambda = jnp.maximum(theta[:n], 0.0)
    lam = theta[2 * n :]
    if config.tap.model == "hard":
        lam = jnp.minimum(lam, 0.0)
    return jnp.concatenate([Lambda, theta[n : 2 * n], lam])


def newton_point(config: NewtonConfig, state: NewtonState, data: TAPData):
    """The inexact Newton point from the current sites (module doc), projected onto the
    feasible signs; non-finite entries are replaced by the sweep's."""
    n = state.Lambda.shape[0]
    theta = jnp.concatenate([state.Lambda, state.gamma, state.lam])
    product = jacobian_product(config, theta, state.G, state.marginals, data)
    scale = jnp.abs(theta) + 1e-6 * jnp.max(jnp.abs(theta))
    z = gmres(
        lambda u: u - product(u * scale) / scale,
        (state.swept - theta) / scale,
        jnp.clip(config.forcing * state.mismatch, 1e-13, config.forcing),  # inexact Newton
        config.krylov,
    )
    point = _project(config, theta + z * scale, n)
    return jnp.where(jnp.isfinite(point), point, state.swept)


def init(_config, _key, data: TAPData, start: TAPState) -> NewtonState:
    """The state at the sites of ``start`` (a :class:`tap.TAPState`, e.g. :func:`tap.init` or
    the fixed point of a nearby ``S/N``), not yet evaluated: ``swept`` is set to the sites
    themselves and ``rejected`` to True, so that the first :func:`step` evaluates them (its
    damped move from ``swept`` is no move). Needs no compilation of its own."""
    theta = jnp.concatenate([start.Lambda, start.gamma, start.lam])
    n = start.Lambda.shape[0]
    zeros = jnp.zeros(n, theta.dtype)
    inf = jnp.asarray(jnp.inf, theta.dtype)
    return NewtonState(
        start.Lambda, start.gamma, start.lam, theta, jnp.zeros((n, n), data.K.dtype),
        Marginals(zeros, zeros, zeros, zeros, zeros), inf, inf,
        jnp.asarray(start.eta, theta.dtype), jnp.asarray(True), inf, jnp.asarray(0, jnp.int32),
        jnp.asarray(0, jnp.int32),
    )


@functools.partial(jax.jit, static_argnums=0)
def restart(config: NewtonConfig, state: NewtonState, data: TAPData) -> NewtonState:
    """The state ``state`` (the final state of a solve at another ``S/N``) for the problem
    ``data``: T1 does not depend on ``S/N``, so ``G`` and the marginals stay, and only the
    point-wise T2-T4 are redone (no factorisation). The first :func:`step` from it is then
    the Newton step from the old fixed point to the new one, i.e. the predictor along the
    learning curve, whenever the new mismatch is below ``switch``."""
    swept, tilted = _sites(config, state.marginals, data)
    moments, _ = outputs(state)
    inf = jnp.asarray(jnp.inf, swept.dtype)
    return state._replace(
        swept=swept, mismatch=mismatch(moments, tilted), prev=inf,
        eta=jnp.asarray(0.5, swept.dtype), rejected=jnp.asarray(False), threshold=inf,
        failures=jnp.asarray(0, jnp.int32), patience=jnp.asarray(0, jnp.int32),
    )


def step(config: NewtonConfig, _key, state: NewtonState, data: TAPData):
    """One trial point (a Newton point or a damped sweep, see the module doc) and its
    acceptance; the info is the mismatch of the point kept."""
    n = state.Lambda.shape[0]
    theta = jnp.concatenate([state.Lambda, state.gamma, state.lam])
    ready = (state.mismatch < state.threshold) | (state.patience <= 0)
    use_newton = (state.mismatch < config.switch) & ready & ~state.rejected
    eta = damping(config.tap, state.eta, state.mismatch, state.prev)
    trial = jax.lax.cond(
        use_newton,
        lambda: newton_point(config, state, data),
        lambda: theta + eta * (state.swept - theta),
    )
    swept, err, G, marginals = evaluate(config, trial, data)
    accept = ~use_newton | (err < state.mismatch)
    moved = NewtonState(
        trial[:n], trial[n : 2 * n], trial[2 * n :], swept, G, marginals, err,
        state.mismatch, jnp.where(use_newton, state.eta, eta), jnp.asarray(False),
        state.threshold, jnp.where(use_newton, 0, state.failures),
        state.patience - jnp.where(use_newton, 0, 1),
    )
    failures = state.failures + 1
    kept = state._replace(
        rejected=jnp.asarray(True), threshold=0.5 * state.mismatch, failures=failures,
        patience=2 ** jnp.minimum(failures, 20),
    )
    # one conditional for the whole state (a select per field costs compile time)
    new_state = jax.lax.cond(accept, lambda: moved, lambda: kept)
    return new_state, TAPInfo(new_state.mismatch, new_state.eta)


def solve(config: NewtonConfig, state: NewtonState, data: TAPData, *, tol: float, max_iter: int):
    """Iterate :func:`step` to ``tol`` inside a compiled while loop (traceable); returns
    ``(state, infos, n_iter, stopped_on_tol)`` as in :func:`tap.solve`."""
    return iterate(step, state, data, static=config, max_iter=max_iter, tol=tol,
                   converged=converged)

