"""PPO with a learned critic and GAE: the algorithm GRPO replaced, on GRPO's budget (ungraded).

    python -m course.critic --seed 0 --out runs/ppo

PPO (Schulman et al. 2017, arXiv 1707.06347) as InstructGPT (Ouyang et al. 2022, arXiv
2203.02155) applied it to language models: a value function V(s_t) estimates, at every response
token, the reward still to come, and GAE (Schulman et al. 2016, arXiv 1506.02438) turns its
temporal differences into one advantage per token. GRPO (Shao et al. 2024, arXiv 2402.03300)
drops the critic: the mean reward of G samples of the same prompt is its baseline.

- `gae`: the per-token rewards, GAE's advantages and returns, whitening (verl's names).
- `value`: the value head on the policy's last hidden state, and PPO's clipped value loss.
- `ppo_step`: one optimizer step of policy and value head, exact under gradient accumulation,
  with `course.losses`' PPO-clip on token-level advantages.
- `config`, `run`, `__main__`: the run and its command line; the rollouts, reward, warm start and
  held-out test are GRPO's (`course.loop`).

This package is the loop's client: nothing in `course` imports it. Its measurement is
`benchmarks/bench_critic.py` (`benchmarks/README.md`), its notebook `solutions/13_critic.ipynb`.
"""
