"""The 2025–26 losses of optional notebook 11 (`11_frontier_losses`), ungraded: what trainers of
2025–26 add to stages 4 and 5's losses, each checked against the framework file it matches.

  policy_losses   SAPO's soft gate, GMPO's geometric mean, the dual clip, floored CISPO
  trust_region    DPPO's probability trust region, the outlier mask, sequence-level ratios
  loss            `FrontierLoss`: one of them as the whole per-token loss of `grpo_train_step`
  maxrl           MaxRL's advantage with prime-rl's guard (a group of one, a mean <= 0)

The room imports the top of `course` (the stages it builds on); the top never imports it, so a
learner reads the seven stages without it. `python -m course.train` reaches it through
`course.loop.step_arguments` (`tests/test_layout.py`).
"""
