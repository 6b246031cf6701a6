"""The sandbox from the outside: what the worker can see, usage errors, practice grades, and load.

The attacks themselves are in tests/redteam/ (see tests/test_redteam.py); here are the promises
that are not an attack: a missing --submission is a usage error, a machine without bubblewrap
gives a PRACTICE grade (and `--official` refuses), and correct work keeps full marks while four
gradings and two busy processes share two cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autograder.api import grade
from autograder.trusted.isolation import bwrap_command, isolation_tier, sandbox_problem

ROOT = Path(__file__).resolve().parent.parent
needs_sandbox = pytest.mark.skipif(sandbox_problem(ROOT) is not None,
                                   reason=f"no sandbox here: {sandbox_problem(ROOT)}")


def _cli(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "autograder", *args, "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_a_missing_submission_is_a_usage_error_and_no_grade(tmp_path):
    missing, results = tmp_path / "nowhere" / "work.ipynb", tmp_path / "results.json"
    run = _cli("--submission", str(missing), "--results", str(results))
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
    assert str(missing) in run.stderr
    assert not results.exists()  # a refusal writes no score that could pass for a grade
    with pytest.raises(FileNotFoundError, match="nowhere"):
        grade(str(missing))


def test_without_bubblewrap_the_grade_is_practice_and_official_refuses(tmp_path):
    """PATH without bwrap and bubblewrap asked for: the grader says PRACTICE in the table and
    results.json, and an --official run stops with a usage error before grading anything; it
    never falls back to tier 2 unasked."""
    env = {**os.environ, "PATH": str(tmp_path)}
    results = tmp_path / "results.json"
    refused = _cli("--submission", "course", "--official", "--isolation", "bubblewrap",
                   "--results", str(results), env=env)
    assert refused.returncode == 4 and "refusing to grade without isolation" in refused.stderr
    assert "bubblewrap is not installed" in refused.stderr and not results.exists()
    practice = _cli("--submission", "course", "-k", "compute_entropy", "--results", str(results),
                    "--isolation", "bubblewrap", env=env)
    assert practice.returncode == 0, practice.stdout[-3000:]
    assert "PRACTICE grade" in practice.stdout
    document = json.loads(results.read_text())
    assert document["extra_data"]["practice"] is True and "PRACTICE grade" in document["output"]
    assert document["extra_data"]["isolation_tier"] is None and "practice" not in document


@needs_sandbox
def test_the_sandbox_shows_no_project_no_fixtures_no_network_and_no_grader():
    probe = """
