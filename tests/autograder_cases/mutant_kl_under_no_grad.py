"""Mutant: the KL computed under torch.no_grad() (it "is only a penalty"), so no gradient reaches log π."""
import torch
from _impl import build

globals().update(build())
_correct = estimate_kl  # noqa: F821  (defined by the update above)


def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None):
    with torch.no_grad():
        return _correct(new_logprobs, ref_logprobs, estimator, ratio)
