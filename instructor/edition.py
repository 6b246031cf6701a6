"""The student edition: an installable folder for students, with the reference of revealed stages only.

    python -m instructor.release --student-edition DIR [--reveal 1,2] [--force]

writes into DIR:
    README.md, pyproject.toml    how to install and work (`pip install -e .`), the same dependencies
                                 as the course minus the instructors' tools (nbgrader, latex2mathml)
    notebooks/                   nbgrader's student version of solutions/ (`instructor.release`)
    course/                      the support code (loop/: models, tasks, rollout, train, plotting;
                                 lab/; submissions/), the warm-start checkpoint, the reference run
                                 that notebook 08 compares with (`course.lab.reference_run`,
                                 recorded); the modules of every stage not revealed (its module
                                 and `helper_modules` in `course.registry`) are stubs that raise
                                 `StageNotRevealed`, naming the notebook to write it in
    autograder/                  the student-side autograder: the checks and their stored cases
                                 (fixtures/expected.pt), graded from stored cases only, without the
                                 reference (a PRACTICE grade); the copy detector's fingerprints as
                                 salted hashes (fixtures/fingerprints.json), never the reference's code
    docs/, benchmarks/README.md  the pages the notebooks send a learner to (`EDITION_PAGES`): the
                                 frameworks map, the real-model guide, the measured times
    edition.json                 what was revealed; its presence switches the autograder to stored-only

Left out: solutions/, tests/ and the instructor's tools (the whole `instructor/` package, and its
`instructor` extra: nbgrader, latex2mathml). Stubs come from `autograder.trusted.reference.stubbed`,
the same rewrite the sandbox applies to the stage it grades.

Nothing a student wrote is lost: the notebooks are written by `instructor.manifest.write_notebooks`,
which refuses (before anything is written) to overwrite a notebook edited since the last build;
`--force` discards the edits, or build into another DIR. A DIR that is neither empty nor an
edition is refused, so a typo cannot replace a folder's `course/`.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from course.paths import EDITION_MARKER, ROOT, SOLUTIONS
from course.registry import REGISTRY, STAGE_NAMED, WRITTEN, Stage
from instructor.manifest import write_notebooks

ELSEWHERE = "another --student-edition DIR"
# the repository's pages that the notebooks send a learner to (tests/test_student_edition.py holds
# the list complete): the frameworks map, the real-model guide, the measured times
EDITION_PAGES = ("docs/frameworks.md", "docs/real_models.md", "benchmarks/README.md")

NOT_REVEALED = '''
class StageNotRevealed(RuntimeError):
    """The reference of a stage the instructor has not revealed yet: write your own."""


def __reference_called__(name):
    raise StageNotRevealed(f"course.{{name}} is not revealed yet (stage {key}, {title}): write it in "
                           "your notebook {notebook}, or wait for the instructor to reveal it")


__reference_called__.stage = {key!r}
'''


def parse_reveal(text: str) -> tuple[str, ...]:
    """"1,2" or "1_tokenization,2_scoring" (or "" / "none": nothing) -> stage keys, in course order.
    Raises ValueError naming what is not a stage."""
    numbers = {str(number): stage.key for number, stage in enumerate(REGISTRY, start=1)}
    wanted = set()
    for part in (p.strip() for p in text.split(",")):
        if part in ("", "none"):
            continue
        if part == "all":
            wanted.update(STAGE_NAMED)
        elif part in numbers or part in STAGE_NAMED:
            wanted.add(numbers.get(part, part))
        else:
            raise ValueError(f"{part!r} is not a stage: give numbers 1-{len(REGISTRY)} or keys "
                             f"({', '.join(STAGE_NAMED)}), separated by commas, or 'all'/'none'")
    return tuple(stage.key for stage in REGISTRY if stage.key in wanted)


def check_target(folder: Path) -> None:
    """Raise ValueError unless `folder` is new, empty, or an earlier student edition."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / EDITION_MARKER).exists():
        raise ValueError(f"{folder} is not empty and holds no student edition ({EDITION_MARKER}): "
                         "build into a new or empty folder")


def stub_module(source: str, stage: Stage) -> str:
    """`source` with every function stubbed (`stubbed`) but the stage's `given` helpers, the stubs
    raising StageNotRevealed."""
    from autograder.trusted.reference import stubbed

    tree = ast.parse(stubbed(source, stage.given))
    at = 0  # after the module docstring and `from __future__` imports, which must come first
    while at < len(tree.body) and (
            isinstance(tree.body[at], ast.ImportFrom) and tree.body[at].module == "__future__"
            or at == 0 and isinstance(tree.body[0], ast.Expr)
            and isinstance(tree.body[0].value, ast.Constant)):
        at += 1
    prelude = NOT_REVEALED.format(key=stage.key, title=stage.title, notebook=stage.notebook)
    tree.body[at:at] = ast.parse(prelude).body
    return ast.unparse(tree) + "\n"


