"""A split file's candidate lines, read by the pool's workers and taken in order by the serial extract.

The serial extract of a big file (``engines.extract_split``) spent most of its time on what each
candidate line says: its launcher prefix, its rules' confirmation (with an event rule's context),
its stamp, its writer, the context of a failure and the stamps of the writer's lines around an
unstamped one. None of that depends on the lines before it in the file's order, only on the bytes
around it. What does -- which matches are kept or counted, a writer's last stamp and host, the
year reference, the facts stated before -- is little. So a worker reads each candidate line of its
piece (``read_lines``: a ``Said`` per line, from the bytes around it), and the serial extract takes
it in line order (``replay_line``, which ``Confirmer._line`` asks first), doing only what needs
that order.

A ``Said`` holds what the plain path (``Confirmer._line``) would compute from those bytes, and the
range of the source it was read from: the walks through a writer's lines are tracked
(``_Tracked``), so the range is what they looked at, and a walk that reached the edge of the
worker's bytes (not the file's) makes no ``Said``. The serial extract takes a ``Said`` only when
its own buffer holds that range (then its walks would see the same bytes and stop at the same
places), the worker's census of the file's writers is its own, no rule of the line is off for the
run, and a year-less stamp is parsed again (its year comes from the stamps read before it, in
order); otherwise the line takes the plain path. A confirmation that took longer than a linear
pattern may (which the plain path charges to the rule's budget) or a stamp without a year among
the stamps an inherited time is read from makes no ``Said`` either. Property tests compare the
digest with the serial one over random cuts, buffer sizes and the lines that must take the plain path.

Which lines a worker reads changes what is spent where, never what is found. It does not read a
line of facts only (most candidates of an ``NCCL_DEBUG=INFO`` log): the plain path costs the serial
extract no more than taking its reading would (a dense combined stream of 160 MB: 2.7 s of the
workers' for 0.7 s of the serial extract's). Nor a line after KEEP_FIRST confirmed lines of the
same pattern ids and writer in its piece: that line is past its rule's first KEEP_FIRST for the
writer (most surely: ids may name several rules), so the serial extract only confirms and counts it
where it is (its match is built when its block ends, if it is among the last KEEP_LAST), which the
reading saved little of. A line that may name its host, by a writer without a rank, is built where
it is (the host never becomes known), so it is not counted so.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from correlator.extract import confirmer as _c
from correlator.extract.confirmer import (
    _EMBEDDED_PREFIX,
    _MPI_EMBEDDED,
    _ONE_WRITER_KEY,
    _TOKEN_CHARS,
    CONTEXT_REQUIRES_BYTES,
    INHERIT_NEXT_NS,
    KEEP_FIRST,
    Confirmer,
    EventContext,
    Pending,
    _Block,
    _captures,
    _match_context,
    _may_name_host,
    _still_matches,
    event_text,
)
from correlator.extract.lines import (
    LOOK_LINES,
    MAX_LINE_BYTES,
    WRITER_WINDOW,
    Buffer,
    Context,
    Stamps,
    line_who,
    parse_line,
    prefix_bytes,
    with_stamp,
)
from correlator.extract.prefixes import Prefix, clean, split_prefix
from correlator.extract.reader import Hygiene
from correlator.extract.statements import FACTS, Statements, table_owner
from correlator.extract.timestamps import Parsed
from correlator.model import Match, Role, Scope, SourceInfo, TimeKind, Who
from correlator.ruleset import PatternTimeout, allowance

if TYPE_CHECKING:
    from correlator.extract.extractor import Engine, ExtractOptions

#: the only fact pattern whose statement reads nothing but its line (the others read the lines around it)
_LINE_FACTS = frozenset(i for i, (name, _rx, _kws) in enumerate(FACTS) if name == "nccl-comm")
#: what ``table_owner`` gives back when the line is in no failure table
_NOBODY = Who()

#: an inherited time's search, as the worker made it: (the time of the writer's stamped line before,
#: the end of the one after -- None where there was none in reach --, whether either assumed a zone)
Search = tuple[int | None, int | None, bool]


class Found(NamedTuple):
    """A rule that confirms the line, with what the plain path makes of it."""

    caps: dict[str, str]
    #: the ``\\r`` frame it matched (from an embedded prefix on), and whether that starts with one
    frame: str
    embedded: bool
    #: ``event_text`` of the frame when it starts with a token character (what ``_line`` keeps in
    #: ``cut_runs``: the text the match shows), else None
    cut: str | None
    #: ``clean`` of what the match shows, and the writer ``line_who`` reads (both as they are without
    #: an embedded prefix: then ``replay_line`` works them out again)
    text: str
    who: Who


class Said(NamedTuple):
    """What a worker read of one candidate line, as the plain path would read it (see the module)."""

    #: the source range it was read from (the lines the walks looked at)
    lo: int
    hi: int
    #: the source as the worker's census left it (its file rank: ``line_who`` reads it)
    src: SourceInfo
    prefix: Prefix
    pbytes: bytes
    #: the message, for a fact line (None otherwise)
    msg: str | None
    #: rule index -> how it confirms the line (rules missing here do not)
    found: dict[int, Found]
    #: the line's own stamp: parsed, or the text to parse again when it has no year (None: no stamp)
    stamp: Parsed | str | None
    #: ``Confirmer.one_process_before`` at the line (read only for a prefixed line without a stamp)
    one_process: bool
    #: the inherited time's search of the plain path (the one ``one_process`` says), and the srun task's
    #: (when that found nothing either side and the line names a rank under a task)
    search: Search | None
    task_search: Search | None
    #: the failure's context (when a rule found is primary)
    context: tuple[str, ...] | None
    #: the failure-table record the line lies in: (its rank, its local rank), () for none, None: not read
    table: tuple[int | None, int | None] | tuple[()] | None


# --- the worker's side ---------------------------------------------------------------------------

class _Edge(Exception):
    """A walk reached the edge of the worker's bytes, which is not the file's: no ``Said``."""


class _Tracked(Buffer):
    """A buffer whose walks through lines remember the range they looked at (``lo``, ``hi``, offsets
    in ``data``); ``context`` is the plain definition over those walks. A walk that looks past the
    bytes the worker has where the source goes on raises ``_Edge``: before ``data`` (unless it starts
    the source), or past its last newline (unless it ends the source: its last line's newline is
    then there, as the serial extract adds it)."""

    def __init__(self, data: bytes, begin: int, base_offset: int, last: bool) -> None:
        super().__init__(data, begin, base_offset, 1)
        self.first, self.last = base_offset == 0, last
        #: where the worker's whole lines end (the bytes after it are the start of a line cut off)
        self.limit = len(data) if last else data.rfind(b"\n") + 1
        self.lo = self.hi = 0

    def reset(self, start: int, end: int) -> None:
        self.lo, self.hi = start, start
        self.looked(start, end)

    def looked(self, lo: int, hi: int) -> None:
        if lo <= 0 and not self.first:
            raise _Edge
        if hi > self.limit or (hi >= len(self.data) and not self.last):
            raise _Edge
        if lo < self.lo:
            self.lo = max(lo, 0)
        if hi > self.hi:
            self.hi = hi

    def _walk(self, lines: Iterator[tuple[int, int]], start: int, n: int, before: bool,
              floor: tuple[int, int]) -> Iterator[tuple[int, int]]:
        """``lines`` (a walk of up to ``n`` lines from ``start``), each line's bytes marked looked at
        as it is given (the newline before a line before, the one after a line after); a walk that
        gave fewer looked as far as ``floor``."""
        k = 0
        for s, e in lines:
            k += 1
            if before:
                self.looked(s - 1, start)  # (the newline before it was looked for; -1 at the data's start)
            else:
                self.looked(start, e + 1)
            yield s, e
        if k < n:  # (the data's start or end, or the writer window's edge, was reached)
            self.looked(*floor)

    def lines_before(self, start: int, n: int) -> Iterator[tuple[int, int]]:
        return self._walk(super().lines_before(start, n), start, n, True, (0, start))

    def lines_after(self, start: int, n: int) -> Iterator[tuple[int, int]]:
        return self._walk(super().lines_after(start, n), start, n, False, (start, len(self.data)))

    def writer_before(self, start: int, pbytes: bytes, n: int) -> Iterator[tuple[int, int]]:
        if not pbytes:
            return self.lines_before(start, n)
        return self._walk(super().writer_before(start, pbytes, n), start, n, True,
                          (max(0, start - WRITER_WINDOW), start))

    def writer_after(self, start: int, pbytes: bytes, n: int) -> Iterator[tuple[int, int]]:
        if not pbytes:
            return self.lines_after(start, n)
        return self._walk(super().writer_after(start, pbytes, n), start, n, False,
                          (start, min(len(self.data), start + WRITER_WINDOW)))

    def context(self, start: int, pbytes: bytes, n_before: int, n_after: int) -> tuple[list[str], list[str]]:
        before = list(self.writer_before(start, pbytes, n_before))
        before.reverse()
        return self.messages(before), self.messages(list(self.writer_after(start, pbytes, n_after)))

    def holds_before(self, lit: bytes, lo: int, start: int) -> bool:
        self.looked(lo, start)
        return super().holds_before(lit, lo, start)


def _table_reach(buf: _Tracked, start: int) -> None:
    """What ``table_owner`` looks at before it walks the lines: the 80 lines before ``start``."""
    data = buf.data
    lo = start
    for _ in range(80):
        if lo <= 0:
            break
        lo = data.rfind(b"\n", 0, lo - 1) + 1
    buf.looked(lo - 1 if lo > 0 else 0, start)


class Reader:
    """Reads a worker's candidate lines of one split file (``read_lines``): the parts of an extractor
    that say what a line says, with nothing of the file's order."""

    def __init__(self, engine: Engine, opts: ExtractOptions, src: SourceInfo, probe: bytes) -> None:
        self.engine = engine
        stamps = Stamps(opts.tz, None)
        self.ctx = Context(src, stamps, engine.scanner)
        # the census of the file's writers on its first bytes, as the serial extract makes it (this
        # process's extract compares the source it gives each ``Said`` with its own)
        Statements(self.ctx).check_writers(probe)
        self.src = self.ctx.src
        self.stamps = stamps
        self.confirmer = Confirmer(self.ctx, engine, Statements(self.ctx), Hygiene())
        self.confirmer.probe = probe
        finder = None
        if engine.scanner.name == "hyperscan" and _c.WINDOW_PREFILTER:
            from correlator.extract.scan import window_finder

            finder = window_finder()
        self.may_match_all = finder.may_match_all if finder is not None else None

    def read(self, buf: _Tracked, start: int, pids: tuple[int, ...], seen: dict[tuple, int]) -> Said | None:
        """What the candidate line at ``start`` (in ``buf``) says, or None when it must take the plain path.
        ``seen``: (pattern ids, writer) -> the lines of the piece before it that a rule confirmed (and
        that are counted once their rule's first KEEP_FIRST are: see the module)."""
        engine = self.engine
        rule_idx, facts = engine.targets(pids)
        if not rule_idx:
            # a line of facts only: the serial extract spends no more on it than reading it would here
            # (an NCCL INFO line of a dense log most often states what an earlier one did: judged at once)
            return None
        if not _LINE_FACTS.issuperset(facts):
            return None  # (a failure table's or rendezvous' statement reads the lines around it)
        data = buf.data
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        raw = data[start:end]
        if len(raw) > MAX_LINE_BYTES:
            return None  # (the plain path counts it as cut)
        try:
            buf.reset(start, end + 1)
        except _Edge:
            return None
        prefix, msg = parse_line(raw)
        kind = (pids, prefix.key)
        if seen.get(kind, 0) >= KEEP_FIRST:
            return None  # (surely only counted where it is: see the module)
        pbytes = prefix_bytes(raw, prefix)
        try:
            found = self._confirm(buf, start, rule_idx, prefix, msg, pbytes)
        except (_Edge, PatternTimeout):
            return None
        if found is None:
            return None
        stamp: Parsed | str | None = None
        one_process = False
        search = task_search = None
        context = table = None
        try:
            if found:
                text = with_stamp(prefix, msg)
                p = self.stamps.parser.parse(text)
                stamp = text if p is not None and p.year_inferred else p
                rules = engine.ruleset.rules
                top = max(rules[ri].priority for ri in found)
                # (a line that may name its writer's host is built where it is while the host is not
                # known, which a writer without a rank never makes it)
                if not any(f.embedded or (f.who.rank is None and _may_name_host(prefix, f.caps, f.frame))
                           for ri, f in found.items() if rules[ri].priority == top):
                    seen[kind] = seen.get(kind, 0) + 1
                if any(rules[ri].role is Role.PRIMARY for ri in found):
                    context = _match_context(buf, start, pbytes)
                if p is None:
                    one_process = bool(pbytes) and self.confirmer.one_process_before(buf.base_offset + start)
                    if pbytes and one_process:
                        search = self._search(buf, start, b"")
                    else:
                        search = self._search(buf, start, pbytes)
                        if search[0] is None and search[1] is None and prefix.task is not None and (
                                prefix.rank is not None or prefix.local_rank is not None):
                            outer = pbytes[:pbytes.find(b": ") + 2] if b": " in pbytes else b""
                            if outer and outer != pbytes:
                                task_search = self._search(buf, start, outer)
                if any(f.embedded or (f.who.rank is None and f.who.local_rank is None
                                      and rules[ri].role is not Role.TEARDOWN) for ri, f in found.items()):
                    _table_reach(buf, start)
                    owner = table_owner(buf, start, pbytes, _NOBODY)
                    table = () if owner is _NOBODY else (owner.rank, owner.local_rank)
        except (_Edge, _YearLess):
            return None
        base = buf.base_offset
        return Said(base + buf.lo, base + buf.hi, self.src, prefix, pbytes, msg if facts else None, found, stamp,
                    one_process, search, task_search, context, table)

    def _search(self, buf: _Tracked, start: int, pbytes: bytes) -> Search:
        """The plain search of ``Confirmer.inherit``: the writer's stamped lines nearest before and after."""
        data = buf.data
        stamps = self.stamps
        lo = hi = None
        for s, e in buf.writer_before(start, pbytes, LOOK_LINES):
            lo = stamps.of_line(data[s:e], False)
            if lo is not None:
                break
        for s, e in buf.writer_after(start, pbytes, LOOK_LINES):
            hi = stamps.of_line(data[s:e], False)
            if hi is not None:
                break
        if (lo is not None and lo.year_inferred) or (hi is not None and hi.year_inferred):
            raise _YearLess
        return (lo.time_ns if lo is not None else None, hi.time_ns + hi.resolution_ns if hi is not None else None,
                bool((lo is not None and lo.tz_assumed) or (hi is not None and hi.tz_assumed)))

    def _confirm(self, buf: _Tracked, start: int, rule_idx: set[int], prefix: Prefix, msg: str, pbytes: bytes
                 ) -> dict[int, Found] | None:
        """Each rule of the line that confirms it, as ``Confirmer._line`` tries them (the run's budget
        aside: None when a confirmation took longer than a linear pattern may, which the plain path
        would charge to the rule)."""
        rs = self.engine.ruleset
        src = self.src
        frames = [f for f in msg.split("\r") if f.strip()] if "\r" in msg else [msg]
        out: dict[int, Found] = {}
        around = EventContext(buf, start, pbytes, record=True)  # (Confirmer._line's: the same lines)
        built = around.built
        assert built is not None
        for ri in rule_idx:
            rule = rs.rules[ri]
            ctx: list[str] | Callable[[], list[str]] = []
            if rule.match.scope is Scope.EVENT:
                if rule.match.context_requires and not any(
                        buf.holds_before(lit.encode(), max(0, start - CONTEXT_REQUIRES_BYTES), start)
                        for lit in rule.match.context_requires):
                    continue
                ctx = partial(around, rule)
            for frame in frames:
                inner = _EMBEDDED_PREFIX.search(frame)
                if inner is not None and inner.start() > 0:
                    frame = frame[inner.start():]
                built.clear()
                t0 = time.perf_counter()
                caps, _ = rs.confirm(ri, frame, ctx, None, self.may_match_all)
                wall = time.perf_counter() - t0
                limit = allowance(frame) + (allowance("\n".join(built[0])) if built and built[0] else 0.0)
                if wall > limit:
                    return None
                if caps is not None:
                    cut = None
                    if frame[:1] in _TOKEN_CHARS:
                        cut = event_text(msg, frame, partial(_still_matches, rs, ri, context=ctx))
                    out[ri] = Found(caps, frame, _EMBEDDED_PREFIX.match(frame) is not None, cut,
                                    clean(frame if cut is None else cut), line_who(src, prefix, caps, frame))
                    break
        return out


