"""The Gradescope bundle: `python -m autograder.gradescope --out autograder.zip`.

Gradescope's autograder specification (https://gradescope-autograders.readthedocs.io/en/latest/
specs/): the zip holds `setup.sh` (run once as root while the image is built) and
`run_autograder` (run once per submission) at its top level; it is unpacked into
`/autograder/source`, the student's upload lies in `/autograder/submission`, and the grade is
read from `/autograder/results/results.json` (`score`, `output`, `tests`: name, score, max_score,
status, output, visibility).

The bundle holds the grader (`autograder/`, with its stored expected values) and the reference
(`course/`), which computes the expected values of the fresh cases: the zip is the instructor's,
never shown to students. It holds no `tests/`, `solutions/` or `notebooks/`. `run_autograder`
reads the root from `$GRADESCOPE_ROOT` (default /autograder), so the whole layout can be
simulated anywhere (tests/test_gradescope.py), and grades officially: `--official` (bubblewrap
isolation or no grade) with fresh inputs. results.json carries only what the checks say.

    python -m autograder.gradescope --out autograder.zip     # build (instructor)
    python -m autograder.gradescope run                      # grade (run_autograder calls this)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from autograder.options import MIN_MEMORY_MB, Parser, number, seconds

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("autograder", "course")  # the grader and the reference, nothing else of the project
SKIPPED_PARTS = {"__pycache__", ".pytest_cache", ".ipynb_checkpoints"}
# not needed to grade: the student's editor, the instructor's release tool, the linter
NOT_FOR_GRADING = {"jupyter", "nbgrader", "ruff"}

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this once per submission (see autograder/gradescope.py).
set -uo pipefail
ROOT="${GRADESCOPE_ROOT:-/autograder}"
PYTHON="${GRADESCOPE_PYTHON:-$ROOT/venv/bin/python}"
cd "$ROOT/source"
exec "$PYTHON" -m autograder.gradescope run --root "$ROOT"{flags}
"""

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image (Ubuntu).
set -euo pipefail
ROOT="${{GRADESCOPE_ROOT:-/autograder}}"
# bubblewrap: the sandbox an official grade needs where the container allows user namespaces;
# libseccomp2: the other isolation tier's filter; python3-venv: the grader's own environment
PACKAGES="bubblewrap libseccomp2 python3 python3-venv python3-pip"
if ! dpkg -s $PACKAGES >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq $PACKAGES
fi
python3 -m venv "$ROOT/venv"
PIP="$ROOT/venv/bin/python -m pip"
if [ -n "${{GRADESCOPE_WHEELS:-}}" ]; then
    # a rehearsal (autograder.rehearsal): every wheel is in this folder, no index is used
    $PIP install -q --no-index --find-links "$GRADESCOPE_WHEELS" "{torch}" \\
        -r "$ROOT/source/requirements.txt"
else
    $PIP install -q --upgrade pip
    # torch's CPU wheel (Gradescope has no GPU): the small one, from PyTorch's own index
    $PIP install -q --index-url https://download.pytorch.org/whl/cpu "{torch}"
    $PIP install -q -r "$ROOT/source/requirements.txt"
fi
"""

# Gradescope's default container (https://gradescope-autograders.readthedocs.io/en/latest/
# troubleshooting/): a grading must fit in it, every process of it together
GRADESCOPE_MEMORY, GRADESCOPE_CPUS = "768 MB", "0.5"
# the grader's own processes in that container: 606-644 MiB at the peak of a whole grading, with a
# stage child's own memory (benchmarks/bench_gradescope.py); a submission gets the rest as its
# address-space bound, and beyond it the OOM killer takes a stage child (oom_score_adj 1000) first
GRADER_MB = 512
DEFAULT_MEMORY_MB = 6144  # pytest autograder's own --memory-mb default
DEFAULT_TIME_LIMIT = 1200.0
# the grader's own process at half a CPU: one thread (more only cost stacks and malloc arenas; the
# expected values are computed on one thread anyway, `core.one_thread`) and two malloc arenas
LEAN = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
KILL_GRACE = 30.0  # seconds past the time limit before `run` stops a grader that overran it

PYTEST_INI = """[pytest]
addopts = -p no:cacheprovider
"""


def requirements() -> list[str]:
    """What grading needs: the package's own requirements, without the editor and release tools."""
    wanted = []
    try:
        required = importlib.metadata.requires("grpo-course") or []
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit("the bundle lists the installed package's requirements: "
                         "`pip install -e .` in the project first") from None
    for requirement in required:
        name = re.split(r"[ <>=!~;\[]", requirement, maxsplit=1)[0].lower()
        if "extra ==" not in requirement and name not in NOT_FOR_GRADING:
            wanted.append(requirement.split(";")[0].strip())
    return wanted


