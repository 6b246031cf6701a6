"""`torchrun --nproc_per_node 2 -m course.train` makes the single-process run's updates (gloo, CPU)."""

import os
import subprocess
import sys

import pytest
import torch

from course.loop.models import load_model_and_tokenizer
from course.loop.plotting import read_metrics
from course.loop.train import TrainConfig, train

ARGS = dict(steps=3, prompts_per_step=4, group_size=4, eval_problems=8, eval_samples=1, eval_every=0,
            lr=1e-4, seed=2)
# Adam divides out a gradient's scale, so the weights alone would not catch a rank that sums
# where it should average; the gradient norm (before clipping) and the loss do.
COMPARED = ("reward_mean", "answer_reward_mean", "kl_to_reference", "token_entropy", "gradient_norm", "loss")


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("normalization", ["sequence", "token"])
def test_two_ranks_make_the_single_process_updates(tmp_path, normalization):
    single = tmp_path / "single"
    train(TrainConfig(**ARGS, normalization=normalization), single, progress=False)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "course.train", "--out", str(tmp_path / "dp"), "--normalization", normalization,
               # micro-batching on the ranks must not matter either
               "--gradient-accumulation-steps", "2"]
    for name, value in ARGS.items():
        command += [f"--{name.replace('_', '-')}", str(value)]
    (tmp_path / "tmp").mkdir()  # torchrun's torchelastic_* folders, which it leaves behind
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")}
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]

    for one, two in zip(read_metrics(single / "metrics.jsonl"), read_metrics(tmp_path / "dp" / "metrics.jsonl"),
                        strict=True):
        for key in COMPARED:
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), (one["step"], key)
    one_process = torch.load(single / "policy.pt")
    two_ranks = torch.load(tmp_path / "dp" / "policy.pt")
    initial = load_model_and_tokenizer(TrainConfig().checkpoint)[0].state_dict()
    moved = max((one_process[k] - initial[k]).abs().max().item() for k in initial)
    assert moved > 1e-4                                                    # the updates are real...
    for name, tensor in one_process.items():                               # ...and the same
        torch.testing.assert_close(two_ranks[name], tensor, atol=2e-6, rtol=1e-5)
