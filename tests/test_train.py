"""The end-to-end loop: a short seeded run learns and repeats itself; the CLI and its outputs."""

import json
import re
from dataclasses import asdict, replace

import pytest
import torch

from course.cli import field_help
from course.lab.compare import main as compare_main
from course.loop.models import load_model_and_tokenizer
from course.loop.plotting import read_metrics
from course.loop.rollout import evaluate
from course.loop.tasks import make_problems
from course.loop.train import (
    EVAL_SEED,
    WARM_START,
    TrainConfig,
    loss_arguments,
    train,
)
from course.loop.train_config import RUN_FILES
from course.loop.warm_start import WarmStartConfig, train_warm_start
from course.train import main
from course.variants import LOSS_NORMALIZATIONS, RUN_PG_METHODS

pytestmark = pytest.mark.usefixtures("single_thread")

# Timing fields are the only ones allowed to differ between two runs of one seed (the last record of
# a run also carries the final held-out evaluation, which a longer run does not have at that step).
TIMING = {"step_seconds", "tokens_per_second", "wall_seconds", "machine"}
STEP_KEYS = {"reward_mean", "format_reward_mean", "answer_reward_mean", "token_entropy",
             "clip_fraction", "kl_to_reference", "gradient_norm", "tokens_per_second", "groups_with_signal"}


def small(**overrides) -> TrainConfig:
    defaults = dict(steps=2, prompts_per_step=4, group_size=4, eval_problems=8, eval_samples=1,
                    eval_every=0)
    return TrainConfig(**{**defaults, **overrides})


def without_timing(records):
    return [{k: v for k, v in r.items() if k not in TIMING and not k.startswith("heldout_")}
            for r in records]


@pytest.mark.slow
def test_a_short_seeded_run_raises_reward_and_repeats_itself(tmp_path):
    config = TrainConfig(steps=40, eval_problems=200, eval_samples=4, eval_every=0, seed=0)
    summary = train(config, tmp_path / "long", progress=False)
    records = read_metrics(tmp_path / "long" / "metrics.jsonl")
    assert len(records) == 40
    # held-out accuracy under the policy's own sampling rises, and so does the rollout reward
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.05, summary
    first, last = (sum(r["reward_mean"] for r in part) / 10 for part in (records[:10], records[-10:]))
    assert last > first, (first, last)
    # the same seed gives the same first steps, number for number (the held-out evaluation has a seed
    # of its own and is left out of the comparison, so the reruns evaluate on one problem)
    rerun = {**config.__dict__, "eval_problems": 1, "eval_samples": 1}
    train(TrainConfig(**{**rerun, "steps": 3}), tmp_path / "again", progress=False)
    again = read_metrics(tmp_path / "again" / "metrics.jsonl")
    assert without_timing(again) == without_timing(records[:3])
    # ... and another seed does not
    train(TrainConfig(**{**rerun, "steps": 1, "seed": 1}), tmp_path / "other", progress=False)
    assert without_timing(read_metrics(tmp_path / "other" / "metrics.jsonl")) != without_timing(records[:1])


