"""Mutant: metadata['response_token_count'] counts every non-padding token, prompts included."""
from _impl import build

globals().update(build())
_correct = grpo_train_step  # noqa: F821  (defined by the update above)


def grpo_train_step(model, tokenizer, optimizer, gradient_accumulation_steps, max_grad_norm, reward_fn,
                    repeated_prompts, rollout_responses, repeated_ground_truths, group_size, **options):
    loss, metadata = _correct(model, tokenizer, optimizer, gradient_accumulation_steps, max_grad_norm, reward_fn,
                              repeated_prompts, rollout_responses, repeated_ground_truths, group_size, **options)
    batch = tokenize_prompt_and_output(repeated_prompts, rollout_responses, tokenizer)  # noqa: F821
    metadata["response_token_count"] = float((batch["input_ids"] != tokenizer.pad_token_id).sum())
    return loss, metadata
