"""compute_entropy and get_response_log_probs, plain and chunked."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from naive import entropy, relative_difference, response_log_probs, tokenize

from course import compute_entropy, get_response_log_probs
from course.chunked_head import CHUNKABLE_MODEL_TYPES

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPTS = ["1+2=", "35+47=", "What is 9*9?\n"]
OUTPUTS = ["3", "<answer>82</answer>", "<think>9*9</think> 81"]


@pytest.fixture
def batch(tokenizer):
    return tokenize(PROMPTS, OUTPUTS, tokenizer)  # (3, 20)


# ----------------------------------------------------------------------------- entropy


def test_entropy_hand_worked():
    # uniform over 4: H = ln 4 = 1.3862943611198906
    uniform = compute_entropy(torch.zeros(4, dtype=torch.float64))
    assert uniform.shape == () and uniform.dtype == torch.float64
    assert abs(uniform.item() - 1.3862943611198906) < 1e-12
    # p = (1/4, 3/4) from logits (0, ln 3): H = 0.25 ln 4 + 0.75 ln(4/3) = 0.5623351446188083
    # shifting every logit by a constant changes nothing
    logits = torch.tensor([[0.0, math.log(3.0)], [10.0, 10.0 + math.log(3.0)]], dtype=torch.float64)
    h = compute_entropy(logits)
    assert h.shape == (2,)
    torch.testing.assert_close(h, torch.tensor([0.5623351446188083] * 2, dtype=torch.float64),
                               rtol=0, atol=1e-12)


def test_entropy_is_stable_for_large_logits():
    # exp(1000) overflows float32 and exp(1e4) float64: the logsumexp form must still give
    # ln 2, 0 and ln 3 (to the dtype's resolution at that magnitude: 6e-5 at 1000 in float32)
    rows = [[1000.0, 1000.0, -1000.0], [1e4, 0.0, 0.0], [-5e3, -5e3, -5e3]]
    expected = [math.log(2), 0.0, math.log(3)]
    for dtype, scale, atol in [(torch.float32, 1.0, 2e-3), (torch.float64, 1.0, 1e-9),
                               (torch.float64, 1e300 / 1e4, 0.0)]:
        logits = torch.tensor(rows, dtype=dtype) * scale
        h = compute_entropy(logits)
        assert torch.isfinite(h).all(), (dtype, scale)
        if atol:
            torch.testing.assert_close(h, torch.tensor(expected, dtype=dtype), rtol=0, atol=atol)


def test_entropy_matches_naive_and_keeps_shape():
    gen = torch.Generator().manual_seed(0)
    logits = 5 * torch.randn(2, 3, 7, 11, generator=gen, dtype=torch.float64)
    h = compute_entropy(logits)
    assert h.shape == (2, 3, 7)
    torch.testing.assert_close(h, entropy(logits), rtol=0, atol=1e-12)


def test_entropy_of_half_precision_is_float32():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(1)).bfloat16()
    h = compute_entropy(logits)
    assert h.dtype == torch.float32
    torch.testing.assert_close(h, entropy(logits.float()).float(), rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- log-probs


def test_log_probs_hand_worked_with_a_bigram_model():
    # A "model" whose logits at every position are (0, ln 3, 0): p = (0.2, 0.6, 0.2).
    class Constant(torch.nn.Module):
        def forward(self, input_ids):
            logits = torch.tensor([0.0, math.log(3.0), 0.0], dtype=torch.float64)
            return type("Out", (), {"logits": logits.expand(*input_ids.shape, 3)})()

    labels = torch.tensor([[1, 0, 2]])
    out = get_response_log_probs(Constant(), torch.zeros_like(labels), labels, logits_chunk_size=0)
    torch.testing.assert_close(out["log_probs"], torch.log(torch.tensor([[0.6, 0.2, 0.2]],
                                                                        dtype=torch.float64)))


def test_log_probs_and_entropy_match_naive_float64(make_model, batch):
    model = make_model(torch.float64)
    out = get_response_log_probs(model, batch["input_ids"], batch["labels"],
                                 return_token_entropy=True, logits_chunk_size=0)
    expected = response_log_probs(model, batch["input_ids"], batch["labels"])
    assert out["log_probs"].shape == batch["labels"].shape
    assert out["log_probs"].dtype == torch.float64
    torch.testing.assert_close(out["log_probs"], expected, rtol=0, atol=1e-12)
    with torch.no_grad():
        expected_entropy = entropy(model(batch["input_ids"]).logits)
    torch.testing.assert_close(out["token_entropy"], expected_entropy, rtol=0, atol=1e-12)
    assert not out["token_entropy"].requires_grad and out["token_entropy"].grad_fn is None
    assert out["log_probs"].requires_grad


def test_plain_gradients_match_naive_float64(make_model, batch):
    # gather − logsumexp differentiates like the full log_softmax it avoids building
    model = make_model(torch.float64)
    plain, grads = _values_and_gradients(model, batch, 0)
    expected = response_log_probs(model, batch["input_ids"], batch["labels"])
    weights = torch.randn(batch["labels"].shape, generator=torch.Generator().manual_seed(3))
    model.zero_grad(set_to_none=True)
    (expected * weights.double()).sum().backward()
    assert relative_difference(grads, [p.grad for p in model.parameters()]) < 1e-12


def _values_and_gradients(model, batch, chunk):
    weights = torch.randn(batch["labels"].shape, generator=torch.Generator().manual_seed(3))
    model.zero_grad(set_to_none=True)
    out = get_response_log_probs(model, batch["input_ids"], batch["labels"],
                                 return_token_entropy=True, logits_chunk_size=chunk)
    (out["log_probs"] * weights.to(out["log_probs"].dtype)).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    return out, grads


@pytest.mark.parametrize("chunk", [1, 4, 7, 20, 64])
def test_chunked_matches_plain_values_and_gradients_fp32(make_model, batch, chunk):
    model = make_model(torch.float32)
    plain, plain_grads = _values_and_gradients(model, batch, 0)
    chunked, chunked_grads = _values_and_gradients(model, batch, chunk)
    torch.testing.assert_close(chunked["log_probs"], plain["log_probs"], rtol=0, atol=1e-5)
    torch.testing.assert_close(chunked["token_entropy"], plain["token_entropy"], rtol=0, atol=1e-5)
    assert not chunked["token_entropy"].requires_grad
    assert relative_difference(chunked_grads, plain_grads) < 1e-5


def test_chunked_matches_naive_float64(make_model, batch):
    model = make_model(torch.float64)
    chunked, grads = _values_and_gradients(model, batch, 5)
    expected = response_log_probs(model, batch["input_ids"], batch["labels"])
    torch.testing.assert_close(chunked["log_probs"], expected, rtol=0, atol=1e-12)
    weights = torch.randn(batch["labels"].shape, generator=torch.Generator().manual_seed(3))
    model.zero_grad(set_to_none=True)
    (expected * weights.double()).sum().backward()
    assert relative_difference(grads, [p.grad for p in model.parameters()]) < 1e-10


@pytest.mark.parametrize("chunk", [0, 5])
def test_temperature_scores_softmax_of_logits_over_tau(make_model, batch, chunk):
    # τ = 0.5: log softmax(z / τ)(y) and its entropy, plain and chunked, against float64 by hand
    model = make_model(torch.float64)
    out = get_response_log_probs(model, batch["input_ids"], batch["labels"], return_token_entropy=True,
                                 logits_chunk_size=chunk, temperature=0.5)
    with torch.no_grad():
        logits = model(batch["input_ids"]).logits / 0.5                            # (B, T, V)
    expected = logits.log_softmax(-1).gather(-1, batch["labels"][..., None])[..., 0]
    torch.testing.assert_close(out["log_probs"], expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(out["token_entropy"], entropy(logits), rtol=0, atol=1e-12)
    at_one = response_log_probs(model, batch["input_ids"], batch["labels"])
    assert (out["log_probs"] - at_one).abs().max() > 0.1  # τ = 1 is far outside the tolerance
    for bad in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="temperature"):
            get_response_log_probs(model, batch["input_ids"], batch["labels"], temperature=bad)


def test_chunked_without_grad_matches(make_model, batch):
    model = make_model(torch.float64)
    with torch.no_grad():
        out = get_response_log_probs(model, batch["input_ids"], batch["labels"], logits_chunk_size=4)
        expected = response_log_probs(model, batch["input_ids"], batch["labels"])
    torch.testing.assert_close(out["log_probs"], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("chunk", [0, 5])
def test_bf16_model_is_scored_in_fp32(make_model, batch, chunk):
    model = make_model(torch.bfloat16)
    out = get_response_log_probs(model, batch["input_ids"], batch["labels"],
                                 return_token_entropy=True, logits_chunk_size=chunk)
    assert out["log_probs"].dtype == torch.float32
    assert out["token_entropy"].dtype == torch.float32
    with torch.no_grad():
        logits = model(batch["input_ids"]).logits.float()  # bf16 logits, upcast before normalizing
    expected = torch.log_softmax(logits, -1).gather(-1, batch["labels"].unsqueeze(-1)).squeeze(-1)
    # log Z ≈ ln 103 ≈ 4.6, where one bf16 step is 0.03: normalizing in bf16 misses by ~3e-2.
    # (The chunked head multiplies the same bf16 numbers; on CPU its logits come out identical.)
    tolerance = 1e-5 if chunk == 0 else 1e-4
    torch.testing.assert_close(out["log_probs"].detach(), expected, rtol=0, atol=tolerance)
    torch.testing.assert_close(out["token_entropy"], entropy(logits).float(), rtol=0, atol=tolerance)


# ----------------------------------------------------------------------------- chunk size argument


def _largest_logits_block(model, batch, chunk, monkeypatch):
    """The most logits one output-head call made: the module's own call, or a tile of the chunked one."""
    import course.chunked_head

    sizes = []
    block_logits = course.chunked_head._block_logits

    def spy(tiles, weight, shift):
        sizes.append(tiles.hidden.shape[0] * weight.shape[0])  # (rows, vocabulary slice)
        sizes.append(tiles.buffer.numel())  # the one buffer the tiles are written into
        return block_logits(tiles, weight, shift)

    monkeypatch.setattr(course.chunked_head, "_block_logits", spy)
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, args, output: sizes.append(output.numel()))
    try:
        out = get_response_log_probs(model, batch["input_ids"], batch["labels"], logits_chunk_size=chunk)
        out["log_probs"].sum().backward()  # recomputation in backward calls the head again
    finally:
        hook.remove()
    return max(sizes), len(sizes), out


