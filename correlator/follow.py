"""Live mode: watch a running job's logs and say who failed first as soon as it is known.

Owns polling the inputs (growing files, new files in folders, globs, stdin), extracting only the
bytes that arrived since the last look, merging those pieces into one digest per source, and
re-running the global stage (``correlate.stage.correlate``) when something changed. It prints the verdict
when a root cause (or a job-level end) is first established and an update whenever it changes (a
lagging host flushing an earlier failure late), and stops when the job's end is seen: a SLURM
cancel or abort line, srun reporting exited tasks, torchrun's ``ChildFailedError`` summary.

Memory is bounded: per source it keeps a byte offset, the first and last matches per (rule,
writer) as ``extract`` does, a capped set of clock anchors and identity facts; log bytes are held
only while one new piece is read (plus 64 KiB of look-back so that context and inherited times
work across piece edges). Compressed files and torchelastic ``error.json`` files are read whole
again when they change: they cannot be appended to in place.
"""

from __future__ import annotations

import io
import os
import re
import select
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TextIO

from correlator import pipeline
from correlator.extract import sources
from correlator.extract.extractor import KEEP_FIRST, KEEP_LAST, Engine, ExtractOptions, extract
from correlator.model import FactSource
from correlator.model import (
    Anchor, DiagCode, Diagnostic, Digest, IdentityFact, Match, Report, Rule, SourceInfo, StreamFacts, Verdict,
)
from correlator.extract.timestamps import resolve_tz
from correlator.report.safe import visible

#: the tag of rules whose line ends the job (a SLURM cancel or abort, srun's exited tasks, torchrun's
#: ChildFailedError summary): after one of them, a short grace period collects late flushes, then stop
JOB_END_TAG = "job-end"
#: bytes before a new piece that are read again, so that its first lines have context and a time
LOOK_BACK = 64 << 10
#: a last line without a newline is left for the next look until it is this long
MAX_PENDING = 4 << 20
#: bytes read from a source in one look (a big file already there is taken in several looks)
MAX_PIECE = 256 << 20
MAX_ANCHORS_FIRST, MAX_ANCHORS_RECENT = 1024, 3072
MAX_IDENTITIES = 20_000
MAX_DIAGS = 200
_DIGITS = re.compile(r"\d+")


class _Window(io.RawIOBase):
    """Bytes ``[start, end)`` of a file, as a stream ``extract`` can read."""

    def __init__(self, path: str, start: int, end: int) -> None:
        super().__init__()
        self._f = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._f.seek(start)
        self._left = end - start

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        if self._left <= 0:
            return 0
        view = memoryview(b)[: min(len(b), self._left)]
        n = self._f.readinto(view) or 0
        self._left -= n
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


