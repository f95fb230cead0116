"""S-BSVM's large-data path: batch statistics, default batch size, devices, memory checks."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm import _memory, kernels
from ppl_bsvm.inference.vi import sbsvm, sbsvm_defaults, sbsvm_marginals
from ppl_bsvm.inference.mvn import gaussian_from_precision

KERNEL = kernels.RBF(lengthscale=1.1, variance=1.4)


@pytest.mark.parametrize("b", [5, 60])  # few rows per inducing point (solves), many (inverses)
def test_batch_marginals_and_statistics_both_forms_match_the_definition(b):
    """``m_i = psi_i^T m_v``, ``s_i = psi_i^T P^{-1} psi_i + k_ii - |psi_i|^2`` with
    ``psi_i = L^{-1} k_mi``, and the statistics ``g1 = Psi^T y (1 + alpha^-1/2)``,
    ``G2 = Psi^T A^-1/2 Psi``, computed densely with inverses in numpy."""
    with jax.enable_x64(True):
        r = np.random.default_rng(0)
        m = 12
        Z, Xb = r.standard_normal((m, 3)), r.standard_normal((b, 3))
        yb = np.where(r.random(b) < 0.5, -1.0, 1.0)
        params = KERNEL.init_params()
        chol_K = sbsvm._chol_Kmm(KERNEL, params, jnp.asarray(Z), 1e-6)
        A = r.standard_normal((m, m))
        prec = A @ A.T + m * np.eye(m)
        eta1 = r.standard_normal(m)
        mean, chol_P = gaussian_from_precision(jnp.asarray(eta1), jnp.asarray(prec))
        args = (KERNEL, params, jnp.asarray(Z), chol_K, mean, chol_P, jnp.asarray(Xb))
        gemm = b >= sbsvm_marginals.GEMM_MIN_RATIO * m
        assert sbsvm_marginals._uses_gemm(b, m) == gemm
        m_f, s_f = sbsvm_marginals._batch_marginals(*args)
        st = sbsvm._local_statistics(*args, jnp.asarray(yb), 1.0)
        Kmb = np.asarray(KERNEL.K(params, jnp.asarray(Z), jnp.asarray(Xb)))
        psi = np.linalg.solve(np.asarray(chol_K), Kmb)
        cov = np.linalg.inv(prec)
        np.testing.assert_allclose(m_f, psi.T @ np.linalg.solve(prec, eta1), rtol=1e-9)
        kdiag = np.full(b, 1.4)
        expected = np.einsum("ib,ij,jb->b", psi, cov, psi) + kdiag - np.sum(psi**2, 0)
        np.testing.assert_allclose(s_f, expected, rtol=1e-8)
        root = np.sqrt((1 - yb * np.asarray(m_f)) ** 2 + expected)
        np.testing.assert_allclose(st.g1, psi @ (yb * (1 + 1 / root)), rtol=1e-8)
        np.testing.assert_allclose(st.G2, (psi / root) @ psi.T, rtol=1e-8, atol=1e-10)


def test_default_batch_size_is_the_papers_up_to_50000_then_500_steps_per_epoch():
    assert sbsvm_defaults.default_batch_size(60) == 60
    assert sbsvm_defaults.default_batch_size(5000) == 100
    assert sbsvm_defaults.default_batch_size(50_000) == 100
    assert sbsvm_defaults.default_batch_size(1_000_000) == 2000
    assert sbsvm_defaults.default_batch_size(5_000_000) == 10_000
    assert sbsvm_defaults.default_batch_size(10**9) == 20_000


def test_hyperparameter_steps_use_at_most_1024_rows_of_the_batch():
    rate = sbsvm.schedules.as_rate("robbins_monro")
    assert sbsvm._hyper_rows(sbsvm.Config(KERNEL, rate, 100)) == 100
    assert sbsvm._hyper_rows(sbsvm.Config(KERNEL, rate, 10_000)) == 1024


def test_default_tol_loosens_beyond_100000_points():
    assert sbsvm_defaults.default_tol(100_000) == 1e-4
    assert sbsvm_defaults.default_tol(100_001) == 5e-3


def test_stopping_periods_are_epochs_up_to_300000_points_then_at_least_a_third_of_one():
    assert sbsvm_defaults.default_check_every(10_000) == 1.0
    assert sbsvm_defaults.default_check_every(300_000) == 1.0
    assert sbsvm_defaults.default_check_every(500_000) == pytest.approx(0.6)
    assert sbsvm_defaults.default_check_every(1_000_000) == pytest.approx(1 / 3)
    assert sbsvm_defaults.default_check_every(5_000_000) == pytest.approx(1 / 3)
    for n in (400_000, 1_000_000, 5_000_000):  # a period never has fewer than 300,000 points
        assert sbsvm_defaults.default_check_every(n) * n >= sbsvm_defaults.PERIOD_MIN_POINTS - 1e-6


def test_the_resolved_stopping_period_is_in_the_fit_options(toy2d):
    X, y = toy2d
    fit = ppl_bsvm.fit(X, y, method="svi", num_inducing=8, max_iter=30, progress_bar=False)
    assert fit.options["check_every"] == 1.0
    fit = ppl_bsvm.fit(X, y, method="svi", num_inducing=8, max_iter=30, check_every=0.5,
                       progress_bar=False)
    assert fit.options["check_every"] == 0.5


def test_bad_devices_and_batch_multiple(toy2d):
    X, y = toy2d
    with pytest.raises(ValueError, match="devices=5 but JAX has"):
        ppl_bsvm.fit(X, y, model="gp", method="svi", devices=5)
    with pytest.raises(ValueError, match="devices must be"):
        ppl_bsvm.fit(X, y, model="gp", method="svi", devices="gpu")
    fit = ppl_bsvm.fit(X, y, model="gp", method="svi", devices=1, num_inducing=8, max_iter=30,
                       num_draws=10)
    assert fit.options["devices"] == 1


_PARALLEL = textwrap.dedent("""
    import json, warnings
    warnings.simplefilter("ignore")
    import jax, numpy as np, ppl_bsvm
    from ppl_bsvm import datasets
    assert len(jax.local_devices()) == 2, jax.local_devices()
    X, y = datasets.load("banana", standardize=True)
    X, y = X[:1000], y[:1000]
    out = {}
    for k in (1, 2):
        f = ppl_bsvm.fit(X, y, model="gp", method="svi", num_inducing=16, batch_size=200,
                         devices=k, learn_hyperparameters=True, learn_inducing=True,
                         hyper_every=3, max_iter=40, num_draws=10, seed=0,
                         polish=False)  # the steps; the polish's search would amplify rounding
        a = f.idata["approximation"]
        out[k] = {"u_mean": a["u_mean"].values.tolist(), "u_cov": a["u_cov"].values.tolist(),
                  "Z": a["Z"].values.tolist(), "f_mean": a["f_mean"].values.tolist(),
                  "lengthscale": f.trace["lengthscale"].tolist(),
                  "devices": f.options["devices"]}
    # the same run polished, by default: the hyperparameter search's answer joins the mesh's
    # state (sbsvm_batch.batch_phase)
    f = ppl_bsvm.fit(X, y, model="gp", method="svi", num_inducing=16, batch_size=200,
                     devices=2, learn_hyperparameters=True, learn_inducing=True,
                     hyper_every=3, max_iter=40, num_draws=10, seed=0)
    out["polished"] = {"devices": f.options["devices"], "p": f.predict_proba(X[:5]).tolist(),
                       "lengthscale": float(f.hyperparameters["lengthscale"])}
    try:
        ppl_bsvm.fit(X, y, model="gp", method="svi", batch_size=101, devices=2)
    except ValueError as err:
        out["error"] = str(err)
    print(json.dumps(out))
