"""The one reading of a finished ``Report`` that every renderer draws from.

This module owns what a person is told, before any format lays it out: the verdict's words and
headline, who the root is and what it did (a rank that failed first, a rank that hung the job and
logged nothing, a node that died at once, a job-level end), which log line is the root's own (and
which are only what its peers report), which groups are collateral (other ranks' errors: never the
root rank's own later lines), the impact (time to failure, rank-hours, the last step reached),
what to do, and the stamp (tool, rules, command line). The terminal, Markdown, HTML and trace
renderers take these from ``build(report)`` and never word a verdict themselves, so every format
states the same verdict, rank, rule and time (``tests/test_views.py`` checks it on every sample job
and recorded case).

It reads a ``Report`` and never recomputes analysis; it returns plain text (each renderer escapes
it for its own format) and imports nothing from the other renderers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from correlator.model import (
    ChainLink,
    Evidence,
    Group,
    Report,
    TimelineEvent,
    Verdict,
    compress_ranks,
    expand_ranks,
)
from correlator.model.evidence import HANG_KINDS, ODD_COLLECTIVE_KINDS, EvidenceKind, describe

#: seconds per hour, for rank-hours
_HOUR_S = 3600.0


class Kind(StrEnum):
    """What sort of answer the verdict is, as a person reads it."""

    #: a rank failed first (its own error line, or its death by a signal)
    FAILURE = "failure"
    #: no rank failed: this rank held the others up and logged no error of its own
    HANG = "hang"
    #: no rank failed: this rank timed out too, but not in the collective its peers were in
    ODD_COLLECTIVE = "odd-collective"
    #: every rank of one node (or of the job) died of the same failure at once
    WAVE = "wave"
    #: the job was ended from outside (time limit, cancel, preemption) before any failure
    JOB = "job"
    #: nothing failed
    NO_FAILURE = "no-failure"
    #: failures were seen, but no rank can be named
    UNDETERMINED = "undetermined"


VERDICT_WORDS = {
    Verdict.ROOT_CAUSE: "root cause found",
    Verdict.JOB_LEVEL: "job-level end (no failing rank)",
    Verdict.NO_FAILURE: "no failure found",
    Verdict.UNDETERMINED: "failures seen, but no rank can be named",
}

#: what the root's time means, by kind
_TIME_MEANS = {
    Kind.FAILURE: "its failure",
    Kind.HANG: "its last progress or output before the hang",
    Kind.ODD_COLLECTIVE: "its last progress or output before the hang",
    Kind.WAVE: "the failure",
    Kind.JOB: "the job's end",
}


def parse_dt(text: str | None) -> datetime | None:
    """The aware datetime of a report time (``2026-03-02T14:07:31.412Z``), or None."""
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def parse_iso(text: str | None) -> float | None:
    """Seconds since the epoch of a report time, or None."""
    dt = parse_dt(text)
    return dt.timestamp() if dt is not None else None


def fmt_time(text: str | None, *, date: bool = True) -> str:
    """A report time for people: ``2026-03-02 14:07:31.412`` (UTC), or ``14:07:31.412``."""
    if not text:
        return "-"
    seconds = parse_iso(text)
    if seconds is None:
        return text
    dt = datetime.fromtimestamp(seconds, tz=UTC)
    clock = dt.strftime("%H:%M:%S") + f".{int(round(dt.microsecond / 1000)) % 1000:03d}"
    return f"{dt.strftime('%Y-%m-%d')} {clock}" if date else clock


def iso_of(seconds: float) -> str:
    """The report time of ``seconds`` since the epoch (milliseconds)."""
    from correlator.model import iso

    return iso(int(round(seconds * 1000)) * 1_000_000) or ""


def fmt_duration(seconds: float) -> str:
    mag = abs(seconds)
    if mag < 60:
        return f"{mag:.1f} s"
    if mag < 3600:
        return f"{int(mag // 60)} min {int(mag % 60):02d} s"
    return f"{int(mag // 3600)} h {int(mag % 3600 // 60):02d} min"


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5`` (the same notation as a group's ``ranks``)."""
    return compress_ranks(list(ranks))


def who(rank: int | None, host: str | None, local_rank: int | None = None) -> str:
    """``rank 37 on gpu-a09 (local rank 5)``; plain text, not escaped."""
    parts = [f"rank {rank}" if rank is not None else "no rank"]
    if host:
        parts.append(f"on {host}")
    if local_rank is not None:
        parts.append(f"(local rank {local_rank})")
    return " ".join(parts)


