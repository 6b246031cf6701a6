"""Tiny stand-ins for real Hugging Face models, built offline: a byte-level BPE tokenizer trained in
code and a randomly initialized Qwen2, Qwen3, Llama (SmolLM's architecture), OLMo2 or Gemma from its
config, saved with `save_pretrained` so that `course.loop.models.load_pretrained` reads them through
the same `from_pretrained` path as a downloaded model. Also a generator of GSM8K-format problems.

    python -m course.loop.tiny_hf --family qwen2 --out runs/tiny-qwen2 --data runs/gsm8k.jsonl

writes the model folder and (with --data) 200 generated GSM8K-format problems to train it on.
The tokenizer is byte-level BPE (Sennrich et al. 2016, arXiv 1508.07909; GPT-2's byte alphabet) with
a ChatML chat template (`<|im_start|>role ... <|im_end|>`, Qwen2's format), `<|im_end|>` its eos.
References: tokenizers `trainers.BpeTrainer`; transformers `models/{qwen2,qwen3,llama,olmo2,gemma}/
configuration_*.py`.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    GemmaConfig,
    LlamaConfig,
    Olmo2Config,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
FAMILIES = {"qwen2": Qwen2Config, "qwen3": Qwen3Config, "llama": LlamaConfig, "olmo2": Olmo2Config,
            "gemma": GemmaConfig}


def build_bpe_tokenizer(texts: list[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ASCII `texts`: pad <|endoftext|>, eos <|im_end|>,
    ChatML template. Characters outside printable ASCII and newline are not in its alphabet."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    # ASCII only (GPT-2's byte images: 33..126 are themselves, space is Ġ, newline Ċ): every token,
    # and so every sample of a random model, decodes to valid text that re-encodes to few tokens
    alphabet = [chr(c) for c in range(33, 127)] + ["\u0120", "\u010a"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=alphabet, show_progress=False)
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|endoftext|>",
                                        eos_token="<|im_end|>", clean_up_tokenization_spaces=False,
                                        model_max_length=2048)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_causal_lm(family: str, tokenizer, hidden_size: int = 64, layers: int = 2,
                         heads: int = 4,
                         tie_word_embeddings: bool = False, seed: int = 0, **overrides):
    """A randomly initialized causal LM of `family` (FAMILIES) at toy size, seeded."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {tuple(FAMILIES)}, got {family!r}")
    config = FAMILIES[family](
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
        head_dim=hidden_size // heads, max_position_embeddings=512,
        tie_word_embeddings=tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id, **overrides)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(state)


_NAMES = ("Mara", "Theo", "Lena", "Omar", "Priya", "Sam", "Jo", "Ada")
_ITEMS = ("apples", "stickers", "pencils", "shells", "cards", "marbles")


def synthetic_gsm8k(n: int, seed: int = 0) -> list[dict[str, str]]:
    """`n` GSM8K-format records (question, worked answer ending in '#### N'): two-step word
    problems of adding and taking away, seeded."""
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        a, b = rng.randint(2, 40), rng.randint(2, 40)
        c = rng.randint(1, a + b)
        question = (f"{name} has {a} {item} and finds {b} more. {name} gives away {c} {item}. "
                    f"How many {item} does {name} have now?")
        answer = (f"{name} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {item}.\n"
                  f"After giving {c} away, {a + b} - {c} = "
                  f"<<{a + b}-{c}={a + b - c}>>{a + b - c}.\n"
                  f"#### {a + b - c}")
        records.append({"question": question, "answer": answer})
    return records


def write_jsonl(records: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course.loop.tiny_hf",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=tuple(FAMILIES), default="qwen2")
    parser.add_argument("--out", type=Path, required=True, help="folder for the model and "
                                                                "tokenizer")
    parser.add_argument("--data", type=Path, default=None, help="also write generated GSM8K-format "
                                                                "problems here")
    parser.add_argument("--problems", type=int, default=200, help="how many problems --data holds")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for path in (args.out, args.data):
        if path is not None and path.exists() and (path.is_file() or any(path.iterdir())):
            parser.error(f"{path} already exists: choose a new path (nothing is overwritten)")
    records = synthetic_gsm8k(args.problems, args.seed)
    from course.loop.gsm8k import INSTRUCTION

    texts = [r["question"] + "\n" + INSTRUCTION + "\n" + r["answer"] for r in records]
    tokenizer = build_bpe_tokenizer(texts)
    model = build_tiny_causal_lm(args.family, tokenizer, seed=args.seed)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"wrote a {args.family} model ({sum(p.numel() for p in model.parameters()):,} "
          f"parameters) to {args.out}")
    if args.data is not None:
        write_jsonl(records, args.data)
        print(f"wrote {len(records)} GSM8K-format problems to {args.data}")


if __name__ == "__main__":
    main()