@dataclass
class _Source:
    """One followed source: where reading stopped, and the merged digest of what was read."""

    src: SourceInfo
    identity: tuple
    dev_ino: tuple[int, int] | None = None
    offset: int = 0  # bytes of complete lines analysed
    lines: int = 0  # newlines before ``offset``
    partial: bool = False  # the bytes before ``offset`` end inside a line (an over-long one, or the last)
    whole: bool = False  # compressed or error.json: read whole again on change
    binary: bool = False
    size_seen: int = -1
    bytes_read: int = 0
    bytes_skipped: int = 0
    lines_capped: int = 0
    first: dict[tuple, list[Match]] = field(default_factory=dict)
    last: dict[tuple, deque[Match]] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    streams: dict[tuple, StreamFacts] = field(default_factory=dict)
    anchors_first: dict[tuple, Anchor] = field(default_factory=dict)
    anchors_recent: OrderedDict[tuple, Anchor] = field(default_factory=OrderedDict)
    identities: dict[IdentityFact, None] = field(default_factory=dict)
    diags: OrderedDict[str, Diagnostic] = field(default_factory=OrderedDict)
    end_seen: bool = False
    pending: bytes = b""  # stdin: bytes after the last newline, and the look-back before them
    look_back: bytes = b""

    def reset(self) -> None:
        keep = (self.src, self.identity)
        self.__init__(*keep)  # type: ignore[misc]

    def add(self, d: Digest, skip_before: int, back_lines: int, base_offset: int, base_line: int,
            whole: bool, end_rules: frozenset[str] = frozenset()) -> None:
        """Merge the digest of one piece. Its offsets start at ``base_offset`` of the source, its
        lines at ``base_line``; matches before ``skip_before`` (the look-back, ``back_lines``
        lines) were seen already. A match of one of ``end_rules`` says the job ended."""
        for m in d.matches:
            if m.offset < skip_before:
                continue
            m = replace(m, offset=m.offset + base_offset, line=m.line + base_line)
            key = (m.rule_id, m.who.rank, m.who.local_rank, m.who.task)
            first = self.first.setdefault(key, [])
            if len(first) < KEEP_FIRST:
                first.append(m)
            else:
                last = self.last.setdefault(key, deque(maxlen=KEEP_LAST))
                if len(last) == KEEP_LAST:
                    self.dropped[m.rule_id] = self.dropped.get(m.rule_id, 0) + 1
                last.append(m)
            if m.rule_id in end_rules:
                self.end_seen = True
        single = len(d.streams) == 1
        for s in d.streams:
            key = (s.who.rank, s.who.local_rank, s.who.task)
            s = replace(s, last_offset=s.last_offset + base_offset,
                        last_step_offset=None if s.last_step_offset is None else s.last_step_offset + base_offset,
                        lines=max(0, s.lines - back_lines) if single else s.lines)
            old = self.streams.get(key)
            if old is None or whole:
                self.streams[key] = s
                continue
            self.streams[key] = replace(
                s,
                who=s.who if s.who.host is not None or old.who.host is None else old.who,
                lines=old.lines + s.lines if single else max(old.lines, s.lines),
                first_ns=min((t for t in (old.first_ns, s.first_ns) if t is not None), default=None),
                last_ns=s.last_ns if s.last_ns is not None else old.last_ns,
                last_offset=max(old.last_offset, s.last_offset),
                last_step=s.last_step if s.last_step is not None else old.last_step,
                last_step_ns=s.last_step_ns if s.last_step is not None else old.last_step_ns,
                last_step_offset=s.last_step_offset if s.last_step is not None else old.last_step_offset,
            )
        for a in d.anchors:
            key = (a.kind, a.key, a.who)
            if key in self.anchors_first or key in self.anchors_recent:
                continue
            if len(self.anchors_first) < MAX_ANCHORS_FIRST:
                self.anchors_first[key] = a
            else:
                self.anchors_recent[key] = a
                if len(self.anchors_recent) > MAX_ANCHORS_RECENT:
                    self.anchors_recent.popitem(last=False)
        for f in d.identities:
            if len(self.identities) < MAX_IDENTITIES:
                self.identities[f] = None
            if f.source is FactSource.FAILURE_TABLE and f.is_root_entry:
                self.end_seen = True  # torchrun's closing summary
        for x in d.diagnostics:
            key = _DIGITS.sub("#", f"{x.level}|{x.message}")
            self.diags.pop(key, None)
            self.diags[key] = x
            if len(self.diags) > MAX_DIAGS:
                self.diags.popitem(last=False)
        self.bytes_skipped += d.bytes_skipped
        self.lines_capped += d.lines_capped

    def digest(self) -> Digest:
        matches = [m for ms in self.first.values() for m in ms] + [m for ms in self.last.values() for m in ms]
        matches.sort(key=lambda m: m.offset)
        diags = list(self.diags.values())
        for rule_id, n in sorted(self.dropped.items()):
            diags.append(Diagnostic("info", self.src.path, f"{n} more matches of {rule_id} not kept (first and last kept)",
                                    DiagCode.MATCHES_NOT_KEPT, n))
        anchors = list(self.anchors_first.values()) + list(self.anchors_recent.values())
        return Digest(self.src, tuple(matches), tuple(self.streams.values()), tuple(anchors),
                      tuple(self.identities), tuple(diags), self.bytes_read, self.lines + self.partial,
                      self.bytes_skipped, self.lines_capped)


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


def _look_back_start(path: str, offset: int) -> int:
    """Where the look-back before ``offset`` starts: a line start at most ``LOOK_BACK`` before it."""
    if offset == 0:
        return 0
    lo = max(0, offset - LOOK_BACK)
    with open(path, "rb") as f:
        f.seek(lo)
        data = f.read(offset - lo)
    if lo == 0:
        return 0
    nl = data.find(b"\n")
    return offset if nl < 0 else lo + nl + 1


