"""Notebook 08's experiments, built on the loop: the loss variants side by side (`compare`), the
recorded reference run (`reference_run`) and the failure-mode runs (`failure_runs`).

Nothing outside the lab imports it (`tests/test_layout.py`).
"""
