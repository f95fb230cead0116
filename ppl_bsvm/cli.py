"""The ``ppl-bsvm`` command.

    ppl-bsvm datasets                                   list the data sets and generators
    ppl-bsvm methods                                    list the (model, method) engines
    ppl-bsvm fit --dataset heart --model gp --method svi
    ppl-bsvm compare --dataset heart --methods gibbs,nuts,vi,svi,ecm
    ppl-bsvm demo                                       the flagship comparison (make demo)

Bad arguments get a one-line error on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (and exit code 2)."""

    def error(self, message):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class _UsageError(Exception):
    """A bad argument found after parsing (unknown data set, option syntax...)."""


_WORDS = {"true": True, "false": False, "none": None}
"""Shell spellings of Python's constants (``--option linear_response=true``)."""

FLAGS = {"seed": "--seed", "kernel": "--kernel", "model": "--model", "method": "--method"}
"""Settings the command line has flags for: given as ``--option`` too, they were a
``TypeError`` traceback (a keyword given twice)."""


def _parse_value(text: str):
    if text.strip().lower() in _WORDS:
        return _WORDS[text.strip().lower()]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _parse_options(items, prefixed: bool) -> dict:
    """``KEY=VALUE`` (or ``METHOD.KEY=VALUE``) strings to a dict; values via literal_eval."""
    out: dict = {}
    for item in items or []:
        if "=" not in item:
            raise _UsageError(f"--option expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        if prefixed:
            if "." not in key:
                raise _UsageError(f"compare options are METHOD.KEY=VALUE, got {item!r}")
            method, key = key.split(".", 1)
        if key in FLAGS:
            raise _UsageError(f"{key} has its own flag: use {FLAGS[key]} instead of "
                              f"--option {item}")
        if prefixed:
            out.setdefault(method, {})[key] = _parse_value(value)
        else:
            out[key] = _parse_value(value)
    return out


def _is_file(name: str) -> bool:
    """Whether ``--dataset`` names the user's CSV file rather than a bundled data set."""
    from pathlib import Path

    return name.lower().endswith(".csv") or Path(name).is_file()


def _data_label(name: str) -> str:
    """A data set's name in titles and default folders (a file's stem)."""
    from pathlib import Path

    return Path(name).stem if _is_file(name) else name


def _load_csv(path: str, target: str | None):
    """``(X, y)`` from a CSV file with a header: ``y`` the column ``target`` (default the
    last), ``X`` the other columns, which must be numeric."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as err:
        raise _UsageError(f"--dataset {path!r} could not be read as CSV: {err}") from None
    if frame.shape[1] < 2:
        raise _UsageError(f"--dataset {path!r} needs a label column and at least one feature "
                          f"column; it has {frame.shape[1]} column(s)")
    target = frame.columns[-1] if target is None else target
    if target not in frame.columns:
        raise _UsageError(f"--target {target!r} is not a column of {path!r}; its columns: "
                          f"{list(frame.columns)}")
    features = frame.drop(columns=[target])
    text = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    if text:
        raise _UsageError(f"feature columns {text} of {path!r} are not numeric: encode them "
                          "(e.g. one column per category) or drop them first")
    return features.to_numpy(dtype=float, na_value=float("nan")), frame[target].to_numpy()


def _load(args):
    from ppl_bsvm import datasets

    if args.seed < 0:
        raise _UsageError(f"--seed must be >= 0, got {args.seed}")
    names = datasets.list_datasets() + datasets.list_generators()
    if args.dataset not in names and _is_file(args.dataset):  # a bundled name wins
        if getattr(args, "n", None) is not None:
            raise _UsageError("--n applies to generated data sets only")
        return _load_csv(args.dataset, args.target)
    if args.target is not None:
        raise _UsageError("--target applies to a CSV --dataset only")
    if args.dataset not in names:
        raise _UsageError(f"unknown data set {args.dataset!r}; run 'ppl-bsvm datasets' for the "
                          "list, or give a CSV file")
    n = getattr(args, "n", None)
    if n is not None and args.dataset not in datasets.list_generators():
        raise _UsageError("--n applies to generated data sets only")
    if n is not None and n < 1:
        raise _UsageError(f"--n must be a positive integer, got {n}")
    if n is not None:
        return datasets.load(args.dataset, n=n, seed=args.seed)
    return datasets.load(args.dataset)


def _writable(folder: str) -> str:
    """``folder``, created if needed, or a usage error before any work when it cannot be
    written (a report written after minutes of fits must not fail then)."""
    from pathlib import Path

    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".ppl-bsvm-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise _UsageError(f"--out {folder!r} cannot be written: {err.strerror or err}") from None
    return folder


def _cmd_datasets(args) -> int:
    from ppl_bsvm import datasets

    print(f"{'name':13s} {'n':>7s} {'d':>4s}  {'positive class':22s} used by")
    for name in datasets.list_datasets():
        info = datasets.describe(name)
        print(f"{name:13s} {info['n']:7d} {info['d']:4d}  {info['positive']:22s} {info['used_by']}")
    print("\ngenerated (any n; ppl-bsvm fit --dataset NAME --n N):")
    for name in datasets.list_generators():
        info = datasets.describe(name)
        print(f"{name:13s} {'any':>7s} {info['d']:4d}  {info['positive']:22s} {info['used_by']}")
    return 0


def _cmd_methods(args) -> int:
    import ppl_bsvm

    for model, method, summary in ppl_bsvm.list_methods().itertuples(index=False):
        print(f"{model:10s} {method:12s} {summary}")
    return 0


def _cmd_fit(args) -> int:
    import ppl_bsvm
    from ppl_bsvm.datasets import split_data

    options = _parse_options(args.option, prefixed=False)
    ppl_bsvm.api.get_engine(args.model, args.method)  # a wrong name fails before any work
    if args.save is not None and os.path.exists(args.save):
        raise _UsageError(f"--save {args.save!r} exists; a saved fit is never overwritten: "
                          "choose a new folder")
    X, y = _load(args)
    split = split_data(X, y, args.test_fraction, args.seed)
    fit = ppl_bsvm.fit(split.X_train, split.y_train, model=args.model, method=args.method,
                       kernel=args.kernel, seed=args.seed, **options)
    print(f"{_data_label(args.dataset)}: {len(split.y_train)} train / {len(split.y_test)} "
          "test points")
    print(fit.summary())
    report = ppl_bsvm.metrics.classification_report(
        fit.labels.encode(split.y_test), fit.predict_proba(split.X_test)
    )
    print("test: " + ", ".join(f"{k} {v:.4f}" for k, v in report.items()))
    if args.save is not None:
        print(f"saved to {fit.save(args.save)}")
    return 0


def _comparison_view(table):
    """The comparison table as two readable blocks (posterior rows, predictive rows)."""
    from ppl_bsvm.compare import POSTERIOR_METRICS, PREDICTIVE_METRICS

    post = table[table["variable"] != "predictive"]
    pred = table[table["variable"] == "predictive"]
    cols = ["candidate", "variable", "dim", *POSTERIOR_METRICS]
    return post[cols], pred[["candidate", *PREDICTIVE_METRICS]]


def _cmd_compare(args) -> int:
    import pandas as pd

    from ppl_bsvm.compare.runner import run_comparison

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    options = _parse_options(args.option, prefixed=True)
    X, y = _load(args)
    folder = None if args.no_report else _writable(
        args.out or f"reports/compare_{_data_label(args.dataset)}_{args.model}"
    )
    table, fits, path = run_comparison(
        X, y, model=args.model, methods=methods, reference=args.reference, kernel=args.kernel,
        seed=args.seed, test_fraction=args.test_fraction, options=options, folder=folder,
        title=f"{_data_label(args.dataset)}: {args.model} model, {', '.join(methods)}",
        progress=sys.stderr.isatty(),  # a bar in a log or a pipe is lines of carriage returns
    )
    post, pred = _comparison_view(table)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        if len(post):
            print(post.round(3).to_string(index=False))
            print()
        print(pred.round(4).to_string(index=False))
    notes = table.loc[table["note"] != "", ["candidate", "note"]].drop_duplicates()
    if len(notes):
        print("\nnotes:")
        for candidate, note in notes.itertuples(index=False):
            print(f"  {candidate}: {note}")
    if path is not None:
        print(f"\nreport written to {path}")
    return 0


def _cmd_demo(args) -> int:
    from ppl_bsvm.compare.demo import run_demo

    run_demo(_writable(args.out or "reports/demo"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ppl-bsvm", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser,
                                metavar="{datasets,methods,fit,compare,demo}")

    p = sub.add_parser("datasets", help="list the data sets and generators")
    p.set_defaults(run=_cmd_datasets)
    p = sub.add_parser("methods", help="list the registered (model, method) engines")
    p.set_defaults(run=_cmd_methods)

    def data_args(p):
        p.add_argument("--dataset", required=True,
                       help="data set or generator name, or a CSV file with a header row "
                            "(numeric feature columns and a label column)")
        p.add_argument("--target", default=None,
                       help="label column of a CSV --dataset (default: the last column)")
        p.add_argument("--n", type=int, default=None, help="sample size (generators only)")
        p.add_argument("--model", default="gp", choices=["linear", "gp", "sparse_gp"])
        p.add_argument("--kernel", default=None, help="kernel name (GP models; default rbf)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--test-fraction", type=float, default=0.3,
                       help="held-out share for the test metrics (default 0.3)")

    p = sub.add_parser("fit", help="fit one method on a train split and print a summary")
    data_args(p)
    p.add_argument("--method", default="vi", help="inference method (see 'ppl-bsvm methods')")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="engine option, repeatable (e.g. --option max_iter=200)")
    p.add_argument("--save", default=None, metavar="DIR",
                   help="save the fit to this new folder (ppl_bsvm.load reads it back)")
    p.set_defaults(run=_cmd_fit)

    p = sub.add_parser("compare", help="fit several methods, compare them with the first")
    data_args(p)
    p.add_argument("--methods", required=True, help="comma-separated, e.g. gibbs,vi,svi,ecm")
    p.add_argument("--reference", default=None, help="reference method (default: the first)")
    p.add_argument("--option", action="append", metavar="METHOD.KEY=VALUE",
                   help="engine option for one method, repeatable (e.g. gibbs.num_samples=500)")
    p.add_argument("--out", default=None, help="report folder (default reports/compare_<data>_<model>)")
    p.add_argument("--no-report", action="store_true", help="print the table only")
    p.set_defaults(run=_cmd_compare)

    p = sub.add_parser("demo", help="the flagship comparison on the Heart data (as make demo)")
    p.add_argument("--out", default=None, help="report folder (default reports/demo)")
    p.set_defaults(run=_cmd_demo)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    # ValueError: bad input or options; FloatingPointError: an option that overflows the
    # computation (prior_scale=1e300); both name what is wrong, so no traceback
    except (_UsageError, ValueError, FloatingPointError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"ppl-bsvm {args.command}: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