@dataclass(frozen=True, slots=True)
class RootView:
    kind: Kind
    rank: int | None
    host: str | None
    local_rank: int | None
    rule: str
    title: str
    #: the verdict's time (ISO-8601 UTC), and what it is the time of (``time_means``)
    time: str | None
    time_means: str
    confidence: float
    decided_by: str
    #: ``decided_by`` in words (``evidence.describe``)
    decided_text: str
    #: ``rank 11 on hgx-01``, ``every rank of gpu-b03``, ``the job``
    who: str
    #: ``who`` with the local rank: ``rank 11 on hgx-01 (local rank 11)``
    where: str
    #: what it did, the sentence after ``who`` in the headline
    what: str
    #: the root's own log line; None when it printed nothing of its failure (a hang's culprit)
    line: Evidence | None
    #: the lines that show the verdict but are the other ranks' (what a hang's peers report)
    peer_lines: tuple[Evidence, ...]
    #: the timeline event that is the root's own line (the one to mark), or None; ``event_id`` is
    #: its position in the timeline
    event: TimelineEvent | None
    event_id: int | None
    tie: tuple[int, ...]
    attempt: int | None
    #: the root line's surroundings in its own stream (its traceback)
    context: tuple[str, ...]
    why: tuple[str, ...]
    mechanism: str
    fix: str
    prevention: str
    references: tuple[str, ...]
    category: str
    severity: str


@dataclass(frozen=True, slots=True)
class Impact:
    """What the failure cost, from the report's own times and rank rows."""

    ranks: int | None
    start: str | None
    end: str | None
    #: first stamp of the job to the root's time
    time_to_failure_s: float | None
    #: the root's time to the last stamp (waiting for timeouts, teardown)
    after_failure_s: float | None
    #: ranks x (start -> root time)
    rank_hours_to_failure: float | None
    #: ranks x (root time -> end): compute held after the failure, with no rank making progress
    rank_hours_lost: float | None
    #: the highest training step any rank logged, and the root rank's own
    last_step: int | None
    root_last_step: int | None

    def lines(self, kind: Kind = Kind.FAILURE) -> list[str]:
        """The impact in sentences (plain text); empty when the report has no times. A job ended from
        outside did not fail: its time is until the end, and nothing is lost after it."""
        out = []
        if self.time_to_failure_s is not None:
            what = "ran until it was ended" if kind is Kind.JOB else "time to failure"
            text = f"{what}: {fmt_duration(self.time_to_failure_s)} from the first line"
            if self.rank_hours_to_failure is not None:
                text += (f" ({self.rank_hours_to_failure:,.1f} rank-hours on {self.ranks} "
                         f"rank{'s' if self.ranks != 1 else ''})")
            out.append(text)
        if self.after_failure_s is not None and self.rank_hours_lost is not None and kind is not Kind.JOB:
            out.append(f"rank-hours lost: {self.rank_hours_lost:,.2f} (the {fmt_duration(self.after_failure_s)} "
                       "from the failure to the job's last line, with no rank making progress)")
        if self.last_step is not None:
            own = (f"; the root rank's last was {self.root_last_step}"
                   if self.root_last_step is not None and self.root_last_step != self.last_step else "")
            out.append(f"last step reached: {self.last_step}{own}")
        return out


@dataclass(frozen=True, slots=True)
class Stamp:
    """What wrote the report: the tool, the rules, the command line (when the caller knows it)."""

    tool: str
    rules: str
    schema: str
    command: str | None

    def line(self) -> str:
        bits = [self.tool, f"rules: {self.rules}" if self.rules else "", f"report schema {self.schema}"]
        if self.command:
            bits.append(f"command: {self.command}")
        return " · ".join(b for b in bits if b)


