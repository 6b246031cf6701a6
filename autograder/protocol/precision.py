"""Float32 arithmetic as the tolerances assume it, on both sides of the sandbox and every device.

On CUDA, torch may run float32 matrix products in TF32 (a 10-bit mantissa: each product rounded
to 2^-11 relative instead of float32's 2^-24) when the float32 matmul precision is "high" or
"medium" (`torch.set_float32_matmul_precision`; `torch.backends.cuda.matmul.allow_tf32` is the
same switch), and convolutions when `torch.backends.cudnn.allow_tf32` is on, which is torch's
default. The tolerances of `autograder/trusted/core.py` were measured for IEEE float32 and
float64 (TF32 never applies to float64). The grader and the sandbox's template call
`use_ieee_float32` before any check, so a grade on CUDA judges the same arithmetic as one on the
CPU, and a stage child (forked from the template) starts with it too.
(PyTorch notes, "TensorFloat-32 (TF32) on Ampere (and later) devices":
https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices)
"""

from __future__ import annotations

import torch


def use_ieee_float32() -> None:
    """Turn TF32 off for float32 matmuls and convolutions in this process (no-op on a CPU)."""
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
