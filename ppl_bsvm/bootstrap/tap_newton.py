r"""A Newton-Krylov solver of the replica-TAP fixed point (``tap.py``), safeguarded by the
damped sweep.

The damped parallel iteration of spec 5.2 (:func:`tap.step`) converges linearly, at a rate of
about 0.65 per sweep on the benchmark's data, and every sweep factorises ``B = I + S K S``
(``O(N^3)``). Newton's method on ``F(theta) = T(theta) - theta`` (``T`` the undamped sweep,
``theta = (Lambda, gamma, lam)``) converges quadratically once near the fixed point; its
Jacobian needs no further factorisation. Differentiating T1 (Eq. 22) with
``dG = -G diag(dLambda) G``:

.. math::

    d\chi = -(G\circ G)\,d\Lambda,\qquad
    dm = G\,(d\gamma - m\circ d\Lambda),\qquad
    dV = -2\,(G\circ M)\,d\Lambda - (G\circ G)\,d\lambda,\quad M = G\,\mathrm{diag}(-\lambda)\,G,

and, from ``[B^{-1}]_{ii} = 1 - \Lambda_i G_{ii}`` and ``w = \gamma - \Lambda m``,
``d[B^{-1}]_{ii} = -(d\Lambda_i \chi_i + \Lambda_i d\chi_i)``, ``dw = d\gamma - m\,d\Lambda -
\Lambda\,dm``. T2-T4 act point by point, so their derivatives are taken by ``jax.jvp``. With
``G``, ``G o G`` and ``G o M`` formed once (``M`` costs one matrix product), a product
``J v`` costs ``O(N^2)``, and the Newton system ``(I - J) delta = T(theta) - theta`` is solved
by restarted GMRES in the variables scaled by ``|theta|``.

Each step of :func:`step` evaluates the sweep at one trial point (one factorisation):

* while the moment mismatch is above :attr:`NewtonConfig.switch`, or after a rejected Newton
  step, the trial point is the damped sweep of spec 5.2 (the adaptive damping of
  :func:`tap.step`), always accepted;
* below it, the trial point is the Newton point (``Lambda`` projected onto ``>= 0``, and
  ``lam`` onto ``<= 0`` for the hard margin), accepted only if its mismatch is smaller than
  the current one; otherwise damped sweeps follow from the current point until the mismatch
  has halved (Wisconsin at S/N = 2.5-3.5 has such a region, where Newton points fail many
  times in a row).

The iteration therefore never ends at a worse point than the damped one would, and it stops
at a point whose own mismatch is below ``tol``, i.e. at the same fixed point as
:func:`tap.solve` (tested against it to 1e-8 on Crabs for the three models).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.sparse.linalg import gmres

from ..inference.loop import iterate
from .tap import (
    TAPConfig,
    TAPData,
    TAPInfo,
    TAPState,
    cavity_from,
    converged,
    damping,
    model_moments,
    mismatch,
    off_diagonal_var,
    tilted_and_sites,
)

__all__ = ["NewtonConfig", "NewtonState", "linearise", "evaluate", "init", "step", "solve", "converged"]


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
        Largest relative residual of the GMRES solve (inexact Newton: the solve's tolerance is
        the current mismatch, clipped to ``[1e-12, forcing]``, so the steps stay quadratic).
    krylov : int
        GMRES restart length.
    restarts : int
        GMRES restarts (at most ``krylov * restarts`` Jacobian products per Newton step).
    """

    tap: TAPConfig
    switch: float = 0.5
    forcing: float = 1e-2
    krylov: int = 30
    restarts: int = 2


class NewtonState(NamedTuple):
    """State of the safeguarded Newton iteration.

    Attributes
    ----------
    Lambda, gamma, lam : (n,)
        The current (accepted) sites.
    swept : (3n,)
        The undamped sweep ``T(theta)`` of the current sites.
    newton : (3n,)
        The Newton point from the current sites (``swept`` where none was computed).
    mismatch : ()
        Moment mismatch of the current sites.
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
    """

    Lambda: jnp.ndarray
    gamma: jnp.ndarray
    lam: jnp.ndarray
    swept: jnp.ndarray
    newton: jnp.ndarray
    mismatch: jnp.ndarray
    prev: jnp.ndarray
    eta: jnp.ndarray
    rejected: jnp.ndarray
    threshold: jnp.ndarray

    nonfinite_ok = ("prev", "threshold")  # inf until the second point / the first rejection


def _project(config: NewtonConfig, theta, n):
    Lambda = jnp.maximum(theta[:n], 0.0)
    lam = theta[2 * n :]
    if config.tap.model == "hard":
        lam = jnp.minimum(lam, 0.0)
    return jnp.concatenate([Lambda, theta[n : 2 * n], lam])