class Follower:
    """The state of a follow: call ``poll()`` repeatedly; ``report()`` correlates what was read."""

    def __init__(self, inputs: Sequence[str], opts: pipeline.Options | None = None,
                 rules: Sequence[Rule] | None = None) -> None:
        self.inputs = list(inputs)
        self.opts = opts or pipeline.Options()
        self.rules = list(rules) if rules is not None else pipeline.load_engine_rules(self.opts)
        self.engine = Engine(self.rules, self.opts.scanner)
        self.end_rules = frozenset(r.id for r in self.rules if JOB_END_TAG in r.tags)
        self.xopts = ExtractOptions(tz=resolve_tz(self.opts.tz), scanner=self.opts.scanner)
        self.sources: dict[str, _Source] = {}
        self.found_diags: list[Diagnostic] = []
        self.stdin_open = "-" in self.inputs
        self.started = time.perf_counter()

    @property
    def end_seen(self) -> bool:
        return any(s.end_seen for s in self.sources.values())

    def poll(self, final: bool = False) -> bool:
        """Read what arrived since the last poll; True if anything was read. ``final`` also reads
        the last line of each file when it has no newline yet."""
        found, diags = sources.discover([i for i in self.inputs if i != "-"], all_files=self.opts.all_files) \
            if any(i != "-" for i in self.inputs) else ([], [])
        self.found_diags = diags
        changed = False
        for src in found:
            st = self.sources.get(src.path)
            if st is None or st.identity != _identity(src):
                if st is not None:
                    changed = True  # its name now says another rank (a new file joined its family)
                st = self.sources[src.path] = _Source(src, _identity(src))
            changed |= self._read_file(st, final)
        if self.stdin_open:
            changed |= self._read_stdin(final)
        return changed

    def _read_file(self, st: _Source, final: bool) -> bool:
        path = st.src.path
        try:
            info = os.stat(path)
        except OSError:
            return False  # gone: what was read stays
        size, dev_ino = info.st_size, (info.st_dev, info.st_ino)
        if st.dev_ino is not None and (dev_ino != st.dev_ino or size < st.offset):
            st.reset()  # replaced or truncated (log rotation, a restarted job): read it again
            st.diags["restart"] = Diagnostic("info", path, "replaced or truncated while followed: read again",
                                              DiagCode.FOLLOW_RESTART)
        st.dev_ino = dev_ino
        if size == st.size_seen and not (final and st.offset < size):
            return False
        st.size_seen = size
        if st.offset == 0 and size > 0 and not st.whole:
            try:
                with open(path, "rb") as f:
                    head = f.read(8)
            except OSError as e:
                st.diags["open"] = Diagnostic("error", path, f"cannot open: {e.strerror or e}", DiagCode.UNREADABLE)
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
        """Extract ``[offset, end)`` with the look-back before it, and merge it."""
        path = st.src.path
        try:
            start = _look_back_start(path, st.offset)
            stream = io.BufferedReader(_Window(path, start, end), buffer_size=1 << 20)
        except OSError as e:
            st.diags["open"] = Diagnostic("error", path, f"cannot open: {e.strerror or e}", DiagCode.UNREADABLE)
            return True
        back = st.offset - start
        back_lines = 0
        if back:
            with open(path, "rb") as f:
                f.seek(start)
                back_lines = f.read(back).count(b"\n")
        d = extract(replace(st.src, size=end - start), self.engine, self.xopts, stream=stream)
        if any(x.code is DiagCode.BINARY for x in d.diagnostics):
            st.binary = True
        st.add(d, back, back_lines, start, st.lines - back_lines, whole=False, end_rules=self.end_rules)
        st.bytes_read += max(0, d.bytes_read - back)
        with open(path, "rb") as f:  # did the piece end inside a line?
            f.seek(end - 1)
            st.partial = f.read(1) != b"\n"
        st.lines += max(0, d.lines - back_lines - st.partial)
        st.offset = end
        return True

    def _read_whole(self, st: _Source, size: int) -> bool:
        st.reset()
        st.whole = True
        st.size_seen = size
        d = extract(replace(st.src, size=size), self.engine, self.xopts)
        st.add(d, 0, 0, 0, 0, whole=True, end_rules=self.end_rules)
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
        back = st.look_back
        joined = back + piece
        d = extract(replace(st.src, size=len(joined)), self.engine, self.xopts, stream=io.BytesIO(joined))
        back_lines = back.count(b"\n")
        st.add(d, len(back), back_lines, st.offset - len(back), st.lines - back_lines, whole=False, end_rules=self.end_rules)
        st.bytes_read += len(piece)
        st.lines += piece.count(b"\n")
        st.partial = not piece.endswith(b"\n")
        st.offset += len(piece)
        if len(joined) > LOOK_BACK:
            joined = joined[-LOOK_BACK:]
            joined = joined[joined.find(b"\n") + 1:] if b"\n" in joined else b""
        st.look_back = joined if not st.partial else b""
        return True

    def report(self) -> Report:
        digests = [s.digest() for s in self.sources.values()]
        report = pipeline.correlate(digests, self.rules, self.found_diags, started=time.perf_counter(),
                                    job_id=self.opts.job_id, engine_name="follow", scanner=self.engine.scanner.name)
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


def follow(inputs: Sequence[str], opts: pipeline.Options | None = None, *, interval_s: float = 1.0,
           out: TextIO | None = None, color: bool = False, grace_s: float | None = None,
           quiet_s: float | None = None, max_s: float | None = None,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Report:
    """Watch ``inputs`` until the job's end is seen (then ``grace_s`` more for late flushes), or
    nothing new arrived for ``quiet_s``, or ``max_s`` passed; Ctrl-C raises ``KeyboardInterrupt``.
    Prints the verdict to ``out`` when it is first established and each time it changes; returns
    the final report."""
    out = out if out is not None else sys.stdout
    interval_s = max(0.01, interval_s)
    grace = grace_s if grace_s is not None else min(max(5 * interval_s, 1.0), 30.0)
    f = Follower(inputs, opts)
    t0 = last_change = clock()
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
        if rep.verdict in (Verdict.ROOT_CAUSE, Verdict.JOB_LEVEL):
            word = "verdict" if shown is None or len(shown) == 1 else "update"
            say(f"{word}: {headline(rep)}")
            shown = key
        elif shown is not None and len(shown) > 1:
            say(f"update: {headline(rep)}")
            shown = key

    while True:
        if f.poll():
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
        sleep(interval_s)
    if f.poll(final=True) or report is None:
        report = f.report()
        show(report)
    return report
