"""Tamper detection for PRACTICE grades: files a submission must not leave for the next grading.

In the bubblewrap sandbox the worker cannot write outside its private tmpfs at all, and this is
not used. Without one (a practice grade), the worker could write a `conftest.py`, a `pytest.ini`, a
`.pth` file, or edit the grader's own files to fool the NEXT run. We snapshot those places before
any student code runs; after the worker is gone we delete new startup files and report every
change (a run with changes scores 0).
"""

from __future__ import annotations

import site
import sys
from pathlib import Path

STARTUP_NAMES = {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml",
                 "sitecustomize.py", "usercustomize.py", ".pytest.ini"}


def _tree(directory: Path) -> dict:
    files = {}
    if directory.is_dir():
        for path in directory.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                try:
                    files[path] = path.read_bytes()
                except OSError:
                    continue
    return files


def _top(directory: Path) -> dict:
    files = {}
    if directory.is_dir():
        for path in directory.iterdir():
            if path.is_file() and (path.name in STARTUP_NAMES or path.suffix == ".pth"):
                try:
                    files[path] = path.read_bytes()
                except OSError:
                    continue
    return files


class Sentinel:
    def __init__(self, root: Path, extra_dirs=()):
        self.trees = [root / "autograder", root / "course"]
        self.tops = {root, Path.cwd(), *map(Path, extra_dirs)}
        self.tops.update(Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]
                         if Path(p).is_dir())
        self.tops.update(Path(p) for p in sys.path if p and Path(p).is_dir()
                         and "site-packages" in p)
        self.before = self._snapshot()

    def _snapshot(self) -> dict:
        files = {}
        for tree in self.trees:
            files.update(_tree(tree))
        for top in self.tops:
            files.update(_top(top))
        return files

    def restore(self) -> list[str]:
        """Report every change since the snapshot, and delete new startup files (conftest.py,
        .pth, ...). Changed files are reported, never written back: people (and other gradings)
        edit the repository while a run is going on, and their work must not be overwritten."""
        changed = []
        now = self._snapshot()
        for path, content in now.items():
            old = self.before.get(path)
            if old == content:
                continue
            if old is None and (path.name in STARTUP_NAMES or path.suffix == ".pth"):
                path.unlink(missing_ok=True)
                changed.append(f"created {path} (deleted)")
            else:
                changed.append(f"{'created' if old is None else 'modified'} {path}")
        changed.extend(f"deleted {path}" for path in self.before if path not in now)
        return changed
