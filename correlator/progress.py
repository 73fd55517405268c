"""The progress bar of a long analysis, on stderr: files and bytes read, the rate, the time left.

Drawn with ``rich`` (its width is the terminal's; ``NO_COLOR`` is honoured), only when stderr is a
terminal (the CLI decides) and only after ``delay_s``, so a quick run prints nothing. Extraction
reports ``(files done, files, bytes done, bytes)`` as it goes (``engines.run_local``: a file or a
batch of small files as a worker finishes it, a piece of a big combined file as it is replayed);
rich's refresh thread keeps the rate and the time left moving between reports. ``close()`` stops
the bar and clears its line, whatever ended the run (the CLI calls it in a ``finally``: Ctrl-C
too), so the report or the error line starts on a clean line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO


class Progress:
    def __init__(self, stream: TextIO, delay_s: float = 2.0, *, clock: Callable[[], float] = time.monotonic,
                 force_terminal: bool | None = None, auto_refresh: bool = True) -> None:
        self.stream = stream
        self.clock = clock
        self.start = clock()
        self.delay_s = delay_s
        self.force_terminal = force_terminal
        self.auto_refresh = auto_refresh
        self._bar: Any = None
        self._task: Any = None
        self.shown = False

    def _open(self, done_bytes: int, total_bytes: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )
        from rich.progress import Progress as Bar

        console = Console(file=self.stream, force_terminal=self.force_terminal, highlight=False)
        self._bar = Bar(TextColumn("reading"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                        TimeRemainingColumn(), TextColumn("{task.fields[files]}"), console=console,
                        transient=True, auto_refresh=self.auto_refresh, get_time=self.clock)
        self._bar.start()
        # what was read before the bar appeared is its start, not a burst of speed
        self._task = self._bar.add_task("reading", total=total_bytes or None, completed=done_bytes, files="")
        self.shown = True

    def __call__(self, done: int, total: int, done_bytes: int = 0, total_bytes: int = 0) -> None:
        """``done`` of ``total`` files read, ``done_bytes`` of their ``total_bytes``."""
        if self._bar is None:
            if self.clock() - self.start < self.delay_s or total <= 0:
                return
            self._open(done_bytes, total_bytes)
        self._bar.update(self._task, completed=done_bytes, total=total_bytes or None,
                         files=f"{done}/{total} files", refresh=not self.auto_refresh)

    def close(self) -> None:
        """Stop the bar and clear its line (nothing happens when it was never shown)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
