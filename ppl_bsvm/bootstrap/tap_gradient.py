r"""Gradients of the replica-TAP fixed point (``tap.py``) by implicit differentiation.

At the fixed point ``theta* = T(theta*)`` of the undamped sweep ``T`` (site parameters
``theta = (Lambda, gamma, lam)``), a loss ``g(theta*)`` has the gradient ``u^T dT/dK`` with ``u``
solving the adjoint system ``(I - J^T) u = dg/dtheta``, ``J = dT/dtheta`` (the implicit function
theorem); :func:`fixed_point` solves the forward problem with :func:`tap.solve` and the adjoint
with vector-Jacobian products of the sweep, so kernel hyperparameters are selected by gradients
of the bootstrap error (``selection.py``) without differentiating through the iterations.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .tap import TAPConfig, TAPData, TAPState, init, solve, sweep

__all__ = ["fixed_point"]

_OFF = 1e-8
"""``Lambda_j K_jj`` below which a site's precision is held fixed in the adjoint (implicit
gradient) computation."""

_STALL = 50
"""Adjoint iterations without halving the change, after which the adjoint loop stops."""

_ACCEPT = 1e-6
"""Relative change of the adjoint iterate below which a stopped adjoint loop is accepted."""




def _flat_sweep(config: TAPConfig, theta, data: TAPData):
    n = data.y.shape[0]
    (Lambda, gamma, lam), _ = sweep(config, theta[:n], theta[n : 2 * n], theta[2 * n :], data)
    return jnp.concatenate([Lambda, gamma, lam])


class _SolveOptions(NamedTuple):
    config: TAPConfig
    tol: float
    max_iter: int
    adjoint_tol: float


def _start_state(theta0, n):
    return TAPState(
        theta0[:n],
        theta0[n : 2 * n],
        theta0[2 * n :],
        jnp.asarray(0.5, theta0.dtype),
        jnp.asarray(jnp.inf, theta0.dtype),
    )


def _forward(options: _SolveOptions, theta0, data: TAPData):
    n = data.y.shape[0]
    state, _, n_iter, done = solve(
        options.config, _start_state(theta0, n), data, tol=options.tol, max_iter=options.max_iter
    )
    theta = jnp.concatenate([state.Lambda, state.gamma, state.lam])
    return (theta, n_iter, done), state.eta


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fixed_point(options: _SolveOptions, theta0, data: TAPData):
    return _forward(options, theta0, data)[0]


def _fixed_point_fwd(options, theta0, data):
    out, eta = _forward(options, theta0, data)
    return out, (out[0], eta, data)


@functools.partial(jax.jit, static_argnums=0)
def _adjoint(options: _SolveOptions, theta, eta, data: TAPData, cotangent):
    """Adjoint of the fixed point: ``u = g + J^T u``, then ``data_bar = (dF/ddata)^T u``.

    The adjoint equation is iterated from the damping ``eta`` that the forward iteration
    ended with (its iteration matrix ``(1 - eta) I + eta J^T`` has the spectrum of the
    forward one, so it converges at the same rate), halved whenever the change grows by more
    than 50 %. One linearisation of the sweep serves the loop and the final pull-back (the
    sweep's VJP is what dominates compilation).
    """
    n = data.y.shape[0]
    # The precision of a nearly switched-off site (Lambda_j K_jj tiny) barely responds to
    # anything, and derivatives with respect to it go through sqrt(Lambda_j), which amplifies
    # rounding by 1/sqrt(Lambda_j): its row and column of J are dropped.
    keep = jnp.concatenate([theta[:n] * jnp.diag(data.K) >= _OFF, jnp.ones(2 * n, dtype=bool)])
    g = jnp.where(keep, cotangent, 0.0)
    _, vjp = jax.vjp(lambda t, d: _flat_sweep(options.config, t, d), theta, data)

    def apply(u):
        return jnp.where(keep, vjp(jnp.where(keep, u, 0.0))[0], 0.0)

    def cond(carry):
        i, _, change, _, stalled, _ = carry
        return (i < options.max_iter) & (change > options.adjoint_tol) & (stalled < _STALL)

    def body(carry):
        i, u, prev, best, stalled, eta = carry
        u_new = (1.0 - eta) * u + eta * (g + apply(u))
        change = jnp.max(jnp.abs(u_new - u)) / (jnp.max(jnp.abs(u_new)) + 1e-300)
        improved = change < 0.5 * best
        # as in the forward loop: halve the damping when the iteration starts to diverge
        eta = jnp.where(change > 1.5 * prev, jnp.maximum(0.5 * eta, 0.01), eta)
        return (
            i + 1,
            u_new,
            change,
            jnp.where(improved, change, best),
            jnp.where(improved, 0, stalled + 1),
            eta,
        )

    inf = jnp.asarray(jnp.inf, g.dtype)
    _, u, change, _, _, _ = jax.lax.while_loop(
        cond, body, (jnp.asarray(0), g, inf, inf, jnp.asarray(0), eta)
    )
    # The iteration stops at adjoint_tol or when rounding stalls it (the sweep's derivatives
    # carry ~1e-8 relative noise from nearly switched-off sites). One whose last change is
    # above _ACCEPT gives NaN gradients, never silently wrong ones.
    u = jnp.where(change <= _ACCEPT, u, jnp.nan)
    return vjp(jnp.where(keep, u, 0.0))[1]


def _fixed_point_bwd(options, residuals, cotangents):
    # a module-level compiled function: reused by every objective with the same shapes
    theta, eta, data = residuals
    return jnp.zeros_like(theta), _adjoint(options, theta, eta, data, cotangents[0])


_fixed_point.defvjp(_fixed_point_fwd, _fixed_point_bwd)


def fixed_point(
    config: TAPConfig,
    data: TAPData,
    theta0=None,
    *,
    tol: float = 1e-9,
    max_iter: int = 5000,
    adjoint_tol: float = 1e-10,
):
    """The fixed-point sites as a differentiable function of ``data`` (``K`` in particular).

    The forward pass runs the damped iteration; the backward pass applies the implicit
    function theorem at the fixed point ``theta* = F(theta*, data)`` of the undamped sweep
    ``F``: ``d theta* = (I - dF/dtheta)^{-1} dF/ddata``. The adjoint system
    ``(I - dF/dtheta)^T u = g`` is solved by the damped iteration ``u <- (1 - eta) u +
    eta (g + J^T u)`` on vector-Jacobian products of one sweep (no Jacobian is formed).
    Gradients are NaN if that iteration does not settle, never silently wrong.

    Parameters
    ----------
    config : TAPConfig
    data : TAPData
    theta0 : (3n,), optional
        Start ``(Lambda, gamma, lam)`` concatenated (default: spec 5.3). The result does not
        depend on it (unique fixed point); a warm start only saves sweeps.
    tol, max_iter
        Stopping rule of the forward iteration (moment mismatch) and cap of both iterations.
    adjoint_tol : float, default=1e-10
        Relative change at which the adjoint iteration stops.

    Returns
    -------
    theta : (3n,)
        ``(Lambda, gamma, lam)`` at the fixed point, concatenated.
    n_iter : ()
    converged : ()
        Whether the mismatch fell below ``tol``.
    """
    if theta0 is None:
        s0 = init(None, None, data)
        theta0 = jnp.concatenate([s0.Lambda, s0.gamma, s0.lam])
    options = _SolveOptions(config, float(tol), int(max_iter), float(adjoint_tol))
    theta0 = jax.lax.stop_gradient(theta0)
    return _fixed_point(options, theta0, data)
