"""A blank submission (the later grading after the attacks): nothing implemented."""


def compute_entropy(logits):
    raise NotImplementedError
