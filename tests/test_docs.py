"""The front door and the guides: short, every link followed, and numbers that agree.

The README is a front door (what this is, the two commands, a path for each kind of user); the
guides in docs/ carry the detail, and measured numbers live in benchmarks/README.md alone.
"""

import re
import subprocess
from pathlib import Path

import pytest

from course.registry import POINTS

ROOT = Path(__file__).resolve().parent.parent
GUIDES = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *GUIDES]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")  # [text](target) and ![alt](target)


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    for heading in ("## Set up (two commands)", "## For students", "## For graders",
                    "## For instructors"):
        assert heading in text
    for guide in ("docs/students.md", "docs/grading.md", "docs/instructors.md",
                  "docs/real_models.md", "docs/architecture.md", "benchmarks/README.md"):
        assert f"]({guide})" in text, f"the README does not lead to {guide}"
    # the extra the instructor commands need is named before them
    assert text.index('pip install -e ".[instructor]"') < text.index("python -m instructor.")


def test_the_readme_holds_no_measured_time():
    """Seconds and minutes measured on one machine belong in benchmarks/README.md, with it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.findall(r"\b\d[\d,.]* ?(?:s|seconds|core-s)\b", text) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page):
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_total_of_points_agrees_with_the_registry(page):
    """'66 in all', 'the same 66 points', 'N of the 66 points': one total, the registry's."""
    text = " ".join(page.read_text(encoding="utf-8").split())
    totals = re.findall(r"\((\d+) in all\b|the same (\d+) points|of the (\d+) points|one scale: (\d+)",
                        text)
    for found in totals:
        assert int(next(n for n in found if n)) == sum(POINTS.values()), page.name


def test_no_file_keeps_a_merge_conflict():
    """A merge's conflict markers left in a tracked text file (a guide once kept two)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    marker = re.compile(r"^(<{7} |>{7} |={7}$)", re.MULTILINE)
    kept = [name for name in tracked
            if name.endswith((".md", ".py", ".toml", ".txt", ".ipynb", ".json", ".yml", ".cfg"))
            and marker.search((ROOT / name).read_text(encoding="utf-8", errors="replace"))]
    assert kept == []
