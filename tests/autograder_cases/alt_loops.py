"""Correct submission #2: plain Python loops, written without looking at any other implementation."""
import math

import torch


def tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer):
    if len(prompt_strs) != len(output_strs):
        raise ValueError("prompt_strs and output_strs must have the same length")
    seqs, flags = [], []
    for prompt, output in zip(prompt_strs, output_strs):
        p = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        o = list(tokenizer(output, add_special_tokens=False)["input_ids"])
        seqs.append(p + o)
        flags.append([False] * len(p) + [True] * len(o))
    width = max(len(s) for s in seqs)
    input_ids = torch.zeros(len(seqs), width - 1, dtype=torch.long)
    labels = torch.zeros(len(seqs), width - 1, dtype=torch.long)
    mask = torch.zeros(len(seqs), width - 1, dtype=torch.bool)
    for i, (seq, flag) in enumerate(zip(seqs, flags)):
        seq = seq + [tokenizer.pad_token_id] * (width - len(seq))
        flag = flag + [False] * (width - len(flag))
        for t in range(width - 1):
            input_ids[i, t], labels[i, t], mask[i, t] = seq[t], seq[t + 1], flag[t + 1]
    return {"input_ids": input_ids, "labels": labels, "response_mask": mask}


def compute_entropy(logits):
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    top = z.max(dim=-1, keepdim=True).values
    shifted = z - top
    weights = shifted.exp()
    partition = weights.sum(-1)
    return partition.log() - (weights * shifted).sum(-1) / partition


def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                     advantage_normalizer="std"):
    values = raw_rewards.tolist()
    out = []
    for g in range(0, len(values), group_size):
        group = values[g:g + group_size]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((x - mean) ** 2 for x in group) / (len(group) - 1))
        for x in group:
            a = x - mean if baseline == "mean" else x
            if advantage_normalizer == "std":
                a /= std + advantage_eps
            elif advantage_normalizer == "mean":
                a /= mean + advantage_eps
            out.append(a)
    adv = torch.tensor(out, dtype=raw_rewards.dtype)
    return adv, {"advantage_mean": adv.mean(), "advantage_std": adv.std()}


def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                     normalization_constant=None):
    if normalization_constant is not None and not normalization_constant > 0:
        raise ValueError("normalization_constant must be > 0")
    if loss_normalization == "constant" and normalization_constant is None:
        raise ValueError("constant normalization needs normalization_constant")
    rows = []
    total = 0.0
    for losses, flags in zip(per_token_policy_gradient_loss, mask):
        picked = losses[flags.bool()]
        rows.append(picked.sum() / max(len(picked), 1))
        total = total + picked.sum()
    if loss_normalization == "sequence":
        return torch.stack(rows).sum() / len(rows)
    denominator = normalization_constant if normalization_constant is not None else mask.sum()
    return total / denominator
