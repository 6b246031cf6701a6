"""Where this process stands in torch.distributed: the one "am I distributed?" helper of the course.

Without an initialized process group every caller sees a single rank: rank 0 of a world of 1.
"""

from __future__ import annotations

import torch.distributed as dist


def is_distributed() -> bool:
    """True inside an initialized torch.distributed process group."""
    return dist.is_available() and dist.is_initialized()


def rank_and_world_size() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside torch.distributed."""
    return (dist.get_rank(), dist.get_world_size()) if is_distributed() else (0, 1)
