"""Mutant: no length check; zip() silently drops the prompts that have no output."""
from _impl import build

globals().update(build())
_correct = tokenize_prompt_and_output  # noqa: F821  (defined by the update above)


def tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer):
    pairs = list(zip(prompt_strs, output_strs))
    return _correct([p for p, _ in pairs], [o for _, o in pairs], tokenizer)
