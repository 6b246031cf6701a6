"""The course on a GPU, in one command: the GPU tests, gradings on CUDA, and the real-model benchmark.

    PYTHONPATH=. python benchmarks/gpu_check.py --out gpu_check          # one GPU, about 6 minutes
    PYTHONPATH=. python benchmarks/gpu_check.py --dry-run --out /tmp/x   # the same steps, CPU, toy sizes

For a machine that fetches nothing and brings its own torch: the script runs from this checkout
(PYTHONPATH), not from an install, so a torch outside pyproject.toml's range (torch>=2.13,<2.15)
still runs, and the record says it is outside. The packages the course needs beyond torch and
transformers must be importable; `CARRIED` names their wheels (all pure Python), which a
machine with network fetches with

    pip download --no-deps -d wheels math-verify latex2sympy2_extended antlr4-python3-runtime==4.13.2 \
        pyseccomp nbformat fastjsonschema

and `--wheels wheels` installs the missing ones (`pip install --no-index --no-deps`, into this
Python: the sandbox sees its packages only). Without them the script stops, naming each wheel.

Steps, each a subprocess with its own time limit and its log in OUT/<step>.log:
  gpu-tests    pytest -m gpu on tests/test_train.py and tests/test_real_models.py
  reference    pytest autograder --device cuda --submission course: full marks (66 points)
  solutions    pytest autograder --device cuda --submission solutions --allow-reference
  mutants      every mutant of tests/test_autograder.py graded on the device: the same verdict
               (the check it fails, the diagnosis it gets) as on the CPU
  bench        benchmarks/bench_real_model.py: steps/s and peak memory of a Qwen2.5-0.5B-shaped
               model in float32, plain and chunked head, with and without checkpointing; the
               log-prob head at V = 151,936 beside Liger's and Cut Cross-Entropy's, where importable
Prints a table and the machine; writes OUT/summary.json. `--dry-run`: device cpu, the gradings of
one function's checks, two mutants, the benchmark at toy sizes (tests/test_gpu_check.py runs it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH_RANGE = ((2, 13), (2, 15))  # pyproject.toml: torch>=2.13,<2.15
# module -> the wheel that provides it: what the course and its tests import beyond torch and
# transformers (and their own dependencies: tokenizers, safetensors, numpy, sympy)
CARRIED = {"math_verify": "math-verify", "latex2sympy2_extended": "latex2sympy2_extended",
           "antlr4": "antlr4-python3-runtime==4.13.2", "pyseccomp": "pyseccomp",
           "nbformat": "nbformat", "fastjsonschema": "fastjsonschema", "pytest": "pytest",
           "matplotlib": "matplotlib", "tqdm": "tqdm"}
DRY_FUNCTION = "tokenize_prompt_and_output"  # the dry run grades this function's checks only
DRY_MUTANTS = ("biased_std", "entropy_log2")
BUDGET_S = 480  # the whole check, on one GPU
DRY_RUN_SLOWER = 4  # a dry run's step limits: a shared 2-core CPU imports torch slowly, and has no budget


class UsageError(Exception):
    """A bad flag or a missing wheel: one line for the user, no traceback."""


def missing_modules(needed: dict[str, str] = CARRIED) -> list[str]:
    """The wheels of `needed` whose module this Python cannot import."""
    return [wheel for module, wheel in needed.items() if importlib.util.find_spec(module) is None]


def install_wheels(folder: Path, wheels: list[str]) -> None:
    if not folder.is_dir():
        raise UsageError(f"argument --wheels: {folder} is not a folder")
    names = [re.split(r"[=<>]", wheel)[0] for wheel in wheels]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--find-links", str(folder), *names], check=True)


def machine(device: str) -> dict:
    import torch
    import transformers

    version = tuple(int(n) for n in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
    supported = TORCH_RANGE[0] <= version < TORCH_RANGE[1]
    gpu = torch.cuda.get_device_name() if device == "cuda" else "none (dry run on the CPU)"
    return {"machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs",
            "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "transformers": transformers.__version__, "gpu": gpu,
            "torch_note": "in the course's range" if supported else
            "OUTSIDE the course's range (torch>=2.13,<2.15): run from the checkout, untested"}


def steps(device: str, out: Path, dry_run: bool) -> list[tuple[str, list[str], int]]:
    """(name, argv, time limit in seconds) of each step."""
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    select = ["-k", DRY_FUNCTION] if dry_run else []
    grade = [*pytest, "autograder", "--device", device, *select]
    bench = [sys.executable, str(ROOT / "benchmarks" / "bench_real_model.py"), "--device", device,
             "--dtype", "float32", "--json", str(out / "bench.json")]
    mutants = [sys.executable, __file__, "--grade-mutants", str(out / "mutants.json"),
               "--device", device, *(["--dry-run"] if dry_run else [])]
    return [
        ("gpu-tests", [*pytest, "-m", "gpu", "tests/test_train.py", "tests/test_real_models.py"], 90),
        ("reference", [*grade, "--submission", "course", "--results", str(out / "reference.json")],
         100),
        ("solutions", [*grade, "--submission", "solutions", "--allow-reference",
                       "--results", str(out / "solutions.json")], 110),
        ("mutants", mutants, 110),
        ("bench", [*bench, *(["--toy", "--batch", "4", "--length", "8"] if dry_run else [])], 110),
    ]


def verdict(name: str, completed: subprocess.CompletedProcess | None, out: Path) -> str:
    """One line: what the step's own record says."""
    if completed is None:
        return "TIMED OUT"
    log = completed.stdout + completed.stderr
    if name == "gpu-tests":
        counts = re.findall(r"(\d+) (passed|failed|skipped|deselected|error)", log)
        return ", ".join(f"{n} {what}" for n, what in counts) or f"exit {completed.returncode}"
    if name in ("reference", "solutions"):
        path = out / f"{name}.json"
        if not path.is_file():
            return f"no results.json (exit {completed.returncode})"
        document = json.loads(path.read_text())
        top = sum(t["max_score"] for t in document["tests"])
        failed = [t["name"] for t in document["tests"] if t["status"] == "failed"]
        tier = document["extra_data"]["isolation_tier"] or "none (practice)"
        return (f"{document['score']:g}/{top:g} points, {len(failed)} failed, sandbox: {tier}"
                + (f"; failed: {failed[:3]}" if failed else ""))
    if name == "mutants":
        record = json.loads((out / "mutants.json").read_text())
        differ = [bug for bug, why in record.items() if why != "same"]
        return f"{len(record) - len(differ)}/{len(record)} same verdicts" + (
            f"; differ: {differ}" if differ else "")
    rows = json.loads((out / "bench.json").read_text())
    return "; ".join(f"{r['setting']}: " + ("skipped" if r["seconds"] is None else
                                            f"{1 / r['seconds']:.2f}/s, {r['peak_memory']}")
                     for r in rows)


