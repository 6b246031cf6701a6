"""Mutant: rows with zero advantage dropped before the step ("they add no gradient"), so the
loss normalization counts only the remaining rows and tokens."""
from _impl import build

globals().update(build())
_correct = grpo_train_step  # noqa: F821  (defined by the update above)
ADVANTAGE_OPTIONS = ("baseline", "advantage_eps", "advantage_normalizer")


def grpo_train_step(model, tokenizer, optimizer, gradient_accumulation_steps, max_grad_norm, reward_fn,
                    repeated_prompts, rollout_responses, repeated_ground_truths, group_size, **options):
    rewards, _ = compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)  # noqa: F821
    advantages, _ = compute_group_normalized_rewards(  # noqa: F821
        rewards, group_size, **{k: v for k, v in options.items() if k in ADVANTAGE_OPTIONS})
    keep = [i for i, a in enumerate(advantages.tolist()) if a != 0]
    if options.get("old_log_probs") is not None:
        options["old_log_probs"] = options["old_log_probs"][keep]
    return _correct(model, tokenizer, optimizer, gradient_accumulation_steps, max_grad_norm, reward_fn,
                    [repeated_prompts[i] for i in keep], [rollout_responses[i] for i in keep],
                    [repeated_ground_truths[i] for i in keep], group_size, **options)
