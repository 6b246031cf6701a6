"""Notebooks 08 and 09's experiments, built on the loop: the loss variants side by side
(`compare`), the recorded reference run (`reference_run`), the written experiments
(`experiments`), the failure-mode runs (`failure_runs`), the learning-rate search (`lr_search`) and
the reward exercise (`reward_design`).

Nothing outside the lab imports it (`tests/test_layout.py`).
"""