def test_chunk_size_none_reads_model_config(make_model, batch, monkeypatch):
    model = make_model(torch.float64)
    B, T = batch["labels"].shape  # (3, 20)
    V = model.config.vocab_size  # 103
    largest, _, _ = _largest_logits_block(model, batch, None, monkeypatch)  # no config attribute: plain
    assert largest == B * T * V
    model.config.grpo_logits_chunk_size = 5
    largest, calls, out = _largest_logits_block(model, batch, None, monkeypatch)
    assert largest <= B * 5 * V and calls >= 2 * 4  # at most one (B, 5, V) block at a time, fwd + bwd
    expected = response_log_probs(model, batch["input_ids"], batch["labels"])
    torch.testing.assert_close(out["log_probs"], expected, rtol=0, atol=1e-12)
    model.config.grpo_logits_chunk_size = 0
    assert _largest_logits_block(model, batch, None, monkeypatch)[0] == B * T * V
    # an explicit argument wins over the config
    model.config.grpo_logits_chunk_size = 5
    assert _largest_logits_block(model, batch, 0, monkeypatch)[0] == B * T * V
    model.config.grpo_logits_chunk_size = -2
    with pytest.raises(ValueError, match="logits_chunk_size"):
        get_response_log_probs(model, batch["input_ids"], batch["labels"])


