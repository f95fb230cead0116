"""The GPU benchmark's bookkeeping: the report it writes from its runs (the runs themselves
are benchmarks, made where a GPU is lent)."""

import json

from benchmarks import gpu


def _run(label_dir, backend, sbsvm, gibbs):
    label_dir.mkdir(parents=True)
    env = {"backend": backend, "devices": ["NVIDIA H200"] if backend == "gpu" else ["cpu"],
           "jax": "0.12.0", "numpyro": "0.22.0", "python": "3.12.1", "cores": 2,
           "load": [0.1, 0.2, 0.3]}
    (label_dir / "results.json").write_text(json.dumps(
        {"environment": env, "sbsvm": sbsvm, "gibbs": gibbs, "budget_s": 100.0}))


def _sbsvm(run, seconds):
    return {"n": 5_000_000, "run": run, "time_fit_s": seconds, "steps": 501,
            "stop_reason": "tol", "test_error": 0.19651, "peak_rss_mb": 2000.0,
            "device_peak_mb": None}


def test_the_report_lists_every_run_its_median_and_its_failures(tmp_path):
    _run(tmp_path / "cpu", "cpu", [_sbsvm("first", 14.0), _sbsvm("warm", 9.6),
                                   _sbsvm("warm", 9.1), _sbsvm("warm", 9.3)], [])
    gibbs = {"n": 1000, "run": "first", "warmup": 1000, "draws": 1000, "time_fit_s": 26.5,
             "time_compile_s": 7.3, "time_mcmc_s": 10.3, "ms_per_sweep": 5.16,
             "ess_bulk_min": 1916.4, "ess_tail_min": 2719.6, "rhat_max": 1.0036,
             "cg_iters_mean": 0.0, "peak_rss_mb": 5004.6, "device_peak_mb": 378.2}
    _run(tmp_path / "h200", "gpu", [_sbsvm("first", 15.4)],
         [gibbs, {"n": 10_000, "run": "first", "error": "stopped after 147 s (the budget)"}])
    (tmp_path / "NOTES.md").write_text("## Notes\n\nread me")
    text = gpu.write_report(tmp_path)
    assert (tmp_path / "README.md").read_text() == text
    lines = text.splitlines()
    assert "| cpu | 5,000,000 | 14.00 | 9.30 (9.10-9.60) | 501 | tol | 0.1965 | 2000 | - |" \
        in lines
    assert "| h200 | 5,000,000 | 15.40 | - | 501 | tol | 0.1965 | 2000 | - |" in lines
    assert ("| h200 | 1,000 | 1,000 + 1,000 | 26.5 | 7.3 | 10.3 | 5.16 | 1916 | 2720 | 1.0036 "
            "| 0.0 | 5005 / 378 |") in lines
    failed = [line for line in lines if line.startswith("| h200 | 10,000")]
    assert len(failed) == 1 and "stopped after 147 s" in failed[0]
    assert failed[0].count("|") == lines[lines.index(failed[0]) - 1].count("|")
    assert text.rstrip().endswith("read me")
