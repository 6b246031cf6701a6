"""Supervised fine-tuning (SFT) on correct responses: one optimizer step, exact under accumulation.

The loss is the masked next-token cross-entropy of the response tokens, their mean over the WHOLE
optimizer step:
    L = −(1/N) Σ_i Σ_t m_it · log π_θ(y_it | x_i, y_i,<t),   N = Σ_i Σ_t m_it
with m (B, T) the response mask of `course.tokenization` and log π (B, T) from `course.scoring`:
the SFT objective of Stanford CS336 (2025) assignment 5 (`sft_microbatch_train_step`), here with
DAPO's token normalization over the step. Split into K micro-batches, micro-batch k contributes its
masked sum over the step's N (`course.aggregation.calculate_loss_and_backward`, "token"), so the
accumulated gradient is that of the whole batch whatever the split. Dividing by each micro-batch's
own n_k instead weighs a token 1/(K·n_k): the gradient-accumulation bug that `course.aggregation`
describes, which `tests/test_baselines.py` plants and catches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from course.aggregation import calculate_loss_and_backward
from course.loop.tasks import Problem, format_prompt, format_response
from course.scoring import get_response_log_probs
from course.tokenization import tokenize_prompt_and_output


def demonstrations(problems: Sequence[Problem], eos_token: str) -> tuple[list[str], list[str]]:
    """(prompts, responses): the r1-zero prompt of each addition problem and its correct response,
    `</think> <answer>X</answer>` then `eos_token`, as the warm start learned them and as the
    reward (`course.loop.tasks.r1_zero_reward_fn`) pays 1 for."""
    return ([format_prompt(p) for p in problems],
            [format_response(p) + eos_token for p in problems])


def sft_train_step(
    model: torch.nn.Module,
    tokenizer,
    optimizer: torch.optim.Optimizer,
    prompts: Sequence[str],
    responses: Sequence[str],
    gradient_accumulation_steps: int = 1,
    max_grad_norm: float | None = None,
) -> dict[str, float]:
    """One optimizer step of SFT on B (prompt, response) pairs, in K micro-batches of rows.

    Every micro-batch's masked sum of −log π (b, T) is divided by the step's N response tokens, so
    the update is that of the whole batch for any K (1 ≤ K ≤ B). The global gradient norm is
    clipped to `max_grad_norm` (None or 0: not clipped). Returns `loss` (the step's mean response
    token NLL), `gradient_norm` (before clipping) and `response_tokens` (N).
    """
    if len(prompts) != len(responses):
        raise ValueError(f"prompts ({len(prompts)}) and responses ({len(responses)}) must pair up")
    if not prompts:
        raise ValueError("prompts is empty: an SFT step needs at least one (prompt, response)")
    if not (isinstance(gradient_accumulation_steps, int)
            and 1 <= gradient_accumulation_steps <= len(prompts)):
        raise ValueError(f"gradient_accumulation_steps must be an int in [1, {len(prompts)}], "
                         f"got {gradient_accumulation_steps!r}")
    tokens = tokenize_prompt_and_output(list(prompts), list(responses), tokenizer)
    mask = tokens["response_mask"]                                               # (B, T)
    n_tokens = mask.sum().to(torch.float64)  # N of the whole step, every micro-batch's denominator
    device = next(model.parameters()).device
    optimizer.zero_grad(set_to_none=True)
    loss = 0.0
    for rows in torch.arange(len(prompts)).tensor_split(gradient_accumulation_steps):
        log_probs = get_response_log_probs(model, tokens["input_ids"][rows].to(device),
                                           tokens["labels"][rows].to(device))["log_probs"]  # (b, T)
        loss += float(calculate_loss_and_backward(-log_probs, mask[rows].to(device), "token",
                                                  len(prompts), n_tokens))
    parameters = [p for p in model.parameters() if p.requires_grad]
    gradient_norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm or math.inf)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"loss": loss, "gradient_norm": float(gradient_norm), "response_tokens": float(n_tokens)}
