"""Live mode: watch a running job's logs and say who failed first as soon as it is known.

Owns polling the inputs (growing files, new files in folders, globs, stdin), feeding the bytes
that arrived since the last look to the source's one resumable ``Extractor`` (so a followed file's
digest is the one batch mode makes of the whole file), and re-running the global stage (``correlate.stage.correlate``) when something changed. It prints the verdict
when a root cause (or a job-level end) is first established and an update whenever it changes (a
lagging host flushing an earlier failure late), and stops when the job's end is seen: a SLURM
cancel or abort line, srun reporting exited tasks, torchrun's ``ChildFailedError`` summary (the
rules tagged ``job-end``). Until that end is in the logs, what it prints is marked provisional (a
rank on a slow node may yet flush an earlier failure); after it, the verdict is said once more as
final. Stopped before the end (a quiet period, a time limit, Ctrl-C, stdin closed), it says the
verdict stays provisional, and the report carries that as a warning (``FOLLOW_PROVISIONAL``).
While nothing new arrives it says so every ``heartbeat_s``: how many sources, how much was read,
how long since the last new line.

Memory is bounded: per source it keeps a byte offset and its extraction's state (the first and
last matches per (rule, writer), the writers' facts and anchors, identity facts) and the digest
so far; between looks the extractor is parked (``Extractor.park``): the log bytes it keeps for
look-back and for the head and tail windows are let go and read back from the file at the next
look, so log bytes are held only while one new piece is read. Compressed files and torchelastic ``error.json`` files are read whole
again when they change: they cannot be appended to in place.

A followed file can change under the follower. Truncated (``copytruncate`` rotation, a restarted
job writing ``>``) or replaced (renamed away, a new file under its name): what was read from it is
evidence all the same (a rotated log's earlier failure is still the job's), so it is kept as a
previous generation of the source, under a marked name, and the file is read again from its start.
Deleted: what was read stays. Each of these is a diagnostic and a live note. Pieces that are not
text (random bytes, a binary dump written into the log) are blanked line by line before extraction
and named in a diagnostic; the lines around them are read.
"""

from __future__ import annotations

import io
import os
import select
import sys
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TextIO

from correlator import pipeline
from correlator.extract import sources
from correlator.extract.extractor import Engine, ExtractOptions, Extractor, extract
from correlator.extract.reader import read_stream
from correlator.extract.timestamps import resolve_tz, zone_name
from correlator.model import (
    DiagCode,
    Diagnostic,
    Digest,
    FactSource,
    Report,
    Rule,
    SourceInfo,
    Verdict,
)
from correlator.model.vocabulary import Tag
from correlator.report.safe import visible

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

#: a last line without a newline is left for the next look until it is this long
MAX_PENDING = 4 << 20
#: bytes read from a source in one look (a big file already there is taken in several looks)
MAX_PIECE = 256 << 20
#: previous generations (before a truncation or replacement) kept per path: the first and the latest
MAX_GENERATIONS = 8
#: bytes checked for text at a time; a line longer than this is judged in pieces of it
PROBE_BLOCK = 8 << 10
SCAN_CHUNK = 1 << 20
#: non-text lines at most this far apart are named as one piece in the diagnostic
GARBAGE_GAP = 512


class _Window(io.RawIOBase):
    """Bytes ``[start, end)`` of a file, as a stream ``extract`` can read."""

    def __init__(self, path: str, start: int, end: int) -> None:
        super().__init__()
        self._f = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._f.seek(start)
        self._left = end - start
        self._pos = start
        #: sorted, disjoint ``[a, b)`` file ranges read as spaces (pieces that are not text)
        self.masks: list[tuple[int, int]] = []

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self._left <= 0:
            return 0
        whole = memoryview(buffer)
        view = whole[: min(len(whole), self._left)]
        n = self._f.readinto(view) or 0
        if self.masks and n:
            lo, hi = self._pos, self._pos + n
            i = max(0, bisect_right(self.masks, (lo, lo)) - 1)
            while i < len(self.masks) and self.masks[i][0] < hi:
                a, b = max(self.masks[i][0], lo), min(self.masks[i][1], hi)
                if a < b:
                    view[a - lo: b - lo] = b" " * (b - a)
                i += 1
        self._pos += n
        self._left -= n
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