@pytest.mark.slow
def test_cli_writes_metrics_summary_and_plot(tmp_path, capsys):
    main(["--out", str(tmp_path), "--steps", "2", "--prompts-per-step", "4", "--group-size", "4",
          "--eval-problems", "8", "--eval-samples", "1", "--eval-every", "1", "--seed", "3"])
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert STEP_KEYS <= set(record), STEP_KEYS - set(record)
        assert all(isinstance(v, (int, float)) for v in record.values())
    assert "heldout_accuracy_sampled" in records[0] and "heldout_accuracy_greedy" in records[1]
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("accuracy_before", "accuracy_after", "greedy_accuracy_before", "greedy_accuracy_after",
                "wall_seconds"):
        assert 0 <= summary[key] and (key == "wall_seconds" or summary[key] <= 1)
    assert summary["config"]["seed"] == 3 and summary["config"]["steps"] == 2
    assert (tmp_path / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out  # a result to read, not the JSON
    assert f"{summary['accuracy_before']:.3f}  →  {summary['accuracy_after']:.3f}" in printed
    assert f"{summary['greedy_accuracy_before']:.3f}  →  {summary['greedy_accuracy_after']:.3f}" in printed
    assert all(f"  {name} " in printed for name in RUN_FILES) and "{" not in printed
    assert f"next: open {tmp_path / 'training_curves.png'}" in printed


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    squeezed = "".join(text.split())                # argparse re-wraps lines, also at hyphens
    docs = field_help(TrainConfig)
    assert set(docs) == set(TrainConfig.__dataclass_fields__)          # every field has a docstring
    for name, doc in docs.items():
        assert f"--{name.replace('_', '-')}" in text
        assert "".join(doc.split()) in squeezed, name
    assert "--out" in text and "torchrun" in text


@pytest.mark.parametrize("pg_method", RUN_PG_METHODS)
@pytest.mark.slow
def test_every_loss_variant_trains(tmp_path, pg_method):
    summary = train(small(pg_method=pg_method, updates_per_rollout=2, lr=1e-3), tmp_path, progress=False)
    records = read_metrics(tmp_path / "metrics.jsonl")
    for record in records:
        assert all(torch.isfinite(torch.tensor(float(v))) for v in record.values())
    assert records[-1]["kl_to_reference"] > 0                           # the policy moved
    assert all(0 <= r["clip_fraction"] <= 1 for r in records)
    if pg_method in ("grpo", "dapo"):
        # the second update of each batch is off-policy; at this large lr some tokens clip
        assert any(r["clip_fraction"] > 0 for r in records)
    assert summary["config"]["pg_method"] == pg_method


@pytest.mark.slow
def test_stage_5s_loss_trains_from_the_command_line(tmp_path):
    """--pg-method dapo runs compute_grpo_loss: with ε_high = ε_low its run is grpo's, weight for weight;
    `--pg-method dapo --clip-higher 0.28` trains, with DAPO's bounds in its loss."""
    def weights(name, *flags):
        # one rollout of 8 x 8, four updates on it: the last ones are off-policy enough to clip
        main(["--steps", "1", "--eval-problems", "8", "--eval-samples", "1", "--eval-every", "0",
              "--updates-per-rollout", "4", "--out", str(tmp_path / name), *flags])
        return torch.load(tmp_path / name / "policy.pt")

    grpo = weights("grpo", "--pg-method", "grpo")
    dapo = weights("dapo", "--pg-method", "dapo")
    weights("higher", "--pg-method", "dapo", "--clip-higher", "0.28")
    for name, tensor in grpo.items():
        torch.testing.assert_close(dapo[name], tensor, atol=1e-6, rtol=1e-5)
    summary = json.loads((tmp_path / "higher" / "summary.json").read_text())
    assert summary["config"]["pg_method"] == "dapo" and summary["config"]["clip_higher"] == 0.28
    # the flag reaches the loss (tests/test_train_step_grpo_loss.py shows the loss uses it); whether
    # a sampled token's ratio lands in (1.2, 1.28] depends on the machine's floats, so the run's
    # weights and clip fraction are not compared (here: 5.0% clipped against grpo's 5.6%)
    grpo_loss = loss_arguments(TrainConfig(pg_method="dapo", clip_higher=0.28))["grpo_loss"]
    assert (grpo_loss.loss_fn, grpo_loss.clip_lower, grpo_loss.clip_higher) == ("dapo", 0.2, 0.28)


def test_a_train_step_without_grpo_loss_is_refused_for_dapo():
    def older_step(model, tokenizer, optimizer, gradient_accumulation_steps, max_grad_norm, reward_fn,
                   repeated_prompts, rollout_responses, repeated_ground_truths, group_size, temperature=1.0):
        raise AssertionError("never called")

    with pytest.raises(ValueError, match="pg_method dapo needs a grpo_train_step"):
        train(small(pg_method="dapo"), None, progress=False, implementations={"grpo_train_step": older_step})


@pytest.mark.parametrize("normalization", LOSS_NORMALIZATIONS)
@pytest.mark.slow
def test_update_does_not_depend_on_micro_batching(tmp_path, normalization):
    weights = []
    for steps in (1, 4):
        train(small(steps=1, normalization=normalization, gradient_accumulation_steps=steps),
              tmp_path / str(steps), progress=False)
        weights.append(torch.load(tmp_path / str(steps) / "policy.pt"))
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, atol=1e-6, rtol=1e-5)


