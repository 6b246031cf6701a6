"""An official grading inside Gradescope's default container: its wall time and peak memory.

    python benchmarks/bench_gradescope.py [--base-image grpo-base:bookworm] [--memory 768m] [--cpus 0.5]

Builds both bundles (`python -m instructor.gradescope`, students' and `--allow-reference`) into
images as Gradescope does (`instructor.rehearsal`), then grades, each in a fresh container with
Docker's default security, `--network none` and the given limits: the solution notebooks (check
bundle), an independent correct implementation in one .py (tests/autograder_cases/_impl.py), the
blank release notebooks, and that implementation with a compute_entropy that hoards memory until
it dies. Peak memory is the container's cgroup's (every process of the grading together); wall
time is run_autograder's. Prints a table and the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from instructor.gradescope import build  # noqa: E402
from instructor.rehearsal import build_image, run_submission  # noqa: E402

HOG = ("\n\ndef compute_entropy(logits):\n    hoard = []\n    while True:\n"
       "        hoard.append(b'x' * (32 * 2**20))\n")


def submissions(folder: Path) -> dict[str, tuple[str, Path]]:
    """{case: (bundle kind, upload folder)}."""
    implementation = (ROOT / "tests" / "autograder_cases" / "_impl.py").read_text()
    implementation += "\n\nglobals().update(build())\n"
    cases = {}
    for name, source in (("independent .py", implementation), ("memory hog .py", implementation + HOG)):
        upload = folder / name.replace(" ", "_")
        upload.mkdir()
        (upload / "submission.py").write_text(source)
        cases[name] = ("student", upload)
    for name, notebooks, kind in (("solutions", "solutions", "check"), ("blank", "notebooks", "student")):
        upload = folder / name
        shutil.copytree(ROOT / notebooks, upload, ignore=shutil.ignore_patterns(".*"))
        cases[name] = (kind, upload)
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-image", default="grpo-base:bookworm")
    parser.add_argument("--memory", default="768m")
    parser.add_argument("--cpus", default="0.5")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        images = {}
        for kind in ("student", "check"):
            build(folder / f"{kind}.zip", allow_reference=kind == "check")
            images[kind] = build_image(folder / f"{kind}.zip", args.base_image)
        rows = []
        for name, (kind, upload) in submissions(folder).items():
            outcome = run_submission(images[kind], upload, args.memory, args.cpus)
            results = outcome["results"]
            score = (f"{results['score']:g} / {sum(t['max_score'] for t in results['tests']):g}"
                     if results else "no results.json")
            tier = (results or {}).get("extra_data", {}).get("isolation_tier") or "-"
            peak = outcome["peak_bytes"] / 2**20 if outcome["peak_bytes"] else float("nan")
            rows.append((name, score, tier, outcome["wall_s"] or float("nan"), peak,
                         "yes" if outcome["oom_killed"] else "no"))
    print(f"\ncontainer: --memory {args.memory} --cpus {args.cpus} --network none, "
          f"base image {args.base_image}")
    print(f"{'submission':<18}{'score':>12}  {'tier':<18}{'wall s':>8}{'peak MiB':>10}{'OOM kill':>10}")
    for name, score, tier, wall, peak, oom in rows:
        print(f"{name:<18}{score:>12}  {tier:<18}{wall:>8.1f}{peak:>10.0f}{oom:>10}")
    print(f"\nmachine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")


if __name__ == "__main__":
    main()