class _YearLess(Exception):
    """A stamp an inherited time is read from carries no year: its year depends on the order."""


def read_lines(reader: Reader, data: bytes, begin: int, base: int, last: bool,
               candidates: list[tuple[int, tuple[int, ...]]]) -> dict[int, Said]:
    """What each of ``candidates`` (source offsets in ``data``'s piece, with their pattern ids) says:
    ``data`` holds the source from ``base`` (the piece from ``begin``, and the bytes around it);
    ``last``: it ends at the source's logical end (its last line's newline added when it had none)."""
    buf = _Tracked(data, begin, base, last)
    out: dict[int, Said] = {}
    seen: dict[tuple, int] = {}
    for at, ids in candidates:
        said = reader.read(buf, at - base, ids, seen)
        if said is not None:
            out[at] = said
    return out


# --- this process's side ---------------------------------------------------------------------------

class Told:
    """The ``Said`` of a split file's candidate lines, piece by piece as they arrive
    (``engines.ReplayScanner``), taken by ``replay_line`` in line order."""

    def __init__(self) -> None:
        self._pieces: deque[tuple[int, int, dict[int, Said]]] = deque()
        #: the last source a worker assumed, and whether it is this extract's
        self._src: tuple[SourceInfo | None, bool] = (None, False)

    def add(self, start: int, end: int, said: dict[int, Said]) -> None:
        self._pieces.append((start, end, said))

    def take(self, at: int) -> Said | None:
        """The ``Said`` of the line at source offset ``at`` (the pieces before it are let go of)."""
        pieces = self._pieces
        while pieces and pieces[0][1] <= at:
            pieces.popleft()
        if not pieces or pieces[0][0] > at:
            return None
        return pieces[0][2].pop(at, None)

    def same_source(self, src: SourceInfo, mine: SourceInfo) -> bool:
        known, same = self._src
        if src is not known:
            same = src == mine
            self._src = (src, same)
        return same


