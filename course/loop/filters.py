"""Rollout filters of 2026 trainers: dynamic sampling and overlong handling (DAPO, Yu et al. 2025,
arXiv 2503.14476, §3.2-3.4).

Dynamic sampling. A group whose G rewards are all equal has advantage 0 on every row: it adds
nothing to the policy gradient but still counts in every denominator (B, N, Dr. GRPO's C), so it
shrinks the step. DAPO drops such groups. "Equal" needs a tolerance: rewards shaped in float32
(a length penalty, a partial credit) differ in the last bits, and the group's std is then ~1e-8,
not 0 — divided by std + ε that noise becomes an advantage of order 1e-2. A group is constant when
max − min ≤ `tolerance` (verl `recipe/dapo/dapo_ray_trainer.py`, `filter_groups`, keeps a group
whose reward std is > 0, exactly: the float noise above passes that test).
Under data parallelism each rank's kept groups are gathered and dealt out again in order
(`regroup_over_ranks`), so the step is the single-process step on the kept groups.

Overlong handling. A response cut at `max_new_tokens` has no ending; its reward says little.
  * soft overlong punishment (DAPO eq. 13), with L = max_new_tokens, L_c the buffer:
        R_len(y) = 0                        if |y| ≤ L − L_c
                 = ((L − L_c) − |y|) / L_c  if L − L_c < |y| ≤ L
                 = −1                       if |y| > L
    added to the reward (verl `reward_manager/dapo.py`, `overlong_buffer`); |y| counts the tokens
    of the response as the train step tokenizes it, the final eos included.
  * overlong filtering (DAPO §3.3; TRL `mask_truncated_completions`): truncated responses (no eos)
    get importance weight 0 (`course.loop.importance`), so they add no policy-gradient term; they
    stay in their group's baseline and in the normalization counts (TRL also drops their tokens from
    N).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields

import torch
import torch.distributed as dist

from course.distributed import is_distributed, rank_and_world_size
from course.loop.rollout import RolloutBatch

RewardFn = Callable[[str, str], dict[str, float]]


def informative_groups(rewards: Sequence[float], group_size: int,
                       tolerance: float = 1e-6) -> list[bool]:
    """Per group of `group_size` consecutive rewards: False when max − min ≤ `tolerance`
    (constant)."""
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"group_size must divide the {len(rewards)} rewards, got {group_size}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    groups = torch.tensor(list(rewards), dtype=torch.float64).view(-1, group_size)  # (n, G)
    spread = groups.amax(dim=1) - groups.amin(dim=1)  # (n,)
    return (spread > tolerance).tolist()


def keep_groups(rollouts: RolloutBatch, keep: Sequence[bool], group_size: int) -> RolloutBatch:
    """The rollouts of the groups where `keep` is True, in order."""
    rows = [i for i in range(len(rollouts)) if keep[i // group_size]]
    return RolloutBatch(*([values[i] for i in rows] for values in _columns(rollouts)))


def regroup_over_ranks(rollouts: RolloutBatch, group_size: int) -> tuple[RolloutBatch, int]:
    """This rank's share of every rank's `rollouts` (whole groups, in rank order, dealt out as
    evenly as they go), and the number of groups over all ranks. Itself outside
    torch.distributed."""
    if not is_distributed():
        return rollouts, len(rollouts) // group_size
    rank, world_size = rank_and_world_size()
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, [list(c) for c in _columns(rollouts)])
    columns = [sum((part[k] for part in gathered), []) for k in range(len(gathered[0]))]
    n_groups = len(columns[0]) // group_size
    share = torch.arange(n_groups).tensor_split(world_size)[rank]  # whole groups of this rank
    rows = [g * group_size + j for g in share.tolist() for j in range(group_size)]
    return RolloutBatch(*([column[i] for i in rows] for column in columns)), n_groups


def _columns(rollouts: RolloutBatch) -> tuple[list, ...]:
    """Every per-row field of the batch (a field that is None is taken as a column of Nones)."""
    return tuple(getattr(rollouts, f.name) or [None] * len(rollouts) for f in fields(rollouts))


def soft_overlong_penalty(length: int, max_length: int, buffer: int) -> float:
    """DAPO's R_len of a response of `length` tokens (see the module docstring)."""
    if not 0 < buffer <= max_length:
        raise ValueError(f"buffer must be in (0, {max_length}], got {buffer}")
    if length <= max_length - buffer:
        return 0.0
    if length <= max_length:
        return (max_length - buffer - length) / buffer
    return -1.0


def with_soft_overlong_penalty(reward_fn: RewardFn, tokenizer, max_length: int,
                               buffer: int) -> RewardFn:
    """`reward_fn` with DAPO's soft overlong punishment added to its `reward`."""
    soft_overlong_penalty(0, max_length, buffer)  # checks the buffer now, not at the first call

    def shaped(response: str, ground_truth: str) -> dict[str, float]:
        scores = dict(reward_fn(response, ground_truth))
        length = len(tokenizer.encode(response, add_special_tokens=False))
        scores["reward"] = scores["reward"] + soft_overlong_penalty(length, max_length, buffer)
        return scores

    return shaped


def truncated_rows(rollouts: RolloutBatch, eos_token: str) -> list[bool]:
    """Per row: True when the response did not end with the eos token (cut at max_new_tokens)."""
    return [not response.endswith(eos_token) for response in rollouts.responses]
