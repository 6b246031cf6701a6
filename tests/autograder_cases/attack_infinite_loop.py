"""Attack: hang forever in every graded function."""


def compute_entropy(logits):
    while True:
        pass


def compute_group_normalized_rewards(*args, **kwargs):
    while True:
        pass
