"""Mutant: the mask slice ends one position late (len(p) + len(o) in label coordinates), so it
also covers the first padding label after each output."""
from _impl import build

globals().update(build())
_correct = tokenize_prompt_and_output  # noqa: F821  (defined by the update above)


def tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer):
    batch = _correct(prompt_strs, output_strs, tokenizer)
    mask = batch["response_mask"].clone()
    mask[:, 1:] |= batch["response_mask"][:, :-1]
    return {**batch, "response_mask": mask}
