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

import torch


def _pad_id(tokenizer) -> int:
    """The id that pads a batch: the tokenizer's pad token, else its end of sequence."""
    pad_id = getattr(tokenizer, "pad_token_id", None)
    if pad_id is None:
        pad_id = getattr(tokenizer, "eos_token_id", None)
    if pad_id is None:
        raise ValueError("tokenizer has neither a pad_token_id nor an eos_token_id "
                         "to pad with")
    return int(pad_id)


def tokenize_prompt_and_output(
    prompt_strs: list[str], output_strs: list[str], tokenizer
) -> dict[str, torch.Tensor]:
    """(prompt, output) pairs -> a right-padded, label-shifted batch and response mask.

    Each prompt and output is encoded separately without special tokens;
    x_i = prompt ids + output ids. With L = max_i len(x_i), every x_i is right-padded
    to L with the pad id (eos if there is none), and
        input_ids     = x[:, :-1]                                    (B, L-1)
        labels        = x[:, 1:]                                     (B, L-1)
        response_mask = 1 where labels[i, t] is a token of output i  (B, L-1)
    Source: Stanford CS336 (Spring 2025) Assignment 5, `tokenize_prompt_and_output`.
    Raises ValueError if the lists differ in length or are empty.
    """
    if len(prompt_strs) != len(output_strs):
        raise ValueError(
            f"prompt_strs and output_strs must have the same length, "
            f"got {len(prompt_strs)} prompts and {len(output_strs)} outputs"
        )
    if len(prompt_strs) == 0:
        raise ValueError(
            "prompt_strs and output_strs are empty: there is nothing to tokenize"
        )
    pad_id = _pad_id(tokenizer)

    sequences, is_output = [], []
    for prompt, output in zip(prompt_strs, output_strs):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        output_ids = tokenizer.encode(output, add_special_tokens=False)
        sequences.append(prompt_ids + output_ids)
        is_output.append([0] * len(prompt_ids) + [1] * len(output_ids))

    length = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)  # (B, L)
    output_mask = torch.zeros(
        (len(sequences), length), dtype=torch.long
    )  # (B, L) 1 on output tokens
    for i, (sequence, mask) in enumerate(zip(sequences, is_output)):
        ids[i, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        output_mask[i, : len(mask)] = torch.tensor(mask, dtype=torch.long)

    # position t reads x[:t+1] and predicts x[t+1]: shift labels and mask together
    return {
        "input_ids": ids[:, :-1],
        "labels": ids[:, 1:],
        "response_mask": output_mask[:, 1:],
    }
