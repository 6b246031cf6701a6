"""Progress of a long loop: a tqdm bar on a terminal or in Jupyter, plain periodic lines elsewhere.

A tqdm bar redraws itself with carriage returns; written to a file or a CI log (stderr not a
terminal) every redraw becomes text: hundreds of lines of noise for one training run. There the
loop's progress is instead a plain line about `lines` times per run, each with the bar's postfix
(`set_postfix`) and the elapsed time:

    GRPO: step 25/500, reward=0.41, entropy=0.80, 61 s
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO


class PlainProgress:
    """Iterate `iterable` (of `total` items), printing one line to `file` every `total / lines`
    items and after the last; `set_postfix` adds `name=value` pairs to the lines, as on a tqdm
    bar."""

    def __init__(self, iterable: Iterable, total: int, desc: str, unit: str, file: TextIO,
                 lines: int):
        self.iterable, self.total, self.desc, self.unit, self.file = (
            iterable,
            total,
            desc,
            unit,
            file,
        )
        self.every = max(1, math.ceil(total / max(lines, 1)))
        self.postfix: dict[str, object] = {}

    def set_postfix(self, **values) -> None:
        self.postfix = values

    def __iter__(self) -> Iterator:
        start = time.monotonic()
        for done, item in enumerate(self.iterable, start=1):
            yield item  # the loop's body runs here, so the line below carries its postfix
            if done % self.every == 0 or done == self.total:
                shown = "".join(f", {name}={value}" for name, value in self.postfix.items())
                print(f"{self.desc}: {self.unit} {done}/{self.total}{shown}, "
                      f"{time.monotonic() - start:.0f} s", file=self.file, flush=True)


def in_jupyter() -> bool:
    """Whether this runs in a Jupyter kernel, where tqdm.auto draws a widget."""
    return "ipykernel" in sys.modules


def bars_drawn(file: TextIO | None = None) -> bool:
    """Whether a bar can be drawn on `file` (stderr by default): a terminal, or Jupyter's widget.
    Elsewhere (a log file, a CI log) a bar is carriage-return noise: plain lines instead."""
    return in_jupyter() or (file or sys.stderr).isatty()


def progress_bar(iterable: Iterable, total: int, desc: str, unit: str, enabled: bool = True,
             file: TextIO | None = None, lines: int = 20):
    """A tqdm bar over `iterable` where one can be drawn, else `PlainProgress`; nothing if not
    `enabled`."""
    from tqdm.auto import tqdm

    file = file or sys.stderr
    if not enabled or bars_drawn(file):
        return tqdm(iterable, total=total, desc=desc, unit=unit, disable=not enabled, file=file)
    return PlainProgress(iterable, total, desc, unit, file, lines)
