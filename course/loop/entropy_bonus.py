"""An entropy bonus beside any GRPO train step: L = L_GRPO − c · Agg(H), exact under accumulation.

H_it is the entropy of softmax(z_it / τ), the distribution sampled at τ, at response token t of
row i; Agg is the step's own loss normalization (sequence, token or constant, `course.aggregation`),
as verl adds it (verl/workers/actor/dp_actor.py: policy_loss = pg_loss − entropy_coeff ·
agg_loss(entropy, response_mask, loss_agg_mode)). Its gradient is autograd's through the plain
output head: the chunked head (`course.chunked_head`) gives log-probs a gradient but not the
entropy, so the bonus always takes the plain head, whatever `--logits-chunk-size` says.

The graded train step stays as written (the learner's own with `--notebooks`): it runs with an
optimizer that keeps its gradients instead of stepping, the bonus adds its own micro-batched
backward (one more forward and backward per micro-batch) to them, and only then is the sum clipped
and stepped. Each micro-batch's share is divided by the counts of the whole step, so the update does
not depend on the number of micro-batches.
"""

from __future__ import annotations

import math

import torch

from course.aggregation import calculate_loss_and_backward
from course.scoring import compute_entropy
from course.tokenization import tokenize_prompt_and_output


class DeferredStep:
    """An optimizer for a train step that keeps the step's gradients (`gradients`) instead of
    stepping."""

    def __init__(self, parameters: list[torch.nn.Parameter]):
        self.parameters, self.gradients = parameters, None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for parameter in self.parameters:
            parameter.grad = None

    def step(self) -> None:
        self.gradients = [parameter.grad for parameter in self.parameters]


def entropy_bonus_backward(model, tokens: dict[str, torch.Tensor], gradient_accumulation_steps: int,
                           entropy_coef: float, loss_normalization: str,
                           normalization_constant: float | None, temperature: float) -> float:
    """Backpropagate −c · Agg(H) of the batch `tokens` (B, T) in micro-batches, adding to the
    gradients already there; returns −c · Agg(H)."""
    device = next(model.parameters()).device
    mask = tokens["response_mask"]                                                    # (B, T)
    sequences, response_tokens = len(mask), float(mask.sum())
    total = 0.0
    for rows in torch.arange(len(mask)).tensor_split(gradient_accumulation_steps):
        logits = model(tokens["input_ids"][rows].to(device)).logits                    # (b, T, V)
        # compute_entropy upcasts half precision itself
        per_token = -entropy_coef * compute_entropy(logits / temperature)              # (b, T)
        total += float(calculate_loss_and_backward(per_token, mask[rows].to(device),
                                                   loss_normalization,
                                                   sequences, response_tokens,
                                                   normalization_constant))
    return total


def train_step_with_entropy_bonus(train_step, model, tokenizer, optimizer,
                                  gradient_accumulation_steps: int,
                                  max_grad_norm: float | None, reward_fn,
                                  repeated_prompts: list[str],
                                  rollout_responses: list[str], repeated_ground_truths: list[str],
                                  group_size: int, *, entropy_coef: float,
                                  loss_normalization: str = "sequence",
                                  normalization_constant: float | None = None,
                                  temperature: float = 1.0,
                                  **step_arguments) -> tuple[torch.Tensor, dict]:
    """`train_step` (a grpo_train_step) with the bonus −c · Agg(H) added to its loss; one
    optimizer step. Returns the train step's (loss, metadata) with `entropy_bonus` added, `loss`
    including it and `gradient_norm` that of the sum (before clipping)."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    deferred = DeferredStep(parameters)
    _, metadata = train_step(model, tokenizer, deferred, gradient_accumulation_steps, None,
                             reward_fn,
                             repeated_prompts, rollout_responses, repeated_ground_truths,
                             group_size,
                             loss_normalization=loss_normalization,
                             normalization_constant=normalization_constant, temperature=temperature,
                             **step_arguments)
    if deferred.gradients is None:
        raise RuntimeError("the train step took no optimizer step, so there is no gradient to add "
                           "the entropy bonus to")
    for parameter, gradient in zip(parameters, deferred.gradients):
        parameter.grad = gradient
    tokens = tokenize_prompt_and_output(repeated_prompts, rollout_responses, tokenizer)
    bonus = entropy_bonus_backward(model, tokens, gradient_accumulation_steps, entropy_coef,
                                   loss_normalization, normalization_constant, temperature)
    bound = math.inf if max_grad_norm is None else max_grad_norm
    gradient_norm = torch.nn.utils.clip_grad_norm_(parameters, bound).detach().float().cpu()
    if not (math.isfinite(bonus) and torch.isfinite(gradient_norm)):
        optimizer.zero_grad(set_to_none=True)
        raise RuntimeError("non-finite entropy bonus or gradient norm; the optimizer step was "
                           "aborted")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    loss = float(metadata["loss"]) + bonus
    return torch.tensor(loss), {**metadata, "loss": loss, "entropy_bonus": bonus,
                                "gradient_norm": gradient_norm}
