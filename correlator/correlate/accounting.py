"""What was passed over or altered while reading, and why: ``Stats.skipped`` and duplicate notes."""

from __future__ import annotations

from collections.abc import Sequence

from correlator.model import Diagnostic, Digest

#: diagnostic message start -> reason in ``Stats.skipped`` (the messages of ``sources`` and ``extract``)
_REASONS: tuple[tuple[str, str], ...] = (
    ("no such file or folder", "missing"), ("broken symbolic link", "missing"), ("cannot read", "unreadable"),
    ("cannot open", "unreadable"), ("not a log", "not-a-log"), ("not a regular file", "not-a-regular-file"),
    ("no file matches", "pattern-matched-nothing"), ("folder matched by a pattern", "folder-by-pattern"),
    ("symlink loop", "symlink-loop"), ("more than", "too-many-files"), ("looks binary", "binary"),
    ("empty: nothing to read", "empty"), ("truncated or corrupt", "truncated"), ("read error", "read-error"),
    ("internal error while reading", "internal-error"), ("out of memory while reading", "out-of-memory"),
)
_NOT_READ = frozenset({"missing", "unreadable", "not-a-log", "not-a-regular-file"})


def _reason(message: str) -> str | None:
    for start, reason in _REASONS:
        if message.startswith(start):
            return reason
    if " NUL byte(s) " in message:
        return "nul-bytes"
    if message.startswith("invalid UTF-8"):
        return "invalid-utf8"
    if " line(s) longer than " in message:
        return "long-lines-cut"
    return None


def skip_accounting(discovered: Sequence[Diagnostic], digests: Sequence[Digest]) -> dict[str, dict[str, int]]:
    """reason -> {"sources": n, "bytes": b, "lines": l}: what was passed over or altered, and why."""
    import os

    out: dict[str, dict[str, int]] = {}

    def add(reason: str, sources: int = 1, nbytes: int = 0, lines: int = 0) -> None:
        row = out.setdefault(reason, {"sources": 0, "bytes": 0, "lines": 0})
        row["sources"] += sources
        row["bytes"] += nbytes
        row["lines"] += lines

    for d in discovered:
        reason = _reason(d.message)
        if reason is None:
            continue
        size = 0
        if reason in ("not-a-log", "not-a-regular-file") and d.path:
            try:
                size = os.path.getsize(d.path) if reason == "not-a-log" else 0
            except OSError:
                size = 0
        add(reason, nbytes=size)
    for dg in digests:
        for d in dg.diagnostics:
            reason = _reason(d.message)
            if reason is None:
                continue
            if reason == "binary":
                add(reason, nbytes=dg.bytes_skipped)
            elif reason == "nul-bytes":
                n = d.message.split(" ", 1)[0]
                add(reason, nbytes=int(n) if n.isdecimal() else 0)
            elif reason == "long-lines-cut":
                add(reason, lines=dg.lines_capped)
            else:
                add(reason)
    return out


def sources_not_read(discovered: Sequence[Diagnostic]) -> int:
    """How many of the sources discovery found could not be read at all."""
    return len({d.path for d in discovered if _reason(d.message) in _NOT_READ})


def dedupe(diags: Sequence[Diagnostic]) -> list[Diagnostic]:
    seen = set()
    out = []
    for d in diags:
        k = (d.level, d.path, d.message)
        if k not in seen:
            seen.add(k)
            out.append(d)
    return out
