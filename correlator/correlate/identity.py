"""Who is who across sources: global rank, host and local rank for every match and writer.

Owns joining what the logs state (NCCL ``comm ... rank R`` lines with ``host:pid``, torchelastic
failure tables, rendezvous ``global_ranks=[...]``, per-rank file names, srun task prefixes) into
one mapping, and applying it. Only when the logs state nothing it falls back to
``task * procs_per_node + local_rank`` and says so.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from typing import TypeVar, overload

from correlator.model import Digest, FactSource, IdentityFact, Match, StreamFacts, Who
from correlator.model.vocabulary import Capture


@dataclass
class IdentityMap:
    by_task_local: dict[tuple[str, int, int], int] = field(default_factory=dict)
    by_host_pid: dict[tuple[str, int], int] = field(default_factory=dict)
    by_node_local: dict[tuple[str, int], int] = field(default_factory=dict)
    host_of_rank: dict[int, str] = field(default_factory=dict)
    host_of_task: dict[tuple[str, int], str] = field(default_factory=dict)
    #: torchelastic node-N folders -> the host their files' NCCL lines name
    host_of_node: dict[str, str] = field(default_factory=dict)
    local_of_rank: dict[int, int] = field(default_factory=dict)
    #: sources whose srun task prefix is a node (torchrun under srun), not a rank
    task_is_node: set[str] = field(default_factory=set)
    procs_per_node: int | None = None
    #: the logs show one node only (one host at most, no srun tasks, no node folders)
    single_node: bool = False
    world_size: int | None = None
    #: notes on what had to be assumed
    notes: list[str] = field(default_factory=list)
    inferred: bool = False
    #: (host, local rank) -> rank and (source path, local rank) -> rank, from statements that name
    #: both (NCCL init "rank R ... localRank L" of a [defaultL]: writer, a failure table's
    #: "rank : R (local_rank: L)"); None where two statements disagree (a combined file of nodes)
    by_host_local: dict[tuple[str, int], int | None] = field(default_factory=dict)
    by_path_local: dict[tuple[str, int], int | None] = field(default_factory=dict)
    #: a file of one unprefixed writer (one process's own log) whose NCCL init lines for the whole
    #: job's communicator name one rank: that process's rank
    rank_of_path: dict[str, int] = field(default_factory=dict)
    #: (host, PCI bus id) -> rank, from NCCL init lines of the job-wide communicator
    by_host_bus: dict[tuple[str, int], int | None] = field(default_factory=dict)
    #: global ranks that no line states, with how they were inferred
    inferred_how: dict[int, str] = field(default_factory=dict)


def _group_key(path: str) -> str:
    # srun task ids are per job step; files of one job share the mapping
    return ""


def _comm_size(fact: IdentityFact) -> int | None:
    """The size of the NCCL communicator an init line was about (None for other statements)."""
    return fact.comm_size if fact.source is FactSource.NCCL_INIT else None


def _bus_of(fact: IdentityFact) -> int | None:
    """The PCI bus id an NCCL init line names (``busId 38000``), as a number."""
    return fact.bus


def pci_bus(text: str) -> int | None:
    """A kernel line's PCI address (``0000:38:00`` or ``0000:38:00.0``) as NCCL's busId number."""
    digits = text.replace(":", "").replace(".", "")
    if "." not in text:
        digits += "0"
    try:
        return int(digits, 16)
    except ValueError:
        return None


def build(digests: Sequence[Digest], launcher_rules: Collection[str]) -> IdentityMap:
    """The job's identity statements, joined (``launcher_rules``: the ids of the rules tagged
    ``launcher``, whose lines a launcher prints rather than a worker)."""
    imap = IdentityMap()
    local_max = -1
    world = max((n for d in digests for f in d.identities for n in [_comm_size(f)] if n), default=None)
    for d in digests:
        if all(s.who.local_rank is None and s.who.rank in (None, d.source.file_rank) and s.who.task is None
               for s in d.streams):
            said = {f.who.rank for f in d.identities
                    if f.who.rank is not None and f.origin_task is None and world and _comm_size(f) == world}
            if len(said) == 1:
                imap.rank_of_path[d.source.path] = said.pop()
        has_local = any(s.who.local_rank is not None and s.who.task is not None for s in d.streams) or any(
            m.who.local_rank is not None and m.who.task is not None and m.who.rank is not None for m in d.matches)
        # srun under torchrun: srun's task is a node's agent, not a rank. Said by --tee prefixes, or by
        # the agent's own lines (a launcher's rules, a local_rank capture) behind a bare task prefix.
        agent = any(m.who.task is not None and m.who.rank is None and
                    (m.rule_id in launcher_rules or m.capture(Capture.LOCAL_RANK))
                    for m in d.matches)
        if has_local or agent:
            imap.task_is_node.add(d.source.path)
        for s in d.streams:
            if s.who.local_rank is not None:
                local_max = max(local_max, s.who.local_rank)
        for f in d.identities:
            w = f.who
            if w.local_rank is not None:
                local_max = max(local_max, w.local_rank)
            if w.rank is None:
                continue
            task = f.origin_task if f.origin_task is not None else w.task
            if task is not None and w.local_rank is not None:
                imap.by_task_local.setdefault((_group_key(d.source.path), task, w.local_rank), w.rank)
            if w.pid is not None:  # (a Ray worker's tag may name no host: the pid alone, if unique)
                imap.by_host_pid.setdefault((short_host(w.host) or "", w.pid), w.rank)
            if w.host:
                imap.host_of_rank.setdefault(w.rank, short_host(w.host))
                if task is not None:
                    imap.host_of_task.setdefault((_group_key(d.source.path), task), short_host(w.host))
            if w.local_rank is not None:
                imap.local_of_rank.setdefault(w.rank, w.local_rank)
                bus = _bus_of(f)
                if bus is not None and w.host and _comm_size(f) == world:
                    _once(imap.by_host_bus, (short_host(w.host) or "", bus), w.rank)
                if task is None and (_comm_size(f) or world) == world:  # not a sub-communicator's rank
                    if w.host:
                        _once(imap.by_host_local, (short_host(w.host) or "", w.local_rank), w.rank)
                    _once(imap.by_path_local, (d.source.path, w.local_rank), w.rank)
            if d.source.file_node and w.local_rank is not None:
                imap.by_node_local.setdefault((d.source.file_node, w.local_rank), w.rank)
        for s in d.streams:
            if s.who.rank is not None and s.who.local_rank is not None and s.who.task is None:
                _once(imap.by_path_local, (d.source.path, s.who.local_rank), s.who.rank)  # "[default1]:[rank3]:"
            if s.who.rank is not None and s.who.host:
                imap.host_of_rank.setdefault(s.who.rank, short_host(s.who.host))
            if d.source.file_node and s.who.host:
                imap.host_of_node.setdefault(d.source.file_node, short_host(s.who.host))
        for m in d.matches:
            w = m.who
            if w.rank is not None and w.host:
                imap.host_of_rank.setdefault(w.rank, short_host(w.host))
            elif w.task is not None and w.host and not has_local and not agent:
                imap.host_of_rank.setdefault(w.task, short_host(w.host))  # plain srun: the task is the rank
            if w.rank is not None and w.task is not None and w.local_rank is not None:
                imap.by_task_local.setdefault((_group_key(d.source.path), w.task, w.local_rank), w.rank)
            if w.rank is not None and w.local_rank is not None:
                imap.local_of_rank.setdefault(w.rank, w.local_rank)
            nr = m.capture(Capture.NRANKS) or m.capture(Capture.WORLD_SIZE)
            if nr and nr.isdecimal():
                imap.world_size = max(imap.world_size or 0, int(nr))
    if local_max >= 0:
        imap.procs_per_node = local_max + 1
    hosts = {short_host(m.who.host) for d in digests for m in d.matches if m.who.host}
    hosts |= {short_host(f.who.host) for d in digests for f in d.identities if f.who.host}
    hosts |= {short_host(s.who.host) for d in digests for s in d.streams if s.who.host}
    tasks = any(m.who.task is not None for d in digests for m in d.matches) or any(
        s.who.task is not None for d in digests for s in d.streams)
    nodes = any(d.source.file_node for d in digests)
    # (a world size no single node holds -- more than 16 processes -- says there were other nodes
    # even when their logs are not here)
    imap.single_node = len(hosts) <= 1 and not tasks and not nodes and not (imap.world_size or 0) > 16
    # srun task -> host from ranks whose host is known
    for (g, task, _local), rank in list(imap.by_task_local.items()):
        host = imap.host_of_rank.get(rank)
        if host:
            imap.host_of_task.setdefault((g, task), host)
    return imap


def _once(table: dict, key: tuple, rank: int) -> None:
    """``table[key] = rank``, or None once two statements disagree."""
    if key not in table:
        table[key] = rank
    elif table[key] != rank:
        table[key] = None


def resolve(who: Who, path: str, imap: IdentityMap, node: str | None = None) -> tuple[Who, str | None]:
    """The fullest identity for ``who``, and how its rank was inferred when no line states it
    (None when it was stated or not found)."""
    g = _group_key(path)
    rank, local, host, task = who.rank, who.local_rank, short_host(who.host), who.task
    inferred: str | None = None
    if rank is None and task is not None and local is not None:
        rank = imap.by_task_local.get((g, task, local))
        if rank is None and imap.procs_per_node:
            rank = task * imap.procs_per_node + local
            inferred = f"srun task {task} x {imap.procs_per_node} processes per node + local rank {local}"
    if rank is None and task is not None and local is None and path not in imap.task_is_node:
        rank = task  # plain srun: one task per rank
    if rank is None and who.pid is not None:
        # an agent's line about a worker pid ("Sending process 1234 closing signal SIGTERM"): the
        # failure tables and NCCL init lines say which rank that pid was
        h = host or (imap.host_of_task.get((g, task)) if task is not None else None) or \
            (imap.host_of_node.get(node) if node is not None else None)
        if h:
            rank = imap.by_host_pid.get((h, who.pid))
        if rank is None:
            hits = {r for (hh, pid), r in imap.by_host_pid.items() if pid == who.pid}
            if len(hits) == 1:  # pids are unique enough when only one host has this one
                rank = hits.pop()
    if rank is None and node is not None and local is not None:
        rank = imap.by_node_local.get((node, local))
    if rank is None and local is not None and task is None:
        # the same writer's own statement elsewhere: NCCL's init line, its node's failure table
        if host:
            rank = imap.by_host_local.get((host, local))
        if rank is None:
            rank = imap.by_path_local.get((path, local))
    if rank is None and local is not None and imap.single_node and node is None:
        # one node, one launcher: global rank = local rank
        rank, inferred = local, (f"taken as its local rank {local}: the logs show one node (no host, srun "
                                 f"task, node folder or world size names another)")
    if rank is not None:
        if host is None:
            host = imap.host_of_rank.get(rank)
        if local is None:
            local = imap.local_of_rank.get(rank)
    if host is None and task is not None:
        host = imap.host_of_task.get((g, task))
    if host is None and node is not None:
        # a node-N folder of a torchelastic log dir: the host its files name, or the folder itself
        host = imap.host_of_node.get(node, node)
    return Who(rank, local, task, host, who.pid), inferred


_T = TypeVar("_T", Match, StreamFacts)
_FIELDS = {cls: (attrgetter(*(f.name for f in fields(cls))), [f.name for f in fields(cls)].index("who"))
           for cls in (Match, StreamFacts)}


def _with_who(x: _T, who: Who) -> _T:
    """``replace(x, who=who)`` for a match or a writer's facts, at half its cost (``replace`` checks
    its arguments field by field; a 4096-rank job fills in the identity of 50,000 matches)."""
    values, at = _FIELDS[type(x)]
    v = list(values(x))
    v[at] = who
    return type(x)(*v)


def resolve_digests(digests: Sequence[Digest], launcher_rules: Collection[str]
                    ) -> tuple[list[Match], list[StreamFacts], IdentityMap]:
    """Every match and writer with its identity filled in from the whole job's statements."""
    imap = build(digests, launcher_rules)
    # torchelastic log dirs without any mapping: number nodes in name order
    nodes = sorted({d.source.file_node for d in digests if d.source.file_local_rank is not None and d.source.file_node},
                   key=_natural)
    node_index = {n: i for i, n in enumerate(nodes)}
    matches: list[Match] = []
    streams: list[StreamFacts] = []
    inferred_any = False

    def fill(who: Who, d: Digest) -> Who:
        nonlocal inferred_any
        if who.host is None and who.task is None and who.local_rank in (None, d.source.file_local_rank):
            hosts = {s.who.host for s in d.streams if s.who.host}
            if len(hosts) == 1:  # a one-writer file (a rank's own log) whose NCCL lines name its host
                who = replace(who, host=hosts.pop())
        w, inferred = resolve(who, d.source.path, imap, d.source.file_node)
        said = imap.rank_of_path.get(d.source.path)
        if said is not None and who.local_rank is None and who.task is None and (
                w.rank is None or (w.rank == d.source.file_rank and w.rank != said)):
            # the process's own NCCL init line over nothing, or over a number in its file's name
            w, inferred = resolve(replace(who, rank=said), d.source.path, imap, d.source.file_node)
        if w.rank is None and d.source.file_local_rank is not None and w.task is None:
            lr = w.local_rank if w.local_rank is not None else d.source.file_local_rank
            if d.source.file_node in node_index and imap.procs_per_node:
                w = replace(w, rank=node_index[d.source.file_node] * imap.procs_per_node + lr)
                inferred = (f"node folder {d.source.file_node} (number {node_index[d.source.file_node]} in name "
                            f"order) x {imap.procs_per_node} + local rank {lr}")
            elif not nodes:
                w = replace(w, rank=lr)
                inferred = f"taken as the local rank {lr} of its torchelastic folder: the logs show one node"
        if inferred and w.rank is not None:
            inferred_any = True
            imap.inferred_how.setdefault(w.rank, inferred)
        return w

    for d in digests:
        filled: dict[Who, Who] = {}  # a source's matches share a few writers: each resolved once

        def who_of(who: Who, d: Digest = d, filled: dict[Who, Who] = filled) -> Who:
            w = filled.get(who)
            if w is None:
                w = filled[who] = fill(who, d)
            return w

        for m in d.matches:
            w = who_of(m.who)
            pci = m.capture(Capture.PCI) if w.rank is None and w.host else None
            if pci:  # a kernel's Xid line: the GPU's bus id, which that node's NCCL init lines tie to a rank
                bus = pci_bus(pci)
                rank = imap.by_host_bus.get((short_host(w.host) or "", bus)) if bus is not None else None
                if rank is not None:
                    w = replace(w, rank=rank, local_rank=w.local_rank if w.local_rank is not None
                                else imap.local_of_rank.get(rank))
            matches.append(m if w == m.who else _with_who(m, w))
        for s in d.streams:
            w = who_of(s.who)
            streams.append(s if w == s.who else _with_who(s, w))
    if inferred_any:
        imap.inferred = True
        imap.notes.append(
            "some global ranks were inferred (as the local rank on a single-node job, or as node x "
            f"{imap.procs_per_node} + local rank): the logs state no mapping (no [rankN] prefix, NCCL init "
            "line, rendezvous result or failure table)")
    return matches, streams, imap