def test_bf16_sampler_shows_a_real_mismatch(tmp_path):
    train(small(sampler_dtype="bfloat16", steps=1), tmp_path, progress=False)
    (record,) = read_metrics(tmp_path / "metrics.jsonl")
    # bf16 keeps 8 bits of mantissa: log-probs differ by ~1e-2, never by 0 and never wildly
    assert 1e-4 < record["logprob_diff_mean"] < 0.2
    assert record["reverse_kl"] > 0
    assert 0.5 < record["tis_weight_mean"] < 1.5


@pytest.mark.slow
def test_a_bf16_sampler_at_a_temperature_is_compared_at_that_temperature(tmp_path):
    # At τ = 0.5 the sampler's log-probs are of softmax(z/τ) and π_old is re-scored at τ: they
    # differ by bf16 rounding only (measured: 0.002 on average; re-scored at τ = 1 instead, 0.07).
    train(small(sampler_dtype="bfloat16", steps=1, temperature=0.5), tmp_path, progress=False)
    (record,) = read_metrics(tmp_path / "metrics.jsonl")
    assert 1e-4 < record["logprob_diff_mean"] < 0.02
    assert 0.9 < record["tis_weight_mean"] < 1.1


@pytest.mark.slow
def test_float32_run_reports_no_sampler_mismatch(tmp_path):
    train(small(steps=1), tmp_path, progress=False)
    (record,) = read_metrics(tmp_path / "metrics.jsonl")
    assert not any(re.match("logprob_diff|tis_", key) for key in record)


@pytest.mark.parametrize("overrides, match", [
    (dict(pg_method="ppo"), "pg_method must be one of"),
    (dict(normalization="batch"), "normalization must be one of"),
    (dict(sampler_dtype="float16"), "sampler_dtype must be one of"),
    (dict(eval_problems=0), "eval_problems"),
])
def test_bad_config_raises(overrides, match):
    with pytest.raises(ValueError, match=match):
        train(small(**overrides), None, progress=False)


def test_shipped_warm_start_knows_the_format_but_is_often_wrong():
    model, tokenizer = load_model_and_tokenizer(WARM_START)
    problems = make_problems(200, seed=EVAL_SEED, split="test")
    sampled = evaluate(model, tokenizer, problems, seed=EVAL_SEED)
    assert sampled["format_reward"] > 0.9
    assert 0.1 < sampled["answer_reward"] < 0.5                        # room for RL, and a signal
    shipped = json.loads((WARM_START / "warm_start_config.json").read_text())
    assert shipped == asdict(WarmStartConfig())                        # the defaults made it


@pytest.mark.slow
def test_warm_start_script_is_seeded_and_reproducible(tmp_path):
    config = WarmStartConfig(steps=3, eval_every=0, eval_problems=4)
    first = train_warm_start(config, tmp_path, log=lambda line: None)[0].state_dict()
    again = load_model_and_tokenizer(tmp_path)[0].state_dict()
    rerun = train_warm_start(config, None, log=lambda line: None)[0].state_dict()
    other = train_warm_start(replace(config, seed=1), None, log=lambda line: None)[0].state_dict()
    for name, tensor in first.items():
        assert torch.equal(again[name], tensor) and torch.equal(rerun[name], tensor), name
    assert any(not torch.equal(other[name], tensor) for name, tensor in first.items())