@dataclass
class _Source:
    """One followed source: where reading stopped, and the one ``Extractor`` its new bytes are fed to."""

    src: SourceInfo
    identity: tuple
    dev_ino: tuple[int, int] | None = None
    offset: int = 0  # bytes fed to the extractor (complete lines, but for an over-long or the last line)
    lines: int = 0  # newlines before ``offset``
    partial: bool = False  # the bytes before ``offset`` end inside a line (an over-long one, or the last)
    whole: bool = False  # compressed or error.json: read whole again on change
    binary: bool = False
    size_seen: int = -1
    bytes_read: int = 0
    #: the source's extraction, resumed by each new piece (None until the first); a whole-read
    #: source's digest instead
    x: Extractor | None = None
    whole_digest: Digest | None = None
    #: the extractor's digest as of the last piece (``Extractor.snapshot`` copies the state: made
    #: once per piece, before the extractor is parked), and that with what following says
    snap: Digest | None = None
    cached: Digest | None = None
    #: whether ``cached`` says the job ended (``end_seen``), worked out once per digest
    ended: bool | None = None
    #: no piece of it was blanked: the bytes the extractor keeps can be read back from the file
    #: (``Extractor.park``), so that a follower of hundreds of files holds none of their bytes
    parkable: bool = True
    #: what following says of the source (cannot open it, deleted, truncated), by what it is about
    diags: dict[str, Diagnostic] = field(default_factory=dict)
    gone: bool = False  # deleted while followed (what was read stays)
    garbage: list = field(default_factory=lambda: [0, 0, None, None])  # runs, bytes, first and last range
    pending: bytes = b""  # stdin: bytes after the last newline

    def reset(self) -> None:
        keep = (self.src, self.identity)
        type(self).__init__(self, *keep)

    def extractor(self, engine: Engine, opts: ExtractOptions) -> Extractor:
        if self.x is None:  # (no size: the bytes come in pieces, never as the whole file)
            self.x = Extractor(replace(self.src, size=None), engine, opts)
        return self.x

    def feed(self, x: Extractor, data: bytes, count: bool = True) -> None:
        """Give ``data`` (the next bytes of the source) to the extractor ``x``; ``count``: they are
        read (not a piece blanked whole: that is counted as skipped)."""
        x.feed(data, count)
        self.offset += len(data)
        self.lines += data.count(b"\n")
        self.partial = not data.endswith(b"\n")
        if count:
            self.bytes_read += len(data)
        self.snap = self.cached = None
        self.ended = None

    def settle(self) -> None:
        """After a look: the digest so far, and the extractor parked where its bytes can be read back."""
        x = self.x
        if x is None:
            return
        self.snap = replace(x.snapshot(partial=self.partial), source=self.src)
        self.cached = self.ended = None
        if self.parkable and self.src.kind == "file" and not x.stopped:
            x.park()

    def read_back(self, a: int, b: int) -> bytes:
        with open(self.src.path, "rb") as f:
            f.seek(a)
            data = f.read(b - a)
        if len(data) != b - a:
            raise OSError(f"{self.src.path} is shorter than when it was read ({a + len(data)} of {b} bytes)")
        return data

    def digest(self) -> Digest:
        if self.cached is None:
            if self.whole_digest is not None:
                d = self.whole_digest
            elif self.x is not None:
                if self.snap is None:
                    self.settle()
                assert self.snap is not None
                d = self.snap
            else:
                d = Digest(self.src)
            diags = list(d.diagnostics) + list(self.diags.values())
            runs, nbytes, first, last = self.garbage
            if runs:
                where = f"bytes {first[0]}-{first[1]}" if runs == 1 else \
                    f"the first at bytes {first[0]}-{first[1]}, the last at bytes {last[0]}-{last[1]}"
                diags.append(Diagnostic(
                    "warning", self.src.path,
                    f"{runs} piece(s) that are not text ({nbytes} bytes; {where}) skipped while followed; the lines "
                    "around them were read (if the log should have text there, look at the writer)",
                    DiagCode.BINARY, nbytes))
            self.cached = replace(d, diagnostics=tuple(diags), bytes_skipped=d.bytes_skipped + nbytes)
        return self.cached

    def end_seen(self, end_rules: frozenset[str]) -> bool:
        """Whether the lines read say the job ended: a line of a rule tagged ``job-end``, or
        torchrun's closing summary (a failure table naming its root)."""
        if self.x is None and self.whole_digest is None:
            return False
        if self.ended is None:
            d = self.digest()
            self.ended = any(m.rule_id in end_rules for m in d.matches) or any(
                f.source is FactSource.FAILURE_TABLE and f.is_root_entry for f in d.identities)
        return self.ended

    def note(self, key: str, diag: Diagnostic) -> None:
        self.diags[key] = diag
        self.cached = self.ended = None

    def note_garbage(self, ranges: Sequence[tuple[int, int]]) -> None:
        """Count ``ranges`` (new bytes, in file order) as pieces that were not read."""
        for a, b in ranges:
            runs, nbytes, first, last = self.garbage
            if last is not None and a - last[1] <= GARBAGE_GAP:  # more of the same piece
                last = (last[0], b)
                first = last if runs == 1 else first
            else:
                runs += 1
                last = (a, b)
                first = first or last
            self.garbage = [runs, nbytes + b - a, first, last]
        self.cached = self.ended = None