@dataclass(frozen=True, slots=True)
class View:
    verdict: Verdict
    #: the verdict in words (``root cause found``)
    words: str
    #: the one line a person reads first
    headline: str
    root: RootView | None
    #: other ranks' errors the root explains (and independent failures): never the root rank's lines
    collateral: tuple[Group, ...]
    #: the root rank's own later lines (its abort, its launcher's report of it)
    root_groups: tuple[Group, ...]
    #: what tore the job down (teardown and job-level groups)
    teardown: tuple[Group, ...]
    #: distinct ranks with collateral errors (the root rank is never one)
    collateral_ranks: int
    impact: Impact
    #: how to confirm the fix: a checklist (the rule's ``confirm``)
    actions: tuple[str, ...]
    stamp: Stamp

    def impact_lines(self) -> list[str]:
        """The impact in sentences, worded for this verdict's kind."""
        return self.impact.lines(self.root.kind if self.root is not None else Kind.NO_FAILURE)

    def part(self, event: TimelineEvent) -> str:
        """The part an event plays: ``root`` for the root's own line and the root rank's later ones."""
        if self.root is not None and event is self.root.event:
            return "root"
        if self.root is not None and self.root.rank is not None and event.rank == self.root.rank \
                and event.label in ("collateral", "independent"):
            return "root"
        return event.label or event.role

    def link_summary(self, link: ChainLink) -> str:
        """A chain link's summary; the root's is the view's own sentence (the chain's first link names
        the rule, which for a hang is what the peers reported, not what the root did)."""
        if link.stage == "root" and self.root is not None:
            return f"{self.root.who} {self.root.what}"
        return link.summary

    def time_line(self) -> str:
        """``at 2026-03-18 00:33:02.084 UTC (its last progress ...) · confidence 0.83`` ("" without a root)."""
        root = self.root
        if root is None:
            return ""
        when = f"at {fmt_time(root.time)} UTC ({root.time_means})" if root.time else "no timestamp"
        return f"{when} · confidence {root.confidence:.2f}"


def _kind(report: Report) -> Kind:
    root = report.root_cause
    if report.verdict is Verdict.JOB_LEVEL:
        return Kind.JOB
    if report.verdict is Verdict.NO_FAILURE:
        return Kind.NO_FAILURE
    if report.verdict is not Verdict.ROOT_CAUSE or root is None:
        return Kind.UNDETERMINED
    if root.decided_by == EvidenceKind.NODE_WAVE:
        return Kind.WAVE
    if root.decided_by in ODD_COLLECTIVE_KINDS:
        return Kind.ODD_COLLECTIVE
    if root.decided_by in HANG_KINDS:
        return Kind.HANG
    return Kind.FAILURE


def _root_view(report: Report, kind: Kind) -> RootView | None:
    root = report.root_cause
    if root is None:
        return None
    by_place: dict[tuple[str, int], int] = {}
    for index, e in enumerate(report.timeline):
        by_place.setdefault((e.path, e.line), index)
    line: Evidence | None = None
    peers: tuple[Evidence, ...] = ()
    if kind in (Kind.HANG, Kind.ODD_COLLECTIVE):
        # a hang's evidence lines are what the peers report; the culprit's own line is one of its rank
        own = [ev for ev in root.evidence if (i := by_place.get((ev.path, ev.line))) is not None
               and root.rank is not None and report.timeline[i].rank == root.rank]
        line = own[0] if own else None
        peers = tuple(ev for ev in root.evidence if ev is not line)
    elif root.evidence:
        line = root.evidence[0]
        peers = ()
    event_id: int | None = None
    if line is not None:
        event_id = by_place.get((line.path, line.line))
        if event_id is None:
            event_id = next((i for i, e in enumerate(report.timeline) if e.label == "root"), None)
    if kind is Kind.WAVE:
        subject = f"every rank of {root.host}" if root.host else "every rank of the job"
        what = f"failed at once: {root.title}"
    elif kind is Kind.JOB:
        subject = "the job"
        what = f"was ended from outside: {root.title}"
    else:
        subject = who(root.rank, root.host) if root.rank is not None else (
            f"a process on {root.host}" if root.host else "an unknown rank")
        if kind is Kind.HANG:
            what = f"hung the job: it logged no error, while the other ranks report {root.rule}"
        elif kind is Kind.ODD_COLLECTIVE:
            what = ("hung the job: it timed out too, but not in the collective its peers were in "
                    f"(they report {root.rule})")
        else:
            what = f"failed first: {root.title}"
    return RootView(
        kind=kind, rank=root.rank, host=root.host, local_rank=root.local_rank, rule=root.rule, title=root.title,
        time=root.time, time_means=_TIME_MEANS[kind], confidence=root.confidence, decided_by=str(root.decided_by),
        decided_text=describe(root.decided_by), who=subject,
        where=who(root.rank, root.host, root.local_rank) if root.rank is not None else subject, what=what, line=line, peer_lines=peers,
        event=report.timeline[event_id] if event_id is not None else None, event_id=event_id, tie=tuple(root.tie), attempt=root.attempt, context=tuple(root.context),
        why=tuple(root.why), mechanism=root.mechanism, fix=root.fix, prevention=root.prevention,
        references=tuple(root.references), category=root.category, severity=root.severity)


