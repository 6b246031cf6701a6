"""Mutant: token entropy computed with autograd."""
from _impl import build

globals().update(build("entropy_with_grad"))
