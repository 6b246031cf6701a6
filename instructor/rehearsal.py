"""A local rehearsal of Gradescope: `python -m instructor.gradescope rehearse BUNDLE SUBMISSION`.

Gradescope's documented flow (https://gradescope-autograders.readthedocs.io/en/latest/specs/):
the bundle is unpacked into /autograder/source, `setup.sh` runs once as root while the image is
built, then each submission gets a fresh container, its upload copied into /autograder/submission,
`run_autograder` runs, and /autograder/results/results.json is read. Its default container limits
are 768 MB of memory and half a CPU, under Docker's default security (no user namespaces: bubblewrap
cannot start there).

The rehearsal does the same with the local Docker: `docker build` on `--base-image` (Gradescope's
is an Ubuntu image; any local image with python3, python3-venv and pip works), then one container
with Docker's default security, `--network none`, `--memory` and `--cpus`. The build installs the
Python requirements from wheels downloaded on this machine by its own pip (its configured indexes
and find-links: a CPU torch wheel on disk, say), handed to setup.sh through $GRADESCOPE_WHEELS, so
the build needs no index of its own. The peak memory is the container's cgroup's (v1:
memory.max_usage_in_bytes; v2: memory.peak), which counts every process of the grading together.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

IMAGE_PREFIX = "grpo-gradescope-rehearsal"
# what the container runs: run_autograder as Gradescope does, timed, then the cgroup's peak
MEASURED_RUN = r"""
start=$(date +%s.%N)
/autograder/source/run_autograder > /autograder/results/run_autograder.log 2>&1
echo $? > /autograder/results/exit_code
end=$(date +%s.%N)
echo "$start $end" > /autograder/results/wall
cat /sys/fs/cgroup/memory/memory.max_usage_in_bytes /sys/fs/cgroup/memory.peak \
    > /autograder/results/peak 2>/dev/null
true
"""
# setup.sh needs only itself and requirements.txt: copied first, so Docker's layer cache keeps the
# installed environment while the grader's code changes
DOCKERFILE = """FROM {base}
COPY wheels /autograder/wheels
COPY source/setup.sh source/requirements.txt /autograder/source/
RUN GRADESCOPE_WHEELS=/autograder/wheels bash /autograder/source/setup.sh \\
    && rm -rf /autograder/wheels && mkdir -p /autograder/submission /autograder/results
COPY source /autograder/source
"""
WHEELS_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "grpo-rehearsal"


class RehearsalError(RuntimeError):
    """The rehearsal could not build or run (the message says which step and why)."""


class NoCpuTorch(RehearsalError):
    """This machine's pip offers no CPU build of the torch it grades with, which is what setup.sh
    installs on Gradescope: the image would hold a GPU build, several times its memory."""


def torch_requirement() -> str:
    """The torch the image installs: this machine's version, as a CPU build. A GPU build asks for
    its CPU twin (`+cpu`), as setup.sh takes the CPU build from PyTorch's CPU index: a GPU build's
    import alone outgrows Gradescope's 768 MB. A GPU build is one with a local version of PyTorch's
    GPU indexes (`+cu130`, `+rocm6.4`, `+xpu`) or, as PyPI's Linux wheels are, one that requires
    NVIDIA's libraries (`nvidia-cudnn-cu13`, ...) under its plain version."""
    version = importlib.metadata.version("torch")
    public, _, local = version.partition("+")
    nvidia = any(r.startswith("nvidia-") for r in importlib.metadata.requires("torch") or [])
    gpu = local.startswith(("cu", "rocm", "xpu")) or nvidia
    return f"torch=={public}+cpu" if gpu else f"torch=={version}"


def _docker(*args: str, timeout: float = 1800, capture: bool = True) -> str:
    if shutil.which("docker") is None:
        raise RehearsalError("docker is not installed (Debian/Ubuntu: apt-get install docker.io)")
    done = subprocess.run(["docker", *args], capture_output=capture, text=True, timeout=timeout)
    if done.returncode != 0:
        why = (done.stderr or done.stdout or "").strip()[-1500:] if capture else ""
        raise RehearsalError(f"docker {args[0]} failed (exit {done.returncode}): {why}")
    return done.stdout if capture else ""


def download_wheels(bundle: zipfile.ZipFile) -> Path:
    """Every wheel setup.sh installs, fetched by this machine's pip (its own indexes and links).
    torch is the version this machine grades with, a CPU build (`torch_requirement`), which the
    bundle's range admits; a plain index would offer its newest CUDA build."""
    requirements = bundle.read("requirements.txt").decode().split()
    torch = torch_requirement()
    key = hashlib.sha256("\n".join([torch, *requirements]).encode()).hexdigest()[:16]
    folder = WHEELS_CACHE / f"wheels-{key}"  # kept: the next rehearsal of these requirements
    if (folder / "complete").exists():
        return folder
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:",
                           "-d", str(folder), torch, *requirements], capture_output=True, text=True)
    installed = importlib.metadata.version("torch")
    if done.returncode != 0 and torch != f"torch=={installed}":  # the CPU twin of a GPU build
        raise NoCpuTorch(f"this machine grades with torch {installed}, a GPU "
                         f"build, and its pip found no {torch} for the image (Gradescope's "
                         "setup.sh "
                         f"installs the CPU build): add PyTorch's CPU index to pip's "
                         f"--extra-index-url, or rehearse from a virtualenv with a CPU build "
                         f"(pip: {done.stderr.strip()[-300:]})")
    if done.returncode != 0:
        raise RehearsalError("pip could not download the bundle's requirements: "
                             + done.stderr.strip()[-1500:])
    (folder / "complete").write_text("")
    return folder


