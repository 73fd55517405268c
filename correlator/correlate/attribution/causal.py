"""Which failures account for which: candidates, one event per rank, explanation, waves.

Owns the causal part of the verdict: which primary events can be a root at all (not a signal the
launcher sent, not survived), each rank's first failure event, which failures another failure
explains (a peer's transport error right after a rank died; a rule's ``explains`` edges; the same
failure told again without a rank on the root's node), and deaths of a whole node or job by the same
failure at once, which name no rank.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from correlator.correlate.attribution import policy
from correlator.correlate.attribution.events import Ev
from correlator.model import Role, TimeKind, Who
from correlator.model.vocabulary import Capture, Tag, signal_of_tag

#: the categories of the communication stack, whose errors NCCL and c10d answer with an abort
_COMM_CATEGORIES = frozenset({"nccl", "network"})
#: signals a peer's network error cannot cause (SIGABRT can: NCCL's and c10d's aborts)
_DEATHS = frozenset({"SEGV", "BUS", "KILL", "ILL", "FPE"})


def signalled(evs: Sequence[Ev]) -> dict[tuple, list[int | None]]:
    """(host | task | path, pid) -> times a launcher said it sent that process a signal."""
    out: dict[tuple, list[int | None]] = defaultdict(list)
    for ev in evs:
        if Tag.SIGNAL_SENT in ev.rule.tags:
            pid = ev.m.capture(Capture.PID)
            if pid is not None:
                for key in ((ev.m.who.host, pid), (ev.m.who.task, pid), (ev.m.path, pid)):
                    out[key].append(ev.t)
    return out


def is_candidate(ev: Ev, sent: dict[tuple, list[int | None]]) -> bool:
    """A primary failure that can start a cascade: not a signal death its launcher caused."""
    if ev.rule.role is not Role.PRIMARY:
        return False
    if Tag.SIGNAL_EXIT in ev.rule.tags:
        # SIGTERM/SIGINT/SIGHUP are how launchers and schedulers stop workers: a consequence
        if ev.m.capture(Capture.EXITCODE) in policy.STOPPED_EXIT_CODES or signal_of(ev) in policy.STOPPING_SIGNALS:
            return False
        pid = ev.m.capture(Capture.PID)
        if pid is not None:
            for key in ((ev.m.who.host, pid), (ev.m.who.task, pid), (ev.m.path, pid)):
                times = sent.get(key)
                if times and (ev.t is None or any(t is None or t <= ev.t + policy.SIGNAL_SENT_SLACK_NS for t in times)):
                    return False
    return True


def first_failure_per_rank(pool: Sequence[Ev]) -> dict[object, Ev]:
    """Each rank's first failure event. One crash prints several primary lines: among the rank's
    primaries close to its first one, the most specific rule names the event, and the event keeps
    the earliest time."""
    by_rank: dict[object, list[Ev]] = defaultdict(list)
    for e in pool:
        by_rank[e.rank if e.rank is not None else (e.m.who.host, e.m.path)].append(e)
    out: dict[object, Ev] = {}
    for k, es in by_rank.items():
        es.sort(key=Ev.sort_key)
        first = es[0]
        group = [first]
        for e in es[1:]:
            if first.t is not None and e.t is not None:
                close = e.t - first.t <= policy.EVENT_WINDOW_NS
            else:
                close = e.m.path == first.m.path and e.m.line - first.m.line <= policy.EVENT_WINDOW_LINES
            if close:
                group.append(e)
        best = max(group, key=lambda e: (e.rule.priority, e.m.time_kind is TimeKind.OWN, -group.index(e)))
        if best is not first and first.t is not None and (best.t is None or best.t > first.t):
            best = best.retimed(first)
        elif best is not first and best.t is None and first.t is None and best.m.path == first.m.path:
            best = Ev(best.m, best.rule, None, None, None, best.unc, best.domain, pos=first.m.offset)
        out[k] = best
    return out


def same_failure(c: Ev, r: Ev) -> bool:
    """``c`` is ``r``'s failure told again without a rank, on ``r``'s node (slurmstepd's "Detected 1
    oom-kill event" beside srun's "task 0: Out Of Memory"; faulthandler's banner beside the agent's
    report of the same signal): part of the root, not a rival."""
    if not (c.rank is None and r.rank is not None and c.m.who.host is not None and c.m.who.host == r.m.who.host):
        return False
    return c.rule.id == r.rule.id or (signal_of(c) is not None and signal_of(c) == signal_of(r))


def _is_death(e: Ev) -> bool:
    """A death no peer's network error causes: a native crash, a SIGSEGV/SIGBUS/SIGKILL exit (an abort
    can be NCCL's or c10d's own reaction to a peer)."""
    sig = signal_of(e)
    if sig is not None:
        return sig in _DEATHS
    return Tag.NATIVE_CRASH in e.rule.tags


def _span(e: Ev) -> tuple[int, int]:
    """The interval an event's true instant lies in: its own stamp (and resolution), or for a line
    without one the stamps of its writer's lines around it (which can be minutes apart); with no
    stamped line of its writer after it, any time after the one before."""
    assert e.t is not None
    lo = e.lo if e.lo is not None else e.t
    if e.hi is not None:
        hi = e.hi
    elif e.m.time_kind is TimeKind.OWN:
        hi = e.t + (e.unc or 0)
    else:
        hi = policy.UNBOUNDED_NS
    return min(lo, e.t), max(hi, e.t)


def explained_by_peer_death(c: Ev, deaths: Sequence[Ev]) -> Ev | None:
    """A transport error (``peer-transport``: a peer closed the connection, an IB completion error)
    on one rank within ``PEER_DEATH_NS`` of another rank's death, either side (a death is often told
    seconds after it happened), is what that death looks like from the other end of the wire. An
    error line without a stamp of its own may lie anywhere between its neighbours' stamps."""
    if Tag.PEER_TRANSPORT not in c.rule.tags or c.t is None:
        return None
    c_lo, c_hi = _span(c)
    for d in deaths:
        if d is c or d.t is None or (d.rank is not None and d.rank == c.rank) or d.rank is None and d.m.who.host is None:
            continue
        d_lo, d_hi = _span(d)
        slack = policy.PEER_DEATH_NS
        if d_lo <= c_hi + slack and c_lo <= d_hi + slack:
            return d
    return None


