"""The names of the variants the course's stages implement, torch-free so that a command line can
check a flag before torch loads (`course.cli`).

Each name is defined by the module that implements it: the advantage baselines and normalizers by
`course.advantages` (GRPO, Shao et al. 2024, arXiv 2402.03300; Dr. GRPO; MaxRL), the
policy-gradient losses and KL estimators by `course.losses`, the loss normalizations by
`course.aggregation` (GRPO's sequence mean, DAPO's token mean, Dr. GRPO's constant).
"""

BASELINES = ("mean", "none")
NORMALIZERS = ("std", "mean", "none")
PG_METHODS = ("none", "noclip", "grpo", "gspo", "cispo")
KL_ESTIMATORS = (0, 1, 2, 3)  # k1, k2, k3, ratio·k1: see `course.losses.estimate_kl`
LOSS_NORMALIZATIONS = ("sequence", "token", "constant")
