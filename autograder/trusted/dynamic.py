"""Code a submission would build while it runs, or reach into the grader with: `exec`, `eval`,
`compile`, unpacking, reflection, the probes' own objects.

The copy detector (`autograder.trusted.reference`) compares the code it reads; code built from a
string at run time (the reference packed with zlib and base64 and `exec`uted at import, a code
object turned into a function, a module imported from generated source) is never read. So the rule
is: a submission that holds any of the constructs below anywhere (a function body, a class, a
constant, top-level code of a .py) gets none of its graded functions graded, and the grade names
each construct and its line. The course never needs them: the notebooks' own code uses none.

- builtins that run or reach code: `exec`, `eval`, `compile`, `__import__`, `breakpoint`,
  and the names `__builtins__`, `__loader__`, `__spec__`;
- modules that unpack, deserialize or import code: `marshal`, `pickle`, `dill`, `cloudpickle`,
  `importlib`, `imp`, `runpy`, `pkgutil`, `zipimport`, `codecs`, `base64`, `binascii`, `zlib`,
  `gzip`, `bz2`, `lzma`, `zipfile`, `ctypes`, `builtins`, `code`, `codeop`, `types`,
  `py_compile`, `compileall`, and `gc`, `inspect`, which find any object or frame of the process,
  and the grader's own modules (`autograder.*`, except `autograder.selfcheck`, which the
  notebooks import to check themselves) (imported in any form);
- attributes that reach code objects, frames, namespaces or the interpreter's import machinery:
  `__code__`, `__globals__`, `__builtins__`, `__dict__`, `__closure__`, `__subclasses__`,
  `__bases__`, `__base__`, `__mro__`, `__getattribute__`, `f_globals`, `f_locals`, `f_builtins`,
  `f_back`, `tb_frame`, `gi_frame`, `_C` (torch's C bindings; `torch._C` imported too),
  `sys.modules`, `sys._getframe`, `sys.meta_path`,
  `sys.path_hooks`, `torch.load`, `torch.jit`, `torch.package`;
- `getattr`, `setattr`, `delattr` or `hasattr` with an attribute name that is not a string
  literal, or that is one of the attributes above (`getattr(f, "__co" + "de__")`).
"""

from __future__ import annotations

import ast

BUILTINS = {"exec", "eval", "compile", "__import__", "breakpoint", "__builtins__",
            "__loader__", "__spec__"}
MODULES = {"marshal", "pickle", "dill", "cloudpickle", "importlib", "imp", "runpy", "pkgutil",
           "zipimport", "codecs", "base64", "binascii", "zlib", "gzip", "bz2", "lzma", "zipfile",
           "ctypes", "builtins", "code", "codeop", "types", "py_compile", "compileall", "gc",
           "inspect"}
SELF_CHECK = "autograder.selfcheck"  # the one grader module a submission may import
ATTRIBUTES = {"__code__", "__globals__", "__builtins__", "__dict__", "__closure__",
              "__subclasses__", "__bases__", "__base__", "__mro__", "__getattribute__",
              "f_globals", "f_locals", "f_builtins", "f_back", "tb_frame", "gi_frame", "_C"}
QUALIFIED = {("sys", "modules"), ("sys", "_getframe"), ("sys", "meta_path"),
             ("sys", "path_hooks"), ("torch", "load"), ("torch", "jit"), ("torch", "package")}
REFLECTION = {"getattr", "setattr", "delattr", "hasattr"}


def _reflection(node: ast.Call) -> str | None:
    if not (isinstance(node.func, ast.Name) and node.func.id in REFLECTION and len(node.args) >= 2):
        return None
    attribute = node.args[1]
    if not (isinstance(attribute, ast.Constant) and isinstance(attribute.value, str)):
        return f"{node.func.id}() with a computed attribute name"
    if attribute.value in ATTRIBUTES:
        return f"{node.func.id}(..., {attribute.value!r})"
    return None


def _construct(node: ast.AST) -> str | None:
    """What `node` is, if it is one of the constructs of the rule."""
    if isinstance(node, ast.Name) and node.id in BUILTINS:
        return f"`{node.id}`"
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [alias.name for alias in node.names]
        hit = [m for m in modules if m.split(".")[0] in MODULES
               or m.split(".")[0] == "autograder" and m != SELF_CHECK or m.startswith("torch._C")]
        return f"import of `{hit[0]}`" if hit else None
    if isinstance(node, ast.Attribute):
        if node.attr in ATTRIBUTES:
            return f"the attribute `{node.attr}`"
        if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in QUALIFIED:
            return f"`{node.value.id}.{node.attr}`"
    if isinstance(node, ast.Call):
        return _reflection(node)
    return None


def dynamic_code(tree: ast.AST) -> list[tuple[int, str]]:
    """[(line, construct)] for every construct of the rule in `tree`, in order."""
    found = []
    for node in ast.walk(tree):
        what = _construct(node)
        if what is not None:
            found.append((getattr(node, "lineno", 0), what))
    return sorted(set(found))
