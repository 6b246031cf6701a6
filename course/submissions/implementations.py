"""Whose code runs each stage: the learner's own functions, read from their notebooks, or the
reference.

Two rules, for two uses:

- `load_implementations` (yours first): notebook 08 and `python -m course.train --notebooks DIR`
  train with the learner's implementation of
  every stage: their `grpo_train_step`, which calls their own tokenizer, scorer, advantages,
  losses and aggregation. A graded function still holding the release's stub (`raise
  NotImplementedError()`) is "not written", and one in a cell that does not parse says so, with
  the line: its stage falls back to the reference when the reference is available (the full
  package, or a stage the instructor revealed), and says why; otherwise loading stops with the
  notebook to finish.
- `earlier_stages` (the reference first): a notebook uses the stages before its own, the reference
  where it is available, so that being stuck on stage 2 does not block stage 4; where the
  instructor has not revealed it (a student edition), the learner's own, from their notebook. A
  stage that is neither is left out (`missing`) and the others are still bound.

The notebooks are read the way the autograder reads them (`course.submissions.reader`): only
imports, definitions and UPPER_CASE constants are kept, so a training loop or a plot in a notebook
never runs here. Those definitions are then executed in this process: the learner's own code, on
their own machine, exactly as their notebook runs it. Each notebook keeps its own namespace; a
graded function that a notebook imports from `course` (notebook 07 imports the tokenizer, for
example) is replaced there by the learner's own version, so a later stage runs on earlier ones.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from course.registry import GRADED_FUNCTIONS, HOME_MODULES, STAGE_MODULES, STAGE_NAMED, STAGE_OF
from course.submissions.parsing import parse


class StageNotWritten(RuntimeError):
    """A stage the learner has not written and whose reference is not available."""

    def _render_traceback_(self) -> list[str]:
        """What Jupyter shows when this is raised in a cell: the message, without a traceback
        (IPython's hook; its message says everything the learner can act on)."""
        return [f"StageNotWritten: {self}"]


@dataclass
class Implementations:
    functions: dict[str, Callable]  # graded function name -> what runs
    origins: dict[str, str]  # graded function name -> "yours (NN_….ipynb)" or "reference (…)"
    # notebook statements that failed to run (their names stay unset)
    problems: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # neither written nor revealed (earlier_stages only): not bound

    def __getitem__(self, name: str) -> Callable:
        return self.functions[name]

    def get(self, name: str) -> Callable | None:
        """What runs for `name`, or None where this set has none (a lab run may bring one)."""
        return self.functions.get(name)

    def table(self) -> str:
        """One line per graded function: its stage and whose code runs it."""
        width = max(len(name) for name in self.origins)
        lines = [f"{STAGE_OF[name]:<16}{name:<{width + 2}}{origin}"
                 for name, origin in self.origins.items()]
        return "\n".join(lines + [f"note: {problem}" for problem in self.problems])


def is_unwritten(statement_source: str, name: str) -> bool:
    """True when `name`'s definition is the release's stub: a docstring, then only a raise of
    NotImplementedError (comments such as `# YOUR CODE HERE` are not statements)."""
    for node in parse(statement_source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            return len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None \
                and "NotImplementedError" in ast.unparse(body[0].exc)
    return False


def last_definition(units: list[dict], providers: dict[str, int], name: str) -> str | None:
    """The source of the last statement defining `name` in the notebook that provides it (the
    definition that runs), or None; `units` and `providers` as `course.submissions.reader` reads
    them."""
    index = providers.get(name)
    sources = [s for _, s in units[index]["statements"]
               if f"def {name}(" in s] if index is not None else []
    return sources[-1] if sources else None


def _reference(name: str) -> Callable | None:
    """The reference of `name`, or None where it is not available: a stub in a student edition,
    or the learner's own function that `stand_in_for_stubs` put in the stub's place (a function
    defined outside `name`'s home module is never its reference)."""
    home = HOME_MODULES[name]
    function = getattr(importlib.import_module(home), name, None)
    if function is None or getattr(function, "__grader_stub__", None) or \
            getattr(function, "__module__", None) != home:
        return None
    return function


def missing_references(names: tuple[str, ...] = GRADED_FUNCTIONS) -> tuple[str, ...]:
    """The graded functions among `names` whose reference is not here (none in the full course;
    in a student edition, those of the stages not revealed)."""
    return tuple(name for name in names if _reference(name) is None)


def _execute(unit: dict, problems: list[str]) -> dict:
    """Run a notebook's kept statements in a fresh module namespace; a failing one is reported."""
    module = types.ModuleType(f"notebook_{Path(unit['name']).stem}")
    module.__file__ = unit["name"]
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    for label, source in unit["statements"]:
        try:
            exec(compile(source, label, "exec"), module.__dict__)
        except Exception as error:
            problems.append(f"{label} failed to run: {type(error).__name__}: {error}")
    return vars(module)


def stand_in_for_stubs(functions: dict[str, Callable], namespaces: list[dict] = ()) -> list[str]:
    """Put `functions[name]` where the reference of `name` is a stub: in `namespaces` and in every
    loaded `course` module (`course.loop.rollout`, `course.aggregation`'s given helpers, ...).

    A stub is what stands for a reference that is not here: the stage the sandbox grades and later
    ones (`autograder.trusted.reference`), or a stage a student edition has not revealed. A
    reference that is here is left alone, so an official grade of stage 7 runs on the reference of
    stage 3, never on the learner's. Returns the names replaced somewhere.
    """
    # `import course` loads them lazily: a stub not loaded yet is one too
    for module in STAGE_MODULES:
        importlib.import_module(module)
    modules = [vars(m) for n, m in list(sys.modules.items())
               if m is not None and (n == "course" or n.startswith("course."))]
    replaced = []
    for name, function in functions.items():
        for namespace in [*namespaces, *modules]:
            if getattr(namespace.get(name), "__grader_stub__", None) == name:
                namespace[name] = function
                replaced.append(name)
    return sorted(set(replaced))


def why_not_yours(name: str, problems: list[str]) -> str:
    """Why the learner's `name` is not there: a cell of its notebook that does not parse (the
    reader drops such a cell whole), else not written."""
    notebook = STAGE_NAMED[STAGE_OF[name]].notebook
    unparsed = [p for p in problems if p.startswith(f"{notebook}, ") and "SyntaxError" in p]
    if unparsed:
        where, _, why = unparsed[0].partition(": ")
        return f"not found: {where.replace(', ', ' ', 1)} does not parse: {why.partition(';')[0]}"
    return f"not written in {notebook}"


def load_implementations(notebooks: str | Path, names: tuple[str, ...] = GRADED_FUNCTIONS,
                         strict: bool = True) -> Implementations:
    """The learner's implementation of each of `names` (default: every graded function), from the
    notebooks in `notebooks`, with the reference where a function is not written (and available).
    Where neither exists: raises StageNotWritten naming the notebook to finish, or with
    `strict=False` leaves the function out (`missing`). FileNotFoundError for a missing folder."""
    from course.submissions.reader import load_submission  # the autograder's safe reader

    folder = Path(notebooks)
    if not folder.is_dir() or not any(folder.glob("*.ipynb")):
        raise FileNotFoundError(f"notebooks={folder}: no folder of notebooks there")
    submission = load_submission(folder.resolve(), folder.resolve())
    problems = list(submission.problems)
    namespaces = [_execute(unit, problems) for unit in submission.units]
    functions, origins, missing = {}, {}, []
    for name in names:
        index = submission.providers.get(name)
        source = last_definition(submission.units, submission.providers, name)
        if source is not None and name in namespaces[index] and not is_unwritten(source, name):
            functions[name] = namespaces[index][name]
            origins[name] = f"yours ({submission.units[index]['name']})"
            continue
        reference = _reference(name)
        stage = STAGE_NAMED[STAGE_OF[name]]
        why = why_not_yours(name, problems)
        if reference is None:
            message = (f"{name}: {why}, and stage {stage.key} is not revealed: finish "
                       f"{stage.notebook} (or ask your instructor to reveal stage {stage.key})")
            if strict:
                raise StageNotWritten(message)
            missing.append(name)
            origins[name] = f"MISSING ({message})"
            continue
        functions[name] = reference
        origins[name] = f"reference (course.{name}: {why})"
    for namespace in namespaces:  # later stages call the learner's earlier ones
        for name in functions:
            if name in namespace:
                namespace[name] = functions[name]
    stand_in_for_stubs(functions)  # and so does the support code (rollouts, the train loop)
    return Implementations(functions, origins, tuple(problems), tuple(missing))


def reference_implementations() -> Implementations:
    """Every graded function's reference (the course's own run, to compare with)."""
    return Implementations({name: _reference(name) for name in GRADED_FUNCTIONS},
                           {name: f"reference (course.{name})" for name in GRADED_FUNCTIONS})


def earlier_stages(stage: str, notebooks: str | Path = ".") -> Implementations:
    """The graded functions of the stages before `stage` (a REGISTRY key such as "7_train_step"):
    each one's reference where it is available, else the learner's own from `notebooks`. A stage
    neither revealed nor written is left out and listed in `missing` (its table line names the
    notebook to finish): the stages that exist are still there to bind."""
    keys = list(STAGE_NAMED)
    if stage not in STAGE_NAMED:
        raise ValueError(f"stage must be one of {keys}, got {stage!r}")
    names = [n for key in keys[:keys.index(stage)] for n in STAGE_NAMED[key].functions]
    references = {name: _reference(name) for name in names}
    if all(references.values()):
        return Implementations(references, {n: f"reference (course.{n})" for n in names})
    learner = load_implementations(notebooks, tuple(n for n in names if references[n] is None),
                                   strict=False)
    functions = {n: references[n] or learner.functions[n] for n in names
                 if n not in learner.missing}
    origins = {n: f"reference (course.{n})" if references[n] else learner.origins[n] for n in names}
    return Implementations(functions, origins, learner.problems, learner.missing)
