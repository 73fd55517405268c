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

from correlator.attribution import policy
from correlator.attribution.events import Ev
from correlator.attribution.lifecycle import WORKER_EXIT_TAG
from correlator.model import Role, Who


#: rule tags the causal step reads
PEER_TRANSPORT_TAG = "peer-transport"
SIGNAL_EXIT_TAG = "signal-exit"
SIGNAL_SENT_TAG = "signal-sent"
#: signals a peer's network error cannot cause (SIGABRT can: NCCL's and c10d's aborts)
_DEATHS = frozenset({"11", "7", "9", "4", "8", "-11", "-7", "-9", "-4", "-8", "SIGSEGV", "SIGBUS", "SIGKILL", "SIGILL",
                     "SIGFPE", "SEGMENTATION FAULT", "BUS ERROR", "ILLEGAL INSTRUCTION", "FLOATING POINT EXCEPTION",
                     "KILLED"})


def signalled(evs: Sequence[Ev]) -> dict[tuple, list[int | None]]:
    """(host | task | path, pid) -> times a launcher said it sent that process a signal."""
    out: dict[tuple, list[int | None]] = defaultdict(list)
    for ev in evs:
        if SIGNAL_SENT_TAG in ev.rule.tags:
            pid = ev.m.capture("pid")
            if pid is not None:
                for key in ((ev.m.who.host, pid), (ev.m.who.task, pid), (ev.m.path, pid)):
                    out[key].append(ev.t)
    return out


def is_candidate(ev: Ev, sent: dict[tuple, list[int | None]]) -> bool:
    """A primary failure that can start a cascade: not a signal death its launcher caused."""
    if ev.rule.role is not Role.PRIMARY:
        return False
    if SIGNAL_EXIT_TAG in ev.rule.tags:
        # SIGTERM/SIGINT/SIGHUP are how launchers and schedulers stop workers: a consequence
        if ev.m.capture("exitcode") in policy.STOPPED_EXIT_CODES:
            return False
        pid = ev.m.capture("pid")
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
        best = max(group, key=lambda e: (e.rule.priority, -group.index(e)))
        if best is not first and first.t is not None and (best.t is None or best.t > first.t):
            best = best.retimed(first)
        elif best is not first and best.t is None and first.t is None and best.m.path == first.m.path:
            best = Ev(best.m, best.rule, None, None, None, best.unc, best.domain, pos=first.m.offset)
        out[k] = best
    return out


def same_failure(c: Ev, r: Ev) -> bool:
    """``c`` is ``r``'s failure told again without a rank, on ``r``'s node (slurmstepd's "Detected 1
    oom-kill event" beside srun's "task 0: Out Of Memory"): part of the root, not a rival."""
    return (c.rule.id == r.rule.id and c.rank is None and r.rank is not None and c.m.who.host is not None
            and c.m.who.host == r.m.who.host)


def _is_death(e: Ev) -> bool:
    """A death no peer's network error causes: a native crash, a SIGSEGV/SIGBUS/SIGKILL exit."""
    if "native-crash" in e.rule.tags:
        return True
    if SIGNAL_EXIT_TAG in e.rule.tags or WORKER_EXIT_TAG in e.rule.tags:
        sig = e.m.capture("signal") or e.m.capture("signame") or e.m.capture("exitcode")
        return sig is not None and sig.upper() in _DEATHS
    return False


def explained_by_peer_death(c: Ev, deaths: Sequence[Ev]) -> Ev | None:
    """A transport error (``peer-transport``: a peer closed the connection, an IB completion error)
    on one rank within ``PEER_DEATH_NS`` of another rank's death, either side (a death is often told
    seconds after it happened), is what that death looks like from the other end of the wire."""
    if PEER_TRANSPORT_TAG not in c.rule.tags or c.t is None:
        return None
    for d in deaths:
        if d is c or d.t is None or (d.rank is not None and d.rank == c.rank) or d.rank is None and d.m.who.host is None:
            continue
        if abs(c.t - d.t) <= policy.PEER_DEATH_NS + (c.unc or 0) + (d.unc or 0):
            return d
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
    deaths = [e for e in all_evs if _is_death(e) and e.rule.role is Role.PRIMARY]
    out: dict[int, tuple[Ev, str]] = {}
    for c in sorted(cands, key=Ev.sort_key):
        d = explained_by_peer_death(c, [x for x in deaths if id(x) not in out])
        if d is not None:
            out[id(c)] = (d, f"a transport error right after {_who(d)} died ({d.rule.id})")
            continue
        r = explained_by_rule(c, [x for x in cands if id(x) not in out])
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


def _failure_kind(e: Ev) -> str:
    """What a death was, for comparing deaths across ranks: the signal when one is named, else the rule."""
    sig = e.m.capture("signal") or e.m.capture("signame") or e.m.capture("exitcode")
    return f"signal {sig.upper().lstrip('-')}" if sig else e.rule.id


def wave(firsts: Sequence[Ev], ranks_of_host: dict[str, set[int]], known: set[int]) -> Wave | None:
    """The earliest failures, when they are one failure of a whole node (all its ranks the logs show,
    two or more) or of most of the job across nodes, within ``NODE_WAVE_NS``: no rank is first."""
    timed = sorted((e for e in firsts if e.t is not None and e.rank is not None), key=Ev.sort_key)
    if len(timed) < policy.NODE_WAVE_MIN_RANKS:
        return None
    head = timed[0]
    kind = _failure_kind(head)
    same = [e for e in timed if e.t - head.t <= policy.NODE_WAVE_NS + (e.unc or 0) and _failure_kind(e) == kind]
    if len({e.rank for e in same}) < policy.NODE_WAVE_MIN_RANKS:
        return None
    ranks = tuple(sorted({e.rank for e in same if e.rank is not None}))
    hosts = {e.m.who.host for e in same}
    if len(hosts) == 1 and None not in hosts:
        host = next(iter(hosts))
        node_ranks = ranks_of_host.get(host or "", set())
        if node_ranks and set(ranks) >= node_ranks and len(node_ranks) >= policy.NODE_WAVE_MIN_RANKS:
            # and nothing else failed before the wave on another node
            return Wave(host, ranks, head, kind)
        return None
    if known and len(ranks) >= policy.JOB_WAVE_SHARE * len(known) and len(hosts - {None}) >= 2:
        return Wave(None, ranks, head, kind)
    return None


def launcher_named_worker(r: Ev, evs: Sequence[Ev]) -> Who | None:
    """For a root line that names no rank (a kernel assertion, a bare traceback): the worker that
    the launcher, in the same log, reports as the only one that failed on its own; else None."""
    exits = [e for e in evs if e.m.path == r.m.path and WORKER_EXIT_TAG in e.rule.tags
             and (e.m.capture("exitcode") or "") not in policy.STOPPED_EXIT_CODES]
    if r.m.who.pid is not None:  # the root line names its process (an NCCL WARN's host:pid:tid)
        exits = [e for e in exits if (e.m.capture("pid") or str(r.m.who.pid)) == str(r.m.who.pid)]
    workers = {(e.m.who.rank, e.m.who.local_rank) for e in exits if (e.m.who.rank, e.m.who.local_rank) != (None, None)}
    if len(workers) != 1:
        return None
    rank, local = workers.pop()
    w = r.m.who
    if w.local_rank is not None and local is not None and w.local_rank != local:
        return None
    return replace(w, rank=rank if rank is not None else w.rank, local_rank=local if local is not None else w.local_rank)



