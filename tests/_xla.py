"""XLA's flags for the test suite, set when ``conftest`` imports this module (before JAX).

The in-process tests compile XLA's programs at backend optimisation level 0. A cold run is
mostly compilation (issue 31: 1,277 of 2,142 s of test time, most of it LLVM's optimisation
passes); level 0 cut XLA's compilation by 27 % and the suite's test time by 11 % in one cold
run. Its programs run slower (up to 5 times at Heart's full size), which the tests' small
problems hardly feel. The level changes how XLA's CPU backend generates machine code, not what
a program computes: the tests check the same mathematics, to tolerances that hold at every
level (float rounding may differ in the last bits).

Every new process the tests start inherits the level (the README's blocks, the notebooks'
kernels, the cache's and dask's processes) but the program store's two probes
(``tests/test_programs.py``), which run at the user's flags (:func:`user_environment`): they
keep XLA's default code generation tested end to end, a linear VI fit and an S-BSVM fit that
learns its hyperparameters, with every program S-BSVM stores, compiled in one process and
loaded in the next, bit for bit the same numbers. The README's blocks ran at the user's flags
until session 35: 94-98 s of CPU in a cold process against 72-75 s at level 0 (wall 68-71 s
against 59-61 s). Earlier sessions had compared their wall times alone and found them alike
at some hours; XLA compiles a program's pieces on every core, so alone the second core hid
work that the suite, with both cores busy, pays in full.
``PPL_BSVM_TEST_XLA_OPT=default`` runs the whole suite at XLA's defaults.
"""

import os

FAST_COMPILE = "--xla_backend_optimization_level=0"

USER_XLA_FLAGS = os.environ.get("XLA_FLAGS")
"""``XLA_FLAGS`` as the user set it (None: unset)."""

if (os.environ.get("PPL_BSVM_TEST_XLA_OPT", "fast") != "default"
        and "xla_backend_optimization_level" not in (USER_XLA_FLAGS or "")):
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [USER_XLA_FLAGS, FAST_COMPILE]))


def user_environment(**extra: str) -> dict:
    """``os.environ`` with XLA's flags as the user had them, and ``extra``: for a new process
    that compiles exactly as a user's would."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if USER_XLA_FLAGS is not None:
        env["XLA_FLAGS"] = USER_XLA_FLAGS
    return {**env, **extra}
