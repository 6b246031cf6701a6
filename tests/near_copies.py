"""Near-copies of the reference, made mechanically: what a copier does to hide a pasted function.

- `with_dead_code`: a do-nothing statement after every statement of every block;
- `renamed`: every local name and argument renamed, messages reworded;
- `reordered`: each pair of adjacent statements that do not read or write each other's names
  swapped (so the function computes the same thing);
- `disguised`: all three at once.
The copy rule must give each 0 (tests/test_copies.py), and `benchmarks/bench_similarity.py`
measures their scores beside honest implementations'.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

from course.registry import HOME_MODULES

COURSE = Path(__file__).resolve().parents[1] / "course"
DEAD = ["_unused = 0", "if False:\n    pass", "assert True", "_unused = [] or None"]


def reference_definition(name: str) -> ast.FunctionDef:
    source = (COURSE / f"{HOME_MODULES[name].split('.')[1]}.py").read_text(encoding="utf-8")
    return next(node for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.FunctionDef) and node.name == name)


def _blocks(tree: ast.AST):
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield node, field, block


def with_dead_code(function: ast.FunctionDef) -> ast.FunctionDef:
    function = copy.deepcopy(function)
    for count, (node, field, block) in enumerate(list(_blocks(function))):
        padded = []
        for index, statement in enumerate(block):
            padded.append(statement)
            padded.extend(ast.parse(DEAD[(count + index) % len(DEAD)]).body)
        setattr(node, field, padded)
    return function


class _Rename(ast.NodeTransformer):
    def __init__(self, names: set[str]):
        self.names = names

    def visit_Name(self, node):
        if node.id in self.names:
            node.id = f"my_{node.id}_x"
        return node

    def visit_arg(self, node):
        node.arg = f"my_{node.arg}_x"
        return node

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            node.value = "reworded"
        return node


def renamed(function: ast.FunctionDef) -> ast.FunctionDef:
    function = copy.deepcopy(function)
    arguments = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    assigned = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Store)}
    name = function.name
    # the signature is what the grader calls: keep argument names, rename everything else
    function = _Rename(assigned - arguments).visit(function)
    function.args = copy.deepcopy(reference_definition(name).args) if name in HOME_MODULES \
        else function.args
    return function


def _names(statement: ast.stmt) -> tuple[set[str], set[str]]:
    reads = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load)}
    writes = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)
              and not isinstance(n.ctx, ast.Load)}
    return reads, writes


def _independent(a: ast.stmt, b: ast.stmt) -> bool:
    simple = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)
    if not (isinstance(a, simple) and isinstance(b, simple)):
        return False
    if any(isinstance(n, ast.Call) for s in (a, b) for n in ast.walk(s)
           if isinstance(s, ast.Expr)):
        return False  # a bare call may have effects the other statement sees
    (reads_a, writes_a), (reads_b, writes_b) = _names(a), _names(b)
    return not (writes_a & (reads_b | writes_b) or writes_b & reads_a)


def reordered(function: ast.FunctionDef) -> ast.FunctionDef:
    function = copy.deepcopy(function)
    for node, field, block in list(_blocks(function)):
        block = list(block)
        index = 1 if isinstance(block[0], ast.Expr) and isinstance(
            getattr(block[0], "value", None), ast.Constant) else 0
        while index + 1 < len(block):
            if _independent(block[index], block[index + 1]):
                block[index], block[index + 1] = block[index + 1], block[index]
                index += 2
            else:
                index += 1
        setattr(node, field, block)
    return function


def disguised(function: ast.FunctionDef) -> ast.FunctionDef:
    return with_dead_code(renamed(reordered(function)))


DISGUISES = {"dead code": with_dead_code, "renamed": renamed, "reordered": reordered,
             "all three": disguised}


def near_copy_source(name: str, disguise: str) -> str:
    """The source of graded function `name`'s reference, disguised, with the imports it needs."""
    module = (COURSE / f"{HOME_MODULES[name].split('.')[1]}.py").read_text(encoding="utf-8")
    imports = [ast.unparse(n) for n in ast.parse(module).body
               if isinstance(n, (ast.Import, ast.ImportFrom)) and getattr(n, "module", None) != "__future__"]
    function = ast.fix_missing_locations(DISGUISES[disguise](reference_definition(name)))
    return "\n".join(imports + ["", ast.unparse(function)]) + "\n"
