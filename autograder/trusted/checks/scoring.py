"""Checks for stage 2: `compute_entropy` and `get_response_log_probs` (their contract: the
docstrings of `course.scoring`)."""

from __future__ import annotations

import math

import torch

from autograder.protocol.markers import build_model, build_tokenizer, model_marker
from autograder.protocol.saved_bytes import owned_storages, saved_bytes  # the model's own, too
from autograder.trusted.checks.common import generator, reference_function, rng, run_reference
from autograder.trusted.core import (
    BFLOAT16,
    FLOAT32_CHUNKS,
    LARGE_LOGITS,
    MODEL,
    Fail,
    Mistake,
    case,
    check,
    compare,
    field,
    judge_cases,
    one_thread,
    tensor,
)

ENTROPY = "compute_entropy"
LOG_PROBS = "get_response_log_probs"


@case(f"{ENTROPY}/logits", expected=lambda inputs: run_reference(ENTROPY, inputs))
def make_logits(seed: int) -> dict:
    g = generator(seed)
    logits = torch.randn(2, 3, 11, generator=g, dtype=torch.float64) * 3
    logits[1, 2] = torch.linspace(-5, 5, 11, dtype=torch.float64)
    return {"logits": logits}


@check(ENTROPY, "values match the reference", points=2)
def entropy_values(ctx) -> None:
    def judge(run):
        got = ctx.call(ENTROPY, run.inputs)["output"]
        compare(got, run.expected, "entropy", [
            Mistake("log base 2", "use the natural log (nats): torch.log / logsumexp",
                    lambda: run.expected / math.log(2)),
            Mistake("Σ p·log p without the minus sign", "entropy is −Σ p·log p",
                    lambda: -run.expected),
            Mistake("entropy over the wrong axis", "reduce over the last (vocabulary) axis, dim=-1",
                    lambda: run_reference(ENTROPY, {"logits": run.inputs["logits"].transpose(-1,
                                                                                             -2)})),
        ])
    judge_cases(ctx, f"{ENTROPY}/logits", judge)


@case(f"{ENTROPY}/large", expected=lambda inputs: run_reference(
    ENTROPY, {"logits": inputs["logits"].double()}))
def make_large_logits(seed: int) -> dict:
    g = generator(seed)
    # k tied top logits near 1000 (entropy ≈ log k) and the rest far below, where softmax underflows
    logits = 1000 - 500 * torch.rand(3, 50, generator=g) - 100
    for row, k in enumerate((2, 5, 9)):
        logits[row, :k] = 1000 + 0.5 * torch.rand(k, generator=g)
    return {"logits": logits}  # float32: the student's code meets them as a model would give them


@check(ENTROPY, "stable for large logits (logsumexp form)", points=1)
def entropy_stable(ctx) -> None:
    def judge(run):
        got = tensor(ctx.call(ENTROPY, run.inputs)["output"], "entropy")
        if got.dtype.is_floating_point and not bool(torch.isfinite(got).all()):
            raise Fail("entropy is NaN/inf for logits of size ~1e3: softmax underflows to 0 and "
                       "0·log 0 = NaN; fix: H = logsumexp(z) − Σ softmax(z)·z")
        compare(got, run.expected.to(got.dtype), "entropy of large logits", tolerance=LARGE_LOGITS)
    judge_cases(ctx, f"{ENTROPY}/large", judge)


@check(ENTROPY, "keeps the leading shape; float32/float64 keep their dtype, half becomes "
                "float32", points=1,
       paid_with="values match the reference")
def entropy_shape(ctx) -> None:
    g = generator(7)
    for shape, dtype, want in (((5, 9), torch.float32, torch.float32), ((2, 3, 4, 9), torch.float64,
                                                                        torch.float64),
                               ((4, 9), torch.bfloat16, torch.float32)):
        got = tensor(ctx.call(ENTROPY, {"logits": torch.randn(*shape,
                                                              generator=g).to(dtype)})["output"],
                     "entropy")
        if tuple(got.shape) != shape[:-1]:
            raise Fail(f"logits {shape} gave entropy of shape {tuple(got.shape)}, expected "
                       f"{shape[:-1]}")
        if got.dtype != want:
            raise Fail(f"{dtype} logits gave {got.dtype} entropy, expected {want}")


