"""Mutant: `if logits_chunk_size and logits_chunk_size > 0: ... else: plain forward`, so a negative
chunk size silently means "no chunking" instead of raising ValueError."""
from _impl import build

globals().update(build())
_correct = get_response_log_probs  # noqa: F821  (defined by the update above)


def get_response_log_probs(model, input_ids, labels, return_token_entropy=False, logits_chunk_size=None):
    if isinstance(logits_chunk_size, int) and logits_chunk_size < 0:
        logits_chunk_size = 0
    return _correct(model, input_ids, labels, return_token_entropy, logits_chunk_size)
