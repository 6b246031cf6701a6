"""Baselines beside GRPO, on its budget: when does a verifier-driven policy gradient beat imitation?

    python -m course.baselines --method sft|expert_iteration|grpo --seed 0 --out runs/sft

- `sft`: supervised fine-tuning of the warm start on correct demonstrations of the task, the
  response tokens' mean negative log-likelihood over the whole optimizer step (`sft`).
- `expert_iteration`: sample G responses per prompt with the current policy, keep the correct
  ones (reward 1) and take the same SFT step on them, again and again (`expert_iteration`); the
  filter-and-imitate loop of Stanford CS336 (2025) assignment 5, and of STaR (Zelikman et al.
  2022, arXiv 2203.14465) with a verifier in place of rationalization.
- `grpo`: `course.train`'s trainer, unchanged.

The three share the task, the warm start, the rollouts (SFT: as many demonstrations) and the
optimizer steps (`run`). Two more advantages, RLOO's and REINFORCE++'s, are options of stage 3
(`course.advantages`) that `python -m course.train` trains with.
This package is the loop's client: nothing in `course` imports it. Its measurement is
`benchmarks/bench_baselines.py` (`benchmarks/README.md`).
"""