import os, socket, sys
root = sys.argv[1]
seen = {"course": os.path.exists(os.path.join(root, "course")),
        "fixtures": os.listdir(os.path.join(root, "autograder", "fixtures")),
        "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1); seen["network"] = True
except OSError:
    seen["network"] = False
for path in (os.path.join(root, "autograder", "x"), "/usr/x"):
    try:
        open(path, "w"); seen[path] = "written"
    except OSError:
        seen[path] = "refused"
print(repr(seen))
"""
    done = subprocess.run(bwrap_command(ROOT) + [sys.executable, "-I", "-B", "-c", probe, str(ROOT)],
                          capture_output=True, text=True, timeout=120)
    seen = eval(done.stdout)  # our own probe's repr
    assert seen["course"] is False and seen["fixtures"] == [] and seen["network"] is False
    assert max(seen["processes"]) < 10  # its own PID namespace: the grader is not there
    assert set(v for k, v in seen.items() if k.startswith("/")) == {"refused"}


def test_the_tier_is_chosen_named_and_never_changed_silently():
    """`isolation_tier`: the first tier of the choice that holds, else (None, why each does not);
    an unknown choice is an error naming the option."""
    with pytest.raises(ValueError, match="--isolation 'docker'"):
        isolation_tier(ROOT, "docker")
    for choice, tiers in (("bubblewrap", {"bubblewrap"}), ("landlock", {"landlock-seccomp"}),
                          ("auto", {"bubblewrap", "landlock-seccomp"})):
        tier, why = isolation_tier(ROOT, choice)
        assert (tier in tiers and why is None) or (tier is None and why), (choice, tier, why)
    if isolation_tier(ROOT, "bubblewrap")[0]:
        assert isolation_tier(ROOT, "auto")[0] == "bubblewrap"


@pytest.mark.skipif(sandbox_problem(ROOT, "landlock") is not None,
                    reason=f"no tier 2 here: {sandbox_problem(ROOT, 'landlock')}")
def test_tier_2_confines_a_child_as_it_must():
    """The tier-2 self-test, run as a stage child would be (nobody, Landlock, seccomp): it writes
    its own folder only, cannot read the grader's files (mode 0644 here: Landlock refuses), opens
    no AF_INET socket, makes no namespace; and the grader's own folder is 0700."""
    import tempfile

    from autograder.trusted.sandbox import Sandbox

    private = tempfile.mkdtemp()
    os.chown(private, 65534, 65534)
    secret = ROOT / "autograder" / "fixtures" / "expected.pt"
    assert secret.stat().st_mode & 0o004  # readable by modes alone: Landlock is what refuses
    try:
        done = subprocess.run([sys.executable, "-I", "-B", str(ROOT / "autograder" / "untrusted" /
                                                              "confine.py"), "--check", private,
                               str(secret)], capture_output=True, text=True, timeout=120,
                              user=65534, group=65534, extra_groups=[])
    finally:
        shutil.rmtree(private, ignore_errors=True)
    seen = json.loads(done.stdout)
    assert seen["abi"] >= 1 and seen["write_private"] and seen["fork"] and seen["unix_socket"]
    assert not (seen["read_forbidden"] or seen["inet_socket"] or seen["unshare"]), seen
    box = Sandbox(ROOT, "cpu", 256, isolated=True, tier="landlock-seccomp")
    try:
        assert os.stat(box.private).st_mode & 0o777 == 0o700
        assert os.stat(box.stages).st_mode & 0o777 == 0o711  # traversable, not listable
    finally:
        box.close()


@pytest.mark.slow  # the fast lane's heaviest sandbox tests, with the memory bound's below
@pytest.mark.skipif(sandbox_problem(ROOT, "landlock") is not None,
                    reason=f"no tier 2 here: {sandbox_problem(ROOT, 'landlock')}")
def test_tier_2_grades_the_data_parallel_check_on_ranks_connected_before_the_submission():
    """Tier 2 has no network namespace: the gloo ranks connect before the submission loads and
    then lose TCP (`autograder.untrusted.ranks`), and the check is graded, not skipped: the
    reference and an independent implementation pass it, the no-world-scale mutant fails it."""
    cases = Path(__file__).with_name("autograder_cases")
    jobs = {"reference": "course", "independent": str(cases / "alt_full.py"),
            "mutant": str(cases / "mutant_ddp_no_world_scale.py")}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(grade, path, ("grpo_train_step",), official=True,
                                    isolation="landlock") for key, path in jobs.items()}
        graded = {key: future.result() for key, future in futures.items()}
    data_parallel = {key: next(r for n, r in g["results"].items() if "data-parallel" in n)
                     for key, g in graded.items()}
    for key in ("reference", "independent"):
        assert graded[key]["isolation_tier"] == "landlock-seccomp"
        assert graded[key]["score"] == graded[key]["max_score"] > 0, data_parallel[key]["output"]
    assert data_parallel["mutant"]["score"] == 0 and data_parallel["mutant"]["status"] == "failed"
    assert "world size" in data_parallel["mutant"]["output"]


@pytest.mark.slow
@pytest.mark.parametrize("tier", ("bubblewrap", "landlock"))
def test_one_memory_bound_holds_over_all_processes_of_a_grading(tier):
    """Six forked processes of 200 MiB each under --memory-mb 256: each is under its own address
    space limit, so only a bound over the whole grading (a memory cgroup) stops them; the OOM
    killer then takes some (SIGKILL), and the note says what bounded the grading."""
    from autograder.trusted import memory

    if sandbox_problem(ROOT, tier):
        pytest.skip(f"no {tier} sandbox here: {sandbox_problem(ROOT, tier)}")
    probe, why = memory.create(f"autograder-probe-{os.getpid()}")
    if probe is None:
        pytest.skip(f"no memory cgroup for the grader here: {why}")
    memory.remove(probe)
    graded = grade(str(ROOT / "tests" / "autograder_cases" / "attack_memory_many_processes.py"),
                   ("compute_entropy",), memory_mb=256, isolation=tier, probe_timeout=30.0)
    output = next(iter(graded["results"].values()))["output"]
    statuses = [int(s) for s in output.split("statuses of the six: [")[1].split("]")[0].split(",")]
    assert statuses.count(9) >= 1, output
    assert "by a memory cgroup of" in graded["isolation"]


