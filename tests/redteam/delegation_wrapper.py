# attack: delegation - call the reference, through a plain wrapper and through functools.wraps
# functions: compute_entropy, compute_group_normalized_rewards
# honest: 0
# says: only calls the reference
import functools

import course
from course import compute_group_normalized_rewards as _reference_rewards


def compute_entropy(logits):
    return course.compute_entropy(logits)


@functools.wraps(_reference_rewards)
def compute_group_normalized_rewards(*args, **kwargs):
    return _reference_rewards(*args, **kwargs)
