"""What one line of a source says, read the same way by every part of the extractor.

Owns the line spans of a buffer (``Buffer``: a region with the bytes kept before it, the same
writer's neighbouring lines), how a raw line is decoded (over-long lines cut, ANSI removed) and
split into its launcher prefix and message, who wrote it (``line_who``), its stamp (``Stamps``: the
source's timestamp parser and what it had to assume), and whether a run of lines is one writer's.
It keeps no state of a source but ``Stamps`` and ``Context``; it must not know about rules or
matches.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import tzinfo
from itertools import accumulate, repeat
from operator import add

from correlator.extract.prefixes import Prefix, nccl_origin, rank_in_text, split_prefix, strip_ansi
from correlator.extract.scan import MAYBE_PREFIX, Scanner, literal_places
from correlator.extract.timestamps import Parsed, StampParser, may_hold_stamp_bytes
from correlator.model import SourceInfo, Who
from correlator.model.vocabulary import Capture

#: a line longer than this is cut for matching and display (the rest is still scanned): its start,
#: the start of its last ``\r`` frame and its end are kept (``long_line_parts``)
MAX_LINE_BYTES = 1 << 20
#: of an over-long line, the bytes kept of its last frame's start and of its end
LONG_LINE_END_BYTES = 64 << 10
#: how far (bytes) the same writer's neighbouring lines are looked for in an interleaved stream
WRITER_WINDOW = 512 << 10
#: how many lines around a candidate are searched for a stamp or for context
LOOK_LINES = 400

PROGRESS = re.compile(rb"(?i)\b(?:global[_ ]step|step|iteration|iter)\b\s*[=:]?\s*(\d{1,9})\b")
#: what follows the number of slurmstepd's "*** STEP 612604.0 ON node14 CANCELLED ...": a job step,
#: not training progress (checked where a ``PROGRESS`` match ends, in both window paths)
SLURM_STEP_TAIL = re.compile(rb"\.\d+ ON ")
#: a line start that may hold a launcher prefix: a superset of what ``split_prefix`` recognises
#: (Unicode spaces and digits included), so that only prefix-free windows take the fast path
MAYBE_PREFIX_RE = re.compile(MAYBE_PREFIX)
_SYSLOG_HOST = re.compile(r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT[\d:.,+-]+) ([\w.-]+) kernel: ")
_WRITER_TAG = re.compile(rb"(?:\s{0,6}\d{1,6}: )?\[(?!rank\d)[A-Za-z_]+\d{1,5}\]:")
_FULL_DATE = re.compile(rb"(?:19|20)\d\d-[01]\d-[0-3]\d[T _][0-2]\d:[0-5]\d:[0-6]\d")


class Stamps:
    """A source's stamps: the parser (its zone, the year reference for year-less stamps) and
    whether any stamp had to assume a zone or infer a year."""

    def __init__(self, tz: tzinfo | None, reference_ns: int | None) -> None:
        self.parser = StampParser(tz, reference_ns, reference_is_bound=reference_ns is not None)
        self.tz_assumed = False
        self.year_inferred = False

    def of(self, msg: str, observe: bool = True) -> Parsed | None:
        """The line's stamp; a full date also becomes the reference for year-less stamps after it
        (``observe``: not from the head/tail windows, whose two paths visit lines in different orders,
        nor from the lines an inherited time is read from: a kept match is built when its region ends,
        and what it reads there may lie past lines parsed before it)."""
        p = self.parser.parse(msg)
        if p is not None:
            self.took(p, observe)
        return p

    def took(self, p: Parsed, observe: bool = True) -> None:
        """What a stamp parsed for a line says of the source: its flags, and a full date becomes the
        reference (``observe``, see ``of``). ``replay`` calls it for a stamp a worker parsed."""
        if p.tz_assumed:
            self.tz_assumed = True
        if p.year_inferred:
            self.year_inferred = True
        elif observe:
            self.parser.observe(p)

    def of_line(self, raw: bytes, observe: bool = True) -> Parsed | None:
        if not may_hold_stamp_bytes(raw):
            return None  # (what ``of`` would say of it, without splitting its prefix)
        prefix, msg = parse_line(raw)
        return self.of(with_stamp(prefix, msg), observe)

    def refresh_reference(self, data: bytes, begin: int = 0, end: int | None = None) -> None:
        """Year-less stamps (glog, syslog) take their year from the nearest full date of the same
        file, not from its modification time or today: look for one at the start of each region."""
        end = len(data) if end is None else end
        m = _FULL_DATE.search(data, begin, min(end, begin + (1 << 20)))
        if m is None:
            return
        line_start = max(begin, data.rfind(b"\n", begin, m.start()) + 1)
        p = self.parser.parse(data[line_start:m.end() + 40].decode("utf-8", "replace"))
        if p is not None and not p.year_inferred:
            self.parser.observe(p)


@dataclass
class Context:
    """What every part of one source's extraction reads: the source (its file rank is dropped when
    its lines turn out to be several ranks'), its stamps and the scanner finding its candidates."""

    src: SourceInfo
    stamps: Stamps
    #: finds the candidate lines: the engine's, or a replay of pieces scanned elsewhere
    scanner: Scanner

    @property
    def hyperscan(self) -> bool:
        return self.scanner.name == "hyperscan"


