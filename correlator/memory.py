"""What the process does with its memory while it makes or loads many small objects.

Owns ``gc_paused``: the cyclic garbage collector off for a while. Knows nothing of logs or reports.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a while (on again after, if it was on).

    Loading the workers' digests and the global stage make hundreds of thousands of small acyclic
    objects (a 4096-file job: a million): every few hundred allocations the collector ran, and its
    older generations went over all of them again and again (loading the digests 0.6 s instead of
    0.2; a fifth of the stage's time at 4096 ranks). Neither makes cycles to collect."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