def _copy_package(name: str, target: Path, rewrite: dict[str, str]) -> None:
    """Copy package `name` to `target`, leaving out caches; its files in `rewrite` (relative
    path -> text) are written with that text instead."""
    source = ROOT / name
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source).as_posix()
        if "__pycache__" in path.parts or path.is_dir():
            continue
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        if relative in rewrite:
            (target / relative).write_text(rewrite[relative], encoding="utf-8")
        else:
            shutil.copyfile(path, target / relative)


def stale_fixtures() -> list[str]:
    """Stored cases whose definition changed since `python -m instructor.fixtures` last ran."""
    from autograder.trusted import checks  # noqa: F401  (registers the cases)
    from autograder.trusted.core import CASES, case_fingerprint
    from autograder.trusted.grader import load_fixtures

    stored = load_fixtures()
    return [name for name, spec in CASES.items()
            if stored.get(name, {}).get("fingerprint") != case_fingerprint(spec)]


def fingerprint_file() -> str:
    """The copy detector's reference fingerprints, salted and hashed (no code of the reference)."""
    from autograder.trusted.reference import reference_prints

    salt = os.urandom(16).hex()
    return json.dumps({"salt": salt, "functions": reference_prints(salt)}, indent=1) + "\n"


def pyproject(revealed: tuple[str, ...]) -> str:
    """The edition's pyproject.toml: the course's own dependencies (the instructor's tools are the
    `instructor` extra, which an edition leaves out with the package)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[\n(.*?)^\]", text, re.S | re.M).group(1).rstrip("\n")
    python = re.search(r'^requires-python = "(.*)"', text, re.M).group(1)
    shown = ", ".join(revealed) or "none"
    return f'''[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "grpo-course-student"
version = "0.1.0"
description = "Learn GRPO by building it: the student edition (references revealed: {shown})."
readme = "README.md"
requires-python = "{python}"
license = "Apache-2.0"
dependencies = [
{block}
]

[tool.setuptools.packages.find]
include = ["course*", "autograder*"]

[tool.setuptools.package-data]
course = ["checkpoints/**/*"]
autograder = ["fixtures/*"]

[tool.pytest.ini_options]
testpaths = ["autograder"]
'''


def later_notebooks(solutions: Path = SOLUTIONS) -> str:
    """The table rows of the notebooks after the graded stages, from the files in `solutions`:
    each one's title (its first heading) and what is graded in it (its `WRITTEN` cells)."""
    staged = {stage.notebook for stage in REGISTRY}
    rows = []
    for path in sorted(solutions.glob("*.ipynb")):
        if path.name in staged:
            continue
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        title = "".join(cells[0]["source"]).splitlines()[0].lstrip("# ").split(" — ", 1)[-1]
        optional = " (optional)" if "(optional)" in "".join(cells[0]["source"]) else ""
        points = [WRITTEN[grade_id] for cell in cells
                  if (grade_id := cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"))
                  in WRITTEN]
        each = (f"of {points[0]} points each" if len(set(points)) == 1
                else f"worth {sum(points)} points")
        graded = (f"{len(points)} written answers {each}, graded by your instructor (not by "
                  "`pytest autograder`)" if points else "nothing")
        rows.append(f"| `notebooks/{path.name}` | {title}{optional} | {graded} |")
    return "\n".join(rows)


def readme(revealed: tuple[str, ...], solutions: Path = SOLUTIONS) -> str:
    rows = "\n".join(f"| {n} | `notebooks/{s.notebook}` | {s.title} | "
                     f"{'revealed' if s.key in revealed else 'write it yourself'} |"
                     for n, s in enumerate(REGISTRY, start=1))
    return f"""# GRPO, one stage at a time: the student edition

You build GRPO (group relative policy optimization) for a tiny language model, one notebook per
stage, and an autograder checks each function you write.

## Install

    python -m venv .venv && . .venv/bin/activate      # Windows: .venv\\Scripts\\activate
    pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu   # or your GPU's wheel
    pip install -e .

(The CPU wheel is small; a plain `pip install torch` on Linux fetches the multi-GB CUDA build.
Any torch the `pyproject.toml` range allows works.)

## Work

    jupyter lab notebooks/

Work through the notebooks in order. Each graded function has a self-check cell right below it.
The support code you may use is in `course/loop/` (the tiny model, the tasks, rollouts, plotting,
training). The reference of a stage is in `course/` only once your instructor reveals it; until
then its functions raise `StageNotRevealed`, naming the notebook to write it in. A notebook that
needs earlier stages uses their reference where it is revealed, else your own from their
notebooks, and prints which.

| stage | notebook | what | reference |
|---|---|---|---|
{rows}

Then the notebooks after the stages, in order:

| notebook | what | graded |
|---|---|---|
{later_notebooks(solutions)}

The first of them trains the whole pipeline with your own stages and compares your run with the
reference's, recorded for this edition. `python -m course.train --out runs/mine` trains with the
notebooks in `notebooks/` the same way.

## Check your work

    pytest autograder                                   # all notebooks in notebooks/
    pytest autograder -k compute_entropy                # the checks of one function
    pytest autograder --submission notebooks/02_scoring.ipynb

This is a PRACTICE grade, and it says so: it judges your functions on the cases stored with this
autograder (no fresh inputs), and skips, saying why, the few checks that need the reference. Your
official grade is computed by your instructor (for example on Gradescope), on fresh inputs checked
against the reference: code that only knows the stored cases earns nothing there.
The check cells in each notebook are practice too: they run in your own kernel, where nothing is
isolated, so their totals (and nbgrader's, where your instructor uses it) match the official
grade for honest work only. The official grade is the one that counts; it also gives 0 to a
function that copies the reference (renamed, padded or reordered) or builds code at run time
(`exec`, `eval`, `compile`, decoding).
Submit your notebooks the way your instructor asks.

## When your instructor reveals a stage

Your instructor gives you a new edition. Keep your notebooks: a new build never overwrites a
notebook you edited (it stops and says so); copy your notebooks into the new edition's
`notebooks/`, or ask for the build into a fresh folder.
"""


def build_edition(folder: Path, revealed: tuple[str, ...], force: bool = False,
                  solutions: Path = SOLUTIONS) -> list[Path]:
    """Write the student edition into `folder` (see the module docstring); returns the notebooks
    written. Raises ValueError for a folder that cannot hold one or stale stored cases, and
    `instructor.manifest.EditedNotebooks` (writing nothing) where a notebook was edited since the last
    build."""
    from instructor.manifest import refuse_if_edited
    from instructor.nbgrader_release import generate_release

    check_target(folder)
    stale = stale_fixtures()
    if stale:
        raise ValueError(f"the stored cases {', '.join(stale)} are out of date: run "
                         "`python -m instructor.fixtures` first")
    with tempfile.TemporaryDirectory(prefix="grpo_edition_") as tmp:
        new = {p.name: p.read_bytes() for p in generate_release(solutions, Path(tmp) / "notebooks")}
        notebooks = folder / "notebooks"
        removed = [p.name for p in notebooks.glob("*.ipynb") if p.name not in new]
        refuse_if_edited(notebooks, new, removed, force, ELSEWHERE)  # before anything is written

        staged = Path(tmp) / "edition"
        stubs = {f"{module.split('.')[1]}.py": stub_module(
                     (ROOT / f"{module.replace('.', '/')}.py").read_text(encoding="utf-8"), stage)
                 for stage in REGISTRY if stage.key not in revealed
                 for module in (stage.module, *stage.helper_modules)}
        _copy_package("course", staged / "course", stubs)
        _copy_package("autograder", staged / "autograder", {})
        (staged / "autograder" / "fixtures" / "fingerprints.json").write_text(fingerprint_file(),
                                                                           encoding="utf-8")
        for page in EDITION_PAGES:
            (staged / page).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / page, staged / page)
        (staged / "README.md").write_text(readme(revealed, solutions), encoding="utf-8")
        (staged / "pyproject.toml").write_text(pyproject(revealed), encoding="utf-8")
        unrevealed = [s.key for s in REGISTRY if s.key not in revealed]
        (staged / EDITION_MARKER).write_text(json.dumps(
            {"revealed": list(revealed), "not_revealed": unrevealed}, indent=1) + "\n", encoding="utf-8")

        folder.mkdir(parents=True, exist_ok=True)
        for path in sorted(staged.iterdir()):
            target = folder / path.name
            if target.is_dir():
                shutil.rmtree(target)  # a stage revealed since the last build: its stubs go
            shutil.move(str(path), target)
    return write_notebooks(notebooks, new, removed, force, ELSEWHERE)
