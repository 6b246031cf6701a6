"""Nothing a student wrote is lost: what a release wrote is recorded, and edits are never
overwritten.

Every command that writes notebooks into a folder (`python -m instructor.release`, the student
edition) records there, in `.release-manifest.json`, the SHA-256 of each notebook it wrote. Before
it writes again, it compares: a notebook whose bytes are no longer those it wrote was edited by
someone (a student working in `notebooks/`, an instructor's fix), and is not overwritten unless
`--force` is given. A notebook that was there before any release was recorded counts as edited
too, unless it already holds exactly what would be written.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = ".release-manifest.json"


class EditedNotebooks(RuntimeError):
    """Writing would overwrite notebooks edited since the last release (the message says how to
    proceed)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def released(folder: Path) -> dict[str, str]:
    """{notebook name: SHA-256 of what the last release wrote} ({} before any release)."""
    try:
        recorded = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    notebooks = recorded.get("notebooks") if isinstance(recorded, dict) else None
    return {k: v for k, v in notebooks.items() if isinstance(v, str)} \
        if isinstance(notebooks, dict) else {}


def edited_notebooks(folder: Path, new: dict[str, bytes], removed=()) -> list[str]:
    """Names of the notebooks in `folder` that writing `new` (name -> bytes) or deleting
    `removed` would change, and whose bytes are not those the last release wrote."""
    recorded = released(folder)
    edited = []
    for name in sorted(set(new) | set(removed)):
        path = folder / name
        if not path.is_file():
            continue
        current = path.read_bytes()
        if current != new.get(name) and sha256(current) != recorded.get(name):
            edited.append(name)
    return edited


def refuse_if_edited(folder: Path, new: dict[str, bytes], removed=(), force: bool = False,
                     elsewhere: str = "--notebooks DIR") -> None:
    """Raise EditedNotebooks naming the edited notebooks and the ways on (unless `force`)."""
    edited = [] if force else edited_notebooks(folder, new, removed)
    if edited:
        names = ", ".join(edited)
        raise EditedNotebooks(
            f"refusing to overwrite {len(edited)} notebook(s) in {folder} edited since the last "
            f"release: {names}. Nothing was written. To keep the edits, copy them elsewhere "
            f"first or write this release to another folder ({elsewhere}); to discard them, "
            "pass --force.")


def write_notebooks(folder: Path, new: dict[str, bytes], removed=(), force: bool = False,
                    elsewhere: str = "--notebooks DIR") -> list[Path]:
    """Write `new` into `folder` (and delete `removed`) unless that loses an edit; record what
    was written. Returns the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    refuse_if_edited(folder, new, removed, force, elsewhere)
    for name in removed:
        (folder / name).unlink(missing_ok=True)
    written = []
    for name, data in sorted(new.items()):
        (folder / name).write_bytes(data)
        written.append(folder / name)
    record = {"notebooks": {name: sha256(data) for name, data in sorted(new.items())}}
    (folder / MANIFEST).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return written
