"""Naive reference implementations of the graded stages, written independently of `course`.

Everything here is the slow, obvious version: full log_softmax over the vocabulary, python loops
over rows and tokens, float64. The tests compare `course` against these and against numbers worked
by hand. Sources: GRPO, Shao et al. 2024 (arXiv 2402.03300); DAPO, Yu et al. 2025 (arXiv
2503.14476); Dr. GRPO, Liu et al. 2025 (arXiv 2503.20783); GSPO, Zheng et al. 2025 (arXiv
2507.18071); CISPO, MiniMax-M1 2025 (arXiv 2506.13585); KL estimators, Schulman 2020
("Approximating KL divergence", http://joschu.net/blog/kl-approx.html).

Also here, because the single-process and the distributed train-step tests share it: the ragged
rollout batch both of them train on.
"""

from __future__ import annotations

import math

import torch

# open-instruct's `kl_estimator` 0..3 (open_instruct/grpo_utils.py, e6c3044), by the course's names
OPEN_INSTRUCT_KL_ESTIMATORS = {"0": "k1", "1": "k2", "2": "k3", "3": "ratio_k1"}

# ----------------------------------------------------------------------------- tokenization


def tokenize(prompts: list[str], outputs: list[str], tokenizer) -> dict[str, torch.Tensor]:
    """input_ids, labels, response_mask (B, L-1), built one python list at a time."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows, masks = [], []
    for prompt, output in zip(prompts, outputs):
        p = tokenizer.encode(prompt, add_special_tokens=False)
        o = tokenizer.encode(output, add_special_tokens=False)
        rows.append(p + o)
        masks.append([0] * len(p) + [1] * len(o))
    length = max(len(r) for r in rows)
    rows = [r + [pad] * (length - len(r)) for r in rows]
    masks = [m + [0] * (length - len(m)) for m in masks]
    ids = torch.tensor(rows, dtype=torch.long)
    mask = torch.tensor(masks, dtype=torch.long)
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "response_mask": mask[:, 1:]}


# ----------------------------------------------------------------------------- scoring


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """-Σ p log p from the full float64 softmax, (..., V) -> (...)."""
    p = torch.softmax(logits.double(), dim=-1)
    return -torch.special.xlogy(p, p).sum(dim=-1)


def response_log_probs(model, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label_t | prefix) (B, T) via the full (B, T, V) float64 log_softmax and a loop."""
    logits = model(input_ids).logits.double()  # (B, T, V)
    log_softmax = torch.log_softmax(logits, dim=-1)  # (B, T, V), the tensor course must avoid
    positions = torch.arange(labels.shape[1])
    return torch.stack([log_softmax[i, positions, labels[i]] for i in range(labels.shape[0])])


# ----------------------------------------------------------------------------- advantages


def group_normalized_rewards(
    rewards: list[float], group_size: int, baseline: str = "mean", eps: float = 1e-6,
    normalizer: str = "std",
) -> list[float]:
    """Per-group baseline and normalizer, one group at a time, in python floats."""
    advantages = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1))  # unbiased
        for r in group:
            a = r - mean if baseline == "mean" else r
            if normalizer == "std":
                a = a / (std + eps)
            elif normalizer == "mean":
                a = a / (mean + eps)
            advantages.append(a)
    return advantages


# ----------------------------------------------------------------------------- losses


def policy_gradient_loss(
    method: str, advantages: torch.Tensor, log_probs: torch.Tensor, old_log_probs=None,
    cliprange: float | None = None, mask: torch.Tensor | None = None, clip_higher: float | None = None,
) -> torch.Tensor:
    """Per-token loss (B, T), token by token. advantages (B,), log_probs (B, T). `clip_higher`
    (ε_high; default `cliprange`) bounds the ratio above: dapo's upper clip, cispo's cap."""
    high = cliprange if clip_higher is None else clip_higher
    B, T = log_probs.shape
    if mask is None:
        mask = torch.ones(B, T)
    rows = []
    for i in range(B):
        a = advantages[i]
        if method == "gspo":
            # one ratio per sequence: exp of the mean log-ratio over its response tokens
            n = int(mask[i].sum())
            log_s = sum(
                (log_probs[i, t] - old_log_probs[i, t].detach()) for t in range(T) if mask[i, t]
            ) / max(n, 1)
            s = torch.exp(torch.as_tensor(log_s, dtype=log_probs.dtype))
            s_clipped = torch.clamp(s, 1 - cliprange, 1 + cliprange)
            seq_loss = -torch.minimum(s * a, s_clipped * a)
            rows.append(torch.stack([seq_loss] * T))
            continue
        row = []
        for t in range(T):
            logp = log_probs[i, t]
            if method == "none":
                row.append(-a * logp)
                continue
            r = torch.exp(logp - old_log_probs[i, t].detach())
            if method == "noclip":
                row.append(-a * r)
            elif method in ("grpo", "dapo"):  # dapo: the same with decoupled bounds
                bound = cliprange if method == "grpo" else high
                row.append(-torch.minimum(r * a, torch.clamp(r, 1 - cliprange, 1 + bound) * a))
            elif method == "cispo":
                weight = torch.clamp(r, max=1 + high).detach()
                row.append(-weight * a * logp)
            else:
                raise ValueError(method)
        rows.append(torch.stack(row))
    return torch.stack(rows)


