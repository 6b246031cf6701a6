"""One PPO optimizer step on the policy and its value head, exact under gradient accumulation.

Per token, with r_t = π(o_t)/π_old(o_t), the whitened GAE advantage A_t and the returns R_t
(`course.critic.gae`), the step minimizes (PPO, Schulman et al. 2017, arXiv 1707.06347, eq. 9
without its entropy term):
    L = (1/N) Σ_i Σ_t m_it · (−min(r·A, clip(r, 1−ε, 1+ε)·A)_it + c_v · ℓ^V_it)
where the policy term is `course.losses.compute_policy_gradient_loss`'s PPO-clip ("grpo") and ℓ^V
is `course.critic.value.clipped_value_loss`; m (B, T) is the response mask and N the response
tokens of the WHOLE optimizer step. Split into K micro-batches, micro-batch k contributes its masked
sum over that N (`course.aggregation.calculate_loss_and_backward`, "token"), so the accumulated
gradient is the whole batch's for any split; dividing by each micro-batch's own n_k instead weighs
a token 1/(K·n_k), the bug `course.aggregation` describes and `tests/test_critic.py` plants.

GRPO's advantage is one number per response; GAE's is one per token. The course's loss takes
(B,) or (B, 1) advantages, so each token is passed as a row of length one: (B·T, 1) log-probs and
advantages. PPO-clip is elementwise in (r_t, A_t), so this is the same loss, token for token.
"""

from __future__ import annotations

import math

import torch

from course.aggregation import calculate_loss_and_backward
from course.critic.value import clipped_value_loss, log_probs_and_values
from course.losses import compute_policy_gradient_loss

# What the step reads from its batch, each (B, T): the tokens and the rollout's fixed numbers.
BATCH_KEYS = ("input_ids", "labels", "response_mask", "old_log_probs", "old_values", "advantages",
              "returns")


def per_token_ppo_loss(micro: dict[str, torch.Tensor], policy: torch.nn.Module,
                       head: torch.nn.Linear, cliprange: float, value_clip: float,
                       vf_coef: float, temperature: float) -> tuple[torch.Tensor, dict]:
    """(policy + c_v · value loss per token (b, T), the micro-batch's sums and counts) for one
    micro-batch `micro` of `BATCH_KEYS` (b, T)."""
    mask = micro["response_mask"]                                                 # (b, T)
    log_probs, values = log_probs_and_values(policy, head, micro["input_ids"], micro["labels"],
                                             temperature)                         # (b, T) each
    policy_loss, metadata = compute_policy_gradient_loss(
        micro["advantages"].reshape(-1), log_probs.reshape(-1, 1), "grpo",
        micro["old_log_probs"].reshape(-1, 1), cliprange, mask.reshape(-1, 1))    # (b·T, 1)
    policy_loss = policy_loss.view_as(log_probs)                                  # (b, T)
    value_loss, value_clipped = clipped_value_loss(values, micro["old_values"], micro["returns"],
                                                   mask, value_clip)              # (b, T)
    keep = mask.bool()
    sums = {"policy_loss": float(torch.where(keep, policy_loss.detach(), 0).sum()),
            "value_loss": float(value_loss.detach().sum()),
            "clip_count": float(metadata["clip_count"]),
            "value_clip_count": float(value_clipped.sum())}
    return policy_loss + vf_coef * value_loss, sums


def ppo_backward(policy: torch.nn.Module, head: torch.nn.Linear, batch: dict[str, torch.Tensor],
                 gradient_accumulation_steps: int, cliprange: float, value_clip: float,
                 vf_coef: float, temperature: float = 1.0) -> dict[str, float]:
    """Accumulate the step's gradient over K micro-batches of rows (no optimizer step). Returns
    `policy_loss` and `value_loss` (token means over the step), `clip_fraction` (tokens whose
    ratio the clip held), `value_clip_fraction` and `response_tokens` (N)."""
    missing = [key for key in BATCH_KEYS if key not in batch]
    if missing:
        raise ValueError(f"batch lacks {missing}: a PPO step needs {BATCH_KEYS}")
    rows = batch["input_ids"].shape[0]
    if not (isinstance(gradient_accumulation_steps, int)
            and 1 <= gradient_accumulation_steps <= rows):
        raise ValueError(f"gradient_accumulation_steps must be an int in [1, {rows}], got "
                         f"{gradient_accumulation_steps!r}")
    device = next(policy.parameters()).device
    n_tokens = batch["response_mask"].sum().to(torch.float64)  # N: every micro-batch's denominator
    totals: dict[str, float] = {}
    for part in torch.arange(rows).tensor_split(gradient_accumulation_steps):
        micro = {key: batch[key][part].to(device) for key in BATCH_KEYS}
        loss, sums = per_token_ppo_loss(micro, policy, head, cliprange, value_clip, vf_coef,
                                        temperature)                              # (b, T)
        calculate_loss_and_backward(loss, micro["response_mask"], "token", rows, n_tokens)
        totals = {key: totals.get(key, 0.0) + value for key, value in sums.items()}
    count = max(float(n_tokens), 1.0)
    return {"policy_loss": totals["policy_loss"] / count,
            "value_loss": totals["value_loss"] / count,
            "clip_fraction": totals["clip_count"] / count,
            "value_clip_fraction": totals["value_clip_count"] / count,
            "response_tokens": float(n_tokens)}


def ppo_train_step(policy: torch.nn.Module, head: torch.nn.Linear,
                   optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
                   gradient_accumulation_steps: int, cliprange: float, value_clip: float,
                   vf_coef: float, max_grad_norm: float | None = None,
                   temperature: float = 1.0) -> dict[str, float]:
    """One optimizer step of policy and value head together (`ppo_backward`), the global gradient
    norm clipped to `max_grad_norm` (None or 0: not clipped). Returns `ppo_backward`'s numbers and
    `gradient_norm` (before clipping)."""
    optimizer.zero_grad(set_to_none=True)
    record = ppo_backward(policy, head, batch, gradient_accumulation_steps, cliprange, value_clip,
                          vf_coef, temperature)
    parameters = [p for p in (*policy.parameters(), *head.parameters()) if p.requires_grad]
    record["gradient_norm"] = float(
        torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm or math.inf))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return record