@overload
def short_host(host: str) -> str: ...
@overload
def short_host(host: None) -> None: ...
@overload
def short_host(host: str | None) -> str | None: ...


def short_host(host: str | None) -> str | None:
    """``gpu-b03.hpc.internal`` -> ``gpu-b03``: one name per node whichever form a line used (IP
    addresses stay whole)."""
    if not host or "." not in host:
        return host
    first = host.split(".", 1)[0]
    if first.isdecimal():
        return host
    return first


def _natural(name: str) -> list:
    """``node-2`` before ``node-10``."""
    import re

    return [int(x) if x.isdecimal() else x for x in re.split(r"(\d+)", name)]


def hosts_by_count(matches: Sequence[Match]) -> Counter[str]:
    return Counter(m.who.host for m in matches if m.who.host)


_ = defaultdict


def known_ranks(matches: Sequence[Match], streams: Sequence[StreamFacts], imap: IdentityMap) -> set[int]:
    known = {m.who.rank for m in matches if m.who.rank is not None}
    known |= {s.who.rank for s in streams if s.who.rank is not None}
    known |= set(imap.by_task_local.values()) | set(imap.host_of_rank)
    if imap.world_size and imap.world_size <= 65536:
        known |= set(range(imap.world_size))
    if known and max(known) < 65536:
        known |= set(range(max(known) + 1))  # global ranks are 0..N-1: one that never spoke is still a rank
    return known
