"""Trusted objects the probes pass to graded functions, named by small markers.

Probe requests are plain data; a model, a tokenizer or a reward function cannot travel as data, so
a request carries a marker such as {"__object__": "model", "seed": 0} and each side (the worker
that calls the student's code, the parent that computes expected values) builds the same object
from it. Everything here is deterministic given the marker.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import torch

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}
# A model small enough that a float64 train step takes milliseconds, big enough to have every layer.
TINY_MODEL = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2)


def model_marker(seed: int = 0, dtype: str = "float64", vocab_size: int | None = None) -> dict:
    return {"__object__": "model", "seed": seed, "dtype": dtype, "vocab_size": vocab_size}


TOKENIZER = {"__object__": "tokenizer"}
# A byte-level BPE tokenizer trained here, in memory, on the texts below: it merges across the end
# of a prompt that stops at a space or mid-number ("Answer: " + "42" encodes " 42" together), as
# real BPE tokenizers do, where the character-level one cannot show the difference.
BPE_TOKENIZER = {"__object__": "bpe_tokenizer"}
BPE_TEXTS = ("Question: what is 12+30? Answer: 42", "the answer is 42", "Assistant: the answer",
             "<think>add</think> <answer>42</answer>")
REWARD_FN = {"__object__": "reward_fn"}
# the given chunked head: its functions raise this audit event, which the stage child counts around
# a call of the plain path (autograder/trusted/reference.py `_counted`)
GIVEN_HEAD, GIVEN_HEAD_EVENT = "course.chunked_head", "grading.given_head"


def config_marker(**fields) -> dict:
    return {"__object__": "config", **fields}


def reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """The graders' reward: 0.5 for the answer tags, 1 more for the right answer inside them."""
    formatted = "<answer>" in response and "</answer>" in response
    answer = response.split("<answer>")[-1].split("</answer>")[0] if formatted else None
    correct = formatted and answer.strip() == ground_truth
    format_reward = 1.0 if formatted else 0.0
    answer_reward = 1.0 if correct else 0.0
    return {"format_reward": format_reward, "answer_reward": answer_reward,
            "reward": 0.5 * format_reward + answer_reward}


_tokenizer = None


def build_tokenizer():
    global _tokenizer
    if _tokenizer is None:
        from course.loop.models import build_tokenizer as build
        _tokenizer = build()
    return _tokenizer


_bpe_tokenizer = None


def build_bpe_tokenizer():
    global _bpe_tokenizer
    if _bpe_tokenizer is None:
        from course.loop.tiny_hf import build_bpe_tokenizer as build
        _bpe_tokenizer = build(list(BPE_TEXTS) * 3, vocab_size=160)
    return _bpe_tokenizer


# The graded functions whose checks send a model marker. A grading that checks none of them starts
# its template without transformers' modeling code (~2 s of imports); a child that builds a model
# all the same imports it itself (`course.loop.models.build_tiny_model`): slower, and as right.
MODEL_FUNCTIONS = ("get_response_log_probs", "grpo_train_step")


def import_model_code() -> None:
    """Import what `build_model` needs (in the template, before any child is forked)."""
    from transformers import Olmo2Config, Olmo2ForCausalLM  # noqa: F401


# build_tiny_model seeds torch's global generator: two threads building at once would mix seeds.
_BUILD_LOCK = threading.Lock()


def build_model(seed: int, dtype: str, device: str = "cpu", vocab_size: int | None = None):
    from course.loop.models import build_tiny_model
    tokenizer = build_tokenizer()
    with _BUILD_LOCK:
        model = build_tiny_model(vocab_size=vocab_size or len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                 bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                 seed=seed, dtype=DTYPES[dtype], **TINY_MODEL)
    return model.to(device)


def resolve(value, device: str = "cpu"):
    """Replace markers by objects and move tensors to `device`, recursively."""
    if isinstance(value, dict):
        kind = value.get("__object__")
        if kind == "model":
            return build_model(value["seed"], value["dtype"], device, value.get("vocab_size"))
        if kind == "tokenizer":
            return build_tokenizer()
        if kind == "bpe_tokenizer":
            return build_bpe_tokenizer()
        if kind == "reward_fn":
            return reward_fn
        if kind == "config":
            return SimpleNamespace(**{k: v for k, v in value.items() if k != "__object__"})
        return {k: resolve(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(resolve(v, device) for v in value)
    if isinstance(value, torch.Tensor):
        return value.clone().to(device)
    return value
