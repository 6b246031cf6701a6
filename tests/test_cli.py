"""The command lines answer a bad flag at once: one line naming it, exit status 2, torch never loaded.

Each command runs as `python -m` does (runpy, `__main__`) in a fresh interpreter, which then reports
whether torch was imported; the progress of a loop is plain lines when stderr is not a terminal.
"""

import io
import subprocess
import sys
import textwrap

import pytest

from course.loop.progress import PlainProgress, progress_bar

RUN_AS_MAIN = textwrap.dedent("""
    import runpy, sys
    module, sys.argv = sys.argv[1], ["-m", *sys.argv[2:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        print(f"exit {exit.code}; torch loaded: {'torch' in sys.modules}")
""")


def run_main(module: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN_AS_MAIN, module, *argv],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("module, argv, message", [
    ("course.train", ["--steps", "-1"], "argument --steps: must be >= 0, got -1"),
    ("course.train", ["--pg-method", "ppo"], "argument --pg-method: invalid choice: 'ppo'"),
    ("course.train", ["--prompts-per-step", "2", "--group-size", "2", "--gradient-accumulation-steps", "5"],
     "argument --gradient-accumulation-steps: (5) must be at most the 4 rollouts"),
    ("course.train", ["--stepz", "3"], "unrecognized arguments: --stepz 3"),
    ("course.lab.compare", ["--eval-problems", "0"], "argument --eval-problems: must be >= 1, got 0"),
    ("course.lab.compare", ["--seeds", "-1"], "argument --seeds: must be >= 0, got -1"),
    ("course.loop.warm_start", ["--lr", "0"], "argument --lr: must be > 0, got 0.0"),
    ("course.loop.warm_start", ["--threads", "x"], "argument --threads: expected int, got 'x'"),
    ("course.lab.reference_run", ["--out", "/no/such/folder/run.json"], "argument --out: /no/such/folder is not"),
])
def test_a_usage_error_is_one_line_before_torch_loads(module, argv, message):
    result = run_main(module, *argv)
    name = module.removeprefix("course.")
    assert result.stderr.splitlines() == [result.stderr.strip()], result.stderr  # one line, no usage text
    assert result.stderr.startswith(f"course.{name}: error: ") and message in result.stderr, result.stderr
    assert result.stderr.rstrip().endswith("(see --help)")
    assert result.stdout.strip() == "exit 2; torch loaded: False"


def test_help_still_lists_every_option():
    result = run_main("course.train", "--help")
    assert "--gradient-accumulation-steps" in result.stdout and "--notebooks DIR" in result.stdout
    assert "exit 0; torch loaded: False" in result.stdout


def test_the_package_loads_its_names_on_first_use():
    code = "import sys, course, course.cli; print('torch' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert shown.stdout.split() == ["False"], shown.stderr
    import course
    import course.train_step
    assert course.grpo_train_step is course.train_step.grpo_train_step and course.losses.__name__ == "course.losses"
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        course.no_such_name  # noqa: B018


def test_plain_progress_writes_a_line_every_twentieth_of_the_run(monkeypatch):
    # not a Jupyter kernel, though a test run before this one in the process imported ipykernel
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    written = io.StringIO()  # not a terminal
    bar = progress_bar(range(100), 100, desc="GRPO", unit="step", file=written)
    assert isinstance(bar, PlainProgress)
    for step in bar:
        bar.set_postfix(reward=f"{step / 100:.2f}")
    lines = written.getvalue().splitlines()
    assert len(lines) == 20 and "\r" not in written.getvalue()
    assert lines[0].startswith("GRPO: step 5/100, reward=0.04, ")       # the postfix of step 5
    assert lines[-1].startswith("GRPO: step 100/100, reward=0.99, ") and lines[-1].endswith(" s")


def test_a_short_run_prints_every_step_and_an_uneven_one_its_last():
    for total, lines, shown in ((3, 20, ["1/3", "2/3", "3/3"]), (7, 3, ["3/7", "6/7", "7/7"])):
        written = io.StringIO()
        list(PlainProgress(range(total), total, "x", "step", written, lines))
        assert [line.split()[2].rstrip(",") for line in written.getvalue().splitlines()] == shown


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.slow
def test_a_run_logged_to_a_file_has_no_carriage_returns(tmp_path):
    """stderr a pipe, as in a CI log: the loop's plain lines, and no bar of the model's loading."""
    run = subprocess.run([sys.executable, "-m", "course.train", "--steps", "2", "--prompts-per-step",
                          "2", "--group-size", "2", "--eval-problems", "2", "--eval-samples", "1",
                          "--eval-every", "0"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "GRPO: step 2/2" in run.stderr
    assert "\r" not in run.stderr + run.stdout and "Loading weights" not in run.stderr


def test_a_terminal_gets_a_tqdm_bar_and_a_disabled_bar_writes_nothing():
    from tqdm.auto import tqdm

    assert isinstance(progress_bar(range(3), 3, "x", "step", file=Terminal()), tqdm)
    quiet = io.StringIO()
    for _ in progress_bar(range(3), 3, "x", "step", enabled=False, file=quiet):
        pass
    assert quiet.getvalue() == ""


def test_the_train_flags_have_one_spelling_each():
    """`--pg-method` and the estimators' names: no older flag or number sets them."""
    from course.cli import Parser, add_config_arguments
    from course.loop.train_config import CHOICES, TrainConfig, flag_types

    parser = Parser(prog="python -m course.train")
    add_config_arguments(parser, TrainConfig, choices=CHOICES, types=flag_types())
    args = parser.parse_args(["--pg-method", "gspo", "--kl-estimator", "ratio_k1"])
    assert (args.pg_method, args.kl_estimator) == ("gspo", "ratio_k1")
    for argv in (["--loss", "cispo"], ["--kl-estimator", "2"], ["--kl-estimator", "4"]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
