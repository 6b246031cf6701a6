"""Dynamic sampling, the overlong filter and an IS mode under two real gloo ranks.

Rank 0 samples groups 0 and 1 (informative), rank 1 the constant group. After dynamic sampling
rank 1 holds nothing of its own; `regroup_over_ranks` deals the two kept groups out, one per rank,
and the DDP step must then equal −∇L of the kept groups in one process (naive reference, float64,
SGD(lr=1)). With the overlong filter and sequence-level masked IS weights on top, the weights
travel with their rows. A regroup that kept each rank's own groups would leave rank 1 empty
(no step at all) and rank 0 with both groups: a different update.
"""

from pathlib import Path

import pytest
import torch
from naive import (
    full_batch_loss,
    gradient,
    make_old_log_probs,
    make_rollout_batch,
    relative_difference,
    reward_fn,
    tokenize,
)
from ranks import ddp_update, gloo_rank, run_ranks

from course.loop.filters import informative_groups, keep_groups, regroup_over_ranks
from course.loop.importance import as_sampler_log_probs, importance_weights
from course.loop.models import build_tiny_model_and_tokenizer
from course.loop.rollout import RolloutBatch

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
WORLD_SIZE, CAP = 2, 1.5
CASES = (("token", False), ("sequence", True))  # (loss normalization, overlong filter + IS weights)
TRUNCATED = (1, 6)  # rows of the kept batch cut at max_new_tokens


def _kept_batch() -> dict:
    batch = make_rollout_batch()  # groups 0 and 1: what dynamic sampling keeps
    return {**batch, "index": list(range(8))}


def _weights(model, batch, tokenizer):
    """Whole-kept-batch (B, T) old log-probs and IS weights (sequence mask) with truncated rows at 0."""
    old = make_old_log_probs(model, batch, tokenizer)
    sampler = make_old_log_probs(model, batch, tokenizer, seed=2)
    mask = tokenize(batch["prompts"], batch["responses"], tokenizer)["response_mask"]
    weights = importance_weights(old, sampler, mask, "sequence", "mask", CAP)
    weights = weights * torch.tensor([[r not in TRUNCATED] for r in range(len(mask))])
    return old, weights, mask


def _worker(rank: int, port: int, directory: str) -> None:
    gloo_rank(rank, port, WORLD_SIZE, lambda: _rank_updates(rank, directory))


def _rank_updates(rank: int, directory: str) -> None:
    full = make_rollout_batch(zero_advantage_group=True)
    rows = range(8) if rank == 0 else range(8, 12)  # rank 1: only the constant group
    mine = RolloutBatch([full["prompts"][i] for i in rows], [full["responses"][i] for i in rows],
                        [full["ground_truths"][i] for i in rows], [torch.tensor([float(i)]) for i in rows])
    rewards = [reward_fn(r, t)["reward"] for r, t in zip(mine.responses, mine.repeated_ground_truths)]
    kept, n_groups = regroup_over_ranks(keep_groups(mine, informative_groups(rewards, 4), 4), 4)
    assert n_groups == 2 and len(kept) == 4
    index = [int(x) for x in kept.sampler_log_probs]  # the rows of the kept batch this rank got
    for mode, weighted in CASES:
        model, tokenizer = build_tiny_model_and_tokenizer(seed=0, dtype=torch.float64, **TINY)
        extra = {}
        if weighted:
            old, weights, mask = _weights(model, _kept_batch(), tokenizer)
            width = tokenize(kept.repeated_prompts, kept.responses, tokenizer)["input_ids"].shape[1]
            old, weights, mask = (x[index, :width] for x in (old, weights, mask))
            extra = dict(pg_method="grpo", cliprange=0.2, old_log_probs=old,
                         sampler_log_probs=as_sampler_log_probs(old, weights, mask), tis_cap=CAP)
        update = ddp_update(
            model, tokenizer, 2, None, reward_fn, kept.repeated_prompts, kept.responses,
            kept.repeated_ground_truths, 4, advantage_normalizer="none", loss_normalization=mode,
            **extra)
        torch.save(update, Path(directory) / f"{mode}-rank{rank}.pt")


def test_filtered_and_regrouped_ddp_step_equals_one_process_on_the_kept_groups(tmp_path):
    run_ranks(_worker, str(tmp_path), WORLD_SIZE, seconds=180)
    for mode, weighted in CASES:
        model, tokenizer = build_tiny_model_and_tokenizer(seed=0, dtype=torch.float64, **TINY)
        batch = _kept_batch()
        if weighted:
            old, weights, _ = _weights(model, batch, tokenizer)
            loss = full_batch_loss(model, tokenizer, batch, "grpo", mode, old, 0.2, normalizer="none",
                                   token_weights=weights)
        else:
            loss = full_batch_loss(model, tokenizer, batch, "none", mode, normalizer="none")
        expected = [-g for g in gradient(model, [loss])]
        assert max(g.abs().max() for g in expected) > 1e-4
        for rank in range(WORLD_SIZE):
            update = torch.load(tmp_path / f"{mode}-rank{rank}.pt")
            assert relative_difference(update, expected) < 1e-10, f"{mode} rank {rank}"
