"""The hot path: one pass over a byte buffer that finds the lines worth a closer look.

Owns the multi-pattern engines. ``HyperscanScanner`` compiles every rule pattern (in Hyperscan's
prefilter mode, so constructs it cannot do exactly only widen the net) into one database and scans
the bytes at GB/s; ``KeywordScanner`` is the pure-Python fallback that finds the rules' literal
``prefilter`` keywords with ``bytes.find``. Both return the same thing: for each candidate line,
which patterns may match it. Neither creates a Python object per line; confirming a candidate with
the real regex is ``extract``'s job.
"""

from __future__ import annotations

import functools
import os
import re
import signal
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from correlator.cache import cache_dir
from correlator.extract import dialects

if TYPE_CHECKING:  # hyperscan is imported where it is used (it is optional on some platforms)
    from hyperscan import Database, Scratch

#: set to "regex" (or "fallback") to force the pure-Python scanner
ENV_SCANNER = "CORRELATE_SCANNER"


@dataclass(frozen=True, slots=True)
class Pattern:
    """One thing to look for: a regex (for Hyperscan) and the literals that every hit contains."""

    id: int
    regex: str
    keywords: tuple[str, ...]


def _hs_regex(pattern: str, head: bool = True) -> bytes:
    # Patterns are written against the message after its prefixes; in the raw buffer a prefix
    # stands before it, so ``^`` becomes "a line start or where a message may start", and ``$`` is
    # dropped (which only widens a prefilter). A head without a literal is dropped first
    # (``trim_head``; ``head=False`` keeps it), a tail that only repeats reports last (``trim_tail``).
    return trim_tail(_drop_anchors(trim_head(pattern) if head and TRIM_HEADS else pattern)).encode("utf-8")


#: where a message (what the rules match, ``^`` there) may start in the raw bytes: a line start
#: (Hyperscan's multi-line ``^``), a ``\r`` frame's start, the end of a launcher prefix (every
#: dialect's ends in ``:``, ``]`` or ``)``, then spaces: ``12: ``, ``[rank3]:``, ``[stderr] ``,
#: ``(pid=5) ``, ``<stdout>:``), or the end of an ANSI code the text cleaning removes. Keeping this
#: much of ``^`` keeps ``^ ?ValueError: ...`` from making every CamelCase ``...Error`` in the
#: middle of a line a candidate.
MESSAGE_START = r"(?:^|[\r:\])>] *|\x1b(?:\[[0-9;?]*[ -/]*[@-~]|[@-Z\\-_]))"


