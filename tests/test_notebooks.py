"""The notebooks stay true: each one executes top to bottom in a real Jupyter kernel.

The kernel is this interpreter (``sys.executable``, i.e. the virtual environment running the
tests), started from a kernel spec written for the test, so a ``python3`` kernel registered
elsewhere on the machine can never be picked up by accident. Figures go to the Agg backend.
"""

import json
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 600  # seconds per cell; the slowest took 77 s on a 2-core machine at load 12
KERNEL_NAME = "ppl-bsvm-test"


@pytest.fixture(scope="module")
def kernel_spec_manager(tmp_path_factory):
    """A kernel spec whose argv starts with ``sys.executable``."""
    from jupyter_client.kernelspec import KernelSpecManager

    root = tmp_path_factory.mktemp("kernels")
    spec_dir = root / KERNEL_NAME
    spec_dir.mkdir()
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec_dir / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "ppl_bsvm tests", "language": "python"})
    )
    ksm = KernelSpecManager(kernel_dirs=[str(root)])
    assert ksm.get_kernel_spec(KERNEL_NAME).argv[0] == sys.executable
    return ksm


def test_there_are_notebooks():
    names = {p.name for p in NOTEBOOKS}
    assert {"quickstart.ipynb", "validating_vi.ipynb",
            "hyperparameters_and_inducing_points.ipynb", "analytical_bootstrap.ipynb"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, kernel_spec_manager, monkeypatch):
    from jupyter_client.manager import KernelManager

    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=kernel_spec_manager)
    client = nbclient.NotebookClient(
        nb,
        km=km,
        timeout=CELL_TIMEOUT,
        allow_errors=False,  # any cell error raises CellExecutionError
        resources={"metadata": {"path": str(path.parent)}},
    )
    # nbclient leaves a kernel it was handed running (it shuts down only kernels of its own
    # manager): without cleanup_kc each notebook's kernel stayed alive, holding about 0.8 GB,
    # until the test session ended.
    client.execute(cleanup_kc=True)
    assert not km.has_kernel
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
