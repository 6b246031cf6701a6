"""Generalized advantage estimation: the per-token advantages a learned critic V(s_t) gives PPO.

A response o_1..o_T is an episode whose state s_t is the prompt and o_<t; the outcome reward r
arrives once, on the last response token (InstructGPT, Ouyang et al. 2022, arXiv 2203.02155,
optionally minus a per-token KL penalty to the reference policy, as verl's `apply_kl_penalty`,
verl/trainer/ppo/ray_trainer.py):
    r_t = −β·(log π_old(o_t) − log π_ref(o_t)) + [t = last] · r                   (B, T)
GAE (Schulman et al. 2016, arXiv 1506.02438, eq. 16), with V_{T+1} = 0 past the last token:
    δ_t = r_t + γ·V_{t+1} − V_t                                                   (B, T)
    A_t = Σ_l (γλ)^l · δ_{t+l} = δ_t + γλ·A_{t+1}                                 (B, T)
    R_t = A_t + V_t       the critic's regression target (the λ-return)           (B, T)
`compute_gae_advantage_return` is verl's function of that name (verl/trainer/ppo/core_algos.py),
without its whitening, which `masked_whiten` (verl/utils/torch_functional.py) does apart.
Two ends are worth knowing by heart: γ = λ = 1 gives A_t = r − V_t (REINFORCE with a learned
baseline per prefix), λ = 0 the one-step δ_t (all bootstrap). GRPO's group mean is a Monte Carlo
estimate of V(s_1) alone, shared by every token of the response (`course.advantages`).

A position off the response mask is not a step of the episode: its value and reward never enter
a sum (they are selected away before any arithmetic, so padding holding nan changes nothing), and
the recursion carries A_{t+1} and V_{t+1} across it unchanged, as verl's does.
"""

from __future__ import annotations

import torch


def _checked(mask: torch.Tensor, **tensors: torch.Tensor) -> torch.Tensor:
    """The mask as bool (B, T), after checking every tensor is (B, T) like it."""
    if mask.ndim != 2:
        raise ValueError(f"response_mask must be (B, T), got {tuple(mask.shape)}")
    for name, tensor in tensors.items():
        if tensor.shape != mask.shape:
            raise ValueError(f"{name} must be {tuple(mask.shape)} like response_mask, got "
                             f"{tuple(tensor.shape)}")
    return mask.bool()


def outcome_token_rewards(
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    kl: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> torch.Tensor:
    """The per-token rewards (B, T): each row's outcome reward (B,) on its last response token,
    minus `kl_coef`·`kl` (B, T) on every response token (verl's `apply_kl_penalty`); 0 off the mask.
    A row without response tokens gets no reward anywhere."""
    if rewards.ndim != 1 or rewards.shape[0] != response_mask.shape[0]:
        raise ValueError(f"rewards must be (B,) with B = {response_mask.shape[0]}, got "
                         f"{tuple(rewards.shape)}")
    mask = _checked(response_mask, **({"kl": kl} if kl is not None else {}))
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)     # (B, T)
    last = torch.where(mask, positions, -1).amax(dim=1, keepdim=True)              # (B, 1)
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    token_rewards = torch.where(positions == last, rewards[:, None], 0)             # (B, T)
    if kl is not None and kl_coef:
        token_rewards = token_rewards - kl_coef * torch.where(mask, kl, 0).to(token_rewards.dtype)
    return torch.where(mask, token_rewards, 0)


def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages A, returns A + V), both (B, T) and 0 off the mask, from per-token rewards,
    values V(s_t) (B, T) and the response mask (B, T), by the backward recursion above."""
    mask = _checked(response_mask, token_level_rewards=token_level_rewards, values=values)
    if not (0 <= gamma <= 1 and 0 <= lam <= 1):
        raise ValueError(f"gamma and lam must be in [0, 1], got {gamma!r} and {lam!r}")
    # select, never multiply: 0 · nan is nan, and padding may hold anything
    rewards = torch.where(mask, token_level_rewards, 0)                             # (B, T)
    values = torch.where(mask, values, 0).to(rewards.dtype)                         # (B, T)
    next_value = torch.zeros_like(rewards[:, 0])                                    # (B,) V_{t+1}
    next_advantage = torch.zeros_like(rewards[:, 0])                                # (B,) A_{t+1}
    advantages = torch.zeros_like(rewards)                                          # (B, T)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]                   # (B,)
        advantage = delta + gamma * lam * next_advantage                            # (B,)
        # off the mask: A and V of the next real token are carried over the gap
        next_value = torch.where(mask[:, t], values[:, t], next_value)
        next_advantage = torch.where(mask[:, t], advantage, next_advantage)
        advantages[:, t] = torch.where(mask[:, t], advantage, 0)
    return advantages, torch.where(mask, advantages + values, 0)


def masked_whiten(values: torch.Tensor, response_mask: torch.Tensor,
                  eps: float = 1e-8) -> torch.Tensor:
    """(values − mean) / sqrt(var + eps) over the masked tokens of the batch, 0 off the mask (B, T);
    the unbiased variance, as verl's `masked_whiten`. PPO whitens GAE advantages per batch, so its
    step size does not follow the scale of the rewards (GRPO divides by the group's std instead)."""
    mask = _checked(response_mask, values=values)
    kept = torch.where(mask, values, 0)                                             # (B, T)
    count = mask.sum()
    if count < 2:
        raise ValueError(f"masked_whiten needs at least 2 response tokens, got {int(count)}")
    mean = kept.sum() / count
    variance = torch.where(mask, (kept - mean) ** 2, 0).sum() / (count - 1)
    return torch.where(mask, (kept - mean) * torch.rsqrt(variance + eps), 0)


def masked_variance(values: torch.Tensor, response_mask: torch.Tensor) -> float:
    """The variance (population, 1/N) of `values` (B, T) over the masked tokens: how much a
    per-token advantage scatters around its mean, the quantity a baseline exists to lower."""
    mask = _checked(response_mask, values=values)
    count = mask.sum().clamp_min(1)
    kept = torch.where(mask, values, 0).to(torch.float64)
    mean = kept.sum() / count
    return float(torch.where(mask, (kept - mean) ** 2, 0).sum() / count)
