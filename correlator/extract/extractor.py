"""One source in, one ``Digest`` out: the streaming, bounded-memory extraction stage.

Owns reading a source in large buffers, running the scanner over the bytes, confirming candidate
lines with the rules, giving each match its identity and time, and the few facts the global stage
needs (per-writer first/last output and progress from the head and tail windows, identity
statements, diagnostics). Memory is bounded by the buffer size, the kept history and the caps on
matches; nothing here depends on other sources.
"""

from __future__ import annotations

import json
import os
import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from functools import partial
from types import ModuleType
from typing import BinaryIO, Literal

from correlator.extract.dialects import stamp_hints
from correlator.extract.prefixes import (
    NO_PREFIX,
    Prefix,
    clean,
    nccl_origin,
    rank_in_text,
    ranks_in_text,
    split_prefix,
    strip_ansi,
)
from correlator.extract.scan import MAYBE_PREFIX, Pattern, Scanner, make_scanner
from correlator.extract.timestamps import NS, Parsed, StampParser, zone_name
from correlator.model import (
    Anchor,
    DiagCode,
    Diagnostic,
    Digest,
    FactSource,
    IdentityFact,
    Match,
    Role,
    Rule,
    Scope,
    SourceInfo,
    StreamFacts,
    TimeKind,
    Who,
)
from correlator.model.vocabulary import Capture
from correlator.ruleset import (
    RULE_EXCESS_BUDGET_S,
    RULE_MAX_TIMEOUTS,
    PatternTimeout,
    RuleBudget,
    RuleSet,
)

CHUNK_BYTES = 16 << 20
#: a plain file up to this size is read in one piece (most one-file-per-rank logs): no cut, no
#: carried bytes, no look-back copy. Bigger ones are read in CHUNK_BYTES buffers, each joined with
#: its look-back once. (Where malloc is not tuned -- engines.tune_malloc -- a block of 32 MiB or
#: more is a fresh mmap whose page faults cost more than that copy; tuned, it comes from the heap.)
WHOLE_FILE_BYTES = 64 << 20
#: a region is scanned in line-aligned blocks of about this size (``_blocks``): every pass over a
#: block finds it in the cache
BLOCK_BYTES = 2 << 20
#: how far before a line a rule's ``context_requires`` literal is looked for
CONTEXT_REQUIRES_BYTES = 64 << 10
#: bytes of the previous buffer kept for event-scope look-back and inherited times
KEEP_BYTES = 1 << 20
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
#: the head bytes on which a source is judged one writer's or not
ONE_WRITER_PROBE = 256 << 10
#: a line longer than this is cut for matching and display (the rest is still scanned): its start,
#: the start of its last ``\r`` frame and its end are kept (``_long_line_parts``)
MAX_LINE_BYTES = 1 << 20
#: of an over-long line, the bytes kept of its last frame's start and of its end
LONG_LINE_END_BYTES = 64 << 10
#: matches kept per (rule, writer) in one source: the first ones and the last ones
KEEP_FIRST, KEEP_LAST = 40, 10
#: lines of a run on which a rule's pattern may hit the time limit before the rule is dropped for the
#: rest of the run (``ruleset.RuleBudget``: shared by the forked workers of a run)
MAX_TIMEOUTS = RULE_MAX_TIMEOUTS
#: how many lines around a candidate are searched for a stamp or for context
LOOK_LINES = 400
CONTEXT_BEFORE, CONTEXT_AFTER = 8, 3
#: an inherited time takes the next stamped line's time when it is at most this far from the previous
INHERIT_NEXT_NS = 120 * 1_000_000_000
#: how far (bytes) the same writer's neighbouring lines are looked for in an interleaved stream
WRITER_WINDOW = 512 << 10
#: lines (at most bytes) held back at the end of each buffer for look-ahead
HOLD_LINES, HOLD_BYTES = 64, 256 << 10

_RANK_PREFIX = re.compile(rb"(?m)^(?:\s{0,6}\d{1,6}: )?(?:\[[A-Za-z_]*\d+\]:)?\[rank(\d{1,6})\]:")
_SRUN_PREFIX = re.compile(rb"(?m)^\s{0,6}(\d{1,6}): ")
# the same two, matched after a literal newline: a ``(?m)^`` pattern is tried at every byte, these
# jump from newline to newline (about 10x faster); the first line is matched on its own
_RANK_PREFIX_NL = re.compile(rb"\n(?:\s{0,6}\d{1,6}: )?(?:\[[A-Za-z_]*\d+\]:)?\[rank(\d{1,6})\]:")
_SRUN_PREFIX_NL = re.compile(rb"\n\s{0,6}(\d{1,6}): ")


def _line_start_captures(text: bytes, hyperscan: bool = False) -> set[bytes]:
    """``set(_RANK_PREFIX.findall(text)) | set(_SRUN_PREFIX.findall(text))``, faster. With
    ``hyperscan``, only the lines Hyperscan says may hold such a prefix are matched (a match that
    reaches over blank lines gives the same capture on the line holding the number)."""
    out: set[bytes] = set()
    if hyperscan:
        from correlator.extract.scan import window_finder

        finder = window_finder()
        if finder is not None:
            for ls in [0, *finder.prefix_lines(text)]:
                for whole in (_RANK_PREFIX, _SRUN_PREFIX):
                    m = whole.match(text, ls)
                    if m:
                        out.add(m.group(1))
            return out
    for whole, nl in ((_RANK_PREFIX, _RANK_PREFIX_NL), (_SRUN_PREFIX, _SRUN_PREFIX_NL)):
        m = whole.match(text)
        if m:
            out.add(m.group(1))
        out.update(nl.findall(text))
    return out


#: torchrun's --tee tag of a node's worker at a line start ("[default3]:", behind an srun label)
_LOCAL_TAG_NL = re.compile(rb"\n(?:\s{0,6}\d{1,6}: )?\[(?!rank\d)[A-Za-z_]+(\d{1,5})\]:")
#: how far into a file named like a rank's its workers' --tee tags are looked for (a node's workers
#: all start at once: their tags are in the first lines)
LOCAL_TAG_PROBE = 64 << 10
#: bytes of a rank-named file searched for lines stating two ranks in their text (a node's processes
#: all announce themselves at start-up; the whole 256 KiB probe cost 1.6 ms a file)
RANK_TEXT_PROBE = 16 << 10


def _several_local_tags(text: bytes) -> bool:
    """Whether lines of ``text`` carry two different --tee tags ([default0]:, [default1]:)."""
    first = _LOCAL_TAG_NL.match(b"\n" + text[:200])
    seen = {first.group(1)} if first else set()
    for m in _LOCAL_TAG_NL.finditer(text):
        seen.add(m.group(1))
        if len(seen) >= 2:
            return True
    return False


_PROGRESS = re.compile(rb"(?i)\b(?:global[_ ]step|step|iteration|iter)\b\s*[=:]?\s*(\d{1,9})\b")
#: what follows the number of slurmstepd's "*** STEP 612604.0 ON node14 CANCELLED ...": a job step,
#: not training progress (checked where a ``_PROGRESS`` match ends, in both window paths)
_SLURM_STEP_TAIL = re.compile(rb"\.\d+ ON ")
_TABLE_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$")
_TABLE_RANK = re.compile(r"(-?\d+)\s*\(local_rank:\s*(\d+)\)")
_TABLE_EXIT = re.compile(r"(-?\d+)\s*\(pid:\s*(\d+)\)")
_NCCL_COMM = re.compile(r"NCCL INFO (?:ncclCommInitRank\w* )?comm 0x[0-9a-fA-F]+ rank (\d+) n[Rr]anks (\d+)")
_RDZV_GROUP = re.compile(r"group_rank=(\d+)")
_SYSLOG_HOST = re.compile(r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT[\d:.,+-]+) ([\w.-]+) kernel: ")
_NCCL_BUS = re.compile(r"\bbusId ([0-9a-fA-F]{1,16})\b")
_RAY_PG = re.compile(r"Setting up process group for: \S+ \[rank=(\d+)\]")
_RAY_TRAIN = re.compile(r"(?:\bip=(?P<ip>[\d.]{7,15}), )?pid=(?P<pid>\d+)\) world_rank=(?P<rank>\d+), local_rank=(?P<local>\d+)")
_RDZV_GLOBAL = re.compile(r"global_ranks=\[([\d, ]*)\]")
_RDZV_LOCAL = re.compile(r"local_ranks=\[([\d, ]*)\]")

# built-in fact patterns, scanned with the rules (ids after the rules' own)
_FACTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("table", r"rank\s*:\s*-?\d+\s*\(local_rank:\s*\d+\)", ("(local_rank:",)),
    ("nccl-comm", r"NCCL INFO (?:ncclCommInitRank\w* )?comm 0x[0-9a-fA-F]+ rank \d+ n[Rr]anks \d+",
     ("NCCL INFO comm 0x", "NCCL INFO ncclCommInitRank")),
    ("rendezvous", r"global_ranks=\[", ("global_ranks=[",)),
    # Ray's torch runner (RaySGD, ray.train) names each worker's rank as it joins the process group
    ("ray-pg", r"Setting up process group for: \S+ \[rank=\d+\]", ("Setting up process group for:",)),
    # Ray Train's table of its workers: "- (node_id=..., ip=10.0.3.11, pid=5003) world_rank=3, local_rank=1, ..."
    ("ray-train", r"pid=\d+\) world_rank=\d+, local_rank=\d+", ("world_rank=",)),
)


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
        for fi, (_name, rx, kws) in enumerate(_FACTS):
            patterns.append(Pattern(len(patterns), rx, kws))
            self.pattern_rule.append(-1 - fi)
        self.scanner: Scanner = make_scanner(patterns, scanner, probes=lambda: _probes(self.ruleset, patterns,
                                                                                    self.pattern_rule))
        if self.scanner.name == "hyperscan":
            from correlator.extract.scan import window_finder

            window_finder()  # built here, so that forked workers inherit it


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


