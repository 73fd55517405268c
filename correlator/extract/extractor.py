"""One source in, one ``Digest`` out: the streaming, bounded-memory extraction stage.

Owns the ``Engine`` (the compiled rules and scanner, built once per process) and the ``Extractor``,
which composes the parts of one source's extraction, each owning its state: ``reader.Reader``
(bytes into line-aligned regions, look-back and look-ahead, line counts, ``Hygiene``),
``confirmer.Confirmer`` (candidate lines into matches: confirmation, who, time, context, what is
kept), ``statements.Statements`` (identity statements) and ``windows.Windows`` (head and tail
window facts). Memory is bounded by the buffer size, the kept history and the caps on matches;
nothing here depends on other sources.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from functools import partial
from typing import BinaryIO

from correlator.extract.confirmer import KEEP_FIRST, KEEP_LAST, MAX_TIMEOUTS, Confirmer
from correlator.extract.lines import Buffer, Context, Stamps
from correlator.extract.prefixes import split_prefix
from correlator.extract.reader import (
    Hygiene,
    Reader,
    blocks,
    count_lines,
    error_json,
    known_clean,
    own,
    read_stream,
    scan_region,
    warm_up,
)
from correlator.extract.replay import replay_line
from correlator.extract.scan import Pattern, Scanner, make_scanner
from correlator.extract.statements import FACTS, ONE_WRITER_PROBE, Statements
from correlator.extract.timestamps import NS, zone_name
from correlator.extract.windows import Windows
from correlator.model import DiagCode, Diagnostic, Digest, Rule, SourceInfo
from correlator.ruleset import RuleBudget, RuleSet

__all__ = ["CHUNK_BYTES", "KEEP_FIRST", "KEEP_LAST", "MAX_TIMEOUTS", "WHOLE_FILE_BYTES", "Engine", "ExtractOptions",
           "Extractor", "extract", "warm_up"]

CHUNK_BYTES = 16 << 20
#: a plain file up to this size is read in one piece (most one-file-per-rank logs): no cut, no
#: carried bytes, no look-back copy. Bigger ones are read in CHUNK_BYTES buffers, each joined with
#: its look-back once. (Where malloc is not tuned -- engines.tune_malloc -- a block of 32 MiB or
#: more is a fresh mmap whose page faults cost more than that copy; tuned, it comes from the heap.)
WHOLE_FILE_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class ExtractOptions:
    tz: tzinfo | None = None
    chunk_bytes: int = CHUNK_BYTES
    scanner: str | None = None
    #: names one run (one set of options): the rules' time budgets are counted per run
    #: (``ruleset.RuleBudget``); not part of equality, so that an early pool's spec still matches
    run: str = field(default_factory=lambda: os.urandom(8).hex(), compare=False)


class Engine:
    """The compiled rule set and scanner: built once per process, used for every source."""

    def __init__(self, rules: list[Rule], scanner: str | None = None) -> None:
        self.ruleset = RuleSet(rules)
        #: what each rule spent in the current run (shared memory: forked workers charge the same)
        self.budget = RuleBudget(len(self.ruleset.rules))
        patterns: list[Pattern] = []
        self.pattern_rule: list[int] = []  # pattern id -> rule index, or -1 - fact index
        for ri, rule in enumerate(self.ruleset.rules):
            for rx in rule.match.any:
                patterns.append(Pattern(len(patterns), rx, rule.match.prefilter))
                self.pattern_rule.append(ri)
        for fi, (name, rx, kws) in enumerate(FACTS):
            if name == "nccl-comm":
                #: the pattern id of NCCL's communicator init lines (``Statements.nccl_line_said``)
                self.nccl_fact = len(patterns)
            patterns.append(Pattern(len(patterns), rx, kws))
            self.pattern_rule.append(-1 - fi)
        #: what the scanner looks for: each rule pattern and each fact pattern, by id
        self.patterns: tuple[Pattern, ...] = tuple(patterns)
        self.scanner: Scanner = make_scanner(patterns, scanner, probes=lambda: _probes(self.ruleset, patterns,
                                                                                    self.pattern_rule))
        if self.scanner.name == "hyperscan":
            from correlator.extract.scan import window_finder

            window_finder()  # built here, so that forked workers inherit it

    def targets(self, pids: Iterable[int]) -> tuple[set[int], list[int]]:
        """The rules (indices) and the facts (indices, in ``pids``' order) a candidate's patterns are for."""
        rules: set[int] = set()
        facts: list[int] = []
        for pid in pids:
            target = self.pattern_rule[pid]
            if target >= 0:
                rules.add(target)
            else:
                facts.append(-1 - target)
        return rules, facts


def _probes(ruleset: RuleSet, patterns: Sequence[Pattern], pattern_rule: Sequence[int]) -> dict[int, list[str]]:
    """Each rule pattern's example lines that it matches (with or without their launcher prefix):
    what the Hyperscan database must report (``scan._without_missed``). Built only when the
    database is compiled, not loaded from the cache."""
    import regex

    out: dict[int, list[str]] = {}
    for p in patterns:
        ri = pattern_rule[p.id]
        if ri < 0:
            continue
        rx = regex.compile(p.regex, regex.V0)
        for ex in ruleset.rules[ri].examples:
            if ex.expect != "match":
                continue
            for ln in ex.log.splitlines():
                if ln.strip() and (rx.search(ln) or rx.search(split_prefix(ln)[1])):
                    out.setdefault(p.id, []).append(ln)
    return out


class Extractor:
    """One source's extraction, resumable: ``feed`` it the source's bytes in order, in pieces of any
    size, then ``finish()`` for its ``Digest`` (or ``snapshot()`` for the digest so far, feeding on).

    Composes the parts that own the running state between pieces: the ``reader`` (the bytes kept
    for look-back, the start of an unfinished line, the counts), the ``confirmer`` (the matches
    kept and counted), the ``statements`` (identity facts) and the ``windows`` (the head and tail
    windows, the writers' facts, the anchors); ``ctx`` is what they all read (the source, its
    stamps, the scanner). A problem with the bytes becomes a diagnostic; it never raises on the
    source's content. ``scanner`` replaces the engine's scanner (a split file's pieces, scanned in
    parallel elsewhere, replayed in order).
    """

    def __init__(self, src: SourceInfo, engine: Engine, opts: ExtractOptions | None = None,
                 scanner: Scanner | None = None) -> None:
        self.opts = opts or ExtractOptions()
        self.engine = engine
        ref = None
        if src.kind != "stdin":
            try:
                ref = int(os.path.getmtime(src.path) * NS)
            except OSError:
                ref = None
        self.ctx = Context(src, Stamps(self.opts.tz, ref), scanner if scanner is not None else engine.scanner)
        engine.budget.begin(self.opts.run)
        #: what is said about the source as it is read (then, at the end, what its parts say)
        self.diags: list[Diagnostic] = []
        self.hygiene = Hygiene()
        self.statements = Statements(self.ctx)
        self.confirmer = Confirmer(self.ctx, engine, self.statements, self.hygiene)
        fresh = getattr(self.ctx.scanner, "new_source", None)
        if fresh is not None:  # (what a scanner keeps between ranges is the source's own)
            fresh()
        told = getattr(self.ctx.scanner, "told", None)
        if told is not None:  # (a split file's pieces: their workers read its candidate lines)
            self.confirmer.replay = partial(replay_line, self.confirmer, told)
        self.windows = Windows(self.ctx)
        self.reader = Reader(self.ctx, self.hygiene, self.diags, self._process)
        #: what ``park`` let go of: the lengths of the probe, head, tail and look-back, where they
        #: end, and the length of the bytes after that (the held-back lines and an unfinished one)
        self.parked: tuple[int, int, int, int, int, int] | None = None

    @property
    def src(self) -> SourceInfo:
        return self.ctx.src

    @property
    def stopped(self) -> bool:
        """The source turned out not to be a text log: the rest is not read."""
        return self.reader.stopped

    def feed(self, chunk: bytes, count: bool = True) -> None:
        """The next bytes of the source (``count``: they are the source's own, not a conversion)."""
        self._unparked()
        if not self.reader.stopped:
            self.windows.tail = own(self.windows.tail)  # a view of the last buffer (``Windows.add_tail``)
        self.reader.feed(chunk, count)

    def end_of_input(self) -> None:
        """No more bytes follow: the unfinished last line is a line."""
        self.reader.end_of_input()

    def fail(self, e: BaseException, kind: str) -> None:
        """Reading the source failed after the bytes fed so far: say so, and analyse what came."""
        self.reader.fail(e, kind)

    def _process(self, data: bytes, begin: int, end_region: int, offset: int, keep_line: int) -> int:
        """Scan the line-aligned region ``data[begin:end_region]`` (source offset ``offset``, its
        first line ``keep_line``): before it, the bytes kept from earlier regions for look-back;
        after it, complete held-back lines for look-ahead (scanned with the next region). Returns
        the next line number."""
        ctx = self.ctx
        whole = offset == 0 and begin == 0 and end_region == len(data)
        ctx.stamps.refresh_reference(data, begin, len(data))  # (the held-back lines too: a full date there dates this region)
        probe = data[begin:min(end_region, begin + ONE_WRITER_PROBE)] if offset == 0 else None
        if probe is not None:
            self.statements.check_writers(probe)
        self.confirmer.add_probe(data, begin, end_region)
        self.windows.add_head(data, begin, end_region, probe)
        # the region's passes (NULs and UTF-8, the scan, candidates, line counts) one cache-sized block
        # at a time: a block is read from memory once, not once per pass (a 32 MiB file in one pass
        # each costs a fifth more per byte than a 4 MiB one)
        # (a split file's pieces come with their line counts and whether they are clean text: then
        # those passes are not made again here, ``count_lines`` and ``known_clean``)
        confirmer = self.confirmer
        scanner = ctx.scanner
        base = offset - begin
        utf8: bool | None = None
        looked = False  # (whether ``utf8`` was worked out: only a block that is checked needs it)
        next_line = keep_line
        for a, b in blocks(data, begin, end_region):
            reports = getattr(scanner, "reports", 0)
            lines = scan_region(scanner, data, a, b)  # (first: a replay then has the pieces' facts at hand)
            if not known_clean(scanner, data, a, b, base):
                if not looked:
                    utf8, looked = (None if self.hygiene.bad_utf8_at is not None else not data.isascii()), True
                self.hygiene.check(data, offset + (a - begin), a, b, utf8=utf8)
            confirmer.reports += getattr(scanner, "reports", 0) - reports
            confirmer.candidates += len(lines)
            line_no, counted_to = confirmer.process(Buffer(data, a, base, next_line), lines)
            next_line = line_no + count_lines(scanner, data, counted_to, b, base)  # = keep_line + lines up to b
        confirmer.build_kept(Buffer(data, begin, base, keep_line))
        self.windows.add_tail(data, begin, end_region, whole)
        return next_line

    def snapshot(self, partial: bool = False) -> Digest:
        """The digest of the lines fed so far, without ending the extraction: the state is copied
        (all but the compiled engine and scanner) and the copy finished. An unfinished last line
        waits for the next ``feed``, unless ``partial`` (then it is a line, as at the end)."""
        import copy

        self._unparked()
        memo = {id(self.engine): self.engine, id(self.ctx.scanner): self.ctx.scanner}
        twin = copy.deepcopy(self, memo)
        reader = twin.reader
        if not partial:
            cut = reader.carry.rfind(b"\n") + 1
            reader.carry = reader.carry[:cut]
            reader.in_long = False
        twin.end_of_input()
        d = twin.finish()
        twin.release()  # (the copy's bytes go now, not when the collector finds its cycle)
        twin.confirmer.probe = b""
        return d

    def park(self) -> None:
        """Let go of the source's own bytes that the extraction keeps between pieces (the look-back,
        the lines held back for look-ahead, the tail window, the head window and the writers' probe
        while they fill): ``resume`` reads them back. A follower of hundreds of files parks each between its looks."""
        w, r, c = self.windows, self.reader, self.confirmer
        self.parked = (len(c.probe), len(w.head), len(w.tail), len(r.keep), r.offset, len(r.carry))
        c.probe, w.head, w.tail, r.keep, r.carry = b"", b"", b"", b"", b""

    def _unparked(self) -> None:
        if self.parked is not None:
            raise RuntimeError(f"{self.ctx.src.path}: the extraction is parked; resume() it first")

    def resume(self, read: Callable[[int, int], bytes]) -> None:
        """Take back what ``park`` let go of: ``read(a, b)`` gives bytes ``[a, b)`` of the source."""
        if self.parked is None:
            return
        probe, head, tail, keep, end, carry = self.parked
        self.parked = None
        w, r, c = self.windows, self.reader, self.confirmer
        c.probe = read(0, probe) if probe else b""
        w.head = read(0, head) if head else b""
        w.tail = read(end - tail, end) if tail else b""
        r.keep = (w.tail[-keep:] if 0 < keep <= tail else read(end - keep, end)) if keep else b""
        r.carry = read(end, end + carry) if carry else b""

    def release(self) -> None:
        """Once the digest is made: the extractor and its reader refer to each other (the reader's
        ``process`` is this extractor's), a cycle that kept the whole source's buffer (the look-back
        and the tail window are views of it) and every kept match alive until the cyclic collector
        ran -- a pool worker, which allocates few containers, grew by about one file's size per
        file. The bytes kept are dropped and the cycle is broken; the extractor takes no more input."""
        reader, windows = self.reader, self.windows
        reader.keep = reader.carry = b""
        windows.head = windows.tail = b""
        reader.process = _released

    def finish(self) -> Digest:
        """End the extraction and return the source's digest."""
        self._unparked()
        src, reader, confirmer, stamps = self.ctx.src, self.reader, self.confirmer, self.ctx.stamps
        diags = self.diags
        if reader.total == 0 and not any(d.level == "error" for d in diags):
            diags.append(Diagnostic("info", src.path, "empty: nothing to read", DiagCode.EMPTY))
        diags += confirmer.timeout_diagnostics()
        text, long = self.hygiene.diagnostics(src.path)
        diags += text
        self.windows.finish(reader.offset)
        streams = self.windows.streams(reader.lines_total)
        matches = confirmer.kept_matches()
        diags += confirmer.dropped_diagnostics()
        groups, grouped = confirmer.groups()
        diags += grouped
        diags += long
        matches.sort(key=lambda m: m.offset)
        if stamps.tz_assumed:
            diags.append(Diagnostic("info", src.path, f"timestamps without a zone: read as local time in "
                                    f"{zone_name(self.opts.tz)} (--tz to choose another zone)",
                                    DiagCode.ZONE_ASSUMED))
        if stamps.year_inferred:
            diags.append(Diagnostic("info", src.path, "timestamps without a year (glog/syslog): year inferred from "
                                    "the file's other stamps or its modification time", DiagCode.TIME_ASSUMED))
        return Digest(src, tuple(matches), tuple(streams), tuple(self.windows.anchors.values()),
                      tuple(self.statements.identities), tuple(diags), reader.total, reader.lines_total,
                      reader.skipped, self.hygiene.lines_capped, confirmer.reports, confirmer.candidates,
                      confirmer.confirmed, tuple(groups))


def _released(data: bytes, begin: int, end: int, offset: int, line: int) -> int:
    raise RuntimeError("this extractor was released: it takes no more input")


def extract(src: SourceInfo, engine: Engine, opts: ExtractOptions | None = None,
            stream: BinaryIO | None = None, scanner: Scanner | None = None) -> Digest:
    """Read one source to the end and return its digest. Problems become diagnostics; never raises
    on the source's content. ``stream`` reads from an open binary stream instead of ``src.path``."""
    from correlator.extract.sources import open_source

    x = Extractor(src, engine, opts, scanner)
    try:
        if stream is None:
            stream, kind = open_source(src)
        else:
            kind = "memory"
    except OSError as e:
        return Digest(src, diagnostics=(Diagnostic("error", src.path, f"cannot open: {e.strerror or e}",
                                                   DiagCode.UNREADABLE),))
    try:
        with stream:
            read_size = x.opts.chunk_bytes
            if src.kind == "file" and src.size is not None and 0 < src.size <= WHOLE_FILE_BYTES:
                read_size = max(read_size, src.size + 1)  # a rank's file in one read: nothing to cut
            chunks = read_stream(stream, read_size)
            if src.stream == "error.json":
                whole = b"".join(chunks)
                converted, d = error_json(whole, src)
                if d:
                    x.diags.append(d)
                x.reader.total = len(whole)
                x.feed(converted, count=False)
            else:
                for chunk in chunks:
                    x.feed(chunk)
                    if x.stopped:
                        break
            x.end_of_input()
    except (EOFError, OSError, ValueError) as e:
        x.fail(e, kind)
    digest = x.finish()
    x.release()
    return digest
