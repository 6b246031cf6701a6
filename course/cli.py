"""The course's command lines: argparse options from a dataclass, and one-line usage errors.

Every `python -m course.*` command parses and checks its arguments with these before it imports
torch (seconds), so a mistyped flag is answered at once, by one line that names the flag:

    course.train: error: argument --steps: must be >= 0, got -1 (see --help)

instead of the full usage text with the message at its end (argparse's default).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import math
import tempfile
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import NoReturn

USAGE_ERROR = 2  # argparse's exit status for a usage error
INTERRUPTED = 130  # a shell's exit status for a command that SIGINT ended


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr with a pointer to --help.
    Abbreviations are refused: `--pg-method` must not pass for `--pg-methods`."""

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(**kwargs)

    def error(self, message: str) -> NoReturn:
        name = self.prog.removeprefix("python -m ")
        self.exit(USAGE_ERROR, f"{name}: error: {message} (see --help)\n")


def field_help(config_class) -> dict[str, str]:
    """The docstring written under each dataclass field, by field name."""
    tree = ast.parse(inspect.getsource(config_class))
    body = tree.body[0].body
    docs = {}
    for node, following in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)):
            docs[node.target.id] = following.value.value
    return docs


def add_config_arguments(parser: argparse.ArgumentParser, config_class, choices=None, exclude=(),
                         types=None) -> None:
    """One `--kebab-case` option per field (but `exclude`), typed by `types` or its default, helped
    by its docstring."""
    docs, choices, types = field_help(config_class), choices or {}, types or {}
    for field in (f for f in fields(config_class) if f.name not in exclude):
        default = field.default
        help_text = f"{docs.get(field.name, '').replace('%', '%%')} (default: {default})"
        if isinstance(default, bool):  # --flag / --no-flag
            parser.add_argument("--" + field.name.replace("_", "-"), dest=field.name,
                                default=default,
                                action=argparse.BooleanOptionalAction, help=help_text)
            continue
        parser.add_argument("--" + field.name.replace("_", "-"), dest=field.name,
                            type=types.get(field.name, type(default)), default=default,
                            choices=choices.get(field.name), help=help_text)


def flag_type(kind: type, problem: Callable[[object], str | None]) -> Callable[[str], object]:
    """An argparse `type=`: convert with `kind`, then refuse what `problem` objects to."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if message := problem(value):
            raise argparse.ArgumentTypeError(message)
        return value
    return parse


def unwritable(path: Path, folder: bool = True) -> str | None:
    """Why this user cannot write `path` as a folder (or, not `folder`, as a file): checked before
    any work, so that a bad --out is refused at once, not after the run. None when it can. A probe
    file in the nearest existing folder tells what permission bits do not (root, a read-only
    mount)."""
    if folder and path.is_symlink() and not path.exists():
        return f"{path} is a link to nothing"
    if path.exists() and path.is_dir() != folder:
        return f"{path} is {'a file, not a folder' if folder else 'a folder, not a file'}"
    if not folder and path.exists():
        try:
            open(path, "ab").close()  # opened to append, nothing written: its contents stay
        except OSError as error:
            return f"{path} cannot be written ({error.strerror})"
        return None
    existing = path if folder else path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not folder and existing != path.parent:
        return f"no such folder {path.parent}"
    try:
        tempfile.NamedTemporaryFile(dir=existing).close()  # made and removed
    except OSError as error:
        return f"{existing} is not writable ({error.strerror})"
    return None


def out_of_range(value: float, low: float, inclusive: bool,
                 high: float | None = None) -> str | None:
    """Why `value` is not a finite number above `low` (or at it, when `inclusive`) and at most
    `high` (when given); None when it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if value < low or (value == low and not inclusive):
        return f"must be {'>=' if inclusive else '>'} {low}, got {value}"
    if high is not None and value > high:
        return f"must be <= {high}, got {value}"
    return None


def bounded_types(config_class, bounds: dict[str, tuple]) -> dict[str, Callable]:
    """argparse `type=` functions refusing, for each field of `bounds`, a value outside its
    (lowest value, whether that value is allowed[, highest value])."""
    return {name: flag_type(type(getattr(config_class, name)),
                            lambda value, bound=bound: out_of_range(value, *bound))
            for name, bound in bounds.items()}

