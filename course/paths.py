"""Where things are: the one definition of the repository's root and of the student-edition marker.

Every package (`course`, `autograder`, `instructor`) finds its files from here, so a folder moved
or renamed is changed once.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository, or a student edition's folder
EDITION_MARKER = "edition.json"  # written by `instructor.release --student-edition`
EDITION = ROOT / EDITION_MARKER  # its presence means: a student edition, graded from stored cases
# the stored cases (`instructor.fixtures`)
FIXTURES = ROOT / "autograder" / "fixtures" / "expected.pt"
SOLUTIONS = ROOT / "solutions"  # the instructor's notebooks (nbgrader source); not in an edition
CHECKPOINTS = ROOT / "course" / "checkpoints"  # shipped weights and recorded runs (package data)
