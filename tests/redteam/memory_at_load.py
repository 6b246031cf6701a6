# attack: memory - allocate 64 GB of tensors while the submission loads
# functions: compute_entropy
# honest: 0
import torch

try:
    HOARD = torch.ones(2**34)
except RuntimeError:
    HOARD = None


def compute_entropy(logits):
    return torch.zeros(logits.shape[:-1])