def _scoring_batch(seed: int, lengths_max: int = 12) -> dict:
    r = rng(seed)
    tokenizer = build_tokenizer()
    rows = [
        tokenizer.encode(
            "".join(r.choice("abcdef0123+=") for _ in range(r.randint(3, lengths_max))),
            add_special_tokens=False,
        )
        for _ in range(3)
    ]
    length = max(map(len, rows))
    ids = torch.full((3, length), tokenizer.pad_token_id, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}


@case(f"{LOG_PROBS}/float64", expected=lambda inputs: run_reference(LOG_PROBS, inputs))
def make_scoring(seed: int) -> dict:
    return {"model": model_marker(seed, "float64"), **_scoring_batch(seed),
            "return_token_entropy": True}


def _model_logits(inputs: dict) -> torch.Tensor:
    model = build_model(inputs["model"]["seed"], inputs["model"]["dtype"])
    with torch.no_grad():
        return model(inputs["input_ids"]).logits.float() if inputs["model"]["dtype"] != "float64" \
            else model(inputs["input_ids"]).logits


def _log_prob_mistakes(inputs: dict, expected: torch.Tensor) -> list:
    def at_inputs():
        return run_reference(LOG_PROBS, {**inputs, "labels": inputs["input_ids"]})["log_probs"]
    return [
        Mistake("probabilities instead of log-probabilities", "return log π = z_y − logsumexp(z)",
                lambda: expected.exp()),
        Mistake("gathering at input_ids instead of labels", "gather the log-probs of `labels`",
                at_inputs),
        Mistake("raw logits of the label, not normalized", "subtract logsumexp(z) over the "
                                                           "vocabulary",
                lambda: _model_logits(inputs).gather(-1,
                                                     inputs["labels"].unsqueeze(-1)).squeeze(-1)),
    ]


def _plain_path(ctx, inputs: dict, **options) -> dict:
    """The answer of the plain path (`inputs` leave logits_chunk_size to the model's config, 0),
    which must be the student's own: a call
    into the given chunked head (`course.chunked_head`, which counts its calls) fails the check."""
    response = ctx.call(LOG_PROBS, inputs, count_given_head=True, **options)
    calls = response.get("given_head_calls")
    if type(calls) is not int:  # the worker's answer is data to check, not to trust
        raise Fail(f"the count of calls into the chunked head came back as {calls!r}")
    if calls:
        raise Fail("with logits_chunk_size=0 (the plain path) your function called the given "
                   "chunked head course.chunked_head: the plain path is yours to write "
                   "(model(input_ids).logits, gather the labels' logits, subtract logsumexp); "
                   "the chunked head is for logits_chunk_size > 0 only")
    return response


def _own_plain_path(ctx, inputs: dict) -> None:
    """The chunked head is given (`course.chunked_head`): a chunked path earns its points only
    beside a plain path of the student's own, or a function that is all given code would earn
    them."""
    try:
        _plain_path(ctx, inputs)
    except Fail as exc:
        raise Fail(f"the chunked path's points are paid only beside a plain path of your own, and "
                   f"this one is not: {exc}") from None


@check(LOG_PROBS, "log_probs match the reference and carry gradient", points=2)
def log_prob_values(ctx) -> None:
    def judge(run):
        response = _plain_path(ctx, run.inputs)
        log_probs = field(response["output"], "log_probs", f"the result of {LOG_PROBS}")
        compare(log_probs, run.expected["log_probs"], "log_probs",
                _log_prob_mistakes(run.inputs, run.expected["log_probs"]), MODEL)
        if not response["requires_grad"].get("log_probs", False):
            raise Fail("log_probs has no gradient: the train step backpropagates through it; "
                       "do not score under torch.no_grad() or .detach() it")
    judge_cases(ctx, f"{LOG_PROBS}/float64", judge)


@check(LOG_PROBS, "token_entropy matches and is computed without autograd", points=1)
def token_entropy(ctx) -> None:
    def judge(run):
        response = _plain_path(ctx, run.inputs)
        entropy = field(response["output"], "token_entropy", "the result with "
                                                             "return_token_entropy=True")
        compare(entropy, run.expected["token_entropy"], "token_entropy", [
            Mistake("entropy of the label distribution's log-prob (−log π)", "use compute_entropy "
                                                                             "on the logits",
                    lambda: -run.expected["log_probs"])], MODEL)
        if response["requires_grad"].get("token_entropy", False):
            raise Fail("token_entropy requires grad: it is a logged metric; compute it under "
                       "torch.no_grad() (or from detached logits) so it keeps no autograd graph")
    judge_cases(ctx, f"{LOG_PROBS}/float64", judge)