def test_a_sandbox_start_that_times_out_is_retried_then_called_overload(monkeypatch):
    """Under load the first start may time out: it is retried (and then grades normally); two
    timeouts say "the grader is overloaded", never that the student's code crashed."""
    from autograder.trusted import sandbox
    from autograder.trusted.sandbox import WorkerError

    real_start, starts = sandbox.Sandbox.start, []

    def slow_once(self, timeout):
        starts.append(timeout)
        if len(starts) == 1:
            raise WorkerError("overloaded", "the grader is overloaded: its sandbox did not answer "
                                            f"within {timeout:.0f} s while starting")
        return real_start(self, timeout)

    monkeypatch.setattr(sandbox.Sandbox, "start", slow_once)
    retried = grade("course", ("compute_entropy",))
    assert len(starts) == 2 and starts[1] > starts[0]
    assert retried["score"] == retried["max_score"] > 0 and not retried["load_failure"]

    def always_slow(self, timeout):
        raise WorkerError("overloaded", f"the grader is overloaded: its sandbox did not answer "
                                        f"within {timeout:.0f} s while starting")

    monkeypatch.setattr(sandbox.Sandbox, "start", always_slow)
    failed = grade("course", ("compute_entropy",))
    assert failed["score"] == 0 and "the grader is overloaded" in failed["load_failure"]
    assert failed["load_failure"] in failed["incomplete"]  # no grade: nothing was judged
    assert "says nothing about your code" in failed["load_failure"]
    assert all("overloaded" in r["output"] for r in failed["results"].values())


@needs_sandbox
@pytest.mark.slow
def test_four_gradings_at_once_with_two_busy_processes_keep_full_marks():
    """Load must not be mistaken for failure. Prints each grading's time (never asserted)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    submissions = ["course", str(ROOT / "solutions"),
                   str(ROOT / "tests" / "autograder_cases" / "alt_full.py"), "course"]
    try:
        def timed(submission):
            started = time.monotonic()
            # the solution notebooks hold the reference: graded as an instructor's check
            checked = submission.endswith("solutions")
            return grade(submission, official=True, allow_reference=checked), time.monotonic() - started

        with ThreadPoolExecutor(max_workers=4) as pool:
            graded = list(pool.map(timed, submissions))
    finally:
        for process in busy:
            process.kill()
            process.wait()
    for submission, (result, seconds) in zip(submissions, graded):
        print(f"{Path(submission).name}: {result['score']:g}/{result['max_score']:g} in {seconds:.0f} s")
        failed = {n: r["output"][:300] for n, r in result["results"].items() if r["status"] == "failed"}
        assert result["score"] == result["max_score"] > 50, (submission, failed)


def test_logs_are_read_through_the_graders_own_descriptor_tail_only_never_blocking(tmp_path):
    from autograder.trusted.sandbox import LOG_BYTES, read_tail

    log = tmp_path / "worker.log"
    log.write_bytes(b"a" * (3 * LOG_BYTES) + b"the end")
    fd = os.open(log, os.O_RDONLY)
    try:
        tail = read_tail(fd)
    finally:
        os.close(fd)
    assert len(tail) == LOG_BYTES and tail.endswith(b"the end")
    os.mkfifo(tmp_path / "pipe")
    fd = os.open(tmp_path / "pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert read_tail(fd) == b""  # not a regular file: nothing read, nothing waited for
    finally:
        os.close(fd)


def test_pasted_copies_are_caught_and_independent_work_is_not():
    from autograder.trusted.grader import _sources
    from autograder.trusted.reference import COURSE_DIR, copied_references
    from course.registry import GRADED_FUNCTIONS
    from course.submissions.reader import load_submission

    whole_reference = [p.read_text() for p in COURSE_DIR.glob("*.py")]
    assert set(copied_references(whole_reference)) == set(GRADED_FUNCTIONS)
    # the solution cells are the course functions themselves (tests/test_one_implementation.py)
    assert set(copied_references(_sources(load_submission("solutions", ROOT)))) == set(GRADED_FUNCTIONS)
    for independent in ("tests/autograder_cases/alt_full.py",
                        "tests/autograder_cases/alt_loops.py"):
        assert copied_references(_sources(load_submission(independent, ROOT))) == {}, independent


@needs_sandbox
@pytest.mark.slow
def test_no_grader_module_is_imported_after_student_code_has_run():
    """Everything the trusted side uses is imported before the first worker starts."""
    script = """
