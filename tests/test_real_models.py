"""Real Hugging Face models without a GPU or a download: tiny Qwen2, Qwen3, Llama, OLMo2 and Gemma
built from their configs, with a byte-level BPE tokenizer trained in code, saved and read back
through `AutoModelForCausalLM.from_pretrained` (`course.loop.models.load_pretrained`).

Checked: the loading path (offline; a hub id is refused without --allow-download), the chunked
head equal to the plain head on each family it covers (and a clear refusal on the others), a few
GRPO steps on the GSM8K-style task end to end through `python -m course.train`, and the GPU path
(marked `gpu`, skipped without CUDA).
"""

import json
import os
from pathlib import Path

import nbformat
import pytest
import torch

from course.loop.gsm8k import GSM8KTask, load_gsm8k_jsonl
from course.loop.models import chat_prompt, load_pretrained
from course.loop.tiny_hf import (
    build_bpe_tokenizer,
    build_tiny_causal_lm,
    synthetic_gsm8k,
    write_jsonl,
)
from course.loop.train import TrainConfig, train
from course.scoring import get_response_log_probs
from course.train import main

pytestmark = pytest.mark.usefixtures("single_thread")
os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here may reach the hub

CHUNKED_FAMILIES = ("qwen2", "llama", "olmo2")  # course.chunked_head.CHUNKABLE_MODEL_TYPES
OTHER_FAMILIES = ("qwen3", "gemma")


@pytest.fixture(scope="module")
def bpe_tokenizer():
    records = synthetic_gsm8k(60, seed=1)
    return build_bpe_tokenizer([r["question"] + "\n" + r["answer"] for r in records], vocab_size=400)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, bpe_tokenizer):
    """family -> a folder with a tiny saved model of that family and the BPE tokenizer."""
    folders = {}
    for family in CHUNKED_FAMILIES + OTHER_FAMILIES:
        folder = tmp_path_factory.mktemp(family)
        build_tiny_causal_lm(family, bpe_tokenizer, hidden_size=32, heads=4).save_pretrained(folder)
        bpe_tokenizer.save_pretrained(folder)
        folders[family] = folder
    return folders


@pytest.mark.parametrize("family", CHUNKED_FAMILIES + OTHER_FAMILIES)
def test_a_saved_model_loads_through_from_pretrained_offline(saved, family, bpe_tokenizer):
    model, tokenizer = load_pretrained(saved[family])
    assert model.config.model_type == family and not model.training
    text = "Mara has 12 apples.\n#### 12"
    assert tokenizer.encode(text, add_special_tokens=False) == bpe_tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    prompt = chat_prompt(tokenizer, "Hi")
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") in ids  # the template's specials are tokens


