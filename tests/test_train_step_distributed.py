"""grpo_train_step under real torch.distributed: DDP over whole groups = one process on the batch.

Two CPU processes (gloo, torch.multiprocessing, a free localhost port) each take whole groups of the
rollout batch and run grpo_train_step on a DistributedDataParallel-wrapped float64 model with
SGD(lr=1). DDP averages the two ranks' gradients, so the step must scale each rank's loss (B and N
summed over ranks, times the world size) for the update to equal −∇L of the full batch, computed
here in one process by the naive reference. The ranks' token counts differ (13 vs 25), so a
token-mode step that used its own rank's count would fail; in some batches one rank holds only a
zero-advantage group, whose rows still carry the KL penalty's gradient. With a KL penalty and TIS
weights (reference and sampler log-probs sliced like the old ones) the update is still the full batch's.
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
)
from ranks import ddp_update, gloo_rank, rank_share, run_ranks

from course.loop.models import build_tiny_model_and_tokenizer
from course.off_policy import GRPOLossConfig

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
CONSTANT = 40.0
WORLD_SIZE = 2
KL_BETA, TIS_CAP = 0.5, 1.2
# (case name, zero-advantage group?, method, loss normalization, gradient accumulation steps,
#  KL penalty?, TIS weights?)
CASES = [(f"{method}-{mode}-{zero}", zero, method, mode, gas, False, False)
         for mode in ("token", "sequence", "constant")
         for zero, method, gas in ((False, "grpo", 2), (True, "none", 1))]
CASES += [("grpo-token-zero-group-kl-tis", True, "grpo", "token", 2, True, True),
          ("none-sequence-kl", False, "none", "sequence", 3, True, False),
          ("cispo-constant-tis", False, "cispo", "constant", 1, False, True),
          # stage 5's loss (`grpo_loss`): DAPO's decoupled bounds, its own β and the TIS weights
          ("dapo-sequence-zero-group-kl-tis", True, "dapo", "sequence", 2, True, True)]
CLIP_HIGHER = 0.28  # dapo's ε_high (DAPO's clip-higher); ε_low is the 0.2 of the others


def _rank_rows(zero_group: bool, rank: int) -> list[int]:
    if not zero_group:
        return list(range(4 * rank, 4 * rank + 4))  # group 0 (13 tokens) | group 1 (25 tokens)
    return list(range(8)) if rank == 0 else list(range(8, 12))  # groups 0, 1 | zero group


def _arguments(method, mode, old):
    return {
        "advantage_normalizer": "none",  # exact in float32, see test_train_step.py
        "pg_method": method,
        "old_log_probs": old if method != "none" else None,
        "cliprange": 0.2 if method in ("grpo", "cispo") else None,
        "loss_normalization": mode,
        "normalization_constant": CONSTANT if mode == "constant" else None,
    }


def _step_arguments(method, mode, old, penalties: dict) -> dict:
    """The train step's arguments; dapo's KL weight and estimator travel in its GRPOLossConfig."""
    if method != "dapo":
        return {**_arguments(method, mode, old), **penalties}
    beta = penalties.pop("kl_beta", 0.0)
    config = GRPOLossConfig("dapo", clip_lower=0.2, clip_higher=CLIP_HIGHER,
                            kl_estimator=penalties.pop("kl_estimator", "k3"), beta=beta)
    return {**_arguments("none", mode, None), "old_log_probs": old, "grpo_loss": config, **penalties}


def _penalties(model, batch, tokenizer, kl: bool, tis: bool) -> dict:
    """Whole-batch (B, T) reference and sampler log-probs: the model's own, perturbed."""
    penalties = {}
    if kl:
        penalties.update(kl_beta=KL_BETA, kl_estimator="k3",
                         ref_log_probs=make_old_log_probs(model, batch, tokenizer, seed=1, scale=0.5))
    if tis:
        penalties.update(sampler_log_probs=make_old_log_probs(model, batch, tokenizer, seed=2), tis_cap=TIS_CAP)
    return penalties


def _worker(rank: int, port: int, directory: str) -> None:
    gloo_rank(rank, port, WORLD_SIZE, lambda: _rank_updates(rank, directory))


def _rank_updates(rank: int, directory: str) -> None:
    for name, zero_group, method, mode, gas, kl, tis in CASES:
        model, tokenizer = build_tiny_model_and_tokenizer(seed=0, dtype=torch.float64, **TINY)
        batch = make_rollout_batch(zero_group)
        old = make_old_log_probs(model, batch, tokenizer)  # the full batch's, sliced below
        penalties = _penalties(model, batch, tokenizer, kl, tis)
        mine, penalties = rank_share(batch, _rank_rows(zero_group, rank), tokenizer,
                                     {**penalties, "old_log_probs": old})
        update = ddp_update(
            model, tokenizer, gas, None, reward_fn, mine["prompts"], mine["responses"],
            mine["ground_truths"], batch["group_size"],
            **_step_arguments(method, mode, penalties.pop("old_log_probs"), penalties))
        torch.save(update, Path(directory) / f"{name}-rank{rank}.pt")


def test_ddp_over_whole_groups_equals_single_process_full_batch(tmp_path):
    run_ranks(_worker, str(tmp_path), WORLD_SIZE, seconds=240)

    for name, zero_group, method, mode, _, kl, tis in CASES:
        model, tokenizer = build_tiny_model_and_tokenizer(seed=0, dtype=torch.float64, **TINY)
        batch = make_rollout_batch(zero_group)
        old = make_old_log_probs(model, batch, tokenizer)
        loss = full_batch_loss(model, tokenizer, batch, method, mode, old if method != "none" else None, 0.2,
                               CONSTANT, normalizer="none", clip_higher=CLIP_HIGHER if method == "dapo" else None,
                               **_penalties(model, batch, tokenizer, kl, tis))
        expected = [-g for g in gradient(model, [loss])]
        assert max(g.abs().max() for g in expected) > 1e-4  # the check is not vacuous
        for rank in range(WORLD_SIZE):
            update = torch.load(tmp_path / f"{name}-rank{rank}.pt")
            assert relative_difference(update, expected) < 1e-10, f"{name} rank {rank}"