def _drop_anchors(p: str) -> str:
    """``p`` with ``^`` outside character classes made ``MESSAGE_START`` and without ``$``
    (``(?:^|\\d\\s+)Segmentation fault`` must find the line after a launcher prefix too)."""
    out: list[str] = []
    i, n, in_class = 0, len(p), False
    while i < n:
        c = p[i]
        if c == "\\":
            out.append(p[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]" and not (out and out[-1] in ("[", "[^")):
                in_class = False
        elif c == "[":
            in_class = True
            if p[i + 1:i + 2] == "^":
                out.append("[^")
                i += 2
                continue
        elif c == "$":
            i += 1
            continue
        elif c == "^":
            out.append(MESSAGE_START)
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


# --- a prefilter's tail ----------------------------------------------------------------------------
#
# Hyperscan reports every end of a match: a pattern ending in ``[^\n]*`` or ``\w+`` reports once
# per byte of the rest of the line, and each report is a call into Python (a rule's Python
# exception pattern made 50 calls per traceback line). For a prefilter, a pattern's start is as
# good as the whole: wherever the whole matches, the pattern without its tail matches too (the
# line is then confirmed with the full pattern). So the tail is trimmed: trailing parts that may
# match nothing are dropped, and a trailing repeat keeps its minimum.

_QUANT = re.compile(r"(?:[*+?]|\{(\d*)(?:(,)(\d*))?\})[?+]?$")


def class_end(p: str, i: int) -> int:
    """Index just after the character class ``p[i] == "["`` (a leading ``^`` and ``]`` are part of
    it, escapes are skipped); ``len(p) + 1`` if it is not closed."""
    n = len(p)
    j = i + 1
    if j < n and p[j] == "^":
        j += 1
    if j < n and p[j] == "]":
        j += 1
    while j < n and p[j] != "]":
        j += 2 if p[j] == "\\" else 1
    return j + 1 if j < n else n + 1


def _structure(p: str, i: int = 0) -> Iterator[tuple[int, str]]:
    """Where ``p``'s ``(``, ``)`` and ``|`` stand from ``i`` on (escapes and character classes
    skipped); a class left open ends the walk with ``(len(p) + 1, "[")``."""
    j, n = i, len(p)
    while j < n:
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            j = class_end(p, j)
            if j > n:
                yield j, "["
                return
            continue
        if c in "()|":
            yield j, c
        j += 1


def group_end(p: str, i: int) -> int:
    """Index of the ``)`` closing the group ``p[i] == "("`` (escapes and character classes
    skipped); -1 if it is not closed."""
    depth = 0
    for j, c in _structure(p, i):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def _tokens(p: str) -> list[tuple[str, str]] | None:
    """The top-level (atom, quantifier) pairs of ``p``; None if ``p`` has a top-level ``|`` or
    cannot be split (then it is left as it is)."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "|":
            return None
        if c == "\\":
            m = re.match(r"\\(?:x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|[pPN]\{[^}]*\}|\d{1,3}|.)", p[i:], re.S)
            if m is None:
                return None
            j = i + len(m.group(0))
        elif c == "[":
            j = class_end(p, i)
            if j > n:
                return None
        elif c == "(":
            j = group_end(p, i)
            if j < 0:
                return None
            j += 1
        elif c in "*+?{)":
            return None  # a quantifier without an atom, or an unbalanced parenthesis
        else:
            j = i + 1
        m = re.match(r"(?:[*+?]|\{\d*(?:,\d*)?\})[?+]?", p[j:])
        q = m.group(0) if m else ""
        out.append((p[i:j], q))
        i = j + len(q)
    return out


#: a named group in the ``regex`` module's other spelling, ``(?<name>...)`` (not a lookbehind)
_NAMED_ANGLE = re.compile(r"\(\?<(?=[A-Za-z_])")


def _as_re(rx: str) -> str:
    """``rx`` in the spelling Python's ``re`` reads: the rules are ``regex`` patterns, whose
    ``(?<name>`` is ``re``'s ``(?P<name>`` (outside character classes; escapes kept)."""
    if "(?<" not in rx:
        return rx
    out: list[str] = []
    i, n = 0, len(rx)
    while i < n:
        c = rx[i]
        if c == "\\":
            out.append(rx[i:i + 2])
            i += 2
        elif c == "[":
            j = class_end(rx, i)
            out.append(rx[i:j])
            i = j
        elif _NAMED_ANGLE.match(rx, i):
            out.append("(?P<")
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _may_be_empty(rx: str) -> bool:
    try:
        rx = _as_re(rx)
        return re.fullmatch(rx, "") is not None or re.search(rx, "") is not None
    except re.error:
        return False


def trim_tail(p: str) -> str:
    """``p`` without the tail that only makes Hyperscan report a match again and again (see above);
    ``p`` itself when nothing can be trimmed safely."""
    toks = _tokens(p)
    if not toks:
        return p
    while toks:
        atom, q = toks[-1]
        zero_width = atom in ("$", "^") or atom in ("\\b", "\\B", "\\Z", "\\z", "\\A") \
            or atom.startswith(("(?=", "(?!", "(?<=", "(?<!"))
        qm = _QUANT.match(q) if q else None
        low = 1
        if qm is not None:
            if q[0] in "*?":
                low = 0
            elif q[0] == "{":
                low = int(qm.group(1) or 0)
        if zero_width or low == 0 or (atom.startswith("(") and _may_be_empty(atom)):
            toks.pop()
            continue
        if q and (q[0] == "+" or (qm is not None and qm.group(2))):  # X+, X{m,}, X{m,n}: X{m}
            toks[-1] = (atom, "" if low == 1 else f"{{{low}}}")
        elif not q and (atom.startswith(("(?:", "(?P<")) or _NAMED_ANGLE.match(atom)) \
                or (not q and atom.startswith("(") and atom[1:2] != "?"):
            # a plain or named group at the end: trim inside it
            head = "(?:" if atom.startswith("(?:") else atom[: atom.index(">") + 1] \
                if atom.startswith("(?P<") or _NAMED_ANGLE.match(atom) else "("
            body = atom[len(head):-1]
            inner = trim_tail(body)
            if inner and inner != body and not _may_be_empty(inner):
                toks[-1] = (head + inner + ")", "")
        break
    out = "".join(a + q for a, q in toks)
    if not out or _may_be_empty(out):
        return p
    try:
        re.compile(_as_re(out))
    except re.error:
        return p
    return out


# --- a prefilter's head ----------------------------------------------------------------------------
#
# Hyperscan finds a pattern fast from its literals. A pattern whose start holds none -- a message
# anchor, an identifier chain, a host or a number before the words -- makes it run an automaton
# from nearly every byte: the rule set's exception pattern, ``^ ?(?:\w+\.){0,8}[A-Z]\w*(?:Error|
# Exception...)``, cost more than the other ~530 patterns together (a database of all of them
# scanned ordinary log text at 1.4 s per GB, 0.4 without it). For a prefilter, a part of a pattern
# is as good as the whole, as with the tail: wherever the whole matches, every suffix of it matches
# too. So a head without a literal is dropped, up to the first place from which every way through
# the pattern starts with a literal of at least ``HEAD_LITERAL_MIN`` characters; a pattern with no
# such place is left as it is. The net widens (a ``ValueError`` in the middle of a line is then a
# candidate), and candidates are confirmed with the whole pattern.

#: the literal a trimmed head must leave at the start of every way through the pattern
HEAD_LITERAL_MIN = 3
#: a range with at least this many Hyperscan reports of narrowed patterns has its lines found with
#: numpy and those reports checked at once (``HyperscanScanner._dense_lines``): a report the narrowing
#: drops costs no Python step; below, line by line (a 2 MiB block's newline index costs about what
#: 1,000 reports cost one by one, and most blocks have few narrowed reports)
DENSE_REPORTS = 512
#: in such a range, as many narrowed reports as this have the whole range scanned by the database of
#: whole expressions; fewer, only their lines (joined)
NARROW_WHOLE = 256
#: pattern ids are below this: (line start, id) pairs as one integer
_KEY_SPAN = 1 << 20
#: a range with at least this many reports has their lines found in C (``_report_lines``), not
#: one by one (``_lines``): an NCCL_DEBUG=INFO log's thousands of fact lines per range
REPORT_LINES_IN_C = 64
#: a range after one with DENSE_REPORTS narrowed reports is scanned by the whole database (see
#: "a dense run of narrowed lines")
WHOLE_WHEN_DENSE = True
#: whether heads are trimmed (off, every pattern is compiled whole and nothing is narrowed: the
#: tests compare the candidates of both)
TRIM_HEADS = True
#: a pattern's leading global flags (``(?i)``): kept in front of whatever is trimmed after them
_FLAGS_ONLY = re.compile(r"\(\?[aiLmsux]+\)")
#: the opening of a group that only groups (plain, non-capturing, named, with scoped flags); not a
#: lookaround, a back-reference, an atomic group or a conditional
_GROUP_OPEN = re.compile(r"\((?:\?(?::|P?<(?=[A-Za-z_])[^>]*>|[aiLmsux-]+:))?")
#: regex syntax characters: any other character outside a class stands for itself
_SYNTAX = frozenset(".^$*+?()[]{}|\\")


def _literal(atom: str) -> bool:
    """Whether the token ``atom`` (one of ``_tokens``) matches one fixed character."""
    if len(atom) == 1:
        return atom not in _SYNTAX
    if atom[0] != "\\":
        return False
    c = atom[1]
    return not c.isalnum() or c in "ntrfvxuN"  # escaped punctuation, \n \t ..., \xHH \uHHHH \N{name}


def _group_parts(atom: str) -> tuple[str, str] | None:
    """``(opening, body)`` of a group token that only groups; None for any other token."""
    m = _GROUP_OPEN.match(atom)
    if m is None or (m.group(0) == "(" and atom[1:2] == "?") or not atom.endswith(")"):
        return None
    return m.group(0), atom[m.end():-1]


def _alternatives(p: str) -> list[str] | None:
    """``p`` split at its top-level ``|``; None if it cannot be read."""
    out: list[str] = []
    depth, start = 0, 0
    for j, c in _structure(p):
        if c == "[":  # (a class left open)
            return None
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0:
            out.append(p[start:j])
            start = j + 1
    if depth:
        return None
    out.append(p[start:])
    return out


def _lead(p: str) -> int:
    """How many literal characters every match of ``p`` starts with (0 when unknown)."""
    alts = _alternatives(p)
    if alts is None:
        return 0
    if len(alts) > 1:
        return min(_lead(a) for a in alts)
    toks = _tokens(p)
    return _lead_tokens(toks) if toks else 0


def _lead_tokens(toks: Sequence[tuple[str, str]]) -> int:
    n = 0
    for atom, q in toks:
        if q == "" and _literal(atom):
            n += 1
            continue
        g = _group_parts(atom) if q == "" else None
        return n + (_lead(g[1]) if g is not None else 0)
    return n


def _from_literal(p: str) -> tuple[str, bool] | None:
    """``p`` from the first place where every match goes on with a literal of ``HEAD_LITERAL_MIN``
    characters (into a group whose every alternative gets one that way), and whether what was
    dropped could stand for something (a token that must match, an anchor, a lookaround: then the
    trimmed pattern finds lines the whole one does not); None if there is no such place."""
    alts = _alternatives(p)
    if alts is None:
        return None
    if len(alts) > 1:
        parts = [(a, False) if _lead(a) >= HEAD_LITERAL_MIN else _from_literal(a) for a in alts]
        if any(a is None for a in parts):
            return None
        return "|".join(a for a, _ in parts if a is not None), any(w for _, w in parts if w)  # type: ignore[misc]
    toks = _tokens(p)
    widens = False
    for i, (atom, q) in enumerate(toks or ()):
        assert toks is not None
        if _lead_tokens(toks[i:]) >= HEAD_LITERAL_MIN:
            return "".join(a + b for a, b in toks[i:]), widens
        g = _group_parts(atom) if q == "" else None
        inner = _from_literal(g[1]) if g is not None else None
        if g is not None and inner is not None:
            return g[0] + inner[0] + ")" + "".join(a + b for a, b in toks[i + 1:]), widens or inner[1]
        widens = widens or not q.startswith(("*", "?", "{0,", "{,"))  # (only what may be left out is not)
    return None


def trim_head(p: str) -> str:
    """``p`` without a head that holds no literal (see above); ``p`` itself when it starts with one
    or nothing can be trimmed safely."""
    return _head_trimmed(p)[0]


def _narrowable(p: str) -> bool:
    """Whether ``p`` is narrowed (``HyperscanScanner``): its head widens, and its whole expression
    can be kept to one line."""
    return head_widens(p) and one_line(_hs_regex(p, head=False).decode()) is not None


def head_widens(p: str) -> bool:
    """Whether ``trim_head(p)`` finds lines that ``p`` does not (it dropped more than what may be
    left out): the lines it finds are then checked with the whole pattern (``HyperscanScanner``)."""
    return _head_trimmed(p)[1]


@functools.lru_cache(maxsize=4096)
def _head_trimmed(p: str) -> tuple[str, bool]:
    flags = _FLAGS_ONLY.match(p)
    if flags:
        rest, widens = _head_trimmed(p[flags.end():])
        return flags.group(0) + rest, widens
    if _lead(p) >= HEAD_LITERAL_MIN:
        return p, False
    got = _from_literal(p)
    if got is None or not got[0] or _may_be_empty(got[0]):
        return p, False
    try:
        re.compile(_as_re(got[0]))
    except re.error:  # a back-reference to a group the head held, a construct ``re`` cannot read
        return p, False
    return got


#: ASCII white space but the newline: what ``\s`` becomes in an expression kept to one line
_SPACE_NOT_NL = "\\t\\x0b\\x0c\\r "


def one_line(expr: str) -> str | None:
    """``expr`` (a Hyperscan expression) unable to match across a newline: every character class
    that holds the newline without it (``\\s`` -> tab, VT, FF, CR, space; ``[^...]`` -> ``[^\\n...]``;
    ``\\W``, ``\\D`` -> ``[^\\w\\n]``, ``[^\\d\\n]``). What the rules match is one line's message, so
    nothing they match is lost; a match then lies in one line wherever the expression is run.
    None when that cannot be said of it (a newline or vertical white space it asks for)."""
    out: list[str] = []
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c == "\\":
            e = expr[i:i + 2]
            if e == "\\s":
                out.append(f"[{_SPACE_NOT_NL}]")
            elif e in ("\\W", "\\D"):
                out.append(f"[^{e.lower()}\\n]")
            elif e[1:] in ("n", "v", "R", "X") or expr.startswith(("\\x0a", "\\x0A", "\\012", "\\x{"), i):
                return None
            else:
                out.append(e)
            i += 2
            continue
        if c == "[":
            j = class_end(expr, i)
            if j > n:
                return None
            body = expr[i + 1:j - 1]
            if body.startswith("^"):
                out.append("[^\\n" + body[1:] + "]")
            else:
                if any(x in body for x in ("\\n", "\\v", "\\W", "\\D", "\\S", "\\x0a", "\\x0A", "\\012", "\\x{")):
                    return None  # (a positive class that holds the newline or may: left as it is)
                out.append("[" + body.replace("\\s", _SPACE_NOT_NL) + "]")
            i = j
            continue
        if expr.startswith(("(?s", "(?x"), i):
            return None
        out.append(c)
        i += 1
    return "".join(out)


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


def _line_starts(data: bytes, ends: list[int]) -> list[int]:
    """Starts of the lines holding the match ends ``ends`` (ascending), each line once."""
    out: list[int] = []
    rfind, find = data.rfind, data.find
    line_end = -1
    for to in ends:
        if to <= line_end:
            continue  # another hit on the same line
        at = to - 1
        out.append(rfind(b"\n", 0, at) + 1)
        line_end = find(b"\n", at)
        if line_end < 0:
            break
    return out


class KeywordScanner:
    """Fallback: ``bytes.find`` for each distinct keyword; hits are (line start, pattern ids)."""

    name = "keywords"
    rejected: tuple[int, ...] = ()  # it runs every pattern

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        by_kw: dict[bytes, list[int]] = {}
        for p in patterns:
            for kw in p.keywords:
                by_kw.setdefault(kw.encode("utf-8"), []).append(p.id)
        self._keywords = tuple((kw, tuple(ids)) for kw, ids in by_kw.items())
        #: keyword hits so far (a statistic: the digest reports each source's share)
        self.reports = 0

    def scan(self, buf: bytes | memoryview, end: int) -> dict[int, set[int]]:
        data = bytes(buf) if isinstance(buf, memoryview) else buf
        return self.scan_range(data, 0, end)

    def scan_range(self, data: bytes, begin: int, end: int) -> dict[int, set[int]]:
        """Candidate lines of ``data[begin:end]`` (``begin`` a line start), as offsets in ``data``."""
        lines: dict[int, set[int]] = {}
        for kw, ids in self._keywords:
            find = data.find
            pos = find(kw, begin, end)
            while pos >= 0:
                start = data.rfind(b"\n", 0, pos) + 1
                got = lines.get(start)
                if got is None:
                    lines[start] = set(ids)
                else:
                    got.update(ids)
                self.reports += 1
                nl = data.find(b"\n", pos, end)
                if nl < 0:
                    break
                pos = find(kw, nl + 1, end)
        return lines


# --- a dense run of narrowed lines ------------------------------------------------------------------
#
# Where a narrowed pattern's lines are most of a range (a log of tracebacks, each ``raise X(`` line
# a report of the trimmed exception pattern and each ``X: message`` line two), the range is scanned
# twice -- the main database, then the database of whole expressions over all of it -- and the
# first scan's reports of the narrowed patterns are mostly dropped. After such a range the next is
# scanned once, by the *whole* database: the main one's expressions with the narrowed ones whole
# (each kept to one line, as the narrow database's). A report of it is a line the whole expression
# finds, which is what the two scans keep, so the candidates are the same; only the count of
# reports differs. A range with fewer narrowed matches than DENSE_REPORTS goes back to the main
# database. Compiling the whole database costs as much as the main one (seconds). A process that
# compiles the main one (its cache is cold) has a detached child compile and cache the whole one
# meanwhile (``_compile_apart``: on another core and in its own memory -- one process compiling both
# at once took 250 MB against 155 for one -- and waited for by nobody), so the next runs load it. A
# process loads it from the cache when it first meets a dense range (every range after that, and
# every source, is then scanned alike); where it is not cached (not yet, evicted, or the cache is
# off) a detached child compiles it for the next runs and this process goes on with the main one.


def _whole_key(key_flags: _KeyFlags, rejected: Sequence[int], narrowed: frozenset[int]) -> _KeyFlags:
    flags = key_flags if isinstance(key_flags, tuple) else (key_flags,)
    return (*flags, "whole", ",".join(map(str, rejected)), ",".join(map(str, sorted(narrowed))))


def _cache_whole(hs: ModuleType, patterns: Sequence[Pattern], first: dict[str, int],
                 probes: Callable[[], dict[int, list[str]]] | None, sources: Sequence[bytes], ids: Sequence[int],
                 key_flags: _KeyFlags, rejected: Sequence[int], narrowed: frozenset[int]) -> Database | None:
    """Compile, check and cache the whole database of a rule set (``ids``: its compiled regexes'
    ids) whose main database refused ``rejected`` and narrowed ``narrowed``; None (cached as such)
    when it is not to be used."""
    gone = set(rejected)
    kept = [i for i in ids if i not in gone]
    db = _whole_checked(hs, _whole_db(hs, patterns, first, kept, narrowed), patterns, first, probes, kept) \
        if narrowed else None
    _cache_store(sources, ids, _whole_key(key_flags, rejected, narrowed), db, ())
    return db


def _compile_apart(job: Callable[[], object]) -> None:
    """Run ``job`` in a detached grandchild: this process goes on at once (its start is its own
    compile's, not the longer of two), the compile runs on another core and in its own memory
    (Hyperscan's compiles take seconds and a hundred MB; two in one process held both at once),
    and nothing waits for it. It holds none of this process's files (a pipe read to its end by the
    caller of ``correlate`` ends with ``correlate``) and ends after COMPILE_APART_SECONDS at most.
    Nothing is done where there is no fork or no cache to leave the result in."""
    if not TRIM_HEADS or not hasattr(os, "fork") or cache_dir() is None:
        return
    try:
        pid = os.fork()
    except OSError:
        return
    if pid == 0:  # pragma: no cover - the child and grandchild (their coverage is not collected)
        code = 1
        try:
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.closerange(3, 1 << 16)
                # (a lock another thread held at the fork would hang it: SIGALRM's default ends it)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(COMPILE_APART_SECONDS)
                job()
            code = 0
        finally:
            os._exit(code)
    try:
        os.waitpid(pid, 0)  # (the child ends at once; its own child, orphaned, is init's)
    except ChildProcessError:  # (reaped elsewhere: a SIGCHLD handler)
        pass


#: how long a compile in a detached child may take before it is ended (seconds; one takes ~3)
COMPILE_APART_SECONDS = 120
#: the whole database not looked for yet (``HyperscanScanner._whole``)
_UNBUILT = "unbuilt"


def _whole_db(hs: ModuleType, patterns: Sequence[Pattern], first: dict[str, int], kept: Sequence[int],
              narrowed: frozenset[int]) -> Database | None:
    """The whole database of the patterns ``kept`` (ids a regex is compiled under), the ``narrowed``
    ones whole and kept to one line; None when Hyperscan refuses one of them."""
    regex_of = {p.id: p.regex for p in patterns if first[p.regex] == p.id}
    exprs = [str(one_line(_hs_regex(regex_of[i], head=False).decode())).encode() if i in narrowed
             else _hs_regex(regex_of[i]) for i in kept]
    db, refused = _compile(hs, exprs, kept, hs.HS_FLAG_PREFILTER | hs.HS_FLAG_MULTILINE | hs.HS_FLAG_ALLOWEMPTY)
    return None if refused else db


def _whole_checked(hs: ModuleType, db: Database | None, patterns: Sequence[Pattern], first: dict[str, int],
                   probes: Callable[[], dict[int, list[str]]] | None, kept: Sequence[int]) -> Database | None:
    """``db``, or None when it misses a probe line of a pattern (what the main database's patterns
    were checked for: the whole one is then not used at all)."""
    if db is None or probes is None:
        return db
    ids = set(kept)
    wanted = {i: ls for i, ls in HyperscanScanner._probes(patterns, first, probes).items() if i in ids}
    regex_of = {p.id: p.regex for p in patterns if p.id in ids}
    return None if _missed(hs, db, wanted, regex_of) else db


class HyperscanScanner:
    """All patterns in one Hyperscan block-mode database; patterns it refuses fall back to keywords."""

    name = "hyperscan"

    def __init__(self, patterns: Sequence[Pattern], probes: Callable[[], dict[int, list[str]]] | None = None) -> None:
        import hyperscan

        self._hs = hyperscan
        flags = hyperscan.HS_FLAG_PREFILTER | hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_ALLOWEMPTY
        # a regex that several patterns share (two rules reading one line: the generic exception's
        # last line, read again by the rule for exceptions Python ignored) is compiled once, under
        # its first pattern's id; a report of it stands for all of them (``_same``)
        first: dict[str, int] = {}
        wanted: dict[int, list[str]] = {}  # the probes, by the id each regex is compiled under
        self._same: dict[int, tuple[int, ...]] = {}
        for p in patterns:
            rep = first.setdefault(p.regex, p.id)
            if rep != p.id:
                self._same[rep] = (*self._same.get(rep, (rep,)), p.id)
        unique = [p for p in patterns if first[p.regex] == p.id]
        ids = [p.id for p in unique]
        # keyed by the rules' own regexes and this module's source (which turns them into Hyperscan
        # expressions): a cached database costs no conversion of ~370 patterns
        sources = [p.regex.encode("utf-8", "surrogatepass") for p in unique]
        key_flags = (flags, PROBE_VERSION if probes is not None else 0, _converter_digest(), TRIM_HEADS)
        cached = _cache_load(sources, ids, key_flags)
        if cached is not None:
            db, rejected_ids = cached
        else:
            exprs = [_hs_regex(p.regex) for p in unique]
            # (detached: this process's start is its own compile's, not the longer of the two)
            # (for what the main compile most often ends with: no pattern refused, every one it may
            # narrowed; only for a rule set's scanner, which has probes, not one rule's in ``rules check``)
            assumed = frozenset(i for p, i in zip(unique, ids) if _narrowable(p.regex))
            if assumed and probes is not None:
                _compile_apart(lambda: _cache_whole(hyperscan, patterns, first, probes, sources, ids, key_flags, (),
                                                    assumed))
            db, rejected_ids = _compile(hyperscan, exprs, ids, flags)
            if db is not None and probes is not None:
                wanted = self._probes(patterns, first, probes)
                db, rejected_ids = _without_missed(hyperscan, exprs, ids, flags, db, rejected_ids, wanted,
                                                   {p.id: p.regex for p in unique})
            _cache_store(sources, ids, key_flags, db, rejected_ids)
        # the patterns whose head ``trim_head`` dropped: the main database finds their lines by what
        # is left, a second one (``_narrow_db``, their whole expressions) is run over those lines
        # alone, so the candidates are the lines the whole expression finds, at the cost of the
        # trimmed one (see "a prefilter's head")
        self._narrow: frozenset[int] = frozenset()
        self._narrow_db: Database | None = None
        if db is not None and TRIM_HEADS:
            # cached under the main database's key: its first line holds the narrowed ids (where the
            # main database's holds the ones it rejected), so a cached run trims no pattern
            n_key = (*key_flags, "narrow", ",".join(map(str, rejected_ids)))
            n_cached = _cache_load(sources, ids, n_key)
            if n_cached is not None:
                n_db, narrowed = n_cached
            else:
                gone = set(rejected_ids)
                # (each kept to one line: a match of it then lies in one line, whether the lines are
                # scanned joined or where they are; one that cannot be is not narrowed)
                heads = [(p, i) for p, i in zip(unique, ids) if i not in gone and _narrowable(p.regex)]
                n_exprs = [str(one_line(_hs_regex(p.regex, head=False).decode())).encode() for p, _ in heads]
                n_ids = [i for _, i in heads]
                n_db, n_rejected = _compile(hyperscan, n_exprs, n_ids, flags)
                if n_db is not None and probes is not None:  # (a pattern this one misses is not narrowed)
                    if not wanted:
                        wanted = self._probes(patterns, first, probes)
                    n_db, n_rejected = _without_missed(hyperscan, n_exprs, n_ids, flags, n_db, n_rejected,
                                                       {i: wanted.get(i, []) for i in n_ids},
                                                       {p.id: p.regex for p, _ in heads})
                narrowed = tuple(i for i in n_ids if i not in set(n_rejected)) if n_db is not None else ()
                _cache_store(sources, ids, n_key, n_db, narrowed)
            if n_db is not None and narrowed:
                self._narrow_db = n_db
                self._narrow_scratch = hyperscan.Scratch(n_db)
                self._narrow = frozenset(narrowed)
        #: the pattern ids whose lines are checked again with their whole expression
        self.narrowed = self._narrow
        # the whole database (``_whole_pair``): not looked for yet, loaded, or None (none to use)
        self._whole: str | tuple[Database, Scratch] | None = _UNBUILT if self._narrow else None
        self._whole_from = (patterns, first, probes, sources, ids, key_flags, tuple(rejected_ids))
        #: whether the last range had DENSE_REPORTS narrowed reports (the next is scanned whole)
        self._dense_next = False
        #: the narrowed ids with the ids that share their regex
        self._narrow_every = frozenset(j for i in self._narrow for j in self._same.get(i, (i,)))
        rejected_ids = (*rejected_ids, *(i for rep in rejected_ids for i in self._same.get(rep, ())[1:]))
        rejected = [p for p in patterns if p.id in set(rejected_ids)]
        self.rejected = tuple(p.id for p in rejected)
        self._db = db
        if db is not None:
            self._scratch = hyperscan.Scratch(db)
        self._fallback = KeywordScanner(rejected) if rejected else None
        #: Hyperscan reports (and fallback keyword hits) so far: a statistic, each source's share
        #: of it is in its digest
        self.reports = 0

    @staticmethod
    def _probes(patterns: Sequence[Pattern], first: dict[str, int], probes: Callable[[], dict[int, list[str]]]
                ) -> dict[int, list[str]]:
        """The probe lines of each compiled regex (a shared regex's under its first pattern's id)."""
        regex_of = {p.id: p.regex for p in patterns}
        wanted: dict[int, list[str]] = {}
        for pid, lines in probes().items():
            wanted.setdefault(first.get(regex_of.get(pid, ""), pid), []).extend(lines)
        return wanted

    def scan(self, buf: bytes | memoryview, end: int) -> dict[int, set[int]]:
        data = bytes(buf[:end]) if isinstance(buf, memoryview) or end != len(buf) else buf
        return self.scan_range(data, 0, len(data))

    def scan_range(self, data: bytes, begin: int, end: int) -> dict[int, set[int]]:
        """Candidate lines of ``data[begin:end]`` (``begin`` a line start, ``end`` a line end or
        ``len(data)``), as offsets in ``data``; the range is scanned in place, not copied."""
        tos: list[int] = []
        pids: list[int] = []
        whole = self._whole_pair() if self._dense_next and WHOLE_WHEN_DENSE else None
        if self._db is not None:
            add_to, add_pid = tos.append, pids.append

            def on_match(pid: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                add_to(to)
                add_pid(pid)

            db, scratch = whole if whole is not None else (self._db, self._scratch)
            all_of = begin == 0 and end == len(data)
            # the stub types ``data`` as str | bytes; the extension takes any buffer, a view too
            db.scan(data if all_of else memoryview(data)[begin:end],  # type: ignore[type-var]
                    match_event_handler=on_match, scratch=scratch)
            self.reports += len(tos)
        many = False
        if self._narrow and len(pids) >= DENSE_REPORTS:
            counts = Counter(pids)  # (counted in C)
            many = sum(counts[p] for p in self._narrow.intersection(counts)) >= DENSE_REPORTS
        self._dense_next = many
        if whole is not None:  # (every report is of a whole expression: none to check again)
            lines = self._report_lines(data, begin, tos, pids)
        elif many:
            lines = self._dense_lines(data, begin, end, tos, pids)
        else:
            # (many reports: their lines found in C, ``_report_lines``; few: one by one, where a
            # line's reports after its first cost a comparison)
            lines = (self._report_lines(data, begin, tos, pids) if len(tos) >= REPORT_LINES_IN_C
                     else self._lines(data, begin, end, tos, pids))
            if self._narrow and lines:
                self._narrowed(data, end, lines)
        if self._fallback is not None:
            before = self._fallback.reports
            for start, got in self._fallback.scan_range(data, begin, end).items():
                old = lines.get(start)  # (a new set: one of a dense range may be its pattern's every line's)
                lines[start] = got if old is None else old | got
            self.reports += self._fallback.reports - before
        return lines

    def _lines(self, data: bytes, begin: int, end: int, tos: list[int], pids: list[int]) -> dict[int, set[int]]:
        """The lines the reports (``tos``: match ends, relative to ``begin``; ``pids``) end in, one
        by one: where they are few."""
        lines: dict[int, set[int]] = {}
        rfind, find = data.rfind, data.find
        same = self._same
        last_start, last_end, last_set = -1, -1, None
        for to, pid in zip(tos, pids):
            to += begin
            if last_start <= to - 1 < last_end and last_set is not None:
                last_set.update(same.get(pid, (pid,)))  # (a shared regex's ids with it: ``_same``)
                continue
            # the byte that completed the match belongs to the line ending at the next newline
            at = to - 1 if to > begin else begin
            start = rfind(b"\n", begin, at) + 1 or begin
            got = lines.get(start)
            if got is None:
                got = lines[start] = set()
            got.update(same.get(pid, (pid,)))
            nl = find(b"\n", at, end)
            last_start, last_end, last_set = start, (nl if nl >= 0 else end), got
        return lines

    def _report_lines(self, data: bytes, begin: int, tos: list[int], pids: list[int]) -> dict[int, set[int]]:
        """What ``_lines`` gives, with no Python step per report: each report's line start found
        back from the byte that completed its match (``tos``: match ends, relative to ``begin``)."""
        # (rfind over ``[begin, begin + to - 1)``: -1, which becomes ``begin``, when there is no newline)
        ends = map(add, repeat(begin - 1), tos)
        starts = map(max, repeat(begin), map(add, map(data.rfind, repeat(b"\n"), repeat(begin), ends), repeat(1)))
        return self._line_sets(list(starts), pids)

    def _line_sets(self, at: list[int], ids: list[int]) -> dict[int, set[int]]:
        """The candidate lines of reports (``at``: their line starts; ``ids``: their patterns, a shared
        regex's for all its ids). Where each line has one report (a dense range's most common case),
        the lines of one pattern share one set: built in C, and only read."""
        same = self._same
        if len(set(at)) == len(at):
            of = {pid: set(same.get(pid, (pid,))) for pid in set(ids)}
            return dict(zip(at, map(of.__getitem__, ids)))
        lines: dict[int, set[int]] = {}
        for start, pid in zip(at, ids):
            got = lines.get(start)
            if got is None:
                got = lines[start] = set()
            got.update(same.get(pid, (pid,)))
        return lines

    def _dense_lines(self, data: bytes, begin: int, end: int, tos: list[int], pids: list[int]
                     ) -> dict[int, set[int]]:
        """What ``_lines`` and ``_narrowed`` give, for a range with many reports: the line of each
        report from the range's newlines (numpy), and the narrowed patterns checked by one scan of
        the whole range with the database of their whole expressions, each kept to one line
        (``one_line``: a match of it lies in one line, as on the lines joined). No Python step per
        report that the narrowing drops (a traceback's ``raise ValueError(`` line)."""
        import numpy as np

        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8, count=end - begin, offset=begin) == 10)
        before = np.concatenate((np.array([-1], dtype=np.int64), newlines))

        def starts_of(ends: list[int]) -> np.ndarray:
            t = np.asarray(ends, dtype=np.int64)  # (match ends, relative to ``begin``)
            return before[np.searchsorted(newlines, np.maximum(t - 1, 0), side="left")] + 1

        starts = starts_of(tos)
        pid_arr = np.asarray(pids, dtype=np.int64)
        if self._narrow:
            narrowed = np.isin(pid_arr, np.fromiter(self._narrow, dtype=np.int64))
            count = int(np.count_nonzero(narrowed))
            if count:
                hit_tos: list[int] = []
                hit_pids: list[int] = []
                add_to, add_pid = hit_tos.append, hit_pids.append

                def on_match(pid: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                    add_to(to)
                    add_pid(pid)

                assert self._narrow_db is not None
                if count >= NARROW_WHOLE:  # the whole range, once
                    self._narrow_db.scan(memoryview(data)[begin:end],  # type: ignore[type-var]
                                         match_event_handler=on_match, scratch=self._narrow_scratch)
                    hit_starts = starts_of(hit_tos)
                else:  # the few lines, joined
                    check = np.unique(starts[narrowed])
                    find = data.find
                    parts = [data[s:e if (e := find(b"\n", s, end)) >= 0 else end] for s in (check + begin).tolist()]
                    self._narrow_db.scan(b"\n".join(parts), match_event_handler=on_match, scratch=self._narrow_scratch)
                    sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)) + 1
                    joined_at = np.cumsum(sizes) - sizes
                    hit_starts = check[np.searchsorted(joined_at, np.asarray(hit_tos, dtype=np.int64) - 1,
                                                       side="right") - 1]
                # (line start, id) as one key: a narrowed report stays where the whole expression of
                # its pattern matched its line too
                hits = hit_starts * _KEY_SPAN + np.asarray(hit_pids, dtype=np.int64)
                keep = ~narrowed | np.isin(starts * _KEY_SPAN + pid_arr, hits)
                starts, pid_arr = starts[keep], pid_arr[keep]
        return self._line_sets((starts + begin).tolist(), pid_arr.tolist())

    def new_source(self) -> None:
        """A source starts: its first range is scanned by the main database (what the scan of a
        source reports depends on that source alone)."""
        self._dense_next = False

    def _whole_pair(self, compile_here: bool = False) -> tuple[Database, Scratch] | None:
        """The whole database and its scratch, or None. Looked for once, when a range first needs it:
        from the disk cache (milliseconds), so that every range after that and every source of this
        process is scanned alike. Not there: a detached child compiles and caches it for the next
        runs (``_compile_apart``) and this process goes on without it (``compile_here``: compiled
        here, seconds; a test's)."""
        got = self._whole
        if got == _UNBUILT:
            patterns, first, probes, sources, ids, _key_flags, rejected = self._whole_from
            cached = _cache_load(sources, ids, self._whole_key())
            db = cached[0] if cached is not None else None
            if cached is None:
                if compile_here:
                    db = self._build_whole()
                else:
                    _compile_apart(self._build_whole)
            got = self._whole = (db, self._hs.Scratch(db)) if db is not None else None
        return got  # type: ignore[return-value]

    def _whole_key(self) -> _KeyFlags:
        _patterns, _first, _probes, _sources, _ids, key_flags, rejected = self._whole_from
        return _whole_key(key_flags, rejected, self._narrow)

    def _build_whole(self) -> Database | None:
        """Compile, check and cache the whole database (see "a dense run of narrowed lines") of this
        scanner's patterns (None: not to be used, cached as such)."""
        patterns, first, probes, sources, ids, key_flags, rejected = self._whole_from
        return _cache_whole(self._hs, patterns, first, probes, sources, ids, key_flags, rejected, self._narrow)

    def _narrowed(self, data: bytes, end: int, lines: dict[int, set[int]]) -> None:
        """Take from ``lines`` each pattern whose head was trimmed where its whole expression does
        not match the line (and a line left with no pattern): the lines are scanned again, joined,
        by the database of the whole expressions."""
        narrow, every = self._narrow, self._narrow_every
        check = [s for s, pids in lines.items() if not every.isdisjoint(pids)]
        if not check:
            return
        find = data.find
        parts = [data[s:e if (e := find(b"\n", s, end)) >= 0 else end] for s in check]
        tos: list[int] = []
        hit_pids: list[int] = []

        def on_match(pid: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            tos.append(to)
            hit_pids.append(pid)

        assert self._narrow_db is not None
        self._narrow_db.scan(b"\n".join(parts), match_event_handler=on_match, scratch=self._narrow_scratch)
        import numpy as np

        # which checked line each report ends in: the lines' starts in the joined bytes, searched
        sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)) + 1
        at = np.cumsum(sizes) - sizes
        line_of = (np.searchsorted(at, np.asarray(tos, dtype=np.int64) - 1, side="right") - 1).tolist()
        hit = set(zip(line_of, hit_pids))
        hit_lines = set(line_of)
        same = self._same
        for k, s in enumerate(check):
            pids = lines[s]  # (a new set where it changes: one may be its pattern's every line's, ``_line_sets``)
            if k not in hit_lines:
                pids = pids - every
            else:
                for pid in narrow.intersection(pids):
                    if (k, pid) not in hit:
                        pids = pids - set(same.get(pid, (pid,)))
            if pids:
                lines[s] = pids
            else:
                del lines[s]


# --- compiling, and the on-disk cache of compiled databases ---------------------------------------
#
# Compiling ~350 rule patterns takes Hyperscan seconds; loading a serialized database takes
# milliseconds. Databases are cached by a hash of everything that goes into them (patterns, ids,
# flags, Hyperscan version, CPU), in ``$CORRELATE_CACHE`` or ``$XDG_CACHE_HOME/correlate`` or
# ``~/.cache/correlate``; ``CORRELATE_CACHE=off`` disables the cache. A cache that cannot be read
# or written is ignored: it only costs the compile (``correlator.cache``).


@functools.lru_cache(maxsize=1)
def _converter_digest() -> str:
    """A digest of this module's source: a database cached under a rule set's own regexes is only
    reused by the same conversion to Hyperscan expressions (and the same check of it)."""
    import hashlib

    try:
        with open(__file__, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:  # no source to hash (a frozen build): the package version stands for it
        from correlator import __version__

        return f"v{__version__}"


#: what a cached database's key holds besides its expressions: its compile flags, and for the rule
#: set's database the probe version and the converter's digest
_KeyFlags = int | tuple[int | str, ...]


def _cache_key(exprs: Sequence[bytes], ids: Sequence[int], flags: _KeyFlags) -> str:
    import hashlib
    import platform

    import hyperscan

    h = hashlib.sha256()
    h.update(f"hs={getattr(hyperscan, '__version__', '?')};cpu={platform.machine()};flags={flags};".encode())
    for e, i in zip(exprs, ids):
        h.update(b"%d\x00%s\x00" % (i, e))
    return h.hexdigest()[:32]


def _cache_load(exprs: Sequence[bytes], ids: Sequence[int], flags: _KeyFlags
                ) -> tuple[Database | None, tuple[int, ...]] | None:
    d = cache_dir()
    if d is None or not exprs:
        return None
    path = os.path.join(d, f"hs-{_cache_key(exprs, ids, flags)}.db")
    try:
        with open(path, "rb") as f:
            raw = f.read()
        try:
            os.utime(path)  # least recently used databases are trimmed first
        except OSError:
            pass
        head, _, blob = raw.partition(b"\n")
        rejected = tuple(int(x) for x in head.decode().split(",") if x)
        import hyperscan

        db = hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK) if blob else None
        return db, rejected
    except Exception:  # missing, truncated, another platform or Hyperscan version: compile
        return None


def _cache_store(exprs: Sequence[bytes], ids: Sequence[int], flags: _KeyFlags, db: Database | None,
                 rejected: Sequence[int]) -> None:
    d = cache_dir()
    if d is None or not exprs:
        return
    try:
        import hyperscan

        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"hs-{_cache_key(exprs, ids, flags)}.db")
        blob = bytes(hyperscan.dumpb(db)) if db is not None else b""
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(",".join(str(i) for i in rejected).encode() + b"\n" + blob)
        os.replace(tmp, path)  # atomic: concurrent workers never read half a file
        _cache_trim(d, keep=path)
    except Exception:  # a read-only home, a full disk: no cache, no harm
        return


