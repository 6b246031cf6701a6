"""The product reads at the declared width: ruff's E501 (100 columns, pyproject.toml) holds
course/, autograder/ and instructor/, run here so that the suite fails where a line grows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("course", "autograder", "instructor")


def test_no_product_line_is_over_100_characters():
    ruff = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True)
    if ruff.returncode != 0:
        pytest.skip("ruff is not installed (the dev extra has it)")
    found = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "E501",
                            "--output-format", "concise", *PRODUCT],
                           cwd=ROOT, capture_output=True, text=True)
    assert found.returncode == 0, found.stdout


def test_the_width_check_sees_a_long_line(tmp_path):
    (tmp_path / "wide.py").write_text("x = " + "1 + " * 30 + "1\n")
    found = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "E501",
                            "--line-length", "100", "--no-cache", str(tmp_path / "wide.py")],
                           capture_output=True, text=True)
    assert found.returncode == 1 and "E501" in found.stdout