def _inherited(search: Search, last: dict[tuple, int], key: tuple) -> tuple[int | None, int | None, int | None]:
    """``Confirmer.inherit``'s time from its search (``lo``, ``hi``) and the writers' last stamps."""
    lo, hi, _tz = search
    if lo is None:
        lo = last.get(key)
    if lo is not None and hi is not None and hi < lo:
        hi = lo
    if lo is not None and hi is not None and hi - lo <= INHERIT_NEXT_NS:
        return hi - 1, lo, hi
    if lo is None and hi is not None:
        return hi - 1, None, hi
    return lo, lo, hi


def replay_line(c: Confirmer, told: Told, block: _Block, start: int) -> bool:
    """``Confirmer._line`` of the line at ``start`` from what a worker read of it (see the module);
    False when it must take the plain path (then nothing was done here)."""
    buf = block.buf
    base = buf.base_offset
    said = told.take(base + start)
    if said is None or said.lo < base or said.hi > base + len(buf.data):
        return False
    ctx = c.ctx
    if not told.same_source(said.src, ctx.src):
        return False
    engine = c.engine
    budget = engine.budget
    pids = block.lines[start]
    if not _c.NCCL_SAID_AT_ONCE and pids == {engine.nccl_fact}:
        return False
    stamps = ctx.stamps
    p: Parsed | None
    if isinstance(said.stamp, str):
        p = stamps.parser.parse(said.stamp)  # (its year from the stamps read so far)
        if p is None:
            return False  # (a day its inferred year has not: the plain path reads the time around it)
    else:
        p = said.stamp
    prefix, pbytes, key = said.prefix, said.pbytes, said.prefix.key
    one_process = False
    if p is None and pbytes:
        one_process = c.one_process_before(base + start)
        if one_process != said.one_process:
            return False
    # (from here on as ``_line``, in its order)
    rs = engine.ruleset
    rule_idx, facts = engine.targets(pids)
    for fi in facts:
        c.statements.fact(buf, fi, start, prefix, said.msg or "", pbytes)
    if not rule_idx:
        return True
    found = [(rs.rules[ri], said.found[ri]) for ri in rule_idx if ri in said.found and not budget.disabled(ri)]
    if not found:
        return True
    src = ctx.src
    top = max(r.priority for r, _ in found)
    if p is not None:
        stamps.took(p)
        c.last_stamp[key] = p.time_ns
    primary = any(r.role is Role.PRIMARY for r, _ in found)
    line_prefix = prefix
    timed: tuple[int | None, int | None, int | None, TimeKind] | None = None
    context: tuple[str, ...] | None = None
    numbers = block.numbers
    for rule, f in found:
        if rule.priority != top:
            continue
        frame, text, who = f.frame, f.text, f.who
        if f.embedded:
            mpi = _MPI_EMBEDDED.match(frame) is not None
            inner_prefix, frame = split_prefix(frame)
            if (prefix.rank is None and prefix.local_rank is None) or (mpi and inner_prefix.rank is not None):
                prefix = Prefix(prefix.task if inner_prefix.task is None else inner_prefix.task,
                                inner_prefix.local_rank, inner_prefix.rank, prefix.length)
        if prefix is not said.prefix or f.embedded:
            who = line_who(src, prefix, f.caps, frame)
            text = clean(frame if f.cut is None else f.cut)
        if not c.counts_first(rule.id, key) and (key in c.hosts or not _may_name_host(prefix, f.caps, frame)):
            last = {k: c.last_stamp[k] for k in (key, _ONE_WRITER_KEY, (*key, "task-clock"))
                    if k in c.last_stamp} if p is None else {}
            pm = Pending(rule, f.caps, frame, frame if f.cut is None else f.cut, prefix, line_prefix, start, -1, p,
                         key, pbytes, primary, one_process, last, c.hosts.get(key))
            c.add_pending(pm)
            block.pending.append(pm)
            continue
        if timed is None:
            timed = _time(c, said, p, line_prefix, pbytes, key, one_process)
        if context is None:
            context = (said.context or ()) if primary else ()
        t, lo, hi, kind = timed
        if who.rank is None and who.local_rank is None and rule.role is not Role.TEARDOWN and said.table:
            who = Who(said.table[0], said.table[1], who.task, who.host, who.pid)
        if who.host is None and key in c.hosts:
            who = Who(who.rank, who.local_rank, who.task, c.hosts[key], who.pid)
        elif who.host is not None and who.rank is not None:
            c.hosts.setdefault(key, who.host)
        c.add_match(Match(
            rule_id=rule.id, path=src.path, line=numbers.at(start), offset=base + start, text=text, who=who,
            time_ns=t, lo_ns=lo, hi_ns=hi, time_kind=kind, captures=_captures(f.caps), context=context,
            attempt=src.attempt, tz_assumed=bool(p and p.tz_assumed)), key)
    return True


def _time(c: Confirmer, said: Said, p: Parsed | None, prefix: Prefix, pbytes: bytes, key: tuple,
          one_process: bool) -> tuple[int | None, int | None, int | None, TimeKind]:
    """``Confirmer.line_time`` from the worker's searches."""
    if p is not None:
        return p.time_ns, p.time_ns, p.time_ns + p.resolution_ns, TimeKind.OWN
    stamps = c.ctx.stamps
    search = said.search
    assert search is not None
    if search[2]:
        stamps.tz_assumed = True
    if pbytes and one_process:
        t, lo, hi = _inherited(search, c.last_stamp, _ONE_WRITER_KEY)
        return t, lo, hi, (TimeKind.INHERITED if t is not None else TimeKind.NONE)
    t, lo, hi = _inherited(search, c.last_stamp, key)
    if t is None and prefix.task is not None and (prefix.rank is not None or prefix.local_rank is not None):
        task = said.task_search
        if task is not None:
            if task[2]:
                stamps.tz_assumed = True
            t, lo, hi = _inherited(task, c.last_stamp, (*key, "task-clock"))
    return t, lo, hi, (TimeKind.INHERITED if t is not None else TimeKind.NONE)
