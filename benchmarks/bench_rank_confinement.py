"""What a tier-2 rank spawner's confinement costs: Landlock's one rule per ephemeral port.

`autograder.untrusted.confine.restrict_filesystem(..., tcp=True)` adds one Landlock TCP-connect
rule per port of /proc/sys/net/ipv4/ip_local_port_range (Landlock has no port ranges). This
forks a process that builds and enforces that ruleset, and one that builds the plain stage
ruleset, and prints how long each took on this machine. Linux with Landlock ABI >= 4 only.

    python benchmarks/bench_rank_confinement.py
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.untrusted import confine  # noqa: E402


def _timed(tcp: bool) -> float:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        started = time.perf_counter()
        confine._libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: Landlock needs it without root
        confine.restrict_filesystem([sys.prefix, "/usr"], tempfile.gettempdir(),
                                    confine.landlock_abi(), tcp)
        os.write(write, repr(time.perf_counter() - started).encode())
        os._exit(0)
    os.close(write)
    seconds = float(os.read(read, 64))
    os.waitpid(pid, 0)
    return seconds


def main() -> None:
    abi = confine.landlock_abi()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Landlock ABI {abi}")
    if abi < 4:
        print("Landlock ABI < 4: no TCP rules to measure")
        return
    ports = confine.ephemeral_ports()
    print("| ruleset | rules | seconds (best of 5) |\n|---|---|---|")
    for tcp in (False, True):
        best = min(_timed(tcp) for _ in range(5))
        rules = f"paths + {len(ports) + 1} ports" if tcp else "paths"
        print(f"| {'rank spawner (tcp)' if tcp else 'stage child'} | {rules} | {best:.4f} |")


if __name__ == "__main__":
    main()
