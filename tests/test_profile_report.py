"""The profile's report (``tests/profile_report.py``) on a hand-made profile of two workers."""

import json

from tests import profile_report


def _write(folder, worker, rows):
    (folder / f"{worker}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_repeats_are_counted_per_worker_at_the_same_signature(tmp_path, capsys):
    def program(secs, sig="(f64[3],)", site="ppl_bsvm/a.py:1 < ppl_bsvm/api.py:9"):
        return ["jit(call)", secs, sig, site]

    _write(tmp_path, "gw0", [
        {"test": "t.py::a", "wall": 2.0, "compile": 1.5, "programs": [program(1.0), program(0.5)]},
        {"test": "t.py::b", "wall": 1.0, "compile": 0.9, "programs": [
            program(0.8),  # again in this worker: a repeat
            program(0.05),  # a load from the persistent cache: left out
            program(0.7, sig="(f64[4],)")]},  # another signature: not a repeat
    ])
    _write(tmp_path, "gw1", [  # the other worker compiles its own: not a repeat
        {"test": "t.py::c", "wall": 1.0, "compile": 1.0, "programs": [program(1.0)]},
    ])
    rows = profile_report.load(tmp_path)
    assert {r["worker"] for r in rows} == {"gw0", "gw1"}
    again = profile_report.repeats(rows)
    assert again == [{"site": "ppl_bsvm/a.py:1", "repeats": 2, "seconds": 0.5 + 0.8,
                      "first -> again": "t.py::a -> t.py::a"}]
    assert profile_report.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "3 tests, 4 s of test time" in out
    assert "Compiled again in a worker at a signature it had compiled: 1 s" in out
