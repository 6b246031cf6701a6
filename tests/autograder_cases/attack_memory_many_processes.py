"""Attack: six processes of 200 MiB each, every one under a per-process limit of 256 MiB."""
import os
import time


def compute_entropy(logits):
    pids = []
    for _ in range(6):
        pid = os.fork()
        if pid == 0:
            try:
                block = bytearray(200 * 2**20)
                for index in range(0, len(block), 4096):  # resident, not only mapped
                    block[index] = 1
                time.sleep(3)
            finally:
                os._exit(0)
        pids.append(pid)
    ended = [os.waitpid(pid, 0)[1] for pid in pids]
    raise RuntimeError(f"statuses of the six: {ended}")