def explained_by_own_watchdog(c: Ev, collateral_by_rank: dict[int, list[Ev]],
                              comm_failures: Sequence[Ev] = ()) -> Ev | None:
    """An abort (SIGABRT) of a rank whose own lines report a collective timeout or a communication
    error before it (or, its own lines missing, after a collective timeout elsewhere) is its watchdog
    taking the process down (ProcessGroupNCCL's abort after a timeout, or after an NCCL or network
    error such as an IB completion error: ``comm_failures``): a consequence, not a failure of its own."""
    if signal_of(c) != "ABRT":
        return None
    # its own timeout or error; or, when its own lines are not in the logs (the agent's report only),
    # a collective timeout anywhere before it: the watchdog aborts every process whose collective
    # timed out
    own = collateral_by_rank.get(c.rank, []) if c.rank is not None else []
    timeouts = [e for es in collateral_by_rank.values() for e in es if Tag.TIMEOUT in e.rule.tags]
    for e in [*own, *timeouts, *comm_failures]:
        if e.t is None or c.t is None or e.t <= c.t + (c.unc or 0) + policy.SIGNAL_SENT_SLACK_NS:
            return e
    return None


def explained_by_rule(c: Ev, earlier: Sequence[Ev]) -> Ev | None:
    """A failure that an earlier failure of another rank lists in its rule's ``explains``."""
    if c.t is None:
        return None
    for r in earlier:
        if r is c or r.t is None or r.rank == c.rank or c.rule.id not in r.rule.explains:
            continue
        if r.t <= c.t + (c.unc or 0):
            return r
    return None


