"""The CPU memory check of chunked scoring: saved-for-backward bytes, read from the autograd graph."""

import threading

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from autograder.protocol.saved_bytes import owned_storages, saved_bytes
from course import get_response_log_probs
from course.loop.models import build_tiny_model


def _saved_bytes(model, input_ids, labels, chunk):
    owned = owned_storages({"model": model, "input_ids": input_ids, "labels": labels})
    out = get_response_log_probs(model, input_ids, labels, logits_chunk_size=chunk)
    kept, hidden = saved_bytes(out, owned)
    assert hidden == []
    return kept, out


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
    plain_out["log_probs"].sum().backward()            # backward frees what was saved
    assert saved_bytes(plain_out, frozenset()) == (0, [])


def _exp_sum(x):
    return (x * 2).exp().sum()  # keeps exp's result (N float32) and the wrapped scalar 2 (8 bytes)


def test_the_count_reads_what_the_graph_keeps_however_the_forward_ran():
    """Hand-worked: x is (3, 4) float32, so exp's result is 48 bytes and the scalar 2 a float64's
    8; the caller's own x is not counted; a thread, tracing and a context attribute hide nothing;
    checkpointing's hooks keep nothing; any other hooks are named; a freed graph keeps nothing."""
    x = torch.randn(3, 4, requires_grad=True)
    owned = owned_storages({"x": x})
    assert saved_bytes(_exp_sum(x), owned) == (48 + 8, [])
    out = []
    worker = threading.Thread(target=lambda: out.append(_exp_sum(x)))
    worker.start()
    worker.join()
    assert saved_bytes(out, owned) == (48 + 8, [])

    class Kept(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.kept = {"tripled": [a * 3]}  # 48 bytes, kept as an attribute
            return a.sum()

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.kept["tripled"][0] / 3

    assert saved_bytes(Kept.apply(x), owned) == (48, [])
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        hooked = _exp_sum(x)
    kept, hidden = saved_bytes(hooked, owned)  # the wrapped scalar is never handed to hooks
    assert kept == 8 and len(hidden) == 1 and hidden[0].startswith("saved-tensor hooks 'test_")
    recomputed = checkpoint(_exp_sum, x, use_reentrant=False)
    assert saved_bytes(recomputed, owned) == (8, [])
    freed = _exp_sum(x)
    freed.backward()
    assert saved_bytes(freed, owned) == (0, [])


def test_the_callers_own_storages_are_read_from_the_modules_dicts():
    """`owned_storages` reads parameters and buffers from the modules' own dicts: a module whose
    `parameters()` also yields a tensor of the submission's (a buffer it will fill with logits)
    does not make that tensor the caller's, so what is saved in it is counted."""
    hidden_store = torch.zeros(1000)

    class Lying(torch.nn.Linear):
        def parameters(self, recurse=True):
            yield from super().parameters(recurse)
            yield hidden_store

    model = Lying(2, 2)
    model.register_buffer("scale", torch.ones(3))
    owned = owned_storages({"model": model})
    expected = {p.untyped_storage().data_ptr() for p in [model.weight, model.bias, model.scale]}
    assert owned == expected and hidden_store.untyped_storage().data_ptr() not in owned
    x = torch.randn(3, 2, requires_grad=True)
    kept = (model(x) * hidden_store[:2]).sum()  # mul saves hidden_store's view: 4,000 bytes
    assert saved_bytes(kept, owned)[0] >= 4000


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_gpu_counters_bound_at_import_read_what_torch_cuda_reads():
    from autograder.untrusted.probes import cuda_allocated

    block = torch.empty(2**20, device="cuda")
    torch.cuda.reset_peak_memory_stats()
    del block
    assert cuda_allocated("current") == torch.cuda.memory_allocated()
    assert cuda_allocated("peak") == torch.cuda.max_memory_allocated() >= 4 * 2**20