@pytest.mark.parametrize("bad", [-1, 2.0, True, "4"])
def test_invalid_chunk_sizes_raise(make_model, batch, bad):
    model = make_model(torch.float64)
    with pytest.raises(ValueError, match="logits_chunk_size"):
        get_response_log_probs(model, batch["input_ids"], batch["labels"], logits_chunk_size=bad)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=103, n_embd=16, n_layer=1, n_head=2,
                                      n_positions=64, bos_token_id=1, eos_token_id=2))


def _gemma2():
    # Gemma 2 soft-caps its logits after the head: scoring lm_head(hidden) directly would be wrong
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    return Gemma2ForCausalLM(Gemma2Config(
        vocab_size=103, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, head_dim=8, pad_token_id=0, bos_token_id=1,
        eos_token_id=2))


@pytest.mark.parametrize("build", [_gpt2, _gemma2])
def test_other_architectures_refuse_to_chunk_but_score_plainly(batch, build):
    model = build().double().eval()  # eval: GPT-2 has dropout
    with pytest.raises(ValueError, match="(?i)olmo2|logits_chunk_size"):
        get_response_log_probs(model, batch["input_ids"], batch["labels"], logits_chunk_size=4)
    out = get_response_log_probs(model, batch["input_ids"], batch["labels"], logits_chunk_size=0)
    expected = response_log_probs(model, batch["input_ids"], batch["labels"])
    torch.testing.assert_close(out["log_probs"], expected, rtol=0, atol=1e-12)