def explanations(cands: Sequence[Ev], all_evs: Sequence[Ev]) -> dict[int, tuple[Ev, str]]:
    """``id(c)`` -> (the failure that accounts for ``c``, how) over the candidate failures. Visited in
    time order, and only a failure nothing explains explains another (no two failures explain each
    other)."""
    deaths = [e for e in all_evs if e.rule.role is Role.PRIMARY and _is_death(e)]
    collateral_by_rank: dict[int, list[Ev]] = defaultdict(list)
    for e in all_evs:
        if e.rule.role is Role.COLLATERAL and e.rank is not None:
            collateral_by_rank[e.rank].append(e)
    comm = [e for e in all_evs if e.rule.role is Role.PRIMARY and e.rule.category in _COMM_CATEGORIES
            and signal_of(e) is None]
    explainers: dict[str, list[Ev]] = defaultdict(list)  # rule id -> the candidates whose rule explains it
    for x in cands:
        for rid in x.rule.explains:
            explainers[rid].append(x)
    out: dict[int, tuple[Ev, str]] = {}
    for c in sorted(cands, key=Ev.sort_key):
        own = explained_by_own_watchdog(c, collateral_by_rank, comm)
        if own is not None:
            out[id(c)] = (own, f"the process aborted by its communication library after {own.rule.id}")
            continue
        d = explained_by_peer_death(c, [x for x in deaths if id(x) not in out]) if Tag.PEER_TRANSPORT in c.rule.tags else None
        if d is not None:
            out[id(c)] = (d, f"a transport error right after {_who(d)} died ({d.rule.id})")
            continue
        r = explained_by_rule(c, [x for x in explainers.get(c.rule.id, ()) if id(x) not in out])
        if r is not None:
            out[id(c)] = (r, f"what {r.rule.id} on {_who(r)} typically causes on other ranks")
    return out


def _who(e: Ev) -> str:
    return f"rank {e.rank}" if e.rank is not None else (f"node {e.m.who.host}" if e.m.who.host else e.m.path)


@dataclass(frozen=True)
class Wave:
    """The same failure on every rank of a node (or of the job) at once."""

    host: str | None
    ranks: tuple[int, ...]
    first: Ev
    what: str


#: signal numbers and the words launchers print for them -> the signal's short name
_SIGNALS = {"11": "SEGV", "7": "BUS", "6": "ABRT", "9": "KILL", "8": "FPE", "4": "ILL", "15": "TERM",
            "SEGMENTATION FAULT": "SEGV", "BUS ERROR": "BUS", "ABORTED": "ABRT", "KILLED": "KILL",
            "FLOATING POINT EXCEPTION": "FPE", "ILLEGAL INSTRUCTION": "ILL"}


def signal_of(e: Ev) -> str | None:
    """The signal a death was (``SEGV``, ``BUS``, ...), from the line's captures (a negative exit code,
    a signal number or name) or its rule's ``signal:NAME`` tag; None when the event names none."""
    for cap in (Capture.SIGNAL, Capture.SIGNAME, Capture.EXITCODE):
        raw = e.m.capture(cap)
        if raw:
            v = raw.strip().upper().lstrip("-")
            v = v[3:] if v.startswith("SIG") else v
            name = _SIGNALS.get(v, v if v.isalpha() else None)
            if name and (cap is not Capture.EXITCODE or raw.startswith("-")):
                return name
    for t in e.rule.tags:
        sig = signal_of_tag(t)
        if sig is not None:
            return sig
    return None


def _failure_kind(e: Ev) -> str | None:
    """What a death was, for comparing deaths across ranks: the signal (a wave is of deaths by one
    signal; a failure that every rank reports in the same words, a collective mismatch, is not one)."""
    sig = signal_of(e)
    return f"signal {sig}" if sig else None


def wave(firsts: Sequence[Ev], ranks_of_host: dict[str, set[int]], known: set[int]) -> Wave | None:
    """The earliest failures, when they are one failure of a whole node (all its ranks the logs show,
    two or more) or of most of the job across nodes, within ``NODE_WAVE_NS``: no rank is first. Lines
    without stamps of their own (faulthandler's banners) carry their neighbours' times, so the test is
    that the failures' intervals share one instant. A failure of another kind that is surely earlier
    than the wave (its latest possible time before it) rules the wave out."""
    host_of = {r: h for h, rs in ranks_of_host.items() for r in rs}
    timed = sorted((e for e in firsts if e.t is not None and e.rank is not None), key=Ev.sort_key)
    if len(timed) < policy.NODE_WAVE_MIN_RANKS:
        return None
    head = timed[0]
    kind = _failure_kind(head)
    if kind is None or head.t is None:  # (timed events all have a time)
        return None
    head_t = head.t
    for e in firsts:
        if e.t is not None and _failure_kind(e) != kind and _span(e)[1] < head_t - policy.NODE_WAVE_NS:
            return None

    def host(e: Ev) -> str | None:
        return e.m.who.host or (host_of.get(e.rank) if e.rank is not None else None)

    node = host(head)
    if node is not None:
        on_node = [e for e in timed if _failure_kind(e) == kind and host(e) == node]
        node_ranks = ranks_of_host.get(node, set())
        ranks = {e.rank for e in on_node if e.rank is not None}
        if len(node_ranks) >= policy.NODE_WAVE_MIN_RANKS and ranks >= node_ranks and _one_instant(on_node):
            return Wave(node, tuple(sorted(ranks)), head, kind)
    same = [e for e in timed if e.t is not None and e.t - head_t <= policy.NODE_WAVE_NS + (e.unc or 0)
            and _failure_kind(e) == kind]
    ranks = {e.rank for e in same if e.rank is not None}
    hosts = {host(e) for e in same}
    if known and len(ranks) >= policy.JOB_WAVE_SHARE * len(known) and len(hosts - {None}) >= 2 and _one_instant(same):
        return Wave(None, tuple(sorted(ranks)), head, kind)
    return None