def grade_mutants(record: Path, device: str, dry_run: bool) -> None:
    """Grade tests/test_autograder.py's mutants on `device`; record per mutant "same" (the check
    it fails and its diagnosis, as the CPU test asserts them) or why not."""
    sys.path.insert(0, str(ROOT / "tests"))
    from shared_template import SharedTemplates
    from test_autograder import CASES, MUTANTS, test_mutant_loses_points_with_its_diagnosis

    chosen = DRY_MUTANTS if dry_run else tuple(MUTANTS)
    jobs = {bug: ((str(CASES / f"mutant_{bug}.py"), (MUTANTS[bug][0],)),
                  {"seed": 1234, "device": device}) for bug in chosen}
    with SharedTemplates(threads=2 if dry_run else 8, device=device) as templates:
        graded = templates.grade_all(jobs)
    verdicts = {}
    for bug in chosen:
        try:
            test_mutant_loses_points_with_its_diagnosis(bug, graded)
            verdicts[bug] = "same"
        except AssertionError as error:
            verdicts[bug] = str(error).splitlines()[0]
    record.write_text(json.dumps(verdicts, indent=1) + "\n")


def run(out: Path, device: str, dry_run: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT),
                                                                      os.environ.get("PYTHONPATH"))))}
    summary = {"dry_run": dry_run, "device": device, **machine(device), "steps": {}}
    print(f"machine: {summary['machine']}, Python {summary['python']}; GPU: {summary['gpu']}")
    print(f"torch {summary['torch']} (CUDA {summary['cuda']}): {summary['torch_note']}; "
          f"transformers {summary['transformers']}")
    deadline = time.monotonic() + (float("inf") if dry_run else BUDGET_S)
    for name, argv, limit in steps(device, out, dry_run):
        started = time.monotonic()
        limit = limit * DRY_RUN_SLOWER if dry_run else limit
        try:
            completed = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                                       timeout=max(1, min(limit, deadline - started)))
        except subprocess.TimeoutExpired as expired:
            completed = None
            text = (expired.stdout or b"").decode() + (expired.stderr or b"").decode()
        else:
            text = completed.stdout + completed.stderr
        (out / f"{name}.log").write_text(f"$ {' '.join(argv)}\n{text}")
        try:
            line = verdict(name, completed, out)
        except (OSError, ValueError, KeyError) as error:
            line = f"no record ({type(error).__name__}: {error}); see {name}.log"
        seconds = time.monotonic() - started
        summary["steps"][name] = {"seconds": round(seconds, 1), "exit": None if completed is None
                                  else completed.returncode, "result": line}
        print(f"{name:<10} {seconds:>6.0f} s  {line}", flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_check")),
                        help="folder for the logs and summary.json (default: $OUT, else gpu_check)")
    parser.add_argument("--dry-run", action="store_true", help="device cpu, toy sizes")
    parser.add_argument("--wheels", type=Path, default=None, metavar="DIR",
                        help="install the missing packages of CARRIED from the wheels in DIR")
    parser.add_argument("--grade-mutants", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--device", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    device = "cpu" if args.dry_run else "cuda"
    if args.grade_mutants:  # the mutants step's own process
        grade_mutants(args.grade_mutants, args.device or device, args.dry_run)
        return 0
    try:
        missing = missing_modules()
        if missing and args.wheels:
            install_wheels(args.wheels, missing)
            missing = missing_modules()
        if missing:
            raise UsageError(f"missing packages: {', '.join(missing)}: carry their wheels and "
                             "give --wheels DIR (pure Python; see this script's docstring)")
        import torch

        if device == "cuda" and not torch.cuda.is_available():
            raise UsageError(f"torch {torch.__version__} sees no CUDA device: run on a GPU, or "
                             "give --dry-run for the CPU rehearsal")
    except UsageError as error:
        parser.error(str(error))
    summary = run(args.out, device, args.dry_run)
    print(f"recorded in {args.out}/summary.json")
    failed = [name for name, step in summary["steps"].items() if step["exit"] != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
