"""What the instructors' guide and the edition's README say about practice grades: the notebook's check cells (and nbgrader) are
practice, they match the official grade for honest work only, and the official grade counts."""

from pathlib import Path

from instructor.edition import readme

ROOT = Path(__file__).resolve().parent.parent


def test_the_readmes_say_check_cells_are_practice_and_the_official_grade_counts():
    text = " ".join((ROOT / "docs" / "instructors.md").read_text(encoding="utf-8").split())
    assert "The check cells (and `nbgrader autograde`) are a PRACTICE grade" in text
    assert "match `pytest autograder --official` for honest work only" in text
    assert "the official grade is the one that counts" in text
    assert "gives the same total as" not in text
    edition = " ".join(readme(()).split())
    assert "match the official grade for honest work only" in edition
    assert "The official grade is the one that counts" in edition