def build_image(bundle_path: Path, base_image: str) -> str:
    """The image Gradescope would build from this bundle (reused when it exists); its tag."""
    digest = hashlib.sha256(bundle_path.read_bytes())
    digest.update(_docker("image", "inspect", "--format", "{{.Id}}", base_image).encode())
    tag = f"{IMAGE_PREFIX}:{digest.hexdigest()[:16]}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as context:
        context = Path(context)
        with zipfile.ZipFile(bundle_path) as bundle:
            bundle.extractall(context / "source")
            for info in bundle.infolist():  # zipfile drops the executable bits
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    (context / "source" / info.filename).chmod(mode)
            shutil.copytree(download_wheels(bundle), context / "wheels")
        (context / "Dockerfile").write_text(DOCKERFILE.format(base=base_image))
        _docker("build", "-q", "-t", tag, str(context))
    return tag


def run_submission(image: str, submission: Path, memory: str, cpus: str,
                   timeout: float = 1800) -> dict:
    """Grade `submission` in a fresh container of `image`; what came out, and how it went."""
    name = f"{IMAGE_PREFIX}-{hashlib.sha256(str(submission).encode()).hexdigest()[:8]}-" \
           f"{next(tempfile._get_candidate_names())}"
    _docker("create", "--name", name, "--network", "none", "--memory", memory,
            "--memory-swap", memory, "--cpus", cpus, image, "bash", "-c", MEASURED_RUN)
    try:
        if submission.is_dir():  # the upload's files, modes kept, as Gradescope unpacks them
            _docker("cp", f"{submission}/.", f"{name}:/autograder/submission/")
        else:
            _docker("cp", str(submission), f"{name}:/autograder/submission/{submission.name}")
        _docker("start", "-a", name, timeout=timeout)
        state = json.loads(_docker("inspect", "--format", "{{json .State}}", name))
        with tempfile.TemporaryDirectory(prefix="rehearsal-results-") as out:
            _docker("cp", f"{name}:/autograder/results/.", out)
            return _read_outcome(Path(out), state)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def _read_outcome(out: Path, state: dict) -> dict:
    def text(name: str) -> str:
        path = out / name
        return path.read_text(errors="replace").strip() if path.exists() else ""

    start_end = text("wall").split()
    peaks = [int(v) for v in text("peak").split() if v.isdigit()]
    results = json.loads(text("results.json")) if text("results.json") else None
    return {"results": results, "exit_code": int(text("exit_code") or -1),
            "log": text("run_autograder.log"), "oom_killed": bool(state.get("OOMKilled")),
            "wall_s": float(start_end[1]) - float(start_end[0]) if len(start_end) == 2 else None,
            "peak_bytes": peaks[0] if peaks else None}


def table(outcome: dict) -> list[str]:
    """The result table: every stage's points, the total, the tier, the wall time and the peak."""
    from autograder.trusted.report import stage_table
    from course.registry import STAGE_OF

    results = outcome["results"]
    peak = outcome["peak_bytes"]
    lines = [f"run_autograder exit code: {outcome['exit_code']}"
             + ("  (the container hit its memory limit)" if outcome["oom_killed"] else ""),
             f"wall time of run_autograder: {outcome['wall_s']:.1f} s"
             if outcome["wall_s"] is not None else "wall time: not measured",
             f"peak memory of the container (cgroup): {peak / 2**20:.0f} MiB"
             if peak else "peak memory: the cgroup did not say"]
    if results is None:
        lines.append("NO results.json: Gradescope shows an autograder error (not a grade)")
        lines += ["last lines of run_autograder:"] + outcome["log"].splitlines()[-15:]
        return lines
    extra = results.get("extra_data", {})
    lines.append(f"isolation tier: {extra.get('isolation_tier') or 'none'}"
                 + ("  (PRACTICE grade)" if extra.get("practice") else ""))
    rows = [{"stage": STAGE_OF.get(test.get("name", "").split(":")[0], "?"),
             "status": test.get("status", "failed"), "score": test.get("score", 0.0),
             "max_score": test.get("max_score", 0.0)} for test in results.get("tests", [])]
    lines += stage_table(rows)
    lines += [f"  {line}" for line in str(results.get("output", "")).splitlines()[:6]]
    return lines


def rehearse(bundle: Path, submission: Path, base_image: str, memory: str, cpus: str) -> int:
    """Build, grade one submission, print the table; 0 when a results.json came out."""
    print(f"building the image from {bundle} on {base_image} ...", flush=True)
    image = build_image(bundle, base_image)
    print(f"grading {submission} in {image} (--network none --memory {memory} --cpus {cpus}) ...",
          flush=True)
    outcome = run_submission(image, submission, memory, cpus)
    for line in table(outcome):
        print(line)
    return 0 if outcome["results"] is not None else 1