def test_bf16_weights_still_score_in_float32(saved):
    model, tokenizer = load_pretrained(saved["qwen2"], dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    ids = torch.tensor([tokenizer.encode("Theo reads 12 pages", add_special_tokens=False)])
    out = get_response_log_probs(model, ids[:, :-1], ids[:, 1:])["log_probs"]
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_a_hub_id_is_refused_without_allow_download(tmp_path):
    with pytest.raises(ValueError, match="--allow-download"):
        load_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(ValueError, match="no config.json"):
        load_pretrained(tmp_path)


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("family", CHUNKED_FAMILIES)
def test_chunked_head_equals_plain_head(bpe_tokenizer, family, tied):
    # tied: SmolLM2 and Qwen2.5-0.5B share the embedding with the head
    model = build_tiny_causal_lm(family, bpe_tokenizer, hidden_size=32, heads=4,
                                 tie_word_embeddings=tied).double()
    ids = torch.randint(0, len(bpe_tokenizer), (3, 9), generator=torch.Generator().manual_seed(0))
    weights = torch.randn(3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    results = []
    for chunk in (0, 3):
        model.zero_grad()
        out = get_response_log_probs(model, ids[:, :-1], ids[:, 1:], return_token_entropy=True,
                                     logits_chunk_size=chunk)
        (out["log_probs"] * weights).sum().backward()
        results.append((out["log_probs"].detach(), out["token_entropy"],
                        [p.grad.clone() for p in model.parameters()]))
    (plain, plain_entropy, plain_grads), (chunked, chunked_entropy, chunked_grads) = results
    torch.testing.assert_close(chunked, plain, rtol=0, atol=1e-12)
    torch.testing.assert_close(chunked_entropy, plain_entropy, rtol=0, atol=1e-12)
    for a, b in zip(chunked_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("family", OTHER_FAMILIES)
def test_chunked_head_refuses_families_it_does_not_cover(bpe_tokenizer, family):
    model = build_tiny_causal_lm(family, bpe_tokenizer, hidden_size=32, heads=4)
    ids = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="logits_chunk_size=0"):
        get_response_log_probs(model, ids, ids, logits_chunk_size=2)


def test_gsm8k_task_prompts_with_the_chat_template(saved):
    _, tokenizer = load_pretrained(saved["qwen2"])
    task = GSM8KTask(load_gsm8k_jsonl(_data_file()), tokenizer)
    problem = task.problems("train")[0]
    prompt = task.prompt(problem)
    assert prompt.startswith("<|im_start|>user\n" + problem.question)
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n") and "#### <number>" in prompt


def _data_file():
    return Path(__file__).parent / "data" / "gsm8k_sample.jsonl"


def _tiny_run(folder, data, **overrides) -> TrainConfig:
    return TrainConfig(model=str(folder), task="gsm8k", data=str(data), steps=2, prompts_per_step=2,
                       group_size=4, max_new_tokens=12, eval_problems=4, eval_samples=1, eval_every=0,
                       **overrides)


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_grpo_steps_on_gsm8k_move_the_real_model(saved, tmp_path, family):
    data = write_jsonl(synthetic_gsm8k(40, seed=2), tmp_path / "gsm8k.jsonl")
    model, _ = load_pretrained(saved[family])
    before = [p.detach().clone() for p in model.parameters()]
    # the shaped reward is never constant over a group, so every step has a gradient
    summary = train(_tiny_run(saved[family], data, overlong="soft", overlong_buffer=12, lr=1e-2),
                    tmp_path / "run", progress=False)
    after = torch.load(tmp_path / "run" / "policy.pt")
    moved = max(float((a - b).abs().max()) for a, b in zip(after.values(), before))
    assert moved > 1e-4
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2 and any(r["gradient_norm"] > 0 for r in records)
    assert summary["config"]["task"] == "gsm8k" and "kl_to_reference" not in records[0]  # no KL: no reference


def test_the_command_line_trains_a_saved_model_on_a_gsm8k_file(saved, tmp_path, capsys):
    main(["--model", str(saved["olmo2"]), "--task", "gsm8k", "--data", str(_data_file()), "--steps", "1",
          "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "8", "--eval-problems", "2",
          "--eval-samples", "1", "--eval-every", "0", "--dynamic-sampling", "--out", str(tmp_path / "cli")])
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert summary["config"]["model"] == str(saved["olmo2"]) and summary["config"]["dynamic_sampling"]


SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"


def _policy(folder: Path) -> dict[str, torch.Tensor]:
    return torch.load(folder / "policy.pt")


def test_the_learners_own_stages_train_a_real_model(saved, tmp_path, capsys):
    """`--notebooks DIR --model PATH`: the solutions' stages (every graded function "yours") train
    a saved Qwen2 on GSM8K lines, as the reference does; a learner's train step that takes no
    optimizer step leaves its weights as loaded, so it is theirs that steps."""
    data = write_jsonl(synthetic_gsm8k(40, seed=2), tmp_path / "gsm8k.jsonl")
    flags = ["--model", str(saved["qwen2"]), "--task", "gsm8k", "--data", str(data), "--steps", "2",
             "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "12", "--eval-problems", "2",
             "--eval-samples", "1", "--eval-every", "0", "--overlong", "soft", "--overlong-buffer", "12",
             "--lr", "1e-2"]
    main(flags + ["--notebooks", str(SOLUTIONS), "--out", str(tmp_path / "yours")])
    main(flags + ["--out", str(tmp_path / "reference")])
    summary = json.loads((tmp_path / "yours" / "summary.json").read_text())
    assert set(summary["implementations"].values()) == {f"yours ({n})" for n in (
        "01_tokenization.ipynb", "02_scoring.ipynb", "03_advantages.ipynb",
        "04_losses.ipynb", "05_off_policy.ipynb", "06_aggregation.ipynb",
        "07_train_step.ipynb")}
    loaded = load_pretrained(saved["qwen2"])[0].state_dict()
    yours, reference = _policy(tmp_path / "yours"), _policy(tmp_path / "reference")
    assert max(float((yours[k] - loaded[k]).abs().max()) for k in loaded) > 1e-4  # it trained
    for key in loaded:  # the same stages, so the same run (to float32 rounding)
        torch.testing.assert_close(yours[key], reference[key], rtol=1e-4, atol=1e-5)

    still = tmp_path / "still"
    still.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import torch\n\ndef grpo_train_step(model, *args, **kwargs):\n"
        "    return torch.zeros(()), {k: 0.0 for k in ('token_entropy', 'gradient_norm', 'loss', "
        "'reward_mean', 'format_reward_mean', 'answer_reward_mean')}")]), still / "06.ipynb")
    main(flags + ["--notebooks", str(still), "--out", str(tmp_path / "still_run")])
    kept = _policy(tmp_path / "still_run")
    assert all(torch.equal(kept[k], loaded[k]) for k in loaded)
    summary = json.loads((tmp_path / "still_run" / "summary.json").read_text())
    assert summary["implementations"]["grpo_train_step"] == "yours (06.ipynb)"


