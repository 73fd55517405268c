"""The report: the verdict, its evidence, the groups, the timeline, and the exit codes of the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum, StrEnum

from correlator.model.digest import DiagCode, Diagnostic


class Verdict(StrEnum):
    #: a rank's failure started the cascade
    ROOT_CAUSE = "root_cause"
    #: the job ended for a job-level reason (time limit, cancel, preemption) with no earlier failure
    JOB_LEVEL = "job_level"
    #: nothing failed
    NO_FAILURE = "no_failure"
    #: failures were seen but no rank can be named
    UNDETERMINED = "undetermined"


class RankState(StrEnum):
    ROOT = "root"
    COLLATERAL = "collateral"
    #: logged nothing about the failure, and its output stopped early (a hang suspect)
    SILENT = "silent"
    HEALTHY = "healthy"
    UNKNOWN = "unknown"


class Label(StrEnum):
    """The part an event plays in the causal chain."""

    ROOT = "root"
    COLLATERAL = "collateral"
    TEARDOWN = "teardown"
    JOB = "job"
    CONTEXT = "context"
    #: a second primary failure that the root does not explain
    INDEPENDENT = "independent"


class ExitCode(IntEnum):
    #: analysis ran; the verdict is in the report (whatever it is)
    OK = 0
    #: the analysis ran and found a root cause or job-level end, and --fail-on-failure was given
    FAILURE_FOUND = 1
    #: bad usage or a broken rule file: nothing was analysed
    USAGE = 2
    #: no input could be read at all
    NO_INPUT = 3
    #: an internal error (a bug): please report it
    INTERNAL = 70


def iso(time_ns: int | None) -> str | None:
    """UTC ISO-8601 with milliseconds and a ``Z``: the one time format of every output."""
    if time_ns is None:
        return None
    dt = datetime.fromtimestamp(time_ns // 1_000_000_000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(time_ns // 1_000_000) % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class Evidence:
    path: str
    line: int
    text: str


@dataclass(frozen=True, slots=True)
class RootCause:
    rank: int | None
    host: str | None
    local_rank: int | None
    rule: str
    title: str
    category: str
    severity: str
    time: str | None
    confidence: float
    tie: tuple[int, ...]
    evidence: tuple[Evidence, ...]
    mechanism: str
    fix: str
    confirm: tuple[str, ...]
    references: tuple[str, ...]
    why: tuple[str, ...]
    prevention: str = ""
    #: which evidence decided: "primary", "signal-exit", "dump-pointer", "desync-report",
    #: "missing-from-collective", "nccl-work-counters", "progress-stopped", "output-stopped",
    #: "failure-table"
    decided_by: str = "primary"
    attempt: int | None = None
    #: the root line's surroundings in its own stream: lines before, ``>> <the line>``, lines after
    context: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CollateralItem:
    rank: int | None
    host: str | None
    rule: str
    time: str | None
    after_root_s: float | None
    path: str
    line: int


@dataclass(frozen=True, slots=True)
class Group:
    rule: str
    role: str
    ranks: str
    count: int
    first: str | None
    last: str | None
    label: str = ""
    #: delay of the group's first and last event after the root, seconds
    first_after_s: float | None = None
    last_after_s: float | None = None
    title: str = ""


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    #: clock-corrected UTC time (ISO-8601); ``time_kind`` says whether the line carried it
    time: str | None
    rank: int | None
    host: str | None
    rule: str
    role: str
    path: str
    line: int
    text: str
    label: str = ""
    time_kind: str = "own"
    #: corrected time minus the root's, seconds
    after_root_s: float | None = None
    local_rank: int | None = None
    attempt: int | None = None
    #: position of this event in ``timeline``
    id: int = 0
    #: ``id`` of the event it follows from (collateral and teardown -> the root): the causal edges
    caused_by: int | None = None


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One step of the causal chain: ``root -> cascade -> teardown``."""

    stage: str  # "root" | "collateral" | "teardown" | "job"
    rule: str
    ranks: str
    count: int
    summary: str


@dataclass(frozen=True, slots=True)
class RankRow:
    rank: int
    host: str | None
    local_rank: int | None
    state: RankState
    first_time: str | None
    last_time: str | None
    lines: int
    last_step: int | None = None


@dataclass(frozen=True, slots=True)
class ClockRow:
    host: str
    offset_s: float
    residual_s: float
    anchors: int


@dataclass(frozen=True, slots=True)
class UnreadSource:
    """A source the verdict does not stand on: named or found, but not one line of it could be read."""

    path: str
    #: why, as the source's diagnostic says it
    why: str


