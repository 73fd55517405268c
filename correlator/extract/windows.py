"""The head and tail windows of one source: per-writer first and last output, progress, step anchors.

Owns the bytes kept of a source's start (the head window) and end (the tail window), how big each
is (small for one writer's file, large for a combined stream), and the facts read from them: each
writer's first and last stamps, line count, last line, last progress step (with its stamp and
offset) and the step anchors the clocks are aligned on. Two paths read a window: the line-by-line
loop (``Windows.facts``'s fallback, the definition) and the fast path through Hyperscan's window
finder (``Windows.facts_fast``), proven equal by property tests. It must not know about rules or
matches.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from correlator.extract.dialects import stamp_hints
from correlator.extract.lines import (
    MAYBE_PREFIX_RE,
    PROGRESS,
    SLURM_STEP_TAIL,
    Context,
    line_who,
    one_writer,
    parse_line,
    with_stamp,
)
from correlator.extract.prefixes import NO_PREFIX, Prefix, nccl_origin
from correlator.extract.reader import own
from correlator.extract.statements import ONE_WRITER_PROBE
from correlator.extract.timestamps import Parsed
from correlator.model import Anchor, SourceInfo, StreamFacts, Who

if TYPE_CHECKING:
    from correlator.extract.scan import WindowFinder

#: the head and tail windows (per-writer first/last stamps, last step, step anchors) of a source
#: whose lines carry launcher prefixes: a combined stream, where every writer needs its share
HEAD_BYTES = 1 << 20
TAIL_BYTES = 2 << 20
#: the same windows for a source of one writer (at most one kind of prefix): its first stamps and
#: steps are in its first lines, its last ones in its last lines. The window is the first of these
#: sizes that holds a progress line (then the large one): a rank that printed thousands of lines
#: after its last step (a long dump) still shows that step
HEAD_SIZES_ONE = (64 << 10, 256 << 10)
TAIL_SIZES_ONE = (128 << 10, 512 << 10)
#: step anchors kept per writer and window: the first ones of the head window, the last ones of
#: the tail window. Clock offsets are medians over steps that every host logged: with 8 ranks a
#: host, 16 steps a rank are ~100 per host, plenty, while every step of 3 MiB of log made ~1 M
#: anchors in a 4096-rank job (32 a window still cost the global stage ~0.5 s there).
ANCHORS_PER_WINDOW = 8
#: what a progress line after the head's first stamped one must name to count (``Windows.facts``); the
#: progress match of most lines starts with one of them, else ``global_``/``global `` and one of them
_WORDS = (b"step", b"iter", b"Step")
_GLOBAL = (b"global_", b"global ")
#: lines read one by one from either end before the stamp hints are used to skip ahead
_FAST_PROBE_LINES = 32
#: more prefixed lines than this in a window: a combined stream, read line by line
_FAST_MAX_PREFIXED = 4096

#: ``prefixes._ANSI`` over bytes (its classes are ASCII: the same codes as in the decoded text)
_ANSI_B = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_STAMP_HINTS_B = tuple(re.compile(h, re.M if multi else 0) for h, multi in stamp_hints())

#: a writer's progress lines in a window, in line order: their starts, their steps, and where their
#: first ``PROGRESS`` match starts
Progress = tuple[list[int], list[int], list[int]]


class WindowScan(NamedTuple):
    """What the fast path learns of a window's bytes (``scan_window``)."""

    #: the prefixed writers' lines, their prefixes, and the set of those lines
    other: dict[tuple, list[int]]
    who_of: dict[tuple, Prefix]
    excluded: set[int]
    #: the progress lines by writer
    progress: dict[tuple, Progress]
    nccl_lines: list[int]
    #: the blank lines, the newlines
    blank: int
    newlines: int
    #: the kinds of launcher prefix (``MAYBE_PREFIX_RE``'s text) of its lines, as ``one_writers`` sees them
    kinds: set[bytes]
    #: whether a ``PROGRESS_EXACT`` match was found (then ``PROGRESS.search`` finds one)
    any_progress: bool


@dataclass
class Writer:
    """Running facts about one writer (prefix key) of a source."""

    lines: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    last_offset: int = 0
    last_step: int | None = None
    last_step_ns: int | None = None
    last_step_offset: int | None = None
    who: Who = field(default_factory=Who)


def add_anchors(anchors: dict[tuple, Anchor], new: list[tuple[tuple, Anchor]], head: bool) -> None:
    """Add a window's new anchors (in line order), at most ``ANCHORS_PER_WINDOW`` per writer."""
    per: dict[tuple, int] = {}
    keep: list[tuple[tuple, Anchor]] = []
    for akey, a in (new if head else reversed(new)):
        n = per.get(akey[2], 0)
        if n < ANCHORS_PER_WINDOW:
            per[akey[2]] = n + 1
            keep.append((akey, a))
    for akey, a in (keep if head else reversed(keep)):
        anchors[akey] = a


