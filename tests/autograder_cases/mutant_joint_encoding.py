"""Mutant: tokenization encodes prompt + output as one string and masks after the prompt's own
token count: right with a character-level tokenizer, wrong wherever BPE merges across the two."""
import torch
from _impl import build

globals().update(build())


def tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer):
    if len(prompt_strs) != len(output_strs):
        raise ValueError("prompt_strs and output_strs differ in length")
    rows, masks = [], []
    for prompt, output in zip(prompt_strs, output_strs):
        ids = tokenizer.encode(prompt + output, add_special_tokens=False)
        start = len(tokenizer.encode(prompt, add_special_tokens=False))
        rows.append(ids)
        masks.append([0] * start + [1] * (len(ids) - start))
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([row + [pad] * (width - len(row)) for row in rows])
    mask = torch.tensor([m + [0] * (width - len(m)) for m in masks])
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "response_mask": mask[:, 1:]}