@dataclass
class _Writer:
    """Running facts about one writer (prefix key) of a source."""

    lines: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    last_offset: int = 0
    last_step: int | None = None
    last_step_ns: int | None = None
    last_step_offset: int | None = None
    who: Who = field(default_factory=Who)


class _State:
    def __init__(self, src: SourceInfo, engine: Engine, opts: ExtractOptions, scanner: Scanner | None = None) -> None:
        self.src = src
        self.engine = engine
        #: finds the candidate lines: the engine's, or a replay of pieces scanned elsewhere
        self.scanner: Scanner = scanner if scanner is not None else engine.scanner
        ref = None
        if src.kind != "stdin":
            try:
                ref = int(os.path.getmtime(src.path) * NS)
            except OSError:
                ref = None
        self.stamps = StampParser(opts.tz, ref, reference_is_bound=ref is not None)
        self.matches: list[Match] = []
        self.kept: dict[tuple[str, tuple], int] = defaultdict(int)
        #: the last KEEP_LAST matches of each (rule, writer): built ones, and ones of the current block
        #: not built yet (``_Pending``, built when the block ends)
        self.tail_keep: dict[tuple[str, tuple], list[Match | _Pending]] = defaultdict(list)
        self.dropped: dict[str, int] = defaultdict(int)
        self.identities: list[IdentityFact] = []
        self.diags: list[Diagnostic] = []
        self.last_stamp: dict[tuple, int] = {}
        self.lines_capped = 0
        #: the digest's cost counts: the scanner's reports on this source's regions (the scanner
        #: counts over everything it scans), its candidate lines and confirmed matches
        self.reports = 0
        self.candidates = 0
        self.confirmed = 0
        self.capped_line = 0  # the last over-long line counted (one line may come in several pieces)
        #: rule id -> [lines on which its pattern hit the time limit, first such line]
        self.timeouts: dict[str, list[int]] = {}
        engine.budget.begin(opts.run)
        #: rule index -> line on which the rule spent its budget for the run, in this source
        self.spent: dict[int, int] = {}
        self.nul_bytes = 0
        self.first_nul: int | None = None
        self.bad_utf8_at: int | None = None
        self.hosts: dict[tuple, str] = {}
        self.pids: dict[tuple, int] = {}
        self.tz_assumed = False
        self.year_inferred = False
        self.head = b""
        #: whether the source is one writer's (decided on its first ONE_WRITER_PROBE bytes)
        self.one_writer: bool | None = None
        #: the source's first ONE_WRITER_PROBE bytes, and the launcher prefix kinds found in them up
        #: to ``kinds_to`` (``_one_process_before``: judged on the bytes before a line only, so that
        #: how the source was cut into buffers changes nothing)
        self.probe = b""
        self.kinds: set[bytes] = set()
        self.kinds_to = 0
        #: writer key -> what its last stamp search saw (the next unstamped line reuses it)
        self.scans: dict[tuple, _Scan] = {}
        #: the window finder's last look: ((base offset, length) of the bytes, what it found there);
        #: a small source's head and tail windows are the same bytes, looked at once
        self.window_scan: tuple[tuple[int, int], tuple | None] | None = None

    def check_writers(self, region: bytes) -> None:
        """A file whose lines carry several ranks' prefixes is a combined stream, and one with
        several workers' --tee tags ([default0]:, [default1]:) a node's: a number in its name
        (``train-hgx-001.log``) names a node or a job, not a rank -- for the agent's untagged lines too."""
        if self.src.file_rank is None:
            return
        probe = region[:ONE_WRITER_PROBE]
        ranks = _line_start_captures(probe, getattr(self.scanner, "name", "") == "hyperscan")
        # (or lines that state two ranks in their own text, "[rank 5] ...", "[rank 13] ...": a node's
        # file of unprefixed processes, named after its host)
        if len(ranks) >= 2 or _several_local_tags(probe[:LOCAL_TAG_PROBE]) or len(ranks_in_text(probe[:RANK_TEXT_PROBE])) >= 2:
            from dataclasses import replace

            self.src = replace(self.src, file_rank=None)

    def add_match(self, m: Match, key: tuple) -> None:
        self.confirmed += 1
        k = (m.rule_id, key)
        n = self.kept[k]
        self.kept[k] = n + 1
        if n < KEEP_FIRST:
            self.matches.append(m)
            return
        self._keep_last(k, m)

    def counts_first(self, rule_id: str, key: tuple) -> bool:
        """Whether the next match of ``rule_id`` by writer ``key`` is among its first KEEP_FIRST."""
        return self.kept.get((rule_id, key), 0) < KEEP_FIRST

    def add_pending(self, pm: _Pending) -> None:
        """Count a match past its first KEEP_FIRST; it is built (``_build``) only if it is still
        among the last KEEP_LAST when its block ends."""
        self.confirmed += 1
        k = (pm.rule.id, pm.key)
        self.kept[k] += 1
        self._keep_last(k, pm)

    def _keep_last(self, k: tuple[str, tuple], m: Match | _Pending) -> None:
        last = self.tail_keep[k]
        last.append(m)
        if len(last) > KEEP_LAST:
            gone = last.pop(0)
            if isinstance(gone, _Pending):
                gone.alive = False
            self.dropped[k[0]] += 1


#: one shared copy of each (name, value) capture pair: a cascade of 100,000 ranks' watchdog lines
#: captures the same SeqNum, op and timeout on every line (cleared when it grows past its cap)
_PAIRS: dict[tuple[str, str], tuple[str, str]] = {}
_PAIRS_CAP = 1 << 16


def _captures(caps: dict[str, str]) -> tuple[tuple[str, str], ...]:
    if len(_PAIRS) > _PAIRS_CAP:
        _PAIRS.clear()
    return tuple(_PAIRS.setdefault(kv, kv) for kv in sorted(caps.items()))


def _who(src: SourceInfo, prefix: Prefix, caps: dict[str, str], msg: str) -> Who:
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


class _Buffer:
    """A line-aligned region of the source with the bytes kept before it."""

    def __init__(self, data: bytes, begin: int, base_offset: int, base_line: int) -> None:
        self.data = data  # kept history + new region
        self.begin = begin  # index in data where the new region starts
        self.base_offset = base_offset  # source offset of data[0]
        self.base_line = base_line  # 1-based line number of the line starting at data[begin]

    def line_at(self, start: int) -> tuple[int, int]:
        end = self.data.find(b"\n", start)
        return start, (len(self.data) if end < 0 else end)

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


def _decode(raw: bytes) -> str:
    if len(raw) > MAX_LINE_BYTES:
        return "\r".join(strip_ansi(p.decode("utf-8", "replace")) for p in _long_line_parts(raw))
    return strip_ansi(raw.decode("utf-8", "replace"))


def _long_line_parts(raw: bytes) -> list[bytes]:
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


def _same_writer(data: bytes, s: int, pbytes: bytes) -> bool:
    return not pbytes or data.startswith(pbytes, s)


_WRITER_TAG = re.compile(rb"(?:\s{0,6}\d{1,6}: )?\[(?!rank\d)[A-Za-z_]+\d{1,5}\]:")


def _prefix_bytes(raw: bytes, prefix: Prefix) -> bytes:
    """The bytes every line of the same process starts with. Under torchrun --tee that is the srun
    task and tee tag (PyTorch adds its ``[rankN]:`` to some lines only); otherwise the whole prefix."""
    if not prefix.length:
        return b""
    if prefix.local_rank is not None:
        m = _WRITER_TAG.match(raw)
        if m:
            return raw[: m.end()]
    return raw[: prefix.length]


def _parse_line(raw: bytes) -> tuple[Prefix, str]:
    return split_prefix(_decode(raw))


def _with_stamp(prefix: Prefix, msg: str) -> str:
    """The message with the stamp its launcher tag carried (mpirun --timestamp-output), for reading
    its time; rules match the message alone."""
    return f"{prefix.stamp} {msg}" if prefix.stamp else msg


def _line_stamp(state: _State, raw: bytes, observe: bool = True) -> Parsed | None:
    prefix, msg = _parse_line(raw)
    return _stamp_of(state, _with_stamp(prefix, msg), observe)


def _stamp_of(state: _State, msg: str, observe: bool = True) -> Parsed | None:
    """The line's stamp; a full date also becomes the reference for year-less stamps after it
    (``observe``: not from the head/tail windows, whose two paths visit lines in different orders)."""
    p = state.stamps.parse(msg)
    if p is not None:
        if p.tz_assumed:
            state.tz_assumed = True
        if p.year_inferred:
            state.year_inferred = True
        elif observe:
            state.stamps.observe(p)
    return p


