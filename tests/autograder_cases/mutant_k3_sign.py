"""Mutant: k3 KL estimator with the sign of delta reversed."""
from _impl import build

globals().update(build("k3_sign"))
