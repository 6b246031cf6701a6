"""The CPU memory check of chunked scoring: saved-for-backward bytes, counted with saved-tensor hooks."""

import torch

from autograder.protocol.saved_bytes import SavedBytes
from course import get_response_log_probs
from course.loop.models import build_tiny_model


def _saved_bytes(model, input_ids, labels, chunk):
    with SavedBytes({"model": model, "input_ids": input_ids, "labels": labels}) as saved:
        out = get_response_log_probs(model, input_ids, labels, logits_chunk_size=chunk)
    return saved.total(), out


def test_saved_bytes_count_the_logits_only_when_they_are_kept():
    # B = 2, T = 64, V = 4096: the (B, T, V) float32 logits are 2 MiB, a chunk of 4 positions 128 KiB
    model = build_tiny_model(vocab_size=4096, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    ids = torch.randint(0, 4096, (2, 65), generator=torch.Generator().manual_seed(0))
    logits_bytes = 2 * 64 * 4096 * 4
    plain, plain_out = _saved_bytes(model, ids[:, :-1], ids[:, 1:], 0)
    chunked, chunked_out = _saved_bytes(model, ids[:, :-1], ids[:, 1:], 4)
    assert plain >= logits_bytes                       # the plain forward keeps its logits
    # the chunked head keeps what the plain forward does (decoder activations, hidden states, one
    # log-normalizer per position) less the logits, plus a contiguous copy of the (B, T) int64 labels
    # and the one float32 column its saved tile rows [h, ·] (N, H + 1) hold beside h
    assert plain - logits_bytes < chunked <= plain - logits_bytes + 2 * 64 * (8 + 4)
    torch.testing.assert_close(chunked_out["log_probs"], plain_out["log_probs"], rtol=0, atol=1e-5)
    del plain_out, chunked_out                         # the graph goes, and so do the saved tensors
    assert SavedBytes({}).total() == 0
