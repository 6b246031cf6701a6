"""Mutant: chunks the output head but keeps every chunk's logits for backward (no recomputation):
the values and gradients are right, and the memory is that of the plain forward."""
import torch
from _impl import build

globals().update(build())
_correct = get_response_log_probs  # noqa: F821  (defined by the update above)


def get_response_log_probs(model, input_ids, labels, return_token_entropy=False, logits_chunk_size=None):
    if not isinstance(logits_chunk_size, int) or logits_chunk_size <= 0:
        return _correct(model, input_ids, labels, return_token_entropy, logits_chunk_size)
    hidden = model.model(input_ids=input_ids).last_hidden_state  # (B, T, H)
    pieces, entropies = [], []
    for s in range(0, input_ids.shape[1], logits_chunk_size):
        logits = model.lm_head(hidden[:, s:s + logits_chunk_size])  # (B, c, V), kept by autograd
        pieces.append(logits.gather(-1, labels[:, s:s + logits_chunk_size, None])[..., 0]
                      - torch.logsumexp(logits, -1))
        entropies.append(compute_entropy(logits.detach()))  # noqa: F821
    out = {"log_probs": torch.cat(pieces, dim=1)}
    if return_token_entropy:
        out["token_entropy"] = torch.cat(entropies, dim=1)
    return out