#: compiled databases kept in the cache: three per distinct rule set (main, narrow, whole; rule sets
#: differ by edits, --rules folders, tests), the window finder's and the bulk lanes' small ones
CACHE_FILES = 64


def _cache_trim(d: str, keep: str) -> None:
    files = [os.path.join(d, f) for f in os.listdir(d) if f.startswith("hs-") and f.endswith(".db")]
    if len(files) <= CACHE_FILES:
        return
    files.sort(key=lambda f: os.path.getmtime(f))
    for f in files[: len(files) - CACHE_FILES]:
        if f != keep:
            try:
                os.remove(f)
            except OSError:
                pass


#: launcher prefixes and fillers a probe line is also scanned behind: Hyperscan's misses depend on
#: where in the buffer a match lies
_PROBE_PREFIXES = ("", "0: [default0]:[rank0]:", "gpu-a01: [rank3]: ", "x" * 37 + " ", "[2026-03-02 14:00:00,123] ")
#: part of the cache key of a database checked against its probes (change it when the check changes)
PROBE_VERSION = 2


def _sees(regex_src: str | None, line: str) -> bool:
    """Whether a rule's regex matches what the rules see of ``line`` (its message after the
    prefixes, ANSI codes removed, one ``\r`` frame): a probe behind a log header is expected only
    of a pattern that is not anchored to the message's start."""
    if regex_src is None or "^" not in regex_src.replace("[^", ""):
        return True
    import regex

    from correlator.extract.prefixes import split_prefix, strip_ansi

    rx = regex.compile(regex_src)
    return any(rx.search(f) for f in split_prefix(strip_ansi(line))[1].split("\r"))