@dataclass
class _Generation:
    """What was read from a file before it was truncated or replaced: kept as evidence."""

    digest: Digest
    dev_ino: tuple[int, int] | None
    replaced: bool
    end_seen: bool


def _relabel(d: Digest, label: str) -> Digest:
    """``d`` under another source name (every match, stream, anchor and diagnostic with it)."""
    return replace(
        d, source=replace(d.source, path=label),
        matches=tuple(replace(m, path=label) for m in d.matches),
        streams=tuple(replace(s, path=label) for s in d.streams),
        anchors=tuple(replace(a, path=label) for a in d.anchors),
        diagnostics=tuple(replace(x, path=label) for x in d.diagnostics),
        groups=tuple(replace(g, path=label) for g in d.groups))


def _garbage_line(line: bytes) -> bool:
    """Whether one line is clearly not text (judged as ``text_probe`` judges a file's head, but
    asking for a few bad bytes at least: one odd byte in a short line is not a binary piece)."""
    sample = sources._NUL_RUN.sub(b"", line) if b"\0" in line else line
    if not sample:
        return False
    bad = len(sample.translate(None, sources._TEXT_BYTES))
    if bad >= 2 and bad / len(sample) >= 0.05:
        return True
    if sample.isascii():
        return False
    text = sample.decode("utf-8", "replace")
    n = text.count("\ufffd")
    return n >= 4 and n / len(text) >= 0.2


def _clean(chunk: bytes) -> bool:
    """The fast check: no control bytes but tabs, line ends and ESC, and valid UTF-8."""
    if chunk.translate(None, sources._TEXT_BYTES):
        return False
    if chunk.isascii():
        return True
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _judge(data: bytes, base: int, add: Callable[[int, int], None]) -> None:
    """Blocks of about ``PROBE_BLOCK`` of ``data`` (at file offset ``base``) that ``text_probe``
    fails: each of their lines that is clearly not text goes to ``add``."""
    i = 0
    while i < len(data):
        j = data.find(b"\n", i + PROBE_BLOCK - 1) + 1 or len(data)
        if j - i > 2 * PROBE_BLOCK:
            j = i + PROBE_BLOCK
        block = data[i:j]
        if not sources.text_probe(block) or (len(block) > PROBE_BLOCK and not sources.text_probe(block[PROBE_BLOCK:])):
            k = 0
            while k < len(block):
                nl = block.find(b"\n", k)
                stop = len(block) if nl < 0 else nl
                if _garbage_line(block[k:stop]):
                    add(base + i + k, base + i + stop)
                k = stop + 1
        i = j


def _garbage_ranges(path: str, start: int, end: int) -> list[tuple[int, int]]:
    """The ``[a, b)`` ranges of ``[start, end)`` of the file that are lines of no text (their
    newlines left out, so that line numbers stay), in order and merged. Blocks of about
    ``PROBE_BLOCK`` that ``text_probe`` passes are text; in a block it fails, each line is judged."""
    out: list[tuple[int, int]] = []

    def add(a: int, b: int) -> None:
        if a >= b:
            return
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))

    with open(path, "rb") as f:
        f.seek(start)
        pos, carry = start, b""
        while True:
            want = min(SCAN_CHUNK, end - pos)
            got = f.read(want) if want > 0 else b""
            if want > 0 and not got:
                end = pos  # it shrank under us: what is there is judged
            pos += len(got)
            data = carry + got
            if not data:
                break
            carry = b""
            if pos < end:
                cut = data.rfind(b"\n") + 1
                if cut == 0 and len(data) < 4 * SCAN_CHUNK:
                    carry = data  # inside a long line: judge it with more of it
                    continue
                if cut:
                    data, carry = data[:cut], data[cut:]
            base = pos - len(carry) - len(data)
            if not _clean(data):
                _judge(data, base, add)
            if pos >= end and not carry:
                break
    return out


