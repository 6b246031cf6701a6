"""Notebook 01 in a real browser: `tools/browser_check.py` starts JupyterLab, opens the notebook in
headless Chromium, runs every cell and reads the self-check cell's output off the page.

Skipped where Debian's chromium and chromium-driver (or the selenium package) are not installed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "tools" / "browser_check.py"
MISSING = [str(p) for p in (Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")) if not p.exists()]
if importlib.util.find_spec("selenium") is None:
    MISSING.append("the selenium package")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)} (apt-get install -y "
                                 "chromium chromium-driver; pip install selenium)")]


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=420)


def test_notebook_01_check_cell_passes_in_chromium(tmp_path):
    screenshot = tmp_path / "notebook01.png"
    run = run_check("--screenshot", str(screenshot))
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["full_marks"] and result["errors"] == [], result
    assert any(line.startswith("PASS") for line in result["check_output"]), result["check_output"]
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_failing_check_cell_is_reported(tmp_path):
    """The blank release: the check cell fails, and the script says so (exit 1), it does not pass."""
    screenshot = tmp_path / "blank01.png"
    run = run_check("--notebook", str(REPO_ROOT / "notebooks" / "01_tokenization.ipynb"),
                    "--screenshot", str(screenshot))
    assert run.returncode == 1, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert screenshot.exists()


def test_screenshots_stay_outside_the_repository():
    run = run_check("--screenshot", str(REPO_ROOT / "shot.png"))
    assert run.returncode == 2 and "inside the repository" in run.stderr
    assert not (REPO_ROOT / "shot.png").exists()
