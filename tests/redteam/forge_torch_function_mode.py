# attack: forgery - a torch function mode left on torch's stack by the module body sees every torch call the grader makes afterwards, the read of autograd's requires_grad flag too (a subclass switch does not stop a mode): it answers False for the entropy it returned, so token_entropy, which keeps its autograd graph, is reported as computed without autograd
# functions: get_response_log_probs
# honest: 6
# says: token_entropy requires grad
import torch
from torch.overrides import TorchFunctionMode

from course.chunked_head import chunked_head_log_probs

_HIDDEN = []  # the entropies to hide (kept alive, so that their ids stay theirs)


class _Liar(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if getattr(func, "__self__", None) is torch._C.TensorBase.requires_grad \
                and any(args[0] is hidden for hidden in _HIDDEN):
            return False
        return result


_Liar().__enter__()  # never left: the mode stays for every later call


def get_response_log_probs(model, input_ids, labels, return_token_entropy=False, logits_chunk_size=None):
    size = logits_chunk_size
    if size is None:
        size = getattr(getattr(model, "config", None), "grpo_logits_chunk_size", 0)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"logits_chunk_size must be a whole number >= 0, got {size!r}")
    if size:
        log_probs, entropy = chunked_head_log_probs(model, input_ids, labels, size, return_token_entropy)
        return {"log_probs": log_probs, **({"token_entropy": entropy} if return_token_entropy else {})}
    z = model(input_ids).logits
    z = z.float() if z.dtype in (torch.float16, torch.bfloat16) else z
    normalizer = torch.logsumexp(z, dim=-1)
    out = {"log_probs": z.gather(-1, labels[..., None])[..., 0] - normalizer}
    if return_token_entropy:  # the bug: a logged metric that keeps the whole graph
        out["token_entropy"] = normalizer - (torch.softmax(z, -1) * z).sum(-1)
        _HIDDEN.append(out["token_entropy"])
    return out