class Buffer:
    """A line-aligned region of the source with the bytes kept before it."""

    def __init__(self, data: bytes, begin: int, base_offset: int, base_line: int) -> None:
        self.data = data  # kept history + new region
        self.begin = begin  # index in data where the new region starts
        self.base_offset = base_offset  # source offset of data[0]
        self.base_line = base_line  # 1-based line number of the line starting at data[begin]
        #: literal -> [its places in ``data`` found so far, where they were looked for from, to]
        self._found: dict[bytes, list] = {}

    def holds_before(self, lit: bytes, lo: int, start: int) -> bool:
        """Whether ``lit`` lies wholly in ``data[lo:start]`` (``data.rfind(lit, lo, start) >= 0``).
        Candidates come in line order, so each literal's places are looked for once, ahead of the
        last query and no further back than ``lo``: a block of 100,000 candidates does not search the
        64 KiB before each (a context rule's ``context_requires``), only each byte once, and a sparse
        one only each candidate's 64 KiB."""
        if not lit:
            return lo <= start
        data = self.data
        st = self._found.get(lit)
        if st is None:
            st = self._found[lit] = [[], lo, lo]
        at, floor, pos = st
        if lo < floor:  # (not in line order: look the plain way)
            return data.rfind(lit, lo, start) >= 0
        if lo > pos:
            # a candidate a megabyte after the last one looks through its own 64 KiB, not the
            # megabyte: the places before ``lo`` are not recorded, so from here on a question from
            # further back is answered the plain way (the record holds every place from its floor)
            at.clear()
            st[1] = pos = lo
        found = literal_places(data, lit, pos, start)  # every place p with pos <= p <= start - len(lit)
        if found:
            at += found
            pos = found[-1] + 1
        st[2] = max(pos, start - len(lit) + 1)
        k = bisect_left(at, lo)
        return k < len(at) and at[k] + len(lit) <= start

    def line_at(self, start: int) -> tuple[int, int]:
        end = self.data.find(b"\n", start)
        return start, (len(self.data) if end < 0 else end)

    def line_spans(self, starts: list[int]) -> tuple[list[int], list[bytes]]:
        """The ends and bytes of the lines at ``starts`` (in order; only the last may end without a
        newline, at the data's end), found in C: the lanes' candidate lines."""
        data = self.data
        ends = list(map(data.find, repeat(b"\n"), starts))
        if ends and ends[-1] < 0:
            ends[-1] = len(data)
        return ends, list(map(data.__getitem__, map(slice, starts, ends)))

    def raw_lines(self, starts: list[int]) -> list[bytes]:
        """``data[s:e]`` for each line start ``s`` of ``starts`` (in order), ``(s, e) = line_at(s)``."""
        data = self.data
        find = data.find
        out = [data[s:find(b"\n", s)] for s in starts]
        last = data.rfind(b"\n")  # (the lines after the last newline end at the data's end)
        k = len(starts)
        while k and starts[k - 1] > last:
            k -= 1
            out[k] = data[starts[k]:]
        return out

    def lines_before(self, start: int, n: int) -> Iterator[tuple[int, int]]:
        """Up to ``n`` (start, end) spans of the lines before ``start``, nearest first."""
        data = self.data
        end = start - 1
        for _ in range(n):
            if end < 0:
                return
            s = data.rfind(b"\n", 0, end) + 1
            yield s, end
            end = s - 1

    def lines_after(self, start: int, n: int) -> Iterator[tuple[int, int]]:
        data = self.data
        nl = data.find(b"\n", start)
        for _ in range(n):
            if nl < 0:
                return
            s = nl + 1
            nl = data.find(b"\n", s)
            if s >= len(data):
                return
            yield s, (len(data) if nl < 0 else nl)

    def writer_before(self, start: int, pbytes: bytes, n: int) -> Iterator[tuple[int, int]]:
        """Up to ``n`` spans of the lines before ``start`` that begin with ``pbytes`` (the same
        writer), nearest first. In a stream interleaving a thousand ranks the same rank's previous
        line can be a thousand lines back: one ``rfind`` jumps there."""
        if not pbytes:
            yield from self.lines_before(start, n)
            return
        data = self.data
        needle = b"\n" + pbytes
        end = start
        floor = max(0, start - WRITER_WINDOW)
        for _ in range(n):
            i = data.rfind(needle, floor, end)
            if i < 0:
                if floor == 0 and end > len(pbytes) and data.startswith(pbytes):
                    e = data.find(b"\n")
                    if 0 <= e < start:
                        yield 0, e
                return
            s = i + 1
            e = data.find(b"\n", s)
            if e < 0 or e >= start:  # the candidate line itself (or beyond)
                end = i
                continue
            yield s, e
            end = i

    def writer_after(self, start: int, pbytes: bytes, n: int) -> Iterator[tuple[int, int]]:
        if not pbytes:
            yield from self.lines_after(start, n)
            return
        data = self.data
        needle = b"\n" + pbytes
        pos = data.find(b"\n", start)
        ceiling = start + WRITER_WINDOW
        for _ in range(n):
            if pos < 0:
                return
            i = data.find(needle, pos, ceiling)
            if i < 0:
                return
            s = i + 1
            e = data.find(b"\n", s)
            yield s, (len(data) if e < 0 else e)
            pos = e

    def context(self, start: int, pbytes: bytes, n_before: int, n_after: int) -> tuple[list[str], list[str]]:
        """The messages of the same writer's ``n_before`` lines before ``start`` and ``n_after`` after."""
        before = list(self.writer_before(start, pbytes, n_before))
        before.reverse()
        return self.messages(before), self.messages(list(self.writer_after(start, pbytes, n_after)))

    def messages(self, spans: list[tuple[int, int]]) -> list[str]:
        """``parse_line(line)[1].rstrip("\\r")`` of each (start, end) span, in order. Adjacent lines
        (a writer's own file) without ANSI codes are decoded at once (a newline is never part of a
        character, so decoding them joined and splitting gives each line's decoding); only a line
        that may start with a launcher prefix (``MAYBE_PREFIX_RE``, a superset) has its prefix split
        off: the others are their own message."""
        data = self.data
        if len(spans) < 2:
            return [parse_line(data[s:e])[1].rstrip("\r") for s, e in spans]
        lo, hi = spans[0][0], spans[-1][1]
        # (line spans in order are adjacent when no other newline lies between the first and the last)
        if (hi - lo > MAX_LINE_BYTES or data.count(b"\n", lo, hi) != len(spans) - 1
                or data.find(b"\x1b", lo, hi) >= 0):
            return [parse_line(data[s:e])[1].rstrip("\r") for s, e in spans]
        texts = data[lo:hi].decode("utf-8", "replace").split("\n")
        flagged = {m.start() + 1 for m in MAYBE_PREFIX_RE.finditer(data, lo - 1, hi)} if lo else None
        out: list[str] = []
        for (s, _e), text in zip(spans, texts, strict=True):
            if flagged is None or s in flagged:
                text = split_prefix(text)[1]
            out.append(text.rstrip("\r"))
        return out


