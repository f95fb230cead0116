"""The flagship comparison run by ``make demo`` (and ``ppl-bsvm demo``), written to reports/demo/.

The demo itself is library code (:mod:`ppl_bsvm.compare.demo`), so that ``ppl-bsvm demo`` works
from an installed package; this script only parses its command line (``--out``, ``--quick``).
"""

from __future__ import annotations

import argparse
import sys

from ppl_bsvm.compare.demo import run_demo

COMMAND = "`make demo` (`python -m benchmarks.demo`)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.demo",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="reports/demo", help="report folder")
    parser.add_argument("--quick", action="store_true", help="short chains (smoke test)")
    args = parser.parse_args(argv)
    run_demo(args.out, quick=args.quick, written_by=COMMAND)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