def test_cuda_device_without_a_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="device 'cuda'.*no CUDA device"):
        train(small(device="cuda"), None, progress=False)
    with pytest.raises(ValueError, match="device must be cpu, cuda or cuda:N"):
        train(small(device="tpu"), None, progress=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_run_trains_and_saves_cpu_weights(tmp_path):
    summary = train(small(device="cuda"), tmp_path, progress=False)
    assert 0 <= summary["accuracy_after"] <= 1
    assert all(t.device.type == "cpu" for t in torch.load(tmp_path / "policy.pt").values())


# ----------------------------------------------------------------------------- course.lab.compare

TINY_COMPARE = ["--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--eval-problems", "4",
                "--eval-samples", "1", "--eval-every", "1"]


@pytest.mark.slow
def test_compare_writes_figure_and_table(tmp_path, capsys):
    compare_main(["--out", str(tmp_path), "--pg-methods", "none", "gspo", "--normalizations", "sequence", "token",
                  "--seeds", "0", "1", *TINY_COMPARE])
    result = json.loads((tmp_path / "compare.json").read_text())
    assert [r["variant"] for r in result["rows"]] == ["none / sequence", "none / token", "gspo / sequence",
                                                     "gspo / token"]
    assert all(r["seeds"] == 2 and [s for s, _ in r["curve"]] == [0, 1, 2] for r in result["rows"])
    assert result["config"]["updates_per_rollout"] == 2 and result["config"]["steps"] == 2
    # eight runs, each a complete course.train folder, same seeds for every variant
    folders = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert folders == sorted(f"{loss}-{norm}-seed{seed}" for loss in ("none", "gspo")
                             for norm in ("sequence", "token") for seed in (0, 1))
    # the same seed starts from the same held-out accuracy whatever the loss
    before = {r["variant"]: r["sampled before"] for r in result["rows"]}
    assert len(set(before.values())) == 1
    table = (tmp_path / "compare.md").read_text()
    assert "| gspo / token | 2 |" in table and "sampled after" in table
    assert (tmp_path / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--pg-methods", "ppo"], "--pg-methods: invalid choice: 'ppo'"),
    (["--losses", "grpo"], "unrecognized arguments: --losses"),
    (["--normalizations", "batch"], "--normalizations: invalid choice: 'batch'"),
    (["--seeds", "-1"], "argument --seeds: must be >= 0, got -1"),
    (["--steps", "x"], "argument --steps: expected int, got 'x'"),
    (["--eval-problems", "0"], "argument --eval-problems: must be >= 1"),
    (["--loss", "grpo"], "unrecognized arguments: --loss"),   # set per run, not a common flag
])
def test_compare_rejects_bad_flags_by_name(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        compare_main(["--out", str(tmp_path / "new"), *flags])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "new").exists()                              # nothing written


def test_compare_never_writes_into_a_used_folder(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("a student's notes")
    with pytest.raises(SystemExit):
        compare_main(["--out", str(tmp_path), *TINY_COMPARE])
    assert "is not empty" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("flags, flag", [
    (["--steps", "-1"], "--steps"),
    (["--steps", "1.5"], "--steps"),
    (["--prompts-per-step", "0"], "--prompts-per-step"),
    (["--lr", "-1"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--group-size", "two"], "--group-size"),
    (["--checkpoint", "/no/such/folder"], "--checkpoint"),
    (["--kl-beta", "-0.1"], "--kl-beta"),
    (["--kl-estimator", "k7"], "--kl-estimator"),
    (["--sampler-dtype", "float16"], "--sampler-dtype"),
    (["--tis-cap", "0"], "--tis-cap"),
    (["--temperature", "0"], "--temperature"),
    (["--max-grad-norm", "-1"], "--max-grad-norm"),
    (["--device", "tpu"], "--device"),
    (["--kl-estimator", "2"], "--kl-estimator"),  # the names only, no numbers
    (["--clip-higher", "0.28"], "--clip-higher"),
    (["--pg-method", "dapo", "--clip-higher", "-1"], "--clip-higher"),
    (["--prompts-per-step", "2", "--group-size", "2", "--gradient-accumulation-steps", "5"],
     "--gradient-accumulation-steps"),
    (["--group-size", "1"], "--group-size"),
])
def test_a_bad_flag_is_a_usage_error_naming_it(tmp_path, capsys, flags, flag):
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "run"), *flags])
    assert exit_info.value.code == 2  # argparse's usage error
    error = capsys.readouterr().err
    assert f"argument {flag}:" in error and "Traceback" not in error, error
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_folder_without_a_model_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--checkpoint", str(tmp_path)])
    assert "argument --checkpoint:" in capsys.readouterr().err


@pytest.mark.slow
def test_kl_penalty_and_tis_change_the_update(tmp_path):
    """--kl-beta and a bf16 sampler's TIS weights enter the loss: the same seed then trains differently."""
    def weights(name, **overrides):
        train(small(steps=2, lr=1e-3, **overrides), tmp_path / name, progress=False)
        return torch.load(tmp_path / name / "policy.pt")

    def moved(a, b):
        return max(float((a[k] - b[k]).abs().max()) for k in a)

    plain = weights("plain")
    assert moved(weights("kl", kl_beta=1.0), plain) > 1e-6
    uncapped = weights("bf16", sampler_dtype="bfloat16", tis_cap=100.0)
    assert moved(weights("bf16-capped", sampler_dtype="bfloat16", tis_cap=0.5), uncapped) > 1e-6
