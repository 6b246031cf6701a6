"""`python -m course.train` with the losses of 2025–26 (`course.frontier.loss`) and MaxRL's guard
(`course.frontier.maxrl`): each option trains a couple of steps, reaches the loss it names, and a bad value
is a usage error naming its flag; two gloo ranks make the single-process run's updates."""

import os
import subprocess
import sys

import pytest
import torch

from course.frontier.loss import FrontierLoss
from course.loop.plotting import read_metrics
from course.loop.train import TrainConfig, advantage_arguments, loss_arguments, train
from course.train import main

pytestmark = pytest.mark.usefixtures("single_thread")


def tiny(**overrides) -> TrainConfig:
    defaults = dict(steps=2, prompts_per_step=4, group_size=4, eval_problems=8, eval_samples=1,
                    eval_every=0, lr=1e-3)
    return TrainConfig(**{**defaults, **overrides})


# (flags as TrainConfig fields, the FrontierLoss fields they must set)
OPTIONS = {
    "sapo": (dict(pg_method="sapo", sapo_tau_neg=1.2), dict(loss_fn="sapo", tau_neg=1.2)),
    "gmpo": (dict(pg_method="gmpo", cliprange=0.4, clip_higher=0.3),
             dict(loss_fn="gmpo", clip_lower=0.4, clip_higher=0.3)),
    "dppo": (dict(pg_method="dppo", trust_region=0.1),
             dict(loss_fn="dppo", trust_region=0.1, ratio_kl=1e-3)),
    "dual-clip": (dict(pg_method="dapo", dual_clip=3.0, clip_higher=0.28, updates_per_rollout=2),
                  dict(loss_fn="dapo", dual_clip=3.0, clip_higher=0.28)),
    "cispo-floor": (dict(pg_method="cispo", cispo_floor=True),
                    dict(loss_fn="cispo", cispo_floor=True)),
    "sampler": (dict(pg_method="grpo", ratio_against="sampler", sampler_dtype="bfloat16"),
                dict(loss_fn="dapo", ratio_against="sampler")),
    "outlier": (dict(pg_method="sapo", outlier_low=0.5, outlier_high=2.0, updates_per_rollout=2),
                dict(outlier_low=0.5, outlier_high=2.0)),
}


@pytest.mark.parametrize("name", OPTIONS)
def test_each_option_trains_with_the_loss_it_names(tmp_path, name):
    fields, expected = OPTIONS[name]
    config = tiny(**fields)
    grpo_loss = loss_arguments(config)["grpo_loss"]
    assert isinstance(grpo_loss, FrontierLoss)
    assert {key: getattr(grpo_loss, key) for key in expected} == expected
    train(config, tmp_path, progress=False)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert len(records) == 2
    for record in records:
        assert all(torch.isfinite(torch.tensor(float(v))) for v in record.values())
    assert records[-1]["kl_to_reference"] > 0  # the policy moved
    assert all(0 <= r["clip_fraction"] <= 1 for r in records)


def test_maxrl_with_groups_of_one_learns(tmp_path):
    # the graded mean normalizer gives a group of one A = (r − r)/(r + ε) = 0: no gradient at all;
    # the guard gives A = r (REINFORCE), as prime-rl #2985
    config = tiny(advantage_normalizer="mean", group_size=1, prompts_per_step=16, steps=1)
    assert advantage_arguments(config) == {"baseline": "none", "advantage_normalizer": "none"}
    assert advantage_arguments(tiny(advantage_normalizer="mean"))["advantage_normalizer"] == "mean"
    train(config, tmp_path, progress=False)
    (record,) = read_metrics(tmp_path / "metrics.jsonl")
    assert record["reward_mean"] > 0 and record["gradient_norm"] > 0


@pytest.mark.parametrize("flags, flag", [
    (["--dual-clip", "1"], "--dual-clip"),
    (["--dual-clip", "-1"], "--dual-clip"),
    (["--pg-method", "sapo", "--dual-clip", "3"], "--dual-clip"),
    (["--cispo-floor"], "--cispo-floor"),
    (["--pg-method", "gspo", "--ratio-against", "sampler"], "--ratio-against"),
    (["--ratio-against", "ref"], "--ratio-against"),
    (["--ratio-against", "sampler", "--is-mode", "mask"], "--ratio-against"),
    (["--outlier-low", "2", "--outlier-high", "1"], "--outlier-low"),
    (["--pg-method", "none", "--outlier-high", "2"], "--outlier-high"),
    (["--sapo-tau-neg", "0"], "--sapo-tau-neg"),
    (["--trust-region", "0"], "--trust-region"),
    (["--pg-method", "sapo", "--clip-higher", "0.3"], "--clip-higher"),
    (["--advantage-normalizer", "mean", "--overlong", "soft"], "--advantage-normalizer"),
])
def test_a_bad_flag_is_a_usage_error_naming_it(tmp_path, capsys, flags, flag):
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "run"), *flags])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert f"argument {flag}:" in error and "Traceback" not in error, error
    assert not (tmp_path / "run").exists()


def test_a_train_step_without_frontier_loss_is_refused_by_name():
    def notebook_step(model, tokenizer, optimizer, gradient_accumulation_steps, max_grad_norm, reward_fn,
                      repeated_prompts, rollout_responses, repeated_ground_truths, group_size,
                      temperature=1.0, grpo_loss=None, **kwargs):
        raise AssertionError("never called")

    for fields, match in ((dict(pg_method="sapo"), "pg_method sapo trains with"),
                          (dict(dual_clip=3.0), "dual_clip 3.0 trains with")):
        with pytest.raises(ValueError, match=match):
            train(tiny(**fields), None, progress=False, implementations={"grpo_train_step": notebook_step})


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("flags", [["--pg-method", "sapo"],
                                   ["--pg-method", "dapo", "--dual-clip", "1.5", "--ratio-against", "sampler"]],
                         ids=["sapo", "dual-clip-sampler"])
def test_two_ranks_make_the_single_process_updates(tmp_path, flags):
    args = ["--steps", "2", "--prompts-per-step", "4", "--group-size", "2", "--eval-problems", "8",
            "--eval-samples", "1", "--eval-every", "0", "--seed", "2", "--updates-per-rollout", "2",
            "--threads", "1", *flags]
    main(["--out", str(tmp_path / "single"), *args])
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "course.train", "--out", str(tmp_path / "dp"), "--gradient-accumulation-steps", "2",
               *args]
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")}
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    for one, two in zip(read_metrics(tmp_path / "single" / "metrics.jsonl"),
                        read_metrics(tmp_path / "dp" / "metrics.jsonl"), strict=True):
        for key in ("reward_mean", "gradient_norm", "loss", "clip_fraction", "kl_to_reference"):
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), (one["step"], key)
    single, ranks = (torch.load(tmp_path / name / "policy.pt") for name in ("single", "dp"))
    for name, tensor in single.items():
        torch.testing.assert_close(ranks[name], tensor, atol=2e-6, rtol=1e-5)
