"""Models and tokenizers: the tiny offline OLMo2 and character tokenizer, and any Hugging Face
causal LM.

Nothing here downloads anything unless asked: `load_pretrained` reads a local folder, and a hub id
only with `allow_download=True`. The tokenizer is a real `PreTrainedTokenizerFast` (Hugging Face
`tokenizers` WordLevel model over single characters, plus a few multi-character special tokens), so
it round-trips through `save_pretrained` / `from_pretrained` like any hub tokenizer. The model is
transformers' `Olmo2ForCausalLM` (Groeneveld et al. 2024, OLMo 2, arXiv 2501.00656) at toy size.

`load_pretrained` loads any causal LM with `AutoModelForCausalLM` / `AutoTokenizer` (Qwen2/Qwen3,
Llama and SmolLM, OLMo2, Gemma: `docs/real_models.md`), in bf16 where asked; the log-probs are
still computed in float32 by stage 2 (`course.scoring` upcasts half-precision logits).

References: transformers `models/olmo2/configuration_olmo2.py` and `modeling_olmo2.py`;
`models/auto/modeling_auto.py` (AutoModelForCausalLM); peft `tuners/lora/config.py` (LoraConfig).
"""

from __future__ import annotations

import importlib.util
import json
import string
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

if TYPE_CHECKING:
    from transformers import Olmo2ForCausalLM

# torch-free, so that the command line checks --model before torch loads
from course.loop.train_config import model_source_problem
from course.variants import MODEL_DTYPES

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
    # imported here, not at the top: transformers' modeling code takes ~2 s to import, which the
    # autograder's sandbox pays only for a grading that builds a model
    # (`autograder.protocol.markers`)
    from transformers import Olmo2Config, Olmo2ForCausalLM

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
    """The pair the tests, the autograder and the notebooks share: character tokenizer + tiny
    OLMo2."""
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
    from transformers import Olmo2ForCausalLM

    directory = Path(directory)
    model = Olmo2ForCausalLM.from_pretrained(directory, local_files_only=True, dtype=dtype)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(directory, local_files_only=True)
    return model, tokenizer


DTYPES = dict(zip(MODEL_DTYPES, (torch.float32, torch.bfloat16, torch.float16)))


def load_pretrained(source: str | Path, dtype: str = "float32", allow_download: bool = False):
    """Any Hugging Face causal LM and its tokenizer: a local folder, or a hub id when
    `allow_download` (otherwise ValueError). `dtype`: float32, bfloat16 or float16 weights.

    A tokenizer without a pad token pads with its eos token (padding never enters a response
    mask). Returns (model, tokenizer); the model is in eval mode on the CPU.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = str(source)
    if problem := model_source_problem(source, allow_download):
        raise ValueError(f"model {problem}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    local = not allow_download or Path(source).expanduser().is_dir()
    # transformers 5's AutoTokenizer rebuilds a generic saved tokenizer (tokenizer.json alone) with
    # the model family's own pre-tokenizer (Qwen2's splits digits apart): read such a one as saved
    generic = local and _tokenizer_class(Path(source).expanduser()) in GENERIC_TOKENIZER_CLASSES
    tokenizer_class = PreTrainedTokenizerFast if generic else AutoTokenizer
    tokenizer = tokenizer_class.from_pretrained(source, local_files_only=local)
    model = AutoModelForCausalLM.from_pretrained(source, local_files_only=local,
                                                 dtype=DTYPES[dtype])
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise ValueError(f"model {source!r}: its tokenizer has no eos token, so a response could "
                         "never end")
    tokenizer.padding_side = "right"
    return model.eval(), tokenizer


GENERIC_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def _tokenizer_class(folder: Path) -> str | None:
    config = folder / "tokenizer_config.json"
    return (
        json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class")
        if config.is_file()
        else None
    )


def chat_prompt(tokenizer, user_text: str, fallback: str = "User: {text}\nAssistant:") -> str:
    """The prompt string for one user turn: the tokenizer's chat template with the generation
    prompt where it has one (instruct models), else `fallback` (base models)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": user_text}],
                                             tokenize=False, add_generation_prompt=True)
    return fallback.format(text=user_text)


def enable_gradient_checkpointing(model) -> None:
    """Recompute each decoder layer's activations in backward instead of keeping them (Chen et al.
    2016, arXiv 1604.06174): activation memory of one layer instead of all, for ~1/3 more
    compute."""
    # in training only: generate() under no_grad keeps its KV cache
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def add_lora(model, rank: int, alpha: float | None = None):
    """Wrap `model` with LoRA adapters (Hu et al. 2021, arXiv 2106.09685) on every linear layer of
    the decoder; only the adapters train. Needs `pip install -e ".[lora]"` (peft)."""
    if importlib.util.find_spec("peft") is None:
        raise ValueError('lora_rank > 0 needs peft: pip install -e ".[lora]"')
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, lora_dropout=0.0,
                        target_modules="all-linear", task_type="CAUSAL_LM")
    return get_peft_model(model, config)
