"""The ppl-bsvm command end to end on small data."""

import subprocess
import sys

import pytest

from ppl_bsvm.cli import main


def test_datasets_and_methods(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "heart" in out and "waveform" in out
    assert main(["methods"]) == 0
    assert "ecm" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "required"),
        (["fit"], "--dataset"),
        (["fit", "--dataset", "nope", "--method", "ecm"], "unknown data set"),
        (["fit", "--dataset", "heart", "--method", "magic"], "unknown method"),
        (["fit", "--dataset", "heart", "--method", "ecm", "--option", "max_iters=3"], "unknown option"),
        (["fit", "--dataset", "heart", "--option", "oops"], "KEY=VALUE"),
        (["compare", "--dataset", "heart", "--methods", "ecm"], "at least two"),
        (["fit", "--dataset", "heart", "--model", "svm"], "invalid choice"),
        (["fit", "--dataset", "susy", "--n", "0", "--method", "ecm"], "--n must be a positive"),
        (["fit", "--dataset", "heart", "--seed", "-1", "--method", "ecm"], "--seed must be >= 0"),
        # settings with their own flag were a TypeError traceback (a keyword given twice)
        (["fit", "--dataset", "heart", "--method", "ecm", "--option", "seed=3"],
         "seed has its own flag: use --seed instead of --option seed=3"),
        (["compare", "--dataset", "heart", "--methods", "ecm,vi", "--option", "vi.kernel=rbf"],
         "kernel has its own flag: use --kernel"),
        # an option that overflows the computation names it, without a traceback
        (["fit", "--dataset", "heart", "--model", "linear", "--method", "vi", "--option",
          "prior_scale=1e300"], "non-finite"),
        # checked before any fit runs, not after minutes of them
        (["compare", "--dataset", "heart", "--methods", "gibbs,vi", "--out", "/proc/nope"],
         "--out '/proc/nope' cannot be written"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own errors
        code = stop.code
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1


def test_fit_prints_a_summary(capsys):
    assert main(["fit", "--dataset", "heart", "--model", "linear", "--method", "ecm",
                 "--option", "max_iter=50"]) == 0
    out = capsys.readouterr().out
    assert "Fit(method='ecm', model='linear')" in out and "test: error" in out


def test_option_values_take_the_shells_spelling_of_constants():
    from ppl_bsvm.cli import _parse_options

    assert _parse_options(["linear_response=true", "a=False", "b=none", "c=1e-3", "d=rbf"],
                          prefixed=False) == {"linear_response": True, "a": False, "b": None,
                                              "c": 1e-3, "d": "rbf"}


def test_help_everywhere():
    for argv in (["--help"], ["fit", "--help"], ["compare", "--help"], ["datasets", "--help"]):
        result = subprocess.run([sys.executable, "-m", "ppl_bsvm.cli", *argv], capture_output=True, text=True)
        assert result.returncode == 0 and "usage: ppl-bsvm" in result.stdout


def test_compare_with_a_baseline_without_draws(capsys, tmp_path):
    """`ppl-bsvm compare --methods vi,platt`: Platt has no posterior draws, so it gets its
    predictive row only, and the report is written (issue 20)."""
    assert main(["compare", "--dataset", "heart", "--methods", "vi,platt",
                 "--option", "vi.num_draws=200", "--out", str(tmp_path / "r")]) == 0
    out, err = capsys.readouterr()
    assert "platt: no posterior draws: predictive rows only" in out
    assert "fitting gp" not in err  # no progress bar where stderr is not a terminal
    assert "report written to" in out
    assert "| platt |" in (tmp_path / "r" / "report.md").read_text()


def _csv(path, text_column=False):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    label = np.where(X[:, 0] + 0.3 * rng.normal(size=60) > 0, "yes", "no")
    frame = pd.DataFrame({"label": label, "a": X[:, 0], "b": X[:, 1]})
    if text_column:
        frame["colour"] = "red"
    frame.to_csv(path, index=False)
    return path


def test_fit_takes_the_users_csv_and_saves_the_fit(capsys, tmp_path):
    """`--dataset my.csv` was "unknown data set", and a fit could not be kept (issue 34)."""
    import ppl_bsvm

    data = _csv(tmp_path / "my.csv")
    saved = tmp_path / "fit"
    assert main(["fit", "--dataset", str(data), "--target", "label", "--method", "ecm",
                 "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("my: 42 train / 18 test points") and f"saved to {saved}" in out
    assert ppl_bsvm.load(saved).labels.positive == "yes"
    # a saved fit is never overwritten, and nothing is fitted before saying so
    assert main(["fit", "--dataset", str(data), "--target", "label", "--method", "ecm",
                 "--save", str(saved)]) == 2
    assert "a saved fit is never overwritten" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--target", "nope"], "--target 'nope' is not a column"),
    (["--target", "label", "--n", "10"], "--n applies to generated data sets only"),
    ([], "not numeric"),  # the default target is the last column: the text column is a feature
])
def test_a_csv_that_cannot_be_used_is_one_line(argv, message, capsys, tmp_path):
    data = _csv(tmp_path / "bad.csv", text_column=True)
    if "--target" in argv and argv[argv.index("--target") + 1] == "label":
        data = _csv(tmp_path / "good.csv")
    assert main(["fit", "--dataset", str(data), "--method", "ecm", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