""")


def test_data_parallel_steps_equal_the_one_device_run():
    """Two host devices (a new process: the device count is fixed when JAX starts): the
    minibatch rows split over both, hyperparameters and inducing locations learned; every
    iterate agrees with the one-device run to 1e-10. And the same run polished (the search's
    host values placed as the mesh's state is)."""
    flags = os.environ.get("XLA_FLAGS", "")  # the suite's (tests/_xla.py), and two devices
    env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=2"}
    proc = subprocess.run([sys.executable, "-c", _PARALLEL], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    one, two = out["1"], out["2"]
    assert (one["devices"], two["devices"]) == (1, 2)
    for name in ("u_mean", "u_cov", "Z", "f_mean", "lengthscale"):
        a, b = np.asarray(one[name]), np.asarray(two[name])
        assert np.max(np.abs(a - b)) <= 1e-10 * max(1.0, np.max(np.abs(a))), name
    assert "batch_size=101 is not a multiple of the 2 devices" in out["error"]
    polished = out["polished"]
    assert polished["devices"] == 2 and np.isfinite(polished["lengthscale"])
    assert all(0.0 < p < 1.0 for p in polished["p"])


_DISTRIBUTED_FIT = dict(model="gp", method="svi", num_inducing=16, batch_size=200,
                        learn_hyperparameters=True, hyper_every=3, max_iter=40, num_draws=10,
                        seed=0, progress_bar=False, polish=False)  # the steps
"""The fit of the distributed test, on banana's first 1000 rows (the polish's search would
amplify rounding)."""

_DISTRIBUTED = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    import jax
    port, pid, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    # one of two processes of a jax.distributed run, CPU collectives by gloo
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=pid)
    import ppl_bsvm
    from ppl_bsvm import datasets
    X, y = datasets.load("banana", standardize=True)
    f = ppl_bsvm.fit(X[:1000], y[:1000], **options)
    a = f.idata["approximation"]
    print(json.dumps({"u_mean": a["u_mean"].values.tolist(), "u_cov": a["u_cov"].values.tolist(),
                      "f_mean": a["f_mean"].values.tolist(), "devices": f.options["devices"],
                      "p": f.predict_proba(X[1000:1010]).tolist(), "processes": jax.process_count()}))
""")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.filterwarnings("ignore:method='svi'")  # stopped at max_iter=40, as meant
def test_two_processes_of_a_distributed_run_share_every_step():
    """``jax.distributed`` with two local processes (CPU collectives by gloo): by default each
    batch is split over both processes' devices (one ``psum`` per step across them), and both
    end with the one-process run's ``q`` to 1e-10 (that run in this process: the same flags,
    and a fit's numbers do not depend on the process that computes them, ``test_programs``)."""
    port = str(_free_port())
    run = [sys.executable, "-c", _DISTRIBUTED, port]
    procs = [subprocess.Popen(run + [str(pid), json.dumps(_DISTRIBUTED_FIT)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for pid in (0, 1)]
    X, y = ppl_bsvm.datasets.load("banana", standardize=True)
    single = ppl_bsvm.fit(X[:1000], y[:1000], **_DISTRIBUTED_FIT)
    a = single.idata["approximation"]
    one = {"u_mean": a["u_mean"].values, "u_cov": a["u_cov"].values,
           "f_mean": a["f_mean"].values, "p": single.predict_proba(X[1000:1010])}
    assert single.options["devices"] == 1 and jax.process_count() == 1
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:  # a hung pair (item 20 of tests/README.md) must not outlive the test
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    parts = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    for part in parts:
        assert part["devices"] == 2 and part["processes"] == 2
        for name in ("u_mean", "u_cov", "f_mean", "p"):
            a, b = np.asarray(one[name]), np.asarray(part[name])
            assert np.max(np.abs(a - b)) <= 1e-10 * max(1.0, np.max(np.abs(a))), name


def test_a_fit_that_cannot_fit_in_memory_fails_before_it_starts(monkeypatch):
    """Dense engines at n = 10^6 (8 TB per n x n matrix) and S-BSVM on more data than the
    machine has: a clear error naming the sizes, raised before X is even converted."""
    monkeypatch.setattr(_memory, "available_bytes", lambda: 4 * 10**9)

    class Huge:  # only its shape is read before the check
        shape = (1_000_000, 18)

        def __array__(self, *args, **kwargs):
            raise AssertionError("X was converted before the memory check")

    with pytest.raises(ppl_bsvm.InsufficientMemoryError, match=r"n x n matrices.*method='svi'"):
        ppl_bsvm.fit(Huge(), np.ones(3), model="gp", method="vi")
    with pytest.raises(ValueError, match=r"\(1000000, 18\) needs about .* only 4.0 GB"):
        ppl_bsvm.fit(Huge(), np.ones(3), model="gp", method="ecm")
    Huge.shape = (50_000_000, 18)  # 7.2 GB of float64 inputs, twice
    with pytest.raises(MemoryError, match="method='svi'"):
        ppl_bsvm.fit(Huge(), np.ones(3), model="gp", method="svi")


def test_memory_estimate_leaves_ordinary_fits_alone(toy2d):
    X, y = toy2d
    need = _memory.input_bytes(*X.shape) + sbsvm._working_memory(*X.shape, {})
    assert need < 10**7
    assert _memory.available_bytes() is None or _memory.available_bytes() > need