def _identity(src: SourceInfo) -> tuple:
    return (src.file_rank, src.file_local_rank, src.file_node, src.attempt, src.stream)


def _last_newline(path: str, start: int, end: int) -> int:
    """Offset just after the last newline in ``[start, end)`` of the file, or ``start`` if none."""
    block = 1 << 16
    with open(path, "rb") as f:
        pos = end
        while pos > start:
            lo = max(start, pos - block)
            f.seek(lo)
            data = f.read(pos - lo)
            nl = data.rfind(b"\n")
            if nl >= 0:
                return lo + nl + 1
            pos = lo
    return start


def _cannot_open(path: str, e: OSError) -> Diagnostic:
    return Diagnostic("error", path, f"cannot open: {e.strerror or e}", DiagCode.UNREADABLE)


def _blank(chunk: bytes) -> bytes:
    """``chunk`` with every byte but its line ends a space."""
    return b"\n".join(b" " * len(piece) for piece in chunk.split(b"\n"))


class Follower:
    """The state of a follow: call ``poll()`` repeatedly; ``report()`` correlates what was read."""

    def __init__(self, inputs: Sequence[str], opts: pipeline.Options | None = None,
                 rules: Sequence[Rule] | None = None) -> None:
        self.inputs = list(inputs)
        self.opts = opts or pipeline.Options()
        self.rules = list(rules) if rules is not None else pipeline.load_engine_rules(self.opts)
        self.engine = Engine(self.rules, self.opts.scanner)
        self.end_rules = frozenset(r.id for r in self.rules if Tag.JOB_END in r.tags)
        self.xopts = ExtractOptions(tz=resolve_tz(self.opts.tz), scanner=self.opts.scanner)
        self.sources: dict[str, _Source] = {}
        #: per path, what was read before each truncation or replacement (the first and the latest kept)
        self.generations: dict[str, list[_Generation]] = {}
        self.restarts: dict[str, int] = {}
        self.generations_dropped: dict[str, int] = {}
        #: one line each for the live output: a file rotated, truncated or deleted (``follow`` prints them)
        self.notes: list[str] = []
        self.found_diags: list[Diagnostic] = []
        self.stdin_open = "-" in self.inputs
        self.started = time.perf_counter()

    @property
    def end_seen(self) -> bool:
        return any(s.end_seen(self.end_rules) for s in self.sources.values()) or any(
            g.end_seen for gs in self.generations.values() for g in gs)

    def poll(self, final: bool = False) -> bool:
        """Read what arrived since the last poll; True if anything was read. ``final`` also reads
        the last line of each file when it has no newline yet."""
        found, diags = sources.discover([i for i in self.inputs if i != "-"], all_files=self.opts.all_files) \
            if any(i != "-" for i in self.inputs) else ([], [])
        seen = {src.path for src in found}
        # a followed file that vanished was read all the same: not "missing", and its lines stay
        self.found_diags = [d for d in diags if not (d.code is DiagCode.MISSING and d.path in self.sources)]
        changed = False
        for src in found:
            st = self.sources.get(src.path)
            if st is None or st.identity != _identity(src):
                if st is not None:
                    changed = True  # its name now says another rank (a new file joined its family)
                st = self.sources[src.path] = _Source(src, _identity(src))
            changed |= self._read_file(st, final)
        for path, st in self.sources.items():
            if path not in seen and st.src.kind != "stdin":
                changed |= self._check_gone(st)
        changed |= self._drop_renamed()
        if self.stdin_open:
            changed |= self._read_stdin(final)
        return changed

    def _check_gone(self, st: _Source) -> bool:
        """A source discovery no longer finds: note once that it was deleted (what was read stays)."""
        if st.gone or os.path.lexists(st.src.path):
            return False
        st.gone = True
        st.note("gone", Diagnostic(
            "warning", st.src.path, f"deleted while followed: the {st.lines} line(s) read from it before stay in the "
            "report; lines written after the last look were not read", DiagCode.FOLLOW_GONE))
        self.notes.append(f"{st.src.path} was deleted: the {st.lines} line(s) read from it stay in the report")
        return True

    def _retire(self, st: _Source, replaced: bool, size: int) -> None:
        """The file under ``st`` was truncated or replaced: keep what was read as a previous
        generation (under a marked name), and start reading it again from its start."""
        path = st.src.path
        n = self.restarts[path] = self.restarts.get(path, 0) + 1
        how = "replaced" if replaced else "truncated"
        label = f"{path} (before it was {how}, #{n})"
        # (a compressed file is read whole again: its new content holds the old)
        d = st.digest()  # (without the notes of earlier restarts: the current source says those)
        kept = not st.whole and bool(d.matches or d.streams or d.identities or d.anchors)
        if kept:
            gens = self.generations.setdefault(path, [])
            d = replace(d, diagnostics=tuple(x for x in d.diagnostics if x.code is not DiagCode.FOLLOW_RESTART))
            gens.append(_Generation(_relabel(d, label), st.dev_ino, replaced, st.end_seen(self.end_rules)))
            if len(gens) > MAX_GENERATIONS:
                del gens[1]  # the first (where the job's trouble began) and the latest are kept
                self.generations_dropped[path] = self.generations_dropped.get(path, 0) + 1
        lines = st.lines
        st.reset()
        where = f"kept as '{label}'" if kept else "nothing in them to keep"
        st.note("restart", Diagnostic(
            "warning", path, f"{how} while followed ({n} time(s); now {size} bytes): the {lines} line(s) read before "
            f"are {where}; the file is read again from its start", DiagCode.FOLLOW_RESTART, n))
        self.notes.append(f"{path} was {how}" + (" (rotated)" if replaced else f" to {size} bytes") +
                          f": the {lines} line(s) read before are {where}; reading it again from the start")

    def _drop_renamed(self) -> bool:
        """A replaced file found again under another name (``app.log`` -> ``app.log.1``) is read
        there whole: its kept generation would count it twice."""
        where = {st.dev_ino: path for path, st in self.sources.items() if st.dev_ino is not None and not st.gone}
        changed = False
        for path, gens in self.generations.items():
            for g in list(gens):
                other = where.get(g.dev_ino) if g.replaced and g.dev_ino is not None else None
                if other is not None and other != path:
                    gens.remove(g)
                    changed = True
                    self.notes.append(f"{path}: its earlier lines are read under its new name, {other}")
        return changed

    def _read_file(self, st: _Source, final: bool) -> bool:
        path = st.src.path
        try:
            info = os.stat(path)
        except OSError:
            return self._check_gone(st)  # gone: what was read stays
        size, dev_ino = info.st_size, (info.st_dev, info.st_ino)
        if st.dev_ino is not None and (dev_ino != st.dev_ino or size < st.offset):
            self._retire(st, dev_ino != st.dev_ino, size)  # log rotation, a restarted job
        st.gone = False
        st.dev_ino = dev_ino
        if size == st.size_seen and not (final and st.offset < size):
            return False
        st.size_seen = size
        if st.offset == 0 and size > 0 and not st.whole:
            try:
                with open(path, "rb") as f:
                    head = f.read(8)
            except OSError as e:
                st.note("open", _cannot_open(path, e))
                return True
            st.whole = sources._sniff(head) != "file" or st.src.stream == "error.json"
        if st.binary:
            return False
        if st.whole:
            return self._read_whole(st, size)
        end = min(size, st.offset + MAX_PIECE)
        if end <= st.offset:
            return False
        cut = _last_newline(path, st.offset, end)
        if cut == st.offset and not final and end - st.offset < MAX_PENDING and end == size:
            return False  # only a partial line so far: wait for its newline
        if cut == st.offset or (final and end == size):
            cut = end
        return self._read_piece(st, cut)

    def _read_piece(self, st: _Source, end: int) -> bool:
        """Feed ``[offset, end)`` of the file, the bytes that arrived since the last look, to the
        source's extractor. Lines that are not text are blanked first (and named in a
        diagnostic); a piece that is still not text after that is blanked whole."""
        path = st.src.path
        head_text = True
        try:
            if st.offset == 0:  # the file's head decides whether it is a text log at all, as in batch mode
                with open(path, "rb") as f:
                    head_text = sources.text_probe(f.read(8192))
            masks = _garbage_ranges(path, st.offset, end) if head_text else []
            stream = io.BufferedReader(_Window(path, st.offset, end), buffer_size=1 << 20)
        except OSError as e:
            st.note("open", _cannot_open(path, e))
            return True
        blank = False
        if masks:
            stream.raw.masks = masks
            probe = _Window(path, st.offset, min(end, st.offset + 8192))
            probe.masks = masks
            with probe:
                blank = not sources.text_probe(probe.read())
            # blanking its lines did not make it text: the piece is skipped (its line ends kept, so
            # that line numbers and offsets stay), the next ones are read
            st.note_garbage([(st.offset, end)] if blank else masks)
            st.parkable = False  # (the file's bytes are not what was fed)
        x = st.extractor(self.engine, self.xopts)
        try:
            x.resume(st.read_back)
        except OSError:  # shorter than its earlier bytes (a race with a truncation): read again from its start
            stream.close()
            self._retire(st, False, end)
            return True
        with stream:
            try:
                for chunk in read_stream(stream, self.xopts.chunk_bytes):
                    st.feed(x, _blank(chunk) if blank else chunk, count=not blank)
                    if x.stopped:
                        st.binary = not head_text  # not a text log (batch mode skips it too)
                        break
            except OSError as e:
                x.fail(e, "file")
        st.settle()
        return True

    def _read_whole(self, st: _Source, size: int) -> bool:
        st.reset()
        st.whole = True
        st.size_seen = size
        d = extract(replace(st.src, size=size), self.engine, self.xopts)
        st.whole_digest = d
        st.bytes_read, st.lines, st.offset = d.bytes_read, d.lines, size
        return True

    def _read_stdin(self, final: bool) -> bool:
        st = self.sources.get("<stdin>")
        if st is None:
            st = self.sources["<stdin>"] = _Source(SourceInfo(path="<stdin>", kind="stdin"), ())
        fd = sys.stdin.fileno()
        chunks = []
        got = 0
        while got < MAX_PIECE:
            ready, _, _ = select.select([fd], [], [], 0)
            if not ready:
                break
            data = os.read(fd, 1 << 20)
            if not data:
                self.stdin_open = False
                final = True
                break
            chunks.append(data)
            got += len(data)
        if not chunks and not (final and st.pending):
            return False
        data = st.pending + b"".join(chunks)
        cut = data.rfind(b"\n") + 1
        if cut == 0 and not final and len(data) < MAX_PENDING:
            st.pending = data
            return bool(chunks)
        if cut == 0 or final:
            cut = len(data)
        piece, st.pending = data[:cut], data[cut:]
        st.feed(st.extractor(self.engine, self.xopts), piece)
        return True

    def report(self) -> Report:
        digests = [g.digest for gs in self.generations.values() for g in gs]
        digests += [s.digest() for s in self.sources.values()]
        for path, n in self.generations_dropped.items():
            i = next((k for k, d in enumerate(digests) if d.source.path == path), None)
            if i is not None:
                digests[i] = replace(digests[i], diagnostics=digests[i].diagnostics + (Diagnostic(
                    "warning", path, f"truncated or replaced more than {MAX_GENERATIONS} times while followed: "
                    f"{n} generation(s) between the first and the latest {MAX_GENERATIONS - 1} not kept",
                    DiagCode.MATCHES_NOT_KEPT, n),))
        report = pipeline.correlate(digests, self.rules, self.found_diags, started=time.perf_counter(),
                                    job_id=self.opts.job_id, engine_name="follow", scanner=self.engine.scanner.name,
                                    zone=zone_name(self.xopts.tz))
        if self.opts.redact:
            from correlator.report.redact import redact_report

            report = redact_report(report)
        return report


