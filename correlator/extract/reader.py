"""A source's bytes into line-aligned regions: the reading half of the extractor.

Owns the bytes between pieces -- the look-back kept before the next region (``keep``), the start of
an unfinished line (``carry``), the lines held back for look-ahead -- where a buffer is cut, the
line count, the line-aligned blocks a region is scanned in, and the hygiene counts of the text
(NUL bytes, invalid UTF-8, over-long lines: ``Hygiene``). It hands each region to a callback and
must not know what is done with it.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Callable, Iterator
from datetime import UTC
from types import ModuleType
from typing import IO, Literal

from correlator.extract.lines import LOOK_LINES, MAX_LINE_BYTES, WRITER_WINDOW, Context
from correlator.extract.scan import Scanner
from correlator.model import DiagCode, Diagnostic, SourceInfo

#: a region is scanned in line-aligned blocks of about this size (``blocks``): every pass over a
#: block finds it in the cache
BLOCK_BYTES = 2 << 20
#: bytes of the previous buffer kept for event-scope look-back and inherited times
KEEP_BYTES = 1 << 20
#: the lines held back at the end of each buffer for look-ahead (``hold_back``): every line a
#: region ends with has at least HOLD_LINES lines and HOLD_BYTES bytes after it in its buffer (or
#: the source's end), as far as the search for its writer's next stamp or its context looks
#: (``LOOK_LINES`` lines, of an interleaved writer within ``WRITER_WINDOW``), so where the input was
#: cut (a follower's looks, the buffers of a big file) changes no match; never more than HOLD_MAX
#: bytes (lines that long are cut-dependent: 400 lines of 10 KiB)
HOLD_LINES, HOLD_BYTES, HOLD_MAX = LOOK_LINES, WRITER_WINDOW, 4 << 20
#: a region scanned in place (with the look-back and look-ahead around it) rather than copied out,
#: when it is at least this many times their size
SCAN_IN_PLACE = 4

#: what is done with a region: (data, begin, end, source offset of data[begin], its first line's
#: number) -> the number of the line after it
Process = Callable[[bytes, int, int, int, int], int]


#: bytes a process checks by decoding them before it loads pyarrow's UTF-8 validator: the load costs
#: ~30 ms CPU once (numpy is in already), what decoding ~40 MB of progress-bar text costs (a log of
#: non-ASCII bars, 16% of its bytes: ``str(b, "utf-8")`` 0.76 s/GB, Arrow's check 0.11 s/GB), so a
#: log with a little non-ASCII text never loads it; ranges under ARROW_MIN_BYTES are always decoded
#: (a call to Arrow costs ~1 us)
ARROW_AFTER_BYTES = 16 << 20
ARROW_MIN_BYTES = 4 << 10
_decoded = 0
#: Arrow's check once loaded; False: pyarrow is not installed
_arrow_valid: Callable[[bytes | memoryview], bool] | Literal[False] | None = None


def _load_arrow_valid() -> Callable[[bytes | memoryview], bool] | Literal[False]:
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        return False
    utf8, invalid = pa.large_utf8(), pa.ArrowInvalid

    def arrow_valid(data: bytes | memoryview) -> bool:
        # one string of the whole range, over its bytes (not copied); its full validation checks UTF-8
        offsets = pa.py_buffer((0).to_bytes(8, "little") + len(data).to_bytes(8, "little"))
        try:
            pa.Array.from_buffers(utf8, 1, [None, offsets, pa.py_buffer(data)]).validate(full=True)
        except invalid:
            return False
        return True

    return arrow_valid


def valid_utf8(data: bytes | memoryview) -> bool:
    """Whether ``data`` is valid UTF-8: what ``str(data, "utf-8")`` decodes without an error (Arrow's
    check, which builds no string, once this process has decoded ARROW_AFTER_BYTES of non-ASCII text)."""
    global _decoded, _arrow_valid
    n = len(data)
    if n >= ARROW_MIN_BYTES and _decoded >= ARROW_AFTER_BYTES:
        if _arrow_valid is None:
            _arrow_valid = _load_arrow_valid()
        if _arrow_valid:
            return _arrow_valid(data)
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError:
        return False
    if not text.isascii():  # (O(1) on a str; ASCII decodes at memory speed and is no reason to load Arrow)
        _decoded += n
    return True


class Hygiene:
    """What the text cleaning hides in a source: NUL bytes, invalid UTF-8, lines cut for length."""

    def __init__(self) -> None:
        self.nul_bytes = 0
        self.first_nul: int | None = None
        self.bad_utf8_at: int | None = None
        self.lines_capped = 0
        self.capped_line = 0  # the last over-long line counted (one line may come in several pieces)

    def line_capped(self, line_no: int) -> None:
        """Count line ``line_no`` as longer than MAX_LINE_BYTES (once, whatever pieces it comes in)."""
        if line_no != self.capped_line:
            self.capped_line = line_no
            self.lines_capped += 1

    def check(self, data: bytes, offset: int, begin: int = 0, end: int | None = None,
              utf8: bool | None = None) -> None:
        """Count what the text cleaning will hide in ``data[begin:end]`` (source offset ``offset``):
        NUL bytes and invalid UTF-8 (C-speed checks; the range is copied only to decode non-ASCII).
        ``utf8`` False: ``data`` is known to be ASCII; True: it is not (decode the range); None: look."""
        end = len(data) if end is None else end
        first = data.find(b"\x00", begin, end)
        if first >= 0:
            if self.first_nul is None:
                self.first_nul = offset + first - begin
            self.nul_bytes += data.count(b"\x00", begin, end)
        if utf8 is None:
            utf8 = not data.isascii()
        if self.bad_utf8_at is None and utf8:
            region = memoryview(data)[begin:end]
            if valid_utf8(region):
                return
            try:  # (only where the text is not valid: where, and why)
                str(region, "utf-8")
            except UnicodeDecodeError as e:
                if e.reason != "unexpected end of data":  # a piece of an over-long line may end mid-character
                    self.bad_utf8_at = offset + e.start

    def diagnostics(self, path: str) -> tuple[list[Diagnostic], list[Diagnostic]]:
        """(NUL and UTF-8 diagnostics, the over-long lines' one): said at different places of the digest."""
        text: list[Diagnostic] = []
        if self.nul_bytes:
            text.append(Diagnostic(
                "warning", path,
                f"{self.nul_bytes} NUL byte(s) (first at byte {self.first_nul}) removed from the text: runs of NULs are "
                f"what a file system leaves where a writer's blocks never reached the disk (a node that died, a file "
                f"truncated under its writer)", DiagCode.NUL_BYTES, self.nul_bytes))
        if self.bad_utf8_at is not None:
            text.append(Diagnostic("info", path, f"invalid UTF-8 (first at byte {self.bad_utf8_at}): "
                                                 f"such bytes are shown as U+FFFD", DiagCode.INVALID_UTF8))
        long: list[Diagnostic] = []
        if self.lines_capped:
            long.append(Diagnostic("warning", path,
                                   f"{self.lines_capped} line(s) longer than {MAX_LINE_BYTES >> 20} MiB: "
                                   f"scanned, but only their start, the start of their last frame and their end "
                                   f"were matched", DiagCode.LONG_LINES_CUT, self.lines_capped))
        return text, long


class Reader:
    """Cuts the bytes fed to it into line-aligned regions, each with the bytes kept before it for
    look-back and the held-back lines after it for look-ahead, and hands them to ``process``."""

    def __init__(self, ctx: Context, hygiene: Hygiene, diags: list[Diagnostic], process: Process) -> None:
        self.ctx = ctx
        self.hygiene = hygiene
        self.diags = diags
        self.process = process
        #: bytes fed (the source's own, not a conversion's), lines read, bytes not read (not a text log)
        self.total = 0
        self.lines_total = 0
        self.skipped = 0
        self.keep: bytes | memoryview = b""
        self.keep_line = 1
        self.offset = 0  # source offset of the first byte not yet in a processed region
        self.carry = b""
        self.in_long = False  # inside a line longer than the carry limit (processed in pieces)
        self.first = True
        #: the source turned out not to be a text log: the rest is not read
        self.stopped = False

    def feed(self, chunk: bytes, count: bool = True) -> None:
        """The next bytes of the source (``count``: they are the source's own, not a conversion)."""
        from correlator.extract.sources import text_probe

        if self.stopped:
            return
        src = self.ctx.src
        self.keep = own(self.keep)  # a view of the last buffer (``whole_keep``)
        if count:
            self.total += len(chunk)
        if self.first:
            self.first = False
            if not text_probe(chunk[:8192]):
                self.diags.append(Diagnostic("warning", src.path,
                                             "looks binary, not a text log: skipped (pass a text log)",
                                             DiagCode.BINARY))
                rest = (src.size or 0) - len(chunk) if src.kind == "file" else 0
                self.skipped += len(chunk) + max(0, rest)  # not read: a device never ends
                self.total = self.skipped
                self.stopped = True
                return
        carry, offset = self.carry, self.offset
        if (not carry and offset == 0 and src.kind == "file" and len(chunk) == src.size
                and chunk.endswith(b"\n")):
            cut: int | None = len(chunk)  # the whole file: no cut, no copy, nothing to hold back
        else:
            cut = cut_index(carry, chunk)
        if cut is not None:  # the usual case: look-back, region and look-ahead in one copy
            self.in_long = False
            lc = len(carry)
            keep = self.keep
            if not keep and not lc and cut == len(chunk):
                data = chunk
            else:
                after = memoryview(chunk)[cut - lc:]
                data = b"".join((keep, carry, memoryview(chunk)[: cut - lc], ahead_of(after)))
            begin, end_region = len(keep), len(keep) + cut
            self.carry = chunk[cut - lc:]
            next_line = self._process(data, begin, end_region)
            self.lines_total += next_line - self.keep_line
            self.keep_line = next_line
            self.offset += cut
            return
        data = carry + chunk
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) <= MAX_LINE_BYTES * 4:
                self.carry = data
                return
            cut = len(data)  # a line longer than any sane one: process what we have
            self.hygiene.line_capped(self.keep_line)
            self.in_long = True
        else:
            self.in_long = False
            cut = hold_back(data, cut)
        region, self.carry = data[:cut], data[cut:]
        self.region(region, self.carry)
        self.lines_total += region.count(b"\n")
        self.offset += len(region)

    def region(self, region: bytes, ahead: bytes = b"") -> None:
        """Process one line-aligned region, with the kept bytes before it for look-back and the
        held-back complete lines after it (``ahead``, processed with the next region) for look-ahead."""
        if not region:
            return  # all is held back for look-ahead (``hold_back``)
        ahead = ahead_of(ahead) if ahead else b""
        keep = self.keep
        data = b"".join((keep, region, ahead))
        self.keep_line = self._process(data, len(keep), len(keep) + len(region))

    def _process(self, data: bytes, begin: int, end_region: int) -> int:
        next_line = self.process(data, begin, end_region, self.offset, self.keep_line)
        if self.offset == 0 and begin == 0 and end_region == len(data):
            self.keep = whole_keep(data)  # (a view, made bytes only if more follows: ``own``)
        elif end_region > KEEP_BYTES:  # the last KEEP_BYTES before the look-ahead, from a line start
            nl = data.find(b"\n", end_region - KEEP_BYTES, end_region)
            self.keep = data[nl + 1:end_region] if nl >= 0 else b""
        else:
            self.keep = data if end_region == len(data) else data[:end_region]
        return next_line

    def end_of_input(self) -> None:
        """No more bytes follow: the unfinished last line is a line."""
        if self.carry:
            region = self.carry if self.carry.endswith(b"\n") else self.carry + b"\n"
            self.region(region)
            self.lines_total += region.count(b"\n")
            self.offset += len(self.carry)
            self.carry = b""
        elif self.in_long:
            self.lines_total += 1  # the over-long last line had no newline and was processed in pieces
            self.in_long = False

    def fail(self, e: BaseException, kind: str) -> None:
        """Reading the source failed after the bytes fed so far: say so, and analyse what came."""
        what = {"gzip": "gzip", "zstd": "zstd", "bz2": "bz2", "xz": "xz"}.get(kind, "")
        reason = str(e) or type(e).__name__
        self.diags.append(Diagnostic(
            "error", self.ctx.src.path,
            f"{'truncated or corrupt ' + what + ' stream' if what else 'read error'} after "
            f"{self.offset + len(self.carry)} bytes ({reason}); what came before was analysed, the rest is lost",
            DiagCode.TRUNCATED if what else DiagCode.READ_ERROR))
        self.end_of_input()  # (the lines held back and an unfinished last one: analysed and counted)


