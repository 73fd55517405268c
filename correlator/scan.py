"""The hot path: one pass over a byte buffer that finds the lines worth a closer look.

Owns the multi-pattern engines. ``HyperscanScanner`` compiles every rule pattern (in Hyperscan's
prefilter mode, so constructs it cannot do exactly only widen the net) into one database and scans
the bytes at GB/s; ``KeywordScanner`` is the pure-Python fallback that finds the rules' literal
``prefilter`` keywords with ``bytes.find``. Both return the same thing: for each candidate line,
which patterns may match it. Neither creates a Python object per line; confirming a candidate with
the real regex is ``extract``'s job.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

#: set to "regex" (or "fallback") to force the pure-Python scanner
ENV_SCANNER = "CORRELATE_SCANNER"


@dataclass(frozen=True, slots=True)
class Pattern:
    """One thing to look for: a regex (for Hyperscan) and the literals that every hit contains."""

    id: int
    regex: str
    keywords: tuple[str, ...]


def _hs_regex(pattern: str) -> bytes:
    # Patterns are written against the message after its prefixes; in the raw buffer a prefix
    # stands before it, so anchors are dropped (which only widens a prefilter).
    p = pattern
    if p.startswith("^"):
        p = p[1:]
    if p.endswith("$") and not p.endswith("\\$"):
        p = p[:-1]
    return p.encode("utf-8")


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


class KeywordScanner:
    """Fallback: ``bytes.find`` for each distinct keyword; hits are (line start, pattern ids)."""

    name = "keywords"

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        by_kw: dict[bytes, list[int]] = {}
        for p in patterns:
            for kw in p.keywords:
                by_kw.setdefault(kw.encode("utf-8"), []).append(p.id)
        self._keywords = tuple((kw, tuple(ids)) for kw, ids in by_kw.items())

    def scan(self, buf: bytes | memoryview, end: int) -> dict[int, set[int]]:
        data = bytes(buf) if isinstance(buf, memoryview) else buf
        lines: dict[int, set[int]] = {}
        for kw, ids in self._keywords:
            find = data.find
            pos = find(kw, 0, end)
            while pos >= 0:
                start = data.rfind(b"\n", 0, pos) + 1
                got = lines.get(start)
                if got is None:
                    lines[start] = set(ids)
                else:
                    got.update(ids)
                nl = data.find(b"\n", pos, end)
                if nl < 0:
                    break
                pos = find(kw, nl + 1, end)
        return lines


class HyperscanScanner:
    """All patterns in one Hyperscan block-mode database; patterns it refuses fall back to keywords."""

    name = "hyperscan"

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        import hyperscan

        self._hs = hyperscan
        flags = hyperscan.HS_FLAG_PREFILTER | hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_ALLOWEMPTY
        exprs, ids, rejected = [], [], []
        for p in patterns:
            expr = _hs_regex(p.regex)
            try:  # compile each alone first so one refused pattern does not sink the database
                probe = hyperscan.Database()
                probe.compile(expressions=[expr], ids=[p.id], elements=1, flags=[flags])
            except Exception:  # hyperscan.error: the pattern is beyond even prefilter mode
                rejected.append(p)
                continue
            exprs.append(expr)
            ids.append(p.id)
        self.rejected = tuple(p.id for p in rejected)
        self._db = None
        if exprs:
            self._db = hyperscan.Database()
            self._db.compile(expressions=exprs, ids=ids, elements=len(exprs), flags=[flags] * len(exprs))
            self._scratch = hyperscan.Scratch(self._db)
        self._fallback = KeywordScanner(rejected) if rejected else None

    def scan(self, buf: bytes | memoryview, end: int) -> dict[int, set[int]]:
        data = bytes(buf[:end]) if isinstance(buf, memoryview) or end != len(buf) else buf
        ends: list[tuple[int, int]] = []
        if self._db is not None:
            append = ends.append

            def on_match(pid: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                append((to, pid))

            self._db.scan(data, match_event_handler=on_match, scratch=self._scratch)
        lines: dict[int, set[int]] = {}
        rfind = data.rfind
        last_start, last_end, last_set = -1, -1, None
        for to, pid in ends:
            if last_start <= to - 1 < last_end and last_set is not None:
                last_set.add(pid)
                continue
            # the byte that completed the match belongs to the line ending at the next newline
            at = to - 1 if to > 0 else 0
            start = rfind(b"\n", 0, at) + 1 if data[at:at + 1] != b"\n" else rfind(b"\n", 0, at) + 1
            got = lines.get(start)
            if got is None:
                got = lines[start] = set()
            got.add(pid)
            nl = data.find(b"\n", at)
            last_start, last_end, last_set = start, (nl if nl >= 0 else len(data)), got
        if self._fallback is not None:
            for start, pids in self._fallback.scan(data, len(data)).items():
                lines.setdefault(start, set()).update(pids)
        return lines


Scanner = KeywordScanner | HyperscanScanner


def make_scanner(patterns: Sequence[Pattern], prefer: str | None = None) -> Scanner:
    """Hyperscan when it is installed, unless ``prefer`` (or ``$CORRELATE_SCANNER``) says otherwise."""
    choice = (prefer or os.environ.get(ENV_SCANNER) or "auto").lower()
    if choice in ("regex", "fallback", "keywords", "python"):
        return KeywordScanner(patterns)
    if choice not in ("auto", "hyperscan"):
        raise ValueError(f"unknown scanner {choice!r}: use 'hyperscan', 'regex' or 'auto'")
    if hyperscan_available():
        return HyperscanScanner(patterns)
    if choice == "hyperscan":
        raise ValueError("the hyperscan scanner was asked for but the 'hyperscan' package is not installed")
    return KeywordScanner(patterns)
