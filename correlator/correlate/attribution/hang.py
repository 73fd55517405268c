"""The culprit of a hang: each signal a small pure function from events to ``Clue``s.

When no rank printed a failure that can start a cascade and the ranks report timeouts, every
function here looks at one kind of evidence (PyTorch's desync report, Horovod's stall report, who
is missing from the stuck collective, NCCL work counters of the stuck group, another operation at
the same SeqNum, progress and output that stopped first, a rank that ended while the others
waited, the dump-signal pointer) and returns what it says about which rank. ``score`` weighs
them with ``policy.WEIGHTS``. Reads no files, renders nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from correlator.correlate.attribution import policy
from correlator.correlate.attribution.events import Ev, exit_names, rank_list
from correlator.correlate.attribution.lifecycle import Life
from correlator.model import NS, Role, StreamFacts, TimeKind
from correlator.model.evidence import Clue
from correlator.model.evidence import EvidenceKind as K
from correlator.model.vocabulary import Capture, Tag


@dataclass(frozen=True)
class Stuck:
    """The collective the ranks timed out in first: of the process group whose timeouts came first
    (an expert-parallel group stuck on one rank makes the other groups' ranks time out later on the
    default group's next collective, a consequence)."""

    #: rank -> the SeqNum of its first timeout report in that group
    first_seq: dict[int, int]
    #: the majority SeqNum and how many ranks report it
    major: int | None
    n_major: int
    #: the process groups the majority SeqNum was reported in
    pgs: frozenset[str]
    #: the rule most ranks report the timeout with
    rule: str | None
    #: the stuck group's id when the lines name one
    pg: str | None = None
    #: the ranks that belong to that group (None: every rank, the default group)
    members: frozenset[int] | None = None


#: process group ids that are the job-wide default group (PyTorch numbers it 0)
_DEFAULT_GROUPS = (None, "0")


def stuck_collective(evs: Sequence[Ev]) -> Stuck:
    by_pg: dict[str | None, list[Ev]] = defaultdict(list)
    for ev in evs:
        seq = ev.m.capture(Capture.SEQ)
        if ev.rank is not None and seq and seq.isdecimal() and ev.rule.role is Role.COLLATERAL:
            by_pg[ev.m.capture(Capture.PG)].append(ev)
    by_rule: Counter[str] = Counter()
    pg: str | None = None
    first_seq: dict[int, int] = {}
    if by_pg:
        def first_time(item: tuple[str | None, list[Ev]]) -> tuple[int, int]:
            ts = [e.t for e in item[1] if e.t is not None]
            return (min(ts) if ts else 1 << 62, -len({e.rank for e in item[1]}))
        # a line that names no group (a ``what():`` copy, an older wording) joins the named group in
        # which its rank reported the same SeqNum, or the only named group there is
        named = {k: v for k, v in by_pg.items() if k is not None}
        if named and None in by_pg:
            seen = {(e.rank, e.m.capture(Capture.SEQ)): k for k, v in named.items() for e in v}
            for e in by_pg[None]:
                k = seen.get((e.rank, e.m.capture(Capture.SEQ)))
                if k is None and len(named) == 1:
                    k = next(iter(named))
                if k is not None:
                    named[k].append(e)
        pg, group = min((named or by_pg).items(), key=first_time)
        for ev in sorted(group, key=Ev.sort_key):
            seq = ev.m.capture(Capture.SEQ)
            if ev.rank is not None and seq is not None:  # (every grouped event has both: see above)
                first_seq.setdefault(ev.rank, int(seq))
            by_rule[ev.rule.id] += 1
    else:
        by_rule.update(ev.rule.id for ev in evs if ev.rule.role is Role.COLLATERAL and Tag.TIMEOUT in ev.rule.tags)
    major, n_major = Counter(first_seq.values()).most_common(1)[0] if first_seq else (None, 0)
    members = None
    if pg not in _DEFAULT_GROUPS:
        members = frozenset(e.rank for e in evs if e.rank is not None and e.m.capture(Capture.PG) == pg)
    pgs = frozenset({pg} if pg is not None else ())
    return Stuck(first_seq, major, n_major, pgs, by_rule.most_common(1)[0][0] if by_rule else None, pg, members)


@dataclass(frozen=True)
class Desync:
    joined: frozenset[int]
    finished: frozenset[int]
    never: frozenset[int]


def desync(evs: Sequence[Ev]) -> Desync:
    joined: set[int] = set()
    finished: set[int] = set()
    never: set[int] = set()
    for ev in evs:
        joined |= rank_list(ev.m.capture(Capture.JOINED_RANKS))
        finished |= rank_list(ev.m.capture(Capture.FINISHED_RANKS))
        never |= rank_list(ev.m.capture(Capture.MISSING_RANKS))
    return Desync(frozenset(joined), frozenset(finished), frozenset(never))


def all_joined(d: Desync, known: set[int]) -> bool:
    """Every rank entered the stuck collective and none finished it: no rank diverged."""
    return bool(d.joined) and known <= d.joined and not d.finished and not d.never


def desync_report(d: Desync) -> list[Clue]:
    out = [Clue(K.DESYNC_REPORT, r, "PyTorch's desync report names it as a rank that never joined any collective")
           for r in sorted(d.never)]
    if d.joined and d.finished:  # the smaller group is the odd one out
        odd, what = ((d.joined, "joined the stuck collective but did not finish it") if len(d.joined) < len(d.finished)
                     else (d.finished, "finished the collective the others are stuck in but did not join the next"))
        if len(odd) <= max(1, (len(d.joined) + len(d.finished)) // policy.ODD_SHARE):
            out += [Clue(K.DESYNC_REPORT, r, f"PyTorch's desync report: it {what}") for r in sorted(odd)]
    return out


def stall_report(evs: Sequence[Ev]) -> list[Clue]:
    """Horovod's stall inspector: the ranks that have not submitted the tensor the others wait for."""
    stalled: Counter[int] = Counter()
    for ev in evs:
        for r in rank_list(ev.m.capture(Capture.STALLED_RANKS)):
            stalled[r] += 1
    return [Clue(K.STALL_REPORT, r, "Horovod's stall report lists it among the ranks that never submitted the "
                                    "tensor the others wait for") for r in sorted(stalled)]


def missing_from_collective(evs: Sequence[Ev], s: Stuck, known: set[int], d: Desync) -> list[Clue]:
    """Ranks absent from the timeout most ranks report: the stuck collective's SeqNum when the lines
    name one (NCCL's watchdog), else the timeout rule itself (gloo's ``Timed out waiting ... for recv``,
    which names no collective). A rank the desync report saw join is not absent."""
    timed_only: set[int] = set()
    if s.major is not None:
        reporters, what = set(s.first_seq), f"the collective timeout that {s.n_major} ranks report (SeqNum {s.major})"
    else:
        # a rank that failed in the stuck collective in other words (gloo's "Connection closed by
        # peer" once a neighbour's timeout closed the pair) was in it too
        tos = [e for e in evs if e.rank is not None and e.rule.role is Role.COLLATERAL
               and e.rule.id == s.rule and Tag.TIMEOUT in e.rule.tags]
        timed = {e.rank for e in tos if e.rank is not None}
        ts = [e.t for e in tos if e.t is not None]
        # (a peer error long after the timeouts is a rank waking up to find its peers gone: it was not
        # in the collective when they timed out)
        end = max(ts) + policy.PEER_DEATH_NS if ts else None
        # (nor is one that comes, in the launcher's stream, after the launcher reported a timed-out
        # peer's exit: its own line for that rank, or srun's one line for several, "tasks 1,6-7:
        # Exited", whose tasks are ranks when it runs one task per rank)
        exits = [e for e in evs if Tag.WORKER_EXIT in e.rule.tags and (e.rank in timed or exit_names(e) & timed)]

        def after_exits(e: Ev) -> bool:
            return any(x.m.path == e.m.path and x.m.offset < e.m.offset for x in exits)

        reporters = {e.rank for e in evs if e.rank is not None and e.rule.role is Role.COLLATERAL
                     and (e.rank in timed or ((end is None or e.t is None or e.t <= end) and not after_exits(e)))}
        what = (f"the {s.rule} that {len(timed)} ranks report (and the peer errors of {len(reporters - timed)} more)"
                if timed else f"the peer errors ({', '.join(sorted({e.rule.id for e in evs if e.rule.role is Role.COLLATERAL})[:3])}) "
                              f"that {len(reporters)} ranks report at once")
        timed_only = timed
    if len(reporters) < 2:
        return []
    group = known if s.members is None else (known & s.members) | s.members
    missing = sorted(group - reporters - d.joined)
    where = f" of process group {s.pg}" if s.members is not None else ""
    if s.members is not None and not missing:
        # a silent culprit never names the group it belongs to: then the ranks that report no timeout
        # in any group are the ones absent
        anywhere = {e.rank for e in evs if e.rank is not None and e.rule.role is Role.COLLATERAL and e.m.capture(Capture.SEQ)}
        group, where = known, " (in any process group)"
        missing = sorted(known - anywhere - d.joined)
        reporters = anywhere
    out: list[Clue] = []
    if missing and len(missing) <= max(1, len(group) // policy.ODD_SHARE):
        out = [Clue(K.MISSING_FROM_COLLECTIVE, r, f"absent from {what}{where}") for r in missing]
    if s.major is None and len(timed_only) >= 2:
        # without stamps to place them, a rank's peer error may be its neighbours' pair closing in
        # the timeout wave or the rank waking after they left: the ranks that did not time out while
        # nearly all did are suspects too, at half the weight
        loose = sorted(group - timed_only - d.joined - set(missing))
        if loose and len(loose) + len(missing) <= max(1, len(group) // policy.ODD_SHARE):
            out += [Clue(K.MISSING_FROM_COLLECTIVE, r, f"it did not time out in the {s.rule} that {len(timed_only)} "
                                                        f"ranks report", 0.5) for r in loose]
    return out


def earlier_collective(s: Stuck) -> list[Clue]:
    if s.major is None:
        return []
    return [Clue(K.EARLIER_COLLECTIVE, r, f"timed out on an earlier collective (SeqNum {q}) than the majority "
                                           f"({s.major})") for r, q in s.first_seq.items() if q < s.major]


def other_operation(evs: Sequence[Ev]) -> list[Clue]:
    """The same collective (SeqNum, process group) of another kind or size: the ranks that called
    another operation there, or the same one on another number of elements, took another code path."""
    ops: dict[tuple[str | None, str], dict[tuple[str, str | None], set[int]]] = defaultdict(lambda: defaultdict(set))
    for ev in evs:
        op, sq = ev.m.capture(Capture.OP), ev.m.capture(Capture.SEQ)
        if ev.rank is not None and op and sq and ev.rule.role is Role.COLLATERAL:
            ops[(ev.m.capture(Capture.PG), sq)][(op, ev.m.capture(Capture.NUMEL_IN))].add(ev.rank)
    out: list[Clue] = []
    for (_pg, sq), by_kind in ops.items():
        if len({op for op, _ in by_kind}) < 2 and len({n for _, n in by_kind if n is not None}) < 2:
            continue
        n = sum(len(rs) for rs in by_kind.values())
        common = max(by_kind, key=lambda k: len(by_kind[k]))
        for kind, rs in by_kind.items():
            if kind == common or len(rs) >= len(by_kind[common]) or len(rs) > max(1, n // policy.ODD_SHARE):
                continue
            if kind[0] != common[0]:
                what = f"a {kind[0]} where {len(by_kind[common])} other rank(s) run a {common[0]}"
            elif kind[1] is not None and common[1] is not None:
                what = f"a {kind[0]} of {kind[1]} elements where {len(by_kind[common])} other rank(s) have {common[1]}"
            else:
                continue
            out += [Clue(K.OTHER_OPERATION, r, f"its collective SeqNum {sq} is {what}: it took another code path")
                    for r in sorted(rs)]
    return out


def other_group(evs: Sequence[Ev]) -> list[Clue]:
    """Ranks whose first timeout is in another process group than nearly everyone's (rank 7 alone in a
    tensor-parallel all-gather no peer joined while the rest wait in the default group's collective):
    they took another code path, like another operation at the same SeqNum."""
    first: dict[int, tuple[str | None, str]] = {}
    for ev in sorted(evs, key=Ev.sort_key):
        seq, pg = ev.m.capture(Capture.SEQ), ev.m.capture(Capture.PG)
        if ev.rank is not None and seq and pg is not None and ev.rule.role is Role.COLLATERAL and ev.rank not in first:
            first[ev.rank] = (pg, seq)
    groups = {pg for pg, _ in first.values()}
    if len(first) < 4 or len(groups) < 2:
        return []
    by: Counter[str | None] = Counter(pg for pg, _ in first.values())
    major, n = by.most_common(1)[0]
    return [Clue(K.OTHER_OPERATION, r, f"it timed out in process group {pg} (SeqNum {seq}) where {n} other ranks "
                                       f"time out in group {major}: it took another code path")
            for r, (pg, seq) in sorted(first.items()) if pg != major and by[pg] <= max(1, len(first) // policy.ODD_SHARE)]


def work_counters(evs: Sequence[Ev], s: Stuck, d: Desync) -> list[Clue]:
    """NCCL work counters: a rank that never enqueued the stuck collective never entered it. A counter
    speaks only of its own process group, so only the stuck group's counters are compared with its
    SeqNum: a default-group counter relayed by a "from this local rank" dump line says nothing about
    an expert-parallel group's stuck collective. A line that names no group is compared only when the
    timeouts name none either."""
    if s.major is None:
        return []
    out: dict[int, Clue] = {}
    for ev in evs:
        le, pg = ev.m.capture(Capture.LAST_ENQUEUED), ev.m.capture(Capture.PG)
        if ev.rank is None or not le or not le.isdecimal() or ev.rank in d.joined or ev.rank in out:
            continue
        if pg != s.pg:
            continue
        if int(le) < s.major:
            out[ev.rank] = Clue(K.NCCL_WORK_COUNTERS, ev.rank,
                                f"never enqueued SeqNum {s.major}{f' of process group {pg}' if pg else ''} "
                                f"(last enqueued NCCL work: {le})")
    return list(out.values())


def progress_stopped(streams: Sequence[StreamFacts]) -> list[Clue]:
    last_step: dict[int, int] = {}
    for st in streams:
        if st.who.rank is not None and st.last_step is not None:
            last_step[st.who.rank] = max(last_step.get(st.who.rank, -1), st.last_step)
    if len(last_step) < 2:
        return []
    top = max(last_step.values())
    behind = [r for r, q in last_step.items() if q < top]
    if not behind or len(behind) > max(1, len(last_step) // policy.ODD_SHARE):
        return []
    low = min(last_step[r] for r in behind)
    # the rank furthest behind stopped first; the others behind it count half
    return [Clue(K.PROGRESS_STOPPED, r, f"its progress stopped at step {last_step[r]} while others reached {top}",
                 1.0 if last_step[r] == low else 0.5) for r in behind]


def _last_output(evs: Sequence[Ev], streams: Sequence[StreamFacts]) -> dict[int, int]:
    last_out: dict[int, int] = {}
    for st in streams:
        r = st.who.rank
        t = st.last_ns if st.last_ns is not None else st.first_ns
        if r is not None and t is not None:
            last_out[r] = max(last_out.get(r, t), t)
    for ev in evs:
        if ev.rank is not None and ev.m.time_ns is not None and ev.m.time_kind is TimeKind.OWN:
            last_out[ev.rank] = max(last_out.get(ev.rank, ev.m.time_ns), ev.m.time_ns)
    return last_out


def _timeout_ns(evs: Sequence[Ev]) -> int | None:
    timeouts = [int(x) for e in evs for x in [e.m.capture(Capture.TIMEOUT_MS)] if x and x.isdecimal()]
    return int(median(timeouts)) * 1_000_000 if timeouts else None


def output_stopped(evs: Sequence[Ev], streams: Sequence[StreamFacts]) -> list[Clue]:
    """A hang culprit goes quiet a whole collective timeout before the others; a gap of a few
    unstamped lines is not that."""
    last_out = _last_output(evs, streams)
    if len(last_out) < 2:
        return []
    timeout = _timeout_ns(evs)
    stop_early = max(policy.STOP_EARLY_NS, timeout // 2) if timeout else policy.STOP_EARLY_UNTIMED_NS
    med = median(last_out.values())
    return [Clue(K.OUTPUT_STOPPED, r, f"its output stopped {(med - t) / NS:.0f} s before the other ranks'")
            for r, t in last_out.items() if med - t > stop_early]


def exited_early(evs: Sequence[Ev], lives: dict[object, Life], known: set[int]) -> list[Clue]:
    """A rank that ended normally (a completion marker of its own) while the others were still to
    time out in a collective: it left them waiting (rank 0 stopping early; a rank whose loop ran
    out of data)."""
    timeouts = [e for e in evs if e.rule.role is Role.COLLATERAL and e.rank is not None and e.t is not None]
    if not timeouts:
        return []
    waiting = {e.rank for e in timeouts}
    first_timeout = min(e.t for e in timeouts if e.t is not None)
    out = []
    for r in sorted(known - waiting):
        life = lives.get(r)
        if life is None or not life.completions:
            continue
        ends = [c.t for c in life.completions if c.t is not None]
        if ends and min(ends) < first_timeout - policy.EXITED_EARLY_NS and len(waiting) >= max(1, len(known) // 2):
            out.append(Clue(K.EXITED_EARLY, r, f"it ended normally ({life.completions[0].rule.title}) "
                                               f"{(first_timeout - min(ends)) / NS:.0f} s before {len(waiting)} other "
                                               f"rank(s) timed out waiting"))
    return out


def dump_pointer(evs: Sequence[Ev]) -> list[Clue]:
    """The dump-signal pointer names the rank that first detected the timeout (weak: a victim too)."""
    pointed: Counter[int] = Counter()
    for ev in evs:
        sr = ev.m.capture(Capture.SUSPECT_RANK)
        if sr and sr.isdecimal():
            pointed[int(sr)] += 1
    if not pointed:
        return []
    r, n = pointed.most_common(1)[0]
    return [Clue(K.DUMP_POINTER, r, f"named by {n} line(s) as the rank the error came from (a dump signal's "
                                    f"source, a checkpoint exception's rank)")]


def clues(evs: Sequence[Ev], streams: Sequence[StreamFacts], known: set[int],
          lives: dict[object, Life]) -> tuple[list[Clue], Stuck, Desync]:
    """Every hang signal's evidence; none when the desync report says every rank joined and none
    finished (the collective itself failed: no rank diverged)."""
    s = stuck_collective(evs)
    d = desync(evs)
    if all_joined(d, known):
        return [], s, d
    found = [*desync_report(d), *stall_report(evs), *missing_from_collective(evs, s, known, d), *earlier_collective(s),
             *other_operation(evs), *other_group(evs), *work_counters(evs, s, d), *progress_stopped(streams),
             *output_stopped(evs, streams), *exited_early(evs, lives, known), *dump_pointer(evs)]
    return found, s, d


def score(found: Sequence[Clue]) -> dict[int, float]:
    """Each rank's score: the sum of its evidence's weights, each kind counted once per rank."""
    out: dict[int, float] = defaultdict(float)
    seen: set[tuple[int, K, str]] = set()
    for c in found:
        if (c.rank, c.kind, c.detail) in seen:
            continue
        seen.add((c.rank, c.kind, c.detail))
        out[c.rank] += policy.WEIGHTS[c.kind] * c.share
    return dict(out)


def strongest(found: Sequence[Clue], rank: int) -> K:
    """The kind of the strongest evidence about ``rank`` (the verdict's ``decided_by``)."""
    return max((c for c in found if c.rank == rank), key=lambda c: policy.WEIGHTS[c.kind] * c.share).kind
