"""Paper reproductions and benchmarks, runnable as ``python -m benchmarks.<name>`` from the
repository root; each writes its figures and tables under ``reports/<name>/`` (relative to the
working directory; ``--out`` to change, ``--quick`` for a smoke run).

A plain folder of the repository, not part of the installed package (``pyproject.toml`` packages
``ppl_bsvm*`` only): the library never imports it, and what the command line needs (the
comparison runner, the data split, the demo) lives in ``ppl_bsvm``.
"""
