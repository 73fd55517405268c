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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

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
#: lines read one by one from either end before the stamp hints are used to skip ahead
_FAST_PROBE_LINES = 32
#: more prefixed lines than this in a window: a combined stream, read line by line
_FAST_MAX_PREFIXED = 4096

#: ``prefixes._ANSI`` over bytes (its classes are ASCII: the same codes as in the decoded text)
_ANSI_B = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_STAMP_HINTS_B = tuple(re.compile(h, re.M if multi else 0) for h, multi in stamp_hints())

#: what the fast path learns of a window's bytes (``scan_window``): the prefixed writers' lines,
#: their prefixes, the set of those lines, the progress lines by writer, the NCCL lines, the blank lines
WindowScan = tuple[dict[tuple, list[int]], dict[tuple, Prefix], set[int], dict[tuple, list[tuple[int, int, int]]],
                   list[int], int]


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


def ansi_hides_nothing(data: bytes) -> bool:
    """Whether the fast window path may read ``data`` with its ANSI codes in place: on no line do
    the codes hide a launcher prefix or a stamp from the byte hints (the lines the hints find are
    parsed with the codes removed, as the line-by-line loop parses every line; progress markers
    are found in the raw bytes by both paths)."""
    n = len(data)
    i = data.find(b"\x1b")
    while i >= 0:
        s = data.rfind(b"\n", 0, i) + 1
        e = data.find(b"\n", i)
        e = n if e < 0 else e
        raw = data[s:e]
        bare = _ANSI_B.sub(b"", raw)
        if MAYBE_PREFIX_RE.match(b"\n" + bare) and not MAYBE_PREFIX_RE.match(b"\n" + raw):
            return False
        if any(h.search(bare) for h in _STAMP_HINTS_B) and not any(h.search(raw) for h in _STAMP_HINTS_B):
            return False
        i = data.find(b"\x1b", e)
    return True


