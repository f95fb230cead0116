"""The README stays true: its Python blocks run as written, in order, in one namespace.

They run in a fresh interpreter (this one, ``sys.executable``) whose working directory is a
temporary folder, so the files they write (``reports/my_comparison``, ``run.ckpt``) land
there; figures go to the Agg backend. A block that fails names itself and its first line.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"

# Under the main guard, as the README asks of scripts: the dask block's worker processes are
# spawned and import this file as __mp_main__.
RUNNER = textwrap.dedent("""
    import json, sys, traceback
    if __name__ == "__main__":
        blocks = json.load(open(sys.argv[1]))
        namespace = {"__name__": "__main__"}
        for i, block in enumerate(blocks):
            try:
                exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
            except BaseException:
                traceback.print_exc()
                first = block.strip().splitlines()[0]
                sys.exit(f"README python block {i + 1} of {len(blocks)} failed ({first!r})")
""")


QUICK = (
    ('method="gibbs", num_samples=500)', 'method="gibbs", num_samples=100, num_warmup=100)', 1),
    # GP NUTS at 50 + 50 draws (100 + 100: its block took 9.4 s alone, 5.6 s at these sizes)
    ('method="nuts", num_samples=500)', 'method="nuts", num_samples=50, num_warmup=50)', 1),
    ("n_resamples=200)", "n_resamples=20)", 1),
    # the checkpointed linear Gibbs run, resumed and extended, at a fifth of its draws
    ("num_samples=1000,", "num_samples=200,", 1),
    ("checkpoint_every=250)", "checkpoint_every=50)", 2),
    ("num_samples=2000)", "num_samples=400)", 1),
    ('estimator="632")', 'estimator="632", maxiter=1)', 1),
    # one dask worker: each imports JAX and compiles the folds' fits (the block took 7.6 s and
    # 16 s of CPU with two, 3.1 s and 6.6 s with one); test_dask runs two against the session
    ("LocalCluster(n_workers=2,", "LocalCluster(n_workers=1,", 1),
)
"""Smaller runs for the test, as the notebooks' test has (``test_notebooks.QUICK``): ``(text,
replacement, how many times the text occurs)``, so the test proves that every block works, not
the numbers of the full-size run. (The GP NUTS block alone took 29 s of the 90 at the README's
sizes, warm.)"""


def with_quick_sizes(blocks: list[str]) -> list[str]:
    """``blocks`` with every :data:`QUICK` replacement made; each text must occur as often as
    its entry says."""
    text = "\0".join(blocks)
    for old, new, count in QUICK:
        assert text.count(old) == count, (
            f"README: {old!r} must occur {count} time(s) among the python blocks")
        text = text.replace(old, new)
    return text.split("\0")


def python_blocks(text: str) -> list[str]:
    """The contents of the fenced ```python blocks of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_python_blocks_are_found():
    text = "a\n```python\nx = 1\n```\n```sh\nls\n```\n```python\ny = x\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = x\n"]
    assert len(python_blocks(README.read_text())) >= 9
    quick = with_quick_sizes(python_blocks(README.read_text()))
    assert len(quick) == len(python_blocks(README.read_text()))


@pytest.mark.slow
def test_readme_python_blocks_run_in_order(tmp_path):
    blocks = with_quick_sizes(python_blocks(README.read_text()))
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "runner.py").write_text(RUNNER)
    # XLA's flags as the other tests' (optimisation level 0, tests/_xla.py): the program
    # store's probes keep the default code generation tested
    env = dict(
        os.environ,
        MPLBACKEND="Agg",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        # the dask block's worker processes import JAX: room for a loaded 2-core machine
        DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="180s")
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run([sys.executable, str(tmp_path / "runner.py"),
                             str(tmp_path / "blocks.json")], cwd=work, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (work / "reports" / "my_comparison" / "report.md").exists()
