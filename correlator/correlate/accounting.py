"""What was passed over or altered while reading, and why: ``Stats.skipped`` and duplicate notes.

Keyed on ``Diagnostic.code``: the code's value is the reason's name in ``Stats.skipped``, and the
numbers come from ``Diagnostic.count`` and the digest, never from a message's text.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from correlator.model import DiagCode, Diagnostic, Digest, UnreadSource

#: codes that say something was passed over or altered while reading
SKIP_CODES = frozenset({
    DiagCode.MISSING, DiagCode.UNREADABLE, DiagCode.NOT_A_LOG, DiagCode.NOT_A_REGULAR_FILE,
    DiagCode.PATTERN_MATCHED_NOTHING, DiagCode.FOLDER_BY_PATTERN, DiagCode.SYMLINK_LOOP, DiagCode.TOO_MANY_FILES,
    DiagCode.BINARY, DiagCode.EMPTY, DiagCode.TRUNCATED, DiagCode.READ_ERROR, DiagCode.INTERNAL_ERROR,
    DiagCode.OUT_OF_MEMORY, DiagCode.NUL_BYTES, DiagCode.INVALID_UTF8, DiagCode.LONG_LINES_CUT,
    DiagCode.TOO_DEEP, DiagCode.LINK_OUTSIDE,
})
#: codes of a source that was found but not read at all
NOT_READ = frozenset({DiagCode.MISSING, DiagCode.UNREADABLE, DiagCode.NOT_A_LOG, DiagCode.NOT_A_REGULAR_FILE})


def skip_accounting(discovered: Sequence[Diagnostic], digests: Sequence[Digest]) -> dict[str, dict[str, int]]:
    """reason -> {"sources": n, "bytes": b, "lines": l}: what was passed over or altered, and why."""
    out: dict[str, dict[str, int]] = {}

    def add(code: DiagCode, sources: int = 1, nbytes: int = 0, lines: int = 0) -> None:
        row = out.setdefault(code.value, {"sources": 0, "bytes": 0, "lines": 0})
        row["sources"] += sources
        row["bytes"] += nbytes
        row["lines"] += lines

    for d in discovered:
        if d.code not in SKIP_CODES:
            continue
        size = 0
        if d.code is DiagCode.NOT_A_LOG and d.path:
            try:
                size = os.path.getsize(d.path)
            except OSError:
                size = 0
        add(d.code, nbytes=size)
    for dg in digests:
        for d in dg.diagnostics:
            if d.code not in SKIP_CODES:
                continue
            if d.code is DiagCode.BINARY:
                add(d.code, nbytes=dg.bytes_skipped)
            elif d.code is DiagCode.NUL_BYTES:
                add(d.code, nbytes=d.count)
            elif d.code is DiagCode.LONG_LINES_CUT:
                add(d.code, lines=dg.lines_capped)
            else:
                add(d.code)
    return out


def sources_not_read(discovered: Sequence[Diagnostic]) -> int:
    """How many of the sources discovery found could not be read at all."""
    return len({d.path for d in discovered if d.code in NOT_READ})


#: codes of a named input that was not there or could not be opened (a source of the job not read)
NAMED_NOT_READ = frozenset({DiagCode.MISSING, DiagCode.UNREADABLE})
#: codes of a source none of whose lines could be read
NOTHING_READ = frozenset({DiagCode.BINARY, DiagCode.UNREADABLE, DiagCode.INTERNAL_ERROR, DiagCode.OUT_OF_MEMORY})
#: codes of a read that failed: the source is unread when nothing came before the failure
READ_FAILED = frozenset({DiagCode.READ_ERROR, DiagCode.TRUNCATED})


def unread_sources(discovered: Sequence[Diagnostic], digests: Sequence[Digest]) -> tuple[UnreadSource, ...]:
    """The job's sources of which not one line could be read: named inputs that were missing or
    unreadable, and sources that were binary, could not be opened, or failed before their first
    line. Inputs passed over on purpose (not a log, a FIFO in a folder) and empty files are not
    among them: there was nothing of the job in them to read."""
    out: list[UnreadSource] = []
    seen: set[str] = set()
    for d in discovered:
        if d.code in NAMED_NOT_READ and d.path is not None and d.path not in seen:
            seen.add(d.path)
            out.append(UnreadSource(d.path, d.message))
    for dg in digests:
        for d in dg.diagnostics:
            if d.code in NOTHING_READ or (d.code in READ_FAILED and dg.lines == 0):
                if dg.source.path not in seen:
                    seen.add(dg.source.path)
                    out.append(UnreadSource(dg.source.path, d.message))
                break
    return tuple(out)


def nothing_read(digests: Sequence[Digest]) -> bool:
    """Whether not one line of any source was read (all binary, empty, unreadable or failed)."""
    return all(dg.lines == 0 and not dg.matches for dg in digests)


def dedupe(diags: Sequence[Diagnostic]) -> list[Diagnostic]:
    seen = set()
    out = []
    for d in diags:
        k = (d.level, d.path, d.message)
        if k not in seen:
            seen.add(k)
            out.append(d)
    return out