@check(LOG_PROBS, "chunked output head (logits_chunk_size > 0) equals the plain forward", points=1)
def chunked(ctx) -> None:
    run = ctx.fresh_case(f"{LOG_PROBS}/float64")
    inputs, expected = run.inputs, run.expected
    _own_plain_path(ctx, inputs)
    for size in (1, 4, 1000):
        got = ctx.call(LOG_PROBS, {**inputs, "logits_chunk_size": size})["output"]
        compare(field(got, "log_probs", "the result"), expected["log_probs"],
                f"log_probs with logits_chunk_size={size}", tolerance=MODEL)
        compare(field(got, "token_entropy", "the result"), expected["token_entropy"],
                f"token_entropy with logits_chunk_size={size}", tolerance=MODEL)


@check(LOG_PROBS, "invalid logits_chunk_size raises ValueError", points=1,
       paid_with="log_probs match the reference and carry gradient")
def bad_chunk(ctx) -> None:
    inputs = make_scoring(0)
    for size in (-1, 2.5):
        response = ctx.outcome(LOG_PROBS, {**inputs, "logits_chunk_size": size})
        if response.get("status") == "ok" or not response.get("is_value_error"):
            raise Fail(f"logits_chunk_size={size!r} should raise ValueError, got "
                       + ("a result" if response.get("status") == "ok"
                          else str(response.get("error_type"))))


@check(LOG_PROBS, "a bfloat16 model is scored in float32", points=1)
def half_precision(ctx) -> None:
    """Judged with the reference on this machine: bfloat16 logits round with the device's
    kernels."""
    scored = reference_function(LOG_PROBS)
    inputs = {"model": model_marker(ctx.grader.seed % 7, "bfloat16"),
              **_scoring_batch(ctx.grader.seed, 30)}
    # same device: same rounding
    model = build_model(inputs["model"]["seed"], "bfloat16", ctx.device)
    ids, labels = inputs["input_ids"].to(ctx.device), inputs["labels"].to(ctx.device)
    # the worker's thread count, so the bf16 logits round the same way
    with one_thread(), torch.no_grad():
        logits = model(ids).logits.cpu()  # (B, T, V) bf16
        expected = scored(model, ids, labels)["log_probs"].cpu()  # float32
    half = torch.log_softmax(logits, -1).gather(-1, inputs["labels"].unsqueeze(-1)).squeeze(-1)
    got = tensor(field(_plain_path(ctx, inputs, no_grad=True)["output"], "log_probs", "the result"),
                 "log_probs")
    if got.dtype != torch.float32:
        raise Fail(f"log_probs of a bfloat16 model are {got.dtype}: this looks like the "
                   "log-softmax "
                   "materialized in half precision; fix: upcast the logits with .float() before "
                   "logsumexp")
    compare(got, expected, "log_probs of a bfloat16 model", [
        Mistake("log-softmax materialized in half precision",
                "upcast the logits with .float() before logsumexp/log_softmax",
                lambda: half.float())],
        BFLOAT16)


def _decoder_saved_bytes(inputs: dict) -> int:
    """What the model's decoder alone saves for backward on `inputs` (trusted: the course's
    model)."""
    model = build_model(inputs["model"]["seed"], inputs["model"]["dtype"],
                        vocab_size=inputs["model"]["vocab_size"])
    owned = owned_storages({"model": model, "input_ids": inputs["input_ids"]})
    hidden = model.model(input_ids=inputs["input_ids"], use_cache=False).last_hidden_state
    kept, _ = saved_bytes(hidden, owned)
    return kept + hidden.numel() * hidden.element_size()  # + the hidden states themselves


@case(f"{LOG_PROBS}/large-vocabulary", expected=lambda inputs: run_reference(LOG_PROBS, inputs),
      seeds=(0,))
def make_large_vocabulary(seed: int) -> dict:
    g = generator(seed)
    ids = torch.randint(7, 100, (2, 129), generator=g)  # (B, T + 1)
    return {"model": model_marker(0, "float32", vocab_size=8192), "input_ids": ids[:, :-1],
            "labels": ids[:, 1:]}