def _missed(hyperscan: ModuleType, db: Database, probes: dict[int, list[str]],
            sources: dict[int, str] | None = None) -> set[int]:
    """Pattern ids that ``db`` does not report on lines their own regexes match (``probes``; with
    ``sources``, the patterns' own regexes, only where the line's message still matches)."""
    want: dict[int, int] = {}  # line start -> pattern id expected there
    parts: list[bytes] = []
    pos = 0
    for pid, lines in probes.items():
        for ln in lines:
            for pre in _PROBE_PREFIXES:
                if pre and sources is not None and not _sees(sources.get(pid), pre + ln):
                    continue
                b = (pre + ln).encode("utf-8", "replace")
                want[pos] = pid
                parts.append(b)
                pos += len(b) + 1
    data = b"\n".join(parts) + b"\n"
    got: set[tuple[int, int]] = set()

    def on_match(pid: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
        got.add((data.rfind(b"\n", 0, max(to - 1, 0)) + 1, pid))

    db.scan(data, match_event_handler=on_match, scratch=hyperscan.Scratch(db))
    return {pid for start, pid in want.items() if (start, pid) not in got}


def _without_missed(hyperscan: ModuleType, exprs: Sequence[bytes], ids: Sequence[int], flags: int, db: Database,
                    rejected: tuple[int, ...], probes: dict[int, list[str]], sources: dict[int, str] | None = None
                    ) -> tuple[Database | None, tuple[int, ...]]:
    """``db`` rebuilt without the patterns it misses on their own example lines (a Hyperscan defect:
    two patterns of the same shape, ``\\[\\d+\\] <words>``, made it miss one of them behind a
    prefix); those go to the keyword scanner, which finds every example (tested). Checked again
    after each rebuild, as removing patterns changes the database."""
    gone = set(rejected)
    for _ in range(4):
        missed = _missed(hyperscan, db, {p: ls for p, ls in probes.items() if p not in gone}, sources)
        if not missed:
            break
        gone |= missed
        kept = [(e, i) for e, i in zip(exprs, ids) if i not in gone]
        if not kept:
            return None, tuple(sorted(gone))
        rebuilt, more = _compile(hyperscan, [e for e, _ in kept], [i for _, i in kept], flags)
        gone |= set(more)
        if rebuilt is None:  # every kept pattern refused on its own
            return None, tuple(sorted(gone))
        db = rebuilt
    return db, tuple(sorted(gone))


def _compile(hyperscan: ModuleType, exprs: Sequence[bytes], ids: Sequence[int], flags: int
             ) -> tuple[Database | None, tuple[int, ...]]:
    """One database of every pattern Hyperscan accepts (in prefilter mode); the ids it refused."""
    if not exprs:
        return None, ()

    def build(es: Sequence[bytes], is_: Sequence[int]) -> Database:
        db = hyperscan.Database()
        db.compile(expressions=list(es), ids=list(is_), elements=len(es), flags=[flags] * len(es))
        return db

    try:
        return build(exprs, ids), ()
    except Exception:  # hyperscan.error: some pattern is beyond even prefilter mode; find which
        pass
    kept_e, kept_i, rejected = [], [], []
    for e, i in zip(exprs, ids):
        try:
            build([e], [i])
        except Exception:
            rejected.append(i)
            continue
        kept_e.append(e)
        kept_i.append(i)
    return (build(kept_e, kept_i) if kept_e else None), tuple(rejected)


# --- helpers for the head/tail window facts -------------------------------------------------------

#: lines that may carry a progress marker (a superset of ``extract._PROGRESS``'s lines; that exact
#: pattern is still run on each of them), and bytes without which no timestamp can exist: an
#: ``H:M`` pair of every clock format (the hour's last digit may be a non-ASCII Unicode digit) and
#: the start of an epoch stamp
PROGRESS_HINT = rb"(?i)\b(?:global[_ ]step|step|iteration|iter)\b[ \t\r\f\v]*[=:]?[ \t\r\f\v]*\d"
#: ``extract._PROGRESS`` itself for one line (its ``\s`` cannot meet a newline there): with the
#: leftmost start of each match, a line's first match and so its step number come from Hyperscan
PROGRESS_EXACT = rb"(?i)\b(?:global[_ ]step|step|iteration|iter)\b[ \t\r\f\v]*[=:]?[ \t\r\f\v]*\d{1,9}\b"
STAMP_HINTS = tuple(hint for hint, _ in dialects.stamp_hints())
#: the other line classes of a window: a line start that may hold a launcher prefix (after a
#: newline, pdsh hosts and Ray actor tags included; ``extract._MAYBE_PREFIX``), an NCCL origin line, a
#: blank line (ASCII whitespace only)
MAYBE_PREFIX = dialects.prefix_hints()
NCCL_LINE = rb" NCCL "
#: lines that may start with a prefix naming a writer (an srun task label, a ``[rankN]:`` tag: the
#: dialects' ``census_hint``); the hit's own line is the one to check
RANK_PREFIX_HINTS = dialects.census_hints()
#: what keeps a plain candidate line out of the confirmer's bulk lane (``confirmer.Confirmer.bulk_lane``,
#: which checks the same one line at a time without Hyperscan), searched in the lines joined, each
#: after a newline: what may name a host (a syslog header, an NCCL origin), an embedded launcher
#: prefix (every one holds ``]:`` or ``]<std``), what every stamp holds (``dialects.stamp_needs``, in
#: multi-line mode: its ``^`` is a line start) and a line start that may hold a launcher prefix
LANE_BREAKERS = (rb" kernel: ", rb" NCCL ", rb"\]:", rb"\]<std", dialects.stamp_needs().encode(), MAYBE_PREFIX)
#: Hyperscan reports no empty matches, and (in this build) misses some matches of ``$``/``\z`` at
#: the end of a buffer: blank lines are found between two newlines, the first and last line apart
EMPTY_LINE, SPACE_LINE = rb"\n\n", rb"\n[ \t\r\x0b\x0c]+\n"


#: a span at least this long is searched for a literal by Hyperscan (``literal_places``): ~6.6 GB/s on
#: a traceback log where ``bytes.find`` of ``Exception ignored in`` went at 1.6
LITERAL_SCAN_BYTES = 64 << 10
#: literal -> its Hyperscan database and scratch (None: no Hyperscan), built once per process
_LITERALS: dict[bytes, tuple[Database, Scratch] | None] = {}


def literal_places(data: bytes, lit: bytes, pos: int, end: int) -> list[int]:
    """Every ``i`` with ``pos <= i`` and ``i + len(lit) <= end`` where ``lit`` starts (overlapping
    places too), in order: what ``data.find(lit, i + 1, end)`` from ``pos`` finds one by one, over a
    long span by one Hyperscan scan (a context rule's required literal, looked for in a block's
    bytes: ``lines.Buffer.holds_before``)."""
    got = None
    if end - pos >= LITERAL_SCAN_BYTES and lit:
        if lit not in _LITERALS:
            _LITERALS[lit] = None
            if hyperscan_available():
                import hyperscan

                db = _small_db([b"".join(b"\\x%02x" % c for c in lit)], [0])
                _LITERALS[lit] = (db, hyperscan.Scratch(db))
        got = _LITERALS[lit]
    if got is None:
        out: list[int] = []
        i = data.find(lit, pos, end)
        while i >= 0:
            out.append(i)
            i = data.find(lit, i + 1, end)
        return out
    db, scratch = got
    ends: list[int] = []
    add_end = ends.append

    def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
        add_end(to)

    db.scan(memoryview(data)[pos:end], match_event_handler=on_match, scratch=scratch)  # type: ignore[type-var]
    return [pos + to - len(lit) for to in ends]


def _small_db(exprs: list[bytes], flags: list[int]) -> Database:
    """A block-mode database of a few fixed patterns with their own flags, from the disk cache when
    it is there (compiling the window finder's databases took ~30 ms in every process)."""
    import hyperscan

    ids = list(range(len(exprs)))
    cached = _cache_load(exprs, ids, tuple(flags))
    if cached is not None and cached[0] is not None:
        return cached[0]
    db = hyperscan.Database()
    db.compile(expressions=exprs, ids=ids, elements=len(exprs), flags=flags)
    _cache_store(exprs, ids, tuple(flags), db, ())
    return db


class WindowFinder:
    """Hyperscan searches for the window facts: which lines hold progress, where a stamp may be.

    Both only narrow down which lines the exact (slow) parsers look at; they never decide alone.
    """

    def __init__(self) -> None:
        import hyperscan

        self._hs = hyperscan
        som = hyperscan.HS_FLAG_SOM_LEFTMOST
        self._progress = _small_db([PROGRESS_HINT], [0])
        self._progress_scratch = hyperscan.Scratch(self._progress)
        self._lines = _small_db([PROGRESS_EXACT, MAYBE_PREFIX, NCCL_LINE, EMPTY_LINE, SPACE_LINE], [som, 0, 0, 0, 0])
        self._lines_scratch = hyperscan.Scratch(self._lines)
        #: ``MAYBE_PREFIX`` (id 0) and the census hints, in one pass over a source's first bytes (``_probe``)
        self._probe_db = _small_db([MAYBE_PREFIX, *RANK_PREFIX_HINTS], [0] * (1 + len(RANK_PREFIX_HINTS)))
        self._probe_scratch = hyperscan.Scratch(self._probe_db)
        self._probe_kept: tuple[bytes, tuple[list[int], list[int]]] | None = None
        self._hint = _small_db(list(STAMP_HINTS), [hyperscan.HS_FLAG_MULTILINE if multi else 0
                                                   for _, multi in dialects.stamp_hints()])
        self._hint_scratch = hyperscan.Scratch(self._hint)
        self._lane = _small_db(list(LANE_BREAKERS), [hyperscan.HS_FLAG_MULTILINE] * len(LANE_BREAKERS))
        #: an event rule's ``all`` patterns -> their prefilter database and its scratch (``may_match_all``)
        self._all: dict[tuple[str, ...], object] = {}
        self._lane_scratch = hyperscan.Scratch(self._lane)

    def may_match_all(self, patterns: tuple[str, ...], window: str | bytes | memoryview) -> bool:
        """False when one of ``patterns`` (an event rule's ``all``) surely has no match in ``window``
        (a text, or its UTF-8): Hyperscan in prefilter mode, on the window's UTF-8 with Unicode
        classes, reports every pattern whose ``regex`` search would find a match there (and some that
        would not); True when it cannot tell (a pattern it refuses, a text that is not UTF-8)."""
        got = self._all.get(patterns, self)
        if got is self:
            got = self._all[patterns] = self._compile_all(patterns)
        if got is None:
            return True
        assert isinstance(got, tuple)
        db, scratch = got
        if isinstance(window, str):
            try:
                data: bytes | memoryview = window.encode("utf-8")
            except UnicodeEncodeError:
                return True
        else:
            data = window
        seen: set[int] = set()

        def on_match(pid: int, _from: int, _to: int, _flags: int, _ctx: object) -> None:
            seen.add(pid)

        db.scan(data, match_event_handler=on_match, scratch=scratch)
        return len(seen) == len(patterns)

    def _compile_all(self, patterns: tuple[str, ...]) -> tuple[Database, object] | None:
        hs = self._hs
        flags = hs.HS_FLAG_PREFILTER | hs.HS_FLAG_UTF8 | hs.HS_FLAG_UCP | hs.HS_FLAG_ALLOWEMPTY | hs.HS_FLAG_SINGLEMATCH
        try:
            db = _small_db([_hs_regex(p) for p in patterns], [flags] * len(patterns))
            return db, hs.Scratch(db)
        except Exception:  # noqa: BLE001 - any pattern Hyperscan refuses: no prefilter, the regex decides
            return None

    def lane_breaks(self, data: bytes) -> list[int]:
        """Ends of the matches of ``LANE_BREAKERS`` in ``data`` (lines joined, each after a newline)."""
        ends: list[int] = []
        append = ends.append

        def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            append(to)

        self._lane.scan(data, match_event_handler=on_match, scratch=self._lane_scratch)
        return ends

    def progress_lines(self, data: bytes) -> list[int]:
        """Starts of the lines of ``data`` that may hold a progress marker, in order."""
        ends: list[int] = []
        append = ends.append

        def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            append(to)

        self._progress.scan(data, match_event_handler=on_match, scratch=self._progress_scratch)
        return _line_starts(data, ends)

    def classify(self, data: bytes, max_marks: int
                 ) -> tuple[list[int], list[int] | None, list[int], int]:
        """One pass over a window: the progress marks as mark start, mark end, ... (flat), every match in the
        order reported (``windows.progress_lines`` makes them each line's first, as ``re.search``
        finds it), the starts of the lines that may carry a prefix (None when more than
        ``max_marks``), of NCCL lines, and the number of blank lines (not counting the empty piece
        after a final newline)."""
        hits: list[list[int]] = [[], [], [], [], []]
        progress_hits: list[int] = []
        progress_append = progress_hits.append
        marks = hits[1]

        def on_match(pid: int, start: int, to: int, _flags: int, _ctx: object) -> bool | None:
            if pid == 0:
                progress_append(start)
                progress_append(to)
                return None
            hits[pid].append(to)
            if pid == 1 and len(marks) > max_marks:
                return True  # a combined stream: the caller reads it line by line anyway
            return None

        try:
            self._lines.scan(data, match_event_handler=on_match, scratch=self._lines_scratch)
        except self._hs.ScanTerminated:
            return [], None, [], 0
        rfind, find = data.rfind, data.find
        n = len(data)
        mark_starts = sorted({rfind(b"\n", 0, to - 1) + 1 for to in marks})
        nccl = _line_starts(data, hits[2])
        # lines of data (without its final newline) that are empty or only ASCII whitespace: those
        # between two newlines, and the first and the unterminated last line checked here
        count = len(hits[3]) + len(hits[4])
        first_end = find(b"\n")
        if not data[: first_end if first_end >= 0 else n].strip():
            count += 1
        if first_end >= 0 and not data.endswith(b"\n"):
            last = data[rfind(b"\n") + 1:]
            if last and not last.strip():
                count += 1
        return progress_hits, mark_starts, nccl, count

    def maybe_prefix_lines(self, data: bytes) -> list[int]:
        """Starts of the lines of ``data`` (line 0 not included) where ``MAYBE_PREFIX`` matches
        (from the newline before them; it holds no other newline), in order."""
        return self._probe(data)[0]

    def prefix_lines(self, data: bytes) -> list[int]:
        """Starts of the lines that may begin with an srun label or a ``[rankN]:`` tag (line 0 not included)."""
        return self._probe(data)[1]

    def _probe(self, data: bytes) -> tuple[list[int], list[int]]:
        """``maybe_prefix_lines`` and ``prefix_lines`` of ``data`` from one pass: the census of a rank's
        file (``statements.check_writers``) and the test of whether it is one writer's
        (``windows.one_writers``) read the same first bytes of a source, the same bytes object (the
        last answer is kept for it)."""
        kept = self._probe_kept
        if kept is not None and kept[0] is data:
            return kept[1]
        maybe: list[int] = []
        census: list[int] = []

        def on_match(pid: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            (maybe if pid == 0 else census).append(to)

        self._probe_db.scan(data, match_event_handler=on_match, scratch=self._probe_scratch)
        rfind = data.rfind
        found = (sorted({rfind(b"\n", 0, to - 1) + 1 for to in maybe}),
                 sorted({rfind(b"\n", 0, to - 1) + 1 for to in census}))
        self._probe_kept = (data, found)
        return found

    def first_hint(self, data: bytes, pos: int) -> int:
        """Offset of the first stamp hint at or after ``pos`` (in a line starting there or later), or -1."""
        found: list[int] = []

        def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> bool:
            found.append(to)
            return True  # stop at the first

        view = data[pos:] if pos else data
        try:
            self._hint.scan(view, match_event_handler=on_match, scratch=self._hint_scratch)
        except self._hs.ScanTerminated:
            pass
        if not found:
            return -1
        return pos + max(found[0] - 1, 0)

    def hints(self, data: bytes, lo: int, hi: int) -> list[int]:
        """The end offsets of the stamp hints in ``data[lo:hi]`` (``lo`` a line start), in order (no
        hint spans a newline, nor looks past its end: those ending by ``x`` are those of ``data[lo:x]``)."""
        found: list[int] = []
        add = found.append

        def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            add(lo + to)

        self._hint.scan(data[lo:hi], match_event_handler=on_match, scratch=self._hint_scratch)
        return found

    def last_hint(self, data: bytes, end: int) -> int:
        """Offset of the last stamp hint before ``end``, or -1 (searched in growing blocks from the end)."""
        size = 64 << 10
        hi = end
        while hi > 0:
            lo = max(0, hi - size)
            # start the block at a line start so that ``^`` means what it means in the whole window
            lo = data.rfind(b"\n", 0, lo) + 1 if lo else 0
            found: list[int] = []

            def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object, found: list[int] = found) -> None:
                found.append(to)

            self._hint.scan(data[lo:hi], match_event_handler=on_match, scratch=self._hint_scratch)
            if found:
                return lo + max(max(found) - 1, 0)
            hi = lo
            size *= 4
        return -1


_WINDOW_FINDER: WindowFinder | None = None


def window_finder() -> WindowFinder | None:
    """The process's window finder, or None without Hyperscan (the exact line-by-line path is used)."""
    global _WINDOW_FINDER
    if _WINDOW_FINDER is None and hyperscan_available():
        _WINDOW_FINDER = WindowFinder()
    return _WINDOW_FINDER


class Scanner(Protocol):
    """What the extractor asks of a scanner: its kind, the patterns it left to others, and the
    candidate lines of a buffer (line start -> pattern ids)."""

    name: str
    #: pattern ids it does not run (Hyperscan refused or missed them; they go to keywords)
    rejected: tuple[int, ...]

    def scan(self, buf: bytes | memoryview, end: int) -> dict[int, set[int]]: ...


def make_scanner(patterns: Sequence[Pattern], prefer: str | None = None,
                 probes: Callable[[], dict[int, list[str]]] | None = None) -> Scanner:
    """Hyperscan when it is installed, unless ``prefer`` (or ``$CORRELATE_SCANNER``) says otherwise."""
    choice = (prefer or os.environ.get(ENV_SCANNER) or "auto").lower()
    if choice in ("regex", "fallback", "keywords", "python"):
        return KeywordScanner(patterns)
    if choice not in ("auto", "hyperscan"):
        raise ValueError(f"unknown scanner {choice!r}: use 'hyperscan', 'regex' or 'auto'")
    if hyperscan_available():
        return HyperscanScanner(patterns, probes)
    if choice == "hyperscan":
        raise ValueError("the hyperscan scanner was asked for but the 'hyperscan' package is not installed")
    return KeywordScanner(patterns)
