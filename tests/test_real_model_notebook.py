"""Notebook 10's first cell, which brings the course into a hosted runtime that has only torch.

- its torch range is pyproject.toml's, and its verdict on a runtime's torch reads the minor
  version (a verdict that reads the major version only keeps torch 2.11: caught below);
- slow: in a fresh virtualenv that holds torch and no clone, the cell installs the course from an
  archive of this checkout (what `git archive` makes), and the installed course trains.

The notebook itself runs headless in tests/test_notebooks.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import nbformat
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO_ROOT / "solutions" / "10_real_model.ipynb"
UNSET = "COURSE_SOURCE = None\n"


def install_cell() -> str:
    cell = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.get("id") == "09_install")
    assert cell.source.count(UNSET) == 1, "the cell's one setting is COURSE_SOURCE"
    return cell.source


def cell_namespace() -> dict:
    """The cell run here, where `course` is importable: it installs nothing."""
    namespace: dict = {}
    exec(compile(install_cell(), "09_install", "exec"), namespace)
    return namespace


def test_the_cells_torch_range_is_pyprojects():
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert re.findall(r'^    "(torch[^"]*)",$', pyproject, re.M) == ["torch>=2.13,<2.15"]
    assert cell_namespace()["TORCH_RANGE"] == ((2, 13), (2, 15))


def check_torch_note(note) -> None:
    """Raise AssertionError unless `note` keeps 2.13.x and 2.14.x and names every other torch."""
    for version in ("2.13.0", "2.14.1+cu128", "2.13.0+cpu"):
        assert note(version).startswith("keeping the runtime's torch"), version
    for version in ("2.11.0+cu130", "2.9.1", "2.15.0", "3.0.0"):
        assert note(version).startswith(f"torch {version} is outside"), version
        assert "It is kept" in note(version) and "pip install 'torch>=2.13,<2.15'" in note(version)
    assert "installing torch>=2.13,<2.15" in note(None)


def major_only_torch_note(version: str | None) -> str:
    """The bug: a torch of the right major version counts as supported."""
    if version is not None and version.startswith("2."):
        return f"keeping the runtime's torch {version}: the course supports it"
    return f"torch {version} is outside ... It is kept ... pip install 'torch>=2.13,<2.15'"


def test_the_runtimes_torch_is_kept_in_range_and_named_outside_it(capsys):
    namespace = cell_namespace()
    assert "nothing to install" in capsys.readouterr().out
    check_torch_note(namespace["torch_note"])
    with pytest.raises(AssertionError, match="2.11.0"):
        check_torch_note(major_only_torch_note)


def checkout_archive(path: Path) -> Path:
    """A .tar.gz of the checkout's files as `git archive --prefix=grpo-course/` lays them out,
    with this working tree's contents (tracked and new files that git does not ignore)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                            cwd=REPO_ROOT, capture_output=True, check=True).stdout.decode()
    with tarfile.open(path, "w:gz") as archive:
        for name in filter(None, listed.split("\0")):
            if (REPO_ROOT / name).is_file():
                archive.add(REPO_ROOT / name, arcname=f"grpo-course/{name}")
    return path


@pytest.mark.slow
def test_the_install_cell_brings_the_course_into_a_fresh_runtime(tmp_path):
    """A runtime with torch and no course: the cell installs from an archive, keeps that torch,
    and the installed course (not this checkout) builds the notebook's tiny model and trains."""
    archive = checkout_archive(tmp_path / "grpo-course.tar.gz")
    venv = tmp_path / "runtime"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "torch==2.13.0"], check=True, env=env)  # the runtime's own torch
    cell = install_cell().replace(UNSET, f"COURSE_SOURCE = {str(archive)!r}\n")
    cell += "\nimport course.train\nprint('this kernel imports', course.train.__file__)\n"
    runtime = tmp_path / "content"  # a hosted runtime's working folder: no clone in it
    runtime.mkdir()
    start = time.perf_counter()
    ran = subprocess.run([python, "-c", cell], cwd=runtime, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    assert ran.returncode == 0, ran.stdout + ran.stderr
    print(f"\ninstall cell in a fresh virtualenv: {seconds:.0f} s\n{ran.stdout}")
    assert f"installed the course from {archive}" in ran.stdout
    assert "keeping the runtime's torch 2.13.0" in ran.stdout
    assert f"this kernel imports {venv}" in ran.stdout  # no restart needed
    check = ("import course, torch, json\n"
             "from course.loop.tiny_hf import build_bpe_tokenizer, build_tiny_causal_lm, synthetic_gsm8k\n"
             "from course.loop.tiny_hf import write_jsonl\n"
             "from course.loop.train import TrainConfig, train\n"
             "records = synthetic_gsm8k(40, seed=1)\n"
             "tok = build_bpe_tokenizer([r['question'] + '\\n' + r['answer'] for r in records], 400)\n"
             "build_tiny_causal_lm('qwen2', tok, hidden_size=32, heads=4).save_pretrained('m')\n"
             "tok.save_pretrained('m')\n"
             "write_jsonl(records, 'd.jsonl')\n"
             "summary = train(TrainConfig(model='m', task='gsm8k', data='d.jsonl', steps=1,\n"
             "    prompts_per_step=2, group_size=2, max_new_tokens=8, eval_problems=2,\n"
             "    eval_samples=1, eval_every=0, overlong='soft', overlong_buffer=4), progress=False)\n"
             "print(course.__file__, torch.__version__, sorted(summary)[:2])\n")
    trained = subprocess.run([python, "-c", check], cwd=runtime, env=env, capture_output=True,
                             text=True)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert str(venv) in trained.stdout and "2.13.0" in trained.stdout, trained.stdout
