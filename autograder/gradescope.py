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
import zipfile
from pathlib import Path

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
# bubblewrap: the sandbox an official grade needs; python3-venv: the grader's own environment
apt-get update -qq
apt-get install -y -qq bubblewrap python3 python3-venv python3-pip
python3 -m venv "$ROOT/venv"
"$ROOT/venv/bin/python" -m pip install -q --upgrade pip
# torch's CPU wheel (Gradescope has no GPU): the small one, from PyTorch's own index
"$ROOT/venv/bin/python" -m pip install -q --index-url https://download.pytorch.org/whl/cpu \\
    "{torch}"
"$ROOT/venv/bin/python" -m pip install -q -r "$ROOT/source/requirements.txt"
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


def run(root: Path, allow_reference: bool = False) -> int:
    """Grade `root`/submission officially into `root`/results/results.json (run_autograder)."""
    from autograder.trusted.results import write_results

    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    submission = find_submission(root / "submission")
    command = [sys.executable, "-m", "pytest", "autograder", "-q", "-p", "no:cacheprovider",
               "--submission", str(submission), "--official", "--results", str(results)]
    command += ["--allow-reference"] if allow_reference else []
    done = subprocess.run(command, cwd=Path(__file__).resolve().parent.parent)
    if not results.exists():  # the grader itself failed: say so rather than leave no grade
        write_results({"score": 0.0, "visibility": "visible", "stdout_visibility": "hidden",
                       "output": f"the autograder failed (exit {done.returncode}) before it "
                                 "could grade: please tell your instructor", "tests": []}, results)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.gradescope",
                                     description="Build the Gradescope autograder zip, or grade "
                                                 "inside Gradescope (`run`).")
    parser.add_argument("command", nargs="?", choices=("build", "run"), default="build")
    parser.add_argument("--out", type=Path, help="the zip to write (build)")
    parser.add_argument("--root", type=Path,
                        default=Path(os.environ.get("GRADESCOPE_ROOT", "/autograder")),
                        help="Gradescope's root folder (run; default $GRADESCOPE_ROOT or /autograder)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out file")
    parser.add_argument("--allow-reference", action="store_true",
                        help="copies of the reference earn points: a bundle to check the solution "
                             "notebooks with (Gradescope's Test Autograder), never to grade students")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.root, args.allow_reference)
    if args.out is None:
        parser.error("--out FILE.zip is required to build the bundle")
    if args.out.suffix != ".zip":
        parser.error(f"--out {args.out}: Gradescope takes a .zip file")
    if args.out.exists() and not args.force:
        parser.error(f"--out {args.out} exists: pass --force to replace it, or choose another name")
    if not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: no such folder {args.out.parent}")
    names = build(args.out, allow_reference=args.allow_reference)
    print(f"wrote {args.out} ({len(names)} files): upload it as the assignment's autograder "
          "(Gradescope: Configure Autograder > Zip file upload)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
