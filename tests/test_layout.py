"""The packages' layout, held: imports point one way, instructor -> autograder -> course.

    course/                what a learner installs and reads: imports nothing outside course/
      the top               the seven stages, the registry and what they need: never a sub-package
      submissions/         the notebook reader and the learner's own stages: the top only
      frontier/            notebook 11's ungraded losses: the top only
      loop/                the trainer, models, tasks, rollouts: the top, submissions/, frontier/
      lab/                 notebooks 08-09's experiments and lab: nothing else imports it
      critic/              PPO with a critic, the loop's client: nothing else imports it
      baselines/           SFT and expert iteration beside GRPO: the top and the loop only;
                           nothing else imports the baselines
    autograder/            grades: imports course/, never instructor/
      trusted/             never imports untrusted/ (it never runs student code); nor the reverse:
      untrusted/           protocol/ is the only vocabulary the two sides share
      trusted/checks/      import trusted/core, never the grader that runs them
    instructor/            releases, deploys, grades a class: nothing imports it

The top is every module directly in `course/` but `course.train`, the one command every user runs
(`python -m course.train`), which is the door into the loop. It holds at most 16 modules.
An import inside `if __name__ == "__main__":` is a program's entry point, not a dependency of
whoever imports the module, so it is not counted.
Every other import counts, at any depth (a function's own import is a dependency too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("course", "autograder", "instructor")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _entry_point(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name) and test.left.id == "__name__")


def _imported(module: str, path: Path) -> set[str]:
    """The project modules `module` imports, resolved to the longest module that exists."""
    found, todo = set(), [ast.parse(path.read_text(encoding="utf-8"))]
    while todo:
        node = todo.pop()
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: len(module.split(".")) - node.level
                                        + (path.name == "__init__.py")]
                base = ".".join(package + ([node.module] if node.module else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            while parts and ".".join(parts) not in MODULES:
                parts.pop()
            if parts and ".".join(parts) != module:
                found.add(".".join(parts))
        todo.extend(child for child in ast.iter_child_nodes(node) if not _entry_point(child))
    return found


EDGES = {module: _imported(module, path) for module, path in MODULES.items()}


def _violations(rule) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in EDGES.items() for b in targets if rule(a, b))


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


COURSE_PACKAGES = ("course.submissions", "course.frontier", "course.loop", "course.lab",
                   "course.critic", "course.baselines")
TOP_MODULES_AT_MOST = 16


def _top(module: str) -> bool:
    """A module of `course`'s top level (a stage, the registry, what they import), not the command."""
    return _inside(module, "course") and module.count(".") <= 1 and module != "course.train"


RULES = {
    "course imports nothing outside course": lambda a, b: _inside(a, "course") and not _inside(b, "course"),
    "nothing imports the instructor's package": lambda a, b: _inside(b, "instructor") and not _inside(a, "instructor"),
    "trusted never imports untrusted": lambda a, b: _inside(a, "autograder.trusted") and _inside(b, "autograder.untrusted"),
    "untrusted never imports trusted": lambda a, b: _inside(a, "autograder.untrusted") and _inside(b, "autograder.trusted"),
    "the checks never import the grader": lambda a, b: _inside(a, "autograder.trusted.checks") and b == "autograder.trusted.grader",
    "the grader never imports the self-check": lambda a, b: a == "autograder.trusted.grader" and b == "autograder.selfcheck",
    "course's top never imports a sub-package": lambda a, b: _top(a) and any(_inside(b, p) for p in COURSE_PACKAGES),
    "submissions never import the loop or the lab": lambda a, b: _inside(a, "course.submissions") and (
        _inside(b, "course.loop") or _inside(b, "course.lab")),
    "frontier imports only the top": lambda a, b: _inside(a, "course.frontier") and any(
        _inside(b, p) for p in COURSE_PACKAGES if p != "course.frontier"),
    "nothing imports the lab but the lab": lambda a, b: _inside(b, "course.lab") and not _inside(a, "course.lab"),
    "nothing imports the critic but the critic": lambda a, b: _inside(b, "course.critic") and not _inside(a, "course.critic"),
    "the baselines import the top and the loop only": lambda a, b: (
        _inside(a, "course.baselines")
        and (_inside(b, "course.submissions") or _inside(b, "course.lab"))),
    "nothing imports the baselines but the baselines": lambda a, b: (
        _inside(b, "course.baselines") and not _inside(a, "course.baselines")),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_imports_point_one_way(rule):
    assert _violations(RULES[rule]) == [], rule


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert _cycles(EDGES) == []


def test_the_layout_test_sees_each_kind_of_violation():
    """The test itself can fail: a planted upward import, a circle and an entry point."""
    planted = {"course.a": {"autograder.x", "course.b"}, "course.b": {"course.a"},
               "autograder.trusted.checks.c": {"autograder.trusted.grader"}}
    assert _cycles(planted) == [["course.a", "course.b"]]
    ups = [f"{a} -> {b}" for a, ts in planted.items() for b in ts
           if RULES["course imports nothing outside course"](a, b)]
    assert ups == ["course.a -> autograder.x"]
    assert RULES["the checks never import the grader"]("autograder.trusted.checks.c", "autograder.trusted.grader")
    tree = ast.parse("if __name__ == '__main__':\n    import autograder\n")
    assert _entry_point(tree.body[0])
    planted_rules = {("course.train_step", "course.loop.models"): "course's top never imports a sub-package",
                     ("course.submissions.reader", "course.loop.rollout"): "submissions never import the loop or the lab",
                     ("course.loop.train", "course.lab.compare"):
                         "nothing imports the lab but the lab",
                     ("course.baselines.run", "course.lab.failure_runs"):
                         "the baselines import the top and the loop only",
                     ("course.baselines.sft", "course.submissions.reader"):
                         "the baselines import the top and the loop only",
                     ("course.lab.compare", "course.baselines.run"):
                         "nothing imports the baselines but the baselines",
                     ("course.aggregation", "course.baselines.sft"):
                         "course's top never imports a sub-package",
                     ("course.loop.train", "course.critic.gae"):
                         "nothing imports the critic but the critic",
                     ("course.train_step", "course.frontier.loss"):
                         "course's top never imports a sub-package",
                     ("course.frontier.loss", "course.loop.models"):
                         "frontier imports only the top"}
    for (a, b), rule in planted_rules.items():
        assert RULES[rule](a, b), rule
    assert not RULES["course's top never imports a sub-package"]("course.train", "course.loop.train")
    assert "course.loop.train" in EDGES["course.train"]  # the command's door into the loop
    assert "course.train" not in EDGES["course.loop.train"]  # one way: the loop knows no command
    assert not RULES["the baselines import the top and the loop only"]("course.baselines.run",
                                                                        "course.loop.train")
    assert "course.loop.train" in EDGES["course.baselines.run"]  # the baselines are the loop's client


def _top_modules(root: Path = ROOT) -> list[str]:
    """The modules directly in `course/` (the command and `__init__` included)."""
    return sorted(p.stem for p in (root / "course").glob("*.py"))


def test_the_top_of_course_holds_at_most_16_modules(tmp_path):
    assert len(_top_modules()) <= TOP_MODULES_AT_MOST, _top_modules()
    (tmp_path / "course").mkdir()  # the count can fail: 17 planted modules
    for index in range(TOP_MODULES_AT_MOST + 1):
        (tmp_path / "course" / f"m{index}.py").touch()
    assert len(_top_modules(tmp_path)) > TOP_MODULES_AT_MOST
