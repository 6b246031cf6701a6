"""The critic: a value head on the policy's last hidden state, and PPO's clipped value loss.

V(s_t) is a linear map of the decoder's last hidden state h_t (B, T, H) at the position whose
next-token prediction is response token t, so V and log π(o_t) come from one forward of the trunk:
    V(s_t) = w·h_t + b                                                            (B, T)
the value head of TRL's `AutoModelForCausalLMWithValueHead` (one linear layer on the shared
trunk); verl and OpenRLHF instead train a separate critic, a second copy of the model whose LM
head is replaced by this layer (`benchmarks/README.md` counts what each costs). The head starts
at zero: V = 0 everywhere until the value loss has taught it something.

The value loss (PPO, Schulman et al. 2017, arXiv 1707.06347; verl's `compute_value_loss`,
verl/trainer/ppo/core_algos.py, `cliprange_value` = ε_v) regresses V on the returns R of
`course.critic.gae`, and clips how far V may move from the rollout's V_old, as PPO clips the ratio:
    ℓ_t = ½ · max((V_t − R_t)², (clip(V_t, V_old,t − ε_v, V_old,t + ε_v) − R_t)²)   (B, T)
"""

from __future__ import annotations

import torch

from course.scoring import get_response_log_probs


def value_head(policy: torch.nn.Module) -> torch.nn.Linear:
    """A zero-initialized linear layer from the policy's hidden size to one value, on its device
    and in its dtype."""
    parameter = next(policy.parameters())
    head = torch.nn.Linear(policy.config.hidden_size, 1, device=parameter.device,
                           dtype=parameter.dtype)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return head


def log_probs_and_values(
    policy: torch.nn.Module,
    head: torch.nn.Linear,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(labels) (B, T) through `course.scoring`, V (B, T)) from ONE forward of the trunk:
    a hook keeps the decoder's last hidden state (B, T, H) as the log-probs are scored."""
    kept: list[torch.Tensor] = []
    hook = policy.base_model.register_forward_hook(
        lambda _module, _inputs, output: kept.append(output.last_hidden_state))
    try:
        log_probs = get_response_log_probs(policy, input_ids, labels,
                                           temperature=temperature)["log_probs"]  # (B, T)
    finally:
        hook.remove()
    return log_probs, head(kept[-1]).squeeze(-1)                                 # (B, T)


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    value_clip: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ℓ (B, T), clipped (B, T) bool): ½·max of the plain and the clipped squared errors, 0 off
    the mask; `clipped` where the clipped error is the larger, the tokens whose V the clip holds
    back (verl's `vf_clipfrac`). All inputs (B, T); off the mask they may hold anything."""
    if not value_clip > 0:
        raise ValueError(f"value_clip must be positive, got {value_clip!r}")
    for name, tensor in (("old_values", old_values), ("returns", returns),
                         ("response_mask", response_mask)):
        if tensor.shape != values.shape or values.ndim != 2:
            raise ValueError(f"values and {name} must both be (B, T), got "
                             f"{tuple(values.shape)} and {tuple(tensor.shape)}")
    mask = response_mask.bool()
    # masked before any arithmetic: a nan in padding would otherwise reach the gradient as 0·nan
    values = torch.where(mask, values, 0)                                         # (B, T)
    old = torch.where(mask, old_values.detach(), 0).to(values.dtype)              # (B, T)
    returns = torch.where(mask, returns.detach(), 0).to(values.dtype)             # (B, T)
    moved = old + torch.clamp(values - old, -value_clip, value_clip)              # (B, T)
    plain, clipped = (values - returns) ** 2, (moved - returns) ** 2              # (B, T)
    loss = 0.5 * torch.maximum(plain, clipped)                                    # (B, T)
    return torch.where(mask, loss, 0), mask & (clipped > plain)
