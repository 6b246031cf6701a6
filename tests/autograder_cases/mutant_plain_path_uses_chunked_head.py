"""Mutant: the plain path (logits_chunk_size=0) hands its work to the given chunked head, with a
chunk as long as the sequence: right values, but none of the plain path is the student's."""
from _impl import build

from course.chunked_head import chunked_head_log_probs

globals().update(build())


def get_response_log_probs(model, input_ids, labels, return_token_entropy=False, logits_chunk_size=None):
    size = logits_chunk_size or input_ids.shape[1]
    log_probs, entropy = chunked_head_log_probs(model, input_ids, labels, size, return_token_entropy)
    return {"log_probs": log_probs, **({"token_entropy": entropy} if return_token_entropy else {})}
