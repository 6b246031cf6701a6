"""Mutant: response_mask built with torch.zeros(B, L), which is float32, not an integer tensor."""
from _impl import build

globals().update(build())
_correct = tokenize_prompt_and_output  # noqa: F821  (defined by the update above)


def tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer):
    batch = _correct(prompt_strs, output_strs, tokenizer)
    return {**batch, "response_mask": batch["response_mask"].float()}
