"""Per-rank lifecycles: did a failure end its rank, or did the rank go on from it?

Owns, for every rank (or unranked writer), what its own output and its launcher say about how it
went: its last progress line (position and time, from the digest's ``StreamFacts``), its normal-
completion markers (rules tagged ``completion``), and the exit its launcher reports (rules tagged
``worker-exit``, torchrun's failure tables). From these, a failure is **terminal** (its rank's
output ends with it, or the launcher reports its rank failed and nothing later of that rank
failed) or **survived** (the same writer's progress or completion follows it in the same stream,
whether or not its lines carry stamps; or, across files, progress stamped minutes later).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from correlator.correlate.attribution import policy
from correlator.correlate.attribution.events import Ev
from correlator.model import (
    NS,
    SURVIVED_NOTE_END,
    FactSource,
    IdentityFact,
    Role,
    StreamFacts,
    SurvivedNote,
    TimeKind,
    iso,
)
from correlator.model.vocabulary import Capture, Tag


def writer_key(ev_or_stream_path: str, who) -> tuple:
    """Which writer of a source a line belongs to, as far as identity resolution tells: the rank when
    known (a rank's stdout and its ``[rankN]:``-tagged stderr are one lifecycle), else the raw writer."""
    if who.rank is not None:
        return (ev_or_stream_path, who.rank)
    # (not the host: a writer's host is learnt from some of its lines, e.g. NCCL's, not from all)
    return (ev_or_stream_path, who.task, who.local_rank)


@dataclass
class Life:
    """What one rank's (or unranked writer's) output says about how it went."""

    #: (path) -> (offset, time or None, step) of the writer's last progress line in that source
    progress: dict[str, tuple[int, int | None, int | None]] = field(default_factory=dict)
    #: the latest progress by its own stamp, in any source of the rank
    last_step_ns: int | None = None
    last_step: int | None = None
    #: the last line of output by time, in any source
    last_ns: int | None = None
    #: (path) -> (offset of the last line, time of the last stamped line) of the writer in that source
    last_out: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    completions: list[Ev] = field(default_factory=list)
    #: the launcher reports this rank exited with a failure (not stopped by it)
    exit_failed: bool = False
    #: the launcher reports this rank's worker group finished successfully (every worker exited 0)
    exit_ok: bool = False
    #: the launcher's lines reporting the failing exit (to see whether the rank went on after them:
    #: a torchelastic restart)
    exit_reports: list[Ev] = field(default_factory=list)


def build(evs: Sequence[Ev], streams: Sequence[StreamFacts], facts: Sequence[IdentityFact] = (),
          until_ns: int | None = None, ranks_of_host: dict[str, set[int]] | None = None,
          single_node: bool = False) -> dict[object, Life]:
    """Lifecycles by rank (int) or by writer key (unranked writers). A node agent's success line
    (a completion without a rank) is every worker of its node exiting 0: of the node its line
    names, or of the only node of a one-node job."""
    lives: dict[object, Life] = defaultdict(Life)
    for s in streams:
        k: object = s.who.rank if s.who.rank is not None else writer_key(s.path, s.who)
        if s.last_step is not None and s.last_step_offset is not None and s.last_step_ns is not None and (
                until_ns is None or s.last_step_ns <= until_ns):
            whole = lives[("file", s.path)].progress  # every writer's progress in that source
            old_p = whole.get(s.path)
            if old_p is None or s.last_step_ns > (old_p[1] or 0):
                whole[s.path] = (s.last_step_offset, s.last_step_ns, s.last_step)
        life = lives[k]
        if s.last_step is not None and s.last_step_offset is not None and (
                until_ns is None or s.last_step_ns is None or s.last_step_ns <= until_ns):
            old = life.progress.get(s.path)
            if old is None or s.last_step_offset > old[0]:
                life.progress[s.path] = (s.last_step_offset, s.last_step_ns, s.last_step)
        if s.last_step_ns is not None and (until_ns is None or s.last_step_ns <= until_ns):
            if life.last_step_ns is None or s.last_step_ns > life.last_step_ns:
                life.last_step_ns, life.last_step = s.last_step_ns, s.last_step
        if s.last_ns is not None and (life.last_ns is None or s.last_ns > life.last_ns):
            life.last_ns = s.last_ns
        old_out = life.last_out.get(s.path)
        if old_out is None or s.last_offset > old_out[0]:
            life.last_out[s.path] = (s.last_offset, s.last_ns)
    for e in evs:
        k = e.rank if e.rank is not None else writer_key(e.m.path, e.m.who)
        if Tag.COMPLETION in e.rule.tags:
            lives[k].completions.append(e)
        elif Tag.WORKER_EXIT in e.rule.tags and e.rank is not None and \
                (e.m.capture(Capture.EXITCODE) or "") not in policy.STOPPED_EXIT_CODES and e.m.capture(Capture.EXITCODE) != "0":
            lives[e.rank].exit_failed = True
            lives[e.rank].exit_reports.append(e)
    for f in facts:
        if f.source is FactSource.FAILURE_TABLE and f.who.rank is not None and f.exitcode not in (None, 0, -15, -2, -1):
            lives[f.who.rank].exit_failed = True
    ok_hosts = {e.m.who.host for e in evs if Tag.COMPLETION in e.rule.tags and e.rank is None
                and e.m.who.task is None and (until_ns is None or e.t is None or e.t <= until_ns)
                and Tag.TORCHELASTIC in e.rule.tags}
    if ok_hosts:
        ranks = {k for k in lives if isinstance(k, int)} | {e.rank for e in evs if e.rank is not None}
        host_of = {r: h for h, rs in (ranks_of_host or {}).items() for r in rs}
        for r in ranks:
            h = host_of.get(r)
            if (h is not None and h in ok_hosts) or (None in ok_hosts and single_node):
                lives[r].exit_ok = True
    return dict(lives)


def _key(e: Ev) -> object:
    return e.rank if e.rank is not None else writer_key(e.m.path, e.m.who)


def _went_on_by_position(e: Ev, life: Life) -> str | None:
    """The same writer's progress after the failure's line, in the same source."""
    p = life.progress.get(e.m.path)
    if p is None:
        return None
    offset, t, step = p
    if offset <= e.m.offset:
        return None
    # a progress line that is older than the failure (stdout flushed at exit, after the traceback
    # on stderr) is not progress after it
    if t is not None and e.t is not None and e.m.time_kind is TimeKind.OWN and e.m.time_ns is not None \
            and t < e.m.time_ns:
        return None
    return f"its progress went on in the same stream (to {'step ' + str(step) if step is not None else 'later steps'})"


def _went_on_by_time(e: Ev, life: Life) -> str | None:
    """Progress stamped long after the failure, in any source of the rank (stdout and stderr files)."""
    if life.last_step_ns is None or e.t is None:
        return None
    if e.m.time_kind is not TimeKind.OWN and not (
            e.m.lo_ns is not None and e.m.hi_ns is not None and e.m.hi_ns - e.m.lo_ns <= policy.SURVIVED_BRACKET_NS):
        return None  # an inherited time is trusted only between two close stamps (it can lie minutes off)
    if life.last_step_ns - e.t > policy.SURVIVED_NS:
        step = life.last_step
        return (f"its progress reached {'step ' + str(step) if step is not None else 'later steps'} "
                f"{(life.last_step_ns - e.t) / NS / 60:.0f} min later")
    return None


def went_on_writing(e: Ev, life: Life | None, at_least_ns: int = 0) -> str | None:
    """The same writer wrote stamped output after the failure, in the same source, ``at_least_ns``
    later or more (a process's output ends with its fatal error, but for buffered lines flushed at
    exit: those carry older stamps)."""
    if life is None or life.exit_failed or e.m.time_ns is None:
        return None
    out = life.last_out.get(e.m.path)
    if out is None or out[0] <= e.m.offset or out[1] is None or out[1] - e.m.time_ns < max(at_least_ns, 1):
        return None
    return f"its own output went on {(out[1] - e.m.time_ns) / NS:.0f} s after it"


def _went_on_after_completion(e: Ev, life: Life) -> str | None:
    """A rank that had reported its training complete, then printed a failure and went on writing
    stamped output for a while (an evaluation after training, an export): the failure was caught."""
    if not life.completions or e.m.time_ns is None:
        return None
    out = life.last_out.get(e.m.path)
    if out is None or out[0] <= e.m.offset or out[1] is None:
        return None
    if out[1] - e.m.time_ns >= policy.SURVIVED_OUTPUT_NS:
        return (f"it had reported its training complete and its output went on "
                f"{(out[1] - e.m.time_ns) / NS:.0f} s after it")
    return None


def _job_went_on(e: Ev, whole: Life | None) -> str | None:
    """A failure no rank can be tied to (a plain line in a file several processes write), after which
    training steps in the same file went on, stamped minutes later: steps of synchronous training need
    every rank, so the process that printed it was still taking part."""
    if whole is None or e.m.time_ns is None:
        return None
    p = whole.progress.get(e.m.path)
    if p is None or p[1] is None or p[0] <= e.m.offset:
        return None
    if p[1] - e.m.time_ns > policy.SURVIVED_NS:
        return (f"training steps in the same file went on to step {p[2]}, "
                f"{(p[1] - e.m.time_ns) / NS / 60:.0f} min later (every rank takes part in a step)")
    return None


def _went_on_after_exit(life: Life) -> str | None:
    """The rank wrote a completion marker after its launcher reported its failing exit: the launcher
    restarted the workers (torchelastic's ``--max-restarts``, which says so only at INFO level) and
    the new attempt ended normally."""
    reports = [x for x in life.exit_reports if x.t is not None]
    if not reports:
        return None
    last = max(reports, key=lambda x: x.t or 0)
    for c in life.completions:
        if c.t is not None and last.t is not None and c.t > last.t + (last.unc or 0):
            return (f"its launcher reported the failing exit and restarted it; the new attempt ended normally "
                    f"({c.rule.title})")
    return None


def _completed_after(e: Ev, life: Life) -> str | None:
    for c in life.completions:
        if c.m.path == e.m.path and c.m.offset > e.m.offset:
            return f"it then ended normally ({c.rule.title})"
        if c.m.path != e.m.path and c.t is not None and e.t is not None and c.t > e.t + (e.unc or 0):
            return f"it then ended normally ({c.rule.title})"
    return None


def survived(evs: Sequence[Ev], lives: dict[object, Life]) -> dict[int, str]:
    """Primary failures that their rank went on from: ``id(ev)`` -> the note that says so.

    A failure is survived when the same writer's progress or completion follows it; but the last
    failure of a rank whose launcher reports a failing exit is terminal whatever follows it in the
    file (block-buffered stdout is written when the process exits, after its traceback)."""
    last_failure: dict[object, Ev] = {}
    for e in evs:
        # (a collateral failure counts too: a rank whose output ends with a peer's error did not end
        # with the caught error before it)
        if e.rule.role in (Role.PRIMARY, Role.COLLATERAL) and Tag.WORKER_EXIT not in e.rule.tags \
                and Tag.SIGNAL_EXIT not in e.rule.tags:
            k = _key(e)
            cur = last_failure.get(k)
            if cur is None or (e.m.path == cur.m.path and e.m.offset > cur.m.offset) or (
                    e.m.path != cur.m.path and (e.t or 0) > (cur.t or 0)):
                last_failure[k] = e
    out: dict[int, str] = {}
    for e in evs:
        if e.rule.role is not Role.PRIMARY or Tag.WORKER_EXIT in e.rule.tags or Tag.SIGNAL_EXIT in e.rule.tags:
            continue
        k = _key(e)
        life = lives.get(k)
        if life is None:
            if e.rank is None:
                how = _job_went_on(e, lives.get(("file", e.m.path)))
                if how:
                    out[id(e)] = survival_note(f"{e.m.path} went on after its {e.rule.id} at {iso(e.t)}: {how}")
            continue
        if life.exit_failed and last_failure.get(k) is e:
            restarted = _went_on_after_exit(life)
            if restarted:
                who = f"rank {e.rank}" if e.rank is not None else e.m.path
                out[id(e)] = survival_note(f"{who} went on after its {e.rule.id}: {restarted}")
            continue
        how = (_went_on_by_position(e, life) or _completed_after(e, life) or _went_on_by_time(e, life)
               or _went_on_after_completion(e, life) or went_on_writing(e, life, policy.SURVIVED_NS))
        if how is None and life.exit_ok and not life.exit_failed:
            how = "its launcher reports that its worker group finished successfully (every worker exited 0)"
        if how:
            who = f"rank {e.rank}" if e.rank is not None else e.m.path
            when = f" at {iso(e.t)}" if e.t is not None else ""
            out[id(e)] = survival_note(f"{who} went on after its {e.rule.id}{when}: {how}")
    return out



def survival_note(text: str) -> SurvivedNote:
    """The note of a failure a rank went on from: ``text`` and the words every renderer shows."""
    return SurvivedNote(f"{text} {SURVIVED_NOTE_END}")


def ended_normally(lives: dict[object, Life], ranks: set[int]) -> set[int]:
    """Ranks whose output holds a completion marker (their own, or their node's agent's)."""
    return {r for r in ranks if r in lives and lives[r].completions}


def transient(evs: Sequence[Ev], lives: dict[object, Life]) -> set[int]:
    """Collateral reports their rank went on from (a stall warning while rank 0 validated, a
    timeout retried): ``id(ev)`` of each. They tell of a wait that passed, not of how the job ended."""
    out: set[int] = set()
    for e in evs:
        if e.rule.role is not Role.COLLATERAL or Tag.WORKER_EXIT in e.rule.tags:
            continue
        life = lives.get(_key(e))
        if life is not None and (_went_on_by_position(e, life) or _completed_after(e, life)):
            out.add(id(e))
    return out


def caught_in_a_quiet_job(cands: Sequence[Ev], evs: Sequence[Ev], lives: dict[object, Life]) -> dict[int, str]:
    """In a job nothing tore down (no teardown, no job end) and in which nobody waited on anyone (no
    timeout), the failures left are caught ones when every one's writer went on writing after it for
    ``SURVIVED_QUIET_NS`` (a retried read in the last minute, an evaluation that skipped a batch):
    ``id(ev)`` -> the note; else nothing."""
    if not cands or any(e.rule.role in (Role.TEARDOWN, Role.JOB) for e in evs) or any(
            e.rule.role is Role.COLLATERAL and Tag.TIMEOUT in e.rule.tags for e in evs):
        return {}
    went = {id(c): went_on_writing(c, lives.get(_key(c)), policy.SURVIVED_QUIET_NS) for c in cands}
    if not all(went.values()):
        return {}
    return {id(c): survival_note(f"{f'rank {c.rank}' if c.rank is not None else c.m.path} went on after its {c.rule.id}: "
                            f"{went[id(c)]}") for c in cands}
