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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from correlator.cache import cache_dir
from correlator.extract import dialects

if TYPE_CHECKING:  # hyperscan is imported where it is used (it is optional on some platforms)
    from hyperscan import Database

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
    # stands before it, so ``^`` becomes "a line start or where a message may start", and ``$`` is
    # dropped (which only widens a prefilter).
    return trim_tail(_drop_anchors(pattern)).encode("utf-8")


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


def group_end(p: str, i: int) -> int:
    """Index of the ``)`` closing the group ``p[i] == "("`` (escapes and character classes
    skipped); -1 if it is not closed."""
    depth, j, n = 0, i, len(p)
    while j < n:
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            j = class_end(p, j)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
        j += 1
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


class HyperscanScanner:
    """All patterns in one Hyperscan block-mode database; patterns it refuses fall back to keywords."""

    name = "hyperscan"

    def __init__(self, patterns: Sequence[Pattern], probes: Callable[[], dict[int, list[str]]] | None = None) -> None:
        import hyperscan

        self._hs = hyperscan
        flags = hyperscan.HS_FLAG_PREFILTER | hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_ALLOWEMPTY
        ids = [p.id for p in patterns]
        # keyed by the rules' own regexes and this module's source (which turns them into Hyperscan
        # expressions): a cached database costs no conversion of ~370 patterns
        sources = [p.regex.encode("utf-8", "surrogatepass") for p in patterns]
        key_flags = (flags, PROBE_VERSION if probes is not None else 0, _converter_digest())
        cached = _cache_load(sources, ids, key_flags)
        if cached is not None:
            db, rejected_ids = cached
        else:
            exprs = [_hs_regex(p.regex) for p in patterns]
            db, rejected_ids = _compile(hyperscan, exprs, ids, flags)
            if db is not None and probes is not None:
                db, rejected_ids = _without_missed(hyperscan, exprs, ids, flags, db, rejected_ids, probes(),
                                                   {p.id: p.regex for p in patterns})
            _cache_store(sources, ids, key_flags, db, rejected_ids)
        rejected = [p for p in patterns if p.id in set(rejected_ids)]
        self.rejected = tuple(p.id for p in rejected)
        self._db = db
        if db is not None:
            self._scratch = hyperscan.Scratch(db)
        self._fallback = KeywordScanner(rejected) if rejected else None
        #: Hyperscan reports (and fallback keyword hits) so far: a statistic, each source's share
        #: of it is in its digest
        self.reports = 0

    def scan(self, buf: bytes | memoryview, end: int) -> dict[int, set[int]]:
        data = bytes(buf[:end]) if isinstance(buf, memoryview) or end != len(buf) else buf
        return self.scan_range(data, 0, len(data))

    def scan_range(self, data: bytes, begin: int, end: int) -> dict[int, set[int]]:
        """Candidate lines of ``data[begin:end]`` (``begin`` a line start, ``end`` a line end or
        ``len(data)``), as offsets in ``data``; the range is scanned in place, not copied."""
        ends: list[tuple[int, int]] = []
        if self._db is not None:
            append = ends.append

            def on_match(pid: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                append((to, pid))

            whole = begin == 0 and end == len(data)
            # the stub types ``data`` as str | bytes; the extension takes any buffer, a view too
            self._db.scan(data if whole else memoryview(data)[begin:end],  # type: ignore[type-var]
                          match_event_handler=on_match, scratch=self._scratch)
            self.reports += len(ends)
        lines: dict[int, set[int]] = {}
        rfind, find = data.rfind, data.find
        last_start, last_end, last_set = -1, -1, None
        for to, pid in ends:
            to += begin
            if last_start <= to - 1 < last_end and last_set is not None:
                last_set.add(pid)
                continue
            # the byte that completed the match belongs to the line ending at the next newline
            at = to - 1 if to > begin else begin
            start = rfind(b"\n", begin, at) + 1 or begin
            got = lines.get(start)
            if got is None:
                got = lines[start] = set()
            got.add(pid)
            nl = find(b"\n", at, end)
            last_start, last_end, last_set = start, (nl if nl >= 0 else end), got
        if self._fallback is not None:
            before = self._fallback.reports
            for start, pids in self._fallback.scan_range(data, begin, end).items():
                lines.setdefault(start, set()).update(pids)
            self.reports += self._fallback.reports - before
        return lines


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


#: compiled databases kept in the cache (one per distinct rule set: edits, --rules folders, tests)
CACHE_FILES = 32


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

    def may_match_all(self, patterns: tuple[str, ...], window: str) -> bool:
        """False when one of ``patterns`` (an event rule's ``all``) surely has no match in ``window``:
        Hyperscan in prefilter mode, on the window's UTF-8 with Unicode classes, reports every
        pattern whose ``regex`` search would find a match there (and some that would not); True
        when it cannot tell (a pattern it refuses, a text that is not UTF-8)."""
        got = self._all.get(patterns, self)
        if got is self:
            got = self._all[patterns] = self._compile_all(patterns)
        if got is None:
            return True
        assert isinstance(got, tuple)
        db, scratch = got
        try:
            data = window.encode("utf-8")
        except UnicodeEncodeError:
            return True
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