def bundle_files(root: Path = ROOT) -> list[tuple[Path, str]]:
    """(file on disk, name in the zip) for every file of the grader and the reference."""
    files = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and not path.is_symlink() and not SKIPPED_PARTS & set(relative.parts) \
                    and path.suffix not in (".pyc", ".pyo"):
                files.append((path, relative.as_posix()))
    return files


def build(out: Path, root: Path = ROOT, allow_reference: bool = False) -> list[str]:
    """Write the bundle to `out`; returns the names it holds. `allow_reference`: a bundle that
    lets copies of the reference earn points, to check the solution notebooks on Gradescope."""
    needs = requirements()
    torch = next(r for r in needs if re.match(r"torch\b", r))
    flags = " --allow-reference" if allow_reference else ""
    generated = {"run_autograder": RUN_AUTOGRADER.replace("{flags}", flags), "setup.sh": SETUP_SH.format(torch=torch),
                 "requirements.txt": "".join(f"{r}\n" for r in needs if r != torch),
                 "pytest.ini": PYTEST_INI}
    names = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in generated.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if name in ("run_autograder", "setup.sh")
                                  else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, text)
            names.append(name)
        for path, name in bundle_files(root):
            archive.write(path, name)
            names.append(name)
    return names


def find_submission(folder: Path) -> Path:
    """What to grade in the upload: the folder itself when it holds notebooks or .py files at its
    top, else the one folder inside that does (students often upload a zipped folder)."""
    def has_code(path: Path) -> bool:
        return any(path.glob("*.ipynb")) or any(path.glob("*.py"))

    if has_code(folder):
        return folder
    inner = [p for p in sorted(folder.rglob("*"))
             if p.is_dir() and not p.is_symlink() and "__MACOSX" not in p.parts and has_code(p)]
    return inner[0] if len(inner) == 1 else folder