def linearise(config: NewtonConfig, theta, data: TAPData):
    """One factorisation at ``theta``: ``(T(theta), mismatch, make_jvp)``; ``make_jvp()`` forms
    ``G o G`` and ``G o M`` (one ``O(N^3)`` product) and returns ``jvp``, with ``jvp(v)`` the
    Jacobian product ``(dT/dtheta) v`` of the module doc in ``O(N^2)``."""
    n = data.y.shape[0]
    Lambda, gamma, lam = theta[:n], theta[n : 2 * n], theta[2 * n :]
    moments, fac, G, binv_diag = model_moments(data.K, Lambda, gamma, lam)
    primal = (moments.chi, moments.mean, off_diagonal_var(G, lam), binv_diag, fac.w)

    def post(parts):
        tilted, sites = tilted_and_sites(config.tap, cavity_from(*parts), data)
        return jnp.concatenate(sites), tilted

    swept, tilted = post(primal)
    err = mismatch(moments, tilted)

    def make_jvp():
        chi, m, H = moments.chi, moments.mean, G * G
        GM = G * (G @ ((-lam)[:, None] * G))  # the one O(N^3) product
        return functools.partial(_jvp, post, primal, (Lambda, lam, chi, m, H, GM, G), n)

    return swept, err, make_jvp


def _jvp(post, primal, parts, n, v):
    """``(dT/dtheta) v``: the tangents of T1's outputs (module doc), then ``jax.jvp`` of the
    point-wise T2-T4."""
    Lambda, lam, chi, m, H, GM, G = parts
    dL, dg, dl = v[:n], v[n : 2 * n], v[2 * n :]
    h = H @ jnp.stack([dL, dl], axis=1)  # one pass over H for both
    dchi = -h[:, 0]
    dm = G @ (dg - m * dL)
    dV = -2.0 * (GM @ dL) - h[:, 1]
    tangent = (
        dchi,
        dm,
        dV - 2.0 * chi * dchi * (-lam) + chi**2 * dl,  # d of V_i - G_ii^2 (-lam_i)
        -(dL * chi + Lambda * dchi),  # d of [B^-1]_ii = 1 - Lambda_i G_ii
        dg - m * dL - Lambda * dm,  # d of w = gamma - Lambda m
    )
    return jax.jvp(lambda p: post(p)[0], (primal,), (tangent,))[1]


def evaluate(config: NewtonConfig, theta, data: TAPData):
    """One factorisation at ``theta``: ``(T(theta), mismatch, newton point)``.

    The Newton point is computed only when the mismatch is below ``config.switch`` (else it is
    ``T(theta)``); non-finite entries of it are replaced by ``T(theta)``.
    """
    n = data.y.shape[0]
    swept, err, make_jvp = linearise(config, theta, data)

    def newton_point(_):
        jvp = make_jvp()  # formed once, outside the Krylov loop
        scale = jnp.abs(theta) + 1e-6 * jnp.max(jnp.abs(theta))
        z, _ = gmres(
            lambda u: u - jvp(u * scale) / scale,
            (swept - theta) / scale,
            tol=jnp.clip(err, 1e-12, config.forcing),  # inexact Newton: tighter as err falls
            restart=config.krylov,
            maxiter=config.restarts,
        )
        point = _project(config, theta + z * scale, n)
        return jnp.where(jnp.isfinite(point), point, swept)

    newton = jax.lax.cond(err < config.switch, newton_point, lambda _: swept, None)
    return swept, err, newton


def init(_config, _key, data: TAPData, start: TAPState) -> NewtonState:
    """The state at the sites of ``start`` (a :class:`tap.TAPState`, e.g. :func:`tap.init` or
    the fixed point of a nearby ``S/N``), not yet evaluated: ``swept`` is set to the sites
    themselves and ``rejected`` to True, so that the first :func:`step` evaluates them (its
    damped move from ``swept`` is no move). Needs no compilation of its own."""
    del data
    theta = jnp.concatenate([start.Lambda, start.gamma, start.lam])
    inf = jnp.asarray(jnp.inf, theta.dtype)
    return NewtonState(
        start.Lambda, start.gamma, start.lam, theta, theta, inf, inf,
        jnp.asarray(start.eta, theta.dtype), jnp.asarray(True), jnp.asarray(inf),
    )


def step(config: NewtonConfig, _key, state: NewtonState, data: TAPData):
    """One trial point (a Newton point or a damped sweep, see the module doc) and its
    acceptance; the info is the mismatch of the point kept."""
    n = state.Lambda.shape[0]
    theta = jnp.concatenate([state.Lambda, state.gamma, state.lam])
    use_newton = (state.mismatch < jnp.minimum(state.threshold, config.switch)) & ~state.rejected
    eta = damping(config.tap, state.eta, state.mismatch, state.prev)
    trial = jnp.where(use_newton, state.newton, theta + eta * (state.swept - theta))
    swept, err, newton = evaluate(config, trial, data)
    accept = ~use_newton | (err < state.mismatch)

    def pick(new, old):
        return jnp.where(accept, new, old)

    new_state = NewtonState(
        pick(trial[:n], state.Lambda),
        pick(trial[n : 2 * n], state.gamma),
        pick(trial[2 * n :], state.lam),
        pick(swept, state.swept),
        pick(newton, state.newton),
        pick(err, state.mismatch),
        pick(state.mismatch, state.prev),
        jnp.where(use_newton, state.eta, eta),
        ~accept,
        jnp.where(accept, state.threshold, 0.5 * state.mismatch),
    )
    return new_state, TAPInfo(new_state.mismatch, new_state.eta)


def solve(config: NewtonConfig, state: NewtonState, data: TAPData, *, tol: float, max_iter: int):
    """Iterate :func:`step` to ``tol`` inside a compiled while loop (traceable); returns
    ``(state, infos, n_iter, stopped_on_tol)`` as in :func:`tap.solve`."""
    return iterate(step, state, data, static=config, max_iter=max_iter, tol=tol,
                   converged=converged)