@dataclass(slots=True)
class _Scan:
    """One writer's last search for the stamped lines around an unstamped line. Its next unstamped
    line lies among the lines scanned after it, none of them stamped but perhaps the last: that
    line's search starts where this one stopped instead of parsing the same lines again (a log
    of many unstamped error lines cost LOOK_LINES parses per line; the result is the same)."""

    at: int  # source offset of the line searched from
    after: list[int]  # source offsets of the same writer's lines scanned after it
    hit: int | None  # hi from the stamped line found after it (the last of ``after``)
    lo: int | None  # time of the stamped line found before it, its offset, its distance in lines
    lo_at: int | None
    lo_dist: int


#: the ``_inherit`` memo key of a one-writer source's lines, tagged or not
_ONE_WRITER_KEY = ("one-writer",)


def _inherit(state: _State, buf: _Buffer, start: int, pbytes: bytes, key: tuple,
             last: dict[tuple, int] | None = None) -> tuple[int | None, int | None, int | None]:
    """(time, lo, hi) from the nearest stamped lines of the same writer before and after;
    ``last``: the writers' last stamps as they were at the line (else ``state.last_stamp``)."""
    data = buf.data
    base = buf.base_offset
    here = base + start
    memo = state.scans.get(key)
    i = -1
    if memo is not None and memo.at < here and memo.after:
        i = bisect_left(memo.after, here)
        if i >= len(memo.after) or memo.after[i] != here:
            i = -1
    lo = lo_at = hi = None
    lo_dist = 0
    if i < 0:
        for n, (s, e) in enumerate(buf.writer_before(start, pbytes, LOOK_LINES), 1):
            p = _line_stamp(state, data[s:e])
            if p is not None:
                lo, lo_at, lo_dist = p.time_ns, base + s, n
                break
        after: list[int] = []
        budget, frm, ceiling = LOOK_LINES, start, None
    else:
        assert memo is not None
        # the lines between the last search's line and this one carry no stamp (that line neither)
        d = i + 1 + memo.lo_dist
        floor = max(0, start - WRITER_WINDOW) if pbytes else 0  # as far back as writer_before looks
        rel = memo.lo_at - base if memo.lo_at is not None else -1
        if rel >= 0 and d <= LOOK_LINES and (rel > floor or rel == floor == 0):
            lo, lo_at, lo_dist = memo.lo, memo.lo_at, d
        after = memo.after[i + 1:]
        hi = memo.hit
        budget = LOOK_LINES - len(after)
        frm = (after[-1] if after else here) - base
        ceiling = start + WRITER_WINDOW if pbytes else None
    if hi is None and budget > 0:
        for s, e in buf.writer_after(frm, pbytes, budget):
            if ceiling is not None and s + len(pbytes) > ceiling:
                break
            after.append(base + s)
            p = _line_stamp(state, data[s:e])
            if p is not None:
                hi = p.time_ns + p.resolution_ns
                break
    state.scans[key] = _Scan(here, after, hi, lo, lo_at, lo_dist)
    if lo is None:
        lo = (state.last_stamp if last is None else last).get(key)
    if lo is not None and hi is not None and hi < lo:
        hi = lo  # a clock that stepped back: do not invent a negative interval
    # An unstamped error line is most often the end of a traceback: printed as the exception
    # ends the process, right before the next stamped line of the same process (exit warnings), long
    # after the previous one (the step or save that failed may have run for minutes). So the time is
    # the next stamped line's when it is near, else the previous one's; [lo, hi] is kept either way.
    if lo is not None and hi is not None and hi - lo <= INHERIT_NEXT_NS:
        return hi - 1, lo, hi
    if lo is None and hi is not None:
        return hi - 1, None, hi
    return lo, lo, hi


def _context(buf: _Buffer, start: int, pbytes: bytes, n_before: int, n_after: int) -> tuple[list[str], list[str]]:
    data = buf.data
    before = [_parse_line(data[s:e])[1].rstrip("\r") for s, e in buf.writer_before(start, pbytes, n_before)]
    before.reverse()
    after = [_parse_line(data[s:e])[1].rstrip("\r") for s, e in buf.writer_after(start, pbytes, n_after)]
    return before, after


def _table_fact(state: _State, buf: _Buffer, start: int, prefix: Prefix, msg: str, pbytes: bytes) -> None:
    """A torchelastic failure-table record around its ``rank : N (local_rank: M)`` line."""
    m = _TABLE_RANK.search(msg)
    if not m or not re.match(r"\s*rank\s*:", msg):
        return
    fields: dict[str, str] = {}
    before, after = _context(buf, start, pbytes, 6, 6)
    section_root = False
    for line in before:
        f = _TABLE_FIELD.match(line)
        if f:
            fields.setdefault(f.group(1), f.group(2).strip())
        elif re.match(r"\s*\[\d+\]:\s*$", line):
            fields.clear()  # a new record starts
    for line in after:
        if re.match(r"\s*\[\d+\]:\s*$", line) or line.startswith("---") or line.startswith("==="):
            break
        f = _TABLE_FIELD.match(line)
        if f:
            fields.setdefault(f.group(1), f.group(2).strip())
    for s, e in buf.lines_before(start, 60):
        if not _same_writer(buf.data, s, pbytes):
            continue
        _, line = _parse_line(buf.data[s:e])
        if "Root Cause (first observed failure)" in line:
            section_root = True
            break
        if "Failures:" in line or "Other Failures:" in line:
            break
    exitcode = pid = None
    ex = _TABLE_EXIT.search(fields.get("exitcode", ""))
    if ex:
        exitcode, pid = int(ex.group(1)), int(ex.group(2))
    t = None
    if fields.get("time"):
        p = state.stamps.parse(fields["time"])
        t = p.time_ns if p else None
    rank = int(m.group(1))
    who = Who(rank=rank if rank >= 0 else None, local_rank=int(m.group(2)), task=prefix.task,
              host=fields.get("host") or None, pid=pid)
    state.identities.append(IdentityFact(who, prefix.task, state.src.path, FactSource.FAILURE_TABLE, t, exitcode, section_root))


#: a launcher prefix in the middle of a line: a progress bar without a newline, then a rank's line
_EMBEDDED_PREFIX = re.compile(r"(?:\[(?:rank\d{1,6}|[A-Za-z_]{1,20}\d{1,5})\]:|\[\d{1,6},\d{1,6}\]<std(?:out|err)>:)+")
#: mpirun's tag inside a line: another process's output cut into this one (no newline between them)
_MPI_EMBEDDED = re.compile(r"\[\d{1,6},\d{1,6}\]<std(?:out|err)>:")
#: the characters a token is made of (``report.redact``'s shapes): a run of them across the ``\r``
#: before an event's frame may be a secret the frame boundary cut in two
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+/=-")
#: a run across the cut at least this long is kept whole (the shortest credential shapes are 20)
CUT_RUN_MIN = 16
_TABLE_SEP = re.compile(r"^\s*(?:\[\d+\]:\s*$|={20,}|-{20,}|Root Cause|Failures:|Other Failures:)")


def _event_text(msg: str, frame: str, matches: Callable[[str], bool]) -> str:
    """The text an event keeps of ``frame`` (the ``\\r`` frame of ``msg`` its rule matched): the
    frame, and when the ``\\r`` before it cuts a run of token characters that is no part of the
    error (``Logging in with hf_abc\\rdef… OSError``: a token cut by a progress frame, its second
    half a bare run of letters that the rule still ``matches`` the frame without) the run's start
    too, joined by that ``\\r``. Masking then reads the token across the frame boundary, as it does
    in a whole line of context; a run that is no secret is shown with its ``\\r``."""
    if not frame or frame[0] not in _TOKEN_CHARS or msg.startswith(frame):
        return frame
    at = msg.find("\r" + frame)
    if at <= 0:
        return frame
    lo = at
    while lo > max(0, at - 256) and msg[lo - 1] in _TOKEN_CHARS:
        lo -= 1
    after = next((i for i, c in enumerate(frame[:256]) if c not in _TOKEN_CHARS), min(len(frame), 256))
    if lo == at or at - lo + after < CUT_RUN_MIN or not matches(frame[after:]):
        return frame
    return msg[lo:at] + "\r" + frame


def _still_matches(rs: RuleSet, index: int, text: str, *,
                   context: Sequence[str] | Callable[[], Sequence[str]]) -> bool:
    try:
        return rs.confirm(index, text, context)[0] is not None
    except PatternTimeout:
        return False


def _table_owner(buf: _Buffer, start: int, pbytes: bytes, who: Who) -> Who:
    """A line inside a torchelastic failure table (the agent's copy of a worker's traceback) is about
    the rank the table record names, not about the agent that printed it."""
    data = buf.data
    lo = start
    for _ in range(80):  # no record line in reach (one find, not 80 parses): nothing to look for
        if lo <= 0:
            break
        lo = data.rfind(b"\n", 0, lo - 1) + 1
    if data.find(b"(local_rank:", lo, start) < 0:
        return who
    for s, e in buf.lines_before(start, 80):
        if not _same_writer(buf.data, s, pbytes):
            continue
        _, line = _parse_line(buf.data[s:e])
        m = _TABLE_FIELD.match(line)
        if m and m.group(1) == "rank":
            r = _TABLE_RANK.search(m.group(2))
            if r:
                rank = int(r.group(1))
                return Who(rank if rank >= 0 else None, int(r.group(2)), who.task, who.host, who.pid)
            return who
        if _TABLE_SEP.match(line):
            return who
    return who


