"""benchmarks/gpu_check.py, rehearsed on the CPU, and the float32 arithmetic a grade on CUDA assumes.

- the dry run (`--dry-run`: device cpu, toy sizes) runs every step the GPU run does and records
  each: the gpu tests, the two gradings at full marks for the checks they ran, the mutants' same
  verdicts, the benchmark's rows (slow: about a minute of CPU);
- a missing carried wheel and a machine without CUDA are one-line usage errors naming the cause;
- `use_ieee_float32` turns TF32 off (torch's float32 matmul precision "highest", cuDNN's TF32
  off), and the grading session and the sandbox's template call it before any check: a session
  started in a process that had TF32 on leaves it off.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autograder.protocol.precision import use_ieee_float32

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import gpu_check  # noqa: E402


def test_a_missing_carried_wheel_is_named(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "CARRIED", {"json": "json", "no_such_module_x": "no-such-wheel"})
    assert gpu_check.missing_modules(gpu_check.CARRIED) == ["no-such-wheel"]
    monkeypatch.setattr(gpu_check, "missing_modules", lambda: ["no-such-wheel"])
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(["--dry-run"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "missing packages: no-such-wheel" in err
    assert "--wheels DIR" in err and "Traceback" not in err


def test_wheels_must_be_a_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "missing_modules", lambda: ["math-verify"])
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(["--dry-run", "--wheels", str(tmp_path / "none")])
    assert exit_info.value.code == 2 and "argument --wheels" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_cuda_the_gpu_run_says_to_rehearse(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main([])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "sees no CUDA device" in err and "--dry-run" in err


def test_the_checks_torch_range_is_pyprojects():
    assert '"torch>=2.13,<2.15"' in (REPO_ROOT / "pyproject.toml").read_text()
    assert gpu_check.TORCH_RANGE == ((2, 13), (2, 15))


@pytest.mark.slow
def test_the_dry_run_runs_and_records_every_step(tmp_path):
    ran = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_check.py"),
                          "--dry-run", "--out", str(tmp_path)], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["dry_run"] and summary["device"] == "cpu" and summary["torch"] == torch.__version__
    steps = summary["steps"]
    assert list(steps) == ["gpu-tests", "reference", "solutions", "mutants", "bench"]
    assert all(step["exit"] == 0 for step in steps.values()), steps
    assert "skipped" in steps["gpu-tests"]["result"]  # no CUDA here: the gpu tests skip
    for grading in ("reference", "solutions"):  # the tokenization stage's checks, full marks
        points, _ = steps[grading]["result"].split(" points")
        assert points.split("/")[0] == points.split("/")[1] and ", 0 failed" in steps[grading]["result"]
    assert steps["mutants"]["result"] == "2/2 same verdicts"
    rows = [row["setting"] for row in json.loads((tmp_path / "bench.json").read_text())]
    assert [r for r in rows if r.startswith("train step")] == [
        f"train step, chunk={c}, checkpointing={k}" for c in (0, 256) for k in (False, True)]
    assert "head: Cut Cross-Entropy, Liger fused linear CE" in rows
    assert "machine:" in ran.stdout and "torch 2.13" in ran.stdout
    for name in steps:
        assert (tmp_path / f"{name}.log").read_text().startswith("$ ")


def test_ieee_float32_turns_tf32_off():
    saved = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("high")  # TF32 for CUDA float32 matmuls
        torch.backends.cudnn.allow_tf32 = True
        use_ieee_float32()
        assert torch.get_float32_matmul_precision() == "highest"
        assert torch.backends.cudnn.allow_tf32 is False
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.allow_tf32 = saved[1]


def test_a_grading_session_turns_tf32_off():
    """The trusted side: a process with TF32 on (as a notebook or a script may leave it) starts a
    grading session; the references it judges with compute in IEEE float32."""
    script = ("import torch\n"
              "torch.set_float32_matmul_precision('high'); torch.backends.cudnn.allow_tf32 = True\n"
              "print(torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)\n"
              "from autograder.trusted.session import GradingSession\n"
              "GradingSession('tests/autograder_cases/alt_full.py').finish()\n"
              "print(torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)\n")
    ran = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[:2] == ["high True", "highest False"], ran.stdout


def test_the_sandbox_template_turns_tf32_off_before_any_child():
    """The untrusted side: the template calls it before it forks a stage child (children inherit
    torch's settings through fork)."""
    worker = ast.parse((REPO_ROOT / "autograder" / "untrusted" / "worker.py").read_text())
    template = next(n for n in ast.walk(worker) if isinstance(n, ast.FunctionDef) and n.name == "template")
    calls = [n.func.id for n in ast.walk(template) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "use_ieee_float32" in calls
    assert calls.index("use_ieee_float32") < calls.index("install_course")