def _decoder_with_plain_head(architecture):
    """Llama or Qwen2 at toy size: logits = lm_head(model.model(x)), like OLMo2."""
    import transformers

    config_class = getattr(transformers, f"{architecture}Config")
    model_class = getattr(transformers, f"{architecture}ForCausalLM")
    torch.manual_seed(0)
    return model_class(config_class(
        vocab_size=103, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
        eos_token_id=2))


@pytest.mark.parametrize("architecture", ["Llama", "Qwen2"])
def test_every_architecture_accepted_for_chunking_is_exact(batch, architecture):
    # course chunks these besides OLMo2 (logits = lm_head(model.model(x)), no scaling or soft-cap):
    # chunked values and gradients must equal the model's own forward
    model = _decoder_with_plain_head(architecture).double().eval()
    assert model.config.model_type in CHUNKABLE_MODEL_TYPES
    out = get_response_log_probs(model, batch["input_ids"], batch["labels"], logits_chunk_size=4)
    expected = response_log_probs(model, batch["input_ids"], batch["labels"])
    torch.testing.assert_close(out["log_probs"], expected, rtol=0, atol=1e-12)
    head = model.get_output_embeddings().weight
    (grad_chunked,) = torch.autograd.grad(out["log_probs"].sum(), head)
    (grad_plain,) = torch.autograd.grad(expected.sum(), head)
    torch.testing.assert_close(grad_chunked, grad_plain, rtol=0, atol=1e-12)


