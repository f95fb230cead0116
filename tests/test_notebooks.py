"""The notebooks stay true: each one executes top to bottom in a real Jupyter kernel.

Each runs with smaller sizes than a reader's run: the values in :data:`QUICK` are assigned in
a cell inserted after the notebook's cell tagged ``parameters`` (papermill's convention), so
the test proves that every cell works, not the numbers of the full-size run.

The kernel is this interpreter (``sys.executable``, i.e. the virtual environment running the
tests), started from a kernel spec written for the test, so a ``python3`` kernel registered
elsewhere on the machine can never be picked up by accident. Figures go to the Agg backend.
"""

import json
import re
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 600  # seconds per cell; the slowest took 77 s on a 2-core machine at load 12
KERNEL_NAME = "ppl-bsvm-test"
QUICK = {
    "validating_vi": {"NUM_WARMUP": 150, "NUM_SAMPLES": 200, "NUTS_SAMPLES": 100},
    "hyperparameters_and_inducing_points": {"MAX_ITER": 150, "SWEEP_MAX_ITER": 150,
                                            "INDUCING_SIZES": [8, 16]},
    "analytical_bootstrap": {"N_RESAMPLES": 60},
}
"""Per notebook, the parameters the test overrides (every name must be in its parameters
cell)."""


def with_quick_parameters(nb, values: dict):
    """``nb`` with a cell assigning ``values`` after its cell tagged ``parameters``."""
    if not values:
        return nb
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "one cell tagged 'parameters'"
    defined = set(re.findall(r"^(\w+)\s*=", nb.cells[tagged[0]].source, flags=re.M))
    defined |= {n.strip() for line in re.findall(r"^([\w ,]+)=", nb.cells[tagged[0]].source,
                                                  flags=re.M) for n in line.split(",")}
    assert set(values) <= defined, f"not in the parameters cell: {set(values) - defined}"
    source = "\n".join(f"{name} = {value!r}" for name, value in values.items())
    nb.cells.insert(tagged[0] + 1, nbformat.v4.new_code_cell(source))
    return nb


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


def test_quick_parameters_follow_the_parameters_cell():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import numpy"),
        nbformat.v4.new_code_cell("A, B = 1, 2\nC = [3]", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print(A + B)")])
    out = with_quick_parameters(nb, {"B": 5, "C": [1]})
    assert [c.source for c in out.cells][1:3] == ["A, B = 1, 2\nC = [3]", "B = 5\nC = [1]"]
    with pytest.raises(AssertionError, match="not in the parameters cell"):
        with_quick_parameters(nb, {"D": 1})


def test_there_are_notebooks():
    names = {p.name for p in NOTEBOOKS}
    assert {"quickstart.ipynb", "validating_vi.ipynb",
            "hyperparameters_and_inducing_points.ipynb", "analytical_bootstrap.ipynb"} <= names
    assert set(QUICK) <= {p.stem for p in NOTEBOOKS}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, kernel_spec_manager, monkeypatch):
    from jupyter_client.manager import KernelManager

    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = with_quick_parameters(nbformat.read(path, as_version=4), QUICK.get(path.stem, {}))
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