import sys
from autograder.trusted import grader
from autograder.api import grade

start, seen = grader.Grader._ensure_started, {}

def ensure_started(self):
    seen.setdefault("before", set(sys.modules))
    start(self)

grader.Grader._ensure_started = ensure_started
result = grade("course")
late = sorted(m for m in set(sys.modules) - seen["before"] if m.split(".")[0] in ("autograder", "course"))
print(result["score"], result["max_score"], late)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    score, maximum, late = done.stdout.strip().splitlines()[-1].split(" ", 2)
    assert float(score) == float(maximum) > 50 and late == "[]", done.stdout[-2000:]


def test_the_template_holds_the_plotting_modules_and_never_a_graded_one(monkeypatch):
    """The template imports course.loop.models and course.loop.plotting (the notebooks' plots) once for
    every child; a graded module among what they import would put its reference in every child,
    so it refuses to start and names the module."""
    from autograder.trusted import reference
    from course.registry import STAGE_MODULES

    held = reference.template_sources()
    assert {"course.loop.models", "course.loop.plotting"} <= set(held) and not set(held) & set(STAGE_MODULES)
    sources = reference.course_sources
    monkeypatch.setattr(reference, "course_sources", lambda stage: {
        **sources(stage), "course.loop.plotting": "from course.losses import clipped_surrogate\n"})
    with pytest.raises(RuntimeError, match=r"graded modules \['course.losses'\]"):
        reference.template_sources()


def test_a_grading_without_model_functions_never_imports_the_models_code():
    """compute_entropy builds no model: the trusted process grades it in full without
    transformers' modeling code (about 2 s of imports), and a grading of every function has it
    imported before the first worker starts."""
    script = """
import sys
from autograder.trusted import grader
from autograder.api import grade

MODELING = "transformers.models.olmo2.modeling_olmo2"
start, seen = grader.Grader._ensure_started, []

def ensure_started(self):
    start(self)
    seen.append(MODELING in sys.modules)

grader.Grader._ensure_started = ensure_started
lean = grade("course", ("compute_entropy",))
print(lean["score"], lean["max_score"], MODELING in sys.modules, seen)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    score, maximum, imported, seen = done.stdout.strip().splitlines()[-1].split(" ", 3)
    assert float(score) == float(maximum) > 0, done.stdout[-2000:]
    assert imported == "False" and "False" in seen and "True" not in seen, done.stdout[-2000:]


@needs_sandbox
def test_one_timer_bounds_the_whole_grading():
    """A hang with a 30 s probe timeout but a 12 s budget for everything (from the call, the
    sandbox's start included): the hanging call is cut at what is left of the budget, not blamed
    on the code (its 30 s were not up), the checks after it (stage 3's come after stage 2's, in
    course order) are not run, and the grading says it did not complete: no grade."""
    graded = grade(str(ROOT / "tests" / "redteam" / "classification_hang.py"),
                   ("compute_entropy", "compute_rollout_rewards"), probe_timeout=30.0, time_limit=12.0)
    outputs = [r["output"] for r in graded["results"].values()]
    assert not any("timed out after" in o for o in outputs), outputs
    assert all("ran past its time limit (12 s, `--time-limit`)" in o for o in outputs), outputs
    assert any("time limit of 12 s" in reason for reason in graded["incomplete"])


@pytest.mark.parametrize("tier", ("bubblewrap", "landlock"))
def test_a_notebooks_self_check_import_is_no_load_problem_in_either_tier(tier):
    """Every notebook imports `autograder.selfcheck` for its check cells; tier 2 cannot read that
    module (it drives the grader), so the child's import finds a stand-in: no problem is reported
    to the student, and the function is graded."""
    if sandbox_problem(ROOT, tier):
        pytest.skip(f"no {tier} sandbox here: {sandbox_problem(ROOT, tier)}")
    graded = grade(str(ROOT / "solutions" / "01_tokenization.ipynb"),
                   ("tokenize_prompt_and_output",), isolation=tier, allow_reference=True)
    assert not any("selfcheck" in problem for problem in graded["load_errors"]), \
        graded["load_errors"]
    assert graded["score"] == graded["max_score"] > 0, graded["results"]