def _headline(report: Report, root: RootView | None) -> str:
    """The verdict in one line; when some of the job's sources could not be read, over how many it is."""
    partial = report.stats.coverage_note()
    text = _verdict_headline(report, root)
    return f"{text} — {partial}" if partial else text


def _verdict_headline(report: Report, root: RootView | None) -> str:
    if root is not None and report.verdict is Verdict.ROOT_CAUSE:
        tie = f", tied with ranks {rank_ranges(root.tie)}" if root.tie else ""
        return f"{root.who} {root.what}{tie}"
    if report.verdict is Verdict.JOB_LEVEL:
        title = root.title if root is not None else job_end_title(report)
        return f"the job ended for a job-level reason: {title}" if title else "the job ended for a job-level reason"
    if report.verdict is Verdict.NO_FAILURE:
        return "no failure found in the logs"
    if not any(g.label in ("collateral", "independent", "root") for g in report.groups):
        return "the job was torn down, but no failure was found in the logs"
    return "failures were seen, but no rank can be named as the first"


def job_end_title(report: Report) -> str:
    """The title of the job-level end the report holds ("" if none)."""
    for group in report.groups:
        if group.role == "job":
            return group.title or group.rule
    for link in report.chain:
        if link.stage == "job":
            return link.summary or link.rule
    return ""


def time_span(report: Report) -> tuple[str | None, str | None]:
    """The first and last time the report knows of (job facts first, then ranks, then timeline)."""
    if report.job.start is not None or report.job.end is not None:
        return report.job.start, report.job.end
    times = [t for r in report.ranks for t in (r.first_time, r.last_time) if t]
    times += [e.time for e in report.timeline if e.time]
    if not times:
        return None, None
    keyed = sorted((parse_iso(t) or 0.0, t) for t in times)
    return keyed[0][1], keyed[-1][1]


def _impact(report: Report, root: RootView | None) -> Impact:
    start, end = time_span(report)
    n = report.job.ranks if report.job.ranks else (len(report.ranks) or None)
    lo, hi = parse_iso(start), parse_iso(end)
    at = parse_iso(root.time) if root is not None else None
    to_fail = after = None
    if at is not None and lo is not None and at >= lo:
        to_fail = at - lo
    if at is not None and hi is not None and hi >= at:
        after = hi - at
    steps = [r.last_step for r in report.ranks if r.last_step is not None]
    own = next((r.last_step for r in report.ranks if root is not None and r.rank == root.rank), None)
    return Impact(
        ranks=n, start=start, end=end, time_to_failure_s=to_fail, after_failure_s=after,
        rank_hours_to_failure=n * to_fail / _HOUR_S if n and to_fail is not None else None,
        rank_hours_lost=n * after / _HOUR_S if n and after is not None else None,
        last_step=max(steps) if steps else None, root_last_step=own)


def build(report: Report, *, command: str | None = None) -> View:
    """The view of ``report``; ``command`` is the command line that asked for it, when known."""
    from correlator import __version__

    kind = _kind(report)
    root = _root_view(report, kind)
    root_rank = root.rank if root is not None else None
    collateral = tuple(g for g in report.groups if g.label in ("collateral", "independent"))
    ranks: set[int] = set()
    for g in collateral:
        ranks.update(expand_ranks(g.ranks) if g.ranks else ())
    if root_rank is not None:
        ranks.discard(root_rank)
    return View(
        verdict=report.verdict, words=VERDICT_WORDS.get(report.verdict, str(report.verdict)),
        headline=_headline(report, root), root=root, collateral=collateral,
        root_groups=tuple(g for g in report.groups if g.label == "root"),
        teardown=tuple(g for g in report.groups if g.label in ("teardown", "job")),
        collateral_ranks=len(ranks), impact=_impact(report, root),
        actions=tuple(report.root_cause.confirm) if report.root_cause is not None else (),
        stamp=Stamp(tool=f"correlate {__version__}", rules=report.stats.rules_version, schema=report.schema,
                    command=command))