def _fact(state: _State, buf: _Buffer, kind: int, start: int, prefix: Prefix, msg: str, pbytes: bytes) -> None:
    name = _FACTS[kind][0]
    if name == "table":
        _table_fact(state, buf, start, prefix, msg, pbytes)
    elif name == "nccl-comm":
        m = _NCCL_COMM.search(msg)
        origin = nccl_origin(msg)
        if m:
            who = Who(rank=int(m.group(1)), local_rank=origin[2] if origin else prefix.local_rank,
                      task=prefix.task, host=origin[0] if origin else None, pid=origin[1] if origin else None)
            if prefix.rank is not None and prefix.rank != who.rank:
                return  # a sub-communicator's rank, not the global one
            # (the communicator's size rides along: a sub-communicator's rank is not the global one;
            # and the GPU's PCI bus id, which a kernel's Xid line names)
            bus = _NCCL_BUS.search(msg)
            state.identities.append(IdentityFact(who, prefix.task, state.src.path, FactSource.NCCL_INIT,
                                                 comm_size=int(m.group(2)),
                                                 bus=int(bus.group(1), 16) if bus else None))
    elif name == "ray-pg":
        m = _RAY_PG.search(msg)
        if m and prefix.pid is not None:  # the worker's pid is in Ray's "(pid=N)" tag
            state.identities.append(IdentityFact(Who(rank=int(m.group(1)), host=prefix.host, pid=prefix.pid),
                                                 prefix.task, state.src.path, FactSource.RAY))
    elif name == "ray-train":
        m = _RAY_TRAIN.search(msg)
        if m:
            who = Who(rank=int(m.group("rank")), local_rank=int(m.group("local")), host=m.group("ip"),
                      pid=int(m.group("pid")))
            state.identities.append(IdentityFact(who, None, state.src.path, FactSource.RAY))
    elif name == "rendezvous":
        g = _RDZV_GLOBAL.search(msg)
        if not g:
            return
        group = None
        local_list = None
        for s, e in buf.lines_before(start, 12):
            _, line = _parse_line(buf.data[s:e])
            mg = _RDZV_GROUP.search(line)
            if mg and group is None:
                group = int(mg.group(1))
            ml = _RDZV_LOCAL.search(line)
            if ml and local_list is None:
                local_list = [int(x) for x in ml.group(1).replace(" ", "").split(",") if x]
        globals_ = [int(x) for x in g.group(1).replace(" ", "").split(",") if x]
        locals_ = local_list if local_list and len(local_list) == len(globals_) else list(range(len(globals_)))
        for lr, gr in zip(locals_, globals_):
            state.identities.append(IdentityFact(Who(rank=gr, local_rank=lr, task=prefix.task), prefix.task,
                                                 state.src.path, FactSource.RENDEZVOUS))


@dataclass(slots=True)
class _Pending:
    """A confirmed match past the first KEEP_FIRST of its (rule, writer): what its line said, and
    what of the state its time depends on at that point. Its time, rank and context are built only
    if it is still among the last KEEP_LAST when its block ends (``_build``); the others are counted.
    A line that may name its writer's host while that writer's host is not known yet is built at
    once (its rank may make that host the writer's, for the matches after it)."""

    rule: Rule
    caps: dict[str, str]
    frame: str
    #: the text the match shows (the frame, or its event's text when a frame boundary cut a run)
    shown: str
    #: the prefix the rank is read from (an embedded one's, if the frame held one), and the line's own
    prefix: Prefix
    line_prefix: Prefix
    start: int
    line_no: int
    stamp: Parsed | None
    key: tuple
    pbytes: bytes
    primary: bool
    #: ``_one_process_before`` at the line (it depends on how much of the probe was judged)
    one_process: bool
    #: the writers' last stamps that ``_inherit`` may fall back on, as they were at the line
    last: dict[tuple, int]
    #: the writer's host as known at the line
    host: str | None
    alive: bool = True

    @property
    def rule_id(self) -> str:
        return self.rule.id


def _line_time(state: _State, buf: _Buffer, start: int, prefix: Prefix, pbytes: bytes, key: tuple,
               p: Parsed | None, one_process: bool, last: dict[tuple, int] | None = None
               ) -> tuple[int | None, int | None, int | None, TimeKind]:
    """A match's (time, lo, hi, kind): its own stamp ``p``, else inherited from its writer's lines."""
    if p is not None:
        return p.time_ns, p.time_ns, p.time_ns + p.resolution_ns, TimeKind.OWN
    if pbytes and one_process:
        # one process's file (its stderr tagged [rankN]:, its stdout plain): the nearest stamped
        # line of either is its time, not a tagged line from half an hour before
        t, lo, hi = _inherit(state, buf, start, b"", _ONE_WRITER_KEY, last)
        return t, lo, hi, (TimeKind.INHERITED if t is not None else TimeKind.NONE)
    t, lo, hi = _inherit(state, buf, start, pbytes, key, last)
    if t is None and prefix.task is not None and (prefix.rank is not None or prefix.local_rank is not None):
        # "3: [rank3]: Traceback ...": a process's tagged stderr under srun --label; its srun
        # task's own lines ("3: 2026-... INFO ...") are the nearest clock it has
        outer = pbytes[:pbytes.find(b": ") + 2] if b": " in pbytes else b""
        if outer and outer != pbytes:
            t, lo, hi = _inherit(state, buf, start, outer, (*key, "task-clock"), last)
    return t, lo, hi, (TimeKind.INHERITED if t is not None else TimeKind.NONE)


def _match_context(buf: _Buffer, start: int, pbytes: bytes) -> tuple[str, ...]:
    """The lines around a failure that may become the root (the traceback above it)."""
    before, after = _context(buf, start, pbytes, CONTEXT_BEFORE, CONTEXT_AFTER)
    return tuple(clean(x)[:300] for x in before) + (">>",) + tuple(clean(x)[:300] for x in after)


def _match_who(state: _State, buf: _Buffer, start: int, prefix: Prefix, pbytes: bytes, key: tuple, rule: Rule,
               caps: dict[str, str], frame: str) -> Who:
    who = _who(state.src, prefix, caps, frame)
    if who.rank is None and who.local_rank is None and rule.role is not Role.TEARDOWN:
        who = _table_owner(buf, start, pbytes, who)
    if who.host is None and key in state.hosts:
        who = Who(who.rank, who.local_rank, who.task, state.hosts[key], who.pid)
    elif who.host is not None and who.rank is not None:
        state.hosts.setdefault(key, who.host)
    return who


def _may_name_host(prefix: Prefix, caps: dict[str, str], msg: str) -> bool:
    """Whether ``_who`` may find a host for this line (in its captures, its prefix, an NCCL origin
    or a syslog header)."""
    return bool(caps.get(Capture.HOST) or prefix.host or " kernel: " in msg or nccl_origin(msg) is not None)


def _build(state: _State, buf: _Buffer, pm: _Pending) -> Match:
    """The match a pending one stands for, as ``_process_candidates`` would have built it at its line."""
    t, lo, hi, kind = _line_time(state, buf, pm.start, pm.line_prefix, pm.pbytes, pm.key, pm.stamp,
                                 pm.one_process, pm.last)
    context = _match_context(buf, pm.start, pm.pbytes) if pm.primary else ()
    who = _who(state.src, pm.prefix, pm.caps, pm.frame)
    if who.rank is None and who.local_rank is None and pm.rule.role is not Role.TEARDOWN:
        who = _table_owner(buf, pm.start, pm.pbytes, who)
    if who.host is None and pm.host is not None:
        who = Who(who.rank, who.local_rank, who.task, pm.host, who.pid)
    return Match(rule_id=pm.rule.id, path=state.src.path, line=pm.line_no, offset=buf.base_offset + pm.start,
                 text=clean(pm.shown), who=who, time_ns=t, lo_ns=lo, hi_ns=hi, time_kind=kind,
                 captures=_captures(pm.caps), context=context, attempt=state.src.attempt,
                 tz_assumed=bool(pm.stamp and pm.stamp.tz_assumed))