def _bound_peak_cuda_memory(ctx) -> None:
    """On cuda, at a realistic vocabulary: one (B, chunk, V) block instead of (B, T, V) logits."""
    g = generator(ctx.grader.seed)
    vocab = 65536
    ids = torch.randint(7, 100, (4, 513), generator=g)
    inputs = {"model": model_marker(0, "float32", vocab_size=vocab), "input_ids": ids[:, :-1],
              "labels": ids[:, 1:]}
    peaks, outputs = {}, {}
    for size in (0, 32):
        response = ctx.call(LOG_PROBS, {**inputs, "logits_chunk_size": size},
                            measure_cuda_memory=True,
                            backward={"path": "log_probs", "cotangent": torch.ones(4, 512)})
        peaks[size] = response.get("peak_bytes")
        if type(peaks[size]) is not int or peaks[size] < 0:  # data to check, not to trust
            raise Fail(f"the peak of GPU memory came back as {peaks[size]!r}, not a byte count")
        outputs[size] = field(response["output"], "log_probs", "the result")
    compare(outputs[32], tensor(outputs[0], "log_probs"), "chunked log_probs", tolerance=MODEL)
    logits_bytes = 4 * 512 * vocab * 4
    if peaks[32] > 0.25 * max(peaks[0], logits_bytes):
        raise Fail(f"with logits_chunk_size=32 the peak extra memory is {peaks[32] / 2**20:.0f} "
                   "MiB, "
                   f"against {peaks[0] / 2**20:.0f} MiB unchunked ({logits_bytes / 2**20:.0f} MiB "
                   "of logits): "
                   "run the output head chunk by chunk and let backward recompute each chunk's "
                   "logits "
                   "(course.chunked_head) instead of keeping all of them")


@check(LOG_PROBS, "chunked scoring saves about one chunk of logits for backward "
       "(and, on cuda, bounds peak GPU memory)", points=1)
def chunked_saved_bytes(ctx) -> None:
    """Counted from the autograd graph behind the result (`saved_bytes`), so a chunked path that
    keeps every chunk's logits for backward (correct values, no memory saved) loses this point on
    every device; graded with `--device cuda`, the same point also asks for a bounded peak of GPU
    memory. One check, so the maximum is the same on every device (and in a notebook's
    self-check)."""
    run = ctx.fresh_case(f"{LOG_PROBS}/large-vocabulary")
    inputs, chunk = run.inputs, 8
    _own_plain_path(ctx, inputs)
    (batch, positions), vocab = inputs["input_ids"].shape, inputs["model"]["vocab_size"]
    response = ctx.call(LOG_PROBS, {**inputs, "logits_chunk_size": chunk}, count_saved_bytes=True)
    log_probs = field(response["output"], "log_probs", "the result")
    compare(log_probs, run.expected["log_probs"], f"log_probs with logits_chunk_size={chunk}",
            tolerance=FLOAT32_CHUNKS)
    if not response["requires_grad"].get("log_probs", False):
        raise Fail("log_probs has no gradient: score with autograd on, so that backward can "
                   "recompute")
    chunk_bytes = batch * chunk * vocab * 4  # one (B, chunk, V) float32 block
    # + (B, T) vectors
    allowed = _decoder_saved_bytes(inputs) + 2 * chunk_bytes + batch * positions * 16
    saved, hidden = response.get("saved_bytes"), response.get("saved_hidden")
    if type(saved) is not int or saved < 0:  # the worker's answer is data to check, not to trust
        raise Fail(f"the count of saved-for-backward bytes came back as {saved!r}, not a byte "
                   "count")
    if type(hidden) is not list or hidden:
        raise Fail(f"what your code keeps for backward is hidden from the count ({hidden!r}): "
                   "recompute each chunk with torch.utils.checkpoint or a custom "
                   "autograd.Function instead of pushing saved-tensor hooks of your own")
    if saved > allowed:
        raise Fail(f"with logits_chunk_size={chunk} autograd keeps {saved / 2**20:.2f} MiB for "
                   "backward, "
                   f"more than the decoder's activations plus about one chunk of logits "
                   f"({allowed / 2**20:.2f} MiB; all the logits are "
                   f"{batch * positions * vocab * 4 / 2**20:.0f} MiB): "
                   "recompute each chunk's logits in backward (a custom autograd.Function, or "
                   "checkpointing the head and "
                   "normalizer of a chunk) instead of keeping them")
    if ctx.device == "cuda":
        _bound_peak_cuda_memory(ctx)