def one_writers(data: bytes, hyperscan: bool) -> bool:
    """``lines.one_writer(data)``; with ``hyperscan``, ``MAYBE_PREFIX_RE`` is tried only on the lines
    the window finder says it matches (``findall`` matches at newlines, each within its line, so
    its kinds are those matches), and the look stops at a second kind."""
    finder = None
    if hyperscan:
        from correlator.extract.scan import window_finder

        finder = window_finder()
    if finder is None:
        return one_writer(data)
    first = MAYBE_PREFIX_RE.match(b"\n" + data[:256])
    kinds = {first.group(0)} if first is not None else set()
    match = MAYBE_PREFIX_RE.match
    for s in finder.maybe_prefix_lines(data):
        m = match(data, s - 1)
        if m is not None:
            kinds.add(m.group(0))
            if len(kinds) > 1:
                return False
    return True


def _esc_lines(data: bytes, lo: int = 0, hi: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(start, bytes) of each line of ``data`` holding an ESC byte that starts in ``[lo, hi)``."""
    n = len(data)
    hi = n if hi is None else hi
    find, rfind = data.find, data.rfind
    i = find(b"\x1b", lo)
    while 0 <= i:
        s = rfind(b"\n", 0, i) + 1
        if s >= hi:
            return
        e = find(b"\n", i)
        e = n if e < 0 else e
        if s >= lo:
            yield s, data[s:e]
        i = find(b"\x1b", e)


def ansi_hides_no_prefix(data: bytes) -> bool:
    """Whether no line's ANSI codes hide a launcher prefix from ``MAYBE_PREFIX_RE`` (which the fast
    window path looks for in the raw bytes, where the line-by-line loop parses every line with the
    codes removed). The lines with codes are joined and stripped at once: no code spans a newline,
    and each ``MAYBE_PREFIX_RE`` match lies in the line after its newline."""
    lines = [raw for _s, raw in _esc_lines(data)]
    if not lines:
        return True
    bare = _ANSI_B.sub(b"", b"\n" + b"\n".join(lines))
    if MAYBE_PREFIX_RE.search(bare) is None:
        return True
    # (rare: a line that may hold a prefix once stripped) -- line by line, as the loop reads it
    match = MAYBE_PREFIX_RE.match
    return not any(match(b"\n" + _ANSI_B.sub(b"", raw)) and not match(b"\n" + raw) for raw in lines)


def ansi_hides_stamp(data: bytes, lo: int, hi: int) -> bool:
    """Whether a line starting in ``data[lo:hi]`` has ANSI codes that hide a stamp from the byte hints
    (the hints find none in its bytes, but would once the codes are removed): the fast path skips
    lines by the hints (``WindowFinder.first_hint``/``last_hint``), where the line-by-line loop
    parses every line with the codes removed."""
    for _s, raw in _esc_lines(data, lo, hi):
        bare = _ANSI_B.sub(b"", raw)
        if any(h.search(bare) for h in _STAMP_HINTS_B) and not any(h.search(raw) for h in _STAMP_HINTS_B):
            return True
    return False


def ansi_hides_nothing(data: bytes) -> bool:
    """Whether the fast window path may read ``data`` with its ANSI codes in place as far as the whole
    window goes: no line's codes hide a launcher prefix or a stamp from the byte hints (the lines the
    hints find are parsed with the codes removed, as the line-by-line loop parses every line;
    progress markers are found in the raw bytes by both paths). The fast path itself asks only about
    prefixes here, and about stamps for the lines its hint search passes over."""
    return ansi_hides_no_prefix(data) and not ansi_hides_stamp(data, 0, len(data))


class LastHints:
    """``WindowFinder.last_hint`` for one window asked at falling ``end``: each block is scanned once,
    its hints kept, not once per call. (A tail of progress-bar lines, each with hints -- ``00:03<01:21``
    -- and no stamp at its start, had every line rescan the 64 KiB before it and call back for each of
    its ~2,000 hints: 0.25 s CPU per GB of such a log.) The blocks a call scans are the ones
    ``last_hint`` would: 64 KiB before the lowest one scanned, then 4 times more while none has a hint."""

    def __init__(self, finder: WindowFinder, data: bytes) -> None:
        self.finder, self.data = finder, data
        #: the block scanned last, data[lo:hi], and the ends of its hints (offsets in ``data``)
        self.lo = self.hi = -1
        self.found: list[int] = []

    def last(self, end: int) -> int:
        """``finder.last_hint(data, end)``: the offset of the last stamp hint before ``end``, or -1."""
        if 0 < end < len(self.data) and self.data[end - 1] != 10:
            # (cut inside a line, a hint's last byte may match only there, against the cut: asked
            # as ``last_hint`` asks; the tail's walk asks at line ends, where none differs)
            return self.finder.last_hint(self.data, end)
        if not self.lo <= end <= self.hi:
            self.lo = self.hi = end
            self.found = []
        i = bisect_right(self.found, end)
        size = 64 << 10
        while not i:
            hi = self.lo
            if hi <= 0:
                return -1
            lo = max(0, hi - size)
            lo = self.data.rfind(b"\n", 0, lo) + 1 if lo else 0  # (a line start: ``^`` as in the window)
            self.lo, self.hi, self.found = lo, hi, self.finder.hints(self.data, lo, hi)
            i = len(self.found)
            size *= 4
        return self.found[i - 1] - 1  # (a hint is not empty: its last byte)


class _Hidden(Exception):
    """A line the stamp hints pass over has a stamp its ANSI codes hide from them (``Windows.facts_fast``)."""


_NUMPY: Any = None


def _numpy() -> Any:
    global _NUMPY
    if _NUMPY is None:
        from correlator.extract import reader

        reader.warm_up()
        _NUMPY = reader._np
        if _NUMPY:
            _numpy_tables()
    return _NUMPY


_BACK = _BACK_INDEX = _TENS = None  # (``progress_lines``' tables, made with numpy on first use)


def _numpy_tables() -> None:
    """``progress_lines``' constant arrays: how far back of a match's end each byte looked at lies,
    their index, and the power of ten of a digit there (a step has at most 9 digits: 10 bytes back)."""
    global _BACK, _BACK_INDEX, _TENS
    np = _NUMPY
    _BACK = np.arange(1, 11, dtype=np.int64)
    _BACK_INDEX = np.arange(10, dtype=np.int64)
    _TENS = 10 ** np.arange(10, dtype=np.int64)


def progress_lines(data: bytes, hits: list[int]) -> tuple[Progress, int]:
    """The progress lines of ``data`` from the window finder's ``PROGRESS_EXACT`` matches ``hits``
    (start, end, start, end, ...): each line's first match, as ``PROGRESS.search`` finds it on the
    line, and its step -- the digit run that ends the match (the words and separators before it hold
    no digit, and the run is at most 9 digits) --; not the lines whose match is a job step
    (``SLURM_STEP_TAIL``), nor an unterminated last line (its end is an end of buffer: the caller
    reads it with the exact pattern). Returned as (line starts, steps, match starts), in line order,
    with the number of newlines in ``data``. numpy over the matches (a 128 KiB window of a
    DeepSpeed log holds 300): no Python step per line."""
    np = _numpy()
    raw = np.frombuffer(data, np.uint8)
    if not hits:
        return ([], [], []), int(np.count_nonzero(raw == 10))
    h = np.array(hits, dtype=np.int64).reshape(-1, 2)
    if len(h) > 1 and not bool((h[1:, 0] >= h[:-1, 0]).all()):
        h = h[np.argsort(h[:, 0], kind="stable")]
    newlines = np.flatnonzero(raw == 10)
    line = np.searchsorted(newlines, h[:, 0])  # newlines before each match: its line's index
    first = np.empty(len(line), dtype=bool)
    first[0] = True
    np.not_equal(line[1:], line[:-1], out=first[1:])
    first &= line < len(newlines)  # (an unterminated last line: left to the caller)
    h, line = h[first], line[first]
    if not len(h):
        return ([], [], []), len(newlines)
    starts = np.where(line > 0, newlines[line - 1] + 1, 0)
    ends = h[:, 1]
    # the digits before each match's end, last first (a run has at most 9: the 10th byte back is not one)
    back = raw[np.maximum(ends[:, None] - _BACK, 0)] - np.uint8(48)
    count = (back < 10).argmin(axis=1)
    digits = back.astype(np.int64)
    digits[_BACK_INDEX >= count[:, None]] = 0
    steps = digits @ _TENS
    dots = np.flatnonzero(raw[np.minimum(ends, len(raw) - 1)] == 46)
    if len(dots):  # "*** STEP 612604.0 ON node14": not progress
        keep = np.ones(len(h), dtype=bool)
        for i in dots.tolist():
            if ends[i] < len(raw) and SLURM_STEP_TAIL.match(data, int(ends[i])):
                keep[i] = False
        starts, steps, h = starts[keep], steps[keep], h[keep]
    return (starts.tolist(), steps.tolist(), h[:, 0].tolist()), len(newlines)


def scan_window(data: bytes, finder: Any, start: int = 0, prev: WindowScan | None = None) -> WindowScan | None:
    """What the fast window path needs from a window's bytes, independent of any writer state:
    the prefixed writers' lines, the progress lines by writer, the NCCL lines and the number of
    blank lines; None when too many lines carry prefixes (a combined stream). With ``prev``, the
    result for ``data[:start]`` (``start`` a line start), only ``data[start:]`` is looked at."""
    view = data[start:] if start else data
    hits, marks, nccl_lines, blank = finder.classify(view, _FAST_MAX_PREFIXED)
    if marks is None:
        return None
    if start:
        marks = [m + start for m in marks]
        nccl_lines = [x + start for x in nccl_lines]
        if MAYBE_PREFIX_RE.match(data, start - 1):  # the slice's first line (after a newline)
            marks.insert(0, start)
    elif MAYBE_PREFIX_RE.match(b"\n" + data[:1 << 16]):
        marks.insert(0, 0)
    if len(marks) + (len(prev.excluded) if prev is not None else 0) > _FAST_MAX_PREFIXED:
        return None
    # the prefix kinds as ``one_writers`` tells them (its first line from its first 256 bytes)
    kinds: set[bytes] = set()
    match = MAYBE_PREFIX_RE.match
    if not start:
        first = match(b"\n" + data[:256])
        if first is not None:
            kinds.add(first.group(0))
    for s in marks:
        m = match(data, s - 1) if s else None
        if m is not None:
            kinds.add(m.group(0))
    n = len(data)
    plain = NO_PREFIX.key

    def span(s: int) -> tuple[int, int]:
        e = data.find(b"\n", s)
        return s, (n if e < 0 else e)

    # the few lines of prefixed writers, exactly parsed; every other line is the plain writer's
    other: dict[tuple, list[int]] = {}
    who_of: dict[tuple, Prefix] = {}
    excluded: set[int] = set()
    key_of: dict[int, tuple] = {}
    for s in marks:
        s, e = span(s)
        raw = data[s:e]
        if not raw.strip():
            continue
        prefix, _msg = parse_line(raw)
        if prefix.key == plain:
            continue
        excluded.add(s)
        key_of[s] = prefix.key
        other.setdefault(prefix.key, []).append(s)
        who_of.setdefault(prefix.key, prefix)
    # progress lines by writer: each line's first ``PROGRESS`` match and its step
    (starts, steps, at), newlines = progress_lines(view, hits)
    any_progress = bool(hits)
    if start:
        starts = [x + start for x in starts]
        at = [x + start for x in at]
    progress: dict[tuple, Progress] = {}
    theirs = {i for s in key_of for i in [bisect_left(starts, s)] if i < len(starts) and starts[i] == s}
    if theirs:  # progress lines of prefixed writers (few: the lines were few)
        for i, (s, step, a) in enumerate(zip(starts, steps, at)):
            ls, st, aa = progress.setdefault(key_of[s] if i in theirs else plain, ([], [], []))
            ls.append(s)
            st.append(step)
            aa.append(a)
    elif starts:
        progress[plain] = (starts, steps, at)
    if not data.endswith(b"\n"):  # the unterminated last line, with the exact pattern
        s = data.rfind(b"\n") + 1
        pm = PROGRESS.search(data, s)
        if pm is not None and not SLURM_STEP_TAIL.match(data, pm.end()):
            ls, st, aa = progress.setdefault(key_of.get(s, plain), ([], [], []))
            ls.append(s)
            st.append(int(pm.group(1)))
            aa.append(pm.start())
    if prev is not None:  # the lines before ``start`` come first
        p_other, p_who, p_excluded, p_progress, p_nccl, p_blank, p_newlines, p_kinds, p_any = prev
        other = {k: p_other.get(k, []) + other.get(k, []) for k in {**p_other, **other}}
        who_of = {**who_of, **p_who}
        excluded = p_excluded | excluded
        joined: dict[tuple, Progress] = {}
        for k in {**p_progress, **progress}:
            a0, b0, c0 = p_progress.get(k, ([], [], []))
            a1, b1, c1 = progress.get(k, ([], [], []))
            joined[k] = (a0 + a1, b0 + b1, c0 + c1)
        progress = joined
        nccl_lines = p_nccl + nccl_lines
        blank = p_blank + blank
        newlines = p_newlines + newlines
        kinds = p_kinds | kinds
        any_progress = p_any or any_progress
    return WindowScan(other, who_of, excluded, progress, nccl_lines, blank, newlines, kinds, any_progress)


class Windows:
    """One source's head and tail windows and the per-writer facts read from them."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.writers: dict[tuple, Writer] = {}
        self.anchors: dict[tuple, Anchor] = {}
        self.head = b""
        self.head_done = False
        #: the last TAIL_BYTES so far, from a line start (a view of the buffer while it is the whole source)
        self.tail: bytes | memoryview = b""
        #: whether the source is one writer's (decided on its first ONE_WRITER_PROBE bytes)
        self.one_writer: bool | None = None
        #: the window finder's last look: ((base offset, length) of the bytes, what it found there);
        #: a small source's head and tail windows are the same bytes, looked at once
        self.window_scan: tuple[tuple[int, int], WindowScan | None] | None = None
        #: whether the head's first N bytes hold a progress line, for the sizes of HEAD_SIZES_ONE asked
        self.head_progress: dict[int, bool] = {}

    @property
    def src(self) -> SourceInfo:
        return self.ctx.src

    # --- the bytes kept ---------------------------------------------------------------------------

    def add_head(self, data: bytes, begin: int, end: int, first: bytes | None = None) -> None:
        """The next bytes of a region, for the head window (read when it is full); ``first``, when
        given, is ``data[begin:begin + ONE_WRITER_PROBE]`` (cut at ``end``) already copied out for the
        writers' census: the same object is the head's start, so the window finder looks at it once."""
        if self.head_done:  # (the head window does not depend on the scan)
            return
        if first is not None and not self.head:
            self.head = first
            begin += len(first)
        # copied only as far as the next decision needs: a one-writer source's head is judged on its
        # first ONE_WRITER_PROBE bytes and is then at most that big (a whole rank's file was copied
        # here up to HEAD_BYTES, for its first 64 KiB)
        pos = begin
        while True:
            judged = self.one_writer is not None
            take = min(end - pos, (HEAD_BYTES if judged else ONE_WRITER_PROBE) - len(self.head))
            if take > 0:
                self.head += data[pos:pos + take]
                pos += take
            if len(self.head) >= self.head_limit():  # (which judges the probe once it is full)
                self.flush_head()
                self.head_done = True
                return
            if pos >= end or (take <= 0 and judged):
                return

    def add_tail(self, data: bytes, begin: int, end: int, whole: bool) -> None:
        """Keep the last TAIL_BYTES of the source after the region ``data[begin:end]``; ``whole``:
        the region is all of the source so far and all of ``data`` (the tail is then a view of it)."""
        tail = own(self.tail)
        if whole and not tail:
            if end > TAIL_BYTES:
                nl = data.find(b"\n", end - TAIL_BYTES, end)
                self.tail = memoryview(data)[nl + 1:] if nl >= 0 else b""
            else:
                self.tail = data
            return
        size = end - begin
        if size >= TAIL_BYTES:
            new_tail = data[end - TAIL_BYTES:end]
        else:
            new_tail = tail + (data if begin == 0 and end == len(data) else data[begin:end])
        if len(new_tail) >= TAIL_BYTES and len(tail) + size > TAIL_BYTES:
            new_tail = new_tail[-TAIL_BYTES:]
            nl = new_tail.find(b"\n")
            new_tail = new_tail[nl + 1:] if nl >= 0 else b""
        self.tail = new_tail

    def head_limit(self) -> int:
        """The size of the source's head window: for a source of one writer (judged on its first
        ``ONE_WRITER_PROBE`` bytes) the first of ``HEAD_SIZES_ONE`` that holds a progress line, else
        ``HEAD_BYTES``. A size the head has not reached yet is returned as it is (the head is flushed
        when it gets there, or at the end of a shorter source)."""
        if self.one_writer is None:
            if len(self.head) < ONE_WRITER_PROBE:
                return HEAD_BYTES
            self.one_writer = one_writers(self.head[:ONE_WRITER_PROBE], self.ctx.hyperscan)
        if not self.one_writer:
            return HEAD_BYTES
        for size in HEAD_SIZES_ONE:
            if len(self.head) < size:
                return size
            # (the head's first ``size`` bytes do not change as it grows: asked once per size)
            has = self.head_progress.get(size)
            if has is None:
                has = self.head_progress[size] = self._progress_in_head(size)
            if has:
                return size
        return HEAD_BYTES

    def _progress_in_head(self, size: int) -> bool:
        """``PROGRESS.search(self.head, 0, size)``, asked first of the window finder's look at the head
        window this size would make (which ``facts_fast`` then reads): a progress match it finds is one
        that search finds (only without one is the search made)."""
        scanned = self._scan(self._head_window(size), 0)
        if scanned is not None and scanned.any_progress:
            return True
        return PROGRESS.search(self.head, 0, size) is not None

    def tail_window(self, end_offset: int) -> bytes:
        """The tail window from the last ``TAIL_BYTES`` kept: for a source of one writer, the last of
        ``TAIL_SIZES_ONE`` bytes (from a line start) that hold a progress line and are one writer's.
        (``end_offset``: the source offset after its last byte.) With the window finder, whether a
        short window is one writer's and holds progress is read from the same pass that reads its
        facts next (``scan_window``)."""
        tail = self.tail
        if self.one_writer is False:
            return own(tail)
        for size in TAIL_SIZES_ONE:
            if len(tail) <= size:
                return own(tail)
            short = own(tail[-size:])
            short = short[short.find(b"\n") + 1:]
            scanned = self._scan(short, end_offset - len(short))
            if scanned is not None:
                one, has = len(scanned.kinds) <= 1, scanned.any_progress or PROGRESS.search(short) is not None
            else:
                one = one_writers(short, self.ctx.hyperscan)
                has = one and PROGRESS.search(short) is not None
            if not one:
                return own(tail)
            if has:
                return short
        return own(tail)

    def _scan(self, data: bytes, base_offset: int) -> WindowScan | None:
        """The window finder's look at ``data`` (at ``base_offset``), kept for ``facts_fast``: made
        once for the same bytes (a small source's head and tail windows are the same bytes), and for
        the head of a source under 2 MiB only the rest of its tail window is new. None without the
        window finder, or for a combined stream."""
        if not self.ctx.hyperscan or not data or not _numpy():
            return None
        from correlator.extract.scan import window_finder

        finder = window_finder()
        if finder is None:
            return None
        ws = self.window_scan
        if ws is None or ws[0] != (base_offset, len(data)):
            prev = ws[1] if ws is not None and ws[0][0] == base_offset and ws[0][1] < len(data) \
                and ws[1] is not None and data[ws[0][1] - 1:ws[0][1]] == b"\n" else None
            scanned = scan_window(data, finder, ws[0][1] if ws is not None and prev is not None else 0, prev)
            ws = self.window_scan = ((base_offset, len(data)), scanned)
        return ws[1]

    def flush_head(self) -> None:
        self.facts(self._head_window(self.head_limit()), 0, head=True)
        self.head = b""

    def _head_window(self, size: int) -> bytes:
        """The head's first ``size`` bytes up to their last newline (all of them without one)."""
        cut = self.head.rfind(b"\n", 0, size) + 1
        return self.head[:cut] if cut else self.head[:size]

    def finish(self, end_offset: int) -> None:
        """Read what is left: the head window if the source ended before it was full, the tail window
        (``end_offset``: the source offset after its last byte)."""
        if not self.head_done:
            self.flush_head()
        if self.tail:
            tail = self.tail_window(end_offset)
            self.facts(tail, end_offset - len(tail), head=False)

    def streams(self, lines_total: int) -> list[StreamFacts]:
        """Each writer's facts; a one-writer source's writer has all its lines."""
        src = self.src
        single = len(self.writers) <= 1 or src.file_rank is not None or src.file_local_rank is not None
        out = []
        for w in self.writers.values():
            lines = lines_total if single and len(self.writers) == 1 else w.lines
            out.append(StreamFacts(w.who, src.path, lines, w.first_ns, w.last_ns, w.last_offset,
                                   w.last_step, w.last_step_ns, src.attempt, w.last_step_offset))
        return out

    # --- the facts of one window ------------------------------------------------------------------

    def _stamp(self, raw: bytes) -> Parsed | None:
        return self.ctx.stamps.of_line(raw, False)  # (not observed: see Stamps.of)

    def facts(self, data: bytes, base_offset: int, head: bool) -> None:
        """Per-writer first/last stamps, last progress and step anchors from a head or tail window."""
        if self.facts_fast(data, base_offset, head):
            return
        writers, anchors, stamps = self.writers, self.anchors, self.ctx.stamps
        lines = data.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        offset = base_offset
        seen_first: set[tuple] = set()
        found: dict[tuple, Anchor] = {}  # this window's new step anchors, in line order
        for raw in lines:
            line_offset = offset
            offset += len(raw) + 1
            if not raw.strip():
                continue
            prefix, msg = parse_line(raw)
            key = prefix.key
            w = writers.get(key)
            if w is None:
                w = writers[key] = Writer(who=line_who(self.src, prefix, {}, ""))
            if w.who.host is None and b" NCCL " in raw:
                origin = nccl_origin(msg)
                if origin is not None:
                    w.who = Who(w.who.rank, w.who.local_rank, w.who.task, origin[0], origin[1])
            if head:
                if key in seen_first:
                    if b"step" not in raw and b"iter" not in raw and b"Step" not in raw:
                        continue
                p = stamps.of(with_stamp(prefix, msg), False)  # (not observed: see Stamps.of)
                if p is not None and key not in seen_first:
                    seen_first.add(key)
                    if w.first_ns is None or p.time_ns < w.first_ns:
                        w.first_ns = p.time_ns
            else:
                w.lines += 1
                w.last_offset = max(w.last_offset, line_offset)
                p = stamps.of(with_stamp(prefix, msg), False)  # (not observed: see Stamps.of)
                if p is not None:
                    w.last_ns = p.time_ns
            if head and p is None:
                continue
            pm = PROGRESS.search(raw)
            if pm is None or SLURM_STEP_TAIL.match(raw, pm.end()):
                continue
            step = int(pm.group(1))
            if w.last_step is None or step >= w.last_step:
                # a progress line counts even without a stamp of its own (its time is then unknown)
                w.last_step, w.last_step_ns = step, (p.time_ns if p is not None else None)
                w.last_step_offset = line_offset
            if p is None:
                continue
            akey = ("step", str(step), key)
            if akey not in anchors and akey not in found:
                found[akey] = Anchor("step", str(step), w.who, p.time_ns, self.src.path)
        add_anchors(anchors, list(found.items()), head)

    # The loop above decodes and parses every line of the head and tail windows: 3 MiB per source,
    # and for a job of many small files, every line twice. When no line of the window can carry a
    # launcher prefix (one writer: the usual one-file-per-rank case) the same facts follow from far
    # fewer lines: the first stamped line, the last non-blank and the last stamped line, and the
    # lines holding a progress marker, found by Hyperscan; only the lines a fact is read from are
    # decoded and parsed, with the same functions. Windows with prefixes, ANSI codes that hide a
    # prefix (``ansi_hides_no_prefix``) or a stamp among the lines the stamp hints pass over
    # (``ansi_hides_stamp``), or without Hyperscan take the loop above.

    def facts_fast(self, data: bytes, base_offset: int, head: bool) -> bool:
        """``facts`` for a window whose lines mostly carry no launcher prefix; False if the
        window is not like that (the caller then runs the line-by-line loop, and nothing was changed)."""
        if b"\x1b" in data and self.ctx.hyperscan and not ansi_hides_no_prefix(data):
            return False
        scanned = self._scan(data, base_offset)
        if scanned is None:
            return False
        from correlator.extract.scan import window_finder

        finder = window_finder()
        assert finder is not None  # (the scan was made with it)
        writers, anchors = self.writers, self.anchors
        other, who_of, excluded, progress, nccl_lines, blank_lines, newlines, _kinds, _any = scanned
        n = len(data)
        plain = NO_PREFIX.key
        esc = b"\x1b" in data

        def span(s: int) -> tuple[int, int]:
            e = data.find(b"\n", s)
            return s, (n if e < 0 else e)

        cache: dict[int, Parsed | None] = {}

        def stamp(s: int) -> Parsed | None:
            if s not in cache:
                a, b = span(s)
                cache[s] = self._stamp(data[a:b])
            return cache[s]

        def plain_lines_forward(start: int = 0) -> Iterator[int]:
            s = start
            while s < n:
                s, e = span(s)
                if s not in excluded and data[s:e].strip():
                    yield s
                s = e + 1

        def plain_lines_backward() -> Iterator[int]:
            e = n - 1 if data.endswith(b"\n") else n
            while e >= 0:
                s = data.rfind(b"\n", 0, e) + 1
                if s not in excluded and data[s:e].strip():
                    yield s
                e = s - 1

        def plain_first_stamp() -> int | None:
            probed, pos = 0, n
            for s in plain_lines_forward():
                if stamp(s) is not None:
                    return s
                probed += 1
                if probed >= _FAST_PROBE_LINES:
                    pos = span(s)[1] + 1
                    break
            while pos < n:  # then only lines with a stamp hint can have a stamp
                h = finder.first_hint(data, pos)
                ls = data.rfind(b"\n", 0, h) + 1 if h >= 0 else n
                if esc and ansi_hides_stamp(data, pos, ls):
                    raise _Hidden
                if h < 0:
                    return None
                ls, le = span(ls)
                if ls not in excluded and stamp(ls) is not None:
                    return ls
                pos = le + 1
            return None

        def plain_last_stamp() -> int | None:
            probed, end = 0, 0
            for s in plain_lines_backward():
                if stamp(s) is not None:
                    return s
                probed += 1
                end = s
                if probed >= _FAST_PROBE_LINES:
                    break
            else:
                return None
            end -= 1
            hints = LastHints(finder, data)
            while end > 0:
                h = hints.last(end)
                ls = data.rfind(b"\n", 0, h) + 1 if h >= 0 else 0
                if esc and ansi_hides_stamp(data, span(ls)[1] + 1 if h >= 0 else 0, end + 1):
                    raise _Hidden
                if h < 0:
                    return None
                if ls not in excluded and stamp(ls) is not None:
                    return ls
                end = ls - 1
            return None

        # the plain writer's first (head) or last (tail) stamped line, before anything is changed: a
        # stamp the hints cannot see sends the window to the loop
        plain_first = next(plain_lines_forward(), None)
        plain_at: int | None = None
        if plain_first is not None:
            try:
                plain_at = plain_first_stamp() if head else plain_last_stamp()
            except _Hidden:
                return False

        # writers, created in the order of their first non-blank line
        first_line: dict[tuple, int] = {k: ls[0] for k, ls in other.items()}
        if plain_first is not None:
            first_line[plain] = plain_first
        for k in sorted(first_line, key=first_line.__getitem__):
            if k not in writers:
                prefix = who_of.get(k, NO_PREFIX)
                writers[k] = Writer(who=line_who(self.src, prefix, {}, ""))

        # a writer without a host takes the one its first NCCL line names (anchors made before that
        # line keep the writer as it was)
        switched: dict[tuple, tuple[int, Who]] = {}
        for ls in nccl_lines:
            ls, le = span(ls)
            k = parse_line(data[ls:le])[0].key if ls in excluded else plain
            w = writers.get(k)
            if w is not None and w.who.host is None:
                origin = nccl_origin(parse_line(data[ls:le])[1])
                if origin is not None:
                    switched[k] = (ls, w.who)
                    w.who = Who(w.who.rank, w.who.local_rank, w.who.task, origin[0], origin[1])

        def who_at(k: tuple, s: int) -> Who:
            sw = switched.get(k)
            return sw[1] if sw is not None and s < sw[0] else writers[k].who

        new: list[tuple[int, str, tuple, Anchor]] = []
        for k in first_line:
            w = writers[k]
            mine = other.get(k)
            lines, steps, marks = progress.get(k, ([], [], []))
            if head:
                if mine is None:
                    f_at = plain_at
                else:
                    f_at = next((s for s in mine if stamp(s) is not None), None)
                if f_at is None:
                    continue  # no stamped line: progress lines are skipped in the head without a stamp
                f_p = stamp(f_at)
                assert f_p is not None
                if w.first_ns is None or f_p.time_ns < w.first_ns:
                    w.first_ns = f_p.time_ns
                # progress counts on the first stamped line, and after it on lines naming step/iter/Step
                lines, steps = self._after_first_stamp(data, f_at, lines, steps, marks)
                new += self._progress_facts(w, k, lines, steps, stamp, head=True, who_at=who_at,
                                            base_offset=base_offset)
                continue
            if mine is None:
                total = newlines - data.endswith(b"\n") + 1 - blank_lines  # (the lines of data[:-1] if it ends one)
                count = total - sum(len(v) for v in other.values())
                last_line = next(plain_lines_backward(), None)
                l_at = plain_at
            else:
                count = len(mine)
                last_line = mine[-1]
                l_at = next((s for s in reversed(mine) if stamp(s) is not None), None)
            if count <= 0 or last_line is None:
                continue
            w.lines += count
            w.last_offset = max(w.last_offset, base_offset + last_line)
            if l_at is not None:
                p = stamp(l_at)
                assert p is not None
                w.last_ns = p.time_ns
            new += self._progress_facts(w, k, lines, steps, stamp, head=False, who_at=who_at,
                                        base_offset=base_offset)
        add_anchors(anchors, [(akey, anchor) for _s, _step, akey, anchor in sorted(new, key=lambda x: x[0])], head)
        return True

    @staticmethod
    def _after_first_stamp(data: bytes, f_at: int, lines: list[int], steps: list[int], marks: list[int]
                           ) -> tuple[list[int], list[int]]:
        """The head's progress lines that count: the first stamped line's, and those after it that
        name step, iter or Step (most say it where their progress match starts)."""
        i = bisect_left(lines, f_at)
        out_lines: list[int] = []
        out_steps: list[int] = []
        startswith, find = data.startswith, data.find
        for j in range(i, len(lines)):
            s, m = lines[j], marks[j]
            if s != f_at and not startswith(_WORDS, m) and not (startswith(_GLOBAL, m) and startswith(_WORDS, m + 7)):
                e = find(b"\n", s)
                e = len(data) if e < 0 else e
                if find(b"step", s, e) < 0 and find(b"iter", s, e) < 0 and find(b"Step", s, e) < 0:
                    continue
            out_lines.append(s)
            out_steps.append(steps[j])
        return out_lines, out_steps

    def _progress_facts(self, w: Writer, key: tuple, lines: list[int], steps: list[int],
                        stamp: Callable[[int], Parsed | None], head: bool,
                        who_at: Callable[[tuple, int], Who], base_offset: int = 0
                        ) -> list[tuple[int, str, tuple, Anchor]]:
        """The last step and the new step anchors of one writer from its progress lines (their starts
        and steps, in line order), as the line-by-line loop would find them, parsing as few stamps as
        that allows. Anchors are returned with their line offsets, for the caller to insert in line order."""
        if not lines:
            return []
        anchors = self.anchors
        by_step: dict[int, list[int]] = {}
        for s, step in zip(lines, steps):
            at = by_step.get(step)
            if at is None:
                by_step[step] = [s]
            else:
                at.append(s)
        # last step: the largest step of the lines that count (in the head only stamped ones count),
        # with the time of the last such line that has it
        for step in sorted(by_step, reverse=True):
            if w.last_step is not None and step < w.last_step:
                break
            for s in reversed(by_step[step]):
                p = stamp(s)
                if p is None and head:
                    continue
                w.last_step, w.last_step_ns = step, (p.time_ns if p is not None else None)
                w.last_step_offset = base_offset + s
                break
            else:
                continue
            break
        # anchors: each new step's first stamped line; only the first (head) or last (tail)
        # ANCHORS_PER_WINDOW of them by line are kept, so steps are visited from that end (by their
        # first line, or their last) and the visit stops once no further step can place an anchor among them
        limit = ANCHORS_PER_WINDOW
        order = by_step if head else dict.fromkeys(reversed(steps))
        out: list[tuple[int, str, tuple, Anchor]] = []
        path = self.src.path
        for step in order:
            name = str(step)
            akey = ("step", name, key)
            if akey in anchors:
                continue
            starts = by_step[step]
            if len(out) >= limit:
                if head and starts[0] > max(o[0] for o in out):
                    break  # its anchor would lie after all kept ones
                if not head and starts[-1] < min(o[0] for o in out):
                    break
            for s in starts:
                p = stamp(s)
                if p is not None:
                    out.append((s, name, akey, Anchor("step", name, who_at(key, s), p.time_ns, path)))
                    break
            if len(out) > limit:  # keep the window's end of them
                out.sort(key=lambda o: o[0])
                out = out[:limit] if head else out[-limit:]
        return out
