"""The causal timeline: which rank failed first, which failures are collateral, how sure we are.

Owns the global decision over resolved matches: correcting times with the clock estimate,
choosing root-cause candidates (primary matches; workers killed by a signal nobody sent), ordering
them with their uncertainty (a tie set instead of a guess), finding the culprit of a hang when
every rank only reports a timeout, labelling every event (root, collateral, teardown, job,
context, independent), grouping collateral, and the confidence with its reasons. It reads no
files and renders nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import median

from correlator.clocks import ClockEstimate
from correlator.identity import compress_ranks
from correlator.model import (
    SURVIVED_NOTE_END,
    ChainLink, ClockRow, CollateralItem, Evidence, Group, Label, Match, RankRow, RankState, Role, RootCause,
    Rule, StreamFacts, TimeKind, TimelineEvent, Verdict, Who, iso,
)
from correlator.timestamps import NS

#: primaries below this priority are catch-alls: they decide only when nothing specific exists
GENERIC_PRIORITY = 20
#: the uncertainty of a time inherited from a neighbouring line, at most
INHERIT_UNC_NS = 2 * NS
#: a rank whose output stops this long before the others' is a hang suspect
STOP_EARLY_NS = 30 * NS
TIMELINE_CAP = 5000


@dataclass
class Ev:
    m: Match
    rule: Rule
    t: int | None
    lo: int | None
    hi: int | None
    unc: int | None
    domain: str
    label: Label = Label.CONTEXT
    #: the residual clock skew bound of its host (already part of ``unc``)
    skew: int = 0
    #: where in its source the event began, when that is before its line (``m.offset``): an event
    #: named by a later, more specific line of the same crash is ordered by its first line
    pos: int | None = None

    @property
    def rank(self) -> int | None:
        return self.m.who.rank

    def sort_key(self) -> tuple:
        return (self.t is None, self.t or 0, self.m.path, self.m.offset if self.pos is None else self.pos)


@dataclass
class Outcome:
    verdict: Verdict
    root: RootCause | None
    root_ev: Ev | None
    events: list[Ev]
    suspects: dict[int, float] = field(default_factory=dict)
    silent: set[int] = field(default_factory=set)


def domain_of(host: str | None, rank: int | None, path: str) -> str:
    if host:
        return host
    if rank is not None:
        return f"rank {rank}"
    return path


def make_events(matches: Sequence[Match], rules: dict[str, Rule], clocks: dict[str, ClockEstimate]) -> list[Ev]:
    evs = []
    for m in matches:
        rule = rules.get(m.rule_id)
        if rule is None:
            continue
        dom = domain_of(m.who.host, m.who.rank, m.path)
        est = clocks.get(dom)
        off = est.offset_ns if est else 0
        res = est.residual_ns if est else 0
        t = lo = hi = unc = None
        if m.time_ns is not None:
            t = m.time_ns - off
            lo = (m.lo_ns - off) if m.lo_ns is not None else t
            hi = (m.hi_ns - off) if m.hi_ns is not None else None
            if m.time_kind is TimeKind.OWN:
                unc = (hi - t if hi is not None else 0) + res
            else:
                span = (hi - lo) if hi is not None and lo is not None else INHERIT_UNC_NS
                unc = min(span, INHERIT_UNC_NS) + res
        evs.append(Ev(m, rule, t, lo, hi, unc, dom, skew=res))
    evs.sort(key=Ev.sort_key)
    return evs


def _is_candidate(ev: Ev, signalled: dict[tuple, list[int]]) -> bool:
    if ev.rule.role is not Role.PRIMARY:
        return False
    if "signal-exit" in ev.rule.tags:
        # SIGTERM/SIGINT/SIGHUP are how launchers and schedulers stop workers: a consequence
        if ev.m.capture("exitcode") in ("-15", "-2", "-1"):
            return False
        pid = ev.m.capture("pid")
        if pid is not None:
            for key in ((ev.m.who.host, pid), (ev.m.who.task, pid), (ev.m.path, pid)):
                sent = signalled.get(key)
                if sent and (ev.t is None or any(t is None or t <= ev.t + NS for t in sent)):
                    return False
    return True


def _signalled(evs: Sequence[Ev]) -> dict[tuple, list[int]]:
    out: dict[tuple, list] = defaultdict(list)
    for ev in evs:
        if "signal-sent" in ev.rule.tags:
            pid = ev.m.capture("pid")
            if pid is not None:
                for key in ((ev.m.who.host, pid), (ev.m.who.task, pid), (ev.m.path, pid)):
                    out[key].append(ev.t)
    return out


def _fmt_delay(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"+{seconds:.1f} s" if seconds >= 0 else f"{seconds:.1f} s"


def _who_text(ev: Ev) -> str:
    w = ev.m.who
    if w.rank is not None:
        bits = [f"rank {w.rank}"]
        extra = []
        if w.host:
            extra.append(f"node {w.host}")
        if w.local_rank is not None:
            extra.append(f"local rank {w.local_rank}")
        return bits[0] + (f" ({', '.join(extra)})" if extra else "")
    if w.host:
        return f"node {w.host}"
    return ev.m.path


def _hang_suspects(evs: Sequence[Ev], streams: Sequence[StreamFacts], known: set[int],
                   ) -> tuple[dict[int, float], dict[int, list[str]], str | None]:
    """Score ranks as the culprit of a hang; returns scores, reasons per rank, majority rule."""
    score: dict[int, float] = defaultdict(float)
    reasons: dict[int, list[str]] = defaultdict(list)
    first_seq: dict[int, int] = {}
    timeout_rule: Counter[str] = Counter()
    for ev in evs:
        seq = ev.m.capture("seq")
        if ev.rank is not None and seq and seq.isdecimal() and ev.rule.role is Role.COLLATERAL:
            first_seq.setdefault(ev.rank, int(seq))
            timeout_rule[ev.rule.id] += 1
    majority_rule = timeout_rule.most_common(1)[0][0] if timeout_rule else None
    # PyTorch's desync report (TORCH_NCCL_DESYNC_DEBUG): who joined the stuck collective, who
    # finished it without going on, who never joined any
    joined, finished, never = set(), set(), set()
    for ev in evs:
        joined |= _rank_list(ev.m.capture("joined_ranks"))
        finished |= _rank_list(ev.m.capture("finished_ranks"))
        never |= _rank_list(ev.m.capture("missing_ranks"))
    if joined and known <= joined and not finished and not never:
        # every rank entered the stuck collective and none finished it: no rank diverged, whatever
        # else (a quieter log, an earlier last line) makes one look behind
        return {}, {}, majority_rule
    for r in sorted(never):
        score[r] += 5
        reasons[r].append("PyTorch's desync report names it as a rank that never joined any collective")
    if joined and finished:  # the smaller group is the odd one out
        odd, what = ((joined, "joined the stuck collective but did not finish it") if len(joined) < len(finished)
                     else (finished, "finished the collective the others are stuck in but did not join the next"))
        if len(odd) <= max(1, (len(joined) + len(finished)) // 4):
            for r in sorted(odd):
                score[r] += 4
                reasons[r].append(f"PyTorch's desync report: it {what}")
    if first_seq:
        seq_counts = Counter(first_seq.values())
        major, n_major = seq_counts.most_common(1)[0]
        timed = set(first_seq)
        missing = sorted(known - timed - joined)  # a rank the desync report saw join is not absent
        if missing and len(missing) <= max(1, len(known) // 4):
            for r in missing:
                score[r] += 4
                reasons[r].append(f"absent from the collective timeout that {n_major} ranks report (SeqNum {major})")
        for r, s in first_seq.items():
            if s < major:
                score[r] += 2
                reasons[r].append(f"timed out on an earlier collective (SeqNum {s}) than the majority ({major})")
        # the same collective (SeqNum, process group) of another kind or size: the ranks that called
        # another operation there, or the same one on another number of elements, took another code
        # path (a rank-dependent branch; reduce for all_reduce; a buffer that grew on one rank)
        ops: dict[tuple[str | None, str], dict[tuple[str, str | None], set[int]]] = defaultdict(lambda: defaultdict(set))
        for ev in evs:
            op, sq = ev.m.capture("op"), ev.m.capture("seq")
            if ev.rank is not None and op and sq and ev.rule.role is Role.COLLATERAL:
                ops[(ev.m.capture("pg"), sq)][(op, ev.m.capture("numel_in"))].add(ev.rank)
        for (_pg, sq), by_kind in ops.items():
            if len({op for op, _ in by_kind}) < 2 and len({n for _, n in by_kind if n is not None}) < 2:
                continue
            n = sum(len(rs) for rs in by_kind.values())
            common = max(by_kind, key=lambda k: len(by_kind[k]))
            for kind, rs in by_kind.items():
                if kind == common or len(rs) >= len(by_kind[common]) or len(rs) > max(1, n // 4):
                    continue
                if kind[0] != common[0]:
                    what = f"a {kind[0]} where {len(by_kind[common])} other rank(s) run a {common[0]}"
                elif kind[1] is not None and common[1] is not None:
                    what = (f"a {kind[0]} of {kind[1]} elements where {len(by_kind[common])} other rank(s) "
                            f"have {common[1]}")
                else:
                    continue
                for r in sorted(rs):
                    score[r] += 3
                    reasons[r].append(f"its collective SeqNum {sq} is {what}: it took another code path")
        # NCCL work counters: a rank that never enqueued the stuck collective never entered it
        # (counters of another process group say nothing about it: "from this local rank" dump lines
        # relay the default group's counters while the stuck collective is in group 1)
        major_pgs = {ev.m.capture("pg") for ev in evs if ev.m.capture("seq") == str(major) and ev.m.capture("pg")}
        for ev in evs:
            le = ev.m.capture("last_enqueued")
            pg = ev.m.capture("pg")
            if major_pgs and pg is not None and pg not in major_pgs:
                continue
            if ev.rank is not None and le and le.isdecimal() and int(le) < major and ev.rank not in joined:
                if "never enqueued" not in " ".join(reasons[ev.rank]):
                    score[ev.rank] += 3
                    reasons[ev.rank].append(f"never enqueued SeqNum {major} (last enqueued NCCL work: {le})")
    # progress markers and output: who stopped first
    last_step: dict[int, int] = {}
    last_out: dict[int, int] = {}
    for s in streams:
        r = s.who.rank
        if r is None:
            continue
        if s.last_step is not None:
            last_step[r] = max(last_step.get(r, -1), s.last_step)
        t = s.last_ns if s.last_ns is not None else s.first_ns
        if t is not None:
            last_out[r] = max(last_out.get(r, t), t)
    for ev in evs:
        if ev.rank is not None and ev.m.time_ns is not None and ev.m.time_kind is TimeKind.OWN:
            last_out[ev.rank] = max(last_out.get(ev.rank, ev.m.time_ns), ev.m.time_ns)
    if len(last_step) >= 2:
        top = max(last_step.values())
        behind = [r for r, s in last_step.items() if s < top]
        if behind and len(behind) <= max(1, len(last_step) // 4):
            low = min(last_step[r] for r in behind)
            for r in behind:
                w = 2.0 if last_step[r] == low else 1.0
                score[r] += w
                reasons[r].append(f"its progress stopped at step {last_step[r]} while others reached {top}")
    timeouts = [int(x) for e in evs for x in [e.m.capture("timeout_ms")] if x and x.isdecimal()]
    # a hang culprit goes quiet a whole collective timeout before the others; a gap of a few
    # unstamped lines is not that
    stop_early = max(STOP_EARLY_NS, int(median(timeouts)) * 1_000_000 // 2) if timeouts else 4 * STOP_EARLY_NS
    if len(last_out) >= 2:
        med = median(last_out.values())
        for r, t in last_out.items():
            if med - t > stop_early:
                score[r] += 1.5
                reasons[r].append(f"its output stopped {(med - t) / NS:.0f} s before the other ranks'")
    # the dump-signal pointer: names the rank that first detected the timeout (weak: a victim too)
    pointed = Counter()
    for ev in evs:
        sr = ev.m.capture("suspect_rank")
        if sr and sr.isdecimal():
            pointed[int(sr)] += 1
    if pointed:
        r, n = pointed.most_common(1)[0]
        score[r] += 0.5
        reasons[r].append(f"named by {n} line(s) as the rank the error came from (a dump signal's source, "
                          f"a checkpoint exception's rank)")
    return dict(score), dict(reasons), majority_rule


def _rank_list(text: str | None) -> set[int]:
    """``"0, 1, 2"`` -> {0, 1, 2} (a desync report's rank list)."""
    return {int(x) for x in text.replace(" ", "").split(",") if x.isdecimal()} if text else set()


#: below this score no rank is named: a dump-signal pointer (0.5) names a victim as often as a
#: culprit, and output that stopped early (1.5) is, alone, as often a quieter rank or a pasted excerpt
HANG_MIN_SCORE = 2.0


#: primaries of one rank this close to its first one are one event (a wrapper line and its cause)
EVENT_WINDOW_NS = 5 * NS
EVENT_WINDOW_LINES = 60


def _first_failure_per_rank(pool: Sequence[Ev]) -> dict[object, Ev]:
    """Each rank's first failure event. One crash prints several primary lines (``terminate called
    after throwing ...``, then ``what(): CUDA error: ...``, then ``Fatal Python error: Aborted``):
    among the rank's primaries close to its first one, the most specific rule names the event, and
    the event keeps the earliest time."""
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
                close = e.t - first.t <= EVENT_WINDOW_NS
            else:
                close = e.m.path == first.m.path and e.m.line - first.m.line <= EVENT_WINDOW_LINES
            if close:
                group.append(e)
        best = max(group, key=lambda e: (e.rule.priority, -group.index(e)))
        if best is not first and first.t is not None and (best.t is None or best.t > first.t):
            best = Ev(best.m, best.rule, first.t, first.lo, best.hi, max(best.unc or 0, first.unc or 0),
                      best.domain)
        elif best is not first and best.t is None and first.t is None and best.m.path == first.m.path:
            best = Ev(best.m, best.rule, None, None, None, best.unc, best.domain, pos=first.m.offset)
        out[k] = best
    return out


#: a plain uncaught exception this long before every failure a specific rule names is the first
#: failure (closer than that, the specific one wins: the generic line may be its echo, its wrapper or
#: a clock's error)
GENERIC_LEAD_NS = 10 * NS


#: a failure its rank's training progress goes on from for this long was survived (caught and
#: retried: fairseq's "attempting to recover from OOM", a skipped batch), not what ended the job
SURVIVED_NS = 120 * NS
#: an unstamped failure line (a logged traceback) counts when stamped lines this close bracket it
SURVIVED_BRACKET_NS = 120 * NS


def _survived(evs: Sequence[Ev], streams: Sequence[StreamFacts], until_ns: int | None = None) -> dict[int, str]:
    """Primary events whose rank made progress (step lines) long after them: id -> why."""
    progress: dict[int, tuple[int, int | None]] = {}
    for s in streams:
        if s.who.rank is not None and s.last_step_ns is not None and (until_ns is None or s.last_step_ns <= until_ns):
            if s.who.rank not in progress or s.last_step_ns > progress[s.who.rank][0]:
                progress[s.who.rank] = (s.last_step_ns, s.last_step)
    out: dict[int, str] = {}
    for e in evs:
        if e.rule.role is not Role.PRIMARY or e.rank is None or e.t is None or e.rank not in progress:
            continue
        if e.m.time_kind is not TimeKind.OWN and not (
                e.m.lo_ns is not None and e.m.hi_ns is not None and e.m.hi_ns - e.m.lo_ns <= SURVIVED_BRACKET_NS):
            continue  # an inherited time is trusted only between two close stamps (it can lie minutes off)
        t, step = progress[e.rank]
        if t - e.t > SURVIVED_NS:
            out[id(e)] = (f"rank {e.rank} went on after its {e.rule.id} at {iso(e.t)}: its progress reached "
                          f"{'step ' + str(step) if step is not None else 'later steps'} {(t - e.t) / NS / 60:.0f} min later "
                          f"{SURVIVED_NOTE_END}")
    return out


def _hang_root(culprit: int, evs: Sequence[Ev], streams: Sequence[StreamFacts], rule: Rule, proto: Ev) -> Ev:
    """The root event of a hang: the culprit's own last trace if it printed one, else its last output
    (time) with a peer's timeout line as the evidence of what it never joined."""
    own = [e for e in evs if e.rank == culprit and e.rule.role in (Role.PRIMARY, Role.COLLATERAL)
           and "signal-exit" not in e.rule.tags]
    if own:
        e = own[0]
        return Ev(e.m, rule, e.t, e.lo, e.hi, e.unc, e.domain)
    host = local = None
    last = None
    for s in streams:
        if s.who.rank == culprit:
            host = host or s.who.host
            local = local if local is not None else s.who.local_rank
            # when it stopped making progress; its last output may be the teardown killing it
            t = s.last_step_ns if s.last_step_ns is not None else (s.last_ns if s.last_ns is not None else s.first_ns)
            if t is not None and (last is None or t > last):
                last = t
    who = Who(rank=culprit, local_rank=local, host=host)
    m = Match(rule.id, proto.m.path, proto.m.line, proto.m.offset, proto.m.text, who, last, last, None,
              TimeKind.INHERITED if last is not None else TimeKind.NONE)
    return Ev(m, rule, last, last, None, None, host or f"rank {culprit}")


def attribute(matches: Sequence[Match], streams: Sequence[StreamFacts], rules: dict[str, Rule],
              clocks: dict[str, ClockEstimate], known_ranks: set[int], *, skew_note: str = "",
              single_node: bool = False, inferred: dict[int, str] | None = None,
              until_ns: int | None = None) -> Outcome:
    """The verdict over ``matches``; ``until_ns``: the end of this attempt (a restart followed), so
    progress after it does not make a failure of this attempt look survived."""
    evs = make_events(matches, rules, clocks)
    signalled = _signalled(evs)
    survived = _survived(evs, streams, until_ns)
    cands = [e for e in evs if _is_candidate(e, signalled) and id(e) not in survived]
    specific = [e for e in cands if e.rule.priority >= GENERIC_PRIORITY]
    pool = specific or cands
    generic_lead: Ev | None = None  # the first specific failure, when a plain exception came long before it
    if specific and len(specific) < len(cands):
        timed = [e for e in specific if e.t is not None]
        generic = [e for e in cands if e.rule.priority < GENERIC_PRIORITY and e.t is not None]
        if timed and generic:
            g, first = min(generic, key=Ev.sort_key), min(timed, key=Ev.sort_key)
            if first.t - g.t > GENERIC_LEAD_NS + (g.unc or 0) + (first.unc or 0):
                pool, generic_lead = cands, first  # minutes apart: the plain exception came first
    jobs = [e for e in evs if e.rule.role is Role.JOB]
    why: list[str] = []
    suspects: dict[int, float] = {}
    silent: set[int] = set()

    root_ev: Ev | None = None
    tie: list[Ev] = []
    decided_by = "primary"
    confidence = 0.0
    verdict: Verdict

    # a job-level end that precedes every primary failure explains them
    first_job = jobs[0] if jobs and jobs[0].t is not None else (jobs[0] if jobs else None)
    if pool:
        per_rank = _first_failure_per_rank(pool)
        ordered = sorted(per_rank.values(), key=Ev.sort_key)
        root_ev = ordered[0]
        if first_job is not None and first_job.t is not None and root_ev.t is not None and first_job.t < root_ev.t - (root_ev.unc or 0):
            root_ev = None
    if root_ev is not None and root_ev.rank is None and single_node and "signal-exit" in root_ev.rule.tags \
            and root_ev.m.who.local_rank is None and root_ev.m.capture("pid") is None:
        # a launcher that reports a dead worker without naming it (DeepSpeed's sigkill_handler) but
        # lists every worker it has as it kills them: with one worker listed, it was local rank 0
        listed = {e.m.capture("pid") for e in evs if "signal-sent" in e.rule.tags and e.m.path == root_ev.m.path
                  and e.t is not None and root_ev.t is not None and abs(e.t - root_ev.t) <= 5 * NS}
        if len(listed) == 1:
            m = replace(root_ev.m, who=replace(root_ev.m.who, rank=0, local_rank=0))
            for i, e in enumerate(evs):
                if e.m is root_ev.m:
                    evs[i] = Ev(m, e.rule, e.t, e.lo, e.hi, e.unc, e.domain, skew=e.skew)
            root_ev = Ev(m, root_ev.rule, root_ev.t, root_ev.lo, root_ev.hi, root_ev.unc, root_ev.domain,
                         skew=root_ev.skew)
            why.append("its launcher listed a single worker process: local rank 0 of a one-node job")
    if root_ev is not None and root_ev.rank is None:
        # a node-level line (slurmstepd's oom_kill notice) and a line naming the rank (srun's
        # "task 2: Out Of Memory") tell of one event: name the rank unless the node line is clearly first
        for c in sorted(per_rank.values(), key=Ev.sort_key):
            if c.rank is not None and c.rule.category == root_ev.rule.category and (
                    c.t is None or root_ev.t is None or c.t - root_ev.t <= (root_ev.unc or 0) + (c.unc or 0) + NS):
                root_ev = c
                break
    if root_ev is not None:
        verdict = Verdict.ROOT_CAUSE
        r = root_ev
        rest = [e for e in sorted(per_rank.values(), key=Ev.sort_key) if e is not r and not _same_failure(e, r)]
        for c in rest:
            if r.t is None or c.t is None:
                if r.t is None and c.t is None and c.m.path != r.m.path:
                    tie.append(c)
                continue
            # the true instants lie in [t, t + unc]: c can precede r only if c.t < r.t + r.unc
            # (widened by c's own clock residual, which can move it either way)
            gap = c.t - r.t
            if gap <= (r.unc or 0) + c.skew and not _same_failure(c, r):
                tie.append(c)
        if tie:
            # lines that point at a rank (a checkpoint exception relaying rank N's error to every
            # rank, a peer naming who went away) break a tie between ranks that printed the same thing
            members = {e.rank: e for e in [r, *tie] if e.rank is not None}
            votes = Counter(int(x) for e in evs for x in [e.m.capture("suspect_rank")]
                            if x and x.isdecimal() and int(x) in members)
            if votes:
                pick, n = votes.most_common(1)[0]
                if pick != r.rank:
                    r = root_ev = members[pick]
                    rest = [e for e in sorted(per_rank.values(), key=Ev.sort_key) if e is not r and not _same_failure(e, r)]
                tie = [c for c in tie if c.rank != pick and c is not r]
                why.append(f"{n} line(s) name rank {pick} as the origin of the error the tied ranks print")
        confidence = 0.95
        named = _launcher_named_worker(r, evs) if r.rank is None else None
        if named is not None:
            r.m = replace(r.m, who=named)
            root_ev = r
            confidence -= 0.1
            why.append(f"its lines name no rank; the launcher's only report in the same log of a worker that "
                       f"failed on its own names {_who_text(r)}: taken as the one that printed them")
        if "signal-exit" in r.rule.tags:
            decided_by = "signal-exit"
            code = r.m.capture("exitcode")
            how = f"exit code {code}" if code else f"signal {r.m.capture('signal') or 9}, {r.m.capture('signame') or 'Killed'}"
            why.append(f"{_who_text(r)} died by a signal ({how}) that its launcher did not send")
        else:
            why.append(f"{_who_text(r)} has the earliest {'primary ' if r.rule.priority >= GENERIC_PRIORITY else ''}failure: {r.rule.title}")
        n_other = len(rest)
        if n_other == 0:
            why.append("it is the only rank with a failure that can start a cascade")
        else:
            later = [c for c in rest if c not in tie]
            if later and r.t is not None and later[0].t is not None:
                why.append(f"{n_other} other rank(s) have primary failures; the next one ({_who_text(later[0])}, "
                           f"{later[0].rule.id}) comes {(later[0].t - r.t) / NS:.1f} s later")
                confidence -= 0.05 if (later[0].t - r.t) > 10 * NS else 0.15
        if tie:
            confidence = min(confidence, 0.5)
            why.append(f"could not order it against {', '.join(_who_text(c) for c in tie[:5])}: the gap is within "
                       f"the timing uncertainty (stamp resolution, inherited times, clock skew)")
        if r.m.time_kind is TimeKind.INHERITED:
            confidence -= 0.07
            why.append("its line carries no timestamp: the time is taken from the nearest stamped line of the same rank")
        elif r.m.time_kind is TimeKind.NONE:
            confidence -= 0.2
            why.append("no timestamps for it: ordered by position in its stream")
        if "mismatch" in r.rule.tags:
            # a cross-rank check reports on a pair; the reporter is not necessarily the rank that diverged
            pair = [x for x in (r.m.capture("first_rank"), r.m.capture("second_rank")) if x]
            # the pair's other rank (the line names the reporter too, in either place)
            other = next((x for x in pair if not (x.isdecimal() and int(x) == r.rank)), None) or r.m.capture("peer")
            confidence = min(confidence, 0.5)
            why.append(f"a mismatch is found by comparing ranks: {_who_text(r)} reported it"
                       + (f" against {'rank ' + other if other.isdecimal() else other}" if other else "")
                       + ", and the line does not say which side diverged")
        if r.rule.priority < GENERIC_PRIORITY and generic_lead is not None and generic_lead.t is not None \
                and r.t is not None:
            confidence -= 0.2
            why.append(f"a plain uncaught exception, {(generic_lead.t - r.t) / NS:.0f} s before the first failure a "
                       f"specific rule names ({_who_text(generic_lead)}, {generic_lead.rule.id})")
        elif r.rule.priority < GENERIC_PRIORITY:
            confidence -= 0.25
            why.append("only a generic uncaught exception was found; no specific rule matched")
        if r.rank is None:
            confidence -= 0.15
            why.append("the failing process's rank could not be identified")
        elif inferred and r.rank in inferred:
            why.append(f"no line states its global rank: {inferred[r.rank]}")
        if skew_note:
            why.append(skew_note)
    else:
        collateral = [e for e in evs if e.rule.role is Role.COLLATERAL]
        if first_job is not None and (not collateral or first_job.t is None or not cands):
            verdict = Verdict.JOB_LEVEL
            root_ev = first_job
            decided_by = "job"
            confidence = 0.9
            why.append(f"the job ended for a job-level reason: {first_job.rule.title}")
            if cands:
                why.append("the primary failures seen come after it (consequences of the job being stopped)")
        elif collateral:
            scores, reasons, majority_rule = _hang_suspects(evs, streams, known_ranks)
            suspects = scores
            if scores and max(scores.values()) < HANG_MIN_SCORE:
                for r, rs in sorted(reasons.items()):
                    why.extend(f"rank {r}: {x} (a hint only, too weak alone to name it)" for x in rs)
                scores = {}
            if scores:
                best = max(scores.values())
                top = sorted(r for r, s in scores.items() if s == best)
                culprit = top[0]
                silent = {r for r, s in scores.items() if s >= 1.5}
                verdict = Verdict.ROOT_CAUSE
                decided = reasons[culprit]
                kinds = " ".join(decided)
                decided_by = ("desync-report" if "desync report" in kinds else
                              "missing-from-collective" if "absent from" in kinds else
                              "other-operation" if "took another code path" in kinds else
                              "nccl-work-counters" if "never enqueued" in kinds else
                              "earlier-collective" if "earlier collective" in kinds else
                              "progress-stopped" if "progress stopped" in kinds else
                              "output-stopped" if "output stopped" in kinds else "dump-pointer")
                rule_id = majority_rule or collateral[0].rule.id
                proto = next(e for e in collateral if e.rule.id == rule_id)
                root_ev = _hang_root(culprit, evs, streams, rules[rule_id], proto)
                why.append(f"no rank reports a failure that can start a cascade: this is a hang; "
                           f"the other ranks only report {rule_id}")
                why.extend(f"rank {culprit}: {x}" for x in decided)
                if root_ev.t is not None:
                    why.append(f"the time given is rank {culprit}'s last progress (or output) before the hang")
                confidence = min(0.9, 0.35 + 0.12 * best)
                if len(top) > 1:
                    confidence = min(confidence, 0.45)
                    why.append(f"ranks {compress_ranks(top)} are equally suspect")
            else:
                verdict = Verdict.UNDETERMINED
                confidence = 0.0
                why.append("ranks report collateral failures (timeouts, closed connections) but no rank can be named")
                joined = set().union(*(_rank_list(e.m.capture("joined_ranks")) for e in evs))
                if joined and known_ranks <= joined:
                    why.append(f"PyTorch's desync report: every rank ({compress_ranks(sorted(joined))}) joined the "
                               f"stuck collective and none finished it, so no rank diverged; suspect what lies below "
                               f"the program (network, NCCL, a GPU)")
        else:
            teardown = [e for e in evs if e.rule.role is Role.TEARDOWN]
            if teardown:
                verdict = Verdict.UNDETERMINED
                why.append("the launcher or scheduler tore the job down, but no failure was found in the logs")
            else:
                verdict = Verdict.NO_FAILURE
                why.append("no failure, timeout or teardown was found")

    for note in dict.fromkeys(survived.values()):  # said whatever the verdict
        why.append(note)

    # labels
    root_rank = root_ev.rank if root_ev is not None else None
    for e in evs:
        role = e.rule.role
        if root_ev is not None and e.m is root_ev.m:
            e.label = Label.ROOT
        elif role is Role.PRIMARY and id(e) in survived:
            e.label = Label.CONTEXT
        elif role is Role.PRIMARY:
            if verdict is Verdict.ROOT_CAUSE and (e.rank is not None and e.rank == root_rank
                                                  or root_ev is not None and _same_failure(e, root_ev)):
                e.label = Label.COLLATERAL
            elif e.rule.priority < GENERIC_PRIORITY or not _is_candidate(e, signalled) or verdict is Verdict.JOB_LEVEL:
                e.label = Label.COLLATERAL
            elif root_ev is not None and any(t.m is e.m for t in tie):
                e.label = Label.INDEPENDENT
            else:
                e.label = Label.INDEPENDENT
        elif role is Role.COLLATERAL:
            e.label = Label.COLLATERAL
        elif role is Role.TEARDOWN:
            e.label = Label.TEARDOWN
        elif role is Role.JOB:
            e.label = Label.JOB
        else:
            e.label = Label.CONTEXT
    if root_ev is not None and all(e.m is not root_ev.m for e in evs):
        root_ev.label = Label.ROOT

    root = None
    if root_ev is not None:
        rule = root_ev.rule
        evidence = []
        if root_ev.m.line:
            evidence.append(Evidence(root_ev.m.path, root_ev.m.line, root_ev.m.text))
        same = [e for e in evs if e.rank is not None and e.rank == root_rank and e.m is not root_ev.m
                and e.rule.role is Role.PRIMARY and _is_candidate(e, signalled)][:3]
        evidence.extend(Evidence(e.m.path, e.m.line, e.m.text) for e in same)
        # in the order a reader meets them: the rank's own lines come before a launcher's copy
        evidence.sort(key=lambda ev: (ev.path, ev.line))
        if root_ev.rule.role is Role.PRIMARY and root_ev.rule.explains:
            explained = {e.rule.id for e in evs if e.label is Label.COLLATERAL}
            hit = sorted(explained & set(root_ev.rule.explains))
            if hit:
                confidence += 0.03
                why.append(f"the collateral seen ({', '.join(hit)}) is what this failure typically causes on other ranks")
        if suspects:
            top_score = max(suspects.values())
            tie_ranks = sorted(r for r, sc in suspects.items() if sc == top_score and r != root_rank)
        else:
            tie_ranks = sorted({c.rank for c in tie if c.rank is not None})
        job = verdict is Verdict.JOB_LEVEL  # the job ended: no rank is at fault, whichever file said so
        root = RootCause(
            rank=None if job else root_rank, host=root_ev.m.who.host,
            local_rank=None if job else root_ev.m.who.local_rank,
            rule=rule.id, title=rule.title, category=rule.category, severity=str(rule.severity),
            time=iso(root_ev.t), confidence=round(max(0.05, min(0.99, confidence)), 2),
            tie=tuple(tie_ranks), evidence=tuple(evidence), mechanism=rule.root_cause, fix=rule.fix,
            confirm=rule.confirm, references=rule.references, why=tuple(why), prevention=rule.prevention,
            decided_by=decided_by, attempt=root_ev.m.attempt,
            context=tuple(f">> {root_ev.m.text}" if x == ">>" else x for x in root_ev.m.context))
    elif why:
        root = None
    out = Outcome(verdict, root, root_ev, evs, suspects, silent)
    out.why = why  # type: ignore[attr-defined]
    return out


def _same_failure(c: Ev, r: Ev) -> bool:
    """``c`` is ``r``'s failure told again without a rank, on ``r``'s node (slurmstepd's "Detected 1
    oom-kill event" beside srun's "task 0: Out Of Memory"): part of the root, not a rival."""
    return (c.rule.id == r.rule.id and c.rank is None and r.rank is not None and c.m.who.host is not None
            and c.m.who.host == r.m.who.host)


#: launcher lines reporting a worker that ended (torchrun's agent: exit code, local rank, pid;
#: mp.spawn's parent: the process index)
_WORKER_EXIT_RULES = {"launcher.worker-aborted-sigabrt", "launcher.worker-killed-by-signal",
                      "launcher.worker-failed-exitcode", "launcher.mp-spawn-process-raised"}
#: exit codes of workers the launcher itself stopped (SIGTERM, SIGINT)
_STOPPED_BY_LAUNCHER = {"-15", "-2"}


def _launcher_named_worker(r: Ev, evs: Sequence[Ev]) -> Who | None:
    """For a root line that names no rank (a kernel assertion, a bare traceback): the worker that
    the launcher, in the same log, reports as the only one that failed on its own; else None."""
    exits = [e for e in evs if e.m.path == r.m.path and e.rule.id in _WORKER_EXIT_RULES
             and (e.m.capture("exitcode") or "") not in _STOPPED_BY_LAUNCHER]
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


def table_root(out: Outcome, facts: Sequence, rules: dict[str, Rule]) -> None:
    """When the logs hold nothing but torchrun's failure tables (a worker exited 1 and its traceback
    was not captured), the earliest table entry across all nodes is the best evidence there is:
    better than torchrun's own per-node pick, and said with low confidence."""
    if out.verdict is not Verdict.UNDETERMINED:
        return
    # when the ranks report collective timeouts, a SIGABRT entry is the NCCL watchdog aborting its
    # process: a consequence like the timeouts, not a failure of its own
    timeouts = any(e.rule.role is Role.COLLATERAL for e in out.events)
    entries = [f for f in facts if f.source == "failure-table" and f.who.rank is not None
               and f.exitcode not in (None, -15, -2, -1) and not (timeouts and f.exitcode == -6)]
    rule = rules.get("launcher.worker-failed-exitcode")
    if not entries or rule is None:
        return
    entries.sort(key=lambda f: (f.time_ns is None, f.time_ns or 0))
    first = entries[0]
    others = sorted({f.who.rank for f in entries[1:] if f.who.rank != first.who.rank})
    gap = None
    if len(entries) > 1 and first.time_ns is not None and entries[1].time_ns is not None:
        gap = (entries[1].time_ns - first.time_ns) / NS
    why = (f"only torchrun's failure tables tell of the failure: rank {first.who.rank} has the earliest "
           f"entry (exit code {first.exitcode})" + (f", {gap:.0f} s before the next" if gap else ""),
           "its own error output is not in the logs (redirected, or lost): look at the worker's log or its "
           "error_file for the cause")
    conf = 0.55 if gap and gap >= 2 else 0.3
    lines = [e for e in out.events if e.rank == first.who.rank and "exitcode" in " ".join(k for k, _ in e.m.captures)]
    evidence = tuple(Evidence(e.m.path, e.m.line, e.m.text) for e in lines[:2]) or (
        Evidence(first.origin_path, 0, f"rank {first.who.rank} exitcode {first.exitcode}"),)
    tie = tuple(r for r in others if gap is not None and gap < 1) if gap is not None else tuple(others[:8])
    out.verdict = Verdict.ROOT_CAUSE
    out.root = RootCause(
        rank=first.who.rank, host=first.who.host, local_rank=first.who.local_rank, rule=rule.id,
        title=rule.title, category=rule.category, severity=str(rule.severity), time=iso(first.time_ns),
        confidence=conf, tie=tie, evidence=evidence,
        mechanism=rule.root_cause, fix=rule.fix, confirm=rule.confirm, references=rule.references, why=why,
        prevention=rule.prevention, decided_by="failure-table")


def groups_and_chain(out: Outcome) -> tuple[list[Group], list[ChainLink], list[CollateralItem]]:
    root_t = out.root_ev.t if out.root_ev is not None else None
    by: dict[tuple[str, str], list[Ev]] = defaultdict(list)
    items: list[CollateralItem] = []
    root_rank = out.root_ev.rank if out.root_ev is not None else None
    root_rule = out.root_ev.rule.id if out.root_ev is not None else None
    for e in out.events:
        if e.label is Label.ROOT:
            continue
        if root_rank is not None and e.rank == root_rank and e.rule.id == root_rule:
            continue  # the root failure printed again (a wrapper, the agent's copy): part of the root event
        by[(e.rule.id, e.label.value)].append(e)
        if e.label in (Label.COLLATERAL, Label.TEARDOWN, Label.INDEPENDENT, Label.JOB):
            items.append(CollateralItem(
                rank=e.rank, host=e.m.who.host, rule=e.rule.id, time=iso(e.t),
                after_root_s=round((e.t - root_t) / NS, 3) if e.t is not None and root_t is not None else None,
                path=e.m.path, line=e.m.line))
    groups = []
    for (rid, label), es in by.items():
        ranks = sorted({e.rank for e in es if e.rank is not None})
        hosts = sorted({e.m.who.host for e in es if e.m.who.host})
        ts = [e.t for e in es if e.t is not None]
        first = min(ts) if ts else None
        last = max(ts) if ts else None
        groups.append(Group(
            rule=rid, role=str(es[0].rule.role), ranks=compress_ranks(ranks), count=len(es),
            first=iso(first), last=iso(last), label=label,
            first_after_s=round((first - root_t) / NS, 3) if first is not None and root_t is not None else None,
            last_after_s=round((last - root_t) / NS, 3) if last is not None and root_t is not None else None,
            title=es[0].rule.title))
    seq_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in out.events:
        sq = e.m.capture("seq")
        if sq:
            seq_of[(e.rule.id, e.label.value)].add(sq)
    order = {"root": 0, "independent": 1, "collateral": 2, "teardown": 3, "job": 4, "context": 5}
    groups.sort(key=lambda g: (order.get(g.label, 9), g.first or "~", g.rule))
    chain: list[ChainLink] = []
    if out.root is not None:
        r = out.root
        who = f"rank {r.rank}" if r.rank is not None else "the job"
        chain.append(ChainLink("root", r.rule, str(r.rank) if r.rank is not None else "", 1, f"{who} {r.rule}"))
    for stage in ("collateral", "teardown", "job"):
        gs = [g for g in groups if g.label == stage]
        for g in gs[:4]:
            n_ranks = len(_expand(g.ranks))
            subject = f"{n_ranks} rank{'s' if n_ranks != 1 else ''}" if n_ranks else f"{g.count} line{'s' if g.count != 1 else ''}"
            seqs = seq_of.get((g.rule, g.label), set())
            on = f" on SeqNum {next(iter(seqs))}" if len(seqs) == 1 else ""
            chain.append(ChainLink(stage, g.rule, g.ranks, g.count,
                                   f"{subject} {g.rule}{on} ({_fmt_delay(g.first_after_s)})"))
    return groups, chain, items


def _expand(text: str) -> list[int]:
    from correlator.identity import expand_ranks

    return expand_ranks(text) if text else []


def timeline(out: Outcome) -> list[TimelineEvent]:
    root_t = out.root_ev.t if out.root_ev is not None else None
    evs = out.events
    if len(evs) > TIMELINE_CAP:
        keep = [e for e in evs if e.label in (Label.ROOT, Label.INDEPENDENT, Label.JOB)]
        rest = [e for e in evs if e.label not in (Label.ROOT, Label.INDEPENDENT, Label.JOB)]
        evs = sorted(keep + rest[: TIMELINE_CAP - len(keep)], key=Ev.sort_key)
    root_id = next((i for i, e in enumerate(evs) if out.root_ev is not None and e.m is out.root_ev.m),
                   next((i for i, e in enumerate(evs) if e.label is Label.ROOT), None))
    return [TimelineEvent(
        time=iso(e.t), rank=e.rank, host=e.m.who.host, rule=e.rule.id, role=str(e.rule.role), path=e.m.path,
        line=e.m.line, text=e.m.text, label=e.label.value, time_kind=str(e.m.time_kind),
        after_root_s=round((e.t - root_t) / NS, 3) if e.t is not None and root_t is not None else None,
        local_rank=e.m.who.local_rank, attempt=e.m.attempt, id=i,
        caused_by=root_id if e.label in (Label.COLLATERAL, Label.TEARDOWN) and i != root_id else None)
        for i, e in enumerate(evs)]


def rank_rows(out: Outcome, streams: Sequence[StreamFacts], known: set[int],
              clocks: dict[str, ClockEstimate]) -> list[RankRow]:
    info: dict[int, dict] = {r: {"host": None, "local": None, "first": None, "last": None, "lines": 0, "step": None}
                             for r in known}
    for s in streams:
        r = s.who.rank
        if r is None:
            continue
        d = info.setdefault(r, {"host": None, "local": None, "first": None, "last": None, "lines": 0, "step": None})
        d["host"] = d["host"] or s.who.host
        d["local"] = d["local"] if d["local"] is not None else s.who.local_rank
        off = clocks.get(domain_of(s.who.host, r, s.path))
        o = off.offset_ns if off else 0
        if s.first_ns is not None:
            f = s.first_ns - o
            d["first"] = f if d["first"] is None else min(d["first"], f)
        if s.last_ns is not None:
            la = s.last_ns - o
            d["last"] = la if d["last"] is None else max(d["last"], la)
        d["lines"] += s.lines
        if s.last_step is not None:
            d["step"] = max(d["step"] or 0, s.last_step)
    state: dict[int, RankState] = {}
    for e in out.events:
        r = e.rank
        if r is None:
            continue
        d = info.setdefault(r, {"host": None, "local": None, "first": None, "last": None, "lines": 0, "step": None})
        d["host"] = d["host"] or e.m.who.host
        d["local"] = d["local"] if d["local"] is not None else e.m.who.local_rank
        if e.label is Label.ROOT:
            state[r] = RankState.ROOT
        elif e.label in (Label.COLLATERAL, Label.INDEPENDENT, Label.TEARDOWN) and state.get(r) is not RankState.ROOT:
            state[r] = RankState.COLLATERAL
    if out.root is not None and out.root.rank is not None:
        state[out.root.rank] = RankState.ROOT
    for r in out.silent:
        if state.get(r) not in (RankState.ROOT,):
            state[r] = RankState.SILENT
    rows = []
    for r in sorted(info):
        d = info[r]
        st = state.get(r)
        if st is None:
            st = RankState.HEALTHY if d["lines"] or d["first"] is not None else RankState.UNKNOWN
        rows.append(RankRow(r, d["host"], d["local"], st, iso(d["first"]), iso(d["last"]), d["lines"], d["step"]))
    return rows


def clock_rows(clocks: dict[str, ClockEstimate]) -> list[ClockRow]:
    return [ClockRow(c.domain, round(c.offset_ns / NS, 3), round(c.residual_ns / NS, 3), c.anchors)
            for c in sorted(clocks.values(), key=lambda c: c.domain)]
