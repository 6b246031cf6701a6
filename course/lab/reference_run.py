"""The reference's run of notebook 08, recorded: the curve to compare with where the reference
cannot run (a student edition).

    # instructors: writes course/checkpoints/reference_run.json
    python -m course.lab.reference_run

Notebook 08 trains with the learner's stages, then with the reference on the same seed, and plots
the two. A student edition ships the reference of the revealed stages only, so there the second
run cannot happen; this file holds it instead: the per-step records and the summary of
`NOTEBOOK_RUN` (the notebook's TrainConfig, seed 0, 60 steps) trained on CPU by the reference,
with the machine and torch version that made it, and the greedy answers of the warm start and of
the trained policy to a few held-out problems (notebook 01 opens with them: where the stages lead).
`instructor.edition` ships it with the checkpoints. A run on another machine, torch version or
device samples the same tokens only while the floats agree to the last digits, so a learner's
correct stages match the recorded curve up to the noise of sampling, not digit for digit.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from course.cli import Parser, unwritable
from course.loop.train_config import TrainConfig
from course.paths import CHECKPOINTS
from course.submissions.implementations import missing_references

RECORDED = CHECKPOINTS / "reference_run.json"
NOTEBOOK_RUN = TrainConfig(steps=60, eval_every=20, eval_problems=200, eval_samples=2, seed=0)
SAMPLE_PROBLEMS = 8  # held-out problems whose greedy answers, before and after, the record keeps
# where a run happens, not what it computes: a recorded CPU run stands for a GPU run too
NOT_COMPARED = ("checkpoint", "device", "threads")


def compared_fields(config: TrainConfig) -> dict:
    """The fields of `config` that decide the run (all but `NOT_COMPARED`)."""
    return {key: value for key, value in asdict(config).items() if key not in NOT_COMPARED}


def record(path: Path = RECORDED, progress: bool = True) -> dict:
    """Train `NOTEBOOK_RUN` on CPU with the reference of every stage and write its records and
    summary to `path`. Raises RuntimeError where some stage's reference is not here."""
    from course.loop.train import train  # torch: after the command line is checked

    missing = missing_references()
    if missing:
        raise RuntimeError(f"the reference of {', '.join(missing)} is not here (a student "
                           "edition?): record the reference run in the full course")
    config = replace(NOTEBOOK_RUN, device="cpu")
    with tempfile.TemporaryDirectory(prefix="grpo_reference_run_") as folder:
        summary = train(config, Path(folder), progress=progress)
        lines = (Path(folder) / "metrics.jsonl").read_text().splitlines()
        samples = greedy_samples(config, Path(folder) / "policy.pt")
    summary.pop("config")
    recorded = {"made_by": "python -m course.lab.reference_run", "machine": summary.pop("machine"),
                "config": compared_fields(config), "summary": summary,
                "records": [json.loads(line) for line in lines], "samples": samples}
    path.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")
    return recorded


def greedy_samples(config: TrainConfig, trained: Path, n: int = SAMPLE_PROBLEMS) -> list[dict]:
    """[{prompt, answer, before, after}]: the greedy responses of the starting checkpoint and of
    the weights in `trained` to `n` held-out problems (the first of the run's evaluation set)."""
    import random

    import torch

    from course.loop.models import load_model_and_tokenizer
    from course.loop.rollout import generate
    from course.loop.tasks import ADDITION
    from course.loop.train import EVAL_SEED

    test = list(ADDITION.problems("test"))
    problems = random.Random(EVAL_SEED).sample(test, config.eval_problems)[:n]
    prompts = [ADDITION.prompt(problem) for problem in problems]
    model, tokenizer = load_model_and_tokenizer(config.checkpoint)
    model.eval()
    with torch.no_grad():
        before = generate(model, tokenizer, prompts, None, config.max_new_tokens).responses
        model.load_state_dict(torch.load(trained))
        after = generate(model, tokenizer, prompts, None, config.max_new_tokens).responses
    return [{"prompt": prompt, "answer": problem.answer, "before": b, "after": a}
            for prompt, problem, b, a in zip(prompts, problems, before, after)]


def recorded_config(recorded: dict) -> dict:
    """The compared fields of a recorded run: a field added to TrainConfig after the recording
    ran at its default there."""
    return {**compared_fields(TrainConfig()), **recorded["config"]}


def recorded_reference_run(config: TrainConfig, path: Path = RECORDED) -> tuple[dict, list[dict]]:
    """(summary, records) of the recorded reference run, as `course.loop.train.train` returns and
    writes them. Raises ValueError naming the fields where `config` is not the recorded run's
    (its device, checkpoint folder and threads aside)."""
    recorded = json.loads(path.read_text(encoding="utf-8"))
    wanted, was = compared_fields(config), recorded_config(recorded)
    differ = [f"{key}={wanted[key]!r} (recorded: {was[key]!r})" for key in wanted
              if was[key] != wanted[key]]
    if differ:
        raise ValueError(f"the recorded reference run is another run: {', '.join(differ)}")
    summary = {**recorded["summary"], "machine": recorded["machine"]}
    return summary, recorded["records"]


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course.lab.reference_run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RECORDED,
                        help=f"where to write the recorded run (default: {RECORDED})")
    args = parser.parse_args(argv)
    if not args.out.parent.is_dir():
        parser.error(f"argument --out: {args.out.parent} is not a folder")
    if problem := unwritable(args.out, folder=False):
        parser.error(f"argument --out: {problem}")
    try:
        recorded = record(args.out)
    except RuntimeError as error:
        parser.error(str(error))
    summary = recorded["summary"]
    print(f"wrote {args.out}: {len(recorded['records'])} steps on {recorded['machine']}; sampled "
          f"accuracy {summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
