"""How long a release of the notebooks takes: `instructor.nbgrader_release.generate_release` (what
`python -m instructor.release` runs) beside plain `nbgrader generate_assignment`, which an
instructor would otherwise run and which makes a gradebook first.

    python benchmarks/bench_release.py [--repeats 3]

Both run the real nbgrader CLI in a subprocess on `solutions/`, alternately, so that a busy spell of
the machine falls on both. Prints a table of wall times, whether the released notebooks are the same
bytes as `notebooks/`, and the machine it ran on.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from course.cli import Parser, flag_type, out_of_range
from instructor.nbgrader_release import generate_release, solution_notebooks

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS, NOTEBOOKS = ROOT / "solutions", ROOT / "notebooks"


def same_as_notebooks(folder: Path) -> bool:
    """The released notebooks in `folder` are byte for byte those in notebooks/."""
    released = {p.name: p.read_bytes() for p in folder.glob("*.ipynb")}
    return released == {p.name: p.read_bytes() for p in NOTEBOOKS.glob("*.ipynb")}


def course_release(out: Path) -> Path:
    generate_release(SOLUTIONS, out)
    return out


def nbgrader_with_gradebook(out: Path) -> Path:
    """The same release with the gradebook nbgrader's own command makes first."""
    generate_release(SOLUTIONS, out, gradebook=True)
    return out


VARIANTS = {"instructor.release (--no-db)": course_release,
            "nbgrader generate_assignment": nbgrader_with_gradebook}


def main() -> None:
    parser = Parser(prog="bench_release.py", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=flag_type(int, lambda n: out_of_range(n, 1, True)), default=3,
                        help="releases per variant (default 3)")
    args = parser.parse_args()
    import nbgrader
    import torch

    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, python {platform.python_version()}, torch {torch.__version__}, "
          f"nbgrader {nbgrader.__version__}")
    print(f"{len(solution_notebooks(SOLUTIONS))} solution notebooks, {args.repeats} releases each")
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    same: dict[str, bool] = {name: True for name in VARIANTS}
    for _ in range(args.repeats):
        for name, release in VARIANTS.items():
            with tempfile.TemporaryDirectory() as folder:
                started = time.perf_counter()
                released = release(Path(folder))
                times[name].append(time.perf_counter() - started)
                same[name] = same[name] and same_as_notebooks(released)
    print(f"{'release':<32}{'median s':>10}{'min s':>8}  same bytes as notebooks/")
    for name in VARIANTS:
        print(f"{name:<32}{statistics.median(times[name]):>10.1f}{min(times[name]):>8.1f}  {same[name]}")


if __name__ == "__main__":
    main()
