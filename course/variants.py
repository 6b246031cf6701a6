"""The names of the variants the course's stages implement, torch-free so that a command line can
check a flag before torch loads (`course.cli`).

Each name is defined by the module that implements it: the advantage baselines and normalizers by
`course.advantages` (GRPO, Shao et al. 2024, arXiv 2402.03300; Dr. GRPO; MaxRL; RLOO and
REINFORCE++, ungraded), the
policy-gradient losses by `course.losses` (open-instruct's DAPO and CISPO by `course.off_policy`),
the KL estimators by `course.off_policy`, the loss normalizations by `course.aggregation` (GRPO's
sequence mean, DAPO's token mean, Dr. GRPO's constant); the importance-sampling levels and modes by
`course.loop.importance`, the overlong handlings by `course.loop.filters`, the weight precisions of
a Hugging Face model by `course.loop.models`.
"""

BASELINES = ("mean", "none")  # stage 3's graded names
NORMALIZERS = ("std", "mean", "none")
# stage 3's ungraded options, which `python -m course.train` trains with
# (`course.advantages`): RLOO's leave-one-out baseline and REINFORCE++'s normalization
# over the step's whole batch
RUN_BASELINES = BASELINES + ("leave_one_out",)
RUN_NORMALIZERS = NORMALIZERS + ("batch",)
PG_METHODS = ("none", "noclip", "grpo", "gspo", "cispo")  # stage 4's `pg_method`
GRPO_LOSS_FNS = ("dapo", "cispo")  # stage 5's `GRPOLossConfig.loss_fn` (open-instruct's)
FRONTIER_PG_METHODS = ("sapo", "gmpo", "dppo")  # notebook 11's, ungraded: `course.frontier`
# `course.frontier.loss.FrontierLoss.loss_fn`: stage 5's names and notebook 11's
FRONTIER_LOSS_FNS = GRPO_LOSS_FNS + FRONTIER_PG_METHODS
RATIO_AGAINST = ("old", "sampler")  # what r = π/π_b is taken against: π_old or the sampler μ
# what `python -m course.train --pg-method` trains with: stage 4's, stage 5's dapo, notebook 11's
RUN_PG_METHODS = PG_METHODS + ("dapo",) + FRONTIER_PG_METHODS
KL_ESTIMATORS = ("k1", "k2", "k3", "ratio_k1")  # Schulman's k1-k3, r·k1: `off_policy.estimate_kl`
LOSS_NORMALIZATIONS = ("sequence", "token", "constant")
IS_LEVELS = ("token", "sequence", "geometric")  # see `course.loop.importance.importance_weights`
IS_MODES = ("truncate", "mask")
OVERLONG = ("none", "filter", "soft")  # see `course.loop.filters`
MODEL_DTYPES = ("float32", "bfloat16", "float16")  # see `course.loop.models.load_pretrained`
TASKS = ("addition", "gsm8k")  # see `course.loop.tasks`, `course.loop.gsm8k`