def _process_candidates(state: _State, buf: _Buffer, lines: dict[int, set[int]]) -> tuple[int, int]:
    """Confirm, time and record the candidate lines; returns (line number, offset) of the last one
    (the buffer's start when there was none), so the caller counts only the lines after it.

    A candidate is confirmed before anything is built around it (an event rule's context only when
    its line matched and it has patterns to try over the context). A confirmed match past the first
    KEEP_FIRST of its rule and writer is only counted (``_Pending``) until the block ends; then the
    ones still among the last KEEP_LAST get their time, rank and context."""
    engine = state.engine
    rs = engine.ruleset
    budget = engine.budget
    data = buf.data
    line_no = buf.base_line
    counted_to = buf.begin
    pending: list[_Pending] = []
    for start in sorted(lines):
        if start < buf.begin:
            continue
        line_no += _count_nl(data, counted_to, start)
        counted_to = start
        _, end = buf.line_at(start)
        raw = data[start:end]
        if len(raw) > MAX_LINE_BYTES and line_no != state.capped_line:
            state.capped_line = line_no
            state.lines_capped += 1
        prefix, msg = _parse_line(raw)
        pbytes = _prefix_bytes(raw, prefix)
        key = prefix.key
        rule_idx: set[int] = set()
        for pid in lines[start]:
            target = engine.pattern_rule[pid]
            if target >= 0:
                rule_idx.add(target)
            else:
                _fact(state, buf, -1 - target, start, prefix, msg, pbytes)
        if not rule_idx:
            continue
        frames = [f for f in msg.split("\r") if f.strip()] if "\r" in msg else [msg]
        found: list[tuple[Rule, dict[str, str], str]] = []
        cut_runs: dict[str, str] = {}  # rule id -> its event's text when a frame boundary cut a run
        made: dict[str, list[str]] = {}  # the line's event context (200 lines before, 60 after), once built

        def around(rule: Rule, start: int = start, pbytes: bytes = pbytes, made: dict = made) -> list[str]:
            if "before" not in made:
                made["before"] = _context(buf, start, pbytes, 200, 0)[0]
            ctx = made["before"][-rule.match.context_lines:] if rule.match.context_lines else []
            if rule.match.context_after:
                if "after" not in made:
                    made["after"] = _context(buf, start, pbytes, 0, 60)[1]
                ctx = [*ctx, *made["after"][: rule.match.context_after]]
            return ctx

        for ri in rule_idx:
            rule = rs.rules[ri]
            if budget.disabled(ri):
                continue  # its budget for this run is spent
            ctx: list[str] | Callable[[], list[str]] = []
            if rule.match.scope is Scope.EVENT:
                if rule.match.context_requires and not any(
                        data.rfind(lit.encode(), max(0, start - CONTEXT_REQUIRES_BYTES), start) >= 0
                        for lit in rule.match.context_requires):
                    continue  # what its context must hold is not there
                ctx = lambda rule=rule: around(rule)  # noqa: E731 - built only if the line matched
            for frame in frames:
                inner = _EMBEDDED_PREFIX.search(frame)
                if inner is not None and inner.start() > 0:
                    frame = frame[inner.start():]
                try:
                    caps, spent = rs.confirm(ri, frame, ctx, budget)
                except PatternTimeout as e:
                    state.timeouts.setdefault(e.rule_id, [0, line_no])[0] += 1
                    if e.spent:
                        state.spent[ri] = line_no
                    break
                if spent:
                    state.spent[ri] = line_no
                if caps is not None:
                    found.append((rule, caps, frame))
                    if frame[:1] in _TOKEN_CHARS:
                        cut_runs[rule.id] = _event_text(msg, frame, partial(_still_matches, rs, ri, context=ctx))
                    break
                if spent:
                    break
        if not found:
            continue
        top = max(r.priority for r, _, _ in found)
        p = _stamp_of(state, _with_stamp(prefix, msg))
        t: int | None
        lo: int | None
        hi: int | None
        if p is not None:
            state.last_stamp[key] = p.time_ns
        primary = any(r.role is Role.PRIMARY for r, _, _ in found)
        one_process = p is None and bool(pbytes) and _one_process_before(state, buf.base_offset + start)
        line_prefix = prefix
        timed: tuple[int | None, int | None, int | None, TimeKind] | None = None
        context: tuple[str, ...] | None = None
        for rule, caps, frame in found:
            if rule.priority != top:
                continue
            if _EMBEDDED_PREFIX.match(frame):
                mpi = _MPI_EMBEDDED.match(frame) is not None
                inner_prefix, frame = split_prefix(frame)
                if (prefix.rank is None and prefix.local_rank is None) or (mpi and inner_prefix.rank is not None):
                    prefix = Prefix(prefix.task if inner_prefix.task is None else inner_prefix.task,
                                    inner_prefix.local_rank, inner_prefix.rank, prefix.length)
            if not state.counts_first(rule.id, key) and (key in state.hosts or not _may_name_host(prefix, caps, frame)):
                last = {k: state.last_stamp[k] for k in (key, _ONE_WRITER_KEY, (*key, "task-clock"))
                        if k in state.last_stamp} if p is None else {}
                pm = _Pending(rule, caps, frame, cut_runs.get(rule.id, frame), prefix, line_prefix, start, line_no, p,
                              key, pbytes, primary, one_process, last, state.hosts.get(key))
                state.add_pending(pm)
                pending.append(pm)
                continue
            if timed is None:
                timed = _line_time(state, buf, start, line_prefix, pbytes, key, p, one_process)
            if context is None:
                context = _match_context(buf, start, pbytes) if primary else ()
            t, lo, hi, kind = timed
            who = _match_who(state, buf, start, prefix, pbytes, key, rule, caps, frame)
            state.add_match(Match(
                rule_id=rule.id, path=state.src.path, line=line_no, offset=buf.base_offset + start,
                text=clean(cut_runs.get(rule.id, frame)), who=who, time_ns=t, lo_ns=lo, hi_ns=hi, time_kind=kind,
                captures=_captures(caps), context=context, attempt=state.src.attempt,
                tz_assumed=bool(p and p.tz_assumed),
            ), key)
    for pm in pending:  # (in line order) the pending matches still kept: built while their bytes are here
        if pm.alive:
            ring = state.tail_keep[(pm.rule.id, pm.key)]
            ring[next(i for i, x in enumerate(ring) if x is pm)] = _build(state, buf, pm)
    return line_no, counted_to


def _window_facts(state: _State, data: bytes, base_offset: int, writers: dict[tuple, _Writer],
                  anchors: dict[tuple, Anchor], head: bool) -> None:
    """Per-writer first/last stamps, last progress and step anchors from a head or tail window."""
    if _window_facts_fast(state, data, base_offset, writers, anchors, head):
        return
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
        prefix, msg = _parse_line(raw)
        key = prefix.key
        w = writers.get(key)
        if w is None:
            w = writers[key] = _Writer(who=_who(state.src, prefix, {}, ""))
        if w.who.host is None and b" NCCL " in raw:
            origin = nccl_origin(msg)
            if origin is not None:
                w.who = Who(w.who.rank, w.who.local_rank, w.who.task, origin[0], origin[1])
        if head:
            if key in seen_first:
                if b"step" not in raw and b"iter" not in raw and b"Step" not in raw:
                    continue
            p = _stamp_of(state, _with_stamp(prefix, msg), False)  # (not observed: see _stamp_of)
            if p is not None and key not in seen_first:
                seen_first.add(key)
                if w.first_ns is None or p.time_ns < w.first_ns:
                    w.first_ns = p.time_ns
        else:
            w.lines += 1
            w.last_offset = max(w.last_offset, line_offset)
            p = _stamp_of(state, _with_stamp(prefix, msg), False)  # (not observed: see _stamp_of)
            if p is not None:
                w.last_ns = p.time_ns
                state.last_stamp[key] = p.time_ns
        if head and p is None:
            continue
        pm = _PROGRESS.search(raw)
        if pm is None or _SLURM_STEP_TAIL.match(raw, pm.end()):
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
            found[akey] = Anchor("step", str(step), w.who, p.time_ns, state.src.path)
    _add_anchors(anchors, list(found.items()), head)


#: step anchors kept per writer and window: the first ones of the head window, the last ones of
#: the tail window. Clock offsets are medians over steps that every host logged: with 8 ranks a
#: host, 16 steps a rank are ~100 per host, plenty, while every step of 3 MiB of log made ~1 M
#: anchors in a 4096-rank job (32 a window still cost the global stage ~0.5 s there).
ANCHORS_PER_WINDOW = 8


def _add_anchors(anchors: dict[tuple, Anchor], new: list[tuple[tuple, Anchor]], head: bool) -> None:
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


# --- the window facts without a Python step per line (one writer, Hyperscan) ----------------------
#
# The loop above decodes and parses every line of the head and tail windows: 3 MiB per source,
# and for a job of many small files, every line twice. When no line of the window can carry a
# launcher prefix (one writer: the usual one-file-per-rank case) the same facts follow from far
# fewer lines: the first stamped line, the last non-blank and the last stamped line, and the
# lines holding a progress marker, found by Hyperscan; only those are decoded and parsed, with
# the same functions. Windows with prefixes, ANSI codes that hide a prefix or a stamp from the byte
# hints (``_ansi_hides_nothing``), or without Hyperscan take the loop above.

#: a line start that may hold a launcher prefix: a superset of what ``split_prefix`` recognises
#: (Unicode spaces and digits included), so that only prefix-free windows take the fast path
_MAYBE_PREFIX = re.compile(MAYBE_PREFIX)
_BLANK_LINE = re.compile(rb"\n[ \t\r\x0b\x0c]*(?=\n|\Z)")
#: lines read one by one from either end before the stamp hints are used to skip ahead
_FAST_PROBE_LINES = 32


#: ``prefixes._ANSI`` over bytes (its classes are ASCII: the same codes as in the decoded text)
_ANSI_B = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_STAMP_HINTS_B = tuple(re.compile(h, re.M if multi else 0) for h, multi in stamp_hints())


def _ansi_hides_nothing(data: bytes) -> bool:
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
        if _MAYBE_PREFIX.match(b"\n" + bare) and not _MAYBE_PREFIX.match(b"\n" + raw):
            return False
        if any(h.search(bare) for h in _STAMP_HINTS_B) and not any(h.search(raw) for h in _STAMP_HINTS_B):
            return False
        i = data.find(b"\x1b", e)
    return True


