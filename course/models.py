"""Tiny offline models and tokenizers: an OLMo2 built from a config and a character tokenizer built in code.

Nothing here downloads anything. The tokenizer is a real `PreTrainedTokenizerFast` (Hugging Face
`tokenizers` WordLevel model over single characters, plus a few multi-character special tokens), so
it round-trips through `save_pretrained` / `from_pretrained` like any hub tokenizer. The model is
transformers' `Olmo2ForCausalLM` (Groeneveld et al. 2024, OLMo 2, arXiv 2501.00656) at toy size.

References: transformers `models/olmo2/configuration_olmo2.py` and `modeling_olmo2.py`.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import Olmo2Config, Olmo2ForCausalLM, PreTrainedTokenizerFast

PAD_TOKEN = "<pad>"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
# Tags the synthetic task asks the policy to write; one token each keeps responses short.
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN)
# Printable ASCII without the vertical tab / form feed; newline kept for prompt templates.
CHARACTERS = tuple(c for c in string.printable if c not in "\x0b\x0c\r\t")


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer: every printable ASCII character is one token.

    Ids: 0 = <pad>, 1 = <bos>, 2 = <eos>, 3..6 = the four tags, then one id per character.
    `encode(text, add_special_tokens=False)` never adds <bos>/<eos>; unknown characters raise
    rather than silently mapping to an <unk> id (the vocabulary has none).
    """
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + TAG_TOKENS + CHARACTERS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    # Isolate each character; added tokens (the tags) are matched before pre-tokenization.
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )
    # Tags are ordinary (non-special) added tokens: matched whole, kept by skip_special_tokens.
    tokenizer.add_tokens(list(TAG_TOKENS))
    tokenizer.padding_side = "right"
    return tokenizer


def build_tiny_model(
    vocab_size: int,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 256,
    pad_token_id: int = 0,
    bos_token_id: int = 1,
    eos_token_id: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Olmo2ForCausalLM:
    """A randomly initialized OLMo2 causal LM, seeded so two calls give identical weights.

    The defaults make a ~0.1M-parameter model that scores a (8, 64) batch in milliseconds on a CPU.
    """
    config = Olmo2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        tie_word_embeddings=False,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = Olmo2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    return model.to(dtype)


def build_tiny_model_and_tokenizer(
    seed: int = 0, dtype: torch.dtype = torch.float32, **model_kwargs
) -> tuple[Olmo2ForCausalLM, PreTrainedTokenizerFast]:
    """The pair the tests, the autograder and the notebooks share: character tokenizer + tiny OLMo2."""
    tokenizer = build_tokenizer()
    model = build_tiny_model(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        seed=seed,
        dtype=dtype,
        **model_kwargs,
    )
    return model, tokenizer


def save_model_and_tokenizer(model, tokenizer, directory: str | Path) -> Path:
    """Write both with the ordinary `save_pretrained` calls (safetensors weights)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    return directory


def load_model_and_tokenizer(directory: str | Path, dtype: torch.dtype = torch.float32):
    """Load a folder written by `save_model_and_tokenizer`, offline (`local_files_only`)."""
    directory = Path(directory)
    model = Olmo2ForCausalLM.from_pretrained(directory, local_files_only=True, dtype=dtype)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(directory, local_files_only=True)
    return model, tokenizer
