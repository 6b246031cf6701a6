"""Official grading in Gradescope's own container, for real (`python -m instructor.gradescope
rehearse`): Docker's default security (no user namespaces, so bubblewrap cannot start), no network,
768 MB of memory and half a CPU for every process of the grading together.

The images (a debootstrapped Debian, and on it both bundles: the students' and the check bundle
of `--allow-reference`) are tests/container_images.py's, made once per machine and reused. A
`dockerd` that is not running is started for the run and stopped after it. Each case is a fresh
container, as on Gradescope, and the four run at once. Marked `container` (deselect with
`-m "not container"`); CI runs it. Each step's time is printed (`-s` shows it). Where they skip, the
end of the run says why (`tests/skip_notes.py`), as it does for tier 2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import container_images
import pytest

from autograder.trusted import checks  # noqa: F401  (registers the checks)
from course.registry import POINTS
from instructor.rehearsal import NoCpuTorch, run_submission, table

ROOT = Path(__file__).resolve().parent.parent
LIMITS = {"memory": "768m", "cpus": "0.5"}  # Gradescope's defaults
TOTAL = float(sum(POINTS.values()))
TIERS = ("bubblewrap", "landlock-seccomp")


@pytest.fixture(scope="module")
def docker(tmp_path_factory):
    """A running dockerd: the one that runs, or one started for this module and stopped after it."""
    if shutil.which("docker") is None:
        pytest.skip("docker is not installed (Debian: apt-get install docker.io; .ci/run does)")
    if container_images.docker_up():
        yield
        return
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        pytest.skip("dockerd is not running and this user cannot start it")
    log = (tmp_path_factory.mktemp("dockerd") / "dockerd.log").open("w")
    daemon = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(120):
            if container_images.docker_up():
                break
            time.sleep(0.5)
        else:
            pytest.fail("dockerd did not start within 60 s")
        yield
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        log.close()


@pytest.fixture(scope="module")
def images(docker, tmp_path_factory) -> dict[str, str]:
    """{"student": image of the students' bundle, "check": of the --allow-reference bundle}."""
    if not (container_images.image_exists(container_images.BASE_IMAGE)
            or container_images.can_make_base()):
        pytest.skip("no base image and no root debootstrap to make one (.ci/run installs it)")
    try:
        return container_images.make_images(tmp_path_factory.mktemp("bundles"))
    except NoCpuTorch as exc:  # a GPU build of torch here: an image of it is not Gradescope's
        pytest.skip(str(exc))


def _grade(image: str, submission: Path) -> dict:
    started = time.monotonic()
    outcome = run_submission(image, submission, **LIMITS)
    outcome["table"] = "\n".join(table(outcome))
    outcome["seconds"] = time.monotonic() - started
    return outcome


def _copy(notebooks: Path, upload: Path) -> Path:
    shutil.copytree(notebooks, upload, ignore=shutil.ignore_patterns(".*"))
    return upload


@pytest.fixture(scope="module")
def outcomes(images, tmp_path_factory) -> dict[str, dict]:
    """The four cases, each graded in a fresh container of its own, all at once: each container
    is held to half a CPU, so one after another they would leave most of the machine idle."""
    folder = tmp_path_factory.mktemp("uploads")
    cases = {"independent": (images["student"], _independent(folder / "independent")),
             "solutions": (images["check"], _copy(ROOT / "solutions", folder / "solutions")),
             "blank": (images["student"], _copy(ROOT / "notebooks", folder / "blank")),
             "hog": (images["student"], _independent(folder / "hog", hog=True))}
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        futures = {name: pool.submit(_grade, *case) for name, case in cases.items()}
        graded = {name: future.result() for name, future in futures.items()}
    for name, outcome in graded.items():
        print(f"\n{name}:\n{outcome['table']}")
        print(f"[container] grading {name}: {outcome['seconds']:.1f} s")
    container_images.timed("the four gradings at once", started)
    return graded


def _independent(folder: Path, hog: bool = False) -> Path:
    """A correct implementation written apart from `course` (tests/autograder_cases/_impl.py) in
    one .py, as a student uploads it; `hog`: its compute_entropy hoards memory until it dies."""
    folder.mkdir()
    source = (ROOT / "tests" / "autograder_cases" / "_impl.py").read_text()
    source += "\n\nglobals().update(build())\n"
    if hog:
        source += ("\n\ndef compute_entropy(logits):\n    hoard = []\n    while True:  # real pages\n"
                   "        hoard.append(b'x' * (32 * 2**20))\n")
    (folder / "submission.py").write_text(source)
    return folder


def _graded(outcome: dict) -> dict:
    """The official results.json of a grading that completed, its tier named in the table, and
    every check graded, in either tier (tier 2 runs the data-parallel check on gloo ranks that
    connect before any student code, then lose the network): the full 66 points at stake."""
    results = outcome["results"]
    assert results is not None, outcome["table"]
    tier = results["extra_data"]["isolation_tier"]
    assert tier in TIERS and f"isolation tier: {tier}" in outcome["table"], outcome["table"]
    assert not results["extra_data"]["practice"] and outcome["exit_code"] == 0
    skipped = [t for t in results["tests"] if t["status"] == "skipped"]
    assert not skipped, skipped
    graded = sum(t["max_score"] for t in results["tests"])
    assert graded == TOTAL
    results["graded_points"] = graded
    return results


@pytest.mark.container
@pytest.mark.slow
def test_a_correct_independent_implementation_gets_full_marks(outcomes):
    results = _graded(outcomes["independent"])
    assert results["score"] == results["graded_points"], results["tests"]


@pytest.mark.container
@pytest.mark.slow
def test_the_solutions_get_full_marks_with_the_check_bundle(outcomes):
    results = _graded(outcomes["solutions"])
    assert results["score"] == results["graded_points"], results["tests"]
    assert results["output"].startswith("NOT A STUDENT'S GRADE")


@pytest.mark.container
@pytest.mark.slow
def test_blank_notebooks_get_zero(outcomes):
    results = _graded(outcomes["blank"])
    assert results["score"] == 0


@pytest.mark.container
@pytest.mark.slow
def test_a_memory_hog_in_one_function_is_never_a_silent_partial_grade(outcomes):
    """compute_entropy hoards memory until something kills it. Either the grading completes, the
    rest at full marks and every lost point of compute_entropy saying memory, or there is no
    results.json and run_autograder fails (Gradescope: an autograder error): never a partial
    score that does not say why."""
    outcome = outcomes["hog"]
    if outcome["results"] is None:
        assert outcome["exit_code"] != 0 and "GRADING DID NOT COMPLETE" in outcome["log"]
        return
    results = _graded(outcome)
    lost = [t for t in results["tests"] if t["status"] == "failed"]
    assert lost and all(t["name"].startswith("compute_entropy") for t in lost), lost
    assert all("memory" in t["output"] for t in lost if t["score"] == 0), [t["output"] for t in lost]
    assert results["score"] == results["graded_points"] - POINTS["compute_entropy"]


def test_a_run_without_docker_says_at_its_end_why_the_container_tests_skipped(tmp_path):
    """No docker on PATH: the container tests skip, and the run's summary says so and why without
    -rs (the note `tests/skip_notes.py` writes), not only "4 skipped"."""
    run = subprocess.run([sys.executable, "-m", "pytest", str(Path(__file__)), "-q",
                          "-p", "no:cacheprovider", "-m", "container"], cwd=ROOT,
                         env={**os.environ, "PATH": str(tmp_path)}, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:]
    assert "4 skipped" in run.stdout, run.stdout[-2000:]
    assert ("4 tests of grading in a Docker container (tests/test_container.py) were skipped: "
            "docker is not installed") in run.stdout, run.stdout[-2000:]