@dataclass(frozen=True, slots=True)
class Stats:
    sources: int
    bytes: int
    lines: int
    seconds: float
    bytes_skipped: int = 0
    lines_capped: int = 0
    sources_unreadable: int = 0
    matches: int = 0
    engine: str = "local"
    scanner: str = ""
    #: inputs passed over without being read (missing, not a log, not a regular file, unreadable)
    sources_skipped: int = 0
    #: why inputs, bytes or lines were passed over or altered, by reason (``binary``, ``empty``,
    #: ``truncated``, ``not-a-log``, ``nul-bytes``, ...): ``{"sources": n, "bytes": b, "lines": l}``
    skipped: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the extraction's counts over all sources (``Digest``'s fields of the same names)
    scan_reports: int = 0
    candidate_lines: int = 0
    confirmed_matches: int = 0
    #: the rule set the verdict was reached with (``correlator.model.rules_version``: the count and
    #: a digest of what in the rules decides or is shown), so a shared report says which rules it rests on
    rules_version: str = ""

    #: the sources of the job that could not be read at all (missing, unreadable, binary, failed):
    #: the verdict is over ``sources_total - len(unread)`` of ``sources_total`` (``coverage_note``)
    unread: tuple[UnreadSource, ...] = ()
    #: the job's sources: those read (``sources``) and the named ones that were missing or unreadable
    sources_total: int = 0
    #: when the analysis ran (UTC ISO-8601) and by which version of correlate: stamped on the
    #: Parquet rows with ``rules_version``, so a dataset says what wrote each job
    analyzed_at: str | None = None
    tool_version: str = ""

    def coverage_note(self) -> str:
        """"verdict over 60 of 64 sources: 4 could not be read (a, b, c and 1 more)" when some sources
        of the job could not be read, else "": every format's headline carries it (plain text: callers
        escape it; the diagnostics say why each was not read)."""
        if not self.unread:
            return ""
        total = max(self.sources_total, len(self.unread))
        shown = ", ".join(u.path for u in self.unread[:UNREAD_LISTED])
        more = f" and {len(self.unread) - UNREAD_LISTED} more" if len(self.unread) > UNREAD_LISTED else ""
        return (f"verdict over {total - len(self.unread)} of {total} sources: {len(self.unread)} could not be "
                f"read ({shown}{more})")

    @property
    def sources_read(self) -> int:
        return max(self.sources_total, len(self.unread)) - len(self.unread)


#: how many unread sources the coverage note names (the JSON's ``stats.unread`` lists every one)
UNREAD_LISTED = 3


#: a field's metadata key: the JSON leaves the field out when its value is empty (it appears only
#: when there is something to say, as it did when the object was a dict)
OMIT_WHEN_EMPTY = "omit-when-empty"


@dataclass(frozen=True, slots=True)
class LauncherTableRow:
    """One node agent's "Root Cause (first observed failure)" in torchrun's failure table."""

    node: str | None
    rank: int | None
    local_rank: int | None
    exitcode: int | None
    #: ISO-8601 UTC
    time: str | None


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the logs say about the job as a whole."""

    #: the job's id: given, from a SLURM file name or line, else a stable hash of the paths
    id: str = ""
    #: ranks known (stated or inferred); None when no stage said (a report built by hand)
    ranks: int | None = None
    hosts: tuple[str, ...] = ()
    #: ISO-8601 UTC of the first and last stamp seen
    start: str | None = None
    end: str | None = None
    procs_per_node: int | None = None
    #: the torchelastic attempts seen (restarts), in order
    attempts: tuple[int, ...] = ()
    #: each node agent's root-cause line of torchrun's failure tables, when it printed them
    launcher_root_cause_tables: tuple[LauncherTableRow, ...] = field(default=(), metadata={OMIT_WHEN_EMPTY: True})
    #: the zone stamps without one were read in (``--tz``, else this machine's IANA zone), and whether
    #: any stamp lacked a zone (so that it decided a time)
    time_zone: str = "UTC"
    time_zone_used: bool = False


@dataclass(frozen=True, slots=True)
class AttemptVerdict:
    """The verdict of one torchelastic attempt (when the workers were restarted)."""

    attempt: int
    verdict: Verdict
    #: the root cause's rank, rule and ISO-8601 time (None when the attempt names none)
    rank: int | None = None
    rule: str | None = None
    time: str | None = None


@dataclass(frozen=True, slots=True)
class Report:
    verdict: Verdict
    root_cause: RootCause | None
    collateral: tuple[CollateralItem, ...]
    groups: tuple[Group, ...]
    timeline: tuple[TimelineEvent, ...]
    ranks: tuple[RankRow, ...]
    clocks: tuple[ClockRow, ...]
    diagnostics: tuple[Diagnostic, ...]
    stats: Stats
    chain: tuple[ChainLink, ...] = ()
    job: JobFacts = field(default_factory=JobFacts)
    #: one verdict per torchelastic attempt when there were restarts (last attempt first)
    attempts: tuple[AttemptVerdict, ...] = ()
    schema: str = "correlate.report/1"

    def verdict_notes(self, *codes: DiagCode) -> list[str]:
        """The verdict's own notes of these codes (all of them if none is given), without their prefix."""
        want = set(codes) or VERDICT_CODES
        return [d.message.removeprefix(UNDETERMINED_NOTE) for d in self.diagnostics
                if d.path is None and d.code in want]


#: the start of a report diagnostic that says why no root cause was named (the renderers show them
#: with the "undetermined" verdict)
UNDETERMINED_NOTE = "no root cause named: "
#: the codes of the verdict's own notes (why no rank was named, failures survived, a bare teardown)
VERDICT_CODES = frozenset({DiagCode.VERDICT_REASON, DiagCode.VERDICT_SURVIVED, DiagCode.VERDICT_TORN_DOWN})


class SurvivedNote(str):
    """A why-line saying a failure was caught and survived (its text ends with ``SURVIVED_NOTE_END``):
    the type, not the wording, tells the correlation stage and the renderers what it is."""

    __slots__ = ()


class TornDownNote(str):
    """The why-line of a job the launcher tore down with no failure found in the logs."""

    __slots__ = ()
#: how such a note about a failure its rank went on from ends (the renderers list them under a
#: no-failure verdict too)
SURVIVED_NOTE_END = "(the failure was caught and survived)"


def field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names, computed once per class (the report walkers visit ~200,000
    values for a 4096-rank job)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        import dataclasses

        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def omitted_when_empty(cls: type) -> frozenset[str]:
    """The fields of a dataclass that its JSON leaves out when empty (``OMIT_WHEN_EMPTY``)."""
    names = _OMITTED.get(cls)
    if names is None:
        import dataclasses

        names = _OMITTED[cls] = frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get(OMIT_WHEN_EMPTY))
    return names


_OMITTED: dict[type, frozenset[str]] = {}
