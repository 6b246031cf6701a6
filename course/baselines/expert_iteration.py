"""Expert iteration: sample with the current policy, keep what the verifier accepts, imitate it.

One iteration on n prompts (Anthony et al. 2017, arXiv 1705.08439, named it; Stanford CS336 (2025)
assignment 5 runs it on the r1-zero reward):
    o_i1..o_iG ~ π_θ(· | q_i)                 G samples per prompt (`course.loop.rollout`)
    D = {(q_i, o_ij) : r(o_ij, a_i) = 1}       the correct ones only
    θ ← SFT step on D                          (`course.baselines.sft.sft_train_step`)
A wrong sample is dropped, never pushed down: unlike GRPO's advantage, nothing here lowers the
probability of a mistake except through the normalization of the right ones. A prompt whose G
samples are all wrong adds nothing, one whose samples are all right adds G copies of what the
policy already does; GRPO gives both zero advantage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from course.loop.rollout import RolloutBatch, sample_groups
from course.loop.tasks import ADDITION, Task, TaskProblem


def keep_correct(prompts: Sequence[str], responses: Sequence[str], ground_truths: Sequence[str],
                 reward_fn: Callable[[str, str], dict[str, float]]) -> tuple[list[str], list[str]]:
    """(prompts, responses) of the rows whose `reward_fn(response, truth)["reward"]` is 1, in order.

    A response in the right format with a wrong answer (format reward 1, reward 0) is dropped.
    """
    if not len(prompts) == len(responses) == len(ground_truths):
        raise ValueError(f"prompts ({len(prompts)}), responses ({len(responses)}) and "
                         f"ground_truths ({len(ground_truths)}) must be row-aligned")
    kept = [(prompt, response) for prompt, response, truth in zip(prompts, responses, ground_truths)
            if reward_fn(response, truth)["reward"] == 1.0]
    return [prompt for prompt, _ in kept], [response for _, response in kept]


def expert_samples(policy, tokenizer, problems: Sequence[TaskProblem], group_size: int, seed: int,
                   step: int, max_new_tokens: int, temperature: float,
                   task: Task = ADDITION) -> tuple[list[str], list[str], RolloutBatch]:
    """One iteration's data: G samples per problem, seeded as GRPO's rollouts of (seed, step) are
    (`sample_groups`, so both methods draw the same first batch), and the correct ones kept.
    Returns (kept prompts, kept responses, every rollout)."""
    was_training = policy.training
    policy.eval()
    try:
        rollouts = sample_groups(policy, tokenizer, list(problems), group_size, seed, step,
                                 max_new_tokens=max_new_tokens, temperature=temperature, task=task)
    finally:
        policy.train(was_training)
    prompts, responses = keep_correct(rollouts.repeated_prompts, rollouts.responses,
                                      rollouts.repeated_ground_truths, task.reward_fn)
    return prompts, responses, rollouts