def read_stream(stream: IO[bytes], size: int) -> Iterator[bytes]:
    """Buffers of up to ``size`` bytes. Reads in ``read1`` steps where the stream has them, so that
    when a read fails (a truncated compressed stream, EIO, a file that lost permission) every byte
    decoded before the failure is handed over first; then the error is raised."""
    read1 = getattr(stream, "read1", None)
    while True:
        if read1 is None:
            buf = stream.read(size)
            if not buf:
                return
            yield buf
            continue
        parts: list[bytes] = []
        got = 0
        try:
            while got < size:
                piece = read1(size - got)
                if not piece:
                    break
                parts.append(piece)
                got += len(piece)
        except (EOFError, OSError, ValueError):
            if parts:
                yield b"".join(parts)
            raise
        if not parts:
            return
        yield parts[0] if len(parts) == 1 else b"".join(parts)


def error_json(raw: bytes, src: SourceInfo) -> tuple[bytes, Diagnostic | None]:
    """torchelastic's error file as log lines: its time, message and Python call stack."""
    try:
        doc = json.loads(raw.decode("utf-8", "replace"))
        msg = doc["message"]
        if isinstance(msg, str):
            text, stack, ts = msg, "", None
        else:
            text = str(msg.get("message", ""))
            extra = msg.get("extraInfo", {}) or {}
            stack = str(extra.get("py_callstack", ""))
            ts = extra.get("timestamp")
    except (ValueError, KeyError, TypeError, AttributeError):
        return raw, Diagnostic("info", src.path, "error file is not torchelastic's JSON: read as text",
                               DiagCode.ERROR_FILE_AS_TEXT)
    stamp = ""
    if ts is not None and str(ts).isdecimal():
        from datetime import datetime

        stamp = datetime.fromtimestamp(int(ts), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ ")
    lines = [stamp + "[error.json] " + line for line in (stack.rstrip("\n").split("\n") if stack else [])]
    lines.append(stamp + text.replace("\n", " "))
    return ("\n".join(lines) + "\n").encode("utf-8"), None


_np: ModuleType | Literal[False] | None = None


def warm_up() -> None:
    """Import what the first long span would (numpy, ~80 ms), and what numpy imports on first use
    in the dense scan (``numpy.ma``, for ``unique``/``isin``: ~10-30 ms): before the pool forks,
    once, not in each worker."""
    global _np
    if _np is None:
        try:
            import numpy
            import numpy.ma  # noqa: F401 - (numpy's own lazy import, taken now)
        except ImportError:  # pragma: no cover - numpy comes with pandas/pyarrow
            _np = False
        else:
            _np = numpy


#: a span shorter than this is counted by ``bytes.count``, a longer one by numpy (``count_nl``)
COUNT_NUMPY_BYTES = 4 << 10
#: numpy compares at most this much at a time (the comparison's array stays in the cache)
COUNT_STEP_BYTES = 256 << 10


def count_nl(data: bytes, start: int, end: int) -> int:
    """``data.count(b"\\n", start, end)``. ``bytes.count`` goes at ~2 GB/s; numpy's comparison, a
    cache-sized step at a time, at ~12 GB/s, and its call costs what ``bytes.count`` spends on 4 KiB
    (measured: 16 KiB 5.9 us against 2.6, 256 KiB 98 us against 22)."""
    if end - start < COUNT_NUMPY_BYTES:
        return data.count(b"\n", start, end)
    if _np is None:
        warm_up()
    np = _np
    if not np:  # no numpy
        return data.count(b"\n", start, end)
    n = 0
    for a in range(start, end, COUNT_STEP_BYTES):
        n += int(np.count_nonzero(np.frombuffer(data, np.uint8, min(COUNT_STEP_BYTES, end - a), a) == 10))
    return n


def count_lines(scanner: Scanner, data: bytes, start: int, end: int, base: int) -> int:
    """``count_nl(data, start, end)``, from what the scanner already knows of the source's lines
    where it can say (a replay of pieces whose workers counted them: ``lines_between``); ``base``
    is the source offset of ``data[0]``."""
    between = getattr(scanner, "lines_between", None)
    if between is not None:
        return between(data, start, end, base)
    return count_nl(data, start, end)


class LineNumbers:
    """The line numbers of offsets in one buffer, counted only where asked (``count_lines`` from the
    nearest offset asked before): a candidate that is only counted, or not confirmed, costs no count
    of the bytes before it, and the lines after the last one asked are counted by the caller at once
    (numpy over a long span). Offsets may be asked in any order; the places asked are kept sorted."""

    __slots__ = ("scanner", "data", "base", "offsets", "lines")

    def __init__(self, scanner: Scanner, data: bytes, offset: int, line: int, base: int) -> None:
        self.scanner, self.data, self.base = scanner, data, base
        #: the offsets asked (sorted) and their lines: ``offset`` is on line ``line``
        self.offsets = [offset]
        self.lines = [line]

    def at(self, offset: int) -> int:
        """The number of the line ``offset`` (a line start, at or after the first offset) is on."""
        offsets = self.offsets
        i = len(offsets) - 1
        if offset < offsets[i]:
            i = bisect_right(offsets, offset) - 1
        at = offsets[i]
        if at == offset:
            return self.lines[i]
        n = self.lines[i] + count_lines(self.scanner, self.data, at, offset, self.base)
        offsets.insert(i + 1, offset)
        self.lines.insert(i + 1, n)
        return n

    def mark(self, offset: int, line: int) -> None:
        """``offset`` is on line ``line`` (counted elsewhere; at or after the last offset asked)."""
        if offset > self.offsets[-1]:
            self.offsets.append(offset)
            self.lines.append(line)

    @property
    def last(self) -> tuple[int, int]:
        """(line, offset) of the furthest offset asked: the lines after it are not counted yet."""
        return self.lines[-1], self.offsets[-1]


def known_clean(scanner: Scanner, data: bytes, start: int, end: int, base: int) -> bool:
    """Whether the scanner knows ``data[start:end]`` (line-aligned, source offset ``base + start``)
    to hold no NUL byte and only valid UTF-8, so that ``Hygiene.check`` has nothing to find there."""
    clean = getattr(scanner, "clean_between", None)
    return clean is not None and clean(data, start, end, base)


def region_end(rfind: Callable[[int, int], int], cut: int, size: int) -> int:
    """The line start where a buffer of ``size`` bytes has its region end, before the lines held
    back for look-ahead: the last one with HOLD_LINES lines and HOLD_BYTES bytes between it and
    ``cut`` (the buffer's last line end); 0 when no line has that much after it yet (all is held);
    within HOLD_MAX of ``cut`` (the furthest line start found there, or ``cut`` in a line that
    long); ``cut`` when the unfinished line after it is longer than HOLD_MAX (then it is read as an
    over-long line, without the complete lines before it). ``rfind(lo, hi)``: the last newline in
    ``[lo, hi)`` of the buffer, or -1."""
    if size - cut > HOLD_MAX:
        return cut
    floor = max(0, cut - HOLD_MAX)
    end, nl = cut, cut - 1
    for _ in range(HOLD_LINES):
        nl = rfind(floor, nl)
        if nl < 0:
            return 0 if floor == 0 else end
        end = nl + 1
    if cut - end < HOLD_BYTES:
        nl = rfind(floor, cut - HOLD_BYTES) if cut - HOLD_BYTES > floor else -1
        if nl < 0:
            return 0 if floor == 0 else end
        end = nl + 1
    return end


def hold_back(data: bytes, cut: int) -> int:
    """Where to end this round's region instead of at ``cut`` (a line start): the last lines are
    held back for the next round (``region_end``), so every candidate line has the lines after it
    (event context, the next stamped line) at hand whatever the cut."""
    return region_end(lambda lo, hi: data.rfind(b"\n", lo, hi), cut, len(data))


def cut_index(carry: bytes, chunk: bytes) -> int | None:
    """Where ``Reader.feed`` cuts ``carry + chunk`` (at the last newline, holding back the
    last lines), found without joining them; None when the cut is not in ``chunk`` (no newline in
    it, or the hold reaches back into ``carry``, or all is held)."""
    i = chunk.rfind(b"\n")
    if i < 0:
        return None
    lc = len(carry)

    def rfind(lo: int, hi: int) -> int:
        if hi > lc:
            j = chunk.rfind(b"\n", max(lo - lc, 0), hi - lc)
            if j >= 0:
                return j + lc
        return carry.rfind(b"\n", lo, min(hi, lc)) if lo < lc else -1

    end = region_end(rfind, lc + i + 1, lc + len(chunk))
    return None if end < lc or end == 0 else end


def ahead_of(held: bytes | memoryview) -> bytes:
    """The look-ahead a region gets from the lines held back after it: their first HOLD_MAX bytes,
    whole lines only."""
    ahead = bytes(held[:HOLD_MAX])
    return ahead[: ahead.rfind(b"\n") + 1]


def blocks(data: bytes, begin: int, end: int, size: int | None = None) -> Iterator[tuple[int, int]]:
    """Line-aligned ``(start, end)`` pieces of ``data[begin:end]`` (itself line-aligned) of about
    ``size`` (BLOCK_BYTES) bytes; a piece ends early only where a line is longer than that."""
    size = size or BLOCK_BYTES
    a = begin
    while end - a > size + (size >> 1):
        nl = data.rfind(b"\n", a, a + size)
        if nl < 0:
            nl = data.find(b"\n", a + size, end)
            if nl < 0:
                break
        yield a, nl + 1
        a = nl + 1
    if a < end:
        yield a, end


def scan_region(scanner: Scanner, data: bytes, begin: int, end: int) -> dict[int, set[int]]:
    """Candidate lines of ``data[begin:end]`` (line-aligned), as offsets in ``data``."""
    in_range = getattr(scanner, "scan_range", None)
    if in_range is not None:
        return in_range(data, begin, end)
    if begin == 0 and end == len(data):
        return scanner.scan(data, end)
    if end - begin >= SCAN_IN_PLACE * (len(data) - (end - begin)):
        # scanning the kept and held-back lines again costs less than copying the region out
        return {s: ids for s, ids in scanner.scan(data, len(data)).items() if begin <= s < end}
    lines = scanner.scan(data[begin:end], end - begin)
    return {s + begin: ids for s, ids in lines.items()}


def whole_keep(data: bytes) -> bytes | memoryview:
    """The look-back kept after a region that is all of ``data`` from the source's first byte (the
    bytes the general case keeps), as a view of ``data``."""
    end = len(data)
    if end > KEEP_BYTES:
        nl = data.find(b"\n", end - KEEP_BYTES, end)
        return memoryview(data)[nl + 1:] if nl >= 0 else b""
    return data


def own(b: bytes | memoryview) -> bytes:
    """``b`` as bytes (a view from ``whole_keep`` or the tail window copied out once more input follows)."""
    return bytes(b) if isinstance(b, memoryview) else b
