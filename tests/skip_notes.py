"""What a test run says at its end about the tests it skipped for want of a part of this machine."""

from __future__ import annotations


def tier2_note(skip_reasons: list[str]) -> list[str]:
    """Lines for the end of a test run: how many tests tier 2 of the sandbox skipped, why, and what
    runs them; none when it skipped none. (pytest lists skip reasons only with -rs.)"""
    reasons = [r.removeprefix("Skipped: ") for r in skip_reasons if "tier 2" in r or "landlock" in r]
    if not reasons:
        return []
    why = max(set(reasons), key=reasons.count)
    lines = [f"{len(reasons)} tests of the sandbox's tier 2 were skipped: {why}"]
    if "cannot run this Python" in why:
        lines.append("to run them, make the virtualenv from a Python every user can read, outside "
                     "/root: /usr/bin/python3 -m venv .venv (as .ci/run does), then install again")
    return lines



def container_note(skip_reasons: list[str]) -> list[str]:
    """Lines for the end of a test run: how many of tests/test_container.py's gradings in a Docker
    container were skipped, and why (the first reason each fixture gave); none when none was."""
    reasons = [r.removeprefix("Skipped: ") for r in skip_reasons]
    if not reasons:
        return []
    why = max(set(reasons), key=reasons.count)
    return [f"{len(reasons)} tests of grading in a Docker container (tests/test_container.py) were "
            f"skipped: {why}"]
