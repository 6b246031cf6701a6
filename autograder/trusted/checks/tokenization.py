"""Checks for stage 1: `tokenize_prompt_and_output` (its contract: the docstring of
`course.tokenization`)."""

from __future__ import annotations

import torch

# the BPE case's tokenizer builder: the trusted side imports all it uses before the first sandbox
# starts, and `markers.build_bpe_tokenizer` would import it late
import course.loop.tiny_hf  # noqa: F401
from autograder.protocol.markers import BPE_TOKENIZER, TOKENIZER, build_tokenizer, resolve
from autograder.trusted.checks.common import rng, run_reference
from autograder.trusted.core import Fail, Mistake, case, check, compare, field, judge_cases, tensor

FN = "tokenize_prompt_and_output"
KEYS = ("input_ids", "labels", "response_mask")
ALPHABET = "abcdefghij0123456789 +=?"


def _text(r, low: int, high: int) -> str:
    return "".join(r.choice(ALPHABET) for _ in range(r.randint(low, high)))


@case(f"{FN}/batch", expected=lambda inputs: run_reference(FN, inputs))
def make_batch(seed: int) -> dict:
    r = rng(seed)
    prompts = [f"Q: {_text(r, 1, 8)}?" for _ in range(4)]
    outputs = [_text(r, 1, 9)
               for _ in range(3)] + [f"<think>{_text(r, 0, 3)}</think><answer>7</answer>"]
    order = list(range(4))
    r.shuffle(order)
    return {"prompt_strs": [prompts[i] for i in order], "output_strs": [outputs[i] for i in order],
            "tokenizer": TOKENIZER}


@case(f"{FN}/bpe", expected=lambda inputs: run_reference(FN, inputs))
def make_bpe(seed: int) -> dict:
    """Prompts that end at a space or inside a number, so that the BPE tokenizer merges the
    prompt's last characters with the output's first when the two are encoded together."""
    r = rng(seed + 100)
    prompts, outputs = [], []
    for _ in range(4):
        a, b = r.randint(10, 49), r.randint(10, 49)
        total = str(a + b)
        if r.random() < 0.5:
            prompts.append(f"Question: what is {a}+{b}? Answer: ")
            outputs.append(r.choice((total, f"the answer is {total}")))
        else:
            prompts.append(f"Question: what is {a}+{b}? Answer: {total[0]}")
            outputs.append(f"{total[1:]}</answer>")
    return {"prompt_strs": prompts, "output_strs": outputs, "tokenizer": BPE_TOKENIZER}


def _joint(inputs: dict, tokenizer) -> torch.Tensor:
    """input_ids (B, L-1) of prompt and output encoded as one string, right-padded."""
    rows = [tokenizer.encode(p + o, add_special_tokens=False)
            for p, o in zip(inputs["prompt_strs"], inputs["output_strs"])]
    width = max(map(len, rows))
    return torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in rows])[:,
                                                                                               :-1]


def _mask_mistakes(mask: torch.Tensor) -> list:
    """The masks of the common mistakes, from the right mask (B, L-1) alone: the judge holds no
    tokenization of its own (the student edition ships this file without the reference)."""
    mask = mask.long()
    return [
        Mistake("prompt tokens in the mask", "set the mask to 1 only on output tokens, 0 on the "
                                             "prompt",
                lambda: (mask.flip(1).cumsum(1).flip(1) > 0).long()),  # every real label position
        Mistake("padding in the mask", "padded positions must be 0 in response_mask",
                lambda: (mask.cumsum(1) > 0).long()),  # from the output's first token to the end
        Mistake("a mask that is not shifted with the labels",
                "take the mask of the full sequence from position 1 on (mask[:, 1:]), like the "
                "labels",
                lambda: torch.cat([torch.zeros_like(mask[:, :1]), mask[:, :-1]], 1)),
    ]


