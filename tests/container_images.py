"""The Docker images tests/test_container.py grades in, made once per machine and reused.

The base image is Debian bookworm from debootstrap, imported into Docker (no container registry
is needed); on it, one image per Gradescope bundle (the students' and the check bundle of
`--allow-reference`), tagged by the bundle's digest, so the second bundle reuses the layer that
installs the Python environment. debootstrap mounts /proc (and, where it binds them, /dev and
/sys) inside its root filesystem: an interrupted one is killed with every process it started,
and its root filesystem is removed only once nothing is mounted there any more.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

from instructor.gradescope import build
from instructor.rehearsal import build_image, download_wheels

BASE_IMAGE = "grpo-base:bookworm"
BASE_PACKAGES = "python3,python3-venv,python3-pip,libseccomp2,bubblewrap,ca-certificates"


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


def timed(step: str, started: float) -> None:
    print(f"[container] {step}: {time.monotonic() - started:.1f} s", flush=True)


def _run_in_own_group(argv: list[str], timeout: float) -> None:
    """Run `argv` in a process group of its own; on any exception here (a timeout, Ctrl-C) the
    whole group is killed before it propagates: no dpkg left running in the chroot."""
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
    bundles = {kind: folder / f"{kind}.zip" for kind in ("student", "check")}
    for kind, bundle in bundles.items():
        build(bundle, allow_reference=kind == "check")
        with zipfile.ZipFile(bundle) as archive:
            download_wheels(archive)  # first: a machine with no CPU torch build stops here, at once
    if not image_exists(BASE_IMAGE):
        if not can_make_base():
            raise RuntimeError(f"no image {BASE_IMAGE} and no root debootstrap to make one")
        _make_base()
    made = {}
    for kind, bundle in bundles.items():
        started = time.monotonic()
        made[kind] = build_image(bundle, BASE_IMAGE)
        timed(f"docker build of the {kind} bundle (or the one made before)", started)
    return made