def _window_facts_fast(state: _State, data: bytes, base_offset: int, writers: dict[tuple, _Writer],
                       anchors: dict[tuple, Anchor], head: bool) -> bool:
    """``_window_facts`` for a window whose lines mostly carry no launcher prefix; False if the
    window is not like that (the caller then runs the line-by-line loop)."""
    if getattr(state.scanner, "name", "") != "hyperscan" or not data or (b"\x1b" in data and not _ansi_hides_nothing(data)):
        return False
    from correlator.extract.scan import window_finder

    finder = window_finder()
    if finder is None:
        return False
    # a small source's head and tail windows are the same bytes: look at them once
    # (and the head of a source under 2 MiB is the start of its tail window: only the rest is new)
    ws = state.window_scan
    if ws is None or ws[0] != (base_offset, len(data)):
        prev = ws[1] if ws is not None and ws[0][0] == base_offset and ws[0][1] < len(data) \
            and ws[1] is not None and data[ws[0][1] - 1:ws[0][1]] == b"\n" else None
        scanned = _scan_window(data, finder, ws[0][1] if ws is not None and prev is not None else 0, prev)
        ws = state.window_scan = ((base_offset, len(data)), scanned)
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
            cache[s] = _line_stamp(state, data[a:b], False)  # (not observed: see _stamp_of)
        return cache[s]

    def nonblank(s: int) -> bool:
        a, b = span(s)
        return bool(data[a:b].strip())

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
            writers[k] = _Writer(who=_who(state.src, prefix, {}, ""))

    # a writer without a host takes the one its first NCCL line names (anchors made before that
    # line keep the writer as it was)
    switched: dict[tuple, tuple[int, Who]] = {}
    for ls in nccl_lines:
        ls, le = span(ls)
        k = _parse_line(data[ls:le])[0].key if ls in excluded else plain
        w = writers.get(k)
        if w is not None and w.who.host is None:
            origin = nccl_origin(_parse_line(data[ls:le])[1])
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
                        if s == f_at or (s > f_at and (data.find(b"step", s, e) >= 0 or data.find(b"iter", s, e) >= 0
                                                       or data.find(b"Step", s, e) >= 0))]
            new += _progress_facts(state, w, k, anchors, eligible, stamp, head=True, who_at=who_at,
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
            state.last_stamp[k] = p.time_ns
        new += _progress_facts(state, w, k, anchors, progress.get(k, []), stamp, head=False, who_at=who_at,
                               base_offset=base_offset)
    _add_anchors(anchors, [(akey, anchor) for _s, _step, akey, anchor in sorted(new, key=lambda x: x[0])], head)
    return True


#: more prefixed lines than this in a window: a combined stream, read line by line
_FAST_MAX_PREFIXED = 4096


def _scan_window(data: bytes, finder, start: int = 0, prev: tuple | None = None) -> tuple | None:
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
        if _MAYBE_PREFIX.match(data, start - 1):  # the slice's first line (after a newline)
            marks.insert(0, start)
    elif _MAYBE_PREFIX.match(b"\n" + data[:1 << 16]):
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
        prefix, _msg = _parse_line(raw)
        if prefix.key == plain:
            continue
        excluded.add(s)
        other.setdefault(prefix.key, []).append(s)
        who_of.setdefault(prefix.key, prefix)
    # progress lines by writer: (line start, step, line end) where ``_PROGRESS`` matches; the
    # step is the digit run that ends the line's first match
    progress: dict[tuple, list[tuple[int, int, int]]] = {}
    digits = b"0123456789"
    for s, _a, b in progress_starts:
        if _SLURM_STEP_TAIL.match(data, b):
            continue
        d = b
        while d > _a and data[d - 1] in digits:
            d -= 1
        e = data.find(b"\n", b)
        k = _parse_line(data[s:e])[0].key if s in excluded else plain
        progress.setdefault(k, []).append((s, int(data[d:b]), n if e < 0 else e))
    if not data.endswith(b"\n"):  # the unterminated last line, with the exact pattern
        s = data.rfind(b"\n") + 1
        pm = _PROGRESS.search(data, s)
        if pm is not None and not _SLURM_STEP_TAIL.match(data, pm.end()):
            k = _parse_line(data[s:])[0].key if s in excluded else plain
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


def _progress_facts(state: _State, w: _Writer, key: tuple, anchors: dict[tuple, Anchor],
                    progress: list[tuple[int, int, int]], stamp, head: bool,
                    who_at, base_offset: int = 0) -> list[tuple[int, str, tuple, Anchor]]:
    """The last step and the new step anchors of one writer from its progress lines, as the
    line-by-line loop would find them, parsing as few stamps as that allows. Anchors are
    returned with their line offsets, for the caller to insert in line order."""
    if not progress:
        return []
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
                out.append((s, str(step), akey, Anchor("step", str(step), who_at(key, s), p.time_ns, state.src.path)))
                break
        if len(out) > limit:  # keep the window's end of them
            out.sort(key=lambda o: o[0])
            out = out[:limit] if head else out[-limit:]
    return out

def _error_json(raw: bytes, src: SourceInfo) -> tuple[bytes, Diagnostic | None]:
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
        return raw, Diagnostic("info", src.path, "error file is not torchelastic's JSON: read as text", DiagCode.ERROR_FILE_AS_TEXT)
    stamp = ""
    if ts is not None and str(ts).isdecimal():
        from datetime import datetime

        stamp = datetime.fromtimestamp(int(ts), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ ")
    lines = [stamp + "[error.json] " + line for line in (stack.rstrip("\n").split("\n") if stack else [])]
    lines.append(stamp + text.replace("\n", " "))
    return ("\n".join(lines) + "\n").encode("utf-8"), None


class Extractor:
    """One source's extraction, resumable: ``feed`` it the source's bytes in order, in pieces of any
    size, then ``finish()`` for its ``Digest`` (or ``snapshot()`` for the digest so far, feeding on).

    Owns the running state between pieces: the bytes kept for look-back (``keep``), the start of an
    unfinished line (``carry``), the tail window, the head window's progress, the writers' facts,
    the anchors, and the counts. A problem with the bytes becomes a diagnostic; it never raises on
    the source's content. ``scanner`` replaces the engine's scanner (a split file's pieces, scanned
    in parallel elsewhere, replayed in order).
    """

    def __init__(self, src: SourceInfo, engine: Engine, opts: ExtractOptions | None = None,
                 scanner: Scanner | None = None) -> None:
        self.opts = opts or ExtractOptions()
        self.state = _State(src, engine, self.opts, scanner)
        self.writers: dict[tuple, _Writer] = {}
        self.anchors: dict[tuple, Anchor] = {}
        self.total = 0
        self.lines_total = 0
        self.skipped = 0
        self.keep: bytes | memoryview = b""
        self.keep_line = 1
        self.tail: bytes | memoryview = b""
        self.head_done = False
        self.offset = 0  # source offset of the first byte not yet in a processed region
        self.carry = b""
        self.in_long = False  # inside a line longer than the carry limit (processed in pieces)
        self.first = True
        #: the source turned out not to be a text log: the rest is not read
        self.stopped = False

    @property
    def src(self) -> SourceInfo:
        return self.state.src

    def feed(self, chunk: bytes, count: bool = True) -> None:
        """The next bytes of the source (``count``: they are the source's own, not a conversion)."""
        from correlator.extract.sources import text_probe

        if self.stopped:
            return
        state, src = self.state, self.state.src
        self.keep, self.tail = _own(self.keep), _own(self.tail)  # views of the last buffer (``_whole_windows``)
        if count:
            self.total += len(chunk)
        if self.first:
            self.first = False
            if not text_probe(chunk[:8192]):
                state.diags.append(Diagnostic("warning", src.path,
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
            cut = _cut_index(carry, chunk)
        if cut is not None:  # the usual case: look-back, region and look-ahead in one copy
            self.in_long = False
            lc = len(carry)
            keep = self.keep
            if not keep and not lc and cut == len(chunk):
                data = chunk
            else:
                after = memoryview(chunk)[cut - lc:]
                data = b"".join((keep, carry, memoryview(chunk)[: cut - lc], _ahead_of(after)))
            begin, end_region = len(keep), len(keep) + cut
            self.carry = chunk[cut - lc:]
            next_line, self.keep, self.tail, self.head_done = _process_data(
                state, data, begin, end_region, self.keep_line, offset, self.tail, self.writers, self.anchors,
                self.head_done)
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
            if self.keep_line != state.capped_line:
                state.capped_line = self.keep_line
                state.lines_capped += 1
            self.in_long = True
        else:
            self.in_long = False
            cut = _hold_back(data, cut)
        region, self.carry = data[:cut], data[cut:]
        self._region(region, self.carry)
        self.lines_total += region.count(b"\n")
        self.offset += len(region)

    def _region(self, region: bytes, ahead: bytes = b"") -> None:
        self.keep_line, self.keep, self.tail, self.head_done = _process_region(
            self.state, region, self.keep, self.keep_line, self.offset, self.tail, self.writers, self.anchors,
            self.head_done, ahead)

    def end_of_input(self) -> None:
        """No more bytes follow: the unfinished last line is a line."""
        if self.carry:
            region = self.carry if self.carry.endswith(b"\n") else self.carry + b"\n"
            self._region(region)
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
        self.state.diags.append(Diagnostic(
            "error", self.src.path,
            f"{'truncated or corrupt ' + what + ' stream' if what else 'read error'} after "
            f"{self.offset + len(self.carry)} bytes ({reason}); what came before was analysed, the rest is lost",
            DiagCode.TRUNCATED if what else DiagCode.READ_ERROR))
        if self.carry:
            self._region(self.carry + b"\n")
            self.offset += len(self.carry)
            self.carry = b""

    def snapshot(self) -> Digest:
        """The digest of the complete lines fed so far, without ending the extraction (an unfinished
        last line waits for the next ``feed``): the state is copied (all but the compiled engine and
        scanner) and the copy finished."""
        import copy

        memo = {id(self.state.engine): self.state.engine, id(self.state.scanner): self.state.scanner}
        twin = copy.deepcopy(self, memo)
        cut = twin.carry.rfind(b"\n") + 1
        twin.carry = twin.carry[:cut]
        twin.in_long = False
        twin.end_of_input()
        return twin.finish()

    def finish(self) -> Digest:
        """End the extraction and return the source's digest."""
        state, src = self.state, self.state.src
        if self.total == 0 and not any(d.level == "error" for d in state.diags):
            state.diags.append(Diagnostic("info", src.path, "empty: nothing to read", DiagCode.EMPTY))
        rules = state.engine.ruleset.rules
        spent = {rules[ri].id: (ri, line) for ri, line in state.spent.items()}
        for rule_id in sorted(set(state.timeouts) | set(spent)):
            n, first_line = state.timeouts.get(rule_id, (0, 0))
            said = (f"its pattern ran longer than the time limit on {n} line(s) (first: line {first_line}) and was "
                    f"abandoned there" if n else "")
            if rule_id in spent:
                ri, line = spent[rule_id]
                lost, excess = state.engine.budget.spent(ri)
                said += ("; " if said else "") + (
                    f"its time budget for this run is spent at line {line} ({lost} line(s) abandoned on the time "
                    f"limit, {excess:.1f} s beyond what a linear pattern needs; the budget is {MAX_TIMEOUTS} lines or "
                    f"{RULE_EXCESS_BUDGET_S:g} s): the rule was not tried again in this run")
            state.diags.append(Diagnostic(
                "warning", src.path,
                f"rule {rule_id}: {said} (a catastrophic pattern? check it with 'correlate rules check')",
                DiagCode.RULE_TIMEOUT, n))
        if state.nul_bytes:
            state.diags.append(Diagnostic(
                "warning", src.path,
                f"{state.nul_bytes} NUL byte(s) (first at byte {state.first_nul}) removed from the text: runs of NULs are "
                f"what a file system leaves where a writer's blocks never reached the disk (a node that died, a file "
                f"truncated under its writer)", DiagCode.NUL_BYTES, state.nul_bytes))
        if state.bad_utf8_at is not None:
            state.diags.append(Diagnostic("info", src.path, f"invalid UTF-8 (first at byte {state.bad_utf8_at}): "
                                                            f"such bytes are shown as U+FFFD", DiagCode.INVALID_UTF8))
        if not self.head_done:
            _flush_head(state, self.writers, self.anchors)
        if self.tail:
            tail = _tail_window(state, self.tail)
            _window_facts(state, tail, self.offset - len(tail), self.writers, self.anchors, head=False)
        single = len(self.writers) <= 1 or src.file_rank is not None or src.file_local_rank is not None
        streams = []
        for w in self.writers.values():
            lines = self.lines_total if single and len(self.writers) == 1 else w.lines
            streams.append(StreamFacts(w.who, src.path, lines, w.first_ns, w.last_ns, w.last_offset,
                                       w.last_step, w.last_step_ns, src.attempt, w.last_step_offset))
        matches = list(state.matches)
        for kept in state.tail_keep.values():
            for m in kept:
                assert isinstance(m, Match)  # (a pending match is built, or dropped, when its block ends)
                matches.append(m)
        for rule_id, n in sorted(state.dropped.items()):
            state.diags.append(Diagnostic("info", src.path, f"{n} more matches of {rule_id} not kept (first and last kept)",
                                          DiagCode.MATCHES_NOT_KEPT, n))
        if state.lines_capped:
            state.diags.append(Diagnostic("warning", src.path,
                                          f"{state.lines_capped} line(s) longer than {MAX_LINE_BYTES >> 20} MiB: "
                                          f"scanned, but only their start, the start of their last frame and their end were matched", DiagCode.LONG_LINES_CUT,
                                          state.lines_capped))
        matches.sort(key=lambda m: m.offset)
        if state.tz_assumed:
            state.diags.append(Diagnostic("info", src.path, f"timestamps without a zone: read as local time in "
                                          f"{zone_name(self.opts.tz)} (--tz to choose another zone)",
                                          DiagCode.ZONE_ASSUMED))
        if state.year_inferred:
            state.diags.append(Diagnostic("info", src.path, "timestamps without a year (glog/syslog): year inferred from the file's other stamps or its modification time",
                                          DiagCode.TIME_ASSUMED))
        return Digest(src, tuple(matches), tuple(streams), tuple(self.anchors.values()), tuple(state.identities),
                      tuple(state.diags), self.total, self.lines_total, self.skipped, state.lines_capped,
                      state.reports, state.candidates, state.confirmed)


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
            chunks = _read(stream, read_size, src, x.state)
            if src.stream == "error.json":
                whole = b"".join(chunks)
                converted, d = _error_json(whole, src)
                if d:
                    x.state.diags.append(d)
                x.total = len(whole)
                x.feed(converted, count=False)
            else:
                for chunk in chunks:
                    x.feed(chunk)
                    if x.stopped:
                        break
            x.end_of_input()
    except (EOFError, OSError, ValueError) as e:
        x.fail(e, kind)
    return x.finish()


def _read(stream, size: int, src: SourceInfo, state: _State) -> Iterator[bytes]:
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


_np: ModuleType | Literal[False] | None = None


def warm_up() -> None:
    """Import what the first long span would (numpy, ~80 ms): a pool's worker does it while the
    parent process is still starting."""
    global _np
    if _np is None:
        try:
            import numpy
        except ImportError:  # pragma: no cover - numpy comes with pandas/pyarrow
            _np = False
        else:
            _np = numpy


def _count_nl(data: bytes, start: int, end: int) -> int:
    """``data.count(b"\\n", start, end)``; numpy counts a long span about 5x faster."""
    if end - start < (256 << 10):
        return data.count(b"\n", start, end)
    if _np is None:
        warm_up()
    np = _np
    if not np:  # no numpy
        return data.count(b"\n", start, end)
    return int(np.count_nonzero(np.frombuffer(data, np.uint8, end - start, start) == 10))


def _hold_back(data: bytes, cut: int) -> int:
    """Where to end this round's region instead of at ``cut`` (a line start): the last lines are
    held back for the next round, so every candidate line has the lines after it (event context,
    the next stamped line) at hand; never more than HOLD_LINES, HOLD_BYTES or half the buffer."""
    hold = cut - 1
    floor = max(cut - HOLD_BYTES, len(data) // 2)
    for _ in range(HOLD_LINES):
        nl = data.rfind(b"\n", floor, hold)
        if nl < 0:
            break
        hold = nl
    return hold + 1 if 0 < hold and hold + 1 < cut else cut


def _cut_index(carry: bytes, chunk: bytes) -> int | None:
    """Where the loop in ``extract`` cuts ``carry + chunk`` (at the last newline, holding back the
    last lines), found without joining them; None when the cut is not in ``chunk`` (no newline in
    it, or the hold reaches back into ``carry``)."""
    i = chunk.rfind(b"\n")
    if i < 0:
        return None
    lc = len(carry)
    cut = lc + i + 1
    size = lc + len(chunk)
    hold = cut - 1
    lo = max(cut - HOLD_BYTES, size // 2)  # never more than half the buffer
    for _ in range(HOLD_LINES):
        nl = chunk.rfind(b"\n", max(lo - lc, 0), hold - lc) if hold > lc else -1
        if nl >= 0:
            nl += lc
        elif lo < lc:
            nl = carry.rfind(b"\n", lo, min(hold, lc))
        if nl < 0:
            break
        hold = nl
    if hold > 0 and hold + 1 < cut:
        cut = hold + 1
    return None if cut < lc else cut


def _ahead_of(held: bytes | memoryview) -> bytes:
    """The look-ahead a region gets from the lines held back after it: their first HOLD_BYTES,
    whole lines only."""
    ahead = bytes(held[:HOLD_BYTES])
    return ahead[: ahead.rfind(b"\n") + 1]


def _blocks(data: bytes, begin: int, end: int, size: int | None = None) -> Iterator[tuple[int, int]]:
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


def _hygiene(state: _State, data: bytes, offset: int, begin: int = 0, end: int | None = None,
             utf8: bool | None = None) -> None:
    """Count what the text cleaning will hide in ``data[begin:end]`` (source offset ``offset``):
    NUL bytes and invalid UTF-8 (C-speed checks; the range is copied only to decode non-ASCII).
    ``utf8`` False: ``data`` is known to be ASCII; True: it is not (decode the range); None: look."""
    end = len(data) if end is None else end
    first = data.find(b"\x00", begin, end)
    if first >= 0:
        if state.first_nul is None:
            state.first_nul = offset + first - begin
        state.nul_bytes += data.count(b"\x00", begin, end)
    if utf8 is None:
        utf8 = not data.isascii()
    if state.bad_utf8_at is None and utf8:
        region = data if begin == 0 and end == len(data) else data[begin:end]
        if region.isascii():
            return
        try:
            region.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.reason != "unexpected end of data":  # a piece of an over-long line may end mid-character
                state.bad_utf8_at = offset + e.start


_FULL_DATE = re.compile(rb"(?:19|20)\d\d-[01]\d-[0-3]\d[T _][0-2]\d:[0-5]\d:[0-6]\d")


def _refresh_reference(state: _State, data: bytes, begin: int = 0, end: int | None = None) -> None:
    """Year-less stamps (glog, syslog) take their year from the nearest full date of the same
    file, not from its modification time or today: look for one at the start of each region."""
    end = len(data) if end is None else end
    m = _FULL_DATE.search(data, begin, min(end, begin + (1 << 20)))
    if m is None:
        return
    line_start = max(begin, data.rfind(b"\n", begin, m.start()) + 1)
    p = state.stamps.parse(data[line_start:m.end() + 40].decode("utf-8", "replace"))
    if p is not None and not p.year_inferred:
        state.stamps.observe(p)


def _one_writer(data: bytes) -> bool:
    """Whether the lines of ``data`` are one writer's: at most one kind of launcher prefix
    (``_MAYBE_PREFIX``, a superset) besides plain lines -- a rank's own file, where torchrun tags
    only the stderr lines ``[rank5]:``, is one writer here; a combined stream is not."""
    kinds = set(_MAYBE_PREFIX.findall(data))
    first = _MAYBE_PREFIX.match(b"\n" + data[:256])
    if first is not None:
        kinds.add(first.group(0))
    return len(kinds) <= 1


def _one_process_before(state: _State, at: int) -> bool:
    """Whether the source's lines before source offset ``at`` (a line start; within the probe) are
    one writer's, as ``_one_writer`` judges: kinds are gathered incrementally, each byte once."""
    probe = state.probe
    x = min(at, len(probe))
    if x > state.kinds_to:
        if state.kinds_to == 0:
            first = _MAYBE_PREFIX.match(b"\n" + probe[:min(256, x)])
            if first is not None:
                state.kinds.add(first.group(0))
        state.kinds.update(_MAYBE_PREFIX.findall(probe, max(state.kinds_to - 1, 0), x))
        state.kinds_to = x
    return len(state.kinds) <= 1


def _head_limit(state: _State) -> int:
    """The size of the source's head window: for a source of one writer (judged on its first
    ``ONE_WRITER_PROBE`` bytes) the first of ``HEAD_SIZES_ONE`` that holds a progress line, else
    ``HEAD_BYTES``. A size the head has not reached yet is returned as it is (the head is flushed
    when it gets there, or at the end of a shorter source)."""
    if state.one_writer is None:
        if len(state.head) < ONE_WRITER_PROBE:
            return HEAD_BYTES
        state.one_writer = _one_writer(state.head[:ONE_WRITER_PROBE])
    if not state.one_writer:
        return HEAD_BYTES
    for size in HEAD_SIZES_ONE:
        if len(state.head) < size or _PROGRESS.search(state.head, 0, size):
            return size
    return HEAD_BYTES


def _tail_window(state: _State, tail: bytes | memoryview) -> bytes:
    """The tail window from the last ``TAIL_BYTES`` kept: for a source of one writer, the last of
    ``TAIL_SIZES_ONE`` bytes (from a line start) that hold a progress line and are one writer's."""
    if state.one_writer is False:
        return _own(tail)
    for size in TAIL_SIZES_ONE:
        if len(tail) <= size:
            return _own(tail)
        short = _own(tail[-size:])
        short = short[short.find(b"\n") + 1:]
        if not _one_writer(short):
            return _own(tail)
        if _PROGRESS.search(short):
            return short
    return _own(tail)


def _flush_head(state: _State, writers: dict[tuple, _Writer], anchors: dict[tuple, Anchor]) -> None:
    head = state.head[:_head_limit(state)]
    cut = head.rfind(b"\n") + 1
    _window_facts(state, head[:cut] if cut else head, 0, writers, anchors, head=True)
    state.head = b""


def _process_region(state: _State, region: bytes, keep: bytes | memoryview, keep_line: int, offset: int,
                    tail: bytes | memoryview,
                    writers: dict[tuple, _Writer], anchors: dict[tuple, Anchor],
                    head_done: bool, ahead: bytes = b"") -> tuple[int, bytes | memoryview, bytes | memoryview, bool]:
    """Scan one line-aligned region, with the kept bytes before it for look-back and the held-back
    complete lines after it (``ahead``, scanned with the next region) for look-ahead."""
    ahead = _ahead_of(ahead) if ahead else b""
    data = b"".join((keep, region, ahead))
    return _process_data(state, data, len(keep), len(keep) + len(region), keep_line, offset, tail, writers,
                         anchors, head_done)


#: a region scanned in place (with the look-back and look-ahead around it) rather than copied out,
#: when it is at least this many times their size
_SCAN_IN_PLACE = 4


def _scan_region(scanner: Scanner, data: bytes, begin: int, end: int) -> dict[int, set[int]]:
    """Candidate lines of ``data[begin:end]`` (line-aligned), as offsets in ``data``."""
    in_range = getattr(scanner, "scan_range", None)
    if in_range is not None:
        return in_range(data, begin, end)
    if begin == 0 and end == len(data):
        return scanner.scan(data, end)
    if end - begin >= _SCAN_IN_PLACE * (len(data) - (end - begin)):
        # scanning the kept and held-back lines again costs less than copying the region out
        return {s: ids for s, ids in scanner.scan(data, len(data)).items() if begin <= s < end}
    lines = scanner.scan(data[begin:end], end - begin)
    return {s + begin: ids for s, ids in lines.items()}


def _whole_windows(data: bytes) -> tuple[bytes | memoryview, bytes | memoryview]:
    """The look-back and tail window ``_process_data`` keeps after a region that is all of ``data``
    from its first byte (the same bytes as the general case computes), as views of ``data``."""
    end = len(data)
    if end > KEEP_BYTES:
        nl = data.find(b"\n", end - KEEP_BYTES, end)
        keep: bytes | memoryview = memoryview(data)[nl + 1:] if nl >= 0 else b""
    else:
        keep = data
    if end > TAIL_BYTES:
        nl = data.find(b"\n", end - TAIL_BYTES, end)
        tail: bytes | memoryview = memoryview(data)[nl + 1:] if nl >= 0 else b""
    else:
        tail = data
    return keep, tail


def _own(b: bytes | memoryview) -> bytes:
    """``b`` as bytes (a view from ``_whole_windows`` copied out once more input follows)."""
    return bytes(b) if isinstance(b, memoryview) else b


def _process_data(state: _State, data: bytes, begin: int, end_region: int, keep_line: int, offset: int,
                  tail_before: bytes | memoryview, writers: dict[tuple, _Writer], anchors: dict[tuple, Anchor],
                  head_done: bool) -> tuple[int, bytes | memoryview, bytes | memoryview, bool]:
    """Scan the line-aligned region ``data[begin:end_region]`` (source offset ``offset``): before
    it, the bytes kept from earlier regions for look-back; after it, complete held-back lines for
    look-ahead (scanned with the next region). Returns the next line number, the bytes to keep, the
    tail window so far, and whether the head window is done."""
    tail = _own(tail_before)
    _refresh_reference(state, data, begin, len(data))  # (the held-back lines too: a full date there dates this region)
    if offset == 0:
        state.check_writers(data[begin:min(end_region, begin + ONE_WRITER_PROBE)])
    if len(state.probe) < ONE_WRITER_PROBE:
        state.probe += data[begin:min(end_region, begin + ONE_WRITER_PROBE - len(state.probe))]
    if not head_done:  # (the head window does not depend on the scan below)
        state.head += data[begin:min(end_region, begin + HEAD_BYTES - len(state.head))]
        if len(state.head) >= _head_limit(state):
            _flush_head(state, writers, anchors)
            head_done = True
    # the region's passes (NULs and UTF-8, the scan, candidates, line counts) one cache-sized block
    # at a time: a block is read from memory once, not once per pass (a 32 MiB file in one pass
    # each costs a fifth more per byte than a 4 MiB one)
    utf8 = None if state.bad_utf8_at is not None else not data.isascii()
    next_line = keep_line
    for a, b in _blocks(data, begin, end_region):
        _hygiene(state, data, offset + (a - begin), a, b, utf8=utf8)
        reports = getattr(state.scanner, "reports", 0)
        lines = _scan_region(state.scanner, data, a, b)
        state.reports += getattr(state.scanner, "reports", 0) - reports
        state.candidates += len(lines)
        line_no, counted_to = _process_candidates(state, _Buffer(data, a, offset - begin, next_line), lines)
        next_line = line_no + _count_nl(data, counted_to, b)  # = keep_line + lines up to b
    size = end_region - begin
    if offset == 0 and begin == 0 and end_region == len(data) and not tail:
        # the whole source so far in one region (a rank's file read at once): the look-back and the
        # tail window are views of it, made bytes only if more follows (``_own``), not 3 MiB of copies
        return (next_line, *_whole_windows(data), head_done)
    # the last KEEP_BYTES before the look-ahead, from a line start (sliced once: no copy of data)
    if end_region > KEEP_BYTES:
        nl = data.find(b"\n", end_region - KEEP_BYTES, end_region)
        new_keep = data[nl + 1:end_region] if nl >= 0 else b""
    else:
        new_keep = data if end_region == len(data) else data[:end_region]
    if size >= TAIL_BYTES:
        new_tail = data[end_region - TAIL_BYTES:end_region]
    else:
        new_tail = tail + (data if begin == 0 and end_region == len(data) else data[begin:end_region])
    if len(new_tail) >= TAIL_BYTES and len(tail) + size > TAIL_BYTES:
        new_tail = new_tail[-TAIL_BYTES:]
        nl = new_tail.find(b"\n")
        new_tail = new_tail[nl + 1:] if nl >= 0 else b""
    return next_line, new_keep, new_tail, head_done
