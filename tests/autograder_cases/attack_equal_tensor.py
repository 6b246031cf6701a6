"""Attack: return a tensor subclass that compares equal to anything and is close to everything."""
import torch


class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.Tensor.__eq__, torch.isclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})

    def __eq__(self, other):
        return True


def compute_entropy(logits):
    return torch.zeros(logits.shape[:-1]).as_subclass(Agreeable)


def compute_group_normalized_rewards(raw_rewards, group_size, *args, **kwargs):
    return torch.zeros_like(raw_rewards).as_subclass(Agreeable), {}