def docker_size(text: str) -> str:
    """A Docker memory size (`768m`, `1g`, bytes)."""
    if not re.fullmatch(r"[0-9]+[bkmg]?", text.strip().lower()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Docker size such as 768m or 1g")
    return text.strip().lower()


def docker_cpus(text: str) -> str:
    return str(number(text, float, above=0.0, at_most=1024))


def container_memory_mb() -> int | None:
    """The memory limit of this container's cgroup in MiB (v1 or v2), None without one."""
    for name in ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"):
        try:
            value = Path(name).read_text().strip()
        except OSError:
            continue
        if value.isdigit() and int(value) < 2**50:  # v1 says "no limit" with a huge number
            return int(value) // 2**20
    return None


def submission_memory_mb(container_mb: int | None) -> int:
    """What `--memory-mb` a submission gets: inside a container's limit, about what the grader's
    own processes leave of it (GRADER_MB), so a hoard of address space fails with MemoryError in
    its own probe; one of real pages may reach the container's limit first, and then the OOM
    killer ends the stage child (the highest oom_score_adj), which costs that function its
    points and says memory. Without a limit, the grader's default."""
    if container_mb is None:
        return DEFAULT_MEMORY_MB
    return max(MIN_MEMORY_MB, container_mb - GRADER_MB)


def run(root: Path, allow_reference: bool = False, time_limit: float = DEFAULT_TIME_LIMIT,
        started: float | None = None, isolation: str = "auto") -> int:
    """Grade `root`/submission officially into `root`/results/results.json (run_autograder).

    A grading that did not complete leaves NO results.json and exits 1. Gradescope then shows
    "the autograder failed" to the student and the instructor, never a number: a results.json
    always carries a score (the sum of its tests where it names none), and Gradescope shows that
    score as the grade, whatever its text says. So results.json is written once, whole (a rename),
    only by a grading that judged every check; an OOM kill, a time-out, a sandbox that would not
    start or a crash of the grader at any moment leaves nothing to mistake for a grade.
    `isolation`: the sandbox's tier, as `pytest autograder --isolation` takes it ("auto": the
    first that holds in the container).
    """
    started = time.monotonic() if started is None else started
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    submission = find_submission(root / "submission")
    memory = submission_memory_mb(container_memory_mb())
    remaining = time_limit - (time.monotonic() - started)
    command = [sys.executable, "-m", "pytest", "autograder", "-q", "-p", "no:cacheprovider",
               "--submission", str(submission), "--official", "--results", str(results),
               "--time-limit", f"{max(remaining, 1.0):.1f}", "--memory-mb", str(memory)]
    command += ["--allow-reference"] if allow_reference else []
    command += ["--isolation", isolation]
    try:  # the grader keeps its own clock; this one stops a grader that no longer does
        done = subprocess.run(command, cwd=ROOT, timeout=max(remaining, 1.0) + KILL_GRACE,
                              env={**LEAN, **os.environ})
        why = f"the grader exited with code {done.returncode}"
    except subprocess.TimeoutExpired:
        why = f"the grader ran past --time-limit {time_limit:g} s and was stopped"
    if not results.exists():
        print(f"GRADING DID NOT COMPLETE: {why} and wrote no results.json, so Gradescope shows an "
              "autograder error, not a grade (the output above says why)", file=sys.stderr)
        return 1
    return 0


def _check_root(parser: argparse.ArgumentParser, root: Path) -> None:
    if not (root / "submission").is_dir():
        parser.error(f"--root {root}: no submission/ folder there (Gradescope's root holds "
                     "source/, submission/ and results/)")
    results = root / "results" / "results.json"
    if results.exists() or results.is_symlink():
        parser.error(f"--root {root}: {results} exists already (Gradescope grades each submission "
                     "in a fresh container): move it away to grade again")


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    parser = Parser(prog="python -m autograder.gradescope",
                    description="Build the Gradescope autograder zip (`build`, the default), grade "
                                "inside Gradescope (`run`), or rehearse Gradescope locally in "
                                "Docker (`rehearse BUNDLE.zip SUBMISSION`).")
    parser.add_argument("command", nargs="?", choices=("build", "run", "rehearse"), default="build")
    parser.add_argument("paths", nargs="*", type=Path, metavar="BUNDLE SUBMISSION",
                        help="rehearse: the bundle zip and a submission (a folder, .ipynb or .py)")
    parser.add_argument("--out", type=Path, help="the zip to write (build)")
    parser.add_argument("--root", type=Path,
                        default=Path(os.environ.get("GRADESCOPE_ROOT", "/autograder")),
                        help="Gradescope's root folder (run; default $GRADESCOPE_ROOT or /autograder)")
    parser.add_argument("--time-limit", type=seconds, default=DEFAULT_TIME_LIMIT,
                        help="run: wall-clock seconds for the whole grading, from the start "
                             f"(default {DEFAULT_TIME_LIMIT:g})")
    parser.add_argument("--force", action="store_true", help="replace an existing --out file")
    parser.add_argument("--isolation", choices=("auto", "bubblewrap", "landlock"), default="auto",
                        help="run: the sandbox's tier (auto: bubblewrap where the container allows "
                             "it, else Landlock and seccomp)")
    parser.add_argument("--allow-reference", action="store_true",
                        help="copies of the reference earn points: a bundle to check the solution "
                             "notebooks with (Gradescope's Test Autograder), never to grade students")
    parser.add_argument("--base-image", default="grpo-base:bookworm",
                        help="rehearse: the local image Gradescope's base stands for")
    parser.add_argument("--memory", default="768m", type=docker_size,
                        help="rehearse: the container's memory (Gradescope's default 768m)")
    parser.add_argument("--cpus", default="0.5", type=docker_cpus,
                        help="rehearse: the container's CPUs (Gradescope's default 0.5)")
    args = parser.parse_args(argv)
    if args.command != "rehearse" and args.paths:
        parser.error(f"{args.command} takes no positional paths (got {' '.join(map(str, args.paths))})")
    if args.command == "run":
        _check_root(parser, args.root)
        return run(args.root, args.allow_reference, args.time_limit, started, args.isolation)
    if args.command == "rehearse":
        return _rehearse(parser, args)
    if args.out is None:
        parser.error("--out FILE.zip is required to build the bundle")
    if args.out.suffix != ".zip":
        parser.error(f"--out {args.out}: Gradescope takes a .zip file")
    if args.out.exists() and not args.force:
        parser.error(f"--out {args.out} exists: pass --force to replace it, or choose another name")
    if not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: no such folder {args.out.parent}")
    names = build(args.out, allow_reference=args.allow_reference)
    if args.allow_reference:
        print(f"wrote {args.out} ({len(names)} files): a CHECK BUNDLE (--allow-reference): pasted "
              "copies of the reference EARN POINTS with it. NOT FOR GRADING STUDENTS: use it only "
              "to test the solution notebooks (Gradescope: Test Autograder); grade students with "
              "a bundle built without --allow-reference")
    else:
        print(f"wrote {args.out} ({len(names)} files): upload it as the assignment's autograder "
              "(Gradescope: Configure Autograder > Zip file upload); it grades a correct "
              f"submission within Gradescope's default {GRADESCOPE_MEMORY} and {GRADESCOPE_CPUS} "
              "CPU")
    return 0


def _rehearse(parser: argparse.ArgumentParser, args) -> int:
    if len(args.paths) != 2:
        parser.error("rehearse needs BUNDLE.zip and SUBMISSION")
    bundle, submission = args.paths
    if bundle.suffix != ".zip" or not bundle.is_file():
        parser.error(f"BUNDLE {bundle}: not a .zip file")
    if not submission.exists():
        parser.error(f"SUBMISSION {submission}: no such file or folder")
    from autograder.rehearsal import RehearsalError, rehearse

    try:
        return rehearse(bundle, submission, args.base_image, args.memory, args.cpus)
    except RehearsalError as exc:
        print(f"rehearsal failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
