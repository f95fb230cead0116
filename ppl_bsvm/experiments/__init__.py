"""Paper reproductions and benchmarks, runnable as ``python -m ppl_bsvm.experiments.<name>``;
each writes its figures and tables under ``reports/``."""