@pytest.mark.parametrize("flags, flag", [
    (["--model", "Qwen/Qwen2.5-0.5B-Instruct"], "--model"),
    (["--task", "gsm8k"], "--data"),
    (["--task", "gsm8k", "--data", "hub/name"], "--data"),
    (["--data", "x.jsonl"], "--data"),
    (["--is-level", "row"], "--is-level"),
    (["--overlong", "soft", "--overlong-buffer", "99"], "--overlong-buffer"),
])
def test_bad_real_model_flags_are_usage_errors_naming_the_flag(capsys, flags, flag):
    with pytest.raises(SystemExit) as exit_info:
        main(flags)
    assert exit_info.value.code == 2 and f"argument {flag}" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_auto_trains_a_bf16_model_on_the_gpu(saved, tmp_path):
    data = write_jsonl(synthetic_gsm8k(40, seed=2), tmp_path / "gsm8k.jsonl")
    summary = train(_tiny_run(saved["qwen2"], data, device="auto", model_dtype="bfloat16",
                              gradient_checkpointing=True), tmp_path / "gpu", progress=False)
    assert summary["config"]["device"] == "auto"


def test_lora_trains_only_the_adapters(saved, tmp_path):
    """--lora-rank (peft, the .[lora] extra): after GRPO steps on a saved Qwen2 the adapters have
    moved and every base weight is as loaded."""
    pytest.importorskip("peft")
    data = write_jsonl(synthetic_gsm8k(40, seed=2), tmp_path / "gsm8k.jsonl")
    train(_tiny_run(saved["qwen2"], data, overlong="soft", overlong_buffer=12, lr=1e-2, lora_rank=4),
          tmp_path / "lora", progress=False)
    trained = _policy(tmp_path / "lora")
    loaded = load_pretrained(saved["qwen2"])[0].state_dict()
    adapters = {k: v for k, v in trained.items() if "lora_" in k}
    base = {k.removeprefix("base_model.model.").replace(".base_layer", ""): v
            for k, v in trained.items() if "lora_" not in k}
    assert adapters and base.keys() == loaded.keys()
    assert all(torch.equal(base[k], loaded[k]) for k in loaded)
    # lora_B starts at 0 (peft's init), so any non-zero entry is the adapters' training
    assert max(float(v.abs().max()) for k, v in adapters.items() if "lora_B" in k) > 1e-4