def frontier_loss(loss_fn: str, advantages, log_probs, base_log_probs, mask, clip_lower=0.2,
                  clip_higher=0.2, dual_clip=None, cispo_floor=False, tau_pos=1.0, tau_neg=1.05,
                  trust_region=0.0, ratio_kl=0.0, outlier_low=None, outlier_high=None):
    """The 2025–26 losses token by token (B, T), 0 off the mask: dapo (dual clip), cispo (floored),
    sapo, gmpo, dppo; written from the papers' formulas (SAPO arXiv 2511.20347, GMPO arXiv
    2507.20673, dual clip arXiv 1912.09729, DPPO arXiv 2602.04879), not from `course`."""
    B, T = log_probs.shape
    rows = []
    for i in range(B):
        a = float(advantages[i])
        tokens = [t for t in range(T) if mask[i, t]]
        if loss_fn == "gmpo":  # one clipped geometric-mean ratio per row
            clipped = []
            for t in tokens:
                x = log_probs[i, t] - base_log_probs[i, t].detach()
                if a > 0:
                    x = torch.clamp(x, max=clip_higher)
                elif a < 0:
                    x = torch.clamp(x, min=-clip_lower)
                clipped.append(x)
            s = torch.exp(sum(clipped) / len(clipped)) if tokens else None
        row = []
        for t in range(T):
            if not mask[i, t]:
                row.append(torch.zeros((), dtype=log_probs.dtype))
                continue
            lp, b = log_probs[i, t], base_log_probs[i, t].detach()
            r = torch.exp(lp - b)
            if loss_fn == "dapo":
                value = -torch.minimum(r * a, torch.clamp(r, 1 - clip_lower, 1 + clip_higher) * a)
                if dual_clip is not None and a < 0:
                    value = torch.clamp(value, max=-dual_clip * a)
            elif loss_fn == "cispo":
                weight = torch.clamp(r, 1 - clip_lower if cispo_floor else None, 1 + clip_higher)
                value = -weight.detach() * a * lp
            elif loss_fn == "sapo":
                tau = tau_pos if a > 0 else tau_neg
                value = -(4 / tau) * torch.sigmoid(tau * (r - 1)) * a
            elif loss_fn == "gmpo":
                value = -a * s
            elif loss_fn == "dppo":
                moved = float(torch.exp(lp.detach()) - torch.exp(b))
                dropped = moved > trust_region if a > 0 else moved < -trust_region
                value = (0 if dropped else -a * r) + ratio_kl * (lp - b) ** 2
            else:
                raise ValueError(loss_fn)
            ratio = float(r.detach())
            if (outlier_low is not None and ratio < outlier_low) or (
                    outlier_high is not None and ratio > outlier_high):
                value = value * 0
            row.append(value)
        rows.append(torch.stack(row))
    return torch.stack(rows)


def kl(delta: torch.Tensor, estimator: str, ratio: torch.Tensor | None = None) -> torch.Tensor:
    """Schulman's estimators of KL(π‖π_ref) from δ = log π − log π_ref."""
    if estimator == "k1":
        return delta
    if estimator == "k2":
        return delta**2 / 2
    if estimator == "k3":
        return torch.exp(-delta) - 1 + delta
    return ratio * delta


# ----------------------------------------------------------------------------- aggregation


def aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str, constant: float | None = None):
    """sequence: mean over rows of row means (empty row = 0); token/constant: masked sum / constant."""
    B, T = loss.shape
    if mode == "sequence":
        total = 0.0
        for i in range(B):
            n = int(mask[i].sum())
            row = sum(loss[i, t] for t in range(T) if mask[i, t])
            total = total + (row / n if n else 0.0)
        return total / B
    return sum(loss[i, t] for i in range(B) for t in range(T) if mask[i, t]) / constant


# ----------------------------------------------------------------------------- a train step


def make_rollout_batch(zero_advantage_group: bool = False) -> dict:
    """A batch of whole groups (G=4) with ragged prompts and responses and distinct rewards.

    Response tokens per row: 1, 3, 2, 7 (13 in group 1) and 2, 7, 12, 4 (25 in group 2), so a
    micro-batch's own token count is far from the step's.

    The ground truth of each rollout is its reward written as text, so `reward_fn` below is a
    lookup and the advantages are easy to work out. With `zero_advantage_group`, a third group
    whose four rewards are equal is appended: every one of its advantages is exactly 0.
    """
    prompts = ["1+2="] * 4 + ["35+47="] * 4
    responses = ["3", "<answer>3</answer>", "12", "3 4 5 6",
                 "82", "<think>5+7</think>82", "<think>35+47=82</think>82", "<answer>28</answer>"]
    # group means 0.625 and 0.5625: advantages without std normalization are exact in float32
    rewards = [1.0, 0.0, 0.5, 1.0,
               0.0, 1.0, 0.25, 1.0]
    if zero_advantage_group:
        prompts += ["9+9="] * 4
        responses += ["18", "<answer>18</answer>", "1", "81"]
        rewards += [1.0, 1.0, 1.0, 1.0]
    return {"prompts": prompts, "responses": responses,
            "ground_truths": [repr(r) for r in rewards], "rewards": rewards, "group_size": 4}


def reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """The reward is the number written in the ground truth; format counts a closed answer tag."""
    reward = float(ground_truth)
    return {"reward": reward, "format_reward": float("</answer>" in response),
            "answer_reward": reward}


def make_old_log_probs(model, batch: dict, tokenizer, seed: int = 0, scale: float = 0.3):
    """The model's own log-probs, perturbed on response tokens so ratios spread around 1."""
    tokens = tokenize(batch["prompts"], batch["responses"], tokenizer)
    with torch.no_grad():
        logp = response_log_probs(model, tokens["input_ids"], tokens["labels"])
    generator = torch.Generator().manual_seed(seed)
    noise = scale * torch.randn(logp.shape, generator=generator, dtype=torch.float64)
    return (logp + noise * tokens["response_mask"]).to(next(model.parameters()).dtype)


def full_batch_loss(
    model, tokenizer, batch: dict, method: str, mode: str, old_log_probs=None,
    cliprange: float | None = None, constant: float | None = None, rows=None,
    per_microbatch_token_count: bool = False, accumulation_steps: int = 1, normalizer: str = "std",
    kl_beta: float = 0.0, ref_log_probs=None, kl_estimator: str = "k3", sampler_log_probs=None,
    tis_cap: float = 2.0, token_weights=None, clip_higher: float | None = None, frontier=None,
):
    """The GRPO objective of the whole batch (or of `rows` of it, with the whole batch's scale).

    `per_microbatch_token_count=True` builds the historical bug instead: token mode divides by the
    micro-batch's own token count and then by the number of accumulation steps.
    With `sampler_log_probs`, each token's policy-gradient loss is weighted by min(π_old/π_sampler, cap)
    (π_old: `old_log_probs`, else the policy itself, detached); with `kl_beta` > 0, β·KL(π ‖ π_ref)
    is added per token before the aggregation. `frontier` (a dict of `frontier_loss`'s arguments,
    with "base" the (B, T) log-probs the ratio is taken against) replaces `method`'s loss.
    """
    tokens = tokenize(batch["prompts"], batch["responses"], tokenizer)
    advantages = torch.tensor(
        group_normalized_rewards(batch["rewards"], batch["group_size"], normalizer=normalizer),
        dtype=torch.float64,
    )
    all_rows = list(range(len(batch["prompts"])))
    rows = all_rows if rows is None else list(rows)
    mask = tokens["response_mask"][rows]
    logp = response_log_probs(model, tokens["input_ids"][rows], tokens["labels"][rows])
    old = None if old_log_probs is None else old_log_probs[rows]
    behaviour = logp.detach() if old is None else old
    if frontier is None:
        loss = policy_gradient_loss(method, advantages[rows], logp, old, cliprange, mask, clip_higher)
    else:
        options = dict(frontier)
        base = options.pop("base")
        base = behaviour if base is None else base[rows]
        loss = frontier_loss(method, advantages[rows], logp, base, mask, **options)
        behaviour = base
    if sampler_log_probs is not None:
        weights = torch.exp(behaviour - sampler_log_probs[rows]).clamp(max=tis_cap)
        loss = loss * weights
    if token_weights is not None:  # any fixed (B, T) weights of the policy-gradient term
        loss = loss * token_weights[rows]
    if kl_beta:
        ratio = torch.exp(logp - behaviour.detach())
        loss = loss + kl_beta * kl(logp - ref_log_probs[rows], kl_estimator, ratio)
    if mode == "sequence":
        # mean over the whole batch's B rows: this slice's share is len(rows) / B
        return aggregate(loss, mask, "sequence") * len(rows) / len(all_rows)
    if mode == "token":
        if per_microbatch_token_count:
            return aggregate(loss, mask, "token", int(mask.sum())) / accumulation_steps
        constant = int(tokens["response_mask"].sum())
    return aggregate(loss, mask, "constant", constant)


def gradient(model, losses: list[torch.Tensor]) -> list[torch.Tensor]:
    """Gradients of the sum of `losses`, one backward each (accumulated, as micro-batches are)."""
    model.zero_grad(set_to_none=True)
    for loss in losses:
        loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def relative_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """‖a − b‖ / ‖b‖ over all tensors flattened together."""
    diff = torch.sqrt(sum(((x - y).double() ** 2).sum() for x, y in zip(a, b)))
    norm = torch.sqrt(sum((y.double() ** 2).sum() for y in b))
    return float(diff / norm)
