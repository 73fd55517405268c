"""Candidate lines in, matches out: the confirmation of one source's candidates.

Owns what turns a scanner's candidate line into a ``Match``: the rules' confirmation (with their
time budgets), who the line is about, its time (its own stamp, or inherited from its writer's
neighbouring stamped lines, with bounds), its context, and the bookkeeping of what is kept -- the
first ``KEEP_FIRST`` and last ``KEEP_LAST`` matches of each (rule, writer), the ones past the first
counted as ``Pending`` and built only if they are still kept when their block ends; a new writer's
matches of a rule that already has ``GROUP_PAST_WRITERS`` writers with a rank only counted, in
``MatchGroup``s. Fact lines go to ``statements``. It must not read the source or know its windows.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import compress, filterfalse, repeat
from operator import and_, contains, eq, is_not, itemgetter, le, not_, or_, sub
from typing import TYPE_CHECKING

from correlator.extract.lanes import exact_lines, joined_lines
from correlator.extract.lines import (
    LOOK_LINES,
    MAX_LINE_BYTES,
    MAYBE_PREFIX_RE,
    WRITER_WINDOW,
    Buffer,
    Context,
    Stamps,
    line_who,
    maybe_prefixed,
    parse_line,
    prefix_bytes,
    with_stamp,
)
from correlator.extract.prefixes import NO_PREFIX, Prefix, clean, nccl_origin, split_prefix
from correlator.extract.reader import Hygiene, LineNumbers
from correlator.extract.scan import window_finder
from correlator.extract.statements import ONE_WRITER_PROBE, Statements, table_owner
from correlator.extract.timestamps import Parsed, lines_may_hold_stamp, may_hold_stamp
from correlator.model import (
    GROUP_PAST_WRITERS,
    DiagCode,
    Diagnostic,
    Match,
    MatchGroup,
    Role,
    Rule,
    Scope,
    TimeKind,
    Who,
    compress_ranks,
)
from correlator.model.vocabulary import Capture
from correlator.ruleset import RULE_EXCESS_BUDGET_S, RULE_MAX_TIMEOUTS, PatternTimeout, RuleSet

if TYPE_CHECKING:
    from correlator.extract.extractor import Engine

#: matches kept per (rule, writer) in one source: the first ones and the last ones
KEEP_FIRST, KEEP_LAST = 40, 10
#: lines of a run on which a rule's pattern may hit the time limit before the rule is dropped for the
#: rest of the run (``ruleset.RuleBudget``: shared by the forked workers of a run)
MAX_TIMEOUTS = RULE_MAX_TIMEOUTS
CONTEXT_BEFORE, CONTEXT_AFTER = 8, 3
#: the most lines before a line that an event rule's ``context_lines`` reaches
CONTEXT_MAX_BEFORE = 200
#: how far before a line a rule's ``context_requires`` literal is looked for
CONTEXT_REQUIRES_BYTES = 64 << 10
#: an inherited time takes the next stamped line's time when it is at most this far from the previous
INHERIT_NEXT_NS = 120 * 1_000_000_000

#: a launcher prefix in the middle of a line: a progress bar without a newline, then a rank's line
_EMBEDDED_PREFIX = re.compile(r"(?:\[(?:rank\d{1,6}|[A-Za-z_]{1,20}\d{1,5})\]:|\[\d{1,6},\d{1,6}\]<std(?:out|err)>:)+")
#: mpirun's tag inside a line: another process's output cut into this one (no newline between them)
_MPI_EMBEDDED = re.compile(r"\[\d{1,6},\d{1,6}\]<std(?:out|err)>:")
#: the characters a token is made of (``report.redact``'s shapes): a run of them across the ``\r``
#: before an event's frame may be a secret the frame boundary cut in two
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+/=-")
#: a run across the cut at least this long is kept whole (the shortest credential shapes are 20)
CUT_RUN_MIN = 16

#: the bytes of a line the bulk lane takes (``Confirmer.bulk_lane``): printable ASCII and tabs, which
#: decoding leaves as they are (no ``\r`` frames, ANSI codes or other control characters)
_PLAIN_BYTES = bytes([9, *range(0x20, 0x7f)])
#: and the newline between lines joined
_PLAIN_LINES = _PLAIN_BYTES + b"\n"
#: what else keeps a line out of it (``bulk_lane`` looks for them one by one): what may name a host
#: (``_may_name_host``: `` kernel: `` of a syslog header, `` NCCL `` of an NCCL origin) or be an
#: embedded launcher prefix (every ``_EMBEDDED_PREFIX`` match holds ``]:`` or ``]<std``)
#: the writer key of a line without a launcher prefix
_NO_KEY = NO_PREFIX.key
#: whether plain candidate lines are confirmed and counted in bulk (``Confirmer.bulk_lane``); off,
#: every candidate takes the line-by-line path, which stays the definition (the property tests
#: compare both)
BULK_LANE = True
#: whether the bulk lane asks Hyperscan which lines a rule confirms (``lanes.ExactLines``) where it
#: can; off, ``regex`` searches the lines joined (the tests compare both)
EXACT_LANE = True
#: a block's candidates are offered to the bulk lane when there are more than this many (fewer cost
#: less one by one than the lane's searches)
BULK_MIN_CANDIDATES = KEEP_FIRST
#: whether the NCCL init lines of a block are judged said-before at once (``Confirmer.unsaid``);
#: off, one by one in ``process``, which stays the definition (the property tests compare both)
NCCL_SAID_AT_ONCE = True
#: whether a block's plain candidate lines whose one rule is line-scope are confirmed at once and,
#: past the first KEEP_FIRST of their rule, only counted (``Confirmer.count_lane``); off, one by one
#: in ``process``, which stays the definition (the property tests compare both)
COUNT_LANE = True
#: the rule a candidate takes the bulk lane for, and the context rules beside it with their required literals
_LaneRule = tuple[int, tuple[tuple[int, tuple[bytes, ...]], ...]]
#: what ``Confirmer.lane_rules`` holds for a set of pattern ids not classified yet
_UNCLASSIFIED: _LaneRule = (-1, ())
#: whether an event rule's ``all`` patterns are first looked for by Hyperscan over its window
#: (``scan.WindowFinder.may_match_all``; off, the patterns alone decide: the tests compare both)
WINDOW_PREFILTER = True

#: one shared copy of each (name, value) capture pair: a cascade of 100,000 ranks' watchdog lines
#: captures the same SeqNum, op and timeout on every line (cleared when it grows past its cap)
_PAIRS: dict[tuple[str, str], tuple[str, str]] = {}
_PAIRS_CAP = 1 << 16


def _captures(caps: dict[str, str]) -> tuple[tuple[str, str], ...]:
    if len(_PAIRS) > _PAIRS_CAP:
        _PAIRS.clear()
    return tuple(_PAIRS.setdefault(kv, kv) for kv in sorted(caps.items()))


def event_text(msg: str, frame: str, matches: Callable[[str], bool]) -> str:
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


def _may_name_host(prefix: Prefix, caps: dict[str, str], msg: str) -> bool:
    """Whether ``line_who`` may find a host for this line (in its captures, its prefix, an NCCL origin
    or a syslog header)."""
    return bool(caps.get(Capture.HOST) or prefix.host or " kernel: " in msg or nccl_origin(msg) is not None)


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


#: the ``inherit`` memo key of a one-writer source's lines, tagged or not
_ONE_WRITER_KEY = ("one-writer",)


@dataclass(slots=True)
class Pending:
    """A confirmed match past the first KEEP_FIRST of its (rule, writer): what its line said, and
    what of the state its time depends on at that point. Its time, rank and context are built only
    if it is still among the last KEEP_LAST when its block ends (``Confirmer.build``); the others are
    counted. A line that may name its writer's host while that writer's host is not known yet is
    built at once (its rank may make that host the writer's, for the matches after it)."""

    rule: Rule
    #: None: a bulk-lane line, whose captures are taken when it is built (``Confirmer.build_kept``)
    caps: dict[str, str] | None
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
    #: ``one_process_before`` at the line (it depends on how much of the probe was judged)
    one_process: bool
    #: the writers' last stamps that ``inherit`` may fall back on, as they were at the line
    last: dict[tuple, int]
    #: the writer's host as known at the line
    host: str | None
    alive: bool = True
    #: the rule's index (a bulk-lane line's, whose captures are taken when it is built)
    index: int = -1

    @property
    def rule_id(self) -> str:
        return self.rule.id


#: a line the count lane counted past the first KEEP_FIRST of its rule, as it waits in its rule's ring
#: of last ones: (start, rule index, message, stamp, ``Pending.last``, ``Pending.host``, line number:
#: -1 until its block ends still keeping it); made a ``Pending`` (``Confirmer._counted_pending``) and
#: built if it is still kept when its region ends
Counted = tuple[int, int, str, Parsed | None, dict[tuple, int], str | None, int]


class Grouping:
    """A ``MatchGroup`` being counted: a line costs its rank (8 bytes, and the list of ranks is made
    a sorted set again whenever it doubles), not a ``Match``. The group's earliest line (by its time,
    else its place) stays a whole match (``earliest``), kept in the digest beside the group that
    counts the others: a file of ranks' logs one after the other (``cat rank-*.log``) may hold the
    job's first failure past the writers kept."""

    __slots__ = ("count", "ranks", "compact_at", "first_offset", "last_offset", "first_line", "last_line", "first_ns",
                 "last_ns", "earliest")

    def __init__(self) -> None:
        self.count = 0
        self.ranks = array("q")
        self.compact_at = 1 << 16
        self.first_offset = self.first_line = self.last_offset = self.last_line = 0
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.earliest: Match | None = None

    def add(self, m: Match) -> None:
        e = self.earliest
        if e is None or (m.time_ns is not None and (e.time_ns is None or m.time_ns < e.time_ns)):
            self.earliest = m
            if e is None:
                return
            m = e  # (the one it replaces is counted)
        assert m.who.rank is not None
        if self.count == 0:
            self.first_offset = self.last_offset = m.offset
            self.first_line = self.last_line = m.line
        self.count += 1
        if not self.ranks or self.ranks[-1] != m.who.rank:
            self.ranks.append(m.who.rank)
            if len(self.ranks) >= self.compact_at:
                self.ranks = array("q", sorted(set(self.ranks)))
                self.compact_at = max(self.compact_at, 2 * len(self.ranks))
        if m.offset < self.first_offset:  # (the replaced earliest lies before the lines counted so far)
            self.first_offset, self.first_line = m.offset, m.line
        if m.offset >= self.last_offset:
            self.last_offset, self.last_line = m.offset, m.line
        if m.time_ns is not None:
            self.first_ns = m.time_ns if self.first_ns is None else min(self.first_ns, m.time_ns)
            self.last_ns = m.time_ns if self.last_ns is None else max(self.last_ns, m.time_ns)

    def group(self, rule_id: str, path: str, host: str | None, attempt: int | None) -> MatchGroup | None:
        """The group of the lines counted (all but ``earliest``), or None when there is none."""
        if self.count <= 0:
            return None
        return MatchGroup(rule_id, path, host, attempt, self.count, compress_ranks(self.ranks), self.first_offset,
                          self.last_offset, self.first_line, self.last_line, self.first_ns, self.last_ns)


def stamp_of(stamps: Stamps, data: bytes, s: int, e: int, observe: bool = True) -> Parsed | None:
    """``stamps.of_line(data[s:e], observe)`` (the line at ``s``), without splitting a prefix off a line that
    cannot hold one (``MAYBE_PREFIX_RE``, a superset of what ``split_prefix`` reads) and has no ANSI
    code: its message is its text, and a line of a traceback is read by the stamp parser alone
    (``inherit`` reads several such lines back to the stamped one before them)."""
    raw = data[s:e]
    if e - s <= MAX_LINE_BYTES and b"\x1b" not in raw and (
            MAYBE_PREFIX_RE.match(data, s - 1) is None if s > 0 else MAYBE_PREFIX_RE.match(b"\n" + raw) is None):
        return stamps.of(raw.decode("utf-8", "replace"), observe)
    return stamps.of_line(raw, observe)


def _lines_back(data: bytes, start: int, n: int) -> int:
    """The start of the ``n``-th line before the line at ``start`` (a line start), or 0 when fewer
    lines lie before it: where ``Buffer.lines_before(start, n)`` ends, found by one ``rsplit`` of
    the bytes before it (an ``rfind`` per line cost a Python step each), in reaches that double."""
    if n <= 0 or start == 0:
        return start
    reach = 128 * n
    while True:
        lo = max(0, start - 1 - reach)
        parts = data[lo:start - 1].rsplit(b"\n", n)
        if len(parts) > n:  # (n newlines found: the first part ends before the n-th line)
            return lo + len(parts[0]) + 1
        if lo == 0:
            return 0
        reach *= 4


class EventContext:
    """An event rule's context at one line (what ``RuleSet.confirm`` reads beside it), built at most
    once for the furthest look asked: the lines before as far as a rule looks (a rule that looks
    further builds them again: the nearest n of the writer's lines are the last n of the nearest
    200), then up to 60 after. ``replay.read_lines`` records what it built (``built``)."""

    __slots__ = ("buf", "start", "pbytes", "before", "n", "after", "built")

    def __init__(self, buf: Buffer, start: int, pbytes: bytes, record: bool = False) -> None:
        self.buf, self.start, self.pbytes = buf, start, pbytes
        self.before: list[str] = []
        self.n = -1  # how many lines ``before`` was asked for
        self.after: list[str] | None = None
        #: each context given, in order, when asked to record them
        self.built: list[list[str]] | None = [] if record else None

    def __call__(self, rule: Rule) -> list[str]:
        k = rule.match.context_lines
        n = k if 0 <= k <= CONTEXT_MAX_BEFORE else CONTEXT_MAX_BEFORE
        if n > self.n:
            self.before, self.n = self.buf.context(self.start, self.pbytes, n, 0)[0], n
        ctx = self.before[-k:] if k else []
        if rule.match.context_after:
            if self.after is None:
                self.after = self.buf.context(self.start, self.pbytes, 0, 60)[1]
            ctx = [*ctx, *self.after[: rule.match.context_after]]
        if self.built is not None:
            self.built.append(ctx)
        return ctx


def _match_context(buf: Buffer, start: int, pbytes: bytes) -> tuple[str, ...]:
    """The lines around a failure that may become the root (the traceback above it)."""
    before, after = buf.context(start, pbytes, CONTEXT_BEFORE, CONTEXT_AFTER)
    return tuple(clean(x)[:300] for x in before) + (">>",) + tuple(clean(x)[:300] for x in after)


@dataclass(slots=True)
class _Lane:
    """What the count lane found in a block (``Confirmer.count_lane``): the lines it judged (confirmed
    or not: ``process`` has nothing else to do with them), and per rule index its confirmed lines in
    line order: their starts, messages, whether each may hold a stamp and whether it may name a host."""

    judged: set[int]
    rules: dict[int, tuple[list[int], list[str], list[bool], list[bool]]]


@dataclass(slots=True)
class _Block:
    """What ``process`` works with in one block: its buffer and candidates, their line numbers, the
    pending matches made in it, the rings the count lane put lines in, and the writers' last stamps
    that a ``Pending`` of a line without a prefix keeps (``last_plain``), shared until one changes."""

    buf: Buffer
    lines: dict[int, set[int]]
    numbers: LineNumbers
    may_match_all: Callable[[tuple[str, ...], str | bytes | memoryview], bool] | None
    last_stamp: dict[tuple, int]
    pending: list[Pending] = field(default_factory=list)
    counted_rings: set[tuple[str, tuple]] = field(default_factory=set)
    snapshot: dict[tuple, int] | None = None

    def last_plain(self) -> dict[tuple, int]:
        if self.snapshot is None:
            last_stamp = self.last_stamp
            self.snapshot = {w: last_stamp[w] for w in (_NO_KEY, _ONE_WRITER_KEY, (*_NO_KEY, "task-clock"))
                             if w in last_stamp}
        return self.snapshot


@dataclass(slots=True)
class Lane:
    """What the bulk lane decided of a block's candidates (``Confirmer.bulk_lane``)."""

    #: rule index -> the starts of the lines it confirmed, in line order
    confirmed: dict[int, list[int]]
    #: the candidates it left to the one-by-one path, in line order (those it took and no rule
    #: confirmed need nothing more)
    rest: list[int]


class _Runs:
    """The bulk lane's confirmed lines of a block as ``Confirmer.process`` meets them: a rule's lines
    are taken one by one while its matches count among its first KEEP_FIRST (``counts_first``, asked
    at each line as the one-by-one path asks it), and from its first line that does not on, counted
    in runs between the lines taken one by one (``take``)."""

    def __init__(self, confirmer: Confirmer, lane: Lane) -> None:
        rules = confirmer.engine.ruleset.rules
        self.counts_first = confirmer.counts_first
        self.lines = lane.confirmed
        self.rest = lane.rest
        self.ids = {ri: rules[ri].id for ri in lane.confirmed}
        #: rule -> index of its next line, while its lines are taken one by one
        self.open = dict.fromkeys(lane.confirmed, 0)
        #: rule -> index of its first line not counted yet, once they are counted in runs
        self.counted: dict[int, int] = {}

    def one_by_one(self, before: Callable[[int], None]) -> Iterator[int]:
        """The lines for the one-by-one path, in line order: the candidates the lane left, and the
        lines of the rules whose matches still count among their first. ``before(start)`` is called
        before a line is judged (what is counted before it is counted first)."""
        rest, lines, open_ = self.rest, self.lines, self.open
        k, n = 0, len(rest)
        while True:
            s = rest[k] if k < n else -1
            who = -1
            for ri, j in open_.items():
                t = lines[ri][j]
                if s < 0 or t < s:
                    s, who = t, ri
            if s < 0:
                return
            before(s)
            if who < 0:
                k += 1
            elif not self.counts_first(self.ids[who], _NO_KEY):
                self.counted[who] = open_.pop(who)  # this line and the rule's later ones are counted
                continue
            elif open_[who] + 1 < len(lines[who]):
                open_[who] += 1
            else:
                del open_[who]
            yield s

    def next_counted(self) -> int:
        """The start of the first line to count in a run not counted yet, or -1."""
        lines = self.lines
        return min((lines[ri][a] for ri, a in self.counted.items() if a < len(lines[ri])), default=-1)

    def take(self, upto: int) -> list[tuple[int, list[int], int, int]]:
        """(rule, its lines, from, to) of the lines before ``upto`` not counted yet: ``lines[from:to]``."""
        out = []
        for ri, a in self.counted.items():
            got = self.lines[ri]
            b = bisect_left(got, upto, a)
            if b > a:
                out.append((ri, got, a, b))
        for ri, _got, _a, b in out:
            self.counted[ri] = b
        return out


class Confirmer:
    """One source's candidates confirmed, timed and kept (see the module's docstring)."""

    def __init__(self, ctx: Context, engine: Engine, statements: Statements, hygiene: Hygiene) -> None:
        self.ctx = ctx
        self.engine = engine
        self.statements = statements
        self.hygiene = hygiene
        self.matches: list[Match] = []
        self.kept: dict[tuple[str, tuple], int] = defaultdict(int)
        #: the last KEEP_LAST matches of each (rule, writer): built ones, and ones of the current block
        #: not built yet (``Pending``, built when the block ends)
        self.tail_keep: dict[tuple[str, tuple], list[Match | Pending | Counted]] = defaultdict(list)
        self.dropped: dict[str, int] = defaultdict(int)
        #: rule id -> writers with a rank whose matches of it are kept; past GROUP_PAST_WRITERS a new
        #: writer's matches are counted in ``grouped`` by (rule, host, attempt), not kept
        self.writers: dict[str, int] = defaultdict(int)
        self.grouped: dict[tuple[str, str | None, int | None], Grouping] = {}
        self.last_stamp: dict[tuple, int] = {}
        #: the digest's cost counts: the scanner's reports on this source's regions (the scanner
        #: counts over everything it scans), its candidate lines and confirmed matches
        self.reports = 0
        self.candidates = 0
        self.confirmed = 0
        #: rule id -> [lines on which its pattern hit the time limit, first such line]
        self.timeouts: dict[str, list[int]] = {}
        #: rule index -> line on which the rule spent its budget for the run, in this source
        self.spent: dict[int, int] = {}
        self.hosts: dict[tuple, str] = {}
        #: the source's first ONE_WRITER_PROBE bytes, and the launcher prefix kinds found in them up
        #: to ``kinds_to`` (``one_process_before``: judged on the bytes before a line only, so that
        #: how the source was cut into buffers changes nothing)
        self.probe = b""
        self.kinds: set[bytes] = set()
        self.kinds_to = 0
        #: writer key -> what its last stamp search saw (the next unstamped line reuses it)
        self.scans: dict[tuple, _Scan] = {}
        #: a candidate's pattern ids -> (the one rule that can take it in the bulk lane, the context rules
        #: whose required literals must be absent), or None (``bulk_lane``)
        self.lane_rules: dict[frozenset[int], _LaneRule | None] = {}
        #: a candidate's pattern ids (its one id, or a frozenset of several) -> the one rule the count lane
        #: may confirm it for, or -1 (``count_lane``)
        self.count_rules: dict[int | frozenset[int], int] = {}
        #: the pending matches still kept when their block ended, and the rings holding lines the count
        #: lane counted: built when the region ends (``build_kept``)
        self.unbuilt: list[Pending] = []
        self.counted_rings: set[tuple[str, tuple]] = set()
        #: takes a candidate line instead of ``_line`` when it can (True): a split file's line read by a
        #: worker, of which only what needs the order is done here (``replay.replay_line``)
        self.replay: Callable[[_Block, int], bool] | None = None

    # --- what is kept ---------------------------------------------------------------------------

    def add_match(self, m: Match, key: tuple) -> None:
        self.confirmed += 1
        k = (m.rule_id, key)
        if m.who.rank is not None and k not in self.kept:
            if self.writers[m.rule_id] >= GROUP_PAST_WRITERS:  # a new writer past the first ones: counted
                k3 = (m.rule_id, m.who.host, m.attempt)
                if k3 not in self.grouped:
                    self.grouped[k3] = Grouping()
                self.grouped[k3].add(m)
                return
            self.writers[m.rule_id] += 1
        n = self.kept[k]
        self.kept[k] = n + 1
        if n < KEEP_FIRST:
            self.matches.append(m)
            return
        self._keep_last(k, m)

    def counts_first(self, rule_id: str, key: tuple) -> bool:
        """Whether the next match of ``rule_id`` by writer ``key`` is among its first KEEP_FIRST."""
        return self.kept.get((rule_id, key), 0) < KEEP_FIRST

    def add_pending(self, pm: Pending) -> None:
        """Count a match past its first KEEP_FIRST; it is built (``build``) only if it is still
        among the last KEEP_LAST when its block ends."""
        self.confirmed += 1
        k = (pm.rule.id, pm.key)
        self.kept[k] += 1
        self._keep_last(k, pm)

    def _keep_last(self, k: tuple[str, tuple], m: Match | Pending) -> None:
        last = self.tail_keep[k]
        last.append(m)
        if len(last) > KEEP_LAST:
            gone = last.pop(0)
            if isinstance(gone, Pending):
                gone.alive = False
            self.dropped[k[0]] += 1

    def groups(self) -> tuple[list[MatchGroup], list[Diagnostic]]:
        """The matches counted per (rule, host, attempt) instead of kept, and a note per rule saying so."""
        path = self.ctx.src.path
        groups = [mg for (rule_id, host, attempt), g in sorted(self.grouped.items(), key=lambda kv: kv[1].first_offset)
                  for mg in [g.group(rule_id, path, host, attempt)] if mg is not None]
        lines: dict[str, int] = defaultdict(int)
        for g in groups:
            lines[g.rule_id] += g.count
        notes = [Diagnostic("info", path, f"{n} matches of {rule_id} by writers past its first {GROUP_PAST_WRITERS} "
                            "with a rank were counted in groups, not kept one by one",
                            DiagCode.MATCHES_GROUPED, n) for rule_id, n in sorted(lines.items())]
        return groups, notes

    def kept_matches(self) -> list[Match]:
        """Every match kept, in no particular order (the first ones, each ring of last ones, and the
        earliest line of each group)."""
        matches = list(self.matches)
        matches += [g.earliest for g in self.grouped.values() if g.earliest is not None]
        for kept in self.tail_keep.values():
            for m in kept:
                assert isinstance(m, Match)  # (a pending match is built, or dropped, when its block ends)
                matches.append(m)
        return matches

    # --- one writer or several, by the bytes before a line ----------------------------------------

    def add_probe(self, data: bytes, begin: int, end: int) -> None:
        """The next bytes of the source's first ONE_WRITER_PROBE (``one_process_before`` judges them)."""
        if len(self.probe) < ONE_WRITER_PROBE:
            self.probe += data[begin:min(end, begin + ONE_WRITER_PROBE - len(self.probe))]

    def one_process_before(self, at: int) -> bool:
        """Whether the source's lines before source offset ``at`` (a line start; within the probe) are
        one writer's, as ``lines.one_writer`` judges: kinds are gathered incrementally, each byte once."""
        probe = self.probe
        x = min(at, len(probe))
        if x > self.kinds_to:
            if self.kinds_to == 0:
                first = MAYBE_PREFIX_RE.match(b"\n" + probe[:min(256, x)])
                if first is not None:
                    self.kinds.add(first.group(0))
            self.kinds.update(MAYBE_PREFIX_RE.findall(probe, max(self.kinds_to - 1, 0), x))
            self.kinds_to = x
        return len(self.kinds) <= 1

    # --- a match's time and writer --------------------------------------------------------------

    def inherit(self, buf: Buffer, start: int, pbytes: bytes, key: tuple,
                last: dict[tuple, int] | None = None) -> tuple[int | None, int | None, int | None]:
        """(time, lo, hi) from the nearest stamped lines of the same writer before and after;
        ``last``: the writers' last stamps as they were at the line (else ``self.last_stamp``)."""
        stamps = self.ctx.stamps
        data = buf.data
        base = buf.base_offset
        here = base + start
        memo = self.scans.get(key)
        i = -1
        if memo is not None and memo.at < here and memo.after:
            i = bisect_left(memo.after, here)
            if i >= len(memo.after) or memo.after[i] != here:
                i = -1
        lo = lo_at = hi = None
        lo_dist = 0
        if i < 0:
            for n, (s, e) in enumerate(buf.writer_before(start, pbytes, LOOK_LINES), 1):
                p = stamp_of(stamps, data, s, e, False)  # (not observed: see Stamps.of)
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
                p = stamp_of(stamps, data, s, e, False)
                if p is not None:
                    hi = p.time_ns + p.resolution_ns
                    break
        self.scans[key] = _Scan(here, after, hi, lo, lo_at, lo_dist)
        if lo is None:
            lo = (self.last_stamp if last is None else last).get(key)
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

    def line_time(self, buf: Buffer, start: int, prefix: Prefix, pbytes: bytes, key: tuple,
                  p: Parsed | None, one_process: bool, last: dict[tuple, int] | None = None
                  ) -> tuple[int | None, int | None, int | None, TimeKind]:
        """A match's (time, lo, hi, kind): its own stamp ``p``, else inherited from its writer's lines."""
        if p is not None:
            return p.time_ns, p.time_ns, p.time_ns + p.resolution_ns, TimeKind.OWN
        if pbytes and one_process:
            # one process's file (its stderr tagged [rankN]:, its stdout plain): the nearest stamped
            # line of either is its time, not a tagged line from half an hour before
            t, lo, hi = self.inherit(buf, start, b"", _ONE_WRITER_KEY, last)
            return t, lo, hi, (TimeKind.INHERITED if t is not None else TimeKind.NONE)
        t, lo, hi = self.inherit(buf, start, pbytes, key, last)
        if t is None and prefix.task is not None and (prefix.rank is not None or prefix.local_rank is not None):
            # "3: [rank3]: Traceback ...": a process's tagged stderr under srun --label; its srun
            # task's own lines ("3: 2026-... INFO ...") are the nearest clock it has
            outer = pbytes[:pbytes.find(b": ") + 2] if b": " in pbytes else b""
            if outer and outer != pbytes:
                t, lo, hi = self.inherit(buf, start, outer, (*key, "task-clock"), last)
        return t, lo, hi, (TimeKind.INHERITED if t is not None else TimeKind.NONE)

    def match_who(self, buf: Buffer, start: int, prefix: Prefix, pbytes: bytes, key: tuple, rule: Rule,
                  caps: dict[str, str], frame: str) -> Who:
        who = line_who(self.ctx.src, prefix, caps, frame)
        if who.rank is None and who.local_rank is None and rule.role is not Role.TEARDOWN:
            who = table_owner(buf, start, pbytes, who)
        if who.host is None and key in self.hosts:
            who = Who(who.rank, who.local_rank, who.task, self.hosts[key], who.pid)
        elif who.host is not None and who.rank is not None:
            self.hosts.setdefault(key, who.host)
        return who

    def build(self, buf: Buffer, pm: Pending) -> Match:
        """The match a pending one stands for, as ``process`` would have built it at its line."""
        src = self.ctx.src
        assert pm.caps is not None
        t, lo, hi, kind = self.line_time(buf, pm.start, pm.line_prefix, pm.pbytes, pm.key, pm.stamp,
                                         pm.one_process, pm.last)
        context = _match_context(buf, pm.start, pm.pbytes) if pm.primary else ()
        who = line_who(src, pm.prefix, pm.caps, pm.frame)
        if who.rank is None and who.local_rank is None and pm.rule.role is not Role.TEARDOWN:
            who = table_owner(buf, pm.start, pm.pbytes, who)
        if who.host is None and pm.host is not None:
            who = Who(who.rank, who.local_rank, who.task, pm.host, who.pid)
        return Match(rule_id=pm.rule.id, path=src.path, line=pm.line_no, offset=buf.base_offset + pm.start,
                     text=clean(pm.shown), who=who, time_ns=t, lo_ns=lo, hi_ns=hi, time_kind=kind,
                     captures=_captures(pm.caps), context=context, attempt=src.attempt,
                     tz_assumed=bool(pm.stamp and pm.stamp.tz_assumed))

    def raw_window(self, buf: Buffer, start: int, rule: Rule) -> bytes | None:
        """The UTF-8 of the window ``process`` builds for event rule ``rule`` at the line at ``start``
        (the lines before as far as it looks, joined by newlines, then the line), as it lies in the
        buffer, when it does: the line has no launcher prefix and is its own frame (the caller says
        so), none of the lines is cut, may hold a launcher prefix (``MAYBE_PREFIX_RE``, a superset:
        its message is the line) or holds a carriage return or an ANSI code, the rule looks at no
        line after it, and the bytes are UTF-8. Else None (then the window is built and asked)."""
        k = rule.match.context_lines
        if rule.match.context_after or k < 0:
            return None
        data = buf.data
        n = min(k, CONTEXT_MAX_BEFORE)
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        lo = _lines_back(data, start, n)
        if (lo == 0 and start > 0) or end - lo > MAX_LINE_BYTES or data.find(b"\x1b", lo, end) >= 0 \
                or data.find(b"\r", lo, end) >= 0 or (lo < start and MAYBE_PREFIX_RE.search(data, lo - 1, start)):
            return None
        window = data[lo:end]
        if not window.isascii():
            try:
                window.decode("utf-8")
            except UnicodeDecodeError:
                return None
        return window

    # --- the candidates of one block ------------------------------------------------------------

    def _lane_rule(self, pids: frozenset[int]) -> tuple[int, tuple[tuple[int, tuple[bytes, ...]], ...]] | None:
        """The rule a candidate with these pattern ids is for, when it may take the bulk lane: one rule
        (besides event rules that are tried only when their required literals are near), line scope,
        its patterns line-bounded (``RuleSet.bulk``), none capturing a host; no fact pattern."""
        rs = self.engine.ruleset
        targets = {self.engine.pattern_rule[p] for p in pids}
        if min(targets) < 0:
            return None
        main = [ri for ri in targets if not (rs.rules[ri].match.scope is Scope.EVENT
                                             and rs.rules[ri].match.context_requires)]
        if len(main) != 1 or rs.bulk(main[0]) is None:
            return None
        if any(f"<{Capture.HOST}>" in p for p in rs.rules[main[0]].match.any):
            return None
        return main[0], tuple((ri, tuple(lit.encode() for lit in rs.rules[ri].match.context_requires))
                              for ri in targets if ri != main[0])

    def bulk_lane(self, buf: Buffer, lines: dict[int, set[int]], order: Sequence[int]) -> Lane | None:
        """The candidate lines whose confirmation needs nothing but their rule's patterns, decided at
        once (``ruleset.Bulk``: one search of the lines joined per pattern), with no Python step per
        line but in the rare lines that keep a block's lines out one by one. Such a line has no
        launcher prefix, is printable ASCII (its message is its bytes), holds no possible stamp, host
        or embedded prefix, and its one rule is line-scope (an event rule beside it has none of its
        required literals near). What ``process`` does with a confirmed line of this kind past the
        first KEEP_FIRST of its rule is only count it, and with one its rule does not confirm,
        nothing. ``order``: the candidates' starts, in line order. None: the lane takes none."""
        rs = self.engine.ruleset
        budget = self.engine.budget
        data = buf.data
        first = bisect_left(order, max(buf.begin, 1))
        starts: list[int] = list(order[first:])
        if not starts:
            return None
        # the lane each candidate's pattern ids make (classified once per set of ids in the source); a
        # dense block's candidates most often all have the same ids: one comparison each says so
        ids = list(map(lines.__getitem__, starts))
        same = ids[0]
        # (``count``: the same set object, a dense range's, is found without comparing)
        keys = [frozenset(same)] if ids.count(same) == len(ids) or all(map(same.__eq__, ids)) else list(map(frozenset, ids))
        classes = self.lane_rules
        off = budget.off  # (a rule switched off for the run: ``RuleBudget.disabled``)
        lane_of: dict[frozenset[int], _LaneRule | None] = {}
        for key in dict.fromkeys(keys):
            lane = classes.get(key, _UNCLASSIFIED)
            if lane is _UNCLASSIFIED:
                lane = classes[key] = self._lane_rule(key)
            lane_of[key] = None if lane is None or off[lane[0]] else lane
        if len(lane_of) == 1:
            lane = next(iter(lane_of.values()))
            if lane is None:
                return None
            lanes: list[_LaneRule] = [lane] * len(starts)
        else:
            every = list(map(lane_of.__getitem__, keys))
            took = list(map(is_not, every, repeat(None)))
            starts = list(compress(starts, took))
            lanes = [x for x in compress(every, took) if x is not None]
            if not starts:
                return None
        ends, raws = buf.line_spans(starts)
        # each line after a newline, and its place in them (the newline before it)
        joined, places = joined_lines(raws)
        keep = None  # which lines stay in the lane (None: all)
        if max(map(sub, ends, starts)) > MAX_LINE_BYTES or joined.translate(None, _PLAIN_LINES):
            keep = [e - s <= MAX_LINE_BYTES and not raw.translate(None, _PLAIN_BYTES)
                    for s, e, raw in zip(starts, ends, raws, strict=True)]
        finder = window_finder() if self.ctx.hyperscan else None
        if finder is not None:  # (a match is a break of the line its last byte is in)
            broken = {bisect_right(places, to - 2) - 1 for to in finder.lane_breaks(joined)}
        else:
            broken = {k for k, (start, raw) in enumerate(zip(starts, raws, strict=True))
                      if (keep is None or keep[k]) and (
                          b" kernel: " in raw or b" NCCL " in raw or b"]:" in raw or b"]<std" in raw
                          or MAYBE_PREFIX_RE.match(data, start - 1) is not None or may_hold_stamp(raw.decode("ascii")))}
        if broken:
            keep = [True] * len(starts) if keep is None else keep
            for k in broken:
                keep[k] = False
        distinct = [x for x in lane_of.values() if x is not None]
        keep = self._near_literals(buf, starts, lanes, distinct, keep)
        if keep is not None and not all(keep):
            starts, raws, lanes = list(compress(starts, keep)), list(compress(raws, keep)), list(compress(lanes, keep))
            if not starts:
                return None
            joined, places = joined_lines(raws)
        # confirmed per rule: the lines joined searched once (Hyperscan, exact) or once per pattern (regex)
        rules = sorted({ri for ri, _ in distinct})
        confirmed: dict[int, list[int]] = {}
        decided: list[list[int]] = []
        for ri in rules:
            if len(rules) == 1:
                group, gjoined, gplaces = starts, joined, places
            else:
                mine = list(map(eq, map(itemgetter(0), lanes), repeat(ri)))
                group = list(compress(starts, mine))
                if not group:
                    continue
                gjoined, gplaces = joined_lines(list(compress(raws, mine)))
            bulk = rs.bulk(ri)
            assert bulk is not None
            exact = exact_lines(rs.rules[ri], bulk.not_literals) if finder is not None and EXACT_LANE else None
            got = exact.confirmed(gjoined, gplaces) if exact is not None else bulk.confirmed(
                gjoined[1:].decode("ascii"), gplaces)
            if got is None:
                continue  # a pattern ran past the time limit: one by one, with the rule's budget
            decided.append(group)
            if got:
                confirmed[ri] = list(map(group.__getitem__, got))
        if not decided:
            return None
        if sum(map(len, decided)) == len(order) - first:  # (all from the first line the lane may take)
            return Lane(confirmed, list(order[:first]))
        return Lane(confirmed, list(filterfalse(set().union(*decided).__contains__, order)))

    def _near_literals(self, buf: Buffer, starts: list[int], lanes: list[_LaneRule], distinct: list[_LaneRule],
                       keep: list[bool] | None) -> list[bool] | None:
        """``keep`` (which lines stay in the lane; None: all) without the lines near which an event rule beside
        their rule finds one of its required literals (``context_requires``: then that rule is tried
        one by one). Most blocks hold none of the literals at all: then no line is asked."""
        budget = self.engine.budget
        data = buf.data
        reach = max(0, starts[0] - CONTEXT_REQUIRES_BYTES)
        last = starts[-1]  # (no literal ending after the last line's start counts)
        within: dict[tuple[tuple[int, tuple[bytes, ...]], ...], bool] = {}
        for _ri, context_rules in distinct:
            if context_rules and context_rules not in within:
                # (through the buffer's record of the literal's places: the lines taken one by one ask
                # the same literal, and the bytes are searched once for both)
                within[context_rules] = any(buf.holds_before(lit, reach, last) for _, lits in context_rules for lit in lits)
        if not any(within.values()):
            return keep
        # a literal's places from the first line's reach on, and how many of them end before the
        # current line (lines come in order): the nearest is the last of those
        places: dict[bytes, list] = {}

        def near(lit: bytes, start: int) -> bool:  # = data.rfind(lit, start - CONTEXT_REQUIRES_BYTES, start) >= 0
            got = places.get(lit)
            if got is None:
                at: list[int] = []
                i = data.find(lit, max(0, start - CONTEXT_REQUIRES_BYTES), last)
                while i >= 0:
                    at.append(i)
                    i = data.find(lit, i + 1, last)
                got = places[lit] = [at, 0]
            at, j = got
            n = len(lit)
            while j < len(at) and at[j] + n <= start:
                j += 1
            got[1] = j
            return j > 0 and at[j - 1] >= start - CONTEXT_REQUIRES_BYTES

        for k, (start, (_ri, context_rules)) in enumerate(zip(starts, lanes, strict=True)):
            if keep is not None and not keep[k]:
                continue
            if within.get(context_rules) and any(not budget.disabled(ci) and any(near(lit, start) for lit in lits)
                                                 for ci, lits in context_rules):
                if keep is None:
                    keep = [True] * len(starts)
                keep[k] = False
        return keep
    def _count_runs(self, runs: _Runs, upto: int, block: _Block) -> None:
        """Count the bulk lane's confirmed lines before ``upto`` of the rules past their first KEEP_FIRST
        (``runs``), as ``add_pending`` one by one would: each is confirmed, counted and pushes the
        oldest of its rule's last KEEP_LAST out; only the last KEEP_LAST of a run can still be kept,
        and only they become ``Pending``: their line numbers are counted when their block ends, their
        captures taken when their region ends, if they are still kept then (``build_kept``)."""
        rs = self.engine.ruleset
        data = block.buf.data
        kept: list[tuple[int, int]] = []
        for ri, got, a, b in runs.take(upto):
            rule = rs.rules[ri]
            k = (rule.id, _NO_KEY)
            m = b - a
            self.confirmed += m
            self.kept[k] += m
            ring = self.tail_keep[k]
            over = len(ring) + m - KEEP_LAST
            if over > 0:
                self.dropped[rule.id] += over
                for gone in ring[:over]:
                    if isinstance(gone, Pending):
                        gone.alive = False
                del ring[:over]
            kept += ((got[i], ri) for i in range(max(a, b - KEEP_LAST), b))
        if not kept:
            return
        kept.sort()
        last = block.last_plain()
        host = self.hosts.get(_NO_KEY)
        for start, ri in kept:
            rule = rs.rules[ri]
            end = data.find(b"\n", start)
            text = data[start:len(data) if end < 0 else end].decode("ascii")
            pm = Pending(rule, None, text, text, NO_PREFIX, NO_PREFIX, start, -1, None, _NO_KEY, b"",
                         rule.role is Role.PRIMARY, False, last, host, index=ri)
            self.tail_keep[(rule.id, _NO_KEY)].append(pm)
            block.pending.append(pm)

    def unsaid(self, buf: Buffer, lines: dict[int, set[int]], order: list[int]) -> list[int]:
        """``order`` (the candidates' starts, in line order) without the NCCL init lines that state
        what an earlier one stated (``Statements.nccl_line_said``), judged at once: in an
        ``NCCL_DEBUG=INFO`` log they are most of the candidates, and each costs a set lookup here,
        not a trip through ``process``. Only lines whose one pattern is the NCCL fact's are judged,
        and not over-long ones (``process`` counts those as cut, and parses them)."""
        nccl_only = {self.engine.nccl_fact}
        region = order[bisect_left(order, buf.begin):]
        facts = list(compress(region, map(nccl_only.__eq__, map(lines.__getitem__, region))))
        if not facts:
            return order
        raws = buf.raw_lines(facts)
        if max(map(len, raws)) > MAX_LINE_BYTES:
            short = [k for k, raw in enumerate(raws) if len(raw) <= MAX_LINE_BYTES]
            facts, raws = [facts[k] for k in short], [raws[k] for k in short]
        said = set(compress(facts, self.statements.nccl_lines_said(raws)))
        return list(filterfalse(said.__contains__, order)) if said else order

    def _count_class(self, pids: set[int]) -> int:
        """``_count_rule`` of a candidate's pattern ids, kept per set of ids (a single id stands for itself)."""
        kind = next(iter(pids)) if len(pids) == 1 else frozenset(pids)
        ri = self.count_rules.get(kind)
        if ri is None:
            ri = self.count_rules[kind] = self._count_rule(frozenset(pids))
        return ri

    def _count_rule(self, pids: frozenset[int]) -> int:
        """The rule a candidate with these pattern ids is for, when the count lane may take it: one
        rule, no fact pattern, line scope, its patterns line-bounded (``RuleSet.bulk``), none capturing
        a host; else -1."""
        targets = {self.engine.pattern_rule[p] for p in pids}
        if len(targets) != 1:
            return -1
        (ri,) = targets
        rs = self.engine.ruleset
        if ri < 0 or rs.bulk(ri) is None or any(f"<{Capture.HOST}>" in p for p in rs.rules[ri].match.any):
            return -1
        return ri

    def _counted_pending(self, entry: Counted) -> Pending | None:
        """The ``Pending`` a line the count lane counted stands for (``process`` would have made it at
        the line), its captures found now; None when their search ran past the time limit (the line
        is then not counted after all, as ``_count_run`` says it)."""
        start, ri, text, p, last, host, line_no = entry
        rule = self.engine.ruleset.rules[ri]
        try:
            caps, _ = self.engine.ruleset.confirm(ri, text, [], self.engine.budget)
        except PatternTimeout as e:
            self.timeouts.setdefault(e.rule_id, [0, line_no])[0] += 1
            caps = None
        if caps is None:
            self.confirmed -= 1
            self.kept[(rule.id, _NO_KEY)] -= 1
            return None
        return Pending(rule, caps, text, text, NO_PREFIX, NO_PREFIX, start, line_no, p, _NO_KEY, b"",
                       rule.role is Role.PRIMARY, False, last, host)

    def build_kept(self, buf: Buffer) -> None:
        """Build the pending matches still kept (in line order) when a region ends: a match past the
        first KEEP_FIRST of its rule and writer gets its time, rank and context once per region, not
        once per block it was among the last KEEP_LAST of. ``buf``: the region's buffer (its bytes
        are the blocks')."""
        builds = [pm for pm in self.unbuilt if pm.alive]
        tail_keep = self.tail_keep
        for k in self.counted_rings:  # the count lane's lines still kept become pending matches
            ring = tail_keep[k]
            now: list[Match | Pending | Counted] = []
            for x in ring:
                if isinstance(x, tuple):
                    made = self._counted_pending(x)
                    if made is None:
                        continue
                    builds.append(made)
                    x = made
                now.append(x)
            ring[:] = now
        self.unbuilt.clear()
        self.counted_rings.clear()
        if len(builds) > 1:
            builds.sort(key=lambda pm: pm.start)
        rs = self.engine.ruleset
        for pm in builds:
            ring = tail_keep[(pm.rule.id, pm.key)]
            at = next(i for i, x in enumerate(ring) if x is pm)
            if pm.caps is None:  # (a bulk-lane line: its captures, from its own search)
                try:
                    pm.caps, _ = rs.confirm(pm.index, pm.frame, [], self.engine.budget)
                except PatternTimeout as e:  # (its search alone took too long: said as the plain path says it)
                    self.timeouts.setdefault(e.rule_id, [0, pm.line_no])[0] += 1
                if pm.caps is None:  # (not what the bulk search found: the line is not counted after all)
                    self.confirmed -= 1
                    self.kept[(pm.rule.id, pm.key)] -= 1
                    del ring[at]
                    continue
            ring[at] = self.build(buf, pm)

    def count_lane(self, buf: Buffer, lines: dict[int, set[int]], order: Sequence[int], leave_plain: bool
                   ) -> _Lane | None:
        """The candidate lines whose confirmation needs nothing but their one rule's patterns,
        confirmed at once (``ruleset.Bulk``: one search of the lines joined). Such a line has no
        launcher prefix, is printable ASCII (its message is its bytes: no ``\\r`` frames, no ANSI
        codes), holds no embedded prefix (every one holds ``]:`` or ``]<std``), is not over-long, and
        its one rule is line-scope without a host capture (``_count_rule``). Unlike the bulk lane's,
        its lines may hold a stamp or name a host (an NCCL INFO line's origin): ``process`` reads the
        stamp of each line it counts, and counts a line that may name a host only once its writer's
        host is known. ``leave_plain``: a confirmed line that may hold neither is left to the bulk
        lane, which counts runs of them faster. ``order``: the candidates' starts, in line order."""
        rs = self.engine.ruleset
        off = self.engine.budget.off
        begin = buf.begin
        starts: list[int] = []
        rules: list[int] = []
        region = order[bisect_left(order, begin):]
        ids = list(map(lines.__getitem__, region))
        if ids and (ids.count(ids[0]) == len(ids) or all(map(ids[0].__eq__, ids))):  # (one set of ids: classified once)
            ri = self._count_class(ids[0])
            if ri < 0 or off[ri]:
                return None
            starts, rules = list(region), [ri] * len(region)
            region = []
        count_class = self._count_class
        for start in region:
            ri = count_class(lines[start])
            if ri < 0 or off[ri]:
                continue
            starts.append(start)
            rules.append(ri)
        if not starts:
            return None
        ends, raws = buf.line_spans(starts)
        joined = b"\n".join(raws)
        if (max(map(sub, ends, starts)) > MAX_LINE_BYTES or joined.translate(None, _PLAIN_LINES) or b"]:" in joined
                or b"]<std" in joined):  # (else every line is plain: not asked one by one)
            # (each asked in C: a line that is not plain is one among many plain ones)
            plain = list(map(and_, map(le, map(sub, ends, starts), repeat(MAX_LINE_BYTES)),
                             map(not_, map(bytes.translate, raws, repeat(None), repeat(_PLAIN_BYTES)))))
            for mark in (b"]:", b"]<std"):
                if mark in joined:
                    plain = list(map(and_, plain, map(not_, map(contains, raws, repeat(mark)))))
            starts, rules, raws = list(compress(starts, plain)), list(compress(rules, plain)), list(compress(raws, plain))
            joined = b"\n".join(raws)
        prefixed = maybe_prefixed(raws, joined, self.ctx.hyperscan)
        texts = joined.decode("ascii").split("\n") if raws else []
        groups: dict[int, tuple[list[int], list[str], list[bytes]]] = {}
        if True in prefixed or len(set(rules)) > 1:
            for start, ri, text, raw, no in zip(starts, rules, texts, raws, prefixed, strict=True):
                if no:
                    continue
                got = groups.get(ri)
                if got is None:
                    got = groups[ri] = ([], [], [])
                got[0].append(start)
                got[1].append(text)
                got[2].append(raw)
        elif starts:
            groups[rules[0]] = (starts, texts, raws)
        lane = _Lane(set(), {})
        judged = lane.judged
        finder = window_finder() if self.ctx.hyperscan and EXACT_LANE else None
        for ri, (group, texts, group_raws) in groups.items():
            bulk = rs.bulk(ri)
            assert bulk is not None
            # (Hyperscan's exact database of the rule, as the bulk lane asks it: a callback per line,
            # not a ``regex`` match object; else ``regex`` searches the lines joined)
            exact = exact_lines(rs.rules[ri], bulk.not_literals) if finder is not None else None
            if exact is not None:
                yes = exact.confirmed(*joined_lines(group_raws))
                if len(yes) == len(group):
                    oks: list[bool] | None = [True] * len(group)
                else:
                    oks = [False] * len(group)
                    for k in yes:
                        oks[k] = True
            else:
                oks = bulk.confirms(texts)
            if oks is None:
                continue  # a pattern ran past the time limit: one by one, with the rule's budget
            stamped = lines_may_hold_stamp(texts)
            named = list(map(or_, map(contains, texts, repeat(" kernel: ")), map(contains, texts, repeat(" NCCL "))))
            if all(oks) and (not leave_plain or all(map(or_, stamped, named))):  # (all taken: as they are)
                judged.update(group)
                lane.rules[ri] = (group, texts, stamped, named)
                continue
            taken: tuple[list[int], list[str], list[bool], list[bool]] = ([], [], [], [])
            for start, text, ok, stamp, host in zip(group, texts, oks, stamped, named, strict=True):
                if not ok:
                    judged.add(start)  # (its one rule does not confirm it: nothing to do)
                    continue
                if leave_plain and not stamp and not host:
                    continue
                judged.add(start)
                taken[0].append(start)
                taken[1].append(text)
                taken[2].append(stamp)
                taken[3].append(host)
            if taken[0]:
                lane.rules[ri] = taken
        return lane if judged else None

    def _count_segment(self, lane: _Lane, cursors: dict[int, int], upto: int, block: _Block) -> int:
        """Count the count lane's lines before ``upto`` that are not counted yet (``cursors``: per
        rule, the first of its lines not counted yet), as ``process`` would one by one: a line past
        its rule's first KEEP_FIRST is only counted and put in its rule's ring of last ones (with what
        a ``Pending`` of it would hold); a line among them, or naming a host while its writer's is not
        known, is taken line by line (``_line``). Lines without a stamp to read are counted at once
        once nothing is left to take line by line: only each rule's last KEEP_LAST enter its ring.
        Returns the start of the next line not counted, or -1."""
        rs = self.engine.ruleset
        off = self.engine.budget.off
        kept, tail_keep, hosts = self.kept, self.tail_keep, self.hosts
        spans: dict[int, list[int]] = {}  # rule index -> [its first line here, the end of its lines here]
        stamped = False
        for ri, (starts, _, stamps_of, _) in lane.rules.items():
            a = cursors[ri]
            if a >= len(starts) or starts[a] >= upto:
                continue
            b = bisect_left(starts, upto, a)
            cursors[ri] = b
            spans[ri] = [a, b]
            stamped = stamped or True in stamps_of[a:b]
        following = [starts[cursors[ri]] for ri, (starts, _, _, _) in lane.rules.items() if cursors[ri] < len(starts)]
        after = min(following) if following else -1
        if stamped:  # (each stamp is read in line order: a full date is the reference for year-less ones)
            for start, ri, i in sorted((lane.rules[ri][0][i], ri, i) for ri, (a, b) in spans.items() for i in range(a, b)):
                self._count_one(lane, ri, i, start, block)
            return after
        while spans:
            blocked = [ri for ri, (a, b) in spans.items() if not off[ri] and (
                kept.get((rs.rules[ri].id, _NO_KEY), 0) < KEEP_FIRST
                or (_NO_KEY not in hosts and True in lane.rules[ri][3][a:b]))]
            if not blocked:
                break
            # the earliest line left, line by line (a first KEEP_FIRST line may make its writer's host known)
            ri = min(spans, key=lambda r: lane.rules[r][0][spans[r][0]])
            i = spans[ri][0]
            self._count_one(lane, ri, i, lane.rules[ri][0][i], block)
            spans[ri][0] += 1
            if spans[ri][0] >= spans[ri][1]:
                del spans[ri]
        last = block.last_plain()
        host = hosts.get(_NO_KEY)
        for ri, (a, b) in spans.items():
            if off[ri]:
                continue  # its rule's budget for this run is spent: the rule is not tried
            rule_id = rs.rules[ri].id
            k = (rule_id, _NO_KEY)
            m = b - a
            self.confirmed += m
            kept[k] += m
            ring = tail_keep[k]
            over = len(ring) + m - KEEP_LAST
            if over > 0:
                self.dropped[rule_id] += over
                for gone in ring[:over]:
                    if isinstance(gone, Pending):
                        gone.alive = False
                del ring[:over]
            starts, texts = lane.rules[ri][0], lane.rules[ri][1]
            ring += [(starts[i], ri, texts[i], None, last, host, -1) for i in range(max(a, b - KEEP_LAST), b)]
            block.counted_rings.add(k)
        return after

    def _count_one(self, lane: _Lane, ri: int, i: int, start: int, block: _Block) -> None:
        """The count lane's line ``i`` of rule ``ri`` (at ``start``), as ``process`` takes it alone."""
        if self.engine.budget.off[ri]:
            return  # its rule's budget for this run is spent: the rule is not tried
        rule_id = self.engine.ruleset.rules[ri].id
        k = (rule_id, _NO_KEY)
        n = self.kept.get(k, 0)
        _, texts, stamps_of, hosts_of = lane.rules[ri]
        if n < KEEP_FIRST or (hosts_of[i] and _NO_KEY not in self.hosts):
            self._line(block, start)
            return
        p = self.ctx.stamps.of(texts[i]) if stamps_of[i] else None
        if p is not None:
            self.last_stamp[_NO_KEY] = p.time_ns
            block.snapshot = None
        self.confirmed += 1
        self.kept[k] = n + 1
        ring = self.tail_keep[k]
        ring.append((start, ri, texts[i], p, {} if p is not None else block.last_plain(), self.hosts.get(_NO_KEY), -1))
        if len(ring) > KEEP_LAST:
            gone = ring.pop(0)
            if isinstance(gone, Pending):
                gone.alive = False
            self.dropped[rule_id] += 1
        block.counted_rings.add(k)

    def _line(self, block: _Block, start: int) -> None:
        """Confirm, time and record the candidate line at ``start``, line by line (the definition
        every lane is compared with)."""
        block.snapshot = None  # (a writer's last stamp may change)
        if self.replay is not None and self.replay(block, start):
            return
        engine = self.engine
        rs = engine.ruleset
        budget = engine.budget
        buf = block.buf
        numbers = block.numbers
        lines = block.lines
        data = buf.data
        _, end = buf.line_at(start)
        raw = data[start:end]
        if len(raw) > MAX_LINE_BYTES:
            self.hygiene.line_capped(numbers.at(start))
        elif (not NCCL_SAID_AT_ONCE and lines[start] == {engine.nccl_fact}
              and self.statements.nccl_line_said(raw)):
            return  # (the same fact as an earlier init line's: nothing to build)
        prefix, msg = parse_line(raw)
        pbytes = prefix_bytes(raw, prefix)
        key = prefix.key
        rule_idx, facts = engine.targets(lines[start])
        for fi in facts:
            self.statements.fact(buf, fi, start, prefix, msg, pbytes)
        if not rule_idx:
            return
        frames = [f for f in msg.split("\r") if f.strip()] if "\r" in msg else [msg]
        found: list[tuple[Rule, dict[str, str], str]] = []
        cut_runs: dict[str, str] = {}  # rule id -> its event's text when a frame boundary cut a run
        around = EventContext(buf, start, pbytes)

        for ri in rule_idx:
            rule = rs.rules[ri]
            if budget.disabled(ri):
                continue  # its budget for this run is spent
            ctx: list[str] | Callable[[], list[str]] = []
            if rule.match.scope is Scope.EVENT:
                if rule.match.context_requires and not any(
                        buf.holds_before(lit.encode(), max(0, start - CONTEXT_REQUIRES_BYTES), start)
                        for lit in rule.match.context_requires):
                    continue  # what its context must hold is not there
                ctx = partial(around, rule)  # (built only if the line matched)
            for frame in frames:
                inner = _EMBEDDED_PREFIX.search(frame)
                if inner is not None and inner.start() > 0:
                    frame = frame[inner.start():]
                # the line's window lies as it is in the source (no prefix, the frame is the whole line)
                raw_at = (partial(self.raw_window, buf, start) if block.may_match_all is not None and not pbytes
                          and frame is msg and rule.match.scope is Scope.EVENT else None)
                try:
                    caps, spent = rs.confirm(ri, frame, ctx, budget, block.may_match_all, raw_at)
                except PatternTimeout as e:
                    self.timeouts.setdefault(e.rule_id, [0, numbers.at(start)])[0] += 1
                    if e.spent:
                        self.spent[ri] = numbers.at(start)
                    break
                if spent:
                    self.spent[ri] = numbers.at(start)
                if caps is not None:
                    found.append((rule, caps, frame))
                    if frame[:1] in _TOKEN_CHARS:
                        cut_runs[rule.id] = event_text(msg, frame, partial(_still_matches, rs, ri, context=ctx))
                    break
                if spent:
                    break
        if not found:
            return
        src = self.ctx.src
        top = max(r.priority for r, _, _ in found)
        p = self.ctx.stamps.of(with_stamp(prefix, msg))
        t: int | None
        lo: int | None
        hi: int | None
        if p is not None:
            self.last_stamp[key] = p.time_ns
        primary = any(r.role is Role.PRIMARY for r, _, _ in found)
        one_process = p is None and bool(pbytes) and self.one_process_before(buf.base_offset + start)
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
            if not self.counts_first(rule.id, key) and (key in self.hosts
                                                        or not _may_name_host(prefix, caps, frame)):
                last = {k: self.last_stamp[k] for k in (key, _ONE_WRITER_KEY, (*key, "task-clock"))
                        if k in self.last_stamp} if p is None else {}
                pm = Pending(rule, caps, frame, cut_runs.get(rule.id, frame), prefix, line_prefix, start,
                             -1, p, key, pbytes, primary, one_process, last, self.hosts.get(key))
                self.add_pending(pm)
                block.pending.append(pm)
                continue
            if timed is None:
                timed = self.line_time(buf, start, line_prefix, pbytes, key, p, one_process)
            if context is None:
                context = _match_context(buf, start, pbytes) if primary else ()
            t, lo, hi, kind = timed
            who = self.match_who(buf, start, prefix, pbytes, key, rule, caps, frame)
            self.add_match(Match(
                rule_id=rule.id, path=src.path, line=numbers.at(start), offset=buf.base_offset + start,
                text=clean(cut_runs.get(rule.id, frame)), who=who, time_ns=t, lo_ns=lo, hi_ns=hi,
                time_kind=kind, captures=_captures(caps), context=context, attempt=src.attempt,
                tz_assumed=bool(p and p.tz_assumed),
            ), key)

    def process(self, buf: Buffer, lines: dict[int, set[int]]) -> tuple[int, int]:
        """Confirm, time and record the candidate lines; returns (line number, offset) of the last line
        whose number was needed (the buffer's start when there was none), so the caller counts only
        the lines after it.

        A candidate is confirmed before anything is built around it (an event rule's context only when
        its line matched and it has patterns to try over the context). A confirmed match past the first
        KEEP_FIRST of its rule and writer is only counted (``Pending``, or in the count lane a tuple of
        what its line said) until the block ends; the ones still among the last KEEP_LAST then get
        their line numbers, and when the region ends their time, rank and context (``build_kept``).
        Line numbers are counted only where a match is built (``reader.LineNumbers``)."""
        finder = window_finder() if self.ctx.hyperscan and WINDOW_PREFILTER else None
        block = _Block(buf, lines, LineNumbers(self.ctx.scanner, buf.data, buf.begin, buf.base_line, buf.base_offset),
                       finder.may_match_all if finder is not None else None, self.last_stamp)
        numbers, pending = block.numbers, block.pending
        order = sorted(lines)
        if NCCL_SAID_AT_ONCE:
            order = self.unsaid(buf, lines, order)
        bulk_on = BULK_LANE and len(lines) > BULK_MIN_CANDIDATES
        lane = self.count_lane(buf, lines, order, bulk_on) if COUNT_LANE and len(order) > BULK_MIN_CANDIDATES else None
        others = [s for s in order if s not in lane.judged] if lane is not None else order
        bulk = self.bulk_lane(buf, lines, others) if bulk_on else None
        # the bulk lane's confirmed lines: taken one by one while their rule counts its first KEEP_FIRST,
        # then counted in runs between the lines taken one by one
        runs = _Runs(self, bulk) if bulk is not None else None
        cursors = dict.fromkeys(lane.rules, 0) if lane is not None else {}
        #: the count lane's next line not counted yet
        counted_next = [min(starts[0] for starts, _, _, _ in lane.rules.values()) if lane and lane.rules else -1]

        def count_before(upto: int) -> None:
            # the lanes' lines before ``upto`` that are only counted, in line order (a rule's lines may
            # be in both lanes: its ring of last ones takes them as the line-by-line path would)
            while True:
                nb = runs.next_counted() if runs is not None and runs.counted else -1
                nc = counted_next[0]
                if (nb < 0 or nb >= upto) and (nc < 0 or nc >= upto):
                    return
                if nb >= 0 and (nc < 0 or nb < nc):
                    assert runs is not None
                    self._count_runs(runs, upto if nc < 0 else min(nc, upto), block)
                else:
                    assert lane is not None
                    counted_next[0] = self._count_segment(lane, cursors, upto if nb < 0 else min(nb, upto), block)

        for start in (others if runs is None else runs.one_by_one(count_before)):
            count_before(start)
            if start >= buf.begin:
                self._line(block, start)
        count_before(len(buf.data) + 1)
        # the matches still kept get their line numbers (in line order: each counted from the one
        # before) while the block's are counted; they are built when the region ends (``build_kept``)
        tail_keep = self.tail_keep
        kept_now: list[tuple[int, Pending | tuple[list[Match | Pending | Counted], int]]] = [
            (pm.start, pm) for pm in pending if pm.alive and pm.line_no < 0]
        self.unbuilt += [pm for pm in pending if pm.alive]
        for k in block.counted_rings:
            ring = tail_keep[k]
            kept_now += [(x[0], (ring, i)) for i, x in enumerate(ring) if isinstance(x, tuple) and x[6] < 0]
        self.counted_rings |= block.counted_rings
        kept_now.sort(key=lambda kv: kv[0])
        for start, where in kept_now:
            if isinstance(where, Pending):
                where.line_no = numbers.at(start)
            else:
                ring, i = where
                x = ring[i]
                assert isinstance(x, tuple)
                ring[i] = (*x[:6], numbers.at(start))
        return numbers.last

    # --- what it says at the end ----------------------------------------------------------------

    def timeout_diagnostics(self) -> list[Diagnostic]:
        """A warning per rule whose pattern hit the time limit or spent its budget in this source."""
        path = self.ctx.src.path
        rules = self.engine.ruleset.rules
        spent = {rules[ri].id: (ri, line) for ri, line in self.spent.items()}
        out: list[Diagnostic] = []
        for rule_id in sorted(set(self.timeouts) | set(spent)):
            n, first_line = self.timeouts.get(rule_id, (0, 0))
            said = (f"its pattern ran longer than the time limit on {n} line(s) (first: line {first_line}) and was "
                    f"abandoned there" if n else "")
            if rule_id in spent:
                ri, line = spent[rule_id]
                lost, excess = self.engine.budget.spent(ri)
                said += ("; " if said else "") + (
                    f"its time budget for this run is spent at line {line} ({lost} line(s) abandoned on the time "
                    f"limit, {excess:.1f} s beyond what a linear pattern needs; the budget is {MAX_TIMEOUTS} lines or "
                    f"{RULE_EXCESS_BUDGET_S:g} s): the rule was not tried again in this run")
            out.append(Diagnostic(
                "warning", path,
                f"rule {rule_id}: {said} (a catastrophic pattern? check it with 'correlate rules check')",
                DiagCode.RULE_TIMEOUT, n))
        return out

    def dropped_diagnostics(self) -> list[Diagnostic]:
        return [Diagnostic("info", self.ctx.src.path, f"{n} more matches of {rule_id} not kept (first and last kept)",
                           DiagCode.MATCHES_NOT_KEPT, n) for rule_id, n in sorted(self.dropped.items())]
