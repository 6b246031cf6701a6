"""The loop that puts the seven stages to work: the tiny model and its tokenizer (`models`,
`tiny_hf`), the tasks and their rewards (`tasks`, `gsm8k`), sampling (`rollout`, scored by
`rollout_scores`), the trainer and its settings (`train`, `train_config`, `step_arguments`; the
command is `python -m course.train`), the 2026
trainers' knobs (`filters`, `importance`, `entropy_bonus`), the supervised warm start
(`warm_start`), and what a run shows (`plotting`, `progress`).

Nothing here is graded; a stage module never imports it (`tests/test_layout.py`).
"""
