"""The Docker images tests/test_container.py grades in, made once per machine and reused.

The base image is Debian bookworm from debootstrap, imported into Docker (no container registry
is needed); on it, one image per Gradescope bundle (the students' and the check bundle of
`--allow-reference`), tagged by the bundle's digest. Making them on a fresh machine takes minutes
that are mostly waiting on the Debian archive and the disk, so the test session starts this
module in the background (`python tests/container_images.py`, from tests/conftest.py) while the
other tests use the CPU. Every maker holds one lock file, so the container tests' fixture waits
for a build under way and then finds the images made; where none ran, the fixture makes them.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from instructor.rehearsal import WHEELS_CACHE

ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = "grpo-base:bookworm"
BASE_PACKAGES = "python3,python3-venv,python3-pip,libseccomp2,bubblewrap,ca-certificates"
LOCK = WHEELS_CACHE / "images.lock"  # beside the rehearsal's wheels: kept, as they are


def docker_up() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def can_make_base() -> bool:
    """This user can run debootstrap (root, and it is installed)."""
    return shutil.which("debootstrap") is not None and os.geteuid() == 0


def image_exists(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def debian_mirror() -> str:
    """The Debian archive apt on this machine uses (deb822 .sources or a sources.list line)."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*.list")]:
        if path.exists():
            for line in path.read_text().splitlines():
                parts = line.split()
                if parts[:1] == ["deb"] and "security" not in line:
                    return next(p for p in parts[1:] if "://" in p)
    return "http://deb.debian.org/debian"


@contextmanager
def _held():
    """The makers' lock: one maker at a time, on this machine (an flock: freed by any exit)."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def timed(step: str, started: float) -> None:
    print(f"[container] {step}: {time.monotonic() - started:.1f} s", flush=True)


def _run_in_own_group(argv: list[str], timeout: float) -> None:
    """Run `argv` in a process group of its own; on any exception here (a timeout, SIGTERM's
    SystemExit) the whole group is killed before it propagates: no dpkg left in the chroot."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        output, _ = child.communicate(timeout=timeout)
    except BaseException:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise
    if child.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed (exit {child.returncode}): {output[-1500:]!r}")


def _mounts_under(folder: Path) -> list[str]:
    points = [line.split()[1].encode().decode("unicode_escape")  # /proc/mounts escapes as \040
              for line in Path("/proc/self/mounts").read_text().splitlines()]
    return sorted((p for p in points if Path(p) == folder or folder in Path(p).parents),
                  key=len, reverse=True)


def _remove_rootfs(rootfs: Path) -> None:
    """Remove a root filesystem debootstrap may have left mounts in (its /proc, /sys, a bound
    /dev): unmounted first, and never removed through a mount that stays."""
    for point in _mounts_under(rootfs):
        subprocess.run(["umount", "-l", point], capture_output=True)
    if _mounts_under(rootfs):
        print(f"[container] left {rootfs}: still mounted there: {_mounts_under(rootfs)}")
        return
    shutil.rmtree(rootfs, ignore_errors=True)


def _make_base() -> None:
    started = time.monotonic()
    rootfs = Path(tempfile.mkdtemp(prefix="grpo-rootfs-")).resolve()
    try:
        _run_in_own_group(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}",
                           "bookworm", str(rootfs), debian_mirror()], timeout=1800)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "-", BASE_IMAGE], stdin=tar.stdout, check=True,
                       capture_output=True, timeout=600)
        tar.wait()
    finally:
        _remove_rootfs(rootfs)
    timed("debootstrap and docker import of the base image", started)


def make_images(folder: Path) -> dict[str, str]:
    """{"student": tag, "check": tag}: the bundles' images (built into `folder`), on the base
    image, each made where this machine does not hold it yet. Raises RuntimeError where the base
    image is missing and this user cannot debootstrap one."""
    from instructor.gradescope import build
    from instructor.rehearsal import build_image

    with _held():
        if not image_exists(BASE_IMAGE):
            if not can_make_base():
                raise RuntimeError(f"no image {BASE_IMAGE} and no root debootstrap to make one")
            _make_base()
        made = {}
        for kind in ("student", "check"):
            started = time.monotonic()
            bundle = folder / f"{kind}.zip"
            build(bundle, allow_reference=kind == "check")
            made[kind] = build_image(bundle, BASE_IMAGE)
            timed(f"docker build of the {kind} bundle (or the one made before)", started)
        return made


def start_in_background() -> subprocess.Popen | None:
    """Start making the images in a process of its own; None where this machine cannot (no
    running dockerd, or no base image and no debootstrap). Its output is dropped: where it fails,
    the fixture's own attempt fails the same way, and says why."""
    if shutil.which("docker") is None or not docker_up():
        return None
    if not (image_exists(BASE_IMAGE) or can_make_base()):
        return None
    return subprocess.Popen([sys.executable, __file__], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def stop(maker: subprocess.Popen) -> None:
    """End a background maker that still runs: SIGTERM, on which it kills its debootstrap and
    removes the temporary root filesystem; its whole group killed where it has not in 2 minutes."""
    if maker.poll() is None:
        maker.terminate()
        try:
            maker.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(maker.pid, signal.SIGKILL)
            maker.wait()


def _exit_on_terminate(signum, frame):
    raise SystemExit(128 + signum)  # unwinds the TemporaryDirectory: no root filesystem left


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_terminate)
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="grpo-bundles-") as bundles:
        print(make_images(Path(bundles)), flush=True)