def _one_instant(evs: Sequence[Ev]) -> bool:
    """The events' intervals all come within ``NODE_WAVE_NS`` of one instant."""
    spans = [_span(e) for e in evs]
    return max(lo for lo, _ in spans) <= min(hi for _, hi in spans) + policy.NODE_WAVE_NS


def launcher_named_worker(r: Ev, evs: Sequence[Ev]) -> Who | None:
    """For a root line that names no rank (a kernel assertion, a bare traceback): the worker that
    the launcher, in the same log, reports as the only one that failed on its own; else None."""
    exits = [e for e in evs if e.m.path == r.m.path and Tag.WORKER_EXIT in e.rule.tags
             and (e.m.capture(Capture.EXITCODE) or "") not in policy.STOPPED_EXIT_CODES]
    if r.m.who.pid is not None:  # the root line names its process (an NCCL WARN's host:pid:tid)
        exits = [e for e in exits if (e.m.capture(Capture.PID) or str(r.m.who.pid)) == str(r.m.who.pid)]
    workers = {(e.m.who.rank, e.m.who.local_rank) for e in exits if (e.m.who.rank, e.m.who.local_rank) != (None, None)}
    if len(workers) != 1:
        return None
    rank, local = workers.pop()
    w = r.m.who
    if w.local_rank is not None and local is not None and w.local_rank != local:
        return None
    return replace(w, rank=rank if rank is not None else w.rank, local_rank=local if local is not None else w.local_rank)





def mismatch_culprit(evs: Sequence[Ev]) -> tuple[int, int] | None:
    """The odd rank out of a collective mismatch: each report names a pair (the reporter, the rank it
    compared with); the rank in every pair of two or more reporters' lines diverged, whoever reported
    it. Returns (rank, number of reports) or None."""
    pairs = []
    for e in evs:
        if Tag.MISMATCH not in e.rule.tags:
            continue
        pair = {int(x) for x in (e.m.capture(Capture.FIRST_RANK), e.m.capture(Capture.SECOND_RANK)) if x and x.isdecimal()}
        if len(pair) == 2:
            pairs.append(frozenset(pair))
    distinct = set(pairs)
    if len(distinct) < 2:
        return None
    common = frozenset.intersection(*distinct)
    if len(common) != 1:
        return None
    return next(iter(common)), len(pairs)


def node_kill(evs: Sequence[Ev], ranks_of_host: dict[str, set[int]]) -> Wave | None:
    """A launcher's one line for a whole node's tasks dying of one signal (srun's ``gpu-d04: tasks
    24-31: Killed``) when those tasks are the node's ranks (one task per rank): a node-level end of
    its own, which the node's ranks print nothing about."""
    from correlator.model import expand_ranks

    for e in evs:
        tasks = e.m.capture(Capture.TASKS)
        host = e.m.who.host
        sig = signal_of(e)
        if Tag.WORKER_EXIT not in e.rule.tags or e.rank is not None or not tasks or not host or sig not in _DEATHS:
            continue
        try:
            named = set(expand_ranks(tasks.strip("[]")))
        except ValueError:
            continue
        node = ranks_of_host.get(host, set())
        if len(named) >= policy.NODE_WAVE_MIN_RANKS and node and named >= node and named == node:
            return Wave(host, tuple(sorted(named)), e, f"signal {sig}")
    return None
