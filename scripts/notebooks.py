"""Execute the notebooks and store them with their outputs: ``make notebooks``.

    .venv/bin/python -m scripts.notebooks              # every notebooks/*.ipynb
    .venv/bin/python -m scripts.notebooks quickstart   # only these

Each notebook runs top to bottom at its full size in a fresh kernel of this interpreter
(``sys.executable``, from a kernel spec written for the run, so that a ``python3`` kernel
registered elsewhere on the machine is never picked up), with the notebook's folder as the
working directory, figures on the inline backend and an empty compilation cache of its own
(so that its timings of first calls are a new user's), and is written back in place with its
outputs. Seeds are fixed, so a second run stores the same numbers; the time each notebook
took is printed. A cell that raises stops that notebook, which is then left as it was.

The test suite (``tests/test_notebooks.py``) runs the same :func:`execute` with smaller
sizes, and checks that the committed notebooks hold their outputs
(:func:`missing_outputs`) and quote only numbers their cells print (:func:`unquoted_numbers`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
KERNEL_NAME = "ppl-bsvm-notebooks"
CELL_TIMEOUT = 900  # seconds per cell: generous for a loaded 2-core machine
CACHE_ENV = "PPL_BSVM_CACHE_DIR"  # ppl_bsvm._runtime's compilation-cache location
INLINE = "module://matplotlib_inline.backend_inline"
"""The backend that stores figures as outputs (a user's ``MPLBACKEND=Agg`` would leave the
figure cells empty)."""


def notebook_paths(names=()) -> list[Path]:
    """The notebooks named (``quickstart`` or ``quickstart.ipynb``), or all of them."""
    if not names:
        return sorted(NOTEBOOKS.glob("*.ipynb"))
    return [NOTEBOOKS / f"{Path(name).stem}.ipynb" for name in names]


def kernel_spec_manager(root: Path):
    """A ``KernelSpecManager`` that knows one kernel, :data:`KERNEL_NAME`, whose argv starts
    with ``sys.executable``, its spec written under ``root``."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec_dir = Path(root) / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec_dir / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "ppl_bsvm", "language": "python"}))
    return KernelSpecManager(kernel_dirs=[str(root)])


def with_parameters(nb, values: dict):
    """``nb`` with a cell assigning ``values`` after its cell tagged ``parameters``
    (papermill's convention); every name must be assigned in that cell."""
    import nbformat

    if not values:
        return nb
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    if len(tagged) != 1:
        raise ValueError(f"a notebook needs one cell tagged 'parameters', found {len(tagged)}")
    source = nb.cells[tagged[0]].source
    defined = {n.strip() for line in re.findall(r"^([\w ,]+)=", source, flags=re.M)
               for n in line.split(",")}
    unknown = set(values) - defined
    if unknown:
        raise ValueError(f"not in the parameters cell: {sorted(unknown)}")
    assignment = "\n".join(f"{name} = {value!r}" for name, value in values.items())
    nb.cells.insert(tagged[0] + 1, nbformat.v4.new_code_cell(
        assignment, metadata={"tags": ["injected-parameters"]}))
    return nb


def execute(nb, *, cwd: Path, ksm, timeout: int = CELL_TIMEOUT):
    """Run ``nb`` in place in a fresh kernel of :func:`kernel_spec_manager`'s spec; raises
    ``nbclient.exceptions.CellExecutionError`` at the first cell that raises."""
    import nbclient
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm)
    client = nbclient.NotebookClient(nb, km=km, timeout=timeout, allow_errors=False,
                                     resources={"metadata": {"path": str(cwd)}})
    # nbclient shuts down only the kernels of its own manager: without cleanup_kc a kernel
    # handed to it stays alive (about 0.8 GB) until the process ends
    client.execute(cleanup_kc=True)
    return nb


SETTINGS_TAGS = {"parameters", "injected-parameters"}
"""Cells that only assign run sizes (papermill's tags) and so print nothing."""


def missing_outputs(nb) -> list[int]:
    """Indices of the code cells a reader would see without a result: never executed, no
    output at all, or an error (the cells of :data:`SETTINGS_TAGS` need only have run)."""
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        if SETTINGS_TAGS & set(cell.metadata.get("tags", [])):
            if cell.get("execution_count") is None:
                out.append(i)
            continue
        errors = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
        if cell.get("execution_count") is None or not cell.get("outputs") or errors:
            out.append(i)
    return out


_NUMBER = re.compile(r"(?<![\w.^_])(\d+\.\d+|\d+(?:,\d{3})+|\d+(?=\s?%))")
_NOT_PROSE = re.compile(
    r"\$\$.*?\$\$|\$[^$\n]*\$|`[^`\n]*`|\]\([^)]*\)|<[^>]*>"
    # references into papers are not results: "Eq. 17", "Section 4.1", "Fig. 2"
    r"|(?:Eqs?\.|Sections?|Sec\.|§|Fig\.|Figure|Table|Algorithm)\s*\d+(?:\.\d+)*",
    flags=re.S)


def _output_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if "text" in o:
                parts.append(o["text"])
            for mime in ("text/plain", "text/markdown", "text/html"):
                if mime in o.get("data", {}):
                    parts.append(o["data"][mime])
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def unquoted_numbers(nb) -> list[tuple[int, str]]:
    """``(cell index, number)`` for each number in a markdown cell's prose (decimals such as
    0.83, thousands such as 1,000, percentages) that no stored output of the notebook shows:
    a result typed by hand that a later run may no longer print. Equations, code spans,
    links, HTML and references such as "Eq. 17" or "Section 4.1" are not prose; results belong in cells that print them (e.g.
    ``display(Markdown(f"..."))``)."""
    printed = _output_text(nb)
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        prose = _NOT_PROSE.sub(" ", cell.source)
        for number in _NUMBER.findall(prose):
            if number not in printed:
                found.append((i, number))
    return found


def run(names: list[str] | None = None) -> int:
    """Execute and store the notebooks named (all without names); 1 if any failed."""
    import nbclient
    import nbformat

    paths = notebook_paths(names or ())
    unknown = [p.stem for p in paths if not p.exists()]
    if unknown:
        raise SystemExit(f"no such notebook: {unknown} (have "
                         f"{[p.stem for p in notebook_paths()]})")
    failed = 0
    os.environ["MPLBACKEND"] = INLINE  # the kernels inherit this process's environment
    with tempfile.TemporaryDirectory() as root:
        ksm = kernel_spec_manager(Path(root))
        for path in paths:
            nb = nbformat.read(path, as_version=4)
            # an empty compilation cache per notebook (the kernel inherits the environment):
            # its first calls then time what a new user's first session pays, not a load
            # from the programs an earlier run left on disk
            os.environ[CACHE_ENV] = str(Path(root) / f"cache-{path.stem}")
            start = time.perf_counter()
            try:
                execute(nb, cwd=path.parent, ksm=ksm)
            except nbclient.exceptions.CellExecutionError as err:
                failed = 1
                print(f"{path.name}: FAILED, left as it was\n{err}", file=sys.stderr)
                continue
            nbformat.write(nb, path)
            gaps, typed = missing_outputs(nb), unquoted_numbers(nb)
            print(f"{path.name}: {time.perf_counter() - start:.0f} s"
                  + (f"; code cells without output: {gaps}" if gaps else "")
                  + (f"; numbers typed by hand: {typed}" if typed else ""))
            failed |= bool(gaps or typed)
    return failed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebook names without .ipynb (default: all)")
    return run(parser.parse_args(argv).names or None)


if __name__ == "__main__":
    sys.exit(main())