def _judge_batch(output, expected: dict, inputs: dict) -> None:
    length = expected["input_ids"].shape[1] + 1  # L, the longest prompt + output
    tokenizer = resolve(inputs["tokenizer"])
    for key in KEYS:
        got = tensor(field(output, key, f"the result of {FN}"), key)
        if key != "response_mask" and got.ndim == 2 and got.shape[1] == length:
            raise Fail(f"{key} has L = {length} columns: a causal LM predicts token t+1 from "
                       "tokens ≤ t, so input_ids = sequence[:, :-1] and labels = sequence[:, 1:]")
    padded_eos = torch.where(expected["input_ids"] == tokenizer.pad_token_id,
                             tokenizer.eos_token_id,
                             expected["input_ids"])
    compare(output["input_ids"], expected["input_ids"], "input_ids", [
        Mistake("padding with eos instead of the tokenizer's pad id",
                "pad with tokenizer.pad_token_id (eos only when there is no pad token)",
                lambda: padded_eos),
        Mistake("prompt and output encoded together as one string (a BPE tokenizer merges "
                "characters across their boundary, so the output's tokens are not its own)",
                "encode the prompt and the output separately, then concatenate the two id lists",
                lambda: _joint(inputs, tokenizer))])
    compare(output["labels"], expected["labels"], "labels", [
        Mistake("missing label shift (labels equal input_ids)",
                "labels are the sequence shifted left by one: labels = sequence[:, 1:]",
                lambda: expected["input_ids"])])
    compare(output["response_mask"], expected["response_mask"], "response_mask",
            _mask_mistakes(expected["response_mask"]))


@check(FN, "returns input_ids, labels and response_mask, each (B, L-1) and integer", points=1,
       paid_with="values match the reference")
def shapes(ctx) -> None:
    stored = ctx.cases(f"{FN}/batch")[0]
    output = ctx.call(FN, stored.inputs)["output"]
    want = tuple(stored.expected["input_ids"].shape)
    for key in KEYS:
        got = tensor(field(output, key, f"the result of {FN}"), key)
        if tuple(got.shape) != want:
            raise Fail(f"{key} has shape {tuple(got.shape)}, expected (B, L-1) = "
                       f"{want} with L the longest prompt+output")
        if got.dtype.is_floating_point:
            raise Fail(f"{key} is {got.dtype}; token ids and the mask must be integer (or bool) "
                       "tensors")


@check(FN, "values match the reference", points=3)
def values(ctx) -> None:
    """With the course's character-level tokenizer and with a BPE one, which is where encoding
    prompt and output together goes wrong."""
    for name in (f"{FN}/batch", f"{FN}/bpe"):
        judge_cases(ctx, name, lambda run: _judge_batch(ctx.call(FN, run.inputs)["output"],
                                                        run.expected, run.inputs))


@check(FN, "response_mask is 1 exactly on the output tokens' labels", points=1)
def mask_property(ctx) -> None:
    inputs = make_batch(ctx.grader.seed)
    output = ctx.call(FN, inputs)["output"]
    mask = tensor(field(output, "response_mask", f"the result of {FN}"), "response_mask").long()
    labels = tensor(field(output, "labels", f"the result of {FN}"), "labels")
    tokenizer = build_tokenizer()
    for row, text in enumerate(inputs["output_strs"]):
        ids = tokenizer.encode(text, add_special_tokens=False)
        if mask.ndim != 2 or row >= mask.shape[0] or int(mask[row].sum()) != len(ids):
            raise Fail(f"row {row}: the output has {len(ids)} tokens, but response_mask has "
                       f"{int(mask[row].sum()) if mask.ndim == 2 and row < mask.shape[0] else '?'} "
                       "ones")
        if labels[row][mask[row].bool()].tolist() != ids:
            raise Fail(f"row {row}: the labels under response_mask are not the output's tokens")


@check(FN, "prompts and outputs of different lengths raise ValueError", points=1,
       paid_with="values match the reference")
def bad_input(ctx) -> None:
    response = ctx.outcome(FN, {"prompt_strs": ["a", "b"], "output_strs": ["c"],
                                "tokenizer": TOKENIZER})
    if response.get("status") == "ok" or not response.get("is_value_error"):
        raise Fail("2 prompts with 1 output should raise ValueError naming the arguments, got "
                   + ("a result" if response.get("status") == "ok"
                      else str(response.get("error_type"))))
