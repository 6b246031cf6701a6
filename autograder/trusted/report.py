"""The score table printed at the end of `pytest autograder` (and by notebook self-checks), and
the similarity flag under it (`similarity_lines`: evidence for the instructor, not a score).

Every text here may carry words of the submission (exception messages, load errors, the worker's
last output), so it is escaped before it is shown: a terminal control sequence, a carriage return
or a bidirectional override would otherwise act on the grader's terminal (clear it, rewrite a line,
reorder what a score line says) instead of being read.
"""

from __future__ import annotations

import textwrap

from course.registry import STAGES

MAX_LINE = 2_000  # characters of one output line in the table (the rest is cut, and says so)


def escape(text, limit: int | None = None) -> str:
    """`text` with every character that is not printable (control codes, ANSI escapes, \\r,
    bidirectional and other format characters, lone surrogates) written out as its Python escape,
    `\\x1b` for ESC; newlines stay. With `limit`, at most that many characters, and a note."""
    text = str(text)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]} [... {len(text) - limit:,} more characters]"
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\n" else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def check_table(results: list[dict], width: int = 100) -> list[str]:
    lines = []
    for r in results:
        mark = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[r["status"]]
        points = (
            "   -   "
            if r["status"] == "skipped"
            else f"{r['score']:g}/{r['max_score']:g}".center(7)
        )
        lines.append(f"{mark} {points} {r['name']}")
        if r["status"] != "passed":
            for part in escape(r["output"]).split("\n")[:12]:
                lines.extend(textwrap.wrap(escape(part, MAX_LINE), width, initial_indent=" " * 13,
                                           subsequent_indent=" " * 15) or [""])
    return lines


def stage_table(results: list[dict]) -> list[str]:
    lines = [f"{'stage':<18}{'score':>10}{'max':>8}", "-" * 36]
    total = maximum = 0.0
    for stage in STAGES:
        rows = [r for r in results if r["stage"] == stage and r["status"] != "skipped"]
        if not rows:
            continue
        score, top = sum(r["score"] for r in rows), sum(r["max_score"] for r in rows)
        total, maximum = total + score, maximum + top
        lines.append(f"{stage:<18}{score:>10g}{top:>8g}")
    lines += ["-" * 36, f"{'TOTAL':<18}{total:>10g}{maximum:>8g}"]
    return lines


SIMILARITY_TITLE = "SIMILAR TO THE REFERENCE (evidence for the instructor to review)"


def similarity_lines(similar: dict, copies: str) -> list[str]:
    """The flag of each graded function more similar to its reference than independent work
    (`similar`: {function: autograder.trusted.reference.Evidence}), with its matched lines; what it
    cost under `copies` ("flag": nothing; "zero": the function's points above its threshold)."""
    if not similar:
        return []
    zeroed = [name for name, found in similar.items() if copies == "zero" and found.penalized]
    cost = (f"--copies zero: {', '.join(zeroed)} earned nothing" if zeroed else
            "it cost no points" + ("" if copies == "zero" else " (--copies flag)"))
    lines = ["", f"{SIMILARITY_TITLE}: {cost}"]
    for found in similar.values():
        lines += [escape(line, MAX_LINE) for line in found.text().split("\n")]
    return lines
