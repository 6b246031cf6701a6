"""Attack: hand the work to the reference, directly and through a thin wrapper."""
import course
from course import compute_group_normalized_rewards  # noqa: F401  (re-exported as the answer)


def compute_entropy(logits):
    return course.compute_entropy(logits)
