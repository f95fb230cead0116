r"""S-BSVM's linear response (``linear_response=True``): the covariance of ``u`` at the fixed
point of the batch iteration, in passes over the training rows.

In whitened coordinates (``sbsvm.py``) S-BSVM's batch iteration (``rho = 1``, all the data)
is the Gaussian-sites sweep of :mod:`~ppl_bsvm.inference.vi.lrvb` with ``x = v``, rows
``z_i = y_i psi_i``, ``psi_i = L^{-1} K_{m i}``, offsets ``c_i = Ktilde_ii`` and prior
precision ``I``. The tilt ``t^T u = (L^T t)^T v`` gives ``Cov_LR(u) = L Cov_LR(v) L^T``.

1. **Polish** (:func:`_polish`): from the state SVI stopped at, sweeps of that iteration
   over all rows (:func:`_sweep`: chunks of ``PASS_CHUNK``; for a subsample's tolerance the
   first sweep stores every row's ``Psi`` in single precision where it fits in memory,
   :func:`stores_projections`, and the later ones reuse it, else ``Psi`` is recomputed per
   chunk), ``O(n m^2 + n m d)`` each, until the relative change of
   ``theta = (eta1, vech prec)`` is at most :data:`POLISH_TOL` (:data:`SAMPLED_POLISH_TOL`
   where the moments come from a subsample) or ``lrvb.POLISH_ITER`` sweeps. The steps are
   Anderson-accelerated and their mean's part is Newton's, with the mean's block of the
   response's own ``G`` summed in the first sweep: 6-9 sweeps to 1e-8 where Anderson with
   plain steps took 18-20. Over many rows (:func:`coupling_rows`) the steps are Newton's for
   mean and covariance together, the coupling ``G_qx`` summed over ``4 P`` rows of the
   response's subsample: 3 sweeps instead of 4 at 10^6 points.
2. **Response** at the polished ``q(v) = N(mu, P^{-1})``, with ``W = Z P_L^{-T}``,
   ``r_i = 1 - y_i psi_i^T mu``, ``g_i = gamma alpha_i^{-3/2} / 2`` (``lrvb`` module doc, the
   Gaussian-sites closed form): the factor of the linear-response precision is ``P_L`` times
   the Cholesky factor of the Schur complement ``C`` of the quadratic block of ``I - G``,
   ``P = m (m + 3) / 2``. Three forms compute it (:func:`_response` chooses):

   - **the Schur route** (:func:`_series_pass`, the default from about ``3 m^{3/2}`` rows):
     ``C = I - G_xx - G_xq (I - G_qq)^{-1} G_qx`` by a series in ``G_qq`` whose truncation
     error is certified (``lrvb.series_error``), each term one pass of ``3 m^3 / 2`` a row
     that never forms ``G_qq``'s ``m^4 / 8`` entries; memory ``O(m^3)``;
   - **the moments** (:func:`_moments_pass`, :func:`_sampled_pass`): ``G`` itself
     (``lrvb.SitesMoments``, ``m^4 / 18`` to ``m^4 / 4`` a row) and the Cholesky
     factorisation of ``I - G`` (``P^3 / 3``, memory ``3 P^2`` floats), where fewer than
     :data:`SERIES_MIN_PASSES` terms would cost less (few inducing points), or where the
     series is not within its tolerance after as many terms as cost the same;
   - **the** ``n x n`` **form** (:func:`_dense_pass`, :func:`uses_dense`: fewer rows).

   Padding rows have ``g_i = 0``; the polish's last sweep gives the residual.

3. **Subsample** (:func:`_row_sets`, :func:`respond`). Beyond ``2 SAMPLE_P P`` rows the
   sums come from ``16 P`` rows drawn at random, in two halves whose difference estimates
   the Monte-Carlo error of the sds of ``f``; the subsample grows fourfold until that error
   is at most :data:`MC_TOL` (0.5 %), or becomes the full sum. ``G`` is a sum over rows of
   rank-one terms in ``P`` dimensions, so ``O(P)`` rows estimate it; what grows with ``n``
   is left to the polish's sweeps, ``O(n m^2)`` each. A subsample's products are single
   precision (``lrvb.in_single``: relative errors of about ``sqrt(chunk) 2^-24`` in
   its sums, far below their Monte-Carlo error), the full sum's double.

**Cost** (:func:`response_flops`). The Schur route costs ``m^3 / 2`` multiply-adds a row
for ``G_qx`` and ``3 m^3 / 2`` a row for each product by ``G_qq``: one or two were needed on
the ``susy`` generator, where the bound on ``G_qq``'s norm was 0.004-0.06 (its terms fall as
its square), so about ``2 m^3`` to ``3.5 m^3`` a row against the moments' ``m^4 / 18``
(``m >= 96``; ``m^4 / 14`` at ``m = 64``) and their ``P^3 / 3 ~ m^6 / 24`` factorisation and
``3 P^2`` floats (26 GB at ``m = 256``). Every route needs more than ``O(m^3)`` and ``n``-free
work: the response of ``q(v)``'s covariance to the tilt depends on the fourth moments of the
rows ``w_i`` (which the Schur route uses without storing them). The ``n x n`` form costs
``O(n^2 m + n^3 / 3)``. The polish adds its sweeps (4-8 measured, :data:`POLISH_SWEEPS`) of
``O(n m^2 + n m d)``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from jax.scipy.linalg import cho_solve, solve_triangular

from ... import _programs
from ..._memory import FLOAT, available_bytes, format_bytes
from ..mvn import cov_factor, gaussian_from_precision, kl_precision
from . import elbo as elbo_mod
from . import fixed_point, lrvb
from ._svi import BatchStatistics, target_from_statistics
from .sbsvm_defaults import default_polish, inducing_count
from .sbsvm_marginals import (PASS_CHUNK, _chunk_rows, _chunk_start, _chunks, _final_q, _FinalQ,
                               _marginals_of, _no_marginals, _projections, _psi_form,
                               _put_marginals)

__all__ = ["POLISH_SWEEPS", "POLISH_TOL", "SAMPLED_POLISH_TOL", "SERIES_PASSES",
           "SERIES_MAX_PASSES", "SERIES_SHARE", "Response", "linear_response", "respond",
           "response_flops", "response_bytes", "moments_bytes", "engine_flops", "size",
           "uses_dense", "uses_series", "response_chunk", "series_passes"]


def size(m: int) -> int:
    """``P = m (m + 3) / 2``: the unknowns of the fixed point ``(mean, vech covariance)``."""
    return m * (m + 3) // 2


POLISH_TOL = 1e-8
"""Relative change of a sweep at which S-BSVM's polish stops (``lrvb.POLISH_TOL``, 1e-11, is
for the engines whose sweeps are cheap). The response taken at a residual ``r`` is off by
about ``r / (1 - ||dG/dtheta||)``, far below the subsample's Monte-Carlo error
(:data:`MC_TOL`, 0.5 %) and within ``lrvb.RESIDUAL_TOL`` (1e-6) of the check: on the ``susy``
generator (m = 64) the sds of ``f`` at 500 held-out points moved by at most 2e-7 (10^5
points) and 7e-9 (10^6) against a polish to 1e-11, which took 23 and 26 sweeps against 16 and
18 (at 10^6, 27.1 s -> 19.6 s of correction)."""

SAMPLED_POLISH_TOL = 1e-4
"""The polish's tolerance where the moments come from a subsample (:func:`sample_rows`), and
the residual at which ``lrvb.accept`` trusts such a response. What the polish leaves is then
far below what the subsample leaves: measured on the ``susy`` generator (m = 64, 36,288 rows in
the moments), against a polish to 1e-8 on the same subsample, the sds of ``f`` at 500
held-out points moved by at most 5.0e-5 (10^5 points, 4 sweeps) and 7.7e-6 (10^6, 4 sweeps),
the sds of ``u`` by at most 7.3e-4 and 1.2e-3; four subsamples at 10^6 points spread the former
by 4.8e-5 (median) to 1.4e-3 (largest) and the latter by 2.3 % to 8.7 % (relative sds). A
polish to ``lrvb.RESIDUAL_TOL`` (1e-6) took 6 sweeps for differences of 1.8e-6 and 3.7e-8
(``f``), 2.2e-5 and 2.7e-6 (``u``): 1.5 s of sweeps per 10^6 points (2 cores) that buy nothing
the subsample keeps. 1e-3 (3 sweeps at 10^5) moved the sds of ``u`` by 6.1e-3."""

POLISH_SWEEPS = 10
"""Sweeps of the polish the estimate counts (:func:`response_flops`): from S-BSVM's default
stopping point on the ``susy`` generator (10^4-10^6 points, m = 16-128) :func:`_polish` took
5-8 to ``lrvb.RESIDUAL_TOL``, the first included (4 to :data:`SAMPLED_POLISH_TOL` at 10^5
points, m = 64, 3 at 10^6 with the coupling of :func:`coupling_rows`; 6-10 to
:data:`POLISH_TOL`; Anderson
with plain steps took 16-18 to 1e-8 and one more for the residual; plain sweeps 57-185 to
1e-11)."""


SERIES_PASSES = 2
"""Products by ``G_qq`` the estimates count for the Schur route (:func:`_series_pass`), each
``3 m^3 / 2`` a row: on the ``susy`` generator none at 10^6 points and one at 10^5 (m = 64, a
subsample's tolerance), three at 2 x 10^4 (m = 128, the full sum's)."""

SERIES_MAX_PASSES = 8
"""The most products by ``G_qq`` the Schur route takes (fewer where the moments would cost
less, :func:`series_passes`) before the moments route takes over (:func:`respond`)."""

SERIES_MIN_PASSES = 3
"""The Schur route is taken where at least this many products cost less than the moments
(:func:`uses_series`: from m = 17, but for m = 48 to 52-62 by the rows, where four ranges of
blocks make the moments cheap, ``lrvb.moment_blocks``): the norm bound of ``G_qq`` was
0.004-0.06 on the ``susy`` generator (2,000-10^5 points) and 0.27 on scikit-learn's breast
cancer data (569 points, m = 32), and three products meet the full sum's tolerance (1e-10) up
to about 0.065, a subsample's (1e-6) up to 0.25. With fewer inducing points the fourth
moments are cheap."""


def uses_dense(rows: int, m: int) -> bool:
    """Whether the ``n x n`` form costs fewer operations than the Schur route
    (:data:`SERIES_PASSES` products) on ``rows`` (padded) rows: below about ``3 m^{3/2}``
    rows (1,500 at m = 64, 12,600 at m = 256)."""
    return lrvb.dense_flops(rows, m) < lrvb.series_flops(rows, m, SERIES_PASSES)


def uses_series(rows: int, m: int) -> bool:
    """Whether the response over ``rows`` rows takes the Schur route: not the ``n x n`` form,
    and :data:`SERIES_MIN_PASSES` products cost less than the moments."""
    return not uses_dense(rows, m) and series_passes(rows, m) >= SERIES_MIN_PASSES


def response_chunk(rows: int, m: int) -> int:
    """Rows per chunk of the response's passes (``lrvb.moments_chunk``), 0 for the ``n x n``
    form (:func:`uses_dense`)."""
    return 0 if uses_dense(rows, m) else lrvb.moments_chunk(rows, m)


def series_passes(rows: int, m: int) -> int:
    """The most products by ``G_qq`` of the Schur route over ``rows`` rows: while it costs no
    more than the moments (``lrvb.moments_flops``), at least 1 and at most
    :data:`SERIES_MAX_PASSES`."""
    moments = lrvb.moments_flops(rows, m)
    k = 1
    while k < SERIES_MAX_PASSES and lrvb.series_flops(rows, m, k + 1) <= moments:
        k += 1
    return k


def response_flops(n: int, m: int, d: int = 1) -> float:
    """Leading terms of the correction on ``n`` rows of ``d`` inputs: the ``n x n`` form or
    the Schur route with :data:`SERIES_PASSES` products (over the first subsample's rows where
    there is one, :func:`sample_rows`), and :data:`POLISH_SWEEPS` sweeps of
    ``n (m d + 3 m^2)`` (the kernel columns, the projections ``L^{-1} K_mb`` and
    ``P_L^{-1} Psi``, the sum ``Psi^T A^{-1/2} Psi``)."""
    sweeps = POLISH_SWEEPS * float(n) * (m * d + 3 * m * m)
    chunk = response_chunk(n, m)
    if not chunk:
        return lrvb.dense_flops(n, m) + sweeps
    rows = sample_rows(n, m, chunk) or n
    if uses_series(rows, m):
        return lrvb.series_flops(rows, m, SERIES_PASSES) + sweeps
    return lrvb.moments_flops(rows, m) + sweeps


POLISH_PASSES = 60
"""Passes over the data the estimate counts for the polish (``sbsvm_batch``): 14-72 sweeps
measured at a fixed kernel (breast cancer, digits, wdbc, Heart); with learned hyperparameters
13-22 evaluations of a few sweeps and a gradient (about three passes) each, counted as
:data:`HYPER_PASSES`."""

HYPER_PASSES = 300
"""Passes over the data the estimate counts for the polish with learned hyperparameters."""


def polish_flops(n: int, m: int, d: int, learn: bool) -> float:
    """Leading terms of the polish: :data:`POLISH_PASSES` (or :data:`HYPER_PASSES`) passes of
    ``n (m d + 4 m^2)`` (a sweep's and the certificate's metric ``sum psi psi^T / s``)."""
    return (HYPER_PASSES if learn else POLISH_PASSES) * float(n) * (m * d + 4 * m * m)


def engine_flops(n: int, d: int, options: dict) -> float:
    """S-BSVM's ``flops`` estimate (``api.register``): the polish where it runs
    (:func:`polish_flops`) and :func:`response_flops` with ``linear_response=True`` (the SVI
    run's minibatch steps are not counted)."""
    m = inducing_count(n, options)
    polish = options.get("polish")
    total = 0.0
    if default_polish(n) if polish is None else polish:
        total += polish_flops(n, m, d, bool(options.get("learn_hyperparameters")))
    if options.get("linear_response"):
        total += response_flops(n, m, d)
    return total


engine_flops.hint = (
    "linear_response=True costs sweeps of n m^2 operations to the batch fixed point and passes "
    "of m^3 / 2 to 3 m^3 / 2 operations a row over the data (or a subsample of 8 m^2 rows) for "
    "m inducing points (see ppl_bsvm.inference.vi.sbsvm_response); use fewer inducing points "
    "(num_inducing; the cost falls as m^3 or faster) or leave linear_response off. "
    "The polish (polish=True; the default up to 5000 points) costs such sweeps too, a few "
    "hundred with learn_hyperparameters=True: polish=False leaves it out")


def response_bytes(n: int, m: int) -> int:
    """Working bytes of the response: on the Schur route, the ``Pq x m`` blocks it carries
    (:func:`_series_pass`: ``B_0``, the last product, its halves, ``Y``, ``dB_1``: 8) and the
    operand ``(m, m^2)``, a chunk's products (``chunk (m^2 + Pq)``, twice); in ``n x n``
    form, four ``n x n`` matrices (``H``, ``M``, its factor, a product). The moments' ``P x P``
    matrices (:func:`moments_bytes`), the fallback, are not counted, nor the polish's stored
    projections (:func:`projection_bytes`), which it keeps only where they fit
    (:func:`stores_projections`)."""
    if uses_dense(n, m):
        return FLOAT * 4 * n * n
    if not uses_series(n, m):
        return moments_bytes(n, m)
    Pq = m * (m + 1) // 2
    return FLOAT * (8 * Pq * m + m**3 + 2 * lrvb.moments_chunk(n, m) * (m * m + Pq))


def moments_bytes(n: int, m: int) -> int:
    """Working bytes of the moments route: ``G``, ``I - G`` and its factor (``3 P^2``) and a
    chunk's products (``4 chunk Pq``)."""
    P, Pq = size(m), m * (m + 1) // 2
    return FLOAT * (3 * P * P + 4 * lrvb.moments_chunk(n, m) * Pq)


class Response(NamedTuple):
    """What :func:`linear_response` returns (device arrays).

    Attributes
    ----------
    chol_prec : (m, m)
        Lower factor of the linear-response precision of ``q(v)`` (NaN where ``I - G`` is not
        positive definite).
    u_cov : (m, m)
        ``Cov_LR(u) = L Cov_LR(v) L^T``.
    residual : ()
        Relative change ``|theta' - theta|_inf / |theta|_inf`` of one more sweep at the
        polished ``theta``.
    sweeps : () int
        Sweeps the polish took.
    theta : (P,)
        The polished ``(eta1, vech prec)``, where a later call can start (``max_iter=0``).
    mc_error : ()
        With a subsample (``sample > 0``): the estimated Monte-Carlo error of the sds of
        ``f`` at training rows, relative, root mean square over a chunk of them
        (:func:`_sampled_pass`); 0 for the full sum.
    series_passes : () int
        The Schur route's products by ``G_qq`` (:func:`_series_pass`; 0 for the others).
    series_error : ()
        Its certified bound on the relative error of the truncated series (0 for the other
        routes, infinite where it cannot be bounded).
    marginals : sbsvm_marginals._TrainingMarginals or None
        With ``marginals=True``: the latent marginals at every training row (padding
        included) under the starting ``q(v)``, from the polish's first sweep.
    f_var : (N,) or None
        With ``reuse=True``: the latent variances at every training row (padding included)
        under the linear-response precision ``chol_prec``, from the projections the polish
        stored (:func:`_stored_variances`).
    """

    chol_prec: jnp.ndarray
    u_cov: jnp.ndarray
    residual: jnp.ndarray
    sweeps: jnp.ndarray
    theta: jnp.ndarray
    mc_error: jnp.ndarray
    series_passes: jnp.ndarray
    series_error: jnp.ndarray
    marginals: object = None
    f_var: jnp.ndarray | None = None


def _own_statistics(kernel, params, Z, chol_Kmm, mean, chol_P, data, i, size_):
    """Chunk ``i``: ``Psi^T`` with the columns of rows it does not own zeroed, the latent
    marginals and its rows' labels and ownership (``sbsvm_marginals._chunk_rows``)."""
    Xc, yc, own = _chunk_rows(data.X, data.y, i, size_, data.n)
    PsiT, m_f, s_f = _psi_form(kernel, params, Z, chol_Kmm, mean, chol_P, Xc)
    return PsiT * own, m_f, s_f, yc, own


def _target(g1, G2, gamma):
    """The sweep's image from the sums over all rows (``_svi.target_from_statistics``)."""
    eye = jnp.eye(g1.shape[0], dtype=g1.dtype)
    target = target_from_statistics(BatchStatistics(g1, G2, None, None), eye, 1.0, gamma)
    return lrvb.pack(target.eta1, target.prec)


class _Projections(NamedTuple):
    """Every training row's ``Psi^T`` (single precision) and ``ktilde`` (double) chunk by
    chunk of :data:`PASS_CHUNK` (``(chunks, m, size)`` and ``(chunks, size)``: each chunk's
    block contiguous), stored by the polish's first sweep for its later ones
    (:func:`_sweep`)."""

    PsiT: jnp.ndarray
    ktilde: jnp.ndarray


def _stored(N: int, m: int, dtype) -> _Projections:
    """Zeros for the first sweep to fill (``store``)."""
    n_chunks, size_ = _chunks(N, PASS_CHUNK)
    return _Projections(jnp.zeros((n_chunks, m, size_), jnp.float32),
                        jnp.zeros((n_chunks, size_), dtype))


def _sweep(kernel, params, Z, chol_Kmm, data, theta, metric: bool = False,
           mean_block: bool = False, marginals: bool = False, store: bool = False,
           stored: _Projections | None = None):
    """One sweep of the batch iteration (``_svi``'s target over all rows, ``rho = 1``):
    ``theta = (eta1, vech prec) -> theta'``; with ``metric``, ``(theta', (M, elbo))``, ``M =
    sum_i psi_i psi_i^T / s_i`` the metric of the certificate and ``elbo`` the collapsed ELBO
    at ``theta``, the safeguard's objective (``fixed_point``); with ``mean_block``,
    ``(theta', G_xx)``, ``G_xx = 2 sum_i g_i r_i^2 w_i w_i^T`` the mean's block of the
    response's ``G`` at ``theta`` (``lrvb`` module doc), over every row (:func:`_polish`).
    ``marginals`` appends the latent marginals at every row under ``theta``'s ``q``
    (``sbsvm_marginals._TrainingMarginals``, padding rows included), which the sweep computes
    anyway: the engine's own pass over the rows for them (``sbsvm_marginals``) took 0.7 s at
    10^6 points (m = 64), where a sweep then took about 1.3 s.

    Each chunk's sums are one product, ``[D_1 Psi; D_2 Psi; g^T]^T Psi`` with the weights of
    ``G2`` and of ``M`` or ``G_xx`` and ``g1``'s stacked, and its means and variances
    another (``sbsvm_marginals._marginals_of``): at 16,384 rows and m = 64 a product with
    ``m + 1`` or ``2 m + 1`` rows costs what one with ``m`` rows does or less (an ``m x m``
    output leaves one of XLA's two threads idle), where each matrix-vector product took
    0.04-0.1 s over 10^6 rows. A sweep at 10^6 points took 1.00 s (1.22 s the first, with
    ``G_xx`` and the marginals), 0.68 s now (0.84 s); medians of 5 in one process.

    ``store`` appends :class:`_Projections` of every row (``4 N m`` bytes, 256 MB at 10^6
    points and m = 64) and takes the chunk's sums in single precision; a sweep given them
    (``stored``) forms neither the kernel columns nor ``L^{-1} K_mb`` and takes all its
    products in single precision (relative errors about ``sqrt(chunk) 2^-24`` in each
    chunk's sums, added in double; ``ktilde``, whose ``k_ii - |psi_i|^2`` cancels, is
    stored in double): for a subsample's polish, whose tolerance (:data:`SAMPLED_POLISH_TOL`,
    at least :data:`STORED_MIN_TOL`) is far above them. At 10^6 points (m = 64) such a sweep
    takes 0.20 s (the first, storing, 0.80 s); the sds of ``f`` at 500 held-out points moved by
    1e-8 at most, those of ``u`` by 1.5e-6, against a polish that formed the projections
    at every sweep (``reports/sbsvm_response``)."""
    m, N = Z.shape[0], data.X.shape[0]
    mean, chol_P = gaussian_from_precision(*lrvb.unpack(theta, m))
    n_chunks, size_ = _chunks(N, PASS_CHUNK)

    def body(i, acc):
        Xc, yc, own = _chunk_rows(data.X, data.y, i, size_, data.n)
        if stored is None:
            PsiT, ktilde = _projections(kernel, params, Z, chol_Kmm, Xc)
        else:  # Xc unused: its slice is dead code to XLA
            PsiT, ktilde = stored.PsiT[i], stored.ktilde[i]
        m_f, s_f = _marginals_of(PsiT, ktilde, mean, chol_P)
        alpha = elbo_mod.optimal_alpha(m_f, s_f, yc)
        root = jnp.sqrt(alpha)
        weights = [1.0 / root]
        if metric:
            weights.append(1.0 / s_f)
        elif mean_block:  # w_i = S^T y_i psi_i, y_i^2 = 1
            weights.append(data.gamma * alpha**-1.5 * (1.0 - yc * m_f) ** 2)
        single = PsiT.astype(jnp.float32) if store else PsiT
        D = jnp.where(own, jnp.stack(weights), 0.0).astype(single.dtype)
        # g1's weights as a last row of their own: one product and one pass over Psi (a
        # separate product Psi g took 0.04-0.09 s more a sweep at 10^6 points, m = 64)
        g = jnp.where(own, yc * (1.0 + 1.0 / root), 0.0).astype(single.dtype)
        left = jnp.concatenate([(D[:, None, :] * single).reshape(-1, size_), g[None]])
        sums = (left @ single.T).astype(theta.dtype)
        g1, G2, square, terms = acc[0] + sums[-1], acc[1] + sums[:m], *acc[2:4]
        if metric or mean_block:
            square = square + sums[m:-1]
        if metric:
            data_terms = elbo_mod.collapsed_data_term(m_f, s_f, yc, data.gamma)
            terms = terms + jnp.sum(jnp.where(own, data_terms, 0.0))
        out = acc[4]
        if marginals:
            out = _put_marginals(out, _chunk_start(i, size_, N), m_f, s_f, yc, data.gamma)
        projections = acc[5]
        if store:
            projections = _Projections(projections.PsiT.at[i].set(single),
                                       projections.ktilde.at[i].set(ktilde))
        return g1, G2, square, terms, out, projections

    square = (m, m) if metric or mean_block else ()
    zero = (jnp.zeros(m, theta.dtype), jnp.zeros((m, m), theta.dtype),
            jnp.zeros(square, theta.dtype), jnp.zeros((), theta.dtype),
            _no_marginals(N, theta.dtype) if marginals else (),
            _stored(N, m, theta.dtype) if store else ())
    g1, G2, M, terms, rows, projections = jax.lax.fori_loop(0, n_chunks, body, zero)
    out = [_target(g1, G2, data.gamma)]
    if metric:
        out.append((M, terms - kl_precision(mean, chol_P)))
    if mean_block:
        S = cov_factor(chol_P)
        out.append(S.T @ M @ S)
    if marginals:
        out.append(rows)
    if store:
        out.append(projections)
    return out[0] if len(out) == 1 else tuple(out)


def _whiten(theta, ref):
    """``(x, Y) = (R^T mu, R^T Sigma R)`` of ``q(v) = N(mu, Sigma)`` given by ``theta``, in the
    coordinates of a reference precision factor ``R = ref`` (lower), packed as ``theta``."""
    mean, chol = gaussian_from_precision(*lrvb.unpack(theta, ref.shape[0]))
    A = solve_triangular(chol, ref, lower=True)
    return lrvb.pack(ref.T @ mean, A.T @ A)


def _unwhiten(phi, ref):
    """Inverse of :func:`_whiten`: ``prec = R Y^{-1} R^T``, ``eta1 = R Y^{-1} x``."""
    x, Y = lrvb.unpack(phi, ref.shape[0])
    chol_Y = jnp.linalg.cholesky(0.5 * (Y + Y.T))
    B = solve_triangular(chol_Y, ref.T, lower=True)
    return lrvb.pack(B.T @ solve_triangular(chol_Y, x, lower=True), B.T @ B)


class _Newton(NamedTuple):
    """The polish's fixed Jacobian (:func:`_preconditioned`): ``chol`` the factor of
    ``C = I - G_xx - B_0^T B_0``, ``coupling`` the block ``B_0 = G_qx`` (zero: the mean's
    block alone)."""

    chol: jnp.ndarray
    coupling: jnp.ndarray


def _preconditioned(phi, image, newton: _Newton):
    r"""The polish's step from ``phi`` given the sweep's image (both whitened, packed): Newton's
    step ``(I - G) delta = r`` for the Jacobian ``G = [[G_qq, B_0], [B_0^T, G_xx]]`` with
    ``G_qq`` taken as 0 (its norm is at most ``lrvb.quad_norm_bound``, 0.004-0.06 on the
    ``susy`` generator), in the coordinates ``(vechs Y, -sqrt 2 x)`` where the sweep's
    Jacobian is ``lrvb``'s ``G``: block elimination gives

    .. math:: \delta_x = C^{-1} (r_x + B_0^\top r_q), \qquad \delta_q = r_q + B_0 \delta_x,
              \qquad C = I - G_{xx} - B_0^\top B_0 .

    With ``B_0 = 0`` the mean's change is solved with ``I - G_xx`` and the covariance's is
    kept (a plain step)."""
    m = newton.chol.shape[0]
    x, Y = lrvb.unpack(image - phi, m)
    r_q, r_x = lrvb.vechs(Y), -np.sqrt(2.0) * x
    B = newton.coupling
    d_x = cho_solve((newton.chol, True), r_x + B.T @ r_q)
    d_q = r_q + B @ d_x
    return phi + lrvb.pack(d_x / -np.sqrt(2.0), lrvb.unvechs(d_q))


def _newton(G_xx, coupling):
    """:class:`_Newton` from the mean's block and ``B_0``: where ``C`` is not positive definite
    (far from a stable fixed point, or a subsample's ``B_0`` too noisy) ``I - G_xx`` alone, and
    where that is not either, plain steps."""
    m = G_xx.shape[0]
    eye = jnp.eye(m, dtype=G_xx.dtype)
    mean_only = eye - 0.5 * (G_xx + G_xx.T)
    C = mean_only - coupling.T @ coupling
    chol = jnp.linalg.cholesky(0.5 * (C + C.T))
    coupled = jnp.all(jnp.isfinite(chol))
    chol_mean = jnp.linalg.cholesky(mean_only)
    chol = jnp.where(coupled, chol,
                     jnp.where(jnp.all(jnp.isfinite(chol_mean)), chol_mean, eye))
    return _Newton(chol, jnp.where(coupled, coupling, 0.0))


def _coupling(kernel, params, Z, chol_Kmm, data, theta, order, rows, chunk: int):
    """``B_0 = G_qx`` at ``theta`` from the first ``rows`` rows of ``order`` (the mean of the
    halves' sums, their products in single precision, as :func:`_series_pass`'s)."""
    m = Z.shape[0]
    mean, chol_P = gaussian_from_precision(*lrvb.unpack(theta, m))
    sets, _ = _row_sets(kernel, params, Z, chol_Kmm, data, mean, chol_P, order, rows, chunk)
    return _schur_sums(sets, order, m, theta.dtype)[0].quad_lin


def _polish(kernel, params, Z, chol_Kmm, data, theta, max_iter: int, tol: float = POLISH_TOL,
            coupling=None, marginals: bool = False, store: bool = False):
    r"""``theta`` moved to the fixed point of :func:`_sweep` (relative change at most
    ``tol``, or ``max_iter`` steps): ``(theta*, sweeps, residual)``, ``sweeps``
    the passes over the rows (the one at ``theta`` included), ``residual`` the relative change
    of a sweep at ``theta*`` (from the last one: no extra pass); with ``marginals`` a fourth,
    the latent marginals at every row under the starting ``theta`` (from its sweep); with
    ``store`` last the :class:`_Projections` that sweep stored, which the later sweeps use
    (:func:`_sweep`: for a subsample's tolerance only).

    **Preconditioned Anderson.** In the coordinates of :func:`_whiten` about ``theta``'s own
    precision factor, the Jacobian of the sweep at its fixed point is exactly the response's
    ``G`` (``lrvb`` module doc: ``d alpha_i = vechs(w_i w_i^T)^T d vechs Y - 2 r_i w_i^T dx``
    and ``dY' = sum_i g_i w_i w_i^T d alpha_i``, ``dx' = -sum_i g_i r_i w_i d alpha_i``, so
    with ``phi = (vechs Y, -sqrt 2 x)`` it is ``sum_i g_i u_i u_i^T``; its mean's block
    ``dx' / dx = G_xx`` holds in :func:`_whiten`'s own scaling too, checked against
    ``jax.jacfwd`` to 1e-13). Its slow modes are the mean's: on the ``susy`` generator (10^5
    points, m = 64) the largest eigenvalue of ``G`` was 0.90, of its mean block ``G_xx`` 0.90,
    of its covariance block 0.002. Newton's step for the mean alone, ``dx = (I - G_xx)^{-1}
    (x' - x)``, with ``G_xx`` summed over every row in the first sweep (one more ``m x m``
    product a row there), and the covariance's plain step make the preconditioned
    map :func:`_preconditioned`, whose fixed point is the sweep's; Anderson acceleration
    (``fixed_point.anderson``, as ``lrvb.polish``) takes it there. Measured from SVI's state
    (relative change 3e-3 to 1e-2; ``susy``, m = 64): 8 sweeps in all to 1e-8 (6 to
    :data:`SAMPLED_POLISH_TOL`) where Anderson with plain steps took 16 and 18, and 2 more (its
    first, and one for the residual), at 10^5 and 10^6 points (``reports/sbsvm_response``). The
    whole ``G`` (from the response's subsample, ``O(m^4)`` a row) as the preconditioner took as
    many sweeps, and its pass cost as much as 14 sweeps at 10^5 points; ``G_xx`` formed again at
    every step, without Anderson, took 7 sweeps, each with the extra product. An ``I - G_xx``
    that is not positive definite (far from a stable fixed point) leaves the steps plain.

    **The coupling** (``coupling=(order, rows, chunk)``, :func:`coupling_rows`). What
    ``G_xx`` leaves out is the mean's coupling to the covariance, ``B_0 = G_qx``: the step of
    :func:`_preconditioned` with ``B_0`` summed over the first ``rows`` rows of ``order`` at
    ``theta`` (one pass of ``m^3 / 2`` a row, :func:`_coupling`) is Newton's for the whole
    sweep but for ``G_qq``. On the ``susy`` generator (m = 64, 10^6 points) from SVI's state,
    steps with a fixed Jacobian, no Anderson: residuals 1.6e-2, 1.2e-3, 2.0e-4, 3.7e-5 after
    each step with ``G_xx`` alone, 6.0e-4, 5.8e-5 with ``B_0`` from ``4 P`` rows, 4.1e-4 and
    1.5e-5 from ``16 P`` (``G_xx`` from those rows too stalled near 1.6e-4: it stays the first
    sweep's, over every row); with ``B_0`` over every row (10^5 points) 1.9e-4, 5.7e-7, 8.2e-9
    (quadratic). A sweep over 10^6 rows takes 1.4 s, the pass over ``4 P`` rows 0.1 s, so it
    pays where it spares a sweep over many rows (:data:`COUPLING_RATIO`).
    """
    m = Z.shape[0]
    if max_iter == 0:  # the residual alone: a plain sweep, no G_xx
        image, *extra = _as_tuple(_sweep(kernel, params, Z, chol_Kmm, data, theta,
                                         marginals=marginals, store=store))
        return (theta, jnp.ones((), jnp.int32), lrvb.relative_change(theta, image), *extra)
    image, G_xx, *extra = _sweep(kernel, params, Z, chol_Kmm, data, theta, mean_block=True,
                                 marginals=marginals, store=store)
    stored = extra[-1] if store else None
    residual = lrvb.relative_change(theta, image)
    ref = gaussian_from_precision(*lrvb.unpack(theta, m))[1]

    def run(_):
        # the coupling's pass only where the polish steps at all
        B0 = (jnp.zeros((m * (m + 1) // 2, m), theta.dtype) if coupling is None
              else _coupling(kernel, params, Z, chol_Kmm, data, theta, *coupling))
        newton = _newton(G_xx, B0)

        def mapped(phi):
            th = _unwhiten(phi, ref)
            new = _sweep(kernel, params, Z, chol_Kmm, data, th, stored=stored)
            return (_preconditioned(phi, _whiten(new, ref), newton),
                    lrvb.relative_change(th, new))

        phi = _whiten(theta, ref)
        out = fixed_point.anderson(mapped, _preconditioned(phi, _whiten(image, ref), newton),
                                   max_iter - 1, lambda x, gx, res: res,
                                   lambda s: s.res <= tol)
        return _unwhiten(out.x, ref), out.k + 2, out.res

    def done(_):
        return theta, jnp.ones((), jnp.int32), residual

    return (*jax.lax.cond(residual <= tol, done, run, None), *extra)


def _as_tuple(out):
    """A sweep's outputs as a tuple (a plain sweep returns its image alone)."""
    return out if isinstance(out, tuple) else (out,)


@functools.partial(_programs.Program, static_argnames=("kernel",))
def polish(kernel, params, Z, chol_Kmm, eta1, prec, data, tol, max_sweeps):
    """S-BSVM's ``q(v)`` (natural parameters ``eta1``, ``prec``) moved towards the batch fixed
    point by ``fixed_point.certify`` until its certified distance is at most ``tol`` posterior
    sds or ``max_sweeps`` sweeps: ``(eta1, prec, Certificate)``."""
    sweep = functools.partial(_sweep, kernel, params, Z, chol_Kmm, data, metric=True)
    theta, cert = fixed_point.certify(sweep, lrvb.pack(eta1, 0.5 * (prec + prec.T)), data.n,
                                      tol, max_sweeps)
    eta1, prec = lrvb.unpack(theta, Z.shape[0])
    return eta1, prec, cert


def _moments_pass(kernel, params, Z, chol_Kmm, data, theta, chunk: int):
    """``lrvb.SitesMoments`` over all rows at ``theta``: the precision factor."""
    m = Z.shape[0]
    mean, chol_P = gaussian_from_precision(*lrvb.unpack(theta, m))
    (rows,), _ = _row_sets(kernel, params, Z, chol_Kmm, data, mean, chol_P, None, 0, chunk)
    moments = _over(rows, lrvb.moments_add, lrvb.moments_init(m, theta.dtype))
    return lrvb.sites_precision_factor(chol_P, lrvb.moments_gram(moments))


def _subsample(key, data):
    """The training rows in a uniformly random order, padding last: its first ``sample`` are
    ``sample`` distinct training rows (never padding) drawn without replacement (the count is
    a traced value, so that every subsample size shares one program)."""
    N = data.X.shape[0]
    # 63 random bits a row (ties about N^2 / 2^64: none in practice), padding's above them
    # all; an unsigned sort takes 0.11 s at 10^6 rows where argsort of floats took 0.24 s
    rows = jnp.arange(N, dtype=jnp.int32)
    rank = jnp.where(rows >= data.n, jnp.uint64(2**64 - 1),
                     random.bits(key, (N,), jnp.uint64) >> jnp.uint64(1))
    return jax.lax.sort((rank, rows), num_keys=1)[1]


def _sampled_pass(kernel, params, Z, chol_Kmm, data, theta, order, sample, chunk: int):
    r"""The moments of :func:`_moments_pass` from ``sample`` rows drawn without replacement,
    in two halves ``A`` and ``B``, each chunk's products in single precision
    (``lrvb.moments_add_single``: on the ``susy`` generator, m = 64, the sds of ``f`` at 500
    held-out points moved by at most 1.2e-8 at 10^5 points and 2.1e-9 at 10^6, those of ``u``
    by 1.4e-7 and 1.5e-7, against double; the pass 3.0-3.6 s -> 1.9-2.3 s at 36,288 rows):
    ``G_h = (n / |h|) sum_{i in h} g_i u_i u_i^T`` is
    unbiased for the sum over all ``n`` rows, ``G = (G_A + G_B) / 2``, and ``dG = (G_A -
    G_B) / 2`` is a draw with (to first order) the covariance of ``G``'s own error. Its
    effect on the response,

    .. math:: d [(I - G)^{-1}]_{xx} = X^\top dG\, X, \quad X = (I - G)^{-1} E_x ,

    (``E_x`` the mean's columns; ``m`` solves with the factor of ``I - G``) gives the
    estimated relative error of the sd of ``f`` at a training row, ``|d var_i| / (2 var_i)``,
    ``var_i = psi_i^T Cov(v) psi_i + ktilde_i``; the root mean square over the first chunk of
    the subsample's rows is ``mc_error``. (The sds of ``u`` are noisier: at ``10^5`` points,
    ``m = 64`` and 20,160 rows their error was 5 %, estimated 5.1 %, where the sds of ``f``
    at 500 held-out points moved by 0.05 % (median) and 2.4 % at most.) Returns the
    precision factor (``lrvb.sites_factors``) and ``mc_error``."""
    m = Z.shape[0]
    mean, chol_P = gaussian_from_precision(*lrvb.unpack(theta, m))
    sets, probes = _row_sets(kernel, params, Z, chol_Kmm, data, mean, chol_P, order, sample,
                             chunk)
    zero = lrvb.moments_init(m, theta.dtype)
    A, B = (_over(rows, lrvb.moments_add_single, zero) for rows in sets)
    GA, GB = lrvb.moments_gram(A), lrvb.moments_gram(B)
    G, dG = 0.5 * (GA + GB), 0.5 * (GA - GB)
    P = G.shape[0]
    factor, R = lrvb.sites_factors(chol_P, G)
    X = cho_solve((R, True), jnp.eye(P, m, -(P - m), dtype=G.dtype))
    return factor, _sd_error(probes, X[P - m:], X.T @ (0.5 * (dG + dG.T)) @ X)


def _sd_error(probes, cov, dcov):
    """The relative change of the sds of ``f`` at the probe rows (:func:`_row_sets`) when the
    response's block ``cov = [(I - G)^{-1}]_xx`` moves by ``dcov``, root mean square over them:
    ``var f_i = y_i^T cov y_i + ktilde_i`` (``y_i = P_L^{-1} psi_i``), changed by
    ``y_i^T dcov y_i``."""
    Y, ktilde = probes
    var = jnp.sum(Y * (cov @ Y), axis=0) + ktilde
    dvar = jnp.sum(Y * (dcov @ Y), axis=0)
    return jnp.sqrt(jnp.mean((dvar / (2.0 * var)) ** 2))


def _row_sets(kernel, params, Z, chol_Kmm, data, mean, chol_P, order, sample, chunk: int):
    """Where the response's sums come from: ``(sets, probes)``. ``sets`` is one
    ``(chunks, fetch)`` pair for the full sum (``order`` None: chunks of ``chunk`` own rows,
    padding weighted 0) or two for the halves ``A`` and ``B`` of ``sample`` rows (traced, a
    multiple of ``2 chunk``), the first in ``order`` (:func:`_subsample`), each weighted
    ``n / (sample / 2)`` (:func:`_sampled_pass`); ``fetch(i)`` gives chunk ``i``'s
    ``(W, r, g)``. ``probes``: ``P_L^{-1} psi_i`` and ``ktilde_i`` of the first chunk of the
    subsample (:func:`_sampled_pass`), ``None`` for the full sum."""
    S = cov_factor(chol_P)

    def stats(Xc, yc, weight):
        PsiT, m_f, s_f = _psi_form(kernel, params, Z, chol_Kmm, mean, chol_P, Xc)
        g = 0.5 * data.gamma * elbo_mod.optimal_alpha(m_f, s_f, yc) ** -1.5
        return (yc[:, None] * PsiT.T) @ S, 1.0 - yc * m_f, jnp.where(weight > 0, weight * g, 0.0)

    if order is None:
        n_chunks, size_ = _chunks(data.X.shape[0], chunk)

        def own(i):
            Xc, yc, mask = _chunk_rows(data.X, data.y, i, size_, data.n)
            return stats(Xc, yc, mask.astype(mean.dtype))

        return ((n_chunks, own),), None
    rows = order
    half = jnp.asarray(sample, jnp.int32) // 2
    weight = data.n.astype(mean.dtype) / half.astype(mean.dtype)

    def fetch(start):
        def at(i):
            idx = jax.lax.dynamic_slice_in_dim(rows, start + i * chunk, chunk)
            return stats(data.X[idx], data.y[idx], weight)
        return at

    PsiT, _, s_f = _psi_form(kernel, params, Z, chol_Kmm, mean, chol_P, data.X[rows[:chunk]])
    Y = solve_triangular(chol_P, PsiT, lower=True)
    probes = (Y, s_f - jnp.sum(Y**2, axis=0))
    return ((half // chunk, fetch(0)), (half // chunk, fetch(half))), probes


def _over(row_set, add, init):
    """``add`` folded over a row set's chunks (:func:`_row_sets`)."""
    count, fetch = row_set
    return jax.lax.fori_loop(0, count, lambda i, acc: add(acc, *fetch(i)), init)


def _precise(add, order):
    """``add`` for a row set: a subsample's products (``order`` given) in single precision
    (``lrvb.in_single``), the full sum's in double."""
    return functools.partial(lrvb.in_single, add) if order is not None else add


def _schur_sums(sets, order, m: int, dtype):
    """``lrvb.SchurSums`` over the row sets (:func:`_row_sets`): their estimate and half the
    halves' difference (:func:`_halves`)."""
    return _halves([_over(rs, _precise(lrvb.schur_add, order), lrvb.schur_init(m, dtype))
                    for rs in sets])


def _halves(parts):
    """The estimate (mean of the sets' sums) and half their difference (0 for one set)."""
    mean = jax.tree.map(lambda *a: sum(a) / len(a), *parts)
    if len(parts) == 1:
        return mean, jax.tree.map(jnp.zeros_like, mean)
    return mean, jax.tree.map(lambda a, b: 0.5 * (a - b), *parts)


class _Series(NamedTuple):
    """State of :func:`_series_pass`'s loop: ``passes`` products by ``G_qq`` taken, ``B`` the
    last (``G_qq^K B_0``), ``S`` the series so far, ``Y`` the partial sum ``sum_j G_qq^j B_0``
    (for the Monte-Carlo error), ``dB1`` the halves' difference of ``G_qq B_0``, ``error``
    the bound of ``lrvb.series_error``."""

    passes: jnp.ndarray
    B: jnp.ndarray
    S: jnp.ndarray
    Y: jnp.ndarray
    dB1: jnp.ndarray
    error: jnp.ndarray


def _series_pass(kernel, params, Z, chol_Kmm, data, theta, order, sample, chunk: int,
                 max_passes, tol):
    r"""The linear-response precision factor from the Schur complement of ``I - G``'s
    quadratic block, never forming its ``Pq x Pq`` fourth moments (``lrvb`` module doc):

    .. math:: C = I - G_{xx} - G_{xq} (I - G_{qq})^{-1} G_{qx}, \qquad
              [(I - G)^{-1}]_{xx} = C^{-1},

    so the factor is ``P_L chol(C)``. One pass (``lrvb.schur_add``) sums ``B_0 = G_{qx}``,
    ``G_{xx}`` and the matrix ``H`` whose largest eigenvalue ``lam`` bounds ``G_{qq}``'s
    (``lrvb.quad_norm_bound``); each further pass forms ``B_j = G_{qq} B_{j-1}``
    (``lrvb.quad_apply_add``, ``3 m^3 / 2`` a row) and adds ``B_{j-1}^T B_j + B_j^T B_j`` to
    ``S = sum_{t <= 2K} B_0^T G_{qq}^t B_0``, the series of ``B_0^T (I - G_{qq})^{-1} B_0``
    (``G_{qq}`` is positive semi-definite). The passes stop once the certified bound on the
    relative error of ``C^{-1}`` (``lrvb.series_error``) is at most ``tol``, or after
    ``max_passes``, or as soon as the bound, falling by ``lam^2`` a product, could not reach
    ``tol`` by then (an infinite bound never does). On the ``susy`` generator the bound
    ``lam`` was 0.0038 (``G_qq``'s largest eigenvalue 0.0030) at 10^5 points, m = 64, 0.056
    (0.040) at 10^4 points, m = 128: there one product brought the bound to 1.4e-10
    (measured 6.9e-11), here three to 3.8e-11 (1.5e-12).

    With a subsample (``order`` given; ``sample``, ``max_passes`` and ``tol`` may be traced)
    the sums come from its halves ``A`` and ``B`` (:func:`_row_sets`) and
    ``dG = (G_A - G_B) / 2`` gives the Monte-Carlo error as in :func:`_sampled_pass`:
    ``C = T^T (I - G) T`` with ``T = [(I - G_qq)^{-1} B_0; I]``,
    stationary in ``T``, so ``dC = -T^T dG T = -dG_xx - dB_0^T Y - Y^T dB_0 - Y^T dG_qq Y``,
    ``Y = (I - G_qq)^{-1} B_0`` (its partial sum), and ``d C^{-1} = -C^{-1} dC C^{-1}``; the
    last term is taken as ``B_0^T dG_qq B_0`` (the halves' difference of the first pass's
    product), which is off by a relative ``O(lam)`` of a term that is itself ``O(lam)``.

    Returns ``(factor, mc_error, passes, error)``: the factor (NaN where ``C`` is not
    positive definite), the estimated Monte-Carlo error (0 for the full sum), the passes
    by ``G_qq`` and the bound reached (infinite where the series cannot be bounded)."""
    m = Z.shape[0]
    mean, chol_P = gaussian_from_precision(*lrvb.unpack(theta, m))
    sets, probes = _row_sets(kernel, params, Z, chol_Kmm, data, mean, chol_P, order, sample,
                             chunk)
    sums, dsums = _schur_sums(sets, order, m, theta.dtype)
    lam = lrvb.quad_norm_bound(sums)
    B0 = sums.quad_lin
    M0 = B0.T @ B0
    eye = jnp.eye(m, dtype=theta.dtype)

    def complement(S):
        C = eye - sums.lin - S
        return 0.5 * (C + C.T)

    def step(st: _Series) -> _Series:
        operand = lrvb.quad_operand(st.B).astype(jnp.float32 if order is not None
                                                 else st.B.dtype)
        apply = _precise(lambda acc, W, r, g: lrvb.quad_apply_add(acc, W, g, operand), order)
        B, dB = _halves([_over(rs, apply, jnp.zeros_like(st.B)) for rs in sets])
        S = st.S + st.B.T @ B + B.T @ B
        passes = st.passes + 1
        error = lrvb.series_error(lam, passes, complement(S), M0)
        return _Series(passes, B, S, st.Y + B, jnp.where(st.passes == 0, dB, st.dB1), error)

    start = _Series(jnp.zeros((), jnp.int32), B0, M0, B0, jnp.zeros_like(B0),
                    lrvb.series_error(lam, 0, complement(M0), M0))

    def more(st: _Series):
        # the bound falls by about lam^2 a product: stop where max_passes cannot reach tol
        reachable = st.error * lam ** (2 * (max_passes - st.passes)) <= 10.0 * tol
        return (st.error > tol) & (st.passes < max_passes) & reachable

    out = jax.lax.while_loop(more, step, start)
    C = complement(out.S)
    chol_C = jnp.linalg.cholesky(C)
    factor = chol_P @ chol_C
    if probes is None:
        return factor, jnp.zeros((), theta.dtype), out.passes, out.error
    dBY = dsums.quad_lin.T @ out.Y
    dC = -dsums.lin - dBY - dBY.T - 0.5 * (B0.T @ out.dB1 + out.dB1.T @ B0)
    Cinv = cho_solve((chol_C, True), eye)
    return factor, _sd_error(probes, Cinv, -Cinv @ dC @ Cinv), out.passes, out.error


def _dense_pass(kernel, params, Z, chol_Kmm, data, theta):
    """The ``n x n`` form (``lrvb.sites_dense_factor``) over all rows at once (used for few
    rows only, :func:`uses_dense`): the precision factor."""
    m = Z.shape[0]
    mean, chol_P = gaussian_from_precision(*lrvb.unpack(theta, m))
    PsiT, m_f, s_f, y, own = _own_statistics(kernel, params, Z, chol_Kmm, mean, chol_P, data,
                                             0, data.X.shape[0])
    alpha = elbo_mod.optimal_alpha(m_f, s_f, y)
    W = (y[:, None] * PsiT.T) @ cov_factor(chol_P)
    return lrvb.sites_dense_factor(chol_P, W, 1.0 - y * m_f, 0.5 * data.gamma * alpha**-1.5,
                                   own)


def linear_response(kernel, params, Z, chol_Kmm, eta1, prec, data, max_iter: int,
                    chunk: int, sample: int = 0, key=None, tol: float = POLISH_TOL,
                    passes: int = 0, residual: float | None = None,
                    coupling: int = 0, marginals: bool = False, reuse: bool = False) -> Response:
    """Polish S-BSVM's ``q(v)`` (natural parameters ``eta1``, ``prec``) to the batch fixed
    point and compute its linear response there (module doc); ``data`` is ``sbsvm``'s
    ``SBSVMData`` (``X``, ``y``, ``n``, ``gamma``), ``chunk`` the rows per chunk of the
    sums (:func:`response_chunk`), 0 for the ``n x n`` form (:func:`uses_dense`).
    ``sample > 0``: the sums from that many rows drawn with ``key`` (a multiple of
    ``2 chunk``); ``tol`` the polish's. ``passes > 0``: the Schur route
    (:func:`_series_pass`) with at most that many products by ``G_qq`` and its series to a
    hundredth of ``tol``; else the moments (:func:`_moments_pass`, :func:`_sampled_pass`).
    ``residual``: with ``max_iter=0``, the residual already measured at ``(eta1, prec)`` (a
    response taken again from a polished state), which spares the sweep that would measure
    it. ``coupling > 0``: the polish's steps with ``B_0`` from that many rows drawn with
    ``key`` (:func:`_polish`, :func:`coupling_rows`; a subsample's only). ``marginals``:
    :attr:`Response.marginals` from the first sweep (which ``residual`` must not spare).
    ``reuse`` (a subsample's polish only, where it sweeps): the first sweep stores every row's
    projections, the later sweeps and :attr:`Response.f_var` use them (:func:`_sweep`).

    One program serves every subsample size, tolerance and count of products: they are
    traced (:func:`respond` grows a subsample and falls back to the moments without
    compiling again); whether there is a subsample, whether the series runs and whether
    the residual is known are compiled in."""
    sampled, series, known = bool(sample), bool(chunk and passes), residual is not None
    coupled = bool(sampled and coupling and max_iter)
    reuse = bool(reuse and sampled and max_iter and not known and tol >= STORED_MIN_TOL)
    if marginals and max_iter == 0 and known:
        raise ValueError("marginals come from the polish's first sweep, which a known "
                         "residual spares")
    return _linear_response(
        kernel, params, Z, chol_Kmm, eta1, prec, data, jnp.asarray(sample, jnp.int32),
        key if sampled else None, jnp.asarray(tol, eta1.dtype), jnp.asarray(passes, jnp.int32),
        jnp.asarray(residual if known else 0.0, eta1.dtype), jnp.asarray(coupling, jnp.int32),
        max_iter=max_iter, chunk=chunk, series=series, known=known, coupled=coupled,
        marginals=marginals, reuse=reuse)


@functools.partial(_programs.Program,
                   static_argnames=("kernel", "max_iter", "chunk", "series", "known", "coupled",
                                    "marginals", "reuse"))
def _linear_response(kernel, params, Z, chol_Kmm, eta1, prec, data, sample, key, tol, passes,
                     residual, coupling, max_iter: int, chunk: int, series: bool,
                     known: bool, coupled: bool, marginals: bool = False,
                     reuse: bool = False) -> Response:
    """:func:`linear_response`'s program (``key`` None for the full sum)."""
    theta = lrvb.pack(eta1, 0.5 * (prec + prec.T))
    # one order of the rows for the polish's coupling and the sums (a sort, 0.1 s at 10^6)
    order = None if key is None else _subsample(key, data)
    rows = stored = None
    if max_iter == 0 and known:
        sweeps = jnp.zeros((), jnp.int32)
    else:
        theta, sweeps, residual, *extra = _polish(
            kernel, params, Z, chol_Kmm, data, theta, max_iter, tol,
            (order, coupling, chunk) if coupled else None, marginals, reuse)
        rows = extra[0] if marginals else None
        stored = extra[-1] if reuse else None
    error = jnp.zeros((), theta.dtype)
    products = (jnp.zeros((), jnp.int32), jnp.zeros((), theta.dtype))
    if series:
        chol_lr, error, *products = _series_pass(kernel, params, Z, chol_Kmm, data, theta,
                                                 order, sample, chunk, passes,
                                                 SERIES_SHARE * tol)
    elif order is not None:
        chol_lr, error = _sampled_pass(kernel, params, Z, chol_Kmm, data, theta, order, sample,
                                       chunk)
    elif chunk:
        chol_lr = _moments_pass(kernel, params, Z, chol_Kmm, data, theta, chunk)
    else:
        chol_lr = _dense_pass(kernel, params, Z, chol_Kmm, data, theta)
    factor_u = chol_Kmm @ cov_factor(chol_lr)
    f_var = None if stored is None else _stored_variances(stored, chol_lr, data.X.shape[0])
    return Response(chol_lr, factor_u @ factor_u.T, residual, sweeps, theta, error, *products,
                    rows, f_var)


def _stored_variances(stored: _Projections, chol_prec, N: int):
    """The latent variances ``|P_L^{-1} psi_i|^2 + ktilde_i`` at every training row (padding
    included) under the precision factor ``chol_prec``, from the polish's stored
    projections in chunks of :data:`PASS_CHUNK` (single-precision products; relative errors
    about ``m 2^-24``, far below the subsample's Monte-Carlo error): instead of the pass over
    the rows that the fit's linear-response variances took (``sbsvm_marginals``), 0.47-0.51 s
    at 10^6 points (m = 64) against 0.07-0.09 s."""
    n_chunks, size_ = stored.ktilde.shape
    mean = jnp.zeros(chol_prec.shape[0], chol_prec.dtype)

    def body(i, out):
        s_f = _marginals_of(stored.PsiT[i], stored.ktilde[i], mean, chol_prec)[1]
        return jax.lax.dynamic_update_slice_in_dim(out, s_f, _chunk_start(i, size_, N), 0)

    return jax.lax.fori_loop(0, n_chunks, body, jnp.zeros(N, stored.ktilde.dtype))


SERIES_SHARE = 0.01
"""The Schur route's series stops when its certified relative error is this share of the
polish's tolerance (1e-10 for the full sum, 1e-6 for a subsample): what it leaves is then
far below what the polish leaves."""


SAMPLE_P = 16
"""Rows of the first subsample per unknown ``P`` of the response (:func:`sample_rows`). With
8 P rows (20,160 at m = 64) the sds of ``f`` at 500 held-out points of the ``susy`` generator
(10^5 points) were within 0.05 % (median) and 2.4 % (largest) of the full sum's; with 16 P
(36,288) within 0.03 % and 1.4 %, for 0.7 s more of correction (3.2 s -> 3.9 s at 10^5 points,
21.7 s -> 22.1 s at 10^6, ``reports/sbsvm_response``)."""

MC_TOL = 0.005
"""Largest estimated Monte-Carlo error (relative, of the sds of ``f`` at the training rows) of
a subsampled response; beyond it the subsample grows fourfold (:func:`respond`)."""


def sample_rows(n: int, m: int, chunk: int) -> int:
    """Rows of the first subsample of the moments (0: the full sum): ``SAMPLE_P P`` rounded up
    to a multiple of ``2 chunk``, when that is at most half of the ``n`` rows."""
    if not chunk:
        return 0
    step = 2 * chunk
    sample = step * -(-SAMPLE_P * size(m) // step)
    return sample if 2 * sample <= n else 0


COUPLING_P = 4
"""Rows of the polish's coupling ``B_0`` per unknown ``P`` (:func:`coupling_rows`): on the
``susy`` generator (10^6 points, m = 64) ``4 P`` rows took the residual from SVI's state to
5.8e-5 in two steps with a fixed Jacobian, ``16 P`` to 1.5e-5, ``P`` to 1.3e-4 (:func:`_polish`)."""

COUPLING_RATIO = 32
"""The polish couples where the data have at least this many times the coupling's rows: its
pass (``m^3 / 2`` a row over ``4 P`` rows, in single precision) then costs under half the
sweep it spares (``O(m^2)`` a row over every row): measured (m = 64) 0.1 s against 1.4 s at
10^6 points (0.4 s with the rows' random order, a sort the response's sums need anyway), and
at 10^5 points 0.19 s with the sort against a sweep of 0.15 s, where it would not pay. With the stored projections
(:func:`_sweep`) the sweeps it spares take 0.34 s at 10^6 points, its pass 0.06 s."""


def coupling_rows(n: int, m: int, chunk: int) -> int:
    """Rows of the polish's coupling (0: none): ``COUPLING_P P`` rounded up to a multiple of
    ``2 chunk``, where ``n`` is at least :data:`COUPLING_RATIO` times that."""
    if not chunk:
        return 0
    step = 2 * chunk
    rows = step * -(-COUPLING_P * size(m) // step)
    return rows if COUPLING_RATIO * rows <= n else 0


STORED_MIN_TOL = 1e-5
"""The smallest polish tolerance at which its sweeps use the stored single-precision
projections (:func:`_sweep`): their rounding leaves a residual that a polish to 1e-8 never
passed (1.7e-7 at 2,000 points, m = 8)."""

STORE_SHARE = 0.25
"""The polish stores every row's projections (:func:`stores_projections`) where they take at
most this share of the memory available."""


def projection_bytes(rows: int, m: int) -> int:
    """Bytes of :class:`_Projections` for ``rows`` rows: ``Psi^T`` in single precision and
    ``ktilde`` in double."""
    return 4 * rows * m + FLOAT * rows


def stores_projections(rows: int, m: int) -> bool:
    """Whether a subsample's polish stores every row's projections (:func:`_sweep`): where
    they take at most :data:`STORE_SHARE` of the memory available (or it is not known),
    else each sweep forms them again. They are left out of :func:`response_bytes`: where
    memory is short the polish does without them."""
    available = available_bytes()
    return available is None or projection_bytes(rows, m) <= STORE_SHARE * available


def _polish_tol(sample: int) -> float:
    """The polish's tolerance for moments from ``sample`` rows (0: the full sum)."""
    return SAMPLED_POLISH_TOL if sample else POLISH_TOL


def _response(kernel, st, data, eta1, prec, max_iter: int, chunk: int, sample: int, key,
              residual: float | None = None, coupling: int = 0, marginals: bool = False,
              reuse: bool = False):
    """One response from ``(eta1, prec)``: on the Schur route (:func:`_series_pass`), or, where
    its series is not within its tolerance after :func:`series_passes` products, the moments'
    from the polished state (when their ``P x P`` matrices fit in the memory available).
    ``(res, sweeps, form, failure)``: the :class:`Response`, the polish's sweeps, the form used
    (for the fit's attributes) and why the series failed where nothing could replace it;
    ``marginals``: :attr:`Response.marginals` from the first sweep."""
    m, tol = st.Z.shape[0], _polish_tol(sample)
    rows = sample or data.X.shape[0]
    passes = series_passes(rows, m) if chunk and uses_series(rows, m) else 0
    res = linear_response(kernel, st.params, st.Z, st.chol_Kmm, eta1, prec, data, max_iter,
                          chunk, sample, key, tol, passes, residual, coupling, marginals,
                          reuse)
    sweeps, failure = int(res.sweeps), None
    if not passes:
        return res, sweeps, "moments" if chunk else "n x n", failure
    count = int(res.series_passes)
    form = f"Schur complement ({count} product{'s' * (count != 1)} by G_qq)"
    error, target = float(res.series_error), SERIES_SHARE * tol
    if error <= target:
        return res, sweeps, form, failure
    need, available = moments_bytes(data.X.shape[0], m), available_bytes()
    if available is not None and need > available:
        failure = (f"the Schur complement's series was not within {target:g} after {count} "
                   f"products by G_qq (bound {error:.2g}), and the moments that would replace "
                   f"it need {format_bytes(need)} of memory ({format_bytes(available)} "
                   "available)")
        return res, sweeps, form, failure
    eta1, prec = lrvb.unpack(res.theta, m)
    first = res
    res = linear_response(kernel, st.params, st.Z, st.chol_Kmm, eta1, prec, data, 0, chunk,
                          sample, key, tol, residual=float(res.residual))
    # the stored variances were under the Schur route's covariance, which is replaced
    return (res._replace(marginals=first.marginals, f_var=None), sweeps + int(res.sweeps),
            "moments", failure)


def respond(kernel, st, data, key, num_draws: int, mean_field: _FinalQ, what: str,
            marginals: bool = False):
    """The engine's linear response at its final state ``st``, checked by ``lrvb.accept``:
    ``(q, status, sweeps, rows, mc_error, form, training, f_var)``, ``q`` the
    :class:`~.sbsvm_marginals._FinalQ` of ``N(SVI's mean, Cov_LR)`` (draws with ``key``) or,
    where the check fails, ``mean_field``, then the polish's sweeps, the rows the sums came
    from, their estimated Monte-Carlo error, the form of the response (:func:`_response`)
    and, with ``marginals``, the latent marginals at every training row under ``st``'s own
    ``q`` (``sbsvm_marginals._TrainingMarginals``, padding rows included; else None), from
    the polish's first sweep, and the latent variances at every training row (padding
    included) under ``Cov_LR`` where the polish stored its projections
    (:attr:`Response.f_var`; else None).

    Beyond ``2 SAMPLE_P P`` rows the sums come from a subsample (:func:`_row_sets`)
    that grows fourfold until its estimated error is at most :data:`MC_TOL` (the full sum
    once it would be half the rows); the polish runs to :data:`SAMPLED_POLISH_TOL` for a
    subsample (its error is far below the subsample's), else to :data:`POLISH_TOL`, and
    ``lrvb.accept`` holds the residual to the same tolerance."""
    m, rows = st.Z.shape[0], data.X.shape[0]
    chunk = response_chunk(rows, m)
    n = int(data.n)
    sample = sample_rows(n, m, chunk)
    data = data._replace(order=None)
    res, sweeps, form, failure = _response(kernel, st, data, st.eta1, st.prec,
                                           lrvb.POLISH_ITER, chunk, sample,
                                           random.fold_in(key, 1),
                                           coupling=coupling_rows(n, m, chunk) if sample else 0,
                                           marginals=marginals,
                                           reuse=bool(sample) and stores_projections(rows, m))
    training = res.marginals
    while failure is None and sample and not float(res.mc_error) <= MC_TOL:
        sample = 4 * sample if 8 * sample <= n else 0
        eta1, prec = lrvb.unpack(res.theta, m)
        # the full sum polishes on, to its own tolerance; a larger subsample starts polished,
        # its residual measured already
        res, more, form, failure = _response(
            kernel, st, data, eta1, prec, 0 if sample else lrvb.POLISH_ITER, chunk, sample,
            random.fold_in(key, sample + 2), float(res.residual) if sample else None)
        sweeps += more
    _, status = lrvb.accept(res.u_cov, None, res.residual, what, stacklevel=9,
                            tol=SAMPLED_POLISH_TOL if sample else lrvb.RESIDUAL_TOL,
                            failure=failure)
    report = (sample or n, float(res.mc_error), form, training, res.f_var)
    if status != "linear response":
        return (mean_field, status, sweeps) + report
    prec = res.chol_prec @ res.chol_prec.T
    return (_final_q(st._replace(eta1=prec @ mean_field.mean_v, prec=prec), key, num_draws),
            status, sweeps) + report