def test_entropy_of_a_masked_vocabulary_is_finite():
    # a −inf logit has probability 0 and contributes nothing: H([0, −inf]) = H(one-hot) = 0
    logits = torch.tensor([[0.0, -float("inf")], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(
        compute_entropy(logits), torch.tensor([0.0, math.log(2)], dtype=torch.float64), rtol=0, atol=1e-15
    )


def test_mismatched_shapes_raise(make_model, batch):
    model = make_model(torch.float64)
    with pytest.raises(ValueError, match="labels|input_ids"):
        get_response_log_probs(model, batch["input_ids"], batch["labels"][:, :-1])


# ----------------------------------------------------------------------------- the benchmark


BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_logprobs.py"
TOY = ["--vocab", "512", "--hidden", "16", "--layers", "1", "--heads", "2", "--batch", "2", "--seq", "16",
       "--block-mib", "0.01", "--repeats", "1", "--threads", "1"]


@pytest.mark.slow
def test_logprob_benchmark_runs_every_method_at_toy_size():
    # the CPU path of the benchmark, end to end: one subprocess per method, equal results, a summary
    done = subprocess.run([sys.executable, str(BENCHMARK), *TOY], capture_output=True, text=True,
                          timeout=600, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("machine: ") and "torch" in lines[0] and "cores" in lines[0]
    assert "chunk = 2 positions" in lines[1]                   # 0.01 MiB / (2 · 512 · 4 bytes) = 2
    rows = {line.split()[0]: line.split() for line in lines[3:-1]}
    assert set(rows) == {"log_softmax", "trl", "gather_lse", "chunked", "cce", "decoder"}  # optional ones say so
    assert rows["decoder"][-2:] == ["-", "-"]  # the floor under every head scores no log-prob to compare
    for method in ("gather_lse", "chunked", "cce"):
        if rows[method][1:3] != ["not", "installed:"]:
            assert float(rows[method][-2]) < 1e-5 and float(rows[method][-1]) < 1e-5   # same log p, same grad
    summary = json.loads(lines[-1])
    assert {"chunked_over_log_softmax_peak", "chunked_over_log_softmax_time"} <= set(summary)


@pytest.mark.slow
def test_logprob_benchmark_refuses_cuda_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(BENCHMARK), *TOY, "--device", "cuda"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "--device cuda: torch sees no CUDA device" in done.stderr


def test_chunked_tiles_of_few_rows_match_plain(make_model, batch, monkeypatch):
    # long batches split the rows too (B · T > 4096); here 7 rows a tile: partial row and vocab tiles
    import course.chunked_head

    monkeypatch.setattr(course.chunked_head, "_MAX_TILE_ROWS", 7)
    model = make_model(torch.float64)
    plain, plain_grads = _values_and_gradients(model, batch, 0)
    chunked, chunked_grads = _values_and_gradients(model, batch, 2)
    torch.testing.assert_close(chunked["log_probs"], plain["log_probs"], rtol=0, atol=1e-12)
    torch.testing.assert_close(chunked["token_entropy"], plain["token_entropy"], rtol=0, atol=1e-12)
    assert relative_difference(chunked_grads, plain_grads) < 1e-10


# ----------------------------------------------------------------------------- the chunked head itself


def _head_inputs(dtype, count=12, hidden=8, vocab=23, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(count, hidden, generator=gen, dtype=torch.float64)
    w = torch.randn(vocab, hidden, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, vocab, (count,), generator=gen)
    labels[:4] = torch.tensor([0, vocab - 1, 4, 5])  # first and last token; 4, 5 straddle width-5 tiles
    g = torch.randn(count, generator=gen, dtype=torch.float64)
    return h.to(dtype), w.to(dtype), labels, g.to(dtype)


def _naive_head(h, w, labels, g):
    """log softmax(h Wᵀ)[y], entropy, and the gradients of Σ g · log p: the whole (N, V) logits."""
    h, w = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    log_softmax = torch.log_softmax(h @ w.t(), dim=-1)  # (N, V)
    log_probs = log_softmax.gather(-1, labels[:, None])[:, 0]
    entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    (log_probs * g.double()).sum().backward()
    return log_probs.detach(), entropy.detach(), h.grad, w.grad


def _chunked_head(h, w, labels, g, budget, want_entropy=True):
    from course.chunked_head import _ChunkedHeadLogProb

    h, w = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    log_probs, entropy = _ChunkedHeadLogProb.apply(h, w, labels, budget, want_entropy)
    (log_probs * g.to(log_probs.dtype)).sum().backward()
    return log_probs.detach(), entropy, h.grad, w.grad


# budgets: one logit a tile; 5 rows x 1; all 12 rows x 5 (tiles of V = 23 end on 5, 10, 15, 20, 23);
# 12 x 23 (one tile); more than all logits
@pytest.mark.parametrize("budget", [1, 5, 60, 12 * 23, 10**6])
def test_chunked_head_equals_naive_float64_at_every_tiling(budget):
    h, w, labels, g = _head_inputs(torch.float64)
    expected = _naive_head(h, w, labels, g)
    got = _chunked_head(h, w, labels, g, budget)
    for name, a, b in zip(["log p", "entropy", "∂h", "∂W"], got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=name)


@pytest.mark.parametrize("budget", [5, 64 * 100])  # 1000 slices of width 1; 10 of width 100
def test_chunked_head_float32_is_close_to_float64(budget):
    h, w, labels, g = _head_inputs(torch.float32, count=64, hidden=32, vocab=1000)  # logits ~ N(0, 32)
    truth = _naive_head(h, w, labels, g)
    got = _chunked_head(h, w, labels, g, budget)
    assert all(t.dtype == torch.float32 for t in got)
    # |log p| up to 34, where one float32 step is 4e-6; the entropy sums up to 1000 slices in float32
    torch.testing.assert_close(got[0].double(), truth[0], rtol=0, atol=2e-5)
    torch.testing.assert_close(got[1].double(), truth[1], rtol=0, atol=1e-4)
    assert relative_difference(got[2:], truth[2:]) < 1e-5
    # a head that forgets the one-hot term (∂W[y] += g h) or the cotangent is off by O(1)
    assert (truth[3] - _naive_head(h, w, labels, torch.ones_like(g))[3]).norm() > truth[3].norm() / 2


def test_chunked_head_survives_a_logit_far_above_the_first_tile():
    # exp(z − c) overflows float32 beyond 88: the last tile holds a logit ~300 above the first
    # tile's max, which moves the shift; then tiles below it again add almost nothing
    h, w, labels, g = _head_inputs(torch.float32)
    w[-1] = 40 * h[0] / h[0].norm()  # z[0, V − 1] = 40 |h_0| ≈ 100, in the last tile of width 5
    w[-3] = 120 * h[0] / h[0].norm()
    labels[0] = 22
    truth = _naive_head(h, w, labels, g)
    for want_entropy in (False, True):
        got = _chunked_head(h, w, labels, g, budget=60, want_entropy=want_entropy)
        assert all(torch.isfinite(t).all() for t in got if t is not None)
        torch.testing.assert_close(got[0].double(), truth[0], rtol=0, atol=1e-4)
        if want_entropy:
            torch.testing.assert_close(got[1].double(), truth[1], rtol=0, atol=1e-4)
        torch.testing.assert_close(got[2].double(), truth[2], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got[3].double(), truth[3], rtol=1e-4, atol=1e-4)


def test_chunked_head_in_bfloat16_computes_in_float32():
    # bf16 logits (rounded like the model's own bf16 head), softmax and gradients accumulated in float32
    h, w, labels, g = _head_inputs(torch.bfloat16, count=64, hidden=32, vocab=1000)
    truth = _naive_head(h, w, labels, g)  # the same bf16 numbers, in float64
    got = _chunked_head(h, w, labels, g, budget=60)
    assert got[0].dtype == got[1].dtype == torch.float32 and got[2].dtype == got[3].dtype == torch.bfloat16
    # bf16 logits are off by up to 2^-8 |z| ≈ 0.03 here; the log-probs by as much, not by O(1)
    torch.testing.assert_close(got[0].double(), truth[0], rtol=0, atol=0.1)
    torch.testing.assert_close(got[1].double(), truth[1], rtol=0, atol=0.1)
    assert relative_difference(got[2:], truth[2:]) < 2e-2


def test_chunked_scoring_refuses_labels_outside_the_vocabulary(make_model, batch):
    model = make_model(torch.float64)
    labels = batch["labels"].clone()
    labels[0, 0] = model.config.vocab_size  # one past the last token
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 103\)"):
        get_response_log_probs(model, batch["input_ids"], labels, logits_chunk_size=4)
    labels[0, 0] = -100  # the ignore index of cross-entropy: not a token
    with pytest.raises(ValueError, match="labels"):
        get_response_log_probs(model, batch["input_ids"], labels, logits_chunk_size=4)

