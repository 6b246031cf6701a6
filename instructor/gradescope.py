"""The Gradescope bundle, built and rehearsed by the instructor: `python -m instructor.gradescope`.

Gradescope's autograder specification (https://gradescope-autograders.readthedocs.io/en/latest/
specs/): the zip holds `setup.sh` (run once as root while the image is built) and
`run_autograder` (run once per submission, `python -m autograder.gradescope run`) at its top level.

The bundle holds the grader (`autograder/`, with its stored expected values) and the reference
(`course/`), which computes the expected values of the fresh cases: the zip is the instructor's,
never shown to students. It holds no `instructor/`, `tests/`, `solutions/` or `notebooks/`.

    python -m instructor.gradescope --out autograder.zip              # build
    python -m instructor.gradescope rehearse autograder.zip sub/      # grade in a local container
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
import zipfile
from pathlib import Path

from autograder.gradescope import GRADESCOPE_CPUS, GRADESCOPE_MEMORY
from autograder.options import COPIES, COPIES_HELP, Parser, number
from course.cli import unwritable
from course.paths import ROOT

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
    # a rehearsal (instructor.rehearsal): every wheel is in this folder, no index is used
    $PIP install -q --no-index --find-links "$GRADESCOPE_WHEELS" "{torch}" \\
        -r "$ROOT/source/requirements.txt"
else
    $PIP install -q --upgrade pip
    # torch's CPU wheel (Gradescope has no GPU): the small one, from PyTorch's own index
    $PIP install -q --index-url https://download.pytorch.org/whl/cpu "{torch}"
    $PIP install -q -r "$ROOT/source/requirements.txt"
fi
"""

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
            if (
                path.is_file()
                and not path.is_symlink()
                and not SKIPPED_PARTS & set(relative.parts)
                and path.suffix not in (".pyc", ".pyo")
            ):
                files.append((path, relative.as_posix()))
    return files


def build(out: Path, root: Path = ROOT, allow_reference: bool = False,
          copies: str = "flag") -> list[str]:
    """Write the bundle to `out`; returns the names it holds. `allow_reference`: a bundle that
    lets copies of the reference earn points, to check the solution notebooks on Gradescope.
    `copies`: what similarity to the reference does in its gradings (`--copies` of `pytest
    autograder`: "flag", or "zero" above each function's calibrated threshold)."""
    needs = requirements()
    torch = next(r for r in needs if re.match(r"torch\b", r))
    flags = (" --allow-reference" if allow_reference else "") + \
        (f" --copies {copies}" if copies != "flag" else "")
    generated = {"run_autograder": RUN_AUTOGRADER.replace("{flags}", flags),
                 "setup.sh": SETUP_SH.format(torch=torch),
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


def docker_size(text: str) -> str:
    """A Docker memory size (`768m`, `1g`, bytes)."""
    if not re.fullmatch(r"[0-9]+[bkmg]?", text.strip().lower()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Docker size such as 768m or 1g")
    return text.strip().lower()


def docker_cpus(text: str) -> str:
    return str(number(text, float, above=0.0, at_most=1024))


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m instructor.gradescope",
                    description="Build the Gradescope autograder zip (`build`, the default) or "
                                "rehearse Gradescope locally in Docker (`rehearse BUNDLE.zip "
                                "SUBMISSION`); Gradescope itself runs `python -m "
                                "autograder.gradescope run`.")
    parser.add_argument("command", nargs="?", choices=("build", "rehearse"), default="build")
    parser.add_argument("paths", nargs="*", type=Path, metavar="BUNDLE SUBMISSION",
                        help="rehearse: the bundle zip and a submission (a folder, .ipynb or .py)")
    parser.add_argument("--out", type=Path, help="the zip to write (build)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out file")
    parser.add_argument("--allow-reference", action="store_true",
                        help="copies of the reference earn points: a bundle to check the solution "
                             "notebooks with (Gradescope's Test Autograder), never to grade "
                             "students")
    parser.add_argument("--copies", default="flag", choices=COPIES, help=COPIES_HELP)
    parser.add_argument("--base-image", default="grpo-base:bookworm",
                        help="rehearse: the local image Gradescope's base stands for")
    parser.add_argument("--memory", default="768m", type=docker_size,
                        help="rehearse: the container's memory (Gradescope's default 768m)")
    parser.add_argument("--cpus", default="0.5", type=docker_cpus,
                        help="rehearse: the container's CPUs (Gradescope's default 0.5)")
    args = parser.parse_args(argv)
    if args.command != "rehearse" and args.paths:
        parser.error(f"{args.command} takes no positional paths (got "
                     f"{' '.join(map(str, args.paths))})")
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
    if problem := unwritable(args.out, folder=False):
        parser.error(f"argument --out: {problem}")
    names = build(args.out, allow_reference=args.allow_reference, copies=args.copies)
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
    from instructor.rehearsal import RehearsalError, rehearse

    try:
        return rehearse(bundle, submission, args.base_image, args.memory, args.cpus)
    except RehearsalError as exc:
        print(f"rehearsal failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
