"""grpo_train_step with a `FrontierLoss` under real torch.distributed: 2 gloo ranks over whole groups
make the single-process full-batch update (naive.frontier_loss), to 1e-10 in float64.

One case per option, with the ranks' token counts unequal (13 vs 25) or one rank holding only a
zero-advantage group (whose rows carry the KL gradient alone), as in test_train_step_distributed.py.
"""

from pathlib import Path

import pytest
import torch
from naive import make_old_log_probs, make_rollout_batch, relative_difference, reward_fn
from ranks import ddp_update, gloo_rank, rank_share, run_ranks
from test_frontier_train_step import extras, naive_update
from test_train_step_grpo_loss import normalization

from course.frontier.loss import FrontierLoss
from course.loop.models import build_tiny_model_and_tokenizer

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
WORLD_SIZE = 2
# (name, FrontierLoss fields, normalization, gradient accumulation steps, zero group + KL?, TIS?)
CASES = [
    ("ppo-dual-clip", dict(loss_fn="dapo", clip_higher=0.28, dual_clip=1.3), "token", 2, True,
     True),
    ("cispo-floor", dict(loss_fn="cispo", clip_lower=0.1, cispo_floor=True), "sequence", 1, False,
     False),
    ("sapo", dict(loss_fn="sapo"), "constant", 2, False, True),
    ("gmpo", dict(loss_fn="gmpo", clip_lower=0.1, clip_higher=0.1), "sequence", 3, True, False),
    ("dppo-sampler", dict(loss_fn="dppo", trust_region=0.002, ratio_kl=1e-3,
                          ratio_against="sampler"), "token", 2, False, True),
    ("sapo-sampler-outlier", dict(loss_fn="sapo", ratio_against="sampler", outlier_low=0.8,
                                  outlier_high=1.25), "token", 1, True, True),
]


def _rank_rows(zero_group: bool, rank: int) -> list[int]:
    if not zero_group:
        return list(range(4 * rank, 4 * rank + 4))  # group 0 (13 tokens) | group 1 (25 tokens)
    return list(range(8)) if rank == 0 else list(range(8, 12))  # groups 0, 1 | zero group


def _config(fields: dict, kl: bool) -> FrontierLoss:
    return FrontierLoss(**fields, beta=0.5 if kl else 0.0)


def _worker(rank: int, port: int, directory: str) -> None:
    gloo_rank(rank, port, WORLD_SIZE, lambda: _rank_updates(rank, directory))


def _rank_updates(rank: int, directory: str) -> None:
    for name, fields, mode, gas, kl, tis in CASES:
        model, tokenizer = build_tiny_model_and_tokenizer(seed=0, dtype=torch.float64, **TINY)
        batch = make_rollout_batch(kl)
        old = make_old_log_probs(model, batch, tokenizer)
        mine, extra = rank_share(batch, _rank_rows(kl, rank), tokenizer,
                                 {**extras(model, batch, tokenizer, kl, tis), "old_log_probs": old})
        update = ddp_update(
            model, tokenizer, gas, None, reward_fn, mine["prompts"], mine["responses"],
            mine["ground_truths"], batch["group_size"], advantage_normalizer="none",
            grpo_loss=_config(fields, kl), **normalization(mode), **extra)
        torch.save(update, Path(directory) / f"{name}-rank{rank}.pt")


def test_ddp_over_whole_groups_equals_single_process_full_batch(tmp_path):
    run_ranks(_worker, str(tmp_path), WORLD_SIZE, seconds=240)
    for name, fields, mode, _, kl, tis in CASES:
        model, tokenizer = build_tiny_model_and_tokenizer(seed=0, dtype=torch.float64, **TINY)
        batch = make_rollout_batch(kl)
        old = make_old_log_probs(model, batch, tokenizer)
        expected = naive_update(model, tokenizer, batch, old, _config(fields, kl), mode,
                                extras(model, batch, tokenizer, kl, tis))
        assert max(g.abs().max() for g in expected) > 1e-4  # the check is not vacuous
        for rank in range(WORLD_SIZE):
            update = torch.load(tmp_path / f"{name}-rank{rank}.pt")
            assert relative_difference(update, expected) < 1e-10, f"{name} rank {rank}"
