"""Check notebook 01 the way a student sees it: JupyterLab in headless Chromium.

    python tools/browser_check.py [--screenshot PATH] [--notebook solutions/01_tokenization.ipynb]

Starts JupyterLab on 127.0.0.1 with a random token, in a throw-away folder holding a copy of the
notebook (nothing is written into the repository or the user's Jupyter settings), opens it in
Debian's Chromium (driven by selenium through Debian's chromedriver; nothing is downloaded), runs
every cell, reads the self-check cell's output and saves a screenshot of it, outside the
repository. Prints one JSON line and exits 0 when the check cell printed full marks and no cell
raised. Needs `apt-get install chromium chromium-driver` and `pip install selenium`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1000")
# Render every cell (no windowing), so the check cell is in the page wherever it is; no news prompt.
LAB_SETTINGS = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
                "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"}}
SCORE = re.compile(r"(\w+): (\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) points")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(root: Path, port: int, token: str, home: Path) -> subprocess.Popen:
    for name, settings in LAB_SETTINGS.items():
        path = home / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--expose-app-in-browser",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # CI and containers run as root
    log = (home / "lab.log").open("w")
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_for_server(port: int, token: str, lab: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lab.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-5:])
            raise RuntimeError(f"JupyterLab exited with status {lab.returncode}:\n{tail}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"JupyterLab did not answer on port {port} within {timeout:.0f} s")


def browser(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


RUN_ALL = """
const done = arguments[arguments.length - 1];
const app = window.jupyterapp;
const panel = app && app.shell.currentWidget;
if (!panel || !panel.sessionContext) { done("no notebook"); return; }
panel.sessionContext.ready
  .then(() => app.commands.execute("notebook:run-all-cells"))
  .then(() => done("ok"), (error) => done(String(error)));
"""

SHOW_CHECK_CELL = """
const cells = [...document.querySelectorAll(".jp-Notebook .jp-Cell")];
const cell = cells.find((c) => c.innerText.includes("self_check("));
if (!cell) return null;
cell.scrollIntoView({block: "start"});
window.scrollBy(0, -60);
const output = cell.querySelector(".jp-OutputArea");
return output ? output.innerText : "";
"""


def check(notebook: Path, screenshot: Path, timeout: float) -> dict:
    work = Path(tempfile.mkdtemp(prefix="grpo_browser_"))
    root = work / "notebooks"
    root.mkdir()
    shutil.copyfile(notebook, root / notebook.name)
    port, token = free_port(), secrets.token_hex(16)
    lab = start_lab(root, port, token, work)
    driver = None
    try:
        wait_for_server(port, token, lab, work / "lab.log")
        driver = browser(work / "chromium-profile")
        driver.set_script_timeout(timeout)
        driver.get(f"http://127.0.0.1:{port}/lab/tree/{notebook.name}?token={token}")
        wait_until(lambda: driver.execute_script(
            "return !!(window.jupyterapp && window.jupyterapp.shell.currentWidget"
            " && window.jupyterapp.shell.currentWidget.sessionContext)"), 90, "the notebook to open")
        started = driver.execute_async_script(RUN_ALL)
        if started != "ok":
            raise RuntimeError(f"running the cells failed: {started}")
        # run-all stops at the first error, as it does for a student: then the check cell stays empty
        errors_js = ("return [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type=\"application/"
                     "vnd.jupyter.stderr\"]')].map((e) => e.innerText).filter((t) => t.includes('Error'))")
        wait_until(lambda: SCORE.search(driver.execute_script(SHOW_CHECK_CELL) or "")
                   or driver.execute_script(errors_js), timeout, "the check cell's output or an error")
        time.sleep(1)  # let the layout settle before the picture
        output = driver.execute_script(SHOW_CHECK_CELL) or ""
        driver.save_screenshot(str(screenshot))
        errors = driver.execute_script(errors_js)
        score = SCORE.search(output)
        return {"notebook": notebook.name, "check_output": output.strip().splitlines(),
                "score": score.group(0) if score else None,
                "full_marks": bool(score) and float(score.group(2)) == float(score.group(3)),
                "errors": errors, "screenshot": str(screenshot)}
    finally:
        if driver is not None:
            driver.quit()
        lab.terminate()
        try:
            lab.wait(timeout=20)
        except subprocess.TimeoutExpired:
            lab.kill()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=REPO_ROOT / "solutions" / "01_tokenization.ipynb")
    parser.add_argument("--screenshot", type=Path,
                        default=Path(tempfile.gettempdir()) / "grpo_browser_check.png")
    parser.add_argument("--timeout", type=float, default=240, help="seconds to wait for the check cell")
    args = parser.parse_args(argv)
    screenshot = args.screenshot.resolve()
    if screenshot.is_relative_to(REPO_ROOT):
        parser.error(f"--screenshot {screenshot} is inside the repository; screenshots are not committed")
    if not args.notebook.is_file():
        parser.error(f"--notebook {args.notebook} is not a file")
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        parser.error(f"{missing} not found: apt-get install -y chromium chromium-driver")
    result = check(args.notebook.resolve(), screenshot, args.timeout)
    print(json.dumps(result))
    return 0 if result["full_marks"] and not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
