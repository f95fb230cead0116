"""``import ppl_bsvm`` is light, and quiet in a Jupyter kernel without ipywidgets."""

import json
import subprocess
import sys

HEAVY = ("jax", "numpyro", "xarray", "pandas", "scipy", "sklearn", "arviz", "arviz_base",
         "arviz_plots", "matplotlib", "optax", "tqdm")


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_loads_no_heavy_module():
    out = _run(
        "import json, sys, ppl_bsvm\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    assert json.loads(out) == []


def test_names_load_on_first_use_quietly_in_a_jupyter_kernel_without_ipywidgets():
    # tqdm.auto warns when ipykernel.zmqshell is loaded and ipywidgets is not
    # (tqdm/autonotebook.py); NumPyro imports it. One process for both checks (each loads JAX).
    out = _run(
        "import sys, types, warnings, IPython\n"
        "sys.modules['ipywidgets'] = None  # not installed\n"
        "sys.modules['ipykernel.zmqshell'] = types.ModuleType('ipykernel.zmqshell')\n"
        "class ZMQInteractiveShell:\n"
        "    kernel = object()\n"
        "IPython.get_ipython = lambda: ZMQInteractiveShell()\n"
        "warnings.simplefilter('error')\n"
        "import ppl_bsvm\n"
        "import ppl_bsvm.compare.plots  # binds the subpackage on the package (import system)\n"
        "print(callable(ppl_bsvm.compare), ppl_bsvm.compare.__module__, 'numpyro' in sys.modules,"
        " ppl_bsvm.api.fit is ppl_bsvm.fit, 'RVMRegressor' in dir(ppl_bsvm))\n"
        "from ppl_bsvm import compare, kernels\n"
        "from ppl_bsvm._progress import _tqdm_class\n"
        "import tqdm.auto\n"
        "print(compare.__name__, kernels.__name__, _tqdm_class().__module__,"
        " tqdm.auto.tqdm.__module__)"
    )
    assert out.split() == ["True", "ppl_bsvm.compare.table", "True", "True", "True", "compare",
                           "ppl_bsvm.kernels", "tqdm.std", "tqdm.asyncio"]