def scan_window(data: bytes, finder: Any, start: int = 0, prev: WindowScan | None = None) -> WindowScan | None:
    """What the fast window path needs from a window's bytes, independent of any writer state:
    the prefixed writers' lines, the progress lines by writer, the NCCL lines and the number of
    blank lines; None when too many lines carry prefixes (a combined stream). With ``prev``, the
    result for ``data[:start]`` (``start`` a line start), only ``data[start:]`` is looked at."""
    progress_starts, marks, nccl_lines, blank = finder.classify(data[start:] if start else data, _FAST_MAX_PREFIXED)
    if marks is None:
        return None
    if start:
        progress_starts = [(a + start, b + start, c + start) for a, b, c in progress_starts]
        marks = [m + start for m in marks]
        nccl_lines = [x + start for x in nccl_lines]
        if MAYBE_PREFIX_RE.match(data, start - 1):  # the slice's first line (after a newline)
            marks.insert(0, start)
    elif MAYBE_PREFIX_RE.match(b"\n" + data[:1 << 16]):
        marks.insert(0, 0)
    if len(marks) + (len(prev[2]) if prev is not None else 0) > _FAST_MAX_PREFIXED:
        return None
    n = len(data)
    plain = NO_PREFIX.key

    def span(s: int) -> tuple[int, int]:
        e = data.find(b"\n", s)
        return s, (n if e < 0 else e)

    # the few lines of prefixed writers, exactly parsed; every other line is the plain writer's
    other: dict[tuple, list[int]] = {}
    who_of: dict[tuple, Prefix] = {}
    excluded: set[int] = set()
    for s in marks:
        s, e = span(s)
        raw = data[s:e]
        if not raw.strip():
            continue
        prefix, _msg = parse_line(raw)
        if prefix.key == plain:
            continue
        excluded.add(s)
        other.setdefault(prefix.key, []).append(s)
        who_of.setdefault(prefix.key, prefix)
    # progress lines by writer: (line start, step, line end) where ``PROGRESS`` matches; the
    # step is the digit run that ends the line's first match
    progress: dict[tuple, list[tuple[int, int, int]]] = {}
    digits = b"0123456789"
    for s, _a, b in progress_starts:
        if SLURM_STEP_TAIL.match(data, b):
            continue
        d = b
        while d > _a and data[d - 1] in digits:
            d -= 1
        e = data.find(b"\n", b)
        k = parse_line(data[s:e])[0].key if s in excluded else plain
        progress.setdefault(k, []).append((s, int(data[d:b]), n if e < 0 else e))
    if not data.endswith(b"\n"):  # the unterminated last line, with the exact pattern
        s = data.rfind(b"\n") + 1
        pm = PROGRESS.search(data, s)
        if pm is not None and not SLURM_STEP_TAIL.match(data, pm.end()):
            k = parse_line(data[s:])[0].key if s in excluded else plain
            progress.setdefault(k, []).append((s, int(pm.group(1)), n))
    if prev is not None:  # the lines before ``start`` come first
        p_other, p_who, p_excluded, p_progress, p_nccl, p_blank = prev
        other = {k: p_other.get(k, []) + other.get(k, []) for k in {**p_other, **other}}
        who_of = {**who_of, **p_who}
        excluded = p_excluded | excluded
        progress = {k: p_progress.get(k, []) + progress.get(k, []) for k in {**p_progress, **progress}}
        nccl_lines = p_nccl + nccl_lines
        blank = p_blank + blank
    return other, who_of, excluded, progress, nccl_lines, blank


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

    @property
    def src(self) -> SourceInfo:
        return self.ctx.src

    # --- the bytes kept ---------------------------------------------------------------------------

    def add_head(self, data: bytes, begin: int, end: int) -> None:
        """The next bytes of a region, for the head window (read when it is full)."""
        if self.head_done:  # (the head window does not depend on the scan)
            return
        self.head += data[begin:min(end, begin + HEAD_BYTES - len(self.head))]
        if len(self.head) >= self.head_limit():
            self.flush_head()
            self.head_done = True

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
            if len(self.head) < size or PROGRESS.search(self.head, 0, size):
                return size
        return HEAD_BYTES

    def tail_window(self) -> bytes:
        """The tail window from the last ``TAIL_BYTES`` kept: for a source of one writer, the last of
        ``TAIL_SIZES_ONE`` bytes (from a line start) that hold a progress line and are one writer's."""
        tail = self.tail
        if self.one_writer is False:
            return own(tail)
        for size in TAIL_SIZES_ONE:
            if len(tail) <= size:
                return own(tail)
            short = own(tail[-size:])
            short = short[short.find(b"\n") + 1:]
            if not one_writers(short, self.ctx.hyperscan):
                return own(tail)
            if PROGRESS.search(short):
                return short
        return own(tail)

    def flush_head(self) -> None:
        head = self.head[:self.head_limit()]
        cut = head.rfind(b"\n") + 1
        self.facts(head[:cut] if cut else head, 0, head=True)
        self.head = b""

    def finish(self, end_offset: int) -> None:
        """Read what is left: the head window if the source ended before it was full, the tail window
        (``end_offset``: the source offset after its last byte)."""
        if not self.head_done:
            self.flush_head()
        if self.tail:
            tail = self.tail_window()
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
    # lines holding a progress marker, found by Hyperscan; only those are decoded and parsed, with
    # the same functions. Windows with prefixes, ANSI codes that hide a prefix or a stamp from the byte
    # hints (``ansi_hides_nothing``), or without Hyperscan take the loop above.

    def facts_fast(self, data: bytes, base_offset: int, head: bool) -> bool:
        """``facts`` for a window whose lines mostly carry no launcher prefix; False if the
        window is not like that (the caller then runs the line-by-line loop)."""
        if not self.ctx.hyperscan or not data or (b"\x1b" in data and not ansi_hides_nothing(data)):
            return False
        from correlator.extract.scan import window_finder

        finder = window_finder()
        if finder is None:
            return False
        writers, anchors = self.writers, self.anchors
        # a small source's head and tail windows are the same bytes: look at them once
        # (and the head of a source under 2 MiB is the start of its tail window: only the rest is new)
        ws = self.window_scan
        if ws is None or ws[0] != (base_offset, len(data)):
            prev = ws[1] if ws is not None and ws[0][0] == base_offset and ws[0][1] < len(data) \
                and ws[1] is not None and data[ws[0][1] - 1:ws[0][1]] == b"\n" else None
            scanned = scan_window(data, finder, ws[0][1] if ws is not None and prev is not None else 0, prev)
            ws = self.window_scan = ((base_offset, len(data)), scanned)
        if ws[1] is None:
            return False
        other, who_of, excluded, progress, nccl_lines, blank_lines = ws[1]
        n = len(data)
        plain = NO_PREFIX.key

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
                if h < 0:
                    return None
                ls, le = span(data.rfind(b"\n", 0, h) + 1)
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
            while end > 0:
                h = finder.last_hint(data, end)
                if h < 0:
                    return None
                ls, _le = span(data.rfind(b"\n", 0, h) + 1)
                if ls not in excluded and stamp(ls) is not None:
                    return ls
                end = ls - 1
            return None

        # writers, created in the order of their first non-blank line
        first_line: dict[tuple, int] = {k: ls[0] for k, ls in other.items()}
        plain_first = next(plain_lines_forward(), None)
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
            if head:
                if mine is None:
                    f_at = plain_first_stamp()
                else:
                    f_at = next((s for s in mine if stamp(s) is not None), None)
                if f_at is None:
                    continue  # no stamped line: progress lines are skipped in the head without a stamp
                f_p = stamp(f_at)
                assert f_p is not None
                if w.first_ns is None or f_p.time_ns < w.first_ns:
                    w.first_ns = f_p.time_ns
                # progress counts on the first stamped line, and after it on lines naming step/iter/Step
                eligible = [(s, step, e) for s, step, e in progress.get(k, ())
                            if s == f_at or (s > f_at and (data.find(b"step", s, e) >= 0
                                                           or data.find(b"iter", s, e) >= 0
                                                           or data.find(b"Step", s, e) >= 0))]
                new += self._progress_facts(w, k, eligible, stamp, head=True, who_at=who_at,
                                            base_offset=base_offset)
                continue
            if mine is None:
                body_end = n - 1 if data.endswith(b"\n") else n
                total = data.count(b"\n", 0, body_end) + 1 - blank_lines
                count = total - sum(len(v) for v in other.values())
                last_line = next(plain_lines_backward(), None)
                l_at = plain_last_stamp()
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
            new += self._progress_facts(w, k, progress.get(k, []), stamp, head=False, who_at=who_at,
                                        base_offset=base_offset)
        add_anchors(anchors, [(akey, anchor) for _s, _step, akey, anchor in sorted(new, key=lambda x: x[0])], head)
        return True

    def _progress_facts(self, w: Writer, key: tuple, progress: list[tuple[int, int, int]],
                        stamp: Callable[[int], Parsed | None], head: bool,
                        who_at: Callable[[tuple, int], Who], base_offset: int = 0
                        ) -> list[tuple[int, str, tuple, Anchor]]:
        """The last step and the new step anchors of one writer from its progress lines, as the
        line-by-line loop would find them, parsing as few stamps as that allows. Anchors are
        returned with their line offsets, for the caller to insert in line order."""
        if not progress:
            return []
        anchors = self.anchors
        by_step: dict[int, list[int]] = {}
        for s, step, _end in progress:
            by_step.setdefault(step, []).append(s)
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
        # ANCHORS_PER_WINDOW of them by line are kept, so steps are visited from that end and the
        # visit stops once no further step can place an anchor among them
        limit = ANCHORS_PER_WINDOW
        steps = [(st, ss) for st, ss in by_step.items() if ("step", str(st), key) not in anchors]
        steps.sort(key=(lambda x: x[1][0]) if head else (lambda x: -x[1][-1]))
        out: list[tuple[int, str, tuple, Anchor]] = []
        for step, starts in steps:
            if len(out) >= limit:
                if head and starts[0] > max(o[0] for o in out):
                    break  # its anchor would lie after all kept ones
                if not head and starts[-1] < min(o[0] for o in out):
                    break
            for s in starts:
                p = stamp(s)
                if p is not None:
                    akey = ("step", str(step), key)
                    out.append((s, str(step), akey, Anchor("step", str(step), who_at(key, s), p.time_ns,
                                                           self.src.path)))
                    break
            if len(out) > limit:  # keep the window's end of them
                out.sort(key=lambda o: o[0])
                out = out[:limit] if head else out[-limit:]
        return out