def _key(report: Report) -> tuple:
    rc = report.root_cause
    if report.verdict not in (Verdict.ROOT_CAUSE, Verdict.JOB_LEVEL) or rc is None:
        return (report.verdict.value,)
    return (report.verdict.value, rc.rank, rc.host, rc.rule, rc.tie)


def headline(report: Report) -> str:
    """One line: the verdict as it stands."""
    rc = report.root_cause
    if rc is None:
        return report.verdict.value.replace("_", " ")
    who = f"rank {rc.rank}" if rc.rank is not None else "unknown rank"
    if rc.host:
        who += f" on {rc.host}"
    what = f"{rc.rule} at {rc.time or '(no time)'}"
    if report.verdict is Verdict.JOB_LEVEL:
        return f"job-level end: {what}"
    tie = f" (tied with rank(s) {', '.join(map(str, rc.tie))})" if rc.tie else ""
    text = f" — {rc.evidence[0].text[:160]}" if rc.evidence else ""
    return f"root cause: {who}{tie}: {what}{text}"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def follow(inputs: Sequence[str], opts: pipeline.Options | None = None, *, interval_s: float = 1.0,
           out: TextIO | None = None, color: bool = False, grace_s: float | None = None,
           quiet_s: float | None = None, max_s: float | None = None, heartbeat_s: float | None = 15.0,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Report:
    """Watch ``inputs`` until the job's end is seen (then ``grace_s`` more for late flushes), or
    nothing new arrived for ``quiet_s``, or ``max_s`` passed; Ctrl-C raises ``KeyboardInterrupt``.
    Prints the verdict to ``out`` when it is first established and each time it changes (marked
    provisional until the job's end is in the logs, then once more as final), and a heartbeat
    every ``heartbeat_s`` without new lines (None or 0: none); returns the final report."""
    out = out if out is not None else sys.stdout
    interval_s = max(0.01, interval_s)
    grace = grace_s if grace_s is not None else min(max(5 * interval_s, 1.0), 30.0)
    f = Follower(inputs, opts)
    t0 = last_change = last_beat = clock()
    ended_at: float | None = None
    shown: tuple | None = None
    waiting_said = False
    report: Report | None = None

    def say(text: str) -> None:
        stamp = f"[follow +{clock() - t0:.1f}s]"
        if color:
            stamp = f"\x1b[2m{stamp}\x1b[0m"
        out.write(f"{stamp} {visible(text)}\n")  # log text: its control characters shown, not obeyed
        out.flush()

    def show(rep: Report) -> None:
        nonlocal shown
        key = _key(rep)
        if key == shown:
            return
        if rep.verdict in (Verdict.ROOT_CAUSE, Verdict.JOB_LEVEL) or (shown is not None and len(shown) > 1):
            word = "verdict" if shown is None or len(shown) == 1 else "update"
            say(f"{'' if f.end_seen else 'provisional '}{word}: {headline(rep)}")
            shown = key

    def notes() -> None:
        for note in f.notes:
            say(note)
        f.notes.clear()

    def heartbeat(now: float) -> None:
        nonlocal last_beat
        if not heartbeat_s or now - max(last_change, last_beat) < heartbeat_s:
            return
        last_beat = now
        if not f.sources:
            say(f"waiting for logs to appear in {', '.join(inputs)} ({now - t0:.0f} s)")
            return
        n = len(f.sources)
        read = _size(sum(st.bytes_read for st in f.sources.values()))
        end = "the job's end is in the logs" if f.end_seen else "no end of the job in the logs yet"
        say(f"waiting: {n} source{'s' if n != 1 else ''} ({read} read), last new line {now - last_change:.0f} s ago; "
            f"{end}")

    try:
        while True:
            if f.poll():
                notes()
                last_change = clock()
                report = f.report()
                show(report)
                if f.end_seen and ended_at is None:
                    ended_at = clock()
                    say("the job's end is in the logs: collecting late lines for "
                        f"{grace:.0f} s" if grace >= 1 else "the job's end is in the logs")
            elif not f.sources and not waiting_said:
                say(f"waiting for logs to appear in {', '.join(inputs)}")
                waiting_said = True
            now = clock()
            if ended_at is not None and now - ended_at >= grace:
                break
            if quiet_s is not None and now - last_change >= quiet_s:
                say(f"nothing new for {quiet_s:g} s: stopping")
                break
            if max_s is not None and now - t0 >= max_s:
                break
            if not f.stdin_open and "-" in inputs and not any(i != "-" for i in inputs):
                break  # only stdin, and it ended
            heartbeat(now)
            sleep(interval_s)
    except KeyboardInterrupt:
        if not f.end_seen and shown is not None:
            say("interrupted before the job's end was in the logs: the verdict above is provisional")
        raise
    if f.poll(final=True) or report is None:
        notes()
        report = f.report()
        show(report)
    if f.end_seen:
        say(f"final verdict: {headline(report)}")
    else:
        say("stopped before the job's end was in the logs: the verdict is provisional")
        report = replace(report, diagnostics=report.diagnostics + (Diagnostic(
            "warning", None, "--follow stopped before the job's end was in the logs (no line of a rule tagged "
            f"'{Tag.JOB_END}'): this verdict is provisional; a rank may yet report an earlier failure",
            DiagCode.FOLLOW_PROVISIONAL),))
    return report
