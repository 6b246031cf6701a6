"""The score table printed at the end of `pytest autograder` (and by notebook self-checks)."""

from __future__ import annotations

import textwrap

from autograder.reference import STAGES


def check_table(results: list[dict], width: int = 100) -> list[str]:
    lines = []
    for r in results:
        mark = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[r["status"]]
        points = "   -   " if r["status"] == "skipped" else f"{r['score']:g}/{r['max_score']:g}".center(7)
        lines.append(f"{mark} {points} {r['name']}")
        if r["status"] != "passed":
            for part in str(r["output"]).splitlines()[:12]:
                lines.extend(textwrap.wrap(part, width, initial_indent=" " * 13,
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
