"""An independent implementation of the 11 graded functions, with switchable real-world bugs.

`build()` returns correct functions; `build("biased_std")` returns the same set with that one bug.
The mutant_*.py submissions are one line each on top of this; the grader's tests check that every
bug loses points on its own check, with its own diagnosis. Written from the
documented contracts (the module docstrings of `course`), not from `course`'s code.
"""

import math

import torch
from torch.utils.checkpoint import checkpoint


def build(bug: str = "") -> dict:
    def tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer):
        if len(prompt_strs) != len(output_strs):
            raise ValueError(f"prompt_strs ({len(prompt_strs)}) and output_strs ({len(output_strs)}) differ")
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if bug == "pad_with_eos":
            pad = tokenizer.eos_token_id
        rows = [(tokenizer.encode(p, add_special_tokens=False), tokenizer.encode(o, add_special_tokens=False))
                for p, o in zip(prompt_strs, output_strs)]
        width = max(len(p) + len(o) for p, o in rows)
        ids, mask = [], []
        for p, o in rows:
            fill = width - len(p) - len(o)
            ids.append(p + o + [pad] * fill)
            in_mask = [1] * len(o) + [1 if bug == "padding_in_mask" else 0] * fill
            mask.append([1 if bug == "prompt_in_mask" else 0] * len(p) + in_mask)
        ids, mask = torch.tensor(ids), torch.tensor(mask)
        labels = ids[:, :-1] if bug == "no_shift" else ids[:, 1:]
        response_mask = mask[:, :-1] if bug == "unshifted_mask" else mask[:, 1:]
        return {"input_ids": ids[:, :-1], "labels": labels, "response_mask": response_mask}

    def compute_entropy(logits):
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        if bug == "naive_entropy":
            p = torch.softmax(logits, -1)
            return -(p * torch.log(p)).sum(-1)
        log_p = logits - torch.logsumexp(logits, -1, keepdim=True)
        h = -(log_p.exp() * log_p).sum(-1)
        if bug == "entropy_log2":
            return h / math.log(2)
        return -h if bug == "entropy_no_minus" else h

    def get_response_log_probs(model, input_ids, labels, return_token_entropy=False, logits_chunk_size=None):
        size = getattr(getattr(model, "config", None), "grpo_logits_chunk_size", 0) if logits_chunk_size is None else logits_chunk_size
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"logits_chunk_size must be a non-negative int, got {size!r}")
        if size > 0:  # the head over `size` positions at a time, recomputed in backward
            hidden = model.model(input_ids=input_ids).last_hidden_state  # (B, T, H)

            def chunk_log_probs(h, y):
                z = model.lm_head(h)  # (B, c, V)
                z = z.float() if z.dtype in (torch.float16, torch.bfloat16) else z
                return z.gather(-1, y[..., None])[..., 0] - torch.logsumexp(z, -1)

            spans = range(0, input_ids.shape[1], size)
            out = {"log_probs": torch.cat([checkpoint(chunk_log_probs, hidden[:, s:s + size], labels[:, s:s + size],
                                                      use_reentrant=False) for s in spans], dim=1)}
            if return_token_entropy:
                with torch.no_grad():
                    out["token_entropy"] = torch.cat(
                        [compute_entropy(model.lm_head(hidden[:, s:s + size])) for s in spans], dim=1)
            return out
        logits = model(input_ids).logits
        if logits.dtype in (torch.float16, torch.bfloat16) and bug != "half_log_softmax":
            logits = logits.float()
        if bug == "half_log_softmax":
            log_probs = torch.log_softmax(logits, -1).gather(-1, labels[..., None])[..., 0]
        else:
            log_probs = logits.gather(-1, labels[..., None])[..., 0] - torch.logsumexp(logits, -1)
        if bug == "probs_not_log":
            log_probs = log_probs.exp()
        out = {"log_probs": log_probs}
        if return_token_entropy:
            if bug == "entropy_with_grad":
                out["token_entropy"] = compute_entropy(logits)
            else:
                with torch.no_grad():
                    out["token_entropy"] = compute_entropy(logits.detach())
        return out

    def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
        if len(rollout_responses) != len(repeated_ground_truths):
            raise ValueError("rollout_responses and repeated_ground_truths differ in length")
        scores = [reward_fn(r, g) for r, g in zip(rollout_responses, repeated_ground_truths)]
        key = "format_reward" if bug == "format_as_reward" else "reward"
        rewards = torch.tensor([s[key] for s in scores], dtype=torch.float32)
        meta = {f"{k}_mean": sum(s[k] for s in scores) / len(scores)
                for k in ("reward", "format_reward", "answer_reward")}
        return rewards, meta

    def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                         advantage_normalizer="std"):
        if raw_rewards.numel() % group_size:
            raise ValueError("raw_rewards is not a whole number of groups")
        r = raw_rewards if raw_rewards.is_floating_point() else raw_rewards.float()
        groups = r.view(1, -1) if bug == "batch_normalization" else r.view(-1, group_size)
        mean = groups.mean(1, keepdim=True)
        adv = groups - mean if baseline == "mean" else groups
        if advantage_normalizer == "std":
            n = groups.shape[1]
            var = ((groups - mean) ** 2).sum(1, keepdim=True) / (n if bug == "biased_std" else n - 1)
            adv = adv / ((var + advantage_eps).sqrt() if bug == "eps_inside_sqrt" else var.sqrt() + advantage_eps)
        elif advantage_normalizer == "mean":
            adv = adv / (mean + advantage_eps)
        adv = adv.reshape(-1)
        return adv, {"advantage_mean": adv.mean().item(), "advantage_std": adv.std().item()}

    def compute_policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs,
                                     pg_method="none", old_log_probs=None, cliprange=None,
                                     response_mask=None):
        method = pg_method
        a = raw_rewards_or_advantages.reshape(-1, 1).to(policy_log_probs.dtype)
        mask = torch.ones_like(policy_log_probs) if response_mask is None else response_mask.to(policy_log_probs.dtype)
        n = mask.sum().clamp_min(1)
        if method == "none":
            loss = -a * policy_log_probs
            return loss, {"on_policy_loss_mean": (loss.detach() * mask).sum() / n}
        if old_log_probs is None:
            raise ValueError(f"{method} needs old_log_probs")
        if method != "noclip" and cliprange is None:
            raise ValueError(f"{method} needs cliprange")
        attached = bug == "noclip_old_attached" and method == "noclip"
        old = old_log_probs if attached else old_log_probs.detach()
        if bug != "masked_nan_gradient":  # masked before exp: an inf or nan there has no gradient
            keep = mask.bool()
            policy_log_probs, old = torch.where(keep, policy_log_probs, 0), torch.where(keep, old, 0)
        log_r = policy_log_probs - old
        r = log_r.exp()
        meta = {}
        if method == "noclip":
            loss = -a * (1 / r if bug == "noclip_ratio_inverted" else r)
        elif method == "grpo":
            pick = torch.maximum if bug == "grpo_max" else torch.minimum
            loss = -pick(r * a, r.clamp(1 - cliprange, 1 + cliprange) * a)
            if bug == "clip_wrong_side":
                hit = ((a < 0) & (r > 1 + cliprange)) | ((a > 0) & (r < 1 - cliprange))
            else:
                hit = ((a > 0) & (r > 1 + cliprange)) | ((a < 0) & (r < 1 - cliprange))
            count = (hit * mask).sum()
            meta = {"clip_count": count, "clip_total": mask.sum(), "clip_fraction": count / n}
        elif method == "gspo":
            lengths = mask.sum(1, keepdim=True)
            total = (log_r * mask).sum(1, keepdim=True)
            s = total.exp() if bug == "gspo_product" else (total / lengths.clamp_min(1)).exp()
            loss = (-torch.minimum(s * a, s.clamp(1 - cliprange, 1 + cliprange) * a)).expand_as(r)
            return loss, {}
        else:  # cispo
            w = r.clamp(max=1 + cliprange)
            if bug != "cispo_attached":
                w = w.detach()
            loss = -w * a * policy_log_probs
        meta.update(importance_ratio_mean=(r.detach() * mask).sum() / n, importance_ratio_count=mask.sum(),
                    off_policy_loss_mean=(loss.detach() * mask).sum() / n)
        return loss, meta

    def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None):
        d = new_logprobs - ref_logprobs
        if estimator == "k1":
            return d
        if estimator == "k2":
            return d * d / 2
        if estimator == "k3":
            return (d.exp() - 1 - d) if bug == "k3_sign" else (torch.exp(-d) - 1 + d)
        if estimator == "ratio_k1":
            return ratio * d
        raise ValueError(f"estimator must be k1, k2, k3 or ratio_k1, got {estimator}")

    def compute_grpo_loss(new_logprobs, ratio, advantages, ref_logprobs, config, tis_weights=None):
        a = advantages if advantages.ndim == 2 else advantages[:, None]
        if config.loss_fn == "cispo":
            pg = -a * ratio.clamp(max=1 + config.clip_higher).detach() * new_logprobs
            pg1 = pg2 = pg_max = pg
        else:
            low, high = (config.clip_higher, config.clip_lower) if bug == "swapped_clip" else (config.clip_lower, config.clip_higher)
            pg1, pg2 = -a * ratio, -a * ratio.clamp(1 - low, 1 + high)
            pg_max = torch.maximum(pg1, pg2)
        kl = torch.zeros_like(new_logprobs) if ref_logprobs is None else \
            estimate_kl(new_logprobs, ref_logprobs, config.kl_estimator, ratio)
        if tis_weights is not None:
            pg_max = pg_max * tis_weights
            if bug == "tis_on_kl":
                kl = kl * tis_weights
        return pg1, pg2, pg_max, kl

    def truncated_importance_weights(old_log_probs, sampler_log_probs, cap, response_mask=None):
        if bug == "tis_zeros":  # a constant with the right shape and no gradient
            return torch.zeros_like(old_log_probs)
        with torch.no_grad():
            d = (sampler_log_probs - old_log_probs) if bug == "tis_inverted" else (old_log_probs - sampler_log_probs)
            w = d.exp().clamp(max=cap)
            return w if response_mask is None else w * response_mask

    def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                         normalization_constant=None):
        if normalization_constant is not None and normalization_constant <= 0:
            raise ValueError(f"normalization_constant must be positive, got {normalization_constant}")
        m = mask.to(per_token_policy_gradient_loss.dtype)
        kept = per_token_policy_gradient_loss * m if bug == "padding_leaks_nan" else \
            torch.where(m != 0, per_token_policy_gradient_loss, torch.zeros_like(per_token_policy_gradient_loss))
        sums = kept.sum(1)
        if loss_normalization == "sequence":
            lengths = m.sum(1)
            if bug == "empty_row_dropped":
                keep = lengths > 0
                return (sums[keep] / lengths[keep]).mean()
            return (sums / lengths.clamp_min(1)).mean()
        if loss_normalization == "token" and (bug == "local_token_count" or normalization_constant is None):
            return sums.sum() / m.sum().clamp_min(1)
        if normalization_constant is None:
            raise ValueError("normalization_constant is required")
        return sums.sum() / normalization_constant

    def grpo_train_step(model, tokenizer, optimizer, gradient_accumulation_steps, max_grad_norm, reward_fn,
                        repeated_prompts, rollout_responses, repeated_ground_truths, group_size, baseline="mean",
                        advantage_eps=1e-6, advantage_normalizer="std", pg_method="none",
                        old_log_probs=None, cliprange=None, loss_normalization="sequence",
                        normalization_constant=None):
        if bug == "train_step_no_update":  # leaves the model alone: no gradients are left either
            return torch.tensor(0.0), {}
        import torch.distributed as dist
        distributed = dist.is_available() and dist.is_initialized()
        ranks = dist.get_world_size() if distributed else 1
        # the loss's world-size factor: DDP averages the ranks' gradients, the loss undoes it
        world = 1 if bug in ("ddp_no_world_scale", "ddp_world_scale_after_clipping") else ranks
        rewards, reward_meta = compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)
        adv, adv_meta = compute_group_normalized_rewards(rewards, group_size, baseline, advantage_eps,
                                                         advantage_normalizer)
        batch = tokenize_prompt_and_output(repeated_prompts, rollout_responses, tokenizer)
        B = len(rollout_responses)
        counts = torch.tensor([float(B), float(batch["response_mask"].sum())], dtype=torch.float64)
        if distributed:
            dist.all_reduce(counts)
        optimizer.zero_grad()
        size = -(-B // gradient_accumulation_steps)
        total = 0.0
        for start in range(0, B, size):
            rows = slice(start, start + size)
            mask = batch["response_mask"][rows]
            log_probs = get_response_log_probs(model, batch["input_ids"][rows], batch["labels"][rows])["log_probs"]
            old = old_log_probs[rows, :log_probs.shape[1]] if old_log_probs is not None else None
            loss, _ = compute_policy_gradient_loss(adv[rows].to(log_probs.dtype), log_probs,
                                                   pg_method, old, cliprange, mask)
            sums = (loss * mask).sum(1)
            if loss_normalization == "sequence":
                value = (sums / mask.sum(1).clamp_min(1)).sum() / float(counts[0])
            elif loss_normalization == "token":
                if bug == "per_microbatch_token_norm":  # verl's legacy dp_actor (verl #7321)
                    value = sums.sum() / mask.sum().clamp_min(1) / gradient_accumulation_steps
                else:
                    value = sums.sum() / float(counts[1])
            else:
                value = sums.sum() / normalization_constant
            if bug == "double_accumulation_division":  # the Trainer's division on top (ms-swift #10117)
                value = value / gradient_accumulation_steps
            if bug == "ddp_seq_mean_divided_by_world" and loss_normalization == "sequence":
                value = value / world  # verl #5798: seq-mean's denominator B·dp_size, not B/dp_size
            else:
                value = value * world
            if not torch.isfinite(value):
                optimizer.zero_grad()
                raise RuntimeError("non-finite loss: optimizer step skipped")
            value.backward()
            total += float(value) / world
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        if max_grad_norm is not None and bug != "no_grad_clip":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        if bug == "ddp_world_scale_after_clipping":  # DDP's mean undone on the gradients, after the clip
            for g in grads:
                g.mul_(ranks)
        optimizer.step()
        if bug != "grads_left":
            optimizer.zero_grad()
        meta = {**reward_meta, **adv_meta, "loss": total, "gradient_norm": float(norm),
                "response_token_count": float(counts[1]), "optimizer_step": 1.0}
        return torch.tensor(total), meta

    return {f.__name__: f for f in (
        tokenize_prompt_and_output, compute_entropy, get_response_log_probs, compute_rollout_rewards,
        compute_group_normalized_rewards, compute_policy_gradient_loss, compute_grpo_loss, estimate_kl,
        truncated_importance_weights, aggregate_loss_across_microbatch, grpo_train_step)}
