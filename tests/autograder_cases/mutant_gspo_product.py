"""Mutant: GSPO ratio as a product of token ratios."""
from _impl import build

globals().update(build("gspo_product"))
