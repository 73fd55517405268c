"""A progress bar on stderr for long runs (only when stderr is a TTY, only after a couple of seconds)."""

from __future__ import annotations

import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO, delay_s: float = 2.0) -> None:
        self.stream = stream
        self.start = time.monotonic()
        self.delay_s = delay_s
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if time.monotonic() - self.start < self.delay_s or total <= 0:
            return
        width = 30
        fill = int(width * done / total)
        self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} sources")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()
