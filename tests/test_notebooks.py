"""The notebooks stay true: each executes top to bottom in a real Jupyter kernel, and each
committed notebook holds the outputs of its last run and quotes no number its cells did not
print (``make notebooks`` stores them; ``scripts/notebooks.py``).

The execution test runs with smaller sizes than a reader's run: the values in :data:`QUICK`
are assigned in a cell inserted after the notebook's cell tagged ``parameters``
(papermill's convention), so it proves that every cell works, not the numbers of the
full-size run; those are the stored outputs, which the other tests check. The kernel is this
interpreter, from a kernel spec written for the test; figures go to the inline backend, so
that a figure cell has its output as in a reader's run.
"""

import nbformat
import pytest

from scripts import notebooks as runner

NOTEBOOKS = sorted(runner.NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT = 600  # seconds per cell; the slowest took 77 s on a 2-core machine at load 12
QUICK = {
    # the speed sections at shapes fitted above: they compile nothing new (a cold compile of
    # each engine per size was most of these two notebooks' test time); and the quickstart's
    # training set of validating_vi's shape (100 of Heart's 270 rows), so that the quickstart,
    # which runs after it on the same worker (conftest.LONGEST_FIRST), loads the programs of
    # its fits (GP VI with and without linear response, ECM, the GP and linear Gibbs samplers)
    # from the compilation cache: its cells took 18.2 s instead of 35.9 s
    "quickstart": {"TEST_FRACTION": 170 / 270, "NUM_SAMPLES": 150, "SPEED_N": 100,
                   "SIZES": [100]},
    "validating_vi": {"NUM_WARMUP": 150, "NUM_SAMPLES": 200, "NUTS_SAMPLES": 100,
                      "GROWTH_SIZES": [100]},
    "hyperparameters_and_inducing_points": {
        "MAX_ITER": 150, "FULL_SWEEPS": 30, "SWEEP_MAX_ITER": 150, "INDUCING_SIZES": [8, 16],
        "TIMING_STEPS": 1000, "GRID_LENGTHSCALES": [0.3], "GRID_VARIANCES": [4.0],
        "COLD_START": False},  # False: no new processes timing a first call (about 20 s)
    "analytical_bootstrap": {"N_RESAMPLES": 60},
}
"""Per notebook, the parameters the test overrides (every name must be in its parameters
cell)."""


@pytest.fixture(scope="module")
def kernel_spec_manager(tmp_path_factory):
    return runner.kernel_spec_manager(tmp_path_factory.mktemp("kernels"))


def test_quick_parameters_follow_the_parameters_cell():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import numpy"),
        nbformat.v4.new_code_cell("A, B = 1, 2\nC = [3]", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print(A + B)")])
    out = runner.with_parameters(nb, {"B": 5, "C": [1]})
    assert [c.source for c in out.cells][1:3] == ["A, B = 1, 2\nC = [3]", "B = 5\nC = [1]"]
    assert out.cells[2].metadata["tags"] == ["injected-parameters"]
    with pytest.raises(ValueError, match="not in the parameters cell"):
        runner.with_parameters(nb, {"D": 1})


def test_there_are_notebooks():
    names = {p.name for p in NOTEBOOKS}
    assert {"quickstart.ipynb", "validating_vi.ipynb",
            "hyperparameters_and_inducing_points.ipynb", "analytical_bootstrap.ipynb"} <= names
    assert set(QUICK) <= {p.stem for p in NOTEBOOKS}


def _cell(source, outputs=None, kind="code"):
    if kind == "markdown":
        return nbformat.v4.new_markdown_cell(source)
    cell = nbformat.v4.new_code_cell(source)
    if outputs is not None:
        cell.execution_count = 1
        cell.outputs = outputs
    return cell


def test_the_checks_find_missing_outputs_and_numbers_typed_by_hand():
    stream = nbformat.v4.new_output("stream", text="sd ratio 0.63, 1,000 draws, 90% covered\n")
    error = nbformat.v4.new_output("error", ename="E", evalue="", traceback=[])
    nb = nbformat.v4.new_notebook(cells=[
        _cell("print(1)", [stream]), _cell("x = 1"), _cell("1 / 0", [error]),
        _cell("VI: sd ratio 0.63 with 1,000 draws; 90% covered; Eq. 4.1, `0.5`, $0.25$, "
              "[a](v0.7.html); 0.64 and 85% were typed", kind="markdown")])
    assert runner.missing_outputs(nb) == [1, 2]
    assert runner.unquoted_numbers(nb) == [(3, "0.64"), (3, "85")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_committed_notebook_holds_its_outputs_and_quotes_only_printed_numbers(path):
    """What a reader sees on GitHub is the last run (``make notebooks``): every code cell has
    its output, none an error, and every number in the text is one a cell printed."""
    nb = nbformat.read(path, as_version=4)
    assert runner.missing_outputs(nb) == [], "code cells without output: run make notebooks"
    assert runner.unquoted_numbers(nb) == [], "numbers in the text that no cell printed"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, kernel_spec_manager, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", runner.INLINE)  # figures are outputs, as a reader's
    nb = runner.with_parameters(nbformat.read(path, as_version=4), QUICK.get(path.stem, {}))
    runner.execute(nb, cwd=path.parent, ksm=kernel_spec_manager, timeout=CELL_TIMEOUT)
    assert runner.missing_outputs(nb) == []
