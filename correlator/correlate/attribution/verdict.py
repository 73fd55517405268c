"""The verdict: a chain of small steps from events to a root cause (or why there is none).

``attribute`` runs, in order: events (``events``) -> lifecycles and survived failures
(``lifecycle``) -> candidates and what explains them (``causal``) -> the earliest unexplained
terminal failure, or a node/job wave, or a job-level end, or a hang's culprit (``hang``), or a
normal end -> labels -> the ``RootCause`` with its confidence and its reasons. Every number comes
from ``policy``; ``decided_by`` is an ``EvidenceKind``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from correlator.correlate.attribution import causal, hang, lifecycle, policy
from correlator.correlate.attribution.events import Ev, make_events, who_text
from correlator.correlate.clocks import ClockEstimate
from correlator.model import (
    NS,
    Evidence,
    IdentityFact,
    Label,
    Match,
    Role,
    RootCause,
    Rule,
    StreamFacts,
    TimeKind,
    TornDownNote,
    Verdict,
    Who,
    compress_ranks,
    iso,
)
from correlator.model.evidence import Clue
from correlator.model.evidence import EvidenceKind as K
from correlator.model.vocabulary import Capture, Tag

#: collateral with one of these tags, after a normal end, can be shutdown chatter (a communicator
#: closed, the store's server went away first); a peer's connection lost mid-collective (``peer-loss``
#: alone: gloo's "Connection closed by peer" raised in a training step) is not
_SHUTDOWN_TAGS = frozenset({Tag.SHUTDOWN, Tag.STORE})


@dataclass
class Outcome:
    verdict: Verdict
    root: RootCause | None
    root_ev: Ev | None
    events: list[Ev]
    suspects: dict[int, float] = field(default_factory=dict)
    silent: set[int] = field(default_factory=set)
    #: the reasons, also when no root was named (they go into the report's diagnostics then)
    why: list[str] = field(default_factory=list)
    clues: list[Clue] = field(default_factory=list)


@dataclass
class _Decision:
    """What a verdict step concluded."""

    verdict: Verdict
    root_ev: Ev | None = None
    decided: K = K.PRIMARY
    confidence: float = 0.0
    suspects: dict[int, float] = field(default_factory=dict)
    silent: set[int] = field(default_factory=set)
    found: list[Clue] = field(default_factory=list)


@dataclass
class _Work:
    """What the steps pass along."""

    evs: list[Ev]
    sent: dict
    survived: dict[int, str]
    cands: list[Ev]
    explained: dict[int, tuple[Ev, str]]
    lives: dict[object, lifecycle.Life]
    why: list[str] = field(default_factory=list)


def _pool(unexplained: Sequence[Ev]) -> tuple[list[Ev], Ev | None, list[Ev]]:
    """The failures the root is chosen from, the first specific failure when a plain exception came
    long before it (for the reasons), and rivals the root cannot be ordered against.

    A plain (generic) exception may be a specific failure's echo or wrapper on its own rank, or an
    unrecognised consequence told on a clock that is off. So it decides only where that cannot be: another
    rank's, on the same clock as every specific failure and before all of them; or, across clocks, more
    than ``GENERIC_LEAD_NS`` before them. Closer than that across clocks, it is a rival (a tie)."""
    specific = [e for e in unexplained if e.rule.priority >= policy.GENERIC_PRIORITY]
    generic = [e for e in unexplained if e.rule.priority < policy.GENERIC_PRIORITY]
    if not specific or not generic:
        return list(unexplained), None, []
    timed = [e for e in specific if e.t is not None]
    timed_generic = [e for e in generic if e.t is not None]
    if timed and timed_generic:
        g, first = min(timed_generic, key=Ev.sort_key), min(timed, key=Ev.sort_key)
        if first.t is not None and g.t is not None \
                and first.t - g.t > policy.GENERIC_LEAD_NS + (g.unc or 0) + (first.unc or 0):
            return list(unexplained), first, []
    ranks = {e.rank for e in specific}
    first_specific = min(specific, key=Ev.sort_key)
    others = [g for g in generic if g.rank is not None and g.rank not in ranks]
    early = [g for g in others if all(s.domain == g.domain for s in specific) and all(_before(g, s) for s in specific)]
    rivals = [g for g in others if g not in early and any(s.domain != g.domain for s in specific)
              and g.t is not None and first_specific.t is not None
              and g.t <= first_specific.t + (first_specific.unc or 0)]
    return specific + early, None, rivals


def _before(a: Ev, b: Ev) -> bool:
    """``a`` came before ``b``: by time, or -- in one file and on one host's clock, where neither
    carries a stamp of its own and the times cannot tell them apart -- by position (a launcher's
    combined stream is written as it happens)."""
    if a.m.path == b.m.path and a.domain == b.domain and a.t is not None and b.t is not None and TimeKind.OWN not in (
            a.m.time_kind, b.m.time_kind) and abs(a.t - b.t) <= (a.unc or 0) + (b.unc or 0):
        return a.m.offset < b.m.offset
    return Ev.sort_key(a) < Ev.sort_key(b)


def _earliest(evs: list[Ev]) -> Ev:
    """The first of the failures by ``_before``."""
    best = min(evs, key=Ev.sort_key)
    for e in sorted(evs, key=Ev.sort_key):
        if e is not best and _before(e, best):
            best = e
    return best


def _job_first(job: Ev, root_ev: Ev) -> bool:
    """A job-level end (a scheduler's kill, a cancel) came before the first failure: by time, or --
    when neither line carries a stamp of its own -- by position in the same file (the ranks the
    scheduler killed are reported after its line)."""
    if job.t is not None and root_ev.t is not None and job.t < root_ev.t - (root_ev.unc or 0):
        return True
    unstamped = job.m.time_kind is not TimeKind.OWN or root_ev.m.time_kind is not TimeKind.OWN
    return unstamped and job.m.path == root_ev.m.path and job.m.offset < root_ev.m.offset and (
        job.t is None or root_ev.t is None or job.t <= root_ev.t + (root_ev.unc or 0))


def _single_worker_rank(root_ev: Ev, w: _Work, single_node: bool) -> tuple[Ev, str | None]:
    """A launcher that reports a dead worker without naming it (DeepSpeed's sigkill_handler) but
    lists every worker it has as it kills them: with one worker listed, it was local rank 0."""
    if not (root_ev.rank is None and single_node and Tag.SIGNAL_EXIT in root_ev.rule.tags
            and root_ev.m.who.local_rank is None and root_ev.m.capture(Capture.PID) is None):
        return root_ev, None
    listed = {e.m.capture(Capture.PID) for e in w.evs if Tag.SIGNAL_SENT in e.rule.tags and e.m.path == root_ev.m.path
              and e.t is not None and root_ev.t is not None and abs(e.t - root_ev.t) <= policy.LISTED_WORKERS_NS}
    if len(listed) != 1:
        return root_ev, None
    m = replace(root_ev.m, who=replace(root_ev.m.who, rank=0, local_rank=0))
    for i, e in enumerate(w.evs):
        if e.m is root_ev.m:
            w.evs[i] = Ev(m, e.rule, e.t, e.lo, e.hi, e.unc, e.domain, skew=e.skew)
    return (Ev(m, root_ev.rule, root_ev.t, root_ev.lo, root_ev.hi, root_ev.unc, root_ev.domain, skew=root_ev.skew),
            "its launcher listed a single worker process: local rank 0 of a one-node job")


def _ranked_twin(root_ev: Ev, per_rank: dict[object, Ev]) -> Ev:
    """A line without a rank and a line naming the rank can tell of one event: slurmstepd's oom_kill
    notice and srun's "task 2: Out Of Memory"; faulthandler's "Fatal Python error: Segmentation fault"
    in a node's file and the agent's "failed (exitcode: -11) local_rank: 3". Name the rank unless the
    rankless line is clearly first by its own stamp; a rankless line whose time is only inherited (in
    a file several processes write unprefixed, a neighbour's stamp) is that rank's death when it is the
    only death by the same signal on the same node."""
    if root_ev.rank is not None:
        return root_ev
    ranked = sorted((c for c in per_rank.values() if c.rank is not None), key=Ev.sort_key)
    for c in ranked:
        if c.rule.category == root_ev.rule.category and (
                c.t is None or root_ev.t is None or c.t - root_ev.t <= (root_ev.unc or 0) + (c.unc or 0) + policy.TWIN_SLACK_NS):
            return c
    sig = causal.signal_of(root_ev)
    if sig is not None and root_ev.m.time_kind is not TimeKind.OWN and root_ev.m.who.host:
        same = [c for c in ranked if causal.signal_of(c) == sig and c.m.who.host == root_ev.m.who.host]
        if len(same) == 1:
            return same[0]
    return root_ev


def _odd_one_out(root_ev: Ev, per_rank: dict[object, Ev], w: _Work) -> Ev:
    """In a collective mismatch the root is the odd rank out, not the first rank to report it."""
    if Tag.MISMATCH not in root_ev.rule.tags:
        return root_ev
    odd = causal.mismatch_culprit(w.evs)
    if odd is None or odd[0] == root_ev.rank:
        return root_ev
    own = per_rank.get(odd[0])
    if own is not None and Tag.MISMATCH in own.rule.tags:
        return own
    m = replace(root_ev.m, who=Who(rank=odd[0]))
    return Ev(m, root_ev.rule, root_ev.t, root_ev.lo, root_ev.hi, root_ev.unc, root_ev.domain, skew=root_ev.skew)


def _ties(r: Ev, rest: Sequence[Ev]) -> list[Ev]:
    """Failures that cannot be ordered against the root: the true instants lie in [t, t + unc], so
    ``c`` can precede ``r`` only if ``c.t < r.t + r.unc`` (widened by c's own clock residual)."""
    tie = []
    for c in rest:
        if r.t is None or c.t is None:
            if r.t is None and c.t is None and c.m.path != r.m.path:
                tie.append(c)
            continue
        if c.t - r.t <= (r.unc or 0) + c.skew and not causal.same_failure(c, r):
            tie.append(c)
    return tie


def _break_tie(r: Ev, tie: list[Ev], per_rank: dict[object, Ev], w: _Work) -> tuple[Ev, list[Ev]]:
    """Lines that point at a rank (a checkpoint exception relaying rank N's error to every rank, a
    peer naming who went away) break a tie between ranks that printed the same thing."""
    members = {e.rank: e for e in [r, *tie] if e.rank is not None}
    votes = Counter(int(x) for e in w.evs for x in [e.m.capture(Capture.SUSPECT_RANK)]
                    if x and x.isdecimal() and int(x) in members)
    if not votes:
        return r, tie
    pick, n = votes.most_common(1)[0]
    if pick != r.rank:
        r = members[pick]
    w.why.append(f"{n} line(s) name rank {pick} as the origin of the error the tied ranks print")
    return r, [c for c in tie if c.rank != pick and c is not r]


def _primary_root(root_ev: Ev, per_rank: dict[object, Ev], w: _Work, generic_lead: Ev | None,
                  inferred: dict[int, str] | None, skew_note: str,
                  rivals: Sequence[Ev] = ()) -> tuple[Ev, list[Ev], K, float]:
    """The root among rank failures: ties, the launcher's naming of a rankless root, and the
    confidence with every reason that lowers it."""
    r = root_ev
    rest = [e for e in sorted(per_rank.values(), key=Ev.sort_key) if e is not r and not causal.same_failure(e, r)]
    odd = causal.mismatch_culprit(w.evs) if Tag.MISMATCH in r.rule.tags else None
    is_odd = odd is not None and odd[0] == r.rank
    tie = [] if is_odd else _ties(r, rest)
    tie += [g for g in rivals if g.rank != r.rank and all(g.rank != c.rank for c in tie)]
    if tie:
        r, tie = _break_tie(r, tie, per_rank, w)
        rest = [e for e in sorted(per_rank.values(), key=Ev.sort_key) if e is not r and not causal.same_failure(e, r)]
    confidence = policy.CONF_PRIMARY
    named = causal.launcher_named_worker(r, w.evs) if r.rank is None else None
    if named is not None:
        r.m = replace(r.m, who=named)
        confidence -= policy.CONF_LAUNCHER_NAMED
        w.why.append(f"its lines name no rank; the launcher's only report in the same log of a worker that "
                     f"failed on its own names {who_text(r)}: taken as the one that printed them")
    decided = K.PRIMARY
    if Tag.SIGNAL_EXIT in r.rule.tags:
        decided = K.SIGNAL_EXIT
        code = r.m.capture(Capture.EXITCODE)
        how = f"exit code {code}" if code else f"signal {r.m.capture(Capture.SIGNAL) or 9}, {r.m.capture(Capture.SIGNAME) or 'Killed'}"
        w.why.append(f"{who_text(r)} died by a signal ({how}) that its launcher did not send")
    elif is_odd:
        w.why.append(f"{who_text(r)} is the odd rank out of a collective mismatch: {r.rule.title}")
    else:
        specific = "primary " if r.rule.priority >= policy.GENERIC_PRIORITY else ""
        w.why.append(f"{who_text(r)} has the earliest {specific}failure: {r.rule.title}")
    if Tag.ABSENT_PEER in r.rule.tags:
        w.why.append(f"{who_text(r)} only reports it: the line is printed by the processes that were there, and "
                     f"the cause is one that never came (its log names none: compare the allocation with the "
                     f"hosts that logged)")
    if not rest:
        w.why.append("it is the only rank with a failure that can start a cascade")
    else:
        later = [c for c in rest if c not in tie]
        if later and r.t is not None and later[0].t is not None:
            gap = (later[0].t - r.t) / NS
            when = f"comes {gap:.1f} s later" if gap >= 0.05 else "comes at the same time"
            w.why.append(f"{len(rest)} other rank(s) have primary failures; the next one ({who_text(later[0])}, "
                         f"{later[0].rule.id}) {when}")
            confidence -= policy.CONF_NEXT_FAR if (later[0].t - r.t) > policy.NEXT_FAR_NS else policy.CONF_NEXT_NEAR
    if tie:
        confidence = min(confidence, policy.CONF_TIE_MAX)
        w.why.append(f"could not order it against {', '.join(who_text(c) for c in tie[:5])}: the gap is within "
                     f"the timing uncertainty (stamp resolution, inherited times, clock skew)")
    if r.m.time_kind is TimeKind.INHERITED:
        confidence -= policy.CONF_INHERITED
        w.why.append("its line carries no timestamp: the time is taken from the nearest stamped line of the same rank")
    elif r.m.time_kind is TimeKind.NONE:
        confidence -= policy.CONF_NO_TIME
        w.why.append("no timestamps for it: ordered by position in its stream")
    if is_odd and odd is not None:
        decided = K.MISMATCH_ODD_ONE_OUT
        confidence = min(confidence, policy.CONF_ODD_ONE_OUT)
        w.why.append(f"{odd[1]} mismatch reports compare pairs of ranks, and rank {r.rank} is in every pair: the "
                     f"odd rank out, whoever reported it")
    elif Tag.MISMATCH in r.rule.tags:
        # a cross-rank check reports on a pair; the reporter is not necessarily the rank that diverged
        pair = [x for x in (r.m.capture(Capture.FIRST_RANK), r.m.capture(Capture.SECOND_RANK)) if x]
        other = next((x for x in pair if not (x.isdecimal() and int(x) == r.rank)), None) or r.m.capture(Capture.PEER)
        confidence = min(confidence, policy.CONF_TIE_MAX)
        w.why.append(f"a mismatch is found by comparing ranks: {who_text(r)} reported it"
                     + (f" against {'rank ' + other if other.isdecimal() else other}" if other else "")
                     + ", and the line does not say which side diverged")
    if r.rule.priority < policy.GENERIC_PRIORITY and generic_lead is not None and generic_lead.t is not None \
            and r.t is not None:
        confidence -= policy.CONF_GENERIC_LEAD
        w.why.append(f"a plain uncaught exception, {(generic_lead.t - r.t) / NS:.0f} s before the first failure a "
                     f"specific rule names ({who_text(generic_lead)}, {generic_lead.rule.id})")
    elif r.rule.priority < policy.GENERIC_PRIORITY:
        confidence -= policy.CONF_GENERIC
        by_rule = [e for e in rest if e.rule.priority >= policy.GENERIC_PRIORITY]
        if by_rule:
            w.why.append(f"a plain uncaught exception, before the first failure a specific rule names "
                         f"({who_text(by_rule[0])}, {by_rule[0].rule.id}) in the same stream's order")
        else:
            w.why.append("only a generic uncaught exception was found; no specific rule matched")
    if r.rank is None:
        confidence -= policy.CONF_NO_RANK
        w.why.append("the failing process's rank could not be identified")
    elif inferred and r.rank in inferred:
        w.why.append(f"no line states its global rank: {inferred[r.rank]}")
    if skew_note:
        w.why.append(skew_note)
    return r, tie, decided, confidence


def _explained_notes(w: _Work) -> None:
    """Say which failures were accounted for by another (at most a few, with a count)."""
    items = list(w.explained.values())
    if not items:
        return
    hows = Counter(how for _, how in items)
    for how, n in hows.most_common(3):
        w.why.append(f"{n} failure(s) on other ranks are explained: {how}")


def _normal_end(w: _Work, known: set[int], streams: Sequence[StreamFacts]) -> str | None:
    """Why the job ended normally despite the collateral it printed, or None: every rank it shows
    completed (a completion marker of its own, or its node's agent's) after every teardown and
    collateral line (a restarted attempt's teardown comes before the new attempt's end), or --
    without markers -- the only collateral is shutdown chatter, nothing tore the job down, and every
    rank stopped at the same step."""
    collateral = [e for e in w.evs if e.rule.role is Role.COLLATERAL]
    trouble = [e for e in w.evs if e.rule.role in (Role.TEARDOWN, Role.COLLATERAL)]
    ranks = {s.who.rank for s in streams if s.who.rank is not None} or set(known)
    agent_done = [e for e in w.evs if Tag.COMPLETION in e.rule.tags and e.rank is None]
    done = lifecycle.ended_normally(w.lives, ranks)
    if ranks and (done >= ranks or agent_done):
        ends = [c.t for r in done for c in w.lives[r].completions if c.t is not None] + \
               [e.t for e in agent_done if e.t is not None]
        last_trouble = max((e.t for e in trouble if e.t is not None), default=None)
        if last_trouble is None or (ends and min(ends) > last_trouble):
            if not collateral:
                return "every rank ended normally"
            how = "its own completion marker" if done >= ranks else "the launcher reports success"
            return (f"every rank ended normally ({how}), after the {len(collateral)} line(s) of "
                    f"{', '.join(sorted({e.rule.id for e in collateral})[:4])}")
    if any(e.rule.role in (Role.TEARDOWN, Role.JOB) for e in w.evs):
        return None
    if collateral and all(set(e.rule.tags) & _SHUTDOWN_TAGS and Tag.TIMEOUT not in e.rule.tags for e in collateral):
        steps = {s.last_step for s in streams if s.who.rank is not None and s.last_step is not None}
        if len(steps) == 1:
            return (f"every rank stopped at step {steps.pop()}, nothing tore the job down, and the only collateral is "
                    f"shutdown chatter ({', '.join(sorted({e.rule.id for e in collateral})[:4])})")
    if ranks and (done >= ranks or agent_done) and collateral and all(
            set(e.rule.tags) & _SHUTDOWN_TAGS and Tag.TIMEOUT not in e.rule.tags for e in collateral):
        return (f"every rank ended normally; the {len(collateral)} line(s) of "
                f"{', '.join(sorted({e.rule.id for e in collateral})[:4])} are its shutdown")
    return None


def attribute(matches: Sequence[Match], streams: Sequence[StreamFacts], rules: dict[str, Rule],
              clocks: dict[str, ClockEstimate], known_ranks: set[int], *, skew_note: str = "",
              single_node: bool = False, inferred: dict[int, str] | None = None,
              until_ns: int | None = None, facts: Sequence[IdentityFact] = (),
              ranks_of_host: dict[str, set[int]] | None = None) -> Outcome:
    """The verdict over ``matches``; ``until_ns``: the end of this attempt (a restart followed), so
    progress after it does not make a failure of this attempt look survived."""
    evs = make_events(matches, rules, clocks)
    sent = causal.signalled(evs)
    lives = lifecycle.build(evs, streams, facts, until_ns, ranks_of_host, single_node)
    survived = lifecycle.survived(evs, lives)
    passed = lifecycle.transient(evs, lives)  # collateral its rank went on from: not how the job ended
    cands = [e for e in evs if causal.is_candidate(e, sent) and id(e) not in survived]
    quiet = lifecycle.caught_in_a_quiet_job(cands, evs, lives)
    survived.update(quiet)
    cands = [c for c in cands if id(c) not in quiet]
    explained = causal.explanations(cands, evs)
    w = _Work(evs, sent, survived, cands, explained, lives)
    unexplained = [c for c in cands if id(c) not in explained]
    pool, generic_lead, rivals = _pool(unexplained)
    jobs = [e for e in evs if e.rule.role is Role.JOB]
    first_job = jobs[0] if jobs else None

    root_ev: Ev | None = None
    tie: list[Ev] = []
    decided = K.PRIMARY
    confidence = 0.0
    suspects: dict[int, float] = {}
    silent: set[int] = set()
    found: list[Clue] = []
    node_wave: causal.Wave | None = None
    per_rank: dict[object, Ev] = {}
    verdict: Verdict
    if pool:
        per_rank = causal.first_failure_per_rank(pool)
        root_ev = _earliest(list(per_rank.values()))
        if first_job is not None and _job_first(first_job, root_ev):
            root_ev = None  # a job-level end that precedes every primary failure explains them
    if root_ev is not None:
        node_wave = causal.wave(list(per_rank.values()), ranks_of_host or {}, known_ranks)
    if root_ev is not None and node_wave is not None:
        verdict, root_ev, decided, confidence = Verdict.ROOT_CAUSE, node_wave.first, K.NODE_WAVE, policy.CONF_WAVE
        where = f"every rank of node {node_wave.host}" if node_wave.host else "most of the job's ranks"
        w.why.append(f"{where} ({compress_ranks(list(node_wave.ranks))}) died of the same failure ({node_wave.what}) "
                     f"at once (within {policy.NODE_WAVE_NS / NS:.0f} s as far as their stamps tell): a {'node' if node_wave.host else 'job'}-level failure, "
                     f"not one rank's")
    elif root_ev is not None:
        root_ev, note = _single_worker_rank(root_ev, w, single_node)
        if note:
            w.why.append(note)
        root_ev = _ranked_twin(root_ev, per_rank)
        root_ev = _odd_one_out(root_ev, per_rank, w)
        verdict = Verdict.ROOT_CAUSE
        root_ev, tie, decided, confidence = _primary_root(root_ev, per_rank, w, generic_lead, inferred, skew_note,
                                                          rivals)
    else:
        collateral = [e for e in evs if e.rule.role is Role.COLLATERAL and id(e) not in passed]
        hang_evs = [e for e in evs if id(e) not in passed]
        if passed and not collateral:
            w.why.append(f"{len(passed)} collateral report(s) ({', '.join(sorted({e.rule.id for e in evs if id(e) in passed})[:3])}) "
                         f"were followed by their rank's progress: a wait that passed")
        ended = _normal_end(w, known_ranks, streams) if not cands and first_job is None else None
        waited_first = [e for e in collateral if Tag.TIMEOUT in e.rule.tags and first_job is not None
                        and _job_first(e, first_job)]  # a collective timed out before the job was ended
        if first_job is not None and not waited_first and (not collateral or first_job.t is None or not cands):
            verdict, root_ev, decided, confidence = Verdict.JOB_LEVEL, first_job, K.JOB, policy.CONF_JOB
            w.why.append(f"the job ended for a job-level reason: {first_job.rule.title}")
            if cands:
                w.why.append("the primary failures seen come after it (consequences of the job being stopped)")
            if collateral:
                found, _s, _d = hang.clues(hang_evs, streams, known_ranks, lives)
                scores = hang.score(found)
                if scores and max(scores.values()) >= policy.HANG_MIN_SCORE:
                    best = max(scores, key=lambda r: (scores[r], -r))
                    w.why.append(f"the ranks were hung when it ended: rank {best} is the likely culprit "
                                 f"({hang.strongest(found, best)}); the end itself is the job's")
        elif ended is not None or (passed and not collateral and not cands and first_job is None
                                   and not any(e.rule.role is Role.TEARDOWN for e in evs)):
            verdict = Verdict.NO_FAILURE
            w.why.append(ended or "every collateral report was followed by its rank's progress, and nothing failed")
        elif collateral and (node_wave := causal.node_kill(evs, ranks_of_host or {})) is not None and not any(
                Tag.WORKER_EXIT in e.rule.tags and e.m.path == node_wave.first.m.path
                and e.m.offset < node_wave.first.m.offset for e in evs):  # (the first exit its launcher reports)
            verdict, root_ev, decided, confidence = Verdict.ROOT_CAUSE, node_wave.first, K.NODE_WAVE, policy.CONF_WAVE
            w.why.append(f"its launcher reports every rank of node {node_wave.host} ({compress_ranks(list(node_wave.ranks))}) "
                         f"killed by one signal ({node_wave.what}): a node-level failure, not one rank's; the other "
                         f"ranks only report {collateral[0].rule.id}")
        elif collateral:
            d = _hang(w, evs, hang_evs, collateral, streams, known_ranks, rules, first_job)
            verdict, root_ev, decided, confidence = d.verdict, d.root_ev, d.decided, d.confidence
            suspects, silent, found = d.suspects, d.silent, d.found
        elif any(e.rule.role is Role.TEARDOWN for e in evs):
            verdict = Verdict.UNDETERMINED
            w.why.append(TornDownNote("the launcher or scheduler tore the job down, but no failure was found in the logs"))
        else:
            verdict = Verdict.NO_FAILURE
            w.why.append("no failure, timeout or teardown was found")
    if verdict is Verdict.ROOT_CAUSE and decided in (K.PRIMARY, K.SIGNAL_EXIT, K.NODE_WAVE):
        _explained_notes(w)
    for note in dict.fromkeys(survived.values()):  # said whatever the verdict
        w.why.append(note)
    _label(w, root_ev, verdict, tie, node_wave)
    root = _root_cause(w, root_ev, verdict, decided, confidence, tie, suspects, node_wave)
    return Outcome(verdict, root, root_ev, w.evs, suspects, silent, w.why, found)


def _label(w: _Work, root_ev: Ev | None, verdict: Verdict, tie: Sequence[Ev], node_wave: causal.Wave | None) -> None:
    root_rank = root_ev.rank if root_ev is not None and node_wave is None else None
    wave_ranks = set(node_wave.ranks) if node_wave is not None else set()
    for e in w.evs:
        role = e.rule.role
        if root_ev is not None and e.m is root_ev.m:
            e.label = Label.ROOT
        elif role is Role.PRIMARY and id(e) in w.survived:
            e.label = Label.CONTEXT
        elif role is Role.PRIMARY:
            if verdict is Verdict.ROOT_CAUSE and (e.rank is not None and (e.rank == root_rank or e.rank in wave_ranks)
                                                  or root_ev is not None and causal.same_failure(e, root_ev)):
                e.label = Label.COLLATERAL
            elif e.rule.priority < policy.GENERIC_PRIORITY or not causal.is_candidate(e, w.sent) \
                    or verdict is Verdict.JOB_LEVEL or id(e) in w.explained:
                e.label = Label.COLLATERAL
            else:
                e.label = Label.INDEPENDENT
        elif role is Role.COLLATERAL:
            e.label = Label.CONTEXT if verdict is Verdict.NO_FAILURE else Label.COLLATERAL
        elif role is Role.TEARDOWN:
            e.label = Label.TEARDOWN
        elif role is Role.JOB:
            e.label = Label.JOB
        else:
            e.label = Label.CONTEXT
    if root_ev is not None and all(e.m is not root_ev.m for e in w.evs):
        root_ev.label = Label.ROOT


def _root_cause(w: _Work, root_ev: Ev | None, verdict: Verdict, decided: K, confidence: float, tie: Sequence[Ev],
                suspects: dict[int, float], node_wave: causal.Wave | None) -> RootCause | None:
    if root_ev is None:
        return None
    rule = root_ev.rule
    wave = node_wave is not None
    root_rank = None if wave else root_ev.rank
    evidence = []
    if root_ev.m.line:
        evidence.append(Evidence(root_ev.m.path, root_ev.m.line, root_ev.m.text))
    if node_wave is not None:
        same = [e for e in w.evs if e.rank in set(node_wave.ranks) and e.m is not root_ev.m
                and e.rule.role is Role.PRIMARY][:3]
    else:
        same = [e for e in w.evs if e.rank is not None and e.rank == root_rank and e.m is not root_ev.m
                and e.rule.role is Role.PRIMARY and causal.is_candidate(e, w.sent)][:3]
    evidence.extend(Evidence(e.m.path, e.m.line, e.m.text) for e in same)
    # in the order a reader meets them: the rank's own lines come before a launcher's copy
    evidence.sort(key=lambda ev: (ev.path, ev.line))
    if root_ev.rule.role is Role.PRIMARY and root_ev.rule.explains:
        explained = {e.rule.id for e in w.evs if e.label is Label.COLLATERAL}
        hit = sorted(explained & set(root_ev.rule.explains))
        if hit:
            confidence += policy.CONF_EXPLAINS_BONUS
            w.why.append(f"the collateral seen ({', '.join(hit)}) is what this failure typically causes on other ranks")
    if suspects:
        top_score = max(suspects.values())
        tie_ranks = sorted(r for r, sc in suspects.items() if sc == top_score and r != root_rank)
    else:
        tie_ranks = sorted({c.rank for c in tie if c.rank is not None})
    job = verdict is Verdict.JOB_LEVEL  # the job ended: no rank is at fault, whichever file said so
    # a failure reported by those present about one absent (a rendezvous nobody else joined): not the
    # printing process's, so neither its rank nor its host is named
    absent = Tag.ABSENT_PEER in rule.tags
    return RootCause(
        rank=None if job or absent else root_rank, host=None if absent else root_ev.m.who.host,
        local_rank=None if job or wave else root_ev.m.who.local_rank,
        rule=rule.id, title=rule.title, category=rule.category, severity=str(rule.severity),
        time=iso(root_ev.t), confidence=round(max(policy.CONF_MIN, min(policy.CONF_MAX, confidence)), 2),
        tie=tuple(tie_ranks), evidence=tuple(evidence), mechanism=rule.root_cause, fix=rule.fix,
        confirm=rule.confirm, references=rule.references, why=tuple(w.why), prevention=rule.prevention,
        decided_by=str(decided), attempt=root_ev.m.attempt,
        context=tuple(f">> {root_ev.m.text}" if x == ">>" else x for x in root_ev.m.context))


def _hang(w: _Work, evs: Sequence[Ev], hang_evs: Sequence[Ev], collateral: Sequence[Ev],
          streams: Sequence[StreamFacts], known: set[int], rules: dict[str, Rule], first_job: Ev | None) -> _Decision:
    """No rank printed a candidate failure and ranks report collateral: the culprit of the hang by the
    strongest evidence, or no rank (and why) when the evidence is too weak."""
    found, stuck, des = hang.clues(hang_evs, streams, known, w.lives)
    scores = hang.score(found)
    d = _Decision(Verdict.UNDETERMINED, suspects=scores, found=found)
    if scores and max(scores.values()) < policy.HANG_MIN_SCORE:
        for c in found:
            w.why.append(f"rank {c.rank}: {c.detail} (a hint only, too weak alone to name it)")
        scores = {}
    if scores:
        best = max(scores.values())
        top = sorted(r for r, sc in scores.items() if sc == best)
        culprit = top[0]
        d.silent = {r for r, sc in scores.items() if sc >= policy.SILENT_MIN_SCORE}
        d.verdict = Verdict.ROOT_CAUSE
        d.decided = hang.strongest(found, culprit)
        rule_id = stuck.rule or collateral[0].rule.id
        proto = next((e for e in collateral if e.rule.id == rule_id), collateral[0])
        d.root_ev = root_ev = _hang_root(culprit, evs, streams, rules[proto.rule.id], proto)
        if Tag.WORKER_EXIT in root_ev.rule.tags:
            d.decided = K.LEFT_THE_COLLECTIVE
            w.why.append(f"rank {culprit} left: its launcher reports its exit ({root_ev.rule.title}) while the "
                         f"other ranks were still in a collective with it; they only report {proto.rule.id}")
        else:
            w.why.append(f"no rank reports a failure that can start a cascade: this is a hang; "
                         f"the other ranks only report {proto.rule.id}")
        w.why.extend(f"rank {culprit}: {c.detail}" for c in found if c.rank == culprit)
        if first_job is not None:
            w.why.append(f"the job was ended afterwards ({first_job.rule.title}), once its collectives had "
                         f"already timed out")
        if root_ev.t is not None:
            w.why.append(f"the time given is rank {culprit}'s last progress (or output) before the hang")
        d.confidence = min(policy.CONF_HANG_MAX, policy.CONF_HANG_BASE + policy.CONF_HANG_PER_POINT * best)
        if len(top) > 1:
            d.confidence = min(d.confidence, policy.CONF_HANG_TIED)
            w.why.append(f"ranks {compress_ranks(top)} are equally suspect")
    else:
        w.why.append("ranks report collateral failures (timeouts, closed connections) but no rank can be named")
        if hang.all_joined(des, known):
            w.why.append(f"PyTorch's desync report: every rank ({compress_ranks(sorted(des.joined))}) joined the "
                         f"stuck collective and none finished it, so no rank diverged; suspect what lies below "
                         f"the program (network, NCCL, a GPU)")
    return d


def _hang_root(culprit: int, evs: Sequence[Ev], streams: Sequence[StreamFacts], rule: Rule, proto: Ev) -> Ev:
    """The root event of a hang: the culprit's failing exit as its launcher reports it (a worker that
    exited 1 or was killed while the others waited, and printed nothing of the hang itself), else its
    own last trace if it printed one, else
    its last output (time) with a peer's timeout line as the evidence of what it never joined."""
    exits = [e for e in evs if e.rank == culprit and Tag.WORKER_EXIT in e.rule.tags
             and (e.m.capture(Capture.EXITCODE) or "") not in policy.STOPPED_EXIT_CODES and e.m.capture(Capture.EXITCODE) != "0"
             and causal.signal_of(e) not in policy.STOPPING_SIGNALS]
    others = [e for e in evs if e.rank != culprit and Tag.WORKER_EXIT in e.rule.tags]

    def first_out(x: Ev) -> bool:  # reported before any other rank's exit (it left first)
        return not any((o.m.path == x.m.path and o.m.offset < x.m.offset) or
                       (o.m.path != x.m.path and o.t is not None and x.t is not None and o.t < x.t) for o in others)

    exits = [x for x in exits if first_out(x)]
    if exits and not any(e.rank == culprit and e.rule.role is Role.COLLATERAL for e in evs):
        return exits[0]  # (a culprit that timed out itself, or woke to find its peers gone, is told by that)
    own = [e for e in evs if e.rank == culprit and e.rule.role in (Role.PRIMARY, Role.COLLATERAL)
           and Tag.SIGNAL_EXIT not in e.rule.tags]
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
