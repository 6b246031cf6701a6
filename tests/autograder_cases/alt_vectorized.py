"""Correct submission #4: stages 1-4 written as tensor programs (pad_sequence, log_softmax,
stack), one expression per step; an honest style the copy rule must not flag."""
import torch
from torch.nn.utils.rnn import pad_sequence

from course.chunked_head import chunked_head_log_probs


def tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer):
    if not prompt_strs or len(prompt_strs) != len(output_strs):
        raise ValueError(f"need as many prompts as outputs, and some: {len(prompt_strs)} vs "
                         f"{len(output_strs)}")
    pad = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    encode = lambda text: torch.tensor(tokenizer.encode(text, add_special_tokens=False),  # noqa: E731
                                       dtype=torch.long)
    pieces = [(encode(p), encode(o)) for p, o in zip(prompt_strs, output_strs)]
    whole = pad_sequence([torch.cat(pair) for pair in pieces], batch_first=True,
                         padding_value=pad)
    flags = pad_sequence([torch.cat((torch.zeros_like(p), torch.ones_like(o))) for p, o in pieces],
                         batch_first=True, padding_value=0)
    return dict(input_ids=whole[:, :-1], labels=whole[:, 1:], response_mask=flags[:, 1:])


def compute_entropy(logits):
    if logits.dim() < 1 or logits.size(-1) < 1:
        raise ValueError(f"no vocabulary axis in {tuple(logits.shape)}")
    z = logits.float() if logits.dtype in (torch.half, torch.bfloat16) else logits
    log_p = torch.log_softmax(z, dim=-1)
    return -(log_p.exp() * log_p.nan_to_num(neginf=0.0)).sum(-1)


def get_response_log_probs(model, input_ids, labels, return_token_entropy=False,
                           logits_chunk_size=None):
    if input_ids.dim() != 2 or input_ids.shape != labels.shape:
        raise ValueError(f"(B, T) ids and labels expected: {tuple(input_ids.shape)}, "
                         f"{tuple(labels.shape)}")
    step = logits_chunk_size
    if step is None:
        step = getattr(getattr(model, "config", None), "grpo_logits_chunk_size", 0)
    if type(step) is not int or step < 0:
        raise ValueError(f"logits_chunk_size {step!r} is not a whole number >= 0")
    if step:
        log_probs, entropy = chunked_head_log_probs(model, input_ids, labels, step,
                                                    return_token_entropy)
        return {"log_probs": log_probs, **({"token_entropy": entropy} if return_token_entropy else {})}
    z = model(input_ids).logits
    z = z.float() if z.dtype in (torch.half, torch.bfloat16) else z
    picked = torch.take_along_dim(z, labels[..., None], dim=-1)[..., 0]
    out = {"log_probs": picked - z.logsumexp(-1)}
    if return_token_entropy:
        out["token_entropy"] = compute_entropy(z.detach())
    return out


def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
    if not rollout_responses or len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError(f"{len(rollout_responses)} responses for {len(repeated_ground_truths)} "
                         "ground truths")
    names = ["reward", "format_reward", "answer_reward"]
    grid = torch.stack([torch.tensor([float(reward_fn(r, t)[n]) for n in names])
                        for r, t in zip(rollout_responses, repeated_ground_truths)]).float()
    means = grid.mean(0)
    return grid[:, 0].contiguous(), {n + "_mean": float(means[i]) for i, n in enumerate(names)}


def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None):
    if estimator not in ("k1", "k2", "k3", "ratio_k1"):
        raise ValueError(f"unknown estimator {estimator!r}")
    if new_logprobs.shape != ref_logprobs.shape:
        raise ValueError("new_logprobs and ref_logprobs differ in shape")
    half = new_logprobs.dtype in (torch.half, torch.bfloat16)
    d = (new_logprobs.float() - ref_logprobs.float() if half else new_logprobs - ref_logprobs)
    d = torch.clamp(d, min=-40.0, max=40.0)
    if estimator == "ratio_k1" and (ratio is None or ratio.shape != d.shape):
        raise ValueError("ratio_k1 needs a ratio shaped like the log-probs")
    terms = {"k1": lambda: d, "k2": lambda: 0.5 * d * d, "k3": lambda: (-d).expm1() + d,
             "ratio_k1": lambda: d * ratio.to(d.dtype)}
    return terms[estimator]()
