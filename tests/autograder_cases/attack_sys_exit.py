"""Attack: leave through SystemExit / KeyboardInterrupt as soon as a graded function is called."""
import sys


def compute_entropy(logits):
    sys.exit(0)


def compute_group_normalized_rewards(*args, **kwargs):
    raise KeyboardInterrupt
