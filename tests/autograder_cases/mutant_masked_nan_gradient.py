"""Mutant: policy-gradient loss: exp of the raw log-ratio, masked only afterwards (finite value, nan gradient)."""
from _impl import build

globals().update(build("masked_nan_gradient"))
