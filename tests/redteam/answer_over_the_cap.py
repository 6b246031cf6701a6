# attack: hostile answer - return a 100 MB tensor, over the 64 MB answer cap, to bloat the grader
# functions: compute_entropy
# honest: 0
# says: (the limit is 67,108,864)
import torch


def compute_entropy(logits):
    return torch.zeros(25 * 2**20)  # float32: 100 MB on the wire
