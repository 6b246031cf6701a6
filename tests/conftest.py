"""Shared fixtures: the character tokenizer and a tiny float64 OLMo2 built fresh for each test."""

import pytest
import torch
from skip_notes import container_note, tier2_note

from course.loop.models import build_tiny_model_and_tokenizer, build_tokenizer

# Small enough that a forward + backward over a (12, 12) batch takes milliseconds.
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}


@pytest.fixture
def single_thread():
    """Tiny models run fastest on one thread; on a loaded 2-core CI box, several times faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture
def make_model():
    """make_model(dtype=torch.float64, seed=0) -> a fresh tiny OLMo2 (tests may change its weights)."""

    def make(dtype: torch.dtype = torch.float64, seed: int = 0):
        model, _ = build_tiny_model_and_tokenizer(seed=seed, dtype=dtype, **TINY)
        return model

    return make


# Tests of tests/test_sandbox.py that took 8-42 s each on a shared 2-core machine, the slowest of
# `pytest -m "not slow"`: marked slow here, by node id (a marker beside each test is the same).
SLOW_ELSEWHERE = {
    "tests/test_sandbox.py::test_without_bubblewrap_the_grade_is_practice_and_official_refuses",
    "tests/test_sandbox.py::test_a_sandbox_start_that_times_out_is_retried_then_called_overload",
    "tests/test_sandbox.py::test_one_timer_bounds_the_whole_grading",
    "tests/test_sandbox.py::test_a_missing_submission_is_a_usage_error_named_in_results_json",
}


# The modules that take longest, longest first. pytest-xdist's loadscope hands out one module (or
# test class) at a time in collection order, once its own reordering (by number of tests) is off:
# the longest start first, so that none is left running alone at the end. The container module
# leads: on a fresh machine its images take minutes of mostly network and disk, which the other
# workers' CPU work overlaps.
LONGEST_FIRST = ("test_container.py", "test_notebooks.py", "test_student_edition.py",
                 "test_autograder.py", "test_batch.py", "test_points.py", "test_redteam.py",
                 "test_sandbox.py", "test_train.py", "test_portability.py", "test_gradescope.py",
                 "test_stage_chaining.py", "test_scoring.py", "test_train_distributed.py",
                 "test_release.py", "test_implementations.py")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep our order
        config.option.loadscopereorder = False


def _rank(item) -> int:
    name = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.split("[")[0] in SLOW_ELSEWHERE:
            item.add_marker(pytest.mark.slow)
    items.sort(key=_rank)  # stable: each module keeps its own order


def pytest_terminal_summary(terminalreporter):
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if isinstance(report.longrepr, tuple)]
    reasons = [str(report.longrepr[2]) for report in skipped]
    in_container = [str(report.longrepr[2]) for report in skipped
                    if report.nodeid.startswith("tests/test_container.py")]
    for title, lines in (("tier 2 of the sandbox", tier2_note(reasons)),
                         ("the Docker container", container_note(in_container))):
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)