def decode(raw: bytes) -> str:
    if len(raw) > MAX_LINE_BYTES:
        return "\r".join(strip_ansi(p.decode("utf-8", "replace")) for p in long_line_parts(raw))
    return strip_ansi(raw.decode("utf-8", "replace"))


def long_line_parts(raw: bytes) -> list[bytes]:
    """What of a line over ``MAX_LINE_BYTES`` is matched: its start (the launcher prefix, the first
    frames), the start of its last ``\\r`` frame and its end, ``LONG_LINE_END_BYTES`` each. A
    terminal shows the last frame, and an error printed after 20,000 tqdm frames or at the end of a
    runaway line is there. The parts are joined as frames, so that no pattern matches across a cut."""
    end_n = LONG_LINE_END_BYTES
    stop = len(raw.rstrip(b"\r\n"))
    head_to = MAX_LINE_BYTES - 2 * end_n
    tail_from = max(head_to, stop - end_n)
    last_cr = raw.rfind(b"\r", head_to, stop)
    parts = [raw[:head_to]]
    if last_cr < 0 or last_cr + 1 >= tail_from:
        # the last frame starts inside the kept end: begin the end at a frame start (no torn frame)
        cr = raw.find(b"\r", tail_from, stop)
        if cr >= 0 and last_cr >= 0:
            tail_from = cr + 1
    else:
        parts.append(raw[last_cr + 1: min(last_cr + 1 + end_n, tail_from)])
    parts.append(raw[tail_from:stop])
    return parts


def same_writer(data: bytes, s: int, pbytes: bytes) -> bool:
    return not pbytes or data.startswith(pbytes, s)


def prefix_bytes(raw: bytes, prefix: Prefix) -> bytes:
    """The bytes every line of the same process starts with. Under torchrun --tee that is the srun
    task and tee tag (PyTorch adds its ``[rankN]:`` to some lines only); otherwise the whole prefix."""
    if not prefix.length:
        return b""
    if prefix.local_rank is not None:
        m = _WRITER_TAG.match(raw)
        if m:
            return raw[: m.end()]
    return raw[: prefix.length]


