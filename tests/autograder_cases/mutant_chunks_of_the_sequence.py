"""Mutant: "chunking" runs the model on chunks of the sequence instead of chunking the output head,
so every chunk after the first loses its left context (and restarts the positions at 0)."""
import torch
from _impl import build

globals().update(build())
_correct = get_response_log_probs  # noqa: F821  (defined by the update above)


def get_response_log_probs(model, input_ids, labels, return_token_entropy=False, logits_chunk_size=None):
    if not isinstance(logits_chunk_size, int) or logits_chunk_size <= 0:
        return _correct(model, input_ids, labels, return_token_entropy, logits_chunk_size)
    pieces = [_correct(model, input_ids[:, s:s + logits_chunk_size], labels[:, s:s + logits_chunk_size],
                       return_token_entropy, 0) for s in range(0, input_ids.shape[1], logits_chunk_size)]
    return {key: torch.cat([piece[key] for piece in pieces], dim=1) for key in pieces[0]}
