"""Stage 1 — tokenization: prompt + response into `input_ids`, `labels` and a `response_mask`.

A causal LM predicts token t+1 from tokens ≤ t, so the training pair is the sequence shifted by one:
  input_ids = s[:-1],  labels = s[1:],  response_mask[t] = 1 ⇔ labels[t] is a response token.
Prompt and response are tokenized separately (no special tokens) and concatenated, so the boundary
between them is exact even when a BPE merge would have crossed it. Padding is on the right with the
tokenizer's pad id (eos when it has none); padded positions are never in the mask.

Reference: the CS336 (Stanford, 2025) assignment 5 contract; TRL `GRPOTrainer` builds the same
completion mask.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _pad_id(tokenizer) -> int:
    pad_id = getattr(tokenizer, "pad_token_id", None)
    if pad_id is None:
        pad_id = getattr(tokenizer, "eos_token_id", None)
    if pad_id is None:
        raise ValueError("tokenizer has neither a pad_token_id nor an eos_token_id to pad with")
    return int(pad_id)


def tokenize_prompt_and_output(
    prompt_strs: Sequence[str], output_strs: Sequence[str], tokenizer
) -> dict[str, torch.Tensor]:
    """Tokenize B (prompt, output) pairs into a right-padded training batch.

    Args:
        prompt_strs: B prompt strings.
        output_strs: B response strings, `output_strs[i]` answering `prompt_strs[i]`.
        tokenizer: a Hugging Face tokenizer (anything with `encode(text, add_special_tokens=False)`).

    Returns:
        dict with `input_ids`, `labels` (long) and `response_mask` (long 0/1), each (B, L − 1),
        where L is the longest prompt+output length in tokens.
    """
    if isinstance(prompt_strs, str) or isinstance(output_strs, str):
        raise ValueError("prompt_strs and output_strs must be lists of strings, not single strings")
    if len(prompt_strs) != len(output_strs):
        raise ValueError(
            f"prompt_strs and output_strs must have the same length, got "
            f"{len(prompt_strs)} and {len(output_strs)}"
        )
    if len(prompt_strs) == 0:
        raise ValueError("prompt_strs must not be empty")
    pad_id = _pad_id(tokenizer)

    sequences, masks = [], []
    for prompt, output in zip(prompt_strs, output_strs):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        output_ids = tokenizer.encode(output, add_special_tokens=False)
        sequences.append(prompt_ids + output_ids)
        masks.append([0] * len(prompt_ids) + [1] * len(output_ids))
    max_len = max(len(s) for s in sequences)
    if max_len < 2:
        raise ValueError("every prompt+output is shorter than 2 tokens: there is nothing to predict")

    tokens = torch.full((len(sequences), max_len), pad_id, dtype=torch.long)  # (B, L)
    is_output = torch.zeros((len(sequences), max_len), dtype=torch.long)  # (B, L)
    for i, (ids, mask) in enumerate(zip(sequences, masks)):
        tokens[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        is_output[i, : len(mask)] = torch.tensor(mask, dtype=torch.long)

    return {
        "input_ids": tokens[:, :-1],  # (B, L-1)
        "labels": tokens[:, 1:],  # (B, L-1)
        # mask follows the labels: position t is graded when the token it predicts is output
        "response_mask": is_output[:, 1:],  # (B, L-1)
    }