def parse_line(raw: bytes) -> tuple[Prefix, str]:
    return split_prefix(decode(raw))


def with_stamp(prefix: Prefix, msg: str) -> str:
    """The message with the stamp its launcher tag carried (mpirun --timestamp-output), for reading
    its time; rules match the message alone."""
    return f"{prefix.stamp} {msg}" if prefix.stamp else msg


def maybe_prefixed(raws: list[bytes], joined: bytes | None = None, hyperscan: bool = False) -> list[bool]:
    """``[MAYBE_PREFIX_RE.match(b"\\n" + raw) is not None for raw in raws]`` (lines without a newline)
    in one search of the lines joined (``joined``, if given: ``b"\\n".join(raws)``), by Hyperscan
    with ``hyperscan`` (``scan.WindowFinder.maybe_prefix_lines``: most lines have nothing to report):
    every hint starts with the newline before its line and none matches a newline or looks around,
    so each match is of one line, where it starts."""
    out = [False] * len(raws)
    if not raws:
        return out
    text = b"\n" + (b"\n".join(raws) if joined is None else joined)
    finder = None
    if hyperscan:
        from correlator.extract.scan import window_finder

        finder = window_finder()
    found = finder.maybe_prefix_lines(text) if finder is not None else None
    if found == []:
        return out
    # a line's newline in the joined bytes -> its index (built in C, and only when asked)
    at = dict(zip(accumulate(map(add, map(len, raws[:-1]), repeat(1)), initial=0), range(len(raws))))
    if found is not None:
        for start in found:
            out[at[start - 1]] = True
        return out
    for m in MAYBE_PREFIX_RE.finditer(text):
        i = at.get(m.start())
        if i is not None:
            out[i] = True
    return out


def one_writer(data: bytes) -> bool:
    """Whether the lines of ``data`` are one writer's: at most one kind of launcher prefix
    (``MAYBE_PREFIX_RE``, a superset) besides plain lines -- a rank's own file, where torchrun tags
    only the stderr lines ``[rank5]:``, is one writer here; a combined stream is not."""
    kinds = set(MAYBE_PREFIX_RE.findall(data))
    first = MAYBE_PREFIX_RE.match(b"\n" + data[:256])
    if first is not None:
        kinds.add(first.group(0))
    return len(kinds) <= 1


def line_who(src: SourceInfo, prefix: Prefix, caps: dict[str, str], msg: str) -> Who:
    """Who a line is about: its prefix, its rule's captures and its own text, the file's name."""
    rank = prefix.rank
    if rank is None and src.file_rank is not None and prefix.task is None and prefix.local_rank is None:
        # (a [defaultN]: tag says the file multiplexes a node's workers: not one rank's file)
        rank = src.file_rank
    cap = caps.get(Capture.RANK)
    if cap is None and caps.get(Capture.PG, "0") == "0":
        # a process group's own rank ("[PG ID 3 ... Rank 6]") is the global rank only in the default group
        cap = caps.get(Capture.PG_RANK)
    if rank is None and cap is not None and cap.isdecimal():
        # the rank the line is about, in the rule's own words ("[Rank 5] Watchdog ...", Megatron's
        # "Rank 6: found NaN ...", a failure table's "rank : 12"): over an srun task or a [defaultN]
        # tag, which name a node's agent or a local rank
        rank = int(cap)
    if rank is None and prefix.task is None and prefix.local_rank is None and src.file_local_rank is None:
        rank = rank_in_text(msg)
    local = prefix.local_rank
    if local is None and caps.get(Capture.LOCAL_RANK, "").isdecimal():
        local = int(caps[Capture.LOCAL_RANK])
    if local is None:
        local = src.file_local_rank
    host = caps.get(Capture.HOST)
    pid = int(caps[Capture.PID]) if caps.get(Capture.PID, "").isdecimal() else None
    origin = nccl_origin(msg)
    if origin is not None:
        host = host or origin[0]
        pid = pid or origin[1]
    if host is None and prefix.host:
        host = prefix.host
    if host is None and " kernel: " in msg:  # a syslog / journal line: "Mar 23 16:10:00 gpu-a02 kernel: ..."
        sm = _SYSLOG_HOST.match(msg)
        if sm:
            host = sm.group(1)
    if pid is None and prefix.pid is not None:
        pid = prefix.pid
    task = prefix.task
    if task is None and caps.get(Capture.TASKS, "").isdecimal():
        task = int(caps[Capture.TASKS])  # srun's "task 2: Out Of Memory": the line is about that task
    return Who(rank=rank, local_rank=local, task=task, host=host, pid=pid)
